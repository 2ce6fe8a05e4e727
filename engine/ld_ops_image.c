/* ld_ops_image.c - TF's projective transform (one kernel per backend), its
   resizes and crops (ld_ops_image.h). */
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

/* y (float32) back to the input's dtype dt (a half image is computed in float32, rounded once) */
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
                                        x->shape[2], x->shape[3], gc->shape[1], gc->shape[2], (int)nd->args[0],
                                        (int)nd->args[1]);
    ld_tensor_release(gc);
    gi[0] = dx;
    return dx ? LD_OK : ld_error_status();
}

ld_tensor *ld_image_transform(ld_tensor *x, const float *transforms, int64_t n_transforms, int nearest,
                              ld_fill_mode fill_mode, float fill_value) {
    if (need_images("image transform", x)) return NULL;
    return ld_image_transform_to(x, transforms, n_transforms, x->shape[1], x->shape[2], nearest, fill_mode, fill_value);
}

ld_tensor *ld_image_transform_to(ld_tensor *x, const float *transforms, int64_t n_transforms, int64_t oh, int64_t ow,
                                 int nearest, ld_fill_mode fill_mode, float fill_value) {
    if (need_images("image transform", x)) return NULL;
    if (oh < 1 || ow < 1) {
        ld_fail(LD_EARG, "image transform: the output size must be positive, got %lld x %lld", (long long)oh, (long long)ow);
        return NULL;
    }
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
    ld_tensor *xf = ld_as_float(x), *cx = xf ? ld_ops_contig(xf) : NULL, *t = cx ? ld_to_device(th, DEV(cx)) : NULL;
    ld_tensor_release(th);
    ld_tensor_release(xf);
    int64_t ys[4] = {cx ? cx->shape[0] : 0, oh, ow, cx ? cx->shape[3] : 0};
    ld_tensor *y = t ? ld_ops_out_empty(LD_F32, 4, ys, DEV(cx)) : NULL;
    if (y) {
        BE(cx)->image_transform(DEV(cx), FPTR(y), FPTR(cx), FPTR(t), n_transforms, cx->shape[0], cx->shape[1],
                                cx->shape[2], cx->shape[3], oh, ow, nearest != 0, (int)fill_mode, fill_value);
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
/* One axis (1: rows, 2: columns) of images x to `out` samples by TF 2's
   nearest resize (half-pixel centres): input min(floor((i + 0.5) in / out),
   in - 1), a gather. */
static ld_tensor *nearest_axis(ld_tensor *x, int axis, int64_t out) {
    int64_t in = x->shape[axis];
    if (in == out) return ld_tensor_retain(x);
    float scale = (float)in / (float)out;
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
    if (nearest) {
        ld_tensor *r = nearest_axis(x, 1, height), *y = r ? nearest_axis(r, 2, width) : NULL;
        ld_tensor_release(r);
        return y;
    }
    /* bilinear, TF's half-pixel centres: output i reads the input at (i + 0.5) in / out - 0.5, its
       neighbours held to the image (the transform's NEAREST fill clamps there as TF's resize does) */
    float sy = (float)x->shape[1] / (float)height, sx = (float)x->shape[2] / (float)width;
    float t[8] = {sx, 0, 0.5f * sx - 0.5f, 0, sy, 0.5f * sy - 0.5f, 0, 0};
    return ld_image_transform_to(x, t, 1, height, width, 0, LD_FILL_NEAREST, 0);
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

void ld_image_aspect_window(int64_t H, int64_t W, int64_t h, int64_t w, int64_t *top, int64_t *left, int64_t *wh,
                            int64_t *ww) {
    /* Keras's arithmetic (smart_resize): int(float(W * h) / w), held to [1, H]; the offsets int(float(H - ch) / 2) */
    int64_t ch = (int64_t)((double)(W * h) / (double)w), cw = (int64_t)((double)(H * w) / (double)h);
    ch = ch > H ? H : ch < 1 ? 1 : ch;
    cw = cw > W ? W : cw < 1 ? 1 : cw;
    *top = (int64_t)((double)(H - ch) / 2);
    *left = (int64_t)((double)(W - cw) / 2);
    *wh = ch;
    *ww = cw;
}

ld_tensor *ld_image_fit_aspect(ld_tensor *x, int64_t h, int64_t w, int nearest, int pad, float fill_value) {
    if (need_images("resize", x)) return NULL;
    if (h < 1 || w < 1) { ld_fail(LD_EARG, "resize: the size must be positive, got %lld x %lld", (long long)h, (long long)w); return NULL; }
    int64_t H = x->shape[1], W = x->shape[2];
    ld_tensor *c;
    if (pad) {
        /* Keras's arithmetic: int(float(W * h) / w), ... */
        int64_t th = (int64_t)((double)(W * h) / (double)w), tw = (int64_t)((double)(H * w) / (double)h);
        if (th < H) th = H;
        if (tw < W) tw = W;
        int64_t ph = (int64_t)((double)(th - H) / 2), pw = (int64_t)((double)(tw - W) / 2);
        /* Keras pads each side by the half, rounded down (an odd difference loses its last row) */
        ld_tensor *a = ph > 0 ? ld_pad_op(x, 1, ph, ph, fill_value) : ld_tensor_retain(x);
        c = a && pw > 0 ? ld_pad_op(a, 2, pw, pw, fill_value) : ld_tensor_retain(a);
        ld_tensor_release(a);
    } else {
        int64_t top, left, th, tw;
        ld_image_aspect_window(H, W, h, w, &top, &left, &th, &tw);
        c = ld_image_crop(x, top, left, th, tw);
    }
    ld_tensor *y = c ? ld_image_resize(c, h, w, nearest) : NULL;
    ld_tensor_release(c);
    return y;
}
