/*
 * cuda_softmax.cu - softmax and log-softmax over the last axis, and the fused
 * sparse softmax cross-entropy (forward and backward).
 *
 * One block per row: the row's maximum, then the sum of exp(x - max) in
 * double, then the outputs, as the CPU backend computes them. The
 * cross-entropy writes each row's loss to a scratch vector and a second
 * kernel adds the rows in order, so the loss is the same from run to run.
 */
#include "cuda_common.cuh"


__global__ void k_softmax(float *out, const float *x, int64_t rows, int64_t cols, int lg) {
    __shared__ float shm[32];
    __shared__ double shs[32];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float *xr = x + r * cols;
        float *yr = out + r * cols;
        float m = -INFINITY;
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) m = fmaxf(m, xr[j]);
        m = cu_block_max(m, shm);
        double s = 0;
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) s += expf(xr[j] - m);
        s = cu_block_sum(s, shs);
        if (lg) {
            float ls = m + (float)log(s);
            for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) yr[j] = xr[j] - ls;
        } else {
            float inv = (float)(1.0 / s);
            for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) yr[j] = expf(xr[j] - m) * inv;
        }
    }
}

void cu_softmax(ld_device *d, float *out, const float *x, int64_t rows, int64_t cols, int lg) {
    if (rows <= 0 || cols <= 0) return;
    cu_dev *cd = cu_begin(d);
    if (!cd) return;
    unsigned grid = (unsigned)(rows < 65536 ? rows : 65536);
    k_softmax<<<grid, row_threads(cols), 0, cd->stream>>>(out, x, rows, cols, lg);
    cu_launched(cd, "softmax kernel");
}

/* probs = softmax(logits); rowloss[i] = logsumexp(row) - logits[i, label] (NaN for a bad label) */
__global__ void k_xent_rows(double *rowloss, float *probs, const float *logits, const int64_t *labels,
                            int64_t n, int64_t c) {
    __shared__ float shm[32];
    __shared__ double shs[32];
    for (int64_t r = blockIdx.x; r < n; r += gridDim.x) {
        const float *xr = logits + r * c;
        float *pr = probs + r * c;
        float m = -INFINITY;
        for (int64_t j = threadIdx.x; j < c; j += blockDim.x) m = fmaxf(m, xr[j]);
        m = cu_block_max(m, shm);
        double s = 0;
        for (int64_t j = threadIdx.x; j < c; j += blockDim.x) s += exp((double)xr[j] - m);
        s = cu_block_sum(s, shs);
        float inv = (float)(1.0 / s);
        for (int64_t j = threadIdx.x; j < c; j += blockDim.x) pr[j] = expf(xr[j] - m) * inv;
        if (threadIdx.x == 0) {
            int64_t k = labels[r];
            rowloss[r] = (k >= 0 && k < c) ? ((double)m + log(s)) - (double)xr[k] : (double)NAN;
        }
    }
}

/* *loss = scale * sum(rowloss), one block, rows added in a fixed order */
__global__ void k_xent_total(float *loss, const double *rowloss, int64_t n, float scale) {
    __shared__ double shs[32];
    double s = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += rowloss[i];
    s = cu_block_sum(s, shs);
    if (threadIdx.x == 0) *loss = (float)(s * scale);
}

void cu_sparse_xent(ld_device *d, float *loss, float *probs, const float *logits, const int64_t *labels,
                    int64_t n, int64_t c, float scale) {
    cu_dev *cd = cu_begin(d);
    if (!cd) return;
    if (n <= 0 || c <= 0) {
        /* no rows: a loss of 0 (probs has no elements) */
        cudaError_t e = cudaMemsetAsync(loss, 0, sizeof(float), cd->stream);
        if (e != cudaSuccess) cu_record(cd, "cudaMemsetAsync", e);
        return;
    }
    size_t bytes = (size_t)n * sizeof(double);
    double *rowloss = (double *)cu_scratch_needed(cd, bytes, "sparse cross-entropy");
    if (!rowloss) return;
    unsigned grid = (unsigned)(n < 65536 ? n : 65536);
    k_xent_rows<<<grid, row_threads(c), 0, cd->stream>>>(rowloss, probs, logits, labels, n, c);
    cu_launched(cd, "sparse_xent kernel");
    k_xent_total<<<1, 256, 0, cd->stream>>>(loss, rowloss, n, scale);
    cu_launched(cd, "sparse_xent kernel (total)");
    cu_scratch_free(cd, rowloss, bytes);
}

/* dlogits = (probs - onehot(labels)) * scale * g[0]; g lives on the device */
__global__ void k_xent_backward(float *dl, const float *probs, const int64_t *labels, const float *g, int64_t n,
                                int64_t c, float scale) {
    float s = g[0] * scale;
    CU_LOOP(i, n * c) {
        int64_t r = i / c, j = i - r * c;
        float v = probs[i] * s;
        if (labels[r] == j) v -= s;
        dl[i] = v;
    }
}

void cu_sparse_xent_backward(ld_device *d, float *dlogits, const float *probs, const int64_t *labels,
                             const float *g, int64_t n, int64_t c, float scale) {
    if (n <= 0 || c <= 0) return;
    cu_dev *cd = cu_begin(d);
    if (!cd) return;
    k_xent_backward<<<cu_grid(n * c, 256), 256, 0, cd->stream>>>(dlogits, probs, labels, g, n, c, scale);
    cu_launched(cd, "sparse_xent_backward kernel");
}
