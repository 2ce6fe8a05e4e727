/* test_sim_device.c - sim:0 (LDIST_SIM_DEVICE=1, ld_device.h): the test
 * device the host may not read. Its memory must be refused to host
 * pointers (ld_tensor_data) as a GPU's is, reach the host only through
 * copies, and come back from the allocator poisoned (0xff bytes: NaN), as a
 * GPU's caching allocator hands back old contents; kernels still compute. */
#include "test_util.h"
#include "ld_ops.h"
#include "ld_device.h"

#include <stdlib.h>
#include <string.h>

int main(void) {
    setenv("LDIST_SIM_DEVICE", "1", 1);
    ld_device *sim = ld_device_find("sim:0");
    TEST("sim:0 is listed when LDIST_SIM_DEVICE=1, and is not host memory") {
        CHECK(sim != NULL);
        if (sim) CHECK(!ld_device_is_host(sim));
    }
    if (!sim) return tu_summary();
    int64_t n[1] = {5};
    TEST("a host pointer of a sim:0 tensor is refused, naming the device") {
        ld_tensor *t = ld_tensor_full(LD_F32, 1, n, 2.0, sim);
        CHECK(t != NULL);
        CHECK(ld_tensor_data(t) == NULL);
        CHECK(tu_contains(ld_error(), "tensor is on sim:0"));
        ld_clear_error();
        ld_tensor_release(t);
    }
    TEST("a new block on sim:0 holds 0xff bytes (NaN), not zeros") {
        ld_tensor *t = ld_tensor_empty(LD_F32, 1, n, sim), *h = t ? ld_to_device(t, ld_device_cpu()) : NULL;
        CHECK(h != NULL);
        for (int i = 0; h && i < 5; i++) {
            double v = ld_tensor_get_flat(h, i);
            CHECK(v != v);
        }
        ld_tensor_release(t); ld_tensor_release(h);
    }
    TEST("kernels run on sim:0 and their results come back by copy") {
        ld_tensor *a = ld_tensor_full(LD_F32, 1, n, 2.0, sim), *b = a ? ld_add_scalar(a, 1.5f) : NULL;
        ld_tensor *h = b ? ld_to_device(b, ld_device_cpu()) : NULL;
        CHECK(h != NULL);
        for (int i = 0; h && i < 5; i++) CHECK_NEAR(ld_tensor_get_flat(h, i), 3.5, 0);
        ld_tensor_release(a); ld_tensor_release(b); ld_tensor_release(h);
    }
    return tu_summary();
}
