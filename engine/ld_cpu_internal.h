/*
 * ld_cpu_internal.h - what the CPU kernels of other files share with
 * ld_cpu.c: its thread pool, and the declarations of the layers' kernels
 * (LD_LAYER_KERNELS in ld_kernels.h), which live in engine/ld_cpu_<family>.c.
 * Internal to the engine: not a public header.
 *
 *     static void part(void *ctx, int p, int np) { ... ld_cpu_range(rows, p, np, &lo, &hi) ... }
 *     ld_cpu_parallel(part, &job, 64);     // parts run on the pool; nested calls run serially
 */
#ifndef LD_CPU_INTERNAL_H
#define LD_CPU_INTERNAL_H

#include "ld_device.h"

typedef void (*ld_par_fn)(void *ctx, int part, int nparts);
/* fn(ctx, part, nparts) for every part, in parallel over the pool; nparts
   is min(want, the pool's size); a call from a pool worker runs serially. */
void ld_cpu_parallel(ld_par_fn fn, void *ctx, int want);
/* part's share [lo, hi) of n elements, in 16-element aligned blocks */
void ld_cpu_range(int64_t n, int part, int nparts, int64_t *lo, int64_t *hi);
/* For tests: how long a pool's waiters spin (pauses) and yield before they
   sleep; 0, 0 sleeps at once. */
void ld_cpu_pool_set_spin(int spin, int yield);
/* below this many elements a loop is not worth splitting */
#define LD_CPU_PAR_MIN 32768

/* The rows of a product's C (rows of n values, one every ldc elements of
   cdt): NaN (a product that could not run), or the contiguous float32
   rows f rounded to a half cdt once (gemm_half, gemm_batched_half). */
void ld_cpu_nan_rows(ld_device *d, void *c, ld_dtype cdt, int64_t ldc, int64_t rows, int64_t n);
void ld_cpu_round_rows(ld_device *d, void *c, ld_dtype cdt, int64_t ldc, const float *f, int64_t rows, int64_t n);

#define LD_CPU_DECLARE(name, ...) LD_K_DECLARE(cpu_, name, __VA_ARGS__);
LD_LAYER_KERNELS(LD_CPU_DECLARE)
#undef LD_CPU_DECLARE

#endif
