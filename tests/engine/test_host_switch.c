/* test_host_switch.c - the host device cpu:0 switches between queuing its
 * kernels and running them inline (ld_host_async: on for each
 * MirroredStrategy step, off after) while other threads still free its
 * memory: an executor thread drops a cpu:0 tensor when the cross-device
 * copy that read it has run (ld_to_device), a prefetch thread drops host
 * batches. Such a free must never see the switch half done (it used to
 * read cpu:0's executor after the switch had cleared it, and crash). */
#include "test_util.h"
#include "ld_device.h"
#include "ld_executor.h"

enum { TENSORS = 512, ROUNDS = 200 };

typedef struct { ld_tensor **ts; int n, done; } drop_a;

/* on cpu:1's executor: the last reference to each cpu:0 tensor goes */
static void drop_all(void *ctx, ld_device *d) {
    drop_a *a = ctx;
    for (int i = 0; i < a->n; i++) ld_tensor_release(a->ts[i]);
    __atomic_store_n(&a->done, 1, __ATOMIC_RELEASE);
}

int main(void) {
    if (ld_cpu_devices(2)) { printf("not ok - %s\n", ld_error()); return 1; }
    ld_device *host = ld_device_cpu(), *d1 = ld_device_find("cpu:1");

    TEST("cpu:0's memory freed on another thread while cpu:0 switches to inline and back") {
        static ld_tensor *ts[TENSORS];
        size_t base = host->bytes_in_use;
        long switches = 0;
        for (int round = 0; round < ROUNDS; round++) {
            CHECK(ld_host_async(round & 1) == LD_OK);   /* allocated queuing or inline */
            for (int i = 0; i < TENSORS; i++) {
                /* both kinds of free: small blocks go back through the queue,
                   from 4 KiB they are kept for reuse (px_free) */
                int64_t n = i & 1 ? 16 : 2048;
                ts[i] = ld_tensor_empty(LD_F32, 1, &n, host);
            }
            drop_a a = {ts, TENSORS, 0};
            ld_executor_submit(d1, drop_all, &a, LD_SPAN_NONE);
            while (!__atomic_load_n(&a.done, __ATOMIC_ACQUIRE)) {
                CHECK(ld_host_async(1) == LD_OK);
                CHECK(ld_host_async(0) == LD_OK);
                switches++;
            }
            ld_device_synchronize(d1);
        }
        CHECK(ld_host_async(0) == LD_OK);
        CHECK(host->bytes_in_use == base);
        CHECK(switches > 0);
    }
    return tu_summary();
}
