/*
 * ld_cpu_internal.h - what the CPU kernels of other files share with
 * ld_cpu.c: the declarations of the layers' kernels (LD_LAYER_KERNELS in
 * ld_kernels.h), which live in engine/ld_cpu_<family>.c, and the thread pool
 * they split their loops on (ld_pool.h). Internal to the engine: not a
 * public header.
 */
#ifndef LD_CPU_INTERNAL_H
#define LD_CPU_INTERNAL_H

#include "ld_device.h"
#include "ld_pool.h"   /* the thread pool every CPU kernel splits its loops on */
#include "ld_half.h"

/* The rows of a product's C (rows of n values, one every ldc elements of
   cdt): NaN (a product that could not run), or the contiguous float32
   rows f rounded to a half cdt once (gemm_half, gemm_batched_half). */
void ld_cpu_nan_rows(ld_device *d, void *c, ld_dtype cdt, int64_t ldc, int64_t rows, int64_t n);
void ld_cpu_round_rows(ld_device *d, void *c, ld_dtype cdt, int64_t ldc, const float *f, int64_t rows, int64_t n);
/* Contiguous rows of n float16 or bfloat16 (dt) to and from float32, bit for
   bit ld_half.h's conversions, in vector lanes where the processor has them
   (ld_cpu_half.c). */
void ld_cpu_half_to_f32(float *d, const uint16_t *s, ld_dtype dt, int64_t n);
void ld_cpu_f32_to_half(uint16_t *d, const float *s, ld_dtype dt, int64_t n);
/* value i of x in dt (float32, float16, bfloat16), widened (exact): for
   loops that read scattered values (a reduction's column, a gradient
   scattered by index) */
static inline float ld_cpu_elem(const void *x, ld_dtype dt, int64_t i) {
    if (dt == LD_F32) return ((const float *)x)[i];
    uint16_t h = ((const uint16_t *)x)[i];
    return dt == LD_BF16 ? ld_bf16_to_f32(h) : ld_f16_to_f32(h);
}
/* n values of dt (float32, float16, bfloat16) widened into float32 f (exact) */
void ld_cpu_widen(ld_device *d, float *f, const void *x, ld_dtype dt, int64_t n);

/* Dense's epilogue on rows of a product's C (ldc apart): c += bias[j]
   (bias NULL: nothing), then relu when `relu` (NaN kept, as ld_ew_relu).
   Run by each part of gemm_bias on the rows it has just written, while
   they are in its cache (ld_cpu.c, ld_cpu_gemm_small.c). */
void ld_cpu_bias_relu_rows(float *c, int64_t ldc, int64_t rows, int64_t n, const float *bias, int relu);

#define LD_CPU_DECLARE(name, ...) LD_K_DECLARE(cpu_, name, __VA_ARGS__);
LD_LAYER_KERNELS(LD_CPU_DECLARE)
#undef LD_CPU_DECLARE

#endif
