/*
 * fake_cublas.cpp - build/cuda_emu/lib/libcublas.so.13 for the CPU emulator
 * (tests/cuda_emu): exactly the cuBLAS entry points engine/cuda/ resolves
 * with dlsym, on host memory (the emulated GPU's memory is host memory).
 *
 * Column-major as cuBLAS. The arguments are checked as cuBLAS checks them
 * (CUBLAS_STATUS_INVALID_VALUE for m, n, k < 0, lda < max(1, rows of op(A)),
 * ldb, ldc likewise, a batch count < 0; CUBLAS_STATUS_NOT_SUPPORTED for a
 * type combination cublasGemmEx does not offer), and each refusal is
 * printed on stderr as a "cuda_emu: cublas: ..." line. float32 products go
 * to OpenBLAS's sgemm; float16 and bfloat16 operands are widened exactly
 * (engine/ld_half.h), multiplied in float32 and a half C rounded once, as
 * cuBLAS's CUBLAS_COMPUTE_32F does. beta = 0 never reads C (it may hold
 * NaN), as in cuBLAS.
 */
#include <cublas_v2.h>

#include <cblas.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "ld_half.h"

#define API extern "C" __attribute__((visibility("default")))

/* CUEMU_TRACE and CUEMU_SAMPLE as in cuemu_runtime.cpp: one trace line per
 * product ("gemm TYPE ta tb m n k batch"); under CUEMU_SAMPLE the product is
 * not computed. Returns 1 when the product is to be skipped. */
static int trace_gemm(const char *type, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, int batch) {
    static int opened, sample = -1;
    static FILE *f;
    if (!opened) {
        opened = 1;
        const char *path = getenv("CUEMU_TRACE");
        if (path && *path && (f = fopen(path, "a"))) setvbuf(f, NULL, _IOLBF, 0);
    }
    if (sample < 0) {
        const char *e = getenv("CUEMU_SAMPLE");
        sample = e && *e && strcmp(e, "0") != 0;
    }
    if (f)
        fprintf(f, "gemm\t%s\t%c%c\t%d\t%d\t%d\t%d\n", type, ta == CUBLAS_OP_N ? 'N' : 'T',
                tb == CUBLAS_OP_N ? 'N' : 'T', m, n, k, batch);
    return sample;
}

struct cublasContext {
    unsigned magic;
    cudaStream_t stream;
    int math;
    void *ws;
    size_t ws_bytes;
};
#define MAGIC 0xC0B1A5u

static cublasStatus_t refuse(cublasStatus_t st, const char *call, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static cublasStatus_t refuse(cublasStatus_t st, const char *call, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "cuda_emu: cublas: %s: %s -> %s\n", call, msg, cublasGetStatusString(st));
    const char *log = getenv("CUEMU_LOG");
    if (log && *log) {
        FILE *f = fopen(log, "a");
        if (f) {
            fprintf(f, "cuda_emu: cublas: %s: %s -> %s\n", call, msg, cublasGetStatusString(st));
            fclose(f);
        }
    }
    return st;
}

API const char *cublasGetStatusString(cublasStatus_t st) {
    switch (st) {
    case CUBLAS_STATUS_SUCCESS: return "the operation completed successfully";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR: return "error detected trying to check the license";
    default: return "unknown cuBLAS status";
    }
}

static int bad(cublasHandle_t h) { return !h || h->magic != MAGIC; }

API cublasStatus_t cublasCreate_v2(cublasHandle_t *h) {
    if (!h) return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasCreate_v2", "handle pointer is NULL");
    *h = new cublasContext{MAGIC, NULL, 0, NULL, 0};
    return CUBLAS_STATUS_SUCCESS;
}
API cublasStatus_t cublasDestroy_v2(cublasHandle_t h) {
    if (bad(h)) return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasDestroy_v2", "not a handle");
    h->magic = 0;
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}
API cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s) {
    if (bad(h)) return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasSetStream_v2", "not a handle");
    h->stream = s;
    h->ws = NULL;   /* cuBLAS resets the workspace to its default pool */
    h->ws_bytes = 0;
    return CUBLAS_STATUS_SUCCESS;
}
API cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode) {
    if (bad(h)) return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasSetMathMode", "not a handle");
    int base = (int)mode & ~(int)CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
    if (base < 0 || base > 3) return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasSetMathMode", "mode %d", (int)mode);
    h->math = (int)mode;
    return CUBLAS_STATUS_SUCCESS;
}
API cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t h, void *ws, size_t bytes) {
    if (bad(h)) return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasSetWorkspace_v2", "not a handle");
    if (bytes && !ws) return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasSetWorkspace_v2", "NULL workspace of %zu bytes", bytes);
    if (((uintptr_t)ws & 255) != 0)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasSetWorkspace_v2", "workspace %p not 256-byte aligned", ws);
    h->ws = ws;
    h->ws_bytes = bytes;
    return CUBLAS_STATUS_SUCCESS;
}

/* ---- the checks cuBLAS makes ---- */
static cublasStatus_t check_dims(const char *call, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                 int lda, int ldb, int ldc) {
    if (ta < CUBLAS_OP_N || ta > CUBLAS_OP_C || tb < CUBLAS_OP_N || tb > CUBLAS_OP_C)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "transa %d, transb %d", (int)ta, (int)tb);
    if (m < 0 || n < 0 || k < 0) return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "m %d, n %d, k %d", m, n, k);
    int ra = ta == CUBLAS_OP_N ? m : k, rb = tb == CUBLAS_OP_N ? k : n;
    if (lda < (ra > 1 ? ra : 1))
        return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "lda %d < %d (m %d, n %d, k %d, transa %d)", lda,
                      ra > 1 ? ra : 1, m, n, k, (int)ta);
    if (ldb < (rb > 1 ? rb : 1))
        return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "ldb %d < %d (m %d, n %d, k %d, transb %d)", ldb,
                      rb > 1 ? rb : 1, m, n, k, (int)tb);
    if (ldc < (m > 1 ? m : 1))
        return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "ldc %d < %d (m %d, n %d, k %d)", ldc, m > 1 ? m : 1, m, n, k);
    return CUBLAS_STATUS_SUCCESS;
}

static CBLAS_TRANSPOSE tr(cublasOperation_t t) { return t == CUBLAS_OP_N ? CblasNoTrans : CblasTrans; }

/* C = alpha op(A) op(B) + beta C, float32, column-major; beta = 0 does not read C */
static void sgemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha, const float *A,
                  int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    if (m == 0 || n == 0) return;
    if (beta == 0.0f)
        for (int j = 0; j < n; j++) memset(C + (size_t)j * ldc, 0, sizeof(float) * (size_t)m);
    if (k == 0 || alpha == 0.0f) {
        if (beta != 0.0f && beta != 1.0f)
            for (int j = 0; j < n; j++)
                for (int i = 0; i < m; i++) C[(size_t)j * ldc + i] *= beta;
        return;
    }
    cblas_sgemm(CblasColMajor, tr(ta), tr(tb), m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

API cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                  const float *alpha, const float *A, int lda, const float *B, int ldb,
                                  const float *beta, float *C, int ldc) {
    if (bad(h)) return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasSgemm_v2", "not a handle");
    cublasStatus_t st = check_dims("cublasSgemm_v2", ta, tb, m, n, k, lda, ldb, ldc);
    if (st) return st;
    if (!alpha || !beta) return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasSgemm_v2", "alpha or beta is NULL");
    if (trace_gemm((h->math & 15) == CUBLAS_TF32_TENSOR_OP_MATH ? "f32-tf32" : "f32", ta, tb, m, n, k, 1)) return CUBLAS_STATUS_SUCCESS;
    sgemm(ta, tb, m, n, k, *alpha, A, lda, B, ldb, *beta, C, ldc);
    return CUBLAS_STATUS_SUCCESS;
}

API cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                                             int n, int k, const float *alpha, const float *A, int lda,
                                             long long sa, const float *B, int ldb, long long sb, const float *beta,
                                             float *C, int ldc, long long sc, int batch) {
    const char *call = "cublasSgemmStridedBatched";
    if (bad(h)) return refuse(CUBLAS_STATUS_NOT_INITIALIZED, call, "not a handle");
    cublasStatus_t st = check_dims(call, ta, tb, m, n, k, lda, ldb, ldc);
    if (st) return st;
    if (batch < 0) return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "batchCount %d", batch);
    if (!alpha || !beta) return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "alpha or beta is NULL");
    if (trace_gemm((h->math & 15) == CUBLAS_TF32_TENSOR_OP_MATH ? "f32-tf32" : "f32", ta, tb, m, n, k, batch)) return CUBLAS_STATUS_SUCCESS;
    for (int i = 0; i < batch; i++)
        sgemm(ta, tb, m, n, k, *alpha, A + i * sa, lda, B + i * sb, ldb, *beta, C + i * sc, ldc);
    return CUBLAS_STATUS_SUCCESS;
}

/* ---- mixed precision ---- */
static int type_size(cudaDataType t) { return t == CUDA_R_32F ? 4 : (t == CUDA_R_16F || t == CUDA_R_16BF) ? 2 : 0; }
static float get(cudaDataType t, const void *p, size_t i) {
    if (t == CUDA_R_32F) return ((const float *)p)[i];
    uint16_t b = ((const uint16_t *)p)[i];
    return t == CUDA_R_16F ? ld_f16_to_f32(b) : ld_bf16_to_f32(b);
}
static void put(cudaDataType t, void *p, size_t i, float v) {
    if (t == CUDA_R_32F) ((float *)p)[i] = v;
    else ((uint16_t *)p)[i] = t == CUDA_R_16F ? ld_f32_to_f16(v) : ld_f32_to_bf16(v);
}
static const char *type_name(cudaDataType t) {
    switch (t) {
    case CUDA_R_32F: return "CUDA_R_32F";
    case CUDA_R_16F: return "CUDA_R_16F";
    case CUDA_R_16BF: return "CUDA_R_16BF";
    default: return "another type";
    }
}

/* the combinations of cublasGemmEx with CUBLAS_COMPUTE_32F (cuBLAS documentation,
   "cublasGemmEx"): A = B in {16F, 16BF, 32F}; C = A's type or 32F; 32F only with 32F */
static cublasStatus_t check_types(const char *call, cudaDataType at, cudaDataType bt, cudaDataType ct,
                                  cublasComputeType_t comp) {
    if (comp != CUBLAS_COMPUTE_32F && comp != CUBLAS_COMPUTE_32F_PEDANTIC && comp != CUBLAS_COMPUTE_32F_FAST_16F &&
        comp != CUBLAS_COMPUTE_32F_FAST_16BF && comp != CUBLAS_COMPUTE_32F_FAST_TF32)
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call, "compute type %d (the emulator has the 32F ones)", (int)comp);
    if (!type_size(at) || at != bt || (ct != at && ct != CUDA_R_32F))
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call, "A %s, B %s, C %s", type_name(at), type_name(bt),
                      type_name(ct));
    return CUBLAS_STATUS_SUCCESS;
}

/* one product: the operands widened to float32 (exact), OpenBLAS, C rounded once */
static void gemm_mixed(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha, const void *A,
                       cudaDataType at, int lda, const void *B, cudaDataType bt, int ldb, float beta, void *C,
                       cudaDataType ct, int ldc) {
    if (m == 0 || n == 0) return;
    int ca = ta == CUBLAS_OP_N ? k : m, cb = tb == CUBLAS_OP_N ? n : k;   /* columns stored */
    int ra = ta == CUBLAS_OP_N ? m : k, rb = tb == CUBLAS_OP_N ? k : n;   /* rows read */
    std::vector<float> a((size_t)lda * (ca > 0 ? ca : 1), 0.0f), b((size_t)ldb * (cb > 0 ? cb : 1), 0.0f),
        c((size_t)m * n, 0.0f);
    for (int j = 0; j < ca; j++)
        for (int i = 0; i < ra; i++) a[(size_t)j * lda + i] = get(at, A, (size_t)j * lda + i);
    for (int j = 0; j < cb; j++)
        for (int i = 0; i < rb; i++) b[(size_t)j * ldb + i] = get(bt, B, (size_t)j * ldb + i);
    if (k > 0) sgemm(ta, tb, m, n, k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, c.data(), m);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            float v = alpha * c[(size_t)j * m + i];
            if (beta != 0.0f) v += beta * get(ct, C, (size_t)j * ldc + i);
            put(ct, C, (size_t)j * ldc + i, v);
        }
}

API cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                const void *alpha, const void *A, cudaDataType at, int lda, const void *B,
                                cudaDataType bt, int ldb, const void *beta, void *C, cudaDataType ct, int ldc,
                                cublasComputeType_t comp, cublasGemmAlgo_t algo) {
    const char *call = "cublasGemmEx";
    (void)algo;
    if (bad(h)) return refuse(CUBLAS_STATUS_NOT_INITIALIZED, call, "not a handle");
    cublasStatus_t st = check_dims(call, ta, tb, m, n, k, lda, ldb, ldc);
    if (!st) st = check_types(call, at, bt, ct, comp);
    if (st) return st;
    if (!alpha || !beta) return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "alpha or beta is NULL");
    if (trace_gemm(type_name(at), ta, tb, m, n, k, 1)) return CUBLAS_STATUS_SUCCESS;
    gemm_mixed(ta, tb, m, n, k, *(const float *)alpha, A, at, lda, B, bt, ldb, *(const float *)beta, C, ct, ldc);
    return CUBLAS_STATUS_SUCCESS;
}

API cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                                              int n, int k, const void *alpha, const void *A, cudaDataType at,
                                              int lda, long long sa, const void *B, cudaDataType bt, int ldb,
                                              long long sb, const void *beta, void *C, cudaDataType ct, int ldc,
                                              long long sc, int batch, cublasComputeType_t comp,
                                              cublasGemmAlgo_t algo) {
    const char *call = "cublasGemmStridedBatchedEx";
    (void)algo;
    if (bad(h)) return refuse(CUBLAS_STATUS_NOT_INITIALIZED, call, "not a handle");
    cublasStatus_t st = check_dims(call, ta, tb, m, n, k, lda, ldb, ldc);
    if (!st) st = check_types(call, at, bt, ct, comp);
    if (st) return st;
    if (batch < 0) return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "batchCount %d", batch);
    if (!alpha || !beta) return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "alpha or beta is NULL");
    if (trace_gemm(type_name(at), ta, tb, m, n, k, batch)) return CUBLAS_STATUS_SUCCESS;
    int as = type_size(at), bs = type_size(bt), cs = type_size(ct);
    for (int i = 0; i < batch; i++)
        gemm_mixed(ta, tb, m, n, k, *(const float *)alpha, (const char *)A + i * sa * as, at, lda,
                   (const char *)B + i * sb * bs, bt, ldb, *(const float *)beta, (char *)C + i * sc * cs, ct, ldc);
    return CUBLAS_STATUS_SUCCESS;
}
