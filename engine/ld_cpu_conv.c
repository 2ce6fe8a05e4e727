/*
 * ld_cpu_conv.c - direct 2-d convolution on the CPU (NHWC images, HWIO
 * kernels): the kernels conv2d and conv2d_backward of ld_kernels.h.
 *
 * No im2col matrix is made. The products read the image where it lies: a
 * register tile of P output pixels x V vectors of 16 filters is accumulated
 * over the window's taps and channels, each image value broadcast from the
 * image itself and each weight row loaded from a copy of the kernel packed
 * in chunks of 64 filters (zero-padded, so every load is a whole vector).
 * Bias is the tile's initial value and relu is applied as the tile is
 * stored: the output is written once.
 *
 * Backward, per image (so the work stays in cache): gm = dy masked by y > 0
 * (relu) in the same packed layout, its column sums (db), then
 *   dw += patch^T gm   a tile of KT kernel rows x V vectors of filters,
 *                      summed over the image's pixels;
 *   dx                 the transposed product: for each tap a tile of P
 *                      pixels x V vectors of channels = gm rows x w^T,
 *                      added into the image at that tap's offset (any
 *                      stride; overlapping windows simply add).
 * With a max pooling after the convolution (ld_conv2d_pool: a Conv2D then a
 * MaxPool2D) each image's output is pooled from cache and only the pooled
 * values and their pixels (int32) are written; backward scatters the pooled
 * gradient to those pixels as it builds gm.
 * Padding ("same") is a zero-padded copy of the image (and of dx) per image.
 * Images are split over the CPU device's thread pool; each part keeps its
 * own dw and db, summed in part order at the end.
 *
 * The vectors are GCC's vector extensions: AVX-512 registers where the
 * build targets them (-march=native here), pairs of AVX2 ones elsewhere
 * (correct, with spills).
 *
 * The im2col + gemm lowering (ld_im2col, ld_linear) stays the path of other
 * backends and the reference the tests compare this one with
 * (LDIST_CONV_REFERENCE=1, ld_ops.c; tests/lua/test_conv_kernels.lua).
 */
#include "ld_cpu_internal.h"
#include "ld_executor.h"

#include <stdlib.h>
#include <string.h>

typedef float v16 __attribute__((vector_size(64)));
typedef float v16u __attribute__((vector_size(64), aligned(4)));
typedef int32_t vi16 __attribute__((vector_size(64)));
typedef int32_t vi16u __attribute__((vector_size(64), aligned(4)));
#define ILOAD(p) (*(const vi16u *)(p))
#define ISTORE(p, v) (*(vi16u *)(p) = (v))
/* lanes of a where mask (all ones or zero per lane), else of b */
static inline v16 vsel(vi16 mask, v16 a, v16 b) { return (v16)(((vi16)a & mask) | ((vi16)b & ~mask)); }
static inline vi16 isel(vi16 mask, vi16 a, vi16 b) { return (a & mask) | (b & ~mask); }
#define VLOAD(p) (*(const v16u *)(p))
#define VSTORE(p, v) (*(v16u *)(p) = (v))
#define CH 64           /* filters (forward, dw) or channels (dx) per chunk */
#define PMAX 16         /* the most pixels or kernel rows in a tile */

static float *falloc(int64_t n) {
    void *p = NULL;
    if (posix_memalign(&p, 64, (size_t)(n > 0 ? n : 1) * sizeof(float))) return NULL;
    return p;
}

/* ---- the product tile: out[p][0..16V) = init + sum over taps t and k < klen
   of src[poff[p] + toff[t] + k] * wp[(t * klen + k) * CH + 0..16V) */
#define TILE(NAME, V, P)                                                                          \
    static void NAME(const float *src, const int64_t *poff, const int64_t *toff, int64_t ntap,     \
                     int64_t klen, const float *wp, const float *init, float *out) {               \
        v16 acc[P][V];                                                                             \
        int64_t po[P];                                                                             \
        for (int p = 0; p < P; p++) po[p] = poff[p];                                               \
        for (int p = 0; p < P; p++)                                                                \
            for (int v = 0; v < V; v++) acc[p][v] = VLOAD(init + 16 * v);                          \
        for (int64_t t = 0; t < ntap; t++) {                                                       \
            const float *xs = src + toff[t], *wt = wp + t * klen * CH;                             \
            for (int64_t k = 0; k < klen; k++) {                                                   \
                v16 wv[V];                                                                         \
                for (int v = 0; v < V; v++) wv[v] = VLOAD(wt + k * CH + 16 * v);                   \
                for (int p = 0; p < P; p++) {                                                      \
                    float xv = xs[po[p] + k];                                                      \
                    for (int v = 0; v < V; v++) acc[p][v] += xv * wv[v];                           \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        for (int p = 0; p < P; p++)                                                                \
            for (int v = 0; v < V; v++) VSTORE(out + p * CH + 16 * v, acc[p][v]);                  \
    }
TILE(tile1, 1, 14)
TILE(tile2, 2, 12)
TILE(tile3, 3, 8)
TILE(tile4, 4, 6)
typedef void (*tile_fn)(const float *, const int64_t *, const int64_t *, int64_t, int64_t, const float *,
                        const float *, float *);
static const tile_fn tiles[5] = {NULL, tile1, tile2, tile3, tile4};
static const int tile_p[5] = {0, 14, 12, 8, 6};

/* ---- the weight-gradient tile: acc[r][0..16V) (rows r < KT of dw, in
   memory at dwp) += sum over pixels q < npix of img[pixo[q] + koff[r]] *
   gm[q * CH + 0..16V) */
#define WTILE(NAME, V, KT)                                                                         \
    static void NAME(const float *img, const int64_t *pixo, int64_t npix, const int64_t *koff,    \
                     const float *gm, float *dwp) {                                                \
        v16 acc[KT][V];                                                                            \
        int64_t ko[KT];                                                                            \
        for (int r = 0; r < KT; r++) ko[r] = koff[r];                                              \
        for (int r = 0; r < KT; r++)                                                               \
            for (int v = 0; v < V; v++) acc[r][v] = VLOAD(dwp + r * CH + 16 * v);                  \
        for (int64_t q = 0; q < npix; q++) {                                                       \
            const float *xs = img + pixo[q];                                                       \
            v16 gv[V];                                                                             \
            for (int v = 0; v < V; v++) gv[v] = VLOAD(gm + q * CH + 16 * v);                       \
            for (int r = 0; r < KT; r++) {                                                         \
                float xv = xs[ko[r]];                                                              \
                for (int v = 0; v < V; v++) acc[r][v] += xv * gv[v];                               \
            }                                                                                      \
        }                                                                                          \
        for (int r = 0; r < KT; r++)                                                               \
            for (int v = 0; v < V; v++) VSTORE(dwp + r * CH + 16 * v, acc[r][v]);                  \
    }
WTILE(wtile1, 1, 14)
WTILE(wtile2, 2, 12)
WTILE(wtile3, 3, 8)
WTILE(wtile4, 4, 6)
typedef void (*wtile_fn)(const float *, const int64_t *, int64_t, const int64_t *, const float *, float *);
static const wtile_fn wtiles[5] = {NULL, wtile1, wtile2, wtile3, wtile4};

/* ---- geometry shared by the parts */
typedef struct {
    ld_conv_geom g;
    int64_t hp, wp;         /* the (padded) image the windows read */
    int pad;                /* 1: images are copied into a zero-padded buffer */
    int64_t ntap, k, op;    /* kh*kw, kh*kw*c, oh*ow */
    int64_t *toff;          /* [ntap] offset of tap (ki, kj) from a window's origin */
    int64_t *koff;          /* [k] offset of kernel row (tap, channel) */
    int64_t *pixo;          /* [op] offset of output pixel (i, j)'s window origin */
} geom;

static int geom_init(geom *G, const ld_conv_geom *g) {
    memset(G, 0, sizeof *G);
    G->g = *g;
    int64_t need_h = (g->oh - 1) * g->sh + g->kh, need_w = (g->ow - 1) * g->sw + g->kw;
    G->pad = g->ph || g->pw || need_h > g->h || need_w > g->w;
    G->hp = G->pad ? (need_h > g->h + g->ph ? need_h : g->h + g->ph) : g->h;
    G->wp = G->pad ? (need_w > g->w + g->pw ? need_w : g->w + g->pw) : g->w;
    G->ntap = g->kh * g->kw;
    G->k = G->ntap * g->c;
    G->op = g->oh * g->ow;
    G->toff = malloc(sizeof(int64_t) * (size_t)(G->ntap + G->k + G->op + 1));
    if (!G->toff) return -1;
    G->koff = G->toff + G->ntap;
    G->pixo = G->koff + G->k;
    for (int64_t ki = 0; ki < g->kh; ki++)
        for (int64_t kj = 0; kj < g->kw; kj++) G->toff[ki * g->kw + kj] = (ki * G->wp + kj) * g->c;
    for (int64_t t = 0; t < G->ntap; t++)
        for (int64_t q = 0; q < g->c; q++) G->koff[t * g->c + q] = G->toff[t] + q;
    for (int64_t i = 0; i < g->oh; i++)
        for (int64_t j = 0; j < g->ow; j++) G->pixo[i * g->ow + j] = (i * g->sh * G->wp + j * g->sw) * g->c;
    return 0;
}

/* image b as the windows read it: in place, or copied into the padded xp */
static const float *image(const geom *G, const float *x, int64_t b, float *xp) {
    const ld_conv_geom *g = &G->g;
    const float *xi = x + b * g->h * g->w * g->c;
    if (!G->pad) return xi;
    memset(xp, 0, sizeof(float) * (size_t)(G->hp * G->wp * g->c));
    for (int64_t r = 0; r < g->h; r++)
        memcpy(xp + ((r + g->ph) * G->wp + g->pw) * g->c, xi + r * g->w * g->c, sizeof(float) * (size_t)(g->w * g->c));
    return xp;
}

static int64_t nchunks(int64_t n) { return (n + CH - 1) / CH; }
static int vecs(int64_t n) { return (int)((n + 15) / 16); }

static void images_of(int64_t n, int part, int np, int64_t *lo, int64_t *hi) {
    int64_t per = (n + np - 1) / np;
    *lo = per * part; *hi = *lo + per;
    if (*lo > n) *lo = n;
    if (*hi > n) *hi = n;
}

/* ================================================================ forward */
typedef struct {
    const geom *G; float *y; int32_t *arg; const float *x, *wpk, *bpk; int relu; int failed;
} fwd_job;

/* max pooling of one image's conv output cb [oh*ow, f] into y, arg [poh*pow, f]
   (the first maximum in window order, as the max_pool2d kernel) */
static void pool_image(float *y, int32_t *arg, const float *cb, const ld_conv_geom *g) {
    int64_t f = g->f;
    for (int64_t pi = 0; pi < g->poh; pi++)
        for (int64_t pj = 0; pj < g->pow; pj++) {
            float *yo = y + (pi * g->pow + pj) * f;
            int32_t *ao = arg + (pi * g->pow + pj) * f;
            int32_t q0 = (int32_t)(pi * g->psh * g->ow + pj * g->psw);
            if (f % 16 == 0) {   /* 16 channels at a time, in registers */
                for (int64_t c = 0; c < f; c += 16) {
                    v16 m = VLOAD(cb + (int64_t)q0 * f + c);
                    vi16 am = (vi16){0} + q0;
                    for (int64_t a = 0; a < g->pkh; a++)
                        for (int64_t b = 0; b < g->pkw; b++) {
                            int32_t q = q0 + (int32_t)(a * g->ow + b);
                            v16 v = VLOAD(cb + (int64_t)q * f + c);
                            vi16 gt = v > m;
                            m = vsel(gt, v, m);
                            am = isel(gt, (vi16){0} + q, am);
                        }
                    VSTORE(yo + c, m);
                    ISTORE(ao + c, am);
                }
                continue;
            }
            memcpy(yo, cb + (int64_t)q0 * f, sizeof(float) * (size_t)f);
            for (int64_t c = 0; c < f; c++) ao[c] = q0;
            for (int64_t a = 0; a < g->pkh; a++)
                for (int64_t b = 0; b < g->pkw; b++) {
                    if (!a && !b) continue;
                    int32_t q = q0 + (int32_t)(a * g->ow + b);
                    const float *src = cb + (int64_t)q * f;
                    for (int64_t c = 0; c < f; c++) {   /* branch-free, so it vectorises */
                        float v = src[c];
                        int gt = v > yo[c];
                        yo[c] = gt ? v : yo[c];
                        ao[c] = gt ? q : ao[c];
                    }
                }
        }
}

static void fwd_part(void *ctx, int part, int np) {
    fwd_job *J = ctx;
    const geom *G = J->G;
    const ld_conv_geom *g = &G->g;
    int64_t lo, hi;
    images_of(g->n, part, np, &lo, &hi);
    if (lo >= hi) return;
    int pool = g->pkh > 0;
    float *xp = G->pad ? falloc(G->hp * G->wp * g->c) : NULL, *out = falloc(PMAX * CH);
    float *cb = pool ? falloc(G->op * g->f) : NULL;   /* one image's conv output, pooled from cache */
    if ((G->pad && !xp) || !out || (pool && !cb)) { J->failed = 1; free(xp); free(out); free(cb); return; }
    int64_t nch = nchunks(g->f), po[PMAX];
    for (int64_t b = lo; b < hi; b++) {
        const float *img = image(G, J->x, b, xp);
        float *yb = pool ? cb : J->y + b * G->op * g->f;
        for (int64_t ch = 0; ch < nch; ch++) {
            int64_t f0 = ch * CH, nf = g->f - f0 < CH ? g->f - f0 : CH;
            int V = vecs(nf), P = tile_p[V];
            for (int64_t pb = 0; pb < G->op; pb += P) {
                int64_t np_ = G->op - pb < P ? G->op - pb : P;
                for (int p = 0; p < P; p++) po[p] = G->pixo[pb + (p < np_ ? p : np_ - 1)];
                tiles[V](img, po, G->toff, G->ntap, g->c, J->wpk + ch * G->k * CH, J->bpk + ch * CH, out);
                for (int64_t p = 0; p < np_; p++) {
                    float *yo = yb + (pb + p) * g->f + f0;
                    const float *o = out + p * CH;
                    if (J->relu) for (int64_t j = 0; j < nf; j++) yo[j] = o[j] > 0 ? o[j] : 0;
                    else memcpy(yo, o, sizeof(float) * (size_t)nf);
                }
            }
        }
        if (pool) {
            int64_t pn = g->poh * g->pow * g->f;
            pool_image(J->y + b * pn, J->arg + b * pn, cb, g);
        }
    }
    free(xp); free(out); free(cb);
}

/* w [k, f] packed as [chunk][k][CH] (zero beyond f) */
static void pack_w(float *wpk, const float *w, int64_t k, int64_t f) {
    int64_t nch = nchunks(f);
    memset(wpk, 0, sizeof(float) * (size_t)(nch * k * CH));
    for (int64_t ch = 0; ch < nch; ch++)
        for (int64_t r = 0; r < k; r++)
            for (int64_t j = 0; j < CH && ch * CH + j < f; j++) wpk[(ch * k + r) * CH + j] = w[r * f + ch * CH + j];
}

void cpu_conv2d(ld_device *d, float *y, int32_t *arg, const float *x, const float *w, const float *b, ld_conv_geom g,
                int relu) {
    geom G;
    if (g.n * g.oh * g.ow * g.f == 0 || (g.pkh > 0 && g.poh * g.pow == 0)) return;
    if (geom_init(&G, &g)) { ld_device_fault(d, LD_ENOMEM, "conv2d: out of memory"); return; }
    int64_t nch = nchunks(g.f);
    float *wpk = falloc(nch * G.k * CH), *bpk = falloc(nch * CH);
    if (!wpk || !bpk) { free(wpk); free(bpk); free(G.toff); ld_device_fault(d, LD_ENOMEM, "conv2d: out of memory"); return; }
    pack_w(wpk, w, G.k, g.f);
    memset(bpk, 0, sizeof(float) * (size_t)(nch * CH));
    if (b) memcpy(bpk, b, sizeof(float) * (size_t)g.f);
    fwd_job J = {&G, y, arg, x, wpk, bpk, relu, 0};
    int64_t work = g.n * G.op * G.k * g.f;
    if (work < LD_CPU_PAR_MIN || g.n < 2) fwd_part(&J, 0, 1);
    else ld_cpu_parallel(fwd_part, &J, 64);
    if (J.failed) ld_device_fault(d, LD_ENOMEM, "conv2d: out of memory");
    free(wpk); free(bpk); free(G.toff);
}

/* ================================================================ backward */
#define MAX_PARTS 64
typedef struct {
    const geom *G; float *dx; int want_dw; const float *dy, *y, *x, *wt; const int32_t *arg; int relu;
    float *dwp[MAX_PARTS], *dbp[MAX_PARTS]; int failed;
} bwd_job;

/* a pooling whose windows do not overlap, over channels in whole vectors:
   gm_image writes each window's cells whole */
static int pool_tiles(const ld_conv_geom *g) {
    return g->pkh > 0 && g->psh >= g->pkh && g->psw >= g->pkw && g->f % 16 == 0;
}

/* image b's gm: dy masked by y > 0 (relu), packed [f chunk][pixel][CH], zero
   beyond f, with a pooling dy scattered to the pixels the maxima came from;
   its column sums added to db */
static void gm_image(float *gm, float *db, const bwd_job *J, int64_t b) {
    const geom *G = J->G;
    const ld_conv_geom *g = &G->g;
    int64_t nfch = nchunks(g->f), op = G->op, f = g->f;
    if (g->pkh > 0 && pool_tiles(g)) {
        /* windows that do not overlap: each window's cells written whole,
           dy where the maximum came from, 0 elsewhere (the cells of no
           window and the lanes beyond f were zeroed once, by the part) */
        int64_t pop = g->poh * g->pow;
        const float *dyb = J->dy + b * pop * f, *yb = J->y ? J->y + b * pop * f : NULL;
        const int32_t *ab = J->arg + b * pop * f;
        for (int64_t pi = 0; pi < g->poh; pi++)
            for (int64_t pj = 0; pj < g->pow; pj++) {
                int64_t pp = pi * g->pow + pj, q0 = pi * g->psh * g->ow + pj * g->psw;
                for (int64_t c = 0; c < f; c += 16) {
                    int64_t e = pp * f + c;
                    v16 v = VLOAD(dyb + e);
                    if (J->relu) v = vsel(VLOAD(yb + e) > (v16){0}, v, (v16){0});
                    VSTORE(db + c, VLOAD(db + c) + v);
                    vi16 a = ILOAD(ab + e);
                    float *gc = gm + (c / CH) * op * CH + c % CH;
                    for (int64_t r = 0; r < g->pkh; r++)
                        for (int64_t s2 = 0; s2 < g->pkw; s2++) {
                            int32_t q = (int32_t)(q0 + r * g->ow + s2);
                            VSTORE(gc + (int64_t)q * CH, vsel(a == (vi16){0} + q, v, (v16){0}));
                        }
                }
            }
        return;
    }
    if (g->pkh > 0) {
        int64_t pop = g->poh * g->pow;
        const float *dyb = J->dy + b * pop * f, *yb = J->y ? J->y + b * pop * f : NULL;
        const int32_t *ab = J->arg + b * pop * f;
        memset(gm, 0, sizeof(float) * (size_t)(nfch * op * CH));
        for (int64_t pp = 0; pp < pop; pp++)
            for (int64_t ch = 0; ch < nfch; ch++) {
                int64_t f0 = ch * CH, nf = f - f0 < CH ? f - f0 : CH, e0 = pp * f + f0;
                float *gc = gm + ch * op * CH, *dbc = db + f0;
                for (int64_t j = 0; j < nf; j++) {
                    float v = J->relu && !(yb[e0 + j] > 0) ? 0 : dyb[e0 + j];
                    gc[(int64_t)ab[e0 + j] * CH + j] += v;   /* += : overlapping windows */
                    dbc[j] += v;
                }
            }
        return;
    }
    const float *dyb = J->dy + b * op * f, *yb = J->y ? J->y + b * op * f : NULL;
    for (int64_t ch = 0; ch < nfch; ch++) {
        int64_t f0 = ch * CH, nf = f - f0 < CH ? f - f0 : CH;
        float *dbc = db + f0;
        for (int64_t q = 0; q < op; q++) {
            float *gq = gm + (ch * op + q) * CH;
            const float *d = dyb + q * f + f0;
            if (J->relu) {
                const float *yy = yb + q * f + f0;
                for (int64_t j = 0; j < nf; j++) { float v = yy[j] > 0 ? d[j] : 0; gq[j] = v; dbc[j] += v; }
            } else {
                for (int64_t j = 0; j < nf; j++) { gq[j] = d[j]; dbc[j] += d[j]; }
            }
            for (int64_t j = nf; j < CH; j++) gq[j] = 0;
        }
    }
}

static void bwd_part(void *ctx, int part, int np) {
    bwd_job *J = ctx;
    const geom *G = J->G;
    const ld_conv_geom *g = &G->g;
    int64_t lo, hi;
    images_of(g->n, part, np, &lo, &hi);
    if (lo >= hi) return;
    int64_t nfch = nchunks(g->f), ncch = nchunks(g->c), fp = nfch * CH, op = G->op, k = G->k;
    int64_t img_n = G->hp * G->wp * g->c;
    float *gm = falloc(nfch * op * CH), *out = falloc(PMAX * CH);
    float *xp = J->want_dw && G->pad ? falloc(img_n) : NULL, *dxp = J->dx && G->pad ? falloc(img_n) : NULL;
    float *dw = J->want_dw ? falloc(nfch * k * CH) : NULL, *db = falloc(fp);
    float *zeros = falloc(CH);
    int64_t po[PMAX], *fo = malloc(sizeof(int64_t) * (size_t)nfch);
    if (!fo || !gm || !out || !db || !zeros || (J->want_dw && (!dw || (G->pad && !xp))) || (J->dx && G->pad && !dxp)) {
        J->failed = 1;
        free(gm); free(out); free(xp); free(dxp); free(dw); free(db); free(zeros); free(fo);
        return;
    }
    memset(zeros, 0, sizeof(float) * CH);
    memset(db, 0, sizeof(float) * (size_t)fp);
    if (pool_tiles(g)) memset(gm, 0, sizeof(float) * (size_t)(nfch * op * CH));   /* see gm_image */
    if (dw) memset(dw, 0, sizeof(float) * (size_t)(nfch * k * CH));
    for (int64_t b = lo; b < hi; b++) {
        gm_image(gm, db, J, b);
        if (dw) {   /* dw[r][f] += sum_q img[pixo[q] + koff[r]] * gm[q][f] */
            const float *img = image(G, J->x, b, xp);
            for (int64_t ch = 0; ch < nfch; ch++) {
                int64_t nf = g->f - ch * CH < CH ? g->f - ch * CH : CH;
                int V = vecs(nf), KT = tile_p[V];
                const float *gc = gm + ch * op * CH;
                for (int64_t r0 = 0; r0 < k; r0 += KT) {
                    float *dwr = dw + (ch * k + r0) * CH;
                    if (r0 + KT <= k) { wtiles[V](img, G->pixo, op, G->koff + r0, gc, dwr); continue; }
                    /* the last rows: through a full tile whose extra rows are discarded */
                    float tmp[PMAX * CH];
                    int64_t ko[PMAX], nr = k - r0;
                    memset(tmp, 0, sizeof tmp);
                    memcpy(tmp, dwr, sizeof(float) * (size_t)(nr * CH));
                    for (int r = 0; r < KT; r++) ko[r] = G->koff[r0 + (r < nr ? r : nr - 1)];
                    wtiles[V](img, G->pixo, op, ko, gc, tmp);
                    memcpy(dwr, tmp, sizeof(float) * (size_t)(nr * CH));
                }
            }
        }
        if (J->dx) {   /* for each tap: dx[pixo[q] + toff[t] + c] += sum_f gm[q][f] w[t][c][f] */
            float *dxb = J->dx + b * g->h * g->w * g->c, *tgt = G->pad ? dxp : dxb;
            memset(tgt, 0, sizeof(float) * (size_t)(G->pad ? img_n : g->h * g->w * g->c));
            for (int64_t fc = 0; fc < nfch; fc++) fo[fc] = fc * op * CH;
            for (int64_t cc = 0; cc < ncch; cc++) {
                int64_t c0 = cc * CH, nc = g->c - c0 < CH ? g->c - c0 : CH;
                int V = vecs(nc), P = tile_p[V];
                for (int64_t pb = 0; pb < op; pb += P) {
                    int64_t np_ = op - pb < P ? op - pb : P;
                    for (int p = 0; p < P; p++) po[p] = (pb + (p < np_ ? p : np_ - 1)) * CH;
                    for (int64_t t = 0; t < G->ntap; t++) {
                        tiles[V](gm, po, fo, nfch, CH, J->wt + (cc * G->ntap + t) * fp * CH, zeros, out);
                        for (int64_t p = 0; p < np_; p++) {
                            float *dd = tgt + G->pixo[pb + p] + G->toff[t] + c0;
                            const float *o = out + p * CH;
                            for (int64_t j = 0; j < nc; j++) dd[j] += o[j];
                        }
                    }
                }
            }
            if (G->pad)
                for (int64_t r = 0; r < g->h; r++)
                    memcpy(dxb + r * g->w * g->c, dxp + ((r + g->ph) * G->wp + g->pw) * g->c,
                           sizeof(float) * (size_t)(g->w * g->c));
        }
    }
    J->dwp[part] = dw;
    J->dbp[part] = db;
    free(gm); free(out); free(xp); free(dxp); free(zeros); free(fo);
}

void cpu_conv2d_backward(ld_device *d, float *dx, float *dw, float *db, const float *dy, const float *y,
                         const int32_t *arg, const float *x, const float *w, ld_conv_geom g, int relu) {
    geom G;
    if (geom_init(&G, &g)) { ld_device_fault(d, LD_ENOMEM, "conv2d backward: out of memory"); return; }
    int64_t nfch = nchunks(g.f), ncch = nchunks(g.c), fp = nfch * CH;
    if (dw) memset(dw, 0, sizeof(float) * (size_t)(G.k * g.f));
    if (db) memset(db, 0, sizeof(float) * (size_t)g.f);
    if (G.op == 0 || g.f == 0) {   /* no output pixels: every gradient is zero */
        if (dx) memset(dx, 0, sizeof(float) * (size_t)(g.n * g.h * g.w * g.c));
        free(G.toff);
        return;
    }
    /* w^T for dx: [c chunk][tap][f (padded to fp)][CH channels], zero-padded */
    float *wt = NULL;
    if (dx) {
        wt = falloc(ncch * G.ntap * fp * CH);
        if (!wt) { free(G.toff); ld_device_fault(d, LD_ENOMEM, "conv2d backward: out of memory"); return; }
        memset(wt, 0, sizeof(float) * (size_t)(ncch * G.ntap * fp * CH));
        for (int64_t t = 0; t < G.ntap; t++)
            for (int64_t q = 0; q < g.c; q++)
                for (int64_t f = 0; f < g.f; f++)
                    wt[(((q / CH) * G.ntap + t) * fp + f) * CH + q % CH] = w[(t * g.c + q) * g.f + f];
    }
    bwd_job *J = calloc(1, sizeof *J);
    if (!J) { free(wt); free(G.toff); ld_device_fault(d, LD_ENOMEM, "conv2d backward: out of memory"); return; }
    J->G = &G; J->dx = dx; J->want_dw = dw != NULL;
    J->dy = dy; J->y = relu ? y : NULL; J->x = x; J->wt = wt; J->arg = arg; J->relu = relu && y;
    int64_t work = g.n * G.op * G.k * g.f;
    if (work < LD_CPU_PAR_MIN || g.n < 2) bwd_part(J, 0, 1);
    else ld_cpu_parallel(bwd_part, J, MAX_PARTS);
    if (J->failed) ld_device_fault(d, LD_ENOMEM, "conv2d backward: out of memory");
    /* the parts' sums, in part order */
    for (int p = 0; p < MAX_PARTS; p++) {
        if (dw && J->dwp[p])
            for (int64_t r = 0; r < G.k; r++)
                for (int64_t f = 0; f < g.f; f++) dw[r * g.f + f] += J->dwp[p][((f / CH) * G.k + r) * CH + f % CH];
        if (db && J->dbp[p])
            for (int64_t f = 0; f < g.f; f++) db[f] += J->dbp[p][f];
        free(J->dwp[p]); free(J->dbp[p]);
    }
    free(J); free(wt); free(G.toff);
}
