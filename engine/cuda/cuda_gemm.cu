/*
 * cuda_gemm.cu - matrix products through cuBLAS.
 *
 * cuBLAS is column-major; a row-major matrix with leading dimension ld is
 * the column-major transpose with the same ld. So the row-major
 * C = op(A) op(B) is computed as the column-major C^T = op(B)^T op(A)^T:
 * cublasSgemm(opB, opA, n, m, k, B, ldb, A, lda, C, ldc), nothing copied.
 *
 * cuBLAS is opened with dlopen on the first product (libcublas.so.13, then
 * .12), so the plugin loads where cuBLAS is missing and says so when a
 * product is asked for. Full FP32 by default, like PyTorch's matmul;
 * LDIST_CUDA_TF32=1 lets cuBLAS use TF32 tensor cores. Half operands
 * (gemm_half) go through cublasGemmEx with float32 accumulation.
 *
 * The hot path allocates and waits for nothing: the handle is made once per
 * device, and given once a workspace of its own (cublasSetWorkspace, after
 * cublasSetStream, which resets it), as PyTorch does: NVIDIA recommends 32
 * MiB on Hopper and later, 4 MiB before; LDIST_CUBLAS_WORKSPACE_MIB
 * overrides (0: cuBLAS's default pool). A larger workspace lets cuBLAS's
 * heuristics pick split-K kernels for large products.
 */
#include "cuda_common.cuh"
#include "ld_elementwise_math.h"

#include <cublas_v2.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* cublasGemmEx as the library exports it (C++ adds an inline overload with
   a cudaDataType compute type, so decltype cannot name it) */
typedef cublasStatus_t (*gemm_ex_fn)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                     const void *, const void *, cudaDataType, int, const void *, cudaDataType, int,
                                     const void *, void *, cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);

static struct {
    pthread_once_t once;
    int ok;
    char why[300];
    decltype(&cublasCreate_v2) create;
    decltype(&cublasDestroy_v2) destroy;
    decltype(&cublasSetStream_v2) set_stream;
    decltype(&cublasSetMathMode) set_math_mode;
    decltype(&cublasSetWorkspace_v2) set_workspace;
    decltype(&cublasSgemm_v2) sgemm;
    decltype(&cublasGetStatusString) status_string;
    gemm_ex_fn gemm_ex;
} blas = {PTHREAD_ONCE_INIT, 0, "", 0, 0, 0, 0, 0, 0, 0, 0};

const char *const cu_blas_libs[3] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so"};

static void blas_open(void) {
    const cu_sym syms[] = {
        {(void **)&blas.create, "cublasCreate_v2"},    {(void **)&blas.destroy, "cublasDestroy_v2"},
        {(void **)&blas.set_stream, "cublasSetStream_v2"}, {(void **)&blas.set_math_mode, "cublasSetMathMode"},
        {(void **)&blas.sgemm, "cublasSgemm_v2"},      {(void **)&blas.status_string, "cublasGetStatusString"},
        {(void **)&blas.gemm_ex, "cublasGemmEx"},      {(void **)&blas.set_workspace, "cublasSetWorkspace_v2"},
    };
    blas.ok = cu_open_library("cuBLAS", cu_blas_libs, 3, syms, 8, blas.why, sizeof blas.why);
}

int cu_blas_failed(cu_dev *cd, const char *call, int st, const char *what) {
    char msg[400];
    snprintf(msg, sizeof msg, "%s: %s%s failed: %s (cuBLAS status %d)", cd->dev->name, call, what,
             blas.status_string ? blas.status_string((cublasStatus_t)st) : "", st);
    return cu_record_msg(cd, msg);
}

/* The workspace a handle of cd gets: LDIST_CUBLAS_WORKSPACE_MIB, else 32 MiB
   from compute capability 9 (Hopper) on and 4 MiB before, as NVIDIA
   recommends (cublasSetWorkspace) and PyTorch does. */
static size_t workspace_bytes(cu_dev *cd) {
    const char *env = getenv("LDIST_CUBLAS_WORKSPACE_MIB");
    if (env && *env) {
        long mib = strtol(env, NULL, 10);
        return mib > 0 && mib <= 4096 ? (size_t)mib << 20 : 0;
    }
    int major = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, cd->ordinal) != cudaSuccess) {
        cudaGetLastError();
        major = 0;
    }
    return (size_t)(major >= 9 ? 32 : 4) << 20;
}

/* Give h a workspace of its own (cd->blas_ws); without memory for it, h keeps
   cuBLAS's default pool. 0, or the failed call recorded. */
static int workspace_set(cu_dev *cd, cublasHandle_t h, void **ws, size_t *bytes) {
    *ws = NULL;
    *bytes = workspace_bytes(cd);
    if (!*bytes) return 0;
    *ws = cu_scratch(cd, *bytes);
    if (!*ws) { *bytes = 0; return 0; }   /* out of memory now: the default pool does */
    cublasStatus_t st = blas.set_workspace(h, *ws, *bytes);
    if (st == CUBLAS_STATUS_SUCCESS) return 0;
    cu_scratch_free(cd, *ws, *bytes);
    *ws = NULL;
    *bytes = 0;
    return cu_blas_failed(cd, "cublasSetWorkspace_v2", st, "");
}

/* The device's handle, made on first use, bound to its stream with its own
   workspace (cuda_common.cuh). */
void *cu_blas_handle(cu_dev *cd, const char *use) {
    void *made = __atomic_load_n(&cd->blas, __ATOMIC_ACQUIRE);   /* published below, under cd->mu */
    if (made) return made;
    pthread_once(&blas.once, blas_open);
    if (!blas.ok) {
        char msg[400];
        snprintf(msg, sizeof msg, "%s: %s need cuBLAS: %.300s", cd->dev->name, use, blas.why);
        cu_record_msg(cd, msg);
        return NULL;
    }
    pthread_mutex_lock(&cd->mu);
    cublasHandle_t h = (cublasHandle_t)cd->blas;
    pthread_mutex_unlock(&cd->mu);
    if (h) return h;
    cublasStatus_t st = blas.create(&h);
    if (st != CUBLAS_STATUS_SUCCESS) { cu_blas_failed(cd, "cublasCreate_v2", st, ""); return NULL; }
    st = blas.set_stream(h, cd->stream);
    if (st != CUBLAS_STATUS_SUCCESS) { cu_blas_failed(cd, "cublasSetStream_v2", st, ""); blas.destroy(h); return NULL; }
    const char *tf32 = getenv("LDIST_CUDA_TF32");
    /* half results are float32 sums rounded once, as on the CPU: split-K
       kernels may not reduce their partial sums in the half output type */
    cublasMath_t mode = (cublasMath_t)((tf32 && !strcmp(tf32, "1") ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH) |
                                       CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
    st = blas.set_math_mode(h, mode);
    if (st != CUBLAS_STATUS_SUCCESS) { cu_blas_failed(cd, "cublasSetMathMode", st, ""); blas.destroy(h); return NULL; }
    void *ws;
    size_t ws_bytes;
    if (workspace_set(cd, h, &ws, &ws_bytes)) { blas.destroy(h); return NULL; }
    pthread_mutex_lock(&cd->mu);
    if (cd->blas) {   /* another thread (or file) was quicker */
        pthread_mutex_unlock(&cd->mu);
        blas.destroy(h);
        if (ws) cu_scratch_free(cd, ws, ws_bytes);   /* stream-ordered: nothing ran on it */
        return cd->blas;
    }
    __atomic_store_n(&cd->blas, (void *)h, __ATOMIC_RELEASE);
    cd->blas_ws = ws;
    cd->blas_ws_bytes = ws_bytes;
    pthread_mutex_unlock(&cd->mu);
    return h;
}

/* C = beta * C for the k = 0 product (beta = 0 writes zeros, NaN or not) */
__global__ void k_scale_rows(float *c, int64_t m, int64_t n, int64_t ldc, float beta) {
    CU_LOOP(i, m * n) {
        int64_t r = i / n, j = i - r * n;
        float *p = c + r * ldc + j;
        *p = beta == 0 ? 0.0f : beta * *p;
    }
}

/* What cu_gemm and cu_gemm_half share before the call: the device, the
   k = 0 product (C = beta * C; a half C, beta 0: zeros), the int range
   cuBLAS takes, the handle. NULL when nothing is left to do (done, or an
   error recorded); `what` names the product in messages. */
static cublasHandle_t gemm_begin(ld_device *d, cu_dev **cdp, const char *call, const char *kind, int64_t m,
                                 int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc, float beta, void *c,
                                 ld_dtype cdt, char *what, size_t what_n) {
    if (m <= 0 || n <= 0) return NULL;
    cu_dev *cd = *cdp = cu_begin(d);
    if (!cd) return NULL;
    if (k <= 0 && cdt == LD_F32) {
        k_scale_rows<<<cu_grid(m * n, 256), 256, 0, cd->stream>>>((float *)c, m, n, ldc, beta);
        cu_launched(cd, "gemm kernel (k = 0)");
        return NULL;
    }
    if (k <= 0) {   /* 16-bit zeros are +0.0 in float16 and bfloat16 */
        cudaError_t e = cudaMemset2DAsync(c, (size_t)ldc * 2, 0, (size_t)n * 2, (size_t)m, cd->stream);
        if (e != cudaSuccess) cu_record(cd, "cudaMemset2DAsync (gemm, k = 0)", e);
        return NULL;
    }
    snprintf(what, what_n, " (gemm %lldx%lldx%lld%s)", (long long)m, (long long)n, (long long)k, kind);
    if (m > INT_MAX || n > INT_MAX || k > INT_MAX || lda > INT_MAX || ldb > INT_MAX || ldc > INT_MAX) {
        char msg[200];
        snprintf(msg, sizeof msg, "%s: %s%s: a dimension exceeds 2^31-1", d->name, call, what);
        cu_record_msg(cd, msg);
        return NULL;
    }
    return (cublasHandle_t)cu_blas_handle(cd, "matrix products");
}

void cu_gemm(ld_device *d, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
             int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    cu_dev *cd = NULL;
    char what[96];
    cublasHandle_t h = gemm_begin(d, &cd, "cublasSgemm_v2", "", m, n, k, lda, ldb, ldc, beta, c, LD_F32, what,
                                  sizeof what);
    if (!h) return;
    cublasStatus_t st = blas.sgemm(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)n,
                                   (int)m, (int)k, &alpha, b, (int)ldb, a, (int)lda, &beta, c, (int)ldc);
    if (st != CUBLAS_STATUS_SUCCESS) cu_blas_failed(cd, "cublasSgemm_v2", st, what);
}

/* bias_relu (ld_kernels.h): x + bias (a half bias rounded to T first), relu,
   rounded once to T; rows over the grid's y, columns over its x, so a
   value's column needs no 64-bit division (the bench transformer's FFN bias:
   16M values). Dense's forward on float32 is the product then this pass
   over C (each sum rounded, then the bias added, as the CPU does);
   cuBLASLt's RELU_BIAS epilogue would save that pass: for when a GPU can
   time it. */
template <typename T, typename B>
__global__ void k_bias_relu(T *y, const T *x, const B *bias, int64_t rows, int64_t n, int relu) {
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y)
        for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < n; j += (int64_t)blockDim.x * gridDim.x) {
            int64_t i = r * n + j;
            float v = cu_get(x[i]);
            if (bias) v += cu_get(cu_put<T>(cu_get(bias[j])));
            y[i] = cu_put<T>(relu ? ld_ew_relu(v) : v);
        }
}

void cu_bias_relu(ld_device *d, ld_dtype dt, void *y, const void *x, const void *bias, ld_dtype bdt, int64_t rows,
                  int64_t n, int relu) {
    if (rows <= 0 || n <= 0) return;
    cu_dev *cd = cu_begin(d);
    if (!cd) return;
    unsigned gx = cu_grid(n, 256), gy = (unsigned)(rows < 65535 ? rows : 65535);
    if (gx > 64) gx = 64;   /* a long row: each thread loops over its columns */
    dim3 grid(gx, gy);
    CU_FLOAT_TYPES(dt, T, {
        if (bdt == LD_F32 || !bias)
            k_bias_relu<T, float><<<grid, 256, 0, cd->stream>>>((T *)y, (const T *)x, (const float *)bias, rows, n, relu);
        else
            k_bias_relu<T, T><<<grid, 256, 0, cd->stream>>>((T *)y, (const T *)x, (const T *)bias, rows, n, relu);
    });
    cu_launched(cd, "bias/relu kernel");
}

void cu_gemm_bias(ld_device *d, int64_t m, int64_t n, int64_t k, const float *a, const float *b, const float *bias,
                  int relu, float *c) {
    if (m <= 0 || n <= 0) return;
    cu_gemm(d, 0, 0, m, n, k, 1.0f, a, k < 1 ? 1 : k, b, n, 0.0f, c, n);
    if (bias || relu) cu_bias_relu(d, LD_F32, c, c, bias, LD_F32, m, n, relu);
}

/* Half operands, a float32 or half C: cublasGemmEx with float32 compute (the
   tensor cores' bf16/fp16 products with fp32 accumulation, a half C rounded
   once), laid out as cu_gemm. */
void cu_gemm_half(ld_device *d, int ta, int tb, int64_t m, int64_t n, int64_t k, ld_dtype dt, const void *a,
                  int64_t lda, const void *b, int64_t ldb, ld_dtype cdt, void *c, int64_t ldc) {
    cu_dev *cd = NULL;
    char what[96];
    cublasHandle_t h = gemm_begin(d, &cd, "cublasGemmEx", dt == LD_BF16 ? ", bfloat16" : ", float16", m, n, k, lda,
                                  ldb, ldc, 0.0f, c, cdt, what, sizeof what);
    if (!h) return;
    cudaDataType_t in = dt == LD_BF16 ? CUDA_R_16BF : CUDA_R_16F, out = cdt == LD_F32 ? CUDA_R_32F : in;
    const float alpha = 1.0f, beta = 0.0f;
    cublasStatus_t st = blas.gemm_ex(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)n, (int)m,
                                     (int)k, &alpha, b, in, (int)ldb, a, in, (int)lda, &beta, c, out, (int)ldc,
                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS) cu_blas_failed(cd, "cublasGemmEx", st, what);
}
