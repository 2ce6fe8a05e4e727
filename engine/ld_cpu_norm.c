/*
 * ld_cpu_norm.c - CPU kernels of the normalization family (layer and batch
 * normalization, ld_ops_norm.c): see LD_LAYER_KERNELS in ld_kernels.h.
 *
 * Rows are split over the pool (ld_cpu_parallel) in 16-row blocks. Per-row
 * work (layer norm, the apply and dx passes) needs nothing more; per-channel
 * sums over rows (batch statistics, dgamma/dbeta) keep one double vector per
 * part, added in part order afterwards, so a result depends only on the
 * sizes and the number of parts, never on timing.
 */
#include "ld_cpu_internal.h"
#include "ld_cpu_simd.h"
#include "ld_executor.h"
#include "ld_norm_math.h"
#include "ld_half.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* parts wanted for `rows` rows of `c` elements: 1 for small work */
static int parts_for(int64_t rows, int64_t c) {
    if (rows * (c > 0 ? c : 1) < LD_CPU_PAR_MIN) return 1;
    int64_t want = (rows + 15) / 16, th = ld_cpu_threads();
    if (th < 1) th = 1;
    if (want > th) want = th;
    if (want > 64) want = 64;
    return want < 1 ? 1 : (int)want;
}

/* ================================================================ layer norm */
#define LN_PAR_MIN 262144   /* elements below which a layer norm stays on one thread */

/* Half rows (float16, bfloat16) are widened into a part's float32 buffer
   and the results computed there, then rounded once into place: the same
   float32 arithmetic as a float32 row. rows_* take nr rows from row r. */
static const float *rows_in(const void *a, ld_dtype dt, int64_t r, int64_t nr, int64_t c, float *buf) {
    if (dt == LD_F32) return (const float *)a + r * c;
    ld_cpu_half_to_f32(buf, (const uint16_t *)a + r * c, dt, nr * c);
    return buf;
}
static float *rows_out(void *a, ld_dtype dt, int64_t r, int64_t c, float *buf) {
    return dt == LD_F32 ? (float *)a + r * c : buf;
}
static void rows_done(void *a, ld_dtype dt, int64_t r, int64_t nr, int64_t c, const float *buf) {
    if (dt != LD_F32) ld_cpu_f32_to_half((uint16_t *)a + r * c, buf, dt, nr * c);
}

typedef struct {
    void *y; ld_dtype ydt;
    float *mean, *rstd;
    const void *x; ld_dtype xdt;
    const float *gamma, *beta;
    int64_t rows, c;
    float eps;
    int failed;
} ln_job;

static void ln_part(void *ctx, int p, int np) {
    ln_job *j = ctx;
    int64_t lo, hi, c = j->c;
    ld_cpu_range(j->rows, p, np, &lo, &hi);
    if (lo >= hi) return;
    int nb = (j->xdt != LD_F32) + (j->ydt != LD_F32);
    float *buf = nb ? malloc(sizeof(float) * (size_t)(nb * c)) : NULL;
    if (nb && !buf) { j->failed = 1; return; }
    float *xb = buf, *yb = j->xdt != LD_F32 ? buf + c : buf;
    for (int64_t r = lo; r < hi; r++) {
        const float *xr = rows_in(j->x, j->xdt, r, 1, c, xb);
        float *yr = rows_out(j->y, j->ydt, r, c, yb);
        /* two passes (mean, then squared deviations) in float vector lanes
           (ld_cpu_simd.h): a double sum kept these loops scalar */
        float mf = c ? ldv_sum(xr, c) / (float)c : 0.0f;
        double v = c ? (double)ldv_sqdev(xr, c, mf) / (double)c : 0.0;
        float rs = (float)(1.0 / sqrt(v + (double)j->eps));
        for (int64_t k = 0; k < c; k++) {
            float t = (xr[k] - mf) * rs;
            if (j->gamma) t *= j->gamma[k];
            if (j->beta) t += j->beta[k];
            yr[k] = t;
        }
        rows_done(j->y, j->ydt, r, 1, c, yr);
        j->mean[r] = mf;
        j->rstd[r] = rs;
    }
    free(buf);
}

void cpu_layer_norm(ld_device *d, void *y, ld_dtype ydt, float *mean, float *rstd, const void *x, ld_dtype xdt,
                    const float *gamma, const float *beta, int64_t rows, int64_t c, float eps) {
    if (rows <= 0) return;
    ln_job j = {y, ydt, mean, rstd, x, xdt, gamma, beta, rows, c, eps, 0};
    /* vectorized, a row costs a few ns per element: below LN_PAR_MIN a
       second thread's wake-up costs more than it saves */
    int want = rows * c < LN_PAR_MIN ? 1 : parts_for(rows, c);
    if (want == 1) ln_part(&j, 0, 1);
    else ld_cpu_parallel(ln_part, &j, want);
    if (j.failed) ld_device_fault(d, LD_ENOMEM, "layer_norm: out of memory");
}

typedef struct {
    void *dx;
    const void *dy, *x;
    ld_dtype ydt, xdt;
    const float *mean, *rstd, *gamma;
    int64_t rows, c;
    double *acc;        /* [want][2c]: sum dy, sum dy * xhat per part; NULL: no dgamma/dbeta */
    int nparts, failed;
} lnb_job;

static void lnb_part(void *ctx, int p, int np) {
    lnb_job *j = ctx;
    int64_t lo, hi, c = j->c;
    if (p == 0) j->nparts = np;
    ld_cpu_range(j->rows, p, np, &lo, &hi);
    double *a0 = j->acc ? j->acc + (size_t)p * 2 * (size_t)c : NULL, *a1 = a0 ? a0 + c : NULL;
    if (a0) memset(a0, 0, sizeof(double) * 2 * (size_t)c);
    if (lo >= hi) return;
    int half_x = j->xdt != LD_F32, half_dy = j->ydt != LD_F32;
    int nb = half_x * (1 + (j->dx != NULL)) + half_dy;
    float *buf = nb ? malloc(sizeof(float) * (size_t)(nb * c)) : NULL;
    if (nb && !buf) { j->failed = 1; return; }
    float *xb = buf, *dyb = buf + half_x * c, *dxb = dyb + half_dy * c;
    for (int64_t r = lo; r < hi; r++) {
        const float *xr = rows_in(j->x, j->xdt, r, 1, c, xb), *dyr = rows_in(j->dy, j->ydt, r, 1, c, dyb);
        float m = j->mean[r], rs = j->rstd[r];
        if (a0) {
            for (int64_t k = 0; k < c; k++) {
                double xh = (double)((xr[k] - m) * rs);
                a0[k] += dyr[k];
                a1[k] += dyr[k] * xh;
            }
        }
        if (j->dx) {
            float sg, sgx;
            ldv_ln_bw_sums(dyr, j->gamma, xr, c, m, rs, &sg, &sgx);
            float mg = sg / (float)c, mgx = sgx / (float)c;
            float *dxr = rows_out(j->dx, j->xdt, r, c, dxb);
            for (int64_t k = 0; k < c; k++) {
                float g = j->gamma ? dyr[k] * j->gamma[k] : dyr[k];
                float xh = (xr[k] - m) * rs;
                dxr[k] = rs * (g - mg - xh * mgx);
            }
            rows_done(j->dx, j->xdt, r, 1, c, dxr);
        }
    }
    free(buf);
}

void cpu_layer_norm_backward(ld_device *d, void *dx, float *dgamma, float *dbeta, const void *dy, ld_dtype ydt,
                             const void *x, ld_dtype xdt, const float *mean, const float *rstd, const float *gamma,
                             int64_t rows, int64_t c) {
    if (c <= 0) return;
    int want = rows > 0 && rows * c >= LN_PAR_MIN ? parts_for(rows, c) : 1;
    int wsum = dgamma || dbeta;
    double *acc = NULL;
    if (wsum && !(acc = malloc(sizeof(double) * 2 * (size_t)c * (size_t)want))) {
        ld_device_fault(d, LD_ENOMEM, "layer_norm_backward: out of memory");
        return;
    }
    lnb_job j = {dx, dy, x, ydt, xdt, mean, rstd, gamma, rows, c, acc, 1, 0};
    if (rows > 0 || acc) {
        if (want == 1) lnb_part(&j, 0, 1);
        else ld_cpu_parallel(lnb_part, &j, want);
    }
    if (j.failed) ld_device_fault(d, LD_ENOMEM, "layer_norm_backward: out of memory");
    else if (wsum) {
        for (int64_t k = 0; k < c; k++) {
            double s0 = 0, s1 = 0;
            for (int p = 0; p < j.nparts; p++) { s0 += acc[(size_t)p * 2 * c + k]; s1 += acc[(size_t)p * 2 * c + c + k]; }
            if (dbeta) dbeta[k] = (float)s0;
            if (dgamma) dgamma[k] = (float)s1;
        }
    }
    free(acc);
}

/* ================================================================ batch norm */
/* Half operands (x, dy) are widened a tile of rows at a time into a part's
   buffers (rows_in; a tile of about BN_TILE elements: a call per row cost
   more than the work on 16 channels), results rounded once into place
   (rows_done): the arithmetic is the float32 rows' own, in the same order,
   so a half tensor gives the float32 op's bits on its widened values,
   rounded once. Float32 operands are read in place, the part one tile. */
#define BN_TILE 4096

/* rows per tile: a multiple of `mult`; the whole part when nothing is half */
static int64_t bn_tile_rows(int64_t c, int half, int64_t mult, int64_t part_rows) {
    if (!half) return part_rows;
    int64_t t = BN_TILE / (c > 0 ? c : 1);
    t -= t % mult;
    if (t < mult) t = mult;
    return t < part_rows ? t : part_rows;
}

/* Per-channel sums over rows, split over row blocks:
   mode 0: a = x;  mode 1: a = (x - m_j)^2;  mode 2: a = dy, b = dy * xhat */
typedef struct {
    int mode;
    const void *x, *dy;
    ld_dtype xdt, ydt;
    const float *mean, *rstd;             /* mean: m_j (mode 1), mean (mode 2) */
    int64_t rows, c;
    double *acc;                          /* [want][2c] */
    int nparts, failed;
} bns_job;

/* rows summed NB at a time into NB independent accumulators (one chain of
   dependent double adds per row bounds the pass by the add latency on
   narrow c, 16 channels a row), folded in order at the end: another fixed
   order of the additions, so still deterministic */
#define BNS_NB 4

/* one row's contribution (xr, dyr: float32 rows) to the channel sums s0, s1 */
static inline void bns_row(const bns_job *j, const float *xr, const float *dyr, double *s0, double *s1) {
    int64_t c = j->c;
    if (j->mode == 0) {
        for (int64_t k = 0; k < c; k++) s0[k] += xr[k];
    } else if (j->mode == 1) {
        for (int64_t k = 0; k < c; k++) { double t = (double)xr[k] - j->mean[k]; s0[k] += t * t; }
    } else {
        for (int64_t k = 0; k < c; k++) {
            double xh = (double)((xr[k] - j->mean[k]) * j->rstd[k]);
            s0[k] += dyr[k];
            s1[k] += dyr[k] * xh;
        }
    }
}

static void bns_part(void *ctx, int p, int np) {
    bns_job *j = ctx;
    int64_t lo, hi, c = j->c;
    if (p == 0) j->nparts = np;
    ld_cpu_range(j->rows, p, np, &lo, &hi);
    double *a0 = j->acc + (size_t)p * 2 * (size_t)c, *a1 = a0 + c;
    memset(a0, 0, sizeof(double) * 2 * (size_t)c);
    if (lo >= hi) return;
    int hx = j->xdt != LD_F32, hd = j->mode == 2 && j->ydt != LD_F32;
    int blocked = c <= 256 && hi - lo >= 2 * BNS_NB;
    int64_t tr = bn_tile_rows(c, hx || hd, blocked ? BNS_NB : 1, hi - lo);
    float *hb = hx || hd ? malloc(sizeof(float) * (size_t)((hx + hd) * tr) * (size_t)c) : NULL;
    if ((hx || hd) && !hb) { j->failed = 1; return; }
    float *xb = hb, *dyb = hb ? hb + (size_t)(hx * tr) * (size_t)c : NULL;
    double *b = blocked ? malloc(sizeof(double) * 2 * BNS_NB * (size_t)c) : NULL, *b1 = b ? b + BNS_NB * c : NULL;
    if (b) memset(b, 0, sizeof(double) * 2 * BNS_NB * (size_t)c);
    /* tiles of tr rows, a multiple of BNS_NB: rows left over from the
       blocks are only the last tile's, added after the blocks are folded */
    for (int64_t t0 = lo; t0 < hi; t0 += tr) {
        int64_t nr = hi - t0 < tr ? hi - t0 : tr, r = 0;
        const float *xt = rows_in(j->x, j->xdt, t0, nr, c, xb);
        const float *dyt = j->mode == 2 ? rows_in(j->dy, j->ydt, t0, nr, c, dyb) : NULL;
        if (b)
            for (; r + BNS_NB <= nr; r += BNS_NB)
                for (int u = 0; u < BNS_NB; u++)
                    bns_row(j, xt + (r + u) * c, dyt ? dyt + (r + u) * c : NULL, b + u * c, b1 + u * c);
        if (b && t0 + nr == hi)
            for (int u = 0; u < BNS_NB; u++)
                for (int64_t k = 0; k < c; k++) { a0[k] += b[u * c + k]; a1[k] += b1[u * c + k]; }
        for (; r < nr; r++) bns_row(j, xt + r * c, dyt ? dyt + r * c : NULL, a0, a1);
    }
    free(b);
    free(hb);
}

/* runs the sums; out0[k] / out1[k] (either NULL) get the totals; 0 when out of memory */
static int bn_sums(bns_job *j, float *out0, float *out1) {
    int64_t c = j->c;
    int want = j->rows > 0 ? parts_for(j->rows, c) : 1;
    j->acc = malloc(sizeof(double) * 2 * (size_t)c * (size_t)want);
    if (!j->acc && want > 1) { want = 1; j->acc = malloc(sizeof(double) * 2 * (size_t)c); }
    if (!j->acc) return 0;
    j->nparts = 1;
    j->failed = 0;
    if (want == 1) bns_part(j, 0, 1);
    else ld_cpu_parallel(bns_part, j, want);
    for (int64_t k = 0; k < c && !j->failed; k++) {
        double s0 = 0, s1 = 0;
        for (int p = 0; p < j->nparts; p++) { s0 += j->acc[(size_t)p * 2 * c + k]; s1 += j->acc[(size_t)p * 2 * c + c + k]; }
        if (out0) out0[k] = (float)s0;
        if (out1) out1[k] = (float)s1;
    }
    free(j->acc);
    j->acc = NULL;
    return !j->failed;
}

void cpu_bn_stats(ld_device *d, float *out, const float *sums, const void *x, ld_dtype xdt, int64_t rows, int64_t c) {
    if (c <= 0) return;
    if (!sums) {
        for (int64_t k = 0; k < c; k++) out[k] = (float)rows;
        bns_job j = {0, x, NULL, xdt, LD_F32, NULL, NULL, rows, c, NULL, 1, 0};
        if (!bn_sums(&j, out + c, NULL))
            ld_device_fault(d, LD_ENOMEM, "batch_norm: out of memory for the statistics of %lld channels", (long long)c);
        return;
    }
    float *m = malloc(sizeof(float) * (size_t)c);
    if (!m) { ld_device_fault(d, LD_ENOMEM, "batch_norm: out of memory"); return; }
    for (int64_t k = 0; k < c; k++) m[k] = ld_bn_center(sums, c, k);
    bns_job j = {1, x, NULL, xdt, LD_F32, m, NULL, rows, c, NULL, 1, 0};
    if (!bn_sums(&j, out, NULL))
        ld_device_fault(d, LD_ENOMEM, "batch_norm: out of memory for the statistics of %lld channels", (long long)c);
    free(m);
}

void cpu_bn_finalize(ld_device *d, float *mean, float *rstd, float *mm, float *mv, const float *sums, const float *m2,
                     int64_t c, float momentum, float eps, int training) {
    for (int64_t k = 0; k < c; k++) {
        ld_bn_finalize_channel(mean, rstd, mm, mv, sums, m2, c, k, momentum, eps, training);
    }
}

/* the apply pass (y = ...) and the dx pass (y = dx, in xdt) */
typedef struct {
    void *y;
    ld_dtype ydt;
    const void *x, *dy;
    ld_dtype xdt, dydt;
    const float *mean, *rstd, *gamma, *beta, *red, *sums;
    int64_t rows, c;
    int training, failed;
} bna_job;

/* a part's tile buffers: tr rows for each of y, x, dy that is half; *tr
   the tile's rows; the buffer to free (NULL: none needed, or out of memory
   and j->failed set) */
static float *bna_buffers(bna_job *j, int64_t part_rows, int64_t *tr, float **yb, float **xb, float **dyb) {
    int64_t c = j->c;
    int hy = j->ydt != LD_F32, hx = j->xdt != LD_F32, hd = j->dy && j->dydt != LD_F32;
    *yb = *xb = *dyb = NULL;
    *tr = bn_tile_rows(c, hy || hx || hd, 1, part_rows);
    if (!hy && !hx && !hd) return NULL;
    size_t n = (size_t)*tr * (size_t)c;
    float *b = malloc(sizeof(float) * (size_t)(hy + hx + hd) * n);
    if (!b) { j->failed = 1; return NULL; }
    float *q = b;
    if (hy) { *yb = q; q += n; }
    if (hx) { *xb = q; q += n; }
    if (hd) *dyb = q;
    return b;
}

/* Per-channel vectors repeated over a block of rows (a row is c values,
   often 16-64 in a convolution's features: one or two vectors, where a loop
   per row spends more on its set-up than on its work), so that the
   elementwise passes run one flat loop per block. */
#define BN_REP 512   /* values a block holds, at least one row */
static int64_t bn_rep_rows(int64_t c) { return c >= BN_REP ? 1 : BN_REP / c; }
/* out[0 .. rows*c) = v[i % c] (v may be out's first row); NULL when v is */
static float *bn_rep(float *out, const float *v, int64_t c, int64_t rows) {
    if (!v) return NULL;
    for (int64_t r = out == v ? 1 : 0; r < rows; r++) memcpy(out + r * c, v, sizeof(float) * (size_t)c);
    return out;
}

/* rows [lo, hi) of c values in blocks of rr rows (bn_rep), one flat loop
   each: BODY(i, k) for element i (from lo's) and k, its index in the block
   (channel k % c) */
#define BN_BLOCKS(lo, hi, rr, c, BODY)                                       \
    for (int64_t r0_ = (lo); r0_ < (hi); r0_ += (rr)) {                      \
        int64_t n_ = ((hi) - r0_ < (rr) ? (hi) - r0_ : (rr)) * (c);          \
        for (int64_t k_ = 0; k_ < n_; k_++) BODY(r0_ * (c) + k_, k_)         \
    }

/* the apply pass at element i, k its index in the block (rep's factors):
   y = (x - mean) * rstd (* gamma) (+ beta); X(i) reads element i of x as a
   float, Y(i, v) stores v as element i of y. One body, instantiated for
   float32 (and a tile's float32 buffers) and for bfloat16 read and rounded
   in place, the conversions in the loop (through buffers they cost as much
   as the arithmetic). */
#define BNA_AT(i, k, mean, rstd, gamma, beta, X, Y)                          \
    {                                                                        \
        float t = (X(i) - (mean)[k]) * (rstd)[k];                            \
        if (gamma) t *= (gamma)[k];                                          \
        if (beta) t += (beta)[k];                                            \
        Y(i, t);                                                             \
    }

static void bna_part(void *ctx, int p, int np) {
    bna_job *j = ctx;
    int64_t lo, hi, c = j->c, tr;
    ld_cpu_range(j->rows, p, np, &lo, &hi);
    if (lo >= hi) return;
    int64_t rr = bn_rep_rows(c), rn = rr * c;
    float *rep = malloc(sizeof(float) * 4 * (size_t)rn);
    if (!rep) { j->failed = 1; return; }
    const float *m = bn_rep(rep, j->mean, c, rr), *s = bn_rep(rep + rn, j->rstd, c, rr);
    const float *g = bn_rep(rep + 2 * rn, j->gamma, c, rr), *b = bn_rep(rep + 3 * rn, j->beta, c, rr);
    if (j->xdt == LD_BF16 && j->ydt == LD_BF16) {
        const uint16_t *xh = j->x;
        uint16_t *yh = j->y;
#define BF_X(i) ld_bf16_to_f32(xh[i])
#define BF_Y(i, v) (yh[i] = ld_f32_to_bf16(v))
#define BODY(i, k) BNA_AT(i, k, m, s, g, b, BF_X, BF_Y)
        BN_BLOCKS(lo, hi, rr, c, BODY)
#undef BODY
#undef BF_X
#undef BF_Y
        free(rep);
        return;
    }
    float *yb, *xb, *dyb, *buf = bna_buffers(j, hi - lo, &tr, &yb, &xb, &dyb);
    if (j->failed) { free(rep); return; }
    for (int64_t t0 = lo; t0 < hi; t0 += tr) {
        int64_t nr = hi - t0 < tr ? hi - t0 : tr;
        const float *xt = rows_in(j->x, j->xdt, t0, nr, c, xb);
        float *yt = rows_out(j->y, j->ydt, t0, c, yb);
#define F_X(i) xt[i]
#define F_Y(i, v) (yt[i] = (v))
#define BODY(i, k) BNA_AT(i, k, m, s, g, b, F_X, F_Y)
        BN_BLOCKS(0, nr, rr, c, BODY)
#undef BODY
#undef F_X
#undef F_Y
        rows_done(j->y, j->ydt, t0, nr, c, yt);
    }
    free(buf);
    free(rep);
}

void cpu_bn_apply(ld_device *d, void *y, ld_dtype ydt, const void *x, ld_dtype xdt, const float *mean,
                  const float *rstd, const float *gamma, const float *beta, int64_t rows, int64_t c) {
    if (rows <= 0 || c <= 0) return;
    bna_job j = {y, ydt, x, NULL, xdt, LD_F32, mean, rstd, gamma, beta, NULL, NULL, rows, c, 0, 0};
    int want = parts_for(rows, c);
    if (want == 1) bna_part(&j, 0, 1);
    else ld_cpu_parallel(bna_part, &j, want);
    if (j.failed) ld_device_fault(d, LD_ENOMEM, "batch_norm: out of memory");
}

void cpu_bn_backward_reduce(ld_device *d, float *red, const void *dy, ld_dtype ydt, const void *x, ld_dtype xdt,
                            const float *mean, const float *rstd, int64_t rows, int64_t c) {
    if (c <= 0) return;
    bns_job j = {2, x, dy, xdt, ydt, mean, rstd, rows, c, NULL, 1, 0};
    if (!bn_sums(&j, red, red + c))
        ld_device_fault(d, LD_ENOMEM, "batch_norm gradient: out of memory for %lld channels", (long long)c);
}

/* the dx pass at element i, k its index in the block (as BNA_AT):
   training, dx = fs * (dy - fa - xhat * fb) with xhat = (x - mean) * rstd;
   else dx = dy * fs. X, D read x and dy, Y stores dx. */
#define BNB_AT(i, k, training, mean, rstd, fs, fa, fb, X, D, Y)               \
    {                                                                         \
        float v;                                                              \
        if (training) {                                                       \
            float xhat_ = (X(i) - (mean)[k]) * (rstd)[k];                     \
            v = (fs)[k] * (D(i) - (fa)[k] - xhat_ * (fb)[k]);                 \
        } else {                                                              \
            v = D(i) * (fs)[k];                                               \
        }                                                                     \
        Y(i, v);                                                              \
    }

static void bnb_part(void *ctx, int p, int np) {
    bna_job *j = ctx;
    int64_t lo, hi, c = j->c, tr;
    ld_cpu_range(j->rows, p, np, &lo, &hi);
    if (lo >= hi) return;
    /* the per-channel factors once (a division per element otherwise), over
       a block of rows (bn_rep): fs = rstd (* gamma), fa = red / n, fb =
       red[c..] / n, and mean and rstd */
    int64_t rr = bn_rep_rows(c), rn = rr * c;
    float *rep = malloc(sizeof(float) * 5 * (size_t)rn);
    if (!rep) { j->failed = 1; return; }
    float *fs = rep, *fa = rep + rn, *fb = rep + 2 * rn;
    for (int64_t k = 0; k < c; k++) {
        float n = j->training && j->sums[k] > 0 ? j->sums[k] : 1.0f;
        float sk = j->rstd[k];
        if (j->gamma) sk *= j->gamma[k];
        fs[k] = sk;
        fa[k] = j->training ? j->red[k] / n : 0;
        fb[k] = j->training ? j->red[c + k] / n : 0;
    }
    for (int q = 0; q < 3; q++) bn_rep(rep + q * rn, rep + q * rn, c, rr);
    const float *m = bn_rep(rep + 3 * rn, j->mean, c, rr), *s = bn_rep(rep + 4 * rn, j->rstd, c, rr);
    int training = j->training;
    if (j->xdt == LD_BF16 && j->dydt == LD_BF16) {   /* dx in xdt too */
        const uint16_t *xh = j->x, *dh = j->dy;
        uint16_t *yh = j->y;
#define BF_X(i) ld_bf16_to_f32(xh[i])
#define BF_D(i) ld_bf16_to_f32(dh[i])
#define BF_Y(i, v) (yh[i] = ld_f32_to_bf16(v))
#define BODY(i, k) BNB_AT(i, k, training, m, s, fs, fa, fb, BF_X, BF_D, BF_Y)
        BN_BLOCKS(lo, hi, rr, c, BODY)
#undef BODY
#undef BF_X
#undef BF_D
#undef BF_Y
        free(rep);
        return;
    }
    float *dxb, *xb, *dyb, *buf = bna_buffers(j, hi - lo, &tr, &dxb, &xb, &dyb);
    if (j->failed) { free(rep); return; }
    for (int64_t t0 = lo; t0 < hi; t0 += tr) {
        int64_t nr = hi - t0 < tr ? hi - t0 : tr;
        const float *xt = training ? rows_in(j->x, j->xdt, t0, nr, c, xb) : NULL;
        const float *dyt = rows_in(j->dy, j->dydt, t0, nr, c, dyb);
        float *dxt = rows_out(j->y, j->ydt, t0, c, dxb);
#define F_X(i) xt[i]
#define F_D(i) dyt[i]
#define F_Y(i, v) (dxt[i] = (v))
#define BODY(i, k) BNB_AT(i, k, training, m, s, fs, fa, fb, F_X, F_D, F_Y)
        BN_BLOCKS(0, nr, rr, c, BODY)
#undef BODY
#undef F_X
#undef F_D
#undef F_Y
        rows_done(j->y, j->ydt, t0, nr, c, dxt);
    }
    free(buf);
    free(rep);
}

void cpu_bn_backward(ld_device *d, void *dx, const void *dy, ld_dtype ydt, const void *x, ld_dtype xdt,
                     const float *mean, const float *rstd, const float *gamma, const float *red, const float *sums,
                     int64_t rows, int64_t c, int training) {
    if (rows <= 0 || c <= 0) return;
    bna_job j = {dx, xdt, x, dy, xdt, ydt, mean, rstd, gamma, NULL, red, sums, rows, c, training, 0};
    int want = parts_for(rows, c);
    if (want == 1) bnb_part(&j, 0, 1);
    else ld_cpu_parallel(bnb_part, &j, want);
    if (j.failed) ld_device_fault(d, LD_ENOMEM, "batch_norm gradient: out of memory");
}
