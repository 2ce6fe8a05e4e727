/*
 * cuda_image.cu - the image family (ld_kernels.h, LD_LAYER_KERNELS): TF's
 * projective transform, one thread per output element, and its gradient,
 * each output element's dy added to the pixels it read (atomicAdd). Where
 * a pixel reads is ld_image_math.h's, as on the CPU.
 */
#include "cuda_common.cuh"
#include "ld_image_math.h"

/* output element idx of [n, oh, ow, c]: its image b, channel ch and the pixels it reads of its h x w image */
__device__ __forceinline__ int sample_of(int64_t idx, const float *t, int64_t nt, int64_t h, int64_t w, int64_t c,
                                         int64_t oh, int64_t ow, int nearest, int mode, int64_t *pix, float *wt,
                                         float *fillw, int64_t *b, int64_t *ch) {
    int64_t px = idx / c, ox = px % ow, r = px / ow, oy = r % oh;
    *ch = idx % c;
    *b = r / oh;
    return ld_img_sample(t + (nt == 1 ? 0 : 8 * *b), oy, ox, h, w, nearest, mode, pix, wt, fillw);
}

__global__ void k_image_transform(float *y, const float *x, const float *t, int64_t nt, int64_t h, int64_t w,
                                  int64_t c, int64_t oh, int64_t ow, int nearest, int mode, float fill, int64_t total) {
    CU_LOOP(idx, total) {
        int64_t pix[4], b, ch;
        float wt[4], fillw;
        int k = sample_of(idx, t, nt, h, w, c, oh, ow, nearest, mode, pix, wt, &fillw, &b, &ch);
        const float *img = x + b * h * w * c;
        float v = fillw * fill;
        for (int q = 0; q < k; q++) if (pix[q] >= 0) v += wt[q] * img[pix[q] * c + ch];
        y[idx] = v;
    }
}

void cu_image_transform(ld_device *d, float *y, const float *x, const float *t, int64_t nt, int64_t n, int64_t h,
                        int64_t w, int64_t c, int64_t oh, int64_t ow, int nearest, int mode, float fill_value) {
    int64_t total = n * oh * ow * c;
    if (total <= 0 || h <= 0 || w <= 0) return;
    cu_dev *cd = cu_begin(d);
    if (!cd) return;
    k_image_transform<<<cu_grid(total, 256), 256, 0, cd->stream>>>(y, x, t, nt, h, w, c, oh, ow, nearest, mode,
                                                                  fill_value, total);
    cu_launched(cd, "image_transform kernel");
}

__global__ void k_image_transform_backward(float *dx, const float *dy, const float *t, int64_t nt, int64_t h,
                                           int64_t w, int64_t c, int64_t oh, int64_t ow, int nearest, int mode,
                                           int64_t total) {
    CU_LOOP(idx, total) {
        int64_t pix[4], b, ch;
        float wt[4], fillw;
        int k = sample_of(idx, t, nt, h, w, c, oh, ow, nearest, mode, pix, wt, &fillw, &b, &ch);
        float *img = dx + b * h * w * c;
        float g = dy[idx];
        for (int q = 0; q < k; q++) if (pix[q] >= 0 && wt[q] != 0) atomicAdd(img + pix[q] * c + ch, wt[q] * g);
    }
}

void cu_image_transform_backward(ld_device *d, float *dx, const float *dy, const float *t, int64_t nt, int64_t n,
                                 int64_t h, int64_t w, int64_t c, int64_t oh, int64_t ow, int nearest, int mode) {
    int64_t in_total = n * h * w * c, total = n * oh * ow * c;
    if (in_total <= 0) return;
    cu_dev *cd = cu_begin(d);
    if (!cd) return;
    cudaError_t e = cudaMemsetAsync(dx, 0, (size_t)in_total * sizeof(float), cd->stream);
    if (e != cudaSuccess) { cu_record(cd, "cudaMemsetAsync (image_transform_backward)", e); return; }
    if (total <= 0) return;
    k_image_transform_backward<<<cu_grid(total, 256), 256, 0, cd->stream>>>(dx, dy, t, nt, h, w, c, oh, ow, nearest,
                                                                           mode, total);
    cu_launched(cd, "image_transform_backward kernel");
}
