/* ld_cpu_simd.h - vector row helpers for the CPU softmax kernels (masked
   softmax, sparse cross-entropy), layer norm and strided copies: row sums, expf, max, dot,
   scaling and copying over a row,
   AVX-512 where the compiler targets it, plain loops otherwise. expf and
   a double sum kept those loops scalar (glibc's expf does not vectorize
   without -ffast-math); the polynomial is Cephes' expf (~1 ulp on
   [-ln2/2, ln2/2]), 2^n applied with scalef so that large negative
   arguments give 0 and NaN stays NaN. */
#ifndef LD_CPU_SIMD_H
#define LD_CPU_SIMD_H
#include <math.h>
#include <stdint.h>
#include <string.h>
#if defined(__AVX512F__)
#include <immintrin.h>

static inline __m512 ldv_exp16(__m512 x) {
    /* below -104 expf is 0 in float; max(lo, x) keeps a NaN x */
    x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);
    x = _mm512_min_ps(_mm512_set1_ps(88.7f), x);
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500E-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507E-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073E-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894E-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459E-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201E-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n);
}

static inline __mmask16 ldv_tail(int64_t left) {
    return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
}

/* max of x[0..n) * sc (n >= 1) */
static inline float ldv_max_scaled(const float *x, int64_t n, float sc) {
    __m512 m = _mm512_set1_ps(-INFINITY), s = _mm512_set1_ps(sc);
    for (int64_t c = 0; c < n; c += 16) {
        __mmask16 k = ldv_tail(n - c);
        m = _mm512_mask_max_ps(m, k, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + c), s));
    }
    return _mm512_reduce_max_ps(m);
}

/* y = exp(x * sc - m) over n; returns their sum */
static inline float ldv_exp_store(float *y, const float *x, int64_t n, float sc, float m) {
    __m512 acc = _mm512_setzero_ps(), s = _mm512_set1_ps(sc), vm = _mm512_set1_ps(m);
    for (int64_t c = 0; c < n; c += 16) {
        __mmask16 k = ldv_tail(n - c);
        __m512 e = ldv_exp16(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(k, x + c), s, vm));
        _mm512_mask_storeu_ps(y + c, k, e);
        acc = _mm512_mask_add_ps(acc, k, acc, e);
    }
    return _mm512_reduce_add_ps(acc);
}

static inline void ldv_scale(float *y, int64_t n, float a) {
    __m512 va = _mm512_set1_ps(a);
    for (int64_t c = 0; c < n; c += 16) {
        __mmask16 k = ldv_tail(n - c);
        _mm512_mask_storeu_ps(y + c, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, y + c), va));
    }
}

static inline float ldv_dot(const float *a, const float *b, int64_t n) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t c = 0; c < n; c += 16) {
        __mmask16 k = ldv_tail(n - c);
        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, a + c), _mm512_maskz_loadu_ps(k, b + c), acc);
    }
    return _mm512_reduce_add_ps(acc);
}

/* d = sc * y * (g - dot) */
static inline void ldv_softmax_grad(float *d, const float *y, const float *g, int64_t n, float sc, float dot) {
    __m512 vs = _mm512_set1_ps(sc), vd = _mm512_set1_ps(dot);
    for (int64_t c = 0; c < n; c += 16) {
        __mmask16 k = ldv_tail(n - c);
        __m512 t = _mm512_sub_ps(_mm512_maskz_loadu_ps(k, g + c), vd);
        _mm512_mask_storeu_ps(d + c, k, _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, y + c), vs), t));
    }
}
/* sum of x over n */
static inline float ldv_sum(const float *x, int64_t n) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t c = 0; c < n; c += 16) acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(ldv_tail(n - c), x + c));
    return _mm512_reduce_add_ps(acc);
}

/* sum of (x - m)^2 over n */
static inline float ldv_sqdev(const float *x, int64_t n, float m) {
    __m512 acc = _mm512_setzero_ps(), vm = _mm512_set1_ps(m);
    for (int64_t c = 0; c < n; c += 16) {
        __mmask16 k = ldv_tail(n - c);
        __m512 d = _mm512_maskz_sub_ps(k, _mm512_maskz_loadu_ps(k, x + c), vm);
        acc = _mm512_fmadd_ps(d, d, acc);
    }
    return _mm512_reduce_add_ps(acc);
}

/* layer norm backward row sums: sg = sum g, sgx = sum g * (x - m) * rs with
   g = dy * gamma (gamma NULL: 1) */
static inline void ldv_ln_bw_sums(const float *dy, const float *gamma, const float *x, int64_t n, float m, float rs,
                                  float *sg, float *sgx) {
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), vm = _mm512_set1_ps(m), vr = _mm512_set1_ps(rs);
    for (int64_t c = 0; c < n; c += 16) {
        __mmask16 k = ldv_tail(n - c);
        __m512 g = _mm512_maskz_loadu_ps(k, dy + c);
        if (gamma) g = _mm512_mul_ps(g, _mm512_maskz_loadu_ps(k, gamma + c));
        __m512 xh = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + c), vm), vr);
        a0 = _mm512_add_ps(a0, g);
        a1 = _mm512_fmadd_ps(g, xh, a1);
    }
    *sg = _mm512_reduce_add_ps(a0);
    *sgx = _mm512_reduce_add_ps(a1);
}

/* y = x over n (short rows: no call) */
static inline void ldv_copy(float *y, const float *x, int64_t n) {
    for (int64_t c = 0; c < n; c += 16) {
        __mmask16 k = ldv_tail(n - c);
        _mm512_mask_storeu_ps(y + c, k, _mm512_maskz_loadu_ps(k, x + c));
    }
}
#else
static inline void ldv_copy(float *y, const float *x, int64_t n) { memcpy(y, x, sizeof(float) * (size_t)n); }
static inline float ldv_sum(const float *x, int64_t n) {
    double s = 0;
    for (int64_t c = 0; c < n; c++) s += x[c];
    return (float)s;
}
static inline float ldv_sqdev(const float *x, int64_t n, float m) {
    double s = 0;
    for (int64_t c = 0; c < n; c++) { double d = (double)x[c] - m; s += d * d; }
    return (float)s;
}
static inline void ldv_ln_bw_sums(const float *dy, const float *gamma, const float *x, int64_t n, float m, float rs,
                                  float *sg, float *sgx) {
    double a0 = 0, a1 = 0;
    for (int64_t c = 0; c < n; c++) {
        double g = gamma ? (double)dy[c] * gamma[c] : (double)dy[c];
        a0 += g;
        a1 += g * (double)((x[c] - m) * rs);
    }
    *sg = (float)a0;
    *sgx = (float)a1;
}
static inline float ldv_max_scaled(const float *x, int64_t n, float sc) {
    float m = -INFINITY;
    for (int64_t c = 0; c < n; c++) { float v = x[c] * sc; if (v > m) m = v; }
    return m;
}
static inline float ldv_exp_store(float *y, const float *x, int64_t n, float sc, float m) {
    double sum = 0;
    for (int64_t c = 0; c < n; c++) { float e = expf(x[c] * sc - m); y[c] = e; sum += e; }
    return (float)sum;
}
static inline void ldv_scale(float *y, int64_t n, float a) {
    for (int64_t c = 0; c < n; c++) y[c] *= a;
}
static inline float ldv_dot(const float *a, const float *b, int64_t n) {
    double dot = 0;
    for (int64_t c = 0; c < n; c++) dot += (double)a[c] * b[c];
    return (float)dot;
}
static inline void ldv_softmax_grad(float *d, const float *y, const float *g, int64_t n, float sc, float dot) {
    for (int64_t c = 0; c < n; c++) d[c] = sc * y[c] * (g[c] - dot);
}
#endif
#endif
