/*
 * ld_cpu.c - the CPU backend: host memory with a caching allocator, and the
 * kernels (OpenBLAS for matrix products, plain C loops the compiler
 * vectorises for the rest).
 */
#include "ld_device.h"

#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ================================================================ memory
 * A training step allocates the same sizes every step; glibc returns big
 * blocks to the kernel with munmap and the next step page-faults them back.
 * Freed blocks of 4 KiB and more are kept in exact-size lists (sizes rounded
 * to 4 KiB) up to a cap, and handed out again. */
#define CACHE_MIN 4096
#define CACHE_SLOTS 512
typedef struct { size_t size; void *p; } cache_entry;
static struct {
    pthread_mutex_t mu;
    cache_entry e[CACHE_SLOTS];
    int n;
    size_t bytes, cap;
} cache = {PTHREAD_MUTEX_INITIALIZER, {{0, 0}}, 0, 0, (size_t)1 << 30};

static size_t round_size(size_t n) {
    return n < CACHE_MIN ? n : (n + CACHE_MIN - 1) & ~(size_t)(CACHE_MIN - 1);
}

static void cache_trim(void) {
    pthread_mutex_lock(&cache.mu);
    for (int i = 0; i < cache.n; i++) ld_host_free(cache.e[i].p, cache.e[i].size);
    cache.n = 0;
    cache.bytes = 0;
    pthread_mutex_unlock(&cache.mu);
}

static void *cpu_alloc(ld_device *d, size_t nbytes) {
    size_t sz = round_size(nbytes);
    if (sz >= CACHE_MIN) {
        pthread_mutex_lock(&cache.mu);
        for (int i = cache.n - 1; i >= 0; i--) {
            if (cache.e[i].size == sz) {
                void *p = cache.e[i].p;
                cache.e[i] = cache.e[--cache.n];
                cache.bytes -= sz;
                pthread_mutex_unlock(&cache.mu);
                return p;
            }
        }
        pthread_mutex_unlock(&cache.mu);
    }
    void *p = ld_host_alloc(sz);
    if (!p && cache.n) {         /* give the cache back and try once more */
        cache_trim();
        ld_clear_error();
        p = ld_host_alloc(sz);
    }
    return p;
}

static void cpu_free(ld_device *d, void *p, size_t nbytes) {
    size_t sz = round_size(nbytes);
    if (sz >= CACHE_MIN) {
        pthread_mutex_lock(&cache.mu);
        if (cache.n < CACHE_SLOTS && cache.bytes + sz <= cache.cap) {
            cache.e[cache.n].size = sz;
            cache.e[cache.n].p = p;
            cache.n++;
            cache.bytes += sz;
            pthread_mutex_unlock(&cache.mu);
            return;
        }
        pthread_mutex_unlock(&cache.mu);
    }
    ld_host_free(p, sz);
}

static int cpu_to_host(ld_device *d, void *host, const void *src, size_t n) { memcpy(host, src, n); return 0; }
static int cpu_from_host(ld_device *d, void *dst, const void *host, size_t n) { memcpy(dst, host, n); return 0; }
static void cpu_sync(ld_device *d) {}

/* ================================================================ copies */
static inline double load_as_double(const void *p, ld_dtype dt, int64_t i) {
    switch (dt) {
    case LD_F32: return ((const float *)p)[i];
    case LD_I32: return ((const int32_t *)p)[i];
    case LD_I64: return (double)((const int64_t *)p)[i];
    default: return ((const uint8_t *)p)[i];
    }
}
static inline void store_from_double(void *p, ld_dtype dt, int64_t i, double v) {
    switch (dt) {
    case LD_F32: ((float *)p)[i] = (float)v; break;
    case LD_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    case LD_I64: ((int64_t *)p)[i] = (int64_t)v; break;
    default: ((uint8_t *)p)[i] = (uint8_t)v; break;
    }
}

static void cpu_copy_strided(ld_device *d, void *dst, ld_dtype ddt, const void *src, ld_dtype sdt,
                             int ndim, const int64_t *shape, const int64_t *ss) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    if (n == 0) return;
    size_t es = ld_dtype_size(sdt);
    /* contiguous source of the same type: one memcpy */
    int contig = 1;
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) { if (shape[i] != 1 && ss[i] != s) contig = 0; s *= shape[i]; }
    if (contig && ddt == sdt) { memcpy(dst, src, (size_t)n * es); return; }
    int64_t idx[LD_MAX_DIMS] = {0};
    int64_t inner = ndim ? shape[ndim - 1] : 1, is = ndim ? ss[ndim - 1] : 0;
    int64_t off = 0, o = 0;
    for (;;) {
        if (ddt == LD_F32 && sdt == LD_F32) {
            const float *sp = (const float *)src + off;
            float *dp = (float *)dst + o;
            if (is == 1) memcpy(dp, sp, (size_t)inner * 4);
            else for (int64_t j = 0; j < inner; j++) dp[j] = sp[j * is];
        } else {
            for (int64_t j = 0; j < inner; j++)
                store_from_double(dst, ddt, o + j, load_as_double(src, sdt, off + j * is));
        }
        o += inner;
        int k = ndim - 2;
        for (; k >= 0; k--) {
            off += ss[k];
            if (++idx[k] < shape[k]) break;
            off -= ss[k] * shape[k];
            idx[k] = 0;
        }
        if (k < 0) break;
    }
}

static void cpu_fill(ld_device *d, void *dst, ld_dtype dt, int64_t n, double v) {
    if (v == 0) { memset(dst, 0, (size_t)n * ld_dtype_size(dt)); return; }
    if (dt == LD_F32) { float f = (float)v, *p = dst; for (int64_t i = 0; i < n; i++) p[i] = f; return; }
    for (int64_t i = 0; i < n; i++) store_from_double(dst, dt, i, v);
}

/* ================================================================ elementwise */
static inline float bin(ld_binary_op op, float a, float b) {
    switch (op) {
    case LD_BIN_ADD: return a + b;
    case LD_BIN_SUB: return a - b;
    case LD_BIN_MUL: return a * b;
    case LD_BIN_DIV: return a / b;
    case LD_BIN_POW: return powf(a, b);
    case LD_BIN_MAX: return a > b ? a : b;
    case LD_BIN_MIN: return a < b ? a : b;
    case LD_BIN_EQ: return a == b;
    case LD_BIN_LT: return a < b;
    case LD_BIN_GT: return a > b;
    default: return 0;
    }
}

/* The inner loop, specialised per op so the compiler vectorises it. */
#define INNER(OPEXPR) \
    if (as == 1 && bs == 1) for (int64_t j = 0; j < n; j++) { float x = a[j], y = b[j]; out[j] = OPEXPR; } \
    else if (as == 1 && bs == 0) { float y = b[0]; for (int64_t j = 0; j < n; j++) { float x = a[j]; out[j] = OPEXPR; } } \
    else if (as == 0 && bs == 1) { float x = a[0]; for (int64_t j = 0; j < n; j++) { float y = b[j]; out[j] = OPEXPR; } } \
    else for (int64_t j = 0; j < n; j++) { float x = a[j * as], y = b[j * bs]; out[j] = OPEXPR; }

static void bin_inner(ld_binary_op op, float *out, const float *a, int64_t as, const float *b,
                      int64_t bs, int64_t n) {
    switch (op) {
    case LD_BIN_ADD: INNER(x + y) break;
    case LD_BIN_SUB: INNER(x - y) break;
    case LD_BIN_MUL: INNER(x * y) break;
    case LD_BIN_DIV: INNER(x / y) break;
    default: for (int64_t j = 0; j < n; j++) out[j] = bin(op, a[j * as], b[j * bs]); break;
    }
}

static void cpu_binary(ld_device *d, ld_binary_op op, float *out, const float *a, const int64_t *sa,
                       const float *b, const int64_t *sb, int ndim, const int64_t *shape) {
    if (ndim == 0) { out[0] = bin(op, a[0], b[0]); return; }
    /* merge the trailing dims that are contiguous in both operands */
    int64_t total = 1;
    for (int i = 0; i < ndim; i++) total *= shape[i];
    if (total == 0) return;
    int last = ndim - 1;
    int64_t inner = shape[last], as = sa[last], bs = sb[last];
    while (last > 0) {
        int p = last - 1;
        int a_ok = (as == 1 && sa[p] == inner) || (as == 0 && sa[p] == 0);
        int b_ok = (bs == 1 && sb[p] == inner) || (bs == 0 && sb[p] == 0);
        if (!(a_ok && b_ok) || (as == 0 && bs == 0)) break;
        inner *= shape[p];
        last = p;
    }
    int64_t idx[LD_MAX_DIMS] = {0}, ao = 0, bo = 0;
    for (int64_t o = 0; o < total; o += inner) {
        bin_inner(op, out + o, a + ao, as, b + bo, bs, inner);
        int k = last - 1;
        for (; k >= 0; k--) {
            ao += sa[k]; bo += sb[k];
            if (++idx[k] < shape[k]) break;
            ao -= sa[k] * shape[k]; bo -= sb[k] * shape[k];
            idx[k] = 0;
        }
    }
}

static inline float gelu_f(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678f)); }

static void cpu_unary(ld_device *d, ld_unary_op op, float *y, const float *x, int64_t n) {
    switch (op) {
    case LD_UN_NEG: for (int64_t i = 0; i < n; i++) y[i] = -x[i]; break;
    case LD_UN_EXP: for (int64_t i = 0; i < n; i++) y[i] = expf(x[i]); break;
    case LD_UN_LOG: for (int64_t i = 0; i < n; i++) y[i] = logf(x[i]); break;
    case LD_UN_SQRT: for (int64_t i = 0; i < n; i++) y[i] = sqrtf(x[i]); break;
    case LD_UN_ABS: for (int64_t i = 0; i < n; i++) y[i] = fabsf(x[i]); break;
    case LD_UN_RELU: for (int64_t i = 0; i < n; i++) y[i] = x[i] > 0 ? x[i] : 0; break;
    case LD_UN_SIGMOID: for (int64_t i = 0; i < n; i++) y[i] = 1.0f / (1.0f + expf(-x[i])); break;
    case LD_UN_TANH: for (int64_t i = 0; i < n; i++) y[i] = tanhf(x[i]); break;
    case LD_UN_GELU: for (int64_t i = 0; i < n; i++) y[i] = gelu_f(x[i]); break;
    case LD_UN_SQUARE: for (int64_t i = 0; i < n; i++) y[i] = x[i] * x[i]; break;
    default: break;
    }
}

static void cpu_unary_backward(ld_device *d, ld_unary_op op, float *dx, const float *dy,
                               const float *x, const float *y, int64_t n) {
    switch (op) {
    case LD_UN_NEG: for (int64_t i = 0; i < n; i++) dx[i] = -dy[i]; break;
    case LD_UN_EXP: for (int64_t i = 0; i < n; i++) dx[i] = dy[i] * y[i]; break;
    case LD_UN_LOG: for (int64_t i = 0; i < n; i++) dx[i] = dy[i] / x[i]; break;
    case LD_UN_SQRT: for (int64_t i = 0; i < n; i++) dx[i] = dy[i] * 0.5f / y[i]; break;
    case LD_UN_ABS: for (int64_t i = 0; i < n; i++) dx[i] = x[i] > 0 ? dy[i] : (x[i] < 0 ? -dy[i] : 0); break;
    case LD_UN_RELU: for (int64_t i = 0; i < n; i++) dx[i] = x[i] > 0 ? dy[i] : 0; break;
    case LD_UN_SIGMOID: for (int64_t i = 0; i < n; i++) dx[i] = dy[i] * y[i] * (1 - y[i]); break;
    case LD_UN_TANH: for (int64_t i = 0; i < n; i++) dx[i] = dy[i] * (1 - y[i] * y[i]); break;
    case LD_UN_GELU:
        for (int64_t i = 0; i < n; i++) {
            float v = x[i];
            float cdf = 0.5f * (1.0f + erff(v * 0.70710678f));
            float pdf = 0.39894228f * expf(-0.5f * v * v);
            dx[i] = dy[i] * (cdf + v * pdf);
        }
        break;
    case LD_UN_SQUARE: for (int64_t i = 0; i < n; i++) dx[i] = dy[i] * 2 * x[i]; break;
    default: break;
    }
}

static void cpu_scale_add(ld_device *d, float *y, float a, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}

static void cpu_reduce(ld_device *d, ld_reduce_op op, void *outp, const float *x, int64_t outer,
                       int64_t n, int64_t inner) {
    if (op == LD_RED_SUM) {
        float *out = outp;
        if (inner == 1) {
            for (int64_t o = 0; o < outer; o++) {
                const float *r = x + o * n;
                double s = 0;
                for (int64_t j = 0; j < n; j++) s += r[j];
                out[o] = (float)s;
            }
            return;
        }
        for (int64_t o = 0; o < outer; o++) {
            float *dst = out + o * inner;
            memset(dst, 0, (size_t)inner * sizeof(float));
            for (int64_t j = 0; j < n; j++) {
                const float *r = x + (o * n + j) * inner;
                for (int64_t i = 0; i < inner; i++) dst[i] += r[i];
            }
        }
        return;
    }
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t i = 0; i < inner; i++) {
            const float *r = x + o * n * inner + i;
            float best = n ? r[0] : -INFINITY;
            int64_t arg = 0;
            for (int64_t j = 1; j < n; j++) {
                float v = r[j * inner];
                if (v > best || (isnan(v) && !isnan(best))) { best = v; arg = j; }
            }
            if (op == LD_RED_MAX) ((float *)outp)[o * inner + i] = best;
            else ((int64_t *)outp)[o * inner + i] = arg;
        }
    }
}

static void cpu_gemm(ld_device *d, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha,
                     const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                     int64_t ldc) {
    if (m == 0 || n == 0) return;
    if (k == 0) {
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) c[i * ldc + j] = beta == 0 ? 0 : beta * c[i * ldc + j];
        return;
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (blasint)m, (blasint)n, (blasint)k, alpha, a, (blasint)lda, b, (blasint)ldb, beta, c,
                (blasint)ldc);
}

static void cpu_softmax(ld_device *d, float *out, const float *x, int64_t rows, int64_t cols, int lg) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        float *yr = out + r * cols;
        float m = -INFINITY;
        for (int64_t j = 0; j < cols; j++) if (xr[j] > m) m = xr[j];
        double s = 0;
        for (int64_t j = 0; j < cols; j++) s += expf(xr[j] - m);
        if (lg) {
            float ls = m + (float)log(s);
            for (int64_t j = 0; j < cols; j++) yr[j] = xr[j] - ls;
        } else {
            float inv = (float)(1.0 / s);
            for (int64_t j = 0; j < cols; j++) yr[j] = expf(xr[j] - m) * inv;
        }
    }
}

/* ================================================================ conv / pool (NHWC) */
static void cpu_im2col(ld_device *d, float *col, const float *x, int64_t n, int64_t h, int64_t w,
                       int64_t c, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph,
                       int64_t pw, int64_t oh, int64_t ow) {
    int64_t rowlen = kh * kw * c;
    for (int64_t b = 0; b < n; b++)
        for (int64_t i = 0; i < oh; i++)
            for (int64_t j = 0; j < ow; j++) {
                float *dst = col + ((b * oh + i) * ow + j) * rowlen;
                for (int64_t ki = 0; ki < kh; ki++) {
                    int64_t y = i * sh - ph + ki;
                    for (int64_t kj = 0; kj < kw; kj++) {
                        int64_t xx = j * sw - pw + kj;
                        float *o = dst + (ki * kw + kj) * c;
                        if (y < 0 || y >= h || xx < 0 || xx >= w) memset(o, 0, (size_t)c * 4);
                        else memcpy(o, x + ((b * h + y) * w + xx) * c, (size_t)c * 4);
                    }
                }
            }
}

static void cpu_col2im(ld_device *d, float *dx, const float *col, int64_t n, int64_t h, int64_t w,
                       int64_t c, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph,
                       int64_t pw, int64_t oh, int64_t ow) {
    memset(dx, 0, (size_t)(n * h * w * c) * 4);
    int64_t rowlen = kh * kw * c;
    for (int64_t b = 0; b < n; b++)
        for (int64_t i = 0; i < oh; i++)
            for (int64_t j = 0; j < ow; j++) {
                const float *src = col + ((b * oh + i) * ow + j) * rowlen;
                for (int64_t ki = 0; ki < kh; ki++) {
                    int64_t y = i * sh - ph + ki;
                    if (y < 0 || y >= h) continue;
                    for (int64_t kj = 0; kj < kw; kj++) {
                        int64_t xx = j * sw - pw + kj;
                        if (xx < 0 || xx >= w) continue;
                        float *o = dx + ((b * h + y) * w + xx) * c;
                        const float *s = src + (ki * kw + kj) * c;
                        for (int64_t q = 0; q < c; q++) o[q] += s[q];
                    }
                }
            }
}

static void cpu_maxpool(ld_device *d, float *y, int64_t *arg, const float *x, int64_t n, int64_t h,
                        int64_t w, int64_t c, int64_t kh, int64_t kw, int64_t sh, int64_t sw,
                        int64_t oh, int64_t ow) {
    for (int64_t b = 0; b < n; b++)
        for (int64_t i = 0; i < oh; i++)
            for (int64_t j = 0; j < ow; j++) {
                float *yo = y + ((b * oh + i) * ow + j) * c;
                int64_t *ao = arg + ((b * oh + i) * ow + j) * c;
                for (int64_t q = 0; q < c; q++) { yo[q] = -INFINITY; ao[q] = -1; }
                for (int64_t ki = 0; ki < kh; ki++)
                    for (int64_t kj = 0; kj < kw; kj++) {
                        int64_t base = ((b * h + i * sh + ki) * w + j * sw + kj) * c;
                        const float *xi = x + base;
                        for (int64_t q = 0; q < c; q++)
                            if (xi[q] > yo[q] || ao[q] < 0) { yo[q] = xi[q]; ao[q] = base + q; }
                    }
            }
}

static void cpu_maxpool_backward(ld_device *d, float *dx, const float *dy, const int64_t *arg,
                                 int64_t ny, int64_t nx) {
    memset(dx, 0, (size_t)nx * 4);
    for (int64_t i = 0; i < ny; i++) dx[arg[i]] += dy[i];
}

/* ================================================================ optimizers (Keras' formulas) */
static void cpu_sgd(ld_device *d, float *w, float *v, const float *g, int64_t n, float lr,
                    float mom, int nesterov, float wd) {
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i] + wd * w[i];
        if (v) {
            v[i] = mom * v[i] - lr * gi;
            w[i] += nesterov ? mom * v[i] - lr * gi : v[i];
        } else {
            w[i] -= lr * gi;
        }
    }
}

static void cpu_adam(ld_device *d, float *w, float *m, float *v, const float *g, int64_t n, float lr,
                     float b1, float b2, float eps, int64_t step, float wd, int decoupled) {
    double alpha = lr * sqrt(1.0 - pow(b2, (double)step)) / (1.0 - pow(b1, (double)step));
    float a = (float)alpha, c1 = 1 - b1, c2 = 1 - b2;
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i];
        if (decoupled) w[i] -= lr * wd * w[i];
        else gi += wd * w[i];
        m[i] += (gi - m[i]) * c1;
        v[i] += (gi * gi - v[i]) * c2;
        w[i] -= a * m[i] / (sqrtf(v[i]) + eps);
    }
}

static void cpu_rmsprop(ld_device *d, float *w, float *ms, float *mom, const float *g, int64_t n,
                        float lr, float rho, float momentum, float eps) {
    for (int64_t i = 0; i < n; i++) {
        ms[i] = rho * ms[i] + (1 - rho) * g[i] * g[i];
        float inc = lr * g[i] / sqrtf(ms[i] + eps);
        if (mom) { mom[i] = momentum * mom[i] + inc; w[i] -= mom[i]; }
        else w[i] -= inc;
    }
}

static const ld_backend cpu_backend = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
    .to_host = cpu_to_host,
    .from_host = cpu_from_host,
    .synchronize = cpu_sync,
    .copy_strided = cpu_copy_strided,
    .fill = cpu_fill,
    .binary = cpu_binary,
    .unary = cpu_unary,
    .unary_backward = cpu_unary_backward,
    .scale_add = cpu_scale_add,
    .reduce = cpu_reduce,
    .gemm = cpu_gemm,
    .softmax = cpu_softmax,
    .im2col = cpu_im2col,
    .col2im = cpu_col2im,
    .maxpool = cpu_maxpool,
    .maxpool_backward = cpu_maxpool_backward,
    .sgd_update = cpu_sgd,
    .adam_update = cpu_adam,
    .rmsprop_update = cpu_rmsprop,
};

const ld_backend *ld_cpu_backend(void) { return &cpu_backend; }

/* ================================================================ device registry */
#define MAX_DEVICES 64
static ld_device cpu0 = {LD_DEV_CPU, 0, "cpu:0", &cpu_backend, 0, 0, 0, NULL};
static ld_device *devices[MAX_DEVICES] = {&cpu0};
static int n_devices = 1;
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;

ld_device *ld_device_cpu(void) { return &cpu0; }
int ld_device_count(void) { return n_devices; }
ld_device *ld_device_at(int i) { return i >= 0 && i < n_devices ? devices[i] : NULL; }

int ld_device_register(ld_device *d) {
    pthread_mutex_lock(&reg_mu);
    if (n_devices >= MAX_DEVICES) {
        pthread_mutex_unlock(&reg_mu);
        return ld_fail(LD_EDEVICE, "too many devices");
    }
    devices[n_devices++] = d;
    pthread_mutex_unlock(&reg_mu);
    return LD_OK;
}

ld_device *ld_device_find(const char *name) {
    if (!strcmp(name, "cpu")) return &cpu0;
    for (int i = 0; i < n_devices; i++)
        if (!strcmp(devices[i]->name, name)) return devices[i];
    if (!strcmp(name, "cuda") || !strcmp(name, "gpu")) {
        for (int i = 0; i < n_devices; i++)
            if (devices[i]->kind == LD_DEV_CUDA) return devices[i];
    }
    ld_fail(LD_EDEVICE, "unknown device '%s' (devices: %s%s)", name, cpu0.name,
            n_devices > 1 ? ", ..." : "");
    return NULL;
}

static size_t physical_memory(void) {
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    return pages > 0 && psz > 0 ? (size_t)pages * (size_t)psz : (size_t)-1;
}

void *ld_device_alloc(ld_device *d, size_t nbytes) {
    if (d->kind == LD_DEV_CPU && nbytes > physical_memory()) {
        ld_fail(LD_ENOMEM, "not enough memory: %zu bytes requested, the machine has %zu",
                nbytes, physical_memory());
        return NULL;
    }
    void *p = d->backend->alloc(d, nbytes);
    if (!p) return NULL;
    size_t now = __atomic_add_fetch(&d->bytes_in_use, nbytes, __ATOMIC_RELAXED);
    if (now > d->bytes_peak) d->bytes_peak = now;
    return p;
}

void ld_device_free(ld_device *d, void *p, size_t nbytes) {
    if (!p) return;
    __atomic_sub_fetch(&d->bytes_in_use, nbytes, __ATOMIC_RELAXED);
    d->backend->free(d, p, nbytes);
}

void ld_cpu_set_threads(int n) {
    if (n < 1) n = 1;
    openblas_set_num_threads(n);
    cpu0.threads = n;
}

int ld_cpu_threads(void) { return cpu0.threads ? cpu0.threads : openblas_get_num_threads(); }
