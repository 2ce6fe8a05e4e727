/*
 * cuda_pool.cu - the pooling family (ld_kernels.h, LD_LAYER_KERNELS):
 * average pooling and its gradient, NHWC (ld_cpu_pool.c is the CPU's). The
 * backward pass gathers, one thread per input element, so no atomics. Max
 * pooling goes with the convolution (cuda_conv.cu).
 */
#include "cuda_common.cuh"

/* ---- average pooling (NHWC, padding before ph/pw, padded cells not counted) */
__device__ __forceinline__ int64_t cu_window_cells(int64_t i, int64_t pad, int64_t k, int64_t s, int64_t in) {
    int64_t a = i * s - pad, b = a + k;
    if (a < 0) a = 0;
    if (b > in) b = in;
    return b > a ? b - a : 0;
}

__global__ void k_avgpool(float *y, const float *x, cu_win_geom g, int64_t total) {
    CU_LOOP(idx, total) {
        int64_t e = idx % g.c, t = idx / g.c, q = t % g.ow;
        t /= g.ow;
        int64_t i = t % g.oh, b = t / g.oh;
        int64_t y0 = i * g.sh - g.ph, y1 = y0 + g.kh, x0 = q * g.sw - g.pw, x1 = x0 + g.kw;
        if (y0 < 0) y0 = 0;
        if (y1 > g.h) y1 = g.h;
        if (x0 < 0) x0 = 0;
        if (x1 > g.w) x1 = g.w;
        float s = 0.0f;
        for (int64_t yy = y0; yy < y1; yy++)
            for (int64_t xx = x0; xx < x1; xx++) s += x[((b * g.h + yy) * g.w + xx) * g.c + e];
        int64_t cnt = (y1 - y0) * (x1 - x0);
        y[idx] = cnt > 0 ? s * (1.0f / (float)cnt) : 0.0f;
    }
}

void cu_avgpool(ld_device *d, float *y, const float *x, int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh,
                int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t oh, int64_t ow) {
    int64_t total = n * oh * ow * c;
    if (total <= 0) return;
    cu_dev *cd = cu_begin(d);
    if (!cd) return;
    cu_win_geom g = {n, h, w, c, kh, kw, sh, sw, ph, pw, oh, ow};
    k_avgpool<<<cu_grid(total, 256), 256, 0, cd->stream>>>(y, x, g, total);
    cu_launched(cd, "avgpool kernel");
}

__global__ void k_avgpool_backward(float *dx, const float *dy, cu_win_geom g, int64_t total) {
    CU_LOOP(idx, total) {
        int64_t e = idx % g.c, t = idx / g.c, xx = t % g.w;
        t /= g.w;
        int64_t yy = t % g.h, b = t / g.h;
        int64_t yp = yy + g.ph, xp = xx + g.pw;
        int64_t i_lo, i_hi, j_lo, j_hi;
        cu_covering(yp, g.kh, g.sh, g.oh, &i_lo, &i_hi);
        cu_covering(xp, g.kw, g.sw, g.ow, &j_lo, &j_hi);
        float s = 0.0f;
        for (int64_t i = i_lo; i <= i_hi; i++) {
            int64_t ch = cu_window_cells(i, g.ph, g.kh, g.sh, g.h);
            for (int64_t j = j_lo; j <= j_hi; j++) {
                int64_t cw = cu_window_cells(j, g.pw, g.kw, g.sw, g.w);
                s += dy[((b * g.oh + i) * g.ow + j) * g.c + e] * (1.0f / (float)(ch * cw));
            }
        }
        dx[idx] = s;
    }
}

void cu_avgpool_backward(ld_device *d, float *dx, const float *dy, int64_t n, int64_t h, int64_t w, int64_t c,
                         int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t oh,
                         int64_t ow) {
    int64_t total = n * h * w * c;
    if (total <= 0) return;
    cu_dev *cd = cu_begin(d);
    if (!cd) return;
    cu_win_geom g = {n, h, w, c, kh, kw, sh, sw, ph, pw, oh, ow};
    k_avgpool_backward<<<cu_grid(total, 256), 256, 0, cd->stream>>>(dx, dy, g, total);
    cu_launched(cd, "avgpool_backward kernel");
}
