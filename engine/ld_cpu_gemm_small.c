/*
 * ld_cpu_gemm_small.c - C = A B (+ C) for a few rows of A against a large B,
 * without packing B.
 *
 * BLAS packs both operands on every call. For the forward product of a
 * replica's share of the batch (128 rows against a 784x512 kernel) packing
 * the kernel costs as much per call as it does for a whole batch, and each
 * replica pays it. Here the small operand A is packed (12 rows at a time,
 * k-major) and B is read where it lies, 32 columns at a time, with the
 * accumulators in AVX-512 registers; on processors without AVX-512, 6 rows
 * by 16 columns in AVX2 registers with FMA (16 of them, where AVX-512 has
 * 32), for up to 48 rows (below). The version is chosen at run time (ld_cpu_isa: CPUID, or
 * LDIST_CPU_ISA=avx2 to compare), whatever the build targets.
 */
#include "ld_cpu_gemm_small.h"
#include "ld_cpu_internal.h"

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

/* one version: its row blocks (largest first), its panel width, and the
   kernel call for R packed rows against one panel of w columns */
typedef struct {
    int rows[4], nr;
    void (*panel)(int R, int64_t K, const float *ap, const float *b, int64_t ldb, float *c, int64_t ldc, int acc,
                  int64_t w);
} small_isa;

static __attribute__((target("avx512f"))) void panel512(int R, int64_t K, const float *ap, const float *b,
                                                        int64_t ldb, float *c, int64_t ldc, int acc, int64_t w) {
    __mmask16 m0 = w >= 16 ? 0xFFFF : (__mmask16)((1u << w) - 1);
    __mmask16 m1 = w >= 32 ? 0xFFFF : w > 16 ? (__mmask16)((1u << (w - 16)) - 1) : 0;
    switch (R) {
    case 12: kern12(K, ap, b, ldb, c, ldc, acc, m0, m1); break;
    case 8: kern8(K, ap, b, ldb, c, ldc, acc, m0, m1); break;
    case 4: kern4(K, ap, b, ldb, c, ldc, acc, m0, m1); break;
    default: kern1(K, ap, b, ldb, c, ldc, acc, m0, m1); break;
    }
}

/* A packed R rows at a time (k-major, passes of at most KB_MAX deep), B's
   panels read where they lie */
static void gemm_small(const small_isa *v, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                       const float *b, int64_t ldb, int acc, float *c, int64_t ldc, int epi, const float *bias,
                       int relu) {
    float ap[12 * KB_MAX];
    int64_t passes = (k + KB_MAX - 1) / KB_MAX, kb = (k + passes - 1) / passes;
    for (int64_t k0 = 0; k0 < k; k0 += kb) {
        int64_t kk = k - k0 < kb ? k - k0 : kb;
        int add = acc || k0 > 0, last = k0 + kk >= k;
        for (int64_t i = 0; i < m;) {
            int R = v->rows[3];
            for (int x = 0; x < 3; x++) if (m - i >= v->rows[x]) { R = v->rows[x]; break; }
            for (int64_t q = 0; q < kk; q++)
                for (int r = 0; r < R; r++) ap[q * R + r] = a[(i + r) * lda + k0 + q];
            for (int64_t j = 0; j < n; j += v->nr)
                v->panel(R, kk, ap, b + k0 * ldb + j, ldb, c + i * ldc + j, ldc, add, n - j < v->nr ? n - j : v->nr);
            if (epi && last) ld_cpu_bias_relu_rows(c + i * ldc, ldc, R, n, bias, relu);
            i += R;
        }
    }
}

/* ---- AVX2 + FMA: C[R x w] (+)= ap[K x R] * B[K x w], w <= 16 given by masks m0/m1 */
#define NR2 16
#define KERNEL2(R)                                                                                       \
    static __attribute__((target("avx2,fma"))) void kern2_##R(int64_t K, const float *ap, const float *b, \
                                                              int64_t ldb, float *c, int64_t ldc, int acc, \
                                                              __m256i m0, __m256i m1, int full) {        \
        __m256 c0[R], c1[R];                                                                             \
        _Pragma("GCC unroll 8") for (int i = 0; i < R; i++) {                                           \
            c0[i] = acc ? _mm256_maskload_ps(c + i * ldc, m0) : _mm256_setzero_ps();                     \
            c1[i] = acc ? _mm256_maskload_ps(c + i * ldc + 8, m1) : _mm256_setzero_ps();                 \
        }                                                                                                \
        _Pragma("GCC unroll 4") for (int64_t k = 0; k < K; k++) {                                       \
            _mm_prefetch((const char *)(b + (k + PF) * ldb), _MM_HINT_T0);                               \
            __m256 b0 = full ? _mm256_loadu_ps(b + k * ldb) : _mm256_maskload_ps(b + k * ldb, m0);       \
            __m256 b1 = full ? _mm256_loadu_ps(b + k * ldb + 8) : _mm256_maskload_ps(b + k * ldb + 8, m1); \
            _Pragma("GCC unroll 8") for (int i = 0; i < R; i++) {                                       \
                __m256 av = _mm256_broadcast_ss(ap + k * R + i);                                         \
                c0[i] = _mm256_fmadd_ps(av, b0, c0[i]);                                                  \
                c1[i] = _mm256_fmadd_ps(av, b1, c1[i]);                                                  \
            }                                                                                            \
        }                                                                                                \
        _Pragma("GCC unroll 8") for (int i = 0; i < R; i++) {                                           \
            _mm256_maskstore_ps(c + i * ldc, m0, c0[i]);                                                 \
            _mm256_maskstore_ps(c + i * ldc + 8, m1, c1[i]);                                             \
        }                                                                                                \
    }
KERNEL2(6)
KERNEL2(4)
KERNEL2(2)
KERNEL2(1)

static __attribute__((target("avx2,fma"))) void panel2(int R, int64_t K, const float *ap, const float *b,
                                                       int64_t ldb, float *c, int64_t ldc, int acc, int64_t w) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256i m0 = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)w), lane);
    __m256i m1 = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)w - 8), lane);
    int full = w == NR2;
    switch (R) {
    case 6: kern2_6(K, ap, b, ldb, c, ldc, acc, m0, m1, full); break;
    case 4: kern2_4(K, ap, b, ldb, c, ldc, acc, m0, m1, full); break;
    case 2: kern2_2(K, ap, b, ldb, c, ldc, acc, m0, m1, full); break;
    default: kern2_1(K, ap, b, ldb, c, ldc, acc, m0, m1, full); break;
    }
}

static const small_isa isa512 = {{12, 8, 4, 1}, NR, panel512}, isa2 = {{6, 4, 2, 1}, NR2, panel2};

int ld_cpu_gemm_small_fits(int64_t m, int64_t n, int64_t k) {
    if (n < 256 || k < 256) return 0;
    switch (ld_cpu_isa()) {
    case LD_ISA_AVX512: return m <= 256;
    /* with half the registers, B is read twice as often as by the AVX-512
       version: it matches OpenBLAS's AVX2 (Haswell) kernels up to 32 rows
       and falls behind from 64 (76 against 93 GFLOP/s at 64x784x512, on one
       Zen 4 core), so more rows go to BLAS */
    case LD_ISA_AVX2: return m <= 48;
    default: return 0;
    }
}

static int small_run(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b, int64_t ldb,
                     int acc, float *c, int64_t ldc, int epi, const float *bias, int relu) {
    switch (ld_cpu_isa()) {
    case LD_ISA_AVX512: gemm_small(&isa512, m, n, k, a, lda, b, ldb, acc, c, ldc, epi, bias, relu); return 1;
    case LD_ISA_AVX2:
        if (m > 48) return 0;   /* ld_cpu_gemm_small_fits says why */
        gemm_small(&isa2, m, n, k, a, lda, b, ldb, acc, c, ldc, epi, bias, relu);
        return 1;
    default: return 0;
    }
}

int ld_cpu_gemm_small(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b, int64_t ldb,
                  float beta, float *c, int64_t ldc) {
    if (beta != 0.0f && beta != 1.0f) return 0;
    return small_run(m, n, k, a, lda, b, ldb, beta == 1.0f, c, ldc, 0, NULL, 0);
}

int ld_cpu_gemm_small_bias(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
                           int64_t ldb, const float *bias, int relu, float *c, int64_t ldc) {
    if (k < 1) return 0;
    return small_run(m, n, k, a, lda, b, ldb, 0, c, ldc, 1, bias, relu);
}
#else
int ld_cpu_gemm_small(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b, int64_t ldb,
                  float beta, float *c, int64_t ldc) {
    return 0;
}
int ld_cpu_gemm_small_bias(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
                           int64_t ldb, const float *bias, int relu, float *c, int64_t ldc) {
    return 0;
}
#endif
