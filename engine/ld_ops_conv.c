/*
 * ld_ops_conv.c - the convolution family's differentiable ops: 2-d
 * convolution (with bias, relu and a max pooling fused where the device
 * can), im2col and its transpose col2im, max pooling (valid, and TF's
 * SAME through a padding of -inf); argument checks, dispatch to the device's
 * kernels (the convolution family of LD_LAYER_KERNELS, ld_kernels.h:
 * ld_cpu_conv.c, cuda/cuda_conv.cu) and their backward functions.
 * Declared in ld_ops.h.
 */
#include "ld_ops.h"
#include "ld_autograd.h"
#include "ld_ops_index.h"
#include "ld_ops_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ================================================================ conv2d (NHWC, HWIO) */
/* The convolution op: y = conv(x, w) + b, then relu when asked, recorded as
   one node. On the CPU the direct kernels (ld_cpu_conv.c) do it whole:
   no im2col matrix, bias and relu fused forward, relu's mask and the bias
   gradient fused backward, in AVX-512 or AVX2 registers. Other backends (and
   the CPU when LDIST_CONV_REFERENCE=1, which the tests compare against, or
   when an x86 processor has neither: see ld_cpu_conv.c) lower it to im2col
   -> the fused dense op -> reshape, differentiated op by op. */
static int conv_reference(void) {
    const char *e = getenv("LDIST_CONV_REFERENCE");
    if (e && *e && strcmp(e, "0") != 0) return 1;
#if defined(__x86_64__)
    return ld_cpu_isa() < LD_ISA_AVX2;
#else
    return 0;
#endif
}

/* The windows of an h x w image, kernel kh x kw, strides sh, sw, valid or
   same padding: the output size oh x ow and the padding before it, ph, pw
   (TF's rules); a kernel larger than a valid image is the error a user
   meets. The one geometry of conv2d, im2col and col2im. */
static int window_geometry(int64_t h, int64_t w, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int same,
                           int64_t *oh, int64_t *ow, int64_t *ph, int64_t *pw) {
    if (same) {
        ld_ops_same_pad(h, kh, sh, oh, ph);
        ld_ops_same_pad(w, kw, sw, ow, pw);
        return LD_OK;
    }
    if (h < kh || w < kw)
        return ld_fail(LD_ESHAPE, "conv2d: kernel %lldx%lld is larger than the %lldx%lld input (use padding=\"same\")",
                       (long long)kh, (long long)kw, (long long)h, (long long)w);
    *oh = (h - kh) / sh + 1; *ow = (w - kw) / sw + 1;
    *ph = *pw = 0;
    return LD_OK;
}

/* The geometry of conv(x, w) (and of the pooling after it when pk[0] > 0:
   pk = {pkh, pkw, psh, psw}), with the errors a user meets. */
static int conv_geometry(const ld_tensor *x, const ld_tensor *w, int sh, int sw, int same, const int *pk,
                         ld_conv_geom *g) {
    memset(g, 0, sizeof *g);
    g->n = x->shape[0]; g->h = x->shape[1]; g->w = x->shape[2]; g->c = x->shape[3];
    g->kh = w->shape[0]; g->kw = w->shape[1]; g->f = w->shape[3]; g->sh = sh; g->sw = sw;
    if (window_geometry(g->h, g->w, g->kh, g->kw, sh, sw, same, &g->oh, &g->ow, &g->ph, &g->pw))
        return ld_error_status();
    if (pk && pk[0] > 0) {
        if (pk[1] < 1 || pk[2] < 1 || pk[3] < 1) return ld_fail(LD_EARG, "pool size and strides must be positive");
        if (g->oh < pk[0] || g->ow < pk[1])
            return ld_fail(LD_ESHAPE, "max_pool2d: pool %dx%d is larger than the input [%lld, %lld, %lld, %lld]",
                           pk[0], pk[1], (long long)g->n, (long long)g->oh, (long long)g->ow, (long long)g->f);
        g->pkh = pk[0]; g->pkw = pk[1]; g->psh = pk[2]; g->psw = pk[3];
        g->poh = (g->oh - g->pkh) / g->psh + 1; g->pow = (g->ow - g->pkw) / g->psw + 1;
    }
    return LD_OK;
}

/* args: sh, sw, same, relu, then the pooling's pkh, pkw, psh, psw (0: none);
   saved: the output (relu's mask) and the pooling's arg. A half x (the
   direct kernels under a half autocast, conv_half_direct: w and b in its
   dtype too): g taken in it, and every gradient (the float32 sums rounded
   once). */
static int bw_conv2d(ld_node *nd, ld_tensor *g, ld_tensor **gi) {
    ld_tensor *x = nd->in[0], *w = nd->in[1], *b = nd->n_in > 2 ? nd->in[2] : NULL, *y = nd->saved[0];
    ld_tensor *arg = nd->saved[1];
    int pk[4] = {(int)nd->args[4], (int)nd->args[5], (int)nd->args[6], (int)nd->args[7]};
    int relu = (int)nd->args[3];
    ld_conv_geom cg;
    if (conv_geometry(x, w, (int)nd->args[0], (int)nd->args[1], (int)nd->args[2], pk, &cg)) return ld_error_status();
    cg.half = ld_dtype_is_half(x->dtype) ? x->dtype : 0;
    int nx = ld_needs_grad(x), nw = ld_needs_grad(w), nb = b && ld_needs_grad(b);
    ld_tensor *gx = g->dtype == x->dtype ? ld_tensor_retain(g) : ld_cast(g, x->dtype);
    ld_tensor *gc = gx ? ld_contiguous(gx) : NULL, *cw = gc ? ld_contiguous(w) : NULL;
    ld_tensor_release(gx);
    ld_tensor *dx = cw && nx ? ld_ops_out_empty(x->dtype, 4, x->shape, DEV(x)) : NULL;
    ld_tensor *dw = cw && nw ? ld_ops_out_empty(w->dtype, 4, w->shape, DEV(x)) : NULL;
    ld_tensor *db = cw && nb ? ld_ops_out_empty(b->dtype, 1, b->shape, DEV(x)) : NULL;
    int ok = cw && (!nx || dx) && (!nw || dw) && (!nb || db);
    if (ok && (nx || nw || nb))
        BE(x)->conv2d_backward(DEV(x), dx ? DPTR(dx) : NULL, dw ? DPTR(dw) : NULL, db ? DPTR(db) : NULL, DPTR(gc),
                               y ? DPTR(y) : NULL, arg ? (const int32_t *)arg->storage->data + arg->offset : NULL,
                               DPTR(x), DPTR(cw), cg, relu && y);
    ld_tensor_release(gc); ld_tensor_release(cw);
    if (!ok) { ld_tensor_release(dx); ld_tensor_release(dw); ld_tensor_release(db); return ld_error_status(); }
    gi[0] = dx; gi[1] = dw;
    if (b) gi[2] = db;
    return LD_OK;
}

static ld_tensor *conv_op(ld_tensor *x, ld_tensor *w, ld_tensor *b, int relu, int sh, int sw, int same, const int *pk);

/* y max-pooled (pk, see conv_geometry), in y's dtype (the pooling kernels
   read and write a half dtype: the maxima are y's own values) */
static ld_tensor *pool_after(ld_tensor *y, const int *pk) {
    ld_tensor *p = ld_maxpool2d(y, pk[0], pk[1], pk[2], pk[3]);
    ld_tensor_release(y);
    return p;
}

/* The lowering (GPUs, LDIST_CONV_REFERENCE=1): im2col -> dense (bias and
   relu fused; under a half autocast the half product with the bias and relu
   in the half dtype, ld_linear_half: tensor cores on a GPU) -> NHWC, then the
   pooling op. Under a half autocast x is taken in the half dtype (cast first
   when it is not) and im2col gathers it as it is; the patches' gradient
   comes from the half product in float32 (ld_linear_patches), and col2im
   sums it and rounds once: dx as the direct kernels and TF give it, without
   passes over a matrix KH*KW times x's size to widen or round it. */
static ld_tensor *conv_lowered(ld_tensor *x, ld_tensor *w, ld_tensor *b, int relu, int sh, int sw, int same,
                               const int *pk) {
    int64_t oh, ow, kh = w->shape[0], kw = w->shape[1];
    ld_dtype half = ld_autocast_dtype();
    ld_tensor *xf = !ld_dtype_is_half(half) ? ld_as_float(x) : x->dtype == half ? ld_tensor_retain(x) : ld_cast_op(x, half);
    ld_tensor *col = xf ? ld_im2col(xf, (int)kh, (int)kw, sh, sw, same, &oh, &ow) : NULL;
    int64_t w2s[2] = {kh * kw * x->shape[3], w->shape[3]}, ys[4] = {x->shape[0], oh, ow, w->shape[3]};
    ld_tensor *w2 = col ? ld_reshape_op(w, 2, w2s) : NULL;
    ld_tensor *y2 = w2 ? ld_linear_patches(col, w2, b, relu) : NULL;
    ld_tensor *y = y2 ? ld_reshape_op(y2, 4, ys) : NULL;
    ld_tensor_release(xf); ld_tensor_release(col); ld_tensor_release(w2); ld_tensor_release(y2);
    return y && pk && pk[0] > 0 ? pool_after(y, pk) : y;
}

static ld_tensor *conv_direct(ld_tensor *x, ld_tensor *w, ld_tensor *b, int relu, int sh, int sw, int same,
                              const int *pk, ld_dtype half);

/* The direct kernels under a half autocast (Keras's mixed precision,
   ld_autocast): x, the kernel and the bias in the half dtype (recorded
   casts where they are not: the variables' gradients come back rounded to
   it, then widened), and one op whose kernel reads and writes them as they
   are and rounds as a half Conv2D computes (ld_conv_geom.half): the float32
   sums of exact products rounded once, the bias added in the half dtype,
   relu, the pooling; each gradient the float32 sums rounded once. The
   lowering gives the same through its half product
   (LDIST_CONV_REFERENCE=1; the tests compare them). */
static ld_tensor *conv_half_direct(ld_tensor *x, ld_tensor *w, ld_tensor *b, int relu, int sh, int sw, int same,
                                   const int *pk, ld_dtype dt) {
    ld_dtype was = ld_autocast(LD_F32);   /* float32 ops inside, not this path again */
    ld_tensor *xh = x->dtype == dt ? ld_tensor_retain(x) : ld_cast_op(x, dt);
    ld_tensor *wh = !xh ? NULL : w->dtype == dt ? ld_tensor_retain(w) : ld_cast_op(w, dt);
    ld_tensor *bh = !wh || !b ? NULL : b->dtype == dt ? ld_tensor_retain(b) : ld_cast_op(b, dt);
    ld_tensor *y = wh && (!b || bh) ? conv_direct(xh, wh, bh, relu, sh, sw, same, pk, dt) : NULL;
    ld_autocast(was);
    ld_tensor_release(xh); ld_tensor_release(wh); ld_tensor_release(bh);
    return y;
}

/* relu(conv(x, w) + b), then max pooling when pk (see conv_geometry); half
   operands under a half autocast */
static ld_tensor *conv_op(ld_tensor *x, ld_tensor *w, ld_tensor *b, int relu, int sh, int sw, int same, const int *pk) {
    char b1[64], b2[64];
    if (x->ndim != 4 || w->ndim != 4 || x->shape[3] != w->shape[2] ||
        (b && (b->ndim != 1 || b->shape[0] != w->shape[3]))) {
        ld_fail(LD_ESHAPE, "conv2d needs NHWC input and HWIO kernel with matching channels, got %s and %s",
                ld_shape_str(x, b1, sizeof b1), ld_shape_str(w, b2, sizeof b2));
        return NULL;
    }
    if (sh < 1 || sw < 1) { ld_fail(LD_EARG, "conv2d strides must be positive"); return NULL; }
    ld_dtype half = ld_autocast_dtype();
    int ok = ld_dtype_is_half(half) ? ld_dtype_is_float(x->dtype) && ld_dtype_is_float(w->dtype) && (!b || ld_dtype_is_float(b->dtype))
                                    : x->dtype == LD_F32 && w->dtype == LD_F32 && (!b || b->dtype == LD_F32);
    if (!ok) {
        ld_fail(LD_ETYPE, "conv2d needs float32 tensors, got %s and %s", ld_dtype_name(x->dtype), ld_dtype_name(w->dtype));
        return NULL;
    }
    if (ld_check_same_device(x, w, "conv2d") || (b && ld_check_same_device(w, b, "conv2d"))) return NULL;
    if (DEV(x)->kind != LD_DEV_CPU || conv_reference()) return conv_lowered(x, w, b, relu, sh, sw, same, pk);
    if (ld_dtype_is_half(half)) return conv_half_direct(x, w, b, relu, sh, sw, same, pk, half);
    return conv_direct(x, w, b, relu, sh, sw, same, pk, 0);
}

/* the direct kernels (float32 tensors, checked by conv_op): one recorded op;
   half (0 or a half dtype) is ld_conv_geom's, for conv_half_direct: every
   tensor in that dtype then */
static ld_tensor *conv_direct(ld_tensor *x, ld_tensor *w, ld_tensor *b, int relu, int sh, int sw, int same,
                              const int *pk, ld_dtype half) {
    int pool = pk && pk[0] > 0;
    ld_conv_geom cg;
    if (conv_geometry(x, w, sh, sw, same, pk, &cg)) return NULL;
    cg.half = half;
    ld_tensor *cx = ld_ops_contig(x), *cw = cx ? ld_contiguous(w) : NULL;
    int64_t ys[4] = {cg.n, pool ? cg.poh : cg.oh, pool ? cg.pow : cg.ow, cg.f};
    ld_tensor *y = cw ? ld_ops_out_empty(half ? half : LD_F32, 4, ys, DEV(x)) : NULL;
    ld_tensor *arg = y && pool ? ld_ops_out_empty(LD_I32, 4, ys, DEV(x)) : NULL;
    ld_tensor *cb = y && b ? ld_contiguous(b) : NULL;
    if (y && (!b || cb) && (!pool || arg)) {
        BE(x)->conv2d(DEV(x), DPTR(y), arg ? (int32_t *)arg->storage->data + arg->offset : NULL, DPTR(cx), DPTR(cw),
                      cb ? DPTR(cb) : NULL, cg, relu);
        ld_tensor *in[3] = {cx, w, b};
        ld_node *nd = ld_record(y, pool ? "conv2d_max_pool2d" : "conv2d", bw_conv2d, b ? 3 : 2, in);
        if (nd) {
            double a[8] = {sh, sw, same, relu, pool ? pk[0] : 0, pool ? pk[1] : 0, pool ? pk[2] : 0, pool ? pk[3] : 0};
            for (int i = 0; i < 8; i++) nd->args[i] = a[i];
            /* relu's gradient needs only the output; a plain view, no cycle */
            if (relu) nd->saved[0] = ld_reshape(y, 4, ys);
            if (pool) nd->saved[1] = ld_tensor_retain(arg);
        }
    } else if (y) {
        ld_tensor_release(y);
        y = NULL;
    }
    ld_tensor_release(cx); ld_tensor_release(cw); ld_tensor_release(cb); ld_tensor_release(arg);
    return y;
}

ld_tensor *ld_conv2d_bias_act(ld_tensor *x, ld_tensor *w, ld_tensor *b, int relu, int sh, int sw, int same) {
    return conv_op(x, w, b, relu, sh, sw, same, NULL);
}

ld_tensor *ld_conv2d_pool(ld_tensor *x, ld_tensor *w, ld_tensor *b, int relu, int sh, int sw, int same,
                          int pkh, int pkw, int psh, int psw) {
    int pk[4] = {pkh, pkw, psh, psw};
    if (pkh < 1) { ld_fail(LD_EARG, "pool size and strides must be positive"); return NULL; }
    if (x->ndim == 4 && x->shape[1] * x->shape[2] > INT32_MAX) {   /* arg is an int32 pixel: two ops */
        ld_tensor *y = conv_op(x, w, b, relu, sh, sw, same, NULL);
        ld_tensor *p = y ? ld_maxpool2d(y, pkh, pkw, psh, psw) : NULL;
        ld_tensor_release(y);
        return p;
    }
    return conv_op(x, w, b, relu, sh, sw, same, pk);
}

ld_tensor *ld_conv2d(ld_tensor *x, ld_tensor *w, int sh, int sw, int same) {
    return ld_conv2d_bias_act(x, w, NULL, 0, sh, sw, same);
}

/* Image patches as a differentiable op: col [N*OH*OW, KH*KW*C] in x's
   dtype (float32 or half); its gradient is col2im. A convolution layer is then im2col -> the fused dense op (bias
   written first, relu in place) -> reshape. */
static int bw_im2col(ld_node *nd, ld_tensor *g, ld_tensor **gi) {
    ld_tensor *x = nd->in[0];
    ld_tensor *gc = ld_contiguous(g);
    ld_tensor *dx = gc ? ld_ops_out_empty(x->dtype, 4, x->shape, DEV(x)) : NULL;
    if (dx) BE(x)->col2im(DEV(x), DPTR(dx), dx->dtype, DPTR(gc), gc->dtype, x->shape[0], x->shape[1], x->shape[2],
                          x->shape[3], (int64_t)nd->args[0], (int64_t)nd->args[1], (int64_t)nd->args[2],
                          (int64_t)nd->args[3], (int64_t)nd->args[4], (int64_t)nd->args[5], (int64_t)nd->args[6],
                          (int64_t)nd->args[7]);
    ld_tensor_release(gc);
    gi[0] = dx;
    return dx ? LD_OK : ld_error_status();
}

ld_tensor *ld_im2col(ld_tensor *x, int kh, int kw, int sh, int sw, int same, int64_t *oh_out, int64_t *ow_out) {
    char b1[64];
    if (x->ndim != 4) { ld_fail(LD_ESHAPE, "conv2d needs NHWC input, got %s", ld_shape_str(x, b1, sizeof b1)); return NULL; }
    if (kh < 1 || kw < 1 || sh < 1 || sw < 1) { ld_fail(LD_EARG, "conv2d kernel size and strides must be positive"); return NULL; }
    if (x->dtype != LD_F32 && !ld_dtype_is_half(x->dtype)) {
        ld_fail(LD_ETYPE, "conv2d needs float32, float16 or bfloat16 tensors, got %s", ld_dtype_name(x->dtype));
        return NULL;
    }
    int64_t n = x->shape[0], h = x->shape[1], wd = x->shape[2], c = x->shape[3], oh, ow, ph, pw;
    if (window_geometry(h, wd, kh, kw, sh, sw, same, &oh, &ow, &ph, &pw)) return NULL;
    ld_tensor *cx = ld_ops_contig(x);
    if (!cx) return NULL;
    int64_t cs[2] = {n * oh * ow, (int64_t)kh * kw * c};
    ld_tensor *col = ld_ops_out_empty(x->dtype, 2, cs, DEV(x));
    if (col) {
        BE(x)->im2col(DEV(x), DPTR(col), DPTR(cx), x->dtype, n, h, wd, c, kh, kw, sh, sw, ph, pw, oh, ow);
        ld_tensor *in[1] = {cx};
        ld_node *nd = ld_record(col, "im2col", bw_im2col, 1, in);
        if (nd) {
            double a[8] = {kh, kw, sh, sw, ph, pw, oh, ow};
            for (int i = 0; i < 8; i++) nd->args[i] = a[i];
        }
    }
    ld_tensor_release(cx);
    *oh_out = oh; *ow_out = ow;
    return col;
}

/* The transpose of im2col as an op: patches summed into images, the
   backend's col2im forward; its gradient is im2col of g, the same windows
   (args: kh, kw, sh, sw, ph, pw, oh, ow; the images' shape is g's). col's
   gradient in col's dtype (g widened or rounded to it first: im2col is a
   gather, exact). */
static int bw_col2im(ld_node *nd, ld_tensor *g, ld_tensor **gi) {
    ld_tensor *col = nd->in[0];
    ld_tensor *gc = g->dtype == col->dtype ? ld_contiguous(g) : ld_cast(g, col->dtype);
    ld_tensor *dcol = gc ? ld_ops_out_empty(col->dtype, 2, col->shape, DEV(col)) : NULL;
    if (dcol) BE(col)->im2col(DEV(col), DPTR(dcol), DPTR(gc), gc->dtype, gc->shape[0], gc->shape[1], gc->shape[2],
                              gc->shape[3], (int64_t)nd->args[0], (int64_t)nd->args[1], (int64_t)nd->args[2],
                              (int64_t)nd->args[3], (int64_t)nd->args[4], (int64_t)nd->args[5], (int64_t)nd->args[6],
                              (int64_t)nd->args[7]);
    ld_tensor_release(gc);
    gi[0] = dcol;
    return dcol ? LD_OK : ld_error_status();
}

ld_tensor *ld_col2im(ld_tensor *col, int64_t n, int64_t h, int64_t w, int64_t c, int kh, int kw, int sh, int sw,
                     int same, ld_dtype dt) {
    char b1[64];
    if (kh < 1 || kw < 1 || sh < 1 || sw < 1) { ld_fail(LD_EARG, "col2im: kernel size and strides must be positive"); return NULL; }
    if (n < 0 || h < 1 || w < 1 || c < 1) {
        ld_fail(LD_EARG, "col2im: images [%lld, %lld, %lld, %lld] must have rows, columns and channels", (long long)n,
                (long long)h, (long long)w, (long long)c);
        return NULL;
    }
    if ((col->dtype != LD_F32 && !ld_dtype_is_half(col->dtype)) || (dt != LD_F32 && !ld_dtype_is_half(dt))) {
        ld_fail(LD_ETYPE, "col2im needs float32, float16 or bfloat16 patches and images, got %s and %s",
                ld_dtype_name(col->dtype), ld_dtype_name(dt));
        return NULL;
    }
    int64_t oh, ow, ph, pw;
    if (window_geometry(h, w, kh, kw, sh, sw, same, &oh, &ow, &ph, &pw)) return NULL;
    if (col->ndim != 2 || col->shape[0] != n * oh * ow || col->shape[1] != (int64_t)kh * kw * c) {
        ld_fail(LD_ESHAPE, "col2im: patches of [%lld, %lld, %lld, %lld] images (kernel %dx%d, strides %dx%d) are "
                "[%lld, %lld], got %s", (long long)n, (long long)h, (long long)w, (long long)c, kh, kw, sh, sw,
                (long long)(n * oh * ow), (long long)kh * kw * c, ld_shape_str(col, b1, sizeof b1));
        return NULL;
    }
    ld_tensor *cc = ld_ops_contig(col);
    if (!cc) return NULL;
    /* every element written: a sum over no window (the rows of an output
       padding, or between the windows of a kernel smaller than its stride)
       is zero, in the CPU's kernel and the GPU's */
    int64_t ys[4] = {n, h, w, c};
    ld_tensor *y = ld_ops_out_empty(dt, 4, ys, DEV(cc));
    if (y) {
        BE(cc)->col2im(DEV(cc), DPTR(y), dt, DPTR(cc), cc->dtype, n, h, w, c, kh, kw, sh, sw, ph, pw, oh, ow);
        ld_tensor *in[1] = {cc};
        ld_node *nd = ld_record(y, "col2im", bw_col2im, 1, in);
        if (nd) {
            double a[8] = {kh, kw, sh, sw, (double)ph, (double)pw, (double)oh, (double)ow};
            for (int i = 0; i < 8; i++) nd->args[i] = a[i];
        }
    }
    ld_tensor_release(cc);
    return y;
}

/* ================================================================ max pooling */
/* dx in x's dtype (float32 or half: the float32 sums rounded once), g in any float dtype */
static int bw_maxpool(ld_node *nd, ld_tensor *g, ld_tensor **gi) {
    ld_tensor *x = nd->in[0], *arg = nd->saved[0];
    ld_tensor *gc = ld_contiguous(g);
    ld_tensor *dx = gc ? ld_ops_out_empty(x->dtype, x->ndim, x->shape, DEV(x)) : NULL;
    if (dx) BE(x)->maxpool_backward(DEV(x), DPTR(dx), dx->dtype, DPTR(gc), gc->dtype, arg->storage->data, x->shape[0],
                                    ld_tensor_numel(gc), ld_tensor_numel(x));
    ld_tensor_release(gc);
    gi[0] = dx;
    return dx ? LD_OK : ld_error_status();
}

ld_tensor *ld_maxpool2d(ld_tensor *x, int kh, int kw, int sh, int sw) {
    char b1[64];
    if (x->ndim != 4) {
        ld_fail(LD_ESHAPE, "max_pool2d needs an NHWC input, got shape %s", ld_shape_str(x, b1, sizeof b1));
        return NULL;
    }
    if (kh < 1 || kw < 1 || sh < 1 || sw < 1) { ld_fail(LD_EARG, "pool size and strides must be positive"); return NULL; }
    if (x->shape[1] < kh || x->shape[2] < kw) {
        ld_fail(LD_ESHAPE, "max_pool2d: pool %dx%d is larger than the input %s", kh, kw, ld_shape_str(x, b1, sizeof b1));
        return NULL;
    }
    /* a half x as it is: the maxima are its own values, y in its dtype */
    ld_tensor *fx = ld_as_floating(x), *cx = fx ? ld_ops_contig(fx) : NULL;
    ld_tensor_release(fx);
    if (!cx) return NULL;
    int64_t oh = (cx->shape[1] - kh) / sh + 1, ow = (cx->shape[2] - kw) / sw + 1;
    int64_t ys[4] = {cx->shape[0], oh, ow, cx->shape[3]};
    ld_tensor *y = ld_ops_out_empty(cx->dtype, 4, ys, DEV(cx));
    ld_tensor *arg = y ? ld_ops_out_empty(LD_I64, 4, ys, DEV(cx)) : NULL;
    if (arg) {
        BE(cx)->maxpool(DEV(cx), DPTR(y), arg->storage->data, DPTR(cx), cx->dtype, cx->shape[0], cx->shape[1],
                        cx->shape[2], cx->shape[3], kh, kw, sh, sw, oh, ow);
        ld_tensor *in[1] = {cx};
        ld_node *nd = ld_record(y, "max_pool2d", bw_maxpool, 1, in);
        if (nd) nd->saved[0] = ld_tensor_retain(arg);
    } else {
        ld_tensor_release(y);
        y = NULL;
    }
    ld_tensor_release(arg);
    ld_tensor_release(cx);
    return y;
}

/* TF's SAME max pooling: x with -inf around it (ld_pad_op, TF's split of
   the padding: the extra row or column after), then the valid windows. A
   window always holds an element of x, so the padding never wins (but over
   elements that are -inf themselves, whose maximum it equals) and gets no
   gradient. A half x goes through the padding widened (exact) and comes
   back in its dtype. */
ld_tensor *ld_maxpool2d_same(ld_tensor *x, int kh, int kw, int sh, int sw) {
    char b1[64];
    if (x->ndim != 4) {
        ld_fail(LD_ESHAPE, "max_pool2d needs an NHWC input, got shape %s", ld_shape_str(x, b1, sizeof b1));
        return NULL;
    }
    if (kh < 1 || kw < 1 || sh < 1 || sw < 1) { ld_fail(LD_EARG, "pool size and strides must be positive"); return NULL; }
    int64_t oh, ow, ph, pw;
    ld_ops_same_pad(x->shape[1], kh, sh, &oh, &ph);
    ld_ops_same_pad(x->shape[2], kw, sw, &ow, &pw);
    int64_t th = (oh - 1) * sh + kh - x->shape[1], tw = (ow - 1) * sw + kw - x->shape[2];
    th = th > 0 ? th : 0;
    tw = tw > 0 ? tw : 0;
    ld_tensor *fx = ld_as_floating(x);
    ld_dtype dt = fx ? fx->dtype : LD_F32;
    ld_tensor *f32 = fx ? ld_as_float(fx) : NULL;
    ld_tensor_release(fx);
    ld_tensor *a = f32 ? ld_pad_op(f32, 1, ph, th - ph, -INFINITY) : NULL;
    ld_tensor *b = a ? ld_pad_op(a, 2, pw, tw - pw, -INFINITY) : NULL;
    ld_tensor *y = b ? ld_maxpool2d(b, kh, kw, sh, sw) : NULL;
    ld_tensor_release(f32); ld_tensor_release(a); ld_tensor_release(b);
    if (y && dt != LD_F32) {
        ld_tensor *h = ld_cast_op(y, dt);
        ld_tensor_release(y);
        y = h;
    }
    return y;
}
