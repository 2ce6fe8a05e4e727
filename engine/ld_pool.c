/*
 * ld_pool.c - the CPU's thread pools (ld_pool.h), and how the cores of the machine
 * are shared out among the processes of one host and the logical CPU
 * devices of one process.
 *
 * OpenBLAS runs single-threaded and a CPU device splits the work itself,
 * one part per thread of its pool: row blocks of a matrix product, ranges
 * of elementwise and optimizer loops. Threads each running a
 * single-threaded sgemm on their rows beat one multi-threaded OpenBLAS call
 * (scripts/bench/sgemm.c compares the two), and one pool per device that
 * the engine controls cannot oversubscribe the cores as nested ones would.
 * The calling thread takes part 0.
 *
 * The share-out, from the top:
 *   - the cores this process may use: its affinity mask (taskset, cgroups,
 *     a launcher that bound it), or LDIST_CPU_CORES=N to pretend N cores
 *     (tests of the split on small machines: nothing is pinned then);
 *   - several processes on one host (ldist launch, LocalCluster, mpirun or
 *     srun with several tasks per node) each take cores/(local processes)
 *     of them, disjoint, the remainder spread over the first ones, and pin
 *     themselves there (sched_setaffinity), unless LDIST_NUM_THREADS names
 *     the thread count (then nothing is pinned) or a launcher already bound
 *     the process to fewer cores than the machine has;
 *   - the process's cores are split among its logical CPU devices the same
 *     way (ld_cpu_devices): device i gets a pool of its share of threads,
 *     pinned to its own cores. cpu:0's pool serves any thread that is not a
 *     device's executor (the Lua thread, prefetch threads), which stay
 *     unpinned.
 * Pinning is skipped where the cores would be oversubscribed (more
 * processes or devices than cores): a pinned thread could not move away
 * from a busy core.
 *
 * Shares are whole physical cores. With SMT (hyper-threading) a core's
 * hardware threads share its FMA units and its L1/L2 caches; Linux numbers
 * them apart (on a 16-thread Xeon, 0 and 8 are one core). Slices cut from
 * the ids in order would then put two devices (or two processes) on the
 * same physical cores, each evicting the other's weights from L2, and each
 * device would look as fast as a whole core per thread when measured alone.
 * So the process's cores are ordered by package and physical core
 * (sysfs topology: thread_siblings_list, physical_package_id), and split
 * by physical cores while there are at least as many as shares; beyond
 * that, by hardware threads.
 */
#define _GNU_SOURCE
#include "ld_device.h"
#include "ld_executor.h"
#include "ld_pool.h"

#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* ================================================================ the pools
 * A run hands part i to worker i through the worker's own slot (a cache line
 * it alone waits on) and counts the parts still running down to zero. Both
 * sides spin a little before they sleep (a futex): the ops of a training
 * step follow each other microseconds apart, and a worker that is still
 * spinning starts the next op's part in well under a microsecond, where a
 * wake-up from sleep (futex, scheduler) costs tens of microseconds on every
 * op and every thread, the pool's main cost on many cores. */
enum { MAX_WORKERS = 255 };   /* ldist.set_num_threads takes up to 256 */
typedef struct {
    _Alignas(64) unsigned seq;   /* futex word: bumped to hand a part over */
    int sleeping;                /* the worker sleeps on seq (futex) */
    ld_par_fn fn;                /* the part handed over: written before seq is bumped */
    void *ctx;
    int part, nparts;
} pool_slot;

typedef struct cpu_pool {
    pthread_mutex_t run_mu;   /* one run at a time; a second caller runs serially */
    int wanted;               /* threads of its kernels, the caller included */
    int workers;              /* started (kept until exit) */
    int index;                /* its device, cpu:<index> */
    /* its cores: a slice of the process's core list (split_mu) */
    int first, ncores, pinned;
    pool_slot *slot[MAX_WORKERS + 1];   /* slot[i]: worker i's (1..workers) */
    _Alignas(64) int remaining;         /* futex word: parts of the run still running (not the caller's) */
    int caller_sleeping;                /* the caller sleeps on remaining */
} cpu_pool;

static cpu_pool pools[LD_MAX_LOGICAL];
static _Thread_local cpu_pool *tl_pool;   /* NULL: cpu:0's, unpinned */
static _Thread_local int tl_worker;       /* a pool worker (or serial): nested runs are serial */
static _Thread_local unsigned tl_pin_gen; /* the split this thread last pinned itself for */

/* A waiter spins this many pauses (microseconds), then yields its core this
   many times (a thread it waits for may be waiting for a core, on a machine
   running more threads than it has cores), then sleeps. LDIST_POOL_SPIN and
   LDIST_POOL_YIELD set them (0: sleep at once), to compare. */
static int spin_limit = 2000, yield_limit = 64;

void ld_cpu_pool_set_spin(int spin, int yield) {
    __atomic_store_n(&spin_limit, spin < 0 ? 0 : spin, __ATOMIC_RELAXED);
    __atomic_store_n(&yield_limit, yield < 0 ? 0 : yield, __ATOMIC_RELAXED);
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}
static void futex_wait(int *addr, int val) { syscall(SYS_futex, addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0); }
static void futex_wake(int *addr) { syscall(SYS_futex, addr, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0); }

/* Wait until *word != old: spin, then sleep with *sleeping set. The waker
   changes *word, then reads *sleeping (both sequentially consistent, as
   here in the other order), so one of the two sees the other: no lost wake-up. */
static int wait_change(int *word, int old, int *sleeping) {
    int v, spin = __atomic_load_n(&spin_limit, __ATOMIC_RELAXED), yield = __atomic_load_n(&yield_limit, __ATOMIC_RELAXED);
    for (int i = 0; (v = __atomic_load_n(word, __ATOMIC_ACQUIRE)) == old; i++) {
        if (i < spin) { cpu_relax(); continue; }
        if (i < spin + yield) { sched_yield(); continue; }
        __atomic_store_n(sleeping, 1, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(word, __ATOMIC_SEQ_CST) == old) futex_wait(word, old);
        __atomic_store_n(sleeping, 0, __ATOMIC_RELAXED);
        i = 0;
    }
    return v;
}

/* ---- the split (guarded by split_mu) */
enum { MAX_CORES = CPU_SETSIZE };
static pthread_mutex_t split_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned split_gen = 1;       /* bumped when a slice changes; threads re-pin */
static int proc_cores[MAX_CORES];    /* the cores of this process, as CPU ids */
static int n_proc_cores;
static int core_of[MAX_CORES];       /* proc_cores[i]'s physical core (a key: equal for SMT siblings) */
static int group_start[MAX_CORES + 1]; /* where each physical core's run of proc_cores starts, and the end */
static int n_groups;                 /* physical cores among proc_cores */
static int smt_most;                 /* most hardware threads of one physical core among them */
static int host_cores;               /* the cores of the host (the allowed set before the process split) */
static int can_pin;                  /* real cores, no LDIST_NUM_THREADS: sched_setaffinity is ours to call */
static const char *no_pin_why = "";  /* else why not */
static int budget_threads;           /* LDIST_NUM_THREADS, else 0 (the cores decide) */
static int n_split = 1;              /* devices the cores are split among */
static int local_rank, local_size = 1;
static char proc_note[512];          /* how this process got its cores */
static char pin_error[128];          /* why pinning failed, if it did */

static void pin_self(const int *ids, int n) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int i = 0; i < n; i++) CPU_SET(ids[i], &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0 && !pin_error[0])
        snprintf(pin_error, sizeof pin_error, "sched_setaffinity: %s", strerror(errno));
}

/* Pin the calling thread to its pool's cores if the split changed since it
   last did (a device's slice shrinks when more devices are made). */
static void refresh_pin(cpu_pool *p) {
    unsigned g = __atomic_load_n(&split_gen, __ATOMIC_ACQUIRE);
    if (tl_pin_gen == g) return;
    tl_pin_gen = g;
    if (!can_pin) return;
    pthread_mutex_lock(&split_mu);
    if (p->pinned) pin_self(proc_cores + p->first, p->ncores);
    else pin_self(proc_cores, n_proc_cores);   /* no slice of its own: the process's cores */
    pthread_mutex_unlock(&split_mu);
}

static void *pool_worker(void *arg) {
    uintptr_t a = (uintptr_t)arg;
    cpu_pool *p = &pools[a >> 16];
    pool_slot *s = p->slot[a & 0xffff];
    int seen = 0;
    tl_worker = 1;
    tl_pool = p;
    ld_cpu_flush_denormals();
    char name[16];
    snprintf(name, sizeof name, "ld-cpu%d-w%d", p->index, (int)(a & 0xffff));
    pthread_setname_np(pthread_self(), name);
    for (;;) {
        seen = wait_change((int *)&s->seq, seen, &s->sleeping);
        refresh_pin(p);
        s->fn(s->ctx, s->part, s->nparts);
        if (__atomic_sub_fetch(&p->remaining, 1, __ATOMIC_SEQ_CST) == 0 &&
            __atomic_load_n(&p->caller_sleeping, __ATOMIC_SEQ_CST))
            futex_wake(&p->remaining);
    }
    return NULL;
}

static void pool_start(cpu_pool *p, int n) {
    /* workers are started once and kept; n is the count wanted (caller included) */
    if (n > MAX_WORKERS + 1) n = MAX_WORKERS + 1;
    while (p->workers + 1 < n) {
        int id = p->workers + 1;
        if (!p->slot[id]) {
            pool_slot *s = aligned_alloc(64, sizeof *s);
            if (!s) break;
            memset(s, 0, sizeof *s);
            p->slot[id] = s;
        }
        pthread_t t;
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        uintptr_t arg = (uintptr_t)p->index << 16 | (uintptr_t)id;
        int rc = pthread_create(&t, &a, pool_worker, (void *)arg);
        pthread_attr_destroy(&a);
        if (rc != 0) break;
        p->workers++;
    }
}

static cpu_pool *my_pool(void) { return tl_pool ? tl_pool : &pools[0]; }

/* Run fn(ctx, part, nparts) for parts 0..nparts-1 in parallel; nparts is
   min(want, the pool's size). Nested calls (from a worker) run serially. */
void ld_cpu_parallel(ld_par_fn fn, void *ctx, int want) {
    cpu_pool *p = my_pool();
    int n = __atomic_load_n(&p->wanted, __ATOMIC_RELAXED);
    if (want < n) n = want;
    unsigned fp = ld_cpu_fp_enter();   /* the caller's parts flush denormals as the workers do */
    if (n <= 1 || tl_worker || pthread_mutex_trylock(&p->run_mu) != 0) { fn(ctx, 0, 1); ld_cpu_fp_leave(fp); return; }
    if (p->workers + 1 < n) pool_start(p, n);
    if (p->workers + 1 < n) n = p->workers + 1;
    if (n <= 1) { pthread_mutex_unlock(&p->run_mu); fn(ctx, 0, 1); ld_cpu_fp_leave(fp); return; }
    __atomic_store_n(&p->remaining, n - 1, __ATOMIC_RELAXED);
    for (int i = 1; i < n; i++) {
        pool_slot *s = p->slot[i];
        s->fn = fn; s->ctx = ctx; s->part = i; s->nparts = n;
        __atomic_add_fetch(&s->seq, 1, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&s->sleeping, __ATOMIC_SEQ_CST)) futex_wake((int *)&s->seq);
    }
    fn(ctx, 0, n);
    ld_cpu_fp_leave(fp);
    /* the others' parts: spin, then sleep until the last one wakes this thread */
    int spin = __atomic_load_n(&spin_limit, __ATOMIC_RELAXED), yield = __atomic_load_n(&yield_limit, __ATOMIC_RELAXED);
    for (int i = 0, r; (r = __atomic_load_n(&p->remaining, __ATOMIC_ACQUIRE)) != 0; i++) {
        if (i < spin) { cpu_relax(); continue; }
        if (i < spin + yield) { sched_yield(); continue; }
        __atomic_store_n(&p->caller_sleeping, 1, __ATOMIC_SEQ_CST);
        r = __atomic_load_n(&p->remaining, __ATOMIC_SEQ_CST);
        if (r != 0) futex_wait(&p->remaining, r);
        __atomic_store_n(&p->caller_sleeping, 0, __ATOMIC_RELAXED);
        i = 0;
    }
    pthread_mutex_unlock(&p->run_mu);
}

/* ---- a thread's scratch blocks (ld_pool.h) */
#define SCRATCH_KEEP ((size_t)64 << 20)
typedef struct { void *p[LD_SCRATCH_SLOTS]; size_t n[LD_SCRATCH_SLOTS]; } scratch_set;
static _Thread_local scratch_set *tl_scratch;
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static void scratch_free(void *v) {
    scratch_set *s = v;
    for (int i = 0; i < LD_SCRATCH_SLOTS; i++) free(s->p[i]);
    free(s);
}
static void scratch_init(void) { pthread_key_create(&scratch_key, scratch_free); }

void *ld_cpu_scratch(int slot, size_t n) {
    if (slot < 0 || slot >= LD_SCRATCH_SLOTS) return NULL;
    n = (n + 63) & ~(size_t)63;
    if (n == 0) n = 64;
    if (n > SCRATCH_KEEP) { void *p = NULL; return posix_memalign(&p, 64, n) ? NULL : p; }
    scratch_set *s = tl_scratch;
    if (!s) {
        pthread_once(&scratch_once, scratch_init);
        if (!(s = calloc(1, sizeof *s))) return NULL;
        pthread_setspecific(scratch_key, s);   /* freed with the thread */
        tl_scratch = s;
    }
    if (s->n[slot] < n) {
        void *p = NULL;
        free(s->p[slot]);
        s->p[slot] = NULL;
        s->n[slot] = 0;
        if (posix_memalign(&p, 64, n)) return NULL;
        s->p[slot] = p;
        s->n[slot] = n;
    }
    return s->p[slot];
}

void ld_cpu_scratch_done(int slot, void *p) {
    scratch_set *s = tl_scratch;
    if (p && !(s && slot >= 0 && slot < LD_SCRATCH_SLOTS && s->p[slot] == p)) free(p);
}

void ld_cpu_range(int64_t n, int part, int nparts, int64_t *lo, int64_t *hi) {
    /* 16-element aligned blocks keep vector loops whole */
    int64_t blk = ((n + nparts - 1) / nparts + 15) & ~(int64_t)15;
    *lo = blk * part; *hi = *lo + blk;
    if (*lo > n) *lo = n;
    if (*hi > n) *hi = n;
}

void ld_cpu_set_threads(int n) {
    if (n < 1) n = 1;
    __atomic_store_n(&pools[0].wanted, n, __ATOMIC_RELAXED);
    ld_device *h = ld_device_cpu();
    if (h) h->threads = n;
}

int ld_cpu_threads(void) { return __atomic_load_n(&my_pool()->wanted, __ATOMIC_RELAXED); }
void ld_cpu_thread_serial(int on) { tl_worker = on; }

void ld_cpu_pool_bind(int dev) {
    if (dev < 0 || dev >= LD_MAX_LOGICAL) return;
    tl_pool = &pools[dev];
    tl_worker = 0;
    tl_pin_gen = 0;
    char name[16];
    snprintf(name, sizeof name, "ld-cpu%d", dev);
    pthread_setname_np(pthread_self(), name);
    refresh_pin(tl_pool);
}

void ld_cpu_thread_refresh(void) {
    if (tl_pool && __builtin_expect(tl_pin_gen != __atomic_load_n(&split_gen, __ATOMIC_ACQUIRE), 0))
        refresh_pin(tl_pool);
}

/* ================================================================ the split */
int ld_cpu_cores(void) { return n_proc_cores; }

/* part i of n over `total` items: [*lo, *lo + *cnt), the remainder spread
   over the first parts; with more parts than items, one item each, round robin */
static void share_of(int total, int n, int i, int *lo, int *cnt) {
    if (n > total) { *lo = i % total; *cnt = 1; return; }
    int base = total / n, rem = total % n;
    *lo = i * base + (i < rem ? i : rem);
    *cnt = base + (i < rem);
}

/* group proc_cores (already in topology order) by physical core */
static void regroup(void) {
    n_groups = 0;
    smt_most = 1;
    for (int i = 0; i < n_proc_cores; i++)
        if (i == 0 || core_of[i] != core_of[i - 1]) group_start[n_groups++] = i;
    group_start[n_groups] = n_proc_cores;
    for (int g = 0; g < n_groups; g++)
        if (group_start[g + 1] - group_start[g] > smt_most) smt_most = group_start[g + 1] - group_start[g];
}

/* share i of n of proc_cores: whole physical cores while there are enough
   of them, else hardware threads (share_of's rule either way) */
static void slice_of(int n, int i, int *lo, int *cnt) {
    if (n_groups < n_proc_cores && n <= n_groups) {
        int glo, gcnt;
        share_of(n_groups, n, i, &glo, &gcnt);
        *lo = group_start[glo];
        *cnt = group_start[glo + gcnt] - *lo;
    } else {
        share_of(n_proc_cores, n, i, lo, cnt);
    }
}

int ld_cpu_physical_cores(int *smt) {
    if (smt) *smt = smt_most;
    return n_groups;
}

int ld_cpu_split(int n) {
    if (n < 1 || n > LD_MAX_LOGICAL) return ld_fail(LD_EARG, "number of CPU devices must be in 1..%d, got %d", LD_MAX_LOGICAL, n);
    pthread_mutex_lock(&split_mu);
    int budget = budget_threads ? budget_threads : n_proc_cores;
    for (int i = 0; i < n; i++) {
        cpu_pool *p = &pools[i];
        int lo, cnt, tlo, tcnt;
        slice_of(n, i, &lo, &cnt);
        share_of(budget, n, i, &tlo, &tcnt);
        p->first = lo;
        p->ncores = cnt;
        /* a slice of its own only where the devices do not outnumber the cores */
        p->pinned = can_pin && n > 1 && n <= n_proc_cores;
        /* a thread per hardware thread of its slice, or its share of LDIST_NUM_THREADS */
        __atomic_store_n(&p->wanted, budget_threads ? tcnt : cnt, __ATOMIC_RELAXED);
    }
    n_split = n;
    __atomic_add_fetch(&split_gen, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&split_mu);
    ld_device *h = ld_device_cpu();
    if (h) h->threads = pools[0].wanted;
    return LD_OK;
}

int ld_cpu_device_threads(int dev) {
    if (dev < 0 || dev >= LD_MAX_LOGICAL) return 0;
    return __atomic_load_n(&pools[dev].wanted, __ATOMIC_RELAXED);
}

int ld_cpu_device_cores(int dev, int *ids, int max, int *pinned) {
    if (dev < 0 || dev >= n_split) return 0;
    pthread_mutex_lock(&split_mu);
    cpu_pool *p = &pools[dev];
    int n = 0;
    for (int i = 0; i < p->ncores && n < max; i++) ids[n++] = proc_cores[p->first + i];
    if (pinned) *pinned = p->pinned;
    pthread_mutex_unlock(&split_mu);
    return n;
}

int ld_cpu_process_cores(int *ids, int max) {
    int n = n_proc_cores < max ? n_proc_cores : max;
    memcpy(ids, proc_cores, sizeof *ids * (size_t)n);
    return n;
}

void ld_cpu_local_process(int *rank, int *size) { *rank = local_rank; *size = local_size; }

static int cmp_int(const void *a, const void *b) { int x = *(const int *)a, y = *(const int *)b; return (x > y) - (x < y); }

/* "0-3,8,10-11" (the ids sorted: a slice in topology order may read 0,8,1,9) */
static size_t cpu_list(char *buf, size_t cap, const int *unsorted, int n) {
    int ids[MAX_CORES];
    if (n > MAX_CORES) n = MAX_CORES;
    memcpy(ids, unsorted, sizeof *ids * (size_t)n);
    qsort(ids, (size_t)n, sizeof *ids, cmp_int);
    size_t k = 0;
    if (cap) buf[0] = 0;
    for (int i = 0; i < n;) {
        int j = i;
        while (j + 1 < n && ids[j + 1] == ids[j] + 1) j++;
        int w = j > i ? snprintf(buf + k, cap - k, "%s%d-%d", i ? "," : "", ids[i], ids[j])
                      : snprintf(buf + k, cap - k, "%s%d", i ? "," : "", ids[i]);
        if (w < 0 || (size_t)w >= cap - k) break;
        k += (size_t)w;
        i = j + 1;
    }
    return k;
}

const char *ld_cpu_split_describe(void) {
    static _Thread_local char out[2048];
    char list[256];
    size_t k = 0, cap = sizeof out;
#define PUT(...) do { int w_ = snprintf(out + k, cap - k, __VA_ARGS__); if (w_ > 0) k += (size_t)w_ < cap - k ? (size_t)w_ : cap - k - 1; } while (0)
    pthread_mutex_lock(&split_mu);
    cpu_list(list, sizeof list, proc_cores, n_proc_cores);
    PUT("%s", proc_note);
    if (n_split > 1) {
        PUT("; split among %d CPU devices:", n_split);
        for (int i = 0; i < n_split; i++) {
            cpu_pool *p = &pools[i];
            cpu_list(list, sizeof list, proc_cores + p->first, p->ncores);
            PUT("%s cpu:%d %d thread%s on core%s %s", i ? "," : "", i, p->wanted, p->wanted == 1 ? "" : "s",
                p->ncores == 1 ? "" : "s", list);
        }
        if (pools[0].pinned) PUT(" (each pinned to its cores)");
        else if (!can_pin) PUT(" (not pinned: %s)", no_pin_why);
        else PUT(" (not pinned: more devices than cores)");
    } else {
        PUT("; one CPU device, %d thread%s", pools[0].wanted, pools[0].wanted == 1 ? "" : "s");
    }
    if (pin_error[0]) PUT("; pinning failed (%s)", pin_error);
    pthread_mutex_unlock(&split_mu);
#undef PUT
    return out;
}

/* ---- this process's share of the host, at start-up */

/* The smallest id of "0,8" / "0-1" / "3": the key of a core's siblings; -1 if unreadable */
static int read_first_id(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char buf[256];
    int first = -1;
    if (fgets(buf, sizeof buf, f)) {
        for (char *q = buf; *q;) {
            char *end;
            long v = strtol(q, &end, 10);
            if (end == q) break;
            if (first < 0 || v < first) first = (int)v;
            q = end;
            while (*q == '-' || *q == ',') q++;
            if (*q == '\n') break;
        }
    }
    fclose(f);
    return first;
}

typedef struct { int pkg, core, id; } core_pos;
static int cmp_core_pos(const void *a, const void *b) {
    const core_pos *x = a, *y = b;
    if (x->pkg != y->pkg) return x->pkg < y->pkg ? -1 : 1;
    if (x->core != y->core) return x->core < y->core ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* Order proc_cores by package, then physical core (its hardware threads
   next to each other), from sysfs, or LDIST_CPU_TOPOLOGY: a directory laid
   out as /sys/devices/system/cpu, to check the split of machines this one
   is not. A core whose topology cannot be read is a core of its own, and so
   is every pretended one (LDIST_CPU_CORES) unless LDIST_CPU_TOPOLOGY says. */
static void order_by_topology(int pretended) {
    const char *dir = getenv("LDIST_CPU_TOPOLOGY");
    if (!dir || !*dir) dir = pretended ? NULL : "/sys/devices/system/cpu";
    static core_pos pos[MAX_CORES];
    char path[512];
    for (int i = 0; i < n_proc_cores; i++) {
        int id = proc_cores[i], core = -1, pkg = -1;
        if (dir) {
            snprintf(path, sizeof path, "%s/cpu%d/topology/thread_siblings_list", dir, id);
            core = read_first_id(path);
            snprintf(path, sizeof path, "%s/cpu%d/topology/physical_package_id", dir, id);
            pkg = read_first_id(path);
        }
        pos[i] = (core_pos){pkg < 0 ? 0 : pkg, core < 0 ? id : core, id};
    }
    qsort(pos, (size_t)n_proc_cores, sizeof *pos, cmp_core_pos);
    for (int i = 0; i < n_proc_cores; i++) {
        proc_cores[i] = pos[i].id;
        core_of[i] = pos[i].pkg * MAX_CORES + pos[i].core;
    }
    regroup();
}
static int env_int(const char *name, int *v) {
    const char *s = getenv(name);
    if (!s || !*s) return 0;
    char *end;
    long x = strtol(s, &end, 10);
    if (*end || x < 0 || x > 1 << 20) return 0;
    *v = (int)x;
    return 1;
}

/* Slurm: this node's entry of SLURM_STEP_TASKS_PER_NODE ("4(x2),3") */
static int slurm_tasks_here(int *size) {
    const char *s = getenv("SLURM_STEP_TASKS_PER_NODE");
    int node = 0;
    if (!s) s = getenv("SLURM_TASKS_PER_NODE");
    if (!s || !env_int("SLURM_NODEID", &node)) return 0;
    while (*s) {
        char *end;
        long c = strtol(s, &end, 10), r = 1;
        if (end == s) return 0;
        if (!strncmp(end, "(x", 2)) { r = strtol(end + 2, &end, 10); if (*end == ')') end++; }
        if (node < r) { *size = (int)c; return c > 0; }
        node -= (int)r;
        s = *end == ',' ? end + 1 : end;
    }
    return 0;
}

/* The rank and count of the processes of this job on this host: ldist's
   launchers (LDIST_LOCAL_RANK/SIZE), Open MPI, MPICH/Intel MPI, Slurm. */
static const char *local_processes(int *rank, int *size) {
    if (env_int("LDIST_LOCAL_RANK", rank) && env_int("LDIST_LOCAL_SIZE", size)) return "LDIST_LOCAL_RANK/SIZE";
    if (env_int("OMPI_COMM_WORLD_LOCAL_RANK", rank) && env_int("OMPI_COMM_WORLD_LOCAL_SIZE", size))
        return "OMPI_COMM_WORLD_LOCAL_RANK/SIZE";
    if (env_int("MPI_LOCALRANKID", rank) && env_int("MPI_LOCALNRANKS", size)) return "MPI_LOCALRANKID/NRANKS";
    if (env_int("SLURM_LOCALID", rank) && slurm_tasks_here(size)) return "SLURM_LOCALID";
    *rank = 0;
    *size = 1;
    return NULL;
}

__attribute__((constructor)) static void cpu_pool_init(void) {
    for (int i = 0; i < LD_MAX_LOGICAL; i++) {
        cpu_pool *p = &pools[i];
        pthread_mutex_init(&p->run_mu, NULL);
        p->index = i;
        p->wanted = 1;
    }
    int spin;
    if (env_int("LDIST_POOL_SPIN", &spin)) spin_limit = spin;
    if (env_int("LDIST_POOL_YIELD", &spin)) yield_limit = spin;
    /* the cores this process may use */
    int fake = 0;
    cpu_set_t set;
    CPU_ZERO(&set);
    if (env_int("LDIST_CPU_CORES", &fake) && fake > 0) {
        if (fake > MAX_CORES) fake = MAX_CORES;
        for (int i = 0; i < fake; i++) proc_cores[i] = i;
        n_proc_cores = fake;
    } else if (sched_getaffinity(0, sizeof set, &set) == 0) {
        for (int c = 0; c < CPU_SETSIZE; c++) if (CPU_ISSET(c, &set)) proc_cores[n_proc_cores++] = c;
    }
    if (n_proc_cores == 0) {   /* no affinity answer: the online count */
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_proc_cores = n > 0 ? (int)(n < MAX_CORES ? n : MAX_CORES) : 1;
        for (int i = 0; i < n_proc_cores; i++) proc_cores[i] = i;
        fake = 1;   /* ids we cannot be sure of: no pinning */
    }
    order_by_topology(fake && getenv("LDIST_CPU_CORES") != NULL);
    host_cores = n_proc_cores;
    int nt = 0;
    if (env_int("LDIST_NUM_THREADS", &nt) && nt > 0) budget_threads = nt;
    const char *pe = getenv("LDIST_CPU_PIN");
    int no_pin = pe && !strcmp(pe, "0");
    can_pin = !fake && !budget_threads && !no_pin;
    no_pin_why = budget_threads ? "LDIST_NUM_THREADS is set" : no_pin ? "LDIST_CPU_PIN=0"
               : getenv("LDIST_CPU_CORES") ? "LDIST_CPU_CORES is set" : "the cores' ids are unknown";
    char list[200];
    const char *src = local_processes(&local_rank, &local_size);
    if (local_size < 1 || local_rank >= local_size) { local_rank = 0; local_size = 1; src = NULL; }
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    if (src && local_size > 1 && !budget_threads && !fake && online > 0 && n_proc_cores < online) {
        /* a launcher bound this process already (mpirun --bind-to, srun --cpu-bind): keep its choice */
        cpu_list(list, sizeof list, proc_cores, n_proc_cores);
        snprintf(proc_note, sizeof proc_note, "process %d of %d on this host (%s), bound by its launcher to cores %s",
                 local_rank, local_size, src, list);
    } else if (src && local_size > 1 && budget_threads) {
        snprintf(proc_note, sizeof proc_note, "process %d of %d on this host (%s), not pinned", local_rank, local_size, src);
        can_pin = 0;
    } else if (src && local_size > 1) {
        int lo, cnt;
        slice_of(local_size, local_rank, &lo, &cnt);
        memmove(proc_cores, proc_cores + lo, sizeof *proc_cores * (size_t)cnt);
        memmove(core_of, core_of + lo, sizeof *core_of * (size_t)cnt);
        n_proc_cores = cnt;
        regroup();
        int pin = can_pin && local_size <= host_cores;
        if (can_pin && !pin) no_pin_why = "more processes than cores";
        cpu_list(list, sizeof list, proc_cores, n_proc_cores);
        snprintf(proc_note, sizeof proc_note, "process %d of %d on this host (%s): %d of %d cores (%s)%s%s", local_rank,
                 local_size, src, n_proc_cores, host_cores, list,
                 pin ? ", pinned" : ", not pinned: ", pin ? "" : no_pin_why);
        /* the whole process, before any thread starts: every later thread inherits it */
        if (pin) pin_self(proc_cores, n_proc_cores);
        else can_pin = 0;
    } else {
        cpu_list(list, sizeof list, proc_cores, n_proc_cores);
        snprintf(proc_note, sizeof proc_note, "%d core%s (%s)%s", n_proc_cores, n_proc_cores == 1 ? "" : "s", list,
                 fake && getenv("LDIST_CPU_CORES") ? ", pretended by LDIST_CPU_CORES" : "");
    }
    if (smt_most > 1) {   /* hardware threads: say how many physical cores they are */
        size_t k = strlen(proc_note);
        snprintf(proc_note + k, sizeof proc_note - k, ", %d physical (SMT: up to %d threads each; shares are whole cores)",
                 n_groups, smt_most);
    }
    if (budget_threads) {
        size_t k = strlen(proc_note);
        snprintf(proc_note + k, sizeof proc_note - k, ", %d thread%s (LDIST_NUM_THREADS)", budget_threads,
                 budget_threads == 1 ? "" : "s");
    }
    pools[0].wanted = budget_threads ? budget_threads : n_proc_cores;
    pools[0].first = 0;
    pools[0].ncores = n_proc_cores;
}
