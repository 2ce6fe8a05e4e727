/*
 * cuda_device.cu - the plugin's entry point, GPU discovery, per-device
 * streams, the caching allocator, host<->device copies and the backend table.
 *
 * Caching allocator. A training step allocates the same sizes every step,
 * and cudaMalloc/cudaFree are slow (cudaFree synchronises the device), so
 * freed blocks are kept in exact-size lists (sizes rounded up to 512 bytes,
 * or to 64 KiB above 1 MiB) and handed out again. All of a device's work is
 * on one stream, so a block freed while kernels that read it are still
 * queued can be handed to later work at once: the stream runs them in order.
 * When cudaMalloc runs out, the cache is given back to the driver and the
 * allocation tried once more; the engine then runs the front end's pressure
 * hook (a Lua garbage collection) and tries once more again (ld_device.c).
 */
#include "cuda_common.cuh"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const ld_cuda_host *cu_host;

/* ================================================================ errors */
ld_status cu_fail(ld_status st, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return cu_host ? cu_host->fail(st, msg) : st;
}

ld_status cu_record_msg(cu_dev *cd, const char *msg) {
    pthread_mutex_lock(&cd->mu);
    if (!cd->has_err) {
        snprintf(cd->err, sizeof cd->err, "%s", msg);
        cd->has_err = 1;
    }
    pthread_mutex_unlock(&cd->mu);
    return cu_host->fail(LD_EDEVICE, msg);
}

ld_status cu_record(cu_dev *cd, const char *call, cudaError_t e) {
    char msg[400];
    snprintf(msg, sizeof msg, "%s: %s failed: %s (%s)", cd->dev->name, call, cudaGetErrorString(e),
             cudaGetErrorName(e));
    return cu_record_msg(cd, msg);
}

/* The failure recorded since the last read, reported (and forgotten) now. */
static int take_error(cu_dev *cd) {
    if (!cd->has_err) return LD_OK;
    char msg[420];
    pthread_mutex_lock(&cd->mu);
    snprintf(msg, sizeof msg, "%s", cd->err);
    cd->has_err = 0;
    pthread_mutex_unlock(&cd->mu);
    return cu_host->fail(LD_EDEVICE, msg);
}

/* ================================================================ devices */
static int make_ready(cu_dev *cd) {
    pthread_mutex_lock(&cd->mu);
    if (!cd->ready) {
        cudaError_t e = cudaStreamCreateWithFlags(&cd->stream, cudaStreamNonBlocking);
        if (e != cudaSuccess) {
            pthread_mutex_unlock(&cd->mu);
            return cu_record(cd, "cudaStreamCreateWithFlags", e);
        }
        __atomic_store_n(&cd->ready, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&cd->mu);
    return LD_OK;
}

cu_dev *cu_begin(ld_device *d) {
    cu_dev *cd = cu_of(d);
    cudaError_t e = cudaSetDevice(cd->ordinal);
    if (e != cudaSuccess) { cu_record(cd, "cudaSetDevice", e); return NULL; }
    if (!__atomic_load_n(&cd->ready, __ATOMIC_ACQUIRE) && make_ready(cd)) return NULL;
    return cd;
}

/* ================================================================ caching allocator */
static size_t round_size(size_t n) {
    if (n < 512) return 512;
    if (n <= ((size_t)1 << 20)) return (n + 511) & ~(size_t)511;
    return (n + 65535) & ~(size_t)65535;
}

/* caller holds cd->mu */
static cu_bucket *bucket_of(cu_dev *cd, size_t sz, int create) {
    for (int i = 0; i < cd->nb; i++)
        if (cd->buckets[i].size == sz) return &cd->buckets[i];
    if (!create) return NULL;
    if (cd->nb == cd->capb) {
        int cap = cd->capb ? 2 * cd->capb : 64;
        cu_bucket *b = (cu_bucket *)realloc(cd->buckets, sizeof *b * (size_t)cap);
        if (!b) return NULL;
        cd->buckets = b;
        cd->capb = cap;
    }
    cu_bucket *b = &cd->buckets[cd->nb++];
    memset(b, 0, sizeof *b);
    b->size = sz;
    return b;
}

/* Give every cached block back to the driver (the device is current). */
static void cache_release(cu_dev *cd) {
    cudaError_t e = cudaStreamSynchronize(cd->stream);
    if (e != cudaSuccess) cu_record(cd, "cudaStreamSynchronize", e);
    pthread_mutex_lock(&cd->mu);
    for (int i = 0; i < cd->nb; i++) {
        cu_bucket *b = &cd->buckets[i];
        for (int j = 0; j < b->n; j++) cudaFree(b->p[j]);
        cd->held -= b->size * (size_t)b->n;
        cd->cached -= b->size * (size_t)b->n;
        b->n = 0;
    }
    pthread_mutex_unlock(&cd->mu);
    cudaGetLastError();   /* a failed cudaFree must not look like the next launch's error */
}

static void *raw_alloc(cu_dev *cd, size_t nbytes, int counted) {
    size_t sz = round_size(nbytes);
    pthread_mutex_lock(&cd->mu);
    cu_bucket *b = bucket_of(cd, sz, 0);
    if (b && b->n) {
        void *p = b->p[--b->n];
        cd->cached -= sz;
        pthread_mutex_unlock(&cd->mu);
        return p;
    }
    pthread_mutex_unlock(&cd->mu);
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, sz);
    if (e == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        cache_release(cd);
        e = cudaMalloc(&p, sz);
    }
    if (e != cudaSuccess) {
        cudaGetLastError();
        size_t freeb = 0, total = 0;
        cudaMemGetInfo(&freeb, &total);
        cudaGetLastError();
        if (e == cudaErrorMemoryAllocation)
            cu_fail(LD_ENOMEM, "%s: out of memory: %zu bytes requested, %zu free of %zu (ldist holds %zu in tensors)",
                    cd->dev->name, nbytes, freeb, total, counted ? cd->dev->bytes_in_use : cd->held);
        else
            cu_fail(LD_EDEVICE, "%s: cudaMalloc(%zu) failed: %s (%s)", cd->dev->name, sz, cudaGetErrorString(e),
                    cudaGetErrorName(e));
        return NULL;
    }
    pthread_mutex_lock(&cd->mu);
    cd->held += sz;
    pthread_mutex_unlock(&cd->mu);
    return p;
}

static void raw_free(cu_dev *cd, void *p, size_t nbytes) {
    if (!p) return;
    size_t sz = round_size(nbytes);
    pthread_mutex_lock(&cd->mu);
    cu_bucket *b = bucket_of(cd, sz, 1);
    if (b && b->n == b->cap) {
        int cap = b->cap ? 2 * b->cap : 8;
        void **q = (void **)realloc(b->p, sizeof *q * (size_t)cap);
        if (q) { b->p = q; b->cap = cap; }
    }
    if (b && b->n < b->cap) {
        b->p[b->n++] = p;
        cd->cached += sz;
        pthread_mutex_unlock(&cd->mu);
        return;
    }
    /* no room to remember it: give it back (cudaFree waits for the device) */
    cd->held -= sz;
    pthread_mutex_unlock(&cd->mu);
    cudaFree(p);
    cudaGetLastError();
}

void *cu_scratch(cu_dev *cd, size_t nbytes) { return raw_alloc(cd, nbytes, 0); }
void cu_scratch_free(cu_dev *cd, void *p, size_t nbytes) { raw_free(cd, p, nbytes); }

void *cu_scratch_needed(cu_dev *cd, size_t nbytes, const char *what) {
    void *p = cu_scratch(cd, nbytes);
    if (!p) {
        char msg[300];
        snprintf(msg, sizeof msg, "%s: %s: no memory for %zu bytes of scratch", cd->dev->name, what, nbytes);
        cu_record_msg(cd, msg);
    }
    return p;
}

static void *cu_alloc(ld_device *d, size_t nbytes) {
    cu_dev *cd = cu_begin(d);
    if (!cd) return NULL;
    return raw_alloc(cd, nbytes, 1);
}

static void cu_free(ld_device *d, void *p, size_t nbytes) {
    cu_dev *cd = cu_of(d);
    if (cudaSetDevice(cd->ordinal) != cudaSuccess) cudaGetLastError();
    raw_free(cd, p, nbytes);
}

/* ================================================================ copies between host and device */
/* Reads wait for the stream and report any failure recorded since the last read. */
static int cu_to_host(ld_device *d, void *host, const void *src, size_t n) {
    cu_dev *cd = cu_begin(d);
    if (!cd) return take_error(cu_of(d)) ? LD_EDEVICE : cu_fail(LD_EDEVICE, "%s is not usable", d->name);
    if (n) {
        cudaError_t e = cudaMemcpyAsync(host, src, n, cudaMemcpyDeviceToHost, cd->stream);
        if (e != cudaSuccess) cu_record(cd, "cudaMemcpyAsync (device to host)", e);
    }
    cudaError_t e = cudaStreamSynchronize(cd->stream);
    if (e != cudaSuccess) cu_record(cd, "cudaStreamSynchronize", e);
    return take_error(cd);
}

/* n pinned slots of `bytes` bytes each at *mem (cudaHostAlloc) and an event
   for each; 0 when either is not to be had (nothing kept then) */
static int pinned_slots(char **mem, size_t bytes, cudaEvent_t *ev, int n) {
    void *p = NULL;
    cudaError_t e = cudaHostAlloc(&p, (size_t)n * bytes, cudaHostAllocPortable);
    if (e != cudaSuccess) { cudaGetLastError(); return 0; }
    for (int i = 0; i < n; i++) {
        e = cudaEventCreateWithFlags(&ev[i], cudaEventDisableTiming);
        if (e != cudaSuccess) {
            cudaGetLastError();
            for (int j = 0; j < i; j++) cudaEventDestroy(ev[j]);
            cudaFreeHost(p);
            return 0;
        }
    }
    *mem = (char *)p;
    return 1;
}

/* caller holds cd->mu; 0 when pinned memory is not to be had (then copies go direct) */
static int stage_ready(cu_dev *cd) {
    if (cd->stage) return 1;
    if (cd->stage_failed) return 0;
    if (!pinned_slots(&cd->stage, CU_STAGE_SLOT, cd->stage_done, CU_STAGE_SLOTS)) cd->stage_failed = 1;
    return cd->stage != NULL;
}

/* Wait for slot i's last copy: not at all when its event says it has run
   (a slot reused 16 copies later nearly always has) */
static cudaError_t slot_wait(cudaEvent_t e) {
    cudaError_t q = cudaEventQuery(e);
    if (q == cudaSuccess) return q;
    if (q == cudaErrorNotReady) return cudaEventSynchronize(e);
    return q;
}

/* Host to device. A copy from pageable memory waits for the stream to drain
   (CUDA syncs the stream before it), which would stall the Lua thread in the
   middle of a step (a batch, a scalar, a dropout mask); so copies up to 16 MB
   go through pinned slots of CU_STAGE_SLOT bytes, piece by piece, reused
   round-robin once the copy that last used a slot has run (its event).
   Larger ones (a whole data set) copy directly. Either way the host buffer
   may be reused as soon as this returns. */
static int cu_from_host(ld_device *d, void *dst, const void *host, size_t n) {
    cu_dev *cd = cu_begin(d);
    if (!cd) return LD_EDEVICE;
    if (!n) return LD_OK;
    /* up to the whole ring: a batch of a few MB (4096 MNIST images: 12.8 MB)
       in slot-sized pieces; larger copies (a data set going up whole) direct */
    if (n <= (size_t)CU_STAGE_SLOTS * CU_STAGE_SLOT) {
        pthread_mutex_lock(&cd->mu);
        if (stage_ready(cd)) {
            cudaError_t e = cudaSuccess;
            for (size_t off = 0; off < n && e == cudaSuccess; off += CU_STAGE_SLOT) {
                size_t m = n - off < CU_STAGE_SLOT ? n - off : CU_STAGE_SLOT;
                int i = cd->stage_next;
                cd->stage_next = (i + 1) % CU_STAGE_SLOTS;
                char *slot = cd->stage + (size_t)i * CU_STAGE_SLOT;
                e = slot_wait(cd->stage_done[i]);   /* the slot's last copy has run */
                if (e == cudaSuccess) {
                    memcpy(slot, (const char *)host + off, m);
                    e = cudaMemcpyAsync((char *)dst + off, slot, m, cudaMemcpyHostToDevice, cd->stream);
                    if (e == cudaSuccess) e = cudaEventRecord(cd->stage_done[i], cd->stream);
                }
            }
            pthread_mutex_unlock(&cd->mu);
            if (e != cudaSuccess) return cu_record(cd, "cudaMemcpyAsync (host to device, staged)", e);
            return LD_OK;
        }
        pthread_mutex_unlock(&cd->mu);
    }
    cudaError_t e = cudaMemcpyAsync(dst, host, n, cudaMemcpyHostToDevice, cd->stream);
    if (e != cudaSuccess) return cu_record(cd, "cudaMemcpyAsync (host to device)", e);
    return LD_OK;
}

/* Reads that wait for their own copy only (ld_backend.read_begin): the copy
   goes behind the queued kernels into a pinned slot and an event marks it
   done; read_end waits for that event, not for what was queued after it (a
   step's optimizer, behind its loss). The handle is the slot's number + 1. */
/* caller holds cd->mu; 0 when pinned memory or events are not to be had */
static int rd_ready(cu_dev *cd) {
    if (cd->rd) return 1;
    if (cd->rd_failed) return 0;
    if (!pinned_slots(&cd->rd, CU_READ_SLOT, cd->rd_done, CU_READ_SLOTS)) cd->rd_failed = 1;
    return cd->rd != NULL;
}

static void *cu_read_begin(ld_device *d, const void *src, size_t n) {
    if (n > CU_READ_SLOT) return NULL;
    cu_dev *cd = cu_begin(d);
    if (!cd) return NULL;   /* recorded: the read falls back to to_host, which reports it */
    pthread_mutex_lock(&cd->mu);
    int slot = -1;
    if (rd_ready(cd))
        for (int i = 0; i < CU_READ_SLOTS && slot < 0; i++)
            if (!cd->rd_busy[i]) slot = i;
    cudaError_t e = cudaErrorNotReady;
    if (slot >= 0) {
        e = cudaMemcpyAsync(cd->rd + (size_t)slot * CU_READ_SLOT, src, n, cudaMemcpyDeviceToHost, cd->stream);
        if (e == cudaSuccess) e = cudaEventRecord(cd->rd_done[slot], cd->stream);
        if (e == cudaSuccess) cd->rd_busy[slot] = 1;
    }
    pthread_mutex_unlock(&cd->mu);
    if (slot >= 0 && e != cudaSuccess) {   /* the read falls back to to_host, which reports it */
        cu_record(cd, "cudaMemcpyAsync (device to host, a read in flight)", e);
        return NULL;
    }
    return slot >= 0 ? (void *)(intptr_t)(slot + 1) : NULL;
}

static int cu_read_end(ld_device *d, void *handle, void *host, size_t n, int report) {
    cu_dev *cd = cu_of(d);
    int slot = (int)(intptr_t)handle - 1;
    if (cudaSetDevice(cd->ordinal) != cudaSuccess) cudaGetLastError();
    cudaError_t e = cudaEventSynchronize(cd->rd_done[slot]);
    if (e != cudaSuccess) cu_record(cd, "cudaEventSynchronize (a read in flight)", e);
    else memcpy(host, cd->rd + (size_t)slot * CU_READ_SLOT, n);
    pthread_mutex_lock(&cd->mu);
    cd->rd_busy[slot] = 0;
    pthread_mutex_unlock(&cd->mu);
    return report ? take_error(cd) : LD_OK;
}

static void cu_synchronize(ld_device *d) {
    cu_dev *cd = cu_begin(d);
    if (!cd) return;
    cudaError_t e = cudaStreamSynchronize(cd->stream);
    if (e != cudaSuccess) cu_record(cd, "cudaStreamSynchronize", e);
}

/* ================================================================ the backend */
/* Positional (C++17 has no designated initializers): the memory slots in
   ld_backend's order, then the kernels in the list's order, which is the
   order of their slots (ld_kernels.h). */
static_assert(sizeof(ld_backend) == (8 + LD_KERNEL_COUNT) * sizeof(void *),
              "ld_backend's memory slots changed: fill the new one in cuda_backend");
#define CU_SLOT(name, ...) cu_##name,
static const ld_backend cuda_backend = {
    /* name */ "cuda",
    /* alloc */ cu_alloc,
    /* free */ cu_free,
    /* to_host */ cu_to_host,
    /* from_host */ cu_from_host,
    /* synchronize */ cu_synchronize,
    /* read_begin */ cu_read_begin,
    /* read_end */ cu_read_end,
    LD_KERNELS(CU_SLOT)
};

/* ================================================================ libraries opened on first use */
int cu_open_library(const char *what, const char *const *libs, int nlibs, const cu_sym *syms, int nsyms,
                    char *why, size_t whylen) {
    void *h = NULL;
    const char *err = "";
    int at = 0;
    for (; at < nlibs && !(h = dlopen(libs[at], RTLD_NOW | RTLD_LOCAL)); at++) err = dlerror();
    if (!h) {
        snprintf(why, whylen, "%s not found: %s", what, err ? err : libs[0]);
        return 0;
    }
    for (int i = 0; i < nsyms; i++) {
        *syms[i].slot = dlsym(h, syms[i].name);
        if (!*syms[i].slot) {
            snprintf(why, whylen, "%s lacks %s (an old %s?)", what, syms[i].name, libs[at]);
            return 0;
        }
    }
    return 1;
}

/* ================================================================ discovery */
static int discover(char *note, size_t n) {
    /* cudart opens the driver itself; opening it here first tells "no driver"
       apart from the other failures */
    void *drv = dlopen(LD_CUDA_DRIVER, RTLD_NOW | RTLD_LOCAL);
    if (!drv) {
        snprintf(note, n, "%s", LD_CUDA_NO_DRIVER_NOTE);
        return 0;
    }
    int count = 0, drv_ver = 0, rt_ver = 0;
    cudaDriverGetVersion(&drv_ver);
    cudaRuntimeGetVersion(&rt_ver);
    cudaError_t e = cudaGetDeviceCount(&count);
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    char visible[96] = "";
    if (vis) snprintf(visible, sizeof visible, " (CUDA_VISIBLE_DEVICES=\"%.60s\")", vis);
    if (e == cudaErrorNoDevice || (e == cudaSuccess && count == 0)) {
        cudaGetLastError();
        snprintf(note, n, "CUDA driver found but no GPU%s", visible);
        return 0;
    }
    if (e == cudaErrorInsufficientDriver) {
        cudaGetLastError();
        snprintf(note, n, "CUDA driver too old: it supports CUDA %d.%d, the plugin was built for %d.%d",
                 drv_ver / 1000, drv_ver % 1000 / 10, rt_ver / 1000, rt_ver % 1000 / 10);
        return 0;
    }
    if (e != cudaSuccess) {
        cudaGetLastError();
        snprintf(note, n, "CUDA driver found but cudaGetDeviceCount failed: %s (%s)%s", cudaGetErrorString(e),
                 cudaGetErrorName(e), visible);
        return 0;
    }
    size_t at = (size_t)snprintf(note, n, "CUDA %d.%d driver, %d GPU%s:", drv_ver / 1000, drv_ver % 1000 / 10,
                                 count, count > 1 ? "s" : "");
    int registered = 0;
    for (int i = 0; i < count; i++) {
        ld_device *d = (ld_device *)calloc(1, sizeof *d);
        cu_dev *cd = (cu_dev *)calloc(1, sizeof *cd);
        if (!d || !cd) { free(d); free(cd); break; }
        cudaDeviceProp prop;
        e = cudaGetDeviceProperties(&prop, i);
        if (e == cudaSuccess) {
            snprintf(cd->gpu, sizeof cd->gpu, "%.95s", prop.name);
            cd->total_mem = prop.totalGlobalMem;
        } else {
            cudaGetLastError();
            snprintf(cd->gpu, sizeof cd->gpu, "GPU %d (cudaGetDeviceProperties: %s)", i, cudaGetErrorName(e));
        }
        cd->ordinal = i;
        cd->dev = d;
        pthread_mutex_init(&cd->mu, NULL);
        d->kind = LD_DEV_CUDA;
        d->index = i;
        snprintf(d->name, sizeof d->name, "cuda:%d", i);
        d->backend = &cuda_backend;
        d->threads = 1;
        d->impl = cd;
        if (cu_host->register_device(d) != LD_OK) { free(d); free(cd); break; }
        registered++;
        if (at < n)
            at += (size_t)snprintf(note + at, n - at, "%s %s %s (%.0f GB)", i ? "," : "", d->name, cd->gpu,
                                   (double)cd->total_mem / 1e9);
    }
    if (!registered) snprintf(note, n, "CUDA driver found but no GPU could be registered");
    return registered;
}

static int plugin_init(const ld_cuda_host *host, char *note, size_t n) {
    cu_host = host;
    return discover(note, n);
}

static const ld_cuda_plugin plugin_table = {
    LD_CUDA_ABI,
    LD_KERNEL_COUNT,
    sizeof(ld_backend),
    plugin_init,
    cu_all_reduce,
    cu_nccl_unique_id,
    cu_nccl_comm_init_rank,
    cu_nccl_comm_all_reduce,
    cu_nccl_comm_destroy,
};

extern "C" __attribute__((visibility("default"))) const ld_cuda_plugin *ldist_cuda_plugin(void) {
    return &plugin_table;
}
