/*
 * ld_gemm_bf16.c - bfloat16 matrix products on AVX512_BF16.
 *
 * vdpbf16ps multiplies 16 pairs of bfloat16 and adds each pair's two
 * products into a float32 lane: a pair is two consecutive k of one row of A
 * (broadcast to every lane) and the same two k of 16 columns of B. So A is
 * packed as [m, k/2] pairs and B as panels of 32 columns, each [k/2, 32]
 * pairs and contiguous (both zero-padded: an odd k, B's last panel), and an
 * 8x32 block of C stays in sixteen registers over all of k. A thread takes
 * row blocks and runs each panel over all of them: the panel (k/2 * 128
 * bytes) stays in L2 while it meets them. Packing is split over the same
 * threads into each thread's scratch blocks, kept between calls
 * (ld_cpu_scratch); A not transposed, of even k, is read in place (its
 * consecutive k are already pairs). The sums are float32, as on the GPU's
 * tensor cores with fp32 accumulation; only their order differs from sgemm.
 * Chosen at run time (CPUID), so one binary runs everywhere; off where
 * LDIST_CPU_ISA asks for less than AVX-512 or LDIST_NO_AVX512_BF16=1.
 */
#include "ld_gemm_bf16.h"
#include "ld_cpu_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int plain_forced(void) {
    const char *s = getenv("LDIST_NO_AVX512_BF16");
    return s && *s && strcmp(s, "0");
}

#if defined(__x86_64__) && defined(__GNUC__) && (__GNUC__ >= 10)
#include <immintrin.h>

#define MR 8    /* rows of C per block */
#define NR 32   /* columns of C per block: two vectors */

/* A's pairs may be read in place from the tensor's uint16_t values */
typedef uint32_t __attribute__((may_alias)) pair_t;

typedef struct {
    int64_t m, n, kp;           /* kp: pairs along k */
    const pair_t *ap;
    const uint32_t *bp;    /* A's pairs, row i at ap + i * lda; packed B [n / 32 panels][kp][32] */
    int64_t lda;                /* pairs between A's rows: kp when packed, the tensor's own when read in place */
    float *c;
    int64_t ldc;
} bf16_job;

__attribute__((target("avx512f,avx512bf16"))) static void block(const bf16_job *j, int64_t i0, int rows, int64_t j0) {
    __m512 acc[MR][2];
    for (int r = 0; r < MR; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    const uint32_t *bp = j->bp + j0 * j->kp;
    const pair_t *ap = j->ap + i0 * j->lda;
    for (int64_t p = 0; p < j->kp; p++) {
        __m512bh b0 = (__m512bh)_mm512_loadu_si512(bp + p * NR);
        __m512bh b1 = (__m512bh)_mm512_loadu_si512(bp + p * NR + 16);
#pragma GCC unroll 8
        for (int r = 0; r < MR; r++) {
            if (r >= rows) break;
            __m512bh av = (__m512bh)_mm512_set1_epi32((int)ap[r * j->lda + p]);
            acc[r][0] = _mm512_dpbf16_ps(acc[r][0], av, b0);
            acc[r][1] = _mm512_dpbf16_ps(acc[r][1], av, b1);
        }
    }
    int64_t w = j->n - j0 < NR ? j->n - j0 : NR;
    __mmask16 m0 = (__mmask16)(w >= 16 ? 0xffff : (1u << w) - 1);
    __mmask16 m1 = (__mmask16)(w >= 32 ? 0xffff : w > 16 ? (1u << (w - 16)) - 1 : 0);
    for (int r = 0; r < rows; r++) {
        float *c = j->c + (i0 + r) * j->ldc + j0;
        _mm512_mask_storeu_ps(c, m0, acc[r][0]);
        _mm512_mask_storeu_ps(c + 16, m1, acc[r][1]);
    }
}

/* A part's row blocks, panel by panel: a panel of B (kp * 128 bytes) stays
   in L2 while it meets every block of the part's rows (which stay there
   too), where the part's rows meeting every panel in turn read all of B
   from L3 again for each block of 8 rows */
static void part(void *ctx, int p, int np) {
    const bf16_job *j = ctx;
    int64_t blocks = (j->m + MR - 1) / MR, lo = blocks * p / np, hi = blocks * (p + 1) / np;
    for (int64_t j0 = 0; j0 < j->n; j0 += NR)
        for (int64_t bi = lo; bi < hi; bi++) {
            int64_t i0 = bi * MR;
            block(j, i0, (int)(j->m - i0 < MR ? j->m - i0 : MR), j0);
        }
}

static int have_bf16(void) {
    static int have = -1;   /* asked once; any device's thread may be first (atomic: no data race) */
    int h = __atomic_load_n(&have, __ATOMIC_RELAXED);
    if (h < 0) {
        /* an extension of AVX-512: off too when LDIST_CPU_ISA chose less (ld_cpu_isa.c) */
        h = ld_cpu_isa() == LD_ISA_AVX512 && __builtin_cpu_supports("avx512bf16");
        __atomic_store_n(&have, h, __ATOMIC_RELAXED);
    }
    return h;
}

const char *ld_gemm_bf16_path(void) { return have_bf16() && !plain_forced() ? "avx512_bf16" : "float32"; }

/* ---- packing: A as [m][kp] pairs, B as panels [n / 32][kp][32] pairs,
   every pad written (0), split over the pool with the product's threads ---- */
typedef struct {
    const uint16_t *a, *b;
    int64_t lda, ldb, m, n, k, kp, panels;
    int ta, tb;
    uint32_t *ap, *bp;
} pack_job;

static void pack_a_rows(const pack_job *q, int64_t i0, int64_t i1) {
    int64_t k = q->k, kp = q->kp;
    if (!q->ta) {   /* a row's k are consecutive: its pairs are its bytes (even k in the low half) */
        for (int64_t i = i0; i < i1; i++) {
            uint16_t *d = (uint16_t *)(q->ap + i * kp);
            memcpy(d, q->a + i * q->lda, (size_t)k * 2);
            if (k & 1) d[k] = 0;
        }
        return;
    }
    for (int64_t p = 0; p < kp; p++) {   /* A stored [k, m]: rows 2p and 2p + 1 interleaved */
        const uint16_t *r0 = q->a + 2 * p * q->lda, *r1 = 2 * p + 1 < k ? r0 + q->lda : NULL;
        for (int64_t i = i0; i < i1; i++)
            q->ap[i * kp + p] = (uint32_t)r0[i] | (r1 ? (uint32_t)r1[i] << 16 : 0u);
    }
}

static void pack_b_panels(const pack_job *q, int64_t p0, int64_t p1) {
    int64_t k = q->k, kp = q->kp;
    for (int64_t pn = p0; pn < p1; pn++) {
        uint32_t *dst = q->bp + pn * kp * NR;
        int64_t j0 = pn * NR, w = q->n - j0 < NR ? q->n - j0 : NR;
        if (!q->tb) {   /* B stored [k, n]: two rows of the panel's columns interleaved */
            for (int64_t p = 0; p < kp; p++) {
                const uint16_t *r0 = q->b + 2 * p * q->ldb + j0, *r1 = 2 * p + 1 < k ? r0 + q->ldb : NULL;
                uint32_t *d = dst + p * NR;
                if (r1) for (int64_t jj = 0; jj < w; jj++) d[jj] = (uint32_t)r0[jj] | (uint32_t)r1[jj] << 16;
                else for (int64_t jj = 0; jj < w; jj++) d[jj] = r0[jj];
                for (int64_t jj = w; jj < NR; jj++) d[jj] = 0;
            }
        } else {        /* B stored [n, k]: a column's pairs are consecutive, the panel is their transpose */
            for (int64_t jj = 0; jj < NR; jj++) {
                if (jj >= w) { for (int64_t p = 0; p < kp; p++) dst[p * NR + jj] = 0; continue; }
                const uint16_t *row = q->b + (j0 + jj) * q->ldb;
                for (int64_t p = 0; p < k / 2; p++) {
                    uint32_t v;
                    memcpy(&v, row + 2 * p, 4);
                    dst[p * NR + jj] = v;
                }
                if (k & 1) dst[(kp - 1) * NR + jj] = row[k - 1];
            }
        }
    }
}

static void pack_part(void *ctx, int p, int np) {
    const pack_job *q = ctx;
    if (q->ap) pack_a_rows(q, q->m * p / np, q->m * (p + 1) / np);
    pack_b_panels(q, q->panels * p / np, q->panels * (p + 1) / np);
}

int ld_gemm_bf16(int ta, int tb, int64_t m, int64_t n, int64_t k, const uint16_t *a, int64_t lda,
                 const uint16_t *b, int64_t ldb, float *c, int64_t ldc) {
    if (!have_bf16() || plain_forced()) return 0;
    if (m <= 0 || n <= 0) return 1;
    int64_t kp = (k + 1) / 2, panels = (n + NR - 1) / NR;
    /* A's rows are already pairs, read in place, when not transposed, of
       even k (no odd last value to pair with 0) and 4-byte aligned */
    int in_place = !ta && !(k & 1) && !(lda & 1) && !((uintptr_t)a & 3);
    /* the thread's scratch blocks (ld_pool.h): + 1 pair, never 0 bytes (k = 0: the sums are 0) */
    uint32_t *ap = in_place ? NULL : ld_cpu_scratch(LD_SCRATCH_PACK_A, (size_t)(m * kp + 1) * 4);
    uint32_t *bp = ld_cpu_scratch(LD_SCRATCH_PACK_B, (size_t)(kp * panels * NR + 1) * 4);
    if ((!in_place && !ap) || !bp) {
        ld_cpu_scratch_done(LD_SCRATCH_PACK_A, ap);
        ld_cpu_scratch_done(LD_SCRATCH_PACK_B, bp);
        return 0;
    }
    pack_job q = {a, b, lda, ldb, m, n, k, kp, panels, ta, tb, ap, bp};
    bf16_job j = {m, n, kp, in_place ? (const pair_t *)(const void *)a : ap, bp, in_place ? lda / 2 : kp, c, ldc};
    int64_t blocks = (m + MR - 1) / MR;
    if ((double)m * n * k < 262144.0 || blocks < 2) {
        pack_part(&q, 0, 1);
        part(&j, 0, 1);
    } else {
        ld_cpu_parallel(pack_part, &q, 64);
        ld_cpu_parallel(part, &j, blocks < 64 ? (int)blocks : 64);
    }
    ld_cpu_scratch_done(LD_SCRATCH_PACK_A, ap);
    ld_cpu_scratch_done(LD_SCRATCH_PACK_B, bp);
    return 1;
}
#else
const char *ld_gemm_bf16_path(void) { return "float32"; }
int ld_gemm_bf16(int ta, int tb, int64_t m, int64_t n, int64_t k, const uint16_t *a, int64_t lda,
                 const uint16_t *b, int64_t ldb, float *c, int64_t ldc) {
    (void)plain_forced;
    return 0;
}
#endif
