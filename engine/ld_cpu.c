/*
 * ld_cpu.c - the CPU backend: host memory with a caching allocator, and the
 * kernels (OpenBLAS for matrix products, plain C loops the compiler
 * vectorises for the rest).
 */
#include "ld_device.h"
#include "ld_executor.h"
#include "ld_cpu_gemm_small.h"
#include "ld_gemm_bf16.h"
#include "ld_cpu_simd.h"
#include "ld_cpu_internal.h"
#include "ld_half.h"
#include "ld_elementwise_math.h"
#include "ld_optim_math.h"

#include <cblas.h>
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <unistd.h>

/* ================================================================ memory
 * A training step allocates the same sizes every step; glibc returns big
 * blocks to the kernel with munmap and the next step page-faults them back.
 * Freed blocks of 4 KiB and more are kept in exact-size lists (sizes rounded
 * to 4 KiB) up to a cap, and handed out again. */
#define CACHE_MIN 4096
#define CACHE_SLOTS 512
typedef struct { size_t size; void *p; } cache_entry;
static struct {
    pthread_mutex_t mu;
    cache_entry e[CACHE_SLOTS];
    int n;
    size_t bytes, cap;
} cache = {PTHREAD_MUTEX_INITIALIZER, {{0, 0}}, 0, 0, (size_t)1 << 30};

static size_t round_size(size_t n) {
    return n < CACHE_MIN ? n : (n + CACHE_MIN - 1) & ~(size_t)(CACHE_MIN - 1);
}

static void cache_trim(void) {
    pthread_mutex_lock(&cache.mu);
    for (int i = 0; i < cache.n; i++) ld_host_free(cache.e[i].p, cache.e[i].size);
    cache.n = 0;
    cache.bytes = 0;
    pthread_mutex_unlock(&cache.mu);
}

static void *cpu_alloc(ld_device *d, size_t nbytes) {
    size_t sz = round_size(nbytes);
    if (sz >= CACHE_MIN) {
        pthread_mutex_lock(&cache.mu);
        for (int i = cache.n - 1; i >= 0; i--) {
            if (cache.e[i].size == sz) {
                void *p = cache.e[i].p;
                cache.e[i] = cache.e[--cache.n];
                cache.bytes -= sz;
                pthread_mutex_unlock(&cache.mu);
                return p;
            }
        }
        pthread_mutex_unlock(&cache.mu);
    }
    void *p = ld_host_alloc(sz);
    if (!p && cache.n) {         /* give the cache back and try once more */
        cache_trim();
        ld_clear_error();
        p = ld_host_alloc(sz);
    }
    return p;
}

static void cpu_free(ld_device *d, void *p, size_t nbytes) {
    size_t sz = round_size(nbytes);
    if (sz >= CACHE_MIN) {
        pthread_mutex_lock(&cache.mu);
        if (cache.n < CACHE_SLOTS && cache.bytes + sz <= cache.cap) {
            cache.e[cache.n].size = sz;
            cache.e[cache.n].p = p;
            cache.n++;
            cache.bytes += sz;
            pthread_mutex_unlock(&cache.mu);
            return;
        }
        pthread_mutex_unlock(&cache.mu);
    }
    ld_host_free(p, sz);
}

static int cpu_to_host(ld_device *d, void *host, const void *src, size_t n) { memcpy(host, src, n); return 0; }
static int cpu_from_host(ld_device *d, void *dst, const void *host, size_t n) { memcpy(dst, host, n); return 0; }
static void cpu_sync(ld_device *d) {}


/* ================================================================ thread pool
 * The pools and the share-out of the cores are in ld_pool.c; the
 * kernels here split their work with them (ld_cpu_internal.h). */
#define parallel_run ld_cpu_parallel
#define range_of ld_cpu_range

#define PAR_MIN 32768   /* elements below which a loop stays on one thread */
/* the same for strided copies and elementwise binaries: memory-bound, below
   this a second thread (its wake-up, or a wait for a core on a busy
   machine) costs about what it saves. With 4 threads and more, on as many
   cores, the parts run that many times faster and the limit is PAR_MIN: on
   the 16-core Xeon a bias add over 256x512 stayed at 45-52 us whatever the
   threads. */
#define MEM_PAR_MIN_FEW 262144
static int64_t mem_par_min(void) { return ld_cpu_threads() >= 4 && ld_cpu_cores() >= 4 ? PAR_MIN : MEM_PAR_MIN_FEW; }

/* ================================================================ copies */
static inline double load_as_double(const void *p, ld_dtype dt, int64_t i) {
    switch (dt) {
    case LD_F32: return ((const float *)p)[i];
    case LD_I32: return ((const int32_t *)p)[i];
    case LD_I64: return (double)((const int64_t *)p)[i];
    case LD_F16: return ld_f16_to_f32(((const uint16_t *)p)[i]);
    case LD_BF16: return ld_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const uint8_t *)p)[i];
    }
}
/* v clamped to [lo, hi], NaN as 0: a float out of an integer type's range
   converted by a plain cast is undefined behaviour. Values a user gives are
   refused before they get here (ld_dtype_check_value); this keeps the
   conversions inside the engine (labels cast to int64) defined, saturating
   as CUDA's conversions do. */
static inline double clamp_for_int(double v, double lo, double hi) {
    return v != v ? 0 : v < lo ? lo : v > hi ? hi : v;
}
static inline void store_from_double(void *p, ld_dtype dt, int64_t i, double v) {
    switch (dt) {
    case LD_F32: ((float *)p)[i] = (float)v; break;
    case LD_I32: ((int32_t *)p)[i] = (int32_t)clamp_for_int(v, INT32_MIN, INT32_MAX); break;
    case LD_I64:   /* INT64_MAX is not a double: 2^63 is the first value past it */
        ((int64_t *)p)[i] = v >= 0x1p63 ? INT64_MAX : (int64_t)clamp_for_int(v, -0x1p63, 0x1p63); break;
    /* through float32: a double rounded twice can differ from the double
       rounded once in the last bit of a half; values reach here as float32
       (a cast) or as a user's number, where that tie is the user's own */
    case LD_F16: ((uint16_t *)p)[i] = ld_f32_to_f16((float)v); break;
    case LD_BF16: ((uint16_t *)p)[i] = ld_f32_to_bf16((float)v); break;
    default: ((uint8_t *)p)[i] = (uint8_t)clamp_for_int(v, 0, UINT8_MAX); break;
    }
}

/* One row of a float32 <-> half conversion (src stride `is` elements): the
   common casts of ld_ops_half, without the per-element switch above; and a
   half row copied as its bits. 0 when the pair is not one of these. */
static int convert_row_half(void *dst, ld_dtype ddt, const void *src, ld_dtype sdt, int64_t n, int64_t is) {
    if (sdt == LD_F32 && ld_dtype_is_half(ddt)) {
        const float *s = src;
        uint16_t *d = dst;
        if (is == 1) ld_cpu_f32_to_half(d, s, ddt, n);
        else if (ddt == LD_F16) for (int64_t j = 0; j < n; j++) d[j] = ld_f32_to_f16(s[j * is]);
        else for (int64_t j = 0; j < n; j++) d[j] = ld_f32_to_bf16(s[j * is]);
        return 1;
    }
    if (ddt == LD_F32 && ld_dtype_is_half(sdt)) {
        const uint16_t *s = src;
        float *d = dst;
        if (is == 1) ld_cpu_half_to_f32(d, s, sdt, n);
        else if (sdt == LD_F16) for (int64_t j = 0; j < n; j++) d[j] = ld_f16_to_f32(s[j * is]);
        else for (int64_t j = 0; j < n; j++) d[j] = ld_bf16_to_f32(s[j * is]);
        return 1;
    }
    if (ddt == sdt && ld_dtype_size(ddt) == 2) {   /* a half permuted or sliced: its bits moved */
        const uint16_t *s = src;
        uint16_t *d = dst;
        if (is == 1) memcpy(d, s, (size_t)n * 2);
        else for (int64_t j = 0; j < n; j++) d[j] = s[j * is];
        return 1;
    }
    return 0;
}

static void copy_strided_serial(void *dst, ld_dtype ddt, const void *src, ld_dtype sdt, int ndim,
                                const int64_t *shape, const int64_t *ss) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    if (n == 0) return;
    size_t es = ld_dtype_size(sdt);
    /* contiguous source of the same type: one memcpy */
    int contig = 1;
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) { if (shape[i] != 1 && ss[i] != s) contig = 0; s *= shape[i]; }
    if (contig && ddt == sdt) { memcpy(dst, src, (size_t)n * es); return; }
    int64_t idx[LD_MAX_DIMS] = {0};
    int64_t inner = ndim ? shape[ndim - 1] : 1, is = ndim ? ss[ndim - 1] : 0;
    int64_t off = 0, o = 0;
    for (;;) {
        if (ddt == LD_F32 && sdt == LD_F32) {
            const float *sp = (const float *)src + off;
            float *dp = (float *)dst + o;
            if (is == 1) ldv_copy(dp, sp, inner);   /* rows of a head (16 floats) are too short for memcpy's call */
            else for (int64_t j = 0; j < inner; j++) dp[j] = sp[j * is];
        } else if (!convert_row_half((char *)dst + o * (int64_t)ld_dtype_size(ddt), ddt,
                                     (const char *)src + off * (int64_t)ld_dtype_size(sdt), sdt, inner, is)) {
            for (int64_t j = 0; j < inner; j++)
                store_from_double(dst, ddt, o + j, load_as_double(src, sdt, off + j * is));
        }
        o += inner;
        int k = ndim - 2;
        for (; k >= 0; k--) {
            off += ss[k];
            if (++idx[k] < shape[k]) break;
            off -= ss[k] * shape[k];
            idx[k] = 0;
        }
        if (k < 0) break;
    }
}

/* large strided copies (head split/merge, a bias broadcast over the rows)
   are split over the pool along their first axis, after the axes the source
   reads in order are merged (a contiguous cast is one row, split in ranges:
   row by row, a [256, 28, 28, 1] cast made 200704 calls of one element) */
typedef struct {
    void *dst; ld_dtype ddt; const void *src; ld_dtype sdt; int ndim; const int64_t *shape, *ss; int64_t per;
} cs_job;
static void cs_part(void *c, int p, int np) {
    cs_job *j = c;
    int64_t lo = j->shape[0] * p / np, hi = j->shape[0] * (p + 1) / np, sh[LD_MAX_DIMS];
    if (lo >= hi) return;
    memcpy(sh, j->shape, sizeof(int64_t) * (size_t)j->ndim);
    sh[0] = hi - lo;
    copy_strided_serial((char *)j->dst + lo * j->per * (int64_t)ld_dtype_size(j->ddt), j->ddt,
                        (const char *)j->src + lo * j->ss[0] * (int64_t)ld_dtype_size(j->sdt), j->sdt, j->ndim, sh,
                        j->ss);
}
static void cpu_copy_strided(ld_device *d, void *dst, ld_dtype ddt, const void *src, ld_dtype sdt,
                             int ndim, const int64_t *shape, const int64_t *ss) {
    int64_t sh[LD_MAX_DIMS], st[LD_MAX_DIMS], n = 1;
    int nd = 0;
    for (int i = 0; i < ndim; i++) {
        n *= shape[i];
        if (shape[i] == 1) continue;
        if (nd && st[nd - 1] == ss[i] * shape[i]) { sh[nd - 1] *= shape[i]; st[nd - 1] = ss[i]; continue; }
        sh[nd] = shape[i]; st[nd] = ss[i]; nd++;
    }
    if (n == 0) return;
    if (!nd) { sh[0] = 1; st[0] = 1; nd = 1; }
    if (n < mem_par_min() || sh[0] < 2) { copy_strided_serial(dst, ddt, src, sdt, nd, sh, st); return; }
    cs_job j = {dst, ddt, src, sdt, nd, sh, st, n / sh[0]};
    parallel_run(cs_part, &j, sh[0] < 64 ? (int)sh[0] : 64);
}

static void cpu_fill(ld_device *d, void *dst, ld_dtype dt, int64_t n, double v) {
    if (v == 0) { memset(dst, 0, (size_t)n * ld_dtype_size(dt)); return; }
    if (dt == LD_F32) { float f = (float)v, *p = dst; for (int64_t i = 0; i < n; i++) p[i] = f; return; }
    for (int64_t i = 0; i < n; i++) store_from_double(dst, dt, i, v);
}

/* ================================================================ elementwise */
/* The formulas are ld_elementwise_math.h's, shared with the CUDA kernels. */
/* The inner loop, specialised per op (a constant op folds the formula's
   switch) so the compiler vectorises it. */
#define INNER(OPEXPR) \
    if (as == 1 && bs == 1) for (int64_t j = 0; j < n; j++) { float x = a[j], y = b[j]; out[j] = OPEXPR; } \
    else if (as == 1 && bs == 0) { float y = b[0]; for (int64_t j = 0; j < n; j++) { float x = a[j]; out[j] = OPEXPR; } } \
    else if (as == 0 && bs == 1) { float x = a[0]; for (int64_t j = 0; j < n; j++) { float y = b[j]; out[j] = OPEXPR; } } \
    else for (int64_t j = 0; j < n; j++) { float x = a[j * as], y = b[j * bs]; out[j] = OPEXPR; }

static void bin_inner(ld_binary_op op, float *out, const float *a, int64_t as, const float *b,
                      int64_t bs, int64_t n) {
#define BIN_CASE(E, name) case LD_BIN_##E: INNER(ld_ew_binary(LD_BIN_##E, x, y)) break;
    switch (op) {
    LD_BINARY_OPS(BIN_CASE)
    default: break;
    }
#undef BIN_CASE
}

/* One contiguous row of a half result: the operands' rows (stride 0, 1 or
   more) widened to float32 block by block on the stack (exact), the float32
   loop, the block rounded once. */
enum { BIN_BLOCK = 512 };
static void bin_row_half(ld_binary_op op, ld_dtype dt, uint16_t *out, const uint16_t *a, int64_t as,
                         const uint16_t *b, int64_t bs, int64_t n) {
    float fa[BIN_BLOCK], fb[BIN_BLOCK], fo[BIN_BLOCK];
    if (as == 0) convert_row_half(fa, LD_F32, a, dt, 1, 1);
    if (bs == 0) convert_row_half(fb, LD_F32, b, dt, 1, 1);
    for (int64_t c = 0; c < n; c += BIN_BLOCK) {
        int64_t m = n - c < BIN_BLOCK ? n - c : BIN_BLOCK;
        if (as) convert_row_half(fa, LD_F32, a + c * as, dt, m, as);
        if (bs) convert_row_half(fb, LD_F32, b + c * bs, dt, m, bs);
        bin_inner(op, fo, fa, as ? 1 : 0, fb, bs ? 1 : 0, m);
        ld_cpu_f32_to_half(out + c, fo, dt, m);
    }
}

/* out (contiguous) = a op b over shape, a and b with their own strides
   (0 on a broadcast axis); float32, or a half dtype computed in float32
   and rounded once per element */
static void cpu_binary_serial(ld_device *d, ld_binary_op op, ld_dtype dt, void *out, const void *a, const int64_t *sa,
                              const void *b, const int64_t *sb, int ndim, const int64_t *shape) {
    if (ndim == 0) {
        if (dt == LD_F32) *(float *)out = ld_ew_binary(op, *(const float *)a, *(const float *)b);
        else bin_row_half(op, dt, out, a, 0, b, 0, 1);
        return;
    }
    /* merge the trailing dims that are contiguous in both operands */
    int64_t total = 1;
    for (int i = 0; i < ndim; i++) total *= shape[i];
    if (total == 0) return;
    int last = ndim - 1;
    int64_t inner = shape[last], as = sa[last], bs = sb[last];
    while (last > 0) {
        int p = last - 1;
        int a_ok = (as == 1 && sa[p] == inner) || (as == 0 && sa[p] == 0);
        int b_ok = (bs == 1 && sb[p] == inner) || (bs == 0 && sb[p] == 0);
        if (!(a_ok && b_ok) || (as == 0 && bs == 0)) break;
        inner *= shape[p];
        last = p;
    }
    int64_t idx[LD_MAX_DIMS] = {0}, ao = 0, bo = 0;
    for (int64_t o = 0; o < total; o += inner) {
        if (dt == LD_F32) bin_inner(op, (float *)out + o, (const float *)a + ao, as, (const float *)b + bo, bs, inner);
        else bin_row_half(op, dt, (uint16_t *)out + o, (const uint16_t *)a + ao, as, (const uint16_t *)b + bo, bs, inner);
        int k = last - 1;
        for (; k >= 0; k--) {
            ao += sa[k]; bo += sb[k];
            if (++idx[k] < shape[k]) break;
            ao -= sa[k] * shape[k]; bo -= sb[k] * shape[k];
            idx[k] = 0;
        }
    }
}

/* one loop per op, each calling the shared formula with a constant op, so
   the compiler specialises and vectorises it */
static void cpu_unary_serial(ld_device *d, ld_unary_op op, float *y, const float *x, int64_t n) {
#define UN_CASE(E, name) case LD_UN_##E: for (int64_t i = 0; i < n; i++) y[i] = ld_ew_unary(LD_UN_##E, x[i]); break;
    switch (op) {
    LD_UNARY_OPS(UN_CASE)
    default: break;
    }
#undef UN_CASE
}

/* x and y are read only where the derivative uses them (either may be NULL otherwise) */
static void cpu_unary_backward_serial(ld_device *d, ld_unary_op op, float *dx, const float *dy,
                               const float *x, const float *y, int64_t n) {
#define UB_CASE(E, name)                                                                                 \
    case LD_UN_##E:                                                                                       \
        for (int64_t i = 0; i < n; i++)                                                                   \
            dx[i] = ld_ew_unary_grad(LD_UN_##E, dy[i], ld_ew_grad_uses_x(LD_UN_##E) ? x[i] : 0,           \
                                     ld_ew_grad_uses_y(LD_UN_##E) ? y[i] : 0);                            \
        break;
    switch (op) {
    LD_UNARY_OPS(UB_CASE)
    default: break;
    }
#undef UB_CASE
}

/* Reductions of the middle axis of [outer, n, inner], over outer rows
   [o0, o1) and inner columns [i0, i1): each output is summed (or compared)
   over j in order, whatever the split, so a split result is the serial one
   bit for bit. Split over outer rows where there are several (or inner is
   1), else over inner columns (a bias gradient: [1, batch, units]) in
   blocks of 64 (whole cache lines, 4 per row). A half x (float16,
   bfloat16) is read widened, RED_CHUNK values at a time where it is summed
   (the float32 loops' additions, in their order: the bits of widening x
   first, without its float32 copy). */
typedef struct { ld_reduce_op op; void *out; const void *x; ld_dtype xdt; int64_t outer, n, inner; int by_rows; } red_job;
#define RED_CHUNK 512

static void red_range(const red_job *jb, int64_t o0, int64_t o1, int64_t i0, int64_t i1) {
    int64_t n = jb->n, inner = jb->inner;
    ld_dtype dt = jb->xdt;
    if (jb->op == LD_RED_SUM) {
        float *out = jb->out, buf[RED_CHUNK];
        if (inner == 1) {
            for (int64_t o = o0; o < o1; o++) {
                double s = 0;
                if (dt == LD_F32) {
                    const float *r = (const float *)jb->x + o * n;
                    for (int64_t j = 0; j < n; j++) s += r[j];
                } else {
                    const uint16_t *r = (const uint16_t *)jb->x + o * n;
                    for (int64_t j0 = 0; j0 < n; j0 += RED_CHUNK) {
                        int64_t m = n - j0 < RED_CHUNK ? n - j0 : RED_CHUNK;
                        ld_cpu_half_to_f32(buf, r + j0, dt, m);
                        for (int64_t j = 0; j < m; j++) s += buf[j];
                    }
                }
                out[o] = (float)s;
            }
            return;
        }
        for (int64_t o = o0; o < o1; o++) {
            float *dst = out + o * inner;
            for (int64_t i = i0; i < i1; i++) dst[i] = 0;
            for (int64_t j = 0; j < n; j++) {
                int64_t row = (o * n + j) * inner;
                if (dt == LD_F32) {
                    const float *r = (const float *)jb->x + row;
                    for (int64_t i = i0; i < i1; i++) dst[i] += r[i];
                    continue;
                }
                for (int64_t c0 = i0; c0 < i1; c0 += RED_CHUNK) {
                    int64_t m = i1 - c0 < RED_CHUNK ? i1 - c0 : RED_CHUNK;
                    ld_cpu_half_to_f32(buf, (const uint16_t *)jb->x + row + c0, dt, m);
                    for (int64_t i = 0; i < m; i++) dst[c0 + i] += buf[i];
                }
            }
        }
        return;
    }
    for (int64_t o = o0; o < o1; o++) {
        for (int64_t i = i0; i < i1; i++) {
            int64_t base = o * n * inner + i;
            float best = n ? ld_cpu_elem(jb->x, dt, base) : -INFINITY;
            int64_t arg = 0;
            for (int64_t j = 1; j < n; j++) {
                float v = dt == LD_F32 ? ((const float *)jb->x)[base + j * inner] : ld_cpu_elem(jb->x, dt, base + j * inner);
                if (ld_ew_max_wins(v, best)) { best = v; arg = j; }
            }
            if (jb->op == LD_RED_MAX) ((float *)jb->out)[o * inner + i] = best;
            else ((int64_t *)jb->out)[o * inner + i] = arg;
        }
    }
}
/* Part p of np of an [outer, n, inner] pass split as the reductions and
   scans split it: outer rows [r[0], r[1]) by rows, else inner columns
   [r[2], r[3]) in blocks of 64. 0 when the part is empty. */
static int outer_inner_part(int by_rows, int64_t outer, int64_t inner, int p, int np, int64_t r[4]) {
    r[0] = 0; r[1] = outer; r[2] = 0; r[3] = inner;
    if (by_rows) {
        range_of(outer, p, np, &r[0], &r[1]);
        return r[0] < r[1];
    }
    int64_t blocks = (inner + 63) / 64, b0, b1;
    range_of(blocks, p, np, &b0, &b1);
    r[2] = b0 * 64; r[3] = b1 * 64 < inner ? b1 * 64 : inner;
    return b1 > b0 && r[2] < r[3];
}
static void red_part(void *ctx, int p, int np) {
    const red_job *jb = ctx;
    int64_t r[4];
    if (outer_inner_part(jb->by_rows, jb->outer, jb->inner, p, np, r)) red_range(jb, r[0], r[1], r[2], r[3]);
}
static void reduce_f32(ld_reduce_op op, void *outp, const void *x, ld_dtype xdt, int64_t outer, int64_t n,
                       int64_t inner) {
    int by_rows = outer > 1 || inner == 1;
    red_job jb = {op, outp, x, xdt, outer, n, inner, by_rows};
    int64_t ways = by_rows ? outer : (inner + 63) / 64;   /* independent pieces */
    /* a column sum streams its rows at one core's bandwidth, which a second
       or third thread on a small machine does not add to (2048 x 512 on the
       2-core machine: 146 us alone, 164-218 us on both): split only on 4+ */
    int64_t min = by_rows ? mem_par_min() : ld_cpu_threads() >= 4 && ld_cpu_cores() >= 4 ? PAR_MIN : INT64_MAX;
    if (outer * n * inner < min || ways < 2) red_range(&jb, 0, outer, 0, inner);
    else parallel_run(red_part, &jb, ways < 64 ? (int)ways : 64);
}

/* a result rounded to rdt or stored in a half odt: the float32 results into
   the thread's scratch block, then rounded once (ld_kernels.h) */
static void cpu_reduce(ld_device *d, ld_reduce_op op, void *outp, ld_dtype odt, ld_dtype rdt, const void *x,
                       ld_dtype xdt, int64_t outer, int64_t n, int64_t inner) {
    int64_t cnt = outer * inner;
    if (op == LD_RED_ARGMAX || (odt == LD_F32 && !ld_dtype_is_half(rdt))) {
        reduce_f32(op, outp, x, xdt, outer, n, inner);
        return;
    }
    float *f = ld_cpu_scratch(LD_SCRATCH_SUMS, (size_t)(cnt > 0 ? cnt : 1) * sizeof(float));
    if (!f) {
        ld_device_fault(d, LD_ENOMEM, "reduce: out of memory for the float32 results");
        ld_cpu_nan_rows(d, outp, odt, cnt, 1, cnt);
        return;
    }
    reduce_f32(op, f, x, xdt, outer, n, inner);
    ld_dtype half = ld_dtype_is_half(odt) ? odt : rdt;   /* odt half: rdt is odt or float32 */
    if (odt == LD_F32) {   /* rounded, kept in float32 */
        uint16_t tmp[RED_CHUNK];
        for (int64_t i = 0; i < cnt; i += RED_CHUNK) {
            int64_t m = cnt - i < RED_CHUNK ? cnt - i : RED_CHUNK;
            ld_cpu_f32_to_half(tmp, f + i, half, m);
            ld_cpu_half_to_f32((float *)outp + i, tmp, half, m);
        }
    } else {
        ld_cpu_f32_to_half(outp, f, half, cnt);
    }
    ld_cpu_scratch_done(LD_SCRATCH_SUMS, f);
}

/* ================================================================ scans
 * Cumulative sums and products (the scan kernel, ld_kernels.h): each (o, i)
 * pair is a sequence of n values accumulated in float32 in order
 * (ld_ew_scan_step), so a split result is the serial one bit for bit. Split
 * as the reductions are (outer_inner_part): over outer rows where there are
 * several, else over blocks of 64 inner columns. One long row (outer and
 * inner 1) stays on one thread: each step needs the one before. Values are
 * moved SCAN_CHUNK at a time (a half dtype widened and rounded in blocks):
 * along the row where inner is 1, else across SCAN_CHUNK neighbouring
 * columns whose running values advance together, a row of x at a time. */
#define SCAN_CHUNK 64
typedef struct {
    ld_scan_op op; void *out; ld_dtype odt; const void *x; ld_dtype xdt; int64_t outer, n, inner; int excl, rev, by_rows;
} scan_job;

static void scan_load(float *f, const void *x, ld_dtype dt, int64_t at, int64_t m) {
    if (dt == LD_F32) memcpy(f, (const float *)x + at, sizeof(float) * (size_t)m);
    else ld_cpu_half_to_f32(f, (const uint16_t *)x + at, dt, m);
}
static void scan_store(void *out, ld_dtype dt, int64_t at, const float *f, int64_t m) {
    if (dt == LD_F32) memcpy((float *)out + at, f, sizeof(float) * (size_t)m);
    else ld_cpu_f32_to_half((uint16_t *)out + at, f, dt, m);
}

static void scan_range(const scan_job *jb, int64_t o0, int64_t o1, int64_t i0, int64_t i1) {
    int64_t n = jb->n, inner = jb->inner;
    float acc[SCAN_CHUNK], v[SCAN_CHUNK];
    for (int64_t o = o0; o < o1; o++) {
        if (inner == 1) {   /* one row: blocks along it, each walked in the scan's direction */
            acc[0] = ld_ew_scan_init(jb->op);
            for (int64_t j0 = 0; j0 < n; j0 += SCAN_CHUNK) {
                int64_t m = n - j0 < SCAN_CHUNK ? n - j0 : SCAN_CHUNK, at = o * n + (jb->rev ? n - j0 - m : j0);
                scan_load(v, jb->x, jb->xdt, at, m);
                for (int64_t s = 0; s < m; s++) {
                    int64_t k = jb->rev ? m - 1 - s : s;
                    v[k] = ld_ew_scan_step(&acc[0], v[k], jb->op, jb->excl);
                }
                scan_store(jb->out, jb->odt, at, v, m);
            }
            continue;
        }
        for (int64_t c0 = i0; c0 < i1; c0 += SCAN_CHUNK) {   /* columns side by side, row after row */
            int64_t m = i1 - c0 < SCAN_CHUNK ? i1 - c0 : SCAN_CHUNK;
            for (int64_t k = 0; k < m; k++) acc[k] = ld_ew_scan_init(jb->op);
            for (int64_t s = 0; s < n; s++) {
                int64_t at = (o * n + (jb->rev ? n - 1 - s : s)) * inner + c0;
                scan_load(v, jb->x, jb->xdt, at, m);
                for (int64_t k = 0; k < m; k++) v[k] = ld_ew_scan_step(&acc[k], v[k], jb->op, jb->excl);
                scan_store(jb->out, jb->odt, at, v, m);
            }
        }
    }
}
static void scan_part(void *ctx, int p, int np) {
    const scan_job *jb = ctx;
    int64_t r[4];
    if (outer_inner_part(jb->by_rows, jb->outer, jb->inner, p, np, r)) scan_range(jb, r[0], r[1], r[2], r[3]);
}
static void cpu_scan(ld_device *d, ld_scan_op op, void *out, ld_dtype odt, const void *x, ld_dtype xdt,
                     int64_t outer, int64_t n, int64_t inner, int exclusive, int reverse) {
    (void)d;
    if (outer <= 0 || n <= 0 || inner <= 0) return;
    int by_rows = outer > 1 || inner == 1;
    scan_job jb = {op, out, odt, x, xdt, outer, n, inner, exclusive, reverse, by_rows};
    int64_t ways = by_rows ? outer : (inner + 63) / 64;   /* independent pieces */
    if (outer * n * inner < mem_par_min() || ways < 2) scan_range(&jb, 0, outer, 0, inner);
    else parallel_run(scan_part, &jb, ways < 64 ? (int)ways : 64);
}

/* OpenBLAS is opened on the first matrix product, not at start-up: loading
   it (and its thread pool) takes time that a REPL start or a script that
   never multiplies matrices should not pay. It runs single-threaded; the
   CPU device's own pool splits the work (see the thread pool above).
   LDIST_BLAS names another library exporting cblas_sgemm (a path or a
   soname) to open instead. Without one, a product is an error naming the
   library (ld_device_fault), not a result. */
typedef void (*sgemm_fn)(const enum CBLAS_ORDER, const enum CBLAS_TRANSPOSE, const enum CBLAS_TRANSPOSE,
                         const blasint, const blasint, const blasint, const float, const float *, const blasint,
                         const float *, const blasint, const float, float *, const blasint);
static sgemm_fn blas_sgemm_ptr;
static char blas_error[512];
static int small_gemm;   /* ld_cpu_gemm_small for a few rows against a large B (off: LDIST_NO_SMALL_GEMM=1) */
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;

/* OpenBLAS's DYNAMIC_ARCH picks its kernels from the processor's model
   number. A model newer than the library (Debian 12 ships 0.3.21), or one a
   hypervisor masks ("Intel(R) Xeon(R) Processor"), falls back to its
   Prescott SSE kernels: on the 16-core Xeon of the GPU machine every product
   OpenBLAS ran went at about 17 GFLOP/s a core, a fifth of the AVX-512
   kernels' rate. Unless the user names a kernel family (OPENBLAS_CORETYPE),
   ldist names it from the instruction sets the processor and the OS offer:
   the same families OpenBLAS gives the models it knows (its single-precision
   products are the same in SkylakeX, Cooperlake and SapphireRapids). */
static const char *blas_coretype_for(int avx512, int avx2_fma, int amd) {
    if (avx512) return "SkylakeX";
    if (avx2_fma) return amd ? "Zen" : "Haswell";
    return NULL;   /* older processors: OpenBLAS's own choice */
}

static char blas_note[320];

static void blas_load(void) {
    small_gemm = !getenv("LDIST_NO_SMALL_GEMM");
    setenv("OPENBLAS_NUM_THREADS", "1", 0);
    const char *user_core = getenv("OPENBLAS_CORETYPE"), *set_core = NULL;
#if defined(__x86_64__) && defined(__GNUC__)
    if (!(user_core && *user_core) && !(getenv("LDIST_BLAS") && *getenv("LDIST_BLAS"))) {
        /* the instruction sets ldist's own kernels use (ld_cpu_isa.c), so that
           LDIST_CPU_ISA=avx2 runs OpenBLAS's AVX2 kernels too */
        int isa = ld_cpu_isa();
        set_core = blas_coretype_for(isa >= LD_ISA_AVX512, isa >= LD_ISA_AVX2, __builtin_cpu_is("amd"));
        if (set_core) setenv("OPENBLAS_CORETYPE", set_core, 1);
    }
#endif
    const char *names[] = {"libopenblas.so.0", "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0",
                           "libopenblas.so", "libblas.so.3"};
    const char *chosen = getenv("LDIST_BLAS");
    size_t n_names = sizeof names / sizeof *names;
    if (chosen && *chosen) { names[0] = chosen; n_names = 1; }
    void *h = NULL;
    char first[300] = "";
    for (size_t i = 0; i < n_names && !h; i++) {
        h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (!h && !i) snprintf(first, sizeof first, "%s", dlerror());
    }
    if (!h) {
        if (n_names == 1)
            snprintf(blas_error, sizeof blas_error, "matrix products need a BLAS library: cannot open %.200s "
                     "(LDIST_BLAS): %s", names[0], first);
        else
            snprintf(blas_error, sizeof blas_error, "matrix products need OpenBLAS: cannot open %s (nor %s, %s, %s): "
                     "%s; install it (apt install libopenblas0-pthread) or name a BLAS in LDIST_BLAS",
                     names[0], names[1], names[2], names[3], first);
        return;
    }
    void (*set_threads)(int) = (void (*)(int))dlsym(h, "openblas_set_num_threads");
    if (set_threads) set_threads(1);
    /* read by OpenBLAS as it loaded: processes this one starts choose again */
    if (set_core) unsetenv("OPENBLAS_CORETYPE");
    char *(*corename)(void) = (char *(*)(void))dlsym(h, "openblas_get_corename");
    char *(*config)(void) = (char *(*)(void))dlsym(h, "openblas_get_config");
    if (corename && config)
        snprintf(blas_note, sizeof blas_note, "%.160s; %.40s kernels (%s)", config(), corename(),
                 set_core ? "named by ldist from the processor's instruction sets; OPENBLAS_CORETYPE overrides"
                 : user_core && *user_core ? "OPENBLAS_CORETYPE" : "OpenBLAS's own choice");
    else
        snprintf(blas_note, sizeof blas_note, "%.200s", chosen && *chosen ? chosen : "a BLAS library (not OpenBLAS)");
    blas_sgemm_ptr = (sgemm_fn)dlsym(h, "cblas_sgemm");
    if (!blas_sgemm_ptr)
        snprintf(blas_error, sizeof blas_error, "matrix products need cblas_sgemm, which %.200s lacks",
                 chosen && *chosen ? chosen : "OpenBLAS");
}

static sgemm_fn blas_sgemm(void) {
    pthread_once(&blas_once, blas_load);
    return blas_sgemm_ptr;
}

const char *ld_cpu_blas_describe(void) { return blas_sgemm() ? blas_note : blas_error; }
const char *ld_cpu_bf16_gemm_describe(void) { return ld_gemm_bf16_path(); }

int ld_check_gemm(const ld_device *d) {
    if (d->kind != LD_DEV_CPU || blas_sgemm()) return LD_OK;   /* other backends bring their own */
    return ld_fail(LD_EDEVICE, "%s", blas_error);
}

static void cpu_gemm_serial(ld_device *d, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha,
                     const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                     int64_t ldc) {
    if (m == 0 || n == 0) return;
    if (k == 0) {
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) c[i * ldc + j] = beta == 0 ? 0 : beta * c[i * ldc + j];
        return;
    }
    /* A few rows against a large B (a replica's share of a batch times a
       dense kernel): ld_cpu_gemm_small.c reads B where it lies instead of
       packing all of it for a few rows as OpenBLAS does on every call.
       LDIST_NO_SMALL_GEMM=1 turns it off, to compare (make bench). */
    sgemm_fn sgemm = blas_sgemm();   /* reads that setting too, once */
    if (small_gemm && !ta && !tb && alpha == 1.0f && ld_cpu_gemm_small_fits(m, n, k) &&
        ld_cpu_gemm_small(m, n, k, a, lda, b, ldb, beta, c, ldc))
        return;
    if (!sgemm) {   /* cpu_gemm has reported it (ld_device_fault) */
        for (int64_t i = 0; i < m; i++) for (int64_t j = 0; j < n; j++) c[i * ldc + j] = NAN;
        return;
    }
    sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (blasint)m, (blasint)n, (blasint)k, alpha, a, (blasint)lda, b, (blasint)ldb, beta, c,
                (blasint)ldc);
}

/* rows [r0, r1) of a softmax; rows are independent, so any split gives
   the serial result */
typedef struct { float *out; const float *x; int64_t rows, cols; int lg; } sm_job;
static void sm_rows(const sm_job *jb, int64_t r0, int64_t r1) {
    int64_t cols = jb->cols;
    int lg = jb->lg;
    const float *x = jb->x;
    float *out = jb->out;
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = x + r * cols;
        float *yr = out + r * cols;
        float m = -INFINITY;
        for (int64_t j = 0; j < cols; j++) if (xr[j] > m) m = xr[j];
        double s = 0;
        for (int64_t j = 0; j < cols; j++) s += expf(xr[j] - m);
        if (lg) {
            float ls = m + (float)log(s);
            for (int64_t j = 0; j < cols; j++) yr[j] = xr[j] - ls;
        } else {
            float inv = (float)(1.0 / s);
            for (int64_t j = 0; j < cols; j++) yr[j] = expf(xr[j] - m) * inv;
        }
    }
}
static void sm_part(void *ctx, int p, int np) {
    const sm_job *jb = ctx;
    int64_t lo, hi;
    range_of(jb->rows, p, np, &lo, &hi);
    sm_rows(jb, lo, hi);
}
static void cpu_softmax(ld_device *d, float *out, const float *x, int64_t rows, int64_t cols, int lg) {
    sm_job jb = {out, x, rows, cols, lg};
    if (rows * cols < PAR_MIN || rows < 2) sm_rows(&jb, 0, rows);
    else parallel_run(sm_part, &jb, rows < 64 ? (int)rows : 64);
}

/* ================================================================ fused cross-entropy */
static void cpu_sparse_xent(ld_device *d, float *loss, float *probs, const float *logits, const int64_t *labels,
                            int64_t n, int64_t c, float scale) {
    double total = 0;
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        const float *r = logits + i * c;
        float *p = probs + i * c;
        /* vector expf, sum in float per row (ld_cpu_simd.h) */
        float m = ldv_max_scaled(r, c, 1.0f);
        double s = ldv_exp_store(p, r, c, 1.0f, m);
        ldv_scale(p, c, (float)(1.0 / s));
        int64_t k = labels[i];
        if (k >= 0 && k < c) total += (m + log(s)) - r[k];
        else {
            /* the op checks labels on the host where kernels run inline; on a
               device that queues they may still have been being written */
            if (d && !bad++)
                ld_executor_kernel_error(d, "label %lld at position %lld of %s's share of the batch is outside [0, %lld)",
                                         (long long)k, (long long)i, d->name, (long long)c);
            total = NAN;
        }
    }
    *loss = (float)(total * scale);
}

static void cpu_sparse_xent_backward(ld_device *d, float *dl, const float *probs, const int64_t *labels,
                                     const float *g, int64_t n, int64_t c, float scale) {
    float s = g[0] * scale;
    for (int64_t i = 0; i < n; i++) {
        const float *p = probs + i * c;
        float *o = dl + i * c;
        for (int64_t j = 0; j < c; j++) o[j] = p[j] * s;
        int64_t k = labels[i];
        if (k >= 0 && k < c) o[k] -= s;
    }
}

/* ================================================================ parallel wrappers */
typedef struct {
    ld_binary_op op; ld_dtype dt; char *out; const char *a, *b; const int64_t *sa, *sb, *shape; int ndim; int64_t inner;
} bin_job;
static void bin_part(void *c, int p, int np) {
    bin_job *j = c;
    int64_t lo, hi, es = (int64_t)ld_dtype_size(j->dt);
    range_of(j->shape[0], p, np, &lo, &hi);
    if (lo >= hi) return;
    int64_t sh[LD_MAX_DIMS];
    memcpy(sh, j->shape, sizeof(int64_t) * (size_t)j->ndim);
    sh[0] = hi - lo;
    cpu_binary_serial(NULL, j->op, j->dt, j->out + lo * j->inner * es, j->a + lo * j->sa[0] * es, j->sa,
                      j->b + lo * j->sb[0] * es, j->sb, j->ndim, sh);
}
/* float32, or half operands widened to float32 (exact) block by block and the
   result rounded once */
static void cpu_binary(ld_device *d, ld_binary_op op, ld_dtype dt, void *out, const void *a, const int64_t *sa,
                       const void *b, const int64_t *sb, int ndim, const int64_t *shape) {
    int64_t total = 1;
    for (int i = 0; i < ndim; i++) total *= shape[i];
    if (ndim == 0 || total < mem_par_min() || shape[0] < 2) {
        cpu_binary_serial(d, op, dt, out, a, sa, b, sb, ndim, shape);
        return;
    }
    bin_job j = {op, dt, out, a, b, sa, sb, shape, ndim, total / shape[0]};
    parallel_run(bin_part, &j, 64);
}

/* ================================================================ select */
/* out = cond ? a : b over shape (strides 0 on broadcast axes), element by
   element, the innermost axis in one loop per element size */
#define SEL_ROW(E)                                                                                       \
    for (int64_t j = 0; j < inner; j++)                                                                \
        ((E *)out)[o + j] = ld_ew_truthy(c, cdt, oc + j * cs) ? ((const E *)a)[oa + j * as] : ((const E *)b)[ob + j * bs];
static void select_serial(ld_dtype dt, char *out, const char *c, ld_dtype cdt, const int64_t *sc, const char *a,
                          const int64_t *sa, const char *b, const int64_t *sb, int ndim, const int64_t *shape) {
    int64_t total = 1;
    for (int i = 0; i < ndim; i++) total *= shape[i];
    if (total == 0) return;
    int last = ndim - 1;
    int64_t inner = ndim ? shape[last] : 1, cs = ndim ? sc[last] : 0, as = ndim ? sa[last] : 0,
            bs = ndim ? sb[last] : 0;
    int64_t idx[LD_MAX_DIMS] = {0}, oc = 0, oa = 0, ob = 0;
    size_t es = ld_dtype_size(dt);
    for (int64_t o = 0; o < total; o += inner) {
        switch (es) {
        case 1: SEL_ROW(uint8_t) break;
        case 2: SEL_ROW(uint16_t) break;
        case 4: SEL_ROW(uint32_t) break;
        default: SEL_ROW(uint64_t) break;
        }
        for (int k = last - 1; k >= 0; k--) {
            oc += sc[k]; oa += sa[k]; ob += sb[k];
            if (++idx[k] < shape[k]) break;
            oc -= sc[k] * shape[k]; oa -= sa[k] * shape[k]; ob -= sb[k] * shape[k];
            idx[k] = 0;
        }
    }
}
#undef SEL_ROW
typedef struct {
    ld_dtype dt, cdt; char *out; const char *c, *a, *b; const int64_t *sc, *sa, *sb, *shape; int ndim; int64_t inner;
} sel_job;
static void sel_part(void *ctx, int p, int np) {
    sel_job *j = ctx;
    int64_t lo, hi, es = (int64_t)ld_dtype_size(j->dt), ces = (int64_t)ld_dtype_size(j->cdt), sh[LD_MAX_DIMS];
    range_of(j->shape[0], p, np, &lo, &hi);
    if (lo >= hi) return;
    memcpy(sh, j->shape, sizeof(int64_t) * (size_t)j->ndim);
    sh[0] = hi - lo;
    select_serial(j->dt, j->out + lo * j->inner * es, j->c + lo * j->sc[0] * ces, j->cdt, j->sc,
                  j->a + lo * j->sa[0] * es, j->sa, j->b + lo * j->sb[0] * es, j->sb, j->ndim, sh);
}
static void cpu_select(ld_device *d, ld_dtype dt, void *out, const void *cond, ld_dtype cdt, const int64_t *sc,
                       const void *a, const int64_t *sa, const void *b, const int64_t *sb, int ndim,
                       const int64_t *shape) {
    (void)d;
    int64_t total = 1;
    for (int i = 0; i < ndim; i++) total *= shape[i];
    if (ndim == 0 || total < mem_par_min() || shape[0] < 2) {
        select_serial(dt, out, cond, cdt, sc, a, sa, b, sb, ndim, shape);
        return;
    }
    sel_job j = {dt, cdt, out, cond, a, b, sc, sa, sb, shape, ndim, total / shape[0]};
    parallel_run(sel_part, &j, 64);
}

/* The unary kernels on [lo, hi): float32 in place, half storage through
   float32 blocks on the stack (widened exactly, rounded once). */
enum { UN_BLOCK = 512 };
typedef struct { ld_unary_op op; ld_dtype dt; void *y; const void *x, *dy, *yv; int64_t n; int bw; } un_job;
/* relu and its gradient on half rows, in the halves' bits (no widening):
   the float32 formulas' results rounded once, bit for bit, as
   tests/engine/test_half_rows.c checks over every pattern. relu keeps x
   where x < 0 is false (+-0, positives, NaN) and is +0 elsewhere; the
   gradient is dy where x > 0, else +0; a NaN comes out quiet (the quiet bit
   set, as the rounding sets it). With DAZ on (ldist's threads), float32's
   comparisons read a bfloat16 subnormal (a float32 one) as 0; float16's
   are float32 normals. */
static void relu_half_bits(const un_job *j, int64_t lo, int64_t hi) {
    uint16_t inf = j->dt == LD_F16 ? 0x7c00 : 0x7f80, quiet = j->dt == LD_F16 ? 0x0200 : 0x0040;
    /* magnitudes below `small` compare as 0: 1 (only zero), or bfloat16's first normal under DAZ */
    uint16_t small = j->dt == LD_BF16 && ld_cpu_daz_on() ? 0x0080 : 1;
    const uint16_t *x = (const uint16_t *)j->x + lo;
    uint16_t *y = (uint16_t *)j->y + lo;
    int64_t n = hi - lo;
    if (!j->bw) {
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = x[i], mag = h & 0x7fff;
            uint16_t r = (h & 0x8000) && mag >= small && mag <= inf ? 0 : h;   /* x < 0 */
            y[i] = mag > inf ? (uint16_t)(r | quiet) : r;
        }
        return;
    }
    const uint16_t *dy = (const uint16_t *)j->dy + lo;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h = x[i], mag = h & 0x7fff, g = dy[i];
        int pos = !(h & 0x8000) && mag >= small && mag <= inf;   /* x > 0 */
        uint16_t r = pos ? g : 0;
        y[i] = pos && (g & 0x7fff) > inf ? (uint16_t)(r | quiet) : r;
    }
}

static void un_range(const un_job *j, int64_t lo, int64_t hi) {
    if (j->op == LD_UN_RELU && ld_dtype_is_half(j->dt) && (j->x || j->yv)) {
        un_job k = *j;
        if (!k.x) k.x = k.yv;   /* the gradient from y: y > 0 exactly where x > 0 */
        relu_half_bits(&k, lo, hi);
        return;
    }
    if (j->dt == LD_F32) {
        const float *x = j->x, *dy = j->dy, *yv = j->yv;
        if (j->bw) cpu_unary_backward_serial(NULL, j->op, (float *)j->y + lo, dy + lo, x ? x + lo : NULL, yv ? yv + lo : NULL, hi - lo);
        else cpu_unary_serial(NULL, j->op, (float *)j->y + lo, x + lo, hi - lo);
        return;
    }
    float y[UN_BLOCK], x[UN_BLOCK], dy[UN_BLOCK], yv[UN_BLOCK];
    for (int64_t c = lo; c < hi; c += UN_BLOCK) {
        int64_t n = hi - c < UN_BLOCK ? hi - c : UN_BLOCK;
        if (j->x) convert_row_half(x, LD_F32, (const uint16_t *)j->x + c, j->dt, n, 1);
        if (j->bw) {
            convert_row_half(dy, LD_F32, (const uint16_t *)j->dy + c, j->dt, n, 1);
            if (j->yv) convert_row_half(yv, LD_F32, (const uint16_t *)j->yv + c, j->dt, n, 1);
            cpu_unary_backward_serial(NULL, j->op, y, dy, j->x ? x : NULL, j->yv ? yv : NULL, n);
        } else {
            cpu_unary_serial(NULL, j->op, y, x, n);
        }
        convert_row_half((uint16_t *)j->y + c, j->dt, y, LD_F32, n, 1);
    }
}
static void un_part(void *c, int p, int np) {
    un_job *j = c;
    int64_t lo, hi;
    range_of(j->n, p, np, &lo, &hi);
    if (lo < hi) un_range(j, lo, hi);
}
static void cpu_unary(ld_device *d, ld_unary_op op, ld_dtype dt, void *y, const void *x, int64_t n) {
    un_job j = {op, dt, y, x, NULL, NULL, n, 0};
    if (n < PAR_MIN) un_range(&j, 0, n);
    else parallel_run(un_part, &j, 64);
}
static void cpu_unary_backward(ld_device *d, ld_unary_op op, ld_dtype dt, void *dx, const void *dy, const void *x,
                               const void *y, int64_t n) {
    un_job j = {op, dt, dx, x, dy, y, n, 1};
    if (n < PAR_MIN) un_range(&j, 0, n);
    else parallel_run(un_part, &j, 64);
}

/* A product C = alpha op(A) op(B) + beta C, or with epi (Dense's forward:
   alpha 1, beta 0, no transposes) C = A B, then bias added and relu applied
   by whichever thread wrote each block, as soon as it has it: row block by
   row block in L1 on the unpacked path, after its BLAS call otherwise. Where
   the bias was copied into C for a product with beta 1 and relu ran as an op
   of its own, a batch of 2048 x 512 took three passes over C more. */
typedef struct {
    int ta, tb; int64_t m, n, k; float alpha; const float *a; int64_t lda; const float *b; int64_t ldb;
    float beta; float *c; int64_t ldc;
    int epi; const float *bias; int relu;
} gemm_job;

void ld_cpu_bias_relu_rows(float *c, int64_t ldc, int64_t rows, int64_t n, const float *bias, int relu) {
    for (int64_t i = 0; i < rows; i++) {
        float *r = c + i * ldc;
        if (bias && relu) for (int64_t j = 0; j < n; j++) r[j] = ld_ew_relu(r[j] + bias[j]);
        else if (bias) for (int64_t j = 0; j < n; j++) r[j] += bias[j];
        else if (relu) for (int64_t j = 0; j < n; j++) r[j] = ld_ew_relu(r[j]);
    }
}

/* bias_relu (ld_kernels.h): float32 rows through the products' epilogue;
   half rows widened RED_CHUNK values at a time, the bias (already rounded
   to dt, in float32) added, relu, each value rounded once */
typedef struct { ld_dtype dt; void *y; const void *x; const float *bias; int64_t rows, n; int relu; } bias_job;
static void bias_part(void *c, int p, int np) {
    const bias_job *j = c;
    int64_t lo, hi, n = j->n;
    ld_cpu_rows(j->rows, p, np, &lo, &hi);
    if (lo >= hi) return;
    if (j->dt == LD_F32) {
        float *y = (float *)j->y + lo * n;
        if (j->y != j->x) memcpy(y, (const float *)j->x + lo * n, sizeof(float) * (size_t)((hi - lo) * n));
        ld_cpu_bias_relu_rows(y, n, hi - lo, n, j->bias, j->relu);
        return;
    }
    float buf[RED_CHUNK];
    for (int64_t r = lo; r < hi; r++)
        for (int64_t c0 = 0; c0 < n; c0 += RED_CHUNK) {
            int64_t m = n - c0 < RED_CHUNK ? n - c0 : RED_CHUNK;
            ld_cpu_half_to_f32(buf, (const uint16_t *)j->x + r * n + c0, j->dt, m);
            ld_cpu_bias_relu_rows(buf, m, 1, m, j->bias ? j->bias + c0 : NULL, j->relu);
            ld_cpu_f32_to_half((uint16_t *)j->y + r * n + c0, buf, j->dt, m);
        }
}
static void cpu_bias_relu(ld_device *d, ld_dtype dt, void *y, const void *x, const void *bias, ld_dtype bdt,
                          int64_t rows, int64_t n, int relu) {
    if (rows <= 0 || n <= 0) return;
    float *rb = NULL;   /* a half dt: the bias rounded to it, widened */
    if (bias && ld_dtype_is_half(dt)) {
        uint16_t *h = bdt == dt ? NULL : malloc((size_t)n * sizeof(uint16_t));
        rb = (bdt == dt || h) ? malloc((size_t)n * sizeof(float)) : NULL;
        if (!rb) {
            free(h);
            ld_device_fault(d, LD_ENOMEM, "bias_relu: out of memory for the rounded bias");
            ld_cpu_nan_rows(d, y, dt, n, rows, n);
            return;
        }
        if (h) ld_cpu_f32_to_half(h, bias, dt, n);
        ld_cpu_half_to_f32(rb, h ? h : bias, dt, n);
        free(h);
    }
    bias_job j = {dt, y, x, rb ? rb : bias, rows, n, relu};
    if (rows < 2 || rows * n < mem_par_min()) bias_part(&j, 0, 1);
    else parallel_run(bias_part, &j, rows < 64 ? (int)rows : 64);
    free(rb);
}

/* The parts of a product over np threads: a grid of pm row blocks x pn
   column blocks (pm * pn = np). Each part packs (or reads) its rows of A and
   its columns of B, so the grid that minimizes a part's products plus 16x
   what it packs wins; a grid whose parts still qualify for the product
   without packing (ld_cpu_gemm_small) is preferred when the whole does. Split
   along one side only, 16 threads cut x@W1 (256x784x512) into 256x32
   slices that each packed all of x (and lost the unpacked product), and
   4 threads into 256x128 ones, 1.6x slower than 2 on the 16-core Xeon. */
static void gemm_grid(const gemm_job *j, int np, int *pm, int *pn) {
    int small = small_gemm && !j->ta && !j->tb && j->alpha == 1.0f && ld_cpu_gemm_small_fits(j->m, j->n, j->k);
    double best = 0;
    int best_small = 0;
    *pm = np; *pn = 1;
    for (int q = 1; q <= np; q++) {
        if (np % q) continue;
        int64_t lo, rows, cols;
        range_of(j->m, 0, np / q, &lo, &rows);
        range_of(j->n, 0, q, &lo, &cols);
        int ok = small && ld_cpu_gemm_small_fits(rows, cols, j->k);
        double cost = (double)rows * cols + 16.0 * (double)(rows + cols);
        if ((ok && !best_small) || (ok == best_small && (best == 0 || cost < best))) {
            best = cost; best_small = ok; *pm = np / q; *pn = q;
        }
    }
}
/* rows [r0, r1) x columns [c0, c1) of the product, on this thread */
static void gemm_block(const gemm_job *j, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    int64_t rows = r1 - r0, cols = c1 - c0;
    const float *a = j->ta ? j->a + r0 : j->a + r0 * j->lda;
    const float *b = j->tb ? j->b + c0 * j->ldb : j->b + c0;
    float *c = j->c + r0 * j->ldc + c0;
    if (!j->epi) {
        cpu_gemm_serial(NULL, j->ta, j->tb, rows, cols, j->k, j->alpha, a, j->lda, b, j->ldb, j->beta, c, j->ldc);
        return;
    }
    const float *bias = j->bias ? j->bias + c0 : NULL;
    if (small_gemm && ld_cpu_gemm_small_fits(rows, cols, j->k) &&
        ld_cpu_gemm_small_bias(rows, cols, j->k, a, j->lda, b, j->ldb, bias, j->relu, c, j->ldc))
        return;
    cpu_gemm_serial(NULL, 0, 0, rows, cols, j->k, 1.0f, a, j->lda, b, j->ldb, 0.0f, c, j->ldc);
    ld_cpu_bias_relu_rows(c, j->ldc, rows, cols, bias, j->relu);
}
static void gemm_part(void *c, int p, int np) {
    gemm_job *j = c;
    int pm, pn;
    gemm_grid(j, np, &pm, &pn);
    int64_t r0, r1, c0, c1;
    range_of(j->m, p / pn, pm, &r0, &r1);
    range_of(j->n, p % pn, pn, &c0, &c1);
    if (r0 < r1 && c0 < c1) gemm_block(j, r0, r1, c0, c1);
}
/* on this thread when small, else over the pool */
static void gemm_run(ld_device *d, const gemm_job *j) {
    int64_t m = j->m, n = j->n;
    if (m <= 0 || n <= 0) return;
    if (__builtin_expect(!blas_sgemm(), 0) && j->k) {
        ld_device_fault(d, LD_EDEVICE, "%s", blas_error);
        for (int64_t i = 0; i < m; i++) for (int64_t c = 0; c < n; c++) j->c[i * j->ldc + c] = NAN;
        return;
    }
    if ((double)m * n * j->k < 262144.0 || (m < 32 && n < 32)) gemm_block(j, 0, m, 0, n);
    else parallel_run(gemm_part, (void *)j, 64);
}
static void cpu_gemm(ld_device *d, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha,
                     const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    gemm_job j = {ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, 0, NULL, 0};
    gemm_run(d, &j);
}
/* Dense's forward (gemm_job's epi) */
static void cpu_gemm_bias(ld_device *d, int64_t m, int64_t n, int64_t k, const float *a, const float *b,
                          const float *bias, int relu, float *c) {
    gemm_job j = {0, 0, m, n, k, 1.0f, a, k < 1 ? 1 : k, b, n, 0.0f, c, n, 1, bias, relu};
    gemm_run(d, &j);
}

/* Half operands: bfloat16 on AVX512_BF16 (ld_gemm_bf16.c); otherwise (float16,
   another processor, LDIST_NO_AVX512_BF16=1) both widened to float32, which
   is exact, and the float32 product: float32 sums either way. */
static void gemm_half_f32(ld_device *d, int ta, int tb, int64_t m, int64_t n, int64_t k, ld_dtype dt,
                          const void *a, int64_t lda, const void *b, int64_t ldb, float *c, int64_t ldc) {
    if (dt == LD_BF16 && ld_gemm_bf16(ta, tb, m, n, k, a, lda, b, ldb, c, ldc)) return;
    /* the operands as stored: rows x cols with leading dimension ld */
    int64_t as[2] = {ta ? k : m, ta ? m : k}, bs[2] = {tb ? n : k, tb ? k : n};
    int64_t ast[2] = {lda, 1}, bst[2] = {ldb, 1};
    /* the thread's scratch blocks (ld_pool.h; ld_gemm_bf16 has returned: its slots are free) */
    float *fa = ld_cpu_scratch(LD_SCRATCH_PACK_A, (size_t)(as[0] * as[1] + 1) * sizeof(float));
    float *fb = fa ? ld_cpu_scratch(LD_SCRATCH_PACK_B, (size_t)(bs[0] * bs[1] + 1) * sizeof(float)) : NULL;
    if (!fa || !fb) {
        ld_cpu_scratch_done(LD_SCRATCH_PACK_A, fa);
        ld_device_fault(d, LD_ENOMEM, "gemm_half: out of memory widening the %s operands", ld_dtype_name(dt));
        ld_cpu_nan_rows(d, c, LD_F32, ldc, m, n);
        return;
    }
    cpu_copy_strided(d, fa, LD_F32, a, dt, 2, as, ast);
    cpu_copy_strided(d, fb, LD_F32, b, dt, 2, bs, bst);
    cpu_gemm(d, ta, tb, m, n, k, 1.0f, fa, as[1] < 1 ? 1 : as[1], fb, bs[1] < 1 ? 1 : bs[1], 0.0f, c, ldc);
    ld_cpu_scratch_done(LD_SCRATCH_PACK_A, fa);
    ld_cpu_scratch_done(LD_SCRATCH_PACK_B, fb);
}

void ld_cpu_nan_rows(ld_device *d, void *c, ld_dtype cdt, int64_t ldc, int64_t rows, int64_t n) {
    for (int64_t i = 0; i < rows; i++) cpu_fill(d, (char *)c + i * ldc * (int64_t)ld_dtype_size(cdt), cdt, n, NAN);
}

void ld_cpu_round_rows(ld_device *d, void *c, ld_dtype cdt, int64_t ldc, const float *f, int64_t rows, int64_t n) {
    int64_t one = 1, len = rows * n;
    if (ldc == n) { cpu_copy_strided(d, c, cdt, f, LD_F32, 1, &len, &one); return; }
    for (int64_t i = 0; i < rows; i++)
        cpu_copy_strided(d, (char *)c + i * ldc * (int64_t)ld_dtype_size(cdt), cdt, f + i * n, LD_F32, 1, &n, &one);
}

void ld_cpu_widen(ld_device *d, float *f, const void *x, ld_dtype dt, int64_t n) {
    int64_t one = 1;
    cpu_copy_strided(d, f, LD_F32, x, dt, 1, &n, &one);
}

/* A half C: the float32 sums into a scratch block, rounded once. */
static void cpu_gemm_half(ld_device *d, int ta, int tb, int64_t m, int64_t n, int64_t k, ld_dtype dt,
                          const void *a, int64_t lda, const void *b, int64_t ldb, ld_dtype cdt, void *c, int64_t ldc) {
    if (cdt == LD_F32) { gemm_half_f32(d, ta, tb, m, n, k, dt, a, lda, b, ldb, c, ldc); return; }
    if (m <= 0 || n <= 0) return;
    float *f = ld_cpu_scratch(LD_SCRATCH_SUMS, (size_t)(m * n) * sizeof(float));
    if (!f) {
        ld_device_fault(d, LD_ENOMEM, "gemm_half: out of memory for the float32 sums");
        ld_cpu_nan_rows(d, c, cdt, ldc, m, n);
        return;
    }
    gemm_half_f32(d, ta, tb, m, n, k, dt, a, lda, b, ldb, f, n);
    ld_cpu_round_rows(d, c, cdt, ldc, f, m, n);
    ld_cpu_scratch_done(LD_SCRATCH_SUMS, f);
}

/* ================================================================ optimizers
 * opt_update (ld_kernels.h): the batch's variables as one range of
 * elements, split evenly over the pool; each part runs the rule
 * (ld_optim_math.h) over its pieces of them. One wake-up of the pool per
 * batch, where a step over a model's variables took one per variable. */
/* the rule over m elements (pointers already at the first); the
   hyperparameters copied into a local, which no store through w can alias,
   so the loops vectorise */
static void opt_rule(const ld_opt_hyper *hp, float *w, float *s0, float *s1, float *s2, const float *g, int64_t m) {
    const ld_opt_hyper h = *hp;
    /* a loop per rule, the rule's call inlined in it (the switch outside the loop) */
    switch (h.rule) {
    case LD_UPD_SGD: for (int64_t i = 0; i < m; i++) ld_opt_sgd(&h, w, s0, g[i], i); break;
    case LD_UPD_ADAM: for (int64_t i = 0; i < m; i++) ld_opt_adam(&h, w, s0, s1, s2, g[i], i); break;
    case LD_UPD_RMSPROP: for (int64_t i = 0; i < m; i++) ld_opt_rmsprop(&h, w, s0, s1, s2, g[i], i); break;
    default: for (int64_t i = 0; i < m; i++) ld_opt_rule(&h, w, s0, s1, s2, g[i], i); break;
    }
}

#define OPT_TILE 512
/* elements [a, e) of item it */
static void opt_range(const ld_opt_hyper *h, const ld_opt_item *it, int64_t a, int64_t e) {
#define OPT_AT(p, i) ((p) ? (p) + (i) : NULL)
    if (it->gscale == 1.0f) {
        opt_rule(h, it->w + a, OPT_AT(it->s[0], a), OPT_AT(it->s[1], a), OPT_AT(it->s[2], a), it->g + a, e - a);
        return;
    }
    float t[OPT_TILE], sc = it->gscale;
    for (int64_t i = a; i < e; i += OPT_TILE) {
        int64_t m = e - i < OPT_TILE ? e - i : OPT_TILE;
        /* g * gscale stored first: rounded as the multiply it replaces,
           never contracted into the rule's FMAs */
        for (int64_t j = 0; j < m; j++) t[j] = it->g[i + j] * sc;
        opt_rule(h, it->w + i, OPT_AT(it->s[0], i), OPT_AT(it->s[1], i), OPT_AT(it->s[2], i), t, m);
    }
#undef OPT_AT
}

/* A batch of tensors (opt_update's, nonfinite_flags') as one range of
   elements, split over the pool (from PAR_MIN elements) in up to BATCH_PARTS
   parts: start[k] is tensor k's first element (start[0] = 0, start[n] the
   total); part p runs piece(ctx, p, k, a, z) on elements [a, z) of each
   tensor its share of the range meets. */
enum { BATCH_PARTS = 64 };
typedef void (*batch_piece_fn)(void *ctx, int p, int k, int64_t a, int64_t z);
typedef struct { const int64_t *start; int n; batch_piece_fn piece; void *ctx; } batch_job;
static void batch_part(void *c, int p, int np) {
    const batch_job *j = c;
    int64_t lo, hi;
    range_of(j->start[j->n], p, np, &lo, &hi);
    for (int k = 0; k < j->n && lo < hi; k++) {
        int64_t s = j->start[k], e = j->start[k + 1];
        if (e <= lo) continue;
        if (s >= hi) break;
        j->piece(j->ctx, p, k, (lo > s ? lo : s) - s, (hi < e ? hi : e) - s);
    }
}
static void batch_run(const int64_t *start, int n, batch_piece_fn piece, void *ctx) {
    batch_job j = {start, n, piece, ctx};
    if (start[n] < PAR_MIN) batch_part(&j, 0, 1);
    else parallel_run(batch_part, &j, BATCH_PARTS);
}

static void opt_piece(void *c, int p, int k, int64_t a, int64_t z) {
    const ld_opt_batch *b = c;
    opt_range(&b->h, &b->item[k], a, z);
}
static void cpu_opt_update(ld_device *d, ld_opt_batch b) {
    int64_t start[LD_OPT_BATCH + 1] = {0};
    b.n = b.n < 0 ? 0 : b.n > LD_OPT_BATCH ? LD_OPT_BATCH : b.n;
    for (int k = 0; k < b.n; k++) start[k + 1] = start[k] + (b.item[k].n > 0 ? b.item[k].n : 0);
    batch_run(start, b.n, opt_piece, &b);
}

/* nonfinite_flags (ld_kernels.h): split as opt_update's; each part flags
   what it found in its own row of flags, and the rows are merged after (no
   two threads write one flag) */
typedef struct {
    const ld_check_batch *b;
    unsigned char found[BATCH_PARTS][LD_OPT_BATCH];
} check_job;
static void check_piece(void *c, int p, int k, int64_t a, int64_t z) {
    check_job *j = c;
    const ld_check_item *it = &j->b->item[k];
    int64_t bad = 0;
    if (it->dt == LD_F32) {
        const float *x = it->x;
        for (int64_t i = a; i < z; i++) bad += !isfinite(x[i]);
    } else {
        for (int64_t i = a; i < z; i++) bad += !isfinite(ld_cpu_elem(it->x, it->dt, i));
    }
    if (bad) j->found[p][k] = 1;
}
static void cpu_nonfinite_flags(ld_device *d, ld_check_batch b, float *flags) {
    check_job *j = calloc(1, sizeof *j);
    if (!j) {   /* flagged: a step skipped is safer than one applied unchecked */
        ld_device_fault(d, LD_ENOMEM, "nonfinite_flags: out of memory");
        for (int k = 0; k < b.n; k++) flags[k] = 1;
        return;
    }
    int64_t start[LD_OPT_BATCH + 1] = {0};
    b.n = b.n < 0 ? 0 : b.n > LD_OPT_BATCH ? LD_OPT_BATCH : b.n;
    for (int k = 0; k < b.n; k++) start[k + 1] = start[k] + (b.item[k].n > 0 ? b.item[k].n : 0);
    j->b = &b;
    batch_run(start, b.n, check_piece, j);
    for (int p = 0; p < BATCH_PARTS; p++)
        for (int k = 0; k < b.n; k++) if (j->found[p][k]) flags[k] = 1;
    free(j);
}

/* the kernel slots from the list (ld_kernels.h): kernel <name> is cpu_<name> */
#define CPU_SLOT(name, ...) .name = cpu_##name,
const ld_backend ld_cpu_kernels = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
    .to_host = cpu_to_host,
    .from_host = cpu_from_host,
    .synchronize = cpu_sync,
    LD_KERNELS(CPU_SLOT)
};

const ld_backend *ld_cpu_backend(void) { return &ld_cpu_kernels; }
