/*
 * ld_ops_attn.c - batched matrix products, scaled dot-product attention and
 * the head split/merge (ld_ops_attn.h).
 *
 * Attention, unfused: scores = q k^T (gemm_batched), then the masked
 * softmax kernel turns them into the weights in place (scale and causal
 * mask applied inside, no mask tensor), then weights v (gemm_batched). The
 * backward pass keeps only the weights P:
 *     dV = P^T g,  dP = g V^T,  dS = scale * P * (dP - rowsum(dP * P)),
 *     dQ = dS K,   dK = dS^T Q.
 * Half (float16, bfloat16) q, k, v: every product is a half product
 * (gemm_batched_half: tensor cores on a GPU, float32 sums), as under
 * torch.autocast. The scores, the softmax and dP are float32; P is rounded
 * to the half dtype for P V and dV (both copies kept), dS is rounded before
 * its products, and the products whose results are the output and the
 * gradients write them in the half dtype directly (rounded once).
 * Fused (flash_attention, ld_attention_fused): one kernel with an online
 * softmax, no [t, s] matrix in memory; the backward recomputes the weights
 * from q, k and each row's log-sum-exp. Taken when asked for, in float32
 * or a half dtype (float32 arithmetic, o and the gradients rounded once).
 */
#include "ld_ops_attn.h"
#include "ld_autograd.h"
#include "ld_ops.h"
#include "ld_ops_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ================================================================ bmm */
/* How gemm_batched reads t [..., r, c]: its matrices row-major (trans 0,
   ld = stride of r) or transposed (trans 1, ld = stride of c), one every
   *bs elements. 0 when the leading axes do not collapse to one stride or
   the matrices are neither. */
static int bmm_layout(const ld_tensor *t, int *trans, int64_t *ld, int64_t *bs) {
    int nd = t->ndim;
    int64_t r = t->shape[nd - 2], c = t->shape[nd - 1], s0 = t->strides[nd - 2], s1 = t->strides[nd - 1];
    if ((s1 == 1 || c == 1) && s0 >= c && s0 >= 1) { *trans = 0; *ld = s0; }
    else if ((s0 == 1 || r == 1) && s1 >= r && s1 >= 1) { *trans = 1; *ld = s1; }
    else return 0;
    int64_t stride = 0, span = 0;   /* stride of the innermost batch axis > 1, and what the axes so far cover */
    for (int i = nd - 3; i >= 0; i--) {
        if (t->shape[i] == 1) continue;
        if (!span) { stride = t->strides[i]; span = t->shape[i]; continue; }
        if (t->strides[i] != stride * span) return 0;
        span *= t->shape[i];
    }
    *bs = stride;
    return 1;
}

static int64_t batch_of(const ld_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim - 2; i++) n *= t->shape[i];
    return n;
}

/* c = op(a) op(b) over the batch, in cdt (a and b of one dtype; half
   operands go to gemm_batched_half, float32 sums, c float32 or their dtype;
   float32 operands give float32); arguments already checked. Not recorded. */
static ld_tensor *bmm_raw(ld_tensor *a, ld_tensor *b, int ta, int tb, ld_dtype cdt) {
    int nd = a->ndim;
    int64_t m = ta ? a->shape[nd - 1] : a->shape[nd - 2], k = ta ? a->shape[nd - 2] : a->shape[nd - 1];
    int64_t n = tb ? b->shape[nd - 2] : b->shape[nd - 1];
    if (ld_check_gemm(DEV(a))) return NULL;
    ld_tensor *ca = ld_tensor_retain(a), *cb = ld_tensor_retain(b);
    int la = 0, lb = 0;
    int64_t lda = 1, ldb = 1, sa = 0, sb = 0;
    if (!bmm_layout(ca, &la, &lda, &sa)) {
        ld_tensor_release(ca);
        ca = ld_clone(a);
        la = 0; lda = a->shape[nd - 1]; sa = a->shape[nd - 2] * a->shape[nd - 1];
    }
    if (!bmm_layout(cb, &lb, &ldb, &sb)) {
        ld_tensor_release(cb);
        cb = ld_clone(b);
        lb = 0; ldb = b->shape[nd - 1]; sb = b->shape[nd - 2] * b->shape[nd - 1];
    }
    int64_t shape[LD_MAX_DIMS];
    memcpy(shape, a->shape, sizeof(int64_t) * (size_t)nd);
    shape[nd - 2] = m;
    shape[nd - 1] = n;
    if (!ld_dtype_is_half(a->dtype)) cdt = LD_F32;
    ld_tensor *c = ca && cb ? ld_ops_out_empty(cdt, nd, shape, DEV(a)) : NULL;
    int64_t batch = batch_of(a);
    if (c && batch > 0 && m > 0 && n > 0 && ld_dtype_is_half(a->dtype))
        BE(a)->gemm_batched_half(DEV(a), la ^ ta, lb ^ tb, m, n, k, a->dtype, DPTR(ca), lda < 1 ? 1 : lda, sa,
                                 DPTR(cb), ldb < 1 ? 1 : ldb, sb, cdt, DPTR(c), m * n, batch);
    else if (c && batch > 0 && m > 0 && n > 0)
        BE(a)->gemm_batched(DEV(a), la ^ ta, lb ^ tb, m, n, k, 1.0f, FPTR(ca), lda < 1 ? 1 : lda, sa, FPTR(cb),
                            ldb < 1 ? 1 : ldb, sb, 0.0f, FPTR(c), m * n, batch);
    ld_tensor_release(ca);
    ld_tensor_release(cb);
    return c;
}

/* t in dtype dt, not recorded: t itself (retained) or a rounded copy */
static ld_tensor *in_dtype(ld_tensor *t, ld_dtype dt) {
    return !t || t->dtype == dt ? ld_tensor_retain(t) : ld_cast(t, dt);
}

/* op(a) op(b) in dt: both operands in dt (a float32 one rounded to a half
   dt first), the product written in dt. Not recorded. */
static ld_tensor *prod_in(ld_tensor *a, ld_tensor *b, int ta, int tb, ld_dtype dt) {
    ld_tensor *ca = in_dtype(a, dt), *cb = ca ? in_dtype(b, dt) : NULL;
    ld_tensor *c = cb ? bmm_raw(ca, cb, ta, tb, dt) : NULL;
    ld_tensor_release(ca);
    ld_tensor_release(cb);
    return c;
}

static int check_pair(const char *op, ld_tensor *a, ld_tensor *b, const char *na, const char *nb) {
    if (!a || !b) return ld_fail(LD_EARG, "%s: %s is missing", op, !a ? na : nb);
    if (!ld_dtype_is_float(a->dtype) || a->dtype != b->dtype)
        return ld_fail(LD_ETYPE, "%s needs float32, float16 or bfloat16 tensors of one dtype, got %s (%s) and %s (%s)",
                       op, ld_dtype_name(a->dtype), na, ld_dtype_name(b->dtype), nb);
    if (DEV(a) != DEV(b))
        return ld_fail(LD_EDEVICE, "%s: %s is on %s and %s on %s; move one with :to()", op, na, DEV(a)->name, nb,
                       DEV(b)->name);
    return LD_OK;
}

/* g is in the product's dtype (a float32 seed when the gradient is taken of
   the product itself); a half bmm's gradients are half products in its dtype */
static int bw_bmm(ld_node *nd, ld_tensor *g, ld_tensor **gi) {
    ld_tensor *a = nd->in[0], *b = nd->in[1], *gh = in_dtype(g, a->dtype);
    int ta = (int)nd->args[0], tb = (int)nd->args[1], st = gh ? LD_OK : ld_error_status();
    ld_dtype dt = a->dtype;
    if (!st && ld_needs_grad(a)) {   /* d op(a) = g op(b)^T */
        gi[0] = !ta ? prod_in(gh, b, 0, !tb, dt) : prod_in(b, gh, tb, 1, dt);
        if (!gi[0]) st = ld_error_status();
    }
    if (!st && ld_needs_grad(b)) {   /* d op(b) = op(a)^T g */
        gi[1] = !tb ? prod_in(a, gh, !ta, 0, dt) : prod_in(gh, a, 1, ta, dt);
        if (!gi[1]) st = ld_error_status();
    }
    ld_tensor_release(gh);
    return st;
}

ld_tensor *ld_bmm(ld_tensor *a, ld_tensor *b, int ta, int tb) {
    char b1[LD_SHAPE_STR_MAX], b2[LD_SHAPE_STR_MAX];
    if (check_pair("bmm", a, b, "a", "b")) return NULL;
    ta = !!ta; tb = !!tb;
    ld_shape_str(a, b1, sizeof b1);
    ld_shape_str(b, b2, sizeof b2);
    if (a->ndim < 2 || b->ndim != a->ndim) {
        ld_fail(LD_ESHAPE, "bmm needs two tensors of the same rank >= 2 ([..., M, K] and [..., K, N]), got shapes %s "
                "and %s", b1, b2);
        return NULL;
    }
    int nd = a->ndim;
    for (int i = 0; i < nd - 2; i++)
        if (a->shape[i] != b->shape[i]) {
            ld_fail(LD_ESHAPE, "bmm: the leading (batch) axes of shapes %s and %s differ at axis %d (%lld vs %lld); "
                    "bmm does not broadcast", b1, b2, i, (long long)a->shape[i], (long long)b->shape[i]);
            return NULL;
        }
    int64_t ka = ta ? a->shape[nd - 2] : a->shape[nd - 1], kb = tb ? b->shape[nd - 1] : b->shape[nd - 2];
    if (ka != kb) {
        ld_fail(LD_ESHAPE, "bmm: shapes %s%s and %s%s do not match: inner dimensions %lld and %lld", b1,
                ta ? " (transposed)" : "", b2, tb ? " (transposed)" : "", (long long)ka, (long long)kb);
        return NULL;
    }
    ld_tensor *c = bmm_raw(a, b, ta, tb, a->dtype);
    if (c) {
        ld_tensor *in[2] = {a, b};
        ld_node *n = ld_record(c, "bmm", bw_bmm, 2, in);
        if (n) { n->args[0] = ta; n->args[1] = tb; }
    }
    return c;
}

/* ================================================================ attention */
static int64_t causal_offset(int causal, int64_t t, int64_t s) { return causal == LD_CAUSAL_END ? s - t : 0; }

/* dS = scale * P * (g - rowsum(g * P)) into ds (float32: may be g; or in
   a half dtype, rounded once by the kernel) */
static void softmax_grad_into(ld_tensor *ds, ld_tensor *p, ld_tensor *g, const ld_node *nd) {
    int causal = (int)nd->args[1];
    int64_t t = p->shape[1], s = p->shape[2];
    BE(p)->masked_softmax_backward(DEV(p), DPTR(ds), ds->dtype, FPTR(p), FPTR(g), p->shape[0], t, s,
                                   (float)nd->args[0], causal != LD_CAUSAL_NONE, causal_offset(causal, t, s));
}

/* dS in dt: q's dtype, which qk_grads' half products take as it is */
static ld_tensor *softmax_grad(ld_tensor *p, ld_tensor *g, const ld_node *nd, ld_dtype dt) {
    ld_tensor *gc = g->dtype == LD_F32 ? ld_contiguous(g) : ld_cast(g, LD_F32);
    ld_tensor *ds = gc ? ld_ops_out_empty(dt, 3, p->shape, DEV(p)) : NULL;
    if (ds) softmax_grad_into(ds, p, gc, nd);
    ld_tensor_release(gc);
    return ds;
}

/* dQ = dS K, dK = dS^T Q for the inputs that need them (dS float32; half
   products in q's dtype) */
static int qk_grads(ld_tensor *ds, ld_tensor *q, ld_tensor *k, ld_tensor **dq, ld_tensor **dk) {
    ld_tensor *dsh = in_dtype(ds, q->dtype);
    int st = dsh ? LD_OK : ld_error_status();
    if (!st && ld_needs_grad(q) && !(*dq = prod_in(dsh, k, 0, 0, q->dtype))) st = ld_error_status();
    if (!st && ld_needs_grad(k) && !(*dk = prod_in(dsh, q, 1, 0, q->dtype))) st = ld_error_status();
    ld_tensor_release(dsh);
    return st;
}

/* g in the output's dtype (or a float32 seed); saved: P (float32) and, for
   half inputs, P rounded to their dtype */
static int bw_attention(ld_node *nd, ld_tensor *g, ld_tensor **gi) {
    ld_tensor *q = nd->in[0], *k = nd->in[1], *v = nd->in[2], *p = nd->saved[0];
    ld_tensor *ph = nd->saved[1] ? nd->saved[1] : p, *gh = in_dtype(g, q->dtype);
    int st = gh ? LD_OK : ld_error_status();
    if (!st && ld_needs_grad(v) && !(gi[2] = prod_in(ph, gh, 1, 0, q->dtype))) st = ld_error_status();
    if (!st && (ld_needs_grad(q) || ld_needs_grad(k))) {
        ld_tensor *dp = bmm_raw(gh, v, 0, 1, LD_F32);   /* g V^T [B, T, S], float32 */
        /* dS in q's dtype: in place over dp for float32, a half dS written by the kernel */
        ld_tensor *ds = !dp ? NULL : q->dtype == LD_F32 ? ld_tensor_retain(dp)
                                                         : ld_ops_out_empty(q->dtype, 3, dp->shape, DEV(dp));
        if (ds) {
            softmax_grad_into(ds, p, dp, nd);
            st = qk_grads(ds, q, k, &gi[0], &gi[1]);
        } else {
            st = ld_error_status();
        }
        ld_tensor_release(ds);
        ld_tensor_release(dp);
    }
    ld_tensor_release(gh);
    return st;
}

static int bw_attention_weights(ld_node *nd, ld_tensor *g, ld_tensor **gi) {
    ld_tensor *ds = softmax_grad(nd->saved[0], g, nd, nd->in[0]->dtype);
    if (!ds) return ld_error_status();
    int st = qk_grads(ds, nd->in[0], nd->in[1], &gi[0], &gi[1]);
    ld_tensor_release(ds);
    return st;
}

static int check_qk(const char *op, ld_tensor *q, ld_tensor *k, ld_tensor *v, int causal, float scale) {
    char b1[LD_SHAPE_STR_MAX], b2[LD_SHAPE_STR_MAX], b3[LD_SHAPE_STR_MAX];
    if (check_pair(op, q, k, "query", "key")) return ld_error_status();
    if (v && check_pair(op, q, v, "query", "value")) return ld_error_status();
    ld_shape_str(q, b1, sizeof b1);
    ld_shape_str(k, b2, sizeof b2);
    if (v) ld_shape_str(v, b3, sizeof b3);
    else snprintf(b3, sizeof b3, "-");
    if (q->ndim != 3 || k->ndim != 3 || (v && v->ndim != 3))
        return ld_fail(LD_ESHAPE, "%s needs 3-d query [B, T, dk], key [B, S, dk]%s, got shapes %s, %s%s%s", op,
                       v ? " and value [B, S, dv]" : "", b1, b2, v ? ", " : "", v ? b3 : "");
    if (q->shape[0] != k->shape[0] || (v && v->shape[0] != q->shape[0]))
        return ld_fail(LD_ESHAPE, "%s: the batch axes of query %s, key %s%s%s differ", op, b1, b2,
                       v ? " and value " : "", v ? b3 : "");
    if (q->shape[2] != k->shape[2])
        return ld_fail(LD_ESHAPE, "%s: query %s and key %s differ in their last axis (%lld vs %lld)", op, b1, b2,
                       (long long)q->shape[2], (long long)k->shape[2]);
    if (v && v->shape[1] != k->shape[1])
        return ld_fail(LD_ESHAPE, "%s: key %s and value %s differ in length (axis 1: %lld vs %lld)", op, b2, b3,
                       (long long)k->shape[1], (long long)v->shape[1]);
    if (causal < LD_CAUSAL_NONE || causal > LD_CAUSAL_END)
        return ld_fail(LD_EARG, "%s: causal is 0 (none), 1 (Keras' mask) or 2 (aligned to the end), not %d", op,
                       causal);
    if (!isfinite(scale) || scale < 0)
        return ld_fail(LD_EARG, "%s: scale must be finite and >= 0 (0: 1/sqrt(dk)), not %g", op, (double)scale);
    return LD_OK;
}

/* the weights P [B, T, S] (not recorded), float32; with ph, also P
   rounded to q's half dtype into *ph, in the same kernel */
static ld_tensor *weights_raw(ld_tensor *q, ld_tensor *k, int causal, float scale, ld_tensor **ph) {
    ld_tensor *p = bmm_raw(q, k, 0, 1, LD_F32);
    if (ph) *ph = p && ld_dtype_is_half(q->dtype) ? ld_ops_out_empty(q->dtype, 3, p->shape, DEV(p))
                                                   : ld_tensor_retain(p);
    if (ph && p && !*ph) { ld_tensor_release(p); return NULL; }
    if (p) {
        int64_t t = q->shape[1], s = k->shape[1];
        void *h = ph && *ph != p ? DPTR(*ph) : NULL;
        if (p->shape[0] && t && s)
            BE(p)->masked_softmax(DEV(p), FPTR(p), h, h ? q->dtype : LD_F32, FPTR(p), p->shape[0], t, s, scale,
                                  causal != LD_CAUSAL_NONE, causal_offset(causal, t, s));
    }
    return p;
}

static float default_scale(ld_tensor *q, float scale) {
    return scale == 0 ? (float)(1.0 / sqrt((double)(q->shape[2] ? q->shape[2] : 1))) : scale;
}

static void record_weights(ld_tensor *w, ld_tensor *p, ld_tensor *q, ld_tensor *k, int causal, float scale) {
    ld_tensor *in[2] = {q, k};
    ld_node *n = ld_record(w, "attention_weights", bw_attention_weights, 2, in);
    /* a view of its own: w may be p, whose node must not hold p itself (a cycle) */
    if (n) { n->saved[0] = ld_reshape(p, p->ndim, p->shape); n->args[0] = scale; n->args[1] = causal; }
}

/* the weights come in q's dtype (float32, or rounded to half), as Keras's */
ld_tensor *ld_attention_weights(ld_tensor *q, ld_tensor *k, int causal, float scale) {
    if (check_qk("attention_weights", q, k, NULL, causal, scale)) return NULL;
    scale = default_scale(q, scale);
    ld_tensor *p = weights_raw(q, k, causal, scale, NULL);
    if (p) record_weights(p, p, q, k, causal, scale);
    return ld_ops_in_dtype(p, q->dtype);
}

/* ---- the fused path: flash_attention, o and lse kept for the backward */
static int fused_mode = -1;   /* LD_FUSED_*; -1: LDIST_FUSED_ATTENTION not read yet (atomic) */

int ld_attention_fused(int mode) {
    int was = __atomic_load_n(&fused_mode, __ATOMIC_ACQUIRE);
    if (was < 0) {
        const char *env = getenv("LDIST_FUSED_ATTENTION");
        was = !env || !*env || !strcmp(env, "auto") ? LD_FUSED_AUTO
              : !strcmp(env, "on") || !strcmp(env, "1") ? LD_FUSED_ON : LD_FUSED_OFF;
        int unset = -1;
        __atomic_compare_exchange_n(&fused_mode, &unset, was, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
        was = __atomic_load_n(&fused_mode, __ATOMIC_ACQUIRE);
    }
    if (mode >= LD_FUSED_AUTO && mode <= LD_FUSED_OFF) __atomic_store_n(&fused_mode, mode, __ATOMIC_RELEASE);
    return was;
}

/* The fused kernel takes q, k, v of one float dtype (float32, or a half
   one: computed in float32, o and the gradients rounded once) and one
   width, 16, 32 or 64 (what its GPU version keeps in registers). Auto does
   not take it yet: its CUDA version has not run on a GPU so far (make
   test-gpu checks it, forced on, against the CPU's unfused path); once it
   has, auto is to take it on GPUs. */
static int use_fused(ld_tensor *q, ld_tensor *k, ld_tensor *v) {
    int64_t e = q->shape[2];
    if (ld_attention_fused(-1) != LD_FUSED_ON || v->shape[2] != e || (e != 16 && e != 32 && e != 64)) return 0;
    return (q->dtype == LD_F32 || ld_dtype_is_half(q->dtype)) && k->dtype == q->dtype && v->dtype == q->dtype;
}

static int bw_flash(ld_node *nd, ld_tensor *g, ld_tensor **gi) {
    ld_tensor *q = nd->saved[2], *k = nd->saved[3], *v = nd->in[2], *lse = nd->saved[0], *o = nd->saved[1];
    ld_tensor *gc = ld_contiguous(g), *vc = gc ? ld_contiguous(v) : NULL;
    int st = vc ? LD_OK : ld_error_status();
    for (int i = 0; i < 3 && !st; i++) {
        ld_tensor *x = i == 0 ? q : i == 1 ? k : vc;
        if (ld_needs_grad(nd->in[i]) && !(gi[i] = ld_ops_out_empty(q->dtype, 3, x->shape, DEV(x)))) st = ld_error_status();
    }
    int causal = (int)nd->args[1];
    int64_t t = q->shape[1], s = k->shape[1];
    if (!st && (gi[0] || gi[1] || gi[2]))
        BE(q)->flash_attention_backward(DEV(q), q->dtype, gi[0] ? DPTR(gi[0]) : NULL, gi[1] ? DPTR(gi[1]) : NULL,
                                        gi[2] ? DPTR(gi[2]) : NULL, DPTR(gc), DPTR(q), DPTR(k), DPTR(vc), DPTR(o),
                                        FPTR(lse), q->shape[0], t, s, q->shape[2], (float)nd->args[0],
                                        causal != LD_CAUSAL_NONE, causal_offset(causal, t, s));
    ld_tensor_release(gc);
    ld_tensor_release(vc);
    return st;
}

static ld_tensor *attention_fused(ld_tensor *q, ld_tensor *k, ld_tensor *v, int causal, float scale) {
    ld_tensor *qc = ld_contiguous(q), *kc = qc ? ld_contiguous(k) : NULL, *vc = kc ? ld_contiguous(v) : NULL;
    int64_t b = q->shape[0], t = q->shape[1], s = k->shape[1];
    int64_t os[3] = {b, t, v->shape[2]}, ls[2] = {b, t};
    ld_tensor *o = vc ? ld_ops_out_empty(q->dtype, 3, os, DEV(q)) : NULL;
    ld_tensor *lse = o ? ld_ops_out_empty(LD_F32, 2, ls, DEV(q)) : NULL;
    if (lse) {
        BE(q)->flash_attention(DEV(q), q->dtype, DPTR(o), FPTR(lse), DPTR(qc), DPTR(kc), DPTR(vc), b, t, s, q->shape[2],
                               scale, causal != LD_CAUSAL_NONE, causal_offset(causal, t, s));
        ld_tensor *in[3] = {q, k, v};
        ld_node *n = ld_record(o, "flash_attention", bw_flash, 3, in);
        if (n) {
            /* o through a view of its own: the node must not hold its output (a cycle) */
            n->saved[0] = ld_tensor_retain(lse);
            n->saved[1] = ld_reshape(o, o->ndim, o->shape);
            n->saved[2] = ld_tensor_retain(qc);
            n->saved[3] = ld_tensor_retain(kc);
            n->args[0] = scale;
            n->args[1] = causal;
        }
    } else {
        ld_tensor_release(o);
        o = NULL;
    }
    ld_tensor_release(lse);
    ld_tensor_release(qc); ld_tensor_release(kc); ld_tensor_release(vc);
    return o;
}

ld_tensor *ld_attention(ld_tensor *q, ld_tensor *k, ld_tensor *v, int causal, float scale,
                        ld_tensor **weights_out) {
    if (weights_out) *weights_out = NULL;
    if (check_qk("attention", q, k, v, causal, scale)) return NULL;
    scale = default_scale(q, scale);
    if (!weights_out && use_fused(q, k, v)) return attention_fused(q, k, v, causal, scale);
    ld_tensor *ph = NULL, *p = weights_raw(q, k, causal, scale, &ph);
    ld_tensor *o = ph ? bmm_raw(ph, v, 0, 0, q->dtype) : NULL;
    if (o) {
        ld_tensor *in[3] = {q, k, v};
        ld_node *n = ld_record(o, "attention", bw_attention, 3, in);
        if (n) {
            n->saved[0] = ld_tensor_retain(p);
            if (ph != p) n->saved[1] = ld_tensor_retain(ph);
            n->args[0] = scale;
            n->args[1] = causal;
        }
        if (weights_out) {
            /* its own tensor on the same memory, with its own node */
            ld_tensor *w = ld_reshape(p, p->ndim, p->shape);
            if (w) record_weights(w, p, q, k, causal, scale);
            if (!(*weights_out = ld_ops_in_dtype(w, q->dtype))) { ld_tensor_release(o); o = NULL; }
        }
    }
    ld_tensor_release(p);
    ld_tensor_release(ph);
    return o;
}

/* ================================================================ heads */
/* [A, B, C, D] contiguous copy of x viewed as [A, C, B, D] */
static ld_tensor *swap12(ld_tensor *x, int64_t a, int64_t b, int64_t c, int64_t d) {
    int64_t s4[4] = {a, c, b, d};
    int perm[4] = {0, 2, 1, 3};
    ld_tensor *v = ld_reshape(x, 4, s4), *p = v ? ld_permute(v, perm) : NULL, *out = NULL;
    if (p) out = ld_contiguous(p);
    ld_tensor_release(v);
    ld_tensor_release(p);
    return out;
}

static ld_tensor *split_raw(ld_tensor *x, int64_t h) {
    int64_t n = x->shape[0], t = x->shape[1], d = x->shape[2] / h;
    ld_tensor *c = swap12(x, n, h, t, d);   /* [N, T, H, d] -> [N, H, T, d] */
    int64_t s3[3] = {n * h, t, d};
    ld_tensor *r = c ? ld_reshape(c, 3, s3) : NULL;
    ld_tensor_release(c);
    return r;
}

static ld_tensor *merge_raw(ld_tensor *x, int64_t h) {
    int64_t n = x->shape[0] / h, t = x->shape[1], d = x->shape[2];
    ld_tensor *c = swap12(x, n, t, h, d);   /* [N, H, T, d] -> [N, T, H, d] */
    int64_t s3[3] = {n, t, h * d};
    ld_tensor *r = c ? ld_reshape(c, 3, s3) : NULL;
    ld_tensor_release(c);
    return r;
}

static int bw_split_heads(ld_node *nd, ld_tensor *g, ld_tensor **gi) {
    gi[0] = merge_raw(g, (int64_t)nd->args[0]);
    return gi[0] ? LD_OK : ld_error_status();
}
static int bw_merge_heads(ld_node *nd, ld_tensor *g, ld_tensor **gi) {
    gi[0] = split_raw(g, (int64_t)nd->args[0]);
    return gi[0] ? LD_OK : ld_error_status();
}

static int check_heads(const char *op, ld_tensor *x, int heads, int split) {
    char b1[LD_SHAPE_STR_MAX];
    if (!x) return ld_fail(LD_EARG, "%s: no tensor", op);
    ld_shape_str(x, b1, sizeof b1);
    if (!ld_dtype_is_float(x->dtype))
        return ld_fail(LD_ETYPE, "%s needs a float32, float16 or bfloat16 tensor, got %s", op, ld_dtype_name(x->dtype));
    if (heads < 1) return ld_fail(LD_EARG, "%s: heads must be >= 1, not %d", op, heads);
    if (x->ndim != 3)
        return ld_fail(LD_ESHAPE, "%s needs a 3-d tensor %s, got shape %s", op, split ? "[N, T, H*d]" : "[N*H, T, d]",
                       b1);
    int64_t dim = split ? x->shape[2] : x->shape[0];
    if (dim % heads)
        return ld_fail(LD_ESHAPE, "%s: %s %lld of shape %s is not a multiple of %d heads", op,
                       split ? "the last axis" : "the first axis", (long long)dim, b1, heads);
    return LD_OK;
}

ld_tensor *ld_split_heads(ld_tensor *x, int heads) {
    if (check_heads("split_heads", x, heads, 1)) return NULL;
    ld_tensor *y = split_raw(x, heads);
    if (y) {
        ld_tensor *in[1] = {x};
        ld_node *n = ld_record(y, "split_heads", bw_split_heads, 1, in);
        if (n) n->args[0] = heads;
    }
    return y;
}

ld_tensor *ld_merge_heads(ld_tensor *x, int heads) {
    if (check_heads("merge_heads", x, heads, 0)) return NULL;
    ld_tensor *y = merge_raw(x, heads);
    if (y) {
        ld_tensor *in[1] = {x};
        ld_node *n = ld_record(y, "merge_heads", bw_merge_heads, 1, in);
        if (n) n->args[0] = heads;
    }
    return y;
}
