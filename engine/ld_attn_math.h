/*
 * ld_attn_math.h - the causal mask of attention, shared by the CPU kernels
 * (ld_cpu_attn.c) and the CUDA kernels (cuda/cuda_attn.cu): the masked
 * softmax and the fused (flash) attention, forward and backward, all ask it
 * which keys a query sees. Plain C; under nvcc it is __host__ __device__.
 */
#ifndef LD_ATTN_MATH_H
#define LD_ATTN_MATH_H

#include <stdint.h>

#ifdef __CUDACC__
#define LD_ATTN_FN static inline __host__ __device__
#else
#define LD_ATTN_FN static inline
#endif

/* Query i of a causal attention over s keys sees keys j <= i + offset:
   keys [0, kept) take part. offset is 0 when query i lines up with key i,
   s - t when the t queries are the last t of the s positions
   (LD_CAUSAL_END, ld_ops_attn.c). Without the mask every key takes part.
   0 means the row is masked whole (i + offset < 0), which the kernels give
   uniform weights, as Keras' -1e9 adder does. */
LD_ATTN_FN int64_t ld_attn_kept(int64_t i, int64_t s, int causal, int64_t offset) {
    if (!causal) return s;
    int64_t last = i + offset;   /* the last key seen */
    return last < 0 ? 0 : last + 1 < s ? last + 1 : s;
}

#endif
