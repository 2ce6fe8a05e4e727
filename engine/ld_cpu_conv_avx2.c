/*
 * ld_cpu_conv_avx2.c - the direct convolution (ld_cpu_conv.c) compiled
 * again for AVX2 + FMA, where the build targets another level (AVX-512 with
 * -march=native, or less than AVX2); ld_cpu_conv.c runs it on processors
 * without AVX-512, or when LDIST_CPU_ISA=avx2 asks for it (the tests compare
 * the two). Empty where the build targets AVX2 itself.
 */
#include "ld_cpu_internal.h"
#include "ld_executor.h"

#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__) && (!defined(__AVX2__) || defined(__AVX512F__))
#pragma GCC target("avx2,fma,no-avx512f")
/* 64-byte vectors passed between this copy's own static functions, never
   across the ABI: GCC's note that their passing differs without AVX-512
   does not apply */
#pragma GCC diagnostic ignored "-Wpsabi"
#define LD_CONV_FN(name) name##_avx2
#include "ld_cpu_conv.c"
#else
typedef int ld_cpu_conv_avx2_unused;   /* ISO C wants a declaration */
#endif
