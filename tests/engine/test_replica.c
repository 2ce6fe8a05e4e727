/* test_replica.c - what a synchronous strategy needs to give one device's
 * answer: dropout masks indexed by global row with per-replica random
 * streams, the tensor extension slot of mirrored variables, and writes to
 * mirrored variables (every copy outside a replica, one copy inside). */
#include "test_util.h"
#include "ld_ops.h"
#include "ld_strategy.h"
#include "ld_device.h"

#include <string.h>

static ld_tensor *rows_of(ld_tensor *x, int64_t a, int64_t b) {
    ld_tensor *v = ld_slice(x, 0, a, b, 1);
    ld_tensor *c = ld_contiguous(v);
    ld_tensor_release(v);
    return c;
}

/* y[a:b] of a whole-batch result against a replica's result for those rows */
static int rows_equal(ld_tensor *whole, int64_t a, ld_tensor *part) {
    int64_t w = ld_tensor_numel(part) / (part->shape[0] ? part->shape[0] : 1);
    for (int64_t i = 0; i < ld_tensor_numel(part); i++)
        if (ld_tensor_get_flat(whole, a * w + i) != ld_tensor_get_flat(part, i)) return 0;
    return 1;
}

static void set_replica(int id, int n, int64_t first_row) {
    ld_replica_ctx c = {id, n, 6, NULL, first_row};
    ld_replica_set(&c);
}

static void test_dropout_split(void) {
    int64_t s[2] = {6, 4};
    ld_rng r;
    ld_rng_seed(&r, 5);
    ld_tensor *x = ld_tensor_uniform(2, s, 1.0f, 2.0f, &r, NULL);
    ld_tensor *x0 = rows_of(x, 0, 3), *x1 = rows_of(x, 3, 6);
    const float rate = 0.5f;

    TEST("dropout: one device keeps about 1-rate of the elements, scaled by 1/(1-rate)") {
        int64_t big[2] = {200, 50};
        ld_tensor *ones = ld_tensor_full(LD_F32, 2, big, 1.0, NULL);
        ld_tensor *y = ld_dropout(ones, 0.3f, NULL);
        int64_t kept = 0, bad = 0;
        for (int64_t i = 0; i < 10000; i++) {
            double v = ld_tensor_get_flat(y, i);
            if (v != 0) { kept++; if (fabs(v - 1 / 0.7) > 1e-6) bad++; }
        }
        CHECK(bad == 0);
        CHECK(kept > 6700 && kept < 7300);
        ld_tensor_release(y); ld_tensor_release(ones);
    }

    TEST("dropout: a batch split over two replicas gets one device's mask, row by row") {
        ld_rng_seed(ld_global_rng(), 99);
        ld_tensor *whole = ld_dropout(x, rate, NULL);
        uint64_t after_one = ld_rng_next(ld_global_rng());

        ld_rng_seed(ld_global_rng(), 99);
        CHECK(ld_replica_step_begin(2) == LD_OK);
        set_replica(1, 2, 3);          /* issued as MirroredStrategy does: the last replica first */
        ld_tensor *y1 = ld_dropout(x1, rate, NULL);
        set_replica(0, 2, 0);
        ld_tensor *y0 = ld_dropout(x0, rate, NULL);
        ld_replica_set(NULL);
        ld_replica_step_end();
        uint64_t after_two = ld_rng_next(ld_global_rng());

        CHECK(whole && y0 && y1);
        if (whole && y0 && y1) {
            CHECK(rows_equal(whole, 0, y0));
            CHECK(rows_equal(whole, 3, y1));
            int zeros = 0;
            for (int64_t i = 0; i < 24; i++) zeros += ld_tensor_get_flat(whole, i) == 0;
            CHECK(zeros > 0 && zeros < 24);   /* a mask, not all or nothing */
        }
        CHECK(after_one == after_two);        /* the generator moves on as after one device's step */
        ld_tensor_release(whole); ld_tensor_release(y0); ld_tensor_release(y1);
    }

    TEST("dropout: without step_begin the replicas share the global stream (masks differ)") {
        ld_rng_seed(ld_global_rng(), 99);
        ld_tensor *whole = ld_dropout(x, rate, NULL);
        ld_rng_seed(ld_global_rng(), 99);
        set_replica(0, 2, 0);
        ld_tensor *y0 = ld_dropout(x0, rate, NULL);
        set_replica(1, 2, 3);
        ld_tensor *y1 = ld_dropout(x1, rate, NULL);
        ld_replica_set(NULL);
        CHECK(rows_equal(whole, 0, y0));      /* the first call draws the same key */
        CHECK(!rows_equal(whole, 3, y1));     /* the second a new one */
        ld_tensor_release(whole); ld_tensor_release(y0); ld_tensor_release(y1);
    }

    TEST("dropout: a layer built by the replica issued first (its draws skipped by the others)") {
        /* one device: the layer's initial values, then the dropout key */
        ld_rng_seed(ld_global_rng(), 42);
        int64_t ws[1] = {10};
        ld_tensor *w1 = ld_tensor_uniform(1, ws, -1, 1, NULL, NULL);
        ld_tensor *whole = ld_dropout(x, rate, NULL);
        uint64_t after_one = ld_rng_next(ld_global_rng());

        ld_rng_seed(ld_global_rng(), 42);
        CHECK(ld_replica_step_begin(2) == LD_OK);
        set_replica(1, 2, 3);
        ld_rng before = *ld_global_rng();
        ld_tensor *w2 = ld_tensor_uniform(1, ws, -1, 1, NULL, NULL);   /* built here, once */
        ld_replica_draws_shared(&before);
        ld_tensor *y1 = ld_dropout(x1, rate, NULL);
        set_replica(0, 2, 0);
        ld_tensor *y0 = ld_dropout(x0, rate, NULL);                 /* already built: no draws */
        ld_replica_set(NULL);
        ld_replica_step_end();
        uint64_t after_two = ld_rng_next(ld_global_rng());

        CHECK(tu_norm_err(w2, w1) == 0);
        CHECK(rows_equal(whole, 0, y0));
        CHECK(rows_equal(whole, 3, y1));
        CHECK(after_one == after_two);
        ld_tensor_release(w1); ld_tensor_release(w2); ld_tensor_release(whole);
        ld_tensor_release(y0); ld_tensor_release(y1);
    }

    TEST("replica streams: a bad replica count is an error, step_end without begin is harmless") {
        CHECK(ld_replica_step_begin(0) != LD_OK);
        CHECK(strstr(ld_error(), "replicas") != NULL);
        ld_clear_error();
        ld_rng_seed(ld_global_rng(), 3);
        uint64_t a = ld_rng_next(ld_global_rng());
        ld_rng_seed(ld_global_rng(), 3);
        ld_replica_step_end();
        CHECK(ld_rng_next(ld_global_rng()) == a);
    }
    ld_tensor_release(x); ld_tensor_release(x0); ld_tensor_release(x1);
}

static double max_abs_diff(ld_tensor *a, double v) {
    ld_tensor *h = ld_to_device(a, ld_device_cpu());
    double m = 0;
    for (int64_t i = 0; i < ld_tensor_numel(h); i++) {
        double d = fabs(ld_tensor_get_flat(h, i) - v);
        if (d > m) m = d;
    }
    ld_tensor_release(h);
    return m;
}

static void test_mirrored_writes(void) {
    if (ld_cpu_devices(3)) { printf("# %s\n", ld_error()); return; }
    ld_device *devs[3] = {ld_device_find("cpu:0"), ld_device_find("cpu:1"), ld_device_find("cpu:2")};
    int64_t s[2] = {2, 3};
    ld_mirror_set_devices(3, devs);
    ld_tensor *v = ld_tensor_zeros(LD_F32, 2, s, NULL);
    v->requires_grad = 1;
    int created = ld_variable_created(v);
    ld_mirror_set_devices(0, NULL);

    TEST("mirrored variable: one copy per device, kept in the tensor's extension slot") {
        CHECK(created == LD_OK);
        CHECK(ld_mirror_count(v) == 3);
        CHECK(v->ext != NULL);
        for (int r = 0; r < 3; r++) CHECK(ld_mirror_copy(v, r) && ld_mirror_copy(v, r)->storage->device == devs[r]);
        CHECK(ld_mirror_copy(v, 0) == v);
        CHECK(ld_mirror_copy(v, 3) == NULL);
        ld_tensor *view = ld_slice(v, 0, 0, 1, 1);   /* a view is no variable */
        CHECK(view->ext == NULL && ld_mirror_count(view) == 1);
        ld_tensor_release(view);
    }

    TEST("mirrored variable: a cross-replica write goes to every copy") {
        ld_tensor *src = ld_tensor_full(LD_F32, 2, s, 2.5, NULL);
        CHECK(ld_variable_write(v, src) == LD_OK);
        for (int r = 0; r < 3; r++) CHECK(max_abs_diff(ld_mirror_copy(v, r), 2.5) == 0);
        ld_tensor *one = ld_tensor_scalar(1.0f, NULL);
        CHECK(ld_variable_add(v, one, 0) == LD_OK);
        for (int r = 0; r < 3; r++) CHECK(max_abs_diff(ld_mirror_copy(v, r), 3.5) == 0);
        CHECK(ld_variable_add(v, one, 1) == LD_OK);
        for (int r = 0; r < 3; r++) CHECK(max_abs_diff(ld_mirror_copy(v, r), 2.5) == 0);
        int64_t rs[1] = {3};
        ld_tensor *row = ld_tensor_full(LD_F32, 1, rs, -1.0, NULL);
        CHECK(ld_variable_write_index(v, -1, row) == LD_OK);
        for (int r = 0; r < 3; r++) {
            ld_tensor *c = ld_to_device(ld_mirror_copy(v, r), ld_device_cpu());
            CHECK(ld_tensor_get_flat(c, 0) == 2.5 && ld_tensor_get_flat(c, 3) == -1.0 && ld_tensor_get_flat(c, 5) == -1.0);
            ld_tensor_release(c);
        }
        ld_tensor_release(src); ld_tensor_release(one); ld_tensor_release(row);
    }

    TEST("mirrored variable: inside a replica only that replica's copy is written") {
        ld_tensor *src = ld_tensor_full(LD_F32, 2, s, 7.0, NULL);
        CHECK(ld_variable_write(v, src) == LD_OK);
        set_replica(1, 3, 0);
        ld_tensor *one = ld_tensor_scalar(1.0f, NULL);
        CHECK(ld_variable_add(v, one, 0) == LD_OK);   /* reads and writes replica 1's copy */
        ld_replica_set(NULL);
        CHECK(max_abs_diff(ld_mirror_copy(v, 0), 7.0) == 0);
        CHECK(max_abs_diff(ld_mirror_copy(v, 1), 8.0) == 0);
        CHECK(max_abs_diff(ld_mirror_copy(v, 2), 7.0) == 0);
        ld_tensor_release(src); ld_tensor_release(one);
    }

    TEST("mirrored variable: a bad shape writes nothing and says why") {
        ld_tensor *src = ld_tensor_full(LD_F32, 2, s, 1.0, NULL);
        CHECK(ld_variable_write(v, src) == LD_OK);
        int64_t bs[2] = {3, 2};
        ld_tensor *bad = ld_tensor_full(LD_F32, 2, bs, 9.0, NULL);
        CHECK(ld_variable_write(v, bad) != LD_OK);
        CHECK(strstr(ld_error(), "cannot assign shape 3x2 to shape 2x3") != NULL);
        ld_clear_error();
        for (int r = 0; r < 3; r++) CHECK(max_abs_diff(ld_mirror_copy(v, r), 1.0) == 0);
        ld_tensor_release(src); ld_tensor_release(bad);
    }
    ld_tensor_release(v);   /* frees its copies through the extension (LeakSanitizer checks) */
    for (int r = 0; r < 3; r++) ld_device_synchronize(devs[r]);   /* the queued frees of small blocks run */
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    test_dropout_split();
    test_mirrored_writes();
    return tu_summary();
}
