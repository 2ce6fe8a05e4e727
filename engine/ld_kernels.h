/*
 * ld_kernels.h - every kernel of a device backend, declared once.
 *
 * LD_KERNELS(X) lists the kernel slots of ld_backend (ld_device.h), one line
 * each: X(name, params...), a param being (V, type, name) for a value or
 * (D, int64_t, name) for an array of `ndim` sizes or strides (the kernel
 * gets a `const int64_t *`; the executor copies the ndim elements when it
 * queues the call). From the list come the slots of ld_backend, the CPU
 * table (cpu_<name>, ld_cpu.c), the CUDA table and its declarations
 * (cu_<name>, engine/cuda/), and the executor's proxy of each kernel (an
 * argument struct, a run function, a queuing function: ld_executor.c).
 *
 * Adding a kernel: one line here (in its family's block of
 * LD_LAYER_KERNELS), cpu_<name> in the family's ld_cpu_<family>.c,
 * cu_<name> in engine/cuda/cuda_<family>.cu, a case in tests/ops/test_ops.lua
 * (run on cpu:1 by `make test`, on a GPU by `make test-gpu`; it fails on a
 * kernel no case calls). Adding an elementwise op: one line in
 * LD_BINARY_OPS or LD_UNARY_OPS, its formula and derivative in
 * ld_elementwise_math.h (both backends call them), its docstring in
 * lua_bindings/tensor.c; the Tensor method, tensor.unary_ops/binary_ops and
 * the op tests' cases follow from the list.
 *
 * Kernels take contiguous float32 buffers unless stated otherwise; sizes are
 * element counts. The order of the list is the order of the slots.
 */
#ifndef LD_KERNELS_H
#define LD_KERNELS_H

/* The geometry of a 2-d convolution over NHWC images with an HWIO kernel:
   n images h x w x c, kernel kh x kw, f filters, strides sh/sw, padding
   ph/pw before (TF "same"; the rest of the padding after), output oh x ow;
   with pkh > 0, a max pooling (valid) of pkh x pkw, strides psh/psw, to
   poh x pow follows it. half (0 for float32): a Conv2D under a half autocast
   (LD_F16, LD_BF16): its images (x, y; dy, dx backward) are in that dtype,
   and the forward computes as the layer does in it: the float32 sums of
   exact products rounded, the bias (half-valued) added and the result
   rounded again, then relu and the pooling. */
typedef struct {
    int64_t n, h, w, c, kh, kw, sh, sw, ph, pw, oh, ow, f;
    int64_t pkh, pkw, psh, psw, poh, pow;
    int half;
} ld_conv_geom;

/* A batch of variables for opt_update, all on one device and under one
   rule (Keras's: ld_optim.h), as PyTorch's multi-tensor ("foreach") Adam
   steps them: one kernel launch (or one split over the CPU's pool) per
   LD_OPT_BATCH variables instead of one per variable. The slots s[] are
   ld_slot's s[0..2], NULL where the rule keeps none:
     LD_UPD_SGD      s[0] the momentum's velocity (NULL: plain SGD)
     LD_UPD_ADAM     s[0] m, s[1] v, s[2] amsgrad's running maximum of v
     LD_UPD_RMSPROP  s[0] the mean square, s[1] the momentum's velocity,
                     s[2] the centered variant's mean gradient
     LD_UPD_ADAGRAD  s[0] the accumulator
     LD_UPD_ADAMAX   s[0] m, s[1] u (the weighted infinity norm)
     LD_UPD_NADAM    s[0] m, s[1] v
     LD_UPD_LION     s[0] m
     LD_UPD_ADADELTA s[0] the gradients' mean square, s[1] the steps'
     LD_UPD_FTRL     s[0] the accumulator, s[1] the linear term
   Each gradient is used as g * gscale (1: as it is; the loss scale's
   unscaling and clipnorm's factor otherwise), the product rounded to
   float32 before the rule, as a separate multiply would. The item table
   travels by value: it fits a CUDA kernel's 4 KB of parameters. */
typedef enum { LD_UPD_SGD = 0, LD_UPD_ADAM, LD_UPD_RMSPROP, LD_UPD_ADAGRAD, LD_UPD_ADAMAX, LD_UPD_NADAM, LD_UPD_LION,
               LD_UPD_ADADELTA, LD_UPD_FTRL } ld_update_rule;
#define LD_OPT_BATCH 48
typedef struct {
    float *w;          /* the variable [n] */
    float *s[3];       /* its slots [n] (above) */
    const float *g;    /* its gradient [n] */
    int64_t n;
    float gscale;
} ld_opt_item;
/* the rule and its hyperparameters for one step. Every rule: wd, Keras 3's
   weight decay (decoupled: w -= lr wd w before the step). SGD: lr,
   momentum, nesterov; Adam: b1, b2, eps, alpha = lr sqrt(1 - b2^t) /
   (1 - b1^t) (the host's double, rounded); RMSprop: lr, rho, momentum, eps;
   Adagrad: lr, eps; Adamax: lr, b1, b2, eps, bc1 = 1 - b1^t; Nadam: lr, b1,
   b2, eps, mu = mu_t, mu1 = mu_{t+1}, bc1 = 1 - mu_1 ... mu_t, bc1n = 1 -
   mu_1 ... mu_{t+1}, bc2 = 1 - b2^t; Lion: lr, b1, b2; Adadelta: lr, rho,
   eps; Ftrl: lr, lrp = -learning_rate_power, l1, l2x2 = 2 (l2 + beta /
   (2 lr)), shrink = 2 l2_shrinkage (float32, as Keras's ops round them) */
typedef struct {
    ld_update_rule rule;
    float lr, momentum, b1, b2, eps, rho, wd, alpha;
    float mu, mu1, bc1, bc1n, bc2;
    float lrp, l1, l2x2, shrink;
    int nesterov;
} ld_opt_hyper;
typedef struct {
    ld_opt_hyper h;
    int n;             /* items used */
    ld_opt_item item[LD_OPT_BATCH];
} ld_opt_batch;
/* A batch of tensors for nonfinite_flags (the loss scale's check of a
   step's gradients, as PyTorch's multi-tensor non-finite check): x [n]
   in dt (float32 or a half dtype). */
typedef struct {
    const void *x;
    ld_dtype dt;
    int64_t n;
} ld_check_item;
typedef struct {
    int n;
    ld_check_item item[LD_OPT_BATCH];
} ld_check_batch;

/* ================================================================ the lists */
/* Elementwise binary ops (broadcasting is done at the tensor level):
   X(ENUM, name) gives LD_BIN_ENUM and the op's name in messages. */
#define LD_BINARY_OPS(X) \
    X(ADD, add) X(SUB, sub) X(MUL, mul) X(DIV, div) X(POW, pow) X(MAX, maximum) X(MIN, minimum) \
    X(EQ, eq) X(LT, lt) X(GT, gt) X(NE, ne) X(LE, le) X(GE, ge)

#define LD_UNARY_OPS(X) \
    X(NEG, neg) X(EXP, exp) X(LOG, log) X(SQRT, sqrt) X(ABS, abs) X(RELU, relu) X(SIGMOID, sigmoid) \
    X(TANH, tanh) X(GELU, gelu) X(SQUARE, square) \
    /* Keras's other activations (keras.activations, their default constants) */ \
    X(ELU, elu) X(SELU, selu) X(SOFTPLUS, softplus) X(SOFTSIGN, softsign) X(SILU, silu) \
    X(LEAKY_RELU, leaky_relu) X(RELU6, relu6) X(HARD_SIGMOID, hard_sigmoid) X(HARD_SILU, hard_silu) X(MISH, mish) \
    /* TF's math (tf.math: sin, cos, floor, ...) */ \
    X(SIN, sin) X(COS, cos) X(FLOOR, floor) X(CEIL, ceil) X(ROUND, round) X(SIGN, sign) X(RECIPROCAL, reciprocal) \
    X(LOG1P, log1p) X(EXPM1, expm1) X(RSQRT, rsqrt) X(ERF, erf)

#define LD_KERNELS(X) \
    /* Strided copy with dtype conversion: dst is contiguous, src described  \
       by shape/strides (elements) starting at src (already offset). */      \
    X(copy_strided, (V, void *, dst), (V, ld_dtype, ddt), (V, const void *, src), (V, ld_dtype, sdt),           \
      (V, int, ndim), (D, int64_t, shape), (D, int64_t, sstrides))                                              \
    X(fill, (V, void *, dst), (V, ld_dtype, dt), (V, int64_t, n), (V, double, v))                               \
    /* out[i] = a[ia] op b[ib] over `shape`; strides of a/b are 0 on        \
       broadcast dims; out contiguous. out, a and b in dt: float32, or      \
       float16/bfloat16 computed in float32 and rounded once (the elementwise \
       kernels below likewise). */                                           \
    X(binary, (V, ld_binary_op, op), (V, ld_dtype, dt), (V, void *, out), (V, const void *, a),                 \
      (D, int64_t, sa), (V, const void *, b), (D, int64_t, sb), (V, int, ndim), (D, int64_t, shape))           \
    X(unary, (V, ld_unary_op, op), (V, ld_dtype, dt), (V, void *, y), (V, const void *, x), (V, int64_t, n))    \
    /* dx = dy * f'(x) (y = f(x) also given, for sigmoid/tanh); all in dt */ \
    X(unary_backward, (V, ld_unary_op, op), (V, ld_dtype, dt), (V, void *, dx), (V, const void *, dy),         \
      (V, const void *, x), (V, const void *, y), (V, int64_t, n))                                              \
    /* out[i] = cond[ic] ? a[ia] : b[ib] over `shape` (tf.where), strides  \
       of cond/a/b 0 on broadcast dims; out contiguous. a, b and out in dt \
       (any dtype: elements are copied, never computed); cond in cdt, true \
       where nonzero (ld_ew_truthy: a float NaN is true, -0 false). */      \
    X(select, (V, ld_dtype, dt), (V, void *, out), (V, const void *, cond), (V, ld_dtype, cdt),                \
      (D, int64_t, sc), (V, const void *, a), (D, int64_t, sa), (V, const void *, b), (D, int64_t, sb),         \
      (V, int, ndim), (D, int64_t, shape))                                                                      \
    /* Reduce the middle axis of a contiguous [outer, n, inner] array. For  \
       LD_RED_ARGMAX `out` holds int64; else each float32 result is rounded \
       to rdt's precision (LD_F32: as it is; a half dtype: once) and stored \
       in odt (float32, or a half dtype holding it exactly): a half sum     \
       written in its dtype, or a half bias's gradient in its float32       \
       variable's, without a conversion after. x in xdt (float32 or a half  \
       dtype, read widened: a half sum accumulates as float32's). */        \
    X(reduce, (V, ld_reduce_op, op), (V, void *, out), (V, ld_dtype, odt), (V, ld_dtype, rdt),                 \
      (V, const void *, x), (V, ld_dtype, xdt), (V, int64_t, outer), (V, int64_t, n), (V, int64_t, inner))     \
    /* Cumulative sums or products (op; tf.math.cumsum, cumprod) along the \
       middle axis of a contiguous [outer, n, inner] array: out[o, j, i] is \
       x[o, 0, i] op ... op x[o, j, i]; exclusive: up to j - 1 (the first   \
       is 0 or 1); reverse: from the end (x[o, j, i] op ... op x[o, n-1, i], \
       exclusive: from j + 1). Accumulated in float32, one value after the  \
       other in that order on every backend (ld_ew_scan_step), as TF's CPU \
       kernel scans. x in xdt, out in odt (float32 or a half dtype: read    \
       widened, each result rounded once); integer tensors are scanned by  \
       the op, on the host. */                                              \
    X(scan, (V, ld_scan_op, op), (V, void *, out), (V, ld_dtype, odt), (V, const void *, x), (V, ld_dtype, xdt), \
      (V, int64_t, outer), (V, int64_t, n), (V, int64_t, inner), (V, int, exclusive), (V, int, reverse))      \
    /* Row-major C = alpha * op(A) op(B) + beta * C, op = transpose when    \
       ta/tb. */                                                             \
    X(gemm, (V, int, ta), (V, int, tb), (V, int64_t, m), (V, int64_t, n), (V, int64_t, k), (V, float, alpha),   \
      (V, const float *, a), (V, int64_t, lda), (V, const float *, b), (V, int64_t, ldb), (V, float, beta),     \
      (V, float *, c), (V, int64_t, ldc))                                                                       \
    /* Dense's forward: C[m, n] = A[m, k] B[k, n] + bias[n] (bias NULL:    \
       none), then relu when `relu`; A, B, C contiguous. Each sum is        \
       rounded, then the bias added (TF's matmul then bias_add). */         \
    X(gemm_bias, (V, int64_t, m), (V, int64_t, n), (V, int64_t, k), (V, const float *, a), (V, const float *, b), \
      (V, const float *, bias), (V, int, relu), (V, float *, c))                                                \
    /* Dense's bias and relu after a product: y[r, j] = x[r, j] + bias[j]  \
       (bias NULL: none), then relu when `relu`; x and y (y may be x) in dt  \
       (float32 or a half dtype), bias in bdt (float32 or dt). A half bias  \
       rounded to dt first (as Keras casts it to the compute dtype), the sum \
       in float32, relu, the result rounded once: the bits of a half add     \
       then a half relu in one pass. */                                     \
    X(bias_relu, (V, ld_dtype, dt), (V, void *, y), (V, const void *, x), (V, const void *, bias),             \
      (V, ld_dtype, bdt), (V, int64_t, rows), (V, int64_t, n), (V, int, relu))                                 \
    /* The same product (alpha 1, beta 0) of float16 or bfloat16 matrices   \
       (dt), a and b in dt: products and sums in float32, c in cdt (float32, \
       or dt: the sums rounded once, as cuBLAS writes a half C). */          \
    X(gemm_half, (V, int, ta), (V, int, tb), (V, int64_t, m), (V, int64_t, n), (V, int64_t, k), (V, ld_dtype, dt), \
      (V, const void *, a), (V, int64_t, lda), (V, const void *, b), (V, int64_t, ldb), (V, ld_dtype, cdt),      \
      (V, void *, c), (V, int64_t, ldc))                                                                        \
    /* softmax / log-softmax over the last axis of [rows, cols] */           \
    X(softmax, (V, float *, out), (V, const float *, x), (V, int64_t, rows), (V, int64_t, cols), (V, int, log)) \
    /* Fused sparse softmax cross-entropy: probs = softmax(logits);         \
       *loss = scale * sum_i -log probs[i, labels[i]] (scale = 1/batch for  \
       a mean). An out-of-range label gives NaN and, on a device that       \
       queues, a kernel error (ld_executor_kernel_error); the op checks     \
       them first where kernels run inline. */                               \
    X(sparse_xent, (V, float *, loss), (V, float *, probs), (V, const float *, logits),                         \
      (V, const int64_t *, labels), (V, int64_t, n), (V, int64_t, c), (V, float, scale))                        \
    /* dlogits = (probs - onehot(labels)) * scale * g[0] */                  \
    X(sparse_xent_backward, (V, float *, dlogits), (V, const float *, probs), (V, const int64_t *, labels),     \
      (V, const float *, g), (V, int64_t, n), (V, int64_t, c), (V, float, scale))                               \
    /* One optimizer step over a batch of variables, in place (ld_opt_batch \
       below; ld_optim.h and ld_optim_math.h for the formulas): one launch  \
       or one split over the pool for up to LD_OPT_BATCH variables. */      \
    X(opt_update, (V, ld_opt_batch, b))                                                                       \
    /* flags[k] = 1 where item k of the batch holds an inf or a NaN; the    \
       others are left as they are (the caller zeroes them first) */         \
    X(nonfinite_flags, (V, ld_check_batch, b), (V, float *, flags))                                           \
    LD_LAYER_KERNELS(X)

/* The layers' kernels (normalization, embeddings, pooling, attention,
   recurrences): the same rules, with their CPU code outside ld_cpu.c, one
   file per family (engine/ld_cpu_<family>.c, using ld_cpu_internal.h's
   thread pool), and their CUDA code in engine/cuda/cuda_<family>.cu. Keep
   each family's lines together, under a comment naming it. */
#define LD_LAYER_KERNELS(X) \
    /* normalization (ld_ops_norm.c) */                                      \
    /* Layer normalization over the last axis of [rows, c]: y = (x - mean) \
       * rstd * gamma + beta (gamma, beta NULL: 1, 0), with the row's mean  \
       and rstd = 1/sqrt(biased var + eps) saved in mean, rstd [rows]. x in \
       xdt, y in ydt (float32, or a half dtype: read widened, written       \
       rounded once; the arithmetic is float32's whatever they are). */      \
    X(layer_norm, (V, void *, y), (V, ld_dtype, ydt), (V, float *, mean), (V, float *, rstd), (V, const void *, x), \
      (V, ld_dtype, xdt), (V, const float *, gamma), (V, const float *, beta), (V, int64_t, rows), (V, int64_t, c), \
      (V, float, eps))                                                                                          \
    /* Its gradient, each output NULL when not wanted: with g = dy * gamma  \
       and xhat = (x - mean) * rstd, dx = rstd * (g - mean_row(g) - xhat *  \
       mean_row(g * xhat)); dgamma = sum_rows dy * xhat; dbeta = sum_rows  \
       dy (no [rows, c] temporary). dy in ydt, x and dx in xdt (as above). */ \
    X(layer_norm_backward, (V, void *, dx), (V, float *, dgamma), (V, float *, dbeta), (V, const void *, dy),   \
      (V, ld_dtype, ydt), (V, const void *, x), (V, ld_dtype, xdt), (V, const float *, mean),                  \
      (V, const float *, rstd), (V, const float *, gamma), (V, int64_t, rows), (V, int64_t, c))                 \
    /* Batch normalization, channels last: x is [rows, c], in xdt (float32, \
       or a half dtype: read widened, the arithmetic float32's and double's \
       as for float32, every half result rounded once). Per-channel         \
       statistics, in two passes: sums NULL: out [2, c] = (count, sum x);  \
       else out [c] = sum (x - m)^2 around m = sums[c+j] / sums[j] (the    \
       [2, c] of the first pass, summed over replicas when synchronized;   \
       0 for a count of 0). Accumulated in double. */                        \
    X(bn_stats, (V, float *, out), (V, const float *, sums), (V, const void *, x), (V, ld_dtype, xdt),         \
      (V, int64_t, rows), (V, int64_t, c))                                                                      \
    /* training: mean = sums[c+j] / n, var = m2[j] / n with n = sums[j],    \
       rstd = 1/sqrt(var + eps), and when n > 0 the moving statistics are  \
       updated in place: mm = mm * momentum + mean * (1 - momentum), mv     \
       likewise with var (n = 0: mean 0, var 0, nothing updated). training  \
       0: mean = mm, rstd = 1/sqrt(mv + eps) (sums, m2 unused). */          \
    X(bn_finalize, (V, float *, mean), (V, float *, rstd), (V, float *, mm), (V, float *, mv),                 \
      (V, const float *, sums), (V, const float *, m2), (V, int64_t, c), (V, float, momentum), (V, float, eps),  \
      (V, int, training))                                                                                       \
    /* y = (x - mean[j]) * rstd[j] * gamma[j] + beta[j] (NULL: 1, 0); y in  \
       ydt, x in xdt */                                                      \
    X(bn_apply, (V, void *, y), (V, ld_dtype, ydt), (V, const void *, x), (V, ld_dtype, xdt),                  \
      (V, const float *, mean), (V, const float *, rstd), (V, const float *, gamma), (V, const float *, beta),  \
      (V, int64_t, rows), (V, int64_t, c))                                                                      \
    /* red [2, c] = (sum_rows dy, sum_rows dy * xhat), xhat = (x - mean[j]) \
       * rstd[j], accumulated in double; dy in ydt, x in xdt. */             \
    X(bn_backward_reduce, (V, float *, red), (V, const void *, dy), (V, ld_dtype, ydt), (V, const void *, x),  \
      (V, ld_dtype, xdt), (V, const float *, mean), (V, const float *, rstd), (V, int64_t, rows),              \
      (V, int64_t, c))                                                                                          \
    /* training: dx = gamma * rstd * (dy - red[j] / n - xhat * red[c+j] /   \
       n), n = sums[j] (red and sums over the global batch when            \
       synchronized); training 0: dx = gamma * rstd * dy (red, sums unused). \
       dy in ydt; x and dx in xdt. */                                        \
    X(bn_backward, (V, void *, dx), (V, const void *, dy), (V, ld_dtype, ydt), (V, const void *, x),           \
      (V, ld_dtype, xdt), (V, const float *, mean), (V, const float *, rstd), (V, const float *, gamma),       \
      (V, const float *, red), (V, const float *, sums), (V, int64_t, rows), (V, int64_t, c), (V, int, training)) \
    /* attention (ld_ops_attn.c) */                                        \
    /* Strided batched row-major C_i = alpha op(A_i) op(B_i) + beta C_i for \
       i < batch, A_i = a + i*sa (likewise b, c); C_i is [m, n] with       \
       leading dimension n. */                                               \
    X(gemm_batched, (V, int, ta), (V, int, tb), (V, int64_t, m), (V, int64_t, n), (V, int64_t, k),            \
      (V, float, alpha), (V, const float *, a), (V, int64_t, lda), (V, int64_t, sa), (V, const float *, b),     \
      (V, int64_t, ldb), (V, int64_t, sb), (V, float, beta), (V, float *, c), (V, int64_t, sc),                 \
      (V, int64_t, batch))                                                                                      \
    /* The same product (alpha 1, beta 0) of float16 or bfloat16 matrices   \
       (dt), A_i and B_i in dt: products and sums in float32, C_i in cdt     \
       (float32, or dt: rounded once), as gemm_half. */                      \
    X(gemm_batched_half, (V, int, ta), (V, int, tb), (V, int64_t, m), (V, int64_t, n), (V, int64_t, k),       \
      (V, ld_dtype, dt), (V, const void *, a), (V, int64_t, lda), (V, int64_t, sa), (V, const void *, b),        \
      (V, int64_t, ldb), (V, int64_t, sb), (V, ld_dtype, cdt), (V, void *, c), (V, int64_t, sc),                \
      (V, int64_t, batch))                                                                                      \
    /* y = softmax(scale * x) over the last axis of [batch, t, s]; with      \
       causal, entry (i, j) of each [t, s] matrix is masked out when        \
       j > i + offset (a row masked whole is uniform, as Keras' -1e9 adder  \
       gives). y may be x. yh: NULL, or y again rounded to the half dtype   \
       hdt in the same pass (the half weights of a half attention). */       \
    X(masked_softmax, (V, float *, y), (V, void *, yh), (V, ld_dtype, hdt), (V, const float *, x),            \
      (V, int64_t, batch), (V, int64_t, t), (V, int64_t, s), (V, float, scale), (V, int, causal),              \
      (V, int64_t, offset))                                                                                     \
    /* its backward, y the forward's result: dx = scale * y * (dy -         \
       sum(dy * y)) per row, 0 on a row masked whole; dx in ddt (float32,   \
       or a half dtype: rounded once); dx may be dy when ddt is float32. */  \
    X(masked_softmax_backward, (V, void *, dx), (V, ld_dtype, ddt), (V, const float *, y), (V, const float *, dy), \
      (V, int64_t, batch), (V, int64_t, t), (V, int64_t, s), (V, float, scale), (V, int, causal),              \
      (V, int64_t, offset))                                                                                     \
    /* Fused attention (FlashAttention's online softmax: no [t, s] matrix  \
       in memory): o [batch, t, e] = softmax(scale q k^T, masked as in      \
       masked_softmax) v for q [batch, t, e], k [batch, s, e], v [batch, s, \
       e]; lse [batch, t] gets each row's log-sum-exp of its scaled logits  \
       (INFINITY on a row masked whole, whose weights are uniform). e is    \
       16, 32 or 64 (ld_attention falls back to the unfused path else).     \
       q, k, v and o in dt: float32, or float16/bfloat16 computed in        \
       float32 (o rounded once); lse float32. */                            \
    X(flash_attention, (V, ld_dtype, dt), (V, void *, o), (V, float *, lse), (V, const void *, q),             \
      (V, const void *, k), (V, const void *, v), (V, int64_t, batch), (V, int64_t, t), (V, int64_t, s),       \
      (V, int64_t, e), (V, float, scale), (V, int, causal), (V, int64_t, offset))                               \
    /* Its backward from go = dL/do and the forward's o and lse: gq, gk, gv \
       (each NULL when not wanted) written whole, in dt as the inputs. */   \
    X(flash_attention_backward, (V, ld_dtype, dt), (V, void *, gq), (V, void *, gk), (V, void *, gv),          \
      (V, const void *, go), (V, const void *, q), (V, const void *, k), (V, const void *, v),                  \
      (V, const void *, o), (V, const float *, lse), (V, int64_t, batch), (V, int64_t, t), (V, int64_t, s),     \
      (V, int64_t, e), (V, float, scale), (V, int, causal), (V, int64_t, offset))                               \
    /* convolution, its im2col lowering, max pooling (ld_ops_conv.c) */    \
    /* Direct convolution (no im2col): y [n, oh, ow, f] = x * w + b (b NULL: \
       no bias), then relu when `relu`. With a pooling (g.pkh > 0) y is the \
       pooled [n, poh, pow, f] and arg (int32, same shape) the pixel        \
       i * ow + j of the conv output each maximum came from (the first in   \
       window order on ties); arg unused without one. With g.half (a half  \
       dtype) x, w, b and y are in that dtype and the output rounds as a    \
       half Conv2D computes (ld_conv_geom). */                               \
    X(conv2d, (V, void *, y), (V, int32_t *, arg), (V, const void *, x), (V, const void *, w),                 \
      (V, const void *, b), (V, ld_conv_geom, g), (V, int, relu))                                               \
    /* Its gradients, each output NULL when not wanted: with gm = dy, masked \
       by y > 0 when `relu` (y the forward's output; with a pooling dy and  \
       y are pooled and gm is dy scattered to arg's pixels), dx = the       \
       transposed convolution of gm, dw = sum over pixels of patch^T gm,   \
       db = sum gm. Written whole (no accumulation). With g.half every     \
       tensor but arg is in that dtype, each gradient the float32 sums     \
       rounded once. */                                                      \
    X(conv2d_backward, (V, void *, dx), (V, void *, dw), (V, void *, db), (V, const void *, dy),                \
      (V, const void *, y), (V, const int32_t *, arg), (V, const void *, x), (V, const void *, w),               \
      (V, ld_conv_geom, g), (V, int, relu))                                                                     \
    /* im2col / col2im for NHWC images; col is [N*OH*OW, KH*KW*C]. im2col \
       gathers x into col, both in dt (float32 or a half dtype: exact);     \
       col2im sums the windows' entries of col (in cdt) covering each       \
       element of dx (in xdt) in float32, in the order of the output pixels, \
       rounded once where xdt is half. */                                     \
    X(im2col, (V, void *, col), (V, const void *, x), (V, ld_dtype, dt), (V, int64_t, n), (V, int64_t, h),    \
      (V, int64_t, w), (V, int64_t, c), (V, int64_t, kh), (V, int64_t, kw), (V, int64_t, sh), (V, int64_t, sw), \
      (V, int64_t, ph), (V, int64_t, pw), (V, int64_t, oh), (V, int64_t, ow))                                   \
    X(col2im, (V, void *, dx), (V, ld_dtype, xdt), (V, const void *, col), (V, ld_dtype, cdt), (V, int64_t, n), \
      (V, int64_t, h), (V, int64_t, w), (V, int64_t, c), (V, int64_t, kh), (V, int64_t, kw), (V, int64_t, sh),  \
      (V, int64_t, sw), (V, int64_t, ph), (V, int64_t, pw), (V, int64_t, oh), (V, int64_t, ow))                 \
    /* Max pooling NHWC (a NaN wins: ld_ew_max_wins); argmax (int64, flat   \
       index into x) saved for backward. */                                  \
    X(maxpool, (V, void *, y), (V, int64_t *, arg), (V, const void *, x), (V, ld_dtype, dt), (V, int64_t, n), \
      (V, int64_t, h), (V, int64_t, w), (V, int64_t, c), (V, int64_t, kh), (V, int64_t, kw), (V, int64_t, sh),  \
      (V, int64_t, sw), (V, int64_t, oh), (V, int64_t, ow))                                                     \
    /* dx = 0, then dx[arg[i]] += dy[i]: ny elements of dy over n images of \
       nx / n elements of dx each (an image's arg stays in its image). x and \
       y of maxpool in dt (float32 or half: a selection, exact); dy in ydt,  \
       dx in xdt, summed in float32 and rounded once where xdt is half. */   \
    X(maxpool_backward, (V, void *, dx), (V, ld_dtype, xdt), (V, const void *, dy), (V, ld_dtype, ydt),         \
      (V, const int64_t *, arg), (V, int64_t, n), (V, int64_t, ny), (V, int64_t, nx))                           \
    /* indexing (ld_ops_index.c) */                                         \
    /* Copy a block between a contiguous [outer, n, inner] array and rows   \
       [off, off+n) of the middle axis of a contiguous [outer, big, inner]  \
       array: into=1 writes the big array (dst), into=0 reads it (src);     \
       add=1 adds to dst instead of overwriting it. */                       \
    X(slice_copy, (V, float *, dst), (V, const float *, src), (V, int64_t, outer), (V, int64_t, n),            \
      (V, int64_t, inner), (V, int64_t, big), (V, int64_t, off), (V, int, into), (V, int, add))                 \
    /* y[i, :] = table[ids[i], :] for n ids (int32 or int64: idt) of a      \
       [v, dim] table; an id outside [0, v) gives a zero row and, on a      \
       device that queues, a kernel error (the op checks host ids first). */\
    X(embedding, (V, float *, y), (V, const float *, table), (V, const void *, ids), (V, ld_dtype, idt),       \
      (V, int64_t, n), (V, int64_t, v), (V, int64_t, dim))                                                      \
    /* dtable = 0, then dtable[ids[i], :] += dy[i, :] (bad ids skipped) */   \
    X(embedding_backward, (V, float *, dtable), (V, const float *, dy), (V, const void *, ids),                 \
      (V, ld_dtype, idt), (V, int64_t, n), (V, int64_t, v), (V, int64_t, dim))                                  \
    /* images (ld_ops_image.c) */                                           \
    /* TF's projective transform of n NHWC float32 images h x w x c into   \
       oh x ow x c: output pixel (oy, ox) of image b reads its image where  \
       ld_img_sample (ld_image_math.h) says, under transform t + 8 b (t + 0 \
       for every image when nt is 1; t is on the device), fill_value at the \
       weight of the corners off the image. (A bilinear resize is one too.) */ \
    X(image_transform, (V, float *, y), (V, const float *, x), (V, const float *, t), (V, int64_t, nt),       \
      (V, int64_t, n), (V, int64_t, h), (V, int64_t, w), (V, int64_t, c), (V, int64_t, oh), (V, int64_t, ow),  \
      (V, int, nearest), (V, int, mode), (V, float, fill_value))                                                \
    /* Its gradient: dx = 0, then each output's dy added to the pixels it  \
       read, at their weights (the exact adjoint). */                        \
    X(image_transform_backward, (V, float *, dx), (V, const float *, dy), (V, const float *, t), (V, int64_t, nt), \
      (V, int64_t, n), (V, int64_t, h), (V, int64_t, w), (V, int64_t, c), (V, int64_t, oh), (V, int64_t, ow),  \
      (V, int, nearest), (V, int, mode))                                                                        \
    /* pooling (ld_ops_pool.c) */                                           \
    /* Average pooling NHWC, padding ph/pw before (TF "same"): the mean of  \
       the window's cells inside the image (padded cells not counted). */   \
    X(avgpool, (V, float *, y), (V, const float *, x), (V, int64_t, n), (V, int64_t, h), (V, int64_t, w),      \
      (V, int64_t, c), (V, int64_t, kh), (V, int64_t, kw), (V, int64_t, sh), (V, int64_t, sw),                  \
      (V, int64_t, ph), (V, int64_t, pw), (V, int64_t, oh), (V, int64_t, ow))                                   \
    X(avgpool_backward, (V, float *, dx), (V, const float *, dy), (V, int64_t, n), (V, int64_t, h),            \
      (V, int64_t, w), (V, int64_t, c), (V, int64_t, kh), (V, int64_t, kw), (V, int64_t, sh),                   \
      (V, int64_t, sw), (V, int64_t, ph), (V, int64_t, pw), (V, int64_t, oh), (V, int64_t, ow))

/* ================================================================ expanding a parameter list
 * LD_K_PARAMS(...)  the parameters of a kernel's function ("float *out, ...")
 * LD_K_NAMES(...)   its parameters' names, to pass them on ("out, ...")
 * LD_K_FIELDS(...)  one struct field per parameter; an array is held whole
 * LD_K_STORE(...)   k_->field = param for each (arrays: their ndim elements),
 *                   k_ being the struct pointer in scope
 * LD_K_LOAD(...)    k_->field for each, comma-separated
 */
#define LD_K_NARGS(...) LD_K_NARGS_(__VA_ARGS__, 20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0)
#define LD_K_NARGS_(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13, _14, _15, _16, _17, _18, _19, _20, N, ...) N
#define LD_K_CAT(a, b) LD_K_CAT_(a, b)
#define LD_K_CAT_(a, b) a##b
#define LD_K_COMMA() ,
#define LD_K_NOSEP()
/* M applied to each tuple, S() between them */
#define LD_K_MAP(M, S, ...) LD_K_CAT(LD_K_MAP_, LD_K_NARGS(__VA_ARGS__))(M, S, __VA_ARGS__)
#define LD_K_MAP_1(M, S, x) M x
#define LD_K_MAP_2(M, S, x, ...) M x S() LD_K_MAP_1(M, S, __VA_ARGS__)
#define LD_K_MAP_3(M, S, x, ...) M x S() LD_K_MAP_2(M, S, __VA_ARGS__)
#define LD_K_MAP_4(M, S, x, ...) M x S() LD_K_MAP_3(M, S, __VA_ARGS__)
#define LD_K_MAP_5(M, S, x, ...) M x S() LD_K_MAP_4(M, S, __VA_ARGS__)
#define LD_K_MAP_6(M, S, x, ...) M x S() LD_K_MAP_5(M, S, __VA_ARGS__)
#define LD_K_MAP_7(M, S, x, ...) M x S() LD_K_MAP_6(M, S, __VA_ARGS__)
#define LD_K_MAP_8(M, S, x, ...) M x S() LD_K_MAP_7(M, S, __VA_ARGS__)
#define LD_K_MAP_9(M, S, x, ...) M x S() LD_K_MAP_8(M, S, __VA_ARGS__)
#define LD_K_MAP_10(M, S, x, ...) M x S() LD_K_MAP_9(M, S, __VA_ARGS__)
#define LD_K_MAP_11(M, S, x, ...) M x S() LD_K_MAP_10(M, S, __VA_ARGS__)
#define LD_K_MAP_12(M, S, x, ...) M x S() LD_K_MAP_11(M, S, __VA_ARGS__)
#define LD_K_MAP_13(M, S, x, ...) M x S() LD_K_MAP_12(M, S, __VA_ARGS__)
#define LD_K_MAP_14(M, S, x, ...) M x S() LD_K_MAP_13(M, S, __VA_ARGS__)
#define LD_K_MAP_15(M, S, x, ...) M x S() LD_K_MAP_14(M, S, __VA_ARGS__)
#define LD_K_MAP_16(M, S, x, ...) M x S() LD_K_MAP_15(M, S, __VA_ARGS__)
#define LD_K_MAP_17(M, S, x, ...) M x S() LD_K_MAP_16(M, S, __VA_ARGS__)
#define LD_K_MAP_18(M, S, x, ...) M x S() LD_K_MAP_17(M, S, __VA_ARGS__)
#define LD_K_MAP_19(M, S, x, ...) M x S() LD_K_MAP_18(M, S, __VA_ARGS__)
#define LD_K_MAP_20(M, S, x, ...) M x S() LD_K_MAP_19(M, S, __VA_ARGS__)

#define LD_K_PARAM(tag, T, n) LD_K_PARAM_##tag(T, n)
#define LD_K_PARAM_V(T, n) T n
#define LD_K_PARAM_D(T, n) const T *n
#define LD_K_NAME(tag, T, n) n
#define LD_K_FIELD(tag, T, n) LD_K_FIELD_##tag(T, n)
#define LD_K_FIELD_V(T, n) T n;
#define LD_K_FIELD_D(T, n) T n[LD_MAX_DIMS];
#define LD_K_STORE1(tag, T, n) LD_K_STORE_##tag(T, n)
#define LD_K_STORE_V(T, n) k_->n = n;
#define LD_K_STORE_D(T, n) memcpy(k_->n, n, sizeof(T) * (size_t)ndim);
#define LD_K_LOAD1(tag, T, n) k_->n

#define LD_K_PARAMS(...) LD_K_MAP(LD_K_PARAM, LD_K_COMMA, __VA_ARGS__)
#define LD_K_NAMES(...) LD_K_MAP(LD_K_NAME, LD_K_COMMA, __VA_ARGS__)
#define LD_K_FIELDS(...) LD_K_MAP(LD_K_FIELD, LD_K_NOSEP, __VA_ARGS__)
#define LD_K_STORE(...) LD_K_MAP(LD_K_STORE1, LD_K_NOSEP, __VA_ARGS__)
#define LD_K_LOAD(...) LD_K_MAP(LD_K_LOAD1, LD_K_COMMA, __VA_ARGS__)

/* ================================================================ what every backend shares */
#define LD_K_ENUM(name, ...) LD_KERNEL_##name,
enum { LD_KERNELS(LD_K_ENUM) LD_KERNEL_COUNT };
/* A slot of ld_backend. */
#define LD_K_SLOT(name, ...) void (*name)(ld_device *d, LD_K_PARAMS(__VA_ARGS__));
/* The declaration of a backend's kernel: LD_KERNELS(LD_K_DECLARE_CPU) etc. */
#define LD_K_DECLARE(prefix, name, ...) void prefix##name(ld_device *d, LD_K_PARAMS(__VA_ARGS__))

#define LD_BIN_ENUM(E, name) LD_BIN_##E,
#define LD_UN_ENUM(E, name) LD_UN_##E,
#define LD_OP_NAME(E, name) #name,

#endif
