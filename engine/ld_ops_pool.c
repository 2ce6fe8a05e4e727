/*
 * ld_ops_pool.c - differentiable average pooling ops (ld_ops_pool.h):
 * argument checks, dispatch to the device's kernels (the pooling family of
 * LD_LAYER_KERNELS, ld_kernels.h: ld_cpu_pool.c, cuda/cuda_pool.cu), and
 * their backward functions. Max pooling goes with the convolution it
 * follows (ld_ops_conv.c, ld_cpu_conv.c, cuda/cuda_conv.cu).
 */
#include "ld_ops_pool.h"
#include "ld_ops.h"
#include "ld_autograd.h"
#include "ld_ops_internal.h"
#include "ld_tensor.h"

/* ================================================================ average pooling */
static int bw_avgpool(ld_node *nd, ld_tensor *g, ld_tensor **gi) {
    ld_tensor *x = nd->in[0];
    ld_tensor *gc = ld_contiguous(g);
    ld_tensor *dx = gc ? ld_ops_out_empty(LD_F32, 4, x->shape, DEV(x)) : NULL;
    if (dx) BE(x)->avgpool_backward(DEV(x), FPTR(dx), FPTR(gc), x->shape[0], x->shape[1], x->shape[2], x->shape[3],
                                    (int64_t)nd->args[0], (int64_t)nd->args[1], (int64_t)nd->args[2],
                                    (int64_t)nd->args[3], (int64_t)nd->args[4], (int64_t)nd->args[5],
                                    (int64_t)nd->args[6], (int64_t)nd->args[7]);
    ld_tensor_release(gc);
    gi[0] = dx;
    return dx ? LD_OK : ld_error_status();
}

ld_tensor *ld_avgpool2d(ld_tensor *x, int kh, int kw, int sh, int sw, int same_padding) {
    char b1[64];
    if (x->ndim != 4) {
        ld_fail(LD_ESHAPE, "avg_pool2d needs an NHWC input, got shape %s", ld_shape_str(x, b1, sizeof b1));
        return NULL;
    }
    if (kh < 1 || kw < 1 || sh < 1 || sw < 1) {
        ld_fail(LD_EARG, "avg_pool2d: pool size %dx%d and strides %dx%d must be positive", kh, kw, sh, sw);
        return NULL;
    }
    if (x->dtype != LD_F32) { ld_fail(LD_ETYPE, "avg_pool2d needs a float32 tensor, got %s", ld_dtype_name(x->dtype)); return NULL; }
    int64_t n = x->shape[0], h = x->shape[1], w = x->shape[2], c = x->shape[3], oh, ow, ph = 0, pw = 0;
    if (same_padding) {
        ld_ops_same_pad(h, kh, sh, &oh, &ph);
        ld_ops_same_pad(w, kw, sw, &ow, &pw);
    } else {
        if (h < kh || w < kw) {
            ld_fail(LD_ESHAPE, "avg_pool2d: pool %dx%d is larger than the input %s (use padding=\"same\")", kh, kw,
                    ld_shape_str(x, b1, sizeof b1));
            return NULL;
        }
        oh = (h - kh) / sh + 1; ow = (w - kw) / sw + 1;
    }
    ld_tensor *cx = ld_ops_contig(x);
    if (!cx) return NULL;
    int64_t ys[4] = {n, oh, ow, c};
    ld_tensor *y = ld_ops_out_empty(LD_F32, 4, ys, DEV(cx));
    if (y) {
        BE(cx)->avgpool(DEV(cx), FPTR(y), FPTR(cx), n, h, w, c, kh, kw, sh, sw, ph, pw, oh, ow);
        ld_tensor *in[1] = {cx};
        ld_node *nd = ld_record(y, "avg_pool2d", bw_avgpool, 1, in);
        if (nd) {
            double a[8] = {kh, kw, sh, sw, (double)ph, (double)pw, (double)oh, (double)ow};
            for (int i = 0; i < 8; i++) nd->args[i] = a[i];
        }
    }
    ld_tensor_release(cx);
    return y;
}

ld_tensor *ld_global_avgpool2d(ld_tensor *x, int keepdims) {
    char b1[64];
    if (x->ndim != 4) {
        ld_fail(LD_ESHAPE, "global_avg_pool2d needs an NHWC input, got shape %s", ld_shape_str(x, b1, sizeof b1));
        return NULL;
    }
    if (x->shape[1] * x->shape[2] == 0) {
        ld_fail(LD_ESHAPE, "global_avg_pool2d of an empty image %s", ld_shape_str(x, b1, sizeof b1));
        return NULL;
    }
    int64_t s3[3] = {x->shape[0], x->shape[1] * x->shape[2], x->shape[3]};
    ld_tensor *r = ld_reshape_op(x, 3, s3);
    ld_tensor *m = r ? ld_mean(r, 1, 0) : NULL;
    ld_tensor_release(r);
    if (!m || !keepdims) return m;
    int64_t s4[4] = {x->shape[0], 1, 1, x->shape[3]};
    ld_tensor *y = ld_reshape_op(m, 4, s4);
    ld_tensor_release(m);
    return y;
}
