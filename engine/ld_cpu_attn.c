/*
 * ld_cpu_attn.c - the CPU kernels of the attention family (ld_kernels.h,
 * LD_LAYER_KERNELS): strided batched matrix products and the fused
 * (causally) masked softmax with its backward.
 *
 * gemm_batched: with at least as many matrices as pool threads, or matrices
 * too small for cpu_gemm to split, the batches are split over the pool and
 * each part runs the CPU gemm kernel on its matrices; a gemm called from a
 * part runs single-threaded (the pool does not nest: ld_cpu_internal.h),
 * which is the single-threaded sgemm per matrix that beats one threaded
 * call. Otherwise (a few large matrices) the matrices go one after the
 * other, each split over the pool by the gemm kernel itself.
 */
#include "ld_attn_math.h"
#include "ld_cpu_internal.h"
#include "ld_cpu_simd.h"
#include "ld_executor.h"
#include "ld_gemm_bf16.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ================================================================ gemm_batched */
typedef struct {
    ld_device *d;
    int ta, tb;
    int64_t m, n, k;
    float alpha, beta;
    const float *a, *b;
    float *c;
    int64_t lda, ldb, sa, sb, sc, batch;
} bgemm_job;

static void bgemm_part(void *ctx, int p, int np) {
    bgemm_job *j = ctx;
    /* an even split of whole matrices (ld_cpu_range rounds to 16) */
    int64_t lo = j->batch * p / np, hi = j->batch * (p + 1) / np;
    for (int64_t i = lo; i < hi; i++)
        ld_cpu_kernels.gemm(j->d, j->ta, j->tb, j->m, j->n, j->k, j->alpha, j->a + i * j->sa, j->lda,
                            j->b + i * j->sb, j->ldb, j->beta, j->c + i * j->sc, j->n < 1 ? 1 : j->n);
}

void cpu_gemm_batched(ld_device *d, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                      int64_t lda, int64_t sa, const float *b, int64_t ldb, int64_t sb, float beta, float *c,
                      int64_t sc, int64_t batch) {
    if (batch <= 0 || m <= 0 || n <= 0) return;
    bgemm_job j = {d, ta, tb, m, n, k, alpha, beta, a, b, c, lda, ldb, sa, sb, sc, batch};
    int threads = ld_cpu_threads();
    double flops = (double)m * n * k;
    if (batch > 1 && (batch >= threads || flops < 262144.0)) {
        ld_cpu_parallel(bgemm_part, &j, batch < 1024 ? (int)batch : 1024);
    } else {
        bgemm_part(&j, 0, 1);
    }
}

/* ================================================================ gemm_batched_half
 * bfloat16 on AVX512_BF16: one ld_gemm_bf16 per matrix, the matrices split
 * over the pool as above (float32 sums, as the GPU's tensor cores). Else
 * (float16, or no AVX512_BF16) both operands are widened to float32, which
 * is exact, and go through cpu_gemm_batched. A half C gets the float32
 * sums of a scratch block, rounded once. */
typedef struct {
    int ta, tb;
    int64_t m, n, k;
    const uint16_t *a, *b;
    float *c;
    int64_t lda, ldb, sa, sb, sc, batch;
    int failed;   /* a matrix ld_gemm_bf16 could not do (out of memory): widen them all */
} hbgemm_job;

static void hbgemm_part(void *ctx, int p, int np) {
    hbgemm_job *j = ctx;
    int64_t lo = j->batch * p / np, hi = j->batch * (p + 1) / np;
    for (int64_t i = lo; i < hi; i++)
        if (!ld_gemm_bf16(j->ta, j->tb, j->m, j->n, j->k, j->a + i * j->sa, j->lda, j->b + i * j->sb, j->ldb,
                          j->c + i * j->sc, j->n))
            __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
}

/* the float32 C_i (i < batch, one every sc elements); 0, or out of memory (faulted) */
static int hbgemm_f32(ld_device *d, int ta, int tb, int64_t m, int64_t n, int64_t k, ld_dtype dt, const void *a,
                      int64_t lda, int64_t sa, const void *b, int64_t ldb, int64_t sb, float *c, int64_t sc,
                      int64_t batch) {
    if (dt == LD_BF16 && !strcmp(ld_gemm_bf16_path(), "avx512_bf16")) {
        hbgemm_job j = {ta, tb, m, n, k, a, b, c, lda, ldb, sa, sb, sc, batch, 0};
        if (batch > 1 && (batch >= ld_cpu_threads() || (double)m * n * k < 262144.0))
            ld_cpu_parallel(hbgemm_part, &j, batch < 1024 ? (int)batch : 1024);
        else
            hbgemm_part(&j, 0, 1);
        if (!j.failed) return 0;
    }
    /* the operands as stored: batch matrices of rows x cols, leading dimension ld */
    int64_t as[3] = {batch, ta ? k : m, ta ? m : k}, bs[3] = {batch, tb ? n : k, tb ? k : n};
    int64_t ast[3] = {sa, lda, 1}, bst[3] = {sb, ldb, 1};
    float *fa = malloc((size_t)(as[0] * as[1] * as[2] + 1) * sizeof(float));   /* + 1: never malloc(0) */
    float *fb = malloc((size_t)(bs[0] * bs[1] * bs[2] + 1) * sizeof(float));
    if (!fa || !fb) {
        free(fa); free(fb);
        ld_device_fault(d, LD_ENOMEM, "gemm_batched_half: out of memory widening the %s operands", ld_dtype_name(dt));
        return 1;
    }
    ld_cpu_kernels.copy_strided(d, fa, LD_F32, a, dt, 3, as, ast);
    ld_cpu_kernels.copy_strided(d, fb, LD_F32, b, dt, 3, bs, bst);
    cpu_gemm_batched(d, ta, tb, m, n, k, 1.0f, fa, as[2] < 1 ? 1 : as[2], as[1] * as[2], fb, bs[2] < 1 ? 1 : bs[2],
                     bs[1] * bs[2], 0.0f, c, sc, batch);
    free(fa);
    free(fb);
    return 0;
}

void cpu_gemm_batched_half(ld_device *d, int ta, int tb, int64_t m, int64_t n, int64_t k, ld_dtype dt, const void *a,
                           int64_t lda, int64_t sa, const void *b, int64_t ldb, int64_t sb, ld_dtype cdt, void *c,
                           int64_t sc, int64_t batch) {
    if (batch <= 0 || m <= 0 || n <= 0) return;
    size_t csz = ld_dtype_size(cdt);
    /* a half C: float32 sums into a contiguous scratch block first */
    float *f = cdt == LD_F32 ? c : malloc((size_t)(batch * m * n) * sizeof(float));
    int64_t fs = cdt == LD_F32 ? sc : m * n;
    if (!f) ld_device_fault(d, LD_ENOMEM, "gemm_batched_half: out of memory for the float32 sums");
    if (!f || hbgemm_f32(d, ta, tb, m, n, k, dt, a, lda, sa, b, ldb, sb, f, fs, batch)) {
        for (int64_t i = 0; i < batch; i++) ld_cpu_nan_rows(d, (char *)c + i * sc * (int64_t)csz, cdt, n, m, n);
    } else if (cdt != LD_F32) {
        if (sc == m * n) ld_cpu_round_rows(d, c, cdt, n, f, batch * m, n);
        else
            for (int64_t i = 0; i < batch; i++) ld_cpu_round_rows(d, (char *)c + i * sc * (int64_t)csz, cdt, n, f + i * m * n, m, n);
    }
    if (f != c) free(f);
}

/* ================================================================ masked softmax */
typedef struct {
    float *y;
    const float *x, *dy;
    int64_t rows, t, s;
    float scale;
    int causal;
    int64_t offset;
    void *h;          /* forward: y rounded to hdt too (NULL: no); backward: dx in hdt (y unused) */
    ld_dtype hdt;
    ld_device *d;
} msm_job;

/* row r's columns [0, kept) take part; the rest are masked out */
static int64_t kept(const msm_job *j, int64_t r) { return ld_attn_kept(r % j->t, j->s, j->causal, j->offset); }

static void msm_rows(const msm_job *j, int64_t lo, int64_t hi) {
    int64_t s = j->s;
    for (int64_t r = lo; r < hi; r++) {
        const float *xr = j->x + r * s;
        float *yr = j->y + r * s;
        int64_t lim = kept(j, r);
        if (lim == 0) {   /* masked whole: uniform, as Keras' -1e9 adder gives */
            float u = 1.0f / (float)s;
            for (int64_t c = 0; c < s; c++) yr[c] = u;
            continue;
        }
        float sc = j->scale, m = ldv_max_scaled(xr, lim, sc);
        float sum = ldv_exp_store(yr, xr, lim, sc, m);
        ldv_scale(yr, lim, 1.0f / sum);
        if (lim < s) memset(yr + lim, 0, sizeof(float) * (size_t)(s - lim));
    }
    if (j->h) ld_cpu_f32_to_half((uint16_t *)j->h + lo * s, j->y + lo * s, j->hdt, (hi - lo) * s);
}

/* a half dx: each row into buf (s floats), then rounded into place */
static void msm_bw_rows(const msm_job *j, int64_t lo, int64_t hi, float *buf) {
    int64_t s = j->s;
    for (int64_t r = lo; r < hi; r++) {
        const float *yr = j->x + r * s, *gr = j->dy + r * s;
        float *dr = buf ? buf : j->y + r * s;
        int64_t lim = kept(j, r);
        if (lim == 0) {   /* the weights do not depend on x there */
            memset(dr, 0, sizeof(float) * (size_t)s);
        } else {
            /* masked columns have weight 0, hence gradient 0 */
            ldv_softmax_grad(dr, yr, gr, lim, j->scale, ldv_dot(gr, yr, lim));
            if (lim < s) memset(dr + lim, 0, sizeof(float) * (size_t)(s - lim));
        }
        if (buf) ld_cpu_f32_to_half((uint16_t *)j->h + r * s, buf, j->hdt, s);
    }
}

static void msm_part(void *ctx, int p, int np) {
    msm_job *j = ctx;
    int64_t lo = j->rows * p / np, hi = j->rows * (p + 1) / np;
    if (lo >= hi) return;
    if (!j->dy) { msm_rows(j, lo, hi); return; }
    float *buf = j->h ? malloc(sizeof(float) * (size_t)j->s) : NULL;
    if (j->h && !buf) {   /* NaN rows: a result that could not be computed */
        ld_device_fault(j->d, LD_ENOMEM, "masked_softmax_backward: out of memory for a row");
        ld_cpu_nan_rows(j->d, (uint16_t *)j->h + lo * j->s, j->hdt, j->s, hi - lo, j->s);
        return;
    }
    msm_bw_rows(j, lo, hi, buf);
    free(buf);
}

static void msm_run(msm_job *j) {
    int64_t total = j->rows * j->s;
    if (total < LD_CPU_PAR_MIN || j->rows < 2) { msm_part(j, 0, 1); return; }
    ld_cpu_parallel(msm_part, j, j->rows < 64 ? (int)j->rows : 64);
}

void cpu_masked_softmax(ld_device *d, float *y, void *yh, ld_dtype hdt, const float *x, int64_t batch, int64_t t,
                        int64_t s, float scale, int causal, int64_t offset) {
    if (batch <= 0 || t <= 0 || s <= 0) return;
    msm_job j = {y, x, NULL, batch * t, t, s, scale, causal, offset, yh, hdt, d};
    msm_run(&j);
}

void cpu_masked_softmax_backward(ld_device *d, void *dx, ld_dtype ddt, const float *y, const float *dy, int64_t batch,
                                 int64_t t, int64_t s, float scale, int causal, int64_t offset) {
    if (batch <= 0 || t <= 0 || s <= 0) return;
    /* x holds y, y holds a float32 dx, h a half one (the fields are reused) */
    int half = ld_dtype_is_half(ddt);
    msm_job j = {half ? NULL : dx, y, dy, batch * t, t, s, scale, causal, offset, half ? dx : NULL, ddt, d};
    msm_run(&j);
}

/* ================================================================ flash_attention
 * The fused attention on the CPU, row by row: a query's scaled logits go
 * into a row buffer of s floats (one per pool part), then its softmax and
 * the weighted sum of the value rows; nothing of size t x s is kept. The
 * backward recomputes each weight from lse: p = exp(scale q.k - lse),
 *     gv_j += p go_i,  ds = scale p (go_i.v_j - go_i.o_i),
 *     gq_i += ds k_j,  gk_j += ds q_i,
 * and is split over the batch (gk and gv of one batch item gather every
 * query of it). The unfused path (gemm_batched + masked_softmax) stays the
 * CPU's default: BLAS products beat these loops there. */
typedef struct {
    ld_device *d;
    float *o, *lse, *gq, *gk, *gv;
    const float *q, *k, *v, *go, *oi;
    int64_t batch, t, s, e;
    float scale;
    int causal;
    int64_t offset;
} fa_job;

/* query i sees keys [0, fa_kept) */
static int64_t fa_kept(const fa_job *j, int64_t i) { return ld_attn_kept(i, j->s, j->causal, j->offset); }

static void fa_axpy(float *y, float a, const float *x, int64_t n) {
    for (int64_t c = 0; c < n; c++) y[c] += a * x[c];
}

static void fa_fwd_part(void *ctx, int p, int np) {
    fa_job *j = ctx;
    int64_t rows = j->batch * j->t, lo = rows * p / np, hi = rows * (p + 1) / np, e = j->e, s = j->s;
    float *buf = malloc(sizeof(float) * (size_t)(s ? s : 1));
    if (!buf) { ld_device_fault(j->d, LD_ENOMEM, "flash_attention: out of memory for a row of %lld logits", (long long)s); return; }
    for (int64_t r = lo; r < hi; r++) {
        int64_t b = r / j->t, i = r % j->t, lim = fa_kept(j, i);
        const float *qr = j->q + r * e, *kb = j->k + b * s * e, *vb = j->v + b * s * e;
        float *orow = j->o + r * e;
        memset(orow, 0, sizeof(float) * (size_t)e);
        if (lim == 0) {   /* masked whole: uniform weights, as Keras' -1e9 adder gives */
            for (int64_t c = 0; c < s; c++) fa_axpy(orow, 1.0f / (float)s, vb + c * e, e);
            j->lse[r] = INFINITY;
            continue;
        }
        for (int64_t c = 0; c < lim; c++) buf[c] = ldv_dot(qr, kb + c * e, e);
        float m = ldv_max_scaled(buf, lim, j->scale);
        float sum = ldv_exp_store(buf, buf, lim, j->scale, m);
        for (int64_t c = 0; c < lim; c++) fa_axpy(orow, buf[c], vb + c * e, e);
        ldv_scale(orow, e, 1.0f / sum);
        j->lse[r] = m + logf(sum);
    }
    free(buf);
}

static void fa_bw_part(void *ctx, int p, int np) {
    fa_job *j = ctx;
    int64_t lo = j->batch * p / np, hi = j->batch * (p + 1) / np, e = j->e, s = j->s, t = j->t;
    float *gq_tmp = j->gq ? NULL : malloc(sizeof(float) * (size_t)(e ? e : 1));
    if (!j->gq && !gq_tmp) { ld_device_fault(j->d, LD_ENOMEM, "flash_attention_backward: out of memory"); return; }
    for (int64_t b = lo; b < hi; b++) {
        const float *kb = j->k + b * s * e, *vb = j->v + b * s * e;
        float *gkb = j->gk ? j->gk + b * s * e : NULL, *gvb = j->gv ? j->gv + b * s * e : NULL;
        if (gkb) memset(gkb, 0, sizeof(float) * (size_t)(s * e));
        if (gvb) memset(gvb, 0, sizeof(float) * (size_t)(s * e));
        for (int64_t i = 0; i < t; i++) {
            int64_t r = b * t + i, lim = fa_kept(j, i);
            const float *qr = j->q + r * e, *gor = j->go + r * e;
            float *gqr = j->gq ? j->gq + r * e : gq_tmp;
            memset(gqr, 0, sizeof(float) * (size_t)e);
            if (lim == 0) {   /* uniform weights: no gradient to q or k */
                if (gvb) for (int64_t c = 0; c < s; c++) fa_axpy(gvb + c * e, 1.0f / (float)s, gor, e);
                continue;
            }
            float di = ldv_dot(gor, j->oi + r * e, e), l = j->lse[r];
            for (int64_t c = 0; c < lim; c++) {
                float pr = expf(j->scale * ldv_dot(qr, kb + c * e, e) - l);
                if (gvb) fa_axpy(gvb + c * e, pr, gor, e);
                float ds = j->scale * pr * (ldv_dot(gor, vb + c * e, e) - di);
                fa_axpy(gqr, ds, kb + c * e, e);
                if (gkb) fa_axpy(gkb + c * e, ds, qr, e);
            }
        }
    }
    free(gq_tmp);
}

static void fa_forward(fa_job *j) {
    int64_t rows = j->batch * j->t;
    if (rows * j->s * j->e < LD_CPU_PAR_MIN || rows < 2) fa_fwd_part(j, 0, 1);
    else ld_cpu_parallel(fa_fwd_part, j, rows < 64 ? (int)rows : 64);
}

static void fa_backward(fa_job *j) {
    if (j->t <= 0) {   /* no query: nothing reaches k or v */
        size_t kv = sizeof(float) * (size_t)(j->batch * j->s * j->e);
        if (j->gk) memset(j->gk, 0, kv);
        if (j->gv) memset(j->gv, 0, kv);
        return;
    }
    if (j->batch * j->t * j->s * j->e < LD_CPU_PAR_MIN || j->batch < 2) fa_bw_part(j, 0, 1);
    else ld_cpu_parallel(fa_bw_part, j, j->batch < 64 ? (int)j->batch : 64);
}

/* Half inputs: widened to float32 copies, the float32 loops above, the
   results rounded once to dt. One scratch block holds every copy: sizes in
   floats, NULL pointers where a size is 0 or a tensor is not given. */
static float *fa_scratch(ld_device *d, const char *op, int n, const int64_t *sizes, const void *const *src, ld_dtype dt,
                         float **out) {
    int64_t total = 0;
    for (int i = 0; i < n; i++) total += sizes[i];
    float *buf = malloc(sizeof(float) * (size_t)(total ? total : 1));
    if (!buf) { ld_device_fault(d, LD_ENOMEM, "%s: out of memory for the float32 copies", op); return NULL; }
    float *p = buf;
    for (int i = 0; i < n; i++) {
        out[i] = sizes[i] ? p : NULL;
        if (out[i] && src[i]) ld_cpu_widen(d, out[i], src[i], dt, sizes[i]);
        p += sizes[i];
    }
    return buf;
}

void cpu_flash_attention(ld_device *d, ld_dtype dt, void *o, float *lse, const void *q, const void *k, const void *v,
                         int64_t batch, int64_t t, int64_t s, int64_t e, float scale, int causal, int64_t offset) {
    if (batch <= 0 || t <= 0) return;
    fa_job j = {.d = d, .o = o, .lse = lse, .q = q, .k = k, .v = v, .batch = batch, .t = t, .s = s, .e = e,
                .scale = scale, .causal = causal, .offset = offset};
    if (dt == LD_F32) { fa_forward(&j); return; }
    int64_t nq = batch * t * e, nk = batch * s * e;
    const int64_t sizes[4] = {nq, nk, nk, nq};
    const void *src[4] = {q, k, v, NULL};
    float *f[4];
    float *buf = fa_scratch(d, "flash_attention", 4, sizes, src, dt, f);
    if (!buf) { ld_cpu_nan_rows(d, o, dt, e, batch * t, e); return; }
    j.q = f[0]; j.k = f[1]; j.v = f[2]; j.o = f[3];
    fa_forward(&j);
    ld_cpu_round_rows(d, o, dt, e, f[3], batch * t, e);
    free(buf);
}

void cpu_flash_attention_backward(ld_device *d, ld_dtype dt, void *gq, void *gk, void *gv, const void *go,
                                  const void *q, const void *k, const void *v, const void *o, const float *lse,
                                  int64_t batch, int64_t t, int64_t s, int64_t e, float scale, int causal,
                                  int64_t offset) {
    if (batch <= 0) return;
    fa_job j = {.d = d, .lse = (float *)lse, .gq = gq, .gk = gk, .gv = gv, .q = q, .k = k, .v = v, .go = go, .oi = o,
                .batch = batch, .t = t, .s = s, .e = e, .scale = scale, .causal = causal, .offset = offset};
    if (dt == LD_F32) { fa_backward(&j); return; }
    int64_t nq = batch * t * e, nk = batch * s * e;
    const int64_t sizes[8] = {nq, nk, nk, nq, nq, gq ? nq : 0, gk ? nk : 0, gv ? nk : 0};
    const void *src[8] = {q, k, v, go, o, NULL, NULL, NULL};
    float *f[8];
    float *buf = fa_scratch(d, "flash_attention_backward", 8, sizes, src, dt, f);
    if (!buf) {
        if (gq) ld_cpu_nan_rows(d, gq, dt, e, batch * t, e);
        if (gk) ld_cpu_nan_rows(d, gk, dt, e, batch * s, e);
        if (gv) ld_cpu_nan_rows(d, gv, dt, e, batch * s, e);
        return;
    }
    j.q = f[0]; j.k = f[1]; j.v = f[2]; j.go = f[3]; j.oi = f[4]; j.gq = f[5]; j.gk = f[6]; j.gv = f[7];
    fa_backward(&j);
    if (gq) ld_cpu_round_rows(d, gq, dt, e, f[5], batch * t, e);
    if (gk) ld_cpu_round_rows(d, gk, dt, e, f[6], batch * s, e);
    if (gv) ld_cpu_round_rows(d, gv, dt, e, f[7], batch * s, e);
    free(buf);
}
