/*
 * cuda_copy.cu - strided copies with dtype conversion, and fill.
 *
 * Conversions go through double, as the CPU backend's do (float16 and
 * bfloat16 through ld_half.h), so a value converts to the same result on
 * both devices.
 */
#include "cuda_common.cuh"

#include <string.h>

#define MAXD LD_MAX_DIMS

struct cu_view {               /* a strided source, dims merged where they can be */
    int nd;
    int64_t shape[MAXD];
    int64_t stride[MAXD];      /* in elements */
};

/* Merge neighbouring dims that are contiguous with each other; drop size-1 dims. */
static void merge_dims(int ndim, const int64_t *shape, const int64_t *st, cu_view *v) {
    v->nd = 0;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == 1) continue;
        if (v->nd && v->stride[v->nd - 1] == st[i] * shape[i]) {
            v->shape[v->nd - 1] *= shape[i];
            v->stride[v->nd - 1] = st[i];
        } else {
            v->shape[v->nd] = shape[i];
            v->stride[v->nd] = st[i];
            v->nd++;
        }
    }
}

/* float16 and bfloat16 travel as their bits (uint16 storage wrappers), and
   convert through ld_half.h as on the CPU: to half from float32, from half
   to float32 (exact), so both devices give the same bits. */
/* (cu_f16, cu_bf16: cuda_common.cuh) */
template <typename T> struct cu_conv {
    static __device__ double get(T v) { return (double)v; }
    static __device__ T put(double v) { return (T)v; }
};
template <> struct cu_conv<cu_f16> {
    static __device__ double get(cu_f16 v) { return ld_f16_to_f32(v.b); }
    static __device__ cu_f16 put(double v) { return cu_f16{ld_f32_to_f16((float)v)}; }
};
template <> struct cu_conv<cu_bf16> {
    static __device__ double get(cu_bf16 v) { return ld_bf16_to_f32(v.b); }
    static __device__ cu_bf16 put(double v) { return cu_bf16{ld_f32_to_bf16((float)v)}; }
};

template <typename D, typename S>
__global__ void k_copy(D *dst, const S *src, cu_view v, int64_t n) {
    CU_LOOP(i, n) {
        int64_t r = i, off = 0;
        for (int d = v.nd - 1; d >= 0; d--) {
            int64_t q = r / v.shape[d];
            off += (r - q * v.shape[d]) * v.stride[d];
            r = q;
        }
        dst[i] = cu_conv<D>::put(cu_conv<S>::get(src[off]));
    }
}

/* a contiguous source (a cast: the half/float32 conversions around each op
   on half tensors): no index arithmetic, whose 64-bit divisions would cost
   more than the memory traffic */
template <typename D, typename S>
__global__ void k_convert(D *dst, const S *src, int64_t n) {
    CU_LOOP(i, n) dst[i] = cu_conv<D>::put(cu_conv<S>::get(src[i]));
}

template <typename D, typename S>
static void launch_copy(cu_dev *cd, void *dst, const void *src, const cu_view &v, int64_t n) {
    if (v.nd == 0 || (v.nd == 1 && v.stride[0] == 1))
        k_convert<D, S><<<cu_grid(n, 256), 256, 0, cd->stream>>>((D *)dst, (const S *)src, n);
    else
        k_copy<D, S><<<cu_grid(n, 256), 256, 0, cd->stream>>>((D *)dst, (const S *)src, v, n);
    cu_launched(cd, "copy_strided kernel");
}

template <typename D>
static void copy_to(cu_dev *cd, void *dst, const void *src, ld_dtype sdt, const cu_view &v, int64_t n) {
    switch (sdt) {
    case LD_F32: launch_copy<D, float>(cd, dst, src, v, n); break;
    case LD_I32: launch_copy<D, int32_t>(cd, dst, src, v, n); break;
    case LD_I64: launch_copy<D, int64_t>(cd, dst, src, v, n); break;
    case LD_F16: launch_copy<D, cu_f16>(cd, dst, src, v, n); break;
    case LD_BF16: launch_copy<D, cu_bf16>(cd, dst, src, v, n); break;
    default: launch_copy<D, uint8_t>(cd, dst, src, v, n); break;
    }
}

void cu_copy_strided(ld_device *d, void *dst, ld_dtype ddt, const void *src, ld_dtype sdt, int ndim,
                     const int64_t *shape, const int64_t *ss) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    if (n <= 0) return;
    cu_dev *cd = cu_begin(d);
    if (!cd) return;
    cu_view v;
    merge_dims(ndim, shape, ss, &v);
    if (ddt == sdt && (v.nd == 0 || (v.nd == 1 && v.stride[0] == 1))) {
        cudaError_t e = cudaMemcpyAsync(dst, src, (size_t)n * cu_dtype_size(sdt), cudaMemcpyDeviceToDevice, cd->stream);
        if (e != cudaSuccess) cu_record(cd, "cudaMemcpyAsync (device to device)", e);
        return;
    }
    switch (ddt) {
    case LD_F32: copy_to<float>(cd, dst, src, sdt, v, n); break;
    case LD_I32: copy_to<int32_t>(cd, dst, src, sdt, v, n); break;
    case LD_I64: copy_to<int64_t>(cd, dst, src, sdt, v, n); break;
    case LD_F16: copy_to<cu_f16>(cd, dst, src, sdt, v, n); break;
    case LD_BF16: copy_to<cu_bf16>(cd, dst, src, sdt, v, n); break;
    default: copy_to<uint8_t>(cd, dst, src, sdt, v, n); break;
    }
}

template <typename T>
__global__ void k_fill(T *dst, T v, int64_t n) {
    CU_LOOP(i, n) dst[i] = v;
}

void cu_fill(ld_device *d, void *dst, ld_dtype dt, int64_t n, double v) {
    if (n <= 0) return;
    cu_dev *cd = cu_begin(d);
    if (!cd) return;
    if (v == 0) {
        cudaError_t e = cudaMemsetAsync(dst, 0, (size_t)n * cu_dtype_size(dt), cd->stream);
        if (e != cudaSuccess) cu_record(cd, "cudaMemsetAsync", e);
        return;
    }
    unsigned g = cu_grid(n, 256);
    switch (dt) {
    case LD_F32: k_fill<float><<<g, 256, 0, cd->stream>>>((float *)dst, (float)v, n); break;
    case LD_I32: k_fill<int32_t><<<g, 256, 0, cd->stream>>>((int32_t *)dst, (int32_t)v, n); break;
    case LD_I64: k_fill<int64_t><<<g, 256, 0, cd->stream>>>((int64_t *)dst, (int64_t)v, n); break;
    case LD_F16: k_fill<uint16_t><<<g, 256, 0, cd->stream>>>((uint16_t *)dst, ld_f32_to_f16((float)v), n); break;
    case LD_BF16: k_fill<uint16_t><<<g, 256, 0, cd->stream>>>((uint16_t *)dst, ld_f32_to_bf16((float)v), n); break;
    default: k_fill<uint8_t><<<g, 256, 0, cd->stream>>>((uint8_t *)dst, (uint8_t)v, n); break;
    }
    cu_launched(cd, "fill kernel");
}
