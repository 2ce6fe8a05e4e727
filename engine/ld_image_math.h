/*
 * ld_image_math.h - where an output pixel of TF's projective transform
 * (ImageProjectiveTransformV3, Keras 3's affine_transform) reads its input:
 * the arithmetic the CPU kernels (ld_cpu_image.c) and the CUDA kernels
 * (cuda/cuda_image.cu) share, so both give the same bits. Plain C; under
 * nvcc the functions are __host__ __device__.
 */
#ifndef LD_IMAGE_MATH_H
#define LD_IMAGE_MATH_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define LD_IMG_FN static inline __host__ __device__
#else
#define LD_IMG_FN static inline
#endif

/* fill modes, as ld_fill_mode (ld_ops_image.h) */
enum { LD_IMG_REFLECT = 0, LD_IMG_WRAP, LD_IMG_CONSTANT, LD_IMG_NEAREST };

/* TF's MapCoordinate (image_ops.h, after scipy's ndimage), its arithmetic:
   float coordinates, integer lengths; clamped to [0, len - 1] but CONSTANT */
LD_IMG_FN float ld_img_map(int mode, float c, int64_t len) {
    float in = c;
    if (mode == LD_IMG_REFLECT) {
        if (in < 0) {
            if (len <= 1) in = 0;
            else {
                int64_t sz2 = 2 * len;
                if (in < (float)sz2) in = (float)(sz2 * (int64_t)(-in / (float)sz2)) + in;
                in = in < (float)-len ? in + (float)sz2 : -in - 1;
            }
        } else if (in > (float)(len - 1)) {
            if (len <= 1) in = 0;
            else {
                int64_t sz2 = 2 * len;
                in -= (float)(sz2 * (int64_t)(in / (float)sz2));
                if (in >= (float)len) in = (float)sz2 - in - 1;
            }
        }
    } else if (mode == LD_IMG_WRAP) {
        if (in < 0) {
            if (len <= 1) in = 0;
            else { int64_t sz = len - 1; in += (float)(len * ((int64_t)(-in / (float)sz) + 1)); }
        } else if (in > (float)(len - 1)) {
            if (len <= 1) in = 0;
            else { int64_t sz = len - 1; in -= (float)(len * (int64_t)(in / (float)sz)); }
        }
    } else if (mode == LD_IMG_CONSTANT) {
        return in;
    }
    float hi = (float)(len - 1);
    return in < 0 ? 0 : in > hi ? hi : in;   /* TF's scalar_clamp_op(0, len - 1) */
}

/* Output pixel (oy, ox) of an h x w image under t = a0 a1 a2 b0 b1 b2 c0 c1:
   the pixels it reads (pix[k] = row * w + column, -1 where the corner is
   off the image) with their weights wt[k], k < the count returned (4:
   bilinear, 1: nearest, TF's round half away from zero). The weights of the
   corners off the image (CONSTANT's; a ceiling corner past the edge, weight
   0) go to fill_value, as TF's read_with_fill_value: *fillw is their sum (1
   for a point at infinity or NaN, which reads fill_value alone). */
LD_IMG_FN int ld_img_sample(const float *t, int64_t oy, int64_t ox, int64_t h, int64_t w, int nearest, int mode,
                            int64_t *pix, float *wt, float *fillw) {
    float fx = (float)ox, fy = (float)oy;
    float proj = t[6] * fx + t[7] * fy + 1.f;
    int n = nearest ? 1 : 4;
    *fillw = 0;
    float x = proj == 0 ? 0 : ld_img_map(mode, (t[0] * fx + t[1] * fy + t[2]) / proj, w);
    float y = proj == 0 ? 0 : ld_img_map(mode, (t[3] * fx + t[4] * fy + t[5]) / proj, h);
    if (proj == 0 || !(x == x) || !(y == y) || fabsf(x) > 4e18f || fabsf(y) > 4e18f) {
        for (int k = 0; k < n; k++) { pix[k] = -1; wt[k] = 0; }
        *fillw = 1;
        return n;
    }
    int64_t cy[4], cx[4];
    if (nearest) {
        cy[0] = (int64_t)roundf(y); cx[0] = (int64_t)roundf(x); wt[0] = 1;
    } else {
        float yf = floorf(y), xf = floorf(x), yc = yf + 1, xc = xf + 1;
        int64_t y0 = (int64_t)yf, x0 = (int64_t)xf;
        cy[0] = y0; cx[0] = x0; wt[0] = (yc - y) * (xc - x);
        cy[1] = y0; cx[1] = x0 + 1; wt[1] = (yc - y) * (x - xf);
        cy[2] = y0 + 1; cx[2] = x0; wt[2] = (y - yf) * (xc - x);
        cy[3] = y0 + 1; cx[3] = x0 + 1; wt[3] = (y - yf) * (x - xf);
    }
    for (int k = 0; k < n; k++) {
        if (cy[k] >= 0 && cy[k] < h && cx[k] >= 0 && cx[k] < w) pix[k] = cy[k] * w + cx[k];
        else { pix[k] = -1; *fillw += wt[k]; wt[k] = 0; }
    }
    return n;
}

#endif
