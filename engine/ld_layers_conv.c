/* ld_layers_conv.c - Keras's Conv2DTranspose, Conv1DTranspose, DepthwiseConv2D
 * and SeparableConv2D (classes of ld_nn.h), composed of the engine's
 * differentiable ops, so each runs on every device with its gradients:
 *
 *   Conv2DTranspose  x [N*H*W, C] @ kernel^T -> patches -> ld_col2im -> bias, activation
 *   Conv1DTranspose  the same on [N, 1, L, C]
 *   DepthwiseConv2D  ld_im2col -> [rows, kh*kw, C, 1] * kernel [kh*kw, C, m] -> sum -> bias, activation
 *   SeparableConv2D  the depthwise step, then the 1x1 pointwise product with its bias (ld_linear_half)
 *
 * Kernels have Keras's shapes, so Keras's weights load: Conv2DTranspose
 * (kh, kw, filters, channels), depthwise (kh, kw, channels, depth_multiplier),
 * pointwise (1, 1, channels * depth_multiplier, filters). Under a half
 * policy each rounds as the TF kernel Keras calls: the sums of a
 * convolution in float32 rounded once, then the bias added in the half dtype.
 */
#include "ld_nn.h"
#include "ld_replica.h"

#include <string.h>

/* the compute dtype of a layer's ops: the half dtype of an autocast, else float32 */
static ld_dtype compute_dtype(void) {
    ld_dtype h = ld_autocast_dtype();
    return ld_dtype_is_half(h) ? h : LD_F32;
}

/* t in dt (a recorded cast where it is not; integers become float32 first) */
static ld_tensor *in_dtype(ld_tensor *t, ld_dtype dt) {
    if (t->dtype == dt) return ld_tensor_retain(t);
    if (dt == LD_F32 || !ld_dtype_is_float(t->dtype)) {
        ld_tensor *f = ld_as_float(t);
        if (!f || dt == LD_F32) return f;
        ld_tensor *h = ld_cast_op(f, dt);
        ld_tensor_release(f);
        return h;
    }
    return ld_cast_op(t, dt);
}

/* y + b (b NULL: none; cast to y's dtype, as Keras adds it in the compute
   dtype), then the activation; takes y */
static ld_tensor *bias_act(ld_tensor *y, ld_tensor *b, ld_activation a) {
    if (y && b) {
        ld_tensor *bc = in_dtype(b, y->dtype), *t = bc ? ld_add(y, bc) : NULL;
        ld_tensor_release(bc);
        ld_tensor_release(y);
        y = t;
    }
    return ld_layer_activate(a, y, 0);
}

/* LD_OK when kernel_size (parameter k_i) and strides (s_i) are two positive
   integers each; the error names the class */
static int positive_2(const ld_layer *l, int k_i, int s_i) {
    int nk, ns;
    const int64_t *k = ld_p_ints(l, k_i, &nk), *s = ld_p_ints(l, s_i, &ns);
    if (nk != 2 || k[0] < 1 || k[1] < 1)
        return ld_fail(LD_EARG, "%s kernel_size must be 1 or 2 positive integers", l->cls->class_name);
    if (ns != 2 || s[0] < 1 || s[1] < 1)
        return ld_fail(LD_EARG, "%s strides must be 1 or 2 positive integers", l->cls->class_name);
    return LD_OK;
}

/* kernel shape ks (ndim 4) checked against int64 overflow: glorot's fans of Keras
   (receptive field kh*kw times the kernel's last two axes) into *fan_in, *fan_out */
static int kernel_fans(const ld_layer *l, const int64_t ks[4], int64_t *fan_in, int64_t *fan_out) {
    int64_t rf, numel;
    if (__builtin_mul_overflow(ks[0], ks[1], &rf) || __builtin_mul_overflow(rf, ks[2], fan_in) ||
        __builtin_mul_overflow(rf, ks[3], fan_out) || __builtin_mul_overflow(*fan_in, ks[3], &numel)) {
        char b[LD_SHAPE_STR_MAX];
        return ld_fail(LD_ESHAPE, "%s: kernel shape %s is too large (its size overflows int64)", l->name,
                       ld_shape_fmt(4, ks, b, sizeof b));
    }
    return LD_OK;
}

/* ================================================================ Conv2DTranspose, Conv1DTranspose */
/* One implementation: Conv1DTranspose runs as the 2-d one on its sequences
   [batch, steps, channels] seen as images [batch, 1, steps, channels], its
   kernel (k, filters, channels) as (1, k, filters, channels), its options
   as the width's with a height of 1 (kernel 1, stride 1, no output padding,
   which keeps that height 1). */
enum { CT_FILTERS, CT_KSIZE, CT_STRIDES, CT_PADDING, CT_OUTPUT_PADDING, CT_ACT, CT_BIAS };
static int ct_axes(const ld_layer *l) { return l->cls == &ld_layer_conv1d_transpose ? 1 : 2; }
/* kernel_size, strides and output_padding as the 2-d ones (a 1-d layer's
   height axis 1, 1, 0); returns whether output_padding was given */
static int ct_view(const ld_layer *l, int64_t k[2], int64_t s[2], int64_t op[2]) {
    int n, one = ct_axes(l) == 1;
    const int64_t *pk = ld_p_ints(l, CT_KSIZE, NULL), *ps = ld_p_ints(l, CT_STRIDES, NULL),
                  *po = ld_p_ints(l, CT_OUTPUT_PADDING, &n);
    k[0] = one ? 1 : pk[0]; k[1] = pk[one ? 0 : 1];
    s[0] = one ? 1 : ps[0]; s[1] = ps[one ? 0 : 1];
    op[0] = n && !one ? po[0] : 0; op[1] = n ? po[one ? 0 : 1] : 0;
    return n > 0;
}
static int ct_check(ld_layer *l) {
    const char *cn = l->cls->class_name;
    if (ld_p_int(l, CT_FILTERS) < 1)
        return ld_fail(LD_EARG, "%s filters must be a positive integer, got %lld", cn, (long long)ld_p_int(l, CT_FILTERS));
    if (ct_axes(l) == 2 && positive_2(l, CT_KSIZE, CT_STRIDES)) return ld_error_status();
    int64_t k[2], s[2], op[2];
    ct_view(l, k, s, op);
    if (k[1] < 1) return ld_fail(LD_EARG, "%s kernel_size must be a positive integer, got %lld", cn, (long long)k[1]);
    if (s[1] < 1) return ld_fail(LD_EARG, "%s strides must be a positive integer, got %lld", cn, (long long)s[1]);
    int n;
    const int64_t *po = ld_p_ints(l, CT_OUTPUT_PADDING, &n), *ps = ld_p_ints(l, CT_STRIDES, NULL);
    for (int i = 0; i < n; i++)
        if (po[i] < 0 || po[i] >= ps[i])
            return ld_fail(LD_EARG, "%s output_padding must be 0 or more and smaller than strides (as Keras's); got "
                           "output_padding %lld with strides %lld along axis %d", cn, (long long)po[i],
                           (long long)ps[i], i + 1);
    return LD_OK;
}
/* Keras 3's output length along one axis (keras/src/backend/common/
   backend_utils.py): valid (in - 1) s + max(k, s), same in s; with an output
   padding op, (in - 1) s + k + op (valid) or (in - 1) s + k % 2 + op (same).
   The stride-s convolution of that length must give back the in input rows,
   as TF's conv2d_transpose requires (same with an even kernel and no output
   padding does not). axis: of the 2-d view (a 1-d layer's steps are 1). */
static int ct_size(const ld_layer *l, int axis, int64_t in, int64_t *out) {
    int64_t kk[2], ss[2], oo[2], base;
    int given = ct_view(l, kk, ss, oo), ax = axis + ct_axes(l) - 1;   /* as the user counts the axes */
    int64_t k = kk[axis], s = ss[axis], op = oo[axis];
    int same = !strcmp(ld_p_str(l, CT_PADDING), "same");
    if (__builtin_mul_overflow(in - 1, s, &base) || base > INT64_MAX / 2 - k - s)
        return ld_fail(LD_ESHAPE, "%s: inputs of %lld along axis %d are too large", l->name, (long long)in, ax);
    if (!given) *out = same ? base + s : base + (k > s ? k : s);
    else *out = base + (same ? k % 2 : k) + op;
    if (*out < 1 || ld_layer_out_size(*out, k, s, same) != in)
        return ld_fail(LD_ESHAPE, "%s: kernel %lld, strides %lld, padding \"%s\" and output_padding %lld give %lld along "
                       "axis %d, whose convolution does not come back to the %lld inputs (TF's conv2d_transpose "
                       "rejects it too: give another output_padding)", l->name, (long long)k, (long long)s,
                       same ? "same" : "valid", (long long)op, (long long)*out, ax, (long long)in);
    return LD_OK;
}
static int ct_build(ld_layer *l, int n_in, const ld_shape *in, ld_shape *out) {
    int one = ct_axes(l) == 1;
    if (one ? ld_layer_need_steps(l, in, "channels") : ld_layer_need_image(l, in)) return ld_error_status();
    int64_t k[2], s[2], op[2], f = ld_p_int(l, CT_FILTERS), c = in->d[in->ndim - 1], h, w;
    ct_view(l, k, s, op);
    int64_t ks[4] = {k[0], k[1], f, c}, fan_in = 0, fan_out = 0;
    if (ct_size(l, 0, one ? 1 : in->d[0], &h) || ct_size(l, 1, in->d[one ? 0 : 1], &w) ||
        kernel_fans(l, ks, &fan_in, &fan_out))
        return ld_error_status();
    if (!ld_layer_add_weight(l, "kernel", one ? 3 : 4, ks + one, LD_INIT_GLOROT(fan_in, fan_out), 1))
        return ld_error_status();
    if (ld_p_int(l, CT_BIAS) && !ld_layer_add_weight(l, "bias", 1, &f, LD_INIT_Z, 1)) return ld_error_status();
    *out = one ? (ld_shape){2, {w, f}} : (ld_shape){3, {h, w, f}};
    return LD_OK;
}
/* The transposed convolution: each input pixel's channels times the kernel
   give its patch of the output ([N*H*W, kh*kw*filters]); ld_col2im adds the
   patches up where they overlap, on the output's windows (the windows of
   the convolution whose transpose this is: TF's padding). Under a half
   policy the product takes half operands and keeps its float32 sums
   (ld_matmul_wide), which col2im adds and rounds once, as TF's kernel. */
static ld_tensor *ct_forward(ld_layer *l, int n_in, ld_tensor *const *xs, int training) {
    ld_tensor *x = xs[0];
    int one = ct_axes(l) == 1;
    int64_t k[2], s[2], op[2];
    ct_view(l, k, s, op);
    int64_t n = x->shape[0], h = one ? 1 : x->shape[1], w = x->shape[one ? 1 : 2], c = x->shape[x->ndim - 1];
    int64_t f = ld_p_int(l, CT_FILTERS), oh, ow;
    if (ct_size(l, 0, h, &oh) || ct_size(l, 1, w, &ow)) return NULL;
    ld_dtype dt = compute_dtype();
    ld_tensor *xd = in_dtype(x, dt), *kd = xd ? in_dtype(ld_var(l->vars[0]), dt) : NULL;
    int64_t x2s[2] = {n * h * w, c}, k2s[2] = {k[0] * k[1] * f, c};
    ld_tensor *x2 = kd ? ld_reshape_op(xd, 2, x2s) : NULL, *k2 = x2 ? ld_reshape_op(kd, 2, k2s) : NULL;
    ld_tensor *kt = k2 ? ld_transpose_op(k2, 0, 1) : NULL;
    ld_tensor *col = kt ? ld_matmul_wide(x2, kt) : NULL;
    ld_tensor *y = col ? ld_col2im(col, n, oh, ow, f, (int)k[0], (int)k[1], (int)s[0], (int)s[1],
                                   !strcmp(ld_p_str(l, CT_PADDING), "same"), dt) : NULL;
    ld_tensor_release(xd); ld_tensor_release(kd); ld_tensor_release(x2); ld_tensor_release(k2);
    ld_tensor_release(kt); ld_tensor_release(col);
    if (y && one) {   /* [N, 1, OW, F] -> [N, OW, F] */
        int64_t ys[3] = {n, ow, f};
        ld_tensor *y3 = ld_reshape_op(y, 3, ys);
        ld_tensor_release(y);
        y = y3;
    }
    return bias_act(y, ld_p_int(l, CT_BIAS) ? ld_var(l->vars[1]) : NULL, ld_p_activation(l, CT_ACT));
}
const ld_layer_class ld_layer_conv2d_transpose = {
    "Conv2DTranspose", "conv2d_transpose", NULL, {"filters", "kernel_size"},
    {LD_PINT("filters", NULL), LD_PINTS("kernel_size", NULL, 2), LD_PINTS("strides", "1", 2),
     LD_PSTR("padding", "valid", "valid|same"), LD_PINTS("output_padding", "", 2),
     LD_PSTR("activation", "linear", LD_ACTIVATION_CHOICES), LD_PBOOL("use_bias", "true"), LD_PEND},
    1, 1, 3u /* any image size */, ct_check, ct_build, ct_forward,
    "nn.Conv2DTranspose(filters, kernel_size, {strides=1, padding=\"valid\"|\"same\", output_padding=nil, "
    "activation=, use_bias=true})\n\n"
    "The transpose of a Conv2D (a \"deconvolution\"): NHWC images [batch, h, w, channels] enlarged by the\n"
    "strides; kernel (kh, kw, filters, channels) as Keras's. Output size as Keras 3's: valid (h - 1) * s +\n"
    "max(k, s), same h * s; with output_padding p < s, (h - 1) * s + k + p (valid) or (h - 1) * s + k % 2 + p.\n"
    "kernel_/bias_ initializer, regularizer, constraint and activity_regularizer as Keras's.",
    LD_ROLE_BIT(LD_ROLE_KERNEL) | LD_ROLE_BIT(LD_ROLE_BIAS), .compute_mask = NULL};
const ld_layer_class ld_layer_conv1d_transpose = {
    "Conv1DTranspose", "conv1d_transpose", NULL, {"filters", "kernel_size"},
    {LD_PINT("filters", NULL), LD_PINTS("kernel_size", NULL, 1), LD_PINTS("strides", "1", 1),
     LD_PSTR("padding", "valid", "valid|same"), LD_PINTS("output_padding", "", 1),
     LD_PSTR("activation", "linear", LD_ACTIVATION_CHOICES), LD_PBOOL("use_bias", "true"), LD_PEND},
    1, 1, 1u /* any number of steps */, ct_check, ct_build, ct_forward,
    "nn.Conv1DTranspose(filters, kernel_size, {strides=1, padding=\"valid\"|\"same\", output_padding=nil, "
    "activation=, use_bias=true})\n\n"
    "The transpose of a Conv1D: sequences [batch, steps, channels] lengthened by the strides; kernel\n"
    "(kernel_size, filters, channels) as Keras's. Output length as Keras 3's: valid (steps - 1) * s +\n"
    "max(k, s), same steps * s; with output_padding p < s, (steps - 1) * s + k + p (valid) or\n"
    "(steps - 1) * s + k % 2 + p (same). kernel_/bias_ initializer, regularizer, constraint and\n"
    "activity_regularizer as Keras's.",
    LD_ROLE_BIT(LD_ROLE_KERNEL) | LD_ROLE_BIT(LD_ROLE_BIAS), .compute_mask = NULL};

/* ================================================================ DepthwiseConv2D, SeparableConv2D */
/* DepthwiseConv2D's parameters; SeparableConv2D's are filters, then these
   (each at index + 1): the depthwise step reads them at an offset o */
enum { DW_KSIZE, DW_STRIDES, DW_PADDING, DW_MULT, DW_ACT, DW_BIAS, DW_DILATION };
static int dw_same(const ld_layer *l, int o) { return !strcmp(ld_p_str(l, o + DW_PADDING), "same"); }

static int dw_check_at(ld_layer *l, int o) {
    if (positive_2(l, o + DW_KSIZE, o + DW_STRIDES)) return ld_error_status();
    if (ld_p_int(l, o + DW_MULT) < 1)
        return ld_fail(LD_EARG, "%s depth_multiplier must be a positive integer, got %lld", l->cls->class_name,
                       (long long)ld_p_int(l, o + DW_MULT));
    return ld_layer_dilation_check(l, 2, ld_p_ints(l, o + DW_DILATION, NULL), ld_p_ints(l, o + DW_STRIDES, NULL));
}
/* the depthwise kernel (kh, kw, channels, depth_multiplier) and the output
   size; glorot's fans as Keras computes them for that shape */
static int dw_build_at(ld_layer *l, int o, const ld_shape *in, ld_shape *out) {
    if (ld_layer_need_image(l, in)) return ld_error_status();
    const int64_t *k = ld_p_ints(l, o + DW_KSIZE, NULL), *s = ld_p_ints(l, o + DW_STRIDES, NULL);
    const int64_t *d = ld_p_ints(l, o + DW_DILATION, NULL);
    int64_t ke[2] = {ld_layer_dilated_size(k[0], d[0]), ld_layer_dilated_size(k[1], d[1])};   /* the taps spanned */
    int same = dw_same(l, o);
    if (!same && (in->d[0] < ke[0] || in->d[1] < ke[1]))
        return ld_fail(LD_ESHAPE, "%s: kernel %lldx%lld%s is larger than its %lldx%lld inputs (use padding=\"same\")",
                       l->name, (long long)ke[0], (long long)ke[1], ke[0] != k[0] || ke[1] != k[1] ? " (dilated)" : "",
                       (long long)in->d[0], (long long)in->d[1]);
    int64_t ks[4] = {k[0], k[1], in->d[2], ld_p_int(l, o + DW_MULT)}, fan_in = 0, fan_out = 0;
    if (kernel_fans(l, ks, &fan_in, &fan_out)) return ld_error_status();
    if (!ld_layer_add_weight(l, "depthwise_kernel", 4, ks, LD_INIT_GLOROT(fan_in, fan_out), 1)) return ld_error_status();
    out->ndim = 3;
    out->d[0] = ld_layer_out_size(in->d[0], ke[0], s[0], same);
    out->d[1] = ld_layer_out_size(in->d[1], ke[1], s[1], same);
    out->d[2] = ks[2] * ks[3];
    return LD_OK;
}
/* The depthwise convolution, one place for both classes: the patches
   (ld_im2col) as [rows, kh*kw, C, 1], times the kernel as [kh*kw, C, m],
   summed over the window: [N, OH, OW, C*m], channel c*m + j as TF's. Under
   a half policy x and the kernel (rounded to the half dtype first, as
   Keras's autocast) are taken in float32 (exact) and the float32 sums
   rounded once, as TF's kernel; so are the gradients. At strides s, valid or
   same; dilated, over x's phases (ld_layer_atrous, with dw_phase). */
static ld_tensor *depthwise_at(const ld_layer *l, int o, ld_tensor *x, ld_tensor *kernel, const int64_t *s, int same) {
    const int64_t *k = ld_p_ints(l, o + DW_KSIZE, NULL);
    int64_t n = x->shape[0], c = x->shape[3], m = kernel->shape[3], oh, ow;
    ld_dtype dt = compute_dtype();
    ld_tensor *kd = in_dtype(kernel, dt), *k32 = kd ? ld_as_float(kd) : NULL, *x32 = k32 ? ld_as_float(x) : NULL;
    ld_tensor *col = x32 ? ld_im2col(x32, (int)k[0], (int)k[1], (int)s[0], (int)s[1], same, &oh, &ow) : NULL;
    ld_tensor *p = NULL, *sum = NULL, *y = NULL;
    if (col) {
        int64_t c4s[4] = {col->shape[0], k[0] * k[1], c, 1}, k3s[3] = {k[0] * k[1], c, m}, ys[4] = {n, oh, ow, c * m};
        ld_tensor *c4 = ld_reshape_op(col, 4, c4s), *k3 = c4 ? ld_reshape_op(k32, 3, k3s) : NULL;
        p = k3 ? ld_mul(c4, k3) : NULL;
        sum = p ? ld_sum(p, 1, 0) : NULL;
        y = sum ? ld_reshape_op(sum, 4, ys) : NULL;
        ld_tensor_release(c4); ld_tensor_release(k3);
    }
    ld_tensor_release(kd); ld_tensor_release(k32); ld_tensor_release(x32); ld_tensor_release(col);
    ld_tensor_release(p); ld_tensor_release(sum);
    if (y && dt != LD_F32) {
        ld_tensor *h = ld_cast_op(y, dt);
        ld_tensor_release(y);
        y = h;
    }
    return y;
}
/* the depthwise offset of l's parameters: SeparableConv2D's follow its filters */
static int dw_offset(const ld_layer *l) { return l->cls == &ld_layer_separable_conv2d; }
static ld_tensor *dw_phase(ld_layer *l, ld_tensor *x) {
    return depthwise_at(l, dw_offset(l), x, ld_var(l->vars[0]), (const int64_t[]){1, 1}, 0);
}
static ld_tensor *depthwise(ld_layer *l, int o, ld_tensor *x) {
    const int64_t *k = ld_p_ints(l, o + DW_KSIZE, NULL), *d = ld_p_ints(l, o + DW_DILATION, NULL);
    if (d[0] == 1 && d[1] == 1)
        return depthwise_at(l, o, x, ld_var(l->vars[0]), ld_p_ints(l, o + DW_STRIDES, NULL), dw_same(l, o));
    return ld_layer_atrous(l, x, k, d, ld_p_str(l, o + DW_PADDING), dw_phase);
}

static int dw_check(ld_layer *l) { return dw_check_at(l, 0); }
static int dw_build(ld_layer *l, int n_in, const ld_shape *in, ld_shape *out) {
    if (dw_build_at(l, 0, in, out)) return ld_error_status();
    if (ld_p_int(l, DW_BIAS) && !ld_layer_add_weight(l, "bias", 1, &out->d[2], LD_INIT_Z, 1)) return ld_error_status();
    return LD_OK;
}
static ld_tensor *dw_forward(ld_layer *l, int n_in, ld_tensor *const *xs, int training) {
    ld_tensor *y = depthwise(l, 0, xs[0]);
    return bias_act(y, ld_p_int(l, DW_BIAS) ? ld_var(l->vars[1]) : NULL, ld_p_activation(l, DW_ACT));
}
const ld_layer_class ld_layer_depthwise_conv2d = {
    "DepthwiseConv2D", "depthwise_conv2d", NULL, {"kernel_size"},
    {LD_PINTS("kernel_size", NULL, 2), LD_PINTS("strides", "1", 2), LD_PSTR("padding", "valid", "valid|same"),
     LD_PINT("depth_multiplier", "1"), LD_PSTR("activation", "linear", LD_ACTIVATION_CHOICES),
     LD_PBOOL("use_bias", "true"), LD_PINTS("dilation_rate", "1", 2), LD_PEND},
    1, 1, 3u /* any image size */, dw_check, dw_build, dw_forward,
    "nn.DepthwiseConv2D(kernel_size, {strides=1, padding=\"valid\"|\"same\", depth_multiplier=1, activation=, "
    "use_bias=true, dilation_rate=1})\n\n"
    "Each channel of NHWC images convolved with its own depth_multiplier filters: channels * depth_multiplier\n"
    "outputs (channel c's j-th at c * depth_multiplier + j); depthwise_kernel (kh, kw, channels,\n"
    "depth_multiplier). depthwise_/bias_ initializer, regularizer, constraint and activity_regularizer as Keras's.",
    LD_ROLE_BIT(LD_ROLE_DEPTHWISE) | LD_ROLE_BIT(LD_ROLE_BIAS), .compute_mask = NULL};

enum { SEP_FILTERS };
static int sep_check(ld_layer *l) {
    if (ld_p_int(l, SEP_FILTERS) < 1)
        return ld_fail(LD_EARG, "SeparableConv2D filters must be a positive integer, got %lld",
                       (long long)ld_p_int(l, SEP_FILTERS));
    return dw_check_at(l, 1);
}
static int sep_build(ld_layer *l, int n_in, const ld_shape *in, ld_shape *out) {
    if (dw_build_at(l, 1, in, out)) return ld_error_status();
    int64_t f = ld_p_int(l, SEP_FILTERS), ps[4] = {1, 1, out->d[2], f}, fan_in = 0, fan_out = 0;
    if (kernel_fans(l, ps, &fan_in, &fan_out)) return ld_error_status();
    if (!ld_layer_add_weight(l, "pointwise_kernel", 4, ps, LD_INIT_GLOROT(fan_in, fan_out), 1)) return ld_error_status();
    if (ld_p_int(l, 1 + DW_BIAS) && !ld_layer_add_weight(l, "bias", 1, &f, LD_INIT_Z, 1)) return ld_error_status();
    out->d[2] = f;
    return LD_OK;
}
/* the depthwise step, then the pointwise 1x1 convolution as Dense's
   product on the channels, with the bias and relu (ld_linear_half: under a
   half policy the half product and the bias in the half dtype, as TF's
   separable_conv2d then Keras's bias) */
static ld_tensor *sep_forward(ld_layer *l, int n_in, ld_tensor *const *xs, int training) {
    ld_tensor *pw = ld_var(l->vars[1]);
    ld_activation a = ld_p_activation(l, 1 + DW_ACT);
    int64_t p2s[2] = {pw->shape[2], pw->shape[3]};
    ld_tensor *d = depthwise(l, 1, xs[0]), *p2 = d ? ld_reshape_op(pw, 2, p2s) : NULL;
    ld_tensor *y = p2 ? ld_linear_half(d, p2, ld_p_int(l, 1 + DW_BIAS) ? ld_var(l->vars[2]) : NULL, a == LD_ACT_RELU)
                      : NULL;
    ld_tensor_release(d); ld_tensor_release(p2);
    return ld_layer_activate(a, y, 1);   /* relu folded into ld_linear_half */
}
const ld_layer_class ld_layer_separable_conv2d = {
    "SeparableConv2D", "separable_conv2d", NULL, {"filters", "kernel_size"},
    {LD_PINT("filters", NULL), LD_PINTS("kernel_size", NULL, 2), LD_PINTS("strides", "1", 2),
     LD_PSTR("padding", "valid", "valid|same"), LD_PINT("depth_multiplier", "1"),
     LD_PSTR("activation", "linear", LD_ACTIVATION_CHOICES), LD_PBOOL("use_bias", "true"),
     LD_PINTS("dilation_rate", "1", 2), LD_PEND},
    1, 1, 3u /* any image size */, sep_check, sep_build, sep_forward,
    "nn.SeparableConv2D(filters, kernel_size, {strides=1, padding=\"valid\"|\"same\", depth_multiplier=1, "
    "activation=, use_bias=true, dilation_rate=1})\n\n"
    "A DepthwiseConv2D (no bias) then a 1x1 convolution to `filters` channels, then the bias (Keras's):\n"
    "depthwise_kernel (kh, kw, channels, depth_multiplier), pointwise_kernel (1, 1, channels *\n"
    "depth_multiplier, filters). depthwise_/pointwise_/bias_ initializer, regularizer, constraint and\n"
    "activity_regularizer as Keras's.",
    LD_ROLE_BIT(LD_ROLE_DEPTHWISE) | LD_ROLE_BIT(LD_ROLE_POINTWISE) | LD_ROLE_BIT(LD_ROLE_BIAS), .compute_mask = NULL};
