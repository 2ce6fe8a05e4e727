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
   flat index into x. */
__global__ void k_maxpool(float *y, int64_t *arg, const float *x, cu_win_geom g, int64_t total) {
    CU_LOOP(idx, total) {
        int64_t q = idx % g.c, t = idx / g.c, j = t % g.ow;
        t /= g.ow;
        int64_t i = t % g.oh, b = t / g.oh;
        float best = -INFINITY;
        int64_t at = -1;
        for (int64_t ki = 0; ki < g.kh; ki++)
            for (int64_t kj = 0; kj < g.kw; kj++) {
                int64_t p = ((b * g.h + i * g.sh + ki) * g.w + j * g.sw + kj) * g.c + q;
                float v = x[p];
                if (at < 0 || ld_ew_max_wins(v, best)) { best = v; at = p; }
            }
        y[idx] = best;
        arg[idx] = at;
    }
}

void cu_maxpool(ld_device *d, float *y, int64_t *arg, const float *x, int64_t n, int64_t h, int64_t w,
                int64_t c, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t oh, int64_t ow) {
    int64_t total = n * oh * ow * c;
    if (total <= 0) return;
    cu_dev *cd = cu_begin(d);
    if (!cd) return;
    cu_win_geom g = {n, h, w, c, kh, kw, sh, sw, 0, 0, oh, ow};
    k_maxpool<<<cu_grid(total, 256), 256, 0, cd->stream>>>(y, arg, x, g, total);
    cu_launched(cd, "maxpool kernel");
}

/* dx[arg[i]] += dy[i]; windows may overlap (stride < size), hence atomics */
__global__ void k_maxpool_backward(float *dx, const float *dy, const int64_t *arg, int64_t ny, int64_t nx) {
    CU_LOOP(i, ny) {
        int64_t a = arg[i];
        if (a >= 0 && a < nx) atomicAdd(dx + a, dy[i]);
    }
}

void cu_maxpool_backward(ld_device *d, float *dx, const float *dy, const int64_t *arg, int64_t n, int64_t ny,
                         int64_t nx) {
    if (nx <= 0) return;
    cu_dev *cd = cu_begin(d);
    if (!cd) return;
    cudaError_t e = cudaMemsetAsync(dx, 0, (size_t)nx * sizeof(float), cd->stream);
    if (e != cudaSuccess) { cu_record(cd, "cudaMemsetAsync", e); return; }
    if (ny <= 0) return;
    k_maxpool_backward<<<cu_grid(ny, 256), 256, 0, cd->stream>>>(dx, dy, arg, ny, nx);
    cu_launched(cd, "maxpool_backward kernel");
}

/* The CPU's direct convolution (ld_cpu_conv.c) has no CUDA twin: on a GPU the
   op (ld_conv2d_bias_act, ld_ops_conv.c) lowers to im2col + cuBLAS + col2im, and
   never calls these slots. A call is a bug, reported as a device fault. */
void cu_conv2d(ld_device *d, float *y, int32_t *arg, const float *x, const float *w, const float *b, ld_conv_geom g, int relu) {
    cu_dev *cd = cu_begin(d);
    if (cd) cu_record_msg(cd, "conv2d: the direct convolution kernel is CPU-only (a GPU lowers to im2col)");
}
void cu_conv2d_backward(ld_device *d, float *dx, float *dw, float *db, const float *dy, const float *y,
                        const int32_t *arg, const float *x, const float *w, ld_conv_geom g, int relu) {
    cu_dev *cd = cu_begin(d);
    if (cd) cu_record_msg(cd, "conv2d_backward: the direct convolution kernel is CPU-only (a GPU lowers to im2col)");
}
