/* test_data.c - dataset pipelines (engine/ld_data.c). */
#include "test_util.h"
#include "ld_data.h"
#include "ld_device.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* bytes of live tensors on cpu:0 (the host allocator's count includes the backend's cache) */
static size_t live_bytes(void) { return __atomic_load_n(&ld_device_cpu()->bytes_in_use, __ATOMIC_RELAXED); }

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
static int contains(const char *hay, const char *needle) {
    if (!strstr(hay, needle)) { printf("#   message '%s' lacks '%s'\n", hay, needle); return 0; }
    return 1;
}

/* Run one epoch; store every value of component 0 (flattened) in vals and each
   element's dim-0 size in sizes. Returns the element count, or -1 on error. */
static int64_t drain(ld_dataset *ds, double *vals, int64_t maxv, int64_t *nvals, int64_t *sizes, int64_t maxs) {
    ld_dataset_iter *it = ld_dataset_iter_new(ds);
    if (!it) return -1;
    ld_element e = {0};
    int64_t n = 0, nv = 0;
    int r;
    while ((r = ld_dataset_iter_next(it, &e)) == 1) {
        ld_tensor *t = e.t[0];
        if (sizes && n < maxs) sizes[n] = t->ndim ? t->shape[0] : 0;
        int64_t k = ld_tensor_numel(t);
        for (int64_t i = 0; i < k && vals && nv < maxv; i++) vals[nv++] = ld_tensor_get_flat(t, i);
        n++;
        ld_element_clear(&e);
    }
    ld_dataset_iter_free(it);
    if (nvals) *nvals = nv;
    return r < 0 ? -1 : n;
}

static int is_permutation(const double *v, int64_t n) {
    char *seen = calloc((size_t)n, 1);
    int ok = 1;
    for (int64_t i = 0; i < n; i++) {
        int64_t k = (int64_t)v[i];
        if (k < 0 || k >= n || seen[k]) ok = 0;
        else seen[k] = 1;
    }
    free(seen);
    return ok;
}

static ld_tensor *arange_f32(int64_t rows, int64_t cols) {
    int64_t shape[2] = {rows, cols};
    ld_tensor *t = ld_tensor_empty(LD_F32, cols ? 2 : 1, shape, NULL);
    float *p = ld_tensor_data(t);
    for (int64_t i = 0; i < rows * (cols ? cols : 1); i++) p[i] = (float)i;
    return t;
}
static ld_tensor *arange_i64(int64_t n) {
    ld_tensor *t = ld_tensor_empty(LD_I64, 1, &n, NULL);
    int64_t *p = ld_tensor_data(t);
    for (int64_t i = 0; i < n; i++) p[i] = i;
    return t;
}

/* ---- map callbacks ---- */
static int double_it(void *ud, const ld_element *in, ld_element *out) {
    int *calls = ud;
    if (calls) __atomic_add_fetch(calls, 1, __ATOMIC_RELAXED);
    for (int c = 0; c < in->n; c++) {
        ld_tensor *t = ld_tensor_empty(LD_F32, in->t[c]->ndim, in->t[c]->shape, NULL);
        if (!t) return ld_error_status();
        int64_t n = ld_tensor_numel(t);
        for (int64_t i = 0; i < n; i++) ld_tensor_set_flat(t, i, 2 * ld_tensor_get_flat(in->t[c], i));
        out->t[out->n++] = t;
    }
    return LD_OK;
}

typedef struct { pthread_t caller; int wrong_thread; int calls; } thread_probe;
static int on_caller(void *ud, const ld_element *in, ld_element *out) {
    thread_probe *p = ud;
    if (!pthread_equal(pthread_self(), p->caller)) p->wrong_thread++;
    p->calls++;
    out->t[out->n++] = ld_tensor_retain(in->t[0]);
    return LD_OK;
}

static int fail_at_5(void *ud, const ld_element *in, ld_element *out) {
    if (ld_tensor_get_flat(in->t[0], 0) == 5) return ld_fail(LD_EARG, "element five is not welcome");
    out->t[out->n++] = ld_tensor_retain(in->t[0]);
    return LD_OK;
}

/* element i -> a vector of length 1 + i % 2: batching these must fail */
static int ragged(void *ud, const ld_element *in, ld_element *out) {
    int64_t n = 1 + (int64_t)ld_tensor_get_flat(in->t[0], 0) % 2;
    out->t[out->n++] = ld_tensor_zeros(LD_F32, 1, &n, NULL);
    return LD_OK;
}

static int freed;
static void count_free(void *ud) { freed++; }

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    size_t mem0 = live_bytes();
    double vals[4096];
    int64_t sizes[256], nv;

    TEST("range(10):batch(4) gives 4, 4, 2; drop_remainder gives 4, 4") {
        ld_dataset *r = ld_dataset_range(0, 10, 1);
        ld_dataset *b = ld_dataset_batch(r, 4, 0), *bd = ld_dataset_batch(r, 4, 1);
        CHECK(ld_dataset_cardinality(r) == 10 && ld_dataset_cardinality(b) == 3 && ld_dataset_cardinality(bd) == 2);
        CHECK(drain(b, vals, 4096, &nv, sizes, 256) == 3);
        CHECK(sizes[0] == 4 && sizes[1] == 4 && sizes[2] == 2 && nv == 10);
        for (int i = 0; i < 10; i++) CHECK(vals[i] == i);
        CHECK(drain(bd, vals, 4096, &nv, sizes, 256) == 2);
        CHECK(sizes[0] == 4 && sizes[1] == 4 && nv == 8);
        ld_dataset *r2 = ld_dataset_range(10, 0, -3);       /* 10, 7, 4, 1 */
        CHECK(ld_dataset_cardinality(r2) == 4);
        CHECK(drain(r2, vals, 4096, &nv, NULL, 0) == 4 && vals[0] == 10 && vals[3] == 1);
        char d[256];
        CHECK(!strcmp(ld_dataset_describe(bd, d, sizeof d), "range(0, 10, 1) -> batch(4, drop_remainder)"));
        ld_dataset_release(r); ld_dataset_release(b); ld_dataset_release(bd); ld_dataset_release(r2);
    }

    TEST("from_tensor_slices: elements are rows, batches stack rows of every tensor") {
        ld_tensor *x = arange_f32(10, 3), *y = arange_i64(10);
        ld_tensor *xy[2] = {x, y};
        ld_dataset *s = ld_dataset_from_tensor_slices(2, xy);
        CHECK(s && ld_dataset_cardinality(s) == 10 && ld_dataset_components(s) == 2);
        ld_dataset_iter *it = ld_dataset_iter_new(s);
        ld_element e = {0};
        for (int i = 0; i < 10; i++) {
            CHECK(ld_dataset_iter_next(it, &e) == 1);
            CHECK(e.n == 2 && e.t[0]->ndim == 1 && e.t[0]->shape[0] == 3 && e.t[1]->ndim == 0);
            CHECK(e.t[0]->dtype == LD_F32 && e.t[1]->dtype == LD_I64);
            CHECK(ld_tensor_get_flat(e.t[0], 2) == 3 * i + 2 && ld_tensor_get_flat(e.t[1], 0) == i);
            ld_element_clear(&e);
        }
        CHECK(ld_dataset_iter_next(it, &e) == 0);
        CHECK(ld_dataset_iter_next(it, &e) == 0);            /* the end stays the end */
        ld_dataset_iter_free(it);
        ld_dataset *b = ld_dataset_batch(s, 4, 0);
        it = ld_dataset_iter_new(b);
        CHECK(ld_dataset_iter_next(it, &e) == 1);
        CHECK(e.t[0]->shape[0] == 4 && e.t[0]->shape[1] == 3 && e.t[1]->shape[0] == 4);
        CHECK(ld_tensor_get_flat(e.t[0], 11) == 11 && ld_tensor_get_flat(e.t[1], 3) == 3);
        ld_element_clear(&e);
        CHECK(ld_dataset_iter_next(it, &e) == 1);
        CHECK(ld_tensor_get_flat(e.t[0], 0) == 12 && ld_tensor_get_flat(e.t[1], 0) == 4);
        ld_element_clear(&e);
        ld_dataset_iter_free(it);
        char d[256];
        CHECK(contains(ld_dataset_describe(b, d, sizeof d), "from_tensor_slices(10x3 float32, 10 int64) -> batch(4)"));
        ld_dataset_release(b); ld_dataset_release(s);
        ld_tensor_release(x); ld_tensor_release(y);
    }

    TEST("from_tensor_slices: mismatched first dimensions name the shapes; scalars refused") {
        ld_tensor *x = arange_f32(10, 3), *y = arange_i64(7);
        ld_tensor *xy[2] = {x, y};
        CHECK(ld_dataset_from_tensor_slices(2, xy) == NULL);
        CHECK(ld_error_status() == LD_ESHAPE);
        CHECK(contains(ld_error(), "tensor 1 is 10x3, tensor 2 is 7"));
        ld_tensor *sc = ld_tensor_scalar(1, NULL);
        CHECK(ld_dataset_from_tensor_slices(1, &sc) == NULL && contains(ld_error(), "scalar"));
        CHECK(ld_dataset_from_tensor_slices(0, xy) == NULL);
        ld_tensor_release(x); ld_tensor_release(y); ld_tensor_release(sc);
    }

    TEST("shuffle: seeded, reproducible, a permutation; each epoch differs") {
        double a[1000], b[1000], c[1000], d2[1000];
        ld_dataset *r = ld_dataset_range(0, 1000, 1);
        ld_dataset *s1 = ld_dataset_shuffle(r, 100, 42, 1), *s2 = ld_dataset_shuffle(r, 100, 42, 1);
        CHECK(drain(s1, a, 1000, &nv, NULL, 0) == 1000 && nv == 1000);
        CHECK(drain(s2, b, 1000, &nv, NULL, 0) == 1000);
        CHECK(is_permutation(a, 1000));
        CHECK(memcmp(a, b, sizeof a) == 0);               /* same seed, same first epoch */
        int moved = 0;
        for (int i = 0; i < 1000; i++) moved += a[i] != i;
        CHECK(moved > 900);
        CHECK(drain(s1, c, 1000, &nv, NULL, 0) == 1000);  /* second epoch of s1 */
        CHECK(is_permutation(c, 1000) && memcmp(a, c, sizeof a) != 0);
        CHECK(drain(s2, d2, 1000, &nv, NULL, 0) == 1000); /* ... and it is reproducible too */
        CHECK(memcmp(c, d2, sizeof c) == 0);
        ld_dataset *s3 = ld_dataset_shuffle(r, 100, 43, 1);
        CHECK(drain(s3, b, 1000, &nv, NULL, 0) == 1000 && memcmp(a, b, sizeof a) != 0);
        ld_dataset *s4 = ld_dataset_shuffle(r, 100, 42, 0);  /* no reshuffle: same order every epoch */
        CHECK(drain(s4, b, 1000, &nv, NULL, 0) == 1000 && drain(s4, c, 1000, &nv, NULL, 0) == 1000);
        CHECK(memcmp(b, c, sizeof b) == 0);
        /* a buffer of 1 keeps the order; a buffer of 10 draws the first output from the first 10 */
        ld_dataset *s5 = ld_dataset_shuffle(r, 1, 7, 1), *s6 = ld_dataset_shuffle(r, 10, 7, 1);
        CHECK(drain(s5, b, 1000, &nv, NULL, 0) == 1000);
        for (int i = 0; i < 1000; i++) CHECK(b[i] == i);
        int local = 1;
        for (int k = 0; k < 20; k++) {
            CHECK(drain(s6, b, 1000, &nv, NULL, 0) == 1000);
            if (b[0] >= 10) local = 0;
            for (int i = 0; i < 1000; i++) if (b[i] > i + 9) local = 0;   /* never further ahead than the buffer */
        }
        CHECK(local);
        ld_dataset_release(s1); ld_dataset_release(s2); ld_dataset_release(s3);
        ld_dataset_release(s4); ld_dataset_release(s5); ld_dataset_release(s6); ld_dataset_release(r);
    }

    TEST("shuffle of whole elements (after a map) is a reproducible permutation too") {
        ld_dataset *r = ld_dataset_range(0, 300, 1);
        thread_probe probe = {pthread_self(), 0, 0};
        ld_dataset *t = ld_dataset_skip(r, 0);
        ld_dataset *m = ld_dataset_map(t, on_caller, &probe, NULL, 0);    /* identity, element mode */
        ld_dataset *s1 = ld_dataset_shuffle(m, 50, 1, 1);
        double a[300], b[300];
        CHECK(drain(s1, a, 300, &nv, NULL, 0) == 300 && is_permutation(a, 300));
        ld_dataset *s2 = ld_dataset_shuffle(m, 50, 1, 1);
        CHECK(drain(s2, b, 300, &nv, NULL, 0) == 300 && memcmp(a, b, sizeof a) == 0);
        ld_dataset_release(s1); ld_dataset_release(s2); ld_dataset_release(m);
        ld_dataset_release(t); ld_dataset_release(r);
    }

    TEST("repeat, take, skip and their cardinalities") {
        ld_dataset *r = ld_dataset_range(0, 10, 1);
        ld_dataset *r3 = ld_dataset_repeat(r, 3), *rinf = ld_dataset_repeat(r, -1);
        CHECK(ld_dataset_cardinality(r3) == 30 && ld_dataset_cardinality(rinf) == LD_CARD_INFINITE);
        CHECK(drain(r3, vals, 4096, &nv, NULL, 0) == 30 && vals[29] == 9 && vals[10] == 0);
        ld_dataset *t25 = ld_dataset_take(rinf, 25);
        CHECK(ld_dataset_cardinality(t25) == 25);
        CHECK(drain(t25, vals, 4096, &nv, NULL, 0) == 25 && vals[24] == 4);
        ld_dataset *sk = ld_dataset_skip(r3, 27);
        CHECK(ld_dataset_cardinality(sk) == 3 && drain(sk, vals, 4096, &nv, NULL, 0) == 3 && vals[0] == 7);
        ld_dataset *t0 = ld_dataset_take(r, 0), *empty_forever = ld_dataset_repeat(t0, -1);
        CHECK(ld_dataset_cardinality(empty_forever) == 0);
        CHECK(drain(empty_forever, vals, 4096, &nv, NULL, 0) == 0);   /* ends, does not spin */
        ld_dataset *b = ld_dataset_batch(t25, 10, 0), *rb = ld_dataset_repeat(b, 2);
        CHECK(ld_dataset_cardinality(rb) == 6);
        CHECK(drain(rb, vals, 4096, &nv, sizes, 256) == 6 && sizes[2] == 5 && sizes[5] == 5);
        ld_dataset *sh = ld_dataset_shuffle(r, 10, 5, 1), *shr = ld_dataset_repeat(sh, 2);
        CHECK(drain(shr, vals, 4096, &nv, NULL, 0) == 20);
        CHECK(is_permutation(vals, 10) && is_permutation(vals + 10, 10));
        CHECK(memcmp(vals, vals + 10, 10 * sizeof *vals) != 0);   /* each epoch reshuffled */
        ld_dataset_release(r); ld_dataset_release(r3); ld_dataset_release(rinf); ld_dataset_release(t25);
        ld_dataset_release(sk); ld_dataset_release(t0); ld_dataset_release(empty_forever);
        ld_dataset_release(b); ld_dataset_release(rb); ld_dataset_release(sh); ld_dataset_release(shr);
    }

    TEST("prefetch yields exactly the sequence without it") {
        ld_tensor *x = arange_f32(1000, 5), *y = arange_i64(1000);
        ld_tensor *xy[2] = {x, y};
        ld_dataset *s = ld_dataset_from_tensor_slices(2, xy);
        ld_dataset *sh = ld_dataset_shuffle(s, 200, 9, 0);
        ld_dataset *b = ld_dataset_batch(sh, 64, 0);
        ld_dataset *p = ld_dataset_prefetch(b, 3);
        double *a = malloc(5000 * sizeof *a), *c = malloc(5000 * sizeof *c);
        int64_t na, nc;
        CHECK(drain(b, a, 5000, &na, NULL, 0) == 16);
        CHECK(drain(p, c, 5000, &nc, NULL, 0) == 16);
        CHECK(na == 5000 && nc == 5000 && memcmp(a, c, 5000 * sizeof *a) == 0);
        CHECK(ld_dataset_cardinality(p) == 16);
        /* prefetch of a prefetch, and prefetch(0) = none */
        ld_dataset *pp = ld_dataset_prefetch(p, 1), *p0 = ld_dataset_prefetch(b, 0);
        CHECK(p0 == b);
        CHECK(drain(pp, c, 5000, &nc, NULL, 0) == 16 && memcmp(a, c, 5000 * sizeof *a) == 0);
        free(a); free(c);
        ld_dataset_release(pp); ld_dataset_release(p0);
        ld_dataset_release(s); ld_dataset_release(sh); ld_dataset_release(b); ld_dataset_release(p);
        ld_tensor_release(x); ld_tensor_release(y);
    }

    TEST("prefetch: dropping iterators mid-way neither hangs nor leaks") {
        size_t m0 = live_bytes();
        ld_dataset *r = ld_dataset_range(0, 1000000, 1);
        ld_dataset *rep = ld_dataset_repeat(r, -1);
        ld_dataset *b = ld_dataset_batch(rep, 1000, 0);
        ld_dataset *p = ld_dataset_prefetch(b, 4);
        double t0 = now();
        for (int k = 0; k < 200; k++) {
            ld_dataset_iter *it = ld_dataset_iter_new(p);
            CHECK(it != NULL);
            ld_element e = {0};
            for (int j = 0; j < k % 3; j++) {
                CHECK(ld_dataset_iter_next(it, &e) == 1);
                ld_element_clear(&e);
            }
            ld_dataset_iter_free(it);            /* the thread may be blocked on a full queue */
        }
        double dt = now() - t0;
        printf("#   200 prefetch iterators started and dropped in %.3f s\n", dt);
        CHECK(dt < 5 * tu_time_scale());
        ld_dataset_release(p); ld_dataset_release(b); ld_dataset_release(rep); ld_dataset_release(r);
        CHECK(live_bytes() == m0);
    }

    TEST("map with a C function, also on a prefetch thread") {
        int calls = 0;
        freed = 0;
        ld_tensor *x = arange_f32(20, 2);
        ld_dataset *s = ld_dataset_from_tensor_slices(1, &x);
        ld_dataset *m = ld_dataset_map(s, double_it, &calls, count_free, 0);
        ld_dataset *b = ld_dataset_batch(m, 8, 0), *p = ld_dataset_prefetch(b, 2);
        CHECK(ld_dataset_cardinality(p) == 3 && ld_dataset_components(m) == -1);
        CHECK(drain(p, vals, 4096, &nv, sizes, 256) == 3 && nv == 40);
        for (int i = 0; i < 40; i++) CHECK(vals[i] == 2 * i);
        CHECK(calls == 20);
        ld_dataset_release(m); ld_dataset_release(b); ld_dataset_release(s);
        CHECK(freed == 0);
        ld_dataset_release(p);
        CHECK(freed == 1);                        /* user data freed with the last node using it */
        ld_tensor_release(x);
    }

    TEST("a caller-thread map never runs on the prefetch thread; the prefetch moves below it") {
        thread_probe probe = {pthread_self(), 0, 0};
        freed = 0;
        ld_dataset *r = ld_dataset_range(0, 100, 1);
        ld_dataset *sh = ld_dataset_shuffle(r, 10, 3, 0);
        ld_dataset *m = ld_dataset_map(sh, on_caller, &probe, count_free, LD_MAP_CALLER_THREAD);
        ld_dataset *b = ld_dataset_batch(m, 32, 0);
        ld_dataset *p = ld_dataset_prefetch(b, 2);
        char d[512];
        ld_dataset_describe(p, d, sizeof d);
        CHECK(contains(d, "shuffle(10, seed=3) -> prefetch(2) -> map(on the iterating thread) -> batch(32)"));
        double a[100], c[100];
        CHECK(drain(b, a, 100, &nv, sizes, 256) == 4);
        CHECK(drain(p, c, 100, &nv, sizes, 256) == 4 && sizes[3] == 4);
        CHECK(memcmp(a, c, sizeof a) == 0);
        CHECK(probe.calls == 200 && probe.wrong_thread == 0);
        CHECK(ld_dataset_cardinality(p) == 4);
        ld_dataset_release(r); ld_dataset_release(sh); ld_dataset_release(m); ld_dataset_release(b);
        CHECK(freed == 0);
        ld_dataset_release(p);
        CHECK(freed == 1);
    }

    TEST("errors: a failing map reports its message, through prefetch too, and again later") {
        ld_dataset *r = ld_dataset_range(0, 10, 1);
        ld_dataset *m = ld_dataset_map(r, fail_at_5, NULL, NULL, 0);
        ld_dataset *p = ld_dataset_prefetch(m, 2);
        for (int k = 0; k < 2; k++) {
            ld_dataset_iter *it = ld_dataset_iter_new(k ? p : m);
            ld_element e = {0};
            int n = 0, r2;
            while ((r2 = ld_dataset_iter_next(it, &e)) == 1) { n++; ld_element_clear(&e); }
            CHECK(r2 == -1 && n == 5);
            CHECK(contains(ld_error(), "element five is not welcome") && ld_error_status() == LD_EARG);
            ld_clear_error();
            CHECK(ld_dataset_iter_next(it, &e) == -1 && contains(ld_error(), "element five"));
            ld_dataset_iter_free(it);
        }
        ld_dataset *rg = ld_dataset_map(r, ragged, NULL, NULL, 0), *b = ld_dataset_batch(rg, 4, 0);
        CHECK(drain(b, NULL, 0, NULL, NULL, 0) == -1);
        CHECK(contains(ld_error(), "batch: element 2, component 1 is 2 float32, but the batch's first element has 1 float32"));
        CHECK(ld_dataset_batch(r, 0, 0) == NULL && contains(ld_error(), "batch size must be positive"));
        CHECK(ld_dataset_shuffle(r, 0, 1, 1) == NULL);
        CHECK(ld_dataset_repeat(r, -5) == NULL && ld_dataset_take(NULL, 3) == NULL);
        CHECK(ld_dataset_range(0, 10, 0) == NULL && contains(ld_error(), "step"));
        freed = 0;
        CHECK(ld_dataset_map(NULL, fail_at_5, NULL, count_free, 0) == NULL && freed == 1);
        ld_dataset_release(r); ld_dataset_release(m); ld_dataset_release(p);
        ld_dataset_release(rg); ld_dataset_release(b);
    }

    TEST("speed: one epoch of 60000x784 float32 in batches of 32, in order and shuffled") {
        int64_t shape[2] = {60000, 784};
        ld_tensor *x = ld_tensor_zeros(LD_F32, 2, shape, NULL), *y = arange_i64(60000);
        ld_tensor *xy[2] = {x, y};
        ld_dataset *s = ld_dataset_from_tensor_slices(2, xy);
        ld_dataset *b = ld_dataset_batch(s, 32, 0);
        ld_dataset *sh = ld_dataset_shuffle(s, 60000, 1, 1);
        ld_dataset *sb = ld_dataset_batch(sh, 32, 0);
        double t0 = now();
        CHECK(drain(b, NULL, 0, NULL, NULL, 0) == 1875);
        double t1 = now();
        double *lab = malloc(60000 * sizeof *lab);
        ld_dataset_iter *it = ld_dataset_iter_new(sb);
        ld_element e = {0};
        int64_t k = 0;
        while (ld_dataset_iter_next(it, &e) == 1) {
            for (int64_t i = 0; i < e.t[1]->shape[0]; i++) lab[k++] = ld_tensor_get_flat(e.t[1], i);
            ld_element_clear(&e);
        }
        ld_dataset_iter_free(it);
        double t2 = now();
        printf("#   in order %.3f s, shuffled %.3f s\n", t1 - t0, t2 - t1);
        CHECK(k == 60000 && is_permutation(lab, 60000));
        CHECK(t1 - t0 < 2.0 * tu_time_scale() && t2 - t1 < 4.0 * tu_time_scale());   /* about 0.05 s and 0.15 s on one core, -O3 */
        free(lab);
        ld_dataset_release(s); ld_dataset_release(b); ld_dataset_release(sh); ld_dataset_release(sb);
        ld_tensor_release(x); ld_tensor_release(y);
    }

    TEST("no host memory is left behind") {
        CHECK(live_bytes() == mem0);
    }
    return tu_summary();
}
