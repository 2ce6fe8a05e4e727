/*
 * cuda_conv.cu - the convolution's lowering (im2col / col2im, NHWC) and max
 * pooling. The product itself is a gemm (cuda_gemm.cu). im2col and col2im
 * read and write float16 and bfloat16 too (col2im's sums in float32).
 *
 * col is [N*OH*OW, KH*KW*C]: row (b, i, j) holds the window of output pixel
 * (i, j), channels fastest. col2im gathers, one thread per input element
 * summing the window entries that cover it, so no atomics and a result that
 * does not change from run to run.
 */
#include "cuda_common.cuh"
#include "ld_elementwise_math.h"

/* T: float, cu_f16 or cu_bf16 (a gather: exact) */
template <typename T>
__global__ void k_im2col(T *col, const T *x, cu_win_geom g, int64_t total) {
    int64_t rowlen = g.kh * g.kw * g.c;
    CU_LOOP(idx, total) {
        int64_t row = idx / rowlen, e = idx - row * rowlen;
        int64_t q = e % g.c, kk = e / g.c, ki = kk / g.kw, kj = kk - ki * g.kw;
        int64_t j = row % g.ow, t = row / g.ow, i = t % g.oh, b = t / g.oh;
        int64_t y = i * g.sh - g.ph + ki, xx = j * g.sw - g.pw + kj;
        col[idx] = (y < 0 || y >= g.h || xx < 0 || xx >= g.w) ? cu_put<T>(0.0f) : x[((b * g.h + y) * g.w + xx) * g.c + q];
    }
}

void cu_im2col(ld_device *d, void *col, const void *x, ld_dtype dt, int64_t n, int64_t h, int64_t w, int64_t c,
               int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t oh, int64_t ow) {
    int64_t total = n * oh * ow * kh * kw * c;
    if (total <= 0) return;
    cu_dev *cd = cu_begin(d);
    if (!cd) return;
    cu_win_geom g = {n, h, w, c, kh, kw, sh, sw, ph, pw, oh, ow};
    CU_FLOAT_TYPES(dt, T, k_im2col<T><<<cu_grid(total, 256), 256, 0, cd->stream>>>((T *)col, (const T *)x, g, total));
    cu_launched(cd, "im2col kernel");
}

/* dx in TX, col in TC: float32 sums in the order of the output pixels, dx rounded once */
template <typename TX, typename TC>
__global__ void k_col2im(TX *dx, const TC *col, cu_win_geom g, int64_t total) {
    int64_t rowlen = g.kh * g.kw * g.c;
    CU_LOOP(idx, total) {
        int64_t q = idx % g.c, t = idx / g.c, xx = t % g.w;
        t /= g.w;
        int64_t y = t % g.h, b = t / g.h;
        float s = 0;
        /* output rows i with i*sh - ph + ki = y for some 0 <= ki < kh */
        int64_t yp = y + g.ph, xp = xx + g.pw;
        int64_t i_lo, i_hi, j_lo, j_hi;
        cu_covering(yp, g.kh, g.sh, g.oh, &i_lo, &i_hi);
        cu_covering(xp, g.kw, g.sw, g.ow, &j_lo, &j_hi);
        for (int64_t i = i_lo; i <= i_hi; i++) {
            int64_t ki = yp - i * g.sh;
            for (int64_t j = j_lo; j <= j_hi; j++) {
                int64_t kj = xp - j * g.sw;
                s += cu_get(col[((b * g.oh + i) * g.ow + j) * rowlen + (ki * g.kw + kj) * g.c + q]);
            }
        }
        dx[idx] = cu_put<TX>(s);
    }
}

void cu_col2im(ld_device *d, void *dx, ld_dtype xdt, const void *col, ld_dtype cdt, int64_t n, int64_t h, int64_t w,
               int64_t c, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t oh,
               int64_t ow) {
    int64_t total = n * h * w * c;
    if (total <= 0) return;
    cu_dev *cd = cu_begin(d);
    if (!cd) return;
    cu_win_geom g = {n, h, w, c, kh, kw, sh, sw, ph, pw, oh, ow};
    CU_FLOAT_TYPES(xdt, TX, CU_FLOAT_TYPES(cdt, TC, k_col2im<TX, TC><<<cu_grid(total, 256), 256, 0, cd->stream>>>(
        (TX *)dx, (const TC *)col, g, total)));
    cu_launched(cd, "col2im kernel");
}

/* Max pooling: the first element of the window, then any that wins over it
   (ld_elementwise_math.h: larger, or the first NaN; the CPU's rule); arg =
   flat index into x. x and y in T (a selection: exact in a half dtype). */
template <typename T>
__global__ void k_maxpool(T *y, int64_t *arg, const T *x, cu_win_geom g, int64_t total) {
    CU_LOOP(idx, total) {
        int64_t q = idx % g.c, t = idx / g.c, j = t % g.ow;
        t /= g.ow;
        int64_t i = t % g.oh, b = t / g.oh;
        float best = -INFINITY;
        int64_t at = -1;
        for (int64_t ki = 0; ki < g.kh; ki++)
            for (int64_t kj = 0; kj < g.kw; kj++) {
                int64_t p = ((b * g.h + i * g.sh + ki) * g.w + j * g.sw + kj) * g.c + q;
                float v = cu_get(x[p]);
                if (at < 0 || ld_ew_max_wins(v, best)) { best = v; at = p; }
            }
        y[idx] = at >= 0 ? x[at] : cu_put<T>(best);
        arg[idx] = at;
    }
}

void cu_maxpool(ld_device *d, void *y, int64_t *arg, const void *x, ld_dtype dt, int64_t n, int64_t h, int64_t w,
                int64_t c, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t oh, int64_t ow) {
    int64_t total = n * oh * ow * c;
    if (total <= 0) return;
    cu_dev *cd = cu_begin(d);
    if (!cd) return;
    cu_win_geom g = {n, h, w, c, kh, kw, sh, sw, 0, 0, oh, ow};
    CU_FLOAT_TYPES(dt, T, k_maxpool<T><<<cu_grid(total, 256), 256, 0, cd->stream>>>((T *)y, arg, (const T *)x, g, total));
    cu_launched(cd, "maxpool kernel");
}

/* dx[arg[i]] += dy[i]; windows may overlap (stride < size), hence atomics,
   into float32 (dx itself, or scratch rounded into a half dx after) */
template <typename TD>
__global__ void k_maxpool_backward(float *dx, const TD *dy, const int64_t *arg, int64_t ny, int64_t nx) {
    CU_LOOP(i, ny) {
        int64_t a = arg[i];
        if (a >= 0 && a < nx) atomicAdd(dx + a, cu_get(dy[i]));
    }
}
template <typename TX>
__global__ void k_round_into(TX *dx, const float *f, int64_t n) {
    CU_LOOP(i, n) dx[i] = cu_put<TX>(f[i]);
}

void cu_maxpool_backward(ld_device *d, void *dx, ld_dtype xdt, const void *dy, ld_dtype ydt, const int64_t *arg,
                         int64_t n, int64_t ny, int64_t nx) {
    if (nx <= 0) return;
    cu_dev *cd = cu_begin(d);
    if (!cd) return;
    size_t bytes = (size_t)nx * sizeof(float);
    float *acc = xdt == LD_F32 ? (float *)dx : (float *)cu_scratch_needed(cd, bytes, "maxpool_backward");
    if (!acc) return;
    cudaError_t e = cudaMemsetAsync(acc, 0, bytes, cd->stream);
    if (e != cudaSuccess) cu_record(cd, "cudaMemsetAsync", e);
    else if (ny > 0) {
        CU_FLOAT_TYPES(ydt, TD, k_maxpool_backward<TD><<<cu_grid(ny, 256), 256, 0, cd->stream>>>(
            acc, (const TD *)dy, arg, ny, nx));
        cu_launched(cd, "maxpool_backward kernel");
    }
    if (xdt != LD_F32) {
        if (e == cudaSuccess) {
            CU_FLOAT_TYPES(xdt, TX, k_round_into<TX><<<cu_grid(nx, 256), 256, 0, cd->stream>>>((TX *)dx, acc, nx));
            cu_launched(cd, "maxpool_backward kernel (rounding)");
        }
        cu_scratch_free(cd, acc, bytes);
    }
}

/* The CPU's direct convolution (ld_cpu_conv.c) has no CUDA twin: on a GPU the
   op (ld_conv2d_bias_act, ld_ops_conv.c) lowers to im2col + cuBLAS + col2im, and
   never calls these slots. A call is a bug, reported as a device fault. */
void cu_conv2d(ld_device *d, void *y, int32_t *arg, const void *x, const void *w, const void *b, ld_conv_geom g, int relu) {
    cu_dev *cd = cu_begin(d);
    if (cd) cu_record_msg(cd, "conv2d: the direct convolution kernel is CPU-only (a GPU lowers to im2col)");
}
void cu_conv2d_backward(ld_device *d, void *dx, void *dw, void *db, const void *dy, const void *y,
                        const int32_t *arg, const void *x, const void *w, ld_conv_geom g, int relu) {
    cu_dev *cd = cu_begin(d);
    if (cd) cu_record_msg(cd, "conv2d_backward: the direct convolution kernel is CPU-only (a GPU lowers to im2col)");
}
