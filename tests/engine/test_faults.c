/* test_faults.c - faults that used to escape the status model are errors in
 * the session: out of memory while queuing a kernel (it used to abort), no
 * BLAS library (products used to give NaN and a line on stderr). After each
 * error the same process goes on computing. */
#include "test_util.h"
#include "ld_device.h"
#include "ld_executor.h"
#include "ld_ops.h"

#include <stdlib.h>
#include <string.h>

/* every element of t (float32) equals v; t is read on the host */
static int all_equal(ld_tensor *t, float v) {
    ld_tensor *h = ld_to_device(t, ld_device_cpu());
    const float *p = h ? ld_tensor_data(h) : NULL;
    int ok = p != NULL;
    for (int64_t i = 0; ok && i < ld_tensor_numel(h); i++) ok = p[i] == v;
    ld_tensor_release(h);
    return ok;
}

int main(void) {
    /* a library that is not there: read once, at the first product */
    setenv("LDIST_BLAS", "/nonexistent/libldist_test_blas.so", 1);
    if (ld_cpu_devices(3)) { printf("not ok - %s\n", ld_error()); return 1; }
    ld_device *d1 = ld_device_find("cpu:1"), *d2 = ld_device_find("cpu:2");
    int64_t s[2] = {64, 80};

    TEST("out of memory queuing a kernel: the op's status, the next read fails, the session goes on") {
        ld_tensor *a = ld_tensor_full(LD_F32, 2, s, 1, d1), *b = ld_tensor_full(LD_F32, 2, s, 2, d1);
        ld_device_synchronize(d1);
        ld_clear_error();
        ld_executor_fail_allocs(1);
        ld_tensor *y = ld_add(a, b);
        CHECK(ld_error_status() == LD_ENOMEM);
        CHECK(strstr(ld_error(), "out of memory queuing a kernel on cpu:1") != NULL);
        ld_executor_fail_allocs(0);
        ld_clear_error();
        CHECK(y != NULL && ld_tensor_data(y) == NULL);      /* its kernel never ran */
        CHECK(ld_error_status() == LD_ENOMEM);
        printf("#   %s\n", ld_error());
        ld_clear_error();
        ld_tensor *z = ld_add(a, b);                         /* reported once: the device works again */
        CHECK(z && all_equal(z, 3));
        CHECK(ld_error_status() == LD_OK);
        ld_tensor_release(y);
        ld_tensor_release(z);
        ld_tensor_release(a);
        ld_tensor_release(b);
    }

    TEST("out of memory: copies between devices and frees still happen (the reserve, waiting)") {
        ld_tensor *a = ld_tensor_full(LD_F32, 2, s, 5, d1);
        ld_device_synchronize(d1);
        ld_clear_error();
        ld_executor_fail_allocs(1000);
        ld_tensor *c = ld_to_device(a, d2);                  /* a task on cpu:2's executor, from the reserve */
        CHECK(c != NULL);
        ld_tensor_release(a);                                /* its free cannot be queued: waits, then frees */
        ld_executor_fail_allocs(0);
        CHECK(c && all_equal(c, 5));
        ld_tensor_release(c);
        ld_device_synchronize(d1);
        ld_device_synchronize(d2);
        CHECK(ld_device_take_error(d1) == LD_OK && ld_device_take_error(d2) == LD_OK);
    }

    TEST("no BLAS library: a product is an error naming the library, on the host and on cpu:1") {
        int64_t sa[2] = {4, 3}, sb[2] = {3, 5}, sc[2] = {4, 5};
        ld_device *devs[2] = {ld_device_cpu(), d1};
        for (int i = 0; i < 2; i++) {
            ld_tensor *a = ld_tensor_full(LD_F32, 2, sa, 1, devs[i]), *b = ld_tensor_full(LD_F32, 2, sb, 1, devs[i]);
            ld_device_synchronize(devs[i]);
            ld_clear_error();
            ld_tensor *m = ld_matmul(a, b);                  /* the op refuses at once */
            CHECK(m == NULL && ld_error_status() == LD_EDEVICE);
            CHECK(strstr(ld_error(), "/nonexistent/libldist_test_blas.so") != NULL);
            printf("#   %s: %s\n", devs[i]->name, ld_error());
            /* a kernel called past the ops (the strategy's fused products):
               the next read fails, on whichever device it comes */
            ld_tensor *c = ld_tensor_zeros(LD_F32, 2, sc, devs[i]);
            ld_clear_error();
            devs[i]->backend->gemm(devs[i], 0, 0, 4, 5, 3, 1.0f, ld_tensor_data_unsynced(a), 3,
                                   ld_tensor_data_unsynced(b), 5, 0.0f, ld_tensor_data_unsynced(c), 5);
            ld_clear_error();
            CHECK(ld_tensor_data(c) == NULL && ld_error_status() == LD_EDEVICE);
            CHECK(strstr(ld_error(), "libldist_test_blas") != NULL);
            ld_clear_error();
            ld_tensor *s2 = ld_add(a, a);                     /* what needs no BLAS still works */
            CHECK(s2 && all_equal(s2, 2));
            ld_tensor_release(s2);
            ld_tensor_release(c);
            ld_tensor_release(a);
            ld_tensor_release(b);
        }
    }
    return tu_summary();
}
