/*
 * kernel_stub.c - `ldist kernel` and `ldist launch` run code of the network
 * plugin (build/ldist_net.so, see lua_bindings/netload.c), opened only for
 * them so that start-up does not load ZeroMQ, OpenSSL and jansson.
 */
#include "kernel.h"
#include "ldist.h"

#include <stdio.h>

typedef int (*main_fn)(int, char **);

static int run_net(const char *sym, const char *what, int argc, char **argv) {
    main_fn f = (main_fn)ldist_net_symbol(sym);
    if (!f) {
        fprintf(stderr, "ldist: %s is not available: %s\n", what, ldist_net_error());
        return 1;
    }
    return f(argc, argv);
}

int ldist_kernel_cmd(int argc, char **argv) { return run_net("ldist_kernel_main", "the Jupyter kernel", argc, argv); }
int ldist_launch_cmd(int argc, char **argv) { return run_net("ld_launch_main", "ldist launch", argc, argv); }
