/* test_grad.c - every differentiable op's gradient against central finite
 * differences. L = sum(f(x) * R) with a fixed random R, so every output
 * element contributes with a different weight. */
#include "test_util.h"
#include "ld_ops.h"
#include "ld_ops_index.h"
#include "ld_autograd.h"
#include "ld_nn.h"
#include "ld_device.h"
#include "ld_pool.h"

#include <stdlib.h>
#include <string.h>

/* ---- ops under test ---- */
static ld_tensor *f_binary(ld_tensor **in, void *ud) { return ld_binary(*(ld_binary_op *)ud, in[0], in[1]); }
static ld_tensor *f_unary(ld_tensor **in, void *ud) { return ld_unary(*(ld_unary_op *)ud, in[0]); }
static ld_tensor *f_sum0(ld_tensor **in, void *ud) { return ld_sum(in[0], 0, 0); }
static ld_tensor *f_sum_all(ld_tensor **in, void *ud) { return ld_sum(in[0], LD_ALL_AXES, 0); }
static ld_tensor *f_mean1(ld_tensor **in, void *ud) { return ld_mean(in[0], 1, 1); }
static ld_tensor *f_max1(ld_tensor **in, void *ud) { return ld_max(in[0], -1, 0); }
static ld_tensor *f_matmul(ld_tensor **in, void *ud) { return ld_matmul(in[0], in[1]); }
static ld_tensor *f_linear(ld_tensor **in, void *ud) { return ld_linear(in[0], in[1], in[2], *(int *)ud); }
static ld_tensor *f_matmul_tview(ld_tensor **in, void *ud) {
    ld_tensor *bt = ld_transpose_op(in[1], 0, 1);
    ld_tensor *y = ld_matmul(in[0], bt);
    ld_tensor_release(bt);
    return y;
}
static ld_tensor *f_softmax(ld_tensor **in, void *ud) { return ld_softmax(in[0]); }
/* ops on a strided view must pass the gradient back through the copy they make */
static ld_tensor *f_view_ops(ld_tensor **in, void *ud) {
    ld_tensor *t = ld_transpose_op(in[0], 0, 1);
    ld_tensor *a = ld_softmax(t), *b = ld_exp(t), *c = ld_sum(t, 0, 1);
    ld_tensor *ab = ld_add(a, b), *y = ld_add(ab, c);
    ld_tensor_release(t); ld_tensor_release(a); ld_tensor_release(b); ld_tensor_release(c); ld_tensor_release(ab);
    return y;
}
static ld_tensor *f_log_softmax(ld_tensor **in, void *ud) { return ld_log_softmax(in[0]); }
static ld_tensor *f_conv(ld_tensor **in, void *ud) { int *c = ud; return ld_conv2d(in[0], in[1], c[0], c[0], c[1]); }
/* a Conv2D layer's path: im2col -> fused dense with bias and relu -> NHWC */
static ld_tensor *f_conv_layer(ld_tensor **in, void *ud) {
    int64_t oh, ow;
    ld_tensor *col = ld_im2col(in[0], 3, 3, 1, 1, 1, &oh, &ow);
    int64_t w2s[2] = {3 * 3 * 2, 3};
    ld_tensor *w2 = ld_reshape_op(in[1], 2, w2s);
    ld_tensor *y2 = ld_linear(col, w2, in[2], 1);
    int64_t ys[4] = {in[0]->shape[0], oh, ow, 3};
    ld_tensor *y = ld_reshape_op(y2, 4, ys);
    ld_tensor_release(col); ld_tensor_release(w2); ld_tensor_release(y2);
    return y;
}
static ld_tensor *f_pool(ld_tensor **in, void *ud) { return ld_maxpool2d(in[0], 2, 2, 2, 2); }
static ld_tensor *f_pool_same(ld_tensor **in, void *ud) { return ld_maxpool2d_same(in[0], 3, 3, 2, 2); }
/* col2im of 2 images of c[3] x c[3] pixels, 2 channels: kernel c[0], strides c[1], same c[2] */
static ld_tensor *f_col2im(ld_tensor **in, void *ud) {
    int *c = ud;
    return ld_col2im(in[0], 2, c[3], c[3], 2, c[0], c[0], c[1], c[1], c[2], LD_F32);
}
static ld_tensor *f_pad(ld_tensor **in, void *ud) {
    ld_tensor *p = ld_pad_op(in[0], 1, 1, 2, 0.5), *y = p ? ld_mul(p, p) : NULL;
    ld_tensor_release(p);
    return y;
}
static ld_tensor *f_reshape(ld_tensor **in, void *ud) { int64_t s[2] = {3, -1}; return ld_reshape_op(in[0], 2, s); }
static ld_tensor *f_transpose(ld_tensor **in, void *ud) {
    ld_tensor *t = ld_transpose_op(in[0], 0, 1);
    ld_tensor *y = ld_mul(t, t);   /* a non-trivial use of the strided view */
    ld_tensor_release(t);
    return y;
}
static ld_tensor *f_xent(ld_tensor **in, void *ud) { return ld_sparse_xent_logits(in[0], in[1]); }
static ld_tensor *f_loss(ld_tensor **in, void *ud) { return ld_loss_compute(ud, in[1], in[0]); }
static ld_tensor *f_dropout(ld_tensor **in, void *ud) {
    ld_rng r;
    ld_rng_seed(&r, 7);   /* the same mask at every evaluation */
    return ld_dropout(in[0], 0.4f, &r);
}

int main(void) {
    ld_rng_seed(&tu_rng, 1234);
    int64_t s23[2] = {2, 3}, s3[1] = {3}, s13[2] = {1, 3}, s21[2] = {2, 1}, s34[2] = {3, 4}, s43[2] = {4, 3};
    int yes[4] = {1, 1, 1, 1}, first[4] = {1, 0, 0, 0};

    /* binary ops, same shapes and broadcasting both ways */
    const char *bn[] = {"add", "sub", "mul", "div", "pow", "maximum", "minimum"};
    ld_binary_op bops[] = {LD_BIN_ADD, LD_BIN_SUB, LD_BIN_MUL, LD_BIN_DIV, LD_BIN_POW, LD_BIN_MAX, LD_BIN_MIN};
    for (int i = 0; i < 7; i++) {
        char name[96];
        ld_tensor *in[2] = {tu_rnd(2, s23, 0.5f, 2.0f), tu_rnd(2, s23, 0.5f, 2.0f)};
        snprintf(name, sizeof name, "grad %s 2x3 2x3", bn[i]);
        tu_gradcheck(name, f_binary, &bops[i], 2, in, yes, 2e-2);
        ld_tensor_release(in[1]);
        in[1] = tu_rnd(1, s3, 0.5f, 2.0f);
        snprintf(name, sizeof name, "grad %s 2x3 with 3 (broadcast)", bn[i]);
        tu_gradcheck(name, f_binary, &bops[i], 2, in, yes, 2e-2);
        ld_tensor_release(in[0]); ld_tensor_release(in[1]);
        ld_tensor *in2[2] = {tu_rnd(2, s21, 0.5f, 2.0f), tu_rnd(2, s13, 0.5f, 2.0f)};
        snprintf(name, sizeof name, "grad %s 2x1 with 1x3 (both broadcast)", bn[i]);
        tu_gradcheck(name, f_binary, &bops[i], 2, in2, yes, 2e-2);
        ld_tensor_release(in2[0]); ld_tensor_release(in2[1]);
    }
    /* unary ops (inputs away from kinks) */
    const char *un[] = {LD_UNARY_OPS(LD_OP_NAME)};
    for (int i = 0; i < LD_UN_COUNT; i++) {
        ld_unary_op op = (ld_unary_op)i;
        char name[64];
        snprintf(name, sizeof name, "grad %s", un[i]);
        int pos = op == LD_UN_LOG || op == LD_UN_SQRT;
        ld_tensor *in[1] = {tu_rnd(2, s34, pos ? 0.5f : -2.0f, 2.0f)};
        if (op == LD_UN_ABS || op == LD_UN_RELU || op == LD_UN_LEAKY_RELU || op == LD_UN_RELU6 ||
            op == LD_UN_SELU)   /* keep clear of their kink at 0 */
            for (int64_t k = 0; k < 12; k++) {
                double v = ld_tensor_get_flat(in[0], k);
                if (fabs(v) < 0.1) ld_tensor_set_flat(in[0], k, v < 0 ? -0.5 : 0.5);
            }
        tu_gradcheck(name, f_unary, &op, 1, in, first, 2e-2);
        ld_tensor_release(in[0]);
    }
    ld_tensor *a34[1] = {tu_rnd(2, s34, -1, 1)};
    tu_gradcheck("grad sum axis 0", f_sum0, NULL, 1, a34, first, 1e-2);
    tu_gradcheck("grad sum all", f_sum_all, NULL, 1, a34, first, 1e-2);
    tu_gradcheck("grad mean axis 1 keepdims", f_mean1, NULL, 1, a34, first, 1e-2);
    tu_gradcheck("grad max axis -1", f_max1, NULL, 1, a34, first, 1e-2);
    tu_gradcheck("grad softmax", f_softmax, NULL, 1, a34, first, 2e-2);
    tu_gradcheck("grad log_softmax", f_log_softmax, NULL, 1, a34, first, 2e-2);
    tu_gradcheck("grad through copies of strided views", f_view_ops, NULL, 1, a34, first, 2e-2);
    tu_gradcheck("grad reshape", f_reshape, NULL, 1, a34, first, 1e-2);
    tu_gradcheck("grad transpose view", f_transpose, NULL, 1, a34, first, 2e-2);
    tu_gradcheck("grad dropout (fixed mask)", f_dropout, NULL, 1, a34, first, 1e-2);

    ld_tensor *mm[2] = {tu_rnd(2, s23, -1, 1), tu_rnd(2, s34, -1, 1)};
    tu_gradcheck("grad matmul 2x3 @ 3x4", f_matmul, NULL, 2, mm, yes, 2e-2);
    ld_tensor *mmt[2] = {tu_rnd(2, s23, -1, 1), tu_rnd(2, s43, -1, 1)};
    tu_gradcheck("grad matmul with a transposed view", f_matmul_tview, NULL, 2, mmt, yes, 2e-2);
    int64_t s4[1] = {4};
    ld_tensor *lin[3] = {tu_rnd(2, s23, -1, 1), tu_rnd(2, s34, -1, 1), tu_rnd(1, s4, -1, 1)};
    int no_relu = 0, with_relu = 1;
    tu_gradcheck("grad dense (x @ w + b)", f_linear, &no_relu, 3, lin, yes, 2e-2);
    tu_gradcheck("grad dense with relu", f_linear, &with_relu, 3, lin, yes, 3e-2);
    int64_t s223[3] = {2, 2, 3};
    ld_tensor *bmm[2] = {tu_rnd(3, s223, -1, 1), tu_rnd(2, s34, -1, 1)};
    tu_gradcheck("grad batched matmul 2x2x3 @ 3x4", f_matmul, NULL, 2, bmm, yes, 2e-2);

    int64_t xs[4] = {2, 5, 5, 2}, ws[4] = {3, 3, 2, 3};
    ld_tensor *cv[2] = {tu_rnd(4, xs, -1, 1), tu_rnd(4, ws, -1, 1)};
    int valid[2] = {1, 0}, same[2] = {1, 1}, stride2[2] = {2, 1};
    tu_gradcheck("grad conv2d valid", f_conv, valid, 2, cv, yes, 3e-2);
    tu_gradcheck("grad conv2d same", f_conv, same, 2, cv, yes, 3e-2);
    tu_gradcheck("grad conv2d same stride 2", f_conv, stride2, 2, cv, yes, 3e-2);
    int64_t b3[1] = {3};
    ld_tensor *cl[3] = {cv[0], cv[1], tu_rnd(1, b3, -0.5f, 0.5f)};
    tu_gradcheck("grad conv layer (im2col, dense with bias and relu)", f_conv_layer, NULL, 3, cl, yes, 3e-2);
    int64_t ps[4] = {2, 4, 4, 3};
    ld_tensor *pl[1] = {tu_rnd(4, ps, -1, 1)};
    tu_gradcheck("grad max_pool2d", f_pool, NULL, 1, pl, first, 2e-2);
    int64_t pss[4] = {2, 5, 5, 2};
    ld_tensor *pls[1] = {tu_rnd(4, pss, -1, 1)};
    tu_gradcheck("grad max_pool2d same (padded with -inf)", f_pool_same, NULL, 1, pls, first, 2e-2);
    /* col2im: same, stride 2 (overlapping windows, padding dropped); valid kernel 2
       stride 3 (rows and columns no window covers) */
    int c2_same[4] = {3, 2, 1, 5}, c2_gap[4] = {2, 3, 0, 6};
    int64_t cs1[2] = {2 * 3 * 3, 3 * 3 * 2}, cs2[2] = {2 * 2 * 2, 2 * 2 * 2};
    ld_tensor *c1[1] = {tu_rnd(2, cs1, -1, 1)}, *c2[1] = {tu_rnd(2, cs2, -1, 1)};
    tu_gradcheck("grad col2im same stride 2", f_col2im, c2_same, 1, c1, first, 2e-2);
    tu_gradcheck("grad col2im kernel 2 stride 3", f_col2im, c2_gap, 1, c2, first, 2e-2);
    ld_tensor *pd[1] = {tu_rnd(2, s23, -1, 1)};
    tu_gradcheck("grad pad (concat of constants)", f_pad, NULL, 1, pd, first, 2e-2);

    int64_t lab_shape[1] = {3};
    int64_t labs[3] = {1, 0, 3};
    ld_tensor *xe[2] = {tu_rnd(2, s34, -2, 2), ld_tensor_from_data(LD_I64, 1, lab_shape, labs, NULL)};
    tu_gradcheck("grad sparse cross-entropy from logits", f_xent, NULL, 2, xe, first, 2e-2);
    /* rows longer than the vector width, with a tail, and a wide range of
       logits (the vector expf underflows to 0 far below the row's max) */
    {
        int64_t sw[2] = {5, 37}, lw[1] = {5}, labw[5] = {0, 36, 17, 16, 3};
        ld_tensor *xw[2] = {tu_rnd(2, sw, -40, 40), ld_tensor_from_data(LD_I64, 1, lw, labw, NULL)};
        TEST("sparse cross-entropy of 37 classes vs double reference") {
            ld_tensor *l = ld_sparse_xent_logits(xw[0], xw[1]);
            CHECK(l != NULL);
            double ref = 0;
            for (int64_t i = 0; i < 5; i++) {
                double m = -INFINITY, sum = 0;
                for (int64_t j = 0; j < 37; j++) m = fmax(m, ld_tensor_get_flat(xw[0], i * 37 + j));
                for (int64_t j = 0; j < 37; j++) sum += exp(ld_tensor_get_flat(xw[0], i * 37 + j) - m);
                ref += m + log(sum) - ld_tensor_get_flat(xw[0], i * 37 + labw[i]);
            }
            ref /= 5;
            if (l) CHECK_NEAR(ld_tensor_get_flat(l, 0), ref, 1e-5 * fmax(1, fabs(ref)));
            ld_tensor_release(l);
        }
        int64_t sn[2] = {5, 37};
        ld_tensor *xn[2] = {tu_rnd(2, sn, -3, 3), xw[1]};
        tu_gradcheck("grad sparse cross-entropy of 37 classes", f_xent, NULL, 2, xn, first, 2e-2);
        ld_tensor_release(xw[0]); ld_tensor_release(xw[1]); ld_tensor_release(xn[0]);
    }
    ld_loss scce_p = {.kind = LD_LOSS_SPARSE_CCE};
    ld_tensor *probs = ld_softmax(xe[0]);
    ld_tensor *xp[2] = {probs, xe[1]};
    tu_gradcheck("grad sparse cross-entropy from probabilities", f_loss, &scce_p, 2, xp, first, 3e-2);
    ld_loss cce = {.kind = LD_LOSS_CCE, .from_logits = 1}, bce_l = {.kind = LD_LOSS_BCE, .from_logits = 1},
            bce_p = {.kind = LD_LOSS_BCE}, mse = {.kind = LD_LOSS_MSE};
    ld_tensor *onehot = ld_tensor_zeros(LD_F32, 2, s34, NULL);
    for (int i = 0; i < 3; i++) ld_tensor_set_flat(onehot, i * 4 + labs[i], 1);
    ld_tensor *cc[2] = {tu_rnd(2, s34, -2, 2), onehot};
    tu_gradcheck("grad categorical cross-entropy", f_loss, &cce, 2, cc, first, 3e-2);
    ld_tensor *bin = ld_tensor_zeros(LD_F32, 2, s34, NULL);
    for (int i = 0; i < 12; i += 3) ld_tensor_set_flat(bin, i, 1);
    ld_tensor *bl[2] = {tu_rnd(2, s34, -2, 2), bin};
    tu_gradcheck("grad binary cross-entropy from logits", f_loss, &bce_l, 2, bl, first, 3e-2);
    ld_tensor *bp[2] = {tu_rnd(2, s34, 0.1f, 0.9f), bin};
    tu_gradcheck("grad binary cross-entropy from probabilities", f_loss, &bce_p, 2, bp, first, 3e-2);
    ld_tensor *ms[2] = {tu_rnd(2, s34, -2, 2), tu_rnd(2, s34, -2, 2)};
    tu_gradcheck("grad mean squared error", f_loss, &mse, 2, ms, first, 2e-2);
    /* Keras's other losses: predictions away from their kinks (|e| = delta,
       1 - t y = 0, the max of categorical hinge), positive where a log needs it */
    {
        static const struct { ld_loss_kind k; float lo, hi; const char *what; } rl[] = {
            {LD_LOSS_MAE, -2, 2, "mean absolute error"}, {LD_LOSS_MAPE, -2, 2, "mean absolute percentage error"},
            {LD_LOSS_MSLE, 0.1f, 3, "mean squared logarithmic error"}, {LD_LOSS_HUBER, -3, 3, "huber"},
            {LD_LOSS_LOGCOSH, -2, 2, "log cosh"}, {LD_LOSS_KLD, 0.05f, 0.95f, "kl divergence"},
            {LD_LOSS_POISSON, 0.1f, 3, "poisson"}, {LD_LOSS_COSINE, -2, 2, "cosine similarity"},
            {LD_LOSS_HINGE, -2, 2, "hinge"}, {LD_LOSS_SQUARED_HINGE, -2, 2, "squared hinge"},
            {LD_LOSS_CATEGORICAL_HINGE, -2, 2, "categorical hinge"}};
        for (size_t i = 0; i < sizeof rl / sizeof *rl; i++) {
            ld_loss lk = {.kind = rl[i].k, .delta = 1.0f};
            int hinge = rl[i].k == LD_LOSS_HINGE || rl[i].k == LD_LOSS_SQUARED_HINGE || rl[i].k == LD_LOSS_CATEGORICAL_HINGE;
            ld_tensor *yt = hinge ? ld_tensor_retain(rl[i].k == LD_LOSS_CATEGORICAL_HINGE ? onehot : bin)
                                  : tu_rnd(2, s34, rl[i].lo > 0 ? 0.1f : -2, rl[i].lo > 0 ? 0.9f : 2);
            ld_tensor *in[2] = {tu_rnd(2, s34, rl[i].lo, rl[i].hi), yt};
            char name[96];
            snprintf(name, sizeof name, "grad %s", rl[i].what);
            tu_gradcheck(name, f_loss, &lk, 2, in, first, 3e-2);
            ld_tensor_release(in[0]); ld_tensor_release(yt);
        }
    }

    /* forward values against hand-computed references */
    TEST("matmul values") {
        float av[6] = {1, 2, 3, 4, 5, 6}, bv[6] = {7, 8, 9, 10, 11, 12};
        int64_t sa[2] = {2, 3}, sb[2] = {3, 2};
        ld_tensor *a = ld_tensor_from_data(LD_F32, 2, sa, av, NULL), *b = ld_tensor_from_data(LD_F32, 2, sb, bv, NULL);
        ld_tensor *c = ld_matmul(a, b);
        CHECK_NEAR(ld_tensor_get_flat(c, 0), 58, 1e-6);
        CHECK_NEAR(ld_tensor_get_flat(c, 1), 64, 1e-6);
        CHECK_NEAR(ld_tensor_get_flat(c, 2), 139, 1e-6);
        CHECK_NEAR(ld_tensor_get_flat(c, 3), 154, 1e-6);
        ld_tensor *bad = ld_matmul(a, a);
        CHECK(bad == NULL);
        CHECK(strstr(ld_error(), "shapes 2x3 and 2x3 do not match") != NULL);
        ld_tensor_release(a); ld_tensor_release(b); ld_tensor_release(c);
    }
    TEST("broadcast error names the shapes") {
        ld_tensor *a = tu_rnd(2, s23, 0, 1), *b = tu_rnd(2, s34, 0, 1);
        CHECK(ld_add(a, b) == NULL);
        CHECK(strstr(ld_error(), "2x3 and 3x4") != NULL);
        ld_tensor_release(a); ld_tensor_release(b);
    }
    TEST("gelu matches the exact (erf) definition") {
        int64_t s1[1] = {1};
        float v = 0.7f;
        ld_tensor *x = ld_tensor_from_data(LD_F32, 1, s1, &v, NULL), *y = ld_gelu(x);
        CHECK_NEAR(ld_tensor_get_flat(y, 0), 0.5 * 0.7 * (1 + erf(0.7 / sqrt(2.0))), 1e-6);
        ld_tensor_release(x); ld_tensor_release(y);
    }
    TEST("a non-persistent tape computes gradients once") {
        ld_tensor *x = tu_rnd(1, s3, 0, 1);
        x->requires_grad = 1;
        ld_tape *t = ld_tape_new(0);
        ld_tape_push(t);
        ld_tensor *y = ld_sum(x, LD_ALL_AXES, 0);
        ld_tape_pop(t);
        ld_tensor *g = NULL;
        CHECK(ld_tape_gradient(t, y, 1, &x, &g) == LD_OK);
        ld_tensor_release(g);
        CHECK(ld_tape_gradient(t, y, 1, &x, &g) != LD_OK);
        CHECK(strstr(ld_error(), "only be called once") != NULL);
        ld_tape_free(t); ld_tensor_release(y); ld_tensor_release(x);
    }
    TEST("the thread pool's kernels match single-threaded ones") {
        /* sizes above the parallel thresholds, so the split paths run */
        int64_t xs2[4] = {16, 28, 28, 4}, ws2[4] = {3, 3, 4, 8}, ms[2] = {300, 200}, ns[2] = {200, 150};
        ld_tensor *x = tu_rnd(4, xs2, -1, 1), *w = tu_rnd(4, ws2, -1, 1), *a = tu_rnd(2, ms, -1, 1), *b = tu_rnd(2, ns, -1, 1);
        ld_tensor *out[2][6];
        for (int pass = 0; pass < 2; pass++) {
            ld_cpu_set_threads(pass == 0 ? 1 : 2);
            ld_tensor *xw = ld_clone(x);
            xw->requires_grad = 1;
            ld_tensor *ww = ld_clone(w);
            ww->requires_grad = 1;
            ld_tape *t = ld_tape_new(0);
            ld_tape_push(t);
            ld_tensor *y = ld_conv2d(xw, ww, 1, 1, 1), *p = ld_maxpool2d(y, 2, 2, 2, 2), *r = ld_relu(p);
            ld_tensor *l = ld_sum(r, LD_ALL_AXES, 0);
            ld_tape_pop(t);
            ld_tensor *src[2] = {xw, ww}, *g[2];
            CHECK(ld_tape_gradient(t, l, 2, src, g) == LD_OK);
            out[pass][0] = ld_tensor_retain(p); out[pass][1] = g[0]; out[pass][2] = g[1];
            out[pass][3] = ld_matmul(a, b);
            out[pass][4] = ld_add(a, a);
            out[pass][5] = ld_tanh(a);
            ld_tape_free(t);
            ld_tensor *rel[] = {xw, ww, y, p, r, l};
            for (int i = 0; i < 6; i++) ld_tensor_release(rel[i]);
        }
        ld_cpu_set_threads(ld_cpu_cores());
        for (int i = 0; i < 6; i++) {
            double e = tu_norm_err(out[1][i], out[0][i]);
            if (e > 1e-5) printf("#   result %d differs by %g\n", i, e);
            CHECK(e <= 1e-5);
            ld_tensor_release(out[0][i]); ld_tensor_release(out[1][i]);
        }
        ld_tensor_release(x); ld_tensor_release(w); ld_tensor_release(a); ld_tensor_release(b);
    }
    return tu_summary();
}
