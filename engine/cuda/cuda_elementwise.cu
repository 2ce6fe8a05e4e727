/*
 * cuda_elementwise.cu - binary ops with broadcasting strides, unary ops and
 * their derivatives. The formulas are ld_elementwise_math.h's,
 * the CPU backend's too (ld_cpu.c), so the two agree to rounding. Each
 * kernel is templated on the storage type T of its tensors (float32,
 * float16, bfloat16: cuda_common.cuh), computing in float32 and rounding
 * once, so a half op is one kernel, not a cast, the op and a cast.
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
template <int OP, typename T>
__global__ void k_bin_flat(T *out, const T *a, int64_t as, const T *b, int64_t bs, int64_t n) {
    CU_LOOP(i, n) out[i] = cu_put<T>(ld_ew_binary((ld_binary_op)OP, cu_get(a[i * as]), cu_get(b[i * bs])));
}

/* any dims; I is the index type (32-bit where every offset fits) */
template <int OP, typename I, typename T>
__global__ void k_bin_nd(T *out, const T *a, const T *b, bin_geom g, int64_t n) {
    CU_LOOP(i, n) {
        I r = (I)i, oa = 0, ob = 0;
        for (int d = g.nd - 1; d >= 0; d--) {
            I s = (I)g.shape[d];
            I q = r / s, c = r - q * s;
            oa += c * (I)g.sa[d];
            ob += c * (I)g.sb[d];
            r = q;
        }
        out[i] = cu_put<T>(ld_ew_binary((ld_binary_op)OP, cu_get(a[oa]), cu_get(b[ob])));
    }
}

template <int OP, typename T>
static void launch_bin(cu_dev *cd, void *out, const void *a, const void *b, const bin_geom &g, int64_t n,
                       int small) {
    unsigned grid = cu_grid(n, 256);
    if (g.nd <= 1) {
        int64_t as = g.nd ? g.sa[0] : 0, bs = g.nd ? g.sb[0] : 0;
        k_bin_flat<OP, T><<<grid, 256, 0, cd->stream>>>((T *)out, (const T *)a, as, (const T *)b, bs, n);
    } else if (small) {
        k_bin_nd<OP, int32_t, T><<<grid, 256, 0, cd->stream>>>((T *)out, (const T *)a, (const T *)b, g, n);
    } else {
        k_bin_nd<OP, int64_t, T><<<grid, 256, 0, cd->stream>>>((T *)out, (const T *)a, (const T *)b, g, n);
    }
    cu_launched(cd, "binary kernel");
}

/* a case of cu_binary's switch for each op of the list */
#define BIN_CASE(E, name) \
    case LD_BIN_##E: launch_bin<LD_BIN_##E, T>(cd, out, a, b, g, n, small); break;
void cu_binary(ld_device *d, ld_binary_op op, ld_dtype dt, void *out, const void *a, const int64_t *sa, const void *b,
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
    CU_FLOAT_TYPES(dt, T, {
        switch (op) {
        LD_BINARY_OPS(BIN_CASE)
        default: cu_record_msg(cd, "binary: unknown op"); break;
        }
    });
}
#undef BIN_CASE

/* ================================================================ select */
/* tf.where: out[i] = cond ? a : b, elements of E (the dtype's size: copied,
   never computed), the condition's truth by ld_ew_truthy as on the CPU */
struct sel_geom {
    int nd;
    int64_t shape[MAXD], sc[MAXD], sa[MAXD], sb[MAXD];
};
template <typename E>
__global__ void k_select(E *out, const void *c, ld_dtype cdt, const E *a, const E *b, sel_geom g, int64_t n) {
    CU_LOOP(i, n) {
        int64_t r = i, oc = 0, oa = 0, ob = 0;
        for (int d = g.nd - 1; d >= 0; d--) {
            int64_t q = r / g.shape[d], k = r - q * g.shape[d];
            oc += k * g.sc[d];
            oa += k * g.sa[d];
            ob += k * g.sb[d];
            r = q;
        }
        out[i] = ld_ew_truthy(c, cdt, oc) ? a[oa] : b[ob];
    }
}

void cu_select(ld_device *d, ld_dtype dt, void *out, const void *cond, ld_dtype cdt, const int64_t *sc, const void *a,
               const int64_t *sa, const void *b, const int64_t *sb, int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    if (n <= 0) return;
    cu_dev *cd = cu_begin(d);
    if (!cd) return;
    sel_geom g;
    g.nd = 0;
    for (int i = 0; i < ndim; i++) {      /* size-1 axes drop out */
        if (shape[i] == 1) continue;
        g.shape[g.nd] = shape[i];
        g.sc[g.nd] = sc[i];
        g.sa[g.nd] = sa[i];
        g.sb[g.nd] = sb[i];
        g.nd++;
    }
    unsigned grid = cu_grid(n, 256);
    switch (cu_dtype_size(dt)) {
    case 1: k_select<uint8_t><<<grid, 256, 0, cd->stream>>>((uint8_t *)out, cond, cdt, (const uint8_t *)a, (const uint8_t *)b, g, n); break;
    case 2: k_select<uint16_t><<<grid, 256, 0, cd->stream>>>((uint16_t *)out, cond, cdt, (const uint16_t *)a, (const uint16_t *)b, g, n); break;
    case 4: k_select<uint32_t><<<grid, 256, 0, cd->stream>>>((uint32_t *)out, cond, cdt, (const uint32_t *)a, (const uint32_t *)b, g, n); break;
    default: k_select<uint64_t><<<grid, 256, 0, cd->stream>>>((uint64_t *)out, cond, cdt, (const uint64_t *)a, (const uint64_t *)b, g, n); break;
    }
    cu_launched(cd, "select kernel");
}

/* ================================================================ unary */
template <typename T>
__global__ void k_unary(int op, T *y, const T *x, int64_t n) {
    CU_LOOP(i, n) y[i] = cu_put<T>(ld_ew_unary((ld_unary_op)op, cu_get(x[i])));
}

void cu_unary(ld_device *d, ld_unary_op op, ld_dtype dt, void *y, const void *x, int64_t n) {
    if (n <= 0) return;
    cu_dev *cd = cu_begin(d);
    if (!cd) return;
    CU_FLOAT_TYPES(dt, T, k_unary<T><<<cu_grid(n, 256), 256, 0, cd->stream>>>((int)op, (T *)y, (const T *)x, n));
    cu_launched(cd, "unary kernel");
}

/* dx = dy * f'(x); x and y are read where the derivative uses them (NULL otherwise) */
template <typename T>
__global__ void k_unary_backward(int op, T *dx, const T *dy, const T *x, const T *y, int64_t n) {
    CU_LOOP(i, n) {
        ld_unary_op o = (ld_unary_op)op;
        dx[i] = cu_put<T>(ld_ew_unary_grad(o, cu_get(dy[i]), ld_ew_grad_uses_x(o) ? cu_get(x[i]) : 0.0f,
                                           ld_ew_grad_uses_y(o) ? cu_get(y[i]) : 0.0f));
    }
}

void cu_unary_backward(ld_device *d, ld_unary_op op, ld_dtype dt, void *dx, const void *dy, const void *x,
                       const void *y, int64_t n) {
    if (n <= 0) return;
    cu_dev *cd = cu_begin(d);
    if (!cd) return;
    if ((ld_ew_grad_uses_y(op) && !y) || (ld_ew_grad_uses_x(op) && !x)) {
        cu_record_msg(cd, "unary_backward: a needed input is missing");
        return;
    }
    CU_FLOAT_TYPES(dt, T, k_unary_backward<T><<<cu_grid(n, 256), 256, 0, cd->stream>>>((int)op, (T *)dx, (const T *)dy,
                                                                                       (const T *)x, (const T *)y, n));
    cu_launched(cd, "unary_backward kernel");
}

