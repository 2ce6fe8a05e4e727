/*
 * ld_cpu_conv_avx512.c - the direct convolution (ld_cpu_conv.c) compiled
 * again for AVX-512, where the build targets less (x86-64-v3: the GPU
 * bundle, distribution packages); ld_cpu_conv.c runs it on processors that
 * have AVX-512. Empty where the build targets AVX-512 itself.
 */
#include "ld_cpu_internal.h"
#include "ld_executor.h"

#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__AVX512F__)
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")
#define LD_CONV_FN(name) name##_avx512
#include "ld_cpu_conv.c"
#else
typedef int ld_cpu_conv_avx512_unused;   /* ISO C wants a declaration */
#endif
