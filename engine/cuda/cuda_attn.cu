/*
 * cuda_attn.cu - the attention family's kernels (ld_kernels.h,
 * LD_LAYER_KERNELS): strided batched products through
 * cublasSgemmStridedBatched (float32) and cublasGemmStridedBatchedEx (half
 * operands, float32 compute and C), and the fused masked softmax and its
 * backward.
 *
 * Row-major to column-major as cuda_gemm.cu does: C^T = op(B)^T op(A)^T,
 * so cuBLAS gets (opB, opA, n, m, k, B, ldb, A, lda, C, ldc) with the batch
 * strides as they are. The batched products are resolved here from the
 * library cuda_gemm.cu opens (dlopen, the same process-wide copy); the
 * device's handle is cuda_gemm.cu's cu_blas_handle (made under cd->mu,
 * bound to the device's stream, its math mode from LDIST_CUDA_TF32), and
 * cu_blas_destroy frees it.
 *
 * masked_softmax: one block per row, as cuda_softmax.cu, the sum in double;
 * masked columns (j > i + offset under causal) are 0, a row masked whole is
 * uniform. The backward reads each row's dot product once, then writes.
 */
#include "cuda_common.cuh"

#include <cublas_v2.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* cublasGemmStridedBatchedEx as the library exports it (C++ adds an inline
   overload with a cudaDataType compute type, so decltype cannot name it) */
typedef cublasStatus_t (*gemm_batched_ex_fn)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                             const void *, const void *, cudaDataType, int, long long int,
                                             const void *, cudaDataType, int, long long int, const void *, void *,
                                             cudaDataType, int, long long int, int, cublasComputeType_t,
                                             cublasGemmAlgo_t);

/* cublasSgemmStridedBatched and cublasGemmStridedBatchedEx; the handle and
   error messages are cuda_gemm.cu's */
static struct {
    pthread_once_t once;
    int ok;
    char why[300];
    decltype(&cublasSgemmStridedBatched) sgemm_batched;
    gemm_batched_ex_fn gemm_batched_ex;
} ab = {PTHREAD_ONCE_INIT, 0, "", 0, 0};

static void ab_open(void) {
    const cu_sym syms[] = {{(void **)&ab.sgemm_batched, "cublasSgemmStridedBatched"},
                           {(void **)&ab.gemm_batched_ex, "cublasGemmStridedBatchedEx"}};
    ab.ok = cu_open_library("cuBLAS", cu_blas_libs, 3, syms, 2, ab.why, sizeof ab.why);
}

/* The device's cuBLAS handle (cu_blas_handle, shared with cuda_gemm.cu), with ab opened. */
static cublasHandle_t ab_handle(cu_dev *cd) {
    pthread_once(&ab.once, ab_open);
    if (!ab.ok) {
        char msg[400];
        snprintf(msg, sizeof msg, "%s: batched matrix products need cuBLAS: %.300s", cd->dev->name, ab.why);
        cu_record_msg(cd, msg);
        return NULL;
    }
    return (cublasHandle_t)cu_blas_handle(cd, "batched matrix products");
}

/* C_i = beta * C_i for k = 0 (beta = 0 writes zeros) */
__global__ void k_bscale(float *c, int64_t per, int64_t sc, int64_t batch, float beta) {
    CU_LOOP(i, per * batch) {
        int64_t b = i / per, j = i - b * per;
        float *p = c + b * sc + j;
        *p = beta == 0 ? 0.0f : beta * *p;
    }
}

/* What cu_gemm_batched and cu_gemm_batched_half share before the call: the
   device, the k = 0 product (C_i = beta * C_i; a half C, beta 0: zeros),
   the int range cuBLAS takes, the handle. NULL when nothing is left to do
   (done, or an error recorded); `what` names the product in messages. */
static cublasHandle_t batched_begin(ld_device *d, cu_dev **cdp, const char *call, const char *kind, int64_t m,
                                    int64_t n, int64_t k, int64_t lda, int64_t ldb, float beta, void *c, ld_dtype cdt,
                                    int64_t sc, int64_t batch, char *what, size_t what_n) {
    if (batch <= 0 || m <= 0 || n <= 0) return NULL;
    cu_dev *cd = *cdp = cu_begin(d);
    if (!cd) return NULL;
    if (k <= 0 && cdt == LD_F32) {
        k_bscale<<<cu_grid(m * n * batch, 256), 256, 0, cd->stream>>>((float *)c, m * n, sc, batch, beta);
        cu_launched(cd, "gemm_batched kernel (k = 0)");
        return NULL;
    }
    if (k <= 0) {   /* 16-bit zeros are +0.0 in float16 and bfloat16; C_i is m * n values, one every sc */
        cudaError_t e = cudaMemset2DAsync(c, (size_t)sc * 2, 0, (size_t)(m * n) * 2, (size_t)batch, cd->stream);
        if (e != cudaSuccess) cu_record(cd, "cudaMemset2DAsync (gemm_batched, k = 0)", e);
        return NULL;
    }
    snprintf(what, what_n, " (gemm_batched %lld x %lldx%lldx%lld%s)", (long long)batch, (long long)m, (long long)n,
             (long long)k, kind);
    if (m > INT_MAX || n > INT_MAX || k > INT_MAX || lda > INT_MAX || ldb > INT_MAX || batch > INT_MAX) {
        char msg[240];
        snprintf(msg, sizeof msg, "%s: %s%s: a dimension exceeds 2^31-1", d->name, call, what);
        cu_record_msg(cd, msg);
        return NULL;
    }
    return ab_handle(cd);
}

void cu_gemm_batched(ld_device *d, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                     int64_t lda, int64_t sa, const float *b, int64_t ldb, int64_t sb, float beta, float *c,
                     int64_t sc, int64_t batch) {
    cu_dev *cd = NULL;
    char what[128];
    cublasHandle_t h = batched_begin(d, &cd, "cublasSgemmStridedBatched", "", m, n, k, lda, ldb, beta, c, LD_F32, sc,
                                     batch, what, sizeof what);
    if (!h) return;
    cublasStatus_t st = ab.sgemm_batched(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)n,
                                         (int)m, (int)k, &alpha, b, (int)ldb, (long long)sb, a, (int)lda,
                                         (long long)sa, &beta, c, (int)n, (long long)sc, (int)batch);
    if (st != CUBLAS_STATUS_SUCCESS) cu_blas_failed(cd, "cublasSgemmStridedBatched", st, what);
}

/* Half operands, a float32 or half C: cublasGemmStridedBatchedEx with
   float32 compute (the tensor cores' bf16/fp16 products, fp32
   accumulation, a half C rounded once), laid out as cu_gemm_batched. */
void cu_gemm_batched_half(ld_device *d, int ta, int tb, int64_t m, int64_t n, int64_t k, ld_dtype dt, const void *a,
                          int64_t lda, int64_t sa, const void *b, int64_t ldb, int64_t sb, ld_dtype cdt, void *c,
                          int64_t sc, int64_t batch) {
    cu_dev *cd = NULL;
    char what[128];
    cublasHandle_t h = batched_begin(d, &cd, "cublasGemmStridedBatchedEx", dt == LD_BF16 ? ", bfloat16" : ", float16",
                                     m, n, k, lda, ldb, 0.0f, c, cdt, sc, batch, what, sizeof what);
    if (!h) return;
    cudaDataType_t in = dt == LD_BF16 ? CUDA_R_16BF : CUDA_R_16F, out = cdt == LD_F32 ? CUDA_R_32F : in;
    const float alpha = 1.0f, beta = 0.0f;
    cublasStatus_t st = ab.gemm_batched_ex(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)n,
                                           (int)m, (int)k, &alpha, b, in, (int)ldb, (long long)sb, a, in, (int)lda,
                                           (long long)sa, &beta, c, out, (int)n, (long long)sc, (int)batch,
                                           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS) cu_blas_failed(cd, "cublasGemmStridedBatchedEx", st, what);
}

__global__ void k_masked_softmax(float *y, const float *x, int64_t rows, int64_t t, int64_t s, float scale,
                                 int causal, int64_t offset) {
    __shared__ float shm[32];
    __shared__ double shs[32];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float *xr = x + r * s;
        float *yr = y + r * s;
        int64_t lim = s;
        if (causal) {
            int64_t last = r % t + offset;
            lim = last < 0 ? 0 : last + 1 < s ? last + 1 : s;
        }
        if (lim == 0) {   /* uniform (the whole block takes the branch) */
            float u = 1.0f / (float)s;
            for (int64_t j = threadIdx.x; j < s; j += blockDim.x) yr[j] = u;
            continue;
        }
        float m = -INFINITY;
        for (int64_t j = threadIdx.x; j < lim; j += blockDim.x) m = fmaxf(m, xr[j] * scale);
        m = cu_block_max(m, shm);
        double sum = 0;
        for (int64_t j = threadIdx.x; j < lim; j += blockDim.x) sum += expf(xr[j] * scale - m);
        sum = cu_block_sum(sum, shs);
        float inv = (float)(1.0 / sum);
        /* y may be x: every thread has read its entries above */
        for (int64_t j = threadIdx.x; j < s; j += blockDim.x) yr[j] = j < lim ? expf(xr[j] * scale - m) * inv : 0.0f;
        __syncthreads();
    }
}

__global__ void k_masked_softmax_bw(float *dx, const float *y, const float *dy, int64_t rows, int64_t t,
                                    int64_t cols, float scale, int causal, int64_t offset) {
    __shared__ double shs[32];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float *yr = y + r * cols, *gr = dy + r * cols;
        float *dr = dx + r * cols;
        if (causal && r % t + offset < 0) {   /* masked whole: the weights do not depend on x */
            for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) dr[j] = 0.0f;
            continue;
        }
        double dot = 0;
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) dot += (double)gr[j] * yr[j];
        dot = cu_block_sum(dot, shs);
        float fd = (float)dot;
        /* dx may be dy: each thread writes only the entries it read */
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) dr[j] = scale * yr[j] * (gr[j] - fd);
        __syncthreads();
    }
}

void cu_masked_softmax(ld_device *d, float *y, const float *x, int64_t batch, int64_t t, int64_t s, float scale,
                       int causal, int64_t offset) {
    if (batch <= 0 || t <= 0 || s <= 0) return;
    cu_dev *cd = cu_begin(d);
    if (!cd) return;
    int64_t rows = batch * t;
    unsigned grid = (unsigned)(rows < 65536 ? rows : 65536);
    k_masked_softmax<<<grid, row_threads(s), 0, cd->stream>>>(y, x, rows, t, s, scale, causal, offset);
    cu_launched(cd, "masked_softmax kernel");
}

void cu_masked_softmax_backward(ld_device *d, float *dx, const float *y, const float *dy, int64_t batch,
                                int64_t t, int64_t s, float scale, int causal, int64_t offset) {
    if (batch <= 0 || t <= 0 || s <= 0) return;
    cu_dev *cd = cu_begin(d);
    if (!cd) return;
    int64_t rows = batch * t;
    unsigned grid = (unsigned)(rows < 65536 ? rows : 65536);
    k_masked_softmax_bw<<<grid, row_threads(s), 0, cd->stream>>>(dx, y, dy, rows, t, s, scale, causal, offset);
    cu_launched(cd, "masked_softmax_backward kernel");
}
