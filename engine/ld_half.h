/*
 * ld_half.h - float16 and bfloat16 stored as their 16 bits, and the one place
 * that converts them to and from float32.
 *
 * Every conversion in the engine (the CPU copy kernel, the CUDA copy kernel,
 * safetensors, single elements) goes through these functions, so a value
 * converts to the same bits everywhere. Float32 to half rounds to nearest,
 * ties to even, as NumPy's astype and TensorFlow's cast do; a NaN stays a
 * (quiet) NaN, overflow gives inf. Plain C, also compiled by nvcc for device
 * code (LD_HALF_FN).
 */
#ifndef LD_HALF_H
#define LD_HALF_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define LD_HALF_FN static inline __host__ __device__
#else
#define LD_HALF_FN static inline
#endif

LD_HALF_FN uint32_t ld_f32_bits(float f) {
#ifdef __CUDA_ARCH__
    return (uint32_t)__float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
#endif
}
LD_HALF_FN float ld_bits_f32(uint32_t u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, 4);
    return f;
#endif
}

/* bfloat16 is the top half of a float32: widening is a shift */
LD_HALF_FN float ld_bf16_to_f32(uint16_t h) { return ld_bits_f32((uint32_t)h << 16); }

/* branch-free, so that a loop of them vectorises (the CPU kernels' fused
   bfloat16 stores) */
LD_HALF_FN uint16_t ld_f32_to_bf16(float f) {
    uint32_t u = ld_f32_bits(f);
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;   /* round half to even on the dropped 16 bits */
    uint32_t nan = (u >> 16) | 0x40u;                      /* NaN: keep it quiet */
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? nan : r);
}

LD_HALF_FN float ld_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 0x1f) return ld_bits_f32(sign | 0x7f800000u | (m << 13));      /* inf, NaN */
    if (e == 0) {                                                             /* zero, subnormal: m * 2^-24 */
        float v = (float)m * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return ld_bits_f32(sign | ((e + 112) << 23) | (m << 13));
}

LD_HALF_FN uint16_t ld_f32_to_f16(float f) {
    uint32_t u = ld_f32_bits(f), sign = (u >> 16) & 0x8000, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00 | ((a >> 13) & 0x3ff));   /* NaN, quiet */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);   /* 65520 and above round to inf */
    if (a >= 0x38800000u) {                                    /* normal in half (>= 2^-14) */
        uint32_t r = a - 0x38000000u;                           /* rebias the exponent: 127 -> 15 */
        r += 0xfffu + ((r >> 13) & 1);                          /* ties to even on the 13 dropped bits */
        return (uint16_t)(sign | (r >> 13));
    }
    if (a < 0x33000000u) return (uint16_t)sign;                 /* below half the smallest subnormal: 0 */
    /* subnormal: the value in units of 2^-24, rounded to even; exact in float
       because the scaling is a power of two and rintf rounds ties to even */
    uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
    int shift = (int)(126 - e);                                 /* 2^-24 units: m * 2^(e-150) / 2^-24 */
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) q++;
    return (uint16_t)(sign | q);
}

#endif
