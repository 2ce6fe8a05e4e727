/*
 * ld_executor.c - logical CPU devices: each has an executor thread that runs
 * the kernels queued to it, in order, while the Lua thread goes on issuing.
 *
 * The backend of a logical device is a proxy of the CPU backend: each kernel
 * call copies its arguments into a task and queues it. A freed block is kept
 * by its device with the queue position of the free (its fence), and goes
 * back to the CPU allocator only after every kernel queued before has run;
 * that makes it safe for the issuing thread to drop a tensor whose kernels
 * are still pending. Until then it may be handed out again, stream-ordered
 * as CUDA's caching allocators do, for the output of a kernel queued to the
 * same device (ld_alloc_stream_ordered): that kernel runs after the old
 * ones. Reads of device memory (to_host, ld_tensor_data) wait for the queue
 * to drain (synchronize).
 *
 * Each executor thread runs the CPU kernels on its device's own pool of
 * threads, pinned to the device's share of the cores (ld_pool.c):
 * replicas on separate cores beat one pool for all, and devices that share
 * no core cannot slow each other down.
 */
#include "ld_device.h"
#include "ld_executor.h"
#include "ld_pool.h"

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct task {
    struct task *next;
    uint64_t seq;             /* its position in the queue (fences) */
    void (*run)(struct task *t, ld_device *d);
    int kind;                 /* LD_SPAN_* for the trace */
    int phase, step;          /* the issuer's phase and step when queued (ld_trace_phase) */
    /* the kernel's arguments, copied; aligned for the pointers and int64_t
       they hold (after `kind` they began at offset 28: UBSan) */
    _Alignas(16) unsigned char args[];
} task;

enum { RECENT_SLOTS = 64 };   /* freed blocks a device keeps (see px_free) */

typedef struct executor {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t work, idle, progress;
    task *head, *tail;
    int busy, stop;
    uint64_t submitted, completed;   /* positions: the last task queued, the last run */
    int fence_waiters;
    uint64_t wait_min;        /* the smallest fence a waiter waits for */
    ld_device *dev;
    /* freed blocks kept for reuse (see px_free), newest last */
    pthread_mutex_t rmu;
    struct recent { void *p; size_t n; uint64_t fence; } recent[RECENT_SLOTS];
    int n_recent;
    size_t recent_bytes;
    /* the first bad input a kernel found (or a kernel that could not be
       queued), until a read reports it */
    int has_kerr;
    ld_status kerr_status;
    char kerr[256];
    uint64_t running;         /* the position of the task being run */
    uint64_t kerr_mute;       /* errors of tasks up to here are not kept: queued before one was reported */
    /* trace */
    int tracing;
    ld_span *spans;
    int n_spans, cap_spans;
} executor;


/* The phase and step of the work this thread does: set by the issuing thread
   (ld_trace_phase), or, on an executor thread, taken from the task it runs. */
static _Thread_local int cur_phase, cur_step;
static _Thread_local double phase_mark;   /* when the issuing thread last switched phase */

static void record_span(executor *e, int kind, double t0, double t1) {
    if (!e->tracing || t1 <= t0) return;
    if (kind == LD_SPAN_COMPUTE && cur_phase) kind = cur_phase;
    int step = cur_step;
    /* merge with the previous span of the same kind when contiguous */
    if (e->n_spans && e->spans[e->n_spans - 1].kind == kind && e->spans[e->n_spans - 1].step == step &&
        t0 - e->spans[e->n_spans - 1].end < 20e-6) {
        e->spans[e->n_spans - 1].end = t1;
        return;
    }
    if (e->n_spans == e->cap_spans) {
        int cap = e->cap_spans ? 2 * e->cap_spans : 1024;
        if (cap > 1 << 20) return;
        ld_span *s = realloc(e->spans, (size_t)cap * sizeof *s);
        if (!s) return;
        e->spans = s;
        e->cap_spans = cap;
    }
    e->spans[e->n_spans++] = (ld_span){kind, step, t0, t1};
}

/* the host device runs kernels inline: its spans are recorded by whoever
   runs work for it (the strategy), into this executor-less record */
static executor host_trace = {.mu = PTHREAD_MUTEX_INITIALIZER, .work = PTHREAD_COND_INITIALIZER,
                              .idle = PTHREAD_COND_INITIALIZER, .progress = PTHREAD_COND_INITIALIZER,
                              .rmu = PTHREAD_MUTEX_INITIALIZER};
static int host_thread_started;

/* d's executor: its own, or the host's (also while the host runs inline:
   spans are recorded into it, and a kernel error it kept is still to be
   reported); NULL for other kinds of device */
static executor *executor_of(ld_device *d) {
    if (ld_device_is_async(d)) return d->impl;
    return d == ld_device_cpu() ? &host_trace : NULL;
}

void ld_executor_record(ld_device *d, int kind, double t0, double t1) {
    executor *e = executor_of(d);
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    record_span(e, kind, t0, t1);
    pthread_mutex_unlock(&e->mu);
}

static _Thread_local int on_executor;   /* this thread runs some device's kernels */

/* d's executor now, read once, or NULL while d runs inline. The issuing
   thread switches the host's on and off (ld_host_async) while executor and
   prefetch threads may be freeing cpu:0 memory or waiting for its fences:
   they must read it once and, finding none, act as on an inline device (its
   queue has drained before the switch). */
static executor *live_executor(const ld_device *d) { return __atomic_load_n((executor *const *)&d->impl, __ATOMIC_ACQUIRE); }

static void task_free(task *t);

static void *executor_main(void *arg) {
    executor *e = arg;
    on_executor = 1;
    ld_cpu_flush_denormals();
    ld_cpu_pool_bind(e->dev->index);   /* its device's pool, on its cores */
    pthread_mutex_lock(&e->mu);
    for (;;) {
        while (!e->head && !e->stop) pthread_cond_wait(&e->work, &e->mu);
        if (!e->head && e->stop) break;
        task *t = e->head;
        e->head = t->next;
        if (!e->head) e->tail = NULL;
        e->busy = 1;
        e->running = t->seq;
        pthread_mutex_unlock(&e->mu);
        int tracing = e->tracing;   /* read once: tracing may be switched on meanwhile */
        cur_phase = t->phase;
        cur_step = t->step;
        ld_cpu_thread_refresh();
        double t0 = tracing ? ld_now() : 0;
        t->run(t, e->dev);
        double t1 = tracing ? ld_now() : 0;
        int kind = t->kind;
        uint64_t seq = t->seq;
        task_free(t);
        pthread_mutex_lock(&e->mu);
        if (kind != LD_SPAN_NONE && tracing) record_span(e, kind, t0, t1);
        e->busy = 0;
        e->completed = seq;
        /* wake fence waiters only when the first of their fences is reached,
           not after every kernel: a futex wake per kernel is costly at the
           rate kernels run */
        if (e->fence_waiters && seq >= e->wait_min) pthread_cond_broadcast(&e->progress);
        if (!e->head) pthread_cond_broadcast(&e->idle);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

/* ---- out of memory while queuing
 * A kernel that cannot be queued does not run: the failure is set for the
 * issuing thread (ld_fail) and kept on the device, so the next read of its
 * memory fails with it, as a CUDA launch error would (the backend's kernel
 * slots return nothing). Work queued with ld_executor_submit owns a context
 * the caller cannot get back, and a collective's parts wait for each other:
 * those tasks fall back on a small reserve (see fn_task_new). */
static int fail_allocs;   /* the test hook: allocations left to fail */
void ld_executor_fail_allocs(int n) { __atomic_store_n(&fail_allocs, n, __ATOMIC_RELAXED); }
__attribute__((cold, noinline)) static int alloc_fails_now(void) {
    return __atomic_sub_fetch(&fail_allocs, 1, __ATOMIC_RELAXED) >= 0;
}
static inline int alloc_fails(void) {
    return __builtin_expect(__atomic_load_n(&fail_allocs, __ATOMIC_RELAXED) != 0, 0) && alloc_fails_now();
}

static void keep_error(executor *e, ld_status st, int always, const char *msg);
__attribute__((cold, noinline)) static void queue_failed(ld_device *d) {
    ld_fail(LD_ENOMEM, "out of memory queuing a kernel on %s", d->name);
    executor *e = live_executor(d);
    if (e) keep_error(e, LD_ENOMEM, 1, ld_error());
}

static task *task_alloc(size_t argsz, void (*run)(task *, ld_device *)) {
    task *t = alloc_fails() ? NULL : malloc(sizeof *t + argsz);
    if (__builtin_expect(!t, 0)) return NULL;
    t->next = NULL;
    t->run = run;
    t->kind = LD_SPAN_COMPUTE;
    t->phase = cur_phase;
    t->step = cur_step;
    return t;
}
/* A kernel's task on d, or NULL with the failure set and kept on d. */
static task *task_new(ld_device *d, size_t argsz, void (*run)(task *, ld_device *)) {
    task *t = task_alloc(argsz, run);
    if (__builtin_expect(!t, 0)) queue_failed(d);
    return t;
}

static void enqueue(executor *e, task *t) {
    pthread_mutex_lock(&e->mu);
    t->seq = ++e->submitted;
    if (e->tail) e->tail->next = t; else e->head = t;
    e->tail = t;
    pthread_cond_signal(&e->work);
    pthread_mutex_unlock(&e->mu);
}
static void submit(ld_device *d, task *t) { enqueue(d->impl, t); }

typedef struct { void (*fn)(void *, ld_device *); void *ctx; } fn_a;
static void run_fn(task *t, ld_device *dev) { fn_a *a = (fn_a *)t->args; a->fn(a->ctx, dev); }
typedef struct { void (*fn)(void *, ld_device *); void *ctx; ld_device *src; uint64_t fence; } after_a;

/* The reserve for tasks of ld_executor_submit(_after) that malloc could not
   make: their callers hand over a context and go on (a collective's parts
   wait for each other), so such a task is better queued late than never. */
enum { RESERVE_SLOTS = 64 };
typedef union { max_align_t align; unsigned char bytes[sizeof(task) + sizeof(after_a)]; } reserve_slot;
static reserve_slot reserve[RESERVE_SLOTS];
static uint64_t reserve_used;   /* a bit per slot (atomic) */

static void task_free(task *t) {
    reserve_slot *r = (reserve_slot *)(void *)t;
    if (__builtin_expect(r < reserve || r >= reserve + RESERVE_SLOTS, 1)) { free(t); return; }
    __atomic_fetch_and(&reserve_used, ~((uint64_t)1 << (r - reserve)), __ATOMIC_RELEASE);
}

static task *fn_task_new(ld_device *d, size_t argsz, void (*run)(task *, ld_device *)) {
    task *t = task_alloc(argsz, run);
    for (int i = 0; !t && i < RESERVE_SLOTS; i++) {
        uint64_t bit = (uint64_t)1 << i;
        if (__atomic_fetch_or(&reserve_used, bit, __ATOMIC_ACQUIRE) & bit) continue;
        t = (task *)(void *)&reserve[i];
        *t = (task){.run = run, .kind = LD_SPAN_COMPUTE, .phase = cur_phase, .step = cur_step};
    }
    if (!t) queue_failed(d);
    return t;
}

void ld_executor_submit(ld_device *d, void (*fn)(void *ctx, ld_device *d), void *ctx, int span_kind) {
    if (!ld_device_is_async(d)) { fn(ctx, d); return; }   /* the host device runs it now */
    task *t = fn_task_new(d, sizeof(fn_a), run_fn);
    if (!t) return;   /* even the reserve is taken: the failure is kept on d */
    ((fn_a *)t->args)->fn = fn;
    ((fn_a *)t->args)->ctx = ctx;
    t->kind = span_kind;
    submit(d, t);
}

static void exec_sync(ld_device *d) {
    executor *e = live_executor(d);
    if (!e) return;   /* inline now: nothing queued */
    pthread_mutex_lock(&e->mu);
    while (e->head || e->busy) pthread_cond_wait(&e->idle, &e->mu);
    pthread_mutex_unlock(&e->mu);
}

uint64_t ld_device_fence(ld_device *d) {
    if (!ld_device_is_async(d)) return 0;
    executor *e = d->impl;
    pthread_mutex_lock(&e->mu);
    uint64_t f = e->submitted;
    pthread_mutex_unlock(&e->mu);
    return f;
}

void ld_device_wait_fence(ld_device *d, uint64_t f) {
    if (!f) return;
    if (!ld_device_is_async(d)) { ld_device_synchronize(d); return; }
    executor *e = live_executor(d);
    if (!e) return;   /* the host went inline after draining: the fence has passed */
    pthread_mutex_lock(&e->mu);
    while (e->completed < f) {
        if (!e->fence_waiters++ || f < e->wait_min) e->wait_min = f;
        pthread_cond_wait(&e->progress, &e->mu);
        e->fence_waiters--;   /* every waiter is woken at once and registers again */
    }
    pthread_mutex_unlock(&e->mu);
}

static void run_after(task *t, ld_device *dev) {
    after_a *a = (after_a *)t->args;
    executor *e = dev->impl;
    int tracing = e->tracing;
    double t0 = tracing ? ld_now() : 0;
    ld_device_wait_fence(a->src, a->fence);
    double t1 = tracing ? ld_now() : 0;
    a->fn(a->ctx, dev);
    if (tracing) {
        if (t1 - t0 > 5e-6) ld_executor_record(dev, LD_SPAN_WAIT, t0, t1);
        ld_executor_record(dev, LD_SPAN_COMPUTE, t1, ld_now());
    }
}

void ld_executor_submit_after(ld_device *d, ld_device *src, uint64_t fence, void (*fn)(void *ctx, ld_device *d),
                              void *ctx) {
    if (!ld_device_is_async(d) || d == src) {
        if (d != src) ld_device_wait_fence(src, fence);
        ld_executor_submit(d, fn, ctx, LD_SPAN_COMPUTE);
        return;
    }
    task *t = fn_task_new(d, sizeof(after_a), run_after);
    if (!t) return;
    t->kind = LD_SPAN_NONE;   /* run_after records its wait and its work itself */
    *(after_a *)t->args = (after_a){fn, ctx, src, fence};
    submit(d, t);
}

int ld_device_is_async(const ld_device *d) { return d->kind == LD_DEV_CPU && live_executor(d) != NULL; }
void ld_device_synchronize(ld_device *d) {
    if (ld_device_is_async(d)) { exec_sync(d); return; }
    const ld_backend *be = __atomic_load_n(&d->backend, __ATOMIC_ACQUIRE);   /* cpu:0's is switched (ld_host_async) */
    if (be->synchronize) be->synchronize(d);
}

/* ================================================================ the proxy backend
 * One wrapper per kernel: a struct of its arguments (arrays copied) and a
 * run function calling the CPU kernel. */
#define CPU ld_cpu_backend()

/* ---- memory: stream-ordered reuse of freed blocks
 * Blocks freed by the issuing thread are often still read by queued kernels.
 * Handing such a block to the CPU allocator only when its free comes up in
 * the queue means the next step's tensors get other blocks, long out of
 * this core's cache; reusing them at once for kernel outputs keeps the
 * step's working set in cache, as CUDA's caching allocators do. A block
 * whose fence has passed may go to anyone; one whose old kernels are
 * still queued only to a caller on the issuing thread that has said its
 * block is written by a kernel queued to this device
 * (ld_alloc_stream_ordered), never to code that writes it from the host. */
#define RECENT_MIN 4096
#define RECENT_BYTES ((size_t)64 << 20)   /* per device; a block over a quarter of it is not kept */
static _Thread_local int stream_ordered;
static size_t pages(size_t n) { return (n + RECENT_MIN - 1) / RECENT_MIN; }   /* the CPU allocator's size classes */
int ld_alloc_stream_ordered(int on) { int was = stream_ordered; stream_ordered = on; return was; }

typedef struct { void *p; size_t n; } free_a;
static void run_free(task *t, ld_device *d) { free_a *a = (free_a *)t->args; CPU->free(d, a->p, a->n); }
static void queue_free(executor *e, void *p, size_t n) {
    task *t = task_alloc(sizeof(free_a), run_free);
    if (!t) {
        /* out of memory: the issuing thread can wait for the kernels that may
           still read the block; an executor thread must not wait for another
           queue (the two could wait for each other), so there it is lost */
        if (!on_executor) { exec_sync(e->dev); CPU->free(e->dev, p, n); }
        return;
    }
    t->kind = LD_SPAN_NONE;
    *(free_a *)t->args = (free_a){p, n};
    enqueue(e, t);
}

/* The kept blocks go back to the CPU allocator (the queue has drained). */
static void recent_flush(executor *e, ld_device *d) {
    pthread_mutex_lock(&e->rmu);
    for (int i = 0; i < e->n_recent; i++) CPU->free(d, e->recent[i].p, e->recent[i].n);
    e->n_recent = 0;
    e->recent_bytes = 0;
    pthread_mutex_unlock(&e->rmu);
}

static int kerr_any;   /* some executor keeps an error (atomic) */

/* Keep msg as e's error until a read reports it; the first one wins. One
   error per report: bad input found by work queued before the last report
   (the rest of a failed fit) would only repeat it in the user's next
   command, so it is dropped unless `always`. */
static void keep_error(executor *e, ld_status st, int always, const char *msg) {
    pthread_mutex_lock(&e->mu);
    if (!e->has_kerr && (always || e->running > e->kerr_mute)) {
        snprintf(e->kerr, sizeof e->kerr, "%s", msg);
        e->kerr_status = st;
        e->has_kerr = 1;
        __atomic_store_n(&kerr_any, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&e->mu);
}

void ld_executor_kernel_error(ld_device *d, const char *fmt, ...) {
    executor *e = d->impl;
    if (!e) return;
    char msg[sizeof e->kerr];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    keep_error(e, LD_EARG, 0, msg);
}

void ld_device_fault(ld_device *d, ld_status st, const char *fmt, ...) {
    char msg[sizeof host_trace.kerr];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ld_fail(st, "%s", msg);
    executor *e = d ? executor_of(d) : NULL;
    if (e) keep_error(e, st, 1, msg);
}

int ld_device_take_error(ld_device *d) {
    if (!__atomic_load_n(&kerr_any, __ATOMIC_ACQUIRE)) return LD_OK;
    /* The error of any device: a value read here may have come from another
       device by a copy (a replica's loss reduced on the host). d's first. */
    char msg[sizeof host_trace.kerr] = "";
    ld_status st = LD_EARG;
    for (int i = -1; i < ld_device_count() && !msg[0]; i++) {
        executor *e = executor_of(i < 0 ? d : ld_device_at(i));
        if (!e) continue;
        pthread_mutex_lock(&e->mu);
        if (e->has_kerr) { memcpy(msg, e->kerr, sizeof msg); st = e->kerr_status; }
        pthread_mutex_unlock(&e->mu);
    }
    if (!msg[0]) return LD_OK;
    /* the other replicas of the failed step most likely found the same bad
       batch: what every device queued so far is muted, not only this one */
    __atomic_store_n(&kerr_any, 0, __ATOMIC_RELEASE);
    for (int i = 0; i < ld_device_count(); i++) {
        executor *e = executor_of(ld_device_at(i));
        if (!e) continue;
        pthread_mutex_lock(&e->mu);
        e->has_kerr = 0;
        e->kerr_mute = e->submitted;
        pthread_mutex_unlock(&e->mu);
    }
    return ld_fail(st, "%s", msg);
}

static void *px_alloc(ld_device *d, size_t n) {
    executor *e = live_executor(d);   /* the prefetch thread allocates host batches */
    if (!e) return CPU->alloc(d, n);
    if (n >= RECENT_MIN) {
        pthread_mutex_lock(&e->mu);
        uint64_t done = e->completed;
        pthread_mutex_unlock(&e->mu);
        /* a block with kernels still queued: only for an output of a kernel queued here */
        int queued_ok = stream_ordered && !on_executor;
        pthread_mutex_lock(&e->rmu);
        for (int i = e->n_recent - 1; i >= 0; i--) {
            struct recent *b = &e->recent[i];
            if (pages(b->n) != pages(n) || (b->fence > done && !queued_ok)) continue;
            void *p = b->p;
            e->recent_bytes -= b->n;
            memmove(b, b + 1, sizeof *b * (size_t)(e->n_recent - i - 1));
            e->n_recent--;
            pthread_mutex_unlock(&e->rmu);
            return p;
        }
        pthread_mutex_unlock(&e->rmu);
    }
    void *p = CPU->alloc(d, n);
    if (!p && e->n_recent) {   /* out of memory: give the kept blocks back and try again */
        exec_sync(d);
        ld_clear_error();
        recent_flush(e, d);
        p = CPU->alloc(d, n);
    }
    return p;
}

static void px_free(ld_device *d, void *p, size_t n) {
    executor *e = live_executor(d);   /* often on an executor thread (ld_to_device's copy releases its source there) */
    if (!e) { CPU->free(d, p, n); return; }
    if (n < RECENT_MIN || n > RECENT_BYTES / 4) { queue_free(e, p, n); return; }
    pthread_mutex_lock(&e->mu);
    uint64_t fence = e->submitted;   /* the kernels that may still use it */
    pthread_mutex_unlock(&e->mu);
    pthread_mutex_lock(&e->rmu);
    /* keep it; the oldest blocks go to the allocator, through the queue */
    struct recent old[RECENT_SLOTS];
    int n_old = 0;
    while (e->n_recent && (e->n_recent == RECENT_SLOTS || e->recent_bytes + n > RECENT_BYTES)) {
        old[n_old++] = e->recent[0];
        e->recent_bytes -= e->recent[0].n;
        memmove(e->recent, e->recent + 1, sizeof *e->recent * (size_t)--e->n_recent);
    }
    e->recent[e->n_recent++] = (struct recent){p, n, fence};
    e->recent_bytes += n;
    pthread_mutex_unlock(&e->rmu);
    for (int i = 0; i < n_old; i++) queue_free(e, old[i].p, old[i].n);
}

static int px_to_host(ld_device *d, void *host, const void *src, size_t n) { exec_sync(d); memcpy(host, src, n); return 0; }
/* a fresh allocation: no queued kernel can touch it yet */
static int px_from_host(ld_device *d, void *dst, const void *host, size_t n) { memcpy(dst, host, n); return 0; }

/* ---- the kernels: one proxy per kernel of the list (ld_kernels.h)
 * For kernel <name>: <name>_a holds its arguments (arrays copied whole),
 * run_<name> calls the CPU kernel with them on the executor, px_<name>
 * copies them into a task and queues it. */
/* Calls per kernel slot, counted as they are queued: the op suite, run on a
 * logical device, fails on any kernel of the list it never called (as ggml's
 * test-backend-ops --show-coverage), so a new kernel comes with its test. */
static uint64_t px_calls[LD_KERNEL_COUNT];
#define PX_NAME(name, ...) #name,
static const char *const px_names[LD_KERNEL_COUNT] = {LD_KERNELS(PX_NAME)};
int ld_kernel_count(void) { return LD_KERNEL_COUNT; }
const char *ld_kernel_name(int k) { return k >= 0 && k < LD_KERNEL_COUNT ? px_names[k] : NULL; }
uint64_t ld_kernel_calls(int k) {
    return k >= 0 && k < LD_KERNEL_COUNT ? __atomic_load_n(&px_calls[k], __ATOMIC_RELAXED) : 0;
}

/* ---- the kernel profile (LDIST_KERNEL_PROFILE=1)
 * Time per kernel slot, printed at exit sorted by total time: where a run's
 * time goes, kernel by kernel. A queued kernel is timed where it runs (the
 * executor thread, run_<name>); a device that runs kernels at the call (cpu:0
 * inline, a GPU) gets a wrapping backend (pf_<name>) that times the call
 * and, on a GPU, the device's synchronize after it, so the time is the
 * kernel's and not its launch's. That serializes host and GPU: a profiled
 * run is slower than a plain one, the shares are what counts. Off (the
 * default), nothing is wrapped and run_<name> tests one flag set before any
 * thread starts. */
static int prof_on;                          /* set once, at load (prof_init) */
/* by the kind of device (CPU devices, GPUs: a GPU run's host-side kernels
   apart from the GPU's), then by slot */
static uint64_t prof_ns[2][LD_KERNEL_COUNT], prof_calls[2][LD_KERNEL_COUNT];
static void prof_add(const ld_device *d, int k, double t0) {
    int g = d->kind != LD_DEV_CPU;
    __atomic_add_fetch(&prof_ns[g][k], (uint64_t)((ld_now() - t0) * 1e9), __ATOMIC_RELAXED);
    __atomic_add_fetch(&prof_calls[g][k], 1, __ATOMIC_RELAXED);
}

#define PX_KERNEL(name, ...)                                                        \
    typedef struct { LD_K_FIELDS(__VA_ARGS__) } name##_a;                           \
    static void run_##name(task *tk_, ld_device *d) {                                 \
        name##_a *k_ = (name##_a *)tk_->args;                                         \
        double t0_ = prof_on ? ld_now() : 0;                                          \
        CPU->name(d, LD_K_LOAD(__VA_ARGS__));                                       \
        if (prof_on) prof_add(d, LD_KERNEL_##name, t0_);                                 \
    }                                                                               \
    static void px_##name(ld_device *d, LD_K_PARAMS(__VA_ARGS__)) {                 \
        __atomic_add_fetch(&px_calls[LD_KERNEL_##name], 1, __ATOMIC_RELAXED);        \
        task *tk_ = task_new(d, sizeof(name##_a), run_##name);                        \
        if (!tk_) return;                                                             \
        name##_a *k_ = (name##_a *)tk_->args;                                         \
        LD_K_STORE(__VA_ARGS__)                                                     \
        submit(d, tk_);                                                               \
    }
LD_KERNELS(PX_KERNEL)

#define PX_SLOT(name, ...) .name = px_##name,
static const ld_backend proxy_backend = {
    .name = "cpu-executor",
    .alloc = px_alloc, .free = px_free, .to_host = px_to_host, .from_host = px_from_host,
    .synchronize = exec_sync,
    LD_KERNELS(PX_SLOT)
};

/* ---- cpu:0's kernels at the call, on the front end's thread: each with
   denormals flushed, as the executors' and pools' threads run (ld_device.h) */
#define FZ_KERNEL(name, ...)                                                        \
    static void fz_##name(ld_device *d, LD_K_PARAMS(__VA_ARGS__)) {                 \
        unsigned fp_ = ld_cpu_fp_enter();                                             \
        CPU->name(d, LD_K_NAMES(__VA_ARGS__));                                      \
        ld_cpu_fp_leave(fp_);                                                         \
    }
LD_KERNELS(FZ_KERNEL)
static void *fz_alloc(ld_device *d, size_t n) { return CPU->alloc(d, n); }
static void fz_free(ld_device *d, void *p, size_t n) { CPU->free(d, p, n); }
static int fz_to_host(ld_device *d, void *h, const void *s, size_t n) { return CPU->to_host(d, h, s, n); }
static int fz_from_host(ld_device *d, void *s, const void *h, size_t n) { return CPU->from_host(d, s, h, n); }
static void fz_synchronize(ld_device *d) { CPU->synchronize(d); }
#define FZ_SLOT(name, ...) .name = fz_##name,
static const ld_backend flush_backend = {
    .name = "cpu",
    .alloc = fz_alloc, .free = fz_free, .to_host = fz_to_host, .from_host = fz_from_host,
    .synchronize = fz_synchronize,
    LD_KERNELS(FZ_SLOT)
};
static int flush_on;   /* set once, at load (prof_init) */
static const ld_backend *host_cpu(void) { return flush_on ? &flush_backend : ld_cpu_backend(); }

/* ---- the profile's wrapping backend, for devices that run kernels at the call */
static const ld_backend *prof_gpu[LD_MAX_LOGICAL];   /* a GPU's own backend, by index */
static const ld_backend *prof_inner(ld_device *d) {
    return d->kind == LD_DEV_CPU ? host_cpu() : prof_gpu[d->index];
}
#define PF_KERNEL(name, ...)                                                        \
    static void pf_##name(ld_device *d, LD_K_PARAMS(__VA_ARGS__)) {                 \
        const ld_backend *in_ = prof_inner(d);                                        \
        double t0_ = ld_now();                                                        \
        in_->name(d, LD_K_NAMES(__VA_ARGS__));                                      \
        if (d->kind != LD_DEV_CPU) in_->synchronize(d);                               \
        prof_add(d, LD_KERNEL_##name, t0_);                                              \
    }
LD_KERNELS(PF_KERNEL)
static void *pf_alloc(ld_device *d, size_t n) { return prof_inner(d)->alloc(d, n); }
static void pf_free(ld_device *d, void *p, size_t n) { prof_inner(d)->free(d, p, n); }
static int pf_to_host(ld_device *d, void *h, const void *s, size_t n) { return prof_inner(d)->to_host(d, h, s, n); }
static int pf_from_host(ld_device *d, void *s, const void *h, size_t n) { return prof_inner(d)->from_host(d, s, h, n); }
static void pf_synchronize(ld_device *d) { prof_inner(d)->synchronize(d); }
static void *pf_read_begin(ld_device *d, const void *s, size_t n) {
    const ld_backend *in = prof_inner(d);
    return in->read_begin ? in->read_begin(d, s, n) : NULL;
}
static int pf_read_end(ld_device *d, void *h, void *host, size_t n, int report) {
    return prof_inner(d)->read_end(d, h, host, n, report);
}
#define PF_SLOT(name, ...) .name = pf_##name,
static const ld_backend prof_backend = {
    .name = "profiled",
    .alloc = pf_alloc, .free = pf_free, .to_host = pf_to_host, .from_host = pf_from_host,
    .synchronize = pf_synchronize, .read_begin = pf_read_begin, .read_end = pf_read_end,
    LD_KERNELS(PF_SLOT)
};

/* cpu:0's backend while it runs inline */
static const ld_backend *host_inline_backend(void) { return prof_on ? &prof_backend : host_cpu(); }

void ld_kernel_profile_attach(ld_device *d) {
    if (!prof_on || d->kind == LD_DEV_CPU || d->index < 0 || d->index >= LD_MAX_LOGICAL) return;
    prof_gpu[d->index] = d->backend;
    d->backend = &prof_backend;
}

int ld_kernel_profile_on(void) { return prof_on; }

static const uint64_t *sort_ns;   /* qsort's key (the print runs once, at exit) */
static int by_time(const void *x, const void *y) {
    int i = *(const int *)x, j = *(const int *)y;
    return sort_ns[i] < sort_ns[j] ? 1 : sort_ns[i] > sort_ns[j] ? -1 : i - j;
}

void ld_kernel_profile_print(FILE *f) {
    static const char *const kinds[2] = {"CPU devices", "GPUs (synchronized after each kernel)"};
    for (int g = 0; g < 2; g++) {
        uint64_t ns[LD_KERNEL_COUNT], calls[LD_KERNEL_COUNT];
        int order[LD_KERNEL_COUNT], n = 0;
        double total = 0;
        for (int k = 0; k < LD_KERNEL_COUNT; k++) {
            ns[k] = __atomic_load_n(&prof_ns[g][k], __ATOMIC_RELAXED);
            calls[k] = __atomic_load_n(&prof_calls[g][k], __ATOMIC_RELAXED);
            if (calls[k]) { order[n++] = k; total += (double)ns[k]; }
        }
        if (!n) continue;
        sort_ns = ns;
        qsort(order, (size_t)n, sizeof *order, by_time);
        fprintf(f, "kernel profile, %s (LDIST_KERNEL_PROFILE):\n", kinds[g]);
        fprintf(f, "  %-26s %10s %12s %7s\n", "kernel", "calls", "total ms", "share");
        for (int i = 0; i < n; i++) {
            int k = order[i];
            fprintf(f, "  %-26s %10llu %12.3f %6.1f%%\n", px_names[k], (unsigned long long)calls[k],
                    (double)ns[k] * 1e-6, total > 0 ? 100.0 * (double)ns[k] / total : 0.0);
        }
        fprintf(f, "  %-26s %10s %12.3f %6.1f%%\n", "all kernels", "", total * 1e-6, 100.0);
    }
}

static void prof_print_at_exit(void) { ld_kernel_profile_print(stderr); }

/* Read LDIST_KERNEL_PROFILE and LDIST_DENORMALS once, before any thread or
   device exists: cpu:0's backend at the call. */
__attribute__((constructor)) static void prof_init(void) {
    flush_on = ld_cpu_flush_wanted();
    if (flush_on) ld_device_cpu()->backend = &flush_backend;
    const char *s = getenv("LDIST_KERNEL_PROFILE");
    if (!s || !*s || !strcmp(s, "0")) return;
    prof_on = 1;
    ld_device_cpu()->backend = &prof_backend;
    atexit(prof_print_at_exit);
}

/* ================================================================ configuration */
static ld_device *logical[LD_MAX_LOGICAL];
static int n_logical = 1;   /* cpu:0 is the host device itself */

int ld_cpu_devices(int n) {
    if (n < 1 || n > LD_MAX_LOGICAL)
        return ld_fail(LD_EARG, "number of CPU devices must be in 1..%d, got %d", LD_MAX_LOGICAL, n);
    if (n < n_logical)
        return ld_fail(LD_EARG, "%d CPU devices are already configured; the count can only grow", n_logical);
    for (int i = n_logical; i < n; i++) {
        ld_device *d = calloc(1, sizeof *d);
        executor *e = calloc(1, sizeof *e);
        if (!d || !e) { free(d); free(e); return ld_fail(LD_ENOMEM, "out of memory"); }
        d->kind = LD_DEV_CPU;
        d->index = i;
        snprintf(d->name, sizeof d->name, "cpu:%d", i);
        d->backend = &proxy_backend;
        d->impl = e;
        e->dev = d;
        pthread_mutex_init(&e->mu, NULL);
        pthread_mutex_init(&e->rmu, NULL);
        pthread_cond_init(&e->work, NULL);
        pthread_cond_init(&e->idle, NULL);
        pthread_cond_init(&e->progress, NULL);
        if (pthread_create(&e->thread, NULL, executor_main, e) != 0) {
            free(d); free(e);
            return ld_fail(LD_EDEVICE, "cannot start the executor thread of cpu:%d", i);
        }
        if (ld_device_register(d)) return ld_error_status();
        logical[i] = d;
        n_logical = i + 1;
    }
    /* each device, the host included, gets its share of the cores */
    if (ld_cpu_split(n_logical)) return ld_error_status();
    for (int i = 0; i < n_logical; i++) if (logical[i]) logical[i]->threads = ld_cpu_device_threads(i);
    return LD_OK;
}

int ld_cpu_device_count(void) { return n_logical; }

/* While a synchronous strategy issues a step, the host device cpu:0 queues
   its kernels to an executor thread of its own like the other devices, so
   the Lua thread only issues and replica 0 computes in parallel with the
   rest; afterwards it runs inline again (after draining the queue). Only
   the issuing thread switches modes. */
int ld_host_async(int on) {
    ld_device *h = ld_device_cpu();
    if (on) {
        if (h->impl) return LD_OK;
        if (!host_thread_started) {
            host_trace.dev = h;
            if (pthread_create(&host_trace.thread, NULL, executor_main, &host_trace) != 0)
                return ld_fail(LD_EDEVICE, "cannot start the executor thread of cpu:0");
            host_thread_started = 1;
        }
        __atomic_store_n(&h->impl, (void *)&host_trace, __ATOMIC_RELEASE);
        __atomic_store_n(&h->backend, &proxy_backend, __ATOMIC_RELEASE);
    } else if (h->impl) {
        exec_sync(h);
        recent_flush(h->impl, h);
        __atomic_store_n(&h->backend, host_inline_backend(), __ATOMIC_RELEASE);
        __atomic_store_n(&h->impl, NULL, __ATOMIC_RELEASE);
    }
    return LD_OK;
}

int ld_trace_phase(int kind) {
    int was = cur_phase;
    if (kind != LD_SPAN_COMPUTE && (kind < LD_SPAN_INPUT || kind >= LD_SPAN_KINDS)) kind = LD_SPAN_NONE;
    double now = ld_now();
    ld_device *h = ld_device_cpu();
    /* cpu:0 inline: this thread ran the phase's kernels itself */
    if (was && kind != was && h && !ld_device_is_async(h)) ld_executor_record(h, was, phase_mark, now);   /* kept if traced */
    cur_phase = kind;
    phase_mark = now;
    return was;
}
int ld_trace_step(int step) {
    int was = cur_step;
    cur_step = step > 0 ? step : 0;
    return was;
}

void ld_trace_enable(ld_device *d, int on) {
    executor *e = executor_of(d);
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    e->tracing = on;
    if (on) e->n_spans = 0;
    pthread_mutex_unlock(&e->mu);
}

int ld_trace_take(ld_device *d, ld_span **spans) {
    *spans = NULL;
    executor *e = executor_of(d);
    if (!e) return 0;
    if (ld_device_is_async(d)) exec_sync(d);
    pthread_mutex_lock(&e->mu);
    int n = e->n_spans;
    if (n) {
        *spans = malloc(sizeof **spans * (size_t)n);
        if (*spans) memcpy(*spans, e->spans, sizeof **spans * (size_t)n);
        else n = 0;
    }
    e->n_spans = 0;
    pthread_mutex_unlock(&e->mu);
    return n;
}
