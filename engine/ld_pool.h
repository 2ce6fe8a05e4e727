/*
 * ld_pool.h - the CPU's thread pools (ld_pool.c): one pool per logical CPU
 * device, on that device's own cores, and how the cores of the host are
 * shared out among processes and devices. The CPU kernels (ld_cpu_*.c), the
 * executors and the data pipeline (ld_image.c) all split their loops here,
 * so there is one home for threads and no pool nested in another.
 *
 *     static void part(void *ctx, int p, int np) { ... ld_cpu_range(rows, p, np, &lo, &hi) ... }
 *     ld_cpu_parallel(part, &job, 64);     // parts run on the pool; nested calls run serially
 */
#ifndef LD_POOL_H
#define LD_POOL_H

#include <stdint.h>

/* ---- splitting a loop */
typedef void (*ld_par_fn)(void *ctx, int part, int nparts);
/* fn(ctx, part, nparts) for every part, in parallel over the calling
   thread's pool (its device's on an executor, cpu:0's anywhere else);
   nparts is min(want, the pool's size); a call from a pool worker runs
   serially. The caller takes part 0. */
void ld_cpu_parallel(ld_par_fn fn, void *ctx, int want);
/* ---- a thread's scratch blocks
 * For kernels that need a large temporary per call (a product's packed
 * operands, its float32 sums before rounding): block `slot` of the calling
 * thread, at least n bytes, 64-byte aligned, kept for its next call (a fresh
 * malloc of a few MB per call is fresh pages, whose faults took half of a
 * 256x784x512 bfloat16 product's time) and freed when the thread ends; NULL
 * when out of memory. A block over 64 MB is not kept: ld_cpu_scratch_done
 * frees it after the call. Each caller uses its own slots (LD_SCRATCH_*),
 * so that nested kernels on one thread never share one. */
enum { LD_SCRATCH_PACK_A = 0, LD_SCRATCH_PACK_B, LD_SCRATCH_SUMS, LD_SCRATCH_SLOTS };
void *ld_cpu_scratch(int slot, size_t n);
void ld_cpu_scratch_done(int slot, void *p);
/* part's share [lo, hi) of n elements, in 16-element aligned blocks */
void ld_cpu_range(int64_t n, int part, int nparts, int64_t *lo, int64_t *hi);
/* part's share [lo, hi) of n rows, split evenly (rows are coarse units) */
static inline void ld_cpu_rows(int64_t n, int part, int nparts, int64_t *lo, int64_t *hi) {
    *lo = n * part / nparts;
    *hi = n * (part + 1) / nparts;
}
/* below this many elements a loop is not worth splitting */
#define LD_CPU_PAR_MIN 32768
/* parts wanted for `rows` rows of `work` elements in all: one below
   LD_CPU_PAR_MIN elements, else a part per row up to 64 */
static inline int ld_cpu_row_parts(int64_t rows, int64_t work) {
    if (work < LD_CPU_PAR_MIN || rows < 2) return 1;
    return rows < 64 ? (int)rows : 64;
}
/* For tests: how long a pool's waiters spin (pauses) and yield before they
   sleep; 0, 0 sleeps at once. */
void ld_cpu_pool_set_spin(int spin, int yield);

/* ---- threads of the calling thread's kernels */
/* Threads of cpu:0's kernels (default: its share of the cores; LDIST_NUM_THREADS
   overrides); 1 = single-threaded. */
void ld_cpu_set_threads(int n);
/* Threads of the calling thread's kernels: its device's pool on a device's
   executor, cpu:0's anywhere else. */
int ld_cpu_threads(void);
/* The cores this process may use: its affinity mask, its share of them
   when several processes of one job run on this host, or LDIST_CPU_CORES. */
int ld_cpu_cores(void);
/* Make the calling thread run CPU kernels single-threaded. */
void ld_cpu_thread_serial(int on);

/* ---- how the cores are shared out
 * The process's cores are split among its n logical CPU devices: device i
 * gets a pool of cores/n threads (the remainder spread over the first
 * ones), pinned to its own cores where the OS allows and the cores are not
 * oversubscribed. Shares are whole physical cores (all their SMT threads)
 * while there are at least n physical cores. */
int ld_cpu_split(int n);
/* The calling thread is the executor of cpu:<dev>: its kernels run on that
   device's pool, and it pins itself to the device's cores. */
void ld_cpu_pool_bind(int dev);
/* An executor re-pins itself if the split changed (cheap; once per task). */
void ld_cpu_thread_refresh(void);
int ld_cpu_device_threads(int dev);
/* cpu:<dev>'s cores as CPU ids (at most max); *pinned: its threads are pinned there */
int ld_cpu_device_cores(int dev, int *ids, int max, int *pinned);
/* the process's cores, grouped by physical core (SMT siblings next to each other) */
int ld_cpu_process_cores(int *ids, int max);
/* physical cores among the process's cores; *smt: most hardware threads of one */
int ld_cpu_physical_cores(int *smt);
/* This process's rank and count among the processes of its job on this host (0, 1: alone). */
void ld_cpu_local_process(int *rank, int *size);
/* One line: the process's cores, how they were split, what is pinned. */
const char *ld_cpu_split_describe(void);

#endif
