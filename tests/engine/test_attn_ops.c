/* test_attn_ops.c - the attention ops (ld_ops_attn.h): bmm against a
 * reference loop, attention against a reference computation, gradients
 * against central finite differences (test_util.c's tu_gradcheck), the causal
 * mask, T != S, head split/merge, and the errors. */
#include "test_util.h"
#include "ld_ops.h"
#include "ld_ops_attn.h"
#include "ld_autograd.h"
#include "ld_device.h"
#include "ld_executor.h"

#include <stdlib.h>
#include <string.h>

/* ---- references ---- */
static double at3(ld_tensor *t, int64_t b, int64_t i, int64_t j) {
    return ld_tensor_get_flat(t, (b * t->shape[1] + i) * t->shape[2] + j);
}

/* split_heads' layout: h[n*H + hh, t, j] = x[n, t, hh*d + j] for x [N, T, H*d]
   (0 when h is missing) */
static int heads_match(ld_tensor *h, ld_tensor *x, int64_t H) {
    if (!h) return 0;
    int64_t N = x->shape[0], T = x->shape[1], d = x->shape[2] / H;
    for (int64_t n = 0; n < N; n++)
        for (int64_t hh = 0; hh < H; hh++)
            for (int64_t t = 0; t < T; t++)
                for (int64_t j = 0; j < d; j++)
                    if (at3(h, n * H + hh, t, j) != at3(x, n, t, hh * d + j)) return 0;
    return 1;
}

/* max |bmm(a, b) - loop| over a [batch, ., .] product */
static double bmm_ref_err(ld_tensor *a, ld_tensor *b, int ta, int tb, ld_tensor *c) {
    int64_t batch = a->shape[0], m = ta ? a->shape[2] : a->shape[1], k = ta ? a->shape[1] : a->shape[2];
    int64_t n = tb ? b->shape[1] : b->shape[2];
    if (c->ndim != 3 || c->shape[0] != batch || c->shape[1] != m || c->shape[2] != n) return 1e30;
    double worst = 0;
    for (int64_t p = 0; p < batch; p++)
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double s = 0;
                for (int64_t q = 0; q < k; q++)
                    s += (ta ? at3(a, p, q, i) : at3(a, p, i, q)) * (tb ? at3(b, p, j, q) : at3(b, p, q, j));
                double e = fabs(s - at3(c, p, i, j));
                if (e > worst) worst = e;
            }
    return worst;
}

/* reference attention: out [B, T, dv], weights [B, T, S] as doubles */
static void attn_ref(ld_tensor *q, ld_tensor *k, ld_tensor *v, int causal, double scale, double *out, double *w) {
    int64_t B = q->shape[0], T = q->shape[1], S = k->shape[1], dk = q->shape[2], dv = v->shape[2];
    int64_t off = causal == LD_CAUSAL_END ? S - T : 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < T; i++) {
            double *wr = w + (b * T + i) * S, mx = -1e300, sum = 0;
            for (int64_t j = 0; j < S; j++) {
                double s = 0;
                for (int64_t c = 0; c < dk; c++) s += at3(q, b, i, c) * at3(k, b, j, c);
                s *= scale;
                if (causal && j > i + off) s = -1e9;   /* Keras' adder */
                wr[j] = s;
                if (s > mx) mx = s;
            }
            for (int64_t j = 0; j < S; j++) { wr[j] = exp(wr[j] - mx); sum += wr[j]; }
            for (int64_t j = 0; j < S; j++) wr[j] /= sum;
            for (int64_t c = 0; c < dv; c++) {
                double s = 0;
                for (int64_t j = 0; j < S; j++) s += wr[j] * at3(v, b, j, c);
                out[(b * T + i) * dv + c] = s;
            }
        }
}

/* ---- ops under test ---- */
typedef struct { int ta, tb; } tt;
static ld_tensor *f_bmm(ld_tensor **in, void *ud) { tt *t = ud; return ld_bmm(in[0], in[1], t->ta, t->tb); }
typedef struct { int causal; float scale; int want_weights; } attn_args;
static ld_tensor *f_attn(ld_tensor **in, void *ud) {
    attn_args *a = ud;
    if (!a->want_weights) return ld_attention(in[0], in[1], in[2], a->causal, a->scale, NULL);
    ld_tensor *w = NULL, *o = ld_attention(in[0], in[1], in[2], a->causal, a->scale, &w);
    ld_tensor_release(o);
    return w;
}
static ld_tensor *f_weights(ld_tensor **in, void *ud) {
    attn_args *a = ud;
    return ld_attention_weights(in[0], in[1], a->causal, a->scale);
}
static ld_tensor *f_split(ld_tensor **in, void *ud) { return ld_split_heads(in[0], *(int *)ud); }
static ld_tensor *f_merge(ld_tensor **in, void *ud) { return ld_merge_heads(in[0], *(int *)ud); }
/* attention on heads of a projected input, the layer's path */
static ld_tensor *f_mha(ld_tensor **in, void *ud) {
    int h = 2;
    ld_tensor *q = ld_split_heads(in[0], h), *k = ld_split_heads(in[1], h), *v = ld_split_heads(in[2], h);
    ld_tensor *o = q && k && v ? ld_attention(q, k, v, LD_CAUSAL, 0, NULL) : NULL;
    ld_tensor *y = o ? ld_merge_heads(o, h) : NULL;
    ld_tensor_release(q); ld_tensor_release(k); ld_tensor_release(v); ld_tensor_release(o);
    return y;
}

static void expect_error(const char *name, ld_tensor *r, const char *const *needles, int n) {
    TEST(name) {
        CHECK(r == NULL);
        ld_tensor_release(r);
        const char *e = ld_error();
        for (int i = 0; i < n; i++) CHECK(tu_contains(e, needles[i]));
    }
}

int main(void) {
    ld_rng_seed(&tu_rng, 4321);
    int yes[4] = {1, 1, 1, 1};

    /* ---- bmm against the loop: every ta/tb, batches 1, 3, 17, sizes both
       sides of the serial/parallel threshold ---- */
    int64_t batches[3] = {1, 3, 17};
    int64_t sizes[2][3] = {{5, 7, 4}, {70, 65, 80}};   /* m, n, k */
    for (int z = 0; z < 2; z++)
        for (int bi = 0; bi < 3; bi++)
            for (int ta = 0; ta < 2; ta++)
                for (int tb = 0; tb < 2; tb++) {
                    int64_t B = batches[bi], m = sizes[z][0], n = sizes[z][1], k = sizes[z][2];
                    int64_t sa[3] = {B, ta ? k : m, ta ? m : k}, sb[3] = {B, tb ? n : k, tb ? k : n};
                    ld_tensor *a = tu_rnd(3, sa, -1, 1), *b = tu_rnd(3, sb, -1, 1);
                    char name[128];
                    snprintf(name, sizeof name, "bmm batch %lld %lldx%lldx%lld ta=%d tb=%d", (long long)B,
                             (long long)m, (long long)n, (long long)k, ta, tb);
                    TEST(name) {
                        ld_tensor *c = ld_bmm(a, b, ta, tb);
                        CHECK(c != NULL);
                        if (!c) { printf("#   %s\n", ld_error()); continue; }
                        CHECK(bmm_ref_err(a, b, ta, tb, c) < 1e-4 * (double)k);
                        ld_tensor_release(c);
                    }
                    ld_tensor_release(a); ld_tensor_release(b);
                }

    /* views: a transposed view and a sliced batch are read where they lie */
    TEST("bmm on views (transposed, strided batch)") {
        int64_t sa[3] = {6, 4, 5}, sb[3] = {3, 4, 6};
        ld_tensor *a = tu_rnd(3, sa, -1, 1), *b = tu_rnd(3, sb, -1, 1);
        ld_tensor *as = ld_slice(a, 0, 0, 6, 2);        /* [3, 4, 5], batch stride 40 */
        ld_tensor *bt = ld_transpose(b, 1, 2);          /* [3, 6, 4] */
        ld_tensor *c1 = ld_bmm(as, bt, 1, 1);           /* as^T [5,4] x bt^T [4,6] = [3, 5, 6] */
        ld_tensor *ac = ld_contiguous(as), *btc = ld_contiguous(bt);
        CHECK(c1 != NULL);
        if (c1) CHECK(bmm_ref_err(ac, btc, 1, 1, c1) < 1e-5);
        ld_tensor_release(c1); ld_tensor_release(ac); ld_tensor_release(btc);
        ld_tensor_release(as); ld_tensor_release(bt); ld_tensor_release(a); ld_tensor_release(b);
    }
    TEST("bmm 4-d (two batch axes)") {
        int64_t sa[4] = {2, 3, 4, 5}, sb[4] = {2, 3, 5, 2}, s3a[3] = {6, 4, 5}, s3b[3] = {6, 5, 2}, s3c[3] = {6, 4, 2};
        ld_tensor *a = tu_rnd(4, sa, -1, 1), *b = tu_rnd(4, sb, -1, 1), *c = ld_bmm(a, b, 0, 0);
        CHECK(c && c->ndim == 4 && c->shape[0] == 2 && c->shape[1] == 3 && c->shape[2] == 4 && c->shape[3] == 2);
        ld_tensor *a3 = ld_reshape(a, 3, s3a), *b3 = ld_reshape(b, 3, s3b), *c3 = c ? ld_reshape(c, 3, s3c) : NULL;
        if (c3) CHECK(bmm_ref_err(a3, b3, 0, 0, c3) < 1e-5);
        ld_tensor_release(a); ld_tensor_release(b); ld_tensor_release(c);
        ld_tensor_release(a3); ld_tensor_release(b3); ld_tensor_release(c3);
    }

    /* ---- bmm gradients, every ta/tb ---- */
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            int64_t m = 3, n = 4, k = 5;
            int64_t sa[3] = {2, ta ? k : m, ta ? m : k}, sb[3] = {2, tb ? n : k, tb ? k : n};
            ld_tensor *in[2] = {tu_rnd(3, sa, -1, 1), tu_rnd(3, sb, -1, 1)};
            tt t = {ta, tb};
            char name[64];
            snprintf(name, sizeof name, "grad bmm ta=%d tb=%d", ta, tb);
            tu_gradcheck(name, f_bmm, &t, 2, in, yes, 1e-2);
            ld_tensor_release(in[0]); ld_tensor_release(in[1]);
        }

    /* ---- attention against the reference ---- */
    struct { int64_t B, T, S, dk, dv; int causal; float scale; } cases[] = {
        {3, 5, 5, 4, 3, LD_CAUSAL_NONE, 0}, {3, 5, 5, 4, 3, LD_CAUSAL, 0}, {2, 3, 6, 4, 2, LD_CAUSAL, 0.7f},
        {2, 3, 6, 4, 2, LD_CAUSAL_END, 0}, {2, 6, 3, 4, 2, LD_CAUSAL, 0}, {2, 6, 3, 4, 2, LD_CAUSAL_END, 0},
        {2, 4, 7, 3, 5, LD_CAUSAL_NONE, 0.5f}, {4, 40, 50, 16, 8, LD_CAUSAL, 0},
        /* rows of 16 and 17 (a whole vector, one past it), batch 1, and a
           scale spreading the scores wide (exp far below the max underflows) */
        {1, 16, 16, 8, 4, LD_CAUSAL, 0}, {1, 17, 17, 8, 4, LD_CAUSAL_NONE, 0}, {2, 33, 33, 16, 16, LD_CAUSAL, 6.0f},
        {1, 70, 70, 4, 3, LD_CAUSAL_END, 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        int64_t B = cases[c].B, T = cases[c].T, S = cases[c].S, dk = cases[c].dk, dv = cases[c].dv;
        int64_t sq[3] = {B, T, dk}, sk[3] = {B, S, dk}, sv[3] = {B, S, dv};
        ld_tensor *q = tu_rnd(3, sq, -1, 1), *k = tu_rnd(3, sk, -1, 1), *v = tu_rnd(3, sv, -1, 1);
        char name[128];
        snprintf(name, sizeof name, "attention B=%lld T=%lld S=%lld causal=%d scale=%g vs reference", (long long)B,
                 (long long)T, (long long)S, cases[c].causal, (double)cases[c].scale);
        TEST(name) {
            ld_tensor *w = NULL, *o = ld_attention(q, k, v, cases[c].causal, cases[c].scale, &w);
            CHECK(o && w);
            if (!o || !w) { printf("#   %s\n", ld_error()); ld_tensor_release(o); ld_tensor_release(w); continue; }
            CHECK(o->ndim == 3 && o->shape[0] == B && o->shape[1] == T && o->shape[2] == dv);
            CHECK(w->ndim == 3 && w->shape[0] == B && w->shape[1] == T && w->shape[2] == S);
            double *ro = malloc(sizeof(double) * (size_t)(B * T * dv)), *rw = malloc(sizeof(double) * (size_t)(B * T * S));
            double scale = cases[c].scale ? cases[c].scale : 1.0 / sqrt((double)dk);
            attn_ref(q, k, v, cases[c].causal, scale, ro, rw);
            double eo = 0, ew = 0;
            for (int64_t i = 0; i < B * T * dv; i++) eo = fmax(eo, fabs(ld_tensor_get_flat(o, i) - ro[i]));
            for (int64_t i = 0; i < B * T * S; i++) ew = fmax(ew, fabs(ld_tensor_get_flat(w, i) - rw[i]));
            if (eo > 1e-5 || ew > 1e-5) printf("#   max error: output %g, weights %g\n", eo, ew);
            CHECK(eo <= 1e-5);
            CHECK(ew <= 1e-5);
            /* masked entries are exactly 0 (unless the row is masked whole) */
            int64_t off = cases[c].causal == LD_CAUSAL_END ? S - T : 0;
            int zero = 1;
            if (cases[c].causal)
                for (int64_t b = 0; b < B; b++)
                    for (int64_t i = 0; i < T; i++)
                        for (int64_t j = 0; j < S; j++)
                            if (j > i + off && i + off >= 0 && at3(w, b, i, j) != 0) zero = 0;
            CHECK(zero);
            free(ro); free(rw);
            ld_tensor_release(o); ld_tensor_release(w);
        }
        ld_tensor_release(q); ld_tensor_release(k); ld_tensor_release(v);
    }

    /* ---- causal: row 0 sees only key 0, so it is v[0] ---- */
    TEST("causal attention row 0 equals v[0]") {
        int64_t sq[3] = {3, 6, 4}, sv[3] = {3, 6, 5};
        ld_tensor *q = tu_rnd(3, sq, -2, 2), *k = tu_rnd(3, sq, -2, 2), *v = tu_rnd(3, sv, -2, 2);
        ld_tensor *o = ld_attention(q, k, v, LD_CAUSAL, 0, NULL);
        CHECK(o != NULL);
        for (int64_t b = 0; o && b < 3; b++)
            for (int64_t c = 0; c < 5; c++) CHECK_NEAR(at3(o, b, 0, c), at3(v, b, 0, c), 1e-6);
        /* the last row sees every key: not causal there */
        ld_tensor *o2 = ld_attention(q, k, v, LD_CAUSAL_NONE, 0, NULL);
        for (int64_t b = 0; o && o2 && b < 3; b++)
            for (int64_t c = 0; c < 5; c++) CHECK_NEAR(at3(o, b, 5, c), at3(o2, b, 5, c), 1e-6);
        ld_tensor_release(o); ld_tensor_release(o2);
        ld_tensor_release(q); ld_tensor_release(k); ld_tensor_release(v);
    }

    /* ---- attention gradients ---- */
    struct { int64_t B, T, S; int causal; float scale; int w; const char *name; } gcases[] = {
        {2, 4, 4, LD_CAUSAL_NONE, 0, 0, "grad attention"},
        {2, 4, 4, LD_CAUSAL, 0, 0, "grad attention causal"},
        {2, 3, 5, LD_CAUSAL, 0.8f, 0, "grad attention causal T<S"},
        {2, 3, 5, LD_CAUSAL_END, 0, 0, "grad attention causal (end) T<S"},
        {2, 5, 3, LD_CAUSAL_END, 0, 0, "grad attention causal (end) T>S (rows masked whole)"},
        {2, 4, 4, LD_CAUSAL, 0, 1, "grad attention weights_out"},
        /* rows crossing the vector width (16) with tails, batch 1 */
        {1, 19, 19, LD_CAUSAL, 0, 0, "grad attention causal T=S=19 batch 1"},
        {2, 17, 35, LD_CAUSAL_NONE, 0.9f, 0, "grad attention T=17 S=35"},
        {1, 21, 18, LD_CAUSAL_END, 0, 0, "grad attention causal (end) T=21 S=18"},
    };
    for (size_t c = 0; c < sizeof gcases / sizeof *gcases; c++) {
        int64_t sq[3] = {gcases[c].B, gcases[c].T, 3}, sk[3] = {gcases[c].B, gcases[c].S, 3},
                sv[3] = {gcases[c].B, gcases[c].S, 2};
        ld_tensor *in[3] = {tu_rnd(3, sq, -1, 1), tu_rnd(3, sk, -1, 1), tu_rnd(3, sv, -1, 1)};
        attn_args a = {gcases[c].causal, gcases[c].scale, gcases[c].w};
        tu_gradcheck(gcases[c].name, f_attn, &a, 3, in, yes, 1e-2);
        if (c == 1) tu_gradcheck("grad attention_weights causal", f_weights, &a, 2, in, yes, 1e-2);
        ld_tensor_release(in[0]); ld_tensor_release(in[1]); ld_tensor_release(in[2]);
    }

    /* ---- heads ---- */
    TEST("split_heads / merge_heads values and round trip") {
        int64_t s[3] = {2, 3, 8};
        ld_tensor *x = tu_rnd(3, s, -1, 1), *h = ld_split_heads(x, 4), *back = h ? ld_merge_heads(h, 4) : NULL;
        CHECK(h && h->ndim == 3 && h->shape[0] == 8 && h->shape[1] == 3 && h->shape[2] == 2);
        CHECK(heads_match(h, x, 4));
        CHECK(back && ld_same_shape(back, x) && tu_norm_err(back, x) == 0);
        ld_tensor_release(x); ld_tensor_release(h); ld_tensor_release(back);
    }
    /* large enough (276k elements) that the copies are split over the pool (rows of 17
       floats: vector tails), with a leading axis of 1 and a broadcast add */
    TEST("split_heads / merge_heads and broadcast add split over the pool") {
        int64_t s[3] = {9, 301, 6 * 17}, s1[4] = {1, 9, 301, 6 * 17};
        ld_tensor *x = tu_rnd(3, s, -1, 1), *h = ld_split_heads(x, 6), *back = h ? ld_merge_heads(h, 6) : NULL;
        CHECK(h && h->shape[0] == 54 && h->shape[1] == 301 && h->shape[2] == 17);
        CHECK(heads_match(h, x, 6));
        CHECK(back && ld_same_shape(back, x) && tu_norm_err(back, x) == 0);
        /* [1, 9, 301, 102] permuted to [1, 301, 9, 102]: a leading 1 to skip */
        int perm[4] = {0, 2, 1, 3};
        ld_tensor *x4 = ld_reshape(x, 4, s1), *p = x4 ? ld_permute(x4, perm) : NULL, *pc = p ? ld_contiguous(p) : NULL;
        int good = pc != NULL;
        for (int64_t t = 0; pc && t < 301; t++)
            for (int64_t n = 0; n < 9; n++)
                for (int64_t j = 0; j < 102; j += 5)
                    if (ld_tensor_get_flat(pc, (t * 9 + n) * 102 + j) != at3(x, n, t, j)) good = 0;
        CHECK(good);
        int64_t bs = 102;
        ld_tensor *b = tu_rnd(1, &bs, -1, 1), *sum = ld_add(x, b);
        good = sum != NULL;
        for (int64_t i = 0; sum && i < 9 * 301 * 102; i += 7)
            if (ld_tensor_get_flat(sum, i) != (float)((float)ld_tensor_get_flat(x, i) + (float)ld_tensor_get_flat(b, i % 102)))
                good = 0;
        CHECK(good);
        ld_tensor_release(x); ld_tensor_release(h); ld_tensor_release(back); ld_tensor_release(x4);
        ld_tensor_release(p); ld_tensor_release(pc); ld_tensor_release(b); ld_tensor_release(sum);
    }
    {
        int heads = 3;
        int64_t s[3] = {2, 2, 6}, m[3] = {6, 2, 2};
        ld_tensor *x = tu_rnd(3, s, -1, 1), *y = tu_rnd(3, m, -1, 1);
        tu_gradcheck("grad split_heads", f_split, &heads, 1, &x, yes, 1e-2);
        tu_gradcheck("grad merge_heads", f_merge, &heads, 1, &y, yes, 1e-2);
        ld_tensor_release(x); ld_tensor_release(y);
        int64_t sq[3] = {2, 3, 4};
        ld_tensor *in[3] = {tu_rnd(3, sq, -1, 1), tu_rnd(3, sq, -1, 1), tu_rnd(3, sq, -1, 1)};
        tu_gradcheck("grad split -> causal attention -> merge", f_mha, NULL, 3, in, yes, 1e-2);
        ld_tensor_release(in[0]); ld_tensor_release(in[1]); ld_tensor_release(in[2]);
    }

    /* ---- the fused kernel (flash_attention), forced on the CPU: against
       the reference, the unfused path's gradients, and finite differences;
       widths 16, 32, 64, rows masked whole (causal end, T > S), one key ---- */
    {
        int was = ld_attention_fused(LD_FUSED_ON);
        struct { int64_t B, T, S, e; int causal; float scale; } fc[] = {
            {3, 5, 5, 16, LD_CAUSAL_NONE, 0}, {2, 9, 9, 16, LD_CAUSAL, 0}, {2, 3, 7, 32, LD_CAUSAL, 0.7f},
            {2, 3, 7, 32, LD_CAUSAL_END, 0}, {2, 7, 3, 16, LD_CAUSAL_END, 0}, {2, 7, 3, 64, LD_CAUSAL, 0},
            {1, 70, 70, 64, LD_CAUSAL, 0}, {33, 17, 1, 16, LD_CAUSAL_NONE, 3.0f}, {2, 33, 33, 32, LD_CAUSAL, 6.0f},
        };
        for (size_t c = 0; c < sizeof fc / sizeof *fc; c++) {
            int64_t B = fc[c].B, T = fc[c].T, S = fc[c].S, E = fc[c].e;
            int64_t sq[3] = {B, T, E}, sk[3] = {B, S, E};
            ld_tensor *in[3] = {tu_rnd(3, sq, -1, 1), tu_rnd(3, sk, -1, 1), tu_rnd(3, sk, -1, 1)};
            char name[160];
            snprintf(name, sizeof name, "fused attention B=%lld T=%lld S=%lld e=%lld causal=%d: output and gradients",
                     (long long)B, (long long)T, (long long)S, (long long)E, fc[c].causal);
            TEST(name) {
                ld_tensor *o = NULL, *g[2][3] = {{NULL}};
                for (int fused = 0; fused < 2; fused++) {
                    ld_attention_fused(fused ? LD_FUSED_ON : LD_FUSED_OFF);
                    ld_tape *tape = ld_tape_new(0);
                    for (int i = 0; i < 3; i++) ld_tape_watch(tape, in[i]);
                    ld_tape_push(tape);
                    ld_tensor *y = ld_attention(in[0], in[1], in[2], fc[c].causal, fc[c].scale, NULL);
                    ld_tensor *y2 = y ? ld_mul(y, y) : NULL, *loss = y2 ? ld_sum(y2, LD_ALL_AXES, 0) : NULL;
                    ld_tape_pop(tape);
                    CHECK(loss && ld_tape_gradient(tape, loss, 3, in, g[fused]) == LD_OK);
                    ld_tensor_release(y2); ld_tensor_release(loss); ld_tape_free(tape);
                    if (fused) o = y; else ld_tensor_release(y);
                }
                CHECK(o && o->grad_fn && !strcmp(o->grad_fn->op, "flash_attention"));
                double *ro = malloc(sizeof(double) * (size_t)(B * T * E)), *rw = malloc(sizeof(double) * (size_t)(B * T * S));
                double scale = fc[c].scale ? fc[c].scale : 1.0 / sqrt((double)E), eo = 0;
                attn_ref(in[0], in[1], in[2], fc[c].causal, scale, ro, rw);
                for (int64_t i = 0; o && i < B * T * E; i++) eo = fmax(eo, fabs(ld_tensor_get_flat(o, i) - ro[i]));
                if (eo > 1e-5) printf("#   max error of the output: %g\n", eo);
                CHECK(o && eo <= 1e-5);
                for (int i = 0; i < 3; i++) {
                    double e = g[0][i] && g[1][i] ? tu_norm_err(g[1][i], g[0][i]) : 1;
                    /* float32 sums in another order: max |diff| / max(1, max |unfused|) */
                    if (e > 2e-5) printf("#   gradient %d: error %g against the unfused path\n", i, e);
                    CHECK(e <= 2e-5);
                    ld_tensor_release(g[0][i]); ld_tensor_release(g[1][i]);
                }
                free(ro); free(rw);
                ld_tensor_release(o);
            }
            ld_tensor_release(in[0]); ld_tensor_release(in[1]); ld_tensor_release(in[2]);
        }
        ld_attention_fused(LD_FUSED_ON);
        int64_t sq[3] = {2, 5, 16}, sk[3] = {2, 3, 16};
        ld_tensor *in[3] = {tu_rnd(3, sq, -1, 1), tu_rnd(3, sk, -1, 1), tu_rnd(3, sk, -1, 1)};
        attn_args a = {LD_CAUSAL_END, 0, 0};
        tu_gradcheck("grad fused attention causal (end) T>S (rows masked whole)", f_attn, &a, 3, in, yes, 1e-2);
        a.causal = LD_CAUSAL;
        tu_gradcheck("grad fused attention causal T>S", f_attn, &a, 3, in, yes, 1e-2);
        ld_tensor_release(in[0]); ld_tensor_release(in[1]); ld_tensor_release(in[2]);
        TEST("fused attention: the mode is kept and read back; widths it cannot take go unfused") {
            CHECK(ld_attention_fused(-1) == LD_FUSED_ON);
            int64_t s3[3] = {1, 4, 3}, s16[3] = {1, 4, 16}, s8[3] = {1, 4, 8};
            ld_tensor *x = tu_rnd(3, s3, -1, 1), *x16 = tu_rnd(3, s16, -1, 1), *x8 = tu_rnd(3, s8, -1, 1);
            ld_tape *tape = ld_tape_new(0);
            ld_tape_watch(tape, x); ld_tape_watch(tape, x16);
            ld_tape_push(tape);
            ld_tensor *y = ld_attention(x, x, x, LD_CAUSAL, 0, NULL), *y16 = ld_attention(x16, x16, x16, LD_CAUSAL, 0, NULL);
            ld_tensor *y_mixed = ld_attention(x16, x16, x8, LD_CAUSAL, 0, NULL), *w = NULL;
            ld_tensor *y_w = ld_attention(x16, x16, x16, LD_CAUSAL, 0, &w);
            ld_tape_pop(tape);
            CHECK(y && y->grad_fn && !strcmp(y->grad_fn->op, "attention"));
            CHECK(y16 && y16->grad_fn && !strcmp(y16->grad_fn->op, "flash_attention"));
            CHECK(y_mixed && y_mixed->grad_fn && !strcmp(y_mixed->grad_fn->op, "attention"));
            CHECK(y_w && w && y_w->grad_fn && !strcmp(y_w->grad_fn->op, "attention"));
            ld_tape_free(tape);
            ld_tensor *tensors[] = {x, x16, x8, y, y16, y_mixed, y_w, w};
            for (size_t i = 0; i < sizeof tensors / sizeof *tensors; i++) ld_tensor_release(tensors[i]);
        }
        ld_attention_fused(was);
    }

    /* ---- on a logical CPU device: kernels queued to its executor ---- */
    TEST("attention + gradients on cpu:1 (queued) match cpu:0") {
        CHECK(ld_cpu_devices(2) == LD_OK);
        ld_device *d1 = ld_device_find("cpu:1");
        CHECK(d1 != NULL);
        if (!d1) continue;
        int64_t sq[3] = {6, 7, 4}, sk[3] = {6, 9, 4}, sv[3] = {6, 9, 3};
        ld_tensor *h[3] = {tu_rnd(3, sq, -1, 1), tu_rnd(3, sk, -1, 1), tu_rnd(3, sv, -1, 1)}, *dv[3], *gh[3], *gd[3];
        ld_tensor *oh = NULL, *od = NULL;
        for (int side = 0; side < 2; side++) {
            ld_tensor **in = side ? dv : h, **gr = side ? gd : gh;
            if (side) for (int i = 0; i < 3; i++) dv[i] = ld_to_device(h[i], d1);
            ld_tape *tape = ld_tape_new(0);
            for (int i = 0; i < 3; i++) ld_tape_watch(tape, in[i]);
            ld_tape_push(tape);
            ld_tensor *o = ld_attention(in[0], in[1], in[2], LD_CAUSAL, 0, NULL);
            ld_tensor *sq2 = o ? ld_mul(o, o) : NULL, *loss = sq2 ? ld_sum(sq2, LD_ALL_AXES, 0) : NULL;
            ld_tape_pop(tape);
            CHECK(loss && ld_tape_gradient(tape, loss, 3, in, gr) == LD_OK);
            ld_tensor_release(sq2); ld_tensor_release(loss); ld_tape_free(tape);
            if (side) od = o; else oh = o;
        }
        ld_tensor *back = od ? ld_to_device(od, ld_device_cpu()) : NULL;
        CHECK(back && tu_norm_err(back, oh) < 1e-6);
        for (int i = 0; i < 3; i++) {
            ld_tensor *gb = gd[i] ? ld_to_device(gd[i], ld_device_cpu()) : NULL;
            CHECK(gb && gh[i] && tu_norm_err(gb, gh[i]) < 1e-6);
            ld_tensor_release(gb); ld_tensor_release(gh[i]); ld_tensor_release(gd[i]);
            ld_tensor_release(h[i]); ld_tensor_release(dv[i]);
        }
        ld_tensor_release(back); ld_tensor_release(oh); ld_tensor_release(od);
    }

    /* ---- errors ---- */
    {
        int64_t s234[3] = {2, 3, 4}, s254[3] = {2, 5, 4}, s356[3] = {3, 5, 6}, s23[2] = {2, 3}, s245[3] = {2, 4, 5};
        int64_t s236[3] = {2, 3, 6}, s264[3] = {2, 6, 4};
        ld_tensor *a = tu_rnd(3, s234, -1, 1), *b = tu_rnd(3, s254, -1, 1), *c = tu_rnd(3, s356, -1, 1), *d = tu_rnd(2, s23, -1, 1);
        ld_tensor *e = tu_rnd(3, s245, -1, 1), *f = tu_rnd(3, s236, -1, 1), *g = tu_rnd(3, s264, -1, 1);
        ld_tensor *ai = ld_cast(a, LD_I32);
        const char *n1[] = {"bmm", "2x3x4", "2x5x4", "inner dimensions 4 and 5"};
        expect_error("bmm inner mismatch names op and shapes", ld_bmm(a, b, 0, 0), n1, 4);
        const char *n2[] = {"bmm", "2x3x4", "3x5x6", "batch"};
        expect_error("bmm batch mismatch", ld_bmm(a, c, 0, 1), n2, 4);
        const char *n3[] = {"bmm", "2x3x4", "2x3"};
        expect_error("bmm rank mismatch", ld_bmm(a, d, 0, 0), n3, 3);
        const char *n4[] = {"bmm", "float32", "int32"};
        expect_error("bmm dtype", ld_bmm(ai, e, 0, 0), n4, 3);
        TEST("bmm transposed flags accept what plain refuses") {
            ld_tensor *r = ld_bmm(a, b, 0, 1);   /* [2,3,4] x [2,5,4]^T */
            CHECK(r && r->shape[1] == 3 && r->shape[2] == 5);
            ld_tensor_release(r);
        }
        const char *n5[] = {"attention", "query 2x3x4", "key 2x3x6", "last axis"};
        expect_error("attention dk mismatch", ld_attention(a, f, f, 0, 0, NULL), n5, 4);
        const char *n6[] = {"attention", "key 2x5x4", "value 2x6x4", "length"};
        expect_error("attention key/value length mismatch", ld_attention(a, b, g, 0, 0, NULL), n6, 4);
        const char *n7[] = {"attention", "batch", "3x5x6"};
        expect_error("attention batch mismatch", ld_attention(a, b, c, 0, 0, NULL), n7, 3);
        const char *n8[] = {"attention", "3-d", "2x3"};
        expect_error("attention rank", ld_attention(d, b, b, 0, 0, NULL), n8, 3);
        const char *n9[] = {"attention", "causal"};
        expect_error("attention bad causal flag", ld_attention(a, b, b, 7, 0, NULL), n9, 2);
        const char *n10[] = {"split_heads", "2x3x4", "multiple of 3 heads"};
        expect_error("split_heads indivisible", ld_split_heads(a, 3), n10, 3);
        const char *n11[] = {"merge_heads", "2x3x4", "multiple of 4 heads"};
        expect_error("merge_heads indivisible", ld_merge_heads(a, 4), n11, 3);
        TEST("weights_out is NULL after an error") {
            ld_tensor *w = (ld_tensor *)1, *o = ld_attention(a, f, f, 0, 0, &w);
            CHECK(o == NULL && w == NULL);
        }
        ld_tensor_release(a); ld_tensor_release(b); ld_tensor_release(c); ld_tensor_release(d);
        ld_tensor_release(e); ld_tensor_release(f); ld_tensor_release(g); ld_tensor_release(ai);
    }
    return tu_summary();
}
