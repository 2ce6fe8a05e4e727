/*
 * ld_cpu_half.c - contiguous rows of float32 <-> float16 / bfloat16 for the
 * CPU kernels (casts, half elementwise ops, half operands widened for a
 * product): bit for bit ld_half.h's conversions, 16 lanes at a time on
 * AVX-512, 8 on AVX2 + F16C, ld_half.h's scalar functions elsewhere and for
 * tails. Chosen at run time as the other kernels (ld_cpu_isa: a build for
 * x86-64-v3 runs the AVX-512 rows where the processor has them;
 * LDIST_CPU_ISA=avx2 or generic forces a lesser one, which the tests use to
 * compare all three here).
 *
 * - bfloat16: integer lanes, the scalar algorithm itself (round half to
 *   even on the 16 dropped bits, a NaN kept quiet). Not vcvtneps2bf16: it
 *   flushes float32 subnormals to zero, which ld_half.h (and NumPy, and
 *   CUDA) round to bfloat16 subnormals.
 * - float16: F16C's vcvtps2ph (round to nearest even, subnormals, overflow
 *   to inf, NaNs kept quiet with their top payload bits: ld_half.h's bits
 *   for every float32, checked over all 2^32 of them with FTZ and DAZ set),
 *   and vcvtph2ps, except that it quiets a signalling NaN where ld_half.h
 *   (and NumPy) keep its bits: those lanes are rebuilt in integers.
 */
#include "ld_cpu_internal.h"
#include "ld_half.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define LD_HALF_X86 1
#endif

/* ---- the scalar rows: ld_half.h's functions ---- */
static void to_f32_scalar(float *d, const uint16_t *s, ld_dtype dt, int64_t n) {
    if (dt == LD_F16) for (int64_t i = 0; i < n; i++) d[i] = ld_f16_to_f32(s[i]);
    else for (int64_t i = 0; i < n; i++) d[i] = ld_bf16_to_f32(s[i]);
}
static void from_f32_scalar(uint16_t *d, const float *s, ld_dtype dt, int64_t n) {
    if (dt == LD_F16) for (int64_t i = 0; i < n; i++) d[i] = ld_f32_to_f16(s[i]);
    else for (int64_t i = 0; i < n; i++) d[i] = ld_f32_to_bf16(s[i]);
}

#ifdef LD_HALF_X86
/* ---- AVX-512 (F, BW, VL for the masked 16-bit tails) ---- */
#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,f16c,avx2,fma")))

T512 static inline __m512 bf16_widen16(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
T512 static inline __m256i bf16_round16(__m512 f) {
    __m512i u = _mm512_castps_si512(f);
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                                                      _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1))));
    r = _mm512_srli_epi32(r, 16);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                            _mm512_set1_epi32(0x7f800000));
    r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40)));
    return _mm512_cvtepi32_epi16(r);
}
T512 static inline __m512 f16_widen16(__m256i h) {
    __m512 f = _mm512_cvtph_ps(h);
    __m512i w = _mm512_cvtepu16_epi32(h);
    __m512i a = _mm512_and_si512(w, _mm512_set1_epi32(0x7fff));
    __mmask16 nan = _mm512_cmpgt_epu32_mask(a, _mm512_set1_epi32(0x7c00));   /* exponent all ones, m != 0 */
    if (!nan) return f;
    __m512i bits = _mm512_or_si512(_mm512_slli_epi32(_mm512_and_si512(w, _mm512_set1_epi32(0x8000)), 16),
                                   _mm512_or_si512(_mm512_set1_epi32(0x7f800000),
                                                   _mm512_slli_epi32(_mm512_and_si512(w, _mm512_set1_epi32(0x3ff)), 13)));
    return _mm512_mask_mov_ps(f, nan, _mm512_castsi512_ps(bits));
}

T512 static void to_f32_512(float *d, const uint16_t *s, ld_dtype dt, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m256i h = _mm256_maskz_loadu_epi16(k, s + i);
        _mm512_mask_storeu_ps(d + i, k, dt == LD_F16 ? f16_widen16(h) : bf16_widen16(h));
    }
}
T512 static void from_f32_512(uint16_t *d, const float *s, ld_dtype dt, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 f = _mm512_maskz_loadu_ps(k, s + i);
        __m256i h = dt == LD_F16 ? _mm512_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC) : bf16_round16(f);
        _mm256_mask_storeu_epi16(d + i, k, h);
    }
}

/* ---- AVX2 + F16C: 8 lanes, scalar tails ---- */
#define T256 __attribute__((target("avx2,fma,f16c")))

T256 static void to_f32_256(float *d, const uint16_t *s, ld_dtype dt, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm_loadu_si128((const __m128i *)(s + i));
        __m256i w = _mm256_cvtepu16_epi32(h);
        __m256 f;
        if (dt == LD_F16) {
            f = _mm256_cvtph_ps(h);
            __m256i a = _mm256_and_si256(w, _mm256_set1_epi32(0x7fff));
            __m256i nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7c00));
            if (!_mm256_testz_si256(nan, nan)) {
                __m256i bits = _mm256_or_si256(
                    _mm256_slli_epi32(_mm256_and_si256(w, _mm256_set1_epi32(0x8000)), 16),
                    _mm256_or_si256(_mm256_set1_epi32(0x7f800000),
                                    _mm256_slli_epi32(_mm256_and_si256(w, _mm256_set1_epi32(0x3ff)), 13)));
                f = _mm256_blendv_ps(f, _mm256_castsi256_ps(bits), _mm256_castsi256_ps(nan));
            }
        } else {
            f = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
        }
        _mm256_storeu_ps(d + i, f);
    }
    to_f32_scalar(d + i, s + i, dt, n - i);
}
T256 static void from_f32_256(uint16_t *d, const float *s, ld_dtype dt, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 f = _mm256_loadu_ps(s + i);
        __m128i h;
        if (dt == LD_F16) {
            h = _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        } else {
            __m256i u = _mm256_castps_si256(f);
            __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff),
                                                              _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1))));
            r = _mm256_srli_epi32(r, 16);
            /* both sides are below 2^31: a signed compare is the unsigned one */
            __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
            __m256i q = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
            r = _mm256_blendv_epi8(r, q, nan);
            /* 8 x 32 -> 8 x 16: pack within the 128-bit halves, then gather the halves' low quads */
            __m256i p = _mm256_packus_epi32(r, r);
            h = _mm256_castsi256_si128(_mm256_permute4x64_epi64(p, 0x08));
        }
        _mm_storeu_si128((__m128i *)(d + i), h);
    }
    from_f32_scalar(d + i, s + i, dt, n - i);
}

/* 2: AVX-512, 1: AVX2 + F16C, 0: scalar */
static int half_isa(void) {
    static int v = -1;
    int x = __atomic_load_n(&v, __ATOMIC_RELAXED);
    if (x < 0) {
        __builtin_cpu_init();
        int isa = ld_cpu_isa(), f16c = __builtin_cpu_supports("f16c");
        x = isa == LD_ISA_AVX512 && f16c ? 2 : isa >= LD_ISA_AVX2 && f16c ? 1 : 0;
        __atomic_store_n(&v, x, __ATOMIC_RELAXED);
    }
    return x;
}
#endif

void ld_cpu_half_to_f32(float *d, const uint16_t *s, ld_dtype dt, int64_t n) {
#ifdef LD_HALF_X86
    switch (half_isa()) {
    case 2: to_f32_512(d, s, dt, n); return;
    case 1: to_f32_256(d, s, dt, n); return;
    default: break;
    }
#endif
    to_f32_scalar(d, s, dt, n);
}

void ld_cpu_f32_to_half(uint16_t *d, const float *s, ld_dtype dt, int64_t n) {
#ifdef LD_HALF_X86
    switch (half_isa()) {
    case 2: from_f32_512(d, s, dt, n); return;
    case 1: from_f32_256(d, s, dt, n); return;
    default: break;
    }
#endif
    from_f32_scalar(d, s, dt, n);
}
