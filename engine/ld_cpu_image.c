/*
 * ld_cpu_image.c - the CPU kernels of the image family (LD_LAYER_KERNELS in
 * ld_kernels.h): TF's projective transform and its gradient. The forward
 * splits the output rows over the pool; the gradient splits the images
 * (each image's pixels are written only by its own outputs), so no two
 * parts write the same element and every run gives the same bits.
 */
#include "ld_cpu_internal.h"
#include "ld_image_math.h"

#include <string.h>

typedef struct {
    float *out; const float *in, *t;
    int64_t nt, n, h, w, c, oh, ow;   /* input h x w, output oh x ow */
    int nearest, mode;
    float fill;
} img_job;

static void transform_part(void *ctx, int p, int np) {
    const img_job *j = ctx;
    int64_t lo, hi, pix[4];
    float wt[4], fillw;
    ld_cpu_rows(j->n * j->oh, p, np, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        int64_t b = r / j->oh, oy = r - b * j->oh;
        const float *t = j->t + (j->nt == 1 ? 0 : 8 * b), *img = j->in + b * j->h * j->w * j->c;
        for (int64_t ox = 0; ox < j->ow; ox++) {
            int k = ld_img_sample(t, oy, ox, j->h, j->w, j->nearest, j->mode, pix, wt, &fillw);
            float *y = j->out + ((r * j->ow) + ox) * j->c;
            for (int64_t ch = 0; ch < j->c; ch++) {
                float v = fillw * j->fill;
                for (int q = 0; q < k; q++) if (pix[q] >= 0) v += wt[q] * img[pix[q] * j->c + ch];
                y[ch] = v;
            }
        }
    }
}

void cpu_image_transform(ld_device *d, float *y, const float *x, const float *t, int64_t nt, int64_t n, int64_t h,
                         int64_t w, int64_t c, int64_t oh, int64_t ow, int nearest, int mode, float fill_value) {
    (void)d;
    if (n <= 0 || h <= 0 || w <= 0 || c <= 0 || oh <= 0 || ow <= 0) return;
    img_job j = {y, x, t, nt, n, h, w, c, oh, ow, nearest, mode, fill_value};
    int np = ld_cpu_row_parts(n * oh, n * oh * ow * c * (nearest ? 2 : 8));
    if (np <= 1) transform_part(&j, 0, 1);
    else ld_cpu_parallel(transform_part, &j, np);
}

static void transform_back_part(void *ctx, int p, int np) {
    const img_job *j = ctx;
    int64_t lo, hi, pix[4], plane = j->h * j->w * j->c, oplane = j->oh * j->ow * j->c;
    float wt[4], fillw;
    ld_cpu_rows(j->n, p, np, &lo, &hi);
    for (int64_t b = lo; b < hi; b++) {
        const float *t = j->t + (j->nt == 1 ? 0 : 8 * b), *dy = j->in + b * oplane;
        float *dx = j->out + b * plane;
        memset(dx, 0, (size_t)plane * sizeof(float));
        for (int64_t oy = 0; oy < j->oh; oy++)
            for (int64_t ox = 0; ox < j->ow; ox++) {
                int k = ld_img_sample(t, oy, ox, j->h, j->w, j->nearest, j->mode, pix, wt, &fillw);
                const float *g = dy + (oy * j->ow + ox) * j->c;
                for (int q = 0; q < k; q++) {
                    if (pix[q] < 0 || wt[q] == 0) continue;
                    float *to = dx + pix[q] * j->c;
                    for (int64_t ch = 0; ch < j->c; ch++) to[ch] += wt[q] * g[ch];
                }
            }
    }
}

void cpu_image_transform_backward(ld_device *d, float *dx, const float *dy, const float *t, int64_t nt, int64_t n,
                                  int64_t h, int64_t w, int64_t c, int64_t oh, int64_t ow, int nearest, int mode) {
    (void)d;
    if (n <= 0 || h <= 0 || w <= 0 || c <= 0) return;
    img_job j = {dx, dy, t, nt, n, h, w, c, oh, ow, nearest, mode, 0};
    if (oh <= 0 || ow <= 0) { memset(dx, 0, sizeof(float) * (size_t)(n * h * w * c)); return; }
    int np = ld_cpu_row_parts(n, n * oh * ow * c * (nearest ? 2 : 8));
    if (np <= 1) transform_back_part(&j, 0, 1);
    else ld_cpu_parallel(transform_back_part, &j, np);
}
