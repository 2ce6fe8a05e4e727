/* ld_autograd.c - gradient tapes and the backward pass. */
#include "ld_autograd.h"
#include "ld_ops.h"
#include "ld_replica.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ld_tape {
    int persistent;
    int used;
    int n_watched, cap_watched;
    ld_tensor **watched;     /* retained; requires_grad set by this tape */
};

static _Thread_local int recording_depth;
static _Thread_local int paused;
static uint64_t node_seq;

ld_tape *ld_tape_new(int persistent) {
    ld_tape *t = calloc(1, sizeof *t);
    if (!t) { ld_fail(LD_ENOMEM, "out of memory"); return NULL; }
    t->persistent = persistent;
    return t;
}

void ld_tape_free(ld_tape *t) {
    if (!t) return;
    for (int i = 0; i < t->n_watched; i++) {
        t->watched[i]->requires_grad = 0;
        ld_tensor_release(t->watched[i]);
    }
    free(t->watched);
    free(t);
}

void ld_tape_push(ld_tape *t) { recording_depth++; }
void ld_tape_pop(ld_tape *t) { if (recording_depth > 0) recording_depth--; }
int ld_tape_recording(void) { return recording_depth > 0 && !paused; }
int ld_tape_pause(int p) { int was = paused; paused = p; return was; }

int ld_tape_watch(ld_tape *t, ld_tensor *x) {
    if (x->dtype != LD_F32) return ld_fail(LD_ETYPE, "only float32 tensors can be watched, got %s", ld_dtype_name(x->dtype));
    if (x->requires_grad || x->grad_fn) return LD_OK;
    if (t->n_watched == t->cap_watched) {
        int cap = t->cap_watched ? 2 * t->cap_watched : 8;
        ld_tensor **w = realloc(t->watched, (size_t)cap * sizeof *w);
        if (!w) return ld_fail(LD_ENOMEM, "out of memory");
        t->watched = w;
        t->cap_watched = cap;
    }
    x->requires_grad = 1;
    t->watched[t->n_watched++] = ld_tensor_retain(x);
    return LD_OK;
}

int ld_needs_grad(const ld_tensor *t) { return t && (t->requires_grad || t->grad_fn); }
#define needs_grad ld_needs_grad

ld_node *ld_record(ld_tensor *out, const char *op, ld_backward_fn bw, int n_in, ld_tensor **in) {
    if (!out || !ld_tape_recording()) return NULL;
    int any = 0;
    for (int i = 0; i < n_in; i++) any |= needs_grad(in[i]);
    if (!any) return NULL;
    ld_node *n = calloc(1, sizeof *n);
    if (!n) return NULL;   /* no gradient then; the op's result is still right */
    n->refcount = 1;
    n->op = op;
    n->backward = bw;
    n->n_in = n_in;
    for (int i = 0; i < n_in; i++) n->in[i] = ld_tensor_retain(in[i]);
    n->out_ndim = out->ndim;
    memcpy(n->out_shape, out->shape, sizeof n->out_shape);
    n->seq = __atomic_add_fetch(&node_seq, 1, __ATOMIC_RELAXED);
    out->grad_fn = n;
    return n;
}

void ld_node_release(ld_node *n) {
    /* Releasing a long chain recursively could overflow the C stack; unlink
       iteratively with an explicit work list. */
    ld_node *stack_small[64];
    ld_node **stack = stack_small;
    int sp = 0, cap = 64;
    stack[sp++] = n;
    while (sp) {
        ld_node *x = stack[--sp];
        if (__atomic_sub_fetch(&x->refcount, 1, __ATOMIC_ACQ_REL) != 0) continue;
        ld_tensor *ts[LD_NODE_MAX_IN + LD_NODE_MAX_SAVED];
        int k = 0;
        for (int i = 0; i < x->n_in; i++) ts[k++] = x->in[i];
        for (int i = 0; i < LD_NODE_MAX_SAVED; i++) if (x->saved[i]) ts[k++] = x->saved[i];
        free(x);
        for (int i = 0; i < k; i++) {
            ld_tensor *t = ts[i];
            if (!t) continue;
            /* A tensor about to die hands its node to the work list instead of
               releasing it recursively. (An atomic load: an executor may be
               dropping its own reference to t at this moment; TSan.) */
            if (__atomic_load_n(&t->refcount, __ATOMIC_ACQUIRE) == 1 && t->grad_fn) {
                ld_node *child = t->grad_fn;
                t->grad_fn = NULL;
                if (sp == cap) {
                    ld_node **ns = malloc((size_t)cap * 2 * sizeof *ns);
                    if (!ns) { ld_node_release(child); ld_tensor_release(t); continue; }
                    memcpy(ns, stack, (size_t)sp * sizeof *ns);
                    if (stack != stack_small) free(stack);
                    stack = ns;
                    cap *= 2;
                }
                stack[sp++] = child;
            }
            ld_tensor_release(t);
        }
    }
    if (stack != stack_small) free(stack);
}

/* ---- backward pass ---------------------------------------------------- */
typedef struct { const void *key; ld_tensor *grad; } gslot;
typedef struct { gslot *s; size_t cap, n; } gmap;

static size_t hash_ptr(const void *p) { return ((uintptr_t)p >> 4) * 0x9e3779b97f4a7c15ULL; }

static gslot *gmap_find(gmap *m, const void *key, int insert) {
    if (insert && (m->n + 1) * 2 > m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 64;
        gslot *s = calloc(cap, sizeof *s);
        if (!s) return NULL;
        for (size_t i = 0; i < m->cap; i++) {
            if (!m->s[i].key) continue;
            size_t h = hash_ptr(m->s[i].key) & (cap - 1);
            while (s[h].key) h = (h + 1) & (cap - 1);
            s[h] = m->s[i];
        }
        free(m->s);
        m->s = s;
        m->cap = cap;
    }
    if (!m->cap) return NULL;
    size_t h = hash_ptr(key) & (m->cap - 1);
    while (m->s[h].key) {
        if (m->s[h].key == key) return &m->s[h];
        h = (h + 1) & (m->cap - 1);
    }
    if (!insert) return NULL;
    m->s[h].key = key;
    m->n++;
    return &m->s[h];
}

static const void *grad_key(const ld_tensor *t) { return t->grad_fn ? (const void *)t->grad_fn : (const void *)t; }

static int accumulate(gmap *m, const ld_tensor *t, ld_tensor *g) {
    gslot *s = gmap_find(m, grad_key(t), 1);
    if (!s) { ld_tensor_release(g); return ld_fail(LD_ENOMEM, "out of memory"); }
    if (!s->grad) { s->grad = g; return LD_OK; }
    ld_tensor_materialize(s->grad);   /* a variable used twice: its gradients add up */
    ld_tensor_materialize(g);
    ld_tensor *sum = ld_add(s->grad, g);
    ld_tensor_release(g);
    if (!sum) return ld_error_status();
    ld_tensor_release(s->grad);
    s->grad = sum;
    return LD_OK;
}

static int cmp_seq_desc(const void *a, const void *b) {
    uint64_t x = (*(ld_node *const *)a)->seq, y = (*(ld_node *const *)b)->seq;
    return x < y ? 1 : x > y ? -1 : 0;
}

int ld_tape_persistent(const ld_tape *t) { return t->persistent; }

/* A non-persistent tape's one use (gradient or jacobian), or an error */
static int use_tape(ld_tape *t, const char *what) {
    if (t->used && !t->persistent)
        return ld_fail(LD_EARG, "%s() can only be called once on a non-persistent tape "
                                "(use GradientTape{persistent=true})", what);
    t->used = 1;
    return LD_OK;
}

/* The backward pass from target, whose gradient is seed (its shape, on its
   device, float32; NULL: ones): grads[i] = d target / d sources_in[i]. */
static int run_backward(ld_tensor *target, ld_tensor *seed_in, int n, ld_tensor **sources_in, ld_tensor **grads) {
    for (int i = 0; i < n; i++) grads[i] = NULL;
    if (!ld_dtype_is_float(target->dtype))
        return ld_fail(LD_ETYPE, "the target of gradient() must be float32, float16 or bfloat16, not %s",
                       ld_dtype_name(target->dtype));
    /* a mirrored variable stands for the current replica's copy */
    ld_tensor *src_small[64], **sources = n <= 64 ? src_small : malloc(sizeof *sources * (size_t)n);
    if (!sources) return ld_fail(LD_ENOMEM, "out of memory");
    for (int i = 0; i < n; i++) sources[i] = ld_var(sources_in[i]);
    int st = LD_OK;
    int saved_paused = paused;
    paused = 1;   /* the backward pass itself is not recorded */

    /* collect the nodes reachable from the target */
    size_t nn = 0, cap = 64;
    ld_node **nodes = malloc(cap * sizeof *nodes);
    gmap seen = {0}, gm = {0};
    if (!nodes) { st = ld_fail(LD_ENOMEM, "out of memory"); goto done; }
    if (target->grad_fn) {
        size_t head = 0;
        nodes[nn++] = target->grad_fn;
        gmap_find(&seen, target->grad_fn, 1);
        while (head < nn) {
            ld_node *x = nodes[head++];
            for (int i = 0; i < x->n_in; i++) {
                ld_node *c = x->in[i] ? x->in[i]->grad_fn : NULL;
                if (!c || gmap_find(&seen, c, 0)) continue;
                gmap_find(&seen, c, 1);
                if (nn == cap) {
                    ld_node **ns = realloc(nodes, cap * 2 * sizeof *ns);
                    if (!ns) { st = ld_fail(LD_ENOMEM, "out of memory"); goto done; }
                    nodes = ns;
                    cap *= 2;
                }
                nodes[nn++] = c;
            }
        }
        qsort(nodes, nn, sizeof *nodes, cmp_seq_desc);
    }
    ld_tensor *seed = seed_in ? ld_tensor_retain(seed_in)
                              : ld_tensor_full(LD_F32, target->ndim, target->shape, 1.0, target->storage->device);
    if (!seed) { st = ld_error_status(); goto done; }
    if ((st = accumulate(&gm, target, seed))) goto done;

    for (size_t k = 0; k < nn; k++) {
        ld_node *x = nodes[k];
        gslot *s = gmap_find(&gm, x, 0);
        if (!s || !s->grad) continue;
        ld_tensor *gin[LD_NODE_MAX_IN] = {0};
        if ((st = x->backward(x, s->grad, gin))) {
            for (int i = 0; i < x->n_in; i++) ld_tensor_release(gin[i]);
            char msg[400];
            snprintf(msg, sizeof msg, "%s", ld_error());
            st = ld_fail(st, "gradient of %s: %s", x->op, msg);
            goto done;
        }
        for (int i = 0; i < x->n_in; i++) {
            if (!gin[i]) continue;
            if (!needs_grad(x->in[i])) { ld_tensor_release(gin[i]); continue; }
            if ((st = accumulate(&gm, x->in[i], gin[i]))) goto done;
        }
        /* this node's output gradient is no longer needed, unless asked for */
        int wanted = 0;
        for (int i = 0; i < n; i++) wanted |= sources[i]->grad_fn == x;
        /* (found again: accumulating into the inputs may have grown the map, moving its slots) */
        if (!wanted && (s = gmap_find(&gm, x, 0))) { ld_tensor_release(s->grad); s->grad = NULL; }
    }
    for (int i = 0; i < n; i++) {
        gslot *s = gmap_find(&gm, grad_key(sources[i]), 0);
        if (s && s->grad) {
            grads[i] = ld_tensor_retain(s->grad);
        } else {
            grads[i] = ld_tensor_zeros(LD_F32, sources[i]->ndim, sources[i]->shape, sources[i]->storage->device);
            if (!grads[i]) { st = ld_error_status(); goto done; }
        }
    }
done:
    paused = saved_paused;
    for (size_t i = 0; i < gm.cap; i++) ld_tensor_release(gm.s ? gm.s[i].grad : NULL);
    free(gm.s);
    free(seen.s);
    free(nodes);
    if (st) for (int i = 0; i < n; i++) { ld_tensor_release(grads[i]); grads[i] = NULL; }
    if (sources != src_small) free(sources);
    return st;
}

int ld_tape_gradient(ld_tape *t, ld_tensor *target, int n, ld_tensor **sources, ld_tensor **grads) {
    return ld_tape_gradient_seeded(t, target, NULL, n, sources, grads);
}

/* seed: target's shape; any float dtype and device (taken as float32 on target's) */
static ld_tensor *seed_for(ld_tensor *target, ld_tensor *g) {
    char b1[LD_SHAPE_STR_MAX], b2[LD_SHAPE_STR_MAX];
    int same = g->ndim == target->ndim;
    for (int i = 0; same && i < g->ndim; i++) same = g->shape[i] == target->shape[i];
    if (!same) {
        ld_fail(LD_ESHAPE, "gradient(): output_gradients of shape %s for a target of shape %s (they must be equal)",
                ld_shape_str(g, b1, sizeof b1), ld_shape_str(target, b2, sizeof b2));
        return NULL;
    }
    if (!ld_dtype_is_float(g->dtype)) {
        ld_fail(LD_ETYPE, "gradient(): output_gradients must be float32, float16 or bfloat16, not %s",
                ld_dtype_name(g->dtype));
        return NULL;
    }
    ld_tensor *d = ld_to_device(g, target->storage->device), *c = d ? ld_contiguous(d) : NULL;
    ld_tensor *f = c && c->dtype != LD_F32 ? ld_cast(c, LD_F32) : c ? ld_tensor_retain(c) : NULL;
    ld_tensor_release(d); ld_tensor_release(c);
    return f;
}

int ld_tape_gradient_seeded(ld_tape *t, ld_tensor *target, ld_tensor *output_grad, int n, ld_tensor **sources,
                            ld_tensor **grads) {
    for (int i = 0; i < n; i++) grads[i] = NULL;
    ld_tensor *seed = output_grad ? seed_for(target, output_grad) : NULL;   /* checked before the tape's use */
    if ((output_grad && !seed) || use_tape(t, "gradient")) { ld_tensor_release(seed); return ld_error_status(); }
    int st = run_backward(target, seed, n, sources, grads);
    ld_tensor_release(seed);
    return st;
}

int ld_tape_jacobian(ld_tape *t, ld_tensor *target, ld_tensor *source_in, ld_tensor **out) {
    *out = NULL;
    ld_tensor *source = ld_var(source_in);
    int64_t m = ld_tensor_numel(target), k = ld_tensor_numel(source), js[LD_MAX_DIMS], eye_s[2] = {m, m},
            row_s[2] = {m, k};
    if (target->ndim + source->ndim > LD_MAX_DIMS)
        return ld_fail(LD_ESHAPE, "jacobian(): a target of %d dimensions and a source of %d make more than %d",
                       target->ndim, source->ndim, LD_MAX_DIMS);
    if (use_tape(t, "jacobian")) return ld_error_status();
    for (int i = 0; i < target->ndim; i++) js[i] = target->shape[i];
    for (int i = 0; i < source->ndim; i++) js[target->ndim + i] = source->shape[i];
    /* row i: the gradient of target's element i, seeded by row i of the identity */
    /* written here on the host: empty, not zeros (under a strategy's run the host device queues,
       and a queued fill would run after these writes and clear them) */
    ld_tensor *eye = ld_tensor_empty(LD_F32, 2, eye_s, NULL);
    float *e = eye ? ld_tensor_data_unsynced(eye) : NULL;
    if (e) memset(e, 0, sizeof(float) * (size_t)(m * m));
    for (int64_t i = 0; e && i < m; i++) e[i * m + i] = 1;
    ld_tensor *eye_d = eye ? ld_to_device(eye, target->storage->device) : NULL;
    ld_tensor *j = eye_d ? ld_tensor_empty(LD_F32, target->ndim + source->ndim, js, source->storage->device) : NULL;
    ld_tensor *rows = j ? ld_reshape(j, 2, row_s) : NULL;
    int st = rows ? LD_OK : ld_error_status();
    for (int64_t i = 0; !st && i < m; i++) {
        ld_tensor *er = ld_select(eye_d, 0, i), *seed = er ? ld_reshape(er, target->ndim, target->shape) : NULL;
        ld_tensor *g = NULL, *dst = seed ? ld_select(rows, 0, i) : NULL, *gf = NULL;
        st = dst ? run_backward(target, seed, 1, &source, &g) : ld_error_status();
        if (!st && !(gf = ld_reshape(g, 1, &k))) st = ld_error_status();
        if (!st) st = ld_copy_into(dst, gf);
        ld_tensor_release(er); ld_tensor_release(seed); ld_tensor_release(g); ld_tensor_release(dst);
        ld_tensor_release(gf);
    }
    ld_tensor_release(eye); ld_tensor_release(eye_d); ld_tensor_release(rows);
    if (st) { ld_tensor_release(j); return st; }
    *out = j;
    return LD_OK;
}
