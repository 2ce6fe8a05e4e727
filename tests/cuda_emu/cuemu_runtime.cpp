/*
 * cuemu_runtime.cpp - the CPU emulator's CUDA runtime (tests/cuda_emu),
 * linked into build/cuda_emu/ldist_cuda.so in place of the static cudart:
 *
 *   - one emulated GPU (sm_90) whose memory is host memory: cudaMalloc is an
 *     aligned malloc filled with 0xff bytes (NaN as float32 and as halves,
 *     -1 as integers: what reused GPU memory holds), every allocation is
 *     remembered so that copies, memsets and kernel pointer arguments outside
 *     device memory are reported;
 *   - streams and events are synchronous: a kernel or copy runs when it is
 *     queued;
 *   - kernels run at the launch (cuemu_launch_kernel): the configuration is
 *     checked as the driver does (block <= 1024 threads, grid limits,
 *     __launch_bounds__, 48 KiB of dynamic shared memory), then every block
 *     runs in turn, its threads as fibers on this one OS thread, switched at
 *     __syncthreads and at the warp shuffles;
 *   - what the GPU leaves undefined is reported on stderr as a line starting
 *     "cuda_emu: " (and appended to $CUEMU_LOG): a deadlock (some threads at
 *     a barrier the others never reach), a shuffle reading a lane that has
 *     exited or does not exist, lanes of one shuffle or one __syncthreads at
 *     different call sites, __syncthreads after some threads of the block
 *     have returned, kernel pointers that are not device memory. A deadlock
 *     ends the launch with cudaErrorLaunchFailure.
 *
 * Environment: CUEMU_ORDER=forward|reverse|random (the order in which the
 * ready threads of a block run between two barriers; default forward),
 * CUEMU_STATS=file (append, at exit, one line per kernel: launches, blocks,
 * threads, seconds), CUEMU_LOG=file (append the diagnostics),
 * CUEMU_STRICT=1 (abort at the first diagnostic),
 * CUEMU_TRACE=file (append one line per launch, copy, memset, allocation and
 * synchronization, in order: the host's calls as a GPU would receive them),
 * CUEMU_SAMPLE=1 (run only the first block of each launch and trace its
 * time: launch configurations and per-block work at full sizes, results
 * meaningless; tests/cuda_emu/trace_report.py reads the trace),
 * CUEMU_SAMPLE=none (run no block: a step's time is then the host's alone).
 */
#include <cuda_runtime.h>

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <map>
#include <string>
#include <vector>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

/* ---- CUEMU_TRACE: one line per host call a GPU would see ---- */
static FILE *trace_file(void) {
    static int opened;
    static FILE *f;
    if (!opened) {
        opened = 1;
        const char *path = getenv("CUEMU_TRACE");
        if (path && *path && (f = fopen(path, "a"))) setvbuf(f, NULL, _IOLBF, 0);
    }
    return f;
}
static void trace(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void trace(const char *fmt, ...) {
    FILE *f = trace_file();
    if (!f) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
}
/* CUEMU_SAMPLE: 0 off, 1 the first block of each launch, 2 ("none") no block at all */
static int sample_mode(void) {
    static int m = -1;
    if (m < 0) {
        const char *e = getenv("CUEMU_SAMPLE");
        m = !e || !*e || !strcmp(e, "0") ? 0 : !strcmp(e, "none") ? 2 : 1;
    }
    return m;
}

extern "C" {
CUEMU_HIDDEN uint3 threadIdx;
CUEMU_HIDDEN uint3 blockIdx;
CUEMU_HIDDEN dim3 blockDim;
CUEMU_HIDDEN dim3 gridDim;
}

/* ================================================================ diagnostics */
static pthread_mutex_t diag_mu = PTHREAD_MUTEX_INITIALIZER;
static std::map<std::string, int> diag_seen;   /* per kernel and kind: reported at most 3 times */
static int strict_mode = -1;
static std::map<std::string, int> diag_kinds;   /* every diagnostic, by kind (the self-test reads them) */

extern "C" CUEMU_HIDDEN int cuemu_diagnostics(const char *kind) {
    pthread_mutex_lock(&diag_mu);
    int n = diag_kinds[kind];
    pthread_mutex_unlock(&diag_mu);
    return n;
}

static void diag(const char *kernel, const char *kind, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void diag(const char *kernel, const char *kind, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&diag_mu);
    std::string key = std::string(kernel ? kernel : "") + "|" + kind;
    int n = ++diag_seen[key];
    diag_kinds[kind]++;
    if (n <= 3) {
        fprintf(stderr, "cuda_emu: %s: %s%s\n", kind, msg, n == 3 ? " (further ones of this kind not shown)" : "");
        const char *log = getenv("CUEMU_LOG");
        if (log && *log) {
            FILE *f = fopen(log, "a");
            if (f) {
                fprintf(f, "cuda_emu: %s: %s\n", kind, msg);
                fclose(f);
            }
        }
    }
    pthread_mutex_unlock(&diag_mu);
    if (strict_mode < 0) {
        const char *s = getenv("CUEMU_STRICT");
        strict_mode = s && !strcmp(s, "1");
    }
    if (strict_mode) abort();
}

/* ================================================================ errors */
static thread_local cudaError_t last_error = cudaSuccess;

static cudaError_t fail(cudaError_t e) {
    if (e != cudaSuccess) last_error = e;
    return e;
}

extern "C" cudaError_t cudaGetLastError(void) {
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}
extern "C" cudaError_t cudaPeekAtLastError(void) { return last_error; }

extern "C" const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError: return "cudaErrorInitializationError";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidPitchValue: return "cudaErrorInvalidPitchValue";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchOutOfResources: return "cudaErrorLaunchOutOfResources";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    default: return "cudaErrorUnknown";
    }
}

extern "C" const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidPitchValue: return "invalid pitch argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorLaunchFailure: return "unspecified launch failure (cuda_emu: see the cuda_emu: lines above)";
    default: return "unknown error";
    }
}

/* ================================================================ the device */
#define EMU_TOTAL_MEM ((size_t)80 << 30)   /* what cudaGetDeviceProperties reports */
#define EMU_NAME "cuda_emu CPU emulation of an sm_90 GPU"
static thread_local int current_device = 0;

extern "C" cudaError_t cudaGetDeviceCount(int *count) {
    if (!count) return fail(cudaErrorInvalidValue);
    *count = 1;
    return cudaSuccess;
}
extern "C" cudaError_t cudaSetDevice(int d) {
    if (d != 0) return fail(cudaErrorInvalidDevice);
    current_device = d;
    return cudaSuccess;
}
extern "C" cudaError_t cudaGetDevice(int *d) {
    if (!d) return fail(cudaErrorInvalidValue);
    *d = current_device;
    return cudaSuccess;
}
extern "C" cudaError_t cudaDriverGetVersion(int *v) {
    if (!v) return fail(cudaErrorInvalidValue);
    *v = 13000;
    return cudaSuccess;
}
extern "C" cudaError_t cudaRuntimeGetVersion(int *v) {
    if (!v) return fail(cudaErrorInvalidValue);
    *v = 13000;
    return cudaSuccess;
}
extern "C" cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d) {
    if (!p) return fail(cudaErrorInvalidValue);
    if (d != 0) return fail(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", EMU_NAME);
    p->totalGlobalMem = EMU_TOTAL_MEM;
    p->sharedMemPerBlock = 48 << 10;
    p->regsPerBlock = 65536;
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    p->maxThreadsDim[0] = 1024;
    p->maxThreadsDim[1] = 1024;
    p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 0x7fffffff;
    p->maxGridSize[1] = 65535;
    p->maxGridSize[2] = 65535;
    p->major = 9;
    p->minor = 0;
    p->multiProcessorCount = 132;
    p->clockRate = 1980000;
    p->memoryBusWidth = 5120;
    p->l2CacheSize = 50 << 20;
    return cudaSuccess;
}
extern "C" cudaError_t cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr a, int d) {
    if (!v) return fail(cudaErrorInvalidValue);
    if (d != 0) return fail(cudaErrorInvalidDevice);
    switch (a) {
    case cudaDevAttrMaxThreadsPerBlock: *v = 1024; break;
    case cudaDevAttrMaxBlockDimX: *v = 1024; break;
    case cudaDevAttrMaxBlockDimY: *v = 1024; break;
    case cudaDevAttrMaxBlockDimZ: *v = 64; break;
    case cudaDevAttrMaxGridDimX: *v = 0x7fffffff; break;
    case cudaDevAttrMaxGridDimY: *v = 65535; break;
    case cudaDevAttrMaxGridDimZ: *v = 65535; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *v = 48 << 10; break;
    case cudaDevAttrWarpSize: *v = 32; break;
    case cudaDevAttrMultiProcessorCount: *v = 132; break;
    case cudaDevAttrComputeCapabilityMajor: *v = 9; break;
    case cudaDevAttrComputeCapabilityMinor: *v = 0; break;
    default: return fail(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}
extern "C" cudaError_t cudaDeviceSynchronize(void) {
    trace("sync\tdevice\n");
    return cudaSuccess;
}

/* ================================================================ memory */
static pthread_mutex_t mem_mu = PTHREAD_MUTEX_INITIALIZER;
static std::map<uintptr_t, size_t> dev_blocks, host_blocks;   /* base -> bytes */
static size_t dev_bytes;

/* the block of `m` holding [p, p + n) (n = 0: p may be its end); 0 if none */
static int find_block(const std::map<uintptr_t, size_t> &m, const void *p, size_t n, uintptr_t *base, size_t *size) {
    uintptr_t a = (uintptr_t)p;
    auto it = m.upper_bound(a);
    if (it == m.begin()) return 0;
    --it;
    if (a < it->first || a - it->first > it->second || n > it->second - (a - it->first)) return 0;
    if (base) *base = it->first;
    if (size) *size = it->second;
    return 1;
}
static int is_device(const void *p, size_t n) {
    pthread_mutex_lock(&mem_mu);
    int r = find_block(dev_blocks, p, n, NULL, NULL);
    pthread_mutex_unlock(&mem_mu);
    return r;
}
static int is_pinned(const void *p, size_t n) {   /* within a cudaHostAlloc block? */
    pthread_mutex_lock(&mem_mu);
    int r = find_block(host_blocks, p, n, NULL, NULL);
    pthread_mutex_unlock(&mem_mu);
    return r;
}
static int touches_device(const void *p, size_t n) {   /* any byte of [p, p+n) in device memory? */
    pthread_mutex_lock(&mem_mu);
    uintptr_t a = (uintptr_t)p;
    auto it = dev_blocks.upper_bound(a + (n ? n - 1 : 0));
    int r = 0;
    if (it != dev_blocks.begin()) {
        --it;
        r = it->first + it->second > a;
    }
    pthread_mutex_unlock(&mem_mu);
    return r;
}

static void *aligned_block(size_t n) {
    size_t sz = (n + 255) & ~(size_t)255;
    if (!sz) sz = 256;
    return aligned_alloc(256, sz);
}

extern "C" cudaError_t cudaMalloc(void **p, size_t n) {
    if (!p) return fail(cudaErrorInvalidValue);
    *p = NULL;
    if (n == 0) return cudaSuccess;
    pthread_mutex_lock(&mem_mu);
    int over = dev_bytes + n > EMU_TOTAL_MEM;
    pthread_mutex_unlock(&mem_mu);
    void *q = over ? NULL : aligned_block(n);
    if (!q) return fail(cudaErrorMemoryAllocation);
    if (sample_mode() != 2) memset(q, 0xff, n);   /* a GPU's recycled memory holds garbage (no kernel reads it under CUEMU_SAMPLE=none) */
    trace("malloc\t%zu\n", n);
    pthread_mutex_lock(&mem_mu);
    dev_blocks[(uintptr_t)q] = n;
    dev_bytes += n;
    pthread_mutex_unlock(&mem_mu);
    *p = q;
    return cudaSuccess;
}

extern "C" cudaError_t cudaFree(void *p) {
    if (!p) return cudaSuccess;
    pthread_mutex_lock(&mem_mu);
    auto it = dev_blocks.find((uintptr_t)p);
    if (it == dev_blocks.end()) {
        pthread_mutex_unlock(&mem_mu);
        diag(NULL, "cudaFree", "%p is not a block cudaMalloc returned", p);
        return fail(cudaErrorInvalidDevicePointer);
    }
    dev_bytes -= it->second;
    dev_blocks.erase(it);
    pthread_mutex_unlock(&mem_mu);
    free(p);
    return cudaSuccess;
}

extern "C" cudaError_t cudaHostAlloc(void **p, size_t n, unsigned int flags) {
    (void)flags;
    if (!p) return fail(cudaErrorInvalidValue);
    void *q = aligned_block(n);
    if (!q) { *p = NULL; return fail(cudaErrorMemoryAllocation); }
    pthread_mutex_lock(&mem_mu);
    host_blocks[(uintptr_t)q] = n;
    pthread_mutex_unlock(&mem_mu);
    *p = q;
    return cudaSuccess;
}
extern "C" cudaError_t cudaMallocHost(void **p, size_t n) { return cudaHostAlloc(p, n, 0); }
extern "C" cudaError_t cudaFreeHost(void *p) {
    if (!p) return cudaSuccess;
    pthread_mutex_lock(&mem_mu);
    size_t erased = host_blocks.erase((uintptr_t)p);
    pthread_mutex_unlock(&mem_mu);
    if (!erased) {
        diag(NULL, "cudaFreeHost", "%p is not a block cudaHostAlloc returned", p);
        return fail(cudaErrorInvalidValue);
    }
    free(p);
    return cudaSuccess;
}

extern "C" cudaError_t cudaMemGetInfo(size_t *freeb, size_t *total) {
    pthread_mutex_lock(&mem_mu);
    size_t used = dev_bytes;
    pthread_mutex_unlock(&mem_mu);
    if (freeb) *freeb = EMU_TOTAL_MEM - used;
    if (total) *total = EMU_TOTAL_MEM;
    return cudaSuccess;
}

static const char *kind_name(int kind) {
    static const char *const names[] = {"host to host", "host to device", "device to host", "device to device",
                                        "default"};
    return kind >= 0 && kind <= 4 ? names[kind] : "?";
}

static cudaError_t check_stream(cudaStream_t s, const char *call);

extern "C" cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                                       cudaStream_t s) {
    if (check_stream(s, "cudaMemcpyAsync")) return fail(cudaErrorInvalidResourceHandle);
    if (n == 0) return cudaSuccess;
    if (!dst || !src) return fail(cudaErrorInvalidValue);
    int dd = is_device(dst, n), sd = is_device(src, n);
    int want_dd = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    int want_sd = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    if (kind == cudaMemcpyDefault) want_dd = dd, want_sd = sd;
    if (kind < 0 || kind > 4) return fail(cudaErrorInvalidMemcpyDirection);
    if (dd != want_dd || sd != want_sd) {
        diag(NULL, "cudaMemcpyAsync",
             "a %s copy of %zu bytes from %p (%s) to %p (%s): a pointer is not where the kind says", kind_name(kind),
             n, src, sd ? "device" : touches_device(src, n) ? "overruns a device block" : "host", dst,
             dd ? "device" : touches_device(dst, n) ? "overruns a device block" : "host");
        return fail(cudaErrorInvalidValue);
    }
    /* CUDA: "for transfers from pageable host memory to device memory, a
       stream sync is performed before the copy is initiated": the host waits
       for the queue, as a synchronization does */
    if (kind == cudaMemcpyHostToDevice && s && !is_pinned(src, n)) trace("sync\tpageable copy to the device\n");
    trace("memcpy\t%s\t%zu\t%s\n", kind_name(kind), n, s ? "async" : "sync");
    const char *a = (const char *)src, *b = (const char *)dst;
    if ((a < b && a + n > b) || (b < a && b + n > a))
        diag(NULL, "cudaMemcpyAsync", "overlapping copy of %zu bytes from %p to %p", n, src, dst);
    memmove(dst, src, n);
    return cudaSuccess;
}
extern "C" cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind) {
    return cudaMemcpyAsync(dst, src, n, kind, NULL);
}

extern "C" cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s) {
    if (check_stream(s, "cudaMemsetAsync")) return fail(cudaErrorInvalidResourceHandle);
    if (n == 0) return cudaSuccess;
    if (!is_device(p, n)) {
        diag(NULL, "cudaMemsetAsync", "%zu bytes at %p are not device memory%s", n, p,
             touches_device(p, n) ? " (they overrun a device block)" : "");
        return fail(cudaErrorInvalidValue);
    }
    trace("memset\t%zu\n", n);
    if (sample_mode() != 2) memset(p, v, n);   /* CUEMU_SAMPLE=none: no kernel reads it */
    return cudaSuccess;
}
extern "C" cudaError_t cudaMemset(void *p, int v, size_t n) { return cudaMemsetAsync(p, v, n, NULL); }

extern "C" cudaError_t cudaMemset2DAsync(void *p, size_t pitch, int v, size_t width, size_t height,
                                         cudaStream_t s) {
    if (check_stream(s, "cudaMemset2DAsync")) return fail(cudaErrorInvalidResourceHandle);
    if (width == 0 || height == 0) return cudaSuccess;
    if (width > pitch) {
        diag(NULL, "cudaMemset2DAsync", "width %zu exceeds pitch %zu", width, pitch);
        return fail(cudaErrorInvalidValue);
    }
    size_t span = pitch * (height - 1) + width;
    if (!is_device(p, span)) {
        diag(NULL, "cudaMemset2DAsync", "%zu rows of %zu bytes, pitch %zu, at %p are not device memory%s", height,
             width, pitch, p, touches_device(p, span) ? " (they overrun a device block)" : "");
        return fail(cudaErrorInvalidValue);
    }
    for (size_t r = 0; r < height; r++) memset((char *)p + r * pitch, v, width);
    return cudaSuccess;
}

/* ================================================================ streams, events */
struct CUstream_st { unsigned magic, flags; };
struct CUevent_st { unsigned magic, flags; };
#define STREAM_MAGIC 0x57AEA111u
#define EVENT_MAGIC 0xE7E47222u

static cudaError_t check_stream(cudaStream_t s, const char *call) {
    if (!s || s->magic == STREAM_MAGIC) return cudaSuccess;
    diag(NULL, "stream", "%s on %p, not a stream", call, (void *)s);
    return cudaErrorInvalidResourceHandle;
}
extern "C" cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags) {
    if (!s) return fail(cudaErrorInvalidValue);
    *s = new CUstream_st{STREAM_MAGIC, flags};
    return cudaSuccess;
}
extern "C" cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, 0); }
extern "C" cudaError_t cudaStreamDestroy(cudaStream_t s) {
    if (!s || s->magic != STREAM_MAGIC) return fail(cudaErrorInvalidResourceHandle);
    s->magic = 0;
    delete s;
    return cudaSuccess;
}
extern "C" cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    if (check_stream(s, "cudaStreamSynchronize")) return fail(cudaErrorInvalidResourceHandle);
    trace("sync\tstream\n");
    return cudaSuccess;
}
extern "C" cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags) {
    if (!e) return fail(cudaErrorInvalidValue);
    *e = new CUevent_st{EVENT_MAGIC, flags};
    return cudaSuccess;
}
extern "C" cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }
extern "C" cudaError_t cudaEventDestroy(cudaEvent_t e) {
    if (!e || e->magic != EVENT_MAGIC) return fail(cudaErrorInvalidResourceHandle);
    e->magic = 0;
    delete e;
    return cudaSuccess;
}
extern "C" cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    if (!e || e->magic != EVENT_MAGIC || check_stream(s, "cudaEventRecord"))
        return fail(cudaErrorInvalidResourceHandle);
    return cudaSuccess;
}
extern "C" cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    if (!e || e->magic != EVENT_MAGIC) return fail(cudaErrorInvalidResourceHandle);
    trace("sync\tevent\n");
    return cudaSuccess;
}
/* work runs at the call here: every recorded event is done (no wait to trace) */
extern "C" cudaError_t cudaEventQuery(cudaEvent_t e) {
    if (!e || e->magic != EVENT_MAGIC) return fail(cudaErrorInvalidResourceHandle);
    return cudaSuccess;
}

/* ================================================================ fibers */
#define STACK_BYTES ((size_t)128 << 10)
#define GUARD_BYTES ((size_t)4096)

#if defined(__x86_64__)
/* cuemu_switch(save, load): push the callee-saved registers and the SSE/x87
   control words, store the stack pointer in *save, load `load`, pop, return
   into the other context. */
extern "C" void cuemu_switch(void **save, void *load);
asm(".text\n"
    ".p2align 4\n"
    ".type cuemu_switch,@function\n"
    ".hidden cuemu_switch\n"
    ".globl cuemu_switch\n"
    "cuemu_switch:\n"
    "  pushq %rbp\n"
    "  pushq %rbx\n"
    "  pushq %r12\n"
    "  pushq %r13\n"
    "  pushq %r14\n"
    "  pushq %r15\n"
    "  subq $8, %rsp\n"
    "  stmxcsr (%rsp)\n"
    "  fnstcw 4(%rsp)\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  ldmxcsr (%rsp)\n"
    "  fldcw 4(%rsp)\n"
    "  addq $8, %rsp\n"
    "  popq %r15\n"
    "  popq %r14\n"
    "  popq %r13\n"
    "  popq %r12\n"
    "  popq %rbx\n"
    "  popq %rbp\n"
    "  ret\n"
    ".size cuemu_switch, .-cuemu_switch\n");
#endif

enum { F_NEW, F_RUN, F_BAR, F_WARP, F_DONE };

struct fiber {
#if defined(__x86_64__)
    void *sp;
#else
    ucontext_t uc;
#endif
    char *stack;        /* STACK_BYTES, from the pool; NULL when not running */
    int state;
    int lin;            /* x + y*bx + z*bx*by: lane = lin & 31, warp = lin >> 5 */
    uint3 tid;
    const char *sfile;  /* where it waits: the barrier's or shuffle's place in the source */
    int sline;
    /* the shuffle it waits in */
    int skind, sarg, swidth;
    unsigned smask, ssize;
    unsigned char sin[8], sout[8];
};

static std::vector<fiber> fibers;
static std::vector<char *> stack_pool;
static fiber *cur;                       /* the running fiber */
static cuemu_thunk_fn cur_fn;
static void *cur_ctx;
static const char *cur_kernel = "";
#if defined(__x86_64__)
static void *sched_sp;
static unsigned sched_csr[2];            /* mxcsr, x87 control word of the scheduler */
#else
static ucontext_t sched_uc;
#endif

static char *get_stack(void) {
    if (!stack_pool.empty()) {
        char *s = stack_pool.back();
        stack_pool.pop_back();
        return s;
    }
    void *m = mmap(NULL, STACK_BYTES + GUARD_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        fprintf(stderr, "cuda_emu: out of memory for fiber stacks\n");
        abort();
    }
    mprotect(m, GUARD_BYTES, PROT_NONE);   /* the stack grows down onto the guard page */
    return (char *)m + GUARD_BYTES;
}
static void put_stack(char *s) { stack_pool.push_back(s); }

static void to_scheduler(fiber *f) {
#if defined(__x86_64__)
    cuemu_switch(&f->sp, sched_sp);
#else
    swapcontext(&f->uc, &sched_uc);
#endif
}

extern "C" void cuemu_fiber_main(void) {
    fiber *f = cur;
    cur_fn(cur_ctx);
    f->state = F_DONE;
    to_scheduler(f);
    __builtin_trap();   /* a finished fiber is never resumed */
}

static void fiber_start(fiber *f) {
    f->stack = get_stack();
#if defined(__x86_64__)
    uintptr_t top = (uintptr_t)(f->stack + STACK_BYTES);
    uintptr_t r = (top - 64) & ~(uintptr_t)15;   /* the return slot; entry sees rsp = r + 8 */
    void **slot = (void **)r;
    slot[0] = (void *)&cuemu_fiber_main;
    slot[1] = NULL;
    unsigned *csr = (unsigned *)(r - 56);
    csr[0] = sched_csr[0];
    csr[1] = sched_csr[1];
    memset((char *)(r - 48), 0, 48);   /* r15 .. rbp */
    f->sp = (void *)(r - 56);
#else
    getcontext(&f->uc);
    f->uc.uc_stack.ss_sp = f->stack;
    f->uc.uc_stack.ss_size = STACK_BYTES;
    f->uc.uc_link = NULL;
    makecontext(&f->uc, (void (*)(void))cuemu_fiber_main, 0);
#endif
}

static void fiber_resume(fiber *f) {
    cur = f;
    threadIdx = f->tid;
#if defined(__x86_64__)
    cuemu_switch(&sched_sp, f->sp);
#else
    swapcontext(&sched_uc, &f->uc);
#endif
}

static int in_kernel;   /* a fiber of a launch is running (device code) */

static const char *site_str(const fiber *f, char *buf, size_t n) {
    const char *s = f->sfile ? strrchr(f->sfile, '/') : NULL;
    snprintf(buf, n, "%s:%d", s ? s + 1 : f->sfile ? f->sfile : "?", f->sline);
    return buf;
}
static int same_site(const fiber *a, const fiber *b) {
    return a->sline == b->sline && (a->sfile == b->sfile || (a->sfile && b->sfile && !strcmp(a->sfile, b->sfile)));
}

extern "C" void cuemu_syncthreads(const char *file, int line) {
    if (!in_kernel || !cur) {
        diag(NULL, "__syncthreads", "called outside a kernel (%s:%d)", file, line);
        return;
    }
    fiber *f = cur;
    f->sfile = file;
    f->sline = line;
    f->state = F_BAR;
    to_scheduler(f);
}

extern "C" void cuemu_syncwarp(unsigned mask, const char *file, int line) {
    unsigned char z[8] = {0}, o[8];
    cuemu_shfl(4, o, z, 1, mask, 0, 32, file, line);
}

extern "C" void cuemu_shfl(int kind, void *out, const void *in, unsigned size, unsigned mask, int arg, int width,
                           const char *file, int line) {
    if (!in_kernel || !cur) {
        diag(NULL, "shuffle", "called outside a kernel (%s:%d)", file, line);
        memcpy(out, in, size);
        return;
    }
    fiber *f = cur;
    f->sfile = file;
    f->sline = line;
    f->skind = kind;
    f->sarg = arg;
    f->swidth = width;
    f->smask = mask;
    f->ssize = size;
    memcpy(f->sin, in, size);
    f->state = F_WARP;
    to_scheduler(f);
    memcpy(out, f->sout, size);
}

/* ================================================================ the scheduler */
static int order_mode = -1;   /* 0 forward, 1 reverse, 2 random */
static unsigned long long rng_state = 0x9E3779B97F4A7C15ull;
static unsigned rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (unsigned)(rng_state >> 11);
}

static char block_desc[160];
static const char *where_block(void) {
    snprintf(block_desc, sizeof block_desc, "block (%u,%u,%u)", blockIdx.x, blockIdx.y, blockIdx.z);
    return block_desc;
}

static const char *state_name(int s) {
    switch (s) {
    case F_NEW: return "not started";
    case F_RUN: return "running";
    case F_BAR: return "__syncthreads";
    case F_WARP: return "a warp shuffle";
    default: return "exited";
    }
}

/* Release the lanes of warp w (all its live lanes wait in a shuffle): compute every result. */
static void warp_exchange(int w, int nt) {
    int lo = w * 32, hi = lo + 32 < nt ? lo + 32 : nt;
    fiber *F = fibers.data();
    fiber *first = NULL;
    for (int i = lo; i < hi; i++)
        if (F[i].state == F_WARP) { first = &F[i]; break; }
    char a[40], b[40];
    unsigned waiting = 0;   /* the lanes in this exchange */
    for (int i = lo; i < hi; i++)
        if (F[i].state == F_WARP) waiting |= 1u << (i - lo);
    for (int i = lo; i < hi; i++) {
        fiber *f = &F[i];
        if (f->state != F_WARP) continue;
        int lane = i - lo;
        if (!same_site(f, first) || f->skind != first->skind || f->ssize != first->ssize)
            diag(cur_kernel, "divergent shuffle",
                 "%s: %s, thread %d (lane %d) shuffles at %s, thread %d at %s: lanes of one warp in different shuffles",
                 cur_kernel, where_block(), i, lane, site_str(f, a, sizeof a), (int)(first - F),
                 site_str(first, b, sizeof b));
        if (!(f->smask >> lane & 1u))
            diag(cur_kernel, "shuffle mask", "%s: %s, thread %d: lane %d is not in its own mask 0x%08x", cur_kernel,
                 where_block(), i, lane, f->smask);
        /* every lane the mask names must exist, be live and take part */
        if (f->smask & ~waiting) {
            int l = __builtin_ctz(f->smask & ~waiting), t = lo + l;
            diag(cur_kernel, "shuffle mask", "%s: %s, thread %d: mask 0x%08x names lane %d, which %s", cur_kernel,
                 where_block(), i, f->smask, l,
                 t >= nt ? "does not exist (the block's last warp is partial)" : "has exited");
        }
        if (f->skind == 4) continue;   /* __syncwarp */
        int w_ = f->swidth;
        if (w_ <= 0 || w_ > 32 || (w_ & (w_ - 1))) {
            diag(cur_kernel, "shuffle width", "%s: thread %d: width %d", cur_kernel, i, w_);
            w_ = 32;
        }
        int seg = lane & ~(w_ - 1), src;
        switch (f->skind) {
        case 0: src = lane ^ f->sarg; if (src >= seg + w_) src = lane; break;
        case 1: src = seg + (f->sarg & (w_ - 1)); break;
        case 2: src = lane + f->sarg; if (src >= seg + w_) src = lane; break;
        default: src = lane - f->sarg; if (src < seg) src = lane; break;
        }
        int t = lo + (src & 31);
        if (src < 0 || src > 31 || t >= nt || F[t].state != F_WARP || F[t].ssize != f->ssize) {
            diag(cur_kernel, "shuffle source",
                 "%s: %s, thread %d (lane %d) reads lane %d, which %s: the value is undefined", cur_kernel,
                 where_block(), i, lane, src,
                 t >= nt ? "does not exist" : F[t].state != F_WARP ? "has exited" : "shuffles another type");
            memset(f->sout, 0xff, sizeof f->sout);
        } else {
            memcpy(f->sout, F[t].sin, f->ssize);
        }
    }
    for (int i = lo; i < hi; i++)
        if (F[i].state == F_WARP) F[i].state = F_RUN;
}

/* Run one block to completion; 0, or -1 on a deadlock (reported). */
static int run_block(int nt, const std::vector<int> &order_fwd) {
    fiber *F = fibers.data();
    for (int i = 0; i < nt; i++) F[i].state = F_NEW;
    int alive = nt, exited_before_sync = 0;
    std::vector<int> order(order_fwd);
    char a[40], b[40];
    for (;;) {
        if (order_mode == 2)
            for (int i = nt - 1; i > 0; i--) { int j = (int)(rnd() % (unsigned)(i + 1)); int t = order[i]; order[i] = order[j]; order[j] = t; }
        for (int k = 0; k < nt; k++) {
            fiber *f = &F[order[k]];
            if (f->state == F_NEW) {
                fiber_start(f);
                f->state = F_RUN;
            } else if (f->state != F_RUN) {
                continue;
            }
            fiber_resume(f);
            if (f->state == F_DONE) {
                put_stack(f->stack);
                f->stack = NULL;
                alive--;
            }
        }
        if (!alive) return 0;
        /* every live thread waits: release what can go on */
        int released = 0, nw = (nt + 31) / 32;
        for (int w = 0; w < nw; w++) {
            int lo = w * 32, hi = lo + 32 < nt ? lo + 32 : nt, waiting = 0, live = 0;
            for (int i = lo; i < hi; i++) {
                if (F[i].state == F_DONE) continue;
                live++;
                waiting += F[i].state == F_WARP;
            }
            if (live && waiting == live) {
                warp_exchange(w, nt);
                released = 1;
            }
        }
        if (released) continue;
        int at_bar = 0;
        fiber *first = NULL;
        for (int i = 0; i < nt; i++)
            if (F[i].state == F_BAR) {
                at_bar++;
                if (!first) first = &F[i];
            }
        if (at_bar == alive) {
            for (int i = 0; i < nt; i++) {
                if (F[i].state != F_BAR) continue;
                if (!same_site(&F[i], first))
                    diag(cur_kernel, "divergent __syncthreads",
                         "%s: %s: thread %d waits at the __syncthreads of %s, thread %d at %s", cur_kernel,
                         where_block(), i, site_str(&F[i], a, sizeof a), (int)(first - F),
                         site_str(first, b, sizeof b));
                F[i].state = F_RUN;
            }
            if (alive < nt && !exited_before_sync) {
                exited_before_sync = 1;
                diag(cur_kernel, "__syncthreads after exit",
                     "%s: %s: %d of %d threads have returned while the others wait at __syncthreads", cur_kernel,
                     where_block(), nt - alive, nt);
            }
            continue;
        }
        /* deadlock: describe it and give up the block */
        char desc[600];
        size_t at = 0;
        desc[0] = 0;
        for (int i = 0; i < nt && at < sizeof desc - 80; i++) {
            if (F[i].state == F_DONE) continue;
            if (i > 0 && F[i].state == F[i - 1].state && same_site(&F[i], &F[i - 1]) && i + 1 < nt &&
                F[i + 1].state == F[i].state && same_site(&F[i + 1], &F[i]))
                continue;   /* runs of the same state are shown by their ends */
            at += (size_t)snprintf(desc + at, sizeof desc - at, " t%d:%s@%s", i, state_name(F[i].state),
                                   site_str(&F[i], a, sizeof a));
        }
        diag(cur_kernel, "deadlock",
             "%s: %s: no barrier can complete (%d live threads, %d at __syncthreads, the rest in shuffles whose "
             "warps are not all there):%s",
             cur_kernel, where_block(), alive, at_bar, desc);
        for (int i = 0; i < nt; i++)
            if (F[i].state != F_DONE) {
                put_stack(F[i].stack);   /* the abandoned fiber's stack is reused from scratch */
                F[i].stack = NULL;
                F[i].state = F_DONE;
            }
        return -1;
    }
}

/* ---- per-kernel statistics (CUEMU_STATS) ---- */
struct kstat {
    long launches = 0, blocks = 0, threads = 0;
    double seconds = 0;
};
static std::map<std::string, kstat> *stats;
static void write_stats(void) {
    const char *path = getenv("CUEMU_STATS");
    if (!path || !*path || !stats) return;
    FILE *f = fopen(path, "a");
    if (!f) return;
    for (auto &kv : *stats)
        fprintf(f, "%s\t%ld\t%ld\t%ld\t%.3f\n", kv.first.c_str(), kv.second.launches, kv.second.blocks,
                kv.second.threads, kv.second.seconds);
    fclose(f);
}

/* "const char* cuemu::kernel_name() [with auto K = k_flash_fwd<cu_f16, 64>]" -> "k_flash_fwd<cu_f16, 64>" */
static std::string short_name(const char *pretty) {
    const char *p = strstr(pretty, "K = ");
    if (!p) return pretty;
    p += 4;
    std::string s(p);
    size_t e = s.rfind(']');
    if (e != std::string::npos) s.erase(e);
    size_t semi = s.find("; ");
    if (semi != std::string::npos) s.erase(semi);
    return s;
}

/* pointer arguments must be NULL or device memory (a block cudaMalloc returned, or its end) */
extern "C" void cuemu_check_kernel_pointer(const void *p, int arg, const char *kernel) {
    if (!p || is_device(p, 0)) return;
    std::string k = short_name(kernel);
    diag(k.c_str(), "kernel pointer",
         "%s: argument %d is %p, which is not device memory (a host pointer, or a stale one)", k.c_str(), arg + 1, p);
}

static pthread_mutex_t launch_mu = PTHREAD_MUTEX_INITIALIZER;

extern "C" char __start_cuemu_shared[] __attribute__((weak, visibility("hidden")));
extern "C" char __stop_cuemu_shared[] __attribute__((weak, visibility("hidden")));

extern "C" void cuemu_launch_kernel(const char *kernel, const char *file, int line, int bounds, dim3 grid,
                                    dim3 block, size_t shmem, cudaStream_t stream, cuemu_thunk_fn fn, void *ctx) {
    static std::map<const char *, std::string> names;
    pthread_mutex_lock(&launch_mu);
    auto nit = names.find(kernel);
    if (nit == names.end()) nit = names.emplace(kernel, short_name(kernel)).first;
    const char *kname = nit->second.c_str();
    unsigned long long nt = (unsigned long long)block.x * block.y * block.z;
    cudaError_t e = cudaSuccess;
    const char *why = NULL;
    if (grid.x == 0 || grid.y == 0 || grid.z == 0 || block.x == 0 || block.y == 0 || block.z == 0)
        e = cudaErrorInvalidConfiguration, why = "a zero grid or block dimension";
    else if (block.x > 1024 || block.y > 1024 || block.z > 64 || nt > 1024)
        e = cudaErrorInvalidConfiguration, why = "more than 1024 threads per block (or a block dimension too large)";
    else if (grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535)
        e = cudaErrorInvalidConfiguration, why = "a grid dimension too large";
    else if (bounds > 0 && nt > (unsigned long long)bounds)
        e = cudaErrorLaunchOutOfResources, why = "more threads per block than its __launch_bounds__";
    else if (shmem > (48u << 10))
        e = cudaErrorInvalidValue, why = "more than 48 KiB of dynamic shared memory";
    else if (check_stream(stream, "a kernel launch"))
        e = cudaErrorInvalidResourceHandle, why = "not a stream";
    if (e != cudaSuccess) {
        diag(kname, "launch",
             "%s (%s:%d): grid (%u,%u,%u), block (%u,%u,%u), %zu bytes of shared memory: %s -> %s", kname, file,
             line, grid.x, grid.y, grid.z, block.x, block.y, block.z, shmem, why, cudaGetErrorName(e));
        fail(e);
        pthread_mutex_unlock(&launch_mu);
        return;
    }
    if (sample_mode() == 2) {   /* no block: the launch costs the host what a real one costs it, about nothing */
        trace("launch\t%s\t%s:%d\t%u,%u,%u\t%u,%u,%u\t%zu\t0\n", kname,
              strrchr(file, '/') ? strrchr(file, '/') + 1 : file, line, grid.x, grid.y, grid.z, block.x, block.y,
              block.z, shmem);
        pthread_mutex_unlock(&launch_mu);
        return;
    }
    if (order_mode < 0) {
        const char *o = getenv("CUEMU_ORDER");
        order_mode = o && !strcmp(o, "reverse") ? 1 : o && !strcmp(o, "random") ? 2 : 0;
        stats = new std::map<std::string, kstat>;
        atexit(write_stats);
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    /* shared memory holds garbage at the start of a kernel */
    if ((uintptr_t)__start_cuemu_shared && (uintptr_t)__stop_cuemu_shared > (uintptr_t)__start_cuemu_shared)
        memset(__start_cuemu_shared, 0xff, (size_t)(__stop_cuemu_shared - __start_cuemu_shared));
#if defined(__x86_64__)
    {
        unsigned m;
        unsigned short cw;
        asm volatile("stmxcsr %0" : "=m"(m));
        asm volatile("fnstcw %0" : "=m"(cw));
        sched_csr[0] = m;
        sched_csr[1] = cw;
    }
#endif
    int n = (int)nt;
    if ((int)fibers.size() < n) fibers.resize((size_t)n);
    std::vector<int> order((size_t)n);
    for (int i = 0; i < n; i++) {
        fiber *f = &fibers[(size_t)i];
        f->lin = i;
        f->tid.x = (unsigned)i % block.x;
        f->tid.y = (unsigned)i / block.x % block.y;
        f->tid.z = (unsigned)i / (block.x * block.y);
        f->stack = NULL;
        order[(size_t)i] = order_mode == 1 ? n - 1 - i : i;
    }
    gridDim = grid;
    blockDim = block;
    cur_fn = fn;
    cur_ctx = ctx;
    cur_kernel = kname;
    in_kernel = 1;
    int failed = 0;
    unsigned long long nblocks = 0;
    if (sample_mode() == 1) {   /* the first block only, timed: its work at full sizes */
        blockIdx.x = blockIdx.y = blockIdx.z = 0;
        nblocks = 1;
        failed = run_block(n, order);
    }
    for (unsigned z = 0; z < grid.z && !failed && !sample_mode(); z++)
        for (unsigned y = 0; y < grid.y && !failed; y++)
            for (unsigned x = 0; x < grid.x && !failed; x++) {
                unsigned bx = order_mode == 1 ? grid.x - 1 - x : x;
                blockIdx.x = bx;
                blockIdx.y = y;
                blockIdx.z = z;
                nblocks++;
                if (run_block(n, order)) failed = 1;
            }
    in_kernel = 0;
    cur = NULL;
    if (failed) {
        diag(kname, "launch", "%s (%s:%d) stopped at its deadlock: cudaErrorLaunchFailure", kname, file, line);
        fail(cudaErrorLaunchFailure);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    trace("launch\t%s\t%s:%d\t%u,%u,%u\t%u,%u,%u\t%zu\t%.1f\n", kname, strrchr(file, '/') ? strrchr(file, '/') + 1 : file,
          line, grid.x, grid.y, grid.z, block.x, block.y, block.z, shmem,
          1e6 * ((double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec)));
    kstat &st = (*stats)[kname];
    st.launches++;
    st.blocks += (long)nblocks;
    st.threads += (long)(nblocks * nt);
    st.seconds += (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    pthread_mutex_unlock(&launch_mu);
}
