/*
 * ld_cuda.h - the contract between the engine and its CUDA plugin.
 *
 * The CUDA backend is a separate shared object, build/ldist_cuda.so, that the
 * engine opens at run time with dlopen, so one build of ldist serves machines
 * with and without GPUs:
 *
 *     int n = ld_cuda_load();            // once; registers cuda:0 .. cuda:n-1
 *     if (n == 0) puts(ld_device_note()); // "no CUDA driver: libcuda.so.1 not found"
 *
 * The plugin never links against the engine: the engine hands it the few
 * engine functions it needs (ld_cuda_host) and gets back a table of entry
 * points (ld_cuda_plugin). Its kernels reach the engine as an ld_backend
 * (ld_device.h) attached to each device it registers. cuBLAS and NCCL are
 * opened by the plugin itself when first needed, so the plugin loads on a
 * machine that lacks them and says which one is missing.
 *
 * This header is plain C: the engine's C files and the plugin's .cu files
 * both include it.
 */
#ifndef LD_CUDA_H
#define LD_CUDA_H

#include "ld_device.h"

#define LD_CUDA_ABI 2                  /* bump when either table changes */
#define LD_NCCL_ID_BYTES 128           /* sizeof(ncclUniqueId) */
#define LD_CUDA_PLUGIN_FILE "ldist_cuda.so"
#define LD_CUDA_PLUGIN_SYMBOL "ldist_cuda_plugin"
/* the driver library both sides look for, and the note when it is missing */
#define LD_CUDA_DRIVER "libcuda.so.1"
#define LD_CUDA_NO_DRIVER_NOTE "no CUDA driver: " LD_CUDA_DRIVER " not found"

/* What the engine gives the plugin. */
typedef struct ld_cuda_host {
    int abi;                                           /* LD_CUDA_ABI */
    /* Record a failure for the calling thread (ld_fail); msg is used as is. */
    ld_status (*fail)(ld_status st, const char *msg);
    void (*clear_error)(void);
    int (*register_device)(ld_device *d);              /* ld_device_register */
} ld_cuda_host;

/* What the plugin gives the engine. Every function that can fail returns an
   ld_status and leaves a message naming the CUDA/cuBLAS/NCCL call. */
typedef struct ld_cuda_plugin {
    int abi;                                           /* LD_CUDA_ABI */
    /* The kernel table the plugin was built against (LD_KERNEL_COUNT slots,
       sizeof(ld_backend) bytes): a plugin built before a kernel was added
       would call the wrong slots, so the engine refuses one that differs. */
    int kernel_count;
    size_t backend_size;
    /* Ask the driver for GPUs and register cuda:0 .. cuda:N-1 (their streams
       and cuBLAS handles are made on first use). Returns N. With N = 0,
       `note` gets the one-line reason ("no CUDA driver: libcuda.so.1 not
       found", "CUDA driver found but no GPU"); otherwise a line naming the GPUs. */
    int (*init)(const ld_cuda_host *host, char *note, size_t note_size);
    /* In-process all-reduce: t[r*k + i] is tensor i of replica r, a contiguous
       float32 tensor on devs[r] (all CUDA devices, all different). Summed (or
       averaged) in place with NCCL, one communicator per device, queued on each
       device's stream inside one ncclGroupStart/End. n = 1 is valid. */
    int (*all_reduce)(int n, ld_device *const *devs, int k, ld_tensor *const *t, int mean);
    /* ---- several processes (the multi-worker strategy): rank 0 calls
       nccl_unique_id and hands the bytes to every rank through the cluster's
       rendezvous; each rank then makes its communicator on its device. */
    int (*nccl_unique_id)(unsigned char id[LD_NCCL_ID_BYTES]);
    int (*nccl_comm_init_rank)(ld_device *d, const unsigned char id[LD_NCCL_ID_BYTES], int nranks,
                               int rank, void **comm);
    /* Sum (or average) k contiguous float32 tensors on the communicator's device
       across the ranks, in place, queued on the device's stream. */
    int (*nccl_comm_all_reduce)(void *comm, int k, ld_tensor *const *t, int mean);
    void (*nccl_comm_destroy)(void *comm);
} ld_cuda_plugin;

/* The one symbol the plugin exports. */
typedef const ld_cuda_plugin *(*ld_cuda_plugin_fn)(void);

/* ---- engine side (engine/ld_device.c) ---- */
/* Find, open and initialise the plugin, once (thread-safe); the number of CUDA
   devices registered. Never fails: without a GPU ld_device_note() says why. */
int ld_cuda_load(void);
/* The plugin's table, or NULL when it did not load (or found no GPU). */
const ld_cuda_plugin *ld_cuda_plugin_get(void);
/* ld_comm_all_reduce over CUDA devices (ld_strategy.c calls it). */
int ld_cuda_all_reduce(int n, ld_device *const *devs, int k, ld_tensor *const *t, int mean);

#endif
