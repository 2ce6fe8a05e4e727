/* ld_gemm_bf16.h - row-major C = op(A) op(B) for bfloat16 A and B, float32 C,
   with AVX512_BF16's vdpbf16ps (pairs of bfloat16 products summed into
   float32 lanes) where the processor has it (ld_gemm_bf16.c). */
#ifndef LD_GEMM_BF16_H
#define LD_GEMM_BF16_H
#include <stdint.h>

/* 1 when done; 0 when this processor lacks AVX512_BF16, when
   LDIST_NO_AVX512_BF16=1 forces the plain path (or LDIST_CPU_ISA a lesser
   instruction set), or memory ran out: the
   caller then widens the operands to float32 (exact) and uses sgemm. */
int ld_gemm_bf16(int ta, int tb, int64_t m, int64_t n, int64_t k, const uint16_t *a, int64_t lda,
                 const uint16_t *b, int64_t ldb, float *c, int64_t ldc);
/* "avx512_bf16" or "float32": which product ld_gemm_bf16 chooses here */
const char *ld_gemm_bf16_path(void);
#endif
