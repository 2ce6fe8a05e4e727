/* ld_layers_norm.c - BatchNormalization and LayerNormalization (classes of
 * ld_nn.h), Keras 3's arguments, defaults and variables; the ops are
 * ld_ops_norm.h's. Both normalize the last axis only. */
#include "ld_nn.h"
#include "ld_ops_norm.h"
#include "ld_replica.h"

#include <stdio.h>

/* axis: -1, or the last axis counted with the batch (3 for NHWC images) */
static int check_axis(const ld_layer *l, int64_t axis) {
    if (axis == -1 || axis >= 1) return LD_OK;
    return ld_fail(LD_EARG, "%s: only the last axis (axis=-1) is supported, got axis=%lld", l->cls->class_name,
                   (long long)axis);
}
static int build_axis(const ld_layer *l, int64_t axis, const ld_shape *in) {
    char b[160];
    if (in->ndim < 1)
        return ld_fail(LD_ESHAPE, "%s needs inputs with a feature axis; got inputs of shape %s", l->name,
                       ld_layer_shape_str(in, b, sizeof b));
    if (axis != -1 && axis != in->ndim)
        return ld_fail(LD_EARG, "%s: only the last axis (axis=-1) is supported, got axis=%lld for inputs of shape %s",
                       l->name, (long long)axis, ld_layer_shape_str(in, b, sizeof b));
    return LD_OK;
}

/* ================================================================ BatchNormalization */
enum { BN_AXIS, BN_MOMENTUM, BN_EPS, BN_CENTER, BN_SCALE, BN_SYNC };
static int bn_check(ld_layer *l) {
    if (check_axis(l, ld_p_int(l, BN_AXIS))) return ld_error_status();
    double m = ld_p_float(l, BN_MOMENTUM), e = ld_p_float(l, BN_EPS);
    if (!(m >= 0 && m <= 1)) return ld_fail(LD_EARG, "BatchNormalization momentum must be in [0, 1], got %g", m);
    if (!(e >= 0)) return ld_fail(LD_EARG, "BatchNormalization epsilon must be >= 0, got %g", e);
    return LD_OK;
}
static int bn_build(ld_layer *l, int n_in, const ld_shape *in, ld_shape *out) {
    if (build_axis(l, ld_p_int(l, BN_AXIS), in)) return ld_error_status();
    int64_t c = in->d[in->ndim - 1];
    /* Keras's order: gamma, beta, moving_mean, moving_variance */
    if (ld_p_int(l, BN_SCALE) && !ld_layer_add_weight(l, "gamma", 1, &c, (ld_init){LD_INIT_ONES, 0, 0}, 1))
        return ld_error_status();
    if (ld_p_int(l, BN_CENTER) && !ld_layer_add_weight(l, "beta", 1, &c, (ld_init){LD_INIT_ZEROS, 0, 0}, 1))
        return ld_error_status();
    if (!ld_layer_add_weight(l, "moving_mean", 1, &c, (ld_init){LD_INIT_ZEROS, 0, 0}, 0) ||
        !ld_layer_add_weight(l, "moving_variance", 1, &c, (ld_init){LD_INIT_ONES, 0, 0}, 0))
        return ld_error_status();
    *out = *in;
    return LD_OK;
}
static ld_tensor *bn_forward(ld_layer *l, int n_in, ld_tensor *const *xs, int training) {
    int k = 0;
    ld_tensor *gamma = ld_p_int(l, BN_SCALE) ? ld_var(l->vars[k++]) : NULL;
    ld_tensor *beta = ld_p_int(l, BN_CENTER) ? ld_var(l->vars[k++]) : NULL;
    ld_tensor *mm = ld_var(l->vars[k]), *mv = ld_var(l->vars[k + 1]);
    /* a half input as it is: the kernels widen it, compute in float32 (the
       statistics in double) and round y once, as Keras's cast to float32
       and back, without those two passes each way */
    ld_tensor *xf = ld_as_floating(xs[0]);
    ld_tensor *y = xf ? ld_batch_norm(xf, gamma, beta, mm, mv, (float)ld_p_float(l, BN_MOMENTUM),
                                      (float)ld_p_float(l, BN_EPS), training && !l->frozen /* Keras 3: a frozen
                                      BatchNormalization normalizes by its moving statistics */,
                                      (int)ld_p_int(l, BN_SYNC)) : NULL;
    ld_tensor_release(xf);
    return y;
}
const ld_layer_class ld_layer_batch_normalization = {
    "BatchNormalization", "batch_normalization", NULL, {"axis"},
    {LD_PINT("axis", "-1"), LD_PFLOAT("momentum", "0.99"), LD_PFLOAT("epsilon", "0.001"), LD_PBOOL("center", "true"),
     LD_PBOOL("scale", "true"), LD_PBOOL("synchronized", "false"), LD_PEND},
    1, 1, LD_FLEX_ALL_BUT_LAST /* images of any size */, bn_check, bn_build, bn_forward,
    "nn.BatchNormalization{momentum=0.99, epsilon=0.001, center=true, scale=true, synchronized=false}\n\n"
    "Normalize each channel (the last axis): in training by the batch's mean and variance, updating\n"
    "moving_mean / moving_variance (moving = moving * momentum + batch * (1 - momentum)); in inference\n"
    "by the moving statistics. Then * gamma + beta. synchronized: statistics of the global batch of\n"
    "a distribution strategy's replicas.", 0};

/* ================================================================ LayerNormalization */
enum { LN_AXIS, LN_EPS, LN_CENTER, LN_SCALE };
static int ln_check(ld_layer *l) {
    if (check_axis(l, ld_p_int(l, LN_AXIS))) return ld_error_status();
    double e = ld_p_float(l, LN_EPS);
    if (!(e >= 0)) return ld_fail(LD_EARG, "LayerNormalization epsilon must be >= 0, got %g", e);
    return LD_OK;
}
static int ln_build(ld_layer *l, int n_in, const ld_shape *in, ld_shape *out) {
    if (build_axis(l, ld_p_int(l, LN_AXIS), in)) return ld_error_status();
    int64_t c = in->d[in->ndim - 1];
    if (ld_p_int(l, LN_SCALE) && !ld_layer_add_weight(l, "gamma", 1, &c, (ld_init){LD_INIT_ONES, 0, 0}, 1))
        return ld_error_status();
    if (ld_p_int(l, LN_CENTER) && !ld_layer_add_weight(l, "beta", 1, &c, (ld_init){LD_INIT_ZEROS, 0, 0}, 1))
        return ld_error_status();
    *out = *in;
    return LD_OK;
}
static ld_tensor *ln_forward(ld_layer *l, int n_in, ld_tensor *const *xs, int training) {
    int k = 0;
    ld_tensor *gamma = ld_p_int(l, LN_SCALE) ? ld_var(l->vars[k++]) : NULL;
    ld_tensor *beta = ld_p_int(l, LN_CENTER) ? ld_var(l->vars[k]) : NULL;
    /* a half input as it is: the kernel widens it and rounds y to the
       compute dtype (one pass, where casts made two more each way) */
    ld_tensor *xf = ld_as_floating(xs[0]);
    ld_tensor *y = xf ? ld_layer_norm(xf, gamma, beta, (float)ld_p_float(l, LN_EPS)) : NULL;
    ld_tensor_release(xf);
    return y;
}
const ld_layer_class ld_layer_layer_normalization = {
    "LayerNormalization", "layer_normalization", NULL, {"axis"},
    {LD_PINT("axis", "-1"), LD_PFLOAT("epsilon", "0.001"), LD_PBOOL("center", "true"), LD_PBOOL("scale", "true"),
     LD_PEND},
    1, 1, LD_FLEX_ALL_BUT_LAST, ln_check, ln_build, ln_forward,
    "nn.LayerNormalization{epsilon=0.001, center=true, scale=true}\n\n"
    "Normalize each example over the last axis (mean 0, variance 1), then * gamma + beta.", 0};
