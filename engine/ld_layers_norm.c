/* ld_layers_norm.c - BatchNormalization, LayerNormalization,
 * GroupNormalization and UnitNormalization (classes of ld_nn.h), Keras 3's
 * arguments, defaults and variables; the first two are ld_ops_norm.h's fused
 * ops, the last two compositions of the engine's reductions (ld_reduce_axes).
 * The first three normalize the last axis only. */
#include "ld_nn.h"
#include "ld_ops.h"
#include "ld_ops_norm.h"
#include "ld_replica.h"

#include <stdio.h>
#include <string.h>

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
/* Keras's BatchNormalization in training over masked inputs (_moments with
   a mask): the mean and biased variance of the rows the mask keeps (sums
   over count + 1e-7, Keras's), in float32; every row normalized by them;
   the moving statistics updated from them as the unmasked op does. Local to
   the replica even when synchronized, as Keras's masked moments are. */
static ld_tensor *bn_masked(ld_layer *l, ld_tensor *x, ld_tensor *mask, ld_tensor *gamma, ld_tensor *beta, ld_tensor *mm,
                            ld_tensor *mv) {
    char b1[LD_SHAPE_STR_MAX], b2[LD_SHAPE_STR_MAX];
    int64_t c = x->shape[x->ndim - 1], rows = c ? ld_tensor_numel(x) / c : 0;
    if (mask->ndim != x->ndim - 1 || memcmp(mask->shape, x->shape, sizeof(int64_t) * (size_t)mask->ndim)) {
        ld_fail(LD_ESHAPE, "%s: the mask should have one axis less than the inputs (Keras's): a mask %s for inputs %s",
                l->name, ld_shape_str(mask, b1, sizeof b1), ld_shape_str(x, b2, sizeof b2));
        return NULL;
    }
    float momentum = (float)ld_p_float(l, BN_MOMENTUM);
    int64_t xs2[2] = {rows, c}, ms2[2] = {rows, 1};
    ld_tensor *t[20] = {0}, *y = NULL;
    int i = 0;
#define T(e) if (!(t[i++] = (e))) goto out
    T(ld_as_float(x));
    T(ld_reshape_op(t[0], 2, xs2));                       /* 1: x [rows, c] */
    T(ld_reshape(mask, 2, ms2));                          /* 2: the mask [rows, 1] */
    T(ld_mask_select(t[2], t[1], NULL));                  /* 3: the kept rows */
    T(ld_sum(t[2], LD_ALL_AXES, 0));                      /* 4: their count */
    T(ld_add_scalar(t[4], 1e-7f));                        /* 5 */
    T(ld_sum(t[3], 0, 0));                                /* 6 */
    T(ld_div(t[6], t[5]));                                /* 7: the mean [c] */
    T(ld_sub(t[1], t[7]));                                /* 8 */
    T(ld_mask_select(t[2], t[8], NULL));                  /* 9 */
    T(ld_mul(t[9], t[9]));                                /* 10 */
    T(ld_sum(t[10], 0, 0));                               /* 11 */
    T(ld_div(t[11], t[5]));                               /* 12: the variance [c] */
    T(ld_add_scalar(t[12], (float)ld_p_float(l, BN_EPS)));/* 13 */
    T(ld_pow_scalar(t[13], -0.5f));                       /* 14 */
    T(ld_mul(t[8], t[14]));                               /* 15: normalized */
    T(gamma ? ld_mul(t[15], gamma) : ld_tensor_retain(t[15]));
    T(beta ? ld_add(t[16], beta) : ld_tensor_retain(t[16]));
    T(ld_reshape_op(t[17], x->ndim, x->shape));           /* 18 */
    y = x->dtype == LD_F32 ? ld_tensor_retain(t[18]) : ld_cast_op(t[18], x->dtype);
    /* moving = moving * momentum + statistic * (1 - momentum), off the tape */
    for (int s = 0; y && s < 2; s++) {
        ld_tensor *st = ld_stop_gradient(s ? t[12] : t[7]), *a = NULL, *b = NULL, *u = NULL;
        ld_tensor *mov = s ? mv : mm;
        if (st && (a = ld_mul_scalar(mov, momentum)) && (b = ld_mul_scalar(st, 1.0f - momentum)) && (u = ld_add(a, b)) &&
            ld_copy_into(mov, u) == LD_OK) {
        } else { ld_tensor_release(y); y = NULL; }
        ld_tensor_release(st); ld_tensor_release(a); ld_tensor_release(b); ld_tensor_release(u);
    }
#undef T
out:
    for (int j = 0; j < 20; j++) ld_tensor_release(t[j]);
    return y;
}
static ld_tensor *bn_forward(ld_layer *l, int n_in, ld_tensor *const *xs, int training) {
    int k = 0;
    ld_tensor *gamma = ld_p_int(l, BN_SCALE) ? ld_var(l->vars[k++]) : NULL;
    ld_tensor *beta = ld_p_int(l, BN_CENTER) ? ld_var(l->vars[k++]) : NULL;
    ld_tensor *mm = ld_var(l->vars[k]), *mv = ld_var(l->vars[k + 1]);
    if (xs[0]->keras_mask && training && !l->frozen) return bn_masked(l, xs[0], xs[0]->keras_mask, gamma, beta, mm, mv);
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
    "a distribution strategy's replicas. With a mask (Embedding's mask_zero, Masking), training takes\n"
    "the statistics of the steps that count, as Keras's (the replica's own, even when synchronized).", 0,
    .compute_mask = ld_mask_pass};

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
    "Normalize each example over the last axis (mean 0, variance 1), then * gamma + beta.", 0, .compute_mask = ld_mask_pass};

/* ================================================================ GroupNormalization */
/* Keras 3's: the channels in `groups` groups (-1: one per channel, instance
   normalization), each example normalized over its group's channels and
   every other axis but the batch, in float32; then * gamma + beta per
   channel, in Keras's order of operations: x * (rsqrt(var + eps) * gamma) +
   (beta - mean * rsqrt(var + eps) * gamma), var the population variance. */
enum { GN_GROUPS, GN_AXIS, GN_EPS, GN_CENTER, GN_SCALE };
static int gn_check(ld_layer *l) {
    int64_t g = ld_p_int(l, GN_GROUPS);
    if (g <= 0 && g != -1)
        return ld_fail(LD_EARG, "GroupNormalization groups must be a positive integer (or -1 for instance "
                       "normalization), got %lld", (long long)g);
    if (check_axis(l, ld_p_int(l, GN_AXIS))) return ld_error_status();
    double e = ld_p_float(l, GN_EPS);
    if (!(e >= 0)) return ld_fail(LD_EARG, "GroupNormalization epsilon must be >= 0, got %g", e);
    return LD_OK;
}
static int64_t gn_groups(const ld_layer *l, int64_t c) { int64_t g = ld_p_int(l, GN_GROUPS); return g == -1 ? c : g; }
static int gn_build(ld_layer *l, int n_in, const ld_shape *in, ld_shape *out) {
    if (build_axis(l, ld_p_int(l, GN_AXIS), in)) return ld_error_status();
    int64_t c = in->d[in->ndim - 1], g = gn_groups(l, c);
    if (c < g) return ld_fail(LD_EARG, "%s: the number of groups (%lld) cannot be more than the number of channels (%lld)",
                              l->name, (long long)g, (long long)c);
    if (c % g) return ld_fail(LD_EARG, "%s: %lld channels do not split into %lld groups (groups must divide the channels)",
                              l->name, (long long)c, (long long)g);
    if (in->ndim + 2 > LD_MAX_DIMS) return ld_fail(LD_ESHAPE, "%s: inputs of %d axes are too many to group", l->name, in->ndim + 1);
    if (ld_p_int(l, GN_SCALE) && !ld_layer_add_weight(l, "gamma", 1, &c, (ld_init){LD_INIT_ONES, 0, 0}, 1))
        return ld_error_status();
    if (ld_p_int(l, GN_CENTER) && !ld_layer_add_weight(l, "beta", 1, &c, (ld_init){LD_INIT_ZEROS, 0, 0}, 1))
        return ld_error_status();
    *out = *in;
    return LD_OK;
}
/* a [c] weight as [g, c / g] */
static ld_tensor *per_group(ld_tensor *w, int64_t g, int64_t c) {
    int64_t s[2] = {g, c / g};
    return ld_reshape_op(w, 2, s);
}
static ld_tensor *gn_forward(ld_layer *l, int n_in, ld_tensor *const *xs, int training) {
    ld_tensor *x = ld_as_float(xs[0]);
    if (!x) return NULL;
    int nd = x->ndim, k = 0, axes[LD_MAX_DIMS], na = 0;
    int64_t c = x->shape[nd - 1], g = gn_groups(l, c), s[LD_MAX_DIMS];
    for (int i = 0; i < nd - 1; i++) s[i] = x->shape[i];
    s[nd - 1] = g;
    s[nd] = c / g;
    for (int i = 1; i <= nd; i++) if (i != nd - 1) axes[na++] = i;   /* all but the batch and the group */
    ld_tensor *gamma = ld_p_int(l, GN_SCALE) ? ld_var(l->vars[k++]) : NULL;
    ld_tensor *beta = ld_p_int(l, GN_CENTER) ? ld_var(l->vars[k]) : NULL;
    ld_tensor *xr = ld_reshape_op(x, nd + 1, s);
    ld_tensor *mean = xr ? ld_reduce_axes(LD_REDUCE_MEAN, xr, na, axes, 1) : NULL;
    ld_tensor *var = mean ? ld_reduce_axes(LD_REDUCE_VAR, xr, na, axes, 1) : NULL;
    ld_tensor *ve = var ? ld_add_scalar(var, (float)ld_p_float(l, GN_EPS)) : NULL;
    ld_tensor *inv = ve ? ld_unary(LD_UN_RSQRT, ve) : NULL, *res = NULL, *y = NULL;
    if (inv && gamma) {
        ld_tensor *g2 = per_group(gamma, g, c), *t = g2 ? ld_mul(inv, g2) : NULL;
        ld_tensor_release(g2); ld_tensor_release(inv);
        inv = t;
    }
    ld_tensor *mi = inv ? ld_mul(mean, inv) : NULL;
    res = mi ? ld_neg(mi) : NULL;
    if (res && beta) {
        ld_tensor *b2 = per_group(beta, g, c), *t = b2 ? ld_add(res, b2) : NULL;
        ld_tensor_release(b2); ld_tensor_release(res);
        res = t;
    }
    ld_tensor *xi = res ? ld_mul(xr, inv) : NULL, *yr = xi ? ld_add(xi, res) : NULL;
    y = yr ? ld_reshape_op(yr, nd, x->shape) : NULL;
    ld_tensor *tmp[] = {x, xr, mean, var, ve, inv, mi, res, xi, yr};
    for (size_t i = 0; i < sizeof tmp / sizeof *tmp; i++) ld_tensor_release(tmp[i]);
    return y;
}
const ld_layer_class ld_layer_group_normalization = {
    "GroupNormalization", "group_normalization", NULL, {"groups"},
    {LD_PINT("groups", "32"), LD_PINT("axis", "-1"), LD_PFLOAT("epsilon", "0.001"), LD_PBOOL("center", "true"),
     LD_PBOOL("scale", "true"), LD_PEND},
    1, 1, LD_FLEX_ALL_BUT_LAST, gn_check, gn_build, gn_forward,
    "nn.GroupNormalization(groups=32, {epsilon=0.001, center=true, scale=true})\n\n"
    "Normalize each example over groups of its channels (the last axis) and every other axis but the\n"
    "batch, then * gamma + beta per channel (Keras 3's). groups=-1: one group per channel (instance\n"
    "normalization); groups=1: over all of an example (a LayerNormalization over every axis). The\n"
    "statistics are each example's own, so every strategy gives the same values.", 0, .compute_mask = ld_mask_pass};

/* ================================================================ UnitNormalization */
ld_tensor *ld_l2_normalize(ld_tensor *x, int naxes, const int *axes, double epsilon) {
    ld_tensor *sq = ld_mul(x, x), *ss = sq ? ld_reduce_axes(LD_REDUCE_SUM, sq, naxes, axes, 1) : NULL;
    ld_tensor *inv = ss ? ld_unary(LD_UN_RSQRT, ss) : NULL;
    ld_tensor *cap = inv ? ld_tensor_scalar((float)(1.0 / epsilon), inv->storage->device) : NULL;
    ld_tensor *lim = cap ? ld_minimum(inv, cap) : NULL, *y = lim ? ld_mul(x, lim) : NULL;
    ld_tensor *tmp[] = {sq, ss, inv, cap, lim};
    for (size_t i = 0; i < sizeof tmp / sizeof *tmp; i++) ld_tensor_release(tmp[i]);
    return y;
}

/* Keras 3's: x * min(rsqrt(sum(x^2 over the axes)), 1e12) (ops.normalize, order 2, epsilon 1e-12) */
enum { UN_AXIS };
/* The axes of list parameter p (counted with the batch, ndim of them with
   it), each in range and not the batch's (why: what the batch would
   change); *n of them into axes */
static int axes_after_batch(const ld_layer *l, int p, int ndim, int *axes, int *n, const char *why) {
    const int64_t *a = ld_p_ints(l, p, n);
    for (int i = 0; i < *n; i++) {
        int64_t v = a[i] < 0 ? a[i] + ndim : a[i];
        if (v < 0 || v >= ndim)
            return ld_fail(LD_EARG, "%s: axis %lld is out of range for inputs of %d axes (batch included)", l->name,
                           (long long)a[i], ndim);
        if (v == 0) return ld_fail(LD_EARG, "%s: axis 0 is the batch: %s", l->name, why);
        axes[i] = (int)v;
    }
    return LD_OK;
}
static int un_axes(const ld_layer *l, int ndim, int *axes, int *n) {
    if (axes_after_batch(l, UN_AXIS, ndim, axes, n, "a norm over it would change with the batch a strategy gives "
                         "each replica; normalize the axes after it")) return ld_error_status();
    if (*n < 1) return ld_fail(LD_EARG, "%s: axis names no axis", l->name);
    return LD_OK;
}
static int un_build(ld_layer *l, int n_in, const ld_shape *in, ld_shape *out) {
    int axes[LD_MAX_DIMS], n;
    if (un_axes(l, in->ndim + 1, axes, &n)) return ld_error_status();
    *out = *in;
    return LD_OK;
}
static ld_tensor *un_forward(ld_layer *l, int n_in, ld_tensor *const *xs, int training) {
    int axes[LD_MAX_DIMS], n;
    ld_tensor *x = ld_as_float(xs[0]);
    if (!x || un_axes(l, x->ndim, axes, &n)) { ld_tensor_release(x); return NULL; }
    ld_tensor *y = ld_l2_normalize(x, n, axes, 1e-12);
    ld_tensor_release(x);
    return y;
}
const ld_layer_class ld_layer_unit_normalization = {
    "UnitNormalization", "unit_normalization", NULL, {NULL},
    {LD_PINTS("axis", "-1", 0), LD_PEND},
    1, 1, ~0u, NULL, un_build, un_forward,
    "nn.UnitNormalization{axis=-1}\n\nEach example scaled to unit L2 norm over `axis` (a number or a list; counted with\n"
    "the batch, as Keras's): x * min(rsqrt(sum(x^2)), 1e12), Keras 3's.", 0, .compute_mask = ld_mask_pass};

/* ================================================================ Normalization */
/* Keras 3's preprocessing Normalization: (x - mean) / max(sqrt(variance),
   1e-7) with a mean and variance per position of the kept axes (`axis`,
   counted with the batch; none: one of each), or its inverse (invert). The
   three weights are Keras's, none trainable: mean, variance and count (0, as
   Keras 3's adapt leaves it). model:adapt is keras/preprocessing.lua's. */
enum { NORM_AXIS, NORM_INVERT };
/* the kept axes (counted with the batch, ndim of them with it) as a bit set; errors name the layer */
static int norm_kept(const ld_layer *l, int ndim, unsigned *kept) {
    int axes[LD_MAX_DIMS], n;
    *kept = 0;
    if (axes_after_batch(l, NORM_AXIS, ndim, axes, &n, "statistics kept per example position would change with the "
                         "batch; keep axes after it")) return ld_error_status();
    for (int i = 0; i < n; i++) *kept |= 1u << axes[i];
    return LD_OK;
}
static int norm_build(ld_layer *l, int n_in, const ld_shape *in, ld_shape *out) {
    unsigned kept;
    if (norm_kept(l, in->ndim + 1, &kept)) return ld_error_status();
    int64_t s[LD_MAX_DIMS];
    int k = 0;
    for (int i = 1; i <= in->ndim; i++) if (kept >> i & 1) s[k++] = in->d[i - 1];
    if (!ld_layer_add_weight(l, "mean", k, s, (ld_init){LD_INIT_ZEROS, 0, 0}, 0) ||
        !ld_layer_add_weight(l, "variance", k, s, (ld_init){LD_INIT_ONES, 0, 0}, 0) ||
        !ld_layer_add_weight(l, "count", 0, s, (ld_init){LD_INIT_ZEROS, 0, 0}, 0))
        return ld_error_status();
    *out = *in;
    return LD_OK;
}
static ld_tensor *norm_forward(ld_layer *l, int n_in, ld_tensor *const *xs, int training) {
    unsigned kept;
    ld_tensor *x = ld_as_float(xs[0]);
    if (!x || norm_kept(l, x->ndim, &kept)) { ld_tensor_release(x); return NULL; }
    int64_t bs[LD_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) {
        bs[i] = kept >> i & 1 ? x->shape[i] : 1;
        if (kept >> i & 1 && x->shape[i] != l->in[0].d[i - 1]) {
            char b[LD_SHAPE_STR_MAX];
            ld_fail(LD_ESHAPE, "%s keeps axis %d of size %lld (its mean and variance); got inputs of shape %s", l->name, i,
                    (long long)l->in[0].d[i - 1], ld_shape_str(x, b, sizeof b));
            ld_tensor_release(x);
            return NULL;
        }
    }
    ld_tensor *m = ld_reshape_op(ld_var(l->vars[0]), x->ndim, bs), *v = m ? ld_reshape_op(ld_var(l->vars[1]), x->ndim, bs) : NULL;
    ld_tensor *sd = v ? ld_sqrt(v) : NULL, *eps = sd ? ld_tensor_scalar(1e-7f, sd->storage->device) : NULL;
    ld_tensor *den = eps ? ld_maximum(sd, eps) : NULL, *y = NULL;
    if (den && ld_p_int(l, NORM_INVERT)) {
        ld_tensor *t = ld_mul(x, den);
        y = t ? ld_add(m, t) : NULL;
        ld_tensor_release(t);
    } else if (den) {
        ld_tensor *t = ld_sub(x, m);
        y = t ? ld_div(t, den) : NULL;
        ld_tensor_release(t);
    }
    ld_tensor *tmp[] = {x, m, v, sd, eps, den};
    for (size_t i = 0; i < sizeof tmp / sizeof *tmp; i++) ld_tensor_release(tmp[i]);
    return y;
}
const ld_layer_class ld_layer_normalization = {
    "Normalization", "normalization", NULL, {NULL},
    {LD_PINTS("axis", "-1", 0), LD_PBOOL("invert", "false"), LD_PEND},
    1, 1, ~0u, NULL, norm_build, norm_forward,
    "nn.Normalization{axis=-1, invert=false}\n\nKeras's preprocessing layer: (x - mean) / max(sqrt(variance), 1e-7), a mean and\n"
    "variance per position of the kept axes (`axis`, counted with the batch; {}: one of each), set by\n"
    "layer:adapt(x | dataset) or set_weights. invert=true maps back: mean + x * sd.", 0, .compute_mask = ld_mask_pass};

