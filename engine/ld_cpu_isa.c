/*
 * ld_cpu_isa.c - which instruction set the CPU kernels that have several
 * versions run (the small products, the direct convolution): chosen once at
 * run time from CPUID, as OpenBLAS's DYNAMIC_ARCH and ggml do, so one binary
 * built for x86-64-v3 (AVX2) runs the AVX-512 versions on processors that
 * have them. LDIST_CPU_ISA=avx2 (or generic) forces a lesser one, to compare
 * the versions on one machine (tests, make bench-cores).
 */
#include "ld_cpu_internal.h"

#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) || defined(__SSE__)
#include <xmmintrin.h>
#endif

static int chosen = -1;

static int detect(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    /* AVX-512 versions use F (+BW/DQ/VL for masks and 256-bit forms), AVX2 ones FMA too */
    int has512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                 __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
    int has2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    int best = has512 ? LD_ISA_AVX512 : has2 ? LD_ISA_AVX2 : LD_ISA_GENERIC;
#else
    int best = LD_ISA_GENERIC;
#endif
    const char *e = getenv("LDIST_CPU_ISA");
    if (e && *e) {
        int want = !strcmp(e, "avx512") ? LD_ISA_AVX512 : !strcmp(e, "avx2") ? LD_ISA_AVX2
                 : !strcmp(e, "generic") ? LD_ISA_GENERIC : best;
        if (want < best) best = want;   /* never more than the processor has */
    }
    return best;
}

int ld_cpu_isa(void) {
    int v = __atomic_load_n(&chosen, __ATOMIC_RELAXED);
    if (v < 0) {
        v = detect();
        __atomic_store_n(&chosen, v, __ATOMIC_RELAXED);
    }
    return v;
}

const char *ld_cpu_isa_name(void) {
    static const char *const names[] = {"generic", "avx2", "avx512"};
    return names[ld_cpu_isa()];
}

int ld_cpu_flush_wanted(void) {
    static int want = -1;   /* not LDIST_DENORMALS=keep, read once */
    int w = __atomic_load_n(&want, __ATOMIC_RELAXED);
    if (w < 0) {
        const char *e = getenv("LDIST_DENORMALS");
        w = !(e && !strcmp(e, "keep"));
        __atomic_store_n(&want, w, __ATOMIC_RELAXED);
    }
    return w;
}

#if defined(__x86_64__) || defined(__SSE__)
#define FTZ_DAZ 0x8040u   /* MXCSR bits 15 (flush to zero) and 6 (denormals are zero) */
int ld_cpu_flush_denormals(void) {
    if (!ld_cpu_flush_wanted()) return 0;
    _mm_setcsr(_mm_getcsr() | FTZ_DAZ);
    return 1;
}
unsigned ld_cpu_fp_enter(void) {
    unsigned m = _mm_getcsr();
    if ((m & FTZ_DAZ) != FTZ_DAZ && ld_cpu_flush_wanted()) _mm_setcsr(m | FTZ_DAZ);
    return m;
}
void ld_cpu_fp_leave(unsigned saved) {
    if ((saved & FTZ_DAZ) != FTZ_DAZ && ld_cpu_flush_wanted()) _mm_setcsr(saved);
}
int ld_cpu_daz_on(void) { return (_mm_getcsr() & 0x0040u) != 0; }
#else
int ld_cpu_flush_denormals(void) { return 0; }
unsigned ld_cpu_fp_enter(void) { return 0; }
void ld_cpu_fp_leave(unsigned saved) { (void)saved; }
int ld_cpu_daz_on(void) { return 0; }
#endif
