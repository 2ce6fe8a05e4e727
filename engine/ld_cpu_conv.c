/*
 * ld_cpu_conv.c - direct 2-d convolution on the CPU (NHWC images, HWIO
 * kernels): the kernels conv2d and conv2d_backward of ld_kernels.h, and at
 * the end the im2col lowering and max pooling of the convolution family.
 *
 * No im2col matrix is made. The products read the image where it lies: a
 * register tile of P output pixels x V vectors of VW filters is accumulated
 * over the window's taps and channels, each image value broadcast from the
 * image itself and each weight row loaded from a copy of the kernel packed
 * in chunks of 4 vectors (64 filters with AVX-512, 32 with AVX2; zero-padded,
 * so every load is a whole vector).
 * A kernel row's taps and channels are contiguous in the image, so a tile
 * runs kh passes of kw*c products. Bias is the tile's initial value and
 * relu is applied as the tile is stored, straight into y: the output is
 * written once. Tiles whose pixels lie a constant step apart (a run of one
 * row) read the image at fixed displacements from one pointer; the pixels
 * per tile are chosen to leave few slots idle (7 for 7x7 images).
 *
 * Backward, per image (so the work stays in cache): gm = dy masked by y > 0
 * (relu) in rows of f rounded up to a vector (64 when f spans chunks), dy
 * itself where nothing masks it; its column sums (db), then
 *   dw += patch^T gm   a tile of KT kernel rows x V vectors of filters,
 *                      summed over the image's pixels;
 *   dx                 stride 1 (filters in one chunk): gathered, a forward
 *                      convolution of a zero-padded gm with the kernel
 *                      flipped and transposed, each dx pixel written once;
 *                      else scattered: for each tap a tile of P pixels x V
 *                      vectors of channels = gm rows x w^T, added into the
 *                      image at that tap's offset (any stride; overlapping
 *                      windows simply add).
 * With a max pooling after the convolution (ld_conv2d_pool: a Conv2D then a
 * MaxPool2D) each image's output is pooled from cache and only the pooled
 * values and their pixels (int32) are written; backward scatters the pooled
 * gradient to those pixels as it builds gm.
 * Padding ("same") is a zero-padded copy of the image (and of a scattered
 * dx) per image; the part zeroes the image's buffer once, then writes only
 * its interior.
 * Images are split over the CPU device's thread pool; each part keeps its
 * own dw and db, summed in part order at the end.
 *
 * Under a half policy (ld_conv_geom.half) every tensor is in the half dtype:
 * an image (x, dy, y) is widened at a time into a part's buffer, each result
 * (y, dx, dw, db) is the float32 sums rounded once into place. bfloat16 on a
 * processor with AVX512_BF16 (ld_gemm_bf16's choice) takes pair tiles
 * instead: vdpbf16ps sums two bfloat16 products into each float32 lane, the
 * image read as bfloat16 and the kernel (or w^T, or gm in pixel pairs for
 * dw) packed in pairs; the same register tiles' shapes, float32 sums.
 *
 * The vectors are GCC's vector extensions of VW floats, one register each:
 * 16 where the copy is compiled for AVX-512, 8 for AVX2 (a vector wider
 * than the target's registers is kept in memory, and tiles of 16-float
 * vectors compiled for AVX2 ran 30-60 times slower), with tile shapes for
 * 32 or 16 registers. The file is compiled for the build's instruction
 * set, again by ld_cpu_conv_avx512.c where the build targets less
 * (x86-64-v3: the GPU bundle, packages) and by ld_cpu_conv_avx2.c where the
 * build targets AVX-512 or less than AVX2 (LD_CONV_FN names a copy's entry
 * points); cpu_conv2d and cpu_conv2d_backward, near the end, run the copy
 * for the processor (ld_cpu_isa). Processors with neither lower the
 * convolution to im2col + BLAS (ld_ops_conv.c). The file ends with the
 * kernels of the im2col lowering and of max pooling.
 *
 * The im2col + gemm lowering (ld_im2col, ld_linear) stays the path of other
 * backends and the reference the tests compare this one with
 * (LDIST_CONV_REFERENCE=1, ld_ops_conv.c; tests/lua/test_conv_kernels.lua).
 */
#include "ld_cpu_internal.h"
#include "ld_executor.h"
#include "ld_elementwise_math.h"
#include "ld_gemm_bf16.h"
#include "ld_half.h"

#include <stdlib.h>
#include <string.h>

#ifndef LD_CONV_FN   /* the build's own copy: its entry points are dispatched below */
#define LD_CONV_FN(name) name##_build
#define LD_CONV_LINKAGE static
#define LD_CONV_DISPATCH
#else
#define LD_CONV_LINKAGE
#endif

/* VW floats a vector: 16 (one AVX-512 register) where the copy is compiled
   for AVX-512 (and off x86), else 8 (one AVX2 register: the copy of
   ld_cpu_conv_avx2.c, or a build for x86-64-v3). A chunk is 4 vectors, the
   tiles' shapes fit the registers of each (32 or 16). */
#if defined(__AVX512F__) || !defined(__x86_64__)
#define VW 16
#elif defined(__AVX__)
#define VW 8
#else   /* an x86-64 baseline build's own copy: SSE (processors without AVX2 lower to im2col instead) */
#define VW 4
#endif
typedef float vf __attribute__((vector_size(VW * 4)));
typedef float vfu __attribute__((vector_size(VW * 4), aligned(4)));
typedef int32_t vi __attribute__((vector_size(VW * 4)));
typedef int32_t viu __attribute__((vector_size(VW * 4), aligned(4)));
#define ILOAD(p) (*(const viu *)(p))
#define ISTORE(p, v) (*(viu *)(p) = (v))
/* lanes of a where mask (all ones or zero per lane), else of b */
static inline vf vsel(vi mask, vf a, vf b) { return (vf)(((vi)a & mask) | ((vi)b & ~mask)); }
static inline vi isel(vi mask, vi a, vi b) { return (a & mask) | (b & ~mask); }
#define VLOAD(p) (*(const vfu *)(p))
#define VSTORE(p, v) (*(vfu *)(p) = (v))
#define CH (4 * VW)     /* filters (forward, dw) or channels (dx) per chunk */
#define PMAX 16         /* the most pixels or kernel rows in a tile */

static float *falloc(int64_t n) {
    void *p = NULL;
    if (posix_memalign(&p, 64, (size_t)(n > 0 ? n : 1) * sizeof(float))) return NULL;
    return p;
}

/* ---- the product tile: dst[p][0..VW*V) = init + sum over taps t and k < klen
   of src[poff[p] + toff[t] + k] * wp[(t * klen + k) * CH + 0..VW*V), where
   init is dst[p] itself when add (dx accumulates tap by tap in place), else
   the vector init; relu clamps at store (ld_ew_relu's rule, vectorised:
   NaN stays NaN). Each pixel's row has its own
   pointer, so the tile stores where the values belong (y, dx) with no
   staging copy. */
/* TILE_BODY: the tile, with the image read for pixel p at XS + XI(p) + k,
   where XS is set per tap. Two ways to address it: */
#define TILE_BODY(NAME, V, P, PRE, XS, XI)                                                        \
    static void NAME(const float *src, const int64_t *poff, const int64_t *toff, int64_t ntap,     \
                     int64_t klen, const float *wp, const float *init, float *const *dst, int add,  \
                     int relu) {                                                                   \
        vf acc[P][V];                                                                             \
        PRE                                                                                        \
        for (int p = 0; p < P; p++)                                                                \
            for (int v = 0; v < V; v++) acc[p][v] = VLOAD((add ? dst[p] : init) + VW * v);         \
        for (int64_t t = 0; t < ntap; t++) {                                                       \
            const float *xs = XS, *wt = wp + t * klen * CH;                                        \
            for (int64_t k = 0; k < klen; k++) {                                                   \
                vf wv[V];                                                                         \
                for (int v = 0; v < V; v++) wv[v] = VLOAD(wt + k * CH + VW * v);                   \
                for (int p = 0; p < P; p++) {                                                      \
                    float xv = xs[XI(p) + k];                                                      \
                    for (int v = 0; v < V; v++) acc[p][v] += xv * wv[v];                           \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        if (relu)                                                                                  \
            for (int p = 0; p < P; p++)                                                            \
                for (int v = 0; v < V; v++) acc[p][v] = vsel(acc[p][v] < (vf){0}, (vf){0}, acc[p][v]); \
        for (int p = 0; p < P; p++)                                                                \
            for (int v = 0; v < V; v++) VSTORE(dst[p] + VW * v, acc[p][v]);                        \
    }
/* any offsets: each pixel's own (poff[p]) */
#define TILE_XI_ANY(p) po[p]
#define TILE(NAME, V, P) \
    TILE_BODY(NAME, V, P, int64_t po[P]; for (int p = 0; p < P; p++) po[p] = poff[p];, src + toff[t], TILE_XI_ANY)
typedef void (*tile_fn)(const float *, const int64_t *, const int64_t *, int64_t, int64_t, const float *,
                        const float *, float *const *, int, int);

/* The same tile for pixels S floats apart (a run of one output row, or gm's
   rows): the image is read at constant displacements from one pointer, where
   P offsets would not fit the general registers and spill. */
#define TILE_STEP(NAME, V, P, S) \
    TILE_BODY(NAME, V, P, , src + poff[0] + toff[t], S * TILE_XI_STEP)
#define TILE_XI_STEP(p) (p)
/* The tiles, each named once: ANY(name, V, P, 0) reads each pixel at its
   own offset, STEP(name, V, P, S) pixels S floats apart. V vectors x P
   pixels; per V the widest any-offset tile is the default (tile_widest), a
   narrower one is taken when it covers n pixels with fewer slots (7x7
   images: 7 pixels a tile, not 12 that leave 11 slots idle). */
#define TILES_V1(ANY, STEP)                                                                        \
    ANY(tile1, 1, 14, 0) ANY(tile1_7, 1, 7, 0) STEP(tile1_s1, 1, 14, 1) STEP(tile1_s16, 1, 14, 16) \
    STEP(tile1_s32, 1, 14, 32) STEP(tile1_7_s32, 1, 7, 32)
#if VW == 16
/* 32 registers: P x V accumulators, V weight vectors, a broadcast. Not 4
   pixels for V = 4: they read the weights (past L1 for 3x3x64) once more
   per image than 6 do, which measured slower than the 2 idle slots of 6 +
   6 + 4 */
#define TILES(ANY, STEP)                                                                           \
    TILES_V1(ANY, STEP)                                                                            \
    ANY(tile2, 2, 12, 0) ANY(tile2_8, 2, 8, 0) ANY(tile2_7, 2, 7, 0) ANY(tile3, 3, 8, 0)          \
    ANY(tile4, 4, 6, 0) STEP(tile2_s16, 2, 12, 16) STEP(tile2_s32, 2, 12, 32)                      \
    STEP(tile2_7_s32, 2, 7, 32) STEP(tile2_8_s64, 2, 8, 64) STEP(tile4_s64, 4, 6, 64)
#else
/* 16 registers: P x V accumulators + V weight vectors + a broadcast <= 16
   (V = 4: 3 pixels measured 15% faster than 2 and 30% faster than 4) */
#define TILES(ANY, STEP)                                                                           \
    TILES_V1(ANY, STEP)                                                                            \
    STEP(tile1_s8, 1, 14, 8) ANY(tile2, 2, 6, 0) ANY(tile3, 3, 4, 0) ANY(tile4, 4, 3, 0)          \
    STEP(tile2_s16, 2, 6, 16) STEP(tile2_s32, 2, 6, 32) STEP(tile3_s32, 3, 4, 32)                  \
    STEP(tile4_s32, 4, 3, 32) STEP(tile4_s64, 4, 3, 64)
#endif
#define TILE_ANY_DEF(NAME, V, P, S) TILE(NAME, V, P)
#define TILE_STEP_DEF(NAME, V, P, S) TILE_STEP(NAME, V, P, S)
TILES(TILE_ANY_DEF, TILE_STEP_DEF)
#define TILE_ROW(NAME, V, P, S) {V, P, S, NAME},
static const struct { int V, P, S; tile_fn fn; } tile_tab[] = {TILES(TILE_ROW, TILE_ROW)};
#define NTILES ((int)(sizeof tile_tab / sizeof tile_tab[0]))

/* the widest any-offset tile of V vectors: its pixels */
static int tile_widest(int V) {
    int P = 0;
    for (int i = 0; i < NTILES; i++)
        if (tile_tab[i].V == V && tile_tab[i].S == 0 && tile_tab[i].P > P) P = tile_tab[i].P;
    return P;
}

/* pixels per tile for V vectors over n pixels: the fewest slots, ties to the widest */
static int tile_pick(int V, int64_t n) {
    int widest = tile_widest(V), best = widest;
    int64_t wide = (n + best - 1) / best * best, slots = wide;
    for (int i = 0; i < NTILES; i++)
        if (tile_tab[i].V == V && tile_tab[i].S == 0) {
            int P = tile_tab[i].P;
            int64_t sl = (n + P - 1) / P * P;
            if (sl < slots || (sl == slots && P > best)) { best = P; slots = sl; }
        }
    /* a narrower tile does less per weight load and per call: only where it
       saves a tenth of the slots (7x7 images: 49 of 60), not a few of
       hundreds (26x26: 679 of 684 measured a fifth slower) */
    return slots * 10 <= wide * 9 ? best : widest;
}

/* the tiles of V vectors x P pixels, looked up once per loop */
typedef struct { int P, ns; tile_fn gen, sf[4]; int64_t s[4]; } tile_set;
static tile_set tile_set_of(int V, int P) {
    tile_set t = {P, 0, NULL, {NULL}, {0}};
    for (int i = 0; i < NTILES; i++)
        if (tile_tab[i].V == V && tile_tab[i].P == P) {
            if (tile_tab[i].S == 0) t.gen = tile_tab[i].fn;
            else if (t.ns < 4) { t.sf[t.ns] = tile_tab[i].fn; t.s[t.ns++] = tile_tab[i].S; }
        }
    return t;
}

/* the tile for offsets po[0..P): a constant-step one where they allow */
static tile_fn tile_for(const tile_set *t, const int64_t *po) {
    if (!t->ns || t->P < 2) return t->gen;
    int64_t s = po[1] - po[0];
    for (int p = 2; p < t->P; p++)
        if (po[p] - po[p - 1] != s) return t->gen;
    for (int i = 0; i < t->ns; i++)
        if (t->s[i] == s) return t->sf[i];
    return t->gen;
}

/* ---- the bfloat16 product tile (AVX512_BF16, a half Conv2D's forward on
   processors that have it, as ld_gemm_bf16 for Dense): dst[p][0..16V) =
   (dst[p] itself when add, else 0) + sum over taps t and pairs q of klen of
   vdpbf16ps(x pair, w pair), each pair two consecutive k of a kernel row
   (an odd row's last k paired with 0); src the bfloat16 image, wp the
   kernel packed [tap][pair][CH] as uint32 pairs (low half the even k). The sums are float32 as the float32
   tile's, in the order of the im2col product's pairs where klen is even
   (the CPU's lowering gives the same bits then). */
#if VW == 16 && defined(__x86_64__) && defined(__GNUC__) && __GNUC__ >= 10
#include <immintrin.h>
#define LD_CONV_BF16 1
#define BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512bf16")))
#define BTILE(NAME, V, P)                                                                          \
    BF16_TARGET static void NAME(const uint16_t *src, const int64_t *poff, const int64_t *toff,    \
                                 int64_t ntap, int64_t klen, const uint32_t *wp, float *const *dst, int add) { \
        __m512 acc[P][V];                                                                          \
        int64_t po[P], np2 = klen / 2, kp = (klen + 1) / 2;                                        \
        for (int p = 0; p < P; p++) po[p] = poff[p];                                               \
        for (int p = 0; p < P; p++)                                                                \
            for (int v = 0; v < V; v++) acc[p][v] = add ? _mm512_loadu_ps(dst[p] + 16 * v) : _mm512_setzero_ps(); \
        for (int64_t t = 0; t < ntap; t++) {                                                       \
            const uint16_t *xs = src + toff[t];                                                    \
            const uint32_t *wt = wp + t * kp * CH;                                                 \
            for (int64_t q = 0; q < kp; q++) {                                                     \
                __m512bh wv[V];                                                                    \
                for (int v = 0; v < V; v++) wv[v] = (__m512bh)_mm512_loadu_si512(wt + q * CH + 16 * v); \
                for (int p = 0; p < P; p++) {                                                      \
                    uint32_t xp2;                                                                  \
                    if (q < np2) memcpy(&xp2, xs + po[p] + 2 * q, 4);                              \
                    else xp2 = xs[po[p] + 2 * q];   /* an odd row's last k, with 0 */              \
                    __m512bh xv = (__m512bh)_mm512_set1_epi32((int)xp2);                           \
                    for (int v = 0; v < V; v++) acc[p][v] = _mm512_dpbf16_ps(acc[p][v], xv, wv[v]); \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        for (int p = 0; p < P; p++)                                                                \
            for (int v = 0; v < V; v++) _mm512_storeu_ps(dst[p] + 16 * v, acc[p][v]);              \
    }
typedef void (*btile_fn)(const uint16_t *, const int64_t *, const int64_t *, int64_t, int64_t, const uint32_t *,
                         float *const *, int);
/* the any-offset shapes of TILES (tile_pick chooses among them) */
#define BTILES(X) X(btile1, 1, 14) X(btile1_7, 1, 7) X(btile2, 2, 12) X(btile2_8, 2, 8) X(btile2_7, 2, 7) \
    X(btile3, 3, 8) X(btile4, 4, 6)
BTILES(BTILE)
#define BTILE_ROW(NAME, V, P) {V, P, NAME},
static const struct { int V, P; btile_fn fn; } btile_tab[] = {BTILES(BTILE_ROW)};
static btile_fn btile_for(int V, int P) {
    for (size_t i = 0; i < sizeof btile_tab / sizeof btile_tab[0]; i++)
        if (btile_tab[i].V == V && btile_tab[i].P == P) return btile_tab[i].fn;
    return NULL;
}
#endif

/* ---- the weight-gradient tile: acc[r][0..VW*V) (rows r < KT of dw, in
   memory at dwp) += sum over pixels q < npix of img[pixo[q] + koff[r]] *
   gm[q * gs + 0..VW*V) */
#define WTILE(NAME, V, KT)                                                                         \
    static void NAME(const float *img, const int64_t *pixo, int64_t npix, const int64_t *koff,    \
                     const float *gm, int64_t gs, float *dwp) {                                    \
        vf acc[KT][V];                                                                            \
        int64_t ko[KT];                                                                            \
        for (int r = 0; r < KT; r++) ko[r] = koff[r];                                              \
        for (int r = 0; r < KT; r++)                                                               \
            for (int v = 0; v < V; v++) acc[r][v] = VLOAD(dwp + r * CH + VW * v);                  \
        for (int64_t q = 0; q < npix; q++) {                                                       \
            const float *xs = img + pixo[q];                                                       \
            vf gv[V];                                                                             \
            for (int v = 0; v < V; v++) gv[v] = VLOAD(gm + q * gs + VW * v);                       \
            for (int r = 0; r < KT; r++) {                                                         \
                float xv = xs[ko[r]];                                                              \
                for (int v = 0; v < V; v++) acc[r][v] += xv * gv[v];                               \
            }                                                                                      \
        }                                                                                          \
        for (int r = 0; r < KT; r++)                                                               \
            for (int v = 0; v < V; v++) VSTORE(dwp + r * CH + VW * v, acc[r][v]);                  \
    }
/* The weight tiles, each named once: X(name, V, KT), per V by decreasing
   KT (the first the widest): the rows left after the full tiles take the
   smallest that holds them, so small kernels (a 3x3 on one channel: 9 rows;
   1x1 on 16 channels: 14 + 2) waste few rows */
#define WTILES_V1(X) X(wtile1, 1, 14) X(wtile1_9, 1, 9) X(wtile1_4, 1, 4) X(wtile1_2, 1, 2)
#if VW == 16
#define WTILES(X)                                                                                  \
    WTILES_V1(X) X(wtile2, 2, 12) X(wtile2_8, 2, 8) X(wtile2_4, 2, 4) X(wtile3, 3, 8) X(wtile3_4, 3, 4) \
    X(wtile3_2, 3, 2) X(wtile4, 4, 6) X(wtile4_4, 4, 4) X(wtile4_2, 4, 2)
#else
#define WTILES(X)                                                                                  \
    WTILES_V1(X) X(wtile2, 2, 6) X(wtile2_4, 2, 4) X(wtile2_2, 2, 2) X(wtile3, 3, 4) X(wtile3_2, 3, 2) \
    X(wtile4, 4, 3) X(wtile4_2, 4, 2)
#endif
WTILES(WTILE)

/* The same over KT consecutive rows of one tap (channels q..q+KT), at
   constant displacements from the pixel's pointer: no KT row offsets held
   in (too few) general registers */
#define WTILE_RUN(NAME, V, KT)                                                                     \
    static void NAME(const float *img, const int64_t *pixo, int64_t npix, const int64_t *koff,    \
                     const float *gm, int64_t gs, float *dwp) {                                    \
        vf acc[KT][V];                                                                            \
        for (int r = 0; r < KT; r++)                                                               \
            for (int v = 0; v < V; v++) acc[r][v] = VLOAD(dwp + r * CH + VW * v);                  \
        const float *base = img + koff[0];                                                         \
        for (int64_t q = 0; q < npix; q++) {                                                       \
            const float *xs = base + pixo[q];                                                      \
            vf gv[V];                                                                             \
            for (int v = 0; v < V; v++) gv[v] = VLOAD(gm + q * gs + VW * v);                       \
            for (int r = 0; r < KT; r++) {                                                         \
                float xv = xs[r];                                                                  \
                for (int v = 0; v < V; v++) acc[r][v] += xv * gv[v];                               \
            }                                                                                      \
        }                                                                                          \
        for (int r = 0; r < KT; r++)                                                               \
            for (int v = 0; v < V; v++) VSTORE(dwp + r * CH + VW * v, acc[r][v]);                  \
    }
/* runs of RUN1 channels (V = 1) or RUN2 (V = 2), as many rows as registers allow */
#if VW == 16
#define RUN1 16
#define RUN2 8
#else
#define RUN1 8
#define RUN2 4
#endif
WTILE_RUN(wtile1_run, 1, RUN1)
WTILE_RUN(wtile2_run, 2, RUN2)
typedef void (*wtile_fn)(const float *, const int64_t *, int64_t, const int64_t *, const float *, int64_t, float *);
#define WTILE_ROW(NAME, V, KT) {V, KT, NAME},
static const struct { int V, KT; wtile_fn fn; } wtile_tab[] = {WTILES(WTILE_ROW)};
#define NWTILES ((int)(sizeof wtile_tab / sizeof wtile_tab[0]))
/* the first (widest) weight tile of V vectors */
static int wtile_first(int V) {
    int i = 0;
    while (i < NWTILES - 1 && wtile_tab[i].V != V) i++;
    return i;
}

#ifdef LD_CONV_BF16
/* ---- the bfloat16 weight-gradient tile (AVX512_BF16): acc[r][0..16V) +=
   sum over pixel pairs of vdpbf16ps((img[pixo[q] + koff[r]],
   img[pixo[q+1] + koff[r]]), gm2[q/2]), gm2 the output gradient packed
   [pixel pair][gs] as uint32 pairs (the low half pixel q; an odd last
   pixel paired with 0). The shapes of WTILES, in its order (wtile_tab's
   index chooses both). */
#define BWTILE(NAME, V, KT)                                                                        \
    BF16_TARGET static void NAME(const uint16_t *img, const int64_t *pixo, int64_t npix,           \
                                 const int64_t *koff, const uint32_t *gm2, int64_t gs, float *dwp) { \
        __m512 acc[KT][V];                                                                         \
        int64_t ko[KT];                                                                            \
        for (int r = 0; r < KT; r++) ko[r] = koff[r];                                              \
        for (int r = 0; r < KT; r++)                                                               \
            for (int v = 0; v < V; v++) acc[r][v] = _mm512_loadu_ps(dwp + r * CH + 16 * v);         \
        for (int64_t q = 0; q < npix; q += 2) {                                                    \
            const uint16_t *x0 = img + pixo[q], *x1 = q + 1 < npix ? img + pixo[q + 1] : NULL;     \
            __m512bh gv[V];                                                                        \
            for (int v = 0; v < V; v++) gv[v] = (__m512bh)_mm512_loadu_si512(gm2 + (q / 2) * gs + 16 * v); \
            for (int r = 0; r < KT; r++) {                                                         \
                uint32_t xp2 = (uint32_t)x0[ko[r]] | (x1 ? (uint32_t)x1[ko[r]] << 16 : 0);        \
                __m512bh xv = (__m512bh)_mm512_set1_epi32((int)xp2);                               \
                for (int v = 0; v < V; v++) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], xv, gv[v]);    \
            }                                                                                      \
        }                                                                                          \
        for (int r = 0; r < KT; r++)                                                               \
            for (int v = 0; v < V; v++) _mm512_storeu_ps(dwp + r * CH + 16 * v, acc[r][v]);        \
    }
#define BWTILE_DEF(NAME, V, KT) BWTILE(b##NAME, V, KT)
WTILES(BWTILE_DEF)
typedef void (*bwtile_fn)(const uint16_t *, const int64_t *, int64_t, const int64_t *, const uint32_t *, int64_t,
                          float *);
#define BWTILE_ROW(NAME, V, KT) b##NAME,
static const bwtile_fn bwtile_tab[] = {WTILES(BWTILE_ROW)};
#endif

/* ---- geometry shared by the parts */
typedef struct {
    ld_conv_geom g;
    int64_t hp, wp;         /* the (padded) image the windows read */
    int pad;                /* 1: images are copied into a zero-padded buffer */
    int64_t ntap, k, op;    /* kh*kw, kh*kw*c, oh*ow */
    int64_t *toff;          /* [ntap] offset of tap (ki, kj) from a window's origin */
    int64_t *roff;          /* [kh] offset of kernel row ki: its kw*c values are contiguous */
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
    G->toff = malloc(sizeof(int64_t) * (size_t)(G->ntap + G->k + G->op + g->kh + 1));
    if (!G->toff) return -1;
    G->koff = G->toff + G->ntap;
    G->pixo = G->koff + G->k;
    G->roff = G->pixo + G->op;
    for (int64_t ki = 0; ki < g->kh; ki++) G->roff[ki] = ki * G->wp * g->c;
    for (int64_t ki = 0; ki < g->kh; ki++)
        for (int64_t kj = 0; kj < g->kw; kj++) G->toff[ki * g->kw + kj] = (ki * G->wp + kj) * g->c;
    for (int64_t t = 0; t < G->ntap; t++)
        for (int64_t q = 0; q < g->c; q++) G->koff[t * g->c + q] = G->toff[t] + q;
    for (int64_t i = 0; i < g->oh; i++)
        for (int64_t j = 0; j < g->ow; j++) G->pixo[i * g->ow + j] = (i * g->sh * G->wp + j * g->sw) * g->c;
    return 0;
}

/* image b as the windows read it: in place (float32), or copied into the
   interior of the padded xp, whose border the part zeroed once
   (pad_buffer), or, half (g.half), widened into xp (padded or not) */
static const float *image(const geom *G, const void *x, int64_t b, float *xp) {
    const ld_conv_geom *g = &G->g;
    int64_t hwc = g->h * g->w * g->c, wc = g->w * g->c;
    if (g->half) {
        const uint16_t *xi = (const uint16_t *)x + b * hwc;
        if (!G->pad) { ld_cpu_half_to_f32(xp, xi, (ld_dtype)g->half, hwc); return xp; }
        for (int64_t r = 0; r < g->h; r++)
            ld_cpu_half_to_f32(xp + ((r + g->ph) * G->wp + g->pw) * g->c, xi + r * wc, (ld_dtype)g->half, wc);
        return xp;
    }
    const float *xi = (const float *)x + b * hwc;
    if (!G->pad) return xi;
    for (int64_t r = 0; r < g->h; r++)
        memcpy(xp + ((r + g->ph) * G->wp + g->pw) * g->c, xi + r * wc, sizeof(float) * (size_t)wc);
    return xp;
}

/* image() needs a part's buffer: padded, or widened from a half dtype */
static int image_buffered(const geom *G) { return G->pad || G->g.half; }

/* n float32 values of a part's buffer into the half tensor at element off
   (exact where they were rounded already: the forward's epilogue) */
static void store_half(void *dst, int64_t off, const float *src, int64_t n, int dt) {
    ld_cpu_f32_to_half((uint16_t *)dst + off, src, (ld_dtype)dt, n);
}

/* a part's padded image buffer, zeroed once: image() only writes the interior */
static float *pad_buffer(const geom *G) {
    int64_t n = G->hp * G->wp * G->g.c;
    float *xp = falloc(n);
    if (xp) memset(xp, 0, sizeof(float) * (size_t)n);
    return xp;
}

static int64_t nchunks(int64_t n) { return (n + CH - 1) / CH; }
static int vecs(int64_t n) { return (int)((n + VW - 1) / VW); }

static void images_of(int64_t n, int part, int np, int64_t *lo, int64_t *hi) {
    int64_t per = (n + np - 1) / np;
    *lo = per * part; *hi = *lo + per;
    if (*lo > n) *lo = n;
    if (*hi > n) *hi = n;
}

/* ================================================================ forward */
typedef struct {
    const geom *G; void *y; int32_t *arg; const void *x; const float *wpk, *bpk; int relu; int failed;
    const float *b;   /* a half Conv2D's bias, added by half_epilogue (bpk is zero then) */
    const uint32_t *wpb;   /* bfloat16 on AVX512_BF16: wpk in pairs (pack_pairs); else NULL */
} fwd_job;

/* v[0..n) rounded to the half dtype dt, in place (bfloat16 in vectors,
   ld_f32_to_bf16's integer algorithm lane by lane, NaNs kept quiet; float16
   through the row conversions, on the stack) */
static void round_half(float *v, int64_t n, int dt) {
    if (dt == LD_BF16) {
        typedef uint32_t vu __attribute__((vector_size(VW * 4)));
        typedef uint32_t vuu __attribute__((vector_size(VW * 4), aligned(4)));
        int64_t i = 0;
        for (; i + VW <= n; i += VW) {
            vu u = *(const vuu *)(v + i);
            vu r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
            vu nan = (vu)((u & 0x7fffffffu) > 0x7f800000u);   /* all ones where NaN */
            *(vuu *)(v + i) = (r & ~nan) | ((u | 0x00400000u) & 0xffff0000u & nan);
        }
        for (; i < n; i++) v[i] = ld_bf16_to_f32(ld_f32_to_bf16(v[i]));
        return;
    }
    uint16_t h[512];
    for (int64_t i = 0; i < n; i += 512) {
        int64_t m = n - i < 512 ? n - i : 512;
        ld_cpu_f32_to_half(h, v + i, (ld_dtype)dt, m);
        ld_cpu_half_to_f32(v + i, h, (ld_dtype)dt, m);
    }
}

/* A half Conv2D's epilogue over one image's output yb [op, f] (see
   ld_conv_geom.half): the sums rounded, the bias added and rounded, relu;
   the rounded sums are what a half convolution gives (float32 sums, one
   rounding), the rest the half bias add and relu of the layer. */
static void half_epilogue(float *yb, int64_t op, int64_t f, const float *b, int relu, int dt) {
    round_half(yb, op * f, dt);
    if (b) {
        for (int64_t q = 0; q < op; q++)
            for (int64_t j = 0; j < f; j++) yb[q * f + j] += b[j];
        round_half(yb, op * f, dt);
    }
    if (relu)
        for (int64_t i = 0; i < op * f; i++) yb[i] = ld_ew_relu(yb[i]);
}

/* max pooling of one image's conv output cb [oh*ow, f] into y, arg [poh*pow, f]
   (the first maximum in window order, as the max_pool2d kernel) */
static void pool_image(float *y, int32_t *arg, const float *cb, const ld_conv_geom *g) {
    int64_t f = g->f;
    for (int64_t pi = 0; pi < g->poh; pi++)
        for (int64_t pj = 0; pj < g->pow; pj++) {
            float *yo = y + (pi * g->pow + pj) * f;
            int32_t *ao = arg + (pi * g->pow + pj) * f;
            int32_t q0 = (int32_t)(pi * g->psh * g->ow + pj * g->psw);
            if (f % VW == 0) {   /* a vector of channels at a time, in registers */
                for (int64_t c = 0; c < f; c += VW) {
                    vf m = VLOAD(cb + (int64_t)q0 * f + c);
                    vi am = (vi){0} + q0;
                    for (int64_t a = 0; a < g->pkh; a++)
                        for (int64_t b = 0; b < g->pkw; b++) {
                            int32_t q = q0 + (int32_t)(a * g->ow + b);
                            vf v = VLOAD(cb + (int64_t)q * f + c);
                            vi gt = (v > m) | ((v != v) & (m == m));   /* ld_ew_max_wins, vectorised */
                            m = vsel(gt, v, m);
                            am = isel(gt, (vi){0} + q, am);
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
                        int gt = ld_ew_max_wins(v, yo[c]);
                        yo[c] = gt ? v : yo[c];
                        ao[c] = gt ? q : ao[c];
                    }
                }
        }
}

#ifdef LD_CONV_BF16
/* A float32 layout of rows of CH (a packed kernel, bfloat16-valued) as the
   pair tiles read it: `groups` runs of `len` rows each (a kernel row), rows
   2q and 2q + 1 of a run in one uint32 per lane (the low half the even
   row; an odd run's last row paired with 0). NULL when out of memory (the
   float32 tiles then). Exact: the values are bfloat16's. */
static uint32_t *pack_pairs(const float *src, int64_t groups, int64_t len) {
    int64_t kp = (len + 1) / 2;
    uint32_t *d = malloc(sizeof(uint32_t) * (size_t)(groups * kp * CH + 1));
    for (int64_t gi = 0; d && gi < groups; gi++)
        for (int64_t q = 0; q < kp; q++) {
            const float *r0 = src + (gi * len + 2 * q) * CH, *r1 = 2 * q + 1 < len ? r0 + CH : NULL;
            uint32_t *o = d + (gi * kp + q) * CH;
            for (int64_t j = 0; j < CH; j++)
                o[j] = (uint32_t)ld_f32_to_bf16(r0[j]) | (r1 ? (uint32_t)ld_f32_to_bf16(r1[j]) << 16 : 0);
        }
    return d;
}
/* the pair tiles' choice: bfloat16 on AVX512_BF16 (LDIST_NO_AVX512_BF16=1: the float32 tiles) */
static int pairs_for(int half) { return half == LD_BF16 && !strcmp(ld_gemm_bf16_path(), "avx512_bf16"); }
#endif

/* image b as bfloat16 windows read it: in place, or copied into the
   interior of the padded xp16 (its border zeroed once by the part) */
static const uint16_t *image_bf16(const geom *G, const uint16_t *x, int64_t b, uint16_t *xp16) {
    const ld_conv_geom *g = &G->g;
    const uint16_t *xi = x + b * g->h * g->w * g->c;
    if (!G->pad) return xi;
    for (int64_t r = 0; r < g->h; r++)
        memcpy(xp16 + ((r + g->ph) * G->wp + g->pw) * g->c, xi + r * g->w * g->c, 2 * (size_t)(g->w * g->c));
    return xp16;
}

static void fwd_part(void *ctx, int part, int np) {
    fwd_job *J = ctx;
    const geom *G = J->G;
    const ld_conv_geom *g = &G->g;
    int64_t lo, hi;
    images_of(g->n, part, np, &lo, &hi);
    if (lo >= hi) return;
    int pool = g->pkh > 0, half = g->half;
    int64_t pn = pool ? g->poh * g->pow * g->f : 0;
    /* the image's buffer: float32 (padded, or widened from half), or the
       pair tiles' bfloat16 image where it is padded */
    int pairs = J->wpb != NULL, buffered = pairs ? G->pad : image_buffered(G);
    void *xp = !buffered ? NULL : pairs ? calloc((size_t)(G->hp * G->wp * g->c), 2) : (void *)pad_buffer(G);
    float *out = falloc(PMAX * CH);
    /* one image's conv output, pooled from cache or rounded into a half y; its pooling, for a half y */
    float *cb = pool || half ? falloc(G->op * g->f) : NULL, *pbuf = pool && half ? falloc(pn) : NULL;
    if ((buffered && !xp) || !out || ((pool || half) && !cb) || (pool && half && !pbuf)) {
        J->failed = 1; free(xp); free(out); free(cb); free(pbuf); return;
    }
    int64_t nch = nchunks(g->f), po[PMAX];
    float *dst[PMAX];
    for (int64_t b = lo; b < hi; b++) {
        const void *img = pairs ? (const void *)image_bf16(G, J->x, b, xp) : (const void *)image(G, J->x, b, xp);
        float *yb = pool || half ? cb : (float *)J->y + b * G->op * g->f;
        for (int64_t ch = 0; ch < nch; ch++) {
            int64_t f0 = ch * CH, nf = g->f - f0 < CH ? g->f - f0 : CH;
            int V = vecs(nf), P = tile_pick(V, G->op);
            tile_set ts = tile_set_of(V, P);
            for (int64_t pb = 0; pb < G->op; pb += P) {
                int64_t np_ = G->op - pb < P ? G->op - pb : P;
                /* whole vectors and pixels go straight to y, relu applied; else through out */
                int direct = nf == VW * V && np_ == P;
                if (np_ == P) memcpy(po, G->pixo + pb, sizeof(int64_t) * (size_t)P);   /* the common case, cheap */
                else for (int p = 0; p < P; p++) po[p] = G->pixo[pb + (p < np_ ? p : np_ - 1)];
                if (direct) for (int p = 0; p < P; p++) dst[p] = yb + (pb + p) * g->f + f0;
                else for (int p = 0; p < P; p++) dst[p] = out + p * CH;
#ifdef LD_CONV_BF16
                if (pairs)
                    btile_for(V, P)(img, po, G->roff, g->kh, g->kw * g->c, J->wpb + ch * g->kh * ((g->kw * g->c + 1) / 2) * CH,
                                    dst, 0);
                else
#endif
                tile_for(&ts, po)(img, po, G->roff, g->kh, g->kw * g->c, J->wpk + ch * G->k * CH, J->bpk + ch * CH, dst, 0,
                         direct && J->relu && !g->half);
                if (direct) continue;
                for (int64_t p = 0; p < np_; p++) {
                    float *yo = yb + (pb + p) * g->f + f0;
                    const float *o = out + p * CH;
                    if (J->relu && !g->half) for (int64_t j = 0; j < nf; j++) yo[j] = ld_ew_relu(o[j]);
                    else memcpy(yo, o, sizeof(float) * (size_t)nf);
                }
            }
        }
        if (half) half_epilogue(yb, G->op, g->f, J->b, J->relu, half);
        if (pool) {
            pool_image(half ? pbuf : (float *)J->y + b * pn, J->arg + b * pn, cb, g);
            if (half) store_half(J->y, b * pn, pbuf, pn, half);
        } else if (half) {
            store_half(J->y, b * G->op * g->f, cb, G->op * g->f, half);
        }
    }
    free(xp); free(out); free(cb); free(pbuf);
}

/* w [k, f] packed as [chunk][k][CH] (zero beyond f) */
static void pack_w(float *wpk, const float *w, int64_t k, int64_t f) {
    int64_t nch = nchunks(f);
    memset(wpk, 0, sizeof(float) * (size_t)(nch * k * CH));
    for (int64_t ch = 0; ch < nch; ch++)
        for (int64_t r = 0; r < k; r++)
            for (int64_t j = 0; j < CH && ch * CH + j < f; j++) wpk[(ch * k + r) * CH + j] = w[r * f + ch * CH + j];
}

LD_CONV_LINKAGE void LD_CONV_FN(cpu_conv2d)(ld_device *d, void *y, int32_t *arg, const void *x, const void *w,
                                            const void *b, ld_conv_geom g, int relu) {
    geom G;
    if (g.n * g.oh * g.ow * g.f == 0 || (g.pkh > 0 && g.poh * g.pow == 0)) return;
    if (geom_init(&G, &g)) { ld_device_fault(d, LD_ENOMEM, "conv2d: out of memory"); return; }
    int64_t nch = nchunks(g.f);
    /* a half kernel and bias widened first (bw: the bias half_epilogue adds) */
    float *wpk = falloc(nch * G.k * CH), *bpk = falloc(nch * CH), *ww = g.half ? falloc(G.k * g.f) : NULL;
    float *bw = g.half && b ? falloc(g.f) : NULL;
    if (!wpk || !bpk || (g.half && (!ww || (b && !bw)))) {
        free(wpk); free(bpk); free(ww); free(bw); free(G.toff);
        ld_device_fault(d, LD_ENOMEM, "conv2d: out of memory");
        return;
    }
    if (g.half) {
        ld_cpu_half_to_f32(ww, w, (ld_dtype)g.half, G.k * g.f);
        if (b) ld_cpu_half_to_f32(bw, b, (ld_dtype)g.half, g.f);
    }
    pack_w(wpk, g.half ? ww : (const float *)w, G.k, g.f);
    uint32_t *wpb = NULL;
#ifdef LD_CONV_BF16
    if (pairs_for(g.half)) wpb = pack_pairs(wpk, nch * g.kh, g.kw * g.c);   /* [chunk][kernel row][kw*c] */
#endif
    memset(bpk, 0, sizeof(float) * (size_t)(nch * CH));
    if (b && !g.half) memcpy(bpk, b, sizeof(float) * (size_t)g.f);
    fwd_job J = {&G, y, arg, x, wpk, bpk, relu, 0, bw, wpb};
    int64_t work = g.n * G.op * G.k * g.f;
    if (work < LD_CPU_PAR_MIN || g.n < 2) fwd_part(&J, 0, 1);
    else ld_cpu_parallel(fwd_part, &J, 64);
    if (J.failed) ld_device_fault(d, LD_ENOMEM, "conv2d: out of memory");
    free(wpk); free(bpk); free(ww); free(bw); free(wpb); free(G.toff);
}

/* ================================================================ backward */
#define MAX_PARTS 64
typedef struct {
    const geom *G; void *dx; int want_dw; const void *dy, *y, *x; const float *wt; const int32_t *arg; int relu;
    int gather; const float *wg;   /* dx gathered (stride 1, see gather_ok), its flipped kernel */
    const uint32_t *wgb;           /* bfloat16 on AVX512_BF16: that kernel in pairs for the pair tiles; else NULL */
    int pairs;                     /* dw by the pair tiles (bfloat16 on AVX512_BF16) */
    const uint32_t *wtb;           /* scattered dx by the pair tiles: w^T in pairs along f; else NULL */
    int want_db;
    float *dwp[MAX_PARTS], *dbp[MAX_PARTS]; int failed;
} bwd_job;

/* a pooling whose windows do not overlap, over channels in whole vectors:
   gm_image writes each window's cells whole */
static int pool_tiles(const ld_conv_geom *g) {
    return g->pkh > 0 && g->psh >= g->pkh && g->psw >= g->pkw && g->f % VW == 0;
}

/* gm's row stride: f rounded up to a vector when f fits one chunk (the
   dx product then runs over those lanes only, not 64), else CH */
static int64_t gm_stride(int64_t f) { return f <= CH ? (int64_t)vecs(f) * VW : CH; }

/* image b's gm: dy masked by y > 0 (relu), packed [f chunk][pixel][gs], zero
   beyond f, with a pooling dy scattered to the pixels the maxima came from;
   its column sums added to db. dyb, yb: image b's dy and y (pooled where
   there is a pooling), float32; yb NULL without relu. */
static void gm_image(float *gm, float *db, const bwd_job *J, int64_t b, const float *dyb, const float *yb) {
    const geom *G = J->G;
    const ld_conv_geom *g = &G->g;
    int64_t nfch = nchunks(g->f), op = G->op, f = g->f, gs = gm_stride(f);
    if (g->pkh > 0 && pool_tiles(g)) {
        /* windows that do not overlap: each window's cells written whole,
           dy where the maximum came from, 0 elsewhere (the cells of no
           window and the lanes beyond f were zeroed once, by the part) */
        int64_t pop = g->poh * g->pow;
        const int32_t *ab = J->arg + b * pop * f;
        for (int64_t pi = 0; pi < g->poh; pi++)
            for (int64_t pj = 0; pj < g->pow; pj++) {
                int64_t pp = pi * g->pow + pj, q0 = pi * g->psh * g->ow + pj * g->psw;
                for (int64_t c = 0; c < f; c += VW) {
                    int64_t e = pp * f + c;
                    vf v = VLOAD(dyb + e);
                    if (J->relu) v = vsel(VLOAD(yb + e) > (vf){0}, v, (vf){0});
                    VSTORE(db + c, VLOAD(db + c) + v);
                    vi a = ILOAD(ab + e);
                    float *gc = gm + (c / CH) * op * gs + c % CH;
                    for (int64_t r = 0; r < g->pkh; r++)
                        for (int64_t s2 = 0; s2 < g->pkw; s2++) {
                            int32_t q = (int32_t)(q0 + r * g->ow + s2);
                            VSTORE(gc + (int64_t)q * gs, vsel(a == (vi){0} + q, v, (vf){0}));
                        }
                }
            }
        return;
    }
    if (g->pkh > 0) {
        int64_t pop = g->poh * g->pow;
        const int32_t *ab = J->arg + b * pop * f;
        memset(gm, 0, sizeof(float) * (size_t)(nfch * op * gs));
        for (int64_t pp = 0; pp < pop; pp++)
            for (int64_t ch = 0; ch < nfch; ch++) {
                int64_t f0 = ch * CH, nf = f - f0 < CH ? f - f0 : CH, e0 = pp * f + f0;
                float *gc = gm + ch * op * gs, *dbc = db + f0;
                for (int64_t j = 0; j < nf; j++) {
                    float v = J->relu && !(yb[e0 + j] > 0) ? 0 : dyb[e0 + j];
                    gc[(int64_t)ab[e0 + j] * gs + j] += v;   /* += : overlapping windows */
                    if (!g->half) dbc[j] += v;
                }
            }
        if (g->half) {
            /* a half Conv2D's output gradient is in its dtype: where windows
               overlap, the pooling's gradient rounded once (as MaxPool2D's),
               and db the sum of those, pixel by pixel (as the Conv2D's) */
            round_half(gm, nfch * op * gs, g->half);
            for (int64_t ch = 0; ch < nfch; ch++) {
                int64_t f0 = ch * CH, nf = f - f0 < CH ? f - f0 : CH;
                for (int64_t q = 0; q < op; q++)
                    for (int64_t j = 0; j < nf; j++) db[f0 + j] += gm[(ch * op + q) * gs + j];
            }
        }
        return;
    }
    for (int64_t ch = 0; ch < nfch; ch++) {
        int64_t f0 = ch * CH, nf = f - f0 < CH ? f - f0 : CH;
        float *dbc = db + f0;
        for (int64_t q = 0; q < op; q++) {
            float *gq = gm + (ch * op + q) * gs;
            const float *d = dyb + q * f + f0;
            if (J->relu) {
                const float *yy = yb + q * f + f0;
                for (int64_t j = 0; j < nf; j++) { float v = yy[j] > 0 ? d[j] : 0; gq[j] = v; dbc[j] += v; }
            } else {
                for (int64_t j = 0; j < nf; j++) { gq[j] = d[j]; dbc[j] += d[j]; }
            }
            for (int64_t j = nf; j < gs; j++) gq[j] = 0;
        }
    }
}

/* dx of a stride-1 convolution whose filters fit one chunk is gathered: a
   forward convolution of gm, zero-padded by kh-1-ph rows above and kw-1-pw
   columns left (gmp, [h+kh-1][w+kw-1][gs]), with the kernel flipped and
   transposed (wg, [c chunk][ki'][kj'][gs][CH]). Each dx pixel is then summed
   in registers over every tap, and written once, where scattering adds a
   tile into dx per tap. */
static int gather_ok(const ld_conv_geom *g) {
    return g->sh == 1 && g->sw == 1 && g->f <= CH && g->ph <= g->kh - 1 && g->pw <= g->kw - 1 &&
           g->h + g->ph >= g->oh && g->w + g->pw >= g->ow;
}

/* dx of image b (dxb, float32) by gathering (gather_ok): gm copied into the
   interior of gmp, whose border stays zero from the part's start (bfloat16
   for the pair tiles, J->wgb: exact, gm is dy's values or 0) */
static void dx_gather(const bwd_job *J, float *dxb, const float *gm, void *gmp, const int64_t *dpo, float *out,
                      const float *zeros) {
    const geom *G = J->G;
    const ld_conv_geom *g = &G->g;
    int64_t gs = gm_stride(g->f), gw = g->w + g->kw - 1, top = g->kh - 1 - g->ph, left = g->kw - 1 - g->pw;
    int64_t hw = g->h * g->w, ncch = nchunks(g->c), po[PMAX], roff[PMAX];
    float *dst[PMAX];
    for (int64_t i = 0; i < g->oh; i++) {
        int64_t at = ((i + top) * gw + left) * gs;
        if (J->wgb) ld_cpu_f32_to_half((uint16_t *)gmp + at, gm + i * g->ow * gs, LD_BF16, g->ow * gs);
        else memcpy((float *)gmp + at, gm + i * g->ow * gs, sizeof(float) * (size_t)(g->ow * gs));
    }
    for (int64_t ki = 0; ki < g->kh; ki++) roff[ki] = ki * gw * gs;
    for (int64_t cc = 0; cc < ncch; cc++) {
        int64_t c0 = cc * CH, nc = g->c - c0 < CH ? g->c - c0 : CH;
        int V = vecs(nc), P = tile_pick(V, hw);
        tile_set ts = tile_set_of(V, P);
        const float *wc = J->wg + cc * G->ntap * gs * CH;
        for (int64_t pb = 0; pb < hw; pb += P) {
            int64_t np_ = hw - pb < P ? hw - pb : P;
            int direct = nc == VW * V && np_ == P;
            for (int p = 0; p < P; p++) {
                po[p] = dpo[pb + (p < np_ ? p : np_ - 1)];
                dst[p] = direct ? dxb + (pb + p) * g->c + c0 : out + p * CH;
            }
#ifdef LD_CONV_BF16
            if (J->wgb)
                btile_for(V, P)(gmp, po, roff, g->kh, g->kw * gs, J->wgb + cc * g->kh * ((g->kw * gs + 1) / 2) * CH, dst, 0);
            else
#endif
            tile_for(&ts, po)(gmp, po, roff, g->kh, g->kw * gs, wc, zeros, dst, 0, 0);
            if (direct) continue;
            for (int64_t p = 0; p < np_; p++) memcpy(dxb + (pb + p) * g->c + c0, out + p * CH, sizeof(float) * (size_t)nc);
        }
    }
}

/* dw rows of koff's offsets by weight tile w (wtile_tab's index): the
   float32 tile on img and gc, or for J->pairs the pair tile on the
   bfloat16 image and the packed gradient (bwtile_tab) */
static void wtile_call(const bwd_job *J, int w, const void *img, const int64_t *koff, const void *gc, int64_t gs,
                       float *dwr) {
#ifdef LD_CONV_BF16
    if (J->pairs) { bwtile_tab[w](img, J->G->pixo, J->G->op, koff, gc, gs, dwr); return; }
#endif
    wtile_tab[w].fn(img, J->G->pixo, J->G->op, koff, gc, gs, dwr);
}

/* gm (float32 [chunk][op][gs], bfloat16 values) packed as pixel pairs into
   gm2 [chunk][(op + 1) / 2][gs] for the pair tiles: exact */
static void pack_gm_pairs(uint32_t *gm2, const float *gm, int64_t nfch, int64_t op, int64_t gs) {
    int64_t npp = (op + 1) / 2;
    for (int64_t ch = 0; ch < nfch; ch++)
        for (int64_t qq = 0; qq < npp; qq++) {
            const float *r0 = gm + (ch * op + 2 * qq) * gs, *r1 = 2 * qq + 1 < op ? r0 + gs : NULL;
            uint32_t *d = gm2 + (ch * npp + qq) * gs;
            for (int64_t j = 0; j < gs; j++)
                d[j] = (uint32_t)ld_f32_to_bf16(r0[j]) | (r1 ? (uint32_t)ld_f32_to_bf16(r1[j]) << 16 : 0);
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
    int64_t img_n = G->hp * G->wp * g->c, gs = gm_stride(g->f), hwc = g->h * g->w * g->c;
    int half = g->half;
    int64_t on = (g->pkh > 0 ? g->poh * g->pow : op) * g->f;   /* an image's dy and y */
    float *gmb = falloc(nfch * op * gs), *out = falloc(PMAX * CH);
    /* dw's image: float32 (padded, or widened), or bfloat16 for the pair tiles (padded), and its packed gm */
    int xbuf = J->want_dw && (J->pairs ? G->pad : image_buffered(G));
    void *xp = !xbuf ? NULL : J->pairs ? calloc((size_t)img_n, 2) : (void *)pad_buffer(G);
    uint32_t *gm2 = J->pairs ? malloc(sizeof(uint32_t) * (size_t)(nfch * ((op + 1) / 2) * gs)) : NULL;
    float *dxp = J->dx && G->pad ? falloc(img_n) : NULL;
    /* half: an image's dy, y and dx in float32 */
    float *dyw = half ? falloc(on) : NULL, *yw = half && J->relu ? falloc(on) : NULL;
    float *dxs = half && J->dx ? falloc(hwc) : NULL;
    uint16_t *gm16 = J->wtb ? malloc(2 * (size_t)(nfch * op * gs)) : NULL;   /* scattered dx's pairs: gm in bfloat16 */
    float *dw = J->want_dw ? falloc(nfch * k * CH) : NULL, *db = falloc(fp);
    float *zeros = falloc(CH);
    int64_t po[PMAX], *fo = malloc(sizeof(int64_t) * (size_t)nfch);
    float *dst[PMAX];
    int64_t gmp_n = J->gather ? (g->h + g->kh - 1) * (g->w + g->kw - 1) * gs : 0;
    void *gmp = !J->gather ? NULL : J->wgb ? calloc((size_t)gmp_n, 2) : (void *)falloc(gmp_n);
    int64_t *dpo = J->gather ? malloc(sizeof(int64_t) * (size_t)(g->h * g->w + 1)) : NULL;
    if (!fo || !gmb || !out || !db || !zeros || (J->want_dw && (!dw || (xbuf && !xp))) || (J->pairs && !gm2) ||
        (J->dx && !J->gather && G->pad && !dxp) || (J->gather && (!gmp || !dpo)) ||
        (half && (!dyw || (J->relu && !yw) || (J->dx && !dxs))) || (J->wtb && !gm16)) {
        J->failed = 1;
        free(gmb); free(out); free(xp); free(dxp); free(dw); free(db); free(zeros); free(fo); free(gmp); free(dpo);
        free(dyw); free(yw); free(dxs); free(gm2); free(gm16);
        return;
    }
    if (J->gather) {   /* gmp's border stays zero; dpo: each dx pixel's window in gmp */
        memset(gmp, 0, (J->wgb ? 2 : sizeof(float)) * (size_t)gmp_n);
        for (int64_t i = 0; i < g->h; i++)
            for (int64_t j = 0; j < g->w; j++) dpo[i * g->w + j] = (i * (g->w + g->kw - 1) + j) * gs;
    }
    memset(zeros, 0, sizeof(float) * CH);
    memset(out, 0, sizeof(float) * PMAX * CH);   /* read as the scratch pixels' initial values */
    memset(db, 0, sizeof(float) * (size_t)fp);
    if (pool_tiles(g)) memset(gmb, 0, sizeof(float) * (size_t)(nfch * op * gs));   /* see gm_image */
    if (dw) memset(dw, 0, sizeof(float) * (size_t)(nfch * k * CH));
    for (int64_t b = lo; b < hi; b++) {
        const float *dyb = dyw, *yb = yw;
        if (half) {
            ld_cpu_half_to_f32(dyw, (const uint16_t *)J->dy + b * on, (ld_dtype)half, on);
            if (J->relu) ld_cpu_half_to_f32(yw, (const uint16_t *)J->y + b * on, (ld_dtype)half, on);
        } else {
            dyb = (const float *)J->dy + b * on;
            yb = J->relu ? (const float *)J->y + b * on : NULL;
        }
        /* no relu, no pooling, whole vectors of filters in one chunk: gm is
           dy itself (rows of gs = f), read in place, not copied */
        const float *gm = J->relu || g->pkh > 0 || gs != g->f || nfch != 1 ? gmb : dyb;
        if (gm == gmb) gm_image(gmb, db, J, b, dyb, yb);
        else if (J->want_db)
            for (int64_t q = 0; q < op; q++)
                for (int64_t j = 0; j < g->f; j++) db[j] += gm[q * gs + j];
        if (dw) {   /* dw[r][f] += sum_q img[pixo[q] + koff[r]] * gm[q][f] */
            const void *img = J->pairs ? (const void *)image_bf16(G, J->x, b, xp) : (const void *)image(G, J->x, b, xp);
            if (J->pairs) pack_gm_pairs(gm2, gm, nfch, op, gs);
            for (int64_t ch = 0; ch < nfch; ch++) {
                int64_t nf = g->f - ch * CH < CH ? g->f - ch * CH : CH;
                int V = vecs(nf), w0 = wtile_first(V), KT = wtile_tab[w0].KT;
                const void *gc = J->pairs ? (const void *)(gm2 + ch * ((op + 1) / 2) * gs) : (const void *)(gm + ch * op * gs);
                /* channels in whole runs of RUN1 (V = 1) or RUN2 (V = 2): a
                   run never straddles two taps, so the run tiles cover k
                   (float32: the pair tiles take the general shapes) */
                int run = J->pairs ? 0 : V == 1 && g->c % RUN1 == 0 ? RUN1 : V == 2 && g->c % RUN2 == 0 ? RUN2 : 0;
                if (run) {
                    wtile_fn wf = V == 1 ? wtile1_run : wtile2_run;
                    for (int64_t r0 = 0; r0 < k; r0 += run)
                        wf(img, G->pixo, op, G->koff + r0, gc, gs, dw + (ch * k + r0) * CH);
                    continue;
                }
                for (int64_t r0 = 0; r0 < k; r0 += KT) {
                    float *dwr = dw + (ch * k + r0) * CH;
                    int64_t nr = k - r0;
                    if (nr >= KT) { wtile_call(J, w0, img, G->koff + r0, gc, gs, dwr); continue; }
                    int w = w0;   /* the smallest tile that holds the last nr rows */
                    while (w + 1 < NWTILES && wtile_tab[w + 1].V == V && wtile_tab[w + 1].KT >= nr) w++;
                    int kt = wtile_tab[w].KT;
                    if (kt == nr) { wtile_call(J, w, img, G->koff + r0, gc, gs, dwr); break; }
                    /* through a larger tile whose extra rows are discarded */
                    float tmp[PMAX * CH];
                    int64_t ko[PMAX];
                    memset(tmp, 0, sizeof tmp);
                    memcpy(tmp, dwr, sizeof(float) * (size_t)(nr * CH));
                    for (int r = 0; r < kt; r++) ko[r] = G->koff[r0 + (r < nr ? r : nr - 1)];
                    wtile_call(J, w, img, ko, gc, gs, tmp);
                    memcpy(dwr, tmp, sizeof(float) * (size_t)(nr * CH));
                    break;
                }
            }
        }
        float *dxb = half ? dxs : J->dx ? (float *)J->dx + b * hwc : NULL;
        if (J->dx && J->gather) dx_gather(J, dxb, gm, gmp, dpo, out, zeros);
        else if (J->dx) {   /* for each tap: dx[pixo[q] + toff[t] + c] += sum_f gm[q][f] w[t][c][f] */
            float *tgt = G->pad ? dxp : dxb;
            memset(tgt, 0, sizeof(float) * (size_t)(G->pad ? img_n : g->h * g->w * g->c));
            for (int64_t fc = 0; fc < nfch; fc++) fo[fc] = fc * op * gs;
            if (J->wtb) ld_cpu_f32_to_half(gm16, gm, LD_BF16, nfch * op * gs);   /* exact: bfloat16 values */
            for (int64_t cc = 0; cc < ncch; cc++) {
                int64_t c0 = cc * CH, nc = g->c - c0 < CH ? g->c - c0 : CH;
                int V = vecs(nc), P = tile_pick(V, op);
                tile_set ts = tile_set_of(V, P);
                for (int64_t pb = 0; pb < op; pb += P) {
                    int64_t np_ = op - pb < P ? op - pb : P;
                    for (int p = 0; p < P; p++) po[p] = (pb + (p < np_ ? p : np_ - 1)) * gs;
                    /* whole vectors: the tile adds into dx in place (the pixels
                       beyond np_ into the scratch out); else through out */
                    int direct = nc == VW * V;
                    tile_fn tf = tile_for(&ts, po);
                    for (int64_t t = 0; t < G->ntap; t++) {
                        for (int p = 0; p < P; p++)
                            dst[p] = direct && p < np_ ? tgt + G->pixo[pb + p] + G->toff[t] + c0 : out + p * CH;
#ifdef LD_CONV_BF16
                        if (J->wtb)
                            btile_for(V, P)(gm16, po, fo, nfch, gs, J->wtb + (cc * G->ntap + t) * (fp / 2) * CH, dst, direct);
                        else
#endif
                        tf(gm, po, fo, nfch, gs, J->wt + (cc * G->ntap + t) * fp * CH, zeros, dst, direct, 0);
                        if (direct) continue;
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
        if (J->dx && half) store_half(J->dx, b * hwc, dxs, hwc, half);   /* the float32 sums rounded once */
    }
    J->dwp[part] = dw;
    J->dbp[part] = db;
    free(gmb); free(out); free(xp); free(dxp); free(zeros); free(fo); free(gmp); free(dpo);
    free(dyw); free(yw); free(dxs); free(gm2); free(gm16);
}

LD_CONV_LINKAGE void LD_CONV_FN(cpu_conv2d_backward)(ld_device *d, void *dx, void *dw_out, void *db_out,
                                                     const void *dy, const void *y, const int32_t *arg, const void *x,
                                                     const void *w_in, ld_conv_geom g, int relu) {
    geom G;
    if (geom_init(&G, &g)) { ld_device_fault(d, LD_ENOMEM, "conv2d backward: out of memory"); return; }
    int64_t nfch = nchunks(g.f), ncch = nchunks(g.c), fp = nfch * CH;
    int half = g.half;
    size_t es = half ? 2 : sizeof(float);   /* +0 is all zero bits either way */
    if (G.op == 0 || g.f == 0) {   /* no output pixels: every gradient is zero */
        if (dx) memset(dx, 0, es * (size_t)(g.n * g.h * g.w * g.c));
        if (dw_out) memset(dw_out, 0, es * (size_t)(G.k * g.f));
        if (db_out) memset(db_out, 0, es * (size_t)g.f);
        free(G.toff);
        return;
    }
    /* half: w widened; dw and db summed in float32, rounded once at the end */
    float *wf = half ? falloc(G.k * g.f) : NULL, *wt = NULL;
    uint32_t *wgb = NULL, *wtb = NULL;
    float *dw = half ? (dw_out ? falloc(G.k * g.f) : NULL) : dw_out;
    float *db = half ? (db_out ? falloc(g.f) : NULL) : db_out;
    bwd_job *J = calloc(1, sizeof *J);
    int gather = dx && gather_ok(&g), failed = !J || (half && (!wf || (dw_out && !dw) || (db_out && !db)));
    if (failed) goto done;
    if (half) ld_cpu_half_to_f32(wf, w_in, (ld_dtype)half, G.k * g.f);
    const float *w = half ? wf : (const float *)w_in;
    if (dw) memset(dw, 0, sizeof(float) * (size_t)(G.k * g.f));
    if (db) memset(db, 0, sizeof(float) * (size_t)g.f);
    /* w^T for dx: [c chunk][tap][f (padded to fp)][CH channels], zero-padded */
    if (gather) {   /* wg [c chunk][ki'][kj'][gs][CH] = w[kh-1-ki'][kw-1-kj'][c][f], zero-padded */
        int64_t gs = gm_stride(g.f);
        wt = falloc(ncch * G.ntap * gs * CH);
        if (!wt) { failed = 1; goto done; }
        memset(wt, 0, sizeof(float) * (size_t)(ncch * G.ntap * gs * CH));
        for (int64_t t = 0; t < G.ntap; t++) {
            int64_t tf = G.ntap - 1 - t;   /* (kh-1-ki)*kw + (kw-1-kj) */
            for (int64_t q = 0; q < g.c; q++)
                for (int64_t f = 0; f < g.f; f++)
                    wt[(((q / CH) * G.ntap + tf) * gs + f) * CH + q % CH] = w[(t * g.c + q) * g.f + f];
        }
#ifdef LD_CONV_BF16
        if (pairs_for(half)) wgb = pack_pairs(wt, ncch * g.kh, g.kw * gs);   /* [c chunk][ki'][kw * gs] */
#endif
    } else if (dx) {
        wt = falloc(ncch * G.ntap * fp * CH);
        if (!wt) { failed = 1; goto done; }
        memset(wt, 0, sizeof(float) * (size_t)(ncch * G.ntap * fp * CH));
        for (int64_t t = 0; t < G.ntap; t++)
            for (int64_t q = 0; q < g.c; q++)
                for (int64_t f = 0; f < g.f; f++)
                    wt[(((q / CH) * G.ntap + t) * fp + f) * CH + q % CH] = w[(t * g.c + q) * g.f + f];
#ifdef LD_CONV_BF16
        if (pairs_for(half)) wtb = pack_pairs(wt, ncch * G.ntap, fp);   /* w^T: [c chunk][tap][filters] */
#endif
    }
    J->G = &G; J->dx = dx; J->want_dw = dw != NULL; J->want_db = db != NULL;
    J->dy = dy; J->y = relu ? y : NULL; J->x = x; J->wt = wt; J->arg = arg; J->relu = relu && y;
    J->gather = gather; J->wg = wt; J->wgb = wgb; J->wtb = wtb;
#ifdef LD_CONV_BF16
    J->pairs = dw && pairs_for(half);
#endif
    int64_t work = g.n * G.op * G.k * g.f;
    if (work < LD_CPU_PAR_MIN || g.n < 2) bwd_part(J, 0, 1);
    else ld_cpu_parallel(bwd_part, J, MAX_PARTS);
    failed = J->failed;
    /* the parts' sums, in part order */
    for (int p = 0; p < MAX_PARTS; p++) {
        if (dw && J->dwp[p])
            for (int64_t r = 0; r < G.k; r++)
                for (int64_t f = 0; f < g.f; f++) dw[r * g.f + f] += J->dwp[p][((f / CH) * G.k + r) * CH + f % CH];
        if (db && J->dbp[p])
            for (int64_t f = 0; f < g.f; f++) db[f] += J->dbp[p][f];
        free(J->dwp[p]); free(J->dbp[p]);
    }
    if (half && dw) store_half(dw_out, 0, dw, G.k * g.f, half);
    if (half && db) store_half(db_out, 0, db, g.f, half);
done:
    if (failed) ld_device_fault(d, LD_ENOMEM, "conv2d backward: out of memory");
    if (half) { free(dw); free(db); }
    free(J); free(wf); free(wt); free(wgb); free(wtb); free(G.toff);
}

#ifdef LD_CONV_DISPATCH
/* ================================================================ dispatch
 * The build's own copy, or the AVX-512 copy (ld_cpu_conv_avx512.c) where the
 * build targets less, or the AVX2 one (ld_cpu_conv_avx2.c) where the build
 * targets AVX-512 or less than AVX2, by ld_cpu_isa(). Processors with
 * neither take the im2col lowering (ld_ops_conv.c). */
#define CONV_PROTOS(sfx)                                                                                  \
    void cpu_conv2d_##sfx(ld_device *d, void *y, int32_t *arg, const void *x, const void *w,             \
                          const void *b, ld_conv_geom g, int relu);                                      \
    void cpu_conv2d_backward_##sfx(ld_device *d, void *dx, void *dw, void *db, const void *dy,           \
                                   const void *y, const int32_t *arg, const void *x, const void *w,      \
                                   ld_conv_geom g, int relu);
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__AVX512F__)
#define CONV_HAS_AVX512
CONV_PROTOS(avx512)
#endif
#if defined(__x86_64__) && defined(__GNUC__) && (defined(__AVX512F__) || !defined(__AVX2__))
#define CONV_HAS_AVX2
CONV_PROTOS(avx2)
#endif

void cpu_conv2d(ld_device *d, void *y, int32_t *arg, const void *x, const void *w, const void *b, ld_conv_geom g,
                int relu) {
#ifdef CONV_HAS_AVX512
    if (ld_cpu_isa() == LD_ISA_AVX512) { cpu_conv2d_avx512(d, y, arg, x, w, b, g, relu); return; }
#endif
#ifdef CONV_HAS_AVX2
    if (ld_cpu_isa() == LD_ISA_AVX2) { cpu_conv2d_avx2(d, y, arg, x, w, b, g, relu); return; }
#endif
    cpu_conv2d_build(d, y, arg, x, w, b, g, relu);
}

void cpu_conv2d_backward(ld_device *d, void *dx, void *dw, void *db, const void *dy, const void *y,
                         const int32_t *arg, const void *x, const void *w, ld_conv_geom g, int relu) {
#ifdef CONV_HAS_AVX512
    if (ld_cpu_isa() == LD_ISA_AVX512) { cpu_conv2d_backward_avx512(d, dx, dw, db, dy, y, arg, x, w, g, relu); return; }
#endif
#ifdef CONV_HAS_AVX2
    if (ld_cpu_isa() == LD_ISA_AVX2) { cpu_conv2d_backward_avx2(d, dx, dw, db, dy, y, arg, x, w, g, relu); return; }
#endif
    cpu_conv2d_backward_build(d, dx, dw, db, dy, y, arg, x, w, g, relu);
}
#endif

/* ================================================================ the im2col lowering and max pooling
 * The kernels im2col, col2im, maxpool and maxpool_backward (NHWC): the
 * convolution of backends without a direct kernel (and of processors
 * without AVX-512), the reference the direct kernel is tested against, and
 * the pooling layer after a convolution that is not fused with it. Plain
 * loops, compiled once: here in the build's own copy, not again for
 * AVX-512. */
#ifdef LD_CONV_DISPATCH
/* a gather: col and x in one dtype of es bytes */
static void cpu_im2col_serial(char *col, const char *x, size_t es, int64_t n, int64_t h, int64_t w,
                       int64_t c, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph,
                       int64_t pw, int64_t oh, int64_t ow) {
    int64_t rowlen = kh * kw * c;
    size_t run = (size_t)c * es;
    for (int64_t b = 0; b < n; b++)
        for (int64_t i = 0; i < oh; i++)
            for (int64_t j = 0; j < ow; j++) {
                char *dst = col + (size_t)(((b * oh + i) * ow + j) * rowlen) * es;
                for (int64_t ki = 0; ki < kh; ki++) {
                    int64_t y = i * sh - ph + ki;
                    for (int64_t kj = 0; kj < kw; kj++) {
                        int64_t xx = j * sw - pw + kj;
                        char *o = dst + (size_t)((ki * kw + kj) * c) * es;
                        if (y < 0 || y >= h || xx < 0 || xx >= w) memset(o, 0, run);   /* 0.0 in every float dtype */
                        else memcpy(o, x + (size_t)(((b * h + y) * w + xx) * c) * es, run);
                    }
                }
            }
}

/* dx (xdt) = the sums of col's (cdt) window entries, image by image: into
   dx itself when float32, else into one image of float32 (acc) rounded into
   dx once; half col rows widened into rb (rowlen floats) first. The order of
   the additions is the float32 loop's whatever the dtypes. */
static void cpu_col2im_serial(void *dx, ld_dtype xdt, const void *col, ld_dtype cdt, float *acc, float *rb, int64_t n,
                              int64_t h, int64_t w, int64_t c, int64_t kh, int64_t kw, int64_t sh, int64_t sw,
                              int64_t ph, int64_t pw, int64_t oh, int64_t ow) {
    int64_t rowlen = kh * kw * c, in_img = h * w * c;
    for (int64_t b = 0; b < n; b++) {
        float *img = xdt == LD_F32 ? (float *)dx + b * in_img : acc;
        memset(img, 0, (size_t)in_img * sizeof(float));
        for (int64_t i = 0; i < oh; i++)
            for (int64_t j = 0; j < ow; j++) {
                int64_t r = (b * oh + i) * ow + j;
                const float *src = cdt == LD_F32 ? (const float *)col + r * rowlen : rb;
                if (cdt != LD_F32) ld_cpu_half_to_f32(rb, (const uint16_t *)col + r * rowlen, cdt, rowlen);
                for (int64_t ki = 0; ki < kh; ki++) {
                    int64_t y = i * sh - ph + ki;
                    if (y < 0 || y >= h) continue;
                    for (int64_t kj = 0; kj < kw; kj++) {
                        int64_t xx = j * sw - pw + kj;
                        if (xx < 0 || xx >= w) continue;
                        float *o = img + (y * w + xx) * c;
                        const float *s = src + (ki * kw + kj) * c;
                        for (int64_t q = 0; q < c; q++) o[q] += s[q];
                    }
                }
            }
        if (xdt != LD_F32) ld_cpu_f32_to_half((uint16_t *)dx + b * in_img, acc, xdt, in_img);
    }
}

static void cpu_maxpool_serial(ld_device *d, float *y, int64_t *arg, const float *x, int64_t n, int64_t h,
                        int64_t w, int64_t c, int64_t kh, int64_t kw, int64_t sh, int64_t sw,
                        int64_t oh, int64_t ow) {
    for (int64_t b = 0; b < n; b++)
        for (int64_t i = 0; i < oh; i++)
            for (int64_t j = 0; j < ow; j++) {
                float *yo = y + ((b * oh + i) * ow + j) * c;
                int64_t *ao = arg + ((b * oh + i) * ow + j) * c;
                int64_t base0 = ((b * h + i * sh) * w + j * sw) * c;
                for (int64_t q = 0; q < c; q++) { yo[q] = x[base0 + q]; ao[q] = base0 + q; }
                for (int64_t ki = 0; ki < kh; ki++)
                    for (int64_t kj = 0; kj < kw; kj++) {
                        if (!ki && !kj) continue;
                        int64_t base = ((b * h + i * sh + ki) * w + j * sw + kj) * c;
                        const float *xi = x + base;
                        for (int64_t q = 0; q < c; q++) {   /* branch-free, so it vectorises */
                            float v = xi[q];
                            int gt = ld_ew_max_wins(v, yo[q]);
                            yo[q] = gt ? v : yo[q];
                            ao[q] = gt ? base + q : ao[q];
                        }
                    }
            }
}

/* dx[arg[i] - x0] += dy[i] over the nx elements of dx from x0 (zeroed
   first): in dx itself when float32, else in f (nx floats) rounded into dx
   once; dy in ydt */
static void maxpool_scatter(void *dx, ld_dtype xdt, const void *dy, ld_dtype ydt, const int64_t *arg, int64_t ny,
                            int64_t x0, int64_t nx, float *f) {
    float *t = xdt == LD_F32 ? (float *)dx + x0 : f;
    memset(t, 0, (size_t)nx * sizeof(float));
    if (ydt == LD_F32) for (int64_t i = 0; i < ny; i++) t[arg[i] - x0] += ((const float *)dy)[i];
    else for (int64_t i = 0; i < ny; i++) t[arg[i] - x0] += ld_cpu_elem(dy, ydt, i);
    if (xdt != LD_F32) ld_cpu_f32_to_half((uint16_t *)dx + x0, f, xdt, nx);
}

/* ---- split over the images of the batch */
typedef struct {
    int kind; float *o; const float *x; int64_t *arg; const int64_t *carg;
    int64_t n, h, w, c, kh, kw, sh, sw, ph, pw, oh, ow;
    ld_dtype odt, xdt;   /* im2col: o (col) and x in xdt; col2im: o (dx) in odt, x (col) in xdt; maxpool: x and o
                            in xdt; its backward: o (dx) in odt, x (dy) in xdt */
    int failed;
} img_job;
static void img_part(void *p, int part, int np) {
    img_job *j = p;
    int64_t lo, hi, per = (j->n + np - 1) / np;
    lo = per * part; hi = lo + per;
    if (hi > j->n) hi = j->n;
    if (lo >= hi) return;
    int64_t nb = hi - lo, in_img = j->h * j->w * j->c, out_img = j->oh * j->ow, rowlen = j->kh * j->kw * j->c;
    switch (j->kind) {
    case 0: {
        size_t es = ld_dtype_size(j->xdt);
        cpu_im2col_serial((char *)j->o + (size_t)(lo * out_img * rowlen) * es, (const char *)j->x + (size_t)(lo * in_img) * es,
                          es, nb, j->h, j->w, j->c, j->kh, j->kw, j->sh, j->sw, j->ph, j->pw, j->oh, j->ow);
        break;
    }
    case 1: {
        int hx = j->odt != LD_F32, hc = j->xdt != LD_F32;
        float *buf = hx || hc ? malloc(sizeof(float) * (size_t)(hx * in_img + hc * rowlen)) : NULL;
        if ((hx || hc) && !buf) { j->failed = 1; break; }
        cpu_col2im_serial((char *)j->o + (size_t)(lo * in_img) * ld_dtype_size(j->odt), j->odt,
                          (const char *)j->x + (size_t)(lo * out_img * rowlen) * ld_dtype_size(j->xdt), j->xdt,
                          buf, buf ? buf + hx * in_img : NULL, nb, j->h, j->w, j->c, j->kh, j->kw, j->sh, j->sw,
                          j->ph, j->pw, j->oh, j->ow);
        free(buf);
        break;
    }
    case 2: {
        /* indices stay global: offset the input pointer back. A half x is
           widened, its part's images at a time, and the maxima rounded back
           (a selection: exact) */
        int64_t off = lo * in_img, ny = nb * out_img * j->c;
        int h = j->xdt != LD_F32;
        float *buf = h ? malloc(sizeof(float) * (size_t)(nb * in_img + ny)) : NULL;
        if (h && !buf) { j->failed = 1; break; }
        const float *xs = h ? buf : j->x + off;
        float *ys = h ? buf + nb * in_img : j->o + lo * out_img * j->c;
        if (h) ld_cpu_half_to_f32(buf, (const uint16_t *)j->x + off, j->xdt, nb * in_img);
        cpu_maxpool_serial(NULL, ys, j->arg + lo * out_img * j->c, xs, nb, j->h, j->w, j->c, j->kh, j->kw, j->sh, j->sw,
                           j->oh, j->ow);
        if (h) ld_cpu_f32_to_half((uint16_t *)j->o + lo * out_img * j->c, ys, j->xdt, ny);
        for (int64_t i = 0; i < ny; i++) j->arg[lo * out_img * j->c + i] += off;
        free(buf);
        break;
    }
    case 3: {   /* max pooling's backward: h = x's elements per image, oh = y's (w = c = ow = 1); o = dx in odt,
                   x = dy in xdt */
        float *f = j->odt != LD_F32 ? malloc(sizeof(float) * (size_t)(nb * j->h)) : NULL;
        if (j->odt != LD_F32 && !f) { j->failed = 1; break; }
        maxpool_scatter(j->o, j->odt, (const char *)j->x + (size_t)(lo * j->oh) * ld_dtype_size(j->xdt), j->xdt,
                        j->carg + lo * j->oh, nb * j->oh, lo * j->h, nb * j->h, f);
        free(f);
        break;
    }
    }
}
static int img_parts(int64_t n, int64_t work) { return work < LD_CPU_PAR_MIN || n < 2 ? 1 : 64; }
void cpu_im2col(ld_device *d, void *col, const void *x, ld_dtype dt, int64_t n, int64_t h, int64_t w, int64_t c,
                int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t oh, int64_t ow) {
    img_job j = {0, col, x, NULL, NULL, n, h, w, c, kh, kw, sh, sw, ph, pw, oh, ow, dt, dt, 0};
    ld_cpu_parallel(img_part, &j, img_parts(n, n * oh * ow * kh * kw * c));
}
void cpu_col2im(ld_device *d, void *dx, ld_dtype xdt, const void *col, ld_dtype cdt, int64_t n, int64_t h, int64_t w,
                int64_t c, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t oh,
                int64_t ow) {
    img_job j = {1, dx, col, NULL, NULL, n, h, w, c, kh, kw, sh, sw, ph, pw, oh, ow, xdt, cdt, 0};
    ld_cpu_parallel(img_part, &j, img_parts(n, n * oh * ow * kh * kw * c));
    if (j.failed) ld_device_fault(d, LD_ENOMEM, "col2im: out of memory");
}
void cpu_maxpool(ld_device *d, void *y, int64_t *arg, const void *x, ld_dtype dt, int64_t n, int64_t h, int64_t w,
                 int64_t c, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t oh, int64_t ow) {
    img_job j = {2, y, x, arg, NULL, n, h, w, c, kh, kw, sh, sw, 0, 0, oh, ow, dt, dt, 0};
    ld_cpu_parallel(img_part, &j, img_parts(n, n * h * w * c));
    if (j.failed) ld_device_fault(d, LD_ENOMEM, "max_pool2d: out of memory");
}
/* split by image: an image's maxima come from that image, so the parts
   write disjoint ranges of dx (each zeroes its own first) */
void cpu_maxpool_backward(ld_device *d, void *dx, ld_dtype xdt, const void *dy, ld_dtype ydt, const int64_t *arg,
                          int64_t n, int64_t ny, int64_t nx) {
    if (n < 2 || nx < LD_CPU_PAR_MIN || nx % n || ny % n) {
        float *f = xdt != LD_F32 ? malloc(sizeof(float) * (size_t)nx) : NULL;
        if (xdt != LD_F32 && !f) { ld_device_fault(d, LD_ENOMEM, "max_pool2d gradient: out of memory"); return; }
        maxpool_scatter(dx, xdt, dy, ydt, arg, ny, 0, nx, f);
        free(f);
        return;
    }
    img_job j = {3, dx, dy, NULL, arg, n, nx / n, 1, 1, 1, 1, 1, 1, 0, 0, ny / n, 1, xdt, ydt, 0};
    ld_cpu_parallel(img_part, &j, 64);
    if (j.failed) ld_device_fault(d, LD_ENOMEM, "max_pool2d gradient: out of memory");
}
#endif
