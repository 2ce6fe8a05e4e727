/*
 * ld_ops_index.c - differentiable indexing ops (ld_ops_index.h):
 * argument checks, dispatch to the device's kernels (the family's lines of
 * LD_LAYER_KERNELS, ld_kernels.h), and their backward functions.
 */
#include "ld_ops_index.h"
#include "ld_ops.h"
#include "ld_autograd.h"
#include "ld_executor.h"
#include "ld_ops_internal.h"
#include "ld_tensor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ================================================================ concat */
/* The gradient of each input: its block of g along axis args[0]. */
static int bw_concat(ld_node *nd, ld_tensor *g, ld_tensor **gi) {
    int axis = (int)nd->args[0];
    ld_tensor *gc = ld_contiguous(g);
    if (!gc) return ld_error_status();
    int64_t outer, inner, big = gc->shape[axis], off = 0;
    ld_ops_split_axis(gc->ndim, gc->shape, axis, &outer, &inner);
    int st = LD_OK;
    for (int k = 0; k < nd->n_in; k++) {
        ld_tensor *x = nd->in[k];
        int64_t len = x->shape[axis];
        if (ld_needs_grad(x)) {
            gi[k] = ld_ops_out_empty(LD_F32, x->ndim, x->shape, DEV(x));
            if (!gi[k]) { st = ld_error_status(); break; }
            BE(gc)->slice_copy(DEV(gc), FPTR(gi[k]), FPTR(gc), outer, len, inner, big, off, 0, 0);
        }
        off += len;
    }
    ld_tensor_release(gc);
    return st;
}

/* Record t = concat(xs) along axis; past LD_NODE_MAX_IN inputs the last
   input of a node is the view of t holding the rest, recorded first (its
   node is older, so the tape runs it after this one). */
static void record_concat(ld_tensor *t, int n, ld_tensor *const *xs, int axis) {
    if (n <= LD_NODE_MAX_IN) {
        ld_node *nd = ld_record(t, "concat", bw_concat, n, (ld_tensor **)xs);
        if (nd) nd->args[0] = axis;
        return;
    }
    int head = LD_NODE_MAX_IN - 1;
    int64_t off = 0;
    for (int k = 0; k < head; k++) off += xs[k]->shape[axis];
    ld_tensor *rest = ld_slice(t, axis, off, t->shape[axis], 1);
    if (!rest) { ld_clear_error(); return; }
    record_concat(rest, n - head, xs + head, axis);
    ld_tensor *in[LD_NODE_MAX_IN];
    for (int k = 0; k < head; k++) in[k] = xs[k];
    in[head] = rest;
    ld_node *nd = ld_record(t, "concat", bw_concat, LD_NODE_MAX_IN, in);
    if (nd) nd->args[0] = axis;
    ld_tensor_release(rest);
}

/* Tensors not all float32: ld_concat's copy when no gradient flows (any
   one dtype), else tensors of one half dtype through float32 (exact both
   ways), so the gradient comes back in that dtype. */
static ld_tensor *concat_other(int n, ld_tensor *const *xs, int axis, int grad) {
    ld_dtype dt = xs[0]->dtype;
    for (int k = 1; k < n; k++)
        if (xs[k]->dtype != dt) {
            ld_fail(LD_ETYPE, "concat: tensor %d is %s, tensor 1 is %s (cast one with astype)", k + 1,
                    ld_dtype_name(xs[k]->dtype), ld_dtype_name(dt));
            return NULL;
        }
    if (!grad || !ld_dtype_is_half(dt)) return ld_concat(xs, n, axis);
    ld_tensor **w = calloc((size_t)n, sizeof *w), *y = NULL;
    if (!w) { ld_fail(LD_ENOMEM, "out of memory"); return NULL; }
    int k = 0;
    for (; k < n; k++)
        if (!(w[k] = ld_cast_op(xs[k], LD_F32))) break;
    ld_tensor *yf = k == n ? ld_concat_op(n, w, axis) : NULL;
    y = yf ? ld_cast_op(yf, dt) : NULL;
    ld_tensor_release(yf);
    for (int i = 0; i < k; i++) ld_tensor_release(w[i]);
    free(w);
    return y;
}

ld_tensor *ld_concat_op(int n, ld_tensor *const *xs, int axis) {
    char b1[64], b2[64];
    if (n < 1 || !xs) { ld_fail(LD_EARG, "concat needs at least one tensor"); return NULL; }
    int f32 = 1, grad = 0;
    for (int k = 0; k < n; k++) {
        if (!xs[k]) { ld_fail(LD_EARG, "concat: tensor %d is missing", k + 1); return NULL; }
        f32 &= xs[k]->dtype == LD_F32;
        grad |= ld_needs_grad(xs[k]);
    }
    if (!f32) return concat_other(n, xs, axis, grad && ld_tape_recording());
    const ld_tensor *f = xs[0];
    if (f->ndim == 0) { ld_fail(LD_ESHAPE, "concat: cannot concatenate scalars"); return NULL; }
    int ax = axis;
    if (ld_ops_norm_axis(f, &ax, "concat")) return NULL;
    int64_t shape[LD_MAX_DIMS];
    memcpy(shape, f->shape, sizeof shape);
    shape[ax] = 0;
    for (int k = 0; k < n; k++) {
        const ld_tensor *x = xs[k];
        if (ld_check_same_device(f, x, "concat")) return NULL;
        int ok = x->ndim == f->ndim;
        for (int i = 0; ok && i < f->ndim; i++) ok = i == ax || x->shape[i] == f->shape[i];
        if (!ok) {
            ld_fail(LD_ESHAPE, "concat along axis %d: shapes %s and %s differ in another axis", axis,
                    ld_shape_str(f, b1, sizeof b1), ld_shape_str(x, b2, sizeof b2));
            return NULL;
        }
        shape[ax] += x->shape[ax];
    }
    if (n == 1) return ld_tensor_retain(xs[0]);
    ld_tensor *out = ld_ops_out_empty(LD_F32, f->ndim, shape, DEV(f));
    if (!out) return NULL;
    int64_t outer, inner, off = 0;
    ld_ops_split_axis(f->ndim, shape, ax, &outer, &inner);
    for (int k = 0; k < n; k++) {
        ld_tensor *c = ld_contiguous(xs[k]);   /* the node holds xs[k] itself */
        if (!c) { ld_tensor_release(out); return NULL; }
        BE(out)->slice_copy(DEV(out), FPTR(out), FPTR(c), outer, c->shape[ax], inner, shape[ax], off, 1, 0);
        off += c->shape[ax];
        ld_tensor_release(c);
    }
    record_concat(out, n, xs, ax);
    return out;
}

/* ================================================================ pad */
ld_tensor *ld_pad_op(ld_tensor *x, int axis, int64_t before, int64_t after, double value) {
    if (before < 0 || after < 0) {
        ld_fail(LD_EARG, "pad: amounts must be 0 or more, got %lld and %lld", (long long)before, (long long)after);
        return NULL;
    }
    if (x->ndim == 0) { ld_fail(LD_ESHAPE, "pad: cannot pad a scalar"); return NULL; }
    int ax = axis;
    if (ld_ops_norm_axis(x, &ax, "pad")) return NULL;
    if (!before && !after) return ld_tensor_retain(x);
    ld_tensor *parts[3], *fb = NULL, *fa = NULL;
    int n = 0;
    int64_t sh[LD_MAX_DIMS];
    memcpy(sh, x->shape, (size_t)x->ndim * sizeof *sh);
    if (before) { sh[ax] = before; parts[n++] = fb = ld_tensor_full(x->dtype, x->ndim, sh, value, DEV(x)); }
    parts[n++] = x;
    if (after) { sh[ax] = after; parts[n++] = fa = ld_tensor_full(x->dtype, x->ndim, sh, value, DEV(x)); }
    ld_tensor *y = (before && !fb) || (after && !fa) ? NULL : ld_concat_op(n, parts, ax);
    ld_tensor_release(fb);
    ld_tensor_release(fa);
    return y;
}

/* ================================================================ slice */
/* The gradient of x's block [start, start + len) along axis (len: g's size
   there): zeros of x's shape with g written in, float32 */
static ld_tensor *block_grad(const ld_tensor *x, int axis, int64_t start, ld_tensor *g) {
    ld_tensor *gf = g->dtype == LD_F32 ? ld_tensor_retain(g) : ld_cast(g, LD_F32);
    ld_tensor *gc = gf ? ld_contiguous(gf) : NULL;
    ld_tensor_release(gf);
    ld_tensor *dx = gc ? ld_ops_out_empty(LD_F32, x->ndim, x->shape, DEV(x)) : NULL;
    if (dx) {
        int64_t outer, inner;
        ld_ops_split_axis(x->ndim, x->shape, axis, &outer, &inner);
        BE(x)->fill(DEV(x), FPTR(dx), LD_F32, ld_tensor_numel(dx), 0.0);
        BE(x)->slice_copy(DEV(x), FPTR(dx), FPTR(gc), outer, gc->shape[axis], inner, x->shape[axis], start, 1, 0);
    }
    ld_tensor_release(gc);
    return dx;
}

static int bw_slice(ld_node *nd, ld_tensor *g, ld_tensor **gi) {
    gi[0] = block_grad(nd->in[0], (int)nd->args[0], (int64_t)nd->args[1], g);
    return gi[0] ? LD_OK : ld_error_status();
}

/* The views of t:slice, t[i] (ld_select) and t:permute, recorded: the
   result is the view (no copy; a write through it reaches x, as outside a
   tape), and its gradient reaches x. args: axis, start, step, and 1 when
   the axis was dropped (a select). A step of 1 scatters on x's device; a
   larger step writes the strided block on the host (rare). The gradient is
   in x's dtype. */
static int bw_slice_view(ld_node *nd, ld_tensor *g, ld_tensor **gi) {
    ld_tensor *x = nd->in[0], *gk = NULL, *dx = NULL;
    int axis = (int)nd->args[0];
    int64_t start = (int64_t)nd->args[1], step = (int64_t)nd->args[2];
    if (nd->args[3] != 0) {   /* the dropped axis back, of size 1 */
        int64_t s[LD_MAX_DIMS];
        for (int i = 0, k = 0; i < x->ndim; i++) s[i] = i == axis ? 1 : g->shape[k++];
        gk = ld_reshape(g, x->ndim, s);
    } else gk = ld_tensor_retain(g);
    if (gk && step == 1) dx = block_grad(x, axis, start, gk);
    else if (gk) {
        ld_tensor *gh = ld_to_device(gk, ld_device_cpu()), *gf = gh ? ld_cast(gh, LD_F32) : NULL;
        ld_tensor *dh = gf ? ld_tensor_zeros(LD_F32, x->ndim, x->shape, NULL) : NULL;
        ld_tensor *v = dh ? ld_slice(dh, axis, start, start + (gf->shape[axis] - 1) * step + 1, step) : NULL;
        if (v && !ld_copy_into(v, gf)) dx = ld_to_device(dh, DEV(x));
        ld_tensor_release(gh); ld_tensor_release(gf); ld_tensor_release(dh); ld_tensor_release(v);
    }
    ld_tensor_release(gk);
    if (dx && dx->dtype != x->dtype) {
        ld_tensor *c = ld_cast(dx, x->dtype);
        ld_tensor_release(dx);
        dx = c;
    }
    gi[0] = dx;
    return dx ? LD_OK : ld_error_status();
}

static ld_tensor *record_slice_view(ld_tensor *v, ld_tensor *x, int axis, int64_t start, int64_t step, int dropped) {
    if (v && ld_dtype_is_float(x->dtype)) {
        ld_tensor *in[1] = {x};
        ld_node *nd = ld_record(v, dropped ? "select" : "slice", bw_slice_view, 1, in);
        if (nd) { nd->args[0] = axis; nd->args[1] = (double)start; nd->args[2] = (double)step; nd->args[3] = dropped; }
    }
    return v;
}

ld_tensor *ld_slice_view_op(ld_tensor *x, int axis, int64_t start, int64_t stop, int64_t step) {
    ld_tensor *v = ld_slice(x, axis, start, stop, step);
    if (!v) return NULL;
    if (axis < 0) axis += x->ndim;
    ld_slice_bounds(x->shape[axis], &start, &stop);
    return record_slice_view(v, x, axis, start, step, 0);
}

ld_tensor *ld_select_op(ld_tensor *x, int axis, int64_t index) {
    ld_tensor *v = ld_select(x, axis, index);
    if (!v) return NULL;
    if (axis < 0) axis += x->ndim;
    if (index < 0) index += x->shape[axis];
    return record_slice_view(v, x, axis, index, 1, 1);
}

ld_tensor *ld_slice_op(ld_tensor *x, int axis, int64_t start, int64_t len) {
    char b1[64];
    if (x->dtype != LD_F32) { ld_fail(LD_ETYPE, "slice needs a float32 tensor, got %s", ld_dtype_name(x->dtype)); return NULL; }
    if (x->ndim == 0) { ld_fail(LD_ESHAPE, "slice: cannot slice a scalar"); return NULL; }
    int ax = axis;
    if (ld_ops_norm_axis(x, &ax, "slice")) return NULL;
    if (start < 0 || len < 0 || start > x->shape[ax] - len) {
        ld_fail(LD_EARG, "slice: [%lld, %lld) is outside axis %d (size %lld) of a tensor of shape %s",
                (long long)start, (long long)(start + len), axis, (long long)x->shape[ax],
                ld_shape_str(x, b1, sizeof b1));
        return NULL;
    }
    int64_t shape[LD_MAX_DIMS], outer, inner;
    memcpy(shape, x->shape, sizeof shape);
    shape[ax] = len;
    ld_tensor *cx = ld_contiguous(x);
    if (!cx) return NULL;
    ld_tensor *y = ld_ops_out_empty(LD_F32, x->ndim, shape, DEV(x));
    if (y) {
        ld_ops_split_axis(x->ndim, x->shape, ax, &outer, &inner);
        BE(cx)->slice_copy(DEV(cx), FPTR(y), FPTR(cx), outer, len, inner, x->shape[ax], start, 0, 0);
        ld_tensor *in[1] = {x};
        ld_node *nd = ld_record(y, "slice", bw_slice, 1, in);
        if (nd) { nd->args[0] = ax; nd->args[1] = (double)start; }
    }
    ld_tensor_release(cx);
    return y;
}

/* ================================================================ embedding */
static int bw_embedding(ld_node *nd, ld_tensor *g, ld_tensor **gi) {
    ld_tensor *table = nd->in[0], *ids = nd->saved[0];
    ld_tensor *gc = ld_contiguous(g);
    ld_tensor *dt = gc ? ld_ops_out_empty(LD_F32, 2, table->shape, DEV(table)) : NULL;
    if (dt) BE(table)->embedding_backward(DEV(table), FPTR(dt), FPTR(gc),
                                          (const char *)ids->storage->data + ids->offset * ld_dtype_size(ids->dtype),
                                          ids->dtype, ld_tensor_numel(ids), table->shape[0], table->shape[1]);
    ld_tensor_release(gc);
    gi[0] = dt;
    return dt ? LD_OK : ld_error_status();
}

ld_tensor *ld_embedding_op(ld_tensor *table, ld_tensor *ids) {
    char b1[64], b2[64];
    if (table->ndim != 2) {
        ld_fail(LD_ESHAPE, "embedding needs a [vocabulary, dim] table, got shape %s", ld_shape_str(table, b1, sizeof b1));
        return NULL;
    }
    if (table->dtype != LD_F32) {
        ld_fail(LD_ETYPE, "embedding needs a float32 table, got %s", ld_dtype_name(table->dtype));
        return NULL;
    }
    if (ids->dtype != LD_I32 && ids->dtype != LD_I64) {
        ld_fail(LD_ETYPE, "embedding needs int32 or int64 ids, got %s", ld_dtype_name(ids->dtype));
        return NULL;
    }
    if (ids->ndim + 1 > LD_MAX_DIMS) {
        ld_fail(LD_ESHAPE, "embedding: ids of shape %s leave no room for the embedding axis",
                ld_shape_str(ids, b1, sizeof b1));
        return NULL;
    }
    if (DEV(table) != DEV(ids)) {
        ld_fail(LD_EDEVICE, "embedding: the table is on %s and the ids on %s; move one with :to()",
                DEV(table)->name, DEV(ids)->name);
        return NULL;
    }
    int64_t v = table->shape[0], dim = table->shape[1], n = ld_tensor_numel(ids);
    ld_tensor *ci = ld_contiguous(ids);
    if (!ci) return NULL;
    if (ld_device_is_host(DEV(ci)) && !ld_device_is_async(DEV(ci))) {
        /* where kernels run inline the ids can be checked here; a device that
           queues gets zero rows and a kernel error for a bad id */
        const void *p = ld_tensor_data(ci);
        for (int64_t i = 0; p && i < n; i++) {
            int64_t k = ci->dtype == LD_I32 ? ((const int32_t *)p)[i] : ((const int64_t *)p)[i];
            if (k < 0 || k >= v) {
                ld_fail(LD_EARG, "embedding: id %lld at position %lld is outside [0, %lld): the table %s has %lld rows",
                        (long long)k, (long long)i, (long long)v, ld_shape_str(table, b2, sizeof b2), (long long)v);
                ld_tensor_release(ci);
                return NULL;
            }
        }
        if (!p) { ld_tensor_release(ci); return NULL; }
    }
    ld_tensor *ct = ld_ops_contig(table);
    if (!ct) { ld_tensor_release(ci); return NULL; }
    int64_t shape[LD_MAX_DIMS];
    memcpy(shape, ci->shape, sizeof(int64_t) * (size_t)ci->ndim);
    shape[ci->ndim] = dim;
    ld_tensor *y = ld_ops_out_empty(LD_F32, ci->ndim + 1, shape, DEV(ct));
    if (y) {
        BE(ct)->embedding(DEV(ct), FPTR(y), FPTR(ct),
                          (const char *)ci->storage->data + ci->offset * ld_dtype_size(ci->dtype), ci->dtype, n, v,
                          dim);
        ld_tensor *in[1] = {ct};
        ld_node *nd = ld_record(y, "embedding", bw_embedding, 1, in);
        if (nd) nd->saved[0] = ld_tensor_retain(ci);
    }
    ld_tensor_release(ct);
    ld_tensor_release(ci);
    return y;
}

/* ================================================================ gather */
/* Float tensors go through the embedding op, so the gradient comes with
   it: t seen as a [outer * n, inner] table (n = t's size along the axis),
   index k of row o picking table row o * n + k. Other dtypes are copied
   slice by slice on the host (no gradient to keep). */
ld_tensor *ld_gather(ld_tensor *t, ld_tensor *idx, int axis) {
    char b1[LD_SHAPE_STR_MAX], b2[LD_SHAPE_STR_MAX];
    if (t->ndim < 1) { ld_fail(LD_ESHAPE, "gather: cannot gather from a scalar"); return NULL; }
    if (idx->dtype != LD_I64 && idx->dtype != LD_I32) {
        ld_fail(LD_ETYPE, "gather: indices must be int32 or int64, got %s", ld_dtype_name(idx->dtype));
        return NULL;
    }
    if (axis < -t->ndim || axis >= t->ndim) {
        ld_fail(LD_EARG, "gather: axis %d is out of range for a tensor of shape %s (axes %d to %d)", axis,
                ld_shape_str(t, b1, sizeof b1), -t->ndim, t->ndim - 1);
        return NULL;
    }
    int ax = axis < 0 ? axis + t->ndim : axis;
    int ond = t->ndim - 1 + idx->ndim;
    if (ond > LD_MAX_DIMS) {
        ld_fail(LD_ESHAPE, "gather: indices %s into %s would give more than %d dimensions",
                ld_shape_str(idx, b1, sizeof b1), ld_shape_str(t, b2, sizeof b2), LD_MAX_DIMS);
        return NULL;
    }
    int64_t oshape[LD_MAX_DIMS], outer, inner, n = t->shape[ax], m = ld_tensor_numel(idx);
    for (int i = 0, k = 0; i < t->ndim; i++) {
        if (i != ax) { oshape[k++] = t->shape[i]; continue; }
        for (int j = 0; j < idx->ndim; j++) oshape[k++] = idx->shape[j];
    }
    ld_ops_split_axis(t->ndim, t->shape, ax, &outer, &inner);
    /* the indices, checked on the host, become rows of the [outer * n, inner] table */
    ld_tensor *hi = ld_to_device(idx, ld_device_cpu()), *ci = hi ? ld_contiguous(hi) : NULL;
    ld_tensor_release(hi);
    if (!ci) return NULL;
    int64_t fshape[1] = {outer * m};
    ld_tensor *rows = ld_tensor_empty(LD_I64, 1, fshape, NULL);
    const void *ip = rows ? ld_tensor_data(ci) : NULL;
    if (!ip) { ld_tensor_release(rows); ld_tensor_release(ci); return NULL; }
    int64_t *rp = ld_tensor_data_unsynced(rows);
    for (int64_t i = 0; i < m; i++) {
        int64_t k = ci->dtype == LD_I32 ? ((const int32_t *)ip)[i] : ((const int64_t *)ip)[i], k0 = k;
        if (k < 0) k += n;   /* from the end, as t[-1] */
        if (k < 0 || k >= n) {
            ld_fail(LD_EARG, "gather: index %lld at position %lld is out of range for axis %d of size %lld (shape %s)",
                    (long long)k0, (long long)i, axis, (long long)n, ld_shape_str(t, b1, sizeof b1));
            ld_tensor_release(rows); ld_tensor_release(ci);
            return NULL;
        }
        for (int64_t o = 0; o < outer; o++) rp[o * m + i] = o * n + k;
    }
    ld_tensor_release(ci);
    ld_tensor *out = NULL;
    if (outer * m == 0 || inner == 0) {
        out = ld_tensor_zeros(t->dtype, ond, oshape, DEV(t));
    } else if (t->dtype == LD_F32) {
        int64_t tshape[2] = {outer * n, inner};
        ld_tensor *table = ld_reshape_op(t, 2, tshape);
        ld_tensor *ids = table ? ld_to_device(rows, DEV(t)) : NULL;
        ld_tensor *y = ids ? ld_embedding_op(table, ids) : NULL;
        out = y ? ld_reshape_op(y, ond, oshape) : NULL;
        ld_tensor_release(table); ld_tensor_release(ids); ld_tensor_release(y);
    } else {
        ld_tensor *ht = ld_to_device(t, ld_device_cpu()), *ct = ht ? ld_contiguous(ht) : NULL;
        ld_tensor *ho = ct ? ld_tensor_empty(t->dtype, ond, oshape, NULL) : NULL;
        const char *src = ho ? ld_tensor_data(ct) : NULL;
        if (src) {
            size_t es = ld_dtype_size(t->dtype), blk = (size_t)inner * es;
            char *dst = ld_tensor_data_unsynced(ho);
            for (int64_t r = 0; r < outer * m; r++) memcpy(dst + (size_t)r * blk, src + (size_t)rp[r] * blk, blk);
            out = ld_to_device(ho, DEV(t));
        }
        ld_tensor_release(ht); ld_tensor_release(ct); ld_tensor_release(ho);
    }
    ld_tensor_release(rows);
    return out;
}

/* ================================================================ sorting: top_k, sort, argsort */
/* One row's order: indices by value, descending or ascending, ties by the
   lower index first (TF's top_k and its stable sort); NaN above +inf
   (NumPy's rule: last ascending, first descending; TF's NaN order is not
   total). A merge sort, stable by construction. */
static int sort_before(double a, double b, int desc) {
    int na = a != a, nb = b != b;
    if (na || nb) return desc ? na && !nb : nb && !na;
    return desc ? a > b : a < b;
}
static void sort_row(const double *v, int32_t *idx, int32_t *tmp, int64_t n, int desc) {
    for (int64_t i = 0; i < n; i++) idx[i] = (int32_t)i;
    for (int64_t w = 1; w < n; w *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * w) {
            int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n, a = lo, b = mid, k = lo;
            while (a < mid && b < hi) tmp[k++] = sort_before(v[idx[b]], v[idx[a]], desc) ? idx[b++] : idx[a++];
            while (a < mid) tmp[k++] = idx[a++];
            while (b < hi) tmp[k++] = idx[b++];
        }
        memcpy(idx, tmp, (size_t)n * sizeof *idx);
    }
}

/* The first k of each row's order along the last axis of x: int32 [..., k]
   on x's device (computed on the host) */
static ld_tensor *order_last(ld_tensor *x, int64_t k, int desc) {
    int64_t c = x->ndim ? x->shape[x->ndim - 1] : 1, rows = c ? ld_tensor_numel(x) / c : 0, s[LD_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) s[i] = x->shape[i];
    if (x->ndim) s[x->ndim - 1] = k;
    /* the values as doubles: every dtype's exactly (int64 to 2^53) */
    ld_tensor *hx = ld_to_device(x, ld_device_cpu()), *f = hx ? ld_contiguous(hx) : NULL;
    ld_tensor *out = f ? ld_tensor_empty(LD_I32, x->ndim, s, NULL) : NULL;
    double *v = out ? malloc(sizeof *v * (size_t)(c ? c : 1)) : NULL;
    int32_t *idx = v ? malloc(sizeof *idx * 2 * (size_t)(c ? c : 1)) : NULL;
    const void *p = idx ? ld_tensor_data(f) : NULL;
    ld_tensor *r = NULL;
    if (p) {
        int32_t *o = ld_tensor_data_unsynced(out);
        for (int64_t row = 0; row < rows; row++) {
            for (int64_t j = 0; j < c; j++) v[j] = ld_tensor_get_flat(f, row * c + j);
            sort_row(v, idx, idx + c, c, desc);
            memcpy(o + row * k, idx, (size_t)k * sizeof *o);
        }
        r = ld_to_device(out, DEV(x));
    } else if (out && !idx) ld_fail(LD_ENOMEM, "out of memory");
    free(v); free(idx);
    ld_tensor_release(hx); ld_tensor_release(f); ld_tensor_release(out);
    return r;
}

/* x's values at idx (int32 [..., k]) along the last axis, as one gather of
   the flattened x: differentiable (gather's scatter-add) for a float x */
static ld_tensor *take_last(ld_tensor *x, ld_tensor *idx) {
    int64_t c = x->shape[x->ndim - 1], k = idx->shape[idx->ndim - 1], n = ld_tensor_numel(x), rows = c ? n / c : 0;
    ld_tensor *hi = ld_to_device(idx, ld_device_cpu()), *flat_i = hi ? ld_tensor_empty(LD_I64, idx->ndim, idx->shape, NULL) : NULL;
    const int32_t *ip = flat_i ? ld_tensor_data(hi) : NULL;
    ld_tensor *y = NULL;
    if (ip) {
        int64_t *fp = ld_tensor_data_unsynced(flat_i);
        for (int64_t r = 0; r < rows; r++)
            for (int64_t j = 0; j < k; j++) fp[r * k + j] = r * c + ip[r * k + j];
        ld_tensor *fi = ld_to_device(flat_i, DEV(x)), *fx = fi ? ld_reshape_op(x, 1, &n) : NULL;
        y = fx ? ld_gather(fx, fi, 0) : NULL;
        ld_tensor_release(fi); ld_tensor_release(fx);
    }
    ld_tensor_release(hi); ld_tensor_release(flat_i);
    return y;
}

int ld_top_k(ld_tensor *x, int64_t k, ld_tensor **values, ld_tensor **indices) {
    char b[LD_SHAPE_STR_MAX];
    *values = *indices = NULL;
    if (x->ndim < 1) return ld_fail(LD_ESHAPE, "top_k needs at least one axis, got a scalar");
    int64_t c = x->shape[x->ndim - 1];
    if (k < 0 || k > c)
        return ld_fail(LD_EARG, "top_k: k = %lld, but the last axis of %s has %lld values", (long long)k,
                       ld_shape_str(x, b, sizeof b), (long long)c);
    if (c > INT32_MAX) return ld_fail(LD_ESHAPE, "top_k: a last axis of %lld values is more than int32 indices hold", (long long)c);
    ld_tensor *idx = order_last(x, k, 1), *v = idx ? take_last(x, idx) : NULL;
    if (!v) { ld_tensor_release(idx); return ld_error_status(); }
    *values = v;
    *indices = idx;
    return LD_OK;
}

/* argsort / sort along axis: that axis moved last (a recorded permute), the
   order of the last axis, then moved back */
static ld_tensor *sort_along(ld_tensor *x, int axis, int desc, int values) {
    int ax = axis, perm[LD_MAX_DIMS];
    if (x->ndim < 1) { ld_fail(LD_ESHAPE, "%s needs at least one axis, got a scalar", values ? "sort" : "argsort"); return NULL; }
    if (ld_ops_norm_axis(x, &ax, values ? "sort" : "argsort")) return NULL;
    if (x->shape[ax] > INT32_MAX) { ld_fail(LD_ESHAPE, "argsort: an axis of more values than int32 indices hold"); return NULL; }
    for (int i = 0; i < x->ndim; i++) perm[i] = i;
    perm[ax] = x->ndim - 1;
    perm[x->ndim - 1] = ax;   /* a swap: its own inverse */
    ld_tensor *t = ld_permute_op(x, perm), *ct = t ? ld_ops_contig(t) : NULL;
    ld_tensor *idx = ct ? order_last(ct, ct->shape[ct->ndim - 1], desc) : NULL;
    ld_tensor *r = !idx ? NULL : values ? take_last(ct, idx) : ld_tensor_retain(idx);
    ld_tensor *back = r ? ld_permute_op(r, perm) : NULL, *out = back ? ld_ops_contig(back) : NULL;
    ld_tensor_release(t); ld_tensor_release(ct); ld_tensor_release(idx); ld_tensor_release(r); ld_tensor_release(back);
    return out;
}
ld_tensor *ld_argsort(ld_tensor *x, int axis, int descending) { return sort_along(x, axis, descending, 0); }
ld_tensor *ld_sort(ld_tensor *x, int axis, int descending) { return sort_along(x, axis, descending, 1); }
