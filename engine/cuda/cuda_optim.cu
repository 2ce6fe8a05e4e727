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

/* A batch's layout over the grid: item k (the empty ones left out) takes
   blocks [first[k], first[k + 1]); slot[k] is its index in the caller's
   batch. In the kernels' parameters, beside the batch. */
struct batch_layout {
    unsigned first[LD_OPT_BATCH + 1];
    int slot[LD_OPT_BATCH];
};

/* the items with elements moved to the front, in order, and their blocks:
   the blocks in all (0: nothing to do); *n becomes the items kept */
template <typename Item>
static unsigned layout_batch(Item *items, int *n, batch_layout *st) {
    int kept = 0;
    unsigned blocks = 0;
    for (int k = 0; k < *n && k < LD_OPT_BATCH; k++) {
        if (items[k].n <= 0) continue;
        int64_t nb = (items[k].n + OPT_THREADS - 1) / OPT_THREADS;
        items[kept] = items[k];
        st->slot[kept] = k;
        st->first[kept++] = blocks;
        blocks += (unsigned)(nb < OPT_BLOCKS ? nb : OPT_BLOCKS);
    }
    st->first[kept] = blocks;
    *n = kept;
    return kept ? blocks : 0;
}

/* this block's item: the last k with first[k] <= blockIdx.x */
__device__ __forceinline__ int batch_item(const batch_layout &st, int n) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (st.first[mid] <= blockIdx.x) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* the kernels' parameters (at most 4 KB before CUDA 12.1) */
static_assert(sizeof(ld_opt_batch) + sizeof(batch_layout) <= 4000, "opt_update's parameters exceed 4 KB");
static_assert(sizeof(ld_check_batch) + sizeof(batch_layout) <= 4000, "nonfinite_flags' parameters exceed 4 KB");

__global__ void __launch_bounds__(256) k_opt_update(const __grid_constant__ ld_opt_batch b,
                                                    const __grid_constant__ batch_layout st) {
    int k = batch_item(st, b.n);
    const ld_opt_item *it = &b.item[k];
    int64_t nb = st.first[k + 1] - st.first[k];
    float sc = it->gscale;
    for (int64_t i = (int64_t)(blockIdx.x - st.first[k]) * OPT_THREADS + threadIdx.x; i < it->n;
         i += nb * OPT_THREADS) {
        /* g * gscale rounded on its own, as the multiply it replaces (no FMA) */
        float g = sc == 1.0f ? it->g[i] : __fmul_rn(it->g[i], sc);
        ld_opt_elem(&b.h, it, g, i);
    }
}

void cu_opt_update(ld_device *d, ld_opt_batch b) {
    batch_layout st;
    unsigned blocks = layout_batch(b.item, &b.n, &st);
    if (!blocks) return;
    cu_dev *cd = cu_begin(d);
    if (!cd) return;
    k_opt_update<<<blocks, OPT_THREADS, 0, cd->stream>>>(b, st);
    cu_launched(cd, "opt_update kernel");
}

/* nonfinite_flags: laid out as opt_update's; a thread that meets an inf or
   a NaN writes 1 to its tensor's flag (all such writes are the same value) */
template <typename T>
__device__ __forceinline__ bool opt_any_nonfinite(const T *x, int64_t i0, int64_t n, int64_t stride) {
    bool bad = false;
    for (int64_t i = i0; i < n; i += stride) bad |= !isfinite(cu_get(x[i]));
    return bad;
}

__global__ void __launch_bounds__(256) k_nonfinite_flags(const __grid_constant__ ld_check_batch b,
                                                         const __grid_constant__ batch_layout st, float *flags) {
    int k = batch_item(st, b.n);
    const ld_check_item *it = &b.item[k];
    int64_t nb = st.first[k + 1] - st.first[k];
    int64_t i0 = (int64_t)(blockIdx.x - st.first[k]) * OPT_THREADS + threadIdx.x, stride = nb * OPT_THREADS;
    bool bad = it->dt == LD_F16    ? opt_any_nonfinite((const cu_f16 *)it->x, i0, it->n, stride)
               : it->dt == LD_BF16 ? opt_any_nonfinite((const cu_bf16 *)it->x, i0, it->n, stride)
                                   : opt_any_nonfinite((const float *)it->x, i0, it->n, stride);
    if (bad) flags[st.slot[k]] = 1.0f;
}

void cu_nonfinite_flags(ld_device *d, ld_check_batch b, float *flags) {
    batch_layout st;
    unsigned blocks = layout_batch(b.item, &b.n, &st);
    if (!blocks) return;
    cu_dev *cd = cu_begin(d);
    if (!cd) return;
    k_nonfinite_flags<<<blocks, OPT_THREADS, 0, cd->stream>>>(b, st, flags);
    cu_launched(cd, "nonfinite_flags kernel");
}
