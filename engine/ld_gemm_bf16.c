/*
 * ld_gemm_bf16.c - bfloat16 matrix products on AVX512_BF16.
 *
 * vdpbf16ps multiplies 16 pairs of bfloat16 and adds each pair's two
 * products into a float32 lane: a pair is two consecutive k of one row of A
 * (broadcast to every lane) and the same two k of 16 columns of B. So A is
 * packed as [m, k/2] pairs and B as panels of 32 columns, each [k/2, 32]
 * pairs and contiguous (both zero-padded: an odd k, B's last panel), and an
 * 8x32 block of C stays in sixteen registers over all of k. A thread takes
 * row blocks and runs every panel over each: the panel (k/2 * 128 bytes)
 * stays in L2, the block's rows of A in L1. The sums are float32, as on the GPU's
 * tensor cores with fp32 accumulation; only their order differs from sgemm.
 * Chosen at run time (CPUID), so one binary runs everywhere; off where
 * LDIST_CPU_ISA asks for less than AVX-512 or LDIST_NO_AVX512_BF16=1.
 */
#include "ld_gemm_bf16.h"
#include "ld_cpu_internal.h"

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

typedef struct {
    int64_t m, n, kp;           /* kp: pairs along k */
    const uint32_t *ap, *bp;    /* packed A [m, kp], packed B [n / 32 panels][kp][32] */
    float *c;
    int64_t ldc;
} bf16_job;

__attribute__((target("avx512f,avx512bf16"))) static void block(const bf16_job *j, int64_t i0, int rows, int64_t j0) {
    __m512 acc[MR][2];
    for (int r = 0; r < MR; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    const uint32_t *bp = j->bp + j0 * j->kp, *ap = j->ap + i0 * j->kp;
    for (int64_t p = 0; p < j->kp; p++) {
        __m512bh b0 = (__m512bh)_mm512_loadu_si512(bp + p * NR);
        __m512bh b1 = (__m512bh)_mm512_loadu_si512(bp + p * NR + 16);
#pragma GCC unroll 8
        for (int r = 0; r < MR; r++) {
            if (r >= rows) break;
            __m512bh av = (__m512bh)_mm512_set1_epi32((int)ap[r * j->kp + p]);
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

static void part(void *ctx, int p, int np) {
    const bf16_job *j = ctx;
    int64_t blocks = (j->m + MR - 1) / MR, lo = blocks * p / np, hi = blocks * (p + 1) / np;
    for (int64_t bi = lo; bi < hi; bi++) {
        int64_t i0 = bi * MR;
        int rows = (int)(j->m - i0 < MR ? j->m - i0 : MR);
        for (int64_t j0 = 0; j0 < j->n; j0 += NR) block(j, i0, rows, j0);
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

int ld_gemm_bf16(int ta, int tb, int64_t m, int64_t n, int64_t k, const uint16_t *a, int64_t lda,
                 const uint16_t *b, int64_t ldb, float *c, int64_t ldc) {
    if (!have_bf16() || plain_forced()) return 0;
    if (m <= 0 || n <= 0) return 1;
    int64_t kp = (k + 1) / 2, npad = (n + NR - 1) / NR * NR;   /* npad: columns with the last panel's padding */
    uint32_t *ap = calloc((size_t)(m * kp + 1), 4), *bp = calloc((size_t)(kp * npad + 1), 4);   /* + 1: never 0 bytes */
    if (!ap || !bp) { free(ap); free(bp); return 0; }
    /* pairs: the even k in the low half, the odd k in the high half, as
       vdpbf16ps reads them; the missing half of an odd k stays 0 */
    for (int64_t i = 0; i < m; i++)
        for (int64_t kk = 0; kk < k; kk++) {
            uint16_t v = ta ? a[kk * lda + i] : a[i * lda + kk];
            ap[i * kp + kk / 2] |= (uint32_t)v << (16 * (kk & 1));
        }
    for (int64_t kk = 0; kk < k; kk++)
        for (int64_t jj = 0; jj < n; jj++) {
            uint16_t v = tb ? b[jj * ldb + kk] : b[kk * ldb + jj];
            bp[(jj / NR) * kp * NR + (kk / 2) * NR + jj % NR] |= (uint32_t)v << (16 * (kk & 1));
        }
    bf16_job j = {m, n, kp, ap, bp, c, ldc};
    int64_t blocks = (m + MR - 1) / MR;
    if ((double)m * n * k < 262144.0 || blocks < 2) part(&j, 0, 1);
    else ld_cpu_parallel(part, &j, blocks < 64 ? (int)blocks : 64);
    free(ap);
    free(bp);
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
