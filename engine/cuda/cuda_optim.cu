/*
 * cuda_optim.cu - opt_update: one optimizer step over a batch of up to
 * LD_OPT_BATCH variables in one launch (ld_kernels.h), as PyTorch's
 * multi-tensor Adam; the per-element rules are ld_optim_math.h's, as on the
 * CPU. The batch travels in the kernel's parameters, with each variable's
 * first block (OPT_BLOCKS blocks of 256 threads at most per variable, each
 * looping over its share); a block finds its variable by a binary search
 * over them. The parameters are __grid_constant__: read where they are,
 * where taking an item's address would copy them into each thread's local
 * memory. The bench transformer's 102 variables: 3 launches a step
 * where there were 102. nonfinite_flags, the loss scale's check of the
 * gradients, is laid out the same way.
 */
#include "cuda_common.cuh"
#include "ld_optim_math.h"

#include <math.h>

#define OPT_THREADS 256   /* k_opt_update's __launch_bounds__ */
#define OPT_BLOCKS 1024   /* per variable: 256k elements per pass */

struct opt_starts {
    unsigned first[LD_OPT_BATCH + 1];   /* item k's blocks: [first[k], first[k + 1]) */
};

/* the kernel's parameters (at most 4 KB before CUDA 12.1) */
static_assert(sizeof(ld_opt_batch) + sizeof(opt_starts) <= 4000, "opt_update's parameters exceed 4 KB");

__global__ void __launch_bounds__(256) k_opt_update(const __grid_constant__ ld_opt_batch b,
                                                                const __grid_constant__ opt_starts st) {
    int lo = 0, hi = b.n - 1;   /* the last k with first[k] <= blockIdx.x */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (st.first[mid] <= blockIdx.x) lo = mid;
        else hi = mid - 1;
    }
    const ld_opt_item *it = &b.item[lo];
    int64_t nb = st.first[lo + 1] - st.first[lo];
    float sc = it->gscale;
    for (int64_t i = (int64_t)(blockIdx.x - st.first[lo]) * OPT_THREADS + threadIdx.x; i < it->n;
         i += nb * OPT_THREADS) {
        /* g * gscale rounded on its own, as the multiply it replaces (no FMA) */
        float g = sc == 1.0f ? it->g[i] : __fmul_rn(it->g[i], sc);
        ld_opt_elem(&b.h, it, g, i);
    }
}

void cu_opt_update(ld_device *d, ld_opt_batch b) {
    opt_starts st;
    int n = 0;
    unsigned blocks = 0;
    /* the items with elements, in order */
    for (int k = 0; k < b.n && k < LD_OPT_BATCH; k++) {
        if (b.item[k].n <= 0) continue;
        int64_t nb = (b.item[k].n + OPT_THREADS - 1) / OPT_THREADS;
        b.item[n] = b.item[k];
        st.first[n++] = blocks;
        blocks += (unsigned)(nb < OPT_BLOCKS ? nb : OPT_BLOCKS);
    }
    if (n == 0) return;
    st.first[n] = blocks;
    b.n = n;
    cu_dev *cd = cu_begin(d);
    if (!cd) return;
    k_opt_update<<<blocks, OPT_THREADS, 0, cd->stream>>>(b, st);
    cu_launched(cd, "opt_update kernel");
}

/* nonfinite_flags: the batch in one launch, laid out as opt_update's (at
   most OPT_BLOCKS blocks a tensor, the empty ones left out: slot maps the
   packed items back to the caller's flags); a thread that meets an inf or a
   NaN writes 1 to its tensor's flag (all such writes are the same value) */
struct check_starts {
    unsigned first[LD_OPT_BATCH + 1];
    int slot[LD_OPT_BATCH];
};
static_assert(sizeof(ld_check_batch) + sizeof(check_starts) <= 4000, "nonfinite_flags' parameters exceed 4 KB");

template <typename T>
__device__ __forceinline__ bool opt_any_nonfinite(const T *x, int64_t i0, int64_t n, int64_t stride) {
    bool bad = false;
    for (int64_t i = i0; i < n; i += stride) bad |= !isfinite(cu_get(x[i]));
    return bad;
}

__global__ void __launch_bounds__(256) k_nonfinite_flags(const __grid_constant__ ld_check_batch b,
                                                         const __grid_constant__ check_starts st, float *flags) {
    int lo = 0, hi = b.n - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (st.first[mid] <= blockIdx.x) lo = mid;
        else hi = mid - 1;
    }
    const ld_check_item *it = &b.item[lo];
    int64_t nb = st.first[lo + 1] - st.first[lo];
    int64_t i0 = (int64_t)(blockIdx.x - st.first[lo]) * OPT_THREADS + threadIdx.x, stride = nb * OPT_THREADS;
    bool bad = it->dt == LD_F16    ? opt_any_nonfinite((const cu_f16 *)it->x, i0, it->n, stride)
               : it->dt == LD_BF16 ? opt_any_nonfinite((const cu_bf16 *)it->x, i0, it->n, stride)
                                   : opt_any_nonfinite((const float *)it->x, i0, it->n, stride);
    if (bad) flags[st.slot[lo]] = 1.0f;
}

void cu_nonfinite_flags(ld_device *d, ld_check_batch b, float *flags) {
    check_starts st;
    int n = 0;
    unsigned blocks = 0;
    for (int k = 0; k < b.n && k < LD_OPT_BATCH; k++) {
        if (b.item[k].n <= 0) continue;
        int64_t nb = (b.item[k].n + OPT_THREADS - 1) / OPT_THREADS;
        b.item[n] = b.item[k];
        st.slot[n] = k;
        st.first[n++] = blocks;
        blocks += (unsigned)(nb < OPT_BLOCKS ? nb : OPT_BLOCKS);
    }
    if (n == 0) return;
    st.first[n] = blocks;
    b.n = n;
    cu_dev *cd = cu_begin(d);
    if (!cd) return;
    k_nonfinite_flags<<<blocks, OPT_THREADS, 0, cd->stream>>>(b, st, flags);
    cu_launched(cd, "nonfinite_flags kernel");
}
