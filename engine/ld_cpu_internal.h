/*
 * ld_cpu_internal.h - what the CPU kernels of other files share with
 * ld_cpu.c: the declarations of the layers' kernels (LD_LAYER_KERNELS in
 * ld_kernels.h), which live in engine/ld_cpu_<family>.c, and the thread pool
 * they split their loops on (ld_pool.h). Internal to the engine: not a
 * public header.
 */
#ifndef LD_CPU_INTERNAL_H
#define LD_CPU_INTERNAL_H

#include "ld_device.h"
#include "ld_pool.h"   /* the thread pool every CPU kernel splits its loops on */

#define LD_CPU_DECLARE(name, ...) LD_K_DECLARE(cpu_, name, __VA_ARGS__);
LD_LAYER_KERNELS(LD_CPU_DECLARE)
#undef LD_CPU_DECLARE

#endif
