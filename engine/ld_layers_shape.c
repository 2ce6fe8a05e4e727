/* ld_layers_shape.c - Embedding, AveragePooling2D, GlobalAveragePooling2D,
 * Conv1D, and the merging layers Add, Multiply, Subtract, Average, Maximum,
 * Minimum, Concatenate (classes of
 * ld_nn.h), with Keras 3's arguments, defaults and variables. */
#include "ld_nn.h"
#include "ld_ops_attn.h"
#include "ld_ops_image.h"
#include "ld_ops_index.h"
#include "ld_ops_pool.h"
#include "ld_replica.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ================================================================ Embedding */
enum { EMB_INPUT_DIM, EMB_OUTPUT_DIM, EMB_MASK_ZERO };
static int emb_check(ld_layer *l) {
    if (ld_p_int(l, EMB_INPUT_DIM) < 1 || ld_p_int(l, EMB_OUTPUT_DIM) < 1)
        return ld_fail(LD_EARG, "Embedding input_dim and output_dim must be positive integers, got %lld and %lld",
                       (long long)ld_p_int(l, EMB_INPUT_DIM), (long long)ld_p_int(l, EMB_OUTPUT_DIM));
    return LD_OK;
}
static int emb_build(ld_layer *l, int n_in, const ld_shape *in, ld_shape *out) {
    char b[160];
    if (in->ndim + 2 > LD_MAX_DIMS)
        return ld_fail(LD_ESHAPE, "%s: inputs of shape %s have too many axes to add an embedding axis", l->name,
                       ld_layer_shape_str(in, b, sizeof b));
    int64_t ws[2] = {ld_p_int(l, EMB_INPUT_DIM), ld_p_int(l, EMB_OUTPUT_DIM)};
    if (!ld_layer_add_weight(l, "embeddings", 2, ws, (ld_init){LD_INIT_UNIFORM, -0.05, 0.05}, 1))
        return ld_error_status();
    *out = *in;
    out->d[out->ndim++] = ws[1];
    return LD_OK;
}
/* ids as int32/int64: other integers cast; float ids only when whole numbers */
static ld_tensor *emb_ids(ld_layer *l, ld_tensor *x) {
    if (x->dtype == LD_I32 || x->dtype == LD_I64) return ld_tensor_retain(x);
    if (x->dtype == LD_F32 && ld_tensor_numel(x) > 0) {
        ld_pending_read *r = ld_tensor_read_async(x);
        ld_dtype dt;
        int64_t n = 0;
        const float *v = r ? ld_pending_read_wait(r, &dt, &n) : NULL;
        if (!v) { ld_pending_read_free(r); return NULL; }
        for (int64_t i = 0; i < n; i++)
            if (!(v[i] == floorf(v[i])) || fabsf(v[i]) > 9e15f) {
                double bad = v[i];
                ld_pending_read_free(r);
                ld_fail(LD_EARG, "%s takes integer ids; got the float32 value %g (cast ids with astype(\"int64\"))",
                        l->name, bad);
                return NULL;
            }
        ld_pending_read_free(r);
    }
    return ld_cast(x, LD_I64);
}
static ld_tensor *emb_forward(ld_layer *l, int n_in, ld_tensor *const *xs, int training) {
    ld_tensor *ids = emb_ids(l, xs[0]);
    ld_tensor *y = ids ? ld_embedding_op(ld_var(l->vars[0]), ids) : NULL;
    ld_tensor_release(ids);
    return y;
}
/* Keras's mask_zero: id 0 is padding, masked (its output still the row of id 0) */
static int emb_mask(ld_layer *l, int n_in, ld_tensor *const *xs, ld_tensor **mask) {
    *mask = ld_p_int(l, EMB_MASK_ZERO) ? ld_mask_not_equal(xs[0], 0, 0) : NULL;
    return !ld_p_int(l, EMB_MASK_ZERO) || *mask ? LD_OK : ld_error_status();
}
const ld_layer_class ld_layer_embedding = {
    "Embedding", "embedding", NULL, {"input_dim", "output_dim"},
    {LD_PINT("input_dim", NULL), LD_PINT("output_dim", NULL), LD_PBOOL("mask_zero", "false"), LD_PEND},
    1, 1, ~0u /* any sequence length */, emb_check, emb_build, emb_forward,
    "nn.Embedding(input_dim, output_dim, {mask_zero=false})\n\n"
    "Look up integer ids in [0, input_dim) of any shape: [..., output_dim]. embeddings [input_dim, output_dim],\n"
    "uniform(-0.05, 0.05) (Keras' default). embeddings_initializer, _regularizer, _constraint and\n"
    "activity_regularizer as Keras's. mask_zero: id 0 is padding, and the output's mask (y.keras_mask)\n"
    "leaves it out of the layers after it that take masks (LSTM, GRU, SimpleRNN, Bidirectional,\n"
    "GlobalAveragePooling1D, MultiHeadAttention), the loss and compile's metrics, as Keras's.",
    LD_ROLE_BIT(LD_ROLE_EMBEDDINGS), .compute_mask = emb_mask};

/* ================================================================ AveragePooling2D */
enum { AP_SIZE, AP_STRIDES, AP_PADDING };
static int ap_check(ld_layer *l) {
    int n;
    const int64_t *k = ld_p_ints(l, AP_SIZE, NULL), *s = ld_p_ints(l, AP_STRIDES, &n);
    if (k[0] < 1 || k[1] < 1 || (n && (s[0] < 1 || s[1] < 1)))
        return ld_fail(LD_EARG, "AveragePooling2D pool_size and strides must be positive");
    return LD_OK;
}
static int ap_build(ld_layer *l, int n_in, const ld_shape *in, ld_shape *out) {
    if (ld_layer_need_image(l, in)) return ld_error_status();
    const int64_t *k = ld_p_ints(l, AP_SIZE, NULL), *s = ld_layer_pool_strides(l, AP_SIZE, AP_STRIDES);
    int same = !strcmp(ld_p_str(l, AP_PADDING), "same");
    *out = *in;
    out->d[0] = ld_layer_out_size(in->d[0], k[0], s[0], same);
    out->d[1] = ld_layer_out_size(in->d[1], k[1], s[1], same);
    return LD_OK;
}
static ld_tensor *ap_forward(ld_layer *l, int n_in, ld_tensor *const *xs, int training) {
    const int64_t *k = ld_p_ints(l, AP_SIZE, NULL), *s = ld_layer_pool_strides(l, AP_SIZE, AP_STRIDES);
    ld_tensor *xf = ld_as_float(xs[0]);
    ld_tensor *y = xf ? ld_avgpool2d(xf, (int)k[0], (int)k[1], (int)s[0], (int)s[1],
                                     !strcmp(ld_p_str(l, AP_PADDING), "same")) : NULL;
    ld_tensor_release(xf);
    return y;
}
const ld_layer_class ld_layer_average_pooling2d = {
    "AveragePooling2D", "average_pooling2d", "AvgPool2D", {"pool_size"},
    {LD_PINTS("pool_size", "2", 2), LD_PINTS("strides", "", 2), LD_PSTR("padding", "valid", "valid|same"), LD_PEND},
    1, 1, 3u /* any image size */, ap_check, ap_build, ap_forward,
    "nn.AveragePooling2D(pool_size=2, {strides=pool_size, padding=\"valid\"|\"same\"})\n\n"
    "Mean over windows of NHWC images (padded cells left out of the mean; nn.AvgPool2D is the same).", 0, .compute_mask = NULL};

/* ================================================================ GlobalAveragePooling2D */
enum { GAP_KEEPDIMS };
static int gap_build(ld_layer *l, int n_in, const ld_shape *in, ld_shape *out) {
    if (ld_layer_need_image(l, in)) return ld_error_status();
    if (ld_p_int(l, GAP_KEEPDIMS)) { *out = (ld_shape){3, {1, 1, in->d[2]}}; }
    else { *out = (ld_shape){1, {in->d[2]}}; }
    return LD_OK;
}
static ld_tensor *gap_forward(ld_layer *l, int n_in, ld_tensor *const *xs, int training) {
    ld_tensor *xf = ld_as_float(xs[0]);
    ld_tensor *y = xf ? ld_global_avgpool2d(xf, (int)ld_p_int(l, GAP_KEEPDIMS)) : NULL;
    ld_tensor_release(xf);
    return y;
}
const ld_layer_class ld_layer_global_average_pooling2d = {
    "GlobalAveragePooling2D", "global_average_pooling2d", NULL, {NULL},
    {LD_PBOOL("keepdims", "false"), LD_PEND},
    1, 1, 3u /* any image size */, NULL, gap_build, gap_forward,
    "nn.GlobalAveragePooling2D{keepdims=false}\n\n"
    "Mean over height and width of NHWC images: [batch, channels] ([batch, 1, 1, channels] with keepdims).", 0, .compute_mask = NULL};

/* ================================================================ GlobalMaxPooling2D */
/* the largest value of each channel over height and width: the image's
   cells as one axis, and the max reduction (its gradient to the largest) */
static ld_tensor *gmp2_forward(ld_layer *l, int n_in, ld_tensor *const *xs, int training) {
    ld_tensor *x = xs[0];
    int64_t flat[3] = {x->shape[0], x->shape[1] * x->shape[2], x->shape[3]}, keep[4] = {x->shape[0], 1, 1, x->shape[3]};
    ld_tensor *r = ld_reshape_op(x, 3, flat), *m = r ? ld_max(r, 1, 0) : NULL;
    ld_tensor_release(r);
    if (!m || !ld_p_int(l, GAP_KEEPDIMS)) return m;
    ld_tensor *y = ld_reshape_op(m, 4, keep);
    ld_tensor_release(m);
    return y;
}
const ld_layer_class ld_layer_global_max_pooling2d = {
    "GlobalMaxPooling2D", "global_max_pooling2d", NULL, {NULL},
    {LD_PBOOL("keepdims", "false"), LD_PEND},
    1, 1, 3u /* any image size */, NULL, gap_build, gmp2_forward,
    "nn.GlobalMaxPooling2D{keepdims=false}\n\n"
    "Maximum over height and width of NHWC images: [batch, channels] ([batch, 1, 1, channels] with keepdims).", 0, .compute_mask = NULL};

/* ================================================================ GlobalAveragePooling1D, GlobalMaxPooling1D */
/* over the steps of sequences [batch, steps, features] (Keras's, channels last) */
static int gp1_build(ld_layer *l, int n_in, const ld_shape *in, ld_shape *out) {
    if (ld_layer_need_steps(l, in, "features")) return ld_error_status();
    *out = ld_p_int(l, GAP_KEEPDIMS) ? (ld_shape){2, {1, in->d[1]}} : (ld_shape){1, {in->d[1]}};
    return LD_OK;
}
static ld_tensor *gp1_forward(ld_layer *l, ld_tensor *const *xs, int max) {
    ld_tensor *xf = ld_as_floating(xs[0]);
    int keep = (int)ld_p_int(l, GAP_KEEPDIMS);
    ld_tensor *y = xf ? (max ? ld_max(xf, 1, keep) : ld_mean(xf, 1, keep)) : NULL;
    ld_tensor_release(xf);
    return y;
}
/* with a mask, Keras's: the sum over the steps that count, divided by
   their number (NaN for a row with none, as Keras's) */
static ld_tensor *gap1_forward(ld_layer *l, int n_in, ld_tensor *const *xs, int training) {
    ld_tensor *m;
    if (ld_mask_of_steps(l, xs[0], &m)) return NULL;
    if (!m) return gp1_forward(l, xs, 0);
    int keep = (int)ld_p_int(l, GAP_KEEPDIMS);
    int64_t s[3] = {m->shape[0], m->shape[1], 1};
    ld_tensor *t[5] = {ld_as_floating(xs[0]), ld_reshape(m, 3, s)}, *y = NULL;
    if (t[0] && t[1] && (t[2] = ld_mask_select(t[1], t[0], NULL)) && (t[3] = ld_cast(t[1], t[0]->dtype)) &&
        (t[4] = ld_sum(t[3], 1, keep))) {
        ld_tensor *sum = ld_sum(t[2], 1, keep);
        y = sum ? ld_div(sum, t[4]) : NULL;
        ld_tensor_release(sum);
    }
    for (int i = 0; i < 5; i++) ld_tensor_release(t[i]);
    return y;
}
static ld_tensor *gmp1_forward(ld_layer *l, int n_in, ld_tensor *const *xs, int training) { return gp1_forward(l, xs, 1); }
const ld_layer_class ld_layer_global_average_pooling1d = {
    "GlobalAveragePooling1D", "global_average_pooling1d", NULL, {NULL},
    {LD_PBOOL("keepdims", "false"), LD_PEND},
    1, 1, 1u /* any number of steps */, NULL, gp1_build, gap1_forward,
    "nn.GlobalAveragePooling1D{keepdims=false}\n\n"
    "Mean over the steps of sequences [batch, steps, features]: [batch, features] (Keras's; after an\n"
    "Embedding, the bag-of-words text classifier of Keras's tutorials). With a mask (Embedding's\n"
    "mask_zero, Masking), the mean over the steps that count, as Keras's.", 0, .compute_mask = NULL};
const ld_layer_class ld_layer_global_max_pooling1d = {
    "GlobalMaxPooling1D", "global_max_pooling1d", NULL, {NULL},
    {LD_PBOOL("keepdims", "false"), LD_PEND},
    1, 1, 1u /* any number of steps */, NULL, gp1_build, gmp1_forward,
    "nn.GlobalMaxPooling1D{keepdims=false}\n\nMaximum over the steps of sequences [batch, steps, features]: [batch, features].", 0, .compute_mask = NULL};

/* ================================================================ Conv1D */
enum { C1_FILTERS, C1_KSIZE, C1_STRIDES, C1_PADDING, C1_ACT, C1_BIAS, C1_DILATION };
static int c1_check(ld_layer *l) {
    if (ld_p_int(l, C1_FILTERS) < 1 || ld_p_ints(l, C1_KSIZE, NULL)[0] < 1 || ld_p_ints(l, C1_STRIDES, NULL)[0] < 1)
        return ld_fail(LD_EARG, "Conv1D filters, kernel_size and strides must be positive");
    return ld_layer_dilation_check(l, 1, ld_p_ints(l, C1_DILATION, NULL), ld_p_ints(l, C1_STRIDES, NULL));
}
static int c1_build(ld_layer *l, int n_in, const ld_shape *in, ld_shape *out) {
    if (ld_layer_need_steps(l, in, "channels")) return ld_error_status();
    int64_t k = ld_p_ints(l, C1_KSIZE, NULL)[0], s = ld_p_ints(l, C1_STRIDES, NULL)[0];
    int64_t f = ld_p_int(l, C1_FILTERS), ks[3] = {k, in->d[1], f}, fan_in, fan_out;
    if (__builtin_mul_overflow(k, in->d[1], &fan_in) || __builtin_mul_overflow(k, f, &fan_out))
        return ld_fail(LD_ESHAPE, "%s: the kernel is too large (its size overflows int64)", l->name);
    if (!ld_layer_add_weight(l, "kernel", 3, ks, (ld_init){LD_INIT_GLOROT_UNIFORM, (double)fan_in, (double)fan_out}, 1))
        return ld_error_status();
    if (ld_p_int(l, C1_BIAS) && !ld_layer_add_weight(l, "bias", 1, &f, (ld_init){LD_INIT_ZEROS, 0, 0}, 1))
        return ld_error_status();
    const char *pad = ld_p_str(l, C1_PADDING);
    int64_t ke = ld_layer_dilated_size(k, ld_p_ints(l, C1_DILATION, NULL)[0]);   /* the taps the kernel spans */
    out->ndim = 2;
    out->d[0] = !strcmp(pad, "causal") ? ld_layer_out_size(in->d[0] + ke - 1, ke, s, 0) : ld_layer_out_size(in->d[0], ke, s, !strcmp(pad, "same"));
    out->d[1] = f;
    return LD_OK;
}
/* images [n, 1, steps, c] times the kernel at stride s, valid or same, with
   the bias and relu (one product of their patches): [n, 1, steps out, f] */
static ld_tensor *c1_product(ld_layer *l, ld_tensor *x4, int64_t s, int same) {
    int64_t k = ld_p_ints(l, C1_KSIZE, NULL)[0], n = x4->shape[0], c = x4->shape[3], f = ld_p_int(l, C1_FILTERS), oh, ow;
    ld_tensor *col = ld_im2col(x4, 1, (int)k, 1, (int)s, same, &oh, &ow);
    int64_t w2s[2] = {k * c, f};
    ld_tensor *w2 = col ? ld_reshape_op(ld_var(l->vars[0]), 2, w2s) : NULL;
    ld_tensor *y2 = w2 ? ld_linear_patches(col, w2, ld_p_int(l, C1_BIAS) ? ld_var(l->vars[1]) : NULL,
                                           ld_p_activation(l, C1_ACT) == LD_ACT_RELU) : NULL;
    int64_t ys[4] = {n, 1, ow, f};
    ld_tensor *y = y2 ? ld_reshape_op(y2, 4, ys) : NULL;
    ld_tensor_release(col); ld_tensor_release(w2); ld_tensor_release(y2);
    return y;
}
static ld_tensor *c1_phase(ld_layer *l, ld_tensor *x4) { return c1_product(l, x4, 1, 0); }
static ld_tensor *c1_forward(ld_layer *l, int n_in, ld_tensor *const *xs, int training) {
    /* [N, L, C] as images [N, 1, L, C]; causal: the dilated kernel's span - 1 zero steps in front, then valid */
    ld_tensor *x = xs[0];
    int64_t k = ld_p_ints(l, C1_KSIZE, NULL)[0], s = ld_p_ints(l, C1_STRIDES, NULL)[0];
    int64_t d = ld_p_ints(l, C1_DILATION, NULL)[0], ke = ld_layer_dilated_size(k, d);
    int64_t n = x->shape[0], c = x->shape[2];
    const char *pad = ld_p_str(l, C1_PADDING);
    ld_activation a = ld_p_activation(l, C1_ACT);
    /* under a half autocast, as Conv2D's lowering: x in the half dtype, the
       half product rounded once, then the bias and relu in the half dtype
       (Keras's numbers; the bias was added in float32 before rounding) */
    ld_dtype half = ld_autocast_dtype(), dt = ld_dtype_is_half(half) ? half : LD_F32;
    ld_tensor *xf = dt == LD_F32 ? ld_as_float(x) : x->dtype == dt ? ld_tensor_retain(x) : ld_cast_op(x, dt);
    if (xf && !strcmp(pad, "causal") && ke > 1) {   /* padding is float32's: a half x goes through it widened (exact) */
        ld_tensor *x32 = ld_as_float(xf);
        ld_tensor *p = x32 ? ld_pad_op(x32, 1, ke - 1, 0, 0.0) : NULL;
        ld_tensor_release(x32);
        ld_tensor_release(xf);
        xf = p && dt != LD_F32 ? ld_cast_op(p, dt) : p;
        if (xf != p) ld_tensor_release(p);
    }
    ld_tensor *x4 = NULL, *y4 = NULL;
    if (xf) {
        int64_t s4[4] = {n, 1, xf->shape[1], c};
        x4 = ld_reshape_op(xf, 4, s4);
    }
    ld_tensor_release(xf);
    int same = !strcmp(pad, "same");
    if (x4 && d > 1) {   /* over the sequences' phases (ld_layer_atrous); causal is padded already */
        int64_t kk[2] = {1, k}, dd[2] = {1, d};
        y4 = ld_layer_atrous(l, x4, kk, dd, same ? "same" : "valid", c1_phase);
    } else if (x4) {
        y4 = c1_product(l, x4, s, same);
    }
    ld_tensor_release(x4);
    ld_tensor *y = y4 ? ld_reshape_op(y4, 3, (const int64_t[]){n, y4->shape[2], y4->shape[3]}) : NULL;
    ld_tensor_release(y4);
    return ld_layer_activate(a, y, 1);   /* relu folded into the product */
}
const ld_layer_class ld_layer_conv1d = {
    "Conv1D", "conv1d", NULL, {"filters", "kernel_size"},
    {LD_PINT("filters", NULL), LD_PINTS("kernel_size", NULL, 1), LD_PINTS("strides", "1", 1),
     LD_PSTR("padding", "valid", "valid|same|causal"), LD_PSTR("activation", "linear", LD_ACTIVATION_CHOICES),
     LD_PBOOL("use_bias", "true"), LD_PINTS("dilation_rate", "1", 1), LD_PEND},
    1, 1, 1u /* any number of steps */, c1_check, c1_build, c1_forward,
    "nn.Conv1D(filters, kernel_size, {strides=1, padding=\"valid\"|\"same\"|\"causal\", activation=, use_bias=true,\n"
    "dilation_rate=1})\n\n"
    "1-d convolution over sequences [batch, steps, channels]; kernel [kernel_size, channels, filters].\n"
    "causal: output step t sees input steps <= t (kernel_size - 1 zeros in front).\n"
    "dilation_rate=d: the kernel's taps d steps apart (WaveNet's and TCNs' causal stacks; strides 1).\n"
    "kernel_/bias_ initializer, regularizer, constraint and activity_regularizer as Keras's.",
    LD_ROLE_BIT(LD_ROLE_KERNEL) | LD_ROLE_BIT(LD_ROLE_BIAS), .compute_mask = NULL};

/* ================================================================ MaxPooling1D, AveragePooling1D */
/* sequences [batch, steps, channels] pooled along the steps: the 2-d
   pooling ops over [batch, steps, 1, channels] (one code path each) */
enum { P1_SIZE, P1_STRIDES, P1_PADDING };
static int p1_check(ld_layer *l) {
    int n;
    const int64_t *k = ld_p_ints(l, P1_SIZE, NULL), *s = ld_p_ints(l, P1_STRIDES, &n);
    if (k[0] < 1 || (n && s[0] < 1)) return ld_fail(LD_EARG, "%s pool_size and strides must be positive", l->cls->class_name);
    return LD_OK;
}
static int p1_same(const ld_layer *l) { return !strcmp(ld_p_str(l, P1_PADDING), "same"); }
static int p1_build(ld_layer *l, int n_in, const ld_shape *in, ld_shape *out) {
    if (ld_layer_need_steps(l, in, "channels")) return ld_error_status();
    *out = *in;
    out->d[0] = ld_layer_out_size(in->d[0], ld_p_ints(l, P1_SIZE, NULL)[0], ld_layer_pool_strides(l, P1_SIZE, P1_STRIDES)[0], p1_same(l));
    return LD_OK;
}
static ld_tensor *p1_forward(ld_layer *l, ld_tensor *x, int max) {
    int64_t k = ld_p_ints(l, P1_SIZE, NULL)[0], st = ld_layer_pool_strides(l, P1_SIZE, P1_STRIDES)[0];
    int64_t s4[4] = {x->shape[0], x->shape[1], 1, x->shape[2]};
    ld_tensor *xf = max ? ld_tensor_retain(x) : ld_as_float(x);
    ld_tensor *x4 = xf ? ld_reshape_op(xf, 4, s4) : NULL;
    ld_tensor *y4 = !x4 ? NULL : !max ? ld_avgpool2d(x4, (int)k, 1, (int)st, 1, p1_same(l))
                               : (p1_same(l) ? ld_maxpool2d_same : ld_maxpool2d)(x4, (int)k, 1, (int)st, 1);
    ld_tensor *y = NULL;
    if (y4) {
        int64_t s3[3] = {y4->shape[0], y4->shape[1], y4->shape[3]};
        y = ld_reshape_op(y4, 3, s3);
    }
    ld_tensor_release(xf); ld_tensor_release(x4); ld_tensor_release(y4);
    return y;
}
static ld_tensor *mp1_forward(ld_layer *l, int n, ld_tensor *const *xs, int training) { return p1_forward(l, xs[0], 1); }
static ld_tensor *ap1_forward(ld_layer *l, int n, ld_tensor *const *xs, int training) { return p1_forward(l, xs[0], 0); }
const ld_layer_class ld_layer_max_pooling1d = {
    "MaxPooling1D", "max_pooling1d", "MaxPool1D", {"pool_size"},
    {LD_PINTS("pool_size", "2", 1), LD_PINTS("strides", "", 1), LD_PSTR("padding", "valid", "valid|same"), LD_PEND},
    1, 1, 1u /* any number of steps */, p1_check, p1_build, mp1_forward,
    "nn.MaxPooling1D(pool_size=2, {strides=pool_size, padding=\"valid\"|\"same\"})\n\n"
    "Maximum over windows of steps of sequences [batch, steps, channels] (same: TF's padding, never the\n"
    "maximum; nn.MaxPool1D is the same).", 0, .compute_mask = NULL};
const ld_layer_class ld_layer_average_pooling1d = {
    "AveragePooling1D", "average_pooling1d", "AvgPool1D", {"pool_size"},
    {LD_PINTS("pool_size", "2", 1), LD_PINTS("strides", "", 1), LD_PSTR("padding", "valid", "valid|same"), LD_PEND},
    1, 1, 1u, p1_check, p1_build, ap1_forward,
    "nn.AveragePooling1D(pool_size=2, {strides=pool_size, padding=\"valid\"|\"same\"})\n\n"
    "Mean over windows of steps of sequences [batch, steps, channels] (padded steps left out of the mean;\n"
    "nn.AvgPool1D is the same).", 0, .compute_mask = NULL};

/* ================================================================ ZeroPadding, Cropping, UpSampling (1D and 2D) */
/* One code path for both: the 1-d classes act on the steps of sequences
   [batch, steps, features] (axis 1), the 2-d ones on the height and width
   of NHWC images (axes 1 and 2); spatial_axes tells which. */
static int spatial_axes(const ld_layer *l) {
    const ld_layer_class *c = l->cls;
    return c == &ld_layer_zero_padding1d || c == &ld_layer_cropping1d || c == &ld_layer_up_sampling1d ? 1 : 2;
}
static int need_spatial(const ld_layer *l, const ld_shape *in) {
    return spatial_axes(l) == 1 ? ld_layer_need_steps(l, in, "features") : ld_layer_need_image(l, in);
}
/* padding / cropping, the two sides of each spatial axis into s (before,
   after, ...): 1-d 1 number (both sides) or 2 (left, right), as Keras's int
   and (left, right); 2-d 1 number (every side), 2 (symmetric height, width)
   or 4 (top, bottom, left, right), as Keras's int, (h, w) and ((t, b), (l, r)) */
enum { PAD_AMOUNT };
static int sides(const ld_layer *l, int64_t s[4]) {
    int n, axes = spatial_axes(l);
    const int64_t *p = ld_p_ints(l, PAD_AMOUNT, &n);
    if (n == 1) s[0] = s[1] = s[2] = s[3] = p[0];
    else if (n == 2 && axes == 1) { s[0] = p[0]; s[1] = p[1]; }
    else if (n == 2) { s[0] = s[1] = p[0]; s[2] = s[3] = p[1]; }
    else if (n == 4 && axes == 2) memcpy(s, p, 4 * sizeof *s);
    else if (axes == 1)
        return ld_fail(LD_EARG, "%s takes 1 or 2 (left, right) numbers, got %d", l->cls->class_name, n);
    else return ld_fail(LD_EARG, "%s takes 1, 2 (height, width) or 4 (top, bottom, left, right) numbers, got %d",
                        l->cls->class_name, n);
    for (int i = 0; i < 2 * axes; i++)
        if (s[i] < 0) return ld_fail(LD_EARG, "%s amounts must be 0 or more, got %lld", l->cls->class_name, (long long)s[i]);
    return LD_OK;
}
static int pad_check(ld_layer *l) { int64_t s[4]; return sides(l, s); }
static int zpad_build(ld_layer *l, int n_in, const ld_shape *in, ld_shape *out) {
    int64_t s[4];
    if (need_spatial(l, in) || sides(l, s)) return ld_error_status();
    *out = *in;
    for (int a = 0; a < spatial_axes(l); a++) out->d[a] += s[2 * a] + s[2 * a + 1];
    return LD_OK;
}
static ld_tensor *zpad_forward(ld_layer *l, int n_in, ld_tensor *const *xs, int training) {
    int64_t s[4];
    if (sides(l, s)) return NULL;
    ld_tensor *y = ld_tensor_retain(xs[0]);
    for (int a = 0; a < spatial_axes(l) && y; a++) {
        ld_tensor *p = ld_pad_op(y, a + 1, s[2 * a], s[2 * a + 1], 0.0);
        ld_tensor_release(y);
        y = p;
    }
    return y;
}
const ld_layer_class ld_layer_zero_padding2d = {
    "ZeroPadding2D", "zero_padding2d", NULL, {"padding"}, {LD_PINTS("padding", "1", 0), LD_PEND},
    1, 1, 3u, pad_check, zpad_build, zpad_forward,
    "nn.ZeroPadding2D(padding=1)\n\nZeros around NHWC images: padding n (every side), {h, w}, or {top, bottom, left, right}.", 0, .compute_mask = NULL};
const ld_layer_class ld_layer_zero_padding1d = {
    "ZeroPadding1D", "zero_padding1d", NULL, {"padding"}, {LD_PINTS("padding", "1", 0), LD_PEND},
    1, 1, 1u, pad_check, zpad_build, zpad_forward,
    "nn.ZeroPadding1D(padding=1)\n\nZero steps at both ends of sequences [batch, steps, features]: padding n (each end)\n"
    "or {left, right}.", 0, .compute_mask = NULL};

/* the inputs' kept length along each spatial axis into keep; an error when one is cropped away */
static int crop_keep(const ld_layer *l, const int64_t *len, const int64_t s[4], int64_t keep[2], const char *shape) {
    for (int a = 0; a < spatial_axes(l); a++) {
        keep[a] = len[a] - s[2 * a] - s[2 * a + 1];
        if (keep[a] <= 0)
            return ld_fail(LD_ESHAPE, "%s crops away every %s of inputs of shape %s", l->name,
                           spatial_axes(l) == 1 ? "step" : "row or column", shape);
    }
    return LD_OK;
}
static int crop_build(ld_layer *l, int n_in, const ld_shape *in, ld_shape *out) {
    int64_t s[4];
    char b[160];
    if (need_spatial(l, in) || sides(l, s) || crop_keep(l, in->d, s, out->d, ld_layer_shape_str(in, b, sizeof b)))
        return ld_error_status();
    out->ndim = in->ndim;
    for (int a = spatial_axes(l); a < in->ndim; a++) out->d[a] = in->d[a];
    return LD_OK;
}
static ld_tensor *crop_forward(ld_layer *l, int n_in, ld_tensor *const *xs, int training) {
    int64_t s[4], keep[2];
    char b[LD_SHAPE_STR_MAX];
    if (sides(l, s) || crop_keep(l, xs[0]->shape + 1, s, keep, ld_shape_str(xs[0], b, sizeof b))) return NULL;
    ld_tensor *y = ld_as_float(xs[0]);   /* slices are float32's: a half policy's input widened (exact) */
    for (int a = 0; a < spatial_axes(l) && y; a++) {
        ld_tensor *c = ld_slice_op(y, a + 1, s[2 * a], keep[a]);
        ld_tensor_release(y);
        y = c;
    }
    return y;
}
const ld_layer_class ld_layer_cropping2d = {
    "Cropping2D", "cropping2d", NULL, {"cropping"}, {LD_PINTS("cropping", "0", 0), LD_PEND},
    1, 1, 3u, pad_check, crop_build, crop_forward,
    "nn.Cropping2D(cropping=0)\n\nNHWC images without their borders: cropping n (every side), {h, w}, or\n"
    "{top, bottom, left, right}.", 0, .compute_mask = NULL};
const ld_layer_class ld_layer_cropping1d = {
    "Cropping1D", "cropping1d", NULL, {"cropping"}, {LD_PINTS("cropping", "1,1", 0), LD_PEND},
    1, 1, 1u, pad_check, crop_build, crop_forward,
    "nn.Cropping1D(cropping={1, 1})\n\nSequences [batch, steps, features] without steps at their ends: cropping n (each\n"
    "end) or {left, right} (Keras's default: one step at each end).", 0, .compute_mask = NULL};

/* UpSampling (nearest): each step, or each row then each column, repeated
   (gathers: the gradient adds the copies up). UpSampling2D's bilinear: TF's
   resize (ld_image_resize), as Keras 3's */
enum { UP_SIZE, UP_INTERP };
static int up_check(ld_layer *l) {
    const int64_t *k = ld_p_ints(l, UP_SIZE, NULL);
    for (int a = 0; a < spatial_axes(l); a++)
        if (k[a] < 1) return ld_fail(LD_EARG, "%s size must be positive, got %lld", l->cls->class_name, (long long)k[a]);
    return LD_OK;
}
static int up_build(ld_layer *l, int n_in, const ld_shape *in, ld_shape *out) {
    if (need_spatial(l, in)) return ld_error_status();
    const int64_t *k = ld_p_ints(l, UP_SIZE, NULL);
    *out = *in;
    for (int a = 0; a < spatial_axes(l); a++)
        if (__builtin_mul_overflow(in->d[a], k[a], &out->d[a]))
            return ld_fail(LD_ESHAPE, "%s: %lld times %lld overflows int64", l->name, (long long)in->d[a], (long long)k[a]);
    return LD_OK;
}
static ld_tensor *repeat_axis(ld_tensor *x, int axis, int64_t k) {
    if (k == 1) return ld_tensor_retain(x);
    int64_t n = x->shape[axis] * k;
    ld_tensor *idx = ld_tensor_empty(LD_I64, 1, &n, NULL);
    if (!idx) return NULL;
    int64_t *p = ld_tensor_data_unsynced(idx);
    for (int64_t i = 0; i < n; i++) p[i] = i / k;
    ld_tensor *y = ld_gather(x, idx, axis);
    ld_tensor_release(idx);
    return y;
}
static ld_tensor *up_forward(ld_layer *l, int n_in, ld_tensor *const *xs, int training) {
    const int64_t *k = ld_p_ints(l, UP_SIZE, NULL);
    ld_tensor *y = ld_as_float(xs[0]);
    if (y && l->cls == &ld_layer_up_sampling2d && !strcmp(ld_p_str(l, UP_INTERP), "bilinear")) {   /* TF's resize */
        ld_tensor *r = ld_image_resize(y, y->shape[1] * k[0], y->shape[2] * k[1], 0);
        ld_tensor_release(y);
        return r;
    }
    for (int a = 0; a < spatial_axes(l) && y; a++) {
        ld_tensor *r = repeat_axis(y, a + 1, k[a]);
        ld_tensor_release(y);
        y = r;
    }
    return y;
}
const ld_layer_class ld_layer_up_sampling2d = {
    "UpSampling2D", "up_sampling2d", NULL, {"size"},
    {LD_PINTS("size", "2", 2), LD_PSTR("interpolation", "nearest", "nearest|bilinear"), LD_PEND},
    1, 1, 3u, up_check, up_build, up_forward,
    "nn.UpSampling2D(size=2, {interpolation=\"nearest\"|\"bilinear\"})\n\nNHWC images enlarged by repeating each row size[1] times and each column size[2] times;\n"
    "bilinear: TF's bilinear resize (half-pixel centres), as Keras 3's.", 0, .compute_mask = NULL};
const ld_layer_class ld_layer_up_sampling1d = {
    "UpSampling1D", "up_sampling1d", NULL, {"size"}, {LD_PINTS("size", "2", 1), LD_PEND},
    1, 1, 1u, up_check, up_build, up_forward,
    "nn.UpSampling1D(size=2)\n\nSequences [batch, steps, features] lengthened by repeating each step size times.", 0, .compute_mask = NULL};

/* ================================================================ RepeatVector, Permute */
enum { REP_N };
static int rep_check(ld_layer *l) {
    if (ld_p_int(l, REP_N) < 1) return ld_fail(LD_EARG, "RepeatVector n must be positive");
    return LD_OK;
}
static int rep_build(ld_layer *l, int n_in, const ld_shape *in, ld_shape *out) {
    if (in->ndim != 1) {
        char b[160];
        return ld_fail(LD_ESHAPE, "%s needs vectors [batch, features]; got inputs of shape %s", l->name,
                       ld_layer_shape_str(in, b, sizeof b));
    }
    out->ndim = 2;
    out->d[0] = ld_p_int(l, REP_N);
    out->d[1] = in->d[0];
    return LD_OK;
}
static ld_tensor *rep_forward(ld_layer *l, int n_in, ld_tensor *const *xs, int training) {
    ld_tensor *x = xs[0];
    int64_t s3[3] = {x->shape[0], 1, x->shape[1]};
    ld_tensor *xf = ld_as_float(x), *x3 = xf ? ld_reshape_op(xf, 3, s3) : NULL;
    ld_tensor *y = x3 ? repeat_axis(x3, 1, ld_p_int(l, REP_N)) : NULL;
    ld_tensor_release(xf);
    ld_tensor_release(x3);
    return y;
}
const ld_layer_class ld_layer_repeat_vector = {
    "RepeatVector", "repeat_vector", NULL, {"n"}, {LD_PINT("n", NULL), LD_PEND},
    1, 1, 0, rep_check, rep_build, rep_forward,
    "nn.RepeatVector(n)\n\n[batch, features] -> [batch, n, features]: each vector n times (an encoder's state for a decoder).", 0, .compute_mask = NULL};

/* Permute(dims): the axes after the batch reordered, dims counting them from 1
   (Keras's); the swaps that put each axis in place, on the tape */
enum { PERM_DIMS };
static int perm_check(ld_layer *l) {
    int n, seen[LD_MAX_DIMS + 1] = {0};
    const int64_t *d = ld_p_ints(l, PERM_DIMS, &n);
    for (int i = 0; i < n; i++) {
        if (d[i] < 1 || d[i] > n || seen[d[i]]++)
            return ld_fail(LD_EARG, "Permute dims must order the axes 1..%d (the batch axis stays first), each once", n);
    }
    return LD_OK;
}
static int perm_build(ld_layer *l, int n_in, const ld_shape *in, ld_shape *out) {
    int n;
    const int64_t *d = ld_p_ints(l, PERM_DIMS, &n);
    if (n != in->ndim) {
        char b[160];
        return ld_fail(LD_ESHAPE, "%s orders %d axes, but its inputs %s have %d after the batch", l->name, n,
                       ld_layer_shape_str(in, b, sizeof b), in->ndim);
    }
    out->ndim = n;
    for (int i = 0; i < n; i++) out->d[i] = in->d[d[i] - 1];
    return LD_OK;
}
static ld_tensor *perm_forward(ld_layer *l, int n_in, ld_tensor *const *xs, int training) {
    int n, perm[LD_MAX_DIMS];
    const int64_t *d = ld_p_ints(l, PERM_DIMS, &n);
    perm[0] = 0;   /* the batch axis stays */
    for (int i = 1; i <= n; i++) perm[i] = (int)d[i - 1];
    ld_tensor *v = ld_permute_op(xs[0], perm);
    ld_tensor *y = ld_ops_contig(v);   /* recorded: the gradient reaches the view's source */
    ld_tensor_release(v);
    return y;
}
const ld_layer_class ld_layer_permute = {
    "Permute", "permute", NULL, {"dims"}, {LD_PINTS("dims", NULL, 0), LD_PEND},
    1, 1, 0, perm_check, perm_build, perm_forward,
    "nn.Permute{dims}\n\nThe axes after the batch reordered, numbered from 1 as Keras's: nn.Permute{2, 1} swaps\n"
    "[batch, steps, features] to [batch, features, steps].", 0, .compute_mask = NULL};

/* ================================================================ merging: Add, Multiply, Concatenate */
/* inputs equal on every axis but `skip` (an axis after the batch, -1: none) */
static int merge_shapes(const ld_layer *l, int n, const ld_shape *in, int skip, const char *what) {
    int ok = 1;
    for (int i = 1; i < n && ok; i++) {
        ok = in[i].ndim == in[0].ndim;
        for (int a = 0; a < in[0].ndim && ok; a++) ok = a == skip || in[i].d[a] == in[0].d[a];
    }
    if (ok) return LD_OK;
    char b[512];
    size_t q = 0;
    for (int i = 0; i < n && q < sizeof b; i++) {
        char s[160];
        q += (size_t)snprintf(b + q, sizeof b - q, "%s%s", i ? ", " : "", ld_layer_shape_str(&in[i], s, sizeof s));
    }
    return ld_fail(LD_ESHAPE, "%s needs inputs %s; got %s", l->name, what, b);
}
/* the inputs' shapes after the batch; LD_OK when every batch is the same size */
static int shapes_of(const ld_layer *l, int n, ld_tensor *const *xs, ld_shape *in) {
    int same = 1;
    for (int i = 1; i < n; i++) same &= xs[i]->shape[0] == xs[0]->shape[0];
    if (!same) {
        char b[512], s[LD_SHAPE_STR_MAX];
        size_t q = 0;
        for (int i = 0; i < n && q < sizeof b; i++)
            q += (size_t)snprintf(b + q, sizeof b - q, "%s%s", i ? ", " : "", ld_shape_str(xs[i], s, sizeof s));
        return ld_fail(LD_ESHAPE, "%s needs inputs of the same batch size; got %s", l->name, b);
    }
    for (int i = 0; i < n; i++) {
        in[i].ndim = xs[i]->ndim - 1;
        memcpy(in[i].d, xs[i]->shape + 1, (size_t)in[i].ndim * sizeof *in[i].d);
    }
    return LD_OK;
}
static int elementwise_build(ld_layer *l, int n_in, const ld_shape *in, ld_shape *out) {
    if (merge_shapes(l, n_in, in, -1, "of the same shape")) return ld_error_status();
    *out = in[0];
    return LD_OK;
}
static ld_tensor *elementwise(ld_layer *l, int n, ld_tensor *const *xs, ld_tensor *(*op)(ld_tensor *, ld_tensor *)) {
    ld_shape in[LD_LAYER_MAX_INPUTS];
    if (shapes_of(l, n, xs, in) || merge_shapes(l, n, in, -1, "of the same shape")) return NULL;
    ld_tensor *acc = op(xs[0], xs[1]);
    for (int i = 2; i < n && acc; i++) {
        ld_tensor *t = op(acc, xs[i]);
        ld_tensor_release(acc);
        acc = t;
    }
    return acc;
}
static ld_tensor *add_forward(ld_layer *l, int n, ld_tensor *const *xs, int training) { return elementwise(l, n, xs, ld_add); }
static ld_tensor *mul_forward(ld_layer *l, int n, ld_tensor *const *xs, int training) { return elementwise(l, n, xs, ld_mul); }
static ld_tensor *sub_forward(ld_layer *l, int n, ld_tensor *const *xs, int training) { return elementwise(l, n, xs, ld_sub); }
static ld_tensor *max_forward(ld_layer *l, int n, ld_tensor *const *xs, int training) { return elementwise(l, n, xs, ld_maximum); }
static ld_tensor *min_forward(ld_layer *l, int n, ld_tensor *const *xs, int training) { return elementwise(l, n, xs, ld_minimum); }
/* Keras's Average: the sum, divided by the count (a division, as Keras's) */
static ld_tensor *avg_forward(ld_layer *l, int n, ld_tensor *const *xs, int training) {
    ld_tensor *sum = elementwise(l, n, xs, ld_add);
    if (!sum) return NULL;
    ld_tensor *cnt = ld_tensor_full(sum->dtype, 0, NULL, (double)n, sum->storage->device);
    ld_tensor *y = cnt ? ld_div(sum, cnt) : NULL;
    ld_tensor_release(sum);
    ld_tensor_release(cnt);
    return y;
}
const ld_layer_class ld_layer_add = {
    "Add", "add", NULL, {NULL}, {LD_PEND},
    2, LD_LAYER_MAX_INPUTS, ~0u /* the inputs agree with each other (checked in forward) */, NULL, elementwise_build,
    add_forward, "nn.Add()\n\nlayer({x1, x2, ...}): the elementwise sum of 2 to 8 inputs of the same shape.", 0, .compute_mask = ld_mask_merge};
const ld_layer_class ld_layer_multiply = {
    "Multiply", "multiply", NULL, {NULL}, {LD_PEND},
    2, LD_LAYER_MAX_INPUTS, ~0u, NULL, elementwise_build,
    mul_forward, "nn.Multiply()\n\nlayer({x1, x2, ...}): the elementwise product of 2 to 8 inputs of the same shape.", 0, .compute_mask = ld_mask_merge};
const ld_layer_class ld_layer_subtract = {
    "Subtract", "subtract", NULL, {NULL}, {LD_PEND},
    2, 2, ~0u, NULL, elementwise_build,
    sub_forward, "nn.Subtract()\n\nlayer({x1, x2}): x1 - x2, for two inputs of the same shape.", 0, .compute_mask = ld_mask_merge};
const ld_layer_class ld_layer_average = {
    "Average", "average", NULL, {NULL}, {LD_PEND},
    2, LD_LAYER_MAX_INPUTS, ~0u, NULL, elementwise_build,
    avg_forward, "nn.Average()\n\nlayer({x1, x2, ...}): the elementwise mean of 2 to 8 inputs of the same shape.", 0, .compute_mask = ld_mask_merge};
const ld_layer_class ld_layer_maximum = {
    "Maximum", "maximum", NULL, {NULL}, {LD_PEND},
    2, LD_LAYER_MAX_INPUTS, ~0u, NULL, elementwise_build,
    max_forward, "nn.Maximum()\n\nlayer({x1, x2, ...}): the elementwise maximum of 2 to 8 inputs of the same shape\n"
    "(the gradient goes to the first of equal inputs, as TF's).", 0, .compute_mask = ld_mask_merge};
const ld_layer_class ld_layer_minimum = {
    "Minimum", "minimum", NULL, {NULL}, {LD_PEND},
    2, LD_LAYER_MAX_INPUTS, ~0u, NULL, elementwise_build,
    min_forward, "nn.Minimum()\n\nlayer({x1, x2, ...}): the elementwise minimum of 2 to 8 inputs of the same shape\n"
    "(the gradient goes to the first of equal inputs, as TF's).", 0, .compute_mask = ld_mask_merge};

enum { CAT_AXIS };
/* the axis counted with the batch (1..ndim), or -1 after ld_fail */
static int cat_axis(const ld_layer *l, int ndim_after_batch) {
    int64_t a = ld_p_int(l, CAT_AXIS), full = ndim_after_batch + 1;
    int64_t r = a < 0 ? a + full : a;
    if (r < 1 || r >= full) {
        ld_fail(LD_EARG, "%s: axis %lld is out of range for inputs with %lld axes (the batch axis is axis 0 and "
                "cannot be concatenated)", l->name, (long long)a, (long long)full);
        return -1;
    }
    return (int)r;
}
static int cat_build(ld_layer *l, int n_in, const ld_shape *in, ld_shape *out) {
    int a = cat_axis(l, in[0].ndim);
    if (a < 0) return ld_error_status();
    char what[96];
    snprintf(what, sizeof what, "equal on every axis but axis %lld", (long long)ld_p_int(l, CAT_AXIS));
    if (merge_shapes(l, n_in, in, a - 1, what)) return ld_error_status();
    *out = in[0];
    for (int i = 1; i < n_in; i++) out->d[a - 1] += in[i].d[a - 1];
    return LD_OK;
}
static ld_tensor *cat_forward(ld_layer *l, int n, ld_tensor *const *xs, int training) {
    ld_shape in[LD_LAYER_MAX_INPUTS];
    if (shapes_of(l, n, xs, in)) return NULL;
    int a = cat_axis(l, in[0].ndim);
    if (a < 0) return NULL;
    char what[96];
    snprintf(what, sizeof what, "equal on every axis but axis %lld", (long long)ld_p_int(l, CAT_AXIS));
    if (merge_shapes(l, n, in, a - 1, what)) return NULL;
    ld_tensor *f[LD_LAYER_MAX_INPUTS] = {0};
    ld_tensor *y = NULL;
    int i = 0;
    for (; i < n; i++) if (!(f[i] = ld_as_float(xs[i]))) break;
    if (i == n) y = ld_concat_op(n, f, a);
    for (int j = 0; j < n; j++) ld_tensor_release(f[j]);
    return y;
}
/* Keras's Concatenate.compute_mask: each input's mask (ones for an input
   without one) broadcast to the input's shape, concatenated along the
   axis, then any() over the last axis; none when no input has a mask */
static int cat_mask(ld_layer *l, int n, ld_tensor *const *xs, ld_tensor **mask) {
    *mask = NULL;
    int any = 0;
    for (int i = 0; i < n; i++) any |= xs[i]->keras_mask != NULL;
    if (!any) return LD_OK;
    int a = cat_axis(l, xs[0]->ndim - 1);
    if (a < 0) return ld_error_status();
    ld_tensor *full[LD_LAYER_MAX_INPUTS] = {0}, *cat = NULL;
    int i = 0;
    for (; i < n; i++) {
        ld_tensor *x = xs[i], *m = x->keras_mask;
        ld_tensor *ones = ld_tensor_full(LD_F32, x->ndim, x->shape, 1.0, x->storage->device);
        if (!ones) break;
        if (!m) { full[i] = ones; continue; }
        int64_t s[LD_MAX_DIMS];
        int k = m->ndim;
        memcpy(s, m->shape, sizeof(int64_t) * (size_t)k);
        while (k < x->ndim) s[k++] = 1;
        ld_tensor *mr = m->ndim <= x->ndim ? ld_reshape(m, x->ndim, s) : NULL;
        if (!mr) {
            char b1[LD_SHAPE_STR_MAX], b2[LD_SHAPE_STR_MAX];
            if (m->ndim > x->ndim)
                ld_fail(LD_ESHAPE, "%s: a mask %s for an input %s", l->name, ld_shape_str(m, b1, sizeof b1),
                        ld_shape_str(x, b2, sizeof b2));
            ld_tensor_release(ones);
            break;
        }
        full[i] = ld_mul(ones, mr);
        ld_tensor_release(ones);
        ld_tensor_release(mr);
        if (!full[i]) break;
    }
    if (i == n && (cat = ld_concat_op(n, full, a))) *mask = ld_max(cat, -1, 0);
    for (int j = 0; j < n; j++) ld_tensor_release(full[j]);
    ld_tensor_release(cat);
    return *mask ? LD_OK : ld_error_status();
}
const ld_layer_class ld_layer_concatenate = {
    "Concatenate", "concatenate", NULL, {"axis"}, {LD_PINT("axis", "-1"), LD_PEND},
    2, LD_LAYER_MAX_INPUTS, ~0u /* checked in forward */, NULL, cat_build, cat_forward,
    "nn.Concatenate{axis=-1}\n\nlayer({x1, x2, ...}): 2 to 8 inputs joined along `axis` (counted with the batch\n"
    "axis, as Keras does: -1 the last, 1 the first after the batch); every other axis equal.", 0,
    .compute_mask = cat_mask};

/* ================================================================ Dot */
/* Keras 3's Dot(axes, normalize): batch_dot of two inputs over one axis of
   each (counted with the batch, negative from the end; Keras's int is both).
   As keras.layers.Dot's batch_dot: x's axis moved last and its other axes
   merged, y's axis moved to axis 1 and its other axes merged, one batched
   product [b, M, K] x [b, K, N], the merged axes split again: the output is
   x's other axes then y's (without the batch), [batch, 1] when none are
   left. normalize: each input l2-normalized along its axis first
   (ops.normalize, epsilon 1e-7). */
enum { DOT_AXES, DOT_NORMALIZE };
/* the two axes, counted with the batch, checked against the inputs' shapes */
static int dot_axes(const ld_layer *l, const ld_shape *in, int ax[2]) {
    const int64_t *a = ld_p_ints(l, DOT_AXES, NULL);
    for (int i = 0; i < 2; i++) {
        int nd = in[i].ndim + 1;
        int64_t v = a[i] < 0 ? a[i] + nd : a[i];
        if (v < 0 || v >= nd)
            return ld_fail(LD_EARG, "%s: axis %lld is out of range for input %d of %d axes (batch included)", l->name,
                           (long long)a[i], i + 1, nd);
        if (v == 0) return ld_fail(LD_EARG, "%s: axes cannot include the batch axis 0 (a product over the batch "
                                   "would mix examples)", l->name);
        ax[i] = (int)v;
    }
    if (in[0].d[ax[0] - 1] != in[1].d[ax[1] - 1]) {
        char b1[160], b2[160];
        return ld_fail(LD_ESHAPE, "%s: inputs of shapes %s and %s differ along the axes of the product (axis %d: %lld, "
                       "axis %d: %lld)", l->name, ld_layer_shape_str(&in[0], b1, sizeof b1),
                       ld_layer_shape_str(&in[1], b2, sizeof b2), ax[0], (long long)in[0].d[ax[0] - 1], ax[1],
                       (long long)in[1].d[ax[1] - 1]);
    }
    if (in[0].ndim + in[1].ndim - 1 > LD_MAX_DIMS)
        return ld_fail(LD_ESHAPE, "%s: the output would have more than %d axes", l->name, LD_MAX_DIMS);
    return LD_OK;
}
/* the output's shape after the batch: x's axes but ax[0], then y's but ax[1] */
static void dot_out(const ld_shape *in, const int ax[2], ld_shape *out) {
    out->ndim = 0;
    for (int i = 0; i < 2; i++)
        for (int a = 0; a < in[i].ndim; a++)
            if (a != ax[i] - 1) out->d[out->ndim++] = in[i].d[a];
    if (!out->ndim) out->d[out->ndim++] = 1;
}
static int dot_build(ld_layer *l, int n_in, const ld_shape *in, ld_shape *out) {
    int ax[2];
    if (dot_axes(l, in, ax)) return ld_error_status();
    dot_out(in, ax, out);
    return LD_OK;
}
/* x with axis `from` moved last (k_last: [b, rows, K], the product's left
   operand) or to axis 1 ([b, K, cols], its right one), the other axes
   merged in order */
static ld_tensor *dot_operand(ld_tensor *x, int from, int k_last) {
    int perm[LD_MAX_DIMS], k = 0, nd = x->ndim;
    perm[k++] = 0;
    if (!k_last) perm[k++] = from;
    for (int a = 1; a < nd; a++) if (a != from) perm[k++] = a;
    if (k_last) perm[k++] = from;
    int identity = 1;
    for (int a = 0; a < nd; a++) identity &= perm[a] == a;
    ld_tensor *v = identity ? ld_tensor_retain(x) : ld_permute_op(x, perm);
    ld_tensor *c = v && !identity ? ld_ops_contig(v) : ld_tensor_retain(v);
    ld_tensor_release(v);
    if (!c) return NULL;
    int64_t rest = 1, s3[3] = {x->shape[0], 0, 0};
    for (int a = 1; a < nd; a++) if (a != from) rest *= x->shape[a];
    s3[1] = k_last ? rest : x->shape[from];
    s3[2] = k_last ? x->shape[from] : rest;
    ld_tensor *y = ld_reshape_op(c, 3, s3);
    ld_tensor_release(c);
    return y;
}
static ld_tensor *dot_forward(ld_layer *l, int n, ld_tensor *const *xs, int training) {
    ld_shape in[2], out;
    int ax[2];
    if (shapes_of(l, n, xs, in) || dot_axes(l, in, ax)) return NULL;
    ld_tensor *f[2] = {NULL, NULL}, *op[2] = {NULL, NULL}, *y = NULL;
    int i = 0;
    for (; i < 2; i++) {
        ld_tensor *xf = ld_as_float(xs[i]);
        f[i] = xf && ld_p_int(l, DOT_NORMALIZE) ? ld_l2_normalize(xf, 1, &ax[i], 1e-7) : ld_tensor_retain(xf);
        ld_tensor_release(xf);
        if (!f[i] || !(op[i] = dot_operand(f[i], ax[i], i == 0))) break;
    }
    ld_tensor *p = i == 2 ? ld_bmm(op[0], op[1], 0, 0) : NULL;
    if (p) {
        int64_t s[LD_MAX_DIMS];
        dot_out(in, ax, &out);
        s[0] = p->shape[0];
        memcpy(s + 1, out.d, (size_t)out.ndim * sizeof *s);
        y = ld_reshape_op(p, out.ndim + 1, s);
    }
    for (int k = 0; k < 2; k++) { ld_tensor_release(f[k]); ld_tensor_release(op[k]); }
    ld_tensor_release(p);
    return y;
}
const ld_layer_class ld_layer_dot = {
    "Dot", "dot", NULL, {"axes"}, {LD_PINTS("axes", NULL, 2), LD_PBOOL("normalize", "false"), LD_PEND},
    2, 2, ~0u /* checked in forward */, NULL, dot_build, dot_forward,
    "nn.Dot{axes, normalize=false}\n\nlayer({x, y}): Keras's batch dot product of two inputs over one axis of each\n"
    "(axes: one number for both or {ax, ay}; counted with the batch axis, -1 the last). The output\n"
    "holds x's other axes then y's: {x [b, n], y [b, n]} with axes=1 gives [b, 1], {x [b, t, n],\n"
    "y [b, s, n]} with axes=2 gives [b, t, s]. normalize: each input scaled to unit L2 norm along its\n"
    "axis first (the cosine similarity).", 0, .compute_mask = NULL};
