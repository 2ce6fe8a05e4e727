/*
 * ld_cpu_index.c - the CPU kernels of the indexing and pooling family
 * (LD_LAYER_KERNELS in ld_kernels.h): block copies for concatenation and
 * slicing, embedding lookups and their scatter-add, average pooling.
 *
 * Each kernel splits its work over ld_cpu_internal.h's pool so that every
 * part writes its own rows of the output: no two parts write the same
 * element, so no atomics and the same result from run to run.
 */
#include "ld_cpu_internal.h"
#include "ld_executor.h"

#include <stdint.h>
#include <string.h>

/* part's share [lo, hi) of n rows, split evenly (rows are coarse units) */
static void row_range(int64_t n, int part, int nparts, int64_t *lo, int64_t *hi) {
    *lo = n * part / nparts;
    *hi = n * (part + 1) / nparts;
}

/* parts wanted for `rows` rows of `work` elements in all */
static int parts_for(int64_t rows, int64_t work) {
    if (work < LD_CPU_PAR_MIN || rows < 2) return 1;
    return rows < 64 ? (int)rows : 64;
}

/* ================================================================ slice_copy */
typedef struct {
    float *dst; const float *src;
    int64_t outer, n, inner, big, off;
    int into, add;
} slice_job;

static void slice_part(void *ctx, int p, int np) {
    const slice_job *j = ctx;
    int64_t lo, hi;
    row_range(j->outer * j->n, p, np, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        int64_t o = r / j->n, k = r - o * j->n;
        int64_t small = r * j->inner, large = (o * j->big + j->off + k) * j->inner;
        float *d = j->dst + (j->into ? large : small);
        const float *s = j->src + (j->into ? small : large);
        if (j->add) for (int64_t i = 0; i < j->inner; i++) d[i] += s[i];
        else memcpy(d, s, (size_t)j->inner * sizeof(float));
    }
}

void cpu_slice_copy(ld_device *d, float *dst, const float *src, int64_t outer, int64_t n, int64_t inner,
                    int64_t big, int64_t off, int into, int add) {
    if (outer <= 0 || n <= 0 || inner <= 0) return;
    slice_job j = {dst, src, outer, n, inner, big, off, into, add};
    int np = parts_for(outer * n, outer * n * inner);
    if (np <= 1) slice_part(&j, 0, 1);
    else ld_cpu_parallel(slice_part, &j, np);
}

/* ================================================================ embedding */
static inline int64_t id_at(const void *ids, ld_dtype dt, int64_t i) {
    return dt == LD_I32 ? (int64_t)((const int32_t *)ids)[i] : ((const int64_t *)ids)[i];
}

typedef struct {
    float *out; const float *in; const void *ids; ld_dtype idt;
    int64_t n, v, dim;
    int64_t bad_at;      /* embedding: the first bad id's position found by a part, or -1 */
    int by_cols;         /* embedding_backward: parts own columns instead of table rows */
} emb_job;

static void emb_part(void *ctx, int p, int np) {
    emb_job *j = ctx;
    int64_t lo, hi, bad = -1;
    row_range(j->n, p, np, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) {
        int64_t k = id_at(j->ids, j->idt, i);
        float *y = j->out + i * j->dim;
        if (k >= 0 && k < j->v) memcpy(y, j->in + k * j->dim, (size_t)j->dim * sizeof(float));
        else {
            memset(y, 0, (size_t)j->dim * sizeof(float));
            if (bad < 0) bad = i;
        }
    }
    if (bad >= 0) __atomic_compare_exchange_n(&j->bad_at, &(int64_t){-1}, bad, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

void cpu_embedding(ld_device *d, float *y, const float *table, const void *ids, ld_dtype idt, int64_t n, int64_t v,
                   int64_t dim) {
    if (n <= 0 || dim <= 0) return;
    emb_job j = {y, table, ids, idt, n, v, dim, -1, 0};
    int np = parts_for(n, n * dim);
    if (np <= 1) emb_part(&j, 0, 1);
    else ld_cpu_parallel(emb_part, &j, np);
    if (j.bad_at >= 0 && d) {
        /* the op checks host ids where kernels run inline; on a device that
           queues they may still have been being written */
        int64_t i = j.bad_at;
        ld_executor_kernel_error(d, "embedding: id %lld at position %lld is outside [0, %lld) (the table has %lld rows)",
                                 (long long)id_at(ids, idt, i), (long long)i, (long long)v, (long long)v);
    }
}

/* Each part owns table rows [lo, hi) (or columns [lo, hi) of every row),
   zeroes them and adds every id's row that falls there, in id order. */
static void emb_back_part(void *ctx, int p, int np) {
    emb_job *j = ctx;
    int64_t lo, hi;
    if (j->by_cols) {
        row_range(j->dim, p, np, &lo, &hi);
        if (lo >= hi) return;
        for (int64_t r = 0; r < j->v; r++) memset(j->out + r * j->dim + lo, 0, (size_t)(hi - lo) * sizeof(float));
        for (int64_t i = 0; i < j->n; i++) {
            int64_t k = id_at(j->ids, j->idt, i);
            if (k < 0 || k >= j->v) continue;
            float *dt = j->out + k * j->dim;
            const float *g = j->in + i * j->dim;
            for (int64_t c = lo; c < hi; c++) dt[c] += g[c];
        }
        return;
    }
    row_range(j->v, p, np, &lo, &hi);
    if (lo >= hi) return;
    memset(j->out + lo * j->dim, 0, (size_t)((hi - lo) * j->dim) * sizeof(float));
    for (int64_t i = 0; i < j->n; i++) {
        int64_t k = id_at(j->ids, j->idt, i);
        if (k < lo || k >= hi) continue;
        float *dt = j->out + k * j->dim;
        const float *g = j->in + i * j->dim;
        for (int64_t c = 0; c < j->dim; c++) dt[c] += g[c];
    }
}

void cpu_embedding_backward(ld_device *d, float *dtable, const float *dy, const void *ids, ld_dtype idt, int64_t n,
                            int64_t v, int64_t dim) {
    if (v <= 0 || dim <= 0) return;
    int64_t work = (n > v ? n : v) * dim;
    int np = work < LD_CPU_PAR_MIN ? 1 : 64;
    /* few table rows: split the columns instead */
    int by_cols = np > 1 && v < 16 && dim >= 64;
    if (np > 1 && !by_cols && v < np) np = (int)v;
    emb_job j = {dtable, dy, ids, idt, n, v, dim, -1, by_cols};
    if (np <= 1) emb_back_part(&j, 0, 1);
    else ld_cpu_parallel(emb_back_part, &j, np);
}

/* ================================================================ average pooling */
typedef struct {
    float *out; const float *in;
    int64_t n, h, w, c, kh, kw, sh, sw, ph, pw, oh, ow;
} pool_job;

/* output rows (b, i) of the forward pass */
static void avg_part(void *ctx, int p, int np) {
    const pool_job *j = ctx;
    int64_t lo, hi, c = j->c;
    row_range(j->n * j->oh, p, np, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        int64_t b = r / j->oh, i = r - b * j->oh;
        int64_t y0 = i * j->sh - j->ph, y1 = y0 + j->kh;
        if (y0 < 0) y0 = 0;
        if (y1 > j->h) y1 = j->h;
        for (int64_t q = 0; q < j->ow; q++) {
            int64_t x0 = q * j->sw - j->pw, x1 = x0 + j->kw;
            if (x0 < 0) x0 = 0;
            if (x1 > j->w) x1 = j->w;
            float *yo = j->out + (r * j->ow + q) * c;
            for (int64_t e = 0; e < c; e++) yo[e] = 0.0f;
            int64_t cnt = (y1 - y0) * (x1 - x0);
            for (int64_t yy = y0; yy < y1; yy++)
                for (int64_t xx = x0; xx < x1; xx++) {
                    const float *xi = j->in + ((b * j->h + yy) * j->w + xx) * c;
                    for (int64_t e = 0; e < c; e++) yo[e] += xi[e];
                }
            float inv = cnt > 0 ? 1.0f / (float)cnt : 0.0f;
            for (int64_t e = 0; e < c; e++) yo[e] *= inv;
        }
    }
}

void cpu_avgpool(ld_device *d, float *y, const float *x, int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh,
                 int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t oh, int64_t ow) {
    if (n <= 0 || oh <= 0 || ow <= 0 || c <= 0) return;
    pool_job j = {y, x, n, h, w, c, kh, kw, sh, sw, ph, pw, oh, ow};
    int np = parts_for(n * oh, n * oh * ow * c * kh * kw);
    if (np <= 1) avg_part(&j, 0, 1);
    else ld_cpu_parallel(avg_part, &j, np);
}

/* floor division, positive d */
static inline int64_t fdiv(int64_t a, int64_t d) { return a >= 0 ? a / d : -((-a + d - 1) / d); }

/* the output windows covering coordinate t (padded start pad, kernel k,
   stride s, out outputs): [*lo, *hi] */
static inline void covering(int64_t t, int64_t pad, int64_t k, int64_t s, int64_t out, int64_t *lo, int64_t *hi) {
    int64_t tp = t + pad;
    *lo = fdiv(tp - k, s) + 1;
    *hi = fdiv(tp, s);
    if (*lo < 0) *lo = 0;
    if (*hi > out - 1) *hi = out - 1;
}

static inline int64_t window_cells(int64_t i, int64_t pad, int64_t k, int64_t s, int64_t in) {
    int64_t a = i * s - pad, b = a + k;
    if (a < 0) a = 0;
    if (b > in) b = in;
    return b > a ? b - a : 0;
}

/* input rows (b, y) of the backward pass: each input cell gathers dy/count
   of the windows covering it */
static void avg_back_part(void *ctx, int p, int np) {
    const pool_job *j = ctx;
    int64_t lo, hi, c = j->c;
    row_range(j->n * j->h, p, np, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        int64_t b = r / j->h, yy = r - b * j->h, i0, i1;
        covering(yy, j->ph, j->kh, j->sh, j->oh, &i0, &i1);
        for (int64_t xx = 0; xx < j->w; xx++) {
            int64_t q0, q1;
            covering(xx, j->pw, j->kw, j->sw, j->ow, &q0, &q1);
            float *dx = j->out + (r * j->w + xx) * c;
            for (int64_t e = 0; e < c; e++) dx[e] = 0.0f;
            for (int64_t i = i0; i <= i1; i++) {
                int64_t ch = window_cells(i, j->ph, j->kh, j->sh, j->h);
                for (int64_t q = q0; q <= q1; q++) {
                    float inv = 1.0f / (float)(ch * window_cells(q, j->pw, j->kw, j->sw, j->w));
                    const float *g = j->in + ((b * j->oh + i) * j->ow + q) * c;
                    for (int64_t e = 0; e < c; e++) dx[e] += g[e] * inv;
                }
            }
        }
    }
}

void cpu_avgpool_backward(ld_device *d, float *dx, const float *dy, int64_t n, int64_t h, int64_t w, int64_t c,
                          int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t oh,
                          int64_t ow) {
    if (n <= 0 || h <= 0 || w <= 0 || c <= 0) return;
    pool_job j = {dx, dy, n, h, w, c, kh, kw, sh, sw, ph, pw, oh, ow};
    int np = parts_for(n * h, n * h * w * c * kh * kw);
    if (np <= 1) avg_back_part(&j, 0, 1);
    else ld_cpu_parallel(avg_back_part, &j, np);
}
