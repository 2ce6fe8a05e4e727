/*
 * ld_cpu_conv_avx2.c - the direct convolution (ld_cpu_conv.c) compiled
 * again for AVX2 + FMA, with vectors of 8 floats and tiles sized for 16
 * registers, where the build targets AVX-512 (-march=native on such a
 * processor: this copy runs on processors without it, and under
 * LDIST_CPU_ISA=avx2, which the tests use to check it here) or less than
 * AVX2 (the x86-64 baseline). Empty where the build itself targets AVX2
 * without AVX-512 (x86-64-v3: the build's own copy is this one).
 */
#include "ld_cpu_internal.h"
#include "ld_executor.h"

#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__) && (defined(__AVX512F__) || !defined(__AVX2__))
#pragma GCC target("avx2,fma,no-avx512f")
#define LD_CONV_FN(name) name##_avx2
#include "ld_cpu_conv.c"
#else
typedef int ld_cpu_conv_avx2_unused;   /* ISO C wants a declaration */
#endif
