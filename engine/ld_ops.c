/*
 * ld_ops.c - differentiable tensor ops: argument checks, dispatch to the
 * device's kernels, and each op's backward function.
 */
#include "ld_ops.h"
#include "ld_autograd.h"
#include "ld_executor.h"
#include "ld_replica.h"
#include "ld_ops_internal.h"
#include "ld_elementwise_math.h"

#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

/* An op's output (ld_ops_internal.h) */
ld_tensor *ld_ops_out_empty(ld_dtype dt, int ndim, const int64_t *shape, ld_device *dev) {
    int was = ld_alloc_stream_ordered(1);
    ld_tensor *t = ld_tensor_empty(dt, ndim, shape, dev);
    ld_alloc_stream_ordered(was);
    return t;
}

/* the ops' names in messages and on the tape, from the lists in ld_kernels.h */
static const char *const bin_names[] = {LD_BINARY_OPS(LD_OP_NAME)};
static const char *const un_names[] = {LD_UNARY_OPS(LD_OP_NAME)};
_Static_assert(sizeof bin_names / sizeof *bin_names == LD_BIN_COUNT, "a name for each binary op");
_Static_assert(sizeof un_names / sizeof *un_names == LD_UN_COUNT, "a name for each unary op");

int ld_check_same_device(const ld_tensor *a, const ld_tensor *b, const char *op) {
    if (DEV(a) != DEV(b))
        return ld_fail(LD_EDEVICE, "%s: tensors are on %s and %s; move one with :to()", op,
                       DEV(a)->name, DEV(b)->name);
    return LD_OK;
}

ld_dtype ld_ops_result_dtype(const ld_tensor *a, const ld_tensor *b) {
    ld_dtype da = a->dtype, db = b ? b->dtype : a->dtype;
    if (!ld_dtype_is_half(da) && !ld_dtype_is_half(db)) return LD_F32;
    if (da == db) return da;
    if (ld_dtype_is_half(da) && !ld_dtype_is_float(db)) return da;
    if (ld_dtype_is_half(db) && !ld_dtype_is_float(da)) return db;
    return LD_F32;
}

/* A cast between float dtypes is differentiable: the gradient comes back in
   the input's dtype, so an op's backward always sees float32 gradients (its
   inputs are float32) and a half tensor's gradient is half, as in Keras. */
static int bw_cast(ld_node *n, ld_tensor *g, ld_tensor **gi) {
    ld_dtype dt = n->in[0]->dtype;
    gi[0] = g->dtype == dt ? ld_tensor_retain(g) : ld_cast(g, dt);
    return gi[0] ? LD_OK : ld_error_status();
}

ld_tensor *ld_cast_op(ld_tensor *t, ld_dtype dt) {
    ld_tensor *c = ld_cast(t, dt);
    if (c && ld_dtype_is_float(t->dtype) && ld_dtype_is_float(dt)) {
        ld_tensor *in[1] = {t};
        ld_record(c, "cast", bw_cast, 1, in);
    }
    return c;
}

ld_tensor *ld_ops_in_dtype(ld_tensor *out, ld_dtype dt) {
    if (!out || dt == LD_F32 || out->dtype == dt) return out;
    ld_tensor *c = ld_cast_op(out, dt);
    ld_tensor_release(out);
    return c;
}

ld_tensor *ld_as_float(ld_tensor *t) {
    return t->dtype == LD_F32 ? ld_tensor_retain(t) : ld_cast_op(t, LD_F32);
}

ld_tensor *ld_as_floating(ld_tensor *t) {
    return ld_dtype_is_float(t->dtype) ? ld_tensor_retain(t) : ld_cast_op(t, LD_F32);
}

static int bw_identity(ld_node *n, ld_tensor *g, ld_tensor **gi) {
    gi[0] = ld_tensor_retain(g);
    return LD_OK;
}

/* ld_contiguous that keeps the graph: a copy of a strided view that needs a
   gradient is recorded, so the gradient reaches the view's source. */
ld_tensor *ld_ops_contig(ld_tensor *x) {
    if (!x) return NULL;
    ld_tensor *c = ld_contiguous(x);
    if (c && c != x) {
        ld_tensor *in[1] = {x};
        ld_record(c, "contiguous", bw_identity, 1, in);
    }
    return c;
}

int ld_ops_norm_axis(const ld_tensor *t, int *axis, const char *op) {
    int a = *axis;
    if (a < 0) a += t->ndim;
    if (a < 0 || a >= t->ndim)
        return ld_fail(LD_EARG, "%s: axis %d out of range for a tensor with %d dimensions", op, *axis, t->ndim);
    *axis = a;
    return LD_OK;
}

/* Sum g over the broadcast dimensions so it has `ndim`/`shape`. Not recorded.
   A half g is summed in float32 and rounded once, as TF's BiasAddGrad and
   reductions are (axis by axis, each sum rounded, a Dense bias's gradient
   over [batch, time, n] was several steps off): over leading axes in one
   reduction of g viewed as [rows, rest], else widened first. */
static ld_tensor *sum_to(ld_tensor *g, int ndim, const int64_t *shape) {
    int lead = g->ndim - ndim, nred = 0, prefix = 1;
    for (int i = 0; i < g->ndim; i++) {
        int j = i - lead;
        if (j < 0 || (shape[j] == 1 && g->shape[i] != 1)) {
            if (i != nred) prefix = 0;
            nred++;
        }
    }
    ld_tensor *cur;
    if (ld_dtype_is_half(g->dtype) && nred > 1 && prefix) {
        int64_t s2[LD_MAX_DIMS], rows = 1;
        for (int i = 0; i < nred; i++) rows *= g->shape[i];
        s2[0] = rows;
        for (int i = nred; i < g->ndim; i++) s2[i - nred + 1] = g->shape[i];
        ld_tensor *gc = ld_contiguous(g), *g2 = gc ? ld_reshape(gc, g->ndim - nred + 1, s2) : NULL;
        cur = g2 ? ld_sum(g2, 0, 0) : NULL;
        ld_tensor_release(gc); ld_tensor_release(g2);
    } else if (ld_dtype_is_half(g->dtype) && nred > 1) {
        ld_tensor *w = ld_cast(g, LD_F32), *f = w ? sum_to(w, ndim, shape) : NULL;
        cur = f ? ld_cast(f, g->dtype) : NULL;
        ld_tensor_release(w); ld_tensor_release(f);
        return cur;
    } else {
        cur = ld_tensor_retain(g);
        for (int i = 0; i < g->ndim && cur; i++) {
            int j = i - lead;
            if (j < 0 || (shape[j] == 1 && cur->shape[i] != 1)) {
                ld_tensor *s = ld_sum(cur, i, 1);
                ld_tensor_release(cur);
                cur = s;
            }
        }
    }
    if (!cur) return NULL;
    if (cur->ndim != ndim) {
        ld_tensor *r = ld_reshape(cur, ndim, shape);
        ld_tensor_release(cur);
        cur = r;
    }
    return cur;
}

void ld_ops_same_pad(int64_t in, int64_t k, int64_t s, int64_t *out, int64_t *pad) {
    *out = (in + s - 1) / s;
    int64_t t = (*out - 1) * s + k - in;
    *pad = t > 0 ? t / 2 : 0;
}

/* ================================================================ binary */
/* The NumPy broadcast of k tensors: the result's ndim and shape, and each
   tensor's strides over it (0 on the axes it is broadcast along). */
static int broadcast_n(int k, const ld_tensor *const *ts, int *ndim, int64_t *shape,
                       int64_t (*st)[LD_MAX_DIMS], const char *op) {
    int n = 0;
    for (int t = 0; t < k; t++) if (ts[t]->ndim > n) n = ts[t]->ndim;
    for (int i = 0; i < n; i++) {
        int64_t d = 1;
        for (int t = 0; t < k; t++) {
            int it = i - (n - ts[t]->ndim);
            int64_t dt = it >= 0 ? ts[t]->shape[it] : 1;
            if (dt == 1) continue;
            if (d != 1 && dt != d) {
                char b[3][64];
                for (int u = 0; u < k; u++) ld_shape_str(ts[u], b[u], sizeof b[u]);
                if (k == 2) return ld_fail(LD_ESHAPE, "shapes %s and %s cannot be broadcast together (%s)", b[0], b[1], op);
                return ld_fail(LD_ESHAPE, "shapes %s, %s and %s cannot be broadcast together (%s)", b[0], b[1], b[2], op);
            }
            d = dt;
        }
        shape[i] = d;
        for (int t = 0; t < k; t++) {
            int it = i - (n - ts[t]->ndim);
            st[t][i] = (it >= 0 && ts[t]->shape[it] != 1) ? ts[t]->strides[it] : 0;
        }
    }
    *ndim = n;
    return LD_OK;
}

static int broadcast(const ld_tensor *a, const ld_tensor *b, int *ndim, int64_t *shape, int64_t *sa,
                     int64_t *sb, const char *op) {
    const ld_tensor *ts[2] = {a, b};
    int64_t st[2][LD_MAX_DIMS];
    if (broadcast_n(2, ts, ndim, shape, st, op)) return ld_error_status();
    memcpy(sa, st[0], sizeof st[0]);
    memcpy(sb, st[1], sizeof st[1]);
    return LD_OK;
}

/* a op b, a and b of one float dtype (float32, or a half one: computed in
   float32, rounded once), the result in it */
static ld_tensor *binary_raw(ld_binary_op op, ld_tensor *a, ld_tensor *b) {
    int nd = 0;
    int64_t shape[LD_MAX_DIMS], sa[LD_MAX_DIMS], sb[LD_MAX_DIMS];
    if (ld_check_same_device(a, b, bin_names[op])) return NULL;
    if (broadcast(a, b, &nd, shape, sa, sb, bin_names[op])) return NULL;
    ld_tensor *out = ld_ops_out_empty(a->dtype, nd, shape, DEV(a));
    if (!out) return NULL;
    BE(a)->binary(DEV(a), op, a->dtype, DPTR(out), DPTR(a), sa, DPTR(b), sb, nd, shape);
    return out;
}

static int bw_binary_in(ld_node *n, ld_tensor *g, ld_tensor **gi);
/* a and b of one dtype (float32, or half: the gradients are half ops too);
   g in it (a float32 seed is rounded to it) */
static int bw_binary(ld_node *n, ld_tensor *g, ld_tensor **gi) {
    if (g->dtype == n->in[0]->dtype) return bw_binary_in(n, g, gi);
    ld_tensor *gd = ld_cast(g, n->in[0]->dtype);
    int st = gd ? bw_binary_in(n, gd, gi) : ld_error_status();
    ld_tensor_release(gd);
    return st;
}

static int bw_binary_in(ld_node *n, ld_tensor *g, ld_tensor **gi) {
    ld_binary_op op = (ld_binary_op)n->args[0];
    ld_tensor *a = n->in[0], *b = n->in[1];
    ld_tensor *ga = NULL, *gb = NULL, *t1 = NULL, *t2 = NULL;
    switch (op) {
    case LD_BIN_ADD: ga = ld_tensor_retain(g); gb = ld_tensor_retain(g); break;
    case LD_BIN_SUB: ga = ld_tensor_retain(g); gb = ld_neg(g); break;
    case LD_BIN_MUL: ga = ld_mul(g, b); gb = ld_mul(g, a); break;
    case LD_BIN_DIV:
        ga = ld_div(g, b);
        t1 = ld_mul(ga, n->saved[0]);           /* g/b * out = g*a/b^2 */
        gb = t1 ? ld_neg(t1) : NULL;
        break;
    case LD_BIN_POW: {
        /* d/da = b a^(b-1) g ; d/db = out log(a) g */
        t1 = ld_div(n->saved[0], a);
        t2 = t1 ? ld_mul(t1, b) : NULL;
        ga = t2 ? ld_mul(t2, g) : NULL;
        ld_tensor_release(t1); ld_tensor_release(t2);
        t1 = ld_log(a);
        t2 = t1 ? ld_mul(t1, n->saved[0]) : NULL;
        gb = t2 ? ld_mul(t2, g) : NULL;
        ld_tensor_release(t2); t2 = NULL;
        break;
    }
    case LD_BIN_MAX: case LD_BIN_MIN: {
        /* the gradient goes to the operand that was chosen (to a on ties) */
        t1 = binary_raw(LD_BIN_EQ, a, n->saved[0]);
        ga = t1 ? ld_mul(g, t1) : NULL;
        t2 = ga ? ld_sub(g, ga) : NULL;
        gb = t2 ? ld_tensor_retain(t2) : NULL;
        break;
    }
    default: return ld_fail(LD_EINTERNAL, "no gradient for %s", bin_names[op]);
    }
    ld_tensor_release(t1); ld_tensor_release(t2);
    if (!ga || !gb) { ld_tensor_release(ga); ld_tensor_release(gb); return ld_error_status(); }
    gi[0] = sum_to(ga, a->ndim, a->shape);
    gi[1] = sum_to(gb, b->ndim, b->shape);
    ld_tensor_release(ga); ld_tensor_release(gb);
    return gi[0] && gi[1] ? LD_OK : ld_error_status();
}

/* Integers stay integers (TF's rule: int64 + int64 is int64) for +, -, *,
   maximum and minimum of two integer tensors on the host: computed in int64
   and stored in the wider dtype (int64 > int32 > uint8, wrapping on
   overflow as TF does). Integers have no gradient, so nothing is recorded. */
static int is_int_dtype(ld_dtype d) { return d == LD_I64 || d == LD_I32 || d == LD_U8; }
static int64_t int_at(const char *p, ld_dtype d, int64_t i) {
    switch (d) {
    case LD_I64: return ((const int64_t *)p)[i];
    case LD_I32: return ((const int32_t *)p)[i];
    default: return ((const uint8_t *)p)[i];
    }
}
/* r stored as element i of an integer dtype, wrapping as TF's integers do */
static void int_put(char *p, ld_dtype d, int64_t i, int64_t r) {
    if (d == LD_I64) ((int64_t *)p)[i] = r;
    else if (d == LD_I32) ((int32_t *)p)[i] = (int32_t)(uint32_t)(uint64_t)r;
    else ((uint8_t *)p)[i] = (uint8_t)(uint64_t)r;
}
static ld_dtype wider_int(ld_dtype a, ld_dtype b) {
    return a == LD_I64 || b == LD_I64 ? LD_I64 : a == LD_I32 || b == LD_I32 ? LD_I32 : LD_U8;
}
/* comparisons of two integer tensors compare the integers exactly (an int64
   id above 2^24 is not rounded to a float first), giving float32 0/1 as the
   float comparisons do */
static ld_tensor *binary_int(ld_binary_op op, ld_tensor *a, ld_tensor *b) {
    int nd = 0;
    int64_t shape[LD_MAX_DIMS], sa[LD_MAX_DIMS], sb[LD_MAX_DIMS], idx[LD_MAX_DIMS] = {0};
    if (broadcast(a, b, &nd, shape, sa, sb, bin_names[op])) return NULL;
    ld_dtype dt = op >= LD_BIN_EQ ? LD_F32 : wider_int(a->dtype, b->dtype);
    ld_tensor *out = ld_tensor_empty(dt, nd, shape, DEV(a));
    const char *pa = out ? ld_tensor_data(a) : NULL, *pb = pa ? ld_tensor_data(b) : NULL;
    if (!pb) { ld_tensor_release(out); return NULL; }
    char *po = ld_tensor_data_unsynced(out);
    int64_t n = ld_tensor_numel(out), ia = 0, ib = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t x = int_at(pa, a->dtype, ia), y = int_at(pb, b->dtype, ib), r;
        switch (op) {
        case LD_BIN_ADD: r = (int64_t)((uint64_t)x + (uint64_t)y); break;
        case LD_BIN_SUB: r = (int64_t)((uint64_t)x - (uint64_t)y); break;
        case LD_BIN_MUL: r = (int64_t)((uint64_t)x * (uint64_t)y); break;
        case LD_BIN_MAX: r = x > y ? x : y; break;
        case LD_BIN_MIN: r = x < y ? x : y; break;
        case LD_BIN_EQ: r = x == y; break;
        case LD_BIN_NE: r = x != y; break;
        case LD_BIN_LT: r = x < y; break;
        case LD_BIN_LE: r = x <= y; break;
        case LD_BIN_GT: r = x > y; break;
        default: r = x >= y; break;
        }
        if (dt == LD_F32) ((float *)po)[i] = (float)r;
        else int_put(po, dt, i, r);
        for (int d = nd - 1; d >= 0; d--) {      /* the next index, row-major */
            ia += sa[d];
            ib += sb[d];
            if (++idx[d] < shape[d]) break;
            ia -= sa[d] * shape[d];
            ib -= sb[d] * shape[d];
            idx[d] = 0;
        }
    }
    return out;
}

ld_tensor *ld_binary(ld_binary_op op, ld_tensor *a, ld_tensor *b) {
    if (is_int_dtype(a->dtype) && is_int_dtype(b->dtype) && ld_device_is_host(DEV(a)) && DEV(a) == DEV(b) &&
        (op == LD_BIN_ADD || op == LD_BIN_SUB || op == LD_BIN_MUL || op == LD_BIN_MAX || op == LD_BIN_MIN ||
         op >= LD_BIN_EQ))
        return binary_int(op, a, b);
    ld_dtype rdt = ld_ops_result_dtype(a, b);
    /* two half operands of one dtype: the half kernel (float32 arithmetic,
       rounded once: the bits the float32 op and a cast give, without their
       kernels), recorded on the half tensors; others as float32 */
    int half = ld_dtype_is_half(a->dtype) && a->dtype == b->dtype;
    ld_tensor *fa = half ? ld_tensor_retain(a) : ld_as_float(a), *fb = !fa ? NULL : half ? ld_tensor_retain(b) : ld_as_float(b);
    ld_tensor *out = fb ? binary_raw(op, fa, fb) : NULL;
    if (out && op < LD_BIN_EQ) {
        ld_tensor *in[2] = {fa, fb};
        ld_node *nd = ld_record(out, bin_names[op], bw_binary, 2, in);
        if (nd) {
            nd->args[0] = op;
            if (op == LD_BIN_DIV || op == LD_BIN_POW || op == LD_BIN_MAX || op == LD_BIN_MIN) {
                /* keep the result without creating a cycle: a plain view */
                ld_tensor *o = ld_reshape(out, out->ndim, out->shape);
                nd->saved[0] = o;
            }
        }
    }
    ld_tensor_release(fa);
    ld_tensor_release(fb);
    return half ? out : ld_ops_in_dtype(out, rdt);
}

/* ================================================================ where */
/* cond ? a : b, broadcast, a and b of one dtype (the result's); not recorded */
static ld_tensor *select_raw(ld_tensor *cond, ld_tensor *a, ld_tensor *b) {
    const ld_tensor *ts[3] = {cond, a, b};
    int nd = 0;
    int64_t shape[LD_MAX_DIMS], st[3][LD_MAX_DIMS];
    if (broadcast_n(3, ts, &nd, shape, st, "where")) return NULL;
    ld_tensor *out = ld_ops_out_empty(a->dtype, nd, shape, DEV(a));
    if (out) BE(a)->select(DEV(a), a->dtype, DPTR(out), DPTR(cond), cond->dtype, st[0], DPTR(a), st[1], DPTR(b), st[2], nd, shape);
    return out;
}

/* the gradient goes to the operand each element was taken from: g where
   cond is true to a, where false to b (zeros elsewhere, selected, not
   multiplied: an inf or NaN in g's other place does not leak) */
static int bw_where(ld_node *n, ld_tensor *g, ld_tensor **gi) {
    ld_tensor *a = n->in[0], *b = n->in[1], *cond = n->saved[0];
    ld_tensor *gd = g->dtype == a->dtype ? ld_tensor_retain(g) : ld_cast(g, a->dtype);
    ld_tensor *zero = gd ? ld_tensor_zeros(a->dtype, 0, NULL, DEV(gd)) : NULL;
    ld_tensor *ga = zero ? select_raw(cond, gd, zero) : NULL, *gb = ga ? select_raw(cond, zero, gd) : NULL;
    ld_tensor_release(gd);
    ld_tensor_release(zero);
    if (gb) {
        gi[0] = sum_to(ga, a->ndim, a->shape);
        gi[1] = sum_to(gb, b->ndim, b->shape);
    }
    ld_tensor_release(ga);
    ld_tensor_release(gb);
    return gi[0] && gi[1] ? LD_OK : ld_error_status();
}

/* an operand of where in the result's dtype: float casts are recorded (the
   gradient comes back in the operand's dtype) */
static ld_tensor *where_operand(ld_tensor *t, ld_dtype dt) {
    if (t->dtype == dt) return ld_tensor_retain(t);
    return ld_dtype_is_float(dt) ? ld_cast_op(t, dt) : ld_cast(t, dt);
}

ld_tensor *ld_where(ld_tensor *cond, ld_tensor *a, ld_tensor *b) {
    if (ld_check_same_device(a, b, "where") || ld_check_same_device(cond, a, "where")) return NULL;
    ld_dtype dt = a->dtype == b->dtype ? a->dtype
                  : is_int_dtype(a->dtype) && is_int_dtype(b->dtype) ? wider_int(a->dtype, b->dtype)
                  : ld_ops_result_dtype(a, b);
    ld_tensor *ca = where_operand(a, dt), *cb = ca ? where_operand(b, dt) : NULL;
    ld_tensor *out = cb ? select_raw(cond, ca, cb) : NULL;
    if (out && ld_dtype_is_float(dt)) {
        ld_tensor *in[2] = {ca, cb};
        ld_node *nd = ld_record(out, "where", bw_where, 2, in);
        if (nd) nd->saved[0] = ld_tensor_retain(cond);
    }
    ld_tensor_release(ca);
    ld_tensor_release(cb);
    return out;
}

ld_tensor *ld_where_indices(ld_tensor *cond) {
    ld_tensor *h = ld_to_device(cond, ld_device_cpu()), *c = h ? ld_contiguous(h) : NULL;
    ld_tensor_release(h);
    const void *p = c ? ld_tensor_data(c) : NULL;
    if (!p) { ld_tensor_release(c); return NULL; }
    int64_t n = ld_tensor_numel(c), count = 0;
    for (int64_t i = 0; i < n; i++) count += ld_ew_truthy(p, c->dtype, i);
    int64_t shape[2] = {count, c->ndim};
    ld_tensor *out = ld_tensor_empty(LD_I64, 2, shape, NULL);
    if (out) {
        int64_t *o = ld_tensor_data_unsynced(out), idx[LD_MAX_DIMS] = {0};
        for (int64_t i = 0; i < n; i++) {
            if (ld_ew_truthy(p, c->dtype, i)) for (int d = 0; d < c->ndim; d++) *o++ = idx[d];
            for (int d = c->ndim - 1; d >= 0; d--) {
                if (++idx[d] < c->shape[d]) break;
                idx[d] = 0;
            }
        }
    }
    ld_tensor_release(c);
    if (!out || DEV(cond) == ld_device_cpu()) return out;
    ld_tensor *moved = ld_to_device(out, DEV(cond));
    ld_tensor_release(out);
    return moved;
}

ld_tensor *ld_clip_by_value(ld_tensor *x, ld_tensor *lo, ld_tensor *hi) {
    ld_tensor *t = ld_minimum(x, hi), *y = t ? ld_maximum(t, lo) : NULL;
    ld_tensor_release(t);
    return y;
}

ld_tensor *ld_one_hot(ld_tensor *ids, int64_t depth, float on, float off, int axis, ld_dtype dt) {
    char b1[LD_SHAPE_STR_MAX];
    if (ids->dtype != LD_I64 && ids->dtype != LD_I32 && ids->dtype != LD_U8) {
        ld_fail(LD_ETYPE, "one_hot: indices must be integers (int32, int64 or uint8), got %s", ld_dtype_name(ids->dtype));
        return NULL;
    }
    if (depth < 0) { ld_fail(LD_EARG, "one_hot: depth must be 0 or more, got %lld", (long long)depth); return NULL; }
    if (ids->ndim + 1 > LD_MAX_DIMS) {
        ld_fail(LD_ESHAPE, "one_hot: indices %s would give more than %d dimensions", ld_shape_str(ids, b1, sizeof b1), LD_MAX_DIMS);
        return NULL;
    }
    if (axis < -1 || axis > ids->ndim) {
        ld_fail(LD_EARG, "one_hot: axis %d is out of range for indices of shape %s (-1 to %d)", axis,
                ld_shape_str(ids, b1, sizeof b1), ids->ndim);
        return NULL;
    }
    int ax = axis < 0 ? ids->ndim : axis;
    /* ids with a 1 at the new axis, classes 0..depth-1 along it: their
       equality broadcasts to the result (an index outside [0, depth) is
       equal to none: a row of off, as TF's) */
    int64_t is[LD_MAX_DIMS], cs[LD_MAX_DIMS];
    for (int i = 0, k = 0; i <= ids->ndim; i++) {
        is[i] = i == ax ? 1 : ids->shape[k++];
        cs[i] = i == ax ? depth : 1;
    }
    ld_tensor *classes = ld_tensor_arange(0, (double)depth, 1, LD_I64, DEV(ids));
    ld_tensor *cr = classes ? ld_reshape(classes, ids->ndim + 1, cs) : NULL;
    ld_tensor *ir = cr ? ld_reshape(ids, ids->ndim + 1, is) : NULL;
    ld_tensor *hot = ir ? ld_binary(LD_BIN_EQ, ir, cr) : NULL;
    ld_tensor *vals[2] = {NULL, NULL}, *y = NULL;
    if (hot) {
        vals[0] = ld_tensor_full(dt, 0, NULL, on, DEV(ids));
        vals[1] = vals[0] ? ld_tensor_full(dt, 0, NULL, off, DEV(ids)) : NULL;
        y = vals[1] ? select_raw(hot, vals[0], vals[1]) : NULL;
    }
    ld_tensor_release(classes); ld_tensor_release(cr); ld_tensor_release(ir); ld_tensor_release(hot);
    ld_tensor_release(vals[0]); ld_tensor_release(vals[1]);
    return y;
}

ld_tensor *ld_add(ld_tensor *a, ld_tensor *b) { return ld_binary(LD_BIN_ADD, a, b); }
ld_tensor *ld_sub(ld_tensor *a, ld_tensor *b) { return ld_binary(LD_BIN_SUB, a, b); }
ld_tensor *ld_mul(ld_tensor *a, ld_tensor *b) { return ld_binary(LD_BIN_MUL, a, b); }
ld_tensor *ld_div(ld_tensor *a, ld_tensor *b) { return ld_binary(LD_BIN_DIV, a, b); }
ld_tensor *ld_pow(ld_tensor *a, ld_tensor *b) { return ld_binary(LD_BIN_POW, a, b); }
ld_tensor *ld_maximum(ld_tensor *a, ld_tensor *b) { return ld_binary(LD_BIN_MAX, a, b); }
ld_tensor *ld_minimum(ld_tensor *a, ld_tensor *b) { return ld_binary(LD_BIN_MIN, a, b); }

static ld_tensor *with_scalar(ld_binary_op op, ld_tensor *a, float s) {
    ld_tensor *st = ld_tensor_scalar(s, DEV(a));
    if (!st) return NULL;
    ld_tensor *r = ld_binary(op, a, st);
    ld_tensor_release(st);
    return r;
}
ld_tensor *ld_add_scalar(ld_tensor *a, float s) { return with_scalar(LD_BIN_ADD, a, s); }
ld_tensor *ld_mul_scalar(ld_tensor *a, float s) { return with_scalar(LD_BIN_MUL, a, s); }
ld_tensor *ld_pow_scalar(ld_tensor *a, float s) { return with_scalar(LD_BIN_POW, a, s); }

/* ================================================================ unary */
/* x (contiguous) and y in one dtype, float32 or half; g in it too (a float32
   seed is rounded to it) */
static int bw_unary(ld_node *n, ld_tensor *g, ld_tensor **gi) {
    ld_tensor *x = n->in[0], *y = n->saved[0];
    ld_tensor *gc = g->dtype == x->dtype ? ld_contiguous(g) : ld_cast(g, x->dtype);
    if (!gc) return ld_error_status();
    ld_tensor *dx = ld_ops_out_empty(x->dtype, x->ndim, x->shape, DEV(x));
    if (dx) BE(x)->unary_backward(DEV(x), (ld_unary_op)n->args[0], x->dtype, DPTR(dx), DPTR(gc), DPTR(x),
                                  y ? DPTR(y) : NULL, ld_tensor_numel(x));
    ld_tensor_release(gc);
    gi[0] = dx;
    return dx ? LD_OK : ld_error_status();
}

/* A half x runs the half kernel (float32 arithmetic, rounded once) and is
   recorded as it is; an integer one is cast to float32 first. */
ld_tensor *ld_unary(ld_unary_op op, ld_tensor *x) {
    ld_tensor *fx = ld_dtype_is_half(x->dtype) ? ld_tensor_retain(x) : ld_as_float(x);
    if (!fx) return NULL;
    ld_tensor *cx = ld_ops_contig(fx);
    ld_tensor_release(fx);
    if (!cx) return NULL;
    ld_tensor *y = ld_ops_out_empty(cx->dtype, cx->ndim, cx->shape, DEV(cx));
    if (y) {
        BE(cx)->unary(DEV(cx), op, cx->dtype, DPTR(y), DPTR(cx), ld_tensor_numel(cx));
        ld_tensor *in[1] = {cx};
        ld_node *nd = ld_record(y, un_names[op], bw_unary, 1, in);
        if (nd) {
            nd->args[0] = op;
            if (ld_ew_grad_uses_y(op))
                nd->saved[0] = ld_reshape(y, y->ndim, y->shape);
        }
    }
    ld_tensor_release(cx);
    return y;
}

ld_tensor *ld_neg(ld_tensor *x) {
    if (is_int_dtype(x->dtype) && x->dtype != LD_U8 && ld_device_is_host(DEV(x))) {   /* -int stays int */
        ld_tensor *z = ld_tensor_zeros(x->dtype, 0, NULL, DEV(x));
        ld_tensor *y = z ? binary_int(LD_BIN_SUB, z, x) : NULL;
        ld_tensor_release(z);
        return y;
    }
    return ld_unary(LD_UN_NEG, x);
}
ld_tensor *ld_exp(ld_tensor *x) { return ld_unary(LD_UN_EXP, x); }
ld_tensor *ld_log(ld_tensor *x) { return ld_unary(LD_UN_LOG, x); }
ld_tensor *ld_sqrt(ld_tensor *x) { return ld_unary(LD_UN_SQRT, x); }
ld_tensor *ld_relu(ld_tensor *x) { return ld_unary(LD_UN_RELU, x); }
ld_tensor *ld_sigmoid(ld_tensor *x) { return ld_unary(LD_UN_SIGMOID, x); }
ld_tensor *ld_tanh(ld_tensor *x) { return ld_unary(LD_UN_TANH, x); }
ld_tensor *ld_gelu(ld_tensor *x) { return ld_unary(LD_UN_GELU, x); }

/* ================================================================ reductions */
void ld_ops_split_axis(int ndim, const int64_t *shape, int axis, int64_t *outer, int64_t *inner) {
    *outer = 1; *inner = 1;
    for (int i = 0; i < axis; i++) *outer *= shape[i];
    for (int i = axis + 1; i < ndim; i++) *inner *= shape[i];
}

static void reduced_shape(const ld_tensor *t, int axis, int keep, int *nd, int64_t *shape) {
    int k = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (i == axis) { if (keep) shape[k++] = 1; }
        else shape[k++] = t->shape[i];
    }
    *nd = k;
}

/* Broadcast g (reduced over `axis`) back to x's shape, in dtype dt. */
static ld_tensor *expand_back_as(ld_tensor *g, const ld_tensor *x, int axis, ld_dtype dt) {
    int64_t ks[LD_MAX_DIMS];
    int nd = 0;
    if (axis == LD_ALL_AXES) { for (int i = 0; i < x->ndim; i++) ks[i] = 1; nd = x->ndim; }
    else reduced_shape(x, axis, 1, &nd, ks);
    ld_tensor *gk = ld_reshape(g, nd, ks);
    if (!gk) return NULL;
    ld_tensor *out = ld_ops_out_empty(dt, x->ndim, x->shape, DEV(x));
    if (out && ld_copy_into(out, gk)) { ld_tensor_release(out); out = NULL; }
    ld_tensor_release(gk);
    return out;
}
static ld_tensor *expand_back(ld_tensor *g, const ld_tensor *x, int axis) { return expand_back_as(g, x, axis, LD_F32); }

/* a half x's gradient in x's dtype: the float32 gradient rounded once, in
   the copy that broadcasts it when it needs no scaling */
static int bw_sum(ld_node *n, ld_tensor *g, ld_tensor **gi) {
    ld_tensor *x = n->in[0];
    int scaled = n->args[1] != 1.0;
    ld_dtype dt = ld_dtype_is_half(x->dtype) ? x->dtype : LD_F32;
    ld_tensor *e = expand_back_as(g, x, (int)n->args[0], scaled ? LD_F32 : dt);
    if (e && scaled) {
        ld_tensor *s = ld_mul_scalar(e, (float)n->args[1]);
        ld_tensor_release(e);
        e = s;
    }
    if (e && e->dtype != dt) {
        ld_tensor *c = ld_cast(e, dt);
        ld_tensor_release(e);
        e = c;
    }
    gi[0] = e;
    return e ? LD_OK : ld_error_status();
}

static int bw_max(ld_node *n, ld_tensor *g, ld_tensor **gi) {
    ld_tensor *x = n->in[0];
    int axis = (int)n->args[0];
    ld_tensor *mx = expand_back(n->saved[0], x, axis);
    ld_tensor *mask = mx ? binary_raw(LD_BIN_EQ, x, mx) : NULL;
    ld_tensor *cnt = mask ? ld_sum(mask, axis, 0) : NULL;
    ld_tensor *gdiv = cnt ? ld_div(g, cnt) : NULL;
    ld_tensor *ge = gdiv ? expand_back(gdiv, x, axis) : NULL;
    gi[0] = ge ? ld_mul(ge, mask) : NULL;
    ld_tensor_release(mx); ld_tensor_release(mask); ld_tensor_release(cnt);
    ld_tensor_release(gdiv); ld_tensor_release(ge);
    return gi[0] ? LD_OK : ld_error_status();
}

/* Integer reductions, TF's rule: sum, prod, max and min of an integer
   tensor are of its dtype and exact (int64 16777217 sums to 16777217, not to
   the nearest float32), a sum or product wrapping on overflow as TF's does;
   argmax/argmin compare the integers themselves (int64, first index on
   ties); mean is float32 (TF's would truncate to an integer), the exact sum
   divided in double. The scans (cumsum, cumprod: INT_SCAN_*, excl and rev
   as the scan kernel's exclusive and reverse) are the same running sums and
   products, each step written, of x's dtype and shape. Computed on the host
   (integers have no gradient): a device's tensor goes there and back. */
typedef enum {
    INT_RED_SUM, INT_RED_PROD, INT_RED_MAX, INT_RED_MIN, INT_RED_MEAN, INT_RED_ARGMAX, INT_RED_ARGMIN,
    INT_SCAN_SUM, INT_SCAN_PROD
} int_red;
static const char *const int_red_names[] = {"sum", "prod", "max", "min", "mean", "argmax", "argmin", "cumsum", "cumprod"};

static ld_tensor *int_pass(int_red kind, ld_tensor *x, int axis, int keep, int excl, int rev) {
    const char *name = int_red_names[kind];
    int ax = axis, scan = kind >= INT_SCAN_SUM;
    if (axis != LD_ALL_AXES && ld_ops_norm_axis(x, &ax, name)) return NULL;
    ld_device *dev = DEV(x);
    ld_tensor *hx = ld_device_is_host(dev) ? ld_tensor_retain(x) : ld_to_device(x, ld_device_cpu());
    ld_tensor *cx = hx ? ld_contiguous(hx) : NULL;
    ld_tensor_release(hx);
    if (!cx) return NULL;
    int64_t outer = 1, n, inner = 1, shape[LD_MAX_DIMS];
    int nd = 0;
    if (axis == LD_ALL_AXES) {
        n = ld_tensor_numel(cx);
        nd = keep ? cx->ndim : 0;
        for (int i = 0; i < nd; i++) shape[i] = 1;
    } else {
        ld_ops_split_axis(cx->ndim, cx->shape, ax, &outer, &inner);
        n = cx->shape[ax];
        if (scan) { nd = cx->ndim; memcpy(shape, cx->shape, sizeof(int64_t) * (size_t)nd); }
        else reduced_shape(cx, ax, keep, &nd, shape);
    }
    if (n == 0 && kind != INT_RED_SUM && kind != INT_RED_PROD && !scan) {
        ld_fail(LD_ESHAPE, "%s of an empty dimension", name);
        ld_tensor_release(cx);
        return NULL;
    }
    ld_dtype odt = kind == INT_RED_MEAN ? LD_F32 : kind == INT_RED_ARGMAX || kind == INT_RED_ARGMIN ? LD_I64 : x->dtype;
    ld_tensor *out = ld_tensor_empty(odt, nd, shape, ld_device_is_host(dev) ? dev : ld_device_cpu());
    const char *p = out ? ld_tensor_data(cx) : NULL;
    if (!p) { ld_tensor_release(out); ld_tensor_release(cx); return NULL; }
    char *po = ld_tensor_data_unsynced(out);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            int64_t base = o * n * inner + i, best = n ? int_at(p, cx->dtype, base) : 0, at = 0;
            uint64_t sum = 0, prod = 1;   /* unsigned: wraps on overflow instead of being undefined */
            for (int64_t s = 0; s < n; s++) {
                int64_t j = rev ? n - 1 - s : s, v = int_at(p, cx->dtype, base + j * inner);
                uint64_t before = kind == INT_SCAN_PROD ? prod : sum;
                sum += (uint64_t)v;
                prod *= (uint64_t)v;
                if ((kind == INT_RED_MAX || kind == INT_RED_ARGMAX) ? v > best : v < best) { best = v; at = j; }
                if (scan) int_put(po, odt, base + j * inner, (int64_t)(excl ? before : kind == INT_SCAN_PROD ? prod : sum));
            }
            if (scan) continue;
            int64_t k = o * inner + i;
            if (kind == INT_RED_MEAN) ((float *)po)[k] = (float)((double)(int64_t)sum / (double)n);
            else if (kind == INT_RED_ARGMAX || kind == INT_RED_ARGMIN) ((int64_t *)po)[k] = at;
            else int_put(po, odt, k, kind == INT_RED_SUM ? (int64_t)sum : kind == INT_RED_PROD ? (int64_t)prod : best);
        }
    ld_tensor_release(cx);
    if (ld_device_is_host(dev)) return out;
    ld_tensor *d = ld_to_device(out, dev);
    ld_tensor_release(out);
    return d;
}
static ld_tensor *reduce_int(int_red kind, ld_tensor *x, int axis, int keep) {
    return int_pass(kind, x, axis, keep, 0, 0);
}

/* A half x is summed as it is (the kernel widens it: the same float32
   sums without a float32 copy; its gradient comes back in its dtype);
   max and argmax take it widened. The result is float32, or for a sum odt
   (x's half dtype: the float32 sums rounded once by the kernel). */
static ld_tensor *reduce(ld_reduce_op op, ld_tensor *x, int axis, int keep, const char *name, ld_dtype odt) {
    ld_tensor *fx = op == LD_RED_SUM && ld_dtype_is_half(x->dtype) ? ld_tensor_retain(x)
                    : op == LD_RED_ARGMAX && x->dtype != LD_F32 ? ld_cast(x, LD_F32) : ld_as_float(x);
    if (!fx) return NULL;
    ld_tensor *cx = ld_ops_contig(fx);
    ld_tensor_release(fx);
    if (!cx) return NULL;
    ld_tensor *flat = NULL, *src = cx;
    int ax = axis;
    if (axis == LD_ALL_AXES) {
        int64_t n = ld_tensor_numel(cx);
        flat = ld_reshape(cx, 1, &n);
        if (!flat) { ld_tensor_release(cx); return NULL; }
        src = flat;
        ax = 0;
    } else if (ld_ops_norm_axis(cx, &ax, name)) {
        ld_tensor_release(cx);
        return NULL;
    }
    if (op != LD_RED_SUM && src->shape[ax] == 0) {
        ld_fail(LD_ESHAPE, "%s of an empty dimension", name);
        ld_tensor_release(flat); ld_tensor_release(cx);
        return NULL;
    }
    int64_t outer, n, inner, shape[LD_MAX_DIMS];
    int nd = 0;
    ld_ops_split_axis(src->ndim, src->shape, ax, &outer, &inner);
    n = src->shape[ax];
    if (axis == LD_ALL_AXES) {
        nd = keep ? cx->ndim : 0;
        for (int i = 0; i < nd; i++) shape[i] = 1;
    } else reduced_shape(src, ax, keep, &nd, shape);
    if (op != LD_RED_SUM) odt = LD_F32;
    ld_tensor *out = ld_ops_out_empty(op == LD_RED_ARGMAX ? LD_I64 : odt, nd, shape, DEV(cx));
    if (out) BE(cx)->reduce(DEV(cx), op, out->storage->data, odt, odt, DPTR(src), src->dtype, outer, n, inner);
    ld_tensor_release(flat);
    if (out && op != LD_RED_ARGMAX) {
        ld_tensor *in[1] = {cx};
        ld_node *nd_ = ld_record(out, name, op == LD_RED_SUM ? bw_sum : bw_max, 1, in);
        if (nd_) {
            nd_->args[0] = axis == LD_ALL_AXES ? LD_ALL_AXES : ax;
            nd_->args[1] = 1.0;
            if (op == LD_RED_MAX) nd_->saved[0] = ld_reshape(out, out->ndim, out->shape);
        }
    }
    ld_tensor_release(cx);
    return out;
}

ld_tensor *ld_sum(ld_tensor *x, int axis, int keepdims) {
    if (is_int_dtype(x->dtype)) return reduce_int(INT_RED_SUM, x, axis, keepdims);
    /* a half tensor's sum accumulates in float32 (the reduce kernel's), rounded
       once by the kernel into the tensor's dtype */
    return reduce(LD_RED_SUM, x, axis, keepdims, "sum", ld_ops_result_dtype(x, NULL));
}
ld_tensor *ld_max(ld_tensor *x, int axis, int keepdims) {
    if (is_int_dtype(x->dtype)) return reduce_int(INT_RED_MAX, x, axis, keepdims);
    return ld_ops_in_dtype(reduce(LD_RED_MAX, x, axis, keepdims, "max", LD_F32), ld_ops_result_dtype(x, NULL));
}
ld_tensor *ld_argmax(ld_tensor *x, int axis) {
    if (is_int_dtype(x->dtype)) return reduce_int(INT_RED_ARGMAX, x, axis, 0);
    return reduce(LD_RED_ARGMAX, x, axis, 0, "argmax", LD_F32);
}
/* min and argmin of a float tensor as max and argmax of -x: one reduction
   kernel, and the gradient comes with it */
ld_tensor *ld_min(ld_tensor *x, int axis, int keepdims) {
    if (is_int_dtype(x->dtype)) return reduce_int(INT_RED_MIN, x, axis, keepdims);
    ld_tensor *n = ld_neg(x), *m = n ? reduce(LD_RED_MAX, n, axis, keepdims, "min", LD_F32) : NULL;
    ld_tensor *r = m ? ld_neg(m) : NULL;
    ld_tensor_release(n); ld_tensor_release(m);
    return ld_ops_in_dtype(r, ld_ops_result_dtype(x, NULL));
}
ld_tensor *ld_argmin(ld_tensor *x, int axis) {
    if (is_int_dtype(x->dtype)) return reduce_int(INT_RED_ARGMIN, x, axis, 0);
    ld_tensor *n = ld_neg(x), *r = n ? reduce(LD_RED_ARGMAX, n, axis, 0, "argmin", LD_F32) : NULL;
    ld_tensor_release(n);
    return r;
}

ld_tensor *ld_mean(ld_tensor *x, int axis, int keepdims) {
    if (is_int_dtype(x->dtype)) return reduce_int(INT_RED_MEAN, x, axis, keepdims);
    int64_t n = ld_tensor_numel(x);
    if (axis != LD_ALL_AXES) {
        int ax = axis;
        if (ld_ops_norm_axis(x, &ax, "mean")) return NULL;
        n = x->shape[ax];
    }
    if (n == 0) { ld_fail(LD_ESHAPE, "mean of an empty tensor"); return NULL; }
    ld_tensor *s = reduce(LD_RED_SUM, x, axis, keepdims, "sum", LD_F32);   /* float32, divided before any rounding to half */
    if (!s) return NULL;
    /* fold the division into the sum's node so the graph stays small */
    float inv = 1.0f / (float)n;
    ld_tensor *sc = ld_tensor_scalar(inv, DEV(s));
    if (!sc) { ld_tensor_release(s); return NULL; }
    int64_t zs[LD_MAX_DIMS] = {0};
    BE(s)->binary(DEV(s), LD_BIN_MUL, LD_F32, FPTR(s), FPTR(s), s->strides, FPTR(sc), zs, s->ndim, s->shape);
    ld_tensor_release(sc);
    if (s->grad_fn) s->grad_fn->args[1] = inv;
    return ld_ops_in_dtype(s, ld_ops_result_dtype(x, NULL));
}

/* ================================================================ cumulative sums and products, prod */
/* the scan kernel over axis ax of a float32 or half x (made contiguous),
   the result in odt; not recorded */
static ld_tensor *scan_raw(ld_scan_op op, ld_tensor *x, int ax, int excl, int rev, ld_dtype odt) {
    ld_tensor *cx = ld_contiguous(x);
    ld_tensor *out = cx ? ld_ops_out_empty(odt, cx->ndim, cx->shape, DEV(cx)) : NULL;
    if (out) {
        int64_t outer, inner;
        ld_ops_split_axis(cx->ndim, cx->shape, ax, &outer, &inner);
        BE(cx)->scan(DEV(cx), op, DPTR(out), odt, DPTR(cx), cx->dtype, outer, cx->shape[ax], inner, excl, rev);
    }
    ld_tensor_release(cx);
    return out;
}

/* TF's gradients (math_grad.py): cumsum's is the cumsum of g running the
   other way, as exclusive as the forward (_CumsumGrad); cumprod's is
   _CumprodGrad's cumsum(y * g, exclusive, the other way) divided by x, y
   the forward's result, with TF's div_no_nan: 0 where x is 0 (TF's value
   there, not the product of the others), NaN where x is NaN. A half
   cumsum's gradient is written in x's dtype, the float32 sums rounded once. */
static int bw_scan(ld_node *nd, ld_tensor *g, ld_tensor **gi) {
    ld_tensor *x = nd->in[0];
    int ax = (int)nd->args[0], excl = (int)nd->args[1], rev = (int)nd->args[2];
    if ((ld_scan_op)nd->args[3] == LD_SCAN_SUM) {
        gi[0] = scan_raw(LD_SCAN_SUM, g, ax, excl, !rev, ld_dtype_is_half(x->dtype) ? x->dtype : LD_F32);
        return gi[0] ? LD_OK : ld_error_status();
    }
    ld_tensor *yg = ld_mul(nd->saved[0], g);
    ld_tensor *s = yg ? scan_raw(LD_SCAN_SUM, yg, ax, excl, !rev, LD_F32) : NULL;
    ld_tensor *q = s ? ld_div(s, x) : NULL, *z = q ? ld_tensor_scalar(0, DEV(x)) : NULL;
    ld_tensor *nz = z ? binary_raw(LD_BIN_NE, x, z) : NULL;
    gi[0] = nz ? select_raw(nz, q, z) : NULL;
    ld_tensor_release(yg); ld_tensor_release(s); ld_tensor_release(q); ld_tensor_release(z); ld_tensor_release(nz);
    return gi[0] ? LD_OK : ld_error_status();
}

/* A half x's cumsum reads and writes its dtype (float32 sums, each rounded
   once, as ld_sum's); a cumprod computes in float32 (its gradient divides
   by x) and is rounded once after. Integer tensors: exact, on the host. */
static ld_tensor *scan_op(ld_scan_op op, ld_tensor *x, int axis, int excl, int rev) {
    const char *name = op == LD_SCAN_SUM ? "cumsum" : "cumprod";
    int ax = axis;
    excl = excl != 0; rev = rev != 0;
    if (ld_ops_norm_axis(x, &ax, name)) return NULL;
    if (is_int_dtype(x->dtype)) return int_pass(op == LD_SCAN_SUM ? INT_SCAN_SUM : INT_SCAN_PROD, x, ax, 0, excl, rev);
    ld_tensor *xf = op == LD_SCAN_SUM ? ld_tensor_retain(x) : ld_as_float(x), *cx = xf ? ld_ops_contig(xf) : NULL;
    ld_tensor_release(xf);
    ld_tensor *y = cx ? scan_raw(op, cx, ax, excl, rev, cx->dtype) : NULL;
    if (y) {
        ld_tensor *in[1] = {cx};
        ld_node *nd = ld_record(y, name, bw_scan, 1, in);
        if (nd) {
            nd->args[0] = ax; nd->args[1] = excl; nd->args[2] = rev; nd->args[3] = op;
            if (op == LD_SCAN_PROD) nd->saved[0] = ld_reshape(y, y->ndim, y->shape);   /* a view: no cycle through y */
        }
    }
    ld_tensor_release(cx);
    return op == LD_SCAN_PROD ? ld_ops_in_dtype(y, ld_ops_result_dtype(x, NULL)) : y;
}
ld_tensor *ld_cumsum(ld_tensor *x, int axis, int exclusive, int reverse) { return scan_op(LD_SCAN_SUM, x, axis, exclusive, reverse); }
ld_tensor *ld_cumprod(ld_tensor *x, int axis, int exclusive, int reverse) { return scan_op(LD_SCAN_PROD, x, axis, exclusive, reverse); }

/* TF's _ProdGrad: g times the product of the values before each one and
   the product of those after it (exclusive cumprods from both ends), so
   that a slice with one zero gives that zero the product of the others and
   the rest 0, and two zeros give 0 everywhere (no division) */
static int bw_prod(ld_node *nd, ld_tensor *g, ld_tensor **gi) {
    ld_tensor *x = nd->in[0];
    int ax = (int)nd->args[0];
    ld_tensor *left = scan_raw(LD_SCAN_PROD, x, ax, 1, 0, LD_F32);
    ld_tensor *right = left ? scan_raw(LD_SCAN_PROD, x, ax, 1, 1, LD_F32) : NULL;
    ld_tensor *lr = right ? ld_mul(left, right) : NULL, *ge = lr ? expand_back(g, x, ax) : NULL;
    gi[0] = ge ? ld_mul(ge, lr) : NULL;
    ld_tensor_release(left); ld_tensor_release(right); ld_tensor_release(lr); ld_tensor_release(ge);
    return gi[0] ? LD_OK : ld_error_status();
}

/* TF's reduce_prod over one axis (LD_ALL_AXES: every axis, as one): the
   last value of the running product (the scan kernel), x[0] x[1] ... in
   order, in float32 (a half x's result rounded once); 1 over an empty axis.
   An integer x's is of its dtype, exact (wrapping), on the host. */
static ld_tensor *prod_one(ld_tensor *x, int axis, int keep) {
    if (is_int_dtype(x->dtype)) return reduce_int(INT_RED_PROD, x, axis, keep);
    int64_t n, shape[LD_MAX_DIMS];
    if (axis == LD_ALL_AXES) {
        n = ld_tensor_numel(x);
        ld_tensor *f = ld_reshape_op(x, 1, &n), *y = f ? prod_one(f, 0, 0) : NULL;
        for (int i = 0; i < x->ndim; i++) shape[i] = 1;
        ld_tensor *r = y ? ld_reshape_op(y, keep ? x->ndim : 0, shape) : NULL;
        ld_tensor_release(f); ld_tensor_release(y);
        return r;
    }
    int ax = axis, nd = 0;
    if (ld_ops_norm_axis(x, &ax, "prod")) return NULL;
    ld_tensor *xf = ld_as_float(x), *cx = xf ? ld_ops_contig(xf) : NULL;
    ld_tensor_release(xf);
    if (!cx) return NULL;
    n = cx->shape[ax];
    reduced_shape(cx, ax, keep, &nd, shape);
    ld_tensor *y = NULL;
    if (n == 0) y = ld_tensor_full(LD_F32, nd, shape, 1.0, DEV(cx));   /* the empty product */
    else {
        ld_tensor *run = scan_raw(LD_SCAN_PROD, cx, ax, 0, 0, LD_F32), *last = run ? ld_select(run, ax, n - 1) : NULL;
        ld_tensor *c = last ? ld_contiguous(last) : NULL;
        y = c ? ld_reshape(c, nd, shape) : NULL;
        ld_tensor_release(run); ld_tensor_release(last); ld_tensor_release(c);
        ld_tensor *in[1] = {cx};
        ld_node *node = y ? ld_record(y, "prod", bw_prod, 1, in) : NULL;
        if (node) node->args[0] = ax;
    }
    ld_tensor_release(cx);
    return ld_ops_in_dtype(y, ld_ops_result_dtype(x, NULL));
}

/* ================================================================ reductions over axis lists */
static const char *const reduction_names[] = {"sum", "mean", "max", "min", "prod", "var", "std", "logsumexp", "any", "all"};

/* x with the axes of the set `red` (bit a: axis a; at least two) as one:
   a reshape when they are adjacent, else the kept axes first and the
   reduced ones last, copied; *ax: the merged axis */
static ld_tensor *merge_axes(ld_tensor *x, unsigned red, int *ax) {
    int nd = x->ndim, first = -1, last = -1, cnt = 0, k = 0, perm[LD_MAX_DIMS];
    int64_t s[LD_MAX_DIMS], merged = 1;
    for (int i = 0; i < nd; i++)
        if (red >> i & 1) { if (first < 0) first = i; last = i; cnt++; merged *= x->shape[i]; }
    if (last - first + 1 == cnt) {
        for (int i = 0; i < nd; i++) if (i < first || i > last) s[k++] = x->shape[i]; else if (i == first) s[k++] = merged;
        *ax = first;
        return ld_reshape_op(x, k, s);
    }
    for (int i = 0; i < nd; i++) if (!(red >> i & 1)) { perm[k] = i; s[k++] = x->shape[i]; }
    *ax = k;
    s[k] = merged;
    for (int i = 0, j = k; i < nd; i++) if (red >> i & 1) perm[j++] = i;
    ld_tensor *v = ld_permute_op(x, perm), *c = ld_ops_contig(v), *r = c ? ld_reshape_op(c, k + 1, s) : NULL;
    ld_tensor_release(v); ld_tensor_release(c);
    return r;
}

/* sum, mean, max, min or prod over the axes of `red`, each kind's own op (its
   dtypes, its gradient) over one axis: the set merged into one, or over a
   new axis of size 1 when the set is empty (TF's reduction over no axes) */
static ld_tensor *reduce_set(ld_reduction r, ld_tensor *x, unsigned red, int keep) {
    ld_tensor *(*one)(ld_tensor *, int, int) = r == LD_REDUCE_SUM ? ld_sum : r == LD_REDUCE_MEAN ? ld_mean
                                              : r == LD_REDUCE_MAX ? ld_max : r == LD_REDUCE_PROD ? prod_one : ld_min;
    int nd = x->ndim, cnt = __builtin_popcount(red), ax = 0;
    if (cnt == 1) return one(x, __builtin_ctz(red), keep);
    if (cnt == nd && nd > 0) return one(x, LD_ALL_AXES, keep);
    int64_t s[LD_MAX_DIMS];
    ld_tensor *m;
    if (cnt == 0) {
        if (nd == LD_MAX_DIMS) { ld_fail(LD_ESHAPE, "%s over no axes of a tensor of %d dimensions", reduction_names[r], nd); return NULL; }
        for (int i = 0; i < nd; i++) s[i] = x->shape[i];
        s[nd] = 1;
        m = ld_reshape_op(x, nd + 1, s);
        ax = nd;
    } else m = merge_axes(x, red, &ax);
    ld_tensor *y = m ? one(m, ax, 0) : NULL;
    ld_tensor_release(m);
    if (!y || !keep || cnt == 0) return y;
    for (int i = 0; i < nd; i++) s[i] = red >> i & 1 ? 1 : x->shape[i];
    ld_tensor *k = ld_reshape_op(y, nd, s);
    ld_tensor_release(y);
    return k;
}

/* TF's reduce_variance: mean((x - mean(x))^2), the gradient through both
   means; computed in float32 (a half x's result rounded once) */
static ld_tensor *reduce_var(ld_tensor *x, unsigned red, int keep) {
    ld_tensor *m = reduce_set(LD_REDUCE_MEAN, x, red, 1);
    ld_tensor *d = m ? ld_sub(x, m) : NULL, *sq = d ? ld_mul(d, d) : NULL;
    ld_tensor *v = sq ? reduce_set(LD_REDUCE_MEAN, sq, red, keep) : NULL;
    ld_tensor_release(m); ld_tensor_release(d); ld_tensor_release(sq);
    return v;
}

/* TF's reduce_logsumexp: log(sum(exp(x - c))) + c, c the maximum where it
   is finite (else 0), outside the gradient (stop_gradient) */
static ld_tensor *reduce_logsumexp(ld_tensor *x, unsigned red, int keep) {
    int was = ld_tape_pause(1);
    ld_tensor *mx = reduce_set(LD_REDUCE_MAX, x, red, 1);
    ld_tensor *z = mx ? ld_tensor_scalar(0, DEV(mx)) : NULL;
    ld_tensor *d = z ? ld_sub(mx, mx) : NULL;                  /* 0 where finite, NaN at inf and NaN */
    ld_tensor *fin = d ? ld_binary(LD_BIN_EQ, d, z) : NULL;
    ld_tensor *c = fin ? ld_where(fin, mx, z) : NULL;
    ld_tape_pause(was);
    ld_tensor_release(mx); ld_tensor_release(d); ld_tensor_release(fin); ld_tensor_release(z);
    ld_tensor *e0 = c ? ld_sub(x, c) : NULL, *e = e0 ? ld_exp(e0) : NULL;
    ld_tensor *sm = e ? reduce_set(LD_REDUCE_SUM, e, red, keep) : NULL, *l = sm ? ld_log(sm) : NULL;
    ld_tensor *ck = l ? ld_reshape(c, l->ndim, l->shape) : NULL;
    ld_tensor *y = ck ? ld_add(l, ck) : NULL;
    ld_tensor_release(c); ld_tensor_release(e0); ld_tensor_release(e); ld_tensor_release(sm);
    ld_tensor_release(l); ld_tensor_release(ck);
    return y;
}

ld_tensor *ld_reduce_axes(ld_reduction r, ld_tensor *x, int naxes, const int *axes, int keepdims) {
    if ((unsigned)r > LD_REDUCE_ALL) { ld_fail(LD_EARG, "unknown reduction %d", (int)r); return NULL; }
    const char *name = reduction_names[r];
    unsigned red = 0;
    if (!axes) red = x->ndim ? (1u << x->ndim) - 1 : 0;
    for (int i = 0; axes && i < naxes; i++) {
        int a = axes[i];
        if (ld_ops_norm_axis(x, &a, name)) return NULL;
        if (red >> a & 1) { ld_fail(LD_EARG, "%s: axis %d is given twice", name, axes[i]); return NULL; }
        red |= 1u << a;
    }
    if (r == LD_REDUCE_ANY || r == LD_REDUCE_ALL) {   /* over x != 0 (NaN counts as true, as TF's cast to bool) */
        ld_tensor *z = ld_tensor_scalar(0, DEV(x)), *nz = z ? ld_binary(LD_BIN_NE, x, z) : NULL;
        ld_tensor *y = nz ? reduce_set(r == LD_REDUCE_ANY ? LD_REDUCE_MAX : LD_REDUCE_MIN, nz, red, keepdims) : NULL;
        ld_tensor_release(z); ld_tensor_release(nz);
        return y;
    }
    if (r <= LD_REDUCE_PROD) return reduce_set(r, x, red, keepdims);
    ld_tensor *xf = ld_as_float(x);   /* float32 inside; a half x's result rounded once */
    if (!xf) return NULL;
    ld_tensor *y = r == LD_REDUCE_LOGSUMEXP ? reduce_logsumexp(xf, red, keepdims) : reduce_var(xf, red, keepdims);
    ld_tensor_release(xf);
    if (y && r == LD_REDUCE_STD) {
        ld_tensor *sd = ld_sqrt(y);
        ld_tensor_release(y);
        y = sd;
    }
    return ld_dtype_is_half(x->dtype) ? ld_ops_in_dtype(y, x->dtype) : y;
}

/* ================================================================ matmul */
/* How to hand a 2-d view to gemm without copying: row-major (lda = stride 0)
   or transposed (lda = stride 1). Returns 0 when a copy is needed. */
static int gemm_layout(const ld_tensor *t, int *trans, int64_t *ld) {
    if (t->strides[1] == 1 && t->strides[0] >= t->shape[1]) { *trans = 0; *ld = t->strides[0]; return 1; }
    if (t->strides[0] == 1 && t->strides[1] >= t->shape[0]) { *trans = 1; *ld = t->strides[1]; return 1; }
    return 0;
}

/* c = op(a) op(b) for 2-d tensors, handling views; ta/tb transpose a/b first.
   c is in cdt: a's dtype, or float32 for a half product (a and b of one
   half dtype), which sums in float32 and rounds once to a half cdt, as
   PyTorch's bf16 matmul and cuBLAS do. */
static ld_tensor *mm2d(ld_tensor *a, ld_tensor *b, int ta, int tb, ld_dtype cdt) {
    int64_t m = ta ? a->shape[1] : a->shape[0], k = ta ? a->shape[0] : a->shape[1];
    int64_t n = tb ? b->shape[0] : b->shape[1];
    if (ld_check_gemm(DEV(a))) return NULL;
    ld_tensor *ca = ld_tensor_retain(a), *cb = ld_tensor_retain(b);
    int la, lb;
    int64_t lda, ldb;
    if (!gemm_layout(ca, &la, &lda)) { ld_tensor_release(ca); ca = ld_clone(a); la = 0; lda = a->shape[1]; }
    if (!gemm_layout(cb, &lb, &ldb)) { ld_tensor_release(cb); cb = ld_clone(b); lb = 0; ldb = b->shape[1]; }
    int64_t shape[2] = {m, n};
    ld_tensor *c = ca && cb ? ld_ops_out_empty(cdt, 2, shape, DEV(a)) : NULL;
    if (c && ld_dtype_is_half(a->dtype))   /* half operands (one dtype), float32 products and sums */
        BE(a)->gemm_half(DEV(a), la ^ ta, lb ^ tb, m, n, k, a->dtype, DPTR(ca), lda < 1 ? 1 : lda,
                         DPTR(cb), ldb < 1 ? 1 : ldb, cdt, DPTR(c),
                         n < 1 ? 1 : n);
    else if (c) BE(a)->gemm(DEV(a), la ^ ta, lb ^ tb, m, n, k, 1.0f, FPTR(ca), lda < 1 ? 1 : lda, FPTR(cb),
                            ldb < 1 ? 1 : ldb, 0.0f, FPTR(c), n < 1 ? 1 : n);
    ld_tensor_release(ca); ld_tensor_release(cb);
    return c;
}

/* The gradients of c = a b (a [..., m, k] flattened to 2-d): g b^T and
   a^T g, each product in the operands' dtype (mm2d: gemm, or gemm_half for
   half operands and g, giving half results; a's in gadt). */
static int matmul_grads(ld_tensor *a, ld_tensor *b, ld_tensor *g, ld_tensor **gi, int na, int nb, ld_dtype gadt) {
    int64_t rows = ld_tensor_numel(a) / (a->shape[a->ndim - 1] ? a->shape[a->ndim - 1] : 1);
    int64_t s2[2] = {rows, a->shape[a->ndim - 1]}, g2s[2] = {rows, g->shape[g->ndim - 1]};
    ld_tensor *a2 = ld_reshape(a, 2, s2), *g2 = ld_reshape(g, 2, g2s);
    if (!a2 || !g2) { ld_tensor_release(a2); ld_tensor_release(g2); return ld_error_status(); }
    ld_tensor *ga2 = na ? mm2d(g2, b, 0, 1, gadt) : NULL;   /* g b^T */
    gi[1] = nb ? mm2d(a2, g2, 1, 0, b->dtype) : NULL;       /* a^T g */
    gi[0] = ga2 ? ld_reshape(ga2, a->ndim, a->shape) : NULL;
    ld_tensor_release(ga2); ld_tensor_release(a2); ld_tensor_release(g2);
    return (!na || gi[0]) && (!nb || gi[1]) ? LD_OK : ld_error_status();
}

/* A half product's gradients are half products too, as under Keras's mixed
   precision and torch.autocast: g in the operands' dtype (it is, unless it
   is the float32 seed of a gradient taken of the product itself), then
   gemm_half (tensor cores on a GPU, float32 sums, rounded once to the half
   dtype of the operands' gradients). args[0]: a's gradient left in float32
   (matmul's wide_da). */
static int bw_matmul(ld_node *nd, ld_tensor *g, ld_tensor **gi) {
    ld_tensor *a = nd->in[0], *b = nd->in[1];
    /* skip the products nobody needs: the input gradient of a first layer */
    int na = ld_needs_grad(a), nb = ld_needs_grad(b);
    ld_tensor *gd = g->dtype == a->dtype ? ld_tensor_retain(g) : ld_cast(g, a->dtype);
    int st = gd ? matmul_grads(a, b, gd, gi, na, nb, nd->args[0] != 0 ? LD_F32 : a->dtype) : ld_error_status();
    ld_tensor_release(gd);
    return st;
}

/* wide_da: a's gradient of a half product left in float32, unrounded: for
   im2col's patches, which col2im sums and rounds once (a half
   convolution's input gradient, one rounding as TF's kernels give it);
   wide_c: the product itself so (ld_matmul_wide) */
static ld_tensor *matmul(ld_tensor *a, ld_tensor *b, int wide_da, int wide_c) {
    char b1[64], b2[64];
    if (a->ndim < 2 || b->ndim != 2) {
        ld_fail(LD_ESHAPE, "matmul needs a 2-d (or batched N-d) tensor and a 2-d tensor, got shapes %s and %s",
                ld_shape_str(a, b1, sizeof b1), ld_shape_str(b, b2, sizeof b2));
        return NULL;
    }
    if (a->shape[a->ndim - 1] != b->shape[0]) {
        ld_fail(LD_ESHAPE, "shapes %s and %s do not match", ld_shape_str(a, b1, sizeof b1),
                ld_shape_str(b, b2, sizeof b2));
        return NULL;
    }
    if (!ld_dtype_is_float(a->dtype) || a->dtype != b->dtype) {
        ld_fail(LD_ETYPE, "matmul needs two float32, float16 or bfloat16 tensors of one dtype, got %s and %s",
                ld_dtype_name(a->dtype), ld_dtype_name(b->dtype));
        return NULL;
    }
    if (ld_check_same_device(a, b, "matmul")) return NULL;
    ld_tensor *a2 = a;
    if (a->ndim > 2) {
        int64_t s2[2] = {ld_tensor_numel(a) / a->shape[a->ndim - 1], a->shape[a->ndim - 1]};
        if (!(a2 = ld_reshape(a, 2, s2))) return NULL;
    }
    ld_tensor *c = mm2d(a2, b, 0, 0, wide_c ? LD_F32 : a->dtype);
    if (a2 != a) ld_tensor_release(a2);
    if (c && a->ndim > 2) {
        int64_t s[LD_MAX_DIMS];
        memcpy(s, a->shape, sizeof s);
        s[a->ndim - 1] = b->shape[1];
        ld_tensor *r = ld_reshape(c, a->ndim, s);
        ld_tensor_release(c);
        c = r;
    }
    if (c) {   /* in the operands' dtype (mm2d; float32 when wide_c), and so are its gradients (bw_matmul) */
        ld_tensor *in[2] = {a, b};
        ld_node *nd = ld_record(c, "matmul", bw_matmul, 2, in);
        if (nd) nd->args[0] = wide_da && ld_dtype_is_half(a->dtype);
    }
    return c;
}

ld_tensor *ld_matmul(ld_tensor *a, ld_tensor *b) { return matmul(a, b, 0, 0); }
ld_tensor *ld_matmul_wide(ld_tensor *a, ld_tensor *b) { return matmul(a, b, 0, 1); }

/* ================================================================ fused dense layer
 * y = act(x @ w + b) with the bias written into the output first and the
 * product accumulated onto it (beta = 1), and relu applied in place: one
 * pass over the output fewer, and no zeroing pass inside sgemm. relu's
 * gradient needs only the output (y > 0 exactly where x @ w + b > 0). */
static _Thread_local int defer_weight_grads;
void ld_defer_weight_grads(int on) { defer_weight_grads = on; }

static _Thread_local ld_dtype autocast_dt = LD_F32;
ld_dtype ld_autocast(ld_dtype dt) { ld_dtype was = autocast_dt; autocast_dt = dt; return was; }
ld_dtype ld_autocast_dtype(void) { return autocast_dt; }

/* ld_linear with half operands (autocast, or half inputs): the operands cast
   (recorded), the product through the half gemm (float32 sums, ld_matmul,
   rounded to dt), then the bias and relu. out: the result's dtype. Under
   autocast it is float32, so that whatever the layer does next (heads,
   gates, norms) computes in float32; the layer call rounds its output.
   wide_dx: x's gradient in float32 (matmul's wide_da). */
static ld_tensor *linear_half(ld_tensor *x, ld_tensor *w, ld_tensor *b, int relu, ld_dtype dt, ld_dtype out,
                              int wide_dx) {
    ld_tensor *xh = x->dtype == dt ? ld_tensor_retain(x) : ld_cast_op(x, dt);
    ld_tensor *wh = xh ? (w->dtype == dt ? ld_tensor_retain(w) : ld_cast_op(w, dt)) : NULL;
    ld_tensor *y = wh ? matmul(xh, wh, wide_dx, 0) : NULL;
    ld_tensor_release(xh); ld_tensor_release(wh);
    if (y && y->dtype != out) {
        ld_tensor *c = ld_cast_op(y, out);
        ld_tensor_release(y);
        y = c;
    }
    return ld_ops_bias_relu(y, b, relu);
}

/* bias_relu's gradient: g (in y's dtype) masked where the output is not
   positive (relu), y's as it is; the bias's the float32 sum over the rows,
   rounded once to y's dtype and written in b's (reduce's odt and rdt): the
   bits of the half add's broadcast gradient and of the bias cast's, in one
   reduction. saved[0]: the output, with relu. */
static int bw_bias_relu(ld_node *nd, ld_tensor *g, ld_tensor **gi) {
    ld_tensor *y = nd->in[0], *b = nd->n_in > 1 ? nd->in[1] : NULL, *out = nd->saved[0];
    ld_dtype dt = y->dtype;
    ld_tensor *gc = g->dtype == dt ? ld_contiguous(g) : ld_cast(g, dt);
    if (!gc) return ld_error_status();
    int64_t numel = ld_tensor_numel(gc), n = y->ndim ? y->shape[y->ndim - 1] : 1, rows = n ? numel / n : 0;
    if (out) {
        ld_tensor *gm = ld_ops_out_empty(dt, gc->ndim, gc->shape, DEV(gc));
        if (gm) BE(gc)->unary_backward(DEV(gc), LD_UN_RELU, dt, DPTR(gm), DPTR(gc), DPTR(out), DPTR(out), numel);
        ld_tensor_release(gc);
        if (!(gc = gm)) return ld_error_status();
    }
    int st = LD_OK;
    if (b && ld_needs_grad(b)) {
        if ((gi[1] = ld_ops_out_empty(b->dtype, 1, b->shape, DEV(gc))))
            BE(gc)->reduce(DEV(gc), LD_RED_SUM, DPTR(gi[1]), b->dtype, dt, DPTR(gc), dt, 1, rows, n);
        else
            st = ld_error_status();
    }
    if (!st && ld_needs_grad(y)) gi[0] = ld_tensor_retain(gc);
    ld_tensor_release(gc);
    return st;
}

/* y + b (b over y's last axis), then relu: Dense's bias and activation
   after its product. Takes y. A float y (float32 or half) with a float32
   bias or one of its dtype is one bias_relu kernel, its gradient one relu
   mask and one reduction; the bias cast to y's dtype as Keras casts it, but
   without a cast of its own (nor that cast's gradient). */
ld_tensor *ld_ops_bias_relu(ld_tensor *y, ld_tensor *b, int relu) {
    if (!y || (!b && !relu)) return y;
    int64_t n = y->ndim ? y->shape[y->ndim - 1] : 1;
    int fused = ld_dtype_is_float(y->dtype) && y->ndim >= 1 &&
                (!b || (b->ndim == 1 && b->shape[0] == n && (b->dtype == LD_F32 || b->dtype == y->dtype) &&
                        DEV(b) == DEV(y)));
    if (!fused) {
        if (b) {
            ld_tensor *bh = b->dtype == y->dtype ? ld_tensor_retain(b) : ld_cast_op(b, y->dtype);
            ld_tensor *yb = bh ? ld_add(y, bh) : NULL;
            ld_tensor_release(bh); ld_tensor_release(y);
            y = yb;
        }
        if (y && relu) {
            ld_tensor *yr = ld_relu(y);
            ld_tensor_release(y);
            y = yr;
        }
        return y;
    }
    ld_tensor *yc = ld_contiguous(y), *bc = yc && b ? ld_contiguous(b) : NULL;
    ld_tensor_release(y);
    ld_tensor *o = yc && (!b || bc) ? ld_ops_out_empty(yc->dtype, yc->ndim, yc->shape, DEV(yc)) : NULL;
    ld_tensor *out = o ? ld_reshape(o, o->ndim, o->shape) : NULL;   /* the node's own view (saved: o) */
    if (out) {
        int64_t numel = ld_tensor_numel(yc);
        BE(yc)->bias_relu(DEV(yc), yc->dtype, DPTR(o), DPTR(yc), bc ? DPTR(bc) : NULL, b ? b->dtype : LD_F32,
                          n ? numel / n : 0, n, relu);
        ld_tensor *in[2] = {yc, b};
        ld_node *nd = ld_record(out, "bias_relu", bw_bias_relu, b ? 2 : 1, in);
        if (nd && relu) nd->saved[0] = ld_tensor_retain(o);
    }
    ld_tensor_release(bc); ld_tensor_release(o); ld_tensor_release(yc);
    return out;
}

static int bw_linear(ld_node *nd, ld_tensor *g, ld_tensor **gi) {
    ld_tensor *x = nd->in[0], *w = nd->in[1], *b = nd->n_in > 2 ? nd->in[2] : NULL, *y = nd->saved[0];
    int64_t k = w->shape[0], n = w->shape[1], rows = ld_tensor_numel(x) / (k ? k : 1);
    int64_t g2s[2] = {rows, n}, x2s[2] = {rows, k};
    ld_tensor *gc = ld_contiguous(g), *g2 = gc ? ld_reshape(gc, 2, g2s) : NULL;
    ld_tensor_release(gc);
    if (!g2) return ld_error_status();
    if (y) {   /* relu: zero the gradient where the output is not positive */
        ld_tensor *gr = ld_ops_out_empty(LD_F32, 2, g2s, DEV(g2));
        if (!gr) { ld_tensor_release(g2); return ld_error_status(); }
        BE(g2)->unary_backward(DEV(g2), LD_UN_RELU, LD_F32, FPTR(gr), FPTR(g2), FPTR(y), FPTR(y), rows * n);
        ld_tensor_release(g2);
        g2 = gr;
    }
    ld_tensor *x2 = ld_reshape(x, 2, x2s);
    int st = LD_OK;
    if (ld_needs_grad(x)) {
        ld_tensor *dx2 = x2 ? mm2d(g2, w, 0, 1, LD_F32) : NULL;
        gi[0] = dx2 ? ld_reshape(dx2, x->ndim, x->shape) : NULL;
        ld_tensor_release(dx2);
        if (!gi[0]) st = ld_error_status();
    }
    if (!st && ld_needs_grad(w)) {
        if (defer_weight_grads && x2 && w->requires_grad && !w->grad_fn && DEV(g2)->kind == LD_DEV_CPU) {
            struct ld_pending *p = malloc(sizeof *p);
            if (p && (gi[1] = ld_ops_out_empty(LD_F32, 2, w->shape, DEV(g2)))) {
                p->a = ld_tensor_retain(x2);
                p->b = ld_tensor_retain(g2);
                gi[1]->pending = p;
            } else {
                free(p);
                st = ld_error_status();
            }
        } else if (!(gi[1] = mm2d(x2, g2, 1, 0, LD_F32))) {
            st = ld_error_status();
        }
    }
    if (!st && b && ld_needs_grad(b) && !(gi[2] = ld_sum(g2, 0, 0))) st = ld_error_status();
    ld_tensor_release(x2);
    ld_tensor_release(g2);
    return st;
}

/* ld_linear, ld_linear_half and ld_linear_patches: under a half autocast the
   result is float32, or with keep_half the autocast's half dtype; wide_dx:
   linear_half's */
static ld_tensor *linear(ld_tensor *x, ld_tensor *w, ld_tensor *b, int relu, int keep_half, int wide_dx) {
    char b1[64], b2[64];
    if (x->ndim < 1 || w->ndim != 2 || x->shape[x->ndim - 1] != w->shape[0] ||
        (b && (b->ndim != 1 || b->shape[0] != w->shape[1]))) {
        ld_fail(LD_ESHAPE, "shapes %s and %s do not match", ld_shape_str(x, b1, sizeof b1), ld_shape_str(w, b2, sizeof b2));
        return NULL;
    }
    if (ld_dtype_is_half(autocast_dt) && ld_dtype_is_float(x->dtype) && ld_dtype_is_float(w->dtype) &&
        (!b || ld_dtype_is_float(b->dtype)))
        return linear_half(x, w, b, relu, autocast_dt, keep_half ? autocast_dt : LD_F32, wide_dx);
    if (ld_dtype_is_half(x->dtype) && x->dtype == w->dtype && (!b || ld_dtype_is_float(b->dtype)))
        return linear_half(x, w, b, relu, x->dtype, x->dtype, wide_dx);
    if (x->dtype != LD_F32 || w->dtype != LD_F32 || (b && b->dtype != LD_F32)) {
        ld_fail(LD_ETYPE, "dense needs float32 inputs, got %s and %s%s%s", ld_dtype_name(x->dtype),
                ld_dtype_name(w->dtype), b ? " with a bias of " : "", b ? ld_dtype_name(b->dtype) : "");
        return NULL;
    }
    if (ld_check_same_device(x, w, "dense") || (b && ld_check_same_device(w, b, "dense"))) return NULL;
    if (ld_check_gemm(DEV(x))) return NULL;
    int64_t k = w->shape[0], n = w->shape[1], rows = ld_tensor_numel(x) / (k ? k : 1);
    ld_tensor *cx = ld_ops_contig(x);
    if (!cx) return NULL;
    int64_t ys[2] = {rows, n}, x2s[2] = {rows, k};
    ld_tensor *x2 = ld_reshape(cx, 2, x2s);
    ld_tensor *y = x2 ? ld_ops_out_empty(LD_F32, 2, ys, DEV(x)) : NULL;
    ld_tensor *cw = y ? ld_contiguous(w) : NULL;
    ld_tensor *cb = cw && b ? ld_contiguous(b) : NULL;
    int ok = cw && (!b || cb);
    if (ok) BE(x)->gemm_bias(DEV(x), rows, n, k, FPTR(x2), FPTR(cw), cb ? FPTR(cb) : NULL, relu, FPTR(y));
    ld_tensor_release(cb);
    ld_tensor *out = NULL;
    if (ok) {
        int64_t os[LD_MAX_DIMS];
        memcpy(os, x->shape, sizeof os);
        os[x->ndim - 1] = n;
        out = ld_reshape(y, x->ndim, os);
    }
    if (out) {
        ld_tensor *in[3] = {cx, w, b};
        ld_node *nd = ld_record(out, "dense", bw_linear, b ? 3 : 2, in);
        if (nd && relu) nd->saved[0] = ld_tensor_retain(y);
    }
    ld_tensor_release(cw); ld_tensor_release(y); ld_tensor_release(x2); ld_tensor_release(cx);
    return out;
}

ld_tensor *ld_linear(ld_tensor *x, ld_tensor *w, ld_tensor *b, int relu) { return linear(x, w, b, relu, 0, 0); }
ld_tensor *ld_linear_half(ld_tensor *x, ld_tensor *w, ld_tensor *b, int relu) { return linear(x, w, b, relu, 1, 0); }
ld_tensor *ld_linear_patches(ld_tensor *col, ld_tensor *w, ld_tensor *b, int relu) {
    return linear(col, w, b, relu, 1, 1);
}

/* ================================================================ softmax */
static int bw_softmax(ld_node *n, ld_tensor *g, ld_tensor **gi) {
    ld_tensor *y = n->saved[0];
    int lg = (int)n->args[0];
    int last = y->ndim - 1;
    if (lg) {   /* dx = g - softmax * sum(g) */
        ld_tensor *sg = ld_sum(g, last, 1), *p = ld_exp(y);
        ld_tensor *t = sg && p ? ld_mul(p, sg) : NULL;
        gi[0] = t ? ld_sub(g, t) : NULL;
        ld_tensor_release(sg); ld_tensor_release(p); ld_tensor_release(t);
    } else {    /* dx = y * (g - sum(g*y)) */
        ld_tensor *gy = ld_mul(g, y), *s = gy ? ld_sum(gy, last, 1) : NULL;
        ld_tensor *d = s ? ld_sub(g, s) : NULL;
        gi[0] = d ? ld_mul(y, d) : NULL;
        ld_tensor_release(gy); ld_tensor_release(s); ld_tensor_release(d);
    }
    return gi[0] ? LD_OK : ld_error_status();
}

static ld_tensor *softmax_impl(ld_tensor *x, int lg) {
    if (x->ndim < 1) { ld_fail(LD_ESHAPE, "softmax needs at least one dimension"); return NULL; }
    ld_tensor *fx = ld_as_float(x), *cx = fx ? ld_ops_contig(fx) : NULL;
    ld_tensor_release(fx);
    if (!cx) return NULL;
    int64_t cols = cx->shape[cx->ndim - 1], rows = cols ? ld_tensor_numel(cx) / cols : 0;
    ld_tensor *y = ld_ops_out_empty(LD_F32, cx->ndim, cx->shape, DEV(cx));
    if (y) {
        BE(cx)->softmax(DEV(cx), FPTR(y), FPTR(cx), rows, cols, lg);
        ld_tensor *in[1] = {cx};
        ld_node *nd = ld_record(y, lg ? "log_softmax" : "softmax", bw_softmax, 1, in);
        if (nd) { nd->args[0] = lg; nd->saved[0] = ld_reshape(y, y->ndim, y->shape); }
    }
    ld_tensor_release(cx);
    return y;
}
ld_tensor *ld_softmax(ld_tensor *x) { return ld_ops_in_dtype(softmax_impl(x, 0), ld_ops_result_dtype(x, NULL)); }
ld_tensor *ld_log_softmax(ld_tensor *x) { return ld_ops_in_dtype(softmax_impl(x, 1), ld_ops_result_dtype(x, NULL)); }

ld_tensor *ld_softmax_axis(ld_tensor *x, int axis, int log) {
    ld_tensor *(*f)(ld_tensor *) = log ? ld_log_softmax : ld_softmax;
    int last = x->ndim - 1;
    if (axis < 0) axis += x->ndim;
    if (x->ndim == 0 || axis == last) return f(x);
    if (axis < 0 || axis > last) {
        ld_fail(LD_EARG, "softmax: axis %d out of range for a tensor with %d dimensions",
                axis < 0 ? axis - x->ndim : axis, x->ndim);
        return NULL;
    }
    ld_tensor *a = ld_transpose_op(x, axis, last);   /* the axis last, and back (on the tape, as any op) */
    ld_tensor *r = a ? f(a) : NULL;
    ld_tensor_release(a);
    ld_tensor *y = r ? ld_transpose_op(r, axis, last) : NULL;
    ld_tensor_release(r);
    return y;
}

/* ================================================================ dropout */
/* The random values are counter-based: one key per call from the
   generator, and the element (global row g, column j) of the mask's shape
   is keyed by g*row_width + j, where g counts from the replica's first row
   of the global batch. A batch split over replicas (each drawing the same
   key from its stream, ld_strategy.h) gets the values one device gets for
   the whole batch. A normal value takes the uniforms 2k and 2k + 1 of its
   key k (Box-Muller). */
ld_tensor *ld_noise_op(ld_noise kind, ld_tensor *x, float p, int mask_ndim, const int64_t *mask_shape, ld_rng *rng) {
    static const char *const names[] = {"dropout", "Gaussian noise", "Gaussian dropout", "alpha dropout"};
    if ((unsigned)kind > LD_NOISE_ALPHA_DROPOUT) { ld_fail(LD_EARG, "unknown noise %d", (int)kind); return NULL; }
    if (kind == LD_NOISE_GAUSSIAN ? !(p >= 0 && p < INFINITY) : !(p >= 0 && p < 1)) {
        ld_fail(LD_EARG, "%s %s must be %s, got %g", names[kind], kind == LD_NOISE_GAUSSIAN ? "stddev" : "rate",
                kind == LD_NOISE_GAUSSIAN ? "finite and >= 0" : "in [0, 1)", p);
        return NULL;
    }
    if (p == 0) return ld_tensor_retain(x);
    int alpha = kind == LD_NOISE_ALPHA_DROPOUT;
    ld_tensor *mask = ld_tensor_empty(LD_F32, mask_ndim, mask_shape, NULL);   /* written here, on the host */
    ld_tensor *shift = mask && alpha ? ld_tensor_empty(LD_F32, mask_ndim, mask_shape, NULL) : NULL;
    if (!mask || (alpha && !shift)) { ld_tensor_release(mask); return NULL; }
    float keep = 1.0f / (1.0f - p), *m = mask->storage->data, *b = alpha ? shift->storage->data : NULL;
    double sd = kind == LD_NOISE_GAUSSIAN ? p : kind == LD_NOISE_GAUSSIAN_DROPOUT ? sqrt(p / (1.0 - p)) : 0;
    /* Keras's AlphaDropout: a * (x kept, else alpha_p) + b, each product and
       sum rounded to float32 as TF's: a kept x gives x * a + b, a dropped
       one the constant fl(fl(a * alpha_p) + b) */
    const double alpha_p = -1.6732632423543772848170429916717 * 1.0507009873554804934193349852946;
    const double ad = pow((1.0 - p) * (1.0 + p * alpha_p * alpha_p), -0.5);
    const float af = (float)ad, bf = (float)(-ad * alpha_p * p), dropped = af * (float)alpha_p + bf;
    if (!rng) rng = ld_global_rng();
    uint64_t key = ld_rng_next(rng);
    int64_t n = ld_tensor_numel(mask), rows = mask_ndim ? mask_shape[0] : 1;
    const ld_replica_ctx *rc = ld_replica_get();
    uint64_t first = rc && rows > 0 ? (uint64_t)rc->row_offset * (uint64_t)(n / rows) : 0;
    for (int64_t i = 0; i < n; i++) {
        uint64_t k = first + (uint64_t)i;
        if (kind == LD_NOISE_DROPOUT) { m[i] = ld_counter_uniform(key, k) >= p ? keep : 0.0f; continue; }
        if (alpha) {
            int kept = ld_counter_uniform(key, k) >= p;
            m[i] = kept ? af : 0.0f;
            b[i] = kept ? bf : dropped;
            continue;
        }
        double u1 = 1.0 - ld_counter_uniform(key, 2 * k), u2 = ld_counter_uniform(key, 2 * k + 1);
        double z = sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
        m[i] = (float)(kind == LD_NOISE_GAUSSIAN ? sd * z : 1.0 + sd * z);
    }
    ld_tensor *md = ld_to_device(mask, DEV(x)), *bd = md && alpha ? ld_to_device(shift, DEV(x)) : NULL;
    ld_tensor_release(mask);
    ld_tensor_release(shift);
    if (!md || (alpha && !bd)) { ld_tensor_release(md); return NULL; }
    /* recorded as an operation with a constant: the gradient is the mask's, or passes (noise added) */
    ld_tensor *y = kind == LD_NOISE_GAUSSIAN ? ld_add(x, md) : ld_mul(x, md);
    ld_tensor_release(md);
    if (y && alpha) {
        ld_tensor *t = ld_add(y, bd);
        ld_tensor_release(y);
        y = t;
    }
    ld_tensor_release(bd);
    return y;
}

ld_tensor *ld_dropout(ld_tensor *x, float rate, ld_rng *rng) {
    return ld_noise_op(LD_NOISE_DROPOUT, x, rate, x->ndim, x->shape, rng);
}

/* ================================================================ differentiable views */
static int bw_reshape(ld_node *n, ld_tensor *g, ld_tensor **gi) {
    gi[0] = ld_reshape(g, n->in[0]->ndim, n->in[0]->shape);
    return gi[0] ? LD_OK : ld_error_status();
}

ld_tensor *ld_reshape_op(ld_tensor *x, int ndim, const int64_t *shape) {
    ld_tensor *y = ld_reshape(x, ndim, shape);
    if (y) { ld_tensor *in[1] = {x}; ld_record(y, "reshape", bw_reshape, 1, in); }
    return y;
}

static int bw_transpose(ld_node *n, ld_tensor *g, ld_tensor **gi) {
    ld_tensor *t = ld_transpose(g, (int)n->args[0], (int)n->args[1]);
    gi[0] = t ? ld_contiguous(t) : NULL;
    ld_tensor_release(t);
    return gi[0] ? LD_OK : ld_error_status();
}

/* args: the permutation; the gradient is g under its inverse */
static int bw_permute(ld_node *n, ld_tensor *g, ld_tensor **gi) {
    int inv[LD_MAX_DIMS];
    for (int i = 0; i < g->ndim; i++) inv[(int)n->args[i]] = i;
    ld_tensor *t = ld_permute(g, inv);
    gi[0] = t ? ld_contiguous(t) : NULL;
    ld_tensor_release(t);
    return gi[0] ? LD_OK : ld_error_status();
}

ld_tensor *ld_permute_op(ld_tensor *x, const int *perm) {
    ld_tensor *y = ld_permute(x, perm);
    if (y) {
        ld_tensor *in[1] = {x};
        ld_node *nd = ld_record(y, "permute", bw_permute, 1, in);
        for (int i = 0; nd && i < x->ndim; i++) nd->args[i] = perm[i];
    }
    return y;
}

ld_tensor *ld_stop_gradient(ld_tensor *x) {
    ld_tensor *v = ld_var(x);   /* a mirrored variable: the replica's copy */
    return ld_reshape(v, v->ndim, v->shape);   /* a plain view: no node, no requires_grad */
}

ld_tensor *ld_clone_op(ld_tensor *x) {
    ld_tensor *y = ld_clone(x);
    if (y) { ld_tensor *in[1] = {x}; ld_record(y, "clone", bw_identity, 1, in); }
    return y;
}

static int bw_to_device(ld_node *n, ld_tensor *g, ld_tensor **gi) {
    gi[0] = ld_to_device(g, DEV(n->in[0]));
    return gi[0] ? LD_OK : ld_error_status();
}

ld_tensor *ld_to_device_op(ld_tensor *x, ld_device *dev) {
    ld_tensor *y = ld_to_device(x, dev);
    if (y && y != x) { ld_tensor *in[1] = {x}; ld_record(y, "to_device", bw_to_device, 1, in); }
    return y;
}

ld_tensor *ld_transpose_op(ld_tensor *x, int d0, int d1) {
    ld_tensor *y = ld_transpose(x, d0, d1);
    if (y) {
        ld_tensor *in[1] = {x};
        ld_node *nd = ld_record(y, "transpose", bw_transpose, 1, in);
        if (nd) { nd->args[0] = d0; nd->args[1] = d1; }
    }
    return y;
}

/* ================================================================ fused sparse cross-entropy */
static int bw_xent(ld_node *nd, ld_tensor *g, ld_tensor **gi) {
    ld_tensor *p = nd->saved[0], *lab = nd->saved[1];
    ld_tensor *gc = ld_contiguous(g);
    ld_tensor *d = gc ? ld_ops_out_empty(LD_F32, 2, p->shape, DEV(p)) : NULL;
    if (d) BE(p)->sparse_xent_backward(DEV(p), FPTR(d), FPTR(p), (const int64_t *)lab->storage->data + lab->offset,
                                       FPTR(gc), p->shape[0], p->shape[1], (float)nd->args[0]);
    ld_tensor_release(gc);
    gi[0] = d;
    return d ? LD_OK : ld_error_status();
}

ld_tensor *ld_sparse_xent_logits(ld_tensor *logits, ld_tensor *labels) {
    return ld_sparse_xent_logits_scaled(logits, labels, 0);
}

ld_tensor *ld_sparse_xent_logits_scaled(ld_tensor *logits, ld_tensor *labels, double denom) {
    char b1[64], b2[64];
    if (logits->ndim != 2 || labels->ndim != 1 || labels->shape[0] != logits->shape[0]) {
        ld_fail(LD_ESHAPE, "sparse cross-entropy needs logits [batch, classes] and labels [batch], got %s and %s",
                ld_shape_str(logits, b1, sizeof b1), ld_shape_str(labels, b2, sizeof b2));
        return NULL;
    }
    if (ld_check_same_device(logits, labels, "sparse cross-entropy")) return NULL;
    ld_tensor *lab = labels->dtype == LD_I64 ? ld_contiguous(labels) : ld_cast(labels, LD_I64);
    ld_tensor *fl = lab ? ld_as_float(logits) : NULL, *cl = fl ? ld_ops_contig(fl) : NULL;
    ld_tensor_release(fl);
    if (!cl) { ld_tensor_release(lab); return NULL; }
    int64_t n = cl->shape[0], c = cl->shape[1];
    if (ld_device_is_host(DEV(lab)) && !ld_device_is_async(DEV(lab))) {
        /* on a device that runs inline the labels can be checked here; queued
           devices get NaN for a bad label (the strategy checks its inputs) */
        const int64_t *lp = ld_tensor_data(lab);
        for (int64_t i = 0; lp && i < n; i++) {
            if (lp[i] < 0 || lp[i] >= c) {
                ld_fail(LD_EARG, "label %lld at position %lld is outside [0, %lld)", (long long)lp[i],
                        (long long)i, (long long)c);
                ld_tensor_release(cl); ld_tensor_release(lab);
                return NULL;
            }
        }
    }
    double scale = denom > 0 ? 1.0 / denom : (n ? 1.0 / (double)n : 0.0);
    ld_tensor *p = ld_ops_out_empty(LD_F32, 2, cl->shape, DEV(cl));
    ld_tensor *out = p ? ld_ops_out_empty(LD_F32, 0, NULL, DEV(cl)) : NULL;
    if (out) {
        BE(cl)->sparse_xent(DEV(cl), FPTR(out), FPTR(p), FPTR(cl), (const int64_t *)lab->storage->data + lab->offset,
                            n, c, (float)scale);
        ld_tensor *in[1] = {cl};
        ld_node *nd = ld_record(out, "sparse_categorical_crossentropy", bw_xent, 1, in);
        if (nd) { nd->saved[0] = ld_tensor_retain(p); nd->saved[1] = ld_tensor_retain(lab); nd->args[0] = scale; }
    }
    ld_tensor_release(p); ld_tensor_release(cl); ld_tensor_release(lab);
    return out;
}
