/*
 * ld_cpu_pool.c - the CPU kernels of the pooling family (LD_LAYER_KERNELS in
 * ld_kernels.h): average pooling and its gradient, NHWC. (Max pooling goes
 * with the convolution: ld_cpu_conv.c.)
 *
 * Each kernel splits its rows over the CPU device's pool (ld_pool.h) so that
 * every part writes its own rows of the output: no atomics, and the same
 * result from run to run. The backward pass gathers, one input cell at a
 * time, the gradients of the windows covering it.
 */
#include "ld_cpu_internal.h"

#include <stdint.h>

/* ================================================================ average pooling */
typedef struct {
    float *out; const float *in;
    int64_t n, h, w, c, kh, kw, sh, sw, ph, pw, oh, ow;
} pool_job;

/* output rows (b, i) of the forward pass */
static void avg_part(void *ctx, int p, int np) {
    const pool_job *j = ctx;
    int64_t lo, hi, c = j->c;
    ld_cpu_rows(j->n * j->oh, p, np, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        int64_t b = r / j->oh, i = r - b * j->oh;
        int64_t y0 = i * j->sh - j->ph, y1 = y0 + j->kh;
        if (y0 < 0) y0 = 0;
        if (y1 > j->h) y1 = j->h;
        for (int64_t q = 0; q < j->ow; q++) {
            int64_t x0 = q * j->sw - j->pw, x1 = x0 + j->kw;
            if (x0 < 0) x0 = 0;
            if (x1 > j->w) x1 = j->w;
            float *yo = j->out + (r * j->ow + q) * c;
            for (int64_t e = 0; e < c; e++) yo[e] = 0.0f;
            int64_t cnt = (y1 - y0) * (x1 - x0);
            for (int64_t yy = y0; yy < y1; yy++)
                for (int64_t xx = x0; xx < x1; xx++) {
                    const float *xi = j->in + ((b * j->h + yy) * j->w + xx) * c;
                    for (int64_t e = 0; e < c; e++) yo[e] += xi[e];
                }
            float inv = cnt > 0 ? 1.0f / (float)cnt : 0.0f;
            for (int64_t e = 0; e < c; e++) yo[e] *= inv;
        }
    }
}

void cpu_avgpool(ld_device *d, float *y, const float *x, int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh,
                 int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t oh, int64_t ow) {
    if (n <= 0 || oh <= 0 || ow <= 0 || c <= 0) return;
    pool_job j = {y, x, n, h, w, c, kh, kw, sh, sw, ph, pw, oh, ow};
    int np = ld_cpu_row_parts(n * oh, n * oh * ow * c * kh * kw);
    if (np <= 1) avg_part(&j, 0, 1);
    else ld_cpu_parallel(avg_part, &j, np);
}

/* floor division, positive d */
static inline int64_t fdiv(int64_t a, int64_t d) { return a >= 0 ? a / d : -((-a + d - 1) / d); }

/* the output windows covering coordinate t (padded start pad, kernel k,
   stride s, out outputs): [*lo, *hi] */
static inline void covering(int64_t t, int64_t pad, int64_t k, int64_t s, int64_t out, int64_t *lo, int64_t *hi) {
    int64_t tp = t + pad;
    *lo = fdiv(tp - k, s) + 1;
    *hi = fdiv(tp, s);
    if (*lo < 0) *lo = 0;
    if (*hi > out - 1) *hi = out - 1;
}

static inline int64_t window_cells(int64_t i, int64_t pad, int64_t k, int64_t s, int64_t in) {
    int64_t a = i * s - pad, b = a + k;
    if (a < 0) a = 0;
    if (b > in) b = in;
    return b > a ? b - a : 0;
}

/* input rows (b, y) of the backward pass: each input cell gathers dy/count
   of the windows covering it */
static void avg_back_part(void *ctx, int p, int np) {
    const pool_job *j = ctx;
    int64_t lo, hi, c = j->c;
    ld_cpu_rows(j->n * j->h, p, np, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        int64_t b = r / j->h, yy = r - b * j->h, i0, i1;
        covering(yy, j->ph, j->kh, j->sh, j->oh, &i0, &i1);
        for (int64_t xx = 0; xx < j->w; xx++) {
            int64_t q0, q1;
            covering(xx, j->pw, j->kw, j->sw, j->ow, &q0, &q1);
            float *dx = j->out + (r * j->w + xx) * c;
            for (int64_t e = 0; e < c; e++) dx[e] = 0.0f;
            for (int64_t i = i0; i <= i1; i++) {
                int64_t ch = window_cells(i, j->ph, j->kh, j->sh, j->h);
                for (int64_t q = q0; q <= q1; q++) {
                    float inv = 1.0f / (float)(ch * window_cells(q, j->pw, j->kw, j->sw, j->w));
                    const float *g = j->in + ((b * j->oh + i) * j->ow + q) * c;
                    for (int64_t e = 0; e < c; e++) dx[e] += g[e] * inv;
                }
            }
        }
    }
}

void cpu_avgpool_backward(ld_device *d, float *dx, const float *dy, int64_t n, int64_t h, int64_t w, int64_t c,
                          int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t oh,
                          int64_t ow) {
    if (n <= 0 || h <= 0 || w <= 0 || c <= 0) return;
    pool_job j = {dx, dy, n, h, w, c, kh, kw, sh, sw, ph, pw, oh, ow};
    int np = ld_cpu_row_parts(n * h, n * h * w * c * kh * kw);
    if (np <= 1) avg_back_part(&j, 0, 1);
    else ld_cpu_parallel(avg_back_part, &j, np);
}
