/* ld_layers_core.c - the first layers: Dense, Flatten, Dropout, Conv2D,
 * MaxPool2D, Activation, Reshape (classes of ld_nn.h). */
#include "ld_nn.h"
#include "ld_replica.h"

#include <math.h>
#include <string.h>

/* ================================================================ Dense */
enum { DENSE_UNITS, DENSE_ACT, DENSE_BIAS };
static int dense_check(ld_layer *l) {
    if (ld_p_int(l, DENSE_UNITS) < 1)
        return ld_fail(LD_EARG, "Dense units must be a positive integer, got %lld", (long long)ld_p_int(l, DENSE_UNITS));
    return LD_OK;
}
static int dense_build(ld_layer *l, int n_in, const ld_shape *in, ld_shape *out) {
    if (in->ndim < 1) return ld_fail(LD_ESHAPE, "%s needs inputs with a feature axis", l->name);
    int64_t units = ld_p_int(l, DENSE_UNITS), ks[2] = {in->d[in->ndim - 1], units};
    if (!ld_layer_add_weight(l, "kernel", 2, ks, LD_INIT_GLOROT(ks[0], units), 1))
        return ld_error_status();
    if (ld_p_int(l, DENSE_BIAS) && !ld_layer_add_weight(l, "bias", 1, &units, LD_INIT_Z, 1))
        return ld_error_status();
    *out = *in;
    out->d[out->ndim - 1] = units;
    return LD_OK;
}
static ld_tensor *dense_forward(ld_layer *l, int n_in, ld_tensor *const *x, int training) {
    ld_activation a = ld_p_activation(l, DENSE_ACT);
    /* under a half policy all in its dtype, as Keras's Dense: the product's
       half result, the bias and the activation on it (ld_linear_half) */
    ld_tensor *xf = ld_as_floating(x[0]);
    ld_tensor *y = xf ? ld_linear_half(xf, ld_var(l->vars[0]), ld_p_int(l, DENSE_BIAS) ? ld_var(l->vars[1]) : NULL,
                                       a == LD_ACT_RELU) : NULL;
    ld_tensor_release(xf);
    return ld_layer_activate(a, y, 1);   /* relu folded into the product */
}
const ld_layer_class ld_layer_dense = {
    "Dense", "dense", NULL, {"units", "activation"},
    {LD_PINT("units", NULL), LD_PSTR("activation", "linear", LD_ACTIVATION_CHOICES),
     LD_PBOOL("use_bias", "true"), LD_PEND},
    1, 1, LD_FLEX_ALL_BUT_LAST /* a sequence of any length */, dense_check, dense_build, dense_forward,
    "nn.Dense(units, activation) or nn.Dense{units=, activation=, use_bias=true}\n\n"
    "A fully connected layer: activation(x @ kernel + bias) on the last axis.\n"
    "Kernel glorot_uniform, bias zeros (Keras' defaults). Activations: relu, sigmoid, tanh, softmax, gelu.\n"
    "kernel_/bias_ initializer, regularizer, constraint and activity_regularizer as Keras's.",
    LD_ROLE_BIT(LD_ROLE_KERNEL) | LD_ROLE_BIT(LD_ROLE_BIAS), .compute_mask = ld_mask_pass};

/* ================================================================ Flatten */
static int flatten_build(ld_layer *l, int n_in, const ld_shape *in, ld_shape *out) {
    int64_t n;
    if (ld_shape_numel(in->ndim, in->d, &n)) return ld_error_status();
    out->ndim = 1;
    out->d[0] = n;
    return LD_OK;
}
static ld_tensor *flatten_forward(ld_layer *l, int n_in, ld_tensor *const *xs, int training) {
    /* the width from the feature axes, not -1: a replica's share of a small
       batch may have no rows, and 0 elements fix no -1 */
    ld_tensor *x = xs[0];
    int64_t s[2] = {x->shape[0], 1};
    for (int i = 1; i < x->ndim; i++) s[1] *= x->shape[i];
    ld_tensor *f = ld_as_float(x);
    ld_tensor *y = f ? ld_reshape_op(f, 2, s) : NULL;
    ld_tensor_release(f);
    return y;
}
const ld_layer_class ld_layer_flatten = {
    "Flatten", "flatten", NULL, {NULL}, {LD_PEND}, 1, 1, 0, NULL, flatten_build, flatten_forward,
    "nn.Flatten()\n\nReshape [batch, ...] to [batch, features].", 0, .compute_mask = NULL};

/* ================================================================ Dropout */
enum { DROPOUT_RATE };
static int dropout_check(ld_layer *l) {
    double r = ld_p_float(l, DROPOUT_RATE);
    if (!(r >= 0 && r < 1)) return ld_fail(LD_EARG, "Dropout rate must be in [0, 1), got %g", r);
    return LD_OK;
}
static int same_build(ld_layer *l, int n_in, const ld_shape *in, ld_shape *out) { *out = *in; return LD_OK; }
static ld_tensor *dropout_forward(ld_layer *l, int n_in, ld_tensor *const *x, int training) {
    return training ? ld_dropout(x[0], (float)ld_p_float(l, DROPOUT_RATE), NULL) : ld_tensor_retain(x[0]);
}
const ld_layer_class ld_layer_dropout = {
    "Dropout", "dropout", NULL, {"rate"}, {LD_PFLOAT("rate", NULL), LD_PEND},
    1, 1, ~0u, dropout_check, same_build, dropout_forward,
    "nn.Dropout(rate)\n\nDuring training, zero a fraction `rate` of the inputs and scale the rest by 1/(1-rate).", 0, .compute_mask = ld_mask_pass};

/* ================================================================ Masking */
/* Keras's Masking(mask_value): the steps whose features all equal
   mask_value are masked (the output's mask: any feature differs) and set to
   0; the others pass as they are. */
enum { MASKING_VALUE };
static ld_tensor *masking_forward(ld_layer *l, int n_in, ld_tensor *const *x, int training) {
    if (x[0]->ndim < 2) {
        char b[LD_SHAPE_STR_MAX];
        ld_fail(LD_ESHAPE, "%s needs inputs [batch, ..., features]; got %s", l->name, ld_shape_str(x[0], b, sizeof b));
        return NULL;
    }
    ld_tensor *keep = ld_mask_not_equal(x[0], ld_p_float(l, MASKING_VALUE), 1), *y = NULL;
    if (!keep) return NULL;
    int64_t s[LD_MAX_DIMS];
    memcpy(s, keep->shape, sizeof(int64_t) * (size_t)keep->ndim);
    s[keep->ndim] = 1;
    ld_tensor *k1 = ld_reshape(keep, keep->ndim + 1, s);
    if (k1) y = ld_mask_select(k1, x[0], NULL);
    if (y) ld_tensor_set_mask(y, keep);
    ld_tensor_release(k1);
    ld_tensor_release(keep);
    return y;
}
const ld_layer_class ld_layer_masking = {
    "Masking", "masking", NULL, {"mask_value"}, {LD_PFLOAT("mask_value", "0.0"), LD_PEND}, 1, 1, ~0u, NULL, same_build,
    masking_forward,
    "nn.Masking{mask_value=0}\n\nKeras's Masking: over [batch, steps, features], the steps whose features all equal\n"
    "mask_value are masked: set to 0, and left out by the layers after it that take masks (LSTM, GRU,\n"
    "SimpleRNN and Bidirectional skip them, GlobalAveragePooling1D and MultiHeadAttention leave them out)\n"
    "and by the loss and compile's metrics. y.keras_mask is the mask (1: the step counts).", 0, .compute_mask = NULL};

/* ================================================================ Identity, ActivityRegularization */
static ld_tensor *identity_forward(ld_layer *l, int n_in, ld_tensor *const *x, int training) { return ld_tensor_retain(x[0]); }
const ld_layer_class ld_layer_identity = {
    "Identity", "identity", NULL, {NULL}, {LD_PEND}, 1, 1, ~0u, NULL, same_build, identity_forward,
    "nn.Identity()\n\nIts input, unchanged (Keras's placeholder layer).", 0, .compute_mask = ld_mask_pass};

/* Keras's ActivityRegularization(l1, l2): the identity, its output's
   L1L2(l1, l2) regularization (over the batch's rows) a term of the loss:
   the layer's own activity regularizer, set from its options, so that
   ld_layer_record_activity and ld_model_losses treat it as any layer's */
enum { AR_L1, AR_L2 };
static int ar_check(ld_layer *l) {
    for (int i = AR_L1; i <= AR_L2; i++) {
        double f = ld_p_float(l, i);
        if (!(f >= 0 && f < INFINITY))
            return ld_fail(LD_EARG, "ActivityRegularization %s must be a finite number >= 0, got %g", i ? "l2" : "l1", f);
    }
    if (ld_regularizer_named("L1L2", &l->wopt.activity) || ld_regularizer_set(&l->wopt.activity, "l1", ld_p_float(l, AR_L1)) ||
        ld_regularizer_set(&l->wopt.activity, "l2", ld_p_float(l, AR_L2)))
        return ld_error_status();
    return LD_OK;
}
const ld_layer_class ld_layer_activity_regularization = {
    "ActivityRegularization", "activity_regularization", NULL, {NULL},
    {LD_PFLOAT("l1", "0"), LD_PFLOAT("l2", "0"), LD_PEND},
    1, 1, ~0u, ar_check, same_build, identity_forward,
    "nn.ActivityRegularization{l1=0, l2=0}\n\nIts input, unchanged; l1 * sum|y| + l2 * sum y^2 of it, over the batch's rows, is\n"
    "added to the training loss (model.losses), as Keras's.", 0, .compute_mask = ld_mask_pass};

/* ================================================================ noise layers */
/* GaussianNoise(stddev), GaussianDropout(rate), SpatialDropout1D/2D/3D(rate):
   Keras 3's, in training only, drawn as Dropout's mask is (ld_noise_op) */
enum { NOISE_P };
static int noise_check(ld_layer *l) {
    double p = ld_p_float(l, NOISE_P);
    int gauss = l->cls == &ld_layer_gaussian_noise;
    if (gauss ? !(p >= 0 && p < INFINITY) : !(p >= 0 && p < 1))
        return ld_fail(LD_EARG, "%s %s must be %s, got %g", l->cls->class_name, gauss ? "stddev" : "rate",
                       gauss ? "finite and >= 0" : "in [0, 1)", p);
    return LD_OK;
}
/* GaussianNoise, GaussianDropout and AlphaDropout (each value dropped alone): the noise of their kind */
static ld_tensor *noise_forward(ld_layer *l, int n_in, ld_tensor *const *x, int training) {
    if (!training) return ld_tensor_retain(x[0]);
    ld_tensor *f = ld_as_floating(x[0]);
    ld_noise k = l->cls == &ld_layer_gaussian_noise ? LD_NOISE_GAUSSIAN
               : l->cls == &ld_layer_alpha_dropout ? LD_NOISE_ALPHA_DROPOUT : LD_NOISE_GAUSSIAN_DROPOUT;
    ld_tensor *y = f ? ld_noise_op(k, f, (float)ld_p_float(l, NOISE_P), f->ndim, f->shape, NULL) : NULL;
    ld_tensor_release(f);
    return y;
}
const ld_layer_class ld_layer_gaussian_noise = {
    "GaussianNoise", "gaussian_noise", NULL, {"stddev"}, {LD_PFLOAT("stddev", NULL), LD_PEND},
    1, 1, ~0u, noise_check, same_build, noise_forward,
    "nn.GaussianNoise(stddev)\n\nDuring training, add noise drawn from N(0, stddev^2) to each input (Keras's).", 0, .compute_mask = ld_mask_pass};
const ld_layer_class ld_layer_alpha_dropout = {
    "AlphaDropout", "alpha_dropout", NULL, {"rate"}, {LD_PFLOAT("rate", NULL), LD_PEND},
    1, 1, ~0u, noise_check, same_build, noise_forward,
    "nn.AlphaDropout(rate)\n\nDuring training, set a fraction `rate` of the inputs to SELU's negative saturation\n"
    "(-1.6733 * 1.0507), then a * x + b with Keras's a and b, so that the mean and variance of SELU's\n"
    "outputs stay as they were (Keras's; the dropout of self-normalizing networks).", 0, .compute_mask = ld_mask_pass};
const ld_layer_class ld_layer_gaussian_dropout = {
    "GaussianDropout", "gaussian_dropout", NULL, {"rate"}, {LD_PFLOAT("rate", NULL), LD_PEND},
    1, 1, ~0u, noise_check, same_build, noise_forward,
    "nn.GaussianDropout(rate)\n\nDuring training, multiply each input by noise drawn from N(1, rate / (1 - rate))\n"
    "(Keras's).", 0, .compute_mask = ld_mask_pass};
/* SpatialDropout: whole channels dropped, one draw per (example, channel) */
static int spatial_build(ld_layer *l, int n_in, const ld_shape *in, ld_shape *out) {
    int want = l->cls == &ld_layer_spatial_dropout1d ? 2 : l->cls == &ld_layer_spatial_dropout2d ? 3 : 4;
    if (in->ndim != want) {
        char b[160];
        return ld_fail(LD_ESHAPE, "%s needs inputs of %d axes (batch, %s, channels); got %s", l->name, want + 1,
                       want == 2 ? "steps" : want == 3 ? "height, width" : "depth, height, width",
                       ld_layer_shape_str(in, b, sizeof b));
    }
    *out = *in;
    return LD_OK;
}
static ld_tensor *spatial_forward(ld_layer *l, int n_in, ld_tensor *const *x, int training) {
    if (!training) return ld_tensor_retain(x[0]);
    int64_t ms[LD_MAX_DIMS];
    int nd = x[0]->ndim;
    for (int i = 0; i < nd; i++) ms[i] = i == 0 || i == nd - 1 ? x[0]->shape[i] : 1;
    return ld_noise_op(LD_NOISE_DROPOUT, x[0], (float)ld_p_float(l, NOISE_P), nd, ms, NULL);
}
#define SPATIAL_DROPOUT(k, name, axes)                                                                           \
    const ld_layer_class ld_layer_spatial_dropout##k = {                                                          \
        name, "spatial_dropout" #k, NULL, {"rate"}, {LD_PFLOAT("rate", NULL), LD_PEND},                           \
        1, 1, ~0u, noise_check, spatial_build, spatial_forward,                                                   \
        "nn." name "(rate)\n\nDuring training, zero whole channels of inputs [batch, " axes ", channels]: each "   \
        "example's\nchannel with probability rate, the rest scaled by 1/(1-rate) (Keras's).", 0,            \
        .compute_mask = NULL};
SPATIAL_DROPOUT(1d, "SpatialDropout1D", "steps")
SPATIAL_DROPOUT(2d, "SpatialDropout2D", "height, width")
SPATIAL_DROPOUT(3d, "SpatialDropout3D", "depth, height, width")

/* ================================================================ Conv2D */
enum { CONV_FILTERS, CONV_KSIZE, CONV_STRIDES, CONV_PADDING, CONV_ACT, CONV_BIAS, CONV_DILATION };
static int conv_check(ld_layer *l) {
    const int64_t *k = ld_p_ints(l, CONV_KSIZE, NULL), *s = ld_p_ints(l, CONV_STRIDES, NULL);
    if (ld_p_int(l, CONV_FILTERS) < 1 || k[0] < 1 || k[1] < 1 || s[0] < 1 || s[1] < 1)
        return ld_fail(LD_EARG, "Conv2D filters, kernel size and strides must be positive");
    return ld_layer_dilation_check(l, 2, ld_p_ints(l, CONV_DILATION, NULL), s);
}
static int conv_build(ld_layer *l, int n_in, const ld_shape *in, ld_shape *out) {
    if (ld_layer_need_image(l, in)) return ld_error_status();
    const int64_t *k = ld_p_ints(l, CONV_KSIZE, NULL), *s = ld_p_ints(l, CONV_STRIDES, NULL);
    int64_t f = ld_p_int(l, CONV_FILTERS), ks[4] = {k[0], k[1], in->d[2], f};
    int64_t rf = k[0] * k[1], fan_in, fan_out;
    if (__builtin_mul_overflow(rf, in->d[2], &fan_in) || __builtin_mul_overflow(rf, f, &fan_out)) {
        char b[LD_SHAPE_STR_MAX];
        return ld_fail(LD_ESHAPE, "%s: kernel shape %s is too large (its size overflows int64)", l->name,
                       ld_shape_fmt(4, ks, b, sizeof b));
    }
    if (!ld_layer_add_weight(l, "kernel", 4, ks, LD_INIT_GLOROT(fan_in, fan_out), 1))
        return ld_error_status();
    if (ld_p_int(l, CONV_BIAS) && !ld_layer_add_weight(l, "bias", 1, &f, LD_INIT_Z, 1))
        return ld_error_status();
    int same = !strcmp(ld_p_str(l, CONV_PADDING), "same");
    const int64_t *d = ld_p_ints(l, CONV_DILATION, NULL);
    out->ndim = 3;
    out->d[0] = ld_layer_out_size(in->d[0], ld_layer_dilated_size(k[0], d[0]), s[0], same);
    out->d[1] = ld_layer_out_size(in->d[1], ld_layer_dilated_size(k[1], d[1]), s[1], same);
    out->d[2] = f;
    return LD_OK;
}
static int conv_dilated(const ld_layer *l) {
    const int64_t *d = ld_p_ints(l, CONV_DILATION, NULL);
    return d[0] > 1 || d[1] > 1;
}
/* the convolution with its bias and relu (one op, ld_conv2d_bias_act) at strides s, valid or same */
static ld_tensor *conv_product(ld_layer *l, ld_tensor *x, const int64_t *s, int same) {
    return ld_conv2d_bias_act(x, ld_var(l->vars[0]), ld_p_int(l, CONV_BIAS) ? ld_var(l->vars[1]) : NULL,
                              ld_p_activation(l, CONV_ACT) == LD_ACT_RELU, (int)s[0], (int)s[1], same);
}
static ld_tensor *conv_phase(ld_layer *l, ld_tensor *x) { return conv_product(l, x, (const int64_t[]){1, 1}, 0); }
static ld_tensor *conv_forward(ld_layer *l, int n_in, ld_tensor *const *xs, int training) {
    /* one op: the convolution with its bias and relu (ld_conv2d_bias_act) */
    const int64_t *s = ld_p_ints(l, CONV_STRIDES, NULL), *k = ld_p_ints(l, CONV_KSIZE, NULL);
    const int64_t *d = ld_p_ints(l, CONV_DILATION, NULL);
    ld_activation a = ld_p_activation(l, CONV_ACT);
    const char *padding = ld_p_str(l, CONV_PADDING);
    /* a half input as it is: under a half policy the op computes in that dtype */
    ld_tensor *xf = ld_as_floating(xs[0]), *y = NULL;
    if (xf && conv_dilated(l)) {   /* over the images' phases (ld_layer_atrous) */
        y = ld_layer_atrous(l, xf, k, d, padding, conv_phase);
    } else if (xf) {
        y = conv_product(l, xf, s, !strcmp(padding, "same"));
    }
    ld_tensor_release(xf);
    return ld_layer_activate(a, y, 1);   /* relu folded into the product */
}
const ld_layer_class ld_layer_conv2d = {
    "Conv2D", "conv2d", NULL, {"filters", "kernel_size"},
    {LD_PINT("filters", NULL), LD_PINTS("kernel_size", NULL, 2), LD_PINTS("strides", "1", 2),
     LD_PSTR("padding", "valid", "valid|same"), LD_PSTR("activation", "linear", LD_ACTIVATION_CHOICES),
     LD_PBOOL("use_bias", "true"), LD_PINTS("dilation_rate", "1", 2), LD_PEND},
    1, 1, 3u /* any image size */, conv_check, conv_build, conv_forward,
    "nn.Conv2D(filters, kernel_size, {strides=1, padding=\"valid\"|\"same\", activation=, use_bias=true, dilation_rate=1})\n\n"
    "2-d convolution over NHWC images [batch, height, width, channels]; kernel HWIO.\n"
    "dilation_rate=d: the kernel's taps d apart (atrous; with strides 1, as Keras's).\n"
    "kernel_/bias_ initializer, regularizer, constraint and activity_regularizer as Keras's.",
    LD_ROLE_BIT(LD_ROLE_KERNEL) | LD_ROLE_BIT(LD_ROLE_BIAS), .compute_mask = NULL};

/* ================================================================ MaxPool2D */
enum { POOL_SIZE, POOL_STRIDES, POOL_PADDING };
static int pool_same(const ld_layer *l) { return !strcmp(ld_p_str(l, POOL_PADDING), "same"); }
static int pool_check(ld_layer *l) {
    int n;
    const int64_t *k = ld_p_ints(l, POOL_SIZE, NULL), *s = ld_p_ints(l, POOL_STRIDES, &n);
    if (k[0] < 1 || k[1] < 1 || (n && (s[0] < 1 || s[1] < 1))) return ld_fail(LD_EARG, "MaxPool2D sizes must be positive");
    return LD_OK;
}
static int pool_build(ld_layer *l, int n_in, const ld_shape *in, ld_shape *out) {
    if (ld_layer_need_image(l, in)) return ld_error_status();
    const int64_t *k = ld_p_ints(l, POOL_SIZE, NULL), *s = ld_layer_pool_strides(l, POOL_SIZE, POOL_STRIDES);
    *out = *in;
    out->d[0] = ld_layer_out_size(in->d[0], k[0], s[0], pool_same(l));
    out->d[1] = ld_layer_out_size(in->d[1], k[1], s[1], pool_same(l));
    return LD_OK;
}
static ld_tensor *pool_forward(ld_layer *l, int n_in, ld_tensor *const *x, int training) {
    const int64_t *k = ld_p_ints(l, POOL_SIZE, NULL), *s = ld_layer_pool_strides(l, POOL_SIZE, POOL_STRIDES);
    return (pool_same(l) ? ld_maxpool2d_same : ld_maxpool2d)(x[0], (int)k[0], (int)k[1], (int)s[0], (int)s[1]);
}
const ld_layer_class ld_layer_max_pooling2d = {
    "MaxPool2D", "max_pooling2d", "MaxPooling2D", {"pool_size"},
    {LD_PINTS("pool_size", "2", 2), LD_PINTS("strides", "", 2), LD_PSTR("padding", "valid", "valid|same"), LD_PEND},
    1, 1, 3u, pool_check, pool_build, pool_forward,
    "nn.MaxPool2D(pool_size=2, {strides=pool_size, padding=\"valid\"|\"same\"})\n\nMaximum over windows of NHWC images "
    "(same: TF's padding, never the maximum; nn.MaxPooling2D is the same).", 0, .compute_mask = NULL};

/* ================================================================ Conv2D + MaxPool2D */
/* The pair as one op: the convolution's output is pooled image by image
   from cache (ld_conv2d_pool), never written whole; the same values and
   gradients as the two layers one after the other. Once both are built, for
   a float input on the CPU that the Conv2D takes, both layers of one policy:
   under a half one through Keras's autocast, as the Conv2D's own call (the
   pooling of a half output is exact, so the pair's output is the second
   layer's). */
static ld_tensor *conv_pool_forward(ld_layer *a, void *ctx, ld_tensor *const *x, int training) {
    ld_layer *b = ctx;
    ld_activation act = ld_p_activation(a, CONV_ACT);
    const int64_t *s = ld_p_ints(a, CONV_STRIDES, NULL), *pk = ld_p_ints(b, POOL_SIZE, NULL),
                  *ps = ld_layer_pool_strides(b, POOL_SIZE, POOL_STRIDES);
    return ld_conv2d_pool(x[0], ld_var(a->vars[0]), ld_p_int(a, CONV_BIAS) ? ld_var(a->vars[1]) : NULL,
                          act == LD_ACT_RELU, (int)s[0], (int)s[1], !strcmp(ld_p_str(a, CONV_PADDING), "same"),
                          (int)pk[0], (int)pk[1], (int)ps[0], (int)ps[1]);
}

int ld_layer_pair_forward(ld_layer *a, ld_layer *b, ld_tensor *x, int training, ld_tensor **y) {
    if (a->cls != &ld_layer_conv2d || b->cls != &ld_layer_max_pooling2d || !a->built || !b->built) return 0;
    training = training > 0;   /* LD_TRAINING_DEFAULT: both classes' default is inference */
    if (pool_same(b)) return 0;   /* the fused kernel pools valid windows */
    if (conv_dilated(a)) return 0;   /* a dilated one runs over the phases (ld_layer_atrous) */
    if (a->wopt.activity.class_name[0]) return 0;   /* its own output is regularized: run it alone */
    if (a->policy.compute != b->policy.compute) return 0;
    ld_activation act = ld_p_activation(a, CONV_ACT);
    if (act != LD_ACT_NONE && act != LD_ACT_RELU) return 0;
    if (x->ndim != 4 || !ld_dtype_is_float(x->dtype) || x->storage->device->kind != LD_DEV_CPU ||
        a->in[0].ndim != 3 || x->shape[3] != a->in[0].d[2])
        return 0;
    *y = a->policy.compute == LD_F32 && x->dtype == LD_F32 ? conv_pool_forward(a, b, &x, training)
                                                          : ld_layer_autocast_call(a, 1, &x, training, conv_pool_forward, b);
    return 1;
}

/* ================================================================ Activation */
enum { ACT_ACT };
static ld_tensor *act_forward(ld_layer *l, int n_in, ld_tensor *const *x, int training) {
    return ld_activate(ld_p_activation(l, ACT_ACT), x[0]);
}
const ld_layer_class ld_layer_activation = {
    "Activation", "activation", NULL, {"activation"},
    {LD_PSTR("activation", NULL, LD_ACTIVATION_CHOICES), LD_PEND},
    1, 1, ~0u, NULL, same_build, act_forward,
    "nn.Activation(name)\n\nApply an activation, by Keras's name: relu, sigmoid, tanh, softmax, gelu, elu, selu,\n"
    "softplus, softsign, silu (swish), leaky_relu, relu6, hard_sigmoid, hard_silu (hard_swish), mish,\n"
    "exponential, log_softmax, linear. Dense, Conv1D/2D, LSTM and GRU take the same names.", 0, .compute_mask = ld_mask_pass};

/* ================================================================ Softmax */
enum { SOFTMAX_AXIS };
/* With a mask (its input's), Keras's: the mask broadcast against the input
   (aligned at the last axis; an error where it cannot be), the masked
   positions -1e9 (-3e4 in float16) before the softmax and 0 after it */
static ld_tensor *softmax_forward(ld_layer *l, int n_in, ld_tensor *const *x, int training) {
    ld_tensor *m = x[0]->keras_mask;
    int axis = (int)ld_p_int(l, SOFTMAX_AXIS);
    if (!m) return ld_softmax_axis(x[0], axis, 0);
    int ok = m->ndim <= x[0]->ndim;
    for (int i = 1; ok && i <= m->ndim; i++) {
        int64_t a = m->shape[m->ndim - i], b = x[0]->shape[x[0]->ndim - i];
        ok = a == 1 || a == b;
    }
    if (!ok) {
        char b1[LD_SHAPE_STR_MAX], b2[LD_SHAPE_STR_MAX];
        ld_fail(LD_ESHAPE, "%s: its input's mask %s does not broadcast to the input %s (Keras's Softmax: each mask axis, "
                "from the last, 1 or the input's)", l->name, ld_shape_str(m, b1, sizeof b1), ld_shape_str(x[0], b2, sizeof b2));
        return NULL;
    }
    ld_tensor *neg = ld_tensor_full(x[0]->dtype, 0, NULL, x[0]->dtype == LD_F16 ? -3e4 : -1e9, x[0]->storage->device);
    ld_tensor *w = neg ? ld_where(m, x[0], neg) : NULL, *s = w ? ld_softmax_axis(w, axis, 0) : NULL;
    ld_tensor *y = s ? ld_mask_select(m, s, NULL) : NULL;
    ld_tensor_release(neg); ld_tensor_release(w); ld_tensor_release(s);
    return y;
}
const ld_layer_class ld_layer_softmax = {
    "Softmax", "softmax", NULL, {"axis"},
    {LD_PINT("axis", "-1"), LD_PEND},
    1, 1, ~0u, NULL, same_build, softmax_forward,
    "nn.Softmax({axis=-1}) or nn.Softmax(axis)\n\nSoftmax over an axis of its input (Keras's Softmax layer; the axis counts the batch\n"
    "axis, as Keras's does): nn.Activation(\"softmax\") is the same over the last one. Given a mask\n"
    "(nn.Softmax()(scores, {mask = m}), or its input's), as Keras's: masked positions weigh 0.", 0,
    .compute_mask = ld_mask_pass};

/* ================================================================ LeakyReLU, ELU, PReLU */
/* Keras's activation layers with a parameter: relu(x) + p * n(x), n(x) the
   negative part min(x, 0) (or e^min(x, 0) - 1 for ELU). NaN and +-inf come
   out as TF's: relu(-inf) = 0 and min(inf, 0) = 0 leave no 0 * inf; the
   gradient at 0 is p's side, as TF's LeakyReluGrad. */
/* a scalar of x's dtype on its device */
static ld_tensor *scalar_like(ld_tensor *x, double v) { return ld_tensor_full(x->dtype, 0, NULL, v, x->storage->device); }
static ld_tensor *neg_part(ld_tensor *x) {
    ld_tensor *zero = scalar_like(x, 0.0);
    ld_tensor *m = zero ? ld_minimum(x, zero) : NULL;
    ld_tensor_release(zero);
    return m;
}
/* relu(x) + n scaled: by the number s, or elementwise by the tensor p */
static ld_tensor *relu_plus(ld_tensor *x, ld_tensor *n, double s, ld_tensor *p) {
    ld_tensor *r = n ? ld_relu(x) : NULL, *q = r ? (p ? ld_mul(n, p) : ld_mul_scalar(n, (float)s)) : NULL;
    ld_tensor *y = q ? ld_add(r, q) : NULL;
    ld_tensor_release(r); ld_tensor_release(q);
    return y;
}
enum { LEAKY_SLOPE };
static int leaky_check(ld_layer *l) {
    double s = ld_p_float(l, LEAKY_SLOPE);
    if (!(s >= 0)) return ld_fail(LD_EARG, "LeakyReLU negative_slope must be 0 or more, got %g", s);
    return LD_OK;
}
/* TF's leaky_relu(x, s): x where x > 0, else s * x (the gradient at 0 s's) */
static ld_tensor *leaky(ld_tensor *x, double s) {
    if (s == 0) return ld_relu(x);
    ld_tensor *n = neg_part(x), *y = n ? relu_plus(x, n, s, NULL) : NULL;
    ld_tensor_release(n);
    return y;
}
static ld_tensor *leaky_forward(ld_layer *l, int n_in, ld_tensor *const *xs, int training) {
    ld_tensor *x = ld_as_floating(xs[0]), *y = x ? leaky(x, ld_p_float(l, LEAKY_SLOPE)) : NULL;
    ld_tensor_release(x);
    return y;
}
const ld_layer_class ld_layer_leaky_relu = {
    "LeakyReLU", "leaky_re_lu", NULL, {"negative_slope"},
    {LD_PFLOAT("negative_slope", "0.3"), LD_PEND},
    1, 1, ~0u, leaky_check, same_build, leaky_forward,
    "nn.LeakyReLU({negative_slope=0.3})\n\nx where x >= 0, else negative_slope * x (Keras's layer; its default slope is 0.3,\n"
    "the leaky_relu activation's 0.2).", 0, .compute_mask = ld_mask_pass};

/* ReLU{max_value, negative_slope, threshold}: Keras 3's ReLU layer, op for
   op as keras.activations.relu (ReLU.static_call), so its values and
   gradients are TF's: with a slope but neither max_value nor threshold,
   leaky_relu; else x where x > threshold (else 0) or relu(x) (relu6 when
   max_value is 6), clipped to [0, max_value] when one is given, minus
   negative_slope * relu(threshold - x). */
enum { RELU_MAX, RELU_SLOPE, RELU_THRESHOLD };
static int relu_check(ld_layer *l) {
    double m = ld_p_float(l, RELU_MAX), s = ld_p_float(l, RELU_SLOPE), t = ld_p_float(l, RELU_THRESHOLD);
    if (m < 0) return ld_fail(LD_EARG, "ReLU max_value cannot be negative, got %g", m);
    if (!(s >= 0 && s < INFINITY)) return ld_fail(LD_EARG, "ReLU negative_slope must be a number >= 0, got %g", s);
    if (!(t >= 0 && t < INFINITY)) return ld_fail(LD_EARG, "ReLU threshold must be a number >= 0, got %g", t);
    return LD_OK;
}
static ld_tensor *relu_forward(ld_layer *l, int n_in, ld_tensor *const *xs, int training) {
    double m = ld_p_float(l, RELU_MAX), s = ld_p_float(l, RELU_SLOPE), t = ld_p_float(l, RELU_THRESHOLD);
    int clip = m == m;                                  /* max_value given (None is NaN) */
    ld_tensor *x = ld_as_floating(xs[0]);
    if (!x || (s != 0 && !clip && t == 0)) {
        ld_tensor *y = x ? leaky(x, s) : NULL;
        ld_tensor_release(x);
        return y;
    }
    ld_tensor *neg = NULL, *y = NULL;
    if (s != 0) {                                       /* relu(-x + threshold) */
        ld_tensor *nx = ld_neg(x), *sh = nx && t != 0 ? ld_add_scalar(nx, (float)t) : ld_tensor_retain(nx);
        neg = sh ? ld_relu(sh) : NULL;
        ld_tensor_release(nx); ld_tensor_release(sh);
        if (!neg) goto done;
    }
    if (t != 0) {                                       /* where(x > threshold, x, 0) */
        ld_tensor *th = scalar_like(x, t), *gt = th ? ld_binary(LD_BIN_GT, x, th) : NULL;
        ld_tensor *zero = gt ? scalar_like(x, 0) : NULL;
        y = zero ? ld_where(gt, x, zero) : NULL;
        ld_tensor_release(th); ld_tensor_release(gt); ld_tensor_release(zero);
    } else if (m == 6) {
        y = ld_unary(LD_UN_RELU6, x);
        clip = 0;
    } else y = ld_relu(x);
    if (y && clip) {
        ld_tensor *lo = scalar_like(y, 0), *hi = lo ? scalar_like(y, m) : NULL;
        ld_tensor *c = hi ? ld_clip_by_value(y, lo, hi) : NULL;
        ld_tensor_release(lo); ld_tensor_release(hi); ld_tensor_release(y);
        y = c;
    }
    if (y && neg) {
        ld_tensor *q = ld_mul_scalar(neg, (float)s), *d = q ? ld_sub(y, q) : NULL;
        ld_tensor_release(q); ld_tensor_release(y);
        y = d;
    }
done:
    ld_tensor_release(x); ld_tensor_release(neg);
    return y;
}
const ld_layer_class ld_layer_re_lu = {
    "ReLU", "re_lu", NULL, {NULL},
    {LD_PFLOAT("max_value", ""), LD_PFLOAT("negative_slope", "0"), LD_PFLOAT("threshold", "0"), LD_PEND},
    1, 1, ~0u, relu_check, same_build, relu_forward,
    "nn.ReLU{max_value=nil, negative_slope=0, threshold=0}\n\nKeras's ReLU layer: x where x > threshold, else\n"
    "negative_slope * (x - threshold); capped at max_value when one is given (no cap: nil); each option\n"
    ">= 0. With the defaults, relu.", 0, .compute_mask = ld_mask_pass};

enum { ELU_ALPHA };
static ld_tensor *elu_forward(ld_layer *l, int n_in, ld_tensor *const *xs, int training) {
    double alpha = ld_p_float(l, ELU_ALPHA);
    ld_tensor *x = ld_as_floating(xs[0]);
    if (!x || alpha == 1) { ld_tensor *y = x ? ld_unary(LD_UN_ELU, x) : NULL; ld_tensor_release(x); return y; }
    ld_tensor *n = neg_part(x), *e = n ? ld_exp(n) : NULL, *em1 = e ? ld_add_scalar(e, -1.0f) : NULL;
    ld_tensor *y = em1 ? relu_plus(x, em1, alpha, NULL) : NULL;
    ld_tensor_release(x); ld_tensor_release(n); ld_tensor_release(e); ld_tensor_release(em1);
    return y;
}
const ld_layer_class ld_layer_elu = {
    "ELU", "elu", NULL, {"alpha"},
    {LD_PFLOAT("alpha", "1.0"), LD_PEND},
    1, 1, ~0u, NULL, same_build, elu_forward,
    "nn.ELU({alpha=1.0})\n\nx where x > 0, else alpha * (e^x - 1) (Keras's layer).", 0, .compute_mask = ld_mask_pass};

enum { PRELU_SHARED };
static int prelu_build(ld_layer *l, int n_in, const ld_shape *in, ld_shape *out) {
    /* alpha: one per element of a sample, shared along shared_axes (Keras's, from 1: the batch is 0) */
    ld_shape a = *in;
    int n;
    const int64_t *shared = ld_p_ints(l, PRELU_SHARED, &n);
    for (int i = 0; i < n; i++) {
        if (shared[i] < 1 || shared[i] > in->ndim)
            return ld_fail(LD_EARG, "%s: shared_axes %lld is not an axis of its inputs (1 to %d)", l->name,
                           (long long)shared[i], in->ndim);
        a.d[shared[i] - 1] = 1;
    }
    if (!ld_layer_add_weight(l, "alpha", a.ndim, a.d, (ld_init){LD_INIT_ZEROS}, 1)) return ld_error_status();
    *out = *in;
    return LD_OK;
}
static ld_tensor *prelu_forward(ld_layer *l, int n_in, ld_tensor *const *xs, int training) {
    ld_tensor *x = ld_as_floating(xs[0]), *n = x ? neg_part(x) : NULL;
    ld_tensor *alpha = ld_var(l->vars[0]), *ac = NULL;
    if (n && alpha->dtype != n->dtype) ac = ld_cast_op(alpha, n->dtype);   /* a half policy's compute dtype */
    ld_tensor *y = n && (ac || alpha->dtype == n->dtype) ? relu_plus(x, n, 0, ac ? ac : alpha) : NULL;
    ld_tensor_release(x); ld_tensor_release(n); ld_tensor_release(ac);
    return y;
}
const ld_layer_class ld_layer_p_re_lu = {
    "PReLU", "p_re_lu", NULL, {NULL},
    {LD_PINTS("shared_axes", "", 0), LD_PEND},
    1, 1, 0u, NULL, prelu_build, prelu_forward,
    "nn.PReLU({shared_axes={...}})\n\nx where x >= 0, else alpha * x, alpha a weight learned per element of a sample (zeros\n"
    "at first), shared along shared_axes (from 1, as Keras's: {1, 2} for one alpha per channel of images).", 0, .compute_mask = ld_mask_pass};

/* ================================================================ Rescaling */
enum { RESCALE_SCALE, RESCALE_OFFSET };
static ld_tensor *rescale_forward(ld_layer *l, int n_in, ld_tensor *const *x, int training) {
    ld_device *d = x[0]->storage->device;
    ld_tensor *s = ld_tensor_full(LD_F32, 0, NULL, ld_p_float(l, RESCALE_SCALE), d);
    ld_tensor *o = s ? ld_tensor_full(LD_F32, 0, NULL, ld_p_float(l, RESCALE_OFFSET), d) : NULL;
    ld_tensor *xs = o ? ld_mul(x[0], s) : NULL;        /* integers (uint8 images) become float32 */
    ld_tensor *y = xs ? ld_add(xs, o) : NULL;
    ld_tensor_release(s); ld_tensor_release(o); ld_tensor_release(xs);
    return y;
}
const ld_layer_class ld_layer_rescaling = {
    "Rescaling", "rescaling", NULL, {"scale", "offset"},
    {LD_PFLOAT("scale", NULL), LD_PFLOAT("offset", "0"), LD_PEND},
    1, 1, ~0u, NULL, same_build, rescale_forward,
    "nn.Rescaling(scale, {offset=0})\n\nx * scale + offset, as float32 (Keras's Rescaling): nn.Rescaling(1/255) maps\n"
    "images from 0..255 to 0..1.", 0, .compute_mask = ld_mask_pass};

/* ================================================================ Reshape */
enum { RESHAPE_TARGET };
static int reshape_check(ld_layer *l) {
    int n, infer;
    int64_t known;
    const int64_t *t = ld_p_ints(l, RESHAPE_TARGET, &n);
    if (n < 1 || n >= LD_MAX_DIMS) return ld_fail(LD_EARG, "Reshape target must have 1 to %d dimensions", LD_MAX_DIMS - 1);
    return ld_shape_target(n, t, &infer, &known);   /* t:reshape's rules and messages */
}
static int reshape_build(ld_layer *l, int n_in, const ld_shape *in, ld_shape *out) {
    int n, infer;
    int64_t numel, known;
    const int64_t *t = ld_p_ints(l, RESHAPE_TARGET, &n);
    if (ld_shape_numel(in->ndim, in->d, &numel) || ld_shape_target(n, t, &infer, &known)) return ld_error_status();
    out->ndim = n;
    memcpy(out->d, t, (size_t)n * sizeof *t);
    if (infer >= 0 && known > 0) { out->d[infer] = numel / known; known *= out->d[infer]; }
    if (known != numel)
        return ld_fail(LD_ESHAPE, "%s cannot reshape %lld features into the target shape", l->name, (long long)numel);
    return LD_OK;
}
static ld_tensor *reshape_forward(ld_layer *l, int n_in, ld_tensor *const *xs, int training) {
    int64_t s[LD_MAX_DIMS];
    s[0] = xs[0]->shape[0];
    memcpy(s + 1, l->out.d, (size_t)l->out.ndim * sizeof *s);
    return ld_reshape_op(xs[0], l->out.ndim + 1, s);
}
const ld_layer_class ld_layer_reshape = {
    "Reshape", "reshape", NULL, {"target_shape"}, {LD_PINTS("target_shape", NULL, 0), LD_PEND},
    1, 1, 0, reshape_check, reshape_build, reshape_forward,
    "nn.Reshape{d1, d2, ...}\n\nReshape each example (the batch axis is kept); one entry may be -1.", 0, .compute_mask = NULL};

/* ================================================================ Weights */
/* The own weights of a subclassed model (its add_weight, the Variables
   assigned to its fields): a layer that only holds them, among the model's
   layers so that training, saving and the strategies see them as any
   layer's. Never called. */
static ld_tensor *weights_forward(ld_layer *l, int n_in, ld_tensor *const *x, int training) {
    ld_fail(LD_EARG, "%s holds a model's own weights; it is not a layer to call", l->name);
    return NULL;
}
const ld_layer_class ld_layer_weights = {
    "Weights", "weights", NULL, {NULL}, {LD_PEND},
    1, 1, ~0u, NULL, same_build, weights_forward,
    "The weights a subclassed model made itself (model:add_weight, a tensor.Variable assigned to a field),\n"
    "held for it: they train, save and mirror as a layer's.", 0, .compute_mask = NULL};
