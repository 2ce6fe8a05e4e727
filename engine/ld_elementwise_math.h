/*
 * ld_elementwise_math.h - the formulas of the elementwise ops (LD_BINARY_OPS,
 * LD_UNARY_OPS and their derivatives), shared by the CPU loops (ld_cpu.c)
 * and the CUDA kernels (cuda/cuda_elementwise.cu) so that both backends
 * take one definition. Plain C; under nvcc the functions are
 * __host__ __device__. Called with a constant op inside a loop, the switch
 * folds away and the loop still vectorises.
 *
 * NaN follows IEEE 754 and TensorFlow: NaN in, NaN out. maximum, minimum
 * and relu return NaN when an operand is NaN (C's fmaxf would drop it, and
 * a plain `a > b ? a : b` returns b), so a clip built from them keeps NaN,
 * as tf.clip_by_value does.
 */
#ifndef LD_ELEMENTWISE_MATH_H
#define LD_ELEMENTWISE_MATH_H

#include <math.h>
#include "ld_device.h"

#ifdef __CUDACC__
#define LD_EW_FN static inline __host__ __device__
#else
#define LD_EW_FN static inline
#endif

/* the larger / smaller of a and b, NaN when either is NaN */
LD_EW_FN float ld_ew_max(float a, float b) { return (a != a || a > b) ? a : b; }
LD_EW_FN float ld_ew_min(float a, float b) { return (a != a || a < b) ? a : b; }
/* Does v replace best in a running maximum (max pooling, max reductions)?
   When it is larger, or when it is the first NaN: NaN wins wherever it sits
   in the window (PyTorch's rule; TF's max_pool drops NaN, its reduce_max
   keeps it). */
LD_EW_FN int ld_ew_max_wins(float v, float best) { return v > best || (v != v && best == best); }
/* One step of a cumulative sum or product (the scan kernel): the running
   value *acc takes v; the step's result is the value after it, or before
   it when exclusive (the first: 0 for a sum, 1 for a product). */
LD_EW_FN float ld_ew_scan_init(ld_scan_op op) { return op == LD_SCAN_PROD ? 1.0f : 0.0f; }
LD_EW_FN float ld_ew_scan_step(float *acc, float v, ld_scan_op op, int exclusive) {
    float before = *acc;
    *acc = op == LD_SCAN_PROD ? before * v : before + v;
    return exclusive ? before : *acc;
}
/* max(x, 0) with NaN kept (tf.nn.relu(nan) is nan) */
LD_EW_FN float ld_ew_relu(float x) { return x < 0 ? 0.0f : x; }
/* log(1 + e^x) without overflow (TF's softplus: x for large x, e^x for very negative x) */
LD_EW_FN float ld_ew_softplus(float x) { return x > 0 ? x + log1pf(expf(-x)) : log1pf(expf(x)); }
LD_EW_FN float ld_ew_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
/* Keras's hard_sigmoid: clip(x / 6 + 1/2, 0, 1), NaN kept */
LD_EW_FN float ld_ew_hard_sigmoid(float x) { return ld_ew_min(ld_ew_max(x * (1.0f / 6.0f) + 0.5f, 0.0f), 1.0f); }
/* SELU's constants (Klambauer et al., Keras's) */
#define LD_EW_SELU_ALPHA 1.67326324235437728481f
#define LD_EW_SELU_SCALE 1.05070098735548049342f
#define LD_EW_LEAKY_SLOPE 0.2f   /* Keras 3's leaky_relu negative_slope (tf.nn.leaky_relu's alpha) */

/* Is element i of a condition tensor in dtype dt true (tf.where's test,
   NumPy's truth)? Nonzero: for floats any bits but the sign's, so -0 is
   false and NaN true. */
LD_EW_FN int ld_ew_truthy(const void *c, ld_dtype dt, int64_t i) {
    switch (dt) {
    case LD_F32: return (((const unsigned int *)c)[i] & 0x7fffffffu) != 0;
    case LD_F16: case LD_BF16: return (((const unsigned short *)c)[i] & 0x7fffu) != 0;
    case LD_I32: return ((const int *)c)[i] != 0;
    case LD_I64: return ((const long long *)c)[i] != 0;
    default: return ((const unsigned char *)c)[i] != 0;
    }
}

LD_EW_FN float ld_ew_binary(ld_binary_op op, float a, float b) {
    switch (op) {
    case LD_BIN_ADD: return a + b;
    case LD_BIN_SUB: return a - b;
    case LD_BIN_MUL: return a * b;
    case LD_BIN_DIV: return a / b;
    case LD_BIN_POW: return powf(a, b);
    case LD_BIN_MAX: return ld_ew_max(a, b);
    case LD_BIN_MIN: return ld_ew_min(a, b);
    case LD_BIN_EQ: return a == b;   /* comparisons with NaN are false (0), as in TF */
    case LD_BIN_LT: return a < b;
    case LD_BIN_GT: return a > b;
    case LD_BIN_NE: return a != b;   /* NaN differs from everything, itself included (TF's not_equal) */
    case LD_BIN_LE: return a <= b;
    case LD_BIN_GE: return a >= b;
    default: return 0;
    }
}

LD_EW_FN float ld_ew_unary(ld_unary_op op, float x) {
    switch (op) {
    case LD_UN_NEG: return -x;
    case LD_UN_EXP: return expf(x);
    case LD_UN_LOG: return logf(x);
    case LD_UN_SQRT: return sqrtf(x);
    case LD_UN_ABS: return fabsf(x);
    case LD_UN_RELU: return ld_ew_relu(x);
    case LD_UN_SIGMOID: return 1.0f / (1.0f + expf(-x));
    case LD_UN_TANH: return tanhf(x);
    case LD_UN_GELU: return 0.5f * x * (1.0f + erff(x * 0.70710678f));   /* exact (erf) GELU, Keras' default */
    case LD_UN_SQUARE: return x * x;
    case LD_UN_ELU: return x > 0 ? x : expm1f(x);
    case LD_UN_SELU: return LD_EW_SELU_SCALE * (x > 0 ? x : LD_EW_SELU_ALPHA * expm1f(x));
    case LD_UN_SOFTPLUS: return ld_ew_softplus(x);
    case LD_UN_SOFTSIGN: return x / (1.0f + fabsf(x));
    case LD_UN_SILU: return x * ld_ew_sigmoid(x);
    case LD_UN_LEAKY_RELU: return x < 0 ? LD_EW_LEAKY_SLOPE * x : x;
    case LD_UN_RELU6: return ld_ew_min(ld_ew_max(x, 0.0f), 6.0f);
    case LD_UN_HARD_SIGMOID: return ld_ew_hard_sigmoid(x);
    case LD_UN_HARD_SILU: return x * ld_ew_hard_sigmoid(x);
    case LD_UN_MISH: return x * tanhf(ld_ew_softplus(x));
    case LD_UN_SIN: return sinf(x);
    case LD_UN_COS: return cosf(x);
    case LD_UN_FLOOR: return floorf(x);
    case LD_UN_CEIL: return ceilf(x);
    case LD_UN_ROUND: return rintf(x);            /* half to even (the default rounding mode), as tf.round */
    case LD_UN_SIGN: return x > 0 ? 1.0f : (x < 0 ? -1.0f : x);   /* NaN stays NaN, as TF's */
    case LD_UN_RECIPROCAL: return 1.0f / x;
    case LD_UN_LOG1P: return log1pf(x);
    case LD_UN_EXPM1: return expm1f(x);
    case LD_UN_RSQRT: return 1.0f / sqrtf(x);
    case LD_UN_ERF: return erff(x);
    default: return 0;
    }
}

/* Which of x and y = f(x) an op's derivative reads (the forward keeps y for
   those that use it; a backend reads neither pointer otherwise). */
LD_EW_FN int ld_ew_grad_uses_y(ld_unary_op op) {
    return op == LD_UN_EXP || op == LD_UN_SQRT || op == LD_UN_SIGMOID || op == LD_UN_TANH || op == LD_UN_RECIPROCAL ||
           op == LD_UN_RSQRT;
}
LD_EW_FN int ld_ew_grad_uses_x(ld_unary_op op) { return op != LD_UN_NEG && !ld_ew_grad_uses_y(op); }

/* dx = dy * f'(x), reading x and y as the two functions above say (the
   others may be anything). relu's and abs's masks are TF's: the
   gradient is dy where x > 0 (abs: -dy where x < 0), else 0. */
LD_EW_FN float ld_ew_unary_grad(ld_unary_op op, float dy, float x, float y) {
    switch (op) {
    case LD_UN_NEG: return -dy;
    case LD_UN_EXP: return dy * y;
    case LD_UN_LOG: return dy / x;
    case LD_UN_SQRT: return dy * 0.5f / y;
    case LD_UN_ABS: return x > 0 ? dy : (x < 0 ? -dy : 0);
    case LD_UN_RELU: return x > 0 ? dy : 0;
    case LD_UN_SIGMOID: return dy * y * (1 - y);
    case LD_UN_TANH: return dy * (1 - y * y);
    case LD_UN_GELU: {
        float cdf = 0.5f * (1.0f + erff(x * 0.70710678f));
        float pdf = 0.39894228f * expf(-0.5f * x * x);
        return dy * (cdf + x * pdf);
    }
    case LD_UN_SQUARE: return dy * 2 * x;
    /* TF's EluGrad and SeluGrad: the slope of the negative side where x < 0 only */
    case LD_UN_ELU: return x < 0 ? dy * expf(x) : dy;
    case LD_UN_SELU: return dy * LD_EW_SELU_SCALE * (x < 0 ? LD_EW_SELU_ALPHA * expf(x) : 1.0f);
    case LD_UN_SOFTPLUS: return dy * ld_ew_sigmoid(x);
    case LD_UN_SOFTSIGN: { float d = 1.0f + fabsf(x); return dy / (d * d); }
    case LD_UN_SILU: { float s = ld_ew_sigmoid(x); return dy * s * (1.0f + x * (1.0f - s)); }
    case LD_UN_LEAKY_RELU: return x > 0 ? dy : LD_EW_LEAKY_SLOPE * dy;
    case LD_UN_RELU6: return x > 0 && x < 6 ? dy : 0;   /* TF's Relu6Grad */
    case LD_UN_HARD_SIGMOID: return x > -3 && x < 3 ? dy * (1.0f / 6.0f) : 0;
    case LD_UN_HARD_SILU: return x <= -3 ? 0 : (x >= 3 ? dy : dy * (2.0f * x + 3.0f) * (1.0f / 6.0f));
    case LD_UN_MISH: {
        float t = tanhf(ld_ew_softplus(x));
        return dy * (t + x * (1.0f - t * t) * ld_ew_sigmoid(x));
    }
    case LD_UN_SIN: return dy * cosf(x);
    case LD_UN_COS: return -dy * sinf(x);
    /* floor, ceil, round and sign are flat: no gradient (TF: None for the
       first three, zeros for sign), zeros here */
    case LD_UN_FLOOR: case LD_UN_CEIL: case LD_UN_ROUND: case LD_UN_SIGN: return 0;
    case LD_UN_RECIPROCAL: return -dy * y * y;   /* TF's ReciprocalGrad */
    case LD_UN_LOG1P: return dy / (1.0f + x);
    case LD_UN_EXPM1: return dy * expf(x);
    case LD_UN_RSQRT: return dy * -0.5f * (y * y * y);   /* TF's RsqrtGrad */
    case LD_UN_ERF: return dy * 1.12837917f * expf(-x * x);   /* 2 / sqrt(pi) */
    default: return 0;
    }
}

#endif
