/*
 * cuda_scan.cu - cumulative sums and products (the scan kernel, ld_kernels.h)
 * along the middle axis of a contiguous [outer, n, inner] array.
 *
 * A simple kernel, correct rather than fast: one thread per (outer, inner)
 * pair walks its n values in order, accumulating in float32 with the CPU's
 * step (ld_ew_scan_step), so both backends add or multiply in the same order.
 * Neighbouring threads take neighbouring columns, so the loads and stores of
 * a warp are coalesced where inner > 1; a tensor of few long rows (outer *
 * inner small) runs on few threads, one step after another. A parallel
 * (Blelloch) scan would be faster there, at the price of another order of
 * the sums than TF's CPU kernel and ours.
 */
#include "cuda_common.cuh"
#include "ld_elementwise_math.h"

template <typename TX, typename TO>
__global__ void k_scan(TO *out, const TX *x, int64_t outer, int64_t n, int64_t inner, ld_scan_op op, int excl,
                       int rev) {
    CU_LOOP(c, outer * inner) {
        int64_t o = c / inner, i = c - o * inner;
        float acc = ld_ew_scan_init(op);
        for (int64_t s = 0; s < n; s++) {
            int64_t at = (o * n + (rev ? n - 1 - s : s)) * inner + i;
            out[at] = cu_put<TO>(ld_ew_scan_step(&acc, cu_get(x[at]), op, excl));
        }
    }
}

void cu_scan(ld_device *d, ld_scan_op op, void *out, ld_dtype odt, const void *x, ld_dtype xdt, int64_t outer,
             int64_t n, int64_t inner, int exclusive, int reverse) {
    if (outer <= 0 || n <= 0 || inner <= 0) return;
    cu_dev *cd = cu_begin(d);
    if (!cd) return;
    int64_t pairs = outer * inner;
    CU_FLOAT_TYPES(xdt, TX, CU_FLOAT_TYPES(odt, TO, k_scan<TX, TO><<<cu_grid(pairs, 256), 256, 0, cd->stream>>>(
        (TO *)out, (const TX *)x, outer, n, inner, op, exclusive, reverse)));
    cu_launched(cd, "scan kernel");
}
