/*
 * kernel.h - the Jupyter kernel's entry point, called by `ldist kernel ...`
 * (argv[0] is "kernel"; typically `ldist kernel -f CONNECTION_FILE`).
 */
#ifndef LDIST_KERNEL_H
#define LDIST_KERNEL_H

int ldist_kernel_main(int argc, char **argv);

/* In the ldist program (repl/kernel_stub.c): open the network plugin and run
   its ldist_kernel_main / ld_launch_main. */
int ldist_kernel_cmd(int argc, char **argv);
int ldist_launch_cmd(int argc, char **argv);

#endif
