/*
 * ld_device.c - the device registry, the CUDA plugin's loading, and the
 * byte counts of device memory.
 *
 * Devices: cpu:0 (the host, ld_cpu.c's kernels run inline), the logical CPU
 * devices cpu:1.. (ld_executor.c), and cuda:0.. registered by the CUDA
 * plugin the first time devices are listed or looked up.
 *
 * The plugin (build/ldist_cuda.so, engine/cuda/) is found, opened and
 * initialised here; this file includes no CUDA header, so the engine builds
 * and runs where CUDA is absent. Where it is looked for, first match wins:
 *   1. $LDIST_CUDA_PLUGIN (a path; "" or "0" turns CUDA off);
 *   2. next to the program or library holding the engine (ldist, ldist.so),
 *      and in build/ and ../lib/ldist/ beside it;
 *   3. $PREFIX/lib/ldist (PREFIX as built, /usr/local by default).
 */
#define _GNU_SOURCE
#include "ld_device.h"
#include "ld_executor.h"
#include "cuda/ld_cuda.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ================================================================ the registry
 * cpu:0 is always there; logical CPU devices (ld_executor.c) and GPUs (the
 * plugin, below) register themselves. */
#define MAX_DEVICES 64
static ld_device cpu0 = {LD_DEV_CPU, 0, "cpu:0", &ld_cpu_kernels, 0, 0, 0, NULL, 0};
static ld_device *devices[MAX_DEVICES] = {&cpu0};
static int n_devices = 1;
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;

ld_device *ld_device_cpu(void) { return &cpu0; }
/* listing or looking up devices loads the CUDA plugin first (once) */
int ld_device_count(void) { ld_cuda_load(); return n_devices; }
ld_device *ld_device_at(int i) { ld_cuda_load(); return i >= 0 && i < n_devices ? devices[i] : NULL; }

int ld_device_register(ld_device *d) {
    pthread_mutex_lock(&reg_mu);
    if (n_devices >= MAX_DEVICES) {
        pthread_mutex_unlock(&reg_mu);
        return ld_fail(LD_EDEVICE, "too many devices");
    }
    ld_kernel_profile_attach(d);   /* LDIST_KERNEL_PROFILE: a GPU's kernels are timed */
    devices[n_devices++] = d;
    pthread_mutex_unlock(&reg_mu);
    return LD_OK;
}

ld_device *ld_device_find(const char *name) {
    if (!strcmp(name, "cpu")) return &cpu0;
    ld_cuda_load();
    for (int i = 0; i < n_devices; i++)
        if (!strcmp(devices[i]->name, name)) return devices[i];
    if (!strcmp(name, "cuda") || !strcmp(name, "gpu")) {
        for (int i = 0; i < n_devices; i++)
            if (devices[i]->kind == LD_DEV_CUDA) return devices[i];
    }
    char list[256] = "";
    for (int i = 0, k = 0; i < n_devices && k < (int)sizeof list; i++)
        k += snprintf(list + k, sizeof list - (size_t)k, "%s%s", i ? ", " : "", devices[i]->name);
    int gpu = !strncmp(name, "cuda", 4) || !strncmp(name, "gpu", 3);
    ld_fail(LD_EDEVICE, "unknown device '%s' (devices: %s%s%s)", name, list, gpu ? "; " : "",
            gpu ? ld_device_note() : "");
    return NULL;
}

/* ================================================================ memory accounting */
/* sysconf(_SC_PHYS_PAGES) is a sysinfo system call: asked once, not on
   every allocation (a training step makes dozens) */
static size_t physical_memory(void) {
    static size_t bytes;
    if (!bytes) {
        long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
        bytes = pages > 0 && psz > 0 ? (size_t)pages * (size_t)psz : (size_t)-1;
    }
    return bytes;
}

void *ld_device_alloc(ld_device *d, size_t nbytes) {
    if (ld_device_is_host(d) && nbytes > physical_memory()) {
        ld_fail(LD_ENOMEM, "not enough memory: %zu bytes requested, the machine has %zu",
                nbytes, physical_memory());
        return NULL;
    }
    /* cpu:0's backend is switched by ld_host_async while other threads allocate and free */
    void *p = __atomic_load_n(&d->backend, __ATOMIC_ACQUIRE)->alloc(d, nbytes);
    /* host memory has had its retry (ld_host_alloc runs the pressure hook) */
    if (!p && !ld_device_is_host(d) && ld_error_status() == LD_ENOMEM && ld_memory_pressure()) {
        __atomic_add_fetch(&d->alloc_retries, 1, __ATOMIC_RELAXED);
        ld_clear_error();      /* the collector freed tensors: their blocks went back to the cache */
        p = d->backend->alloc(d, nbytes);
    }
    if (!p) return NULL;
    size_t now = __atomic_add_fetch(&d->bytes_in_use, nbytes, __ATOMIC_RELAXED);
    /* an atomic maximum: prefetch threads and executors allocate at once (TSan) */
    size_t peak = __atomic_load_n(&d->bytes_peak, __ATOMIC_RELAXED);
    while (now > peak && !__atomic_compare_exchange_n(&d->bytes_peak, &peak, now, 1, __ATOMIC_RELAXED,
                                                     __ATOMIC_RELAXED)) {}
    return p;
}

void ld_device_free(ld_device *d, void *p, size_t nbytes) {
    if (!p) return;
    __atomic_sub_fetch(&d->bytes_in_use, nbytes, __ATOMIC_RELAXED);
    __atomic_load_n(&d->backend, __ATOMIC_ACQUIRE)->free(d, p, nbytes);
}

/* ================================================================ the CUDA plugin */
#ifndef LD_PREFIX
#define LD_PREFIX "/usr/local"
#endif

static pthread_once_t plugin_once = PTHREAD_ONCE_INIT;
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
    /* Without a driver there is no GPU to find, so a plugin found by the
       search stays closed: opening it (12 MB with its static cudart) took
       about 1.5 ms of the REPL's 9 ms start on the 2-core machine. One named
       by LDIST_CUDA_PLUGIN is opened and checked all the same (it says the
       same line where the driver is missing). The driver stays open for it. */
    if (!env && !dlopen(LD_CUDA_DRIVER, RTLD_NOW | RTLD_LOCAL)) {
        snprintf(note, sizeof note, "%s", LD_CUDA_NO_DRIVER_NOTE);
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
    if (p->kernel_count != LD_KERNEL_COUNT || p->backend_size != sizeof(ld_backend)) {
        snprintf(note, sizeof note, "the CUDA plugin %.160s does not match this ldist (built for %d kernels, "
                 "this ldist has %d); rebuild it with make", path, p->kernel_count, (int)LD_KERNEL_COUNT);
        dlclose(h);
        return;
    }
    /* the plugin stays open: its devices live until the process exits */
    int n = p->init(&host, note, sizeof note);
    ld_clear_error();
    if (n > 0) { plugin = p; n_cuda = n; }
}

/* ---- sim:0 (LD_DEV_SIM, ld_device.h): registered with the plugin's
   devices when LDIST_SIM_DEVICE=1. Its blocks come back filled with 0xff
   bytes (NaN as float32 and as halves, -1 as integers), as a GPU's caching
   allocator hands back whatever a freed block held: an output a kernel does
   not write whole shows up as NaN here, not as the zeros fresh host pages
   happen to hold. LDIST_SIM_MEMORY caps what it holds, as a GPU's memory is
   capped: an allocation past it fails with LD_ENOMEM (the pressure hook's
   path). ---- */
static ld_backend sim_backend;
static ld_device sim0 = {LD_DEV_SIM, 0, "sim:0", &sim_backend, 0, 0, 0, NULL, 0};

static size_t sim_cap;   /* LDIST_SIM_MEMORY: bytes sim:0 holds at most, as a GPU's memory is (0: no cap) */

static void *sim_alloc(ld_device *d, size_t nbytes) {
    size_t used = __atomic_load_n(&d->bytes_in_use, __ATOMIC_RELAXED);
    if (sim_cap && (nbytes > sim_cap || used > sim_cap - nbytes)) {
        ld_fail(LD_ENOMEM, "sim:0: out of memory: %zu bytes requested, %zu of %zu in use (LDIST_SIM_MEMORY)", nbytes,
                used, sim_cap);
        return NULL;
    }
    void *p = ld_cpu_kernels.alloc(d, nbytes);
    if (p) memset(p, 0xff, nbytes);
    return p;
}

/* sim:0's reads in flight: its kernels ran at the call, so the copy is
   taken now and handed over at read_end (the engine's path of a GPU's
   pinned read, ld_tensor_read_async, run here) */
static void *sim_read_begin(ld_device *d, const void *src, size_t n) {
    void *b = malloc(n);
    if (b) memcpy(b, src, n);
    return b;
}
static int sim_read_end(ld_device *d, void *h, void *host, size_t n, int report) {
    memcpy(host, h, n);
    free(h);
    return LD_OK;
}

static void probe_all(void) {
    probe();
    const char *e = getenv("LDIST_SIM_DEVICE");
    if (e && !strcmp(e, "1")) {
        sim_backend = ld_cpu_kernels;
        sim_backend.name = "sim";
        sim_backend.alloc = sim_alloc;
        sim_backend.read_begin = sim_read_begin;
        sim_backend.read_end = sim_read_end;
        const char *m = getenv("LDIST_SIM_MEMORY");   /* bytes, or with a K, M or G suffix */
        if (m && *m) {
            char *end = NULL;
            double v = strtod(m, &end);
            double mul = end && (*end == 'K' || *end == 'k') ? 1024.0 : end && (*end == 'M' || *end == 'm') ? 1048576.0
                       : end && (*end == 'G' || *end == 'g') ? 1073741824.0 : 1.0;
            if (v > 0) sim_cap = (size_t)(v * mul);
        }
        ld_device_register(&sim0);
    }
}

int ld_cuda_load(void) {
    pthread_once(&plugin_once, probe_all);
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
