/*
 * cuda_common.cuh - what the plugin's files share: the per-device state, the
 * error reporting, the launch helpers and the scratch allocator.
 *
 * Error model. The backend's kernel slots return nothing (ld_device.h), and
 * kernels run later anyway, so a failed CUDA, cuBLAS or NCCL call is
 * recorded on its device: the message names the device and the call
 * ("cuda:0: cublasSgemm_v2 (gemm 128x512x784) failed: ..."), goes to
 * ld_fail at once, and is kept until the next read of device memory
 * (to_host), which then fails with it. Nothing here aborts.
 *
 * Streams. Each device has one non-blocking stream; every copy, kernel,
 * cuBLAS call and NCCL call of the device is queued on it, so the Lua thread
 * only enqueues, and memory handed back to the caching allocator can be
 * reused at once by later work on the same stream.
 */
#ifndef CUDA_COMMON_CUH
#define CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

extern "C" {
#include "ld_cuda.h"
}
#include "../ld_half.h"

/* One size class of the caching allocator: free blocks of exactly `size` bytes. */
struct cu_bucket {
    size_t size;
    int n, cap;
    void **p;
};

#define CU_STAGE_SLOTS 16
#define CU_STAGE_SLOT ((size_t)1 << 20)    /* bytes */
#define CU_READ_SLOTS 32                   /* reads in flight (a step's loss per replica, metrics) */
#define CU_READ_SLOT 4096                  /* bytes: larger reads wait for the stream */

struct cu_dev {
    int ordinal;                 /* CUDA device number */
    ld_device *dev;              /* the engine's device ("cuda:N") */
    char gpu[96];                /* "NVIDIA H200" */
    size_t total_mem;            /* bytes */
    pthread_mutex_t mu;          /* guards the fields below */
    volatile int ready;          /* stream made */
    cudaStream_t stream;
    void *blas;                  /* cublasHandle_t, made on the first gemm */
    void *blas_ws;               /* its workspace (cublasSetWorkspace), from the caching allocator */
    size_t blas_ws_bytes;
    /* caching allocator */
    cu_bucket *buckets;
    int nb, capb;
    size_t cached;               /* bytes in free blocks */
    size_t held;                 /* bytes taken from cudaMalloc (cached or in use) */
    /* pinned staging slots for small host-to-device copies (cuda_device.cu) */
    char *stage;                 /* CU_STAGE_SLOTS x CU_STAGE_SLOT bytes, cudaHostAlloc'ed; NULL until used */
    cudaEvent_t stage_done[CU_STAGE_SLOTS];   /* recorded after each slot's copy */
    int stage_next, stage_failed;
    /* pinned slots for reads that do not drain the stream (read_begin, cuda_device.cu) */
    char *rd;                    /* CU_READ_SLOTS x CU_READ_SLOT bytes; NULL until used */
    cudaEvent_t rd_done[CU_READ_SLOTS];   /* recorded after each slot's copy */
    unsigned char rd_busy[CU_READ_SLOTS];
    int rd_failed;
    /* the first failure since device memory was last read */
    int has_err;
    char err[400];
};

extern const ld_cuda_host *cu_host;

static inline cu_dev *cu_of(ld_device *d) { return (cu_dev *)d->impl; }

/* Record a failure (ld_fail with the message); returns st. */
ld_status cu_fail(ld_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Record a failed CUDA runtime call on a device, keep it until the next read. */
ld_status cu_record(cu_dev *cd, const char *call, cudaError_t e);
/* Record any other failure on a device (cuBLAS, NCCL): msg is complete. */
ld_status cu_record_msg(cu_dev *cd, const char *msg);
/* A library opened with dlopen on first use (cuBLAS, NCCL), so the plugin
   loads where it is missing: open the first of libs[0..nlibs) that loads
   and resolve every symbol into its slot. 1 on success; else 0, with why
   naming what is missing ("<what> not found: ...", "<what> lacks <symbol>"). */
typedef struct { void **slot; const char *name; } cu_sym;
int cu_open_library(const char *what, const char *const *libs, int nlibs, const cu_sym *syms, int nsyms,
                    char *why, size_t whylen);
/* After a kernel launch: a launch error is recorded under the kernel's name. */
static inline int cu_launched(cu_dev *cd, const char *kernel) {
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? LD_OK : cu_record(cd, kernel, e);
}
/* Make the device current on this thread and its stream ready; NULL when that
   failed (recorded). Every backend entry point starts with it. */
cu_dev *cu_begin(ld_device *d);
/* Device memory for the plugin's own temporaries, from the caching allocator
   (not counted as tensor memory); give it back with cu_scratch_free once the
   kernels using it are queued: stream order keeps it alive long enough. */
void *cu_scratch(cu_dev *cd, size_t nbytes);
void cu_scratch_free(cu_dev *cd, void *p, size_t nbytes);
/* cu_scratch for a kernel that cannot run without it: on failure, records
   "cuda:N: <what>: no memory for <n> bytes of scratch" and returns NULL */
void *cu_scratch_needed(cu_dev *cd, size_t nbytes, const char *what);

static inline int64_t cu_numel(const ld_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}
static inline int cu_is_contiguous(const ld_tensor *t) {
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->strides[i] != s) return 0;
        s *= t->shape[i];
    }
    return 1;
}

/* Bytes per element of a dtype (the plugin does not link the engine's
   ld_dtype_size). */
static inline size_t cu_dtype_size(ld_dtype dt) {
    switch (dt) {
    case LD_F32: case LD_I32: return 4;
    case LD_I64: return 8;
    case LD_F16: case LD_BF16: return 2;
    default: return 1;
    }
}

/* Grid for a grid-stride loop over n items. */
static inline unsigned cu_grid(int64_t n, int block) {
    int64_t g = (n + block - 1) / block;
    if (g > 65536) g = 65536;
    return g < 1 ? 1u : (unsigned)g;
}
/* Threads of a block that reduces one row of `cols` values (softmax, norms,
   cross-entropy): one warp for short rows, up to 512 for long ones. */
static inline int row_threads(int64_t cols) { return cols >= 2048 ? 512 : cols >= 256 ? 128 : 32; }
#define CU_LOOP(i, n) \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)blockDim.x * gridDim.x)

/* ---- the backend's slots: kernel <name> of the list (ld_kernels.h) is
   cu_<name>, one file per family: cuda_copy.cu (copy_strided, fill),
   cuda_elementwise.cu (binary, unary, unary_backward),
   cuda_reduce.cu (reduce), cuda_scan.cu (scan), cuda_gemm.cu (gemm),
   cuda_softmax.cu (softmax, sparse_xent, sparse_xent_backward),
   cuda_conv.cu (im2col, col2im, maxpool, maxpool_backward), cuda_optim.cu
   (the optimizer updates). */
#define CU_DECLARE(name, ...) LD_K_DECLARE(cu_, name, __VA_ARGS__);
LD_KERNELS(CU_DECLARE)
#undef CU_DECLARE
/* cuda_gemm.cu: cuBLAS, opened with dlopen on first use */
extern const char *const cu_blas_libs[3];   /* the names tried, in order */
/* The device's cuBLAS handle (a cublasHandle_t), shared by every file: made
   on first use under cd->mu, bound to the device's stream with a workspace
   of its own, full FP32 unless LDIST_CUDA_TF32=1 (TF32 tensor cores). NULL
   when that failed, recorded
   ("<device>: <use> need cuBLAS: ..." where cuBLAS is missing). */
void *cu_blas_handle(cu_dev *cd, const char *use);
/* Record a failed cuBLAS call (st: its cublasStatus_t); returns what cu_record_msg does. */
int cu_blas_failed(cu_dev *cd, const char *call, int st, const char *what);
/* cuda_nccl.cu */
int cu_all_reduce(int n, ld_device *const *devs, int k, ld_tensor *const *t, int mean);
int cu_nccl_unique_id(unsigned char id[LD_NCCL_ID_BYTES]);
int cu_nccl_comm_init_rank(ld_device *d, const unsigned char id[LD_NCCL_ID_BYTES], int nranks, int rank,
                           void **comm);
int cu_nccl_comm_all_reduce(void *comm, int k, ld_tensor *const *t, int mean);
void cu_nccl_comm_destroy(void *comm);

/* ---- float16 and bfloat16 storage ----
 * They travel as their bits (these wrappers tell the two apart) and convert
 * through ld_half.h, as on the CPU, so both devices give the same bits:
 * cu_get widens to float32 (exact), cu_put<T> rounds once. A kernel
 * templated on its storage type T (float, cu_f16, cu_bf16) computes in
 * float32; CU_FLOAT_TYPES dispatches on an ld_dtype. */
struct cu_f16 { uint16_t b; };
struct cu_bf16 { uint16_t b; };
__device__ __forceinline__ float cu_get(float v) { return v; }
__device__ __forceinline__ float cu_get(cu_f16 v) { return ld_f16_to_f32(v.b); }
__device__ __forceinline__ float cu_get(cu_bf16 v) { return ld_bf16_to_f32(v.b); }
template <typename T> __device__ __forceinline__ T cu_put(float v);
template <> __device__ __forceinline__ float cu_put<float>(float v) { return v; }
template <> __device__ __forceinline__ cu_f16 cu_put<cu_f16>(float v) { return cu_f16{ld_f32_to_f16(v)}; }
template <> __device__ __forceinline__ cu_bf16 cu_put<cu_bf16>(float v) { return cu_bf16{ld_f32_to_bf16(v)}; }
/* run the statement with T the storage type of dt (float32, float16, bfloat16) */
#define CU_FLOAT_TYPES(dt, T, ...)                                 \
    do {                                                           \
        if ((dt) == LD_F16) { typedef cu_f16 T; __VA_ARGS__; }     \
        else if ((dt) == LD_BF16) { typedef cu_bf16 T; __VA_ARGS__; } \
        else { typedef float T; __VA_ARGS__; }                    \
    } while (0)

/* ---- block reductions (blockDim.x a multiple of 32, at most 1024) ---- */
__device__ __forceinline__ double cu_warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float cu_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
/* Sum over the block; every thread gets the result. `sh` holds 32 doubles. */
__device__ __forceinline__ double cu_block_sum(double v, double *sh) {
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = cu_warp_sum(v);
    __syncthreads();                 /* sh may still be read from a previous call */
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0;
    return cu_warp_sum(v);
}
/* Max over the block (NaN-free inputs: callers handle NaN); `sh` holds 32 floats. */
__device__ __forceinline__ float cu_block_max(float v, float *sh) {
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = cu_warp_max(v);
    __syncthreads();
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : -INFINITY;
    return cu_warp_max(v);
}

/* ---- windows over NHWC images (convolution and pooling) ---- */
/* the geometry: input n x h x w x c, kernel kh x kw, stride sh x sw, padding
   ph x pw before, output oh x ow */
struct cu_win_geom {
    int64_t n, h, w, c, kh, kw, sh, sw, ph, pw, oh, ow;
};
/* floor division for a possibly negative numerator, positive d */
__device__ __forceinline__ int64_t cu_fdiv(int64_t a, int64_t d) { return a >= 0 ? a / d : -((-a + d - 1) / d); }
/* The outputs [*lo, *hi] along one axis (o of them, kernel k, stride s)
   whose window covers padded position p (the input index plus the padding):
   i with i*s <= p < i*s + k. */
__device__ __forceinline__ void cu_covering(int64_t p, int64_t k, int64_t s, int64_t o, int64_t *lo, int64_t *hi) {
    int64_t a = cu_fdiv(p - k, s) + 1, b = cu_fdiv(p, s);
    *lo = a < 0 ? 0 : a;
    *hi = b > o - 1 ? o - 1 : b;
}

#endif
