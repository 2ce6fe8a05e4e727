/*
 * cuda_norm.cu - the normalization family (LD_LAYER_KERNELS, ld_kernels.h):
 * layer normalization over the last axis and batch normalization with the
 * channels last, forward and backward.
 *
 * Per-row work (layer norm, its dx) is one block per row with double block
 * sums, as softmax does; both norms read and write float16 and bfloat16
 * too (float32 arithmetic, their results rounded once). Per-channel sums over rows (batch statistics,
 * dgamma/dbeta) are a column reduction in two kernels: blocks of 32 columns
 * x 16 row-threads over a chunk of rows each write one double per column to
 * scratch (blockIdx.y = the chunk), then a second kernel adds the chunks in
 * order: no atomics, the same result from run to run.
 */
#include "cuda_common.cuh"
#include "ld_norm_math.h"

#define CB 32      /* columns per block of the column reduction */
#define RB 16      /* row threads per block */

enum { M_SUM = 0, M_SQDEV = 1, M_BN_BWD = 2, M_LN_BWD = 3 };


/* part[y][0..c) and part[y][c..2c): the sums of a and b over the rows of chunk y
     M_SUM:    a = x
     M_SQDEV:  a = (x - m_j)^2, m_j from sums (bn_stats' second pass)
     M_BN_BWD: a = dy, b = dy * (x - mean[j]) * rstd[j]
     M_LN_BWD: a = dy, b = dy * (x - mean[r]) * rstd[r] */
template <typename TX, typename TD>
__global__ void k_colsum(double *part, int mode, const TX *x, const TD *dy, const float *mean,
                         const float *rstd, const float *sums, int64_t rows, int64_t c, int64_t chunk) {
    __shared__ double sa[RB][CB + 1], sb[RB][CB + 1];
    int tx = threadIdx.x, ty = threadIdx.y;
    int64_t r0 = (int64_t)blockIdx.y * chunk, r1 = r0 + chunk < rows ? r0 + chunk : rows;
    double *py = part + (int64_t)blockIdx.y * 2 * c;
    for (int64_t cb = blockIdx.x; cb * CB < c; cb += gridDim.x) {
        int64_t j = cb * CB + tx;
        double a = 0, b = 0;
        if (j < c) {
            if (mode == M_SUM) {
                for (int64_t r = r0 + ty; r < r1; r += RB) a += cu_get(x[r * c + j]);
            } else if (mode == M_SQDEV) {
                double m = ld_bn_center(sums, c, j);
                for (int64_t r = r0 + ty; r < r1; r += RB) { double t = (double)cu_get(x[r * c + j]) - m; a += t * t; }
            } else if (mode == M_BN_BWD) {
                float m = mean[j], rs = rstd[j];
                for (int64_t r = r0 + ty; r < r1; r += RB) {
                    float g = cu_get(dy[r * c + j]);
                    a += g;
                    b += (double)g * (double)((cu_get(x[r * c + j]) - m) * rs);
                }
            } else {
                for (int64_t r = r0 + ty; r < r1; r += RB) {
                    float g = cu_get(dy[r * c + j]);
                    a += g;
                    b += (double)g * (double)((cu_get(x[r * c + j]) - mean[r]) * rstd[r]);
                }
            }
        }
        sa[ty][tx] = a;
        sb[ty][tx] = b;
        __syncthreads();
        if (ty == 0 && j < c) {
            double ta = 0, tb = 0;
            for (int k = 0; k < RB; k++) { ta += sa[k][tx]; tb += sb[k][tx]; }
            py[j] = ta;
            py[c + j] = tb;
        }
        __syncthreads();
    }
}

/* the chunks added in order: o0[j] = sum a (or `count` when count >= 0, and
   then o1[j] = sum a), o1[j] = sum b; o0/o1 NULL: not wanted */
__global__ void k_colfinish(float *o0, float *o1, const double *part, int ny, int64_t c, double count) {
    CU_LOOP(j, c) {
        double a = 0, b = 0;
        for (int y = 0; y < ny; y++) { a += part[(int64_t)y * 2 * c + j]; b += part[(int64_t)y * 2 * c + c + j]; }
        if (count >= 0) {
            o0[j] = (float)count;
            o1[j] = (float)a;
        } else {
            if (o0) o0[j] = (float)a;
            if (o1) o1[j] = (float)b;
        }
    }
}

/* x in xdt, dy in ydt (float32, or a half dtype) */
static void colsum(cu_dev *cd, ld_device *d, const char *what, int mode, float *o0, float *o1, double count,
                   const void *x, ld_dtype xdt, const void *dy, ld_dtype ydt, const float *mean, const float *rstd,
                   const float *sums, int64_t rows, int64_t c) {
    if (c <= 0) return;
    int64_t ny = rows > 0 ? (rows + 1023) / 1024 : 1;
    if (ny > 128) ny = 128;
    while (ny > 1 && ny * 2 * c > ((int64_t)1 << 23)) ny /= 2;   /* scratch at most 64 MiB */
    int64_t chunk = rows > 0 ? (rows + ny - 1) / ny : 0;
    size_t bytes = (size_t)ny * 2 * (size_t)c * sizeof(double);
    double *part = (double *)cu_scratch_needed(cd, bytes, what);
    if (!part) return;
    int64_t gx = (c + CB - 1) / CB;
    if (gx > 4096) gx = 4096;
    dim3 grid((unsigned)gx, (unsigned)ny), block(CB, RB);
    CU_FLOAT_TYPES(xdt, TX, CU_FLOAT_TYPES(ydt, TD, k_colsum<TX, TD><<<grid, block, 0, cd->stream>>>(
        part, mode, (const TX *)x, (const TD *)dy, mean, rstd, sums, rows, c, chunk)));
    if (cu_launched(cd, what) == LD_OK) {
        k_colfinish<<<cu_grid(c, 256), 256, 0, cd->stream>>>(o0, o1, part, (int)ny, c, count);
        cu_launched(cd, what);
    }
    cu_scratch_free(cd, part, bytes);
}

/* ================================================================ layer norm */
/* x in TX, y in TY (float, cu_f16, cu_bf16): float32 arithmetic, y rounded once */
template <typename TX, typename TY>
__global__ void k_layer_norm(TY *y, float *mean, float *rstd, const TX *x, const float *gamma, const float *beta,
                             int64_t rows, int64_t c, float eps) {
    __shared__ double sh[32];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const TX *xr = x + r * c;
        TY *yr = y + r * c;
        double s = 0;
        for (int64_t k = threadIdx.x; k < c; k += blockDim.x) s += cu_get(xr[k]);
        s = cu_block_sum(s, sh);
        double m = s / (double)c, v = 0;
        for (int64_t k = threadIdx.x; k < c; k += blockDim.x) { double t = cu_get(xr[k]) - m; v += t * t; }
        v = cu_block_sum(v, sh) / (double)c;
        float mf = (float)m, rs = (float)(1.0 / sqrt(v + (double)eps));
        for (int64_t k = threadIdx.x; k < c; k += blockDim.x) {
            float t = (cu_get(xr[k]) - mf) * rs;
            if (gamma) t *= gamma[k];
            if (beta) t += beta[k];
            yr[k] = cu_put<TY>(t);
        }
        if (threadIdx.x == 0) { mean[r] = mf; rstd[r] = rs; }
    }
}

void cu_layer_norm(ld_device *d, void *y, ld_dtype ydt, float *mean, float *rstd, const void *x, ld_dtype xdt,
                   const float *gamma, const float *beta, int64_t rows, int64_t c, float eps) {
    if (rows <= 0 || c <= 0) return;
    cu_dev *cd = cu_begin(d);
    if (!cd) return;
    unsigned grid = (unsigned)(rows < 65536 ? rows : 65536);
    CU_FLOAT_TYPES(xdt, TX, CU_FLOAT_TYPES(ydt, TY, k_layer_norm<TX, TY><<<grid, row_threads(c), 0, cd->stream>>>(
        (TY *)y, mean, rstd, (const TX *)x, gamma, beta, rows, c, eps)));
    cu_launched(cd, "layer_norm kernel");
}

/* dy in TD, x and dx in TX */
template <typename TX, typename TD>
__global__ void k_layer_norm_dx(TX *dx, const TD *dy, const TX *x, const float *mean, const float *rstd,
                                const float *gamma, int64_t rows, int64_t c) {
    __shared__ double sh[32];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const TX *xr = x + r * c;
        const TD *dyr = dy + r * c;
        float m = mean[r], rs = rstd[r];
        double sg = 0, sgx = 0;
        for (int64_t k = threadIdx.x; k < c; k += blockDim.x) {
            double g = gamma ? (double)cu_get(dyr[k]) * gamma[k] : (double)cu_get(dyr[k]);
            sg += g;
            sgx += g * (double)((cu_get(xr[k]) - m) * rs);
        }
        sg = cu_block_sum(sg, sh);
        sgx = cu_block_sum(sgx, sh);
        float mg = (float)(sg / (double)c), mgx = (float)(sgx / (double)c);
        TX *dxr = dx + r * c;
        for (int64_t k = threadIdx.x; k < c; k += blockDim.x) {
            float g = gamma ? cu_get(dyr[k]) * gamma[k] : cu_get(dyr[k]);
            float xh = (cu_get(xr[k]) - m) * rs;
            dxr[k] = cu_put<TX>(rs * (g - mg - xh * mgx));
        }
    }
}

void cu_layer_norm_backward(ld_device *d, void *dx, float *dgamma, float *dbeta, const void *dy, ld_dtype ydt,
                            const void *x, ld_dtype xdt, const float *mean, const float *rstd, const float *gamma,
                            int64_t rows, int64_t c) {
    if (c <= 0) return;
    cu_dev *cd = cu_begin(d);
    if (!cd) return;
    if (dx && rows > 0) {
        unsigned grid = (unsigned)(rows < 65536 ? rows : 65536);
        CU_FLOAT_TYPES(xdt, TX, CU_FLOAT_TYPES(ydt, TD, k_layer_norm_dx<TX, TD><<<grid, row_threads(c), 0, cd->stream>>>(
            (TX *)dx, (const TD *)dy, (const TX *)x, mean, rstd, gamma, rows, c)));
        cu_launched(cd, "layer_norm_backward kernel");
    }
    if (dgamma || dbeta)
        colsum(cd, d, "layer_norm_backward (dgamma, dbeta)", M_LN_BWD, dbeta, dgamma, -1, x, xdt, dy, ydt, mean, rstd,
               NULL, rows, c);
}

/* ================================================================ batch norm */
/* x, y, dy, dx in float32 or a half dtype: read widened, the arithmetic
   float32's (the sums double's), the results rounded once */
void cu_bn_stats(ld_device *d, float *out, const float *sums, const void *x, ld_dtype xdt, int64_t rows, int64_t c) {
    if (c <= 0) return;
    cu_dev *cd = cu_begin(d);
    if (!cd) return;
    if (!sums) colsum(cd, d, "bn_stats kernel", M_SUM, out, out + c, (double)rows, x, xdt, NULL, LD_F32, NULL, NULL,
                          NULL, rows, c);
    else colsum(cd, d, "bn_stats kernel", M_SQDEV, out, NULL, -1, x, xdt, NULL, LD_F32, NULL, NULL, sums, rows, c);
}

__global__ void k_bn_finalize(float *mean, float *rstd, float *mm, float *mv, const float *sums, const float *m2,
                              int64_t c, float momentum, float eps, int training) {
    CU_LOOP(k, c) {
        ld_bn_finalize_channel(mean, rstd, mm, mv, sums, m2, c, k, momentum, eps, training);
    }
}

void cu_bn_finalize(ld_device *d, float *mean, float *rstd, float *mm, float *mv, const float *sums, const float *m2,
                    int64_t c, float momentum, float eps, int training) {
    if (c <= 0) return;
    cu_dev *cd = cu_begin(d);
    if (!cd) return;
    k_bn_finalize<<<cu_grid(c, 256), 256, 0, cd->stream>>>(mean, rstd, mm, mv, sums, m2, c, momentum, eps, training);
    cu_launched(cd, "bn_finalize kernel");
}

template <typename TX, typename TY>
__global__ void k_bn_apply(TY *y, const TX *x, const float *mean, const float *rstd, const float *gamma,
                           const float *beta, int64_t n, int64_t c) {
    CU_LOOP(i, n) {
        int64_t k = i % c;
        float t = (cu_get(x[i]) - mean[k]) * rstd[k];
        if (gamma) t *= gamma[k];
        if (beta) t += beta[k];
        y[i] = cu_put<TY>(t);
    }
}

void cu_bn_apply(ld_device *d, void *y, ld_dtype ydt, const void *x, ld_dtype xdt, const float *mean,
                 const float *rstd, const float *gamma, const float *beta, int64_t rows, int64_t c) {
    if (rows <= 0 || c <= 0) return;
    cu_dev *cd = cu_begin(d);
    if (!cd) return;
    int64_t n = rows * c;
    CU_FLOAT_TYPES(xdt, TX, CU_FLOAT_TYPES(ydt, TY, k_bn_apply<TX, TY><<<cu_grid(n, 256), 256, 0, cd->stream>>>(
        (TY *)y, (const TX *)x, mean, rstd, gamma, beta, n, c)));
    cu_launched(cd, "bn_apply kernel");
}

void cu_bn_backward_reduce(ld_device *d, float *red, const void *dy, ld_dtype ydt, const void *x, ld_dtype xdt,
                           const float *mean, const float *rstd, int64_t rows, int64_t c) {
    if (c <= 0) return;
    cu_dev *cd = cu_begin(d);
    if (!cd) return;
    colsum(cd, d, "bn_backward_reduce kernel", M_BN_BWD, red, red + c, -1, x, xdt, dy, ydt, mean, rstd, NULL, rows, c);
}

/* dy in TD; x and dx in TX */
template <typename TX, typename TD>
__global__ void k_bn_backward(TX *dx, const TD *dy, const TX *x, const float *mean, const float *rstd,
                              const float *gamma, const float *red, const float *sums, int64_t n, int64_t c,
                              int training) {
    CU_LOOP(i, n) {
        int64_t k = i % c;
        float s = rstd[k];
        if (gamma) s *= gamma[k];
        if (!training) {
            dx[i] = cu_put<TX>(cu_get(dy[i]) * s);
        } else {
            float cnt = sums[k] > 0 ? sums[k] : 1.0f;
            float xh = (cu_get(x[i]) - mean[k]) * rstd[k];
            dx[i] = cu_put<TX>(s * (cu_get(dy[i]) - red[k] / cnt - xh * (red[c + k] / cnt)));
        }
    }
}

void cu_bn_backward(ld_device *d, void *dx, const void *dy, ld_dtype ydt, const void *x, ld_dtype xdt,
                    const float *mean, const float *rstd, const float *gamma, const float *red, const float *sums,
                    int64_t rows, int64_t c, int training) {
    if (rows <= 0 || c <= 0) return;
    cu_dev *cd = cu_begin(d);
    if (!cd) return;
    int64_t n = rows * c;
    CU_FLOAT_TYPES(xdt, TX, CU_FLOAT_TYPES(ydt, TD, k_bn_backward<TX, TD><<<cu_grid(n, 256), 256, 0, cd->stream>>>(
        (TX *)dx, (const TD *)dy, (const TX *)x, mean, rstd, gamma, red, sums, n, c, training)));
    cu_launched(cd, "bn_backward kernel");
}
