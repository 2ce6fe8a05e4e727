/*
 * cuda_emu.h - the CUDA device language on the CPU, force-included (g++
 * -include) into every engine/cuda .cu source after tests/cuda_emu/convert.py
 * turned its kernel launches into calls of cuemu::launch.
 *
 * How a kernel runs (tests/cuda_emu/cuemu_runtime.cpp): at the launch, on
 * the calling thread, block after block; a block's threads are cooperative
 * fibers on that one OS thread, switched only at __syncthreads() (a barrier
 * of the block) and at the warp shuffles (a barrier of the warp's 32 lanes,
 * threads numbered x fastest as on the GPU). threadIdx, blockIdx, blockDim
 * and gridDim are plain globals the scheduler sets before resuming a fiber.
 * __shared__ variables are function-local statics, shared by the block's
 * fibers; they live in the section "cuemu_shared", which is filled with 0xff
 * bytes (NaN) before every launch, so a read of shared memory nothing wrote
 * shows up.
 *
 * Everything here only has to compile the plugin's sources as they are: no
 * construct of the plugin is rewritten except the launch syntax.
 */
#ifndef CUEMU_CUDA_EMU_H
#define CUEMU_CUDA_EMU_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
#include <cmath>
#include <tuple>
#include <type_traits>
#include <utility>
#endif

#include <cuda_runtime.h>   /* tests/cuda_emu/include: the stand-in */

#define CUEMU_HIDDEN __attribute__((visibility("hidden")))

/* ---- function and variable qualifiers ---- */
#define __global__
#define __device__
#define __host__
#define __noinline__ __attribute__((noinline))
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __constant__ static
#define __managed__
/* a kernel parameter read in place (its address taken without a local copy) */
#define __grid_constant__
/* shared memory: one copy per kernel (blocks run one after another), poisoned per launch */
#define __shared__ static __attribute__((section("cuemu_shared")))

#ifdef __cplusplus
extern "C" {
#endif

/* ---- built-in variables, set by the scheduler ---- */
extern CUEMU_HIDDEN uint3 threadIdx;
extern CUEMU_HIDDEN uint3 blockIdx;
extern CUEMU_HIDDEN dim3 blockDim;
extern CUEMU_HIDDEN dim3 gridDim;
static const int warpSize = 32;

/* ---- the scheduler's entry points (cuemu_runtime.cpp) ---- */
/* (file, line): the call's place in the source, to tell barriers apart in the diagnostics */
CUEMU_HIDDEN void cuemu_syncthreads(const char *file, int line);
CUEMU_HIDDEN void cuemu_syncwarp(unsigned mask, const char *file, int line);
/* kind: 0 xor, 1 idx (src lane), 2 down, 3 up; `out` and `in` hold `size` bytes */
CUEMU_HIDDEN void cuemu_shfl(int kind, void *out, const void *in, unsigned size, unsigned mask, int arg, int width,
                             const char *file, int line);
CUEMU_HIDDEN void cuemu_check_kernel_pointer(const void *p, int arg, const char *kernel);
typedef void (*cuemu_thunk_fn)(void *);
CUEMU_HIDDEN void cuemu_launch_kernel(const char *kernel, const char *file, int line, int bounds, dim3 grid,
                                      dim3 block, size_t shmem, cudaStream_t stream, cuemu_thunk_fn fn,
                                      void *ctx);

#ifdef __cplusplus
}
#endif

#ifdef __cplusplus
/* ---- synchronisation, warp shuffles, atomics, intrinsics ---- */
/* macros, so that each barrier and shuffle is known by its line (an inlined
   helper's barrier by the helper's line) */
#define __syncthreads() cuemu_syncthreads(__FILE__, __LINE__)
static inline void cuemu_syncwarp_(const char *file, int line, unsigned mask = 0xffffffffu) {
    cuemu_syncwarp(mask, file, line);
}
#define __syncwarp(...) cuemu_syncwarp_(__FILE__, __LINE__, ##__VA_ARGS__)
static inline void __threadfence(void) {}
static inline void __threadfence_block(void) {}

template <typename T>
static inline T cuemu_shfl_t(const char *file, int line, int kind, unsigned mask, T v, int arg, int width = 32) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "a shuffle moves 1 to 8 bytes");
    T r;
    cuemu_shfl(kind, &r, &v, (unsigned)sizeof(T), mask, arg, width, file, line);
    return r;
}
/* __shfl_xor_sync(mask, v, lane_mask[, width]) and the others, for any type of 1 to 8 bytes */
#define __shfl_xor_sync(...) cuemu_shfl_t(__FILE__, __LINE__, 0, __VA_ARGS__)
#define __shfl_sync(...) cuemu_shfl_t(__FILE__, __LINE__, 1, __VA_ARGS__)
#define __shfl_down_sync(...) cuemu_shfl_t(__FILE__, __LINE__, 2, __VA_ARGS__)
#define __shfl_up_sync(...) cuemu_shfl_t(__FILE__, __LINE__, 3, __VA_ARGS__)

/* one OS thread runs every thread of the grid: a read-modify-write is atomic */
template <typename T> static inline T cuemu_atomic_add(T *p, T v) {
    T old = *p;
    *p = old + v;
    return old;
}
static inline float atomicAdd(float *p, float v) { return cuemu_atomic_add(p, v); }
static inline double atomicAdd(double *p, double v) { return cuemu_atomic_add(p, v); }
static inline int atomicAdd(int *p, int v) { return cuemu_atomic_add(p, v); }
static inline unsigned atomicAdd(unsigned *p, unsigned v) { return cuemu_atomic_add(p, v); }
static inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v) {
    return cuemu_atomic_add(p, v);
}
static inline int atomicMax(int *p, int v) { int o = *p; if (v > o) *p = v; return o; }
static inline int atomicMin(int *p, int v) { int o = *p; if (v < o) *p = v; return o; }
static inline int atomicExch(int *p, int v) { int o = *p; *p = v; return o; }
static inline int atomicCAS(int *p, int cmp, int v) { int o = *p; if (o == cmp) *p = v; return o; }

static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
static inline int __float_as_int(float f) { int u; memcpy(&u, &f, 4); return u; }
static inline float __int_as_float(int u) { float f; memcpy(&f, &u, 4); return f; }
template <typename T> static inline T __ldg(const T *p) { return *p; }
static inline float __fdividef(float a, float b) { return a / b; }
/* a product rounded on its own: the barrier keeps -ffp-contract=fast from
   fusing it into a later addition, as nvcc never fuses __fmul_rn */
static inline float __fmul_rn(float a, float b) {
    float r = a * b;
    __asm__("" : "+x"(r));
    return r;
}
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }

/* ---- kernel launches: convert.py turns
 *     k<T, E><<<grid, block, shmem, stream>>>(a, b, c);
 * into
 *     cuemu::launch< k<T, E> >(__FILE__, __LINE__, bounds, grid, block, shmem, stream, a, b, c);
 * (shmem and stream 0 when left out; bounds: the kernel's __launch_bounds__, 0 for none).
 * The arguments are converted to the kernel's parameter types once, as the
 * launch does, and every thread gets its own copy. ---- */
namespace cuemu {
template <class... P> struct kernel_call {
    void (*k)(P...);
    std::tuple<P...> args;
};
template <class... P> static void run_thread(void *c) {
    kernel_call<P...> *kc = static_cast<kernel_call<P...> *>(c);
    std::apply(kc->k, kc->args);   /* by-value parameters: a copy per thread */
}
template <class T> static inline void check_arg(const T &, int, const char *) {}
template <class T> static inline void check_arg(T *const &p, int i, const char *name) {
    cuemu_check_kernel_pointer((const void *)p, i, name);
}
template <class Tup, size_t... I>
static inline void check_args(const Tup &t, const char *name, std::index_sequence<I...>) {
    (check_arg(std::get<I>(t), (int)I, name), ...);
}
template <auto K> static const char *kernel_name() { return __PRETTY_FUNCTION__; }
template <class... P, class... A>
static inline void launch_fn(const char *name, const char *file, int line, int bounds, void (*k)(P...), dim3 grid,
                             dim3 block, size_t shmem, cudaStream_t stream, A &&...a) {
    static_assert(sizeof...(P) == sizeof...(A), "kernel launched with the wrong number of arguments");
    kernel_call<P...> kc{k, std::tuple<P...>(std::forward<A>(a)...)};
    check_args(kc.args, name, std::index_sequence_for<P...>{});
    cuemu_launch_kernel(name, file, line, bounds, grid, block, shmem, stream, &run_thread<P...>, &kc);
}
template <auto K, class... A>
static inline void launch(const char *file, int line, int bounds, dim3 grid, dim3 block, size_t shmem,
                          cudaStream_t stream, A &&...a) {
    launch_fn(kernel_name<K>(), file, line, bounds, K, grid, block, shmem, stream, std::forward<A>(a)...);
}
}   // namespace cuemu
#endif

#endif
