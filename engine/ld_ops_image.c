/* ld_ops_image.c - TF's projective transform and resize, composed of gathers
   and products (ld_ops_image.h). */
#include "ld_ops_image.h"
#include "ld_ops.h"
#include "ld_ops_index.h"
#include "ld_ops_internal.h"
#include "ld_autograd.h"
#include "ld_image_math.h"
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
_Static_assert((int)LD_FILL_REFLECT == (int)LD_IMG_REFLECT && (int)LD_FILL_WRAP == (int)LD_IMG_WRAP &&
               (int)LD_FILL_CONSTANT == (int)LD_IMG_CONSTANT && (int)LD_FILL_NEAREST == (int)LD_IMG_NEAREST, "the fill modes' numbers are ld_image_math.h's");

/* One kernel (ld_kernels.h's image_transform: where each output pixel
   reads is ld_image_math.h's, on every backend), the transforms a [nt, 8]
   tensor on x's device; the gradient is the kernel's adjoint. */
static int bw_image_transform(ld_node *nd, ld_tensor *g, ld_tensor **gi) {
    ld_tensor *x = nd->in[0], *t = nd->saved[0];
    ld_tensor *gc = ld_contiguous(g);
    ld_tensor *dx = gc ? ld_ops_out_empty(LD_F32, 4, x->shape, DEV(x)) : NULL;
    if (dx)
        BE(x)->image_transform_backward(DEV(x), FPTR(dx), FPTR(gc), FPTR(t), t->shape[0], x->shape[0], x->shape[1],
                                        x->shape[2], x->shape[3], (int)nd->args[0], (int)nd->args[1]);
    ld_tensor_release(gc);
    gi[0] = dx;
    return dx ? LD_OK : ld_error_status();
}

ld_tensor *ld_image_transform(ld_tensor *x, const float *transforms, int64_t n_transforms, int nearest,
                              ld_fill_mode fill_mode, float fill_value) {
    if (need_images("image transform", x)) return NULL;
    int64_t B = x->shape[0];
    if (n_transforms != 1 && n_transforms != B) {
        ld_fail(LD_ESHAPE, "image transform: %lld transforms for %lld images (one, or one per image)",
                (long long)n_transforms, (long long)B);
        return NULL;
    }
    if ((unsigned)fill_mode > LD_FILL_NEAREST) { ld_fail(LD_EARG, "image transform: unknown fill mode %d", (int)fill_mode); return NULL; }
    int64_t ts[2] = {n_transforms, 8};
    ld_tensor *th = ld_tensor_empty(LD_F32, 2, ts, NULL);   /* written here, on the host */
    if (!th) return NULL;
    memcpy(ld_tensor_data_unsynced(th), transforms, sizeof(float) * 8 * (size_t)n_transforms);
    ld_tensor *xf = widen(x), *cx = xf ? ld_ops_contig(xf) : NULL, *t = cx ? ld_to_device(th, DEV(cx)) : NULL;
    ld_tensor_release(th);
    ld_tensor_release(xf);
    ld_tensor *y = t ? ld_ops_out_empty(LD_F32, 4, cx->shape, DEV(cx)) : NULL;
    if (y) {
        BE(cx)->image_transform(DEV(cx), FPTR(y), FPTR(cx), FPTR(t), n_transforms, cx->shape[0], cx->shape[1],
                                cx->shape[2], cx->shape[3], nearest != 0, (int)fill_mode, fill_value);
        ld_tensor *in[1] = {cx};
        ld_node *nd = ld_record(y, "image_transform", bw_image_transform, 1, in);
        if (nd) {
            nd->saved[0] = ld_tensor_retain(t);
            nd->args[0] = nearest != 0;
            nd->args[1] = (double)fill_mode;
        }
    }
    ld_tensor_release(t);
    ld_tensor_release(cx);
    return narrow(y, x->dtype);
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
