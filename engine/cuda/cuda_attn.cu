/*
 * cuda_attn.cu - the attention family's kernels (ld_kernels.h,
 * LD_LAYER_KERNELS): strided batched products through
 * cublasSgemmStridedBatched (float32) and cublasGemmStridedBatchedEx (half
 * operands, float32 compute, C float32 or the operands' half dtype), the
 * fused masked softmax and its backward, and flash_attention.
 *
 * Row-major to column-major as cuda_gemm.cu does: C^T = op(B)^T op(A)^T,
 * so cuBLAS gets (opB, opA, n, m, k, B, ldb, A, lda, C, ldc) with the batch
 * strides as they are. The batched products are resolved here from the
 * library cuda_gemm.cu opens (dlopen, the same process-wide copy); the
 * device's handle is cuda_gemm.cu's cu_blas_handle (made under cd->mu,
 * bound to the device's stream, its math mode from LDIST_CUDA_TF32), kept
 * with its workspace until the process ends.
 *
 * masked_softmax: one block per row, as cuda_softmax.cu, the sum in double;
 * masked columns (j > i + offset under causal) are 0, a row masked whole is
 * uniform. The backward reads each row's dot product once, then writes.
 */
#include "cuda_common.cuh"
#include "ld_attn_math.h"

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

/* H: the half copy's type (float when there is none: yh NULL) */
template <typename H>
__global__ void k_masked_softmax(float *y, H *yh, const float *x, int64_t rows, int64_t t, int64_t s, float scale,
                                 int causal, int64_t offset) {
    __shared__ float shm[32];
    __shared__ double shs[32];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float *xr = x + r * s;
        float *yr = y + r * s;
        H *hr = yh ? yh + r * s : NULL;
        int64_t lim = ld_attn_kept(r % t, s, causal, offset);
        if (lim == 0) {   /* uniform (the whole block takes the branch) */
            float u = 1.0f / (float)s;
            for (int64_t j = threadIdx.x; j < s; j += blockDim.x) {
                yr[j] = u;
                if (hr) hr[j] = cu_put<H>(u);
            }
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
        for (int64_t j = threadIdx.x; j < s; j += blockDim.x) {
            float v = j < lim ? expf(xr[j] * scale - m) * inv : 0.0f;
            yr[j] = v;
            if (hr) hr[j] = cu_put<H>(v);
        }
        __syncthreads();
    }
}

/* dx in T (float32, or a half dtype rounded once) */
template <typename T>
__global__ void k_masked_softmax_bw(T *dx, const float *y, const float *dy, int64_t rows, int64_t t,
                                    int64_t cols, float scale, int causal, int64_t offset) {
    __shared__ double shs[32];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float *yr = y + r * cols, *gr = dy + r * cols;
        T *dr = dx + r * cols;
        int64_t lim = ld_attn_kept(r % t, cols, causal, offset);
        if (lim == 0) {   /* masked whole: the weights do not depend on x */
            for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) dr[j] = cu_put<T>(0.0f);
            continue;
        }
        /* masked columns have weight 0, hence gradient 0, as on the CPU: an
           inf in dy there (a loss of log(w)) must not make the row NaN */
        double dot = 0;
        for (int64_t j = threadIdx.x; j < lim; j += blockDim.x) dot += (double)gr[j] * yr[j];
        dot = cu_block_sum(dot, shs);
        float fd = (float)dot;
        /* dx may be dy (float32): each thread writes only the entries it read */
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
            dr[j] = cu_put<T>(j < lim ? scale * yr[j] * (gr[j] - fd) : 0.0f);
        __syncthreads();
    }
}

void cu_masked_softmax(ld_device *d, float *y, void *yh, ld_dtype hdt, const float *x, int64_t batch, int64_t t,
                       int64_t s, float scale, int causal, int64_t offset) {
    if (batch <= 0 || t <= 0 || s <= 0) return;
    cu_dev *cd = cu_begin(d);
    if (!cd) return;
    int64_t rows = batch * t;
    unsigned grid = (unsigned)(rows < 65536 ? rows : 65536);
    if (!yh) hdt = LD_F32;
    CU_FLOAT_TYPES(hdt, H, k_masked_softmax<H><<<grid, row_threads(s), 0, cd->stream>>>(y, (H *)yh, x, rows, t, s, scale, causal, offset));
    cu_launched(cd, "masked_softmax kernel");
}

void cu_masked_softmax_backward(ld_device *d, void *dx, ld_dtype ddt, const float *y, const float *dy, int64_t batch,
                                int64_t t, int64_t s, float scale, int causal, int64_t offset) {
    if (batch <= 0 || t <= 0 || s <= 0) return;
    cu_dev *cd = cu_begin(d);
    if (!cd) return;
    int64_t rows = batch * t;
    unsigned grid = (unsigned)(rows < 65536 ? rows : 65536);
    CU_FLOAT_TYPES(ddt, T, k_masked_softmax_bw<T><<<grid, row_threads(s), 0, cd->stream>>>((T *)dx, y, dy, rows, t, s, scale, causal, offset));
    cu_launched(cd, "masked_softmax_backward kernel");
}

/* ================================================================ flash_attention
 * FlashAttention's scheme in float32 on the CUDA cores, one head width E
 * (16, 32, 64) and one storage type T (float, cu_f16, cu_bf16: q, k, v, o
 * and the gradients; read with cu_get, written with cu_put once) per
 * instantiation:
 *   forward   a block of 64 threads per 64 queries of one batch item, a
 *             thread per query (q and its output accumulator in registers);
 *             64 keys and values at a time go through shared memory, and
 *             each thread keeps a running max and sum (online softmax), so
 *             no [t, s] matrix is ever stored. lse = max + log(sum).
 *   backward  kernel 1, per query: D = go.o (kept for kernel 2) and
 *             gq = sum_j ds_ij k_j; kernel 2, a block of 32 threads per 32
 *             keys, a thread per key (its k and v rows in shared memory, its
 *             gk and gv accumulators in registers), 32 queries at a time:
 *             p = exp(scale q.k - lse), gv += p go, ds = scale p (go.v - D),
 *             gk += ds q. Nothing is accumulated with atomics.
 * Causal: query i sees keys j <= i + offset; a block stops at the last key
 * its last query sees. A row that sees no key has uniform weights (as
 * masked_softmax gives): its output is the mean of the values, and its
 * gradient goes to every v alone. */

/* rows [r0, r0 + R) of the [n, E] arrays a and b into sa and sb (zeros past
   n), by the block's NT threads */
template <int E, int R, int NT, int P, typename T>
__device__ __forceinline__ void fa_load_rows(float (*sa)[P], float (*sb)[P], const T *a, const T *b,
                                             int64_t r0, int64_t n) {
    for (int idx = threadIdx.x; idx < R * E; idx += NT) {
        int r = idx / E, c = idx % E;
        int64_t j = r0 + r;
        sa[r][c] = j < n ? cu_get(a[j * E + c]) : 0.f;
        sb[r][c] = j < n ? cu_get(b[j * E + c]) : 0.f;
    }
}

template <typename T, int E>
__global__ void __launch_bounds__(64) k_flash_fwd(T *o, float *lse, const T *q, const T *k, const T *v,
                                                  int64_t batch, int64_t t, int64_t s, float scale, int causal,
                                                  int64_t offset) {
    constexpr int BQ = 64, BK = 64;
    __shared__ float ks[BK][E], vs[BK][E];
    for (int64_t b = blockIdx.y; b < batch; b += gridDim.y) {
        int64_t i0 = (int64_t)blockIdx.x * BQ, i = i0 + threadIdx.x;
        bool active = i < t;
        const T *kb = k + b * s * E, *vb = v + b * s * E;
        float qr[E], acc[E];
        float m = -INFINITY, l = 0.f;
        int64_t lim = 0;
#pragma unroll
        for (int c = 0; c < E; c++) { qr[c] = active ? cu_get(q[(b * t + i) * E + c]) : 0.f; acc[c] = 0.f; }
        if (active) lim = ld_attn_kept(i, s, causal, offset);
        int64_t ilast = i0 + BQ - 1 < t ? i0 + BQ - 1 : t - 1;
        int64_t blim = ld_attn_kept(ilast, s, causal, offset);   /* ld_attn_kept grows with i */
        for (int64_t j0 = 0; j0 < blim; j0 += BK) {
            __syncthreads();   /* every thread is done with the last tile */
            fa_load_rows<E, BK, BQ, E>(ks, vs, kb, vb, j0, s);
            __syncthreads();
            int64_t n = lim - j0 < BK ? lim - j0 : BK;
            for (int r = 0; r < n; r++) {
                float sc = 0.f;
#pragma unroll
                for (int c = 0; c < E; c++) sc += qr[c] * ks[r][c];
                sc *= scale;
                if (sc > m) {   /* a new maximum: rescale what was summed (0 the first time) */
                    float corr = expf(m - sc);
                    l *= corr;
#pragma unroll
                    for (int c = 0; c < E; c++) acc[c] *= corr;
                    m = sc;
                }
                float p = expf(sc - m);
                l += p;
#pragma unroll
                for (int c = 0; c < E; c++) acc[c] += p * vs[r][c];
            }
        }
        if (active) {
            T *orow = o + (b * t + i) * E;
            if (lim == 0) {   /* masked whole (or no key): the mean of the values */
                float u = s > 0 ? 1.f / (float)s : 0.f;
                for (int64_t j = 0; j < s; j++)
#pragma unroll
                    for (int c = 0; c < E; c++) acc[c] += cu_get(vb[j * E + c]);
#pragma unroll
                for (int c = 0; c < E; c++) orow[c] = cu_put<T>(acc[c] * u);
                lse[b * t + i] = INFINITY;
            } else {
                float inv = 1.f / l;
#pragma unroll
                for (int c = 0; c < E; c++) orow[c] = cu_put<T>(acc[c] * inv);
                lse[b * t + i] = m + logf(l);
            }
        }
        __syncthreads();   /* before the next batch item's tiles */
    }
}

/* backward 1: dd = go.o per query; gq (may be NULL) */
template <typename T, int E>
__global__ void __launch_bounds__(64) k_flash_bw_q(T *gq, float *dd, const T *go, const T *q, const T *k,
                                                   const T *v, const T *o, const float *lse, int64_t batch,
                                                   int64_t t, int64_t s, float scale, int causal, int64_t offset) {
    constexpr int BQ = 64, BK = 64;
    __shared__ float ks[BK][E], vs[BK][E];
    for (int64_t b = blockIdx.y; b < batch; b += gridDim.y) {
        int64_t i0 = (int64_t)blockIdx.x * BQ, i = i0 + threadIdx.x, row = b * t + i;
        bool active = i < t;
        const T *kb = k + b * s * E, *vb = v + b * s * E;
        float qr[E], gr[E], acc[E];
        float di = 0.f, li = 0.f;
        int64_t lim = 0;
#pragma unroll
        for (int c = 0; c < E; c++) {
            qr[c] = active ? cu_get(q[row * E + c]) : 0.f;
            gr[c] = active ? cu_get(go[row * E + c]) : 0.f;
            di += active ? gr[c] * cu_get(o[row * E + c]) : 0.f;
            acc[c] = 0.f;
        }
        if (active) {
            dd[row] = di;
            lim = ld_attn_kept(i, s, causal, offset);
            li = lse[row];
        }
        int64_t ilast = i0 + BQ - 1 < t ? i0 + BQ - 1 : t - 1;
        int64_t blim = gq ? ld_attn_kept(ilast, s, causal, offset) : 0;
        for (int64_t j0 = 0; j0 < blim; j0 += BK) {
            __syncthreads();
            fa_load_rows<E, BK, BQ, E>(ks, vs, kb, vb, j0, s);
            __syncthreads();
            int64_t n = lim - j0 < BK ? lim - j0 : BK;
            for (int r = 0; r < n; r++) {
                float sc = 0.f, dp = 0.f;
#pragma unroll
                for (int c = 0; c < E; c++) { sc += qr[c] * ks[r][c]; dp += gr[c] * vs[r][c]; }
                float ds = scale * expf(sc * scale - li) * (dp - di);
#pragma unroll
                for (int c = 0; c < E; c++) acc[c] += ds * ks[r][c];
            }
        }
        if (active && gq)
#pragma unroll
            for (int c = 0; c < E; c++) gq[row * E + c] = cu_put<T>(acc[c]);
        __syncthreads();
    }
}

/* backward 2: gk and gv (either may be NULL), a thread per key */
template <typename T, int E>
__global__ void __launch_bounds__(32) k_flash_bw_kv(T *gk, T *gv, const float *dd, const T *go, const T *q,
                                                    const T *k, const T *v, const float *lse, int64_t batch,
                                                    int64_t t, int64_t s, float scale, int causal, int64_t offset) {
    constexpr int BJ = 32, BQ = 32;
    __shared__ float kj[BJ][E + 1], vj[BJ][E + 1];   /* padded: thread x reads row x, no bank conflicts */
    __shared__ float qs[BQ][E], gs[BQ][E], ls[BQ], ds_[BQ];
    for (int64_t b = blockIdx.y; b < batch; b += gridDim.y) {
        int64_t j0 = (int64_t)blockIdx.x * BJ, j = j0 + threadIdx.x;
        bool active = j < s;
        const T *qb = q + b * t * E, *gb = go + b * t * E;
        __syncthreads();
        fa_load_rows<E, BJ, BJ, E + 1>(kj, vj, k + b * s * E, v + b * s * E, j0, s);
        float ak[E], av[E];
#pragma unroll
        for (int c = 0; c < E; c++) { ak[c] = 0.f; av[c] = 0.f; }
        /* rows that see no key: uniform weights, their gradient to every v */
        int64_t whole = causal && offset < 0 ? (-offset < t ? -offset : t) : 0;
        if (active && s > 0)
            for (int64_t i = 0; i < whole; i++)
#pragma unroll
                for (int c = 0; c < E; c++) av[c] += cu_get(gb[i * E + c]) / (float)s;
        /* the first query that sees key j0: j0 <= i + offset */
        int64_t istart = causal ? (j0 - offset > whole ? j0 - offset : whole) : 0;
        __syncthreads();
        for (int64_t i0 = istart; i0 < t; i0 += BQ) {
            __syncthreads();
            fa_load_rows<E, BQ, BJ, E>(qs, gs, qb, gb, i0, t);
            if (threadIdx.x < BQ) {
                int64_t i = i0 + threadIdx.x;
                ls[threadIdx.x] = i < t ? lse[b * t + i] : INFINITY;
                ds_[threadIdx.x] = i < t ? dd[b * t + i] : 0.f;
            }
            __syncthreads();
            int n = t - i0 < BQ ? (int)(t - i0) : BQ;
            for (int r = 0; r < n; r++) {
                if (!active || j >= ld_attn_kept(i0 + r, s, causal, offset)) continue;
                float sc = 0.f, dp = 0.f;
#pragma unroll
                for (int c = 0; c < E; c++) { sc += qs[r][c] * kj[threadIdx.x][c]; dp += gs[r][c] * vj[threadIdx.x][c]; }
                float p = expf(sc * scale - ls[r]);
                float ds = scale * p * (dp - ds_[r]);
#pragma unroll
                for (int c = 0; c < E; c++) { av[c] += p * gs[r][c]; ak[c] += ds * qs[r][c]; }
            }
        }
        if (active) {
            int64_t row = (b * s + j) * E;
            if (gk)
#pragma unroll
                for (int c = 0; c < E; c++) gk[row + c] = cu_put<T>(ak[c]);
            if (gv)
#pragma unroll
                for (int c = 0; c < E; c++) gv[row + c] = cu_put<T>(av[c]);
        }
    }
}

static int fa_width_ok(cu_dev *cd, ld_device *d, const char *op, int64_t e) {
    if (e == 16 || e == 32 || e == 64) return 1;
    char msg[200];
    snprintf(msg, sizeof msg, "%s: %s: head width %lld (16, 32 or 64 expected)", d->name, op, (long long)e);
    cu_record_msg(cd, msg);
    return 0;
}

void cu_flash_attention(ld_device *d, ld_dtype dt, void *o, float *lse, const void *q, const void *k, const void *v,
                        int64_t batch, int64_t t, int64_t s, int64_t e, float scale, int causal, int64_t offset) {
    if (batch <= 0 || t <= 0) return;
    cu_dev *cd = cu_begin(d);
    if (!cd || !fa_width_ok(cd, d, "flash_attention", e)) return;
    dim3 grid((unsigned)((t + 63) / 64), (unsigned)(batch < 65535 ? batch : 65535));
#define FA_FWD(E)                                                                                                 \
    k_flash_fwd<T, E><<<grid, 64, 0, cd->stream>>>((T *)o, lse, (const T *)q, (const T *)k, (const T *)v, batch, t, \
                                                    s, scale, causal, offset)
    CU_FLOAT_TYPES(dt, T, if (e == 16) FA_FWD(16); else if (e == 32) FA_FWD(32); else FA_FWD(64));
#undef FA_FWD
    cu_launched(cd, "flash_attention kernel");
}

void cu_flash_attention_backward(ld_device *d, ld_dtype dt, void *gq, void *gk, void *gv, const void *go,
                                 const void *q, const void *k, const void *v, const void *o, const float *lse,
                                 int64_t batch, int64_t t, int64_t s, int64_t e, float scale, int causal,
                                 int64_t offset) {
    if (batch <= 0) return;
    cu_dev *cd = cu_begin(d);
    if (!cd || !fa_width_ok(cd, d, "flash_attention_backward", e)) return;
    size_t es = dt == LD_F32 ? sizeof(float) : 2, kv = es * (size_t)(batch * s * e);
    if (t <= 0 || s <= 0) {   /* nothing reaches k or v */
        if (gk && kv) cudaMemsetAsync(gk, 0, kv, cd->stream);
        if (gv && kv) cudaMemsetAsync(gv, 0, kv, cd->stream);
        if (gq && t > 0) cudaMemsetAsync(gq, 0, es * (size_t)(batch * t * e), cd->stream);
        cu_launched(cd, "flash_attention_backward (no keys or queries)");
        return;
    }
    size_t bytes = sizeof(float) * (size_t)(batch * t);
    float *dd = (float *)cu_scratch_needed(cd, bytes, "flash_attention_backward");
    if (!dd) return;
    unsigned by = (unsigned)(batch < 65535 ? batch : 65535);
    dim3 gq_grid((unsigned)((t + 63) / 64), by), gkv_grid((unsigned)((s + 31) / 32), by);
#define FA_BW(E)                                                                                                  \
    do {                                                                                                          \
        k_flash_bw_q<T, E><<<gq_grid, 64, 0, cd->stream>>>((T *)gq, dd, (const T *)go, (const T *)q,            \
                                                           (const T *)k, (const T *)v, (const T *)o, lse, batch, \
                                                           t, s, scale, causal, offset);                          \
        if (cu_launched(cd, "flash_attention_backward kernel (queries)") == LD_OK && (gk || gv)) {              \
            k_flash_bw_kv<T, E><<<gkv_grid, 32, 0, cd->stream>>>((T *)gk, (T *)gv, dd, (const T *)go,           \
                                                                 (const T *)q, (const T *)k, (const T *)v, lse,  \
                                                                 batch, t, s, scale, causal, offset);             \
            cu_launched(cd, "flash_attention_backward kernel (keys)");                                           \
        }                                                                                                         \
    } while (0)
    CU_FLOAT_TYPES(dt, T, if (e == 16) FA_BW(16); else if (e == 32) FA_BW(32); else FA_BW(64));
#undef FA_BW
    cu_scratch_free(cd, dd, bytes);
}
