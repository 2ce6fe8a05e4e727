/*
 * selftest.cu - the CPU emulator's own tests (tests/cuda_emu): CUDA source,
 * converted by convert.py and compiled like the plugin, linked with the
 * emulated runtime. Checks the semantics the plugin's kernels rely on
 * (barriers, warp shuffles of float/double/int64, shared memory per block,
 * 2-d blocks and grids, grid-stride loops, every launch form convert.py must
 * rewrite) and that the emulator reports what a GPU leaves undefined
 * (deadlocks, shuffles from exited lanes, bad configurations, host pointers,
 * shared memory read before it is written). Prints "selftest: N passed,
 * M failed" and exits non-zero on a failure.
 */
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

extern "C" int cuemu_diagnostics(const char *kind);

static int passed, failed;
#define CHECK(cond, ...)                                       \
    do {                                                       \
        if (cond) passed++;                                    \
        else {                                                 \
            failed++;                                          \
            printf("selftest: FAILED %s:%d: ", __FILE__, __LINE__); \
            printf(__VA_ARGS__);                               \
            printf("\n");                                      \
        }                                                      \
    } while (0)

template <typename T> static T *dev_alloc(size_t n) {
    void *p = NULL;
    cudaMalloc(&p, n * sizeof(T));
    return (T *)p;
}

/* ---- block sum through shared memory, one block per row, the tree of the plugin's cu_block_sum ---- */
__device__ __forceinline__ double warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ double block_sum(double v, double *sh) {
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0;
    return warp_sum(v);
}
__global__ void k_rowsum(double *out, const float *x, int64_t rows, int64_t cols) {
    __shared__ double sh[32];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        double s = 0;
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) s += x[r * cols + j];
        s = block_sum(s, sh);
        if (threadIdx.x == 0) out[r] = s;
        if (threadIdx.x == blockDim.x - 1 && s != out[r]) out[r] = NAN;   /* every thread has the total */
    }
}

/* ---- shuffles of float, int64 and a struct pair; 2-d block: a warp is a row of 32 ---- */
struct pair { float v; int64_t i; };
__global__ void k_shfl(float *fo, int64_t *io, int *src_ok) {
    int lane = threadIdx.x & 31;
    int lin = threadIdx.y * blockDim.x + threadIdx.x;
    float f = (float)lin;
    int64_t i = (int64_t)lin << 33;
    float got = __shfl_xor_sync(0xffffffffu, f, 5);
    int64_t goti = __shfl_xor_sync(0xffffffffu, i, 17);
    float down = __shfl_down_sync(0xffffffffu, f, 3);
    float bcast = __shfl_sync(0xffffffffu, f, 7);
    int ok = got == (float)(lin ^ 5) && goti == ((int64_t)(lin ^ 17) << 33) &&
             down == (lane + 3 < 32 ? (float)(lin + 3) : f) && bcast == (float)((lin & ~31) + 7);
    int64_t o = (int64_t)blockIdx.x * blockDim.x * blockDim.y + lin;
    fo[o] = got;
    io[o] = goti;
    src_ok[o] = ok;
}

/* ---- a templated kernel with templated shared memory, read before written (poisoned) ---- */
template <typename T, int N> __global__ void k_tshared(T *out, int *poisoned) {
    __shared__ T buf[N];
    __shared__ float first[N];
    if (blockIdx.x == 0) poisoned[threadIdx.x] = isnan(first[threadIdx.x]) ? 1 : 0;   /* never written yet */
    first[threadIdx.x] = 0;
    buf[threadIdx.x] = (T)(threadIdx.x + 1);
    __syncthreads();
    out[blockIdx.x * N + threadIdx.x] = buf[N - 1 - threadIdx.x];   /* another thread's value */
}

/* ---- deadlock: half a warp at __syncthreads, the other half in a full-warp shuffle ---- */
__global__ void k_deadlock(float *out) {
    float v = 1;
    if (threadIdx.x < 16) __syncthreads();
    else v = __shfl_xor_sync(0xffffffffu, v, 1);
    out[threadIdx.x] = v;
}

/* ---- lanes 16..31 return, lanes 0..15 read them ---- */
__global__ void k_exited_lane(float *out) {
    if (threadIdx.x >= 16) return;
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 16);
}

/* ---- a barrier after some threads returned (works on GPUs, reported) ---- */
__global__ void k_sync_after_exit(float *out) {
    if (threadIdx.x == 5) return;
    __syncthreads();
    out[threadIdx.x] = 1;
}

/* ---- the two halves of a block at different __syncthreads (undefined, reported) ---- */
__global__ void k_divergent_sync(float *out) {
    if (threadIdx.x & 1) __syncthreads();
    else __syncthreads();
    out[threadIdx.x] = 1;
}

__global__ void __launch_bounds__(64) k_bounded(float *out) { out[threadIdx.x] = 1; }

/* ---- grid-stride loop, a big grid ---- */
__global__ void k_fill(float *x, float v, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)blockDim.x * gridDim.x)
        x[i] = v + (float)(i & 7);
}

/* ---- the launch forms convert.py rewrites ---- */
__global__ void k_set(int *p, int v) { p[threadIdx.x + blockIdx.x * blockDim.x] = v; }
template <typename T, int K> __global__ void k_tset(T *p, T v) { p[threadIdx.x] = v + (T)K; }
#define LAUNCH_IN_MACRO(T, K, p, v)                              \
    do {                                                         \
        k_tset<T, K><<<1, 4,                                     \
                       0, 0>>>(                                  \
            p, v);                                               \
    } while (0)

/* ---- atomics and per-thread copies of by-value parameters ---- */
__global__ void k_atomic(float *acc, double *dacc, int n) {
    n += (int)threadIdx.x;   /* each thread's own copy */
    atomicAdd(acc, 1.0f);
    atomicAdd(dacc, (double)n);
}

int main(void) {
    /* block sums */
    {
        int64_t rows = 37, cols = 3001;
        float *hx = (float *)malloc(sizeof(float) * rows * cols);
        for (int64_t i = 0; i < rows * cols; i++) hx[i] = (float)((i * 7919) % 1000) / 100.0f;
        float *x = dev_alloc<float>(rows * cols);
        double *out = dev_alloc<double>(rows);
        cudaMemcpyAsync(x, hx, sizeof(float) * rows * cols, cudaMemcpyHostToDevice, 0);
        for (int threads = 32; threads <= 1024; threads *= 2) {
            k_rowsum<<<5, threads>>>(out, x, rows, cols);
            CHECK(cudaGetLastError() == cudaSuccess, "k_rowsum launch");
            double ho[37];
            cudaMemcpyAsync(ho, out, sizeof ho, cudaMemcpyDeviceToHost, 0);
            int bad = 0;
            for (int64_t r = 0; r < rows; r++) {
                double s = 0;
                for (int64_t j = 0; j < cols; j++) s += hx[r * cols + j];
                if (fabs(ho[r] - s) > 1e-6 * fabs(s) || ho[r] != ho[r]) bad++;
            }
            CHECK(!bad, "block sums with %d threads: %d rows wrong", threads, bad);
        }
        cudaFree(x);
        cudaFree(out);
        free(hx);
    }
    /* shuffles, 2-d blocks */
    {
        int nb = 3, per = 32 * 4;
        float *fo = dev_alloc<float>(nb * per);
        int64_t *io = dev_alloc<int64_t>(nb * per);
        int *ok = dev_alloc<int>(nb * per);
        k_shfl<<<nb, dim3(32, 4)>>>(fo, io, ok);
        int hok[3 * 128];
        cudaMemcpy(hok, ok, sizeof hok, cudaMemcpyDeviceToHost);
        int bad = 0;
        for (int i = 0; i < nb * per; i++) bad += !hok[i];
        CHECK(!bad, "shuffles: %d threads got a wrong value", bad);
    }
    /* templated shared memory: per-instantiation arrays, poisoned, barrier between write and read */
    {
        int *poisoned = dev_alloc<int>(64);
        double *od = dev_alloc<double>(4 * 64);
        int hp[64];
        k_tshared<double, 64><<<1, 64>>>(od, poisoned);   /* one block: the first to run (any CUEMU_ORDER) */
        cudaMemcpy(hp, poisoned, sizeof hp, cudaMemcpyDeviceToHost);
        k_tshared<double, 64><<<4, 64>>>(od, poisoned);
        double h[256];
        cudaMemcpy(h, od, sizeof h, cudaMemcpyDeviceToHost);
        int bad = 0, np = 0;
        for (int i = 0; i < 256; i++) bad += h[i] != (double)(64 - i % 64);
        for (int i = 0; i < 64; i++) np += hp[i];
        CHECK(!bad, "templated shared memory: %d wrong", bad);
        CHECK(np == 64, "shared memory is poisoned at a launch (%d of 64 threads saw NaN)", np);
    }
    /* deadlock */
    {
        float *o = dev_alloc<float>(64);
        int before = cuemu_diagnostics("deadlock");
        k_deadlock<<<2, 64>>>(o);
        CHECK(cudaGetLastError() == cudaErrorLaunchFailure, "a deadlock fails the launch");
        CHECK(cuemu_diagnostics("deadlock") == before + 1, "a deadlock is reported once");
        cudaFree(o);
    }
    /* shuffle from exited lanes */
    {
        float *o = dev_alloc<float>(32);
        k_exited_lane<<<1, 32>>>(o);
        CHECK(cudaGetLastError() == cudaSuccess, "an exited lane is not a launch failure");
        CHECK(cuemu_diagnostics("shuffle source") > 0, "a shuffle reading an exited lane is reported");
        CHECK(cuemu_diagnostics("shuffle mask") > 0, "a full mask naming exited lanes is reported");
        cudaFree(o);
    }
    /* sync after exit */
    {
        float *o = dev_alloc<float>(64);
        k_sync_after_exit<<<1, 64>>>(o);
        CHECK(cudaGetLastError() == cudaSuccess, "sync after exit runs");
        CHECK(cuemu_diagnostics("__syncthreads after exit") > 0, "sync after exit is reported");
        cudaFree(o);
    }
    /* divergent barriers */
    {
        float *o = dev_alloc<float>(64);
        int before = cuemu_diagnostics("divergent __syncthreads");
        k_divergent_sync<<<1, 64>>>(o);
        CHECK(cuemu_diagnostics("divergent __syncthreads") > before, "threads at different __syncthreads are reported");
        int mid = cuemu_diagnostics("divergent __syncthreads");
        k_rowsum<<<1, 64>>>((double *)o, o, 1, 16);   /* one barrier line, reached from one helper: no report */
        CHECK(cuemu_diagnostics("divergent __syncthreads") == mid, "one __syncthreads is not divergent");
        cudaFree(o);
    }
    /* configurations */
    {
        float *o = dev_alloc<float>(2048);
        k_bounded<<<1, 64>>>(o);
        CHECK(cudaGetLastError() == cudaSuccess, "within __launch_bounds__");
        k_bounded<<<1, 128>>>(o);
        CHECK(cudaGetLastError() == cudaErrorLaunchOutOfResources, "beyond __launch_bounds__");
        k_fill<<<1, 2048>>>(o, 1.0f, 10);
        CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration, "2048 threads per block");
        k_fill<<<dim3(1, 70000), 32>>>(o, 1.0f, 10);
        CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration, "grid.y 70000");
        k_fill<<<0, 32>>>(o, 1.0f, 10);
        CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration, "an empty grid");
        float host[4];
        int before = cuemu_diagnostics("kernel pointer");
        k_fill<<<1, 4>>>(host, 1.0f, 4);
        CHECK(cuemu_diagnostics("kernel pointer") == before + 1, "a host pointer argument is reported");
        cudaFree(o);
    }
    /* a big grid-stride fill: 65536 blocks of 256 threads */
    {
        int64_t n = (int64_t)1 << 24;
        float *x = dev_alloc<float>(n);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        k_fill<<<65536, 256, 0, 0>>>(x, 2.0f, n);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        float *h = (float *)malloc(sizeof(float) * n);
        cudaMemcpy(h, x, sizeof(float) * n, cudaMemcpyDeviceToHost);
        int64_t bad = 0;
        for (int64_t i = 0; i < n; i++) bad += h[i] != 2.0f + (float)(i & 7);
        CHECK(!bad, "grid-stride fill: %lld wrong", (long long)bad);
        printf("selftest: %lld threads of a grid-stride loop in %.2f s (%.0f ns a thread)\n", (long long)n, s,
               s * 1e9 / (double)n);
        free(h);
        cudaFree(x);
    }
    /* launch forms */
    {
        int *p = dev_alloc<int>(8);
        cudaStream_t st;
        cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
        k_set<<<2, 4, 0>>>(p, 3);
        int h[8];
        cudaMemcpy(h, p, sizeof h, cudaMemcpyDeviceToHost);
        CHECK(h[0] == 3 && h[7] == 3, "3-value launch");
        k_set<<<dim3(2), dim3(4), 0, st>>>(p, 4);
        cudaMemcpy(h, p, sizeof h, cudaMemcpyDeviceToHost);
        CHECK(h[0] == 4 && h[7] == 4, "4-value launch");
        LAUNCH_IN_MACRO(int, 5, p, 10);
        cudaMemcpy(h, p, sizeof h, cudaMemcpyDeviceToHost);
        CHECK(h[0] == 15 && h[3] == 15 && h[4] == 4, "a template launch in a macro over several lines");
        cudaStreamDestroy(st);
    }
    /* atomics, by-value parameters */
    {
        float *acc = dev_alloc<float>(1);
        double *dacc = dev_alloc<double>(1);
        cudaMemset(acc, 0, 4);
        cudaMemset(dacc, 0, 8);
        k_atomic<<<3, 100>>>(acc, dacc, 1000);
        float a;
        double d;
        cudaMemcpy(&a, acc, 4, cudaMemcpyDeviceToHost);
        cudaMemcpy(&d, dacc, 8, cudaMemcpyDeviceToHost);
        CHECK(a == 300.0f, "atomicAdd float: %g", a);
        CHECK(d == 3.0 * (100 * 1000 + 99 * 100 / 2), "atomicAdd double, per-thread parameters: %g", d);
    }
    /* memory checks */
    {
        float *x = dev_alloc<float>(16);
        float h[32];
        int before = cuemu_diagnostics("cudaMemcpyAsync");
        CHECK(cudaMemcpy(h, x, sizeof h, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue, "a copy past a block");
        CHECK(cudaGetLastError() == cudaErrorInvalidValue, "the copy's error is the last error");
        CHECK(cuemu_diagnostics("cudaMemcpyAsync") == before + 1, "a copy past a block is reported");
        unsigned u;
        memcpy(&u, x, 4);   /* (emulated device memory is host memory) */
        CHECK(u == 0xffffffffu, "cudaMalloc fills with 0xff");
        cudaFree(x);
    }
    printf("selftest: %d passed, %d failed\n", passed, failed);
    return failed != 0;
}
