/*
 * ld_device.h - devices and their executors.
 *
 * Each device owns memory and a table of kernels (its backend). Tensor ops in
 * ld_ops.c check shapes and dtypes, then call the kernels of the device their
 * operands live on; the layers never call a kernel directly. A new device
 * kind (CUDA, a logical CPU device with its own thread) fills one
 * ld_backend and registers it: no layer, loss or optimizer changes.
 *
 * The kernels and what each computes are listed once, in ld_kernels.h.
 */
#ifndef LD_DEVICE_H
#define LD_DEVICE_H

#include "ld_tensor.h"
#include "ld_kernels.h"

/* LD_DEV_SIM: sim:0, which only tests make (LDIST_SIM_DEVICE=1): the CPU's
   kernels on memory the engine treats as a GPU's, which the host may not
   read or write (ld_tensor_data refuses it); so an op that takes a host
   pointer of a device tensor fails on this machine as it would on a GPU. */
typedef enum { LD_DEV_CPU = 0, LD_DEV_CUDA, LD_DEV_SIM } ld_device_kind;

typedef enum { LD_BINARY_OPS(LD_BIN_ENUM) LD_BIN_COUNT } ld_binary_op;
typedef enum { LD_UNARY_OPS(LD_UN_ENUM) LD_UN_COUNT } ld_unary_op;
typedef enum { LD_RED_SUM = 0, LD_RED_MAX, LD_RED_ARGMAX } ld_reduce_op;
/* the scan kernel's running operation (tf.math.cumsum, tf.math.cumprod) */
typedef enum { LD_SCAN_SUM = 0, LD_SCAN_PROD } ld_scan_op;

typedef struct ld_backend {
    const char *name;
    /* memory */
    void *(*alloc)(ld_device *d, size_t nbytes);              /* NULL on failure (error set) */
    void (*free)(ld_device *d, void *p, size_t nbytes);
    int (*to_host)(ld_device *d, void *host, const void *src, size_t nbytes);
    int (*from_host)(ld_device *d, void *dst, const void *host, size_t nbytes);
    void (*synchronize)(ld_device *d);
    /* Reading without draining the queue (optional: NULL, and the read waits
       for the device, as to_host does). read_begin queues a copy of nbytes
       at src for the host, behind the kernels queued so far, and returns a
       handle (NULL: not this time, too large or no slot free; nothing is
       set, the caller reads with to_host). read_end waits for that copy
       alone, writes the bytes to host and frees the handle; report: return
       the error a queued kernel left, as to_host does (0: leave it for the
       next read, LD_OK returned). A training step reads its loss this way,
       so the optimizer's kernels are queued while the GPU still runs the
       backward pass, not after it drained. */
    void *(*read_begin)(ld_device *d, const void *src, size_t nbytes);
    int (*read_end)(ld_device *d, void *handle, void *host, size_t nbytes, int report);
    /* the kernels, one slot each (ld_kernels.h) */
    LD_KERNELS(LD_K_SLOT)
} ld_backend;

struct ld_device {
    ld_device_kind kind;
    int index;
    char name[32];              /* "cpu:0", "cuda:1" */
    const ld_backend *backend;
    size_t bytes_in_use, bytes_peak;
    int threads;                /* BLAS / kernel threads this device's executor uses */
    void *impl;                 /* backend private */
    size_t alloc_retries;       /* allocations that failed, ran the pressure hook and were retried */
};

/* ---- the registry (ld_device.c) ---- */
ld_device *ld_device_cpu(void);                 /* cpu:0, always present */
ld_device *ld_device_find(const char *name);    /* NULL + error when unknown */
int ld_device_count(void);
ld_device *ld_device_at(int i);
int ld_device_register(ld_device *d);           /* for backends */
/* Is d's memory host memory, which the CPU reads and writes with plain loads
   and stores (cpu:0 and the logical CPU devices), rather than memory only
   its backend's copies reach (a GPU's)? Which kernels run it is another
   question: d->backend. */
static inline int ld_device_is_host(const ld_device *d) { return d->kind == LD_DEV_CPU; }
/* One line about GPUs: why there is none ("no CUDA driver: libcuda.so.1 not
   found"), or which ones answered. The CUDA plugin (engine/cuda/) is loaded
   the first time devices are listed or looked up. */
const char *ld_device_note(void);
const ld_backend *ld_cpu_backend(void);
/* LD_OK when d can multiply matrices; on a CPU device that needs a BLAS
   library, opened on the first call: without one, the error naming it. */
int ld_check_gemm(const ld_device *d);
extern const ld_backend ld_cpu_kernels;         /* the same table (ld_cpu.c), for static initialisers */
/* Allocate on a device: retries once after the pressure hook; NULL + message. */
void *ld_device_alloc(ld_device *d, size_t nbytes);
void ld_device_free(ld_device *d, void *p, size_t nbytes);
/* The CPU's threads and how the cores are shared out: ld_pool.h. */
/* The instruction set of the CPU kernels with several versions (small
   products, convolutions; ld_cpu_isa.c): the best this processor has, or
   less if LDIST_CPU_ISA=avx2|generic says so. */
enum { LD_ISA_GENERIC, LD_ISA_AVX2, LD_ISA_AVX512 };
int ld_cpu_isa(void);
/* Denormal floats flushed to zero in CPU kernels (x86's FTZ and DAZ), as
   TensorFlow's kernel threads run: a subnormal result becomes 0 and a
   subnormal input counts as 0. Without it, Adam's first moment of a weight
   whose gradient stays 0 (a Fashion-MNIST border pixel's) decays into the
   subnormal range after some 700 steps and every update of it then takes a
   microcode assist: a fit ran 25% slower from then on, a parameter server's
   updates 10x slower. The pools' and executors' threads flush for good
   (ld_cpu_flush_denormals); the front end's thread, whose Lua arithmetic
   stays IEEE, flushes only while it runs a kernel or its part of one
   (ld_cpu_fp_enter / ld_cpu_fp_leave around cpu:0's inline kernels and
   ld_cpu_parallel). LDIST_DENORMALS=keep turns it off (read once). */
int ld_cpu_flush_wanted(void);
int ld_cpu_flush_denormals(void);          /* this thread for good; 1 when on */
unsigned ld_cpu_fp_enter(void);            /* flush until ld_cpu_fp_leave(the value returned) */
void ld_cpu_fp_leave(unsigned saved);
int ld_cpu_daz_on(void);                   /* this thread's float32 arithmetic reads subnormals as 0 now */
const char *ld_cpu_isa_name(void);   /* "avx512", "avx2", "generic" */
/* The BLAS library behind CPU products and its kernels ("OpenBLAS 0.3.21 ...;
   SkylakeX kernels (...)"), or why there is none; opens it if not yet open. */
const char *ld_cpu_blas_describe(void);
/* The CPU's bfloat16 product: "avx512_bf16" (vdpbf16ps, chosen by CPUID) or
   "float32" (operands widened; also when LDIST_NO_AVX512_BF16=1). */
const char *ld_cpu_bf16_gemm_describe(void);
/* While on (per thread), the tensors this thread allocates on a logical CPU
   device are outputs of kernels queued to that device, never written from
   the host: they may get a block freed a moment ago whose old kernels are
   still queued (ld_executor.c). Returns the previous setting. */
int ld_alloc_stream_ordered(int on);

#endif
