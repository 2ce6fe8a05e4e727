/*
 * ld_device.h - devices and their executors.
 *
 * Each device owns memory and a table of kernels (its backend). Tensor ops in
 * ld_ops.c check shapes and dtypes, then call the kernels of the device their
 * operands live on; the layers never call a kernel directly. A new device
 * kind (CUDA, a logical CPU device with its own thread) fills one
 * ld_backend and registers it: no layer, loss or optimizer changes.
 *
 * Kernels take contiguous float32 buffers unless stated otherwise; sizes are
 * element counts.
 */
#ifndef LD_DEVICE_H
#define LD_DEVICE_H

#include "ld_tensor.h"

typedef enum { LD_DEV_CPU = 0, LD_DEV_CUDA } ld_device_kind;

/* Elementwise binary ops (with broadcasting at the tensor level). */
typedef enum {
    LD_BIN_ADD = 0, LD_BIN_SUB, LD_BIN_MUL, LD_BIN_DIV, LD_BIN_POW,
    LD_BIN_MAX, LD_BIN_MIN, LD_BIN_EQ, LD_BIN_LT, LD_BIN_GT, LD_BIN_COUNT
} ld_binary_op;

typedef enum {
    LD_UN_NEG = 0, LD_UN_EXP, LD_UN_LOG, LD_UN_SQRT, LD_UN_ABS, LD_UN_RELU,
    LD_UN_SIGMOID, LD_UN_TANH, LD_UN_GELU, LD_UN_SQUARE, LD_UN_COUNT
} ld_unary_op;

typedef enum { LD_RED_SUM = 0, LD_RED_MAX, LD_RED_ARGMAX } ld_reduce_op;

typedef struct ld_backend {
    const char *name;
    /* memory */
    void *(*alloc)(ld_device *d, size_t nbytes);              /* NULL on failure (error set) */
    void (*free)(ld_device *d, void *p, size_t nbytes);
    int (*to_host)(ld_device *d, void *host, const void *src, size_t nbytes);
    int (*from_host)(ld_device *d, void *dst, const void *host, size_t nbytes);
    void (*synchronize)(ld_device *d);
    /* Strided copy with dtype conversion: dst is contiguous, src described by
       shape/strides (elements) starting at src (already offset). */
    void (*copy_strided)(ld_device *d, void *dst, ld_dtype ddt, const void *src, ld_dtype sdt,
                         int ndim, const int64_t *shape, const int64_t *sstrides);
    void (*fill)(ld_device *d, void *dst, ld_dtype dt, int64_t n, double v);
    /* out[i] = a[ia] op b[ib] over `shape`; strides of a/b are 0 on broadcast dims;
       out contiguous. All float32. */
    void (*binary)(ld_device *d, ld_binary_op op, float *out, const float *a, const int64_t *sa,
                   const float *b, const int64_t *sb, int ndim, const int64_t *shape);
    void (*unary)(ld_device *d, ld_unary_op op, float *out, const float *x, int64_t n);
    /* dx = dy * f'(x) (y = f(x) also given, for sigmoid/tanh) */
    void (*unary_backward)(ld_device *d, ld_unary_op op, float *dx, const float *dy,
                           const float *x, const float *y, int64_t n);
    void (*scale_add)(ld_device *d, float *y, float a, const float *x, int64_t n); /* y += a*x */
    /* Reduce the middle axis of a contiguous [outer, n, inner] array.
       For LD_RED_ARGMAX `out` holds int64. */
    void (*reduce)(ld_device *d, ld_reduce_op op, void *out, const float *x,
                   int64_t outer, int64_t n, int64_t inner);
    /* Row-major C = alpha * op(A) op(B) + beta * C, op = transpose when ta/tb. */
    void (*gemm)(ld_device *d, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha,
                 const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                 float *c, int64_t ldc);
    /* softmax / log-softmax over the last axis of [rows, cols] */
    void (*softmax)(ld_device *d, float *out, const float *x, int64_t rows, int64_t cols, int log);
    /* im2col / col2im for NHWC images; col is [N*OH*OW, KH*KW*C] */
    void (*im2col)(ld_device *d, float *col, const float *x, int64_t n, int64_t h, int64_t w,
                   int64_t c, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph,
                   int64_t pw, int64_t oh, int64_t ow);
    void (*col2im)(ld_device *d, float *dx, const float *col, int64_t n, int64_t h, int64_t w,
                   int64_t c, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph,
                   int64_t pw, int64_t oh, int64_t ow);
    /* Max pooling NHWC; argmax (int64, flat index into x) saved for backward. */
    void (*maxpool)(ld_device *d, float *y, int64_t *arg, const float *x, int64_t n, int64_t h,
                    int64_t w, int64_t c, int64_t kh, int64_t kw, int64_t sh, int64_t sw,
                    int64_t oh, int64_t ow);
    void (*maxpool_backward)(ld_device *d, float *dx, const float *dy, const int64_t *arg,
                             int64_t ny, int64_t nx);
    /* Fused sparse softmax cross-entropy: probs = softmax(logits);
       *loss = scale * sum_i -log probs[i, labels[i]]  (scale = 1/batch for a mean).
       Out-of-range labels give NaN (the op checks them first on the host). */
    void (*sparse_xent)(ld_device *d, float *loss, float *probs, const float *logits,
                        const int64_t *labels, int64_t n, int64_t c, float scale);
    /* dlogits = (probs - onehot(labels)) * scale * g[0] */
    void (*sparse_xent_backward)(ld_device *d, float *dlogits, const float *probs,
                                 const int64_t *labels, const float *g, int64_t n, int64_t c, float scale);
    /* Optimizer updates, in place (see ld_optim.h for the formulas). */
    void (*sgd_update)(ld_device *d, float *w, float *v, const float *g, int64_t n, float lr,
                       float momentum, int nesterov, float weight_decay);
    void (*adam_update)(ld_device *d, float *w, float *m, float *v, const float *g, int64_t n,
                        float lr, float b1, float b2, float eps, int64_t step,
                        float weight_decay, int decoupled);
    void (*rmsprop_update)(ld_device *d, float *w, float *ms, float *mom, const float *g,
                           int64_t n, float lr, float rho, float momentum, float eps);
} ld_backend;

struct ld_device {
    ld_device_kind kind;
    int index;
    char name[32];              /* "cpu:0", "cuda:1" */
    const ld_backend *backend;
    size_t bytes_in_use, bytes_peak;
    int threads;                /* BLAS / kernel threads this device's executor uses */
    void *impl;                 /* backend private */
};

ld_device *ld_device_cpu(void);                 /* cpu:0, always present */
ld_device *ld_device_find(const char *name);    /* NULL + error when unknown */
int ld_device_count(void);
ld_device *ld_device_at(int i);
int ld_device_register(ld_device *d);           /* for backends */
/* One line about GPUs: why there is none ("no CUDA driver: libcuda.so.1 not
   found"), or which ones answered. The CUDA plugin (engine/cuda/) is loaded
   the first time devices are listed or looked up. */
const char *ld_device_note(void);
const ld_backend *ld_cpu_backend(void);
/* Allocate on a device: retries once after the pressure hook; NULL + message. */
void *ld_device_alloc(ld_device *d, size_t nbytes);
void ld_device_free(ld_device *d, void *p, size_t nbytes);
/* Threads the CPU kernels may use (default: the cores); 1 = single-threaded. */
void ld_cpu_set_threads(int n);
int ld_cpu_threads(void);
int ld_cpu_cores(void);                          /* cores online */
/* Make the calling thread run CPU kernels single-threaded (executor threads). */
void ld_cpu_thread_serial(int on);
/* While on (per thread), the tensors this thread allocates on a logical CPU
   device are outputs of kernels queued to that device, never written from
   the host: they may get a block freed a moment ago whose old kernels are
   still queued (ld_executor.c). Returns the previous setting. */
int ld_alloc_stream_ordered(int on);

#endif
