/*
 * ld_norm_math.h - the per-channel arithmetic of batch normalization that
 * the CPU kernels (ld_cpu_norm.c) and the CUDA kernels (cuda/cuda_norm.cu)
 * share, so both give the same bits. Plain C; under nvcc the functions are
 * __host__ __device__.
 */
#ifndef LD_NORM_MATH_H
#define LD_NORM_MATH_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define LD_NORM_FN static inline __host__ __device__
#else
#define LD_NORM_FN static inline
#endif

/* Channel k's mean from the first statistics pass, sums = [count (c), sum x (c)];
   0 for no rows. */
LD_NORM_FN float ld_bn_center(const float *sums, int64_t c, int64_t k) {
    return sums[k] > 0 ? (float)((double)sums[c + k] / (double)sums[k]) : 0.0f;
}

/* bn_finalize for channel k (ld_kernels.h): training, mean and rstd from
   the batch's [count, sum] (sums) and squared deviations (m2), and the moving
   statistics mm/mv updated with momentum when the batch has rows; inference,
   mean and rstd from the moving statistics. */
LD_NORM_FN void ld_bn_finalize_channel(float *mean, float *rstd, float *mm, float *mv, const float *sums,
                                       const float *m2, int64_t c, int64_t k, float momentum, float eps,
                                       int training) {
    if (!training) {
        mean[k] = mm[k];
        rstd[k] = (float)(1.0 / sqrt((double)mv[k] + (double)eps));
        return;
    }
    double n = sums[k];
    float m = ld_bn_center(sums, c, k);
    float v = n > 0 ? (float)((double)m2[k] / n) : 0.0f;
    mean[k] = m;
    rstd[k] = (float)(1.0 / sqrt((double)v + (double)eps));
    if (n > 0) {
        mm[k] = mm[k] * momentum + m * (1.0f - momentum);
        mv[k] = mv[k] * momentum + v * (1.0f - momentum);
    }
}

#endif
