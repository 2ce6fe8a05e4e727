/*
 * cuda_elementwise.cu - binary ops with broadcasting strides, unary ops and
 * their derivatives, y += a*x. The formulas are ld_elementwise_math.h's,
 * the CPU backend's too (ld_cpu.c), so the two agree to rounding.
 */
#include "cuda_common.cuh"
#include "ld_elementwise_math.h"

#define MAXD LD_MAX_DIMS

/* ================================================================ binary */
struct bin_geom {
    int nd;
    int64_t shape[MAXD], sa[MAXD], sb[MAXD];
};

/* one dimension: out[i] = a[i*as] op b[i*bs] (as, bs in {0, 1, other}) */
template <int OP>
__global__ void k_bin_flat(float *out, const float *a, int64_t as, const float *b, int64_t bs, int64_t n) {
    CU_LOOP(i, n) out[i] = ld_ew_binary((ld_binary_op)OP, a[i * as], b[i * bs]);
}

/* any dims; I is the index type (32-bit where every offset fits) */
template <int OP, typename I>
__global__ void k_bin_nd(float *out, const float *a, const float *b, bin_geom g, int64_t n) {
    CU_LOOP(i, n) {
        I r = (I)i, oa = 0, ob = 0;
        for (int d = g.nd - 1; d >= 0; d--) {
            I s = (I)g.shape[d];
            I q = r / s, c = r - q * s;
            oa += c * (I)g.sa[d];
            ob += c * (I)g.sb[d];
            r = q;
        }
        out[i] = ld_ew_binary((ld_binary_op)OP, a[oa], b[ob]);
    }
}

template <int OP>
static void launch_bin(cu_dev *cd, float *out, const float *a, const float *b, const bin_geom &g, int64_t n,
                       int small) {
    unsigned grid = cu_grid(n, 256);
    if (g.nd <= 1) {
        int64_t as = g.nd ? g.sa[0] : 0, bs = g.nd ? g.sb[0] : 0;
        k_bin_flat<OP><<<grid, 256, 0, cd->stream>>>(out, a, as, b, bs, n);
    } else if (small) {
        k_bin_nd<OP, int32_t><<<grid, 256, 0, cd->stream>>>(out, a, b, g, n);
    } else {
        k_bin_nd<OP, int64_t><<<grid, 256, 0, cd->stream>>>(out, a, b, g, n);
    }
    cu_launched(cd, "binary kernel");
}

void cu_binary(ld_device *d, ld_binary_op op, float *out, const float *a, const int64_t *sa, const float *b,
               const int64_t *sb, int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    if (n <= 0) return;
    cu_dev *cd = cu_begin(d);
    if (!cd) return;
    /* merge dims contiguous in both operands (out is contiguous); drop size 1 */
    bin_geom g;
    g.nd = 0;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == 1) continue;
        int k = g.nd - 1;
        if (g.nd && g.sa[k] == sa[i] * shape[i] && g.sb[k] == sb[i] * shape[i]) {
            g.shape[k] *= shape[i];
            g.sa[k] = sa[i];
            g.sb[k] = sb[i];
        } else {
            g.shape[g.nd] = shape[i];
            g.sa[g.nd] = sa[i];
            g.sb[g.nd] = sb[i];
            g.nd++;
        }
    }
    /* do 32-bit indices reach every element? */
    int64_t ma = 0, mb = 0;
    for (int i = 0; i < g.nd; i++) {
        ma += (g.shape[i] - 1) * (g.sa[i] < 0 ? -g.sa[i] : g.sa[i]);
        mb += (g.shape[i] - 1) * (g.sb[i] < 0 ? -g.sb[i] : g.sb[i]);
    }
    int small = n < INT32_MAX && ma < INT32_MAX && mb < INT32_MAX;
    for (int i = 0; i < g.nd; i++) if (g.sa[i] < 0 || g.sb[i] < 0) small = 0;
    switch (op) {
    case LD_BIN_ADD: launch_bin<LD_BIN_ADD>(cd, out, a, b, g, n, small); break;
    case LD_BIN_SUB: launch_bin<LD_BIN_SUB>(cd, out, a, b, g, n, small); break;
    case LD_BIN_MUL: launch_bin<LD_BIN_MUL>(cd, out, a, b, g, n, small); break;
    case LD_BIN_DIV: launch_bin<LD_BIN_DIV>(cd, out, a, b, g, n, small); break;
    case LD_BIN_POW: launch_bin<LD_BIN_POW>(cd, out, a, b, g, n, small); break;
    case LD_BIN_MAX: launch_bin<LD_BIN_MAX>(cd, out, a, b, g, n, small); break;
    case LD_BIN_MIN: launch_bin<LD_BIN_MIN>(cd, out, a, b, g, n, small); break;
    case LD_BIN_EQ: launch_bin<LD_BIN_EQ>(cd, out, a, b, g, n, small); break;
    case LD_BIN_LT: launch_bin<LD_BIN_LT>(cd, out, a, b, g, n, small); break;
    case LD_BIN_GT: launch_bin<LD_BIN_GT>(cd, out, a, b, g, n, small); break;
    default: cu_record_msg(cd, "binary: unknown op"); break;
    }
}

/* ================================================================ unary */
__global__ void k_unary(int op, float *y, const float *x, int64_t n) {
    CU_LOOP(i, n) y[i] = ld_ew_unary((ld_unary_op)op, x[i]);
}

void cu_unary(ld_device *d, ld_unary_op op, float *y, const float *x, int64_t n) {
    if (n <= 0) return;
    cu_dev *cd = cu_begin(d);
    if (!cd) return;
    k_unary<<<cu_grid(n, 256), 256, 0, cd->stream>>>((int)op, y, x, n);
    cu_launched(cd, "unary kernel");
}

/* dx = dy * f'(x); x and y are read where the derivative uses them (NULL otherwise) */
__global__ void k_unary_backward(int op, float *dx, const float *dy, const float *x, const float *y, int64_t n) {
    CU_LOOP(i, n) {
        ld_unary_op o = (ld_unary_op)op;
        dx[i] = ld_ew_unary_grad(o, dy[i], ld_ew_grad_uses_x(o) ? x[i] : 0.0f, ld_ew_grad_uses_y(o) ? y[i] : 0.0f);
    }
}

void cu_unary_backward(ld_device *d, ld_unary_op op, float *dx, const float *dy, const float *x, const float *y,
                       int64_t n) {
    if (n <= 0) return;
    cu_dev *cd = cu_begin(d);
    if (!cd) return;
    if ((ld_ew_grad_uses_y(op) && !y) || (ld_ew_grad_uses_x(op) && !x)) {
        cu_record_msg(cd, "unary_backward: a needed input is missing");
        return;
    }
    k_unary_backward<<<cu_grid(n, 256), 256, 0, cd->stream>>>((int)op, dx, dy, x, y, n);
    cu_launched(cd, "unary_backward kernel");
}

