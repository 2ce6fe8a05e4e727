/* ld_ring.c - the data plane of a cluster: ring all-reduce (reduce-scatter,
   then all-gather) and broadcast over ZeroMQ PUSH/PULL sockets, chunked and
   pipelined, with every wait bounded.

   All-reduce of n floats over N ranks. The buffer is cut into N segments;
   step u = 0 .. 2N-3 sends segment (r-u) mod N to rank r+1 and receives
   segment (r-u-1) mod N from rank r-1. The first N-1 steps add what arrives
   (reduce-scatter: after them rank r holds the full sum of segment r+1), the
   last N-1 copy it (all-gather). What a rank receives at step u is exactly
   what it sends at step u+1, so each chunk is forwarded as soon as it has
   been added: the ring is a pipeline, and a segment never waits for a whole
   step. Each rank sends and receives 2(N-1)/N x n floats, the optimum.

   Sends are zero-copy from the caller's buffer. That is safe because a
   chunk this rank sent comes back around the ring (at step u+N, added to by
   every other rank) before the rank writes that part of the buffer again,
   and the call waits until ZeroMQ has released every chunk before it
   returns.

   A cluster joined with opts.mpi sends the same three collectives to MPI
   (ld_mpi.c) after the same checks: one interface, two transports. */
#include "ld_cluster_internal.h"
#include "ld_device.h"
#include "ld_executor.h"
#include "ld_cpu_internal.h"

#include <zmq.h>

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RING_MAGIC 0x4c445231u      /* "LDR1" */
enum { K_ALLREDUCE = 1, K_BCAST = 2 };
static const char *const kind_names[] = {"?", "all_reduce", "broadcast"};

typedef struct {
    uint32_t magic, kind;
    uint64_t seq;                   /* collective number, the same on every rank */
    uint32_t step, chunk;
    uint64_t total;                 /* elements (all_reduce) or bytes (broadcast) of the whole call */
    uint64_t shapes;                /* a hash of the reduced tensors' shapes (0: a flat buffer) */
} ring_hdr;

typedef struct { uint32_t step, chunk; char *p; size_t bytes; } sendreq;

typedef struct {
    ld_cluster *c;
    int kind;
    uint64_t seq, total;
    uint64_t shapes;                /* as ring_hdr.shapes */
    const char *shapes_text;        /* this rank's shapes, for a message (NULL: a flat buffer) */
    sendreq *q;                     /* FIFO of chunks to send */
    size_t qhead, qtail, qcap;
    double last_progress;
    int prev;
} ring;

static void release_chunk(void *data, void *hint) {
    (void)data;
    __atomic_sub_fetch((int *)hint, 1, __ATOMIC_RELEASE);
}

static int enqueue(ring *g, uint32_t step, uint32_t chunk, void *p, size_t bytes) {
    if (g->qtail == g->qcap) {
        if (g->qhead > 0) {
            memmove(g->q, g->q + g->qhead, (g->qtail - g->qhead) * sizeof *g->q);
            g->qtail -= g->qhead;
            g->qhead = 0;
        } else {
            size_t cap = g->qcap ? 2 * g->qcap : 64;
            sendreq *q = realloc(g->q, cap * sizeof *q);
            if (!q) return ld_fail(LD_ENOMEM, "out of memory");
            g->q = q;
            g->qcap = cap;
        }
    }
    g->q[g->qtail++] = (sendreq){step, chunk, p, bytes};
    return LD_OK;
}

/* hand queued chunks to the link while it takes them */
static int flush(ring *g) {
    ld_cluster *c = g->c;
    while (g->qhead < g->qtail) {
        sendreq *s = &g->q[g->qhead];
        ring_hdr h = {RING_MAGIC, (uint32_t)g->kind, g->seq, s->step, s->chunk, g->total, g->shapes};
        if (c->shm_tx) {   /* copied into the successor's slot now: nothing stays in flight */
            int k = cl_shm_send(c->shm_tx, &h, sizeof h, s->p, s->bytes);
            if (k == 0) return LD_OK;
            if (k < 0) return ld_fail(LD_EINTERNAL, "%s: a chunk of %zu bytes does not fit a slot", kind_names[g->kind], s->bytes);
            g->qhead++;
            continue;
        }
        if (zmq_send(c->push, &h, sizeof h, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) {
            if (errno == EAGAIN || errno == EINTR) return LD_OK;
            return ld_fail(LD_EDEVICE, "%s: send to %s: %s", kind_names[g->kind], c->peers[(c->rank + 1) % c->size].name,
                           zmq_strerror(errno));
        }
        zmq_msg_t m;
        __atomic_add_fetch(&c->inflight, 1, __ATOMIC_ACQ_REL);
        zmq_msg_init_data(&m, s->p, s->bytes, release_chunk, &c->inflight);
        if (zmq_msg_send(&m, c->push, 0) < 0) {
            zmq_msg_close(&m);
            return ld_fail(LD_EDEVICE, "%s: send: %s", kind_names[g->kind], zmq_strerror(errno));
        }
        g->qhead++;
    }
    return LD_OK;
}

/* is something wrong (a lost peer, a silent ring, Ctrl-C)? */
static int check(ring *g) {
    ld_cluster *c = g->c;
    double now = cl_now();
    cl_tick(c, now);                /* this process's own stall names it (cl_trouble) */
    if (ld_interrupt_flag)
        return ld_fail(LD_EINTERRUPT, "interrupted in %s #%llu; the other workers are left waiting, so this cluster "
                       "cannot be used any more", kind_names[g->kind], (unsigned long long)g->seq);
    int r;
    char msg[512];
    int t = cl_trouble(c, &r, msg, sizeof msg);
    if (t == PEER_LOST)
        return ld_fail(LD_EDEVICE, "%s #%llu failed: %s", kind_names[g->kind], (unsigned long long)g->seq, msg);
    double grace = c->timeout < 3 ? c->timeout : 3;
    if (t == PEER_DONE && now - g->last_progress > grace)
        return ld_fail(LD_EDEVICE, "%s #%llu failed: %s while this %s waits in it (the %ss made different collective calls)",
                       kind_names[g->kind], (unsigned long long)g->seq, msg, c->kind, c->kind);
    if (now - g->last_progress > c->timeout)
        return ld_fail(LD_EDEVICE, "%s #%llu timed out: nothing from %s for %.0f s (it may be stuck, or the %ss called "
                       "different collectives)", kind_names[g->kind], (unsigned long long)g->seq, c->peers[g->prev].name,
                       c->timeout, c->kind);
    return LD_OK;
}

/* A received chunk: a ZeroMQ message, or a slot of the shared-memory link. */
typedef struct { zmq_msg_t m; int shm; const void *p; size_t n; } chunk_in;

static void chunk_done(ld_cluster *c, chunk_in *in) {
    if (in->shm) cl_shm_release(c->shm_rx);
    else zmq_msg_close(&in->m);
}

/* Waiting on the shared-memory link: spin briefly, then yield the core for
   a while (the other ranks share it), then sleep in short naps; `since` is
   when this wait began. */
static void shm_pause(double since) {
    double w = cl_now() - since;
    if (w < 20e-6) { for (int i = 0; i < 64; i++) __asm__ __volatile__("" ::: "memory"); }
    else if (w < 2e-3) sched_yield();
    else { struct timespec ts = {0, 50 * 1000}; nanosleep(&ts, NULL); }
}

/* one chunk from ZeroMQ: 1 got it, 0 none yet, -1 error */
static int zmq_chunk(ring *g, ring_hdr *h, chunk_in *in) {
    ld_cluster *c = g->c;
    zmq_msg_t hm;
    zmq_msg_init(&hm);
    if (zmq_msg_recv(&hm, c->pull, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&hm);
        if (errno != EAGAIN && errno != EINTR) {
            ld_fail(LD_EDEVICE, "%s: receive: %s", kind_names[g->kind], zmq_strerror(errno));
            return -1;
        }
        return 0;
    }
    int more = zmq_msg_more(&hm);
    int ok = zmq_msg_size(&hm) == sizeof *h && more;
    if (ok) memcpy(h, zmq_msg_data(&hm), sizeof *h);
    zmq_msg_close(&hm);
    zmq_msg_init(&in->m);
    if (more && zmq_msg_recv(&in->m, c->pull, 0) < 0) { zmq_msg_close(&in->m); ok = 0; more = 0; }
    else if (!more) { zmq_msg_close(&in->m); ok = 0; }
    if (ok && zmq_msg_more(&in->m)) {   /* drain a longer message */
        ok = 0;
        zmq_msg_t x;
        do { zmq_msg_init(&x); zmq_msg_recv(&x, c->pull, 0); more = zmq_msg_more(&x); zmq_msg_close(&x); } while (more);
        zmq_msg_close(&in->m);
    }
    if (!ok) {
        ld_fail(LD_EFORMAT, "%s #%llu: a malformed message on the ring from %s", kind_names[g->kind],
                (unsigned long long)g->seq, c->peers[g->prev].name);
        return -1;
    }
    in->shm = 0;
    in->p = zmq_msg_data(&in->m);
    in->n = zmq_msg_size(&in->m);
    return 1;
}

/* the next chunk from the previous rank, which must be (step, chunk) of `bytes` bytes */
static int next_chunk(ring *g, uint32_t step, uint32_t chunk, size_t bytes, chunk_in *in) {
    ld_cluster *c = g->c;
    double since = cl_now(), checked = since;
    for (;;) {
        if (flush(g)) return ld_error_status();
        ring_hdr h;
        int got = 0;
        int shm = c->shm_rx && cl_shm_attached(c->shm_rx);
        if (shm && (in->p = cl_shm_recv(c->shm_rx, &h, sizeof h, &in->n))) { in->shm = 1; got = 1; }
        else if (!shm && (got = zmq_chunk(g, &h, in)) < 0) return ld_error_status();
        if (got) {
            if (h.magic != RING_MAGIC) {
                chunk_done(c, in);
                return ld_fail(LD_EFORMAT, "%s #%llu: a malformed message on the ring from %s", kind_names[g->kind],
                               (unsigned long long)g->seq, c->peers[g->prev].name);
            }
            /* shapes first: tensors of other shapes cut their chunks at other places */
            if (h.kind == (uint32_t)g->kind && h.seq == g->seq && h.total == g->total && h.shapes != g->shapes) {
                chunk_done(c, in);
                return ld_fail(LD_EARG, "%s #%llu: the %ss disagree on the shapes: %s reduces %llu floats in other shapes "
                               "than this %s's (%s)", kind_names[g->kind], (unsigned long long)g->seq, c->kind,
                               c->peers[g->prev].name, (unsigned long long)g->total, c->kind,
                               g->shapes_text ? g->shapes_text : "flat buffer");
            }
            if (h.kind != (uint32_t)g->kind || h.seq != g->seq || h.total != g->total || h.step != step ||
                h.chunk != chunk || in->n != bytes) {
                chunk_done(c, in);
                return ld_fail(LD_EDEVICE, "the %ss disagree on the collective: %s sent %s #%llu of %llu %s, this %s "
                               "expects %s #%llu of %llu", c->kind, c->peers[g->prev].name,
                               h.kind < 3 ? kind_names[h.kind] : "?", (unsigned long long)h.seq,
                               (unsigned long long)h.total, h.kind == K_BCAST ? "bytes" : "floats", c->kind,
                               kind_names[g->kind], (unsigned long long)g->seq, (unsigned long long)g->total);
            }
            g->last_progress = cl_now();
            return LD_OK;
        }
        if (shm) {
            double now = cl_now();
            if (now - checked > 1e-3) { checked = now; if (check(g)) return ld_error_status(); }
            shm_pause(since);
            continue;
        }
        if (check(g)) return ld_error_status();
        zmq_pollitem_t it[2] = {{c->pull, 0, ZMQ_POLLIN, 0}, {c->push, 0, ZMQ_POLLOUT, 0}};
        /* a sender that attaches to the shared-memory link mid-wait is noticed within 5 ms */
        zmq_poll(it, g->qhead < g->qtail && !c->shm_tx ? 2 : 1, c->shm_rx ? 5 : 50);
    }
}

/* every zero-copy chunk released by ZeroMQ (so the caller may reuse its buffer) */
static int drain(ring *g) {
    ld_cluster *c = g->c;
    double since = cl_now();
    while (__atomic_load_n(&c->inflight, __ATOMIC_ACQUIRE) > 0 || g->qhead < g->qtail) {
        if (flush(g)) return ld_error_status();
        if (check(g)) return ld_error_status();
        if (c->shm_tx) { shm_pause(since); continue; }
        struct timespec ts = {0, 200 * 1000};
        nanosleep(&ts, NULL);
    }
    return LD_OK;
}

static int ring_fail(ring *g) {
    ld_cluster *c = g->c;
    int st = ld_error_status();
    /* drop what ZeroMQ still holds of the caller's buffer before returning */
    if (c->push) {
        int zero = 0;
        zmq_setsockopt(c->push, ZMQ_LINGER, &zero, sizeof zero);
        zmq_close(c->push);
        c->push = NULL;
    }
    free(g->q);
    return cl_break(c, st ? st : LD_EDEVICE);
}

static int begin(ld_cluster *c, ring *g, int kind, uint64_t total) {
    memset(g, 0, sizeof *g);
    g->c = c;
    g->kind = kind;
    g->total = total;
    g->prev = (c->rank + c->size - 1) % c->size;
    g->last_progress = cl_now();
    if (ld_cluster_check(c)) {
        char msg[600];
        snprintf(msg, sizeof msg, "%s", ld_error());
        return ld_fail((ld_status)ld_error_status(), "%s #%llu: %s", kind_names[kind], (unsigned long long)c->coll_seq + 1, msg);
    }
    if (c->mpi) {
        g->seq = ++c->coll_seq;
        return LD_OK;
    }
    if (!c->data_plane || !c->push) return ld_fail(LD_EARG, "this cluster has no data plane");
    g->seq = ++c->coll_seq;
    return LD_OK;
}

/* Under MPI the ring's chunk headers, which carry the shapes, are not sent.
   One small MPI_Allreduce (a sum) gives every rank every rank's element
   count and shape hash: rank r writes its two 64-bit values into its own
   slot as 16-bit pieces (exact in float32), the others write zeros. Each
   rank compares every slot with rank 0's, so all of them fail together (as
   the ring does), naming who differs, instead of handing MPI_Allreduce
   counts that disagree. */
enum { SHAPE_PIECES = 8 };   /* 2 x 64 bits in 16-bit pieces */
static void shape_pieces(uint64_t n, uint64_t hash, float *out) {
    for (int i = 0; i < 4; i++) {
        out[i] = (float)((n >> (16 * i)) & 0xffff);
        out[4 + i] = (float)((hash >> (16 * i)) & 0xffff);
    }
}
static int mpi_same_shapes(ld_cluster *c, const ring *g, int64_t n) {
    float *all = calloc((size_t)c->size * SHAPE_PIECES, sizeof *all);
    if (!all) return ld_fail(LD_ENOMEM, "out of memory");
    shape_pieces((uint64_t)n, g->shapes, all + (size_t)c->rank * SHAPE_PIECES);
    if (ld_mpi_all_reduce(all, c->size * SHAPE_PIECES, 0)) { free(all); return ld_error_status(); }
    uint64_t root_n = 0;
    for (int i = 0; i < 4; i++) root_n |= (uint64_t)all[i] << (16 * i);
    char names[640] = "";
    size_t at = 0;
    int n_diff = 0, differs = 0;
    for (int r = 1; r < c->size; r++) {
        if (!memcmp(all + (size_t)r * SHAPE_PIECES, all, sizeof *all * SHAPE_PIECES)) continue;   /* as rank 0's */
        if (r == c->rank) differs = 1;
        if (at < sizeof names - 1) {
            at += (size_t)snprintf(names + at, sizeof names - at, "%s%s", n_diff ? ", " : "", c->peers[r].name);
            if (at >= sizeof names) at = sizeof names - 1;
        }
        n_diff++;
    }
    free(all);
    if (n_diff == 0) return LD_OK;
    const char *text = g->shapes_text ? g->shapes_text : "flat buffer";
    if (differs)
        return ld_fail(LD_EARG, "%s #%llu: the %ss disagree on the shapes: %s reduces %llu floats in other shapes "
                       "than this %s's (%s)", kind_names[g->kind], (unsigned long long)g->seq, c->kind,
                       c->peers[0].name, (unsigned long long)root_n, c->kind, text);
    return ld_fail(LD_EARG, "%s #%llu: the %ss disagree on the shapes: %s reduce%s other shapes than this %s's (%s)",
                   kind_names[g->kind], (unsigned long long)g->seq, c->kind, names, n_diff == 1 ? "s" : "", c->kind, text);
}

/* A chunk's arithmetic (add, add and scale, copy) split over the calling
   thread's CPU pool: a process of K on a host of many cores owns cores/K
   threads, and its ring adding and copying megabytes on one of them while
   the others waited was most of the step's communication (2 processes on
   16 cores: 8 threads each). Parts of at least 64 KB; each element is
   computed as before. */
enum { CHUNK_ADD, CHUNK_ADD_SCALE, CHUNK_COPY };
typedef struct { float *dst; const float *src; int64_t n; int op; float scale; } chunk_job;
static void chunk_part(void *ctx, int p, int np) {
    chunk_job *j = ctx;
    int64_t lo, hi;
    ld_cpu_range(j->n, p, np, &lo, &hi);
    float *d = j->dst;
    const float *s = j->src;
    if (j->op == CHUNK_COPY) { if (hi > lo) memcpy(d + lo, s + lo, (size_t)(hi - lo) * sizeof(float)); }
    else if (j->op == CHUNK_ADD_SCALE) for (int64_t i = lo; i < hi; i++) d[i] = (d[i] + s[i]) * j->scale;
    else for (int64_t i = lo; i < hi; i++) d[i] += s[i];
}
static void chunk_run(float *dst, const float *src, int64_t n, int op, float scale) {
    chunk_job j = {dst, src, n, op, scale};
    int64_t want = n >> 14;   /* 64 KB of floats */
    ld_cpu_parallel(chunk_part, &j, want < 1 ? 1 : want > 64 ? 64 : (int)want);
}
void cl_copy_par(void *dst, const void *src, size_t bytes) {
    if (bytes % sizeof(float) || bytes < 65536) { memcpy(dst, src, bytes); return; }
    chunk_run(dst, src, (int64_t)(bytes / sizeof(float)), CHUNK_COPY, 1.0f);
}

/* The buffer reduced in place: the concatenation of k pieces (a list of
   tensors, each in its own memory), so a list is reduced where it lies
   instead of being packed into one buffer and unpacked again (two more
   passes over every gradient, each step). */
typedef struct { int k; float *const *p; const int64_t *len; } pieces;

/* The contiguous run of the buffer at element e, at most max elements:
   its address; *run its length. A chunk never spans two pieces, so every
   rank (same shapes) cuts the same chunks. */
static float *piece_run(const pieces *f, int64_t e, int64_t max, int64_t *run) {
    int i = 0;
    while (i < f->k - 1 && e >= f->len[i]) e -= f->len[i++];
    int64_t left = f->len[i] - e;
    *run = left < max ? left : max;
    return f->p[i] + e;
}

/* the chunk size for a segment of len floats, chunks of at most ce */
static int64_t seg_chunk(int64_t len, int64_t ce) {
    if (len <= ce) return ce;
    int64_t nch = (len + ce - 1) / ce, cs = ((len + nch - 1) / nch + 15) & ~(int64_t)15;
    return cs < ce ? cs : ce;
}

/* shapes, shapes_text: as ring.shapes and ring.shapes_text */
static int all_reduce(ld_cluster *c, const pieces *f, int64_t n, int mean, uint64_t shapes, const char *shapes_text) {
    int N = c->size, r = c->rank;
    if (n < 0) return ld_fail(LD_EARG, "all_reduce: negative length");
    if (N == 1) return LD_OK;
    double t0 = cl_now();
    ring g;
    if (begin(c, &g, K_ALLREDUCE, (uint64_t)n)) return ld_error_status();
    g.shapes = shapes;
    g.shapes_text = shapes_text;
    if (c->mpi) {
        /* one piece: the caller packs a list for MPI */
        if (mpi_same_shapes(c, &g, n) || ld_mpi_all_reduce(f->p[0], n, mean)) return cl_break(c, ld_error_status());
        c->stats.calls++;
        c->stats.bytes += n * (int64_t)sizeof(float);
        c->stats.seconds += cl_now() - t0;
        return LD_OK;
    }
    int64_t base = n / N, rem = n % N;
    int64_t ce = (int64_t)(c->chunk_bytes / sizeof(float));
    if (ce < 1) ce = 1;
#define SEG_OFF(i) ((int64_t)(i) * base + ((i) < rem ? (i) : rem))
#define SEG_LEN(i) (base + ((i) < rem ? 1 : 0))
    /* a segment's chunks, as many as chunk_bytes asks for but of equal size
       (16-float multiples): a segment of 1.07 MB was a 1 MB chunk and a
       70 KB one, so the next rank waited for almost all of it before it
       could add and forward anything; two halves pipeline */
#define SEG_CHUNK(len) seg_chunk(len, ce)
    {
        int64_t off = SEG_OFF(r), len = SEG_LEN(r), run, cs = SEG_CHUNK(len);
        for (int64_t j = 0, at = 0; at < len; j++, at += run) {
            float *src = piece_run(f, off + at, len - at < cs ? len - at : cs, &run);
            if (enqueue(&g, 0, (uint32_t)j, src, (size_t)run * sizeof(float))) return ring_fail(&g);
        }
    }
    float scale = 1.0f / (float)N;
    for (int u = 0; u <= 2 * N - 3; u++) {
        int x = ((r - u - 1) % N + N) % N;
        int64_t off = SEG_OFF(x), len = SEG_LEN(x), k, cs = SEG_CHUNK(len);
        for (int64_t j = 0, at = 0; at < len; j++, at += k) {
            float *dst = piece_run(f, off + at, len - at < cs ? len - at : cs, &k);
            size_t bytes = (size_t)k * sizeof(float);
            chunk_in m;
            if (next_chunk(&g, (uint32_t)u, (uint32_t)j, bytes, &m)) return ring_fail(&g);
            const float *src = m.p;
            chunk_run(dst, src, k, u >= N - 1 ? CHUNK_COPY : u == N - 2 && mean ? CHUNK_ADD_SCALE : CHUNK_ADD, scale);
            chunk_done(g.c, &m);
            if (u + 1 <= 2 * N - 3 && enqueue(&g, (uint32_t)u + 1, (uint32_t)j, dst, bytes)) return ring_fail(&g);
        }
    }
#undef SEG_OFF
#undef SEG_LEN
#undef SEG_CHUNK
    if (drain(&g)) return ring_fail(&g);
    free(g.q);
    c->stats.calls++;
    c->stats.bytes += n * (int64_t)sizeof(float);
    c->stats.seconds += cl_now() - t0;
    return LD_OK;
}

int ld_cluster_all_reduce(ld_cluster *c, float *buf, int64_t n, int mean) {
    pieces f = {1, &buf, &n};
    return all_reduce(c, &f, n, mean, 0, NULL);
}

int ld_cluster_barrier(ld_cluster *c) {
    if (c->mpi && c->size > 1) {
        ring g;
        if (begin(c, &g, K_ALLREDUCE, 0)) return ld_error_status();
        return ld_mpi_barrier() ? cl_break(c, ld_error_status()) : LD_OK;
    }
    float x = 0;
    return ld_cluster_all_reduce(c, &x, 1, 0);
}

int ld_cluster_broadcast(ld_cluster *c, int root, void *buf, size_t nbytes) {
    int N = c->size;
    if (root < 0 || root >= N) return ld_fail(LD_EARG, "broadcast: root %d is not in [0, %d)", root, N);
    if (N == 1) return LD_OK;
    ring g;
    if (begin(c, &g, K_BCAST, nbytes)) return ld_error_status();
    if (c->mpi) return ld_mpi_broadcast(root, buf, nbytes) ? cl_break(c, ld_error_status()) : LD_OK;
    size_t cb = c->chunk_bytes;
    char *p = buf;
    int next = (c->rank + 1) % N;
    for (size_t j = 0; j * cb < nbytes; j++) {
        size_t a = j * cb, b = a + cb < nbytes ? a + cb : nbytes;
        if (c->rank == root) {
            if (enqueue(&g, 0, (uint32_t)j, p + a, b - a)) return ring_fail(&g);
            continue;
        }
        chunk_in m;
        if (next_chunk(&g, 0, (uint32_t)j, b - a, &m)) return ring_fail(&g);
        memcpy(p + a, m.p, b - a);
        chunk_done(g.c, &m);
        if (next != root && enqueue(&g, 0, (uint32_t)j, p + a, b - a)) return ring_fail(&g);
    }
    if (drain(&g)) return ring_fail(&g);
    free(g.q);
    return LD_OK;
}

int ld_cluster_all_reduce_tensors(ld_cluster *c, int k, ld_tensor *const *t, int mean) {
    int64_t total = 0;
    for (int i = 0; i < k; i++) {
        ld_tensor *x = t[i];
        if (!x || x->dtype != LD_F32 || !ld_tensor_is_contiguous(x))
            return ld_fail(LD_EARG, "all_reduce: tensor %d is not a contiguous float32 tensor", i + 1);
        if (!ld_device_is_host(x->storage->device))
            return ld_fail(LD_EDEVICE, "all_reduce: tensor %d is on %s; the ring reduces host tensors (GPU tensors go "
                           "through the NCCL backend of the CUDA plugin)", i + 1, x->storage->device->name);
        if (ld_device_is_async(x->storage->device)) ld_device_synchronize(x->storage->device);
        total += ld_tensor_numel(x);
    }
    if (c->size == 1) return LD_OK;
    /* Every rank must reduce the same shapes, not only as many floats: the
       header carries an FNV-1a hash of the list, a message the first shapes. */
    uint64_t hs = 1469598103934665603ull;
#define MIX(v) (hs = (hs ^ (uint64_t)(v)) * 1099511628211ull)
    MIX(k);
    char text[200];
    size_t tl = 0;
    text[0] = 0;
    for (int i = 0; i < k; i++) {
        MIX(t[i]->ndim);
        for (int d = 0; d < t[i]->ndim; d++) MIX(t[i]->shape[d]);
        if (i < 4 && tl < sizeof text - 40) {
            char sb[96];
            ld_shape_fmt(t[i]->ndim, t[i]->shape, sb, sizeof sb);
            tl += (size_t)snprintf(text + tl, sizeof text - tl, "%s%s", i ? ", " : "", sb);
        } else if (i == 4 && tl < sizeof text - 8) {
            tl += (size_t)snprintf(text + tl, sizeof text - tl, ", ...");
        }
    }
#undef MIX
    if (hs == 0) hs = 1;
    /* in place, unless MPI needs one buffer or two tensors share memory
       (each would be summed twice); then packed and unpacked */
    float *pv[64];
    int64_t lv[64];
    int packed = k > 64 || (c->mpi && k > 1);
    for (int i = 0; i < k && !packed; i++) {
        const char *a0 = (const char *)t[i]->storage->data + t[i]->offset * 4, *a1 = a0 + ld_tensor_numel(t[i]) * 4;
        pv[i] = (float *)a0;
        lv[i] = ld_tensor_numel(t[i]);
        for (int j = 0; j < i && !packed; j++) {
            const char *b0 = (const char *)pv[j], *b1 = b0 + lv[j] * 4;
            packed = a0 < b1 && b0 < a1 && a1 > a0 && b1 > b0;
        }
    }
    if (!packed) {
        pieces f = {k, pv, lv};
        return all_reduce(c, &f, total, mean, hs, text);
    }
    float *buf = malloc((size_t)(total ? total : 1) * sizeof(float));
    if (!buf) return ld_fail(LD_ENOMEM, "out of memory");
    int64_t at = 0;
    for (int i = 0; i < k; i++) {
        int64_t m = ld_tensor_numel(t[i]);
        memcpy(buf + at, (float *)t[i]->storage->data + t[i]->offset, (size_t)m * sizeof(float));
        at += m;
    }
    pieces f = {1, &buf, &total};
    int st = all_reduce(c, &f, total, mean, hs, text);
    if (!st) {
        at = 0;
        for (int i = 0; i < k; i++) {
            int64_t m = ld_tensor_numel(t[i]);
            memcpy((float *)t[i]->storage->data + t[i]->offset, buf + at, (size_t)m * sizeof(float));
            at += m;
        }
    }
    free(buf);
    return st;
}

void ld_cluster_stats_get(ld_cluster *c, ld_cluster_stats *s, int reset) {
    *s = c->stats;
    if (reset) memset(&c->stats, 0, sizeof c->stats);
}
