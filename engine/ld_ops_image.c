/* ld_ops_image.c - TF's projective transform and resize, composed of gathers
   and products (ld_ops_image.h). */
#include "ld_ops_image.h"
#include "ld_ops.h"
#include "ld_ops_index.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

int ld_fill_mode_from_name(const char *name, ld_fill_mode *out) {
    static const char *const names[] = {"reflect", "wrap", "constant", "nearest"};
    for (int i = 0; i < 4; i++)
        if (name && !strcmp(name, names[i])) { *out = (ld_fill_mode)i; return 0; }
    return 1;
}

static int need_images(const char *op, const ld_tensor *x) {
    char b[LD_SHAPE_STR_MAX];
    if (x->ndim != 4 || !ld_dtype_is_float(x->dtype))
        return ld_fail(x->ndim != 4 ? LD_ESHAPE : LD_ETYPE,
                       "%s: images [batch, height, width, channels] of a float dtype expected, got %s %s%s", op,
                       ld_dtype_name(x->dtype), ld_shape_str(x, b, sizeof b),
                       x->ndim == 3 ? " (one image: x:expand_dims(0))" : "");
    return LD_OK;
}

/* x's values as float32 (its own when float32), and back to x's dtype */
static ld_tensor *widen(ld_tensor *x) { return ld_as_float(x); }
static ld_tensor *narrow(ld_tensor *y, ld_dtype dt) {
    if (!y || y->dtype == dt) return y;
    ld_tensor *r = ld_cast_op(y, dt);
    ld_tensor_release(y);
    return r;
}

/* ================================================================ the projective transform */
/* TF's MapCoordinate (image_ops.h, after scipy's ndimage), with its
   arithmetic: float coordinates, integer lengths */
static float map_coord(ld_fill_mode m, float c, int64_t len) {
    float in = c;
    if (m == LD_FILL_REFLECT) {
        if (in < 0) {
            if (len <= 1) in = 0;
            else {
                int64_t sz2 = 2 * len;
                if (in < (float)sz2) in = (float)(sz2 * (int64_t)(-in / (float)sz2)) + in;
                in = in < (float)-len ? in + (float)sz2 : -in - 1;
            }
        } else if (in > (float)(len - 1)) {
            if (len <= 1) in = 0;
            else {
                int64_t sz2 = 2 * len;
                in -= (float)(sz2 * (int64_t)(in / (float)sz2));
                if (in >= (float)len) in = (float)sz2 - in - 1;
            }
        }
    } else if (m == LD_FILL_WRAP) {
        if (in < 0) {
            if (len <= 1) in = 0;
            else { int64_t sz = len - 1; in += (float)(len * ((int64_t)(-in / (float)sz) + 1)); }
        } else if (in > (float)(len - 1)) {
            if (len <= 1) in = 0;
            else { int64_t sz = len - 1; in -= (float)(len * (int64_t)(in / (float)sz)); }
        }
    } else if (m == LD_FILL_CONSTANT) {
        return in;
    }
    float hi = (float)(len - 1);
    return in < 0 ? 0 : in > hi ? hi : in;   /* TF's scalar_clamp_op(0, len - 1) */
}

/* Every output pixel reads K = 4 (bilinear) or 1 (nearest) input pixels of
   its image, weighted, plus a constant (fill_value where it reads outside):
   the pixel indices [N, K] and weights [N, K, 1] are computed here, then one
   gather of x's pixels [B*H*W, C], a product and a sum over K. */
ld_tensor *ld_image_transform(ld_tensor *x, const float *transforms, int64_t n_transforms, int nearest,
                              ld_fill_mode fill_mode, float fill_value) {
    if (need_images("image transform", x)) return NULL;
    int64_t B = x->shape[0], H = x->shape[1], W = x->shape[2], C = x->shape[3];
    if (n_transforms != 1 && n_transforms != B) {
        ld_fail(LD_ESHAPE, "image transform: %lld transforms for %lld images (one, or one per image)",
                (long long)n_transforms, (long long)B);
        return NULL;
    }
    if ((unsigned)fill_mode > LD_FILL_NEAREST) { ld_fail(LD_EARG, "image transform: unknown fill mode %d", (int)fill_mode); return NULL; }
    int K = nearest ? 1 : 4;
    int64_t N = B * H * W, is[2] = {N, K}, ws[3] = {N, K, 1}, cs[2] = {N, 1};
    ld_tensor *idx = ld_tensor_empty(LD_I64, 2, is, NULL), *wt = ld_tensor_empty(LD_F32, 3, ws, NULL);
    ld_tensor *cst = ld_tensor_empty(LD_F32, 2, cs, NULL);
    if (!idx || !wt || !cst) { ld_tensor_release(idx); ld_tensor_release(wt); ld_tensor_release(cst); return NULL; }
    int64_t *ip = ld_tensor_data_unsynced(idx);
    float *wp = ld_tensor_data_unsynced(wt), *cp = ld_tensor_data_unsynced(cst);
    int any_fill = 0, all_one = 1;
    for (int64_t b = 0; b < B; b++) {
        const float *t = transforms + (n_transforms == 1 ? 0 : 8 * b);
        int64_t base = b * H * W;
        for (int64_t oy = 0; oy < H; oy++)
            for (int64_t ox = 0; ox < W; ox++) {
                int64_t o = base + oy * W + ox;
                int64_t *io = ip + o * K;
                float *wo = wp + o * K;
                float fx = (float)ox, fy = (float)oy;
                float proj = t[6] * fx + t[7] * fy + 1.f;
                if (proj == 0) {   /* a point at infinity: TF's fill_value */
                    for (int k = 0; k < K; k++) { io[k] = base; wo[k] = 0; }
                    cp[o] = fill_value;
                    any_fill |= fill_value != 0;
                    all_one = 0;
                    continue;
                }
                float x_in = map_coord(fill_mode, (t[0] * fx + t[1] * fy + t[2]) / proj, W);
                float y_in = map_coord(fill_mode, (t[3] * fx + t[4] * fy + t[5]) / proj, H);
                /* the corners read (TF's read_with_fill_value): inside, a pixel; outside (CONSTANT's
                   points off the image, a ceiling corner past the edge), fill_value at the corner's weight */
                float yf, xf, cw[4];
                int64_t cy[4], cx[4];
                if (nearest) {
                    yf = roundf(y_in); xf = roundf(x_in);
                    cy[0] = isfinite(yf) ? (int64_t)yf : -1; cx[0] = isfinite(xf) ? (int64_t)xf : -1;
                    cw[0] = 1;
                } else {
                    yf = floorf(y_in); xf = floorf(x_in);
                    float yc = yf + 1, xc = xf + 1;
                    int64_t y0 = isfinite(yf) ? (int64_t)yf : -2, x0 = isfinite(xf) ? (int64_t)xf : -2;
                    cy[0] = y0; cx[0] = x0; cw[0] = (yc - y_in) * (xc - x_in);
                    cy[1] = y0; cx[1] = x0 + 1; cw[1] = (yc - y_in) * (x_in - xf);
                    cy[2] = y0 + 1; cx[2] = x0; cw[2] = (y_in - yf) * (xc - x_in);
                    cy[3] = y0 + 1; cx[3] = x0 + 1; cw[3] = (y_in - yf) * (x_in - xf);
                }
                float c = 0;
                for (int k = 0; k < K; k++) {
                    if (cy[k] >= 0 && cy[k] < H && cx[k] >= 0 && cx[k] < W) {
                        io[k] = base + cy[k] * W + cx[k];
                        wo[k] = cw[k];
                        if (cw[k] != 1) all_one = 0;
                    } else {
                        io[k] = base;
                        wo[k] = 0;
                        c += cw[k] * fill_value;
                        all_one = 0;
                    }
                }
                if (!isfinite(x_in) || !isfinite(y_in)) c = fill_value;   /* NaN coordinates read nothing */
                cp[o] = c;
                any_fill |= c != 0;
            }
    }
    ld_device *dev = x->storage->device;
    ld_tensor *xf = widen(x);
    int64_t fs[2] = {N, C}, os[4] = {B, H, W, C};
    ld_tensor *flat = xf ? ld_reshape_op(xf, 2, fs) : NULL, *g = flat ? ld_gather(flat, idx, 0) : NULL;   /* [N, K, C] */
    ld_tensor *y = NULL;
    if (g && all_one) {   /* nearest, every pixel inside: the gather is the result */
        y = ld_reshape_op(g, 2, fs);
    } else if (g) {
        ld_tensor *wd = ld_to_device(wt, dev), *p = wd ? ld_mul(g, wd) : NULL;
        y = p ? ld_sum(p, 1, 0) : NULL;   /* [N, C] */
        ld_tensor_release(wd); ld_tensor_release(p);
    }
    if (y && any_fill) {
        ld_tensor *cd = ld_to_device(cst, dev), *s = cd ? ld_add(y, cd) : NULL;
        ld_tensor_release(cd);
        ld_tensor_release(y);
        y = s;
    }
    ld_tensor *r = y ? ld_reshape_op(y, 4, os) : NULL;
    ld_tensor_release(y); ld_tensor_release(g); ld_tensor_release(flat); ld_tensor_release(xf);
    ld_tensor_release(idx); ld_tensor_release(wt); ld_tensor_release(cst);
    return narrow(r, x->dtype);
}

/* ================================================================ resize */
/* One axis (1: rows, 2: columns) of float32 images x to `out` samples, TF 2's
   resize with half-pixel centres. Bilinear: output i reads the input at
   s = (i + 0.5) in / out - 0.5 (float32, as TF's scaler), its neighbours
   floor(s) and ceil(s) held to the image, weighted 1 - (s - floor(s)) and
   s - floor(s): a matrix [in, out], the axis moved last, one product.
   Nearest: input min(floor((i + 0.5) in / out), in - 1), a gather. */
static ld_tensor *resize_axis(ld_tensor *x, int axis, int64_t out, int nearest) {
    int64_t in = x->shape[axis];
    if (in == out) return ld_tensor_retain(x);
    float scale = (float)in / (float)out;
    if (nearest) {
        ld_tensor *idx = ld_tensor_empty(LD_I64, 1, &out, NULL);
        if (!idx) return NULL;
        int64_t *p = ld_tensor_data_unsynced(idx);
        for (int64_t i = 0; i < out; i++) {
            int64_t k = (int64_t)floorf(((float)i + 0.5f) * scale);
            p[i] = k > in - 1 ? in - 1 : k < 0 ? 0 : k;
        }
        ld_tensor *y = ld_gather(x, idx, axis);
        ld_tensor_release(idx);
        return y;
    }
    int64_t ws[2] = {in, out};
    /* written here on the host (empty, not zeros: a fill queued on an asynchronous host device would run after) */
    ld_tensor *w = ld_tensor_empty(LD_F32, 2, ws, NULL);
    if (!w) return NULL;
    float *m = ld_tensor_data_unsynced(w);
    memset(m, 0, sizeof(float) * (size_t)(in * out));
    for (int64_t i = 0; i < out; i++) {
        float src = ((float)i + 0.5f) * scale - 0.5f, f = floorf(src), lerp = src - f;
        int64_t lo = f < 0 ? 0 : (int64_t)f, hi = (int64_t)ceilf(src);
        if (hi > in - 1) hi = in - 1;
        if (hi < 0) hi = 0;
        if (lo > in - 1) lo = in - 1;
        m[lo * out + i] += 1.0f - lerp;
        m[hi * out + i] += lerp;
    }
    ld_tensor *wd = ld_to_device(w, x->storage->device);
    ld_tensor_release(w);
    static const int last1[4] = {0, 2, 3, 1}, back1[4] = {0, 3, 1, 2}, swap2[4] = {0, 1, 3, 2};
    const int *to = axis == 1 ? last1 : swap2, *from = axis == 1 ? back1 : swap2;
    ld_tensor *p = wd ? ld_permute_op(x, to) : NULL;
    int64_t rows = p ? ld_tensor_numel(p) / in : 0, fs[2] = {rows, in};
    ld_tensor *f2 = p ? ld_reshape_op(p, 2, fs) : NULL, *y2 = f2 ? ld_matmul(f2, wd) : NULL;
    int64_t ys[4] = {p ? p->shape[0] : 0, p ? p->shape[1] : 0, p ? p->shape[2] : 0, out};
    ld_tensor *y4 = y2 ? ld_reshape_op(y2, 4, ys) : NULL, *y = y4 ? ld_permute_op(y4, from) : NULL;
    ld_tensor_release(wd); ld_tensor_release(p); ld_tensor_release(f2); ld_tensor_release(y2); ld_tensor_release(y4);
    return y;
}

ld_tensor *ld_image_resize(ld_tensor *x, int64_t height, int64_t width, int nearest) {
    if (need_images("resize", x)) return NULL;
    if (height < 1 || width < 1) {
        ld_fail(LD_EARG, "resize: the size must be positive, got %lld x %lld", (long long)height, (long long)width);
        return NULL;
    }
    if (x->shape[1] < 1 || x->shape[2] < 1) {
        ld_fail(LD_ESHAPE, "resize: images of %lld x %lld pixels have nothing to resize", (long long)x->shape[1],
                (long long)x->shape[2]);
        return NULL;
    }
    if (x->shape[1] == height && x->shape[2] == width) return ld_tensor_retain(x);
    /* a half image is widened: bilinear's sums in float32, rounded once */
    ld_tensor *xf = nearest ? ld_tensor_retain(x) : widen(x);
    ld_tensor *r = xf ? resize_axis(xf, 1, height, nearest) : NULL, *y = r ? resize_axis(r, 2, width, nearest) : NULL;
    ld_tensor_release(xf); ld_tensor_release(r);
    return narrow(y, x->dtype);
}

ld_tensor *ld_image_crop(ld_tensor *x, int64_t top, int64_t left, int64_t h, int64_t w) {
    if (need_images("crop", x)) return NULL;
    if (top < 0 || left < 0 || h < 1 || w < 1 || top + h > x->shape[1] || left + w > x->shape[2]) {
        ld_fail(LD_EARG, "crop: rows %lld..%lld and columns %lld..%lld are not inside images of %lld x %lld pixels",
                (long long)top, (long long)(top + h - 1), (long long)left, (long long)(left + w - 1),
                (long long)x->shape[1], (long long)x->shape[2]);
        return NULL;
    }
    if (top == 0 && left == 0 && h == x->shape[1] && w == x->shape[2]) return ld_tensor_retain(x);
    ld_tensor *r = ld_slice_op(x, 1, top, h), *y = r ? ld_slice_op(r, 2, left, w) : NULL;
    ld_tensor_release(r);
    return y;
}

ld_tensor *ld_image_fit_aspect(ld_tensor *x, int64_t h, int64_t w, int nearest, int pad, float fill_value) {
    if (need_images("resize", x)) return NULL;
    if (h < 1 || w < 1) { ld_fail(LD_EARG, "resize: the size must be positive, got %lld x %lld", (long long)h, (long long)w); return NULL; }
    int64_t H = x->shape[1], W = x->shape[2];
    /* Keras's arithmetic: int(float(W * h) / w), ... */
    int64_t th = (int64_t)((double)(W * h) / (double)w), tw = (int64_t)((double)(H * w) / (double)h);
    ld_tensor *c;
    if (pad) {
        if (th < H) th = H;
        if (tw < W) tw = W;
        int64_t ph = (int64_t)((double)(th - H) / 2), pw = (int64_t)((double)(tw - W) / 2);
        /* Keras pads each side by the half, rounded down (an odd difference loses its last row) */
        ld_tensor *a = ph > 0 ? ld_pad_op(x, 1, ph, ph, fill_value) : ld_tensor_retain(x);
        c = a && pw > 0 ? ld_pad_op(a, 2, pw, pw, fill_value) : ld_tensor_retain(a);
        ld_tensor_release(a);
    } else {
        if (th > H) th = H;
        if (th < 1) th = 1;
        if (tw > W) tw = W;
        if (tw < 1) tw = 1;
        c = ld_image_crop(x, (int64_t)((double)(H - th) / 2), (int64_t)((double)(W - tw) / 2), th, tw);
    }
    ld_tensor *y = c ? ld_image_resize(c, h, w, nearest) : NULL;
    ld_tensor_release(c);
    return y;
}
