/*
 * ld_cpu_index.c - the CPU kernels of the indexing and pooling family
 * (LD_LAYER_KERNELS in ld_kernels.h): block copies for concatenation and
 * slicing, embedding lookups and their scatter-add.
 *
 * Each kernel splits its work over the CPU device's pool (ld_pool.h) so that every
 * part writes its own rows of the output: no two parts write the same
 * element, so no atomics and the same result from run to run.
 */
#include "ld_cpu_internal.h"
#include "ld_executor.h"

#include <stdint.h>
#include <string.h>

/* ================================================================ slice_copy */
typedef struct {
    float *dst; const float *src;
    int64_t outer, n, inner, big, off;
    int into, add;
} slice_job;

static void slice_part(void *ctx, int p, int np) {
    const slice_job *j = ctx;
    int64_t lo, hi;
    ld_cpu_rows(j->outer * j->n, p, np, &lo, &hi);
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
    int np = ld_cpu_row_parts(outer * n, outer * n * inner);
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
    ld_cpu_rows(j->n, p, np, &lo, &hi);
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
    int np = ld_cpu_row_parts(n, n * dim);
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
        ld_cpu_rows(j->dim, p, np, &lo, &hi);
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
    ld_cpu_rows(j->v, p, np, &lo, &hi);
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
