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
 * Executor threads run the CPU kernels single-threaded: the cores are shared
 * out among devices (DESIGN.md: replicas on separate cores beat intra-op
 * threading).
 */
#include "ld_device.h"
#include "ld_executor.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct task {
    struct task *next;
    uint64_t seq;             /* its position in the queue (fences) */
    void (*run)(struct task *t, ld_device *d);
    int kind;                 /* LD_SPAN_* for the trace */
    unsigned char args[];     /* the kernel's arguments, copied */
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
    /* the first bad input a kernel found, until a read reports it */
    int has_kerr;
    char kerr[256];
    uint64_t running;         /* the position of the task being run */
    uint64_t kerr_mute;       /* errors of tasks up to here are not kept: queued before one was reported */
    /* trace */
    int tracing;
    ld_span *spans;
    int n_spans, cap_spans;
} executor;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}
double ld_now(void) { return now_s(); }

static void record_span(executor *e, int kind, double t0, double t1) {
    if (!e->tracing || t1 <= t0) return;
    /* merge with the previous span of the same kind when contiguous */
    if (e->n_spans && e->spans[e->n_spans - 1].kind == kind && t0 - e->spans[e->n_spans - 1].end < 20e-6) {
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
    e->spans[e->n_spans++] = (ld_span){kind, t0, t1};
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

static void *executor_main(void *arg) {
    executor *e = arg;
    on_executor = 1;
    ld_cpu_thread_serial(1);
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
        double t0 = tracing ? now_s() : 0;
        t->run(t, e->dev);
        double t1 = tracing ? now_s() : 0;
        int kind = t->kind;
        uint64_t seq = t->seq;
        free(t);
        pthread_mutex_lock(&e->mu);
        if (kind != LD_SPAN_NONE && tracing) record_span(e, kind, t0, t1);
        e->busy = 0;
        e->completed = seq;
        /* wake fence waiters only when the first of their fences is reached
           (a futex wake per kernel cost ~4% of a replica's time) */
        if (e->fence_waiters && seq >= e->wait_min) pthread_cond_broadcast(&e->progress);
        if (!e->head) pthread_cond_broadcast(&e->idle);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

static task *task_new(size_t argsz, void (*run)(task *, ld_device *)) {
    task *t = malloc(sizeof *t + argsz);
    if (!t) { fprintf(stderr, "ldist: out of memory queuing a kernel\n"); abort(); }
    t->next = NULL;
    t->run = run;
    t->kind = LD_SPAN_COMPUTE;
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

void ld_executor_submit(ld_device *d, void (*fn)(void *ctx, ld_device *d), void *ctx, int span_kind) {
    if (!ld_device_is_async(d)) { fn(ctx, d); return; }   /* the host device runs it now */
    task *t = task_new(sizeof(fn_a), run_fn);
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

typedef struct { void (*fn)(void *, ld_device *); void *ctx; ld_device *src; uint64_t fence; } after_a;
static void run_after(task *t, ld_device *dev) {
    after_a *a = (after_a *)t->args;
    executor *e = dev->impl;
    int tracing = e->tracing;
    double t0 = tracing ? now_s() : 0;
    ld_device_wait_fence(a->src, a->fence);
    double t1 = tracing ? now_s() : 0;
    a->fn(a->ctx, dev);
    if (tracing) {
        if (t1 - t0 > 5e-6) ld_executor_record(dev, LD_SPAN_WAIT, t0, t1);
        ld_executor_record(dev, LD_SPAN_COMPUTE, t1, now_s());
    }
}

void ld_executor_submit_after(ld_device *d, ld_device *src, uint64_t fence, void (*fn)(void *ctx, ld_device *d),
                              void *ctx) {
    if (!ld_device_is_async(d) || d == src) {
        if (d != src) ld_device_wait_fence(src, fence);
        ld_executor_submit(d, fn, ctx, LD_SPAN_COMPUTE);
        return;
    }
    task *t = task_new(sizeof(after_a), run_after);
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
 * this core's cache: measured on mirrored_bench (2 replicas, 5 alternating
 * runs), reusing them at once for kernel outputs gave +3.4% samples/s. A
 * block whose fence has passed may go to anyone; one whose old kernels are
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
    task *t = task_new(sizeof(free_a), run_free);
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

void ld_executor_kernel_error(ld_device *d, const char *fmt, ...) {
    executor *e = d->impl;
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    /* one error per report: work queued before the last report (the rest of
       a failed fit) would only repeat it in the user's next command */
    if (!e->has_kerr && e->running > e->kerr_mute) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->kerr, sizeof e->kerr, fmt, ap);
        va_end(ap);
        e->has_kerr = 1;
        __atomic_store_n(&kerr_any, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&e->mu);
}

int ld_device_take_error(ld_device *d) {
    if (!__atomic_load_n(&kerr_any, __ATOMIC_ACQUIRE)) return LD_OK;
    /* The error of any device: a value read here may have come from another
       device by a copy (a replica's loss reduced on the host). d's first. */
    char msg[sizeof host_trace.kerr] = "";
    for (int i = -1; i < ld_device_count() && !msg[0]; i++) {
        executor *e = executor_of(i < 0 ? d : ld_device_at(i));
        if (!e) continue;
        pthread_mutex_lock(&e->mu);
        if (e->has_kerr) memcpy(msg, e->kerr, sizeof msg);
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
    return ld_fail(LD_EARG, "%s", msg);
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
    executor *e = live_executor(d);   /* often on another device's executor (ld_to_device's copy) */
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

typedef struct { void *dst; ld_dtype ddt; const void *src; ld_dtype sdt; int ndim; int64_t shape[LD_MAX_DIMS], ss[LD_MAX_DIMS]; } copy_a;
static void run_copy(task *t, ld_device *d) { copy_a *a = (copy_a *)t->args; CPU->copy_strided(d, a->dst, a->ddt, a->src, a->sdt, a->ndim, a->shape, a->ss); }
static void px_copy_strided(ld_device *d, void *dst, ld_dtype ddt, const void *src, ld_dtype sdt, int ndim,
                            const int64_t *shape, const int64_t *ss) {
    task *t = task_new(sizeof(copy_a), run_copy);
    copy_a *a = (copy_a *)t->args;
    a->dst = dst; a->ddt = ddt; a->src = src; a->sdt = sdt; a->ndim = ndim;
    memcpy(a->shape, shape, sizeof(int64_t) * (size_t)ndim);
    memcpy(a->ss, ss, sizeof(int64_t) * (size_t)ndim);
    submit(d, t);
}

typedef struct { void *dst; ld_dtype dt; int64_t n; double v; } fill_a;
static void run_fill(task *t, ld_device *d) { fill_a *a = (fill_a *)t->args; CPU->fill(d, a->dst, a->dt, a->n, a->v); }
static void px_fill(ld_device *d, void *dst, ld_dtype dt, int64_t n, double v) {
    task *t = task_new(sizeof(fill_a), run_fill);
    *(fill_a *)t->args = (fill_a){dst, dt, n, v};
    submit(d, t);
}

typedef struct { ld_binary_op op; float *out; const float *a, *b; int ndim; int64_t sa[LD_MAX_DIMS], sb[LD_MAX_DIMS], shape[LD_MAX_DIMS]; } bin_a;
static void run_bin(task *t, ld_device *d) { bin_a *a = (bin_a *)t->args; CPU->binary(d, a->op, a->out, a->a, a->sa, a->b, a->sb, a->ndim, a->shape); }
static void px_binary(ld_device *d, ld_binary_op op, float *out, const float *x, const int64_t *sa, const float *y,
                      const int64_t *sb, int ndim, const int64_t *shape) {
    task *t = task_new(sizeof(bin_a), run_bin);
    bin_a *a = (bin_a *)t->args;
    a->op = op; a->out = out; a->a = x; a->b = y; a->ndim = ndim;
    memcpy(a->sa, sa, sizeof(int64_t) * (size_t)ndim);
    memcpy(a->sb, sb, sizeof(int64_t) * (size_t)ndim);
    memcpy(a->shape, shape, sizeof(int64_t) * (size_t)ndim);
    submit(d, t);
}

typedef struct { ld_unary_op op; float *y; const float *x, *dy, *yv; int64_t n; } un_a;
static void run_un(task *t, ld_device *d) { un_a *a = (un_a *)t->args; CPU->unary(d, a->op, a->y, a->x, a->n); }
static void run_unb(task *t, ld_device *d) { un_a *a = (un_a *)t->args; CPU->unary_backward(d, a->op, a->y, a->dy, a->x, a->yv, a->n); }
static void px_unary(ld_device *d, ld_unary_op op, float *y, const float *x, int64_t n) {
    task *t = task_new(sizeof(un_a), run_un);
    *(un_a *)t->args = (un_a){op, y, x, NULL, NULL, n};
    submit(d, t);
}
static void px_unary_backward(ld_device *d, ld_unary_op op, float *dx, const float *dy, const float *x,
                              const float *y, int64_t n) {
    task *t = task_new(sizeof(un_a), run_unb);
    *(un_a *)t->args = (un_a){op, dx, x, dy, y, n};
    submit(d, t);
}

typedef struct { float *y; float a; const float *x; int64_t n; } sa_a;
static void run_sa(task *t, ld_device *d) { sa_a *a = (sa_a *)t->args; CPU->scale_add(d, a->y, a->a, a->x, a->n); }
static void px_scale_add(ld_device *d, float *y, float s, const float *x, int64_t n) {
    task *t = task_new(sizeof(sa_a), run_sa);
    *(sa_a *)t->args = (sa_a){y, s, x, n};
    submit(d, t);
}

typedef struct { ld_reduce_op op; void *out; const float *x; int64_t outer, n, inner; } red_a;
static void run_red(task *t, ld_device *d) { red_a *a = (red_a *)t->args; CPU->reduce(d, a->op, a->out, a->x, a->outer, a->n, a->inner); }
static void px_reduce(ld_device *d, ld_reduce_op op, void *out, const float *x, int64_t outer, int64_t n, int64_t inner) {
    task *t = task_new(sizeof(red_a), run_red);
    *(red_a *)t->args = (red_a){op, out, x, outer, n, inner};
    submit(d, t);
}

typedef struct { int ta, tb; int64_t m, n, k; float alpha; const float *a; int64_t lda; const float *b; int64_t ldb; float beta; float *c; int64_t ldc; } gemm_a;
static void run_gemm(task *t, ld_device *d) {
    gemm_a *a = (gemm_a *)t->args;
    CPU->gemm(d, a->ta, a->tb, a->m, a->n, a->k, a->alpha, a->a, a->lda, a->b, a->ldb, a->beta, a->c, a->ldc);
}
static void px_gemm(ld_device *d, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *x,
                    int64_t lda, const float *y, int64_t ldb, float beta, float *c, int64_t ldc) {
    task *t = task_new(sizeof(gemm_a), run_gemm);
    *(gemm_a *)t->args = (gemm_a){ta, tb, m, n, k, alpha, x, lda, y, ldb, beta, c, ldc};
    submit(d, t);
}

typedef struct { float *out; const float *x; int64_t rows, cols; int lg; } sm_a;
static void run_sm(task *t, ld_device *d) { sm_a *a = (sm_a *)t->args; CPU->softmax(d, a->out, a->x, a->rows, a->cols, a->lg); }
static void px_softmax(ld_device *d, float *out, const float *x, int64_t rows, int64_t cols, int lg) {
    task *t = task_new(sizeof(sm_a), run_sm);
    *(sm_a *)t->args = (sm_a){out, x, rows, cols, lg};
    submit(d, t);
}

typedef struct { float *col; const float *x; int64_t n, h, w, c, kh, kw, sh, sw, ph, pw, oh, ow; } i2c_a;
static void run_i2c(task *t, ld_device *d) { i2c_a *a = (i2c_a *)t->args; CPU->im2col(d, a->col, a->x, a->n, a->h, a->w, a->c, a->kh, a->kw, a->sh, a->sw, a->ph, a->pw, a->oh, a->ow); }
static void run_c2i(task *t, ld_device *d) { i2c_a *a = (i2c_a *)t->args; CPU->col2im(d, a->col, a->x, a->n, a->h, a->w, a->c, a->kh, a->kw, a->sh, a->sw, a->ph, a->pw, a->oh, a->ow); }
static void px_im2col(ld_device *d, float *col, const float *x, int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh,
                      int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t oh, int64_t ow) {
    task *t = task_new(sizeof(i2c_a), run_i2c);
    *(i2c_a *)t->args = (i2c_a){col, x, n, h, w, c, kh, kw, sh, sw, ph, pw, oh, ow};
    submit(d, t);
}
static void px_col2im(ld_device *d, float *dx, const float *col, int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh,
                      int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t oh, int64_t ow) {
    task *t = task_new(sizeof(i2c_a), run_c2i);
    *(i2c_a *)t->args = (i2c_a){dx, col, n, h, w, c, kh, kw, sh, sw, ph, pw, oh, ow};
    submit(d, t);
}

typedef struct { float *y; int64_t *arg; const float *x; int64_t n, h, w, c, kh, kw, sh, sw, oh, ow; } mp_a;
static void run_mp(task *t, ld_device *d) { mp_a *a = (mp_a *)t->args; CPU->maxpool(d, a->y, a->arg, a->x, a->n, a->h, a->w, a->c, a->kh, a->kw, a->sh, a->sw, a->oh, a->ow); }
static void px_maxpool(ld_device *d, float *y, int64_t *arg, const float *x, int64_t n, int64_t h, int64_t w, int64_t c,
                       int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t oh, int64_t ow) {
    task *t = task_new(sizeof(mp_a), run_mp);
    *(mp_a *)t->args = (mp_a){y, arg, x, n, h, w, c, kh, kw, sh, sw, oh, ow};
    submit(d, t);
}
typedef struct { float *dx; const float *dy; const int64_t *arg; int64_t ny, nx; } mpb_a;
static void run_mpb(task *t, ld_device *d) { mpb_a *a = (mpb_a *)t->args; CPU->maxpool_backward(d, a->dx, a->dy, a->arg, a->ny, a->nx); }
static void px_maxpool_backward(ld_device *d, float *dx, const float *dy, const int64_t *arg, int64_t ny, int64_t nx) {
    task *t = task_new(sizeof(mpb_a), run_mpb);
    *(mpb_a *)t->args = (mpb_a){dx, dy, arg, ny, nx};
    submit(d, t);
}

typedef struct { float *loss, *probs; const float *logits; const int64_t *labels; int64_t n, c; float scale; } xe_a;
static void run_xe(task *t, ld_device *d) {
    xe_a *a = (xe_a *)t->args;
    /* the op checks labels on the host only where kernels run inline: here
       the labels may still be being written by a queued kernel */
    for (int64_t i = 0; i < a->n; i++)
        if (a->labels[i] < 0 || a->labels[i] >= a->c) {
            ld_executor_kernel_error(d, "label %lld at position %lld of %s's share of the batch is outside [0, %lld)",
                                     (long long)a->labels[i], (long long)i, d->name, (long long)a->c);
            break;
        }
    CPU->sparse_xent(d, a->loss, a->probs, a->logits, a->labels, a->n, a->c, a->scale);
}
static void px_sparse_xent(ld_device *d, float *loss, float *probs, const float *logits, const int64_t *labels,
                           int64_t n, int64_t c, float scale) {
    task *t = task_new(sizeof(xe_a), run_xe);
    *(xe_a *)t->args = (xe_a){loss, probs, logits, labels, n, c, scale};
    submit(d, t);
}
typedef struct { float *dlogits; const float *probs; const int64_t *labels; const float *g; int64_t n, c; float scale; } xeb_a;
static void run_xeb(task *t, ld_device *d) { xeb_a *a = (xeb_a *)t->args; CPU->sparse_xent_backward(d, a->dlogits, a->probs, a->labels, a->g, a->n, a->c, a->scale); }
static void px_sparse_xent_backward(ld_device *d, float *dl, const float *probs, const int64_t *labels, const float *g,
                                    int64_t n, int64_t c, float scale) {
    task *t = task_new(sizeof(xeb_a), run_xeb);
    *(xeb_a *)t->args = (xeb_a){dl, probs, labels, g, n, c, scale};
    submit(d, t);
}

typedef struct { float *w, *s1, *s2; const float *g; int64_t n; float lr, p1, p2, eps, wd; int64_t step; int flag; int kind; } opt_a;
static void run_opt(task *t, ld_device *d) {
    opt_a *a = (opt_a *)t->args;
    if (a->kind == 0) CPU->sgd_update(d, a->w, a->s1, a->g, a->n, a->lr, a->p1, a->flag, a->wd);
    else if (a->kind == 1) CPU->adam_update(d, a->w, a->s1, a->s2, a->g, a->n, a->lr, a->p1, a->p2, a->eps, a->step, a->wd, a->flag);
    else CPU->rmsprop_update(d, a->w, a->s1, a->s2, a->g, a->n, a->lr, a->p1, a->p2, a->eps);
}
static void px_sgd(ld_device *d, float *w, float *v, const float *g, int64_t n, float lr, float mom, int nest, float wd) {
    task *t = task_new(sizeof(opt_a), run_opt);
    *(opt_a *)t->args = (opt_a){w, v, NULL, g, n, lr, mom, 0, 0, wd, 0, nest, 0};
    submit(d, t);
}
static void px_adam(ld_device *d, float *w, float *m, float *v, const float *g, int64_t n, float lr, float b1, float b2,
                    float eps, int64_t step, float wd, int dec) {
    task *t = task_new(sizeof(opt_a), run_opt);
    *(opt_a *)t->args = (opt_a){w, m, v, g, n, lr, b1, b2, eps, wd, step, dec, 1};
    submit(d, t);
}
static void px_rmsprop(ld_device *d, float *w, float *ms, float *mom, const float *g, int64_t n, float lr, float rho,
                       float momentum, float eps) {
    task *t = task_new(sizeof(opt_a), run_opt);
    *(opt_a *)t->args = (opt_a){w, ms, mom, g, n, lr, rho, momentum, eps, 0, 0, 0, 2};
    submit(d, t);
}

static const ld_backend proxy_backend = {
    .name = "cpu-executor",
    .alloc = px_alloc, .free = px_free, .to_host = px_to_host, .from_host = px_from_host,
    .synchronize = exec_sync, .copy_strided = px_copy_strided, .fill = px_fill, .binary = px_binary,
    .unary = px_unary, .unary_backward = px_unary_backward, .scale_add = px_scale_add, .reduce = px_reduce,
    .gemm = px_gemm, .softmax = px_softmax, .im2col = px_im2col, .col2im = px_col2im, .maxpool = px_maxpool,
    .maxpool_backward = px_maxpool_backward, .sparse_xent = px_sparse_xent,
    .sparse_xent_backward = px_sparse_xent_backward, .sgd_update = px_sgd, .adam_update = px_adam,
    .rmsprop_update = px_rmsprop,
};

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
        d->threads = 1;
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
    /* the host device keeps its share of the cores */
    int cores = ld_cpu_cores();
    int share = cores / n_logical;
    ld_cpu_set_threads(share > 0 ? share : 1);
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
        __atomic_store_n(&h->backend, ld_cpu_backend(), __ATOMIC_RELEASE);
        __atomic_store_n(&h->impl, NULL, __ATOMIC_RELEASE);
    }
    return LD_OK;
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
