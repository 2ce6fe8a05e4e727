/* ld_strategy.c - replica context, mirrored variables, in-process all-reduce. */
#include "ld_strategy.h"
#include "ld_device.h"
#include "ld_ops.h"
#include "ld_autograd.h"
#include "ld_cpu_internal.h"
#include "cuda/ld_cuda.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ================================================================ replica context
 * One issuing thread drives all replicas, so the context is process-wide. */
static ld_replica_ctx current;
static int in_replica;

/* Per-replica random streams, live between step_begin and step_end. Every
   replica runs the same ops in the same order, so its stream goes through
   the states one device's generator would, except for work done once for
   all replicas: a layer is built (its variables drawn) by the first replica
   that runs it. Such draws are recorded as jumps (ld_replica_draws_shared)
   that any other stream takes when it gets to the state they started from,
   exactly where one device's generator would have made them. */
typedef struct { ld_rng from, to; } rng_jump;
static ld_rng streams[LD_MAX_LOGICAL];
static int n_streams;
static rng_jump *jumps;
static int n_jumps, cap_jumps;

static int same_state(const ld_rng *a, const ld_rng *b) { return !memcmp(a->s, b->s, sizeof a->s); }

static ld_rng *replica_stream(void) {
    ld_rng *s = &streams[current.id];
    /* jumps chain (a build, a draw, another build): take every one that applies */
    for (int moved = 1, guard = 0; moved && guard <= n_jumps; guard++) {
        moved = 0;
        for (int j = 0; j < n_jumps; j++)
            if (same_state(s, &jumps[j].from)) { *s = jumps[j].to; moved = 1; }
    }
    return s;
}

/* ld_global_rng() is the current replica's stream while one is live */
static void point_rng(void) {
    ld_rng_redirect(in_replica && current.id >= 0 && current.id < n_streams ? replica_stream : NULL);
}

void ld_replica_set(const ld_replica_ctx *ctx) {
    if (ctx) { current = *ctx; in_replica = 1; }
    else in_replica = 0;
    point_rng();
}
const ld_replica_ctx *ld_replica_get(void) { return in_replica ? &current : NULL; }

static void in_step_reset(int n);
int ld_replica_step_begin(int n) {
    if (n < 1 || n > LD_MAX_LOGICAL) return ld_fail(LD_EARG, "a step needs 1 to %d replicas, got %d", LD_MAX_LOGICAL, n);
    in_step_reset(n);
    n_streams = 0;
    n_jumps = 0;
    point_rng();   /* the global generator itself, not a stream of the last step */
    ld_rng *g = ld_global_rng();
    for (int r = 0; r < n; r++) streams[r] = *g;
    n_streams = n;
    point_rng();
    return LD_OK;
}

void ld_replica_step_end(void) {
    if (!n_streams) return;
    ld_replica_ctx keep = current;
    current.id = 0;
    ld_rng end = *replica_stream();   /* with the builds replica 0 did not make itself */
    current = keep;
    n_streams = 0;
    n_jumps = 0;
    point_rng();
    *ld_global_rng() = end;
}

void ld_replica_draws_shared(const ld_rng *before) {
    if (!in_replica || current.id < 0 || current.id >= n_streams) return;
    const ld_rng *after = &streams[current.id];
    if (same_state(before, after)) return;
    /* one build right after another (no draw between) is one jump */
    if (n_jumps && same_state(&jumps[n_jumps - 1].to, before)) { jumps[n_jumps - 1].to = *after; return; }
    if (n_jumps == cap_jumps) {
        int cap = cap_jumps ? 2 * cap_jumps : 16;
        rng_jump *j = realloc(jumps, (size_t)cap * sizeof *j);
        if (!j) return;   /* the replicas' masks then differ from one device's; nothing breaks */
        jumps = j;
        cap_jumps = cap;
    }
    jumps[n_jumps++] = (rng_jump){*before, *after};
}

/* ================================================================ mirrored variables */
static ld_device *mirror_devs[LD_MAX_LOGICAL];
static int n_mirror_devs;

/* A mirrored variable's copies, kept in its extension slot (ld_tensor.h). */
typedef struct {
    ld_tensor_ext ext;                   /* first: the tensor frees it through ext.free */
    int n;
    ld_tensor *copies[LD_MAX_LOGICAL];   /* copies[0] is the variable itself (not retained) */
} ld_mirror;

static void mirror_free(ld_tensor_ext *e) {
    ld_mirror *m = (ld_mirror *)e;
    for (int r = 1; r < m->n; r++) ld_tensor_release(m->copies[r]);
    free(m);
}

/* v's copies, or NULL when v is not mirrored (or its slot holds another owner's extension) */
static ld_mirror *mirror_of(const ld_tensor *v) {
    return v && v->ext && v->ext->free == mirror_free ? (ld_mirror *)v->ext : NULL;
}

int ld_mirror_set_devices(int n, ld_device *const *devs) {
    if (n < 0 || n > LD_MAX_LOGICAL) return ld_fail(LD_EARG, "too many devices to mirror on");
    for (int i = 0; i < n; i++) mirror_devs[i] = devs[i];
    n_mirror_devs = n;
    return LD_OK;
}

int ld_variable_created(ld_tensor *v) {
    /* one device: nothing to mirror, but the variable must live there (cuda:0) */
    if (v->ext || n_mirror_devs < 1 || (n_mirror_devs == 1 && v->storage->device == mirror_devs[0])) return LD_OK;
    ld_mirror *m = calloc(1, sizeof *m);
    if (!m) return ld_fail(LD_ENOMEM, "out of memory mirroring variable %s", v->name ? v->name : "");
    m->ext.free = mirror_free;
    /* the variable itself is the first replica's copy */
    if (v->storage->device != mirror_devs[0]) {
        ld_tensor *moved = ld_to_device(v, mirror_devs[0]);
        if (!moved) { free(m); return ld_error_status(); }
        ld_storage *s = v->storage;
        v->storage = moved->storage;
        moved->storage = s;
        v->offset = 0;
        ld_tensor_release(moved);
    }
    m->n = n_mirror_devs;
    m->copies[0] = v;
    for (int r = 1; r < n_mirror_devs; r++) {
        ld_tensor *c = ld_to_device(v, mirror_devs[r]);
        if (!c) { for (int q = 1; q < r; q++) ld_tensor_release(m->copies[q]); free(m); return ld_error_status(); }
        c->requires_grad = v->requires_grad;
        if (v->name) c->name = strdup(v->name);
        m->copies[r] = c;
    }
    v->ext = &m->ext;
    return LD_OK;
}

ld_tensor *ld_var(ld_tensor *v) {
    ld_mirror *m = mirror_of(v);
    if (!m || !in_replica) return v;
    if (current.id < 0 || current.id >= m->n) return v;
    return m->copies[current.id];
}

int ld_mirror_count(const ld_tensor *v) {
    ld_mirror *m = mirror_of(v);
    return m ? m->n : 1;
}
ld_tensor *ld_mirror_copy(ld_tensor *v, int r) {
    ld_mirror *m = mirror_of(v);
    if (!m) return r == 0 ? v : NULL;
    return r >= 0 && r < m->n ? m->copies[r] : NULL;
}

/* ---- writes ---- */
/* The copies a write to v goes to (borrowed): the current replica's inside a
   replica context, every copy in cross-replica context (a value set outside
   the replicas is what every replica must see). Returns how many. */
static int write_targets(ld_tensor *v, ld_tensor **out) {
    ld_mirror *m = mirror_of(v);
    if (!m) { out[0] = v; return 1; }
    if (in_replica) { out[0] = ld_var(v); return 1; }
    for (int r = 0; r < m->n; r++) out[r] = m->copies[r];
    return m->n;
}

/* dst[...] = src, src first moved to dst's device */
static int write_copy(ld_tensor *dst, ld_tensor *src) {
    ld_tensor *moved = NULL;
    if (src->storage->device != dst->storage->device) {
        if (!(moved = ld_to_device(src, dst->storage->device))) return ld_error_status();
        src = moved;
    }
    int st = ld_copy_into(dst, src);
    ld_tensor_release(moved);
    return st;
}

/* a write of the whole of v (whole) or of its row `index`, to each target */
static int write_components(ld_tensor *v, int whole, int64_t index, ld_tensor *src) {
    ld_tensor *t[LD_MAX_LOGICAL];
    int n = write_targets(v, t);
    /* the first copy's write checks the shapes; the copies share them, so a
       bad shape fails before anything is written */
    for (int r = 0; r < n; r++) {
        ld_tensor *dst = whole ? ld_tensor_retain(t[r]) : ld_select(t[r], 0, index);
        if (!dst) return ld_error_status();
        int st = write_copy(dst, src);
        ld_tensor_release(dst);
        if (st) return st;
    }
    return LD_OK;
}

int ld_variable_write(ld_tensor *v, ld_tensor *src) { return write_components(v, 1, 0, src); }

int ld_variable_write_index(ld_tensor *v, int64_t index, ld_tensor *src) {
    if (v->ndim < 1) return ld_fail(LD_ESHAPE, "cannot index a scalar tensor");
    return write_components(v, 0, index, src);
}

int ld_variable_add(ld_tensor *v, ld_tensor *delta, int subtract) {
    ld_tensor *cur = ld_var(v), *moved = NULL;
    if (delta->storage->device != cur->storage->device) {
        if (!(moved = ld_to_device(delta, cur->storage->device))) return ld_error_status();
        delta = moved;
    }
    /* an update, not a step of the computation a tape may be recording */
    ld_tape_pause(1);
    ld_tensor *sum = ld_binary(subtract ? LD_BIN_SUB : LD_BIN_ADD, cur, delta);
    ld_tape_pause(0);
    ld_tensor_release(moved);
    if (!sum) return ld_error_status();
    int st = ld_variable_write(v, sum);
    ld_tensor_release(sum);
    return st;
}

/* ================================================================ all-reduce */
struct ld_comm {
    int n;
    ld_comm_impl impl;
    ld_device *devs[LD_MAX_LOGICAL];
    pthread_mutex_t mu;
    ld_comm_stats stats;
    float *scratch[LD_MAX_LOGICAL];     /* see scratch_of */
    int64_t scratch_n[LD_MAX_LOGICAL];
};

ld_comm *ld_comm_new(int n, ld_device *const *devs, ld_comm_impl impl) {
    if (n < 1 || n > LD_MAX_LOGICAL) { ld_fail(LD_EARG, "a communicator needs 1..%d devices", LD_MAX_LOGICAL); return NULL; }
    ld_comm *c = calloc(1, sizeof *c);
    if (!c) { ld_fail(LD_ENOMEM, "out of memory"); return NULL; }
    c->n = n;
    c->impl = impl;
    memcpy(c->devs, devs, sizeof *devs * (size_t)n);
    pthread_mutex_init(&c->mu, NULL);
    return c;
}

void ld_comm_free(ld_comm *c) {
    if (!c) return;
    for (int i = 0; i < c->n; i++) ld_device_synchronize(c->devs[i]);
    for (int i = 0; i < c->n; i++) ld_host_free(c->scratch[i], (size_t)c->scratch_n[i] * sizeof(float));
    pthread_mutex_destroy(&c->mu);
    free(c);
}

void ld_comm_stats_get(ld_comm *c, ld_comm_stats *s, int reset) {
    pthread_mutex_lock(&c->mu);
    *s = c->stats;
    if (reset) memset(&c->stats, 0, sizeof c->stats);
    pthread_mutex_unlock(&c->mu);
}

/* One collective call: the participants' buffers and a reusable barrier. */
typedef struct {
    ld_comm *comm;
    int n, k, mean, refs;
    int64_t total;                  /* elements per replica */
    int64_t *len;                   /* [k] element counts */
    float **buf;                    /* [n*k] device pointers */
    ld_tensor **keep;               /* [n*k] retained until done (2*n*k with out) */
    float **out;                    /* [n*k] gathered instead of buf when updating (or NULL) */
    struct ld_pending **pend;       /* [n*k] factors of tensors left as products (owned; tensor i: all or none) */
    ld_slice_fn update;             /* called on each replica's reduced slice */
    void *ctx;
    void (*ctx_free)(void *);
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int arrived, gen;
    double max_seconds;
    int64_t lo[LD_MAX_LOGICAL], hi[LD_MAX_LOGICAL];   /* replica r's slice of the concatenation */
} group;

#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __builtin_ia32_pause()
#else
#define cpu_relax() ((void)0)
#endif

/* Replicas reach a barrier within microseconds of each other when the work
   is balanced, and a futex wake-up costs much longer than that on a busy
   machine (three barriers per collective). So a waiter spins for 20 us, then
   keeps spinning for up to 1 ms but yields its core every few microseconds
   (the issuing thread, which shares the cores, gets it, and the waiter still
   sees the release at once), then sleeps: faster on mirrored_bench than
   sleeping at once or spinning alone. */
static void barrier(group *g) {
    pthread_mutex_lock(&g->mu);
    int gen = g->gen;
    if (++g->arrived == g->n) {
        g->arrived = 0;
        __atomic_store_n(&g->gen, gen + 1, __ATOMIC_RELEASE);
        pthread_cond_broadcast(&g->cv);
        pthread_mutex_unlock(&g->mu);
        return;
    }
    pthread_mutex_unlock(&g->mu);
    double t0 = ld_now();
    for (int i = 1; __atomic_load_n(&g->gen, __ATOMIC_ACQUIRE) == gen; i++) {
        double waited = (i & 63) == 0 ? ld_now() - t0 : 0;
        if (waited > 1e-3) break;
        if (waited > 20e-6) sched_yield(); else cpu_relax();
    }
    pthread_mutex_lock(&g->mu);
    while (gen == g->gen) pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

/* apply fn to the pieces of [lo, hi) of the virtual concatenation of the k tensors */
static void for_range(group *g, int64_t lo, int64_t hi, void (*fn)(group *, int i, int64_t a, int64_t b, void *), void *ud) {
    int64_t base = 0;
    for (int i = 0; i < g->k && base < hi; i++) {
        int64_t a = lo > base ? lo - base : 0, b = hi - base < g->len[i] ? hi - base : g->len[i];
        if (a < b) fn(g, i, a, b, ud);
        base += g->len[i];
    }
}

/* Elements [x, y) of replica r's tensor i, when every replica left it as a
   product a^T b (a weight gradient, ld_ops.h): the sum over replicas of
   their products, computed straight from their factors into c (c[0] is
   element x). own: r's own term, written over c; else the other replicas'
   terms, added to it. The range is cut into whole rows and the partial rows
   at its ends, so nothing outside [x, y) is written (other replicas read
   the rest of r's buffer). */
static void product_range(group *g, int r, int i, int64_t x, int64_t y, float *c, int own) {
    int n = g->n, k = g->k;
    const ld_backend *cpu = ld_cpu_backend();
    ld_device *d = g->comm->devs[r];
    c -= x;   /* c[x] is element x */
    const struct ld_pending *p0 = g->pend[r * k + i];
    int64_t m = p0->a->shape[1], cols = p0->b->shape[1];
    for (int64_t e = x; e < y;) {
        int64_t row = e / cols, c0 = e % cols, rows = 1, w = cols - c0;
        if (c0 == 0 && y - e >= cols) rows = (y - e) / cols;
        else if (w > y - e) w = y - e;
        float beta = own ? 0.0f : 1.0f;
        for (int q = 0; q < n; q++) {
            if ((q == r) != own) continue;
            const struct ld_pending *p = g->pend[q * k + i];
            int64_t kq = p->a->shape[0];
            if (kq == 0) continue;   /* an empty share of the batch adds nothing */
            cpu->gemm(d, 1, 0, rows, w, kq, 1.0f, (const float *)p->a->storage->data + p->a->offset + row, m,
                      (const float *)p->b->storage->data + p->b->offset + c0, cols, beta, c + row * cols + c0, cols);
            beta = 1.0f;
        }
        if (beta == 0.0f)
            for (int64_t j = 0; j < rows; j++) memset(c + (row + j) * cols + c0, 0, (size_t)w * sizeof(float));
        e += rows * w;
    }
}

/* Replica r's scratch for its piece of a weight gradient summed from its
   products and handed straight to the update (NULL: use the gradient's own
   buffer). The same memory every step, so it is in r's core's cache when
   the product fills it, unlike the gradient, whose block is a different
   one from step to step. Only r's executor uses it. */
static float *scratch_of(ld_comm *c, int r, int64_t n) {
    if (c->scratch_n[r] < n) {
        ld_host_free(c->scratch[r], (size_t)c->scratch_n[r] * sizeof(float));
        c->scratch[r] = ld_host_alloc((size_t)n * sizeof(float));
        c->scratch_n[r] = c->scratch[r] ? n : 0;
        if (!c->scratch[r]) ld_clear_error();
    }
    return c->scratch[r];
}

/* Replica r sums its slice of the k tensors and writes the sum into every
   replica's buffer, block by block while the block is in cache: over shared
   memory the reduce-scatter and the all-gather are one pass (each element is
   read once and written once per replica) between two barriers. With an
   update, the block of the sum is handed to it and the updated `out` block
   is what every replica gets. A tensor left as products is summed for the
   whole piece first, one matrix product per other replica added to the own
   term (own_product_piece): cut into row chunks, each product would pack
   the whole dy factor again, and a replica's piece of a weight gradient
   is small enough to stay in its core's L2 for the update and the push. */
enum { BLOCK = 8192 };
typedef struct {
    int r;
    double mark, product;   /* end of the last span recorded; seconds in products and updates after the barrier */
    float *scratch;         /* the pieces' sums, one after the other (NULL: in the gradients) */
    int64_t at;             /* the next piece's place in it */
} piece_state;

/* Where the sum of a piece [a, b) of tensor i goes: sum[x] for element x. */
static float *piece_sum(group *g, piece_state *ps, int i, int64_t a, int64_t b) {
    float *sum = ps->scratch ? ps->scratch + ps->at - a : g->buf[ps->r * g->k + i];
    if (ps->scratch) ps->at += b - a;
    return sum;
}

/* Before the first barrier: replica r's own term of each product in its
   slice, which needs only its own factors. A replica that gets there first
   (the other is still in its backward pass, or shares its core with the
   issuing thread) does this instead of waiting for it; the other terms come
   after the barrier. */
static void count_fused_piece(group *g, int i, int64_t a, int64_t b, void *ud) {
    piece_state *ps = ud;
    if (g->pend[ps->r * g->k + i]) ps->at += b - a;
}
static void own_product_piece(group *g, int i, int64_t a, int64_t b, void *ud) {
    piece_state *ps = ud;
    if (!g->pend || !g->pend[ps->r * g->k + i]) return;
    product_range(g, ps->r, i, a, b, piece_sum(g, ps, i, a, b) + a, 1);
}
/* The sum, update and push of one piece [a, b) of tensor i, split over the
   threads of the replica's device (its pool): on a machine of many cores a
   device owns several, and one thread summing, updating and copying the
   replica's whole slice while the others idle was the step's longest serial
   part (2 devices of 8 threads on 16 cores). Each part takes whole BLOCKs
   from a, as the serial loop did, so every element is computed the same. */
typedef struct {
    group *g;
    int r, i, fused;
    int64_t a, b;
    float *sum;             /* sum[x] is the sum of element x */
    double upd[64];         /* seconds in the update, per part */
} push_job;
static void push_part(void *ctx, int p, int np) {
    push_job *j = ctx;
    group *g = j->g;
    int r = j->r, i = j->i, n = g->n, k = g->k;
    int64_t blocks = (j->b - j->a + BLOCK - 1) / BLOCK, b0 = blocks * p / np, b1 = blocks * (p + 1) / np;
    float *own = g->buf[r * k + i], *sum = j->sum;
    float s = 1.0f / (float)n;
    for (int64_t x = j->a + b0 * BLOCK; x < j->a + b1 * BLOCK && x < j->b; x += BLOCK) {
        int64_t y = x + BLOCK < j->b ? x + BLOCK : j->b;
        for (int q = 0; q < n && !j->fused; q++) {
            if (q == r) continue;
            const float *src = g->buf[q * k + i];
            for (int64_t e = x; e < y; e++) own[e] += src[e];
        }
        if (g->mean) for (int64_t e = x; e < y; e++) sum[e] *= s;
        float **dst = g->buf;
        if (g->update) {
            double u0 = ld_now();
            g->update(g->ctx, r, i, x, y, sum + x, g->comm->devs[r]);
            j->upd[p] += ld_now() - u0;
            dst = g->out;
        }
        for (int q = 0; q < n; q++)
            if (q != r) memcpy(dst[q * k + i] + x, dst[r * k + i] + x, (size_t)(y - x) * sizeof(float));
    }
}
static void reduce_push_piece(group *g, int i, int64_t a, int64_t b, void *ud) {
    piece_state *ps = ud;
    int r = ps->r, k = g->k;
    ld_device *d = g->comm->devs[r];
    push_job j = {.g = g, .r = r, .i = i, .fused = g->pend && g->pend[r * k + i], .a = a, .b = b, .sum = g->buf[r * k + i]};
    if (j.fused) {   /* the products are the backward pass's weight gradients in the trace, not communication */
        double p0 = ld_now();
        j.sum = piece_sum(g, ps, i, a, b);
        product_range(g, r, i, a, b, j.sum + a, 0);
        double p1 = ld_now();
        ld_executor_record(d, LD_SPAN_ALLREDUCE, ps->mark, p0);
        ld_executor_record(d, LD_SPAN_BACKWARD, p0, p1);
        ps->mark = p1;
        ps->product += p1 - p0;
    }
    int64_t blocks = (b - a + BLOCK - 1) / BLOCK;
    double t0 = ld_now();
    ld_cpu_parallel(push_part, &j, blocks < 64 ? (int)blocks : 64);
    if (g->update) {   /* the optimizer's update: its own span in the trace (the slowest part's time in it) */
        double t1 = ld_now(), upd = 0;
        for (int p = 0; p < 64; p++) if (j.upd[p] > upd) upd = j.upd[p];
        if (upd > t1 - t0) upd = t1 - t0;
        ld_executor_record(d, LD_SPAN_ALLREDUCE, ps->mark, t1 - upd);
        ld_executor_record(d, LD_SPAN_OPTIMIZER, t1 - upd, t1);
        ps->mark = t1;
        ps->product += upd;   /* not communication either */
    }
}

void ld_comm_slices(const ld_comm *c, int k, ld_tensor *const *t, int64_t *lo, int64_t *hi) {
    int n = c->n;
    int64_t total = 0;
    for (int i = 0; i < k; i++) total += ld_tensor_numel(t[i]);
    if (c->impl == LD_COMM_REDUCE_TO_ONE) {   /* replica 0 reduces everything */
        for (int r = 0; r < n; r++) { lo[r] = 0; hi[r] = r == 0 ? total : 0; }
        return;
    }
    /* Equal shares, each boundary moved to the nearest row of the tensor it
       falls in (16 elements for a vector): a weight gradient summed from its
       products is then whole rows on each replica; a partial row would cost
       a one-row product that reads all of dy for a few hundred elements. */
    lo[0] = 0;
    for (int r = 1; r < n; r++) {
        int64_t want = total * r / n, base = 0, at = total;
        for (int i = 0; i < k; i++) {
            int64_t len = ld_tensor_numel(t[i]);
            if (want < base + len) {
                int64_t row = t[i]->ndim >= 2 && t[i]->shape[0] > 0 ? len / t[i]->shape[0] : 16;
                if (row < 1) row = 1;
                int64_t off = (want - base + row / 2) / row * row;
                at = base + (off < len ? off : len);
                break;
            }
            base += len;
        }
        lo[r] = at > lo[r - 1] ? at : lo[r - 1];
    }
    for (int r = 0; r < n; r++) hi[r] = r + 1 < n ? lo[r + 1] : total;
}
int ld_comm_size(const ld_comm *c) { return c->n; }
ld_device *ld_comm_device(const ld_comm *c, int r) { return r >= 0 && r < c->n ? c->devs[r] : NULL; }

static void group_release(group *g) {
    pthread_mutex_lock(&g->mu);
    int left = --g->refs;
    pthread_mutex_unlock(&g->mu);
    if (left) return;
    ld_comm *c = g->comm;
    pthread_mutex_lock(&c->mu);
    c->stats.calls++;
    c->stats.bytes += g->total * (int64_t)sizeof(float);
    c->stats.seconds += g->max_seconds;
    for (int i = 0; g->pend && i < g->k; i++) c->stats.products += g->pend[i] != NULL;
    pthread_mutex_unlock(&c->mu);
    for (int i = 0; i < (g->out ? 2 : 1) * g->n * g->k; i++) ld_tensor_release(g->keep[i]);
    if (g->ctx_free) g->ctx_free(g->ctx);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    for (int j = 0; g->pend && j < g->n * g->k; j++) ld_pending_free(g->pend[j]);
    free(g->len); free(g->buf); free(g->keep); free(g->out); free(g->pend);
    free(g);
}

typedef struct { group *g; int r; } participant;

static void participate(void *ctx, ld_device *d) {
    participant *p = ctx;
    group *g = p->g;
    int r = p->r;
    free(p);
    int64_t lo = g->lo[r], hi = g->hi[r];
    piece_state st = {r, 0, 0, NULL, 0};
    double t0 = ld_now();
    if (g->pend) {
        if (g->update) {   /* the fused pieces' sums go to scratch */
            for_range(g, lo, hi, count_fused_piece, &st);
            st.scratch = scratch_of(g->comm, r, st.at);
            st.at = 0;
        }
        for_range(g, lo, hi, own_product_piece, &st);
        st.at = 0;
    }
    double tp = ld_now();
    ld_executor_record(d, g->pend ? LD_SPAN_BACKWARD : LD_SPAN_COMPUTE, t0, tp);   /* own terms of the weight gradients */
    barrier(g);                                   /* every replica's inputs are ready */
    double t1 = ld_now();
    ld_executor_record(d, LD_SPAN_WAIT, tp, t1);
    st.mark = t1;
    for_range(g, lo, hi, reduce_push_piece, &st);   /* my slice, summed (and updated), to everyone */
    barrier(g);                                   /* every slice is everywhere */
    double t2 = ld_now();
    ld_executor_record(d, LD_SPAN_ALLREDUCE, st.mark, t2);
    pthread_mutex_lock(&g->mu);
    if (t2 - t1 - st.product > g->max_seconds) g->max_seconds = t2 - t1 - st.product;   /* communication only */
    pthread_mutex_unlock(&g->mu);
    group_release(g);
}

static int check_tensors(ld_comm *c, const char *what, int k, ld_tensor *const *t, ld_tensor *const *like) {
    char b1[64], b2[64];
    for (int i = 0; i < k; i++) {
        for (int r = 0; r < c->n; r++) {
            ld_tensor *x = t[r * k + i];
            if (!x || x->dtype != LD_F32 || !ld_tensor_is_contiguous(x))
                return ld_fail(LD_EARG, "%s: tensor %d of replica %d is not a contiguous float32 tensor", what, i + 1, r);
            if (x->storage->device != c->devs[r])
                return ld_fail(LD_EDEVICE, "%s: tensor %d of replica %d is on %s, not on %s", what, i + 1, r,
                               x->storage->device->name, c->devs[r]->name);
            if (!ld_same_shape(x, like[i]))
                return ld_fail(LD_ESHAPE, "%s: tensor %d has shape %s on replica 0 but %s on replica %d", what, i + 1,
                               ld_shape_str(like[i], b1, sizeof b1), ld_shape_str(x, b2, sizeof b2), r);
        }
    }
    return LD_OK;
}

static int launch(ld_comm *c, int k, ld_tensor *const *t, ld_tensor *const *out, int mean, ld_slice_fn update,
                  void *ctx, void (*ctx_free)(void *));

int ld_comm_all_reduce(ld_comm *c, int k, ld_tensor *const *t, int mean) {
    int n = c->n;
    if (check_tensors(c, "all_reduce", k, t, t)) return ld_error_status();
    if (n == 1) for (int i = 0; i < k; i++) ld_tensor_materialize(t[i]);
    int ncuda = 0;
    for (int r = 0; r < n; r++) ncuda += c->devs[r]->kind == LD_DEV_CUDA;
    if (ncuda) {   /* GPUs: NCCL, queued on each device's stream (engine/cuda/cuda_nccl.cu) */
        if (ncuda != n)
            return ld_fail(LD_EDEVICE, "all_reduce: cannot mix CUDA and CPU devices in one communicator");
        int st = ld_cuda_all_reduce(n, c->devs, k, t, mean);
        if (st == LD_OK) {
            int64_t bytes = 0;
            for (int i = 0; i < k; i++) bytes += ld_tensor_numel(t[i]) * (int64_t)sizeof(float);
            pthread_mutex_lock(&c->mu);
            c->stats.calls++;
            c->stats.bytes += bytes;
            pthread_mutex_unlock(&c->mu);
        }
        return st;
    }
    if (n == 1) {
        return LD_OK;
    }
    return launch(c, k, t, NULL, mean, NULL, NULL, NULL);
}

int ld_comm_reduce_scatter_update(ld_comm *c, int k, ld_tensor *const *t, ld_tensor *const *out, int mean,
                                  ld_slice_fn update, void *ctx, void (*ctx_free)(void *)) {
    int st = check_tensors(c, "reduce_scatter_update", k, t, t);
    if (!st) st = check_tensors(c, "reduce_scatter_update", k, out, t);
    for (int r = 0; !st && r < c->n; r++)
        if (c->devs[r]->kind != LD_DEV_CPU)
            st = ld_fail(LD_EDEVICE, "reduce_scatter_update: %s is not a CPU device", c->devs[r]->name);
    if (st) { if (ctx_free) ctx_free(ctx); return st; }
    return launch(c, k, t, out, mean, update, ctx, ctx_free);
}

static int launch(ld_comm *c, int k, ld_tensor *const *t, ld_tensor *const *out, int mean, ld_slice_fn update,
                  void *ctx, void (*ctx_free)(void *)) {
    int n = c->n, nk = n * k > 0 ? n * k : 1;
    group *g = calloc(1, sizeof *g);
    if (g) {
        g->len = calloc((size_t)(k ? k : 1), sizeof *g->len);
        g->buf = calloc((size_t)nk, sizeof *g->buf);
        g->keep = calloc((size_t)(2 * nk), sizeof *g->keep);
        g->out = out ? calloc((size_t)nk, sizeof *g->out) : NULL;
    }
    if (!g || !g->len || !g->buf || !g->keep || (out && !g->out)) {
        if (g) { free(g->len); free(g->buf); free(g->keep); free(g->out); free(g); }
        if (ctx_free) ctx_free(ctx);
        return ld_fail(LD_ENOMEM, "out of memory");
    }
    g->comm = c; g->n = n; g->k = k; g->mean = mean; g->refs = n;
    g->update = update; g->ctx = ctx; g->ctx_free = ctx_free;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    for (int i = 0; i < k; i++) { g->len[i] = ld_tensor_numel(t[i]); g->total += g->len[i]; }
    ld_comm_slices(c, k, t, g->lo, g->hi);
    /* weight gradients left as products: fused into the reduce when every
       replica left tensor i so (and its factors are CPU buffers), computed
       first otherwise */
    for (int i = 0; i < k; i++) {
        int np = 0;
        for (int r = 0; r < n; r++) np += t[r * k + i]->pending != NULL;
        if (np == n && !g->pend) g->pend = calloc((size_t)nk, sizeof *g->pend);
        for (int r = 0; r < n; r++) {
            if (np == n && g->pend) {   /* the collective owns the factors now */
                g->pend[r * k + i] = t[r * k + i]->pending;
                t[r * k + i]->pending = NULL;
            } else {
                ld_tensor_materialize(t[r * k + i]);
            }
        }
    }
    for (int j = 0; j < n * k; j++) {
        g->keep[j] = ld_tensor_retain(t[j]);
        g->buf[j] = (float *)t[j]->storage->data + t[j]->offset;
        if (out) {
            g->keep[n * k + j] = ld_tensor_retain(out[j]);
            g->out[j] = (float *)out[j]->storage->data + out[j]->offset;
        }
    }
    participant *ps[LD_MAX_LOGICAL];
    for (int r = 0; r < n; r++) {
        ps[r] = malloc(sizeof *ps[r]);
        if (!ps[r]) { for (int q = 0; q < r; q++) free(ps[q]); group_release(g); return ld_fail(LD_ENOMEM, "out of memory"); }
        ps[r]->g = g; ps[r]->r = r;
    }
    /* queue on the executors first; a device that runs inline (the host) last,
       since its part blocks until every other part has started */
    for (int pass = 0; pass < 2; pass++)
        for (int r = n - 1; r >= 0; r--)
            if (ld_device_is_async(c->devs[r]) == (pass == 0))
                ld_executor_submit(c->devs[r], participate, ps[r], LD_SPAN_NONE);
    return LD_OK;
}

/* ================================================================ an all-reduce inside the step
 * ld_replica_all_reduce_sum (synchronized BatchNorm's statistics). The
 * replicas of a step are issued one after the other (replica n-1 first,
 * replica 0 last), their kernels queued on their devices; replica r's k-th
 * call of the step meets every other replica's k-th call: each queues a
 * task that waits at a barrier until every replica's values are computed,
 * sums them all in replica order (the same bits everywhere), waits until
 * every replica has read, and writes the sum. A device that runs inline
 * (the host) reaches its task last, when every other one is queued. */
typedef struct {
    group g;                                 /* its barrier (n, mu, cv, arrived, gen) and refs */
    int64_t len;
    float *buf[LD_MAX_LOGICAL];
    ld_tensor *keep[LD_MAX_LOGICAL];
    int issued, abandoned;
} in_step_reduce;
static struct {
    in_step_reduce **open;                   /* by call index within the step */
    int cap, n_open;
    int calls[LD_MAX_LOGICAL];               /* calls issued so far by each replica */
    int n;                                   /* the step's replicas in this process */
    ld_step_reducer reducer;                 /* across processes */
    void *reducer_ctx;
} step_reduce;

void ld_replica_set_reducer(ld_step_reducer fn, void *ctx) {
    step_reduce.reducer = fn;
    step_reduce.reducer_ctx = ctx;
}

static void in_step_release(in_step_reduce *s) {
    pthread_mutex_lock(&s->g.mu);
    int left = --s->g.refs;
    pthread_mutex_unlock(&s->g.mu);
    if (left) return;
    for (int r = 0; r < LD_MAX_LOGICAL; r++) ld_tensor_release(s->keep[r]);
    pthread_mutex_destroy(&s->g.mu);
    pthread_cond_destroy(&s->g.cv);
    free(s);
}

typedef struct { in_step_reduce *s; int r; } in_step_part;
static void in_step_run(void *ctx, ld_device *d) {
    in_step_part *p = ctx;
    in_step_reduce *s = p->s;
    int r = p->r;
    free(p);
    float *sum = malloc(sizeof(float) * (size_t)(s->len ? s->len : 1));
    barrier(&s->g);                          /* every replica's values are computed */
    if (__atomic_load_n(&s->abandoned, __ATOMIC_ACQUIRE)) {
        ld_executor_kernel_error(d, "synchronized statistics: not every replica reached the same all-reduce");
        free(sum);
        in_step_release(s);
        return;
    }
    if (sum)
        for (int64_t i = 0; i < s->len; i++) {
            double a = 0;
            for (int q = 0; q < s->g.n; q++) a += s->buf[q][i];
            sum[i] = (float)a;
        }
    barrier(&s->g);                          /* every replica has read every buffer */
    if (sum) memcpy(s->buf[r], sum, sizeof(float) * (size_t)s->len);
    else ld_executor_kernel_error(d, "all-reduce in the step: out of memory");
    free(sum);
    in_step_release(s);
}

static void in_step_reset(int n) {
    /* a call that not every replica made (a replica function failed before
       it): the parts queued would wait for the others forever, so they are
       let through, write nothing, and fail their device's next read */
    for (int k = 0; k < step_reduce.n_open; k++) {
        in_step_reduce *s = step_reduce.open[k];
        if (!s) continue;
        pthread_mutex_lock(&s->g.mu);
        s->abandoned = 1;
        int missing = s->g.n - s->issued, left = s->g.refs -= missing;
        s->g.n = s->issued;
        if (s->g.arrived >= s->g.n && s->g.n > 0) {    /* every part queued is waiting: open the barrier */
            s->g.arrived = 0;
            __atomic_store_n(&s->g.gen, s->g.gen + 1, __ATOMIC_RELEASE);
            pthread_cond_broadcast(&s->g.cv);
        }
        pthread_mutex_unlock(&s->g.mu);
        if (!left) { s->g.refs = 1; in_step_release(s); }
    }
    step_reduce.n_open = 0;
    memset(step_reduce.calls, 0, sizeof step_reduce.calls);
    step_reduce.n = n;
}

int ld_replica_all_reduce_sum(ld_tensor *t) {
    const ld_replica_ctx *c = ld_replica_get();
    if (!c || c->n <= 1) return LD_OK;
    if (t->dtype != LD_F32 || !ld_tensor_is_contiguous(t))
        return ld_fail(LD_ETYPE, "all-reduce in the step: a contiguous float32 tensor expected");
    ld_device *dev = t->storage->device;
    if (dev->kind != LD_DEV_CPU)
        return ld_fail(LD_EDEVICE, "an all-reduce inside the step (synchronized BatchNormalization; the losses of the "
                       "global batch: a loss over masked steps, SparseCategoricalCrossentropy's ignore_class, Dice, Tversky) "
                       "runs between CPU "
                       "devices and between processes, not between the replicas of one process on %s", dev->name);
    if (c->id < 0 || c->id >= c->n) return ld_fail(LD_EARG, "bad replica context");
    if (step_reduce.n != c->n) {             /* the replicas are in several processes */
        if (step_reduce.n == 1 && step_reduce.reducer) return step_reduce.reducer(step_reduce.reducer_ctx, t);
        return ld_fail(LD_EINTERNAL, "an all-reduce inside the step (synchronized statistics) across %d replicas, %d of "
                       "them in this process: this strategy does not provide one", c->n, step_reduce.n);
    }
    int k = step_reduce.calls[c->id]++;
    if (k >= step_reduce.cap) {
        int cap = step_reduce.cap ? 2 * step_reduce.cap : 16;
        while (cap <= k) cap *= 2;
        in_step_reduce **o = realloc(step_reduce.open, sizeof *o * (size_t)cap);
        if (!o) return ld_fail(LD_ENOMEM, "out of memory");
        memset(o + step_reduce.cap, 0, sizeof *o * (size_t)(cap - step_reduce.cap));
        step_reduce.open = o;
        step_reduce.cap = cap;
    }
    if (k >= step_reduce.n_open) {
        for (int j = step_reduce.n_open; j <= k; j++) step_reduce.open[j] = NULL;
        step_reduce.n_open = k + 1;
    }
    in_step_reduce *s = step_reduce.open[k];
    int64_t len = ld_tensor_numel(t);
    if (!s) {
        s = calloc(1, sizeof *s);
        if (!s) return ld_fail(LD_ENOMEM, "out of memory");
        s->g.n = c->n;
        s->g.refs = c->n;
        s->len = len;
        pthread_mutex_init(&s->g.mu, NULL);
        pthread_cond_init(&s->g.cv, NULL);
        step_reduce.open[k] = s;
    }
    if (s->len != len || s->keep[c->id])
        return ld_fail(LD_ESHAPE, "all-reduce in the step: replica %d's call %d has %lld values, another replica's %lld "
                       "(every replica must make the same calls)", c->id, k + 1, (long long)len, (long long)s->len);
    in_step_part *p = malloc(sizeof *p);
    if (!p) return ld_fail(LD_ENOMEM, "out of memory");
    p->s = s; p->r = c->id;
    s->keep[c->id] = ld_tensor_retain(t);
    s->buf[c->id] = (float *)t->storage->data + t->offset;
    s->issued++;
    if (s->issued == s->g.n) step_reduce.open[k] = NULL;   /* complete: the tasks own it */
    ld_executor_submit(dev, in_step_run, p, LD_SPAN_NONE);
    return LD_OK;
}
