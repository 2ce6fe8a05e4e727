/* test_half.c - the float16/bfloat16 conversions of ld_half.h over every
   16-bit pattern, and float32 -> half rounding against a reference written
   from the definition (round to nearest, ties to even, in double), over
   neighbours of every tie and a sweep of the float32 range; and the bf16
   product of ld_gemm_bf16.c against a double-precision product of the same
   bfloat16 operands. */
#include "test_util.h"
#include "ld_half.h"
#include "ld_gemm_bf16.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* the half nearest to f (ties to even), by search over the finite halves: the definition */
static uint16_t f16_ref(float f) {
    if (f != f) return 0x7e00;
    double v = fabs((double)f);
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    if (v >= 65520.0) return sign | 0x7c00;
    uint16_t lo = 0, hi = 0x7bff;              /* the largest half at or below v: binary search */
    while (lo < hi) {
        uint16_t mid = (uint16_t)((lo + hi + 1) / 2);
        if ((double)ld_f16_to_f32(mid) <= v) lo = mid; else hi = mid - 1;
    }
    if (lo == 0x7bff) return sign | lo;        /* 65504 <= v < 65520 */
    double a = ld_f16_to_f32(lo), b = ld_f16_to_f32((uint16_t)(lo + 1));
    uint16_t r = v - a < b - v ? lo : v - a > b - v ? (uint16_t)(lo + 1) : (lo & 1) ? (uint16_t)(lo + 1) : lo;
    return sign | r;
}

static uint16_t bf16_ref(float f) {
    if (f != f) return 0x7fc0;
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u;   /* the two bfloat16 around f (same sign) */
    uint32_t rest = u & 0xffff;
    uint32_t r = rest < 0x8000 ? lo : rest > 0x8000 ? hi : ((lo >> 16) & 1) ? hi : lo;
    return (uint16_t)(r >> 16);
}

int main(void) {
    TEST("every float16 pattern converts to float32 and back to itself (NaN stays NaN)") {
        int bad = 0;
        for (uint32_t h = 0; h < 65536; h++) {
            float f = ld_f16_to_f32((uint16_t)h);
            uint16_t back = ld_f32_to_f16(f);
            int nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
            if (nan ? !(f != f && (back & 0x7c00) == 0x7c00 && (back & 0x3ff)) : back != h) bad++;
        }
        CHECK(bad == 0);
    }
    TEST("every bfloat16 pattern converts to float32 and back to itself (NaN stays NaN)") {
        int bad = 0;
        for (uint32_t h = 0; h < 65536; h++) {
            float f = ld_bf16_to_f32((uint16_t)h);
            uint16_t back = ld_f32_to_bf16(f);
            int nan = (h & 0x7f80) == 0x7f80 && (h & 0x7f);
            if (nan ? !(f != f && (back & 0x7f80) == 0x7f80 && (back & 0x7f)) : back != h) bad++;
        }
        CHECK(bad == 0);
    }
    TEST("float32 -> float16 and bfloat16 round to nearest even: every tie, its neighbours, a sweep") {
        int bad16 = 0, badbf = 0;
        for (uint32_t h = 0; h < 0x7c00; h++) {    /* the midpoints between consecutive halves, and around them */
            double mid = ((double)ld_f16_to_f32((uint16_t)h) + (double)ld_f16_to_f32((uint16_t)(h + 1))) / 2;
            float m = (float)mid;                  /* exact: a half's midpoint needs 12 bits */
            float cand[3] = {nextafterf(m, 0), m, nextafterf(m, INFINITY)};
            for (int i = 0; i < 3; i++)
                for (int s = 0; s < 2; s++) {
                    float f = s ? -cand[i] : cand[i];
                    if (ld_f32_to_f16(f) != f16_ref(f)) bad16++;
                }
        }
        for (uint64_t u = 0; u < 0x100000000ull; u += 65521) {   /* a sweep of every exponent */
            float f;
            uint32_t w = (uint32_t)u;
            memcpy(&f, &w, 4);
            if (f == f && ld_f32_to_f16(f) != f16_ref(f)) bad16++;
            if (f != f ? !(ld_bf16_to_f32(ld_f32_to_bf16(f)) != ld_bf16_to_f32(ld_f32_to_bf16(f))) : ld_f32_to_bf16(f) != bf16_ref(f))
                badbf++;   /* a NaN: any NaN */
            uint32_t tie = (w & 0xffff0000u) | 0x8000u;          /* a bfloat16 tie */
            memcpy(&f, &tie, 4);
            if (f == f && ld_f32_to_bf16(f) != bf16_ref(f)) badbf++;
        }
        if (bad16 || badbf) printf("#   %d float16 and %d bfloat16 roundings differ\n", bad16, badbf);
        CHECK(bad16 == 0 && badbf == 0);
    }
    TEST("the bf16 product (vdpbf16ps where present) equals a double product of the operands to float32 sums") {
        static const int64_t dims[][3] = {{1, 1, 1}, {3, 5, 7}, {8, 32, 2}, {9, 33, 3}, {17, 70, 129}, {64, 64, 64},
                                             {45, 97, 131}, {130, 33, 65}};   /* the last three split over the pool */
        int ran = 0;
        for (size_t t = 0; t < sizeof dims / sizeof *dims; t++)
            for (int tr = 0; tr < 4; tr++) {
                int64_t m = dims[t][0], n = dims[t][1], k = dims[t][2];
                int ta = tr & 1, tb = tr >> 1;
                int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 1, ldc = n + 2;
                uint16_t *a = calloc((size_t)((ta ? k : m) * lda), 2), *b = calloc((size_t)((tb ? n : k) * ldb), 2);
                float *c = calloc((size_t)(m * ldc), 4);
                unsigned s = 12345u + (unsigned)t;
                for (int64_t i = 0; i < (ta ? k : m) * lda; i++) { s = s * 1103515245u + 12345u; a[i] = ld_f32_to_bf16((float)((s >> 9) & 1023) / 256.0f - 2); }
                for (int64_t i = 0; i < (tb ? n : k) * ldb; i++) { s = s * 1103515245u + 12345u; b[i] = ld_f32_to_bf16((float)((s >> 9) & 1023) / 256.0f - 2); }
                if (!ld_gemm_bf16(ta, tb, m, n, k, a, lda, b, ldb, c, ldc)) { free(a); free(b); free(c); continue; }
                ran = 1;
                double err = 0;
                for (int64_t i = 0; i < m; i++)
                    for (int64_t j = 0; j < n; j++) {
                        double acc = 0, mag = 0;
                        for (int64_t kk = 0; kk < k; kk++) {
                            double x = ld_bf16_to_f32(ta ? a[kk * lda + i] : a[i * lda + kk]);
                            double y = ld_bf16_to_f32(tb ? b[j * ldb + kk] : b[kk * ldb + j]);
                            acc += x * y;
                            mag += fabs(x * y);
                        }
                        /* float32 sums: error at most k * 2^-24 of the magnitudes */
                        double e = fabs(c[i * ldc + j] - acc) / (mag * (double)k * 0x1p-24 + 1e-30);
                        if (e > err) err = e;
                    }
                if (err > 1) printf("#   %lldx%lldx%lld ta=%d tb=%d: error %.3g of the float32 bound\n", (long long)m,
                                    (long long)n, (long long)k, ta, tb, err);
                CHECK(err <= 1);
                free(a); free(b); free(c);
            }
        printf("# bf16 product: %s%s\n", ld_gemm_bf16_path(), ran ? "" : " (declined: the float32 path is tested in test_half.lua)");
    }
    return tu_summary();
}
