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
