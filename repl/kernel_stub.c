/*
 * kernel_stub.c - a weak ldist_kernel_main, so `ldist` links before (or
 * without) the Jupyter kernel in kernel/; the kernel's own definition wins.
 */
#include "kernel.h"

#include <stdio.h>

__attribute__((weak)) int ldist_kernel_main(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "ldist: the Jupyter kernel is not built\n");
    return 1;
}
