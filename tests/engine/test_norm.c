/* test_norm.c - layer and batch normalization (ld_ops_norm.c): forward values
 * and gradients against double-precision references computed here,
 * gradients against central finite differences, the moving statistics,
 * the empty batch, synchronized = unsynchronized with one replica, a queued
 * device, and the error messages. Sizes cross the pool's 16-row blocks and
 * its parallel threshold (rows 1, 17, 1000; channels 1, 3, 130). */
#include "test_util.h"
#include "ld_ops.h"
#include "ld_ops_norm.h"
#include "ld_autograd.h"
#include "ld_device.h"
#include "ld_executor.h"
#include "ld_strategy.h"
#include "ld_pool.h"

#include <stdlib.h>
#include <string.h>

static ld_tensor *vec(int64_t n, float lo, float hi) { int64_t s[1] = {n}; return tu_rnd(1, s, lo, hi); }
static double *host(const ld_tensor *t) {
    int64_t n = ld_tensor_numel(t);
    double *d = malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) d[i] = ld_tensor_get_flat(t, i);
    return d;
}

/* ---- double-precision references over [rows, c] ---- */
/* layer norm: y, and the gradients of sum(y * R) */
static void ref_layer_norm(const double *x, const double *g, const double *b, const double *R, int64_t rows,
                           int64_t c, double eps, double *y, double *dx, double *dg, double *db) {
    if (dg) for (int64_t k = 0; k < c; k++) dg[k] = db[k] = 0;
    for (int64_t r = 0; r < rows; r++) {
        const double *xr = x + r * c;
        double m = 0, v = 0;
        for (int64_t k = 0; k < c; k++) m += xr[k];
        m /= c;
        for (int64_t k = 0; k < c; k++) v += (xr[k] - m) * (xr[k] - m);
        v /= c;
        double rs = 1 / sqrt(v + eps), sg = 0, sgx = 0;
        for (int64_t k = 0; k < c; k++) {
            double xh = (xr[k] - m) * rs, gam = g ? g[k] : 1;
            y[r * c + k] = xh * gam + (b ? b[k] : 0);
            if (R) {
                double dy = R[r * c + k], gg = dy * gam;
                sg += gg; sgx += gg * xh;
                if (dg) { dg[k] += dy * xh; db[k] += dy; }
            }
        }
        if (R)
            for (int64_t k = 0; k < c; k++) {
                double xh = (xr[k] - m) * rs, gam = g ? g[k] : 1;
                dx[r * c + k] = rs * (R[r * c + k] * gam - sg / c - xh * sgx / c);
            }
    }
}

/* batch norm in training: y, batch mean/var, and the gradients of sum(y * R) */
static void ref_batch_norm(const double *x, const double *g, const double *b, const double *R, int64_t rows,
                           int64_t c, double eps, double *y, double *mean, double *var, double *dx, double *dg,
                           double *db) {
    for (int64_t k = 0; k < c; k++) {
        double m = 0, v = 0;
        for (int64_t r = 0; r < rows; r++) m += x[r * c + k];
        m /= rows;
        for (int64_t r = 0; r < rows; r++) v += (x[r * c + k] - m) * (x[r * c + k] - m);
        v /= rows;
        mean[k] = m; var[k] = v;
        double rs = 1 / sqrt(v + eps), gam = g ? g[k] : 1, s0 = 0, s1 = 0;
        for (int64_t r = 0; r < rows; r++) {
            double xh = (x[r * c + k] - m) * rs;
            y[r * c + k] = xh * gam + (b ? b[k] : 0);
            if (R) { s0 += R[r * c + k]; s1 += R[r * c + k] * xh; }
        }
        if (!R) continue;
        if (dg) { dg[k] = s1; db[k] = s0; }
        for (int64_t r = 0; r < rows; r++) {
            double xh = (x[r * c + k] - m) * rs;
            dx[r * c + k] = gam * rs * (R[r * c + k] - s0 / rows - xh * s1 / rows);
        }
    }
}

static double max_err(const ld_tensor *t, const double *ref, int64_t n) {
    double worst = 0, scale = 1;
    for (int64_t i = 0; i < n; i++) {
        double v = ld_tensor_get_flat(t, i);
        if (fabs(ref[i]) > scale) scale = fabs(ref[i]);
        double e = fabs(v - ref[i]);
        if (!(e <= worst)) worst = e;   /* NaN counts */
    }
    return worst / scale;
}

/* ---- ops under test ---- */
typedef struct { float momentum, eps; int training, sync; ld_tensor *mm, *mv; } bn_cfg;
static ld_tensor *f_ln(ld_tensor **in, void *ud) { return ld_layer_norm(in[0], in[1], in[2], 1e-3f); }
static ld_tensor *f_bn(ld_tensor **in, void *ud) {
    bn_cfg *c = ud;
    return ld_batch_norm(in[0], in[1], in[2], c->mm, c->mv, c->momentum, c->eps, c->training, c->sync);
}

/* forward + tape gradients of sum(y * R) against the references for one size */
static void check_size(int64_t rows, int64_t c, int bn, int affine) {
    char name[128];
    snprintf(name, sizeof name, "%s %lldx%lld%s: values and gradients against the double reference",
             bn ? "batch_norm (training)" : "layer_norm", (long long)rows, (long long)c, affine ? "" : " (no gamma/beta)");
    TEST(name) {
        int64_t xs[2] = {rows, c};
        ld_tensor *x = tu_rnd(2, xs, -2, 3), *g = affine ? vec(c, 0.5f, 1.5f) : NULL, *b = affine ? vec(c, -1, 1) : NULL;
        ld_tensor *R = tu_rnd(2, xs, -1, 1), *mm = ld_tensor_zeros(LD_F32, 1, &c, NULL), *mv = ld_tensor_full(LD_F32, 1, &c, 1, NULL);
        ld_tensor *in[3] = {x, g, b};
        ld_tape *tape = ld_tape_new(0);
        ld_tape_watch(tape, x);
        if (g) ld_tape_watch(tape, g);
        if (b) ld_tape_watch(tape, b);
        ld_tape_push(tape);
        ld_tensor *y = bn ? ld_batch_norm(x, g, b, mm, mv, 0.9f, 1e-3f, 1, 0) : ld_layer_norm(x, g, b, 1e-3f);
        ld_tensor *p = y ? ld_mul(y, R) : NULL, *loss = p ? ld_sum(p, LD_ALL_AXES, 0) : NULL;
        ld_tape_pop(tape);
        CHECK(loss != NULL);
        ld_tensor *grads[3] = {0};
        int n = affine ? 3 : 1;
        CHECK(loss && ld_tape_gradient(tape, loss, n, in, grads) == LD_OK);
        if (loss && grads[0]) {
            double *hx = host(x), *hg = g ? host(g) : NULL, *hb = b ? host(b) : NULL, *hR = host(R);
            int64_t N = rows * c;
            double *ry = malloc(sizeof(double) * N), *rdx = malloc(sizeof(double) * N);
            double *rdg = malloc(sizeof(double) * c), *rdb = malloc(sizeof(double) * c);
            double *rm = malloc(sizeof(double) * c), *rv = malloc(sizeof(double) * c);
            if (bn) ref_batch_norm(hx, hg, hb, hR, rows, c, 1e-3, ry, rm, rv, rdx, rdg, rdb);
            else ref_layer_norm(hx, hg, hb, hR, rows, c, 1e-3, ry, rdx, rdg, rdb);
            double e = max_err(y, ry, N);
            if (e > 1e-5) printf("#   y: max error %.3g\n", e);
            CHECK(e <= 1e-5);
            e = max_err(grads[0], rdx, N);
            /* one row of batch norm (var 0): dx is rounding noise around 0 */
            double tol = bn && rows == 1 ? 1e-2 : 2e-4;
            if (e > tol) printf("#   dx: max error %.3g\n", e);
            CHECK(e <= tol);
            if (affine) {
                double e1 = max_err(grads[1], rdg, c), e2 = max_err(grads[2], rdb, c);
                if (e1 > 1e-4 || e2 > 1e-4) printf("#   dgamma %.3g dbeta %.3g\n", e1, e2);
                CHECK(e1 <= 1e-4);
                CHECK(e2 <= 1e-4);
            }
            if (bn) {   /* one update from mm = 0, mv = 1 with momentum 0.9 */
                double worst = 0;
                for (int64_t k = 0; k < c; k++) {
                    double em = fabs(ld_tensor_get_flat(mm, k) - 0.1 * rm[k]);
                    double ev = fabs(ld_tensor_get_flat(mv, k) - (0.9 + 0.1 * rv[k]));
                    if (em > worst) worst = em;
                    if (ev > worst) worst = ev;
                }
                CHECK(worst < 1e-5);
            }
            free(hx); free(hg); free(hb); free(hR); free(ry); free(rdx); free(rdg); free(rdb); free(rm); free(rv);
        }
        for (int k = 0; k < 3; k++) ld_tensor_release(grads[k]);
        ld_tape_free(tape);
        ld_tensor_release(y); ld_tensor_release(p); ld_tensor_release(loss);
        ld_tensor_release(x); ld_tensor_release(g); ld_tensor_release(b); ld_tensor_release(R);
        ld_tensor_release(mm); ld_tensor_release(mv);
    }
}

static int bits_equal(ld_tensor *a, ld_tensor *b) {
    if (!a || !b || ld_tensor_numel(a) != ld_tensor_numel(b)) return 0;
    for (int64_t i = 0; i < ld_tensor_numel(a); i++) {
        float x = (float)ld_tensor_get_flat(a, i), y = (float)ld_tensor_get_flat(b, i);
        if (memcmp(&x, &y, sizeof x) != 0) return 0;
    }
    return 1;
}

/* y and the three gradients of sum(y * R) for a batch norm */
static int bn_run(ld_tensor *x, ld_tensor *g, ld_tensor *b, ld_tensor *mm, ld_tensor *mv, ld_tensor *R, int sync,
                  ld_tensor **out /* y, dx, dg, db */) {
    ld_tape *tape = ld_tape_new(0);
    ld_tape_watch(tape, x); ld_tape_watch(tape, g); ld_tape_watch(tape, b);
    ld_tape_push(tape);
    ld_tensor *y = ld_batch_norm(x, g, b, mm, mv, 0.9f, 1e-3f, 1, sync);
    ld_tensor *p = y ? ld_mul(y, R) : NULL, *l = p ? ld_sum(p, LD_ALL_AXES, 0) : NULL;
    ld_tape_pop(tape);
    ld_tensor *in[3] = {x, g, b};
    int st = l ? ld_tape_gradient(tape, l, 3, in, out + 1) : ld_error_status();
    out[0] = y;
    ld_tensor_release(p); ld_tensor_release(l);
    ld_tape_free(tape);
    return st;
}

int main(void) {
    ld_rng_seed(&tu_rng, 4321);
    if (ld_cpu_threads() < 4) ld_cpu_set_threads(4);
    int yes[3] = {1, 1, 1}, first[3] = {1, 0, 0};

    /* ---- finite differences ---- */
    int64_t s45[2] = {4, 5}, s234[3] = {2, 3, 4}, s63[2] = {6, 3}, nhwc[4] = {2, 3, 3, 2};
    ld_tensor *ln1[3] = {tu_rnd(2, s45, -2, 2), vec(5, 0.5f, 1.5f), vec(5, -1, 1)};
    tu_gradcheck("grad layer_norm 4x5 (x, gamma, beta)", f_ln, NULL, 3, ln1, yes, 2e-2);
    ld_tensor *ln2[3] = {tu_rnd(3, s234, -2, 2), vec(4, 0.5f, 1.5f), vec(4, -1, 1)};
    tu_gradcheck("grad layer_norm 2x3x4 (x, gamma, beta)", f_ln, NULL, 3, ln2, yes, 2e-2);
    ld_tensor *ln3[3] = {ln1[0], NULL, NULL};
    tu_gradcheck("grad layer_norm without gamma/beta", f_ln, NULL, 1, ln3, first, 2e-2);

    bn_cfg train = {0.9f, 1e-3f, 1, 0, NULL, NULL}, infer = {0.9f, 1e-3f, 0, 0, NULL, NULL};
    int64_t c3 = 3, c2 = 2;
    train.mm = ld_tensor_zeros(LD_F32, 1, &c3, NULL); train.mv = ld_tensor_full(LD_F32, 1, &c3, 1, NULL);
    ld_tensor *bn1[3] = {tu_rnd(2, s63, -2, 2), vec(3, 0.5f, 1.5f), vec(3, -1, 1)};
    tu_gradcheck("grad batch_norm training 6x3 (x, gamma, beta)", f_bn, &train, 3, bn1, yes, 2e-2);
    ld_tensor *bn1n[3] = {bn1[0], NULL, NULL};
    tu_gradcheck("grad batch_norm training without gamma/beta", f_bn, &train, 1, bn1n, first, 2e-2);
    bn_cfg train2 = train;
    train2.mm = ld_tensor_zeros(LD_F32, 1, &c2, NULL); train2.mv = ld_tensor_full(LD_F32, 1, &c2, 1, NULL);
    ld_tensor *bn2[3] = {tu_rnd(4, nhwc, -2, 2), vec(2, 0.5f, 1.5f), vec(2, -1, 1)};
    tu_gradcheck("grad batch_norm training NHWC 2x3x3x2 (x, gamma, beta)", f_bn, &train2, 3, bn2, yes, 2e-2);
    infer.mm = vec(3, -0.5f, 0.5f); infer.mv = vec(3, 0.5f, 2.0f);
    tu_gradcheck("grad batch_norm inference 6x3 (x, gamma, beta)", f_bn, &infer, 3, bn1, yes, 2e-2);
    bn_cfg train_sync = train;
    train_sync.sync = 1;
    tu_gradcheck("grad batch_norm training synchronized (one replica)", f_bn, &train_sync, 3, bn1, yes, 2e-2);

    /* ---- values and gradients against the references, across block edges ---- */
    int64_t rows_l[3] = {1, 17, 1000}, cs[3] = {1, 3, 130};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) {
            if (cs[j] > 1) check_size(rows_l[i], cs[j], 0, 1);   /* a layer norm over 1 channel is all zeros */
            if (rows_l[i] > 1) check_size(rows_l[i], cs[j], 1, 1);
        }
    check_size(1000, 130, 0, 0);
    /* layer norm rows of one vector (16), one past it, and the transformer's 64 */
    check_size(33, 16, 0, 1);
    check_size(33, 17, 0, 0);
    check_size(2, 64, 0, 1);
    check_size(2100, 130, 0, 1);   /* past LN_PAR_MIN: split over the pool */
    check_size(1000, 130, 1, 0);
    check_size(1, 1, 1, 1);
    check_size(5000, 3, 1, 1);

    TEST("layer_norm over 1 channel gives beta") {
        int64_t s[2] = {17, 1};
        ld_tensor *x = tu_rnd(2, s, -1, 1), *g = vec(1, 2, 3), *b = vec(1, -1, 1);
        ld_tensor *y = ld_layer_norm(x, g, b, 1e-3f);
        CHECK(y != NULL);
        for (int64_t i = 0; y && i < 17; i++) CHECK_NEAR(ld_tensor_get_flat(y, i), ld_tensor_get_flat(b, 0), 1e-6);
        ld_tensor_release(x); ld_tensor_release(g); ld_tensor_release(b); ld_tensor_release(y);
    }

    TEST("batch_norm inference values") {
        int64_t s[3] = {17, 2, 130};
        ld_tensor *x = tu_rnd(3, s, -2, 2), *g = vec(130, 0.5f, 1.5f), *b = vec(130, -1, 1);
        ld_tensor *mm = vec(130, -0.5f, 0.5f), *mv = vec(130, 0.5f, 2);
        ld_tensor *mm0 = ld_clone(mm), *mv0 = ld_clone(mv);
        ld_tensor *y = ld_batch_norm(x, g, b, mm, mv, 0.99f, 1e-3f, 0, 0);
        CHECK(y != NULL && y->ndim == 3 && y->shape[2] == 130);
        double worst = 0;
        for (int64_t i = 0; y && i < 17 * 2 * 130; i++) {
            int64_t k = i % 130;
            double ref = (ld_tensor_get_flat(x, i) - ld_tensor_get_flat(mm, k)) / sqrt(ld_tensor_get_flat(mv, k) + 1e-3) *
                             ld_tensor_get_flat(g, k) + ld_tensor_get_flat(b, k);
            double e = fabs(ld_tensor_get_flat(y, i) - ref);
            if (e > worst) worst = e;
        }
        CHECK(worst < 1e-5);
        CHECK(bits_equal(mm, mm0) && bits_equal(mv, mv0));   /* inference leaves them alone */
        ld_tensor_release(x); ld_tensor_release(g); ld_tensor_release(b); ld_tensor_release(mm); ld_tensor_release(mv);
        ld_tensor_release(mm0); ld_tensor_release(mv0); ld_tensor_release(y);
    }

    TEST("moving statistics after two training calls follow the Keras formula") {
        int64_t s[4] = {3, 4, 5, 3};
        int64_t c = 3, rows = 60;
        ld_tensor *x1 = tu_rnd(4, s, -1, 3), *x2 = tu_rnd(4, s, 2, 5);
        ld_tensor *mm = vec(3, -0.5f, 0.5f), *mv = vec(3, 0.5f, 2);
        double m[3], v[3];
        for (int k = 0; k < 3; k++) { m[k] = ld_tensor_get_flat(mm, k); v[k] = ld_tensor_get_flat(mv, k); }
        float mom = 0.8f;
        ld_tensor *xs2[2] = {x1, x2};
        for (int step = 0; step < 2; step++) {
            ld_tensor *y = ld_batch_norm(xs2[step], NULL, NULL, mm, mv, mom, 1e-3f, 1, 0);
            CHECK(y != NULL);
            ld_tensor_release(y);
            for (int64_t k = 0; k < c; k++) {
                double bm = 0, bv = 0;
                for (int64_t r = 0; r < rows; r++) bm += ld_tensor_get_flat(xs2[step], r * c + k);
                bm /= rows;
                for (int64_t r = 0; r < rows; r++) { double d = ld_tensor_get_flat(xs2[step], r * c + k) - bm; bv += d * d; }
                bv /= rows;   /* biased */
                m[k] = m[k] * mom + bm * (1 - mom);
                v[k] = v[k] * mom + bv * (1 - mom);
            }
        }
        for (int k = 0; k < 3; k++) {
            CHECK_NEAR(ld_tensor_get_flat(mm, k), m[k], 1e-5);
            CHECK_NEAR(ld_tensor_get_flat(mv, k), v[k], 1e-5);
        }
        ld_tensor_release(x1); ld_tensor_release(x2); ld_tensor_release(mm); ld_tensor_release(mv);
    }

    TEST("an empty batch: empty output, moving statistics untouched, no NaN") {
        int64_t s[2] = {0, 4};
        ld_tensor *x = ld_tensor_zeros(LD_F32, 2, s, NULL), *g = vec(4, 0.5f, 1.5f), *b = vec(4, -1, 1);
        ld_tensor *mm = vec(4, -0.5f, 0.5f), *mv = vec(4, 0.5f, 2), *mm0 = ld_clone(mm), *mv0 = ld_clone(mv);
        ld_tensor *R = ld_tensor_zeros(LD_F32, 2, s, NULL), *out[4] = {0};
        for (int sync = 0; sync < 2; sync++) {
            CHECK(bn_run(x, g, b, mm, mv, R, sync, out) == LD_OK);
            CHECK(out[0] && out[0]->ndim == 2 && out[0]->shape[0] == 0 && out[0]->shape[1] == 4);
            CHECK(bits_equal(mm, mm0) && bits_equal(mv, mv0));
            for (int k = 0; k < 4; k++) {
                CHECK(!isnan(ld_tensor_get_flat(mm, k)) && !isnan(ld_tensor_get_flat(mv, k)));
                if (out[2]) CHECK(ld_tensor_get_flat(out[2], k) == 0);
                if (out[3]) CHECK(ld_tensor_get_flat(out[3], k) == 0);
            }
            CHECK(out[1] && ld_tensor_numel(out[1]) == 0);
            for (int k = 0; k < 4; k++) { ld_tensor_release(out[k]); out[k] = NULL; }
        }
        ld_tensor *yl = ld_layer_norm(x, g, b, 1e-3f);
        CHECK(yl && ld_tensor_numel(yl) == 0);
        ld_tensor *yi = ld_batch_norm(x, g, b, mm, mv, 0.9f, 1e-3f, 0, 0);
        CHECK(yi && ld_tensor_numel(yi) == 0);
        ld_tensor_release(yl); ld_tensor_release(yi);
        ld_tensor_release(x); ld_tensor_release(g); ld_tensor_release(b); ld_tensor_release(R);
        ld_tensor_release(mm); ld_tensor_release(mv); ld_tensor_release(mm0); ld_tensor_release(mv0);
    }

    TEST("synchronized equals unsynchronized with one replica (bit for bit)") {
        int64_t s[2] = {1000, 130};
        ld_tensor *x = tu_rnd(2, s, -2, 3), *g = vec(130, 0.5f, 1.5f), *b = vec(130, -1, 1), *R = tu_rnd(2, s, -1, 1);
        ld_tensor *mmA = vec(130, -1, 1), *mvA = vec(130, 0.5f, 2), *mmB = ld_clone(mmA), *mvB = ld_clone(mvA);
        ld_tensor *mmC = ld_clone(mmA), *mvC = ld_clone(mvA);
        ld_tensor *a[4] = {0}, *bb[4] = {0}, *cc[4] = {0};
        CHECK(bn_run(x, g, b, mmA, mvA, R, 0, a) == LD_OK);
        CHECK(bn_run(x, g, b, mmB, mvB, R, 1, bb) == LD_OK);   /* outside a replica */
        ld_replica_ctx rc = {0, 1, 1000, ld_device_cpu(), 0};
        ld_replica_set(&rc);                                     /* one replica of one */
        CHECK(bn_run(x, g, b, mmC, mvC, R, 1, cc) == LD_OK);
        ld_replica_set(NULL);
        for (int k = 0; k < 4; k++) { CHECK(bits_equal(a[k], bb[k])); CHECK(bits_equal(a[k], cc[k])); }
        CHECK(bits_equal(mmA, mmB) && bits_equal(mvA, mvB) && bits_equal(mmA, mmC) && bits_equal(mvA, mvC));
        for (int k = 0; k < 4; k++) { ld_tensor_release(a[k]); ld_tensor_release(bb[k]); ld_tensor_release(cc[k]); }
        ld_tensor_release(x); ld_tensor_release(g); ld_tensor_release(b); ld_tensor_release(R);
        ld_tensor_release(mmA); ld_tensor_release(mvA); ld_tensor_release(mmB); ld_tensor_release(mvB);
        ld_tensor_release(mmC); ld_tensor_release(mvC);
    }

    TEST("the thread pool's split gives what one thread gives (to rounding)") {
        int64_t s[2] = {1000, 130};
        ld_tensor *x = tu_rnd(2, s, -2, 3), *g = vec(130, 0.5f, 1.5f), *b = vec(130, -1, 1), *R = tu_rnd(2, s, -1, 1);
        ld_tensor *res[2][4] = {{0}}, *mms[2], *mvs[2];
        int th = ld_cpu_threads();
        for (int pass = 0; pass < 2; pass++) {
            ld_cpu_set_threads(pass == 0 ? 1 : 4);
            mms[pass] = ld_tensor_zeros(LD_F32, 1, &s[1], NULL);
            mvs[pass] = ld_tensor_full(LD_F32, 1, &s[1], 1, NULL);
            CHECK(bn_run(x, g, b, mms[pass], mvs[pass], R, 0, res[pass]) == LD_OK);
        }
        ld_cpu_set_threads(th);
        for (int k = 0; k < 4; k++) CHECK(res[0][k] && res[1][k] && tu_norm_err(res[0][k], res[1][k]) < 1e-5);
        CHECK(tu_norm_err(mms[0], mms[1]) < 1e-6 && tu_norm_err(mvs[0], mvs[1]) < 1e-6);
        for (int p = 0; p < 2; p++) {
            for (int k = 0; k < 4; k++) ld_tensor_release(res[p][k]);
            ld_tensor_release(mms[p]); ld_tensor_release(mvs[p]);
        }
        ld_tensor_release(x); ld_tensor_release(g); ld_tensor_release(b); ld_tensor_release(R);
    }

    TEST("a queued CPU device (cpu:1) gives the host's results, moving statistics included") {
        CHECK(ld_cpu_devices(2) == LD_OK);
        ld_device *d1 = ld_device_find("cpu:1");
        CHECK(d1 != NULL);
        if (d1) {
            int64_t s[4] = {4, 5, 5, 130};
            ld_tensor *x = tu_rnd(4, s, -2, 3), *g = vec(130, 0.5f, 1.5f), *b = vec(130, -1, 1), *R = tu_rnd(4, s, -1, 1);
            ld_tensor *mm = ld_tensor_zeros(LD_F32, 1, &s[3], NULL), *mv = ld_tensor_full(LD_F32, 1, &s[3], 1, NULL);
            ld_tensor *x1 = ld_to_device(x, d1), *g1 = ld_to_device(g, d1), *b1 = ld_to_device(b, d1);
            ld_tensor *R1 = ld_to_device(R, d1), *mm1 = ld_to_device(mm, d1), *mv1 = ld_to_device(mv, d1);
            ld_tensor *h[4] = {0}, *q[4] = {0};
            CHECK(bn_run(x, g, b, mm, mv, R, 0, h) == LD_OK);
            CHECK(bn_run(x1, g1, b1, mm1, mv1, R1, 0, q) == LD_OK);
            for (int k = 0; k < 4; k++) {
                ld_tensor *qh = q[k] ? ld_to_device(q[k], ld_device_cpu()) : NULL;
                CHECK(qh && h[k] && tu_norm_err(qh, h[k]) < 1e-5);
                ld_tensor_release(qh);
            }
            ld_tensor *mmh = ld_to_device(mm1, ld_device_cpu()), *mvh = ld_to_device(mv1, ld_device_cpu());
            CHECK(mmh && mvh && tu_norm_err(mmh, mm) < 1e-6 && tu_norm_err(mvh, mv) < 1e-6);
            ld_tensor *yl = ld_layer_norm(x1, g1, b1, 1e-3f), *yh = ld_layer_norm(x, g, b, 1e-3f);
            ld_tensor *ylh = yl ? ld_to_device(yl, ld_device_cpu()) : NULL;
            CHECK(ylh && yh && tu_norm_err(ylh, yh) < 1e-6);
            ld_tensor_release(yl); ld_tensor_release(yh); ld_tensor_release(ylh);
            ld_tensor_release(mmh); ld_tensor_release(mvh);
            for (int k = 0; k < 4; k++) { ld_tensor_release(h[k]); ld_tensor_release(q[k]); }
            ld_tensor *all[] = {x, g, b, R, mm, mv, x1, g1, b1, R1, mm1, mv1};
            for (size_t k = 0; k < sizeof all / sizeof *all; k++) ld_tensor_release(all[k]);
        }
    }

    TEST("errors name the op and the shapes") {
        int64_t s[2] = {4, 3};
        ld_tensor *x = tu_rnd(2, s, -1, 1), *g4 = vec(4, 0, 1), *g3 = vec(3, 0, 1), *mm = vec(3, 0, 1), *mv = vec(3, 1, 2);
        ld_tensor *mv5 = vec(5, 1, 2);
        CHECK(ld_batch_norm(x, g4, NULL, mm, mv, 0.9f, 1e-3f, 1, 0) == NULL);
        CHECK(ld_error_status() == LD_ESHAPE);
        CHECK(tu_contains(ld_error(), "batch_norm: gamma has shape 4, expected [3] (the last axis of x, shape 4x3)"));
        CHECK(ld_batch_norm(x, g3, g4, mm, mv, 0.9f, 1e-3f, 0, 0) == NULL);
        CHECK(tu_contains(ld_error(), "batch_norm: beta has shape 4"));
        CHECK(ld_batch_norm(x, g3, g3, mm, mv5, 0.9f, 1e-3f, 1, 0) == NULL);
        CHECK(ld_error_status() == LD_ESHAPE);
        CHECK(tu_contains(ld_error(), "batch_norm: moving_var has shape 5, expected [3]"));
        CHECK(ld_batch_norm(x, g3, g3, mv5, mv, 0.9f, 1e-3f, 1, 0) == NULL);
        CHECK(tu_contains(ld_error(), "batch_norm: moving_mean has shape 5"));
        CHECK(ld_layer_norm(x, g4, NULL, 1e-3f) == NULL);
        CHECK(ld_error_status() == LD_ESHAPE);
        CHECK(tu_contains(ld_error(), "layer_norm: gamma has shape 4, expected [3] (the last axis of x, shape 4x3)"));
        CHECK(ld_layer_norm(x, NULL, g4, 1e-3f) == NULL);
        CHECK(tu_contains(ld_error(), "layer_norm: beta has shape 4"));
        ld_tensor *sc = ld_tensor_scalar(1.0f, NULL);
        CHECK(ld_batch_norm(sc, NULL, NULL, mm, mv, 0.9f, 1e-3f, 1, 0) == NULL);
        CHECK(ld_error_status() == LD_ESHAPE);
        CHECK(tu_contains(ld_error(), "batch_norm: x with shape"));
        CHECK(tu_contains(ld_error(), "has no channel axis"));
        CHECK(ld_layer_norm(sc, NULL, NULL, 1e-3f) == NULL);
        CHECK(tu_contains(ld_error(), "layer_norm: x with shape"));
        ld_tensor *xi = ld_tensor_zeros(LD_I32, 2, s, NULL);
        CHECK(ld_batch_norm(xi, NULL, NULL, mm, mv, 0.9f, 1e-3f, 1, 0) == NULL);
        CHECK(ld_error_status() == LD_ETYPE);
        CHECK(tu_contains(ld_error(), "batch_norm needs a float32, float16 or bfloat16 input, got int32"));
        CHECK(ld_layer_norm(xi, NULL, NULL, 1e-3f) == NULL);
        CHECK(ld_error_status() == LD_ETYPE);
        CHECK(tu_contains(ld_error(), "layer_norm needs a float32, float16 or bfloat16 input, got int32"));
        ld_tensor *gi = ld_tensor_zeros(LD_I32, 1, &s[1], NULL);
        CHECK(ld_layer_norm(x, gi, NULL, 1e-3f) == NULL);
        CHECK(ld_error_status() == LD_ETYPE);
        CHECK(tu_contains(ld_error(), "layer_norm: gamma must be float32, got int32"));
        CHECK(ld_batch_norm(x, NULL, NULL, NULL, mv, 0.9f, 1e-3f, 1, 0) == NULL);
        CHECK(tu_contains(ld_error(), "moving_mean and moving_var are required"));
        ld_tensor *all[] = {x, g4, g3, mm, mv, mv5, sc, xi, gi};
        for (size_t k = 0; k < sizeof all / sizeof *all; k++) ld_tensor_release(all[k]);
    }

    for (int k = 0; k < 3; k++) { ld_tensor_release(ln1[k]); ld_tensor_release(ln2[k]); ld_tensor_release(bn1[k]); ld_tensor_release(bn2[k]); }
    ld_tensor_release(train.mm); ld_tensor_release(train.mv); ld_tensor_release(train2.mm); ld_tensor_release(train2.mv);
    ld_tensor_release(infer.mm); ld_tensor_release(infer.mv);
    return tu_summary();
}
