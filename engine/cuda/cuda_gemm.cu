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
 * LDIST_CUDA_TF32=1 lets cuBLAS use TF32 tensor cores.
 */
#include "cuda_common.cuh"

#include <cublas_v2.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct {
    pthread_once_t once;
    int ok;
    char why[300];
    decltype(&cublasCreate_v2) create;
    decltype(&cublasDestroy_v2) destroy;
    decltype(&cublasSetStream_v2) set_stream;
    decltype(&cublasSetMathMode) set_math_mode;
    decltype(&cublasSgemm_v2) sgemm;
    decltype(&cublasGetStatusString) status_string;
} blas = {PTHREAD_ONCE_INIT, 0, "", 0, 0, 0, 0, 0, 0};

const char *const cu_blas_libs[3] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so"};

static void blas_open(void) {
    const cu_sym syms[] = {
        {(void **)&blas.create, "cublasCreate_v2"},    {(void **)&blas.destroy, "cublasDestroy_v2"},
        {(void **)&blas.set_stream, "cublasSetStream_v2"}, {(void **)&blas.set_math_mode, "cublasSetMathMode"},
        {(void **)&blas.sgemm, "cublasSgemm_v2"},      {(void **)&blas.status_string, "cublasGetStatusString"},
    };
    blas.ok = cu_open_library("cuBLAS", cu_blas_libs, 3, syms, 6, blas.why, sizeof blas.why);
}

int cu_blas_failed(cu_dev *cd, const char *call, int st, const char *what) {
    char msg[400];
    snprintf(msg, sizeof msg, "%s: %s%s failed: %s (cuBLAS status %d)", cd->dev->name, call, what,
             blas.status_string ? blas.status_string((cublasStatus_t)st) : "", st);
    return cu_record_msg(cd, msg);
}

/* The device's handle, made on first use, bound to its stream (cuda_common.cuh). */
void *cu_blas_handle(cu_dev *cd, const char *use) {
    if (cd->blas) return cd->blas;
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
    cublasMath_t mode = tf32 && !strcmp(tf32, "1") ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH;
    st = blas.set_math_mode(h, mode);
    if (st != CUBLAS_STATUS_SUCCESS) { cu_blas_failed(cd, "cublasSetMathMode", st, ""); blas.destroy(h); return NULL; }
    pthread_mutex_lock(&cd->mu);
    if (cd->blas) {   /* another thread (or file) was quicker */
        pthread_mutex_unlock(&cd->mu);
        blas.destroy(h);
        return cd->blas;
    }
    cd->blas = h;
    pthread_mutex_unlock(&cd->mu);
    return h;
}

void cu_blas_destroy(cu_dev *cd) {
    if (cd->blas && blas.destroy) blas.destroy((cublasHandle_t)cd->blas);
    cd->blas = NULL;
}

/* C = beta * C for the k = 0 product (beta = 0 writes zeros, NaN or not) */
__global__ void k_scale_rows(float *c, int64_t m, int64_t n, int64_t ldc, float beta) {
    CU_LOOP(i, m * n) {
        int64_t r = i / n, j = i - r * n;
        float *p = c + r * ldc + j;
        *p = beta == 0 ? 0.0f : beta * *p;
    }
}

void cu_gemm(ld_device *d, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
             int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    if (m <= 0 || n <= 0) return;
    cu_dev *cd = cu_begin(d);
    if (!cd) return;
    if (k <= 0) {
        k_scale_rows<<<cu_grid(m * n, 256), 256, 0, cd->stream>>>(c, m, n, ldc, beta);
        cu_launched(cd, "gemm kernel (k = 0)");
        return;
    }
    char what[96];
    snprintf(what, sizeof what, " (gemm %lldx%lldx%lld)", (long long)m, (long long)n, (long long)k);
    if (m > INT_MAX || n > INT_MAX || k > INT_MAX || lda > INT_MAX || ldb > INT_MAX || ldc > INT_MAX) {
        char msg[200];
        snprintf(msg, sizeof msg, "%s: cublasSgemm_v2%s: a dimension exceeds 2^31-1", d->name, what);
        cu_record_msg(cd, msg);
        return;
    }
    cublasHandle_t h = (cublasHandle_t)cu_blas_handle(cd, "matrix products");
    if (!h) return;
    cublasStatus_t st = blas.sgemm(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)n,
                                   (int)m, (int)k, &alpha, b, (int)ldb, a, (int)lda, &beta, c, (int)ldc);
    if (st != CUBLAS_STATUS_SUCCESS) cu_blas_failed(cd, "cublasSgemm_v2", st, what);
}
