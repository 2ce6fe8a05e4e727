/* ld_cpu_gemm_small.h - row-major C = A B (beta 0) or C += A B (beta 1) without
   packing B (ld_cpu_gemm_small.c). Returns 1 when done, 0 when this machine or
   beta is not supported (the caller uses BLAS). */
#ifndef LD_CPU_GEMM_SMALL_H
#define LD_CPU_GEMM_SMALL_H
#include <stdint.h>
int ld_cpu_gemm_small(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b, int64_t ldb,
                  float beta, float *c, int64_t ldc);
/* C = A B, then Dense's epilogue (ld_cpu_bias_relu_rows) on each block of
   rows as soon as it is done, while it is in L1 */
int ld_cpu_gemm_small_bias(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
                           int64_t ldb, const float *bias, int relu, float *c, int64_t ldc);
/* 1 when a product of this shape is worth doing here rather than in BLAS
   (a few rows against a large B, on a processor with a version of it) */
int ld_cpu_gemm_small_fits(int64_t m, int64_t n, int64_t k);
#endif
