/* test_attn_offsets.c - attention with the causal offsets that only C
 * reaches (tests/cuda_emu): LD_CAUSAL_END aligns the causal triangle to the
 * bottom-right corner (offset s - t), so with T > S the first T - S queries
 * see no key (uniform weights) and with T < S every query sees more keys than
 * its index. tensor.attention and MultiHeadAttention pass LD_CAUSAL (offset
 * 0) only, so the GPU suite never runs the plugin's offset code: the flash
 * kernels' `whole` rows, `istart`, the lim == 0 branches, and
 * masked_softmax(_backward) with a nonzero offset.
 *
 * Each case runs forward and backward (loss sum(y*y), y in float32) on the
 * device named by $LDIST_GPU_TEST_DEVICE (default cuda:0; cpu:1 checks the
 * test itself) and on cpu:0, fused and unfused, in float32, float16 and
 * bfloat16 (q, k, v cast inside the tape), and compares the device's output
 * and gradients with the CPU's in the same mode: max |diff| / max(1, max |cpu|).
 * Built by tests/cuda_emu/emu.mk against build/libldist_engine.a. */
#include "test_util.h"
#include "ld_autograd.h"
#include "ld_device.h"
#include "ld_executor.h"
#include "ld_ops.h"
#include "ld_ops_attn.h"

#include <stdlib.h>
#include <string.h>

/* y (float32, on the CPU) and the gradients of q, k, v (on the CPU) of
   sum(y*y), y = attention(cast(q), cast(k), cast(v)) computed on d */
static int run(ld_device *d, ld_tensor *const h[3], ld_dtype dt, int causal, int fused, ld_tensor **yo,
               ld_tensor *go[3], char *op, size_t opn) {
    ld_tensor *in[3] = {NULL, NULL, NULL}, *g[3] = {NULL, NULL, NULL};
    int ok = 1;
    for (int i = 0; i < 3; i++) {
        in[i] = d == ld_device_cpu() ? (ld_tensor_retain(h[i]), h[i]) : ld_to_device(h[i], d);
        if (!in[i]) ok = 0;
    }
    *yo = NULL;
    go[0] = go[1] = go[2] = NULL;
    if (!ok) return 0;
    ld_attention_fused(fused ? LD_FUSED_ON : LD_FUSED_OFF);
    ld_tape *tape = ld_tape_new(0);
    for (int i = 0; i < 3; i++) ld_tape_watch(tape, in[i]);
    ld_tape_push(tape);
    ld_tensor *x[3] = {NULL, NULL, NULL};
    for (int i = 0; i < 3; i++) x[i] = dt == LD_F32 ? (ld_tensor_retain(in[i]), in[i]) : ld_cast_op(in[i], dt);
    ld_tensor *y = x[0] && x[1] && x[2] ? ld_attention(x[0], x[1], x[2], causal, 0, NULL) : NULL;
    ld_tensor *yf = y ? (dt == LD_F32 ? (ld_tensor_retain(y), y) : ld_cast_op(y, LD_F32)) : NULL;
    ld_tensor *y2 = yf ? ld_mul(yf, yf) : NULL, *loss = y2 ? ld_sum(y2, LD_ALL_AXES, 0) : NULL;
    ld_tape_pop(tape);
    if (y && y->grad_fn) snprintf(op, opn, "%s", y->grad_fn->op);
    ok = loss && ld_tape_gradient(tape, loss, 3, in, g) == LD_OK;
    if (!ok) printf("#   %s: %s\n", d->name, ld_error());
    ld_tape_free(tape);
    *yo = yf ? ld_to_device(yf, ld_device_cpu()) : NULL;
    for (int i = 0; i < 3; i++) {
        go[i] = g[i] ? ld_to_device(g[i], ld_device_cpu()) : NULL;
        if (!go[i]) ok = 0;
    }
    if (!*yo) ok = 0;
    ld_tensor *rel[] = {x[0], x[1], x[2], y, yf, y2, loss, g[0], g[1], g[2], in[0], in[1], in[2]};
    for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) ld_tensor_release(rel[i]);
    return ok;
}

int main(void) {
    ld_rng_seed(&tu_rng, 2468);
    const char *dn = getenv("LDIST_GPU_TEST_DEVICE");
    if (!dn) dn = "cuda:0";
    if (!strncmp(dn, "cpu:", 4) && strcmp(dn, "cpu:0")) ld_cpu_devices(atoi(dn + 4) + 1);
    ld_device *dev = ld_device_find(dn);
    TEST("the device under test is there") {
        CHECK(dev != NULL);
        if (!dev) printf("#   %s: %s (%s)\n", dn, ld_error(), ld_device_note());
    }
    if (!dev) return tu_summary();

    struct { int64_t B, T, S, E; int causal; } cases[] = {
        {2, 70, 150, 32, LD_CAUSAL_END},   /* offset +80: queries see beyond their index, over 3 key tiles */
        {2, 150, 70, 16, LD_CAUSAL_END},   /* offset -80: 80 rows see no key, over two query tiles */
        {3, 100, 33, 64, LD_CAUSAL_END},   /* offset -67 */
        {1, 130, 66, 16, LD_CAUSAL_END},   /* offset -64: a whole query tile sees no key */
        {4, 17, 1, 16, LD_CAUSAL_END},     /* one key: 16 rows see nothing, the last sees it */
        {1, 5, 3, 16, LD_CAUSAL_END},
        {2, 97, 97, 64, LD_CAUSAL_END},    /* offset 0 */
        {2, 40, 7, 32, LD_CAUSAL},
        {2, 65, 129, 16, LD_CAUSAL_NONE},
    };
    const ld_dtype dts[3] = {LD_F32, LD_F16, LD_BF16};
    const char *dtn[3] = {"float32", "float16", "bfloat16"};
    /* max |diff| / max(1, max |cpu|): float32 sums in another order; halves rounded where the paths round */
    const double tol[3] = {2e-5, 4e-3, 3e-2};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        int64_t B = cases[c].B, T = cases[c].T, S = cases[c].S, E = cases[c].E;
        int64_t sq[3] = {B, T, E}, sk[3] = {B, S, E};
        ld_tensor *h[3] = {tu_rnd(3, sq, -1, 1), tu_rnd(3, sk, -1, 1), tu_rnd(3, sk, -1, 1)};
        for (int di = 0; di < 3; di++)
            for (int fused = 1; fused >= 0; fused--) {
                char name[200];
                snprintf(name, sizeof name, "%s attention B=%lld T=%lld S=%lld E=%lld causal=%d (offset %lld) %s on %s",
                         fused ? "fused" : "unfused", (long long)B, (long long)T, (long long)S, (long long)E,
                         cases[c].causal, (long long)(cases[c].causal == LD_CAUSAL_END ? S - T : 0), dtn[di], dn);
                TEST(name) {
                    ld_tensor *yd, *gd[3], *yc, *gc[3];
                    char opd[64] = "", opc[64] = "";
                    int okd = run(dev, h, dts[di], cases[c].causal, fused, &yd, gd, opd, sizeof opd);
                    int okc = run(ld_device_cpu(), h, dts[di], cases[c].causal, fused, &yc, gc, opc, sizeof opc);
                    CHECK(okd && okc);
                    CHECK(!strcmp(opd, fused ? "flash_attention" : "attention"));
                    if (okd && okc) {
                        double e = tu_norm_err(yd, yc);
                        if (!(e <= tol[di])) printf("#   output: error %g (tolerance %g)\n", e, tol[di]);
                        CHECK(e <= tol[di]);
                        for (int i = 0; i < 3; i++) {
                            e = tu_norm_err(gd[i], gc[i]);
                            if (!(e <= tol[di])) printf("#   gradient %d: error %g (tolerance %g)\n", i, e, tol[di]);
                            CHECK(e <= tol[di]);
                        }
                    }
                    ld_tensor_release(yd); ld_tensor_release(yc);
                    for (int i = 0; i < 3; i++) { ld_tensor_release(gd[i]); ld_tensor_release(gc[i]); }
                }
            }
        for (int i = 0; i < 3; i++) ld_tensor_release(h[i]);
    }
    return tu_summary();
}
