/*
 * ld_cuda_load.c - the engine's side of the CUDA plugin: find
 * build/ldist_cuda.so, open it, let it register its GPUs, and remember one
 * line saying why there is no GPU when there is none.
 *
 * Plain C, compiled into the engine with the rest of engine/; it includes no
 * CUDA header, so the engine builds and runs where CUDA is absent.
 *
 * Where the plugin is looked for, first match wins:
 *   1. $LDIST_CUDA_PLUGIN (a path; "" or "0" turns CUDA off);
 *   2. next to the program or library holding the engine (ldist, ldist.so),
 *      and in build/ and ../lib/ldist/ beside it;
 *   3. $PREFIX/lib/ldist (PREFIX as built, /usr/local by default).
 */
#define _GNU_SOURCE
#include "ld_cuda.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef LD_PREFIX
#define LD_PREFIX "/usr/local"
#endif

static pthread_once_t once = PTHREAD_ONCE_INIT;
static const ld_cuda_plugin *plugin;    /* NULL unless a GPU answered */
static int n_cuda;
static char note[320];

static ld_status host_fail(ld_status st, const char *msg) { return ld_fail(st, "%s", msg); }

static const ld_cuda_host host = {
    .abi = LD_CUDA_ABI,
    .fail = host_fail,
    .clear_error = ld_clear_error,
    .register_device = ld_device_register,
};

/* dirname of `path` into out ("" when it has no slash) */
static void dir_of(const char *path, char *out, size_t n) {
    const char *slash = strrchr(path, '/');
    size_t len = slash ? (size_t)(slash - path) : 0;
    if (len >= n) len = n - 1;
    memcpy(out, path, len);
    out[len] = 0;
}

/* The first candidate file that exists, into `out`; 0 when none does. */
static int find_plugin(char *out, size_t n) {
    char dirs[2][4096];
    int nd = 0;
    Dl_info info;
    char real[4096];
    if (dladdr((void *)ld_cuda_load, &info) && info.dli_fname && strchr(info.dli_fname, '/') &&
        realpath(info.dli_fname, real))
        dir_of(real, dirs[nd++], sizeof dirs[0]);
    char exe[4096];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        exe[len] = 0;
        dir_of(exe, dirs[nd], sizeof dirs[0]);
        if (nd == 0 || strcmp(dirs[0], dirs[nd]) != 0) nd++;
    }
    static const char *const rel[] = {"", "build/", "../lib/ldist/"};
    for (int d = 0; d < nd; d++)
        for (size_t r = 0; r < sizeof rel / sizeof rel[0]; r++) {
            snprintf(out, n, "%.4000s/%s%s", dirs[d], rel[r], LD_CUDA_PLUGIN_FILE);
            if (access(out, R_OK) == 0) return 1;
        }
    snprintf(out, n, "%s/lib/ldist/%s", LD_PREFIX, LD_CUDA_PLUGIN_FILE);
    return access(out, R_OK) == 0;
}

static void probe(void) {
    char path[4200];
    const char *env = getenv("LDIST_CUDA_PLUGIN");
    if (env && (!*env || !strcmp(env, "0"))) {
        snprintf(note, sizeof note, "CUDA turned off (LDIST_CUDA_PLUGIN is \"%s\")", env);
        return;
    }
    if (env) snprintf(path, sizeof path, "%s", env);
    else if (!find_plugin(path, sizeof path)) {
        snprintf(note, sizeof note, "no CUDA plugin: %s is not next to ldist nor in %s/lib/ldist "
                 "(it is built where nvcc is installed)", LD_CUDA_PLUGIN_FILE, LD_PREFIX);
        return;
    }
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(note, sizeof note, "the CUDA plugin did not load: %s", dlerror());
        return;
    }
    ld_cuda_plugin_fn get = (ld_cuda_plugin_fn)dlsym(h, LD_CUDA_PLUGIN_SYMBOL);
    const ld_cuda_plugin *p = get ? get() : NULL;
    if (!p || p->abi != LD_CUDA_ABI) {
        snprintf(note, sizeof note, "the CUDA plugin %.160s does not match this ldist (%s); rebuild it with make",
                 path, p ? "another interface version" : "no " LD_CUDA_PLUGIN_SYMBOL);
        dlclose(h);
        return;
    }
    /* the plugin stays open: its devices live until the process exits */
    int n = p->init(&host, note, sizeof note);
    ld_clear_error();
    if (n > 0) { plugin = p; n_cuda = n; }
}

int ld_cuda_load(void) {
    pthread_once(&once, probe);
    return n_cuda;
}

const char *ld_device_note(void) {
    ld_cuda_load();
    return note;
}

const ld_cuda_plugin *ld_cuda_plugin_get(void) {
    ld_cuda_load();
    return plugin;
}

int ld_cuda_all_reduce(int n, ld_device *const *devs, int k, ld_tensor *const *t, int mean) {
    if (!ld_cuda_plugin_get())
        return ld_fail(LD_EDEVICE, "all_reduce over CUDA devices needs the CUDA plugin (%s)", note);
    return plugin->all_reduce(n, devs, k, t, mean);
}
