/*
 * kernel.h - the Jupyter kernel's entry point, called by `ldist kernel ...`
 * (argv[0] is "kernel"; typically `ldist kernel -f CONNECTION_FILE`).
 */
#ifndef LDIST_KERNEL_H
#define LDIST_KERNEL_H

int ldist_kernel_main(int argc, char **argv);

#endif
