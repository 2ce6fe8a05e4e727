/*
 * cuda_index.cu - the indexing family (ld_kernels.h, LD_LAYER_KERNELS):
 * block copies for concatenation and slicing, embedding lookups and their
 * scatter-add (atomicAdd).
 */
#include "cuda_common.cuh"

/* ---- slice_copy: one thread per element of the small [outer, n, inner] block */
__global__ void k_slice_copy(float *dst, const float *src, int64_t outer, int64_t n, int64_t inner, int64_t big,
                             int64_t off, int into, int add, int64_t total) {
    CU_LOOP(idx, total) {
        int64_t e = idx % inner, r = idx / inner, k = r % n, o = r / n;
        int64_t large = ((o * big) + off + k) * inner + e;
        int64_t di = into ? large : idx, si = into ? idx : large;
        float v = src[si];
        dst[di] = add ? dst[di] + v : v;
    }
}

void cu_slice_copy(ld_device *d, float *dst, const float *src, int64_t outer, int64_t n, int64_t inner, int64_t big,
                   int64_t off, int into, int add) {
    int64_t total = outer * n * inner;
    if (total <= 0) return;
    cu_dev *cd = cu_begin(d);
    if (!cd) return;
    k_slice_copy<<<cu_grid(total, 256), 256, 0, cd->stream>>>(dst, src, outer, n, inner, big, off, into, add, total);
    cu_launched(cd, "slice_copy kernel");
}

/* ---- embedding */
__device__ __forceinline__ int64_t cu_id_at(const void *ids, int is32, int64_t i) {
    return is32 ? (int64_t)((const int32_t *)ids)[i] : ((const int64_t *)ids)[i];
}

/* an id outside [0, v) gives a zero row */
__global__ void k_embedding(float *y, const float *table, const void *ids, int is32, int64_t n, int64_t v,
                            int64_t dim, int64_t total) {
    CU_LOOP(idx, total) {
        int64_t i = idx / dim, c = idx - i * dim;
        int64_t k = cu_id_at(ids, is32, i);
        y[idx] = (k >= 0 && k < v) ? table[k * dim + c] : 0.0f;
    }
}

void cu_embedding(ld_device *d, float *y, const float *table, const void *ids, ld_dtype idt, int64_t n, int64_t v,
                  int64_t dim) {
    int64_t total = n * dim;
    if (total <= 0) return;
    cu_dev *cd = cu_begin(d);
    if (!cd) return;
    k_embedding<<<cu_grid(total, 256), 256, 0, cd->stream>>>(y, table, ids, idt == LD_I32, n, v, dim, total);
    cu_launched(cd, "embedding kernel");
}

__global__ void k_embedding_backward(float *dtable, const float *dy, const void *ids, int is32, int64_t n,
                                     int64_t v, int64_t dim, int64_t total) {
    CU_LOOP(idx, total) {
        int64_t i = idx / dim, c = idx - i * dim;
        int64_t k = cu_id_at(ids, is32, i);
        if (k >= 0 && k < v) atomicAdd(dtable + k * dim + c, dy[idx]);
    }
}

void cu_embedding_backward(ld_device *d, float *dtable, const float *dy, const void *ids, ld_dtype idt, int64_t n,
                           int64_t v, int64_t dim) {
    if (v <= 0 || dim <= 0) return;
    cu_dev *cd = cu_begin(d);
    if (!cd) return;
    cudaError_t e = cudaMemsetAsync(dtable, 0, (size_t)(v * dim) * sizeof(float), cd->stream);
    if (e != cudaSuccess) { cu_record(cd, "cudaMemsetAsync (embedding_backward)", e); return; }
    int64_t total = n * dim;
    if (total <= 0) return;
    k_embedding_backward<<<cu_grid(total, 256), 256, 0, cd->stream>>>(dtable, dy, ids, idt == LD_I32, n, v, dim,
                                                                      total);
    cu_launched(cd, "embedding_backward kernel");
}
