/*
 * ld_gemm_small.c - C = A B (+ C) for a few rows of A against a large B,
 * without packing B.
 *
 * BLAS packs both operands on every call. For the forward product of a
 * replica's share of the batch (128 rows against a 784x512 kernel) packing
 * the kernel costs as much per call as it does for a whole batch, and each
 * replica pays it. Here the small operand A is packed (12 rows at a time,
 * k-major) and B is read where it lies, 32 columns at a time, with the
 * accumulators in AVX-512 registers.
 */
#include "ld_gemm_small.h"

#include <stdint.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define NR 32        /* columns of B per panel: two vectors */
#define PF 8         /* rows of B prefetched ahead */
#define KB_MAX 512   /* depth of one pass (A's packed rows stay in L1) */

/* C[R x w] (+)= ap[K x R] (k-major) * B[K x w], w <= 32 given by masks m0/m1 */
#define KERNEL(R)                                                                                        \
    static __attribute__((target("avx512f"))) void kern##R(int64_t K, const float *ap, const float *b,  \
                                                           int64_t ldb, float *c, int64_t ldc, int acc,  \
                                                           __mmask16 m0, __mmask16 m1) {                 \
        __m512 c0[R], c1[R];                                                                             \
        _Pragma("GCC unroll 16") for (int i = 0; i < R; i++) {                                          \
            c0[i] = acc ? _mm512_maskz_loadu_ps(m0, c + i * ldc) : _mm512_setzero_ps();                 \
            c1[i] = acc ? _mm512_maskz_loadu_ps(m1, c + i * ldc + 16) : _mm512_setzero_ps();            \
        }                                                                                                \
        _Pragma("GCC unroll 4") for (int64_t k = 0; k < K; k++) {                                       \
            _mm_prefetch((const char *)(b + (k + PF) * ldb), _MM_HINT_T0);                               \
            _mm_prefetch((const char *)(b + (k + PF) * ldb + 16), _MM_HINT_T0);                          \
            __m512 b0 = _mm512_maskz_loadu_ps(m0, b + k * ldb), b1 = _mm512_maskz_loadu_ps(m1, b + k * ldb + 16); \
            _Pragma("GCC unroll 16") for (int i = 0; i < R; i++) {                                      \
                __m512 av = _mm512_set1_ps(ap[k * R + i]);                                               \
                c0[i] = _mm512_fmadd_ps(av, b0, c0[i]);                                                  \
                c1[i] = _mm512_fmadd_ps(av, b1, c1[i]);                                                  \
            }                                                                                            \
        }                                                                                                \
        _Pragma("GCC unroll 16") for (int i = 0; i < R; i++) {                                          \
            _mm512_mask_storeu_ps(c + i * ldc, m0, c0[i]);                                               \
            _mm512_mask_storeu_ps(c + i * ldc + 16, m1, c1[i]);                                          \
        }                                                                                                \
    }
KERNEL(12)
KERNEL(8)
KERNEL(4)
KERNEL(1)

static __attribute__((target("avx512f"))) void gemm_small(int64_t m, int64_t n, int64_t k, const float *a,
                                                          int64_t lda, const float *b, int64_t ldb, int acc,
                                                          float *c, int64_t ldc) {
    float ap[12 * KB_MAX];
    int64_t passes = (k + KB_MAX - 1) / KB_MAX, kb = (k + passes - 1) / passes;
    for (int64_t k0 = 0; k0 < k; k0 += kb) {
        int64_t kk = k - k0 < kb ? k - k0 : kb;
        int add = acc || k0 > 0;
        for (int64_t i = 0; i < m;) {
            int R = m - i >= 12 ? 12 : m - i >= 8 ? 8 : m - i >= 4 ? 4 : 1;
            for (int64_t q = 0; q < kk; q++)
                for (int r = 0; r < R; r++) ap[q * R + r] = a[(i + r) * lda + k0 + q];
            for (int64_t j = 0; j < n; j += NR) {
                int64_t w = n - j < NR ? n - j : NR;
                __mmask16 m0 = w >= 16 ? 0xFFFF : (__mmask16)((1u << w) - 1);
                __mmask16 m1 = w >= 32 ? 0xFFFF : w > 16 ? (__mmask16)((1u << (w - 16)) - 1) : 0;
                const float *bb = b + k0 * ldb + j;
                float *cc = c + i * ldc + j;
                switch (R) {
                case 12: kern12(kk, ap, bb, ldb, cc, ldc, add, m0, m1); break;
                case 8: kern8(kk, ap, bb, ldb, cc, ldc, add, m0, m1); break;
                case 4: kern4(kk, ap, bb, ldb, cc, ldc, add, m0, m1); break;
                default: kern1(kk, ap, bb, ldb, cc, ldc, add, m0, m1); break;
                }
            }
            i += R;
        }
    }
}

int ld_gemm_small(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b, int64_t ldb,
                  float beta, float *c, int64_t ldc) {
    if (!__builtin_cpu_supports("avx512f") || (beta != 0.0f && beta != 1.0f)) return 0;
    gemm_small(m, n, k, a, lda, b, ldb, beta == 1.0f, c, ldc);
    return 1;
}
#else
int ld_gemm_small(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b, int64_t ldb,
                  float beta, float *c, int64_t ldc) {
    return 0;
}
#endif
