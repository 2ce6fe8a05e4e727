/*
 * ld_ops_norm.c - layer and batch normalization: argument checks, the
 * kernels of the operands' device (the normalization family of
 * LD_LAYER_KERNELS, ld_kernels.h), and their backward functions.
 *
 * Batch statistics. The per-channel statistics are computed in two passes,
 * each accumulated in double: first (count, sum x), from which the mean;
 * then the sum of squared deviations from that mean (M2). Synchronized,
 * each pass's [count, sum] / [M2] is summed over the step's replicas with
 * ld_replica_all_reduce_sum before the next pass reads it, so the M2 is
 * taken around the GLOBAL mean: exact two-pass variance, with none of the
 * cancellation of sum(x^2)/n - mean^2 (it costs one more small all-reduce).
 * The unsynchronized op runs the same kernels without the all-reduces, so
 * with one replica both give the same bits.
 */
#include "ld_ops_norm.h"
#include "ld_autograd.h"
#include "ld_executor.h"
#include "ld_replica.h"
#include "ld_ops.h"
#include "ld_ops_internal.h"

#include <string.h>

#define FPTR0(t) ((t) ? FPTR(t) : NULL)

/* the sum across the step's replicas (ld_replica.h): LD_OK and nothing done
   outside a replica or with one replica */
static int replica_sum(ld_tensor *t, const char *op) {
    (void)op;
    return ld_replica_all_reduce_sum(t);
}

/* A copy of n floats at src (a kernel of t's device) into a new [n] tensor. */
static ld_tensor *copy_vec(ld_tensor *like, const float *src, int64_t n) {
    int64_t shape[1] = {n}, strides[1] = {1};
    ld_tensor *t = ld_ops_out_empty(LD_F32, 1, shape, DEV(like));
    if (t && n > 0) BE(like)->copy_strided(DEV(like), FPTR(t), LD_F32, src, LD_F32, 1, shape, strides);
    return t;
}

/* gamma/beta/moving statistic: NULL (when allowed), or float32 [c] on x's device */
static int check_vec(const ld_tensor *x, const ld_tensor *v, const char *what, const char *op, int64_t c) {
    char b1[LD_SHAPE_STR_MAX], b2[LD_SHAPE_STR_MAX];
    if (!v) return LD_OK;
    if (v->dtype != LD_F32)
        return ld_fail(LD_ETYPE, "%s: %s must be float32, got %s", op, what, ld_dtype_name(v->dtype));
    if (v->ndim != 1 || v->shape[0] != c)
        return ld_fail(LD_ESHAPE, "%s: %s has shape %s, expected [%lld] (the last axis of x, shape %s)", op, what,
                       ld_shape_str(v, b1, sizeof b1), (long long)c, ld_shape_str(x, b2, sizeof b2));
    if (DEV(v) != DEV(x))
        return ld_fail(LD_EDEVICE, "%s: x is on %s and %s on %s; move one with :to()", op, DEV(x)->name, what,
                       DEV(v)->name);
    return LD_OK;
}

/* x: float32, or a half dtype too where `half` */
static int check_x(const ld_tensor *x, const char *op, int half) {
    char b1[LD_SHAPE_STR_MAX];
    if (!x) return ld_fail(LD_EARG, "%s: no input", op);
    if (half && x->dtype != LD_F32 && !ld_dtype_is_half(x->dtype))
        return ld_fail(LD_ETYPE, "%s needs a float32, float16 or bfloat16 input, got %s", op, ld_dtype_name(x->dtype));
    if (!half && x->dtype != LD_F32) return ld_fail(LD_ETYPE, "%s needs a float32 input, got %s", op, ld_dtype_name(x->dtype));
    if (x->ndim < 1)
        return ld_fail(LD_ESHAPE, "%s: x with shape %s has no channel axis (it needs at least one dimension)", op,
                       ld_shape_str(x, b1, sizeof b1));
    return LD_OK;
}

static void rows_cols(const ld_tensor *x, int64_t *rows, int64_t *c) {
    *c = x->shape[x->ndim - 1];
    int64_t n = ld_tensor_numel(x);
    *rows = *c ? n / *c : 0;
    if (!*c) {   /* a last axis of 0: count the rows anyway */
        int64_t r = 1;
        for (int i = 0; i < x->ndim - 1; i++) r *= x->shape[i];
        *rows = r;
    }
}

/* ================================================================ layer normalization */
/* x in float32 or a half dtype; g in the output's dtype; dx in x's */
static int bw_layer_norm(ld_node *nd, ld_tensor *g, ld_tensor **gi) {
    ld_tensor *x = nd->in[0], *gamma = nd->in[1], *beta = nd->in[2];
    ld_tensor *mean = nd->saved[0], *rstd = nd->saved[1];
    int64_t rows, c;
    rows_cols(x, &rows, &c);
    int64_t cs[1] = {c};
    ld_tensor *gc = ld_contiguous(g);
    if (!gc) return ld_error_status();
    int st = LD_OK;
    if (ld_needs_grad(x) && !(gi[0] = ld_ops_out_empty(x->dtype, x->ndim, x->shape, DEV(x)))) st = ld_error_status();
    if (!st && gamma && ld_needs_grad(gamma) && !(gi[1] = ld_ops_out_empty(LD_F32, 1, cs, DEV(x)))) st = ld_error_status();
    if (!st && beta && ld_needs_grad(beta) && !(gi[2] = ld_ops_out_empty(LD_F32, 1, cs, DEV(x)))) st = ld_error_status();
    if (!st && (gi[0] || gi[1] || gi[2]))
        BE(x)->layer_norm_backward(DEV(x), gi[0] ? DPTR(gi[0]) : NULL, FPTR0(gi[1]), FPTR0(gi[2]), DPTR(gc), gc->dtype,
                                   DPTR(x), x->dtype, FPTR(mean), FPTR(rstd), FPTR0(gamma), rows, c);
    ld_tensor_release(gc);
    return st;
}

ld_tensor *ld_layer_norm(ld_tensor *x, ld_tensor *gamma, ld_tensor *beta, float eps) {
    const char *op = "layer_norm";
    if (check_x(x, op, 1)) return NULL;
    int64_t rows, c;
    rows_cols(x, &rows, &c);
    if (check_vec(x, gamma, "gamma", op, c) || check_vec(x, beta, "beta", op, c)) return NULL;
    if (!(eps >= 0)) { ld_fail(LD_EARG, "%s: epsilon must be >= 0, got %g", op, eps); return NULL; }
    ld_dtype ydt = ld_dtype_is_half(ld_autocast_dtype()) ? ld_autocast_dtype() : x->dtype;
    ld_tensor *cx = ld_ops_contig(x), *cg = cx ? ld_ops_contig(gamma) : NULL, *cb = cx && (!gamma || cg) ? ld_ops_contig(beta) : NULL;
    ld_tensor *y = NULL, *mean = NULL, *rstd = NULL;
    if (!cx || (gamma && !cg) || (beta && !cb)) goto out;
    int64_t rs[1] = {rows};
    if (!(y = ld_ops_out_empty(ydt, x->ndim, x->shape, DEV(x))) || !(mean = ld_ops_out_empty(LD_F32, 1, rs, DEV(x))) ||
        !(rstd = ld_ops_out_empty(LD_F32, 1, rs, DEV(x)))) {
        ld_tensor_release(y);
        y = NULL;
        goto out;
    }
    if (rows > 0 && c > 0)
        BE(x)->layer_norm(DEV(x), DPTR(y), ydt, FPTR(mean), FPTR(rstd), DPTR(cx), cx->dtype, FPTR0(cg), FPTR0(cb), rows,
                          c, eps);
    ld_tensor *in[3] = {cx, cg, cb};
    ld_node *nd = ld_record(y, "layer_norm", bw_layer_norm, 3, in);
    if (nd) {
        nd->saved[0] = ld_tensor_retain(mean);
        nd->saved[1] = ld_tensor_retain(rstd);
        nd->args[0] = eps;
    }
out:
    ld_tensor_release(cx); ld_tensor_release(cg); ld_tensor_release(cb);
    ld_tensor_release(mean); ld_tensor_release(rstd);
    return y;
}

/* ================================================================ batch normalization */
/* x in float32 or a half dtype, y in x's; g in any float dtype; dx in x's */
static int bw_batch_norm(ld_node *nd, ld_tensor *g, ld_tensor **gi) {
    ld_tensor *x = nd->in[0], *gamma = nd->in[1], *beta = nd->in[2];
    ld_tensor *mean = nd->saved[0], *rstd = nd->saved[1], *sums = nd->saved[2];
    int training = (int)nd->args[0], sync = (int)nd->args[1];
    int64_t rows, c;
    rows_cols(x, &rows, &c);
    int64_t rs[2] = {2, c};
    ld_tensor *gc = ld_contiguous(g);
    if (!gc) return ld_error_status();
    int need_x = ld_needs_grad(x), need_g = gamma && ld_needs_grad(gamma), need_b = beta && ld_needs_grad(beta);
    int need_red = need_g || need_b || (need_x && training);
    ld_tensor *red = need_red ? ld_ops_out_empty(LD_F32, 2, rs, DEV(x)) : NULL;
    int st = need_red && !red ? ld_error_status() : LD_OK;
    if (!st && red && c > 0)
        BE(x)->bn_backward_reduce(DEV(x), FPTR(red), DPTR(gc), gc->dtype, DPTR(x), x->dtype, FPTR(mean), FPTR(rstd),
                                  rows, c);
    /* dgamma, dbeta: this replica's share (the strategy sums the variables' gradients) */
    if (!st && need_g && !(gi[1] = copy_vec(x, FPTR(red) + c, c))) st = ld_error_status();
    if (!st && need_b && !(gi[2] = copy_vec(x, FPTR(red), c))) st = ld_error_status();
    if (!st && need_x) {
        if (training && sync) st = replica_sum(red, "batch_norm gradient");
        if (!st && !(gi[0] = ld_ops_out_empty(x->dtype, x->ndim, x->shape, DEV(x)))) st = ld_error_status();
        if (!st && rows > 0 && c > 0)
            BE(x)->bn_backward(DEV(x), DPTR(gi[0]), DPTR(gc), gc->dtype, DPTR(x), x->dtype, FPTR(mean), FPTR(rstd),
                               FPTR0(gamma), FPTR0(red), sums ? FPTR(sums) : NULL, rows, c, training);
    }
    ld_tensor_release(red);
    ld_tensor_release(gc);
    return st;
}

ld_tensor *ld_batch_norm(ld_tensor *x, ld_tensor *gamma, ld_tensor *beta, ld_tensor *moving_mean,
                         ld_tensor *moving_var, float momentum, float eps, int training, int synchronized) {
    const char *op = "batch_norm";
    if (check_x(x, op, 1)) return NULL;
    int64_t rows, c;
    rows_cols(x, &rows, &c);
    if (!moving_mean || !moving_var) {
        ld_fail(LD_EARG, "%s: moving_mean and moving_var are required", op);
        return NULL;
    }
    if (check_vec(x, gamma, "gamma", op, c) || check_vec(x, beta, "beta", op, c) ||
        check_vec(x, moving_mean, "moving_mean", op, c) || check_vec(x, moving_var, "moving_var", op, c))
        return NULL;
    if (!ld_tensor_is_contiguous(moving_mean) || !ld_tensor_is_contiguous(moving_var)) {
        ld_fail(LD_EARG, "%s: moving_mean and moving_var must be contiguous (they are updated in place)", op);
        return NULL;
    }
    if (!(eps >= 0)) { ld_fail(LD_EARG, "%s: epsilon must be >= 0, got %g", op, eps); return NULL; }
    ld_tensor *cx = ld_ops_contig(x), *cg = cx ? ld_ops_contig(gamma) : NULL, *cb = cx && (!gamma || cg) ? ld_ops_contig(beta) : NULL;
    ld_tensor *y = NULL, *mean = NULL, *rstd = NULL, *sums = NULL, *m2 = NULL;
    if (!cx || (gamma && !cg) || (beta && !cb)) goto out;
    int64_t cs[1] = {c}, ss[2] = {2, c};
    if (!(mean = ld_ops_out_empty(LD_F32, 1, cs, DEV(x))) || !(rstd = ld_ops_out_empty(LD_F32, 1, cs, DEV(x)))) goto out;
    ld_device *d = DEV(x);
    const ld_backend *be = BE(x);
    if (training) {
        if (!(sums = ld_ops_out_empty(LD_F32, 2, ss, d)) || !(m2 = ld_ops_out_empty(LD_F32, 1, cs, d))) goto out;
        if (c > 0) be->bn_stats(d, FPTR(sums), NULL, DPTR(cx), cx->dtype, rows, c);
        if (synchronized && replica_sum(sums, op)) goto out;
        if (c > 0) be->bn_stats(d, FPTR(m2), FPTR(sums), DPTR(cx), cx->dtype, rows, c);
        if (synchronized && replica_sum(m2, op)) goto out;
        if (c > 0)
            be->bn_finalize(d, FPTR(mean), FPTR(rstd), FPTR(moving_mean), FPTR(moving_var), FPTR(sums), FPTR(m2), c,
                            momentum, eps, 1);
    } else if (c > 0) {
        be->bn_finalize(d, FPTR(mean), FPTR(rstd), FPTR(moving_mean), FPTR(moving_var), NULL, NULL, c, momentum,
                        eps, 0);
    }
    /* y in x's dtype: a half x is read widened and y rounded once, Keras's
       cast to float32 and back without the two passes */
    if (!(y = ld_ops_out_empty(x->dtype, x->ndim, x->shape, d))) goto out;
    if (rows > 0 && c > 0)
        be->bn_apply(d, DPTR(y), y->dtype, DPTR(cx), cx->dtype, FPTR(mean), FPTR(rstd), FPTR0(cg), FPTR0(cb), rows, c);
    ld_tensor *in[3] = {cx, cg, cb};
    ld_node *nd = ld_record(y, training ? "batch_norm" : "batch_norm (inference)", bw_batch_norm, 3, in);
    if (nd) {
        nd->saved[0] = ld_tensor_retain(mean);
        nd->saved[1] = ld_tensor_retain(rstd);
        nd->saved[2] = ld_tensor_retain(sums);
        nd->args[0] = training ? 1 : 0;
        nd->args[1] = synchronized ? 1 : 0;
    }
out:
    ld_tensor_release(cx); ld_tensor_release(cg); ld_tensor_release(cb);
    ld_tensor_release(mean); ld_tensor_release(rstd); ld_tensor_release(sums); ld_tensor_release(m2);
    return y;
}
