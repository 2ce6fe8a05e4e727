/* test_index_ops.c - concat, slice, embedding, average pooling
 * (ld_ops_index.h): forward values against plain reference loops, on one
 * thread and split over the pool, gradients against central finite
 * differences, and the error messages. */
#include "test_util.h"
#include "ld_ops.h"
#include "ld_ops_index.h"
#include "ld_ops_pool.h"
#include "ld_autograd.h"
#include "ld_device.h"
#include "ld_executor.h"
#include "ld_pool.h"

#include <stdlib.h>
#include <string.h>

/* max |a - b| over two host float tensors of n elements; inf when one is missing */
static double max_diff(ld_tensor *a, const float *ref, int64_t n) {
    if (!a || ld_tensor_numel(a) != n) return INFINITY;
    const float *p = ld_tensor_data(a);
    if (!p) return INFINITY;
    double w = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)p[i] - ref[i]);
        if (!(e <= w)) w = e;   /* NaN counts */
    }
    return w;
}

/* ================================================================ references */
/* concat along axis of tensors of ndim dims (contiguous host float) */
static float *ref_concat(int n, ld_tensor **xs, int axis, int64_t *total) {
    ld_tensor *f = xs[0];
    int64_t outer = 1, inner = 1, big = 0;
    for (int i = 0; i < axis; i++) outer *= f->shape[i];
    for (int i = axis + 1; i < f->ndim; i++) inner *= f->shape[i];
    for (int k = 0; k < n; k++) big += xs[k]->shape[axis];
    float *out = malloc(sizeof(float) * (size_t)(outer * big * inner + 1));
    for (int64_t o = 0; o < outer; o++) {
        int64_t pos = 0;
        for (int k = 0; k < n; k++) {
            int64_t len = xs[k]->shape[axis];
            for (int64_t j = 0; j < len; j++)
                for (int64_t i = 0; i < inner; i++)
                    out[(o * big + pos + j) * inner + i] = (float)ld_tensor_get_flat(xs[k], (o * len + j) * inner + i);
            pos += len;
        }
    }
    *total = outer * big * inner;
    return out;
}

static float *ref_avgpool(ld_tensor *x, int kh, int kw, int sh, int sw, int same, int64_t *oh_, int64_t *ow_) {
    int64_t n = x->shape[0], h = x->shape[1], w = x->shape[2], c = x->shape[3], oh, ow, ph = 0, pw = 0;
    if (same) {
        oh = (h + sh - 1) / sh; ow = (w + sw - 1) / sw;
        int64_t th = (oh - 1) * sh + kh - h, tw = (ow - 1) * sw + kw - w;
        if (th > 0) ph = th / 2;
        if (tw > 0) pw = tw / 2;
    } else { oh = (h - kh) / sh + 1; ow = (w - kw) / sw + 1; }
    const float *xp = ld_tensor_data(x);
    float *y = malloc(sizeof(float) * (size_t)(n * oh * ow * c + 1));
    for (int64_t b = 0; b < n; b++)
        for (int64_t i = 0; i < oh; i++)
            for (int64_t j = 0; j < ow; j++)
                for (int64_t e = 0; e < c; e++) {
                    double s = 0;
                    int cnt = 0;
                    for (int a = 0; a < kh; a++)
                        for (int q = 0; q < kw; q++) {
                            int64_t yy = i * sh - ph + a, xx = j * sw - pw + q;
                            if (yy < 0 || yy >= h || xx < 0 || xx >= w) continue;
                            s += xp[((b * h + yy) * w + xx) * c + e];
                            cnt++;
                        }
                    y[((b * oh + i) * ow + j) * c + e] = (float)(s / cnt);
                }
    *oh_ = oh; *ow_ = ow;
    return y;
}

/* ================================================================ ops under test */
static ld_tensor *f_concat(ld_tensor **in, void *ud) { int *a = ud; return ld_concat_op(a[0], in, a[1]); }
static ld_tensor *f_slice(ld_tensor **in, void *ud) { int64_t *a = ud; return ld_slice_op(in[0], (int)a[0], a[1], a[2]); }
/* slices of one tensor concatenated again in another order: both ops' gradients together */
static ld_tensor *f_slice_concat(ld_tensor **in, void *ud) {
    ld_tensor *a = ld_slice_op(in[0], 1, 0, 2), *b = ld_slice_op(in[0], 1, 2, 3);
    ld_tensor *parts[3] = {b, a, b};
    ld_tensor *y = a && b ? ld_concat_op(3, parts, 1) : NULL;
    ld_tensor_release(a); ld_tensor_release(b);
    return y;
}
static ld_tensor *f_concat_view(ld_tensor **in, void *ud) {
    ld_tensor *t = ld_transpose_op(in[0], 0, 1);
    ld_tensor *parts[2] = {t, in[1]};
    ld_tensor *y = t ? ld_concat_op(2, parts, 1) : NULL;
    ld_tensor_release(t);
    return y;
}
static ld_tensor *f_embed(ld_tensor **in, void *ud) { return ld_embedding_op(in[0], ud); }
static ld_tensor *f_avg(ld_tensor **in, void *ud) { int *a = ud; return ld_avgpool2d(in[0], a[0], a[1], a[2], a[3], a[4]); }
static ld_tensor *f_gap(ld_tensor **in, void *ud) { return ld_global_avgpool2d(in[0], *(int *)ud); }

static int error_has(const char *needle) {
    int ok = strstr(ld_error(), needle) != NULL;
    if (!ok) printf("#   error \"%s\" lacks \"%s\"\n", ld_error(), needle);
    ld_clear_error();
    return ok;
}

int main(void) {
    ld_rng_seed(&tu_rng, 4321);
    int yes[8] = {1, 1, 1, 1, 1, 1, 1, 1}, first[1] = {1};
    if (ld_cpu_devices(2)) { printf("not ok - %s\n", ld_error()); return 1; }

    /* ---- concat forward: axes 0, 1, -1; 2 and 3 inputs; one and several threads */
    for (int threads = 1; threads <= 4; threads += 3) {
        ld_cpu_set_threads(threads);
        struct { int nd; int64_t s[3][3]; int n, axis; int64_t scale; } cases[] = {
            {2, {{2, 3}, {4, 3}}, 2, 0, 1},
            {2, {{3, 2}, {3, 5}, {3, 1}}, 3, 1, 1},
            {3, {{2, 3, 4}, {2, 3, 1}, {2, 3, 7}}, 3, -1, 1},
            {3, {{2, 1, 4}, {2, 5, 4}}, 2, 1, 1},
            {3, {{3, 4, 2}, {5, 4, 2}, {1, 4, 2}}, 3, 0, 1},
            /* big enough to be split over the pool, rows not a multiple of the part count */
            {2, {{1000, 37}, {1000, 29}, {1000, 1}}, 3, 1, 1},
            {3, {{17, 333, 9}, {17, 1, 9}}, 2, 1, 1},
        };
        for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
            char name[128];
            snprintf(name, sizeof name, "concat %d inputs of %d dims along axis %d (%d threads)", cases[c].n,
                     cases[c].nd, cases[c].axis, threads);
            TEST(name) {
                ld_tensor *xs[3];
                for (int k = 0; k < cases[c].n; k++) xs[k] = tu_rnd(cases[c].nd, cases[c].s[k], -1, 1);
                ld_tensor *y = ld_concat_op(cases[c].n, xs, cases[c].axis);
                int ax = cases[c].axis < 0 ? cases[c].axis + cases[c].nd : cases[c].axis;
                int64_t total;
                float *ref = ref_concat(cases[c].n, xs, ax, &total);
                CHECK(y != NULL);
                if (y) {
                    int64_t want = 0;
                    for (int k = 0; k < cases[c].n; k++) want += cases[c].s[k][ax];
                    CHECK(y->ndim == cases[c].nd && y->shape[ax] == want);
                }
                CHECK(max_diff(y, ref, total) == 0);
                free(ref);
                ld_tensor_release(y);
                for (int k = 0; k < cases[c].n; k++) ld_tensor_release(xs[k]);
            }
        }
        /* ---- slice forward: at both edges, in the middle, empty */
        int64_t s3[3] = {5, 1030, 7};
        ld_tensor *x = tu_rnd(3, s3, -1, 1);
        int64_t sl[][3] = {{1, 0, 1}, {1, 1029, 1}, {1, 0, 1030}, {1, 3, 600}, {0, 4, 1}, {0, 0, 5}, {-1, 6, 1},
                           {2, 2, 3}, {1, 7, 0}};
        for (size_t c = 0; c < sizeof sl / sizeof *sl; c++) {
            char name[128];
            snprintf(name, sizeof name, "slice axis %lld [%lld, +%lld) of 5x1030x7 (%d threads)", (long long)sl[c][0],
                     (long long)sl[c][1], (long long)sl[c][2], threads);
            TEST(name) {
                int ax = (int)(sl[c][0] < 0 ? sl[c][0] + 3 : sl[c][0]);
                ld_tensor *y = ld_slice_op(x, (int)sl[c][0], sl[c][1], sl[c][2]);
                ld_tensor *v = ld_slice(x, ax, sl[c][1], sl[c][1] + sl[c][2], 1);
                ld_tensor *vc = v ? ld_contiguous(v) : NULL;
                CHECK(y && vc);
                if (y && vc) {
                    CHECK(ld_same_shape(y, vc));
                    CHECK(ld_tensor_numel(y) == 0 || max_diff(y, ld_tensor_data(vc), ld_tensor_numel(vc)) == 0);
                    /* against index arithmetic too */
                    int64_t bad = 0, idx = 0;
                    for (int64_t a = 0; a < y->shape[0]; a++)
                        for (int64_t b = 0; b < y->shape[1]; b++)
                            for (int64_t e = 0; e < y->shape[2]; e++, idx++) {
                                int64_t src[3] = {a, b, e};
                                src[ax] += sl[c][1];
                                float want = (float)ld_tensor_get_flat(x, (src[0] * 1030 + src[1]) * 7 + src[2]);
                                if ((float)ld_tensor_get_flat(y, idx) != want) bad++;
                            }
                    CHECK(bad == 0);
                }
                ld_tensor_release(y); ld_tensor_release(v); ld_tensor_release(vc);
            }
        }
        ld_tensor_release(x);
    }

    /* ---- gradients of concat and slice */
    ld_cpu_set_threads(1);
    {
        int64_t a[2] = {2, 3}, b[2] = {1, 3}, c[2] = {3, 3};
        ld_tensor *in[3] = {tu_rnd(2, a, -1, 1), tu_rnd(2, b, -1, 1), tu_rnd(2, c, -1, 1)};
        int arg2[2] = {2, 0}, arg3[2] = {3, 0};
        tu_gradcheck("grad concat 2 inputs axis 0", f_concat, arg2, 2, in, yes, 1e-2);
        tu_gradcheck("grad concat 3 inputs axis 0", f_concat, arg3, 3, in, yes, 1e-2);
        for (int k = 0; k < 3; k++) ld_tensor_release(in[k]);
        int64_t p[3] = {2, 3, 2}, q[3] = {2, 3, 1}, r[3] = {2, 3, 3};
        ld_tensor *in3[3] = {tu_rnd(3, p, -1, 1), tu_rnd(3, q, -1, 1), tu_rnd(3, r, -1, 1)};
        int argm[2] = {3, -1};
        tu_gradcheck("grad concat 3 inputs axis -1", f_concat, argm, 3, in3, yes, 1e-2);
        int only_mid[3] = {0, 1, 0};
        tu_gradcheck("grad concat, one input watched", f_concat, argm, 3, in3, only_mid, 1e-2);
        for (int k = 0; k < 3; k++) ld_tensor_release(in3[k]);
        int64_t m1[3] = {2, 1, 3}, m2[3] = {2, 2, 3};
        ld_tensor *in1[2] = {tu_rnd(3, m1, -1, 1), tu_rnd(3, m2, -1, 1)};
        int arg1[2] = {2, 1};
        tu_gradcheck("grad concat 2 inputs axis 1", f_concat, arg1, 2, in1, yes, 1e-2);
        ld_tensor_release(in1[0]); ld_tensor_release(in1[1]);
        /* more inputs than a node holds: a chain of nodes */
        ld_tensor *many[7];
        for (int k = 0; k < 7; k++) { int64_t s[2] = {2, k % 3 + 1}; many[k] = tu_rnd(2, s, -1, 1); }
        int arg7[2] = {7, 1};
        tu_gradcheck("grad concat 7 inputs axis 1 (chained nodes)", f_concat, arg7, 7, many, yes, 1e-2);
        int some[7] = {0, 0, 0, 1, 0, 0, 1};
        tu_gradcheck("grad concat 7 inputs, only the 4th and 7th watched", f_concat, arg7, 7, many, some, 1e-2);
        int arg5[2] = {5, 1};
        tu_gradcheck("grad concat 5 inputs axis 1 (chained nodes)", f_concat, arg5, 5, many + 2, yes, 1e-2);
        for (int k = 0; k < 7; k++) ld_tensor_release(many[k]);
        int64_t t32[2] = {3, 2}, t24[2] = {2, 4};
        ld_tensor *vin[2] = {tu_rnd(2, t32, -1, 1), tu_rnd(2, t24, -1, 1)};
        tu_gradcheck("grad concat of a transposed view", f_concat_view, NULL, 2, vin, yes, 1e-2);
        ld_tensor_release(vin[0]); ld_tensor_release(vin[1]);

        int64_t s[3] = {3, 5, 2};
        ld_tensor *x[1] = {tu_rnd(3, s, -1, 1)};
        int64_t e0[3] = {1, 0, 2}, e1[3] = {1, 3, 2}, e2[3] = {0, 1, 1}, e3[3] = {-1, 1, 1}, e4[3] = {1, 0, 5};
        tu_gradcheck("grad slice axis 1 at the start", f_slice, e0, 1, x, first, 1e-2);
        tu_gradcheck("grad slice axis 1 at the end", f_slice, e1, 1, x, first, 1e-2);
        tu_gradcheck("grad slice axis 0 middle", f_slice, e2, 1, x, first, 1e-2);
        tu_gradcheck("grad slice axis -1", f_slice, e3, 1, x, first, 1e-2);
        tu_gradcheck("grad slice whole axis", f_slice, e4, 1, x, first, 1e-2);
        tu_gradcheck("grad slices concatenated (one slice used twice)", f_slice_concat, NULL, 1, x, first, 1e-2);
        ld_tensor_release(x[0]);
    }

    /* ---- embedding */
    for (int threads = 1; threads <= 4; threads += 3) {
        ld_cpu_set_threads(threads);
        struct { int64_t v, d, n; ld_dtype dt; } ec[] = {
            {10, 4, 6, LD_I64}, {7, 3, 5, LD_I32},
            {5000, 40, 2000, LD_I64},    /* split by table rows */
            {3, 300, 500, LD_I32},       /* few rows: split by columns */
            {33, 1000, 70, LD_I64},
        };
        for (size_t c = 0; c < sizeof ec / sizeof *ec; c++) {
            char name[160];
            snprintf(name, sizeof name, "embedding %lldx%lld, %lld %s ids, forward and table gradient (%d threads)",
                     (long long)ec[c].v, (long long)ec[c].d, (long long)ec[c].n, ld_dtype_name(ec[c].dt), threads);
            TEST(name) {
                int64_t ts[2] = {ec[c].v, ec[c].d}, is[2] = {2, ec[c].n / 2 + ec[c].n % 2};
                int64_t n = is[0] * is[1];
                ld_tensor *table = tu_rnd(2, ts, -1, 1);
                ld_tensor *ids = ld_tensor_empty(ec[c].dt, 2, is, NULL);
                for (int64_t i = 0; i < n; i++)   /* repeated ids, the first and last rows among them */
                    ld_tensor_set_flat_int(ids, i, i == 0 ? ec[c].v - 1 : i == 1 ? 0 : (int64_t)(ld_rng_next(&tu_rng) % (uint64_t)ec[c].v) / (i % 3 ? 1 : 2));
                ld_tape *tape = ld_tape_new(0);
                ld_tape_watch(tape, table);
                ld_tape_push(tape);
                ld_tensor *y = ld_embedding_op(table, ids);
                ld_tensor *g = y ? tu_rnd(y->ndim, y->shape, -1, 1) : NULL;
                ld_tensor *prod = g ? ld_mul(y, g) : NULL, *loss = prod ? ld_sum(prod, LD_ALL_AXES, 0) : NULL;
                ld_tape_pop(tape);
                CHECK(y && y->ndim == 3 && y->shape[0] == 2 && y->shape[1] == is[1] && y->shape[2] == ec[c].d);
                ld_tensor *gt = NULL;
                if (loss) CHECK(ld_tape_gradient(tape, loss, 1, &table, &gt) == LD_OK);
                if (y && gt) {
                    int64_t d = ec[c].d, v = ec[c].v;
                    float *ry = malloc(sizeof(float) * (size_t)(n * d));
                    double *rg = calloc((size_t)(v * d), sizeof(double));
                    float *rgf = malloc(sizeof(float) * (size_t)(v * d));
                    const float *tp = ld_tensor_data(table), *gp = ld_tensor_data(g);
                    for (int64_t i = 0; i < n; i++) {
                        int64_t k = ld_tensor_get_flat_int(ids, i);
                        for (int64_t e = 0; e < d; e++) {
                            ry[i * d + e] = tp[k * d + e];
                            rg[k * d + e] += gp[i * d + e];
                        }
                    }
                    for (int64_t i = 0; i < v * d; i++) rgf[i] = (float)rg[i];
                    CHECK(max_diff(y, ry, n * d) == 0);
                    double err = max_diff(gt, rgf, v * d);
                    if (err > 1e-4) printf("#   table gradient: max error %g\n", err);
                    CHECK(err <= 1e-4);   /* float sums of up to ~170 rows */
                    free(ry); free(rg); free(rgf);
                }
                ld_tensor_release(gt); ld_tensor_release(loss); ld_tensor_release(prod); ld_tensor_release(g);
                ld_tensor_release(y); ld_tensor_release(ids); ld_tensor_release(table);
                ld_tape_free(tape);
            }
        }
    }
    ld_cpu_set_threads(1);
    {
        int64_t ts[2] = {6, 3}, is[1] = {5};
        ld_tensor *tab[1] = {tu_rnd(2, ts, -1, 1)};
        ld_tensor *ids = ld_tensor_empty(LD_I64, 1, is, NULL);
        int64_t iv[5] = {2, 5, 2, 0, 2};
        for (int i = 0; i < 5; i++) ld_tensor_set_flat_int(ids, i, iv[i]);
        tu_gradcheck("grad embedding table (id 2 three times)", f_embed, ids, 1, tab, first, 1e-2);
        ld_tensor_release(ids);
        ld_tensor_release(tab[0]);
    }

    /* ---- average pooling */
    for (int threads = 1; threads <= 4; threads += 3) {
        ld_cpu_set_threads(threads);
        struct { int64_t n, h, w, c; int kh, kw, sh, sw, same; } pc[] = {
            {2, 5, 5, 3, 2, 2, 2, 2, 0}, {2, 5, 5, 3, 2, 2, 2, 2, 1}, {1, 7, 6, 2, 3, 3, 1, 1, 0},
            {1, 7, 6, 2, 3, 3, 1, 1, 1}, {2, 6, 7, 1, 3, 2, 2, 1, 1}, {1, 5, 5, 2, 5, 5, 1, 1, 1},
            {1, 4, 4, 1, 1, 1, 2, 2, 0}, {3, 9, 11, 5, 4, 3, 3, 2, 1},
            {4, 67, 45, 33, 3, 3, 2, 2, 1}, {4, 67, 45, 33, 2, 3, 1, 2, 0},   /* split over the pool */
        };
        for (size_t c = 0; c < sizeof pc / sizeof *pc; c++) {
            char name[160];
            snprintf(name, sizeof name, "avg_pool2d %lldx%lldx%lldx%lld pool %dx%d stride %dx%d %s (%d threads)",
                     (long long)pc[c].n, (long long)pc[c].h, (long long)pc[c].w, (long long)pc[c].c, pc[c].kh,
                     pc[c].kw, pc[c].sh, pc[c].sw, pc[c].same ? "same" : "valid", threads);
            TEST(name) {
                int64_t xs[4] = {pc[c].n, pc[c].h, pc[c].w, pc[c].c};
                ld_tensor *x = tu_rnd(4, xs, -1, 1);
                int64_t oh, ow;
                float *ref = ref_avgpool(x, pc[c].kh, pc[c].kw, pc[c].sh, pc[c].sw, pc[c].same, &oh, &ow);
                ld_tensor *y = ld_avgpool2d(x, pc[c].kh, pc[c].kw, pc[c].sh, pc[c].sw, pc[c].same);
                CHECK(y && y->shape[1] == oh && y->shape[2] == ow && y->shape[3] == pc[c].c);
                if (pc[c].same) CHECK(oh == (pc[c].h + pc[c].sh - 1) / pc[c].sh);
                double err = max_diff(y, ref, pc[c].n * oh * ow * pc[c].c);
                if (err > 1e-5) printf("#   max error %g\n", err);
                CHECK(err <= 1e-5);
                /* the backward pass against the adjoint identity <dy, pool(x)> = <pool^T(dy), x>,
                   exact for a linear op: checks every input cell's gradient */
                ld_tape *tape = ld_tape_new(0);
                ld_tape_watch(tape, x);
                ld_tape_push(tape);
                ld_tensor *y2 = ld_avgpool2d(x, pc[c].kh, pc[c].kw, pc[c].sh, pc[c].sw, pc[c].same);
                ld_tensor *g = y2 ? tu_rnd(4, y2->shape, -1, 1) : NULL;
                ld_tensor *prod = g ? ld_mul(y2, g) : NULL, *loss = prod ? ld_sum(prod, LD_ALL_AXES, 0) : NULL;
                ld_tape_pop(tape);
                ld_tensor *gx = NULL;
                if (loss) CHECK(ld_tape_gradient(tape, loss, 1, &x, &gx) == LD_OK);
                if (gx) {
                    /* reference gradient by scattering dy / count */
                    int64_t H = pc[c].h, W = pc[c].w, C = pc[c].c, ph = 0, pw = 0;
                    if (pc[c].same) {
                        int64_t th = (oh - 1) * pc[c].sh + pc[c].kh - H, tw = (ow - 1) * pc[c].sw + pc[c].kw - W;
                        if (th > 0) ph = th / 2;
                        if (tw > 0) pw = tw / 2;
                    }
                    int64_t nx = pc[c].n * H * W * C;
                    double *rg = calloc((size_t)nx, sizeof(double));
                    float *rgf = malloc(sizeof(float) * (size_t)nx);
                    const float *gp = ld_tensor_data(g);
                    for (int64_t b = 0; b < pc[c].n; b++)
                        for (int64_t i = 0; i < oh; i++)
                            for (int64_t j = 0; j < ow; j++) {
                                int cnt = 0;
                                for (int a = 0; a < pc[c].kh; a++)
                                    for (int q = 0; q < pc[c].kw; q++) {
                                        int64_t yy = i * pc[c].sh - ph + a, xx = j * pc[c].sw - pw + q;
                                        cnt += yy >= 0 && yy < H && xx >= 0 && xx < W;
                                    }
                                for (int a = 0; a < pc[c].kh; a++)
                                    for (int q = 0; q < pc[c].kw; q++) {
                                        int64_t yy = i * pc[c].sh - ph + a, xx = j * pc[c].sw - pw + q;
                                        if (yy < 0 || yy >= H || xx < 0 || xx >= W) continue;
                                        for (int64_t e = 0; e < C; e++)
                                            rg[((b * H + yy) * W + xx) * C + e] +=
                                                gp[((b * oh + i) * ow + j) * C + e] / (double)cnt;
                                    }
                            }
                    for (int64_t i = 0; i < nx; i++) rgf[i] = (float)rg[i];
                    double ge = max_diff(gx, rgf, nx);
                    if (ge > 1e-5) printf("#   gradient max error %g\n", ge);
                    CHECK(ge <= 1e-5);
                    free(rg); free(rgf);
                }
                ld_tensor_release(gx); ld_tensor_release(loss); ld_tensor_release(prod); ld_tensor_release(g);
                ld_tensor_release(y2); ld_tape_free(tape);
                free(ref);
                ld_tensor_release(y); ld_tensor_release(x);
            }
        }
    }
    ld_cpu_set_threads(1);
    {
        int64_t xs[4] = {2, 5, 4, 2};
        ld_tensor *x[1] = {tu_rnd(4, xs, -1, 1)};
        int v22[5] = {2, 2, 2, 2, 0}, s22[5] = {2, 2, 2, 2, 1}, s31[5] = {3, 3, 1, 1, 1}, v32[5] = {3, 2, 1, 2, 0};
        tu_gradcheck("grad avg_pool2d 2x2 stride 2 valid", f_avg, v22, 1, x, first, 1e-2);
        tu_gradcheck("grad avg_pool2d 2x2 stride 2 same (odd height)", f_avg, s22, 1, x, first, 1e-2);
        tu_gradcheck("grad avg_pool2d 3x3 stride 1 same", f_avg, s31, 1, x, first, 1e-2);
        tu_gradcheck("grad avg_pool2d 3x2 stride 1x2 valid", f_avg, v32, 1, x, first, 1e-2);
        int keep0 = 0, keep1 = 1;
        tu_gradcheck("grad global_avg_pool2d", f_gap, &keep0, 1, x, first, 1e-2);
        tu_gradcheck("grad global_avg_pool2d keepdims", f_gap, &keep1, 1, x, first, 1e-2);
        TEST("global_avg_pool2d values and shapes") {
            ld_tensor *y = ld_global_avgpool2d(x[0], 0), *yk = ld_global_avgpool2d(x[0], 1);
            CHECK(y && y->ndim == 2 && y->shape[0] == 2 && y->shape[1] == 2);
            CHECK(yk && yk->ndim == 4 && yk->shape[1] == 1 && yk->shape[2] == 1 && yk->shape[3] == 2);
            float ref[4];
            for (int b = 0; b < 2; b++)
                for (int e = 0; e < 2; e++) {
                    double s = 0;
                    for (int p = 0; p < 20; p++) s += ld_tensor_get_flat(x[0], (b * 20 + p) * 2 + e);
                    ref[b * 2 + e] = (float)(s / 20);
                }
            CHECK(max_diff(y, ref, 4) <= 1e-6);
            CHECK(max_diff(yk, ref, 4) <= 1e-6);
            ld_tensor_release(y); ld_tensor_release(yk);
        }
        ld_tensor_release(x[0]);
    }

    /* ---- on a device that queues its kernels (cpu:1) */
    TEST("cpu:1: concat, slice, embedding and avg_pool2d queued give the host's results") {
        ld_device *d1 = ld_device_find("cpu:1");
        int64_t s[2] = {3, 4}, s4[4] = {1, 5, 5, 2}, ts[2] = {5, 3}, is[1] = {4};
        ld_tensor *a = tu_rnd(2, s, -1, 1), *b = tu_rnd(2, s, -1, 1), *x = tu_rnd(4, s4, -1, 1), *t = tu_rnd(2, ts, -1, 1);
        ld_tensor *ids = ld_tensor_empty(LD_I32, 1, is, NULL);
        for (int i = 0; i < 4; i++) ld_tensor_set_flat_int(ids, i, (i * 3) % 5);
        ld_tensor *a1 = ld_to_device(a, d1), *b1 = ld_to_device(b, d1), *x1 = ld_to_device(x, d1);
        ld_tensor *t1 = ld_to_device(t, d1), *i1 = ld_to_device(ids, d1);
        ld_tensor *ab[2] = {a, b}, *ab1[2] = {a1, b1};
        ld_tensor *r[4] = {ld_concat_op(2, ab, 1), ld_slice_op(a, 1, 1, 2), ld_embedding_op(t, ids),
                           ld_avgpool2d(x, 2, 2, 2, 2, 1)};
        ld_tensor *q[4] = {ld_concat_op(2, ab1, 1), ld_slice_op(a1, 1, 1, 2), ld_embedding_op(t1, i1),
                           ld_avgpool2d(x1, 2, 2, 2, 2, 1)};
        for (int k = 0; k < 4; k++) {
            CHECK(r[k] && q[k]);
            ld_tensor *h = q[k] ? ld_to_device(q[k], ld_device_cpu()) : NULL;
            CHECK(h && r[k] && max_diff(h, ld_tensor_data(r[k]), ld_tensor_numel(r[k])) == 0);
            ld_tensor_release(h); ld_tensor_release(r[k]); ld_tensor_release(q[k]);
        }
        ld_tensor_release(a); ld_tensor_release(b); ld_tensor_release(x); ld_tensor_release(t);
        ld_tensor_release(ids); ld_tensor_release(a1); ld_tensor_release(b1); ld_tensor_release(x1);
        ld_tensor_release(t1); ld_tensor_release(i1);
    }
    TEST("cpu:1: an embedding id out of range is a kernel error at the next read, the row zero") {
        ld_device *d1 = ld_device_find("cpu:1");
        int64_t ts[2] = {4, 2}, is[1] = {3};
        ld_tensor *t = ld_tensor_full(LD_F32, 2, ts, 1.0, d1);
        ld_tensor *ids = ld_tensor_empty(LD_I64, 1, is, NULL);
        ld_tensor_set_flat_int(ids, 0, 1); ld_tensor_set_flat_int(ids, 1, 9); ld_tensor_set_flat_int(ids, 2, 3);
        ld_tensor *i1 = ld_to_device(ids, d1);
        ld_tensor *y = ld_embedding_op(t, i1);
        CHECK(y != NULL);
        CHECK(y && ld_tensor_data(y) == NULL);
        CHECK(error_has("id 9 at position 1 is outside [0, 4)"));
        const float *p = y ? ld_tensor_data(y) : NULL;   /* reported once */
        CHECK(p && p[0] == 1 && p[2] == 0 && p[3] == 0 && p[4] == 1);
        ld_clear_error();
        ld_tensor_release(y); ld_tensor_release(i1); ld_tensor_release(ids); ld_tensor_release(t);
    }

    /* ---- errors */
    TEST("error messages name the op and the shapes") {
        int64_t s23[2] = {2, 3}, s24[2] = {2, 4}, s33[2] = {3, 3}, s3[1] = {3}, s4[4] = {1, 3, 3, 1};
        ld_tensor *a = tu_rnd(2, s23, 0, 1), *b = tu_rnd(2, s24, 0, 1), *c = tu_rnd(2, s33, 0, 1), *v = tu_rnd(1, s3, 0, 1);
        ld_tensor *x = tu_rnd(4, s4, 0, 1);
        ld_tensor *ai = ld_cast(a, LD_I32);
        ld_tensor *ab[2] = {a, b}, *ac[2] = {a, c}, *av[2] = {a, v}, *aai[2] = {a, ai};
        CHECK(ld_concat_op(2, ab, 0) == NULL && error_has("concat along axis 0: shapes 2x3 and 2x4 differ"));
        CHECK(ld_concat_op(2, ac, 1) == NULL && error_has("shapes 2x3 and 3x3"));
        CHECK(ld_concat_op(2, av, 0) == NULL && error_has("concat"));
        CHECK(ld_concat_op(2, ab, 2) == NULL && error_has("concat: axis 2 out of range"));
        CHECK(ld_concat_op(2, aai, 0) == NULL && ld_error_status() == LD_ETYPE &&
              error_has("concat: tensor 2 is int32, tensor 1 is float32"));
        CHECK(ld_concat_op(0, ab, 0) == NULL && error_has("at least one"));
        ld_tensor *one = ld_concat_op(1, ab, 0);
        CHECK(one == a);
        ld_tensor_release(one);
        CHECK(ld_slice_op(a, 1, 2, 2) == NULL && error_has("slice: [2, 4) is outside axis 1 (size 3)"));
        CHECK(ld_slice_op(a, 0, -1, 1) == NULL && error_has("slice"));
        CHECK(ld_slice_op(a, -3, 0, 1) == NULL && error_has("slice: axis -3 out of range"));
        int64_t is[1] = {3};
        ld_tensor *ids = ld_tensor_empty(LD_I64, 1, is, NULL), *fids = tu_rnd(1, is, 0, 1);
        ld_tensor_set_flat_int(ids, 0, 0); ld_tensor_set_flat_int(ids, 1, 2); ld_tensor_set_flat_int(ids, 2, 3);
        CHECK(ld_embedding_op(c, ids) == NULL && ld_error_status() == LD_EARG &&
              error_has("embedding: id 3 at position 2 is outside [0, 3)"));
        ld_tensor_set_flat_int(ids, 2, -1);
        CHECK(ld_embedding_op(c, ids) == NULL && error_has("id -1 at position 2"));
        CHECK(ld_embedding_op(c, fids) == NULL && ld_error_status() == LD_ETYPE && error_has("int32 or int64 ids, got float32"));
        CHECK(ld_embedding_op(v, ids) == NULL && error_has("[vocabulary, dim] table, got shape 3"));
        CHECK(ld_avgpool2d(x, 4, 2, 1, 1, 0) == NULL && error_has("avg_pool2d: pool 4x2 is larger than the input 1x3x3x1"));
        ld_tensor *ys = ld_avgpool2d(x, 4, 4, 1, 1, 1);   /* same padding: fine, all cells averaged */
        CHECK(ys != NULL);
        ld_tensor_release(ys);
        CHECK(ld_avgpool2d(a, 2, 2, 1, 1, 0) == NULL && error_has("avg_pool2d needs an NHWC input, got shape 2x3"));
        CHECK(ld_avgpool2d(x, 2, 2, 0, 1, 0) == NULL && error_has("must be positive"));
        CHECK(ld_global_avgpool2d(a, 0) == NULL && error_has("global_avg_pool2d needs an NHWC input"));
        ld_tensor_release(a); ld_tensor_release(b); ld_tensor_release(c); ld_tensor_release(v);
        ld_tensor_release(x); ld_tensor_release(ai); ld_tensor_release(ids); ld_tensor_release(fids);
    }
    return tu_summary();
}
