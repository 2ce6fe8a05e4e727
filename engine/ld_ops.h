/*
 * ld_ops.h - differentiable tensor ops.
 *
 * Each op checks its arguments (a clear message naming the shapes or dtypes),
 * runs the kernel of the operands' device, and, while a gradient tape records
 * on this thread and an input requires a gradient, records a node so that
 * ld_tape_gradient can run the op backwards (see ld_autograd.h).
 *
 * Binary ops broadcast as NumPy does. Float ops take float32; integer inputs
 * are accepted where it makes sense (comparison, argmax, index tensors).
 */
#ifndef LD_OPS_H
#define LD_OPS_H

#include "ld_device.h"

ld_tensor *ld_binary(ld_binary_op op, ld_tensor *a, ld_tensor *b);
ld_tensor *ld_add(ld_tensor *a, ld_tensor *b);
ld_tensor *ld_sub(ld_tensor *a, ld_tensor *b);
ld_tensor *ld_mul(ld_tensor *a, ld_tensor *b);
ld_tensor *ld_div(ld_tensor *a, ld_tensor *b);
ld_tensor *ld_pow(ld_tensor *a, ld_tensor *b);
ld_tensor *ld_maximum(ld_tensor *a, ld_tensor *b);
ld_tensor *ld_minimum(ld_tensor *a, ld_tensor *b);
ld_tensor *ld_add_scalar(ld_tensor *a, float s);
ld_tensor *ld_mul_scalar(ld_tensor *a, float s);
ld_tensor *ld_pow_scalar(ld_tensor *a, float s);

ld_tensor *ld_unary(ld_unary_op op, ld_tensor *x);
ld_tensor *ld_neg(ld_tensor *x);
ld_tensor *ld_exp(ld_tensor *x);
ld_tensor *ld_log(ld_tensor *x);
ld_tensor *ld_sqrt(ld_tensor *x);
ld_tensor *ld_relu(ld_tensor *x);
ld_tensor *ld_sigmoid(ld_tensor *x);
ld_tensor *ld_tanh(ld_tensor *x);
ld_tensor *ld_gelu(ld_tensor *x);           /* the exact erf form, 0.5x(1 + erf(x/sqrt 2)): Keras's default */

/* tf.where(cond, a, b): a where cond is true (nonzero; a float NaN is true,
   -0 false), b elsewhere, the three broadcast together. a and b of one
   dtype give it; two integer dtypes the wider; else as the binary ops
   (float32 unless both are one half dtype). Float operands get their
   gradients: the output's where they were taken, zeros elsewhere. */
ld_tensor *ld_where(ld_tensor *cond, ld_tensor *a, ld_tensor *b);
/* tf.where(cond): the coordinates of cond's true elements, int64
   [count, cond->ndim], in row-major order, on cond's device */
ld_tensor *ld_where_indices(ld_tensor *cond);
/* tf.clip_by_value: maximum(minimum(x, hi), lo), so with TF's gradients (x's
   where lo <= x <= hi, lo's and hi's where they were taken; a NaN x stays
   NaN and its gradient goes to lo, as TF's) */
ld_tensor *ld_clip_by_value(ld_tensor *x, ld_tensor *lo, ld_tensor *hi);
/* tf.one_hot(ids, depth, on_value, off_value, axis): integer ids of shape S
   -> S with a new axis of `depth` at `axis` (-1: last), `on` at each id's
   class and `off` elsewhere (an id outside [0, depth) gives only off), in
   dt; not differentiable */
ld_tensor *ld_one_hot(ld_tensor *ids, int64_t depth, float on, float off, int axis, ld_dtype dt);

/* Reductions over `axis` (-1.. counts from the end; LD_ALL_AXES = every axis).
   Integer tensors (int32, int64, uint8) reduce exactly to their own dtype, as
   TF's do (a sum wraps on overflow); their mean is float32. Float reductions
   propagate NaN: a NaN in a sum, max or min gives NaN, and argmax/argmin
   point at the first NaN (NumPy's and PyTorch's rule). */
#define LD_ALL_AXES 99
ld_tensor *ld_sum(ld_tensor *x, int axis, int keepdims);
ld_tensor *ld_mean(ld_tensor *x, int axis, int keepdims);
ld_tensor *ld_max(ld_tensor *x, int axis, int keepdims);
ld_tensor *ld_min(ld_tensor *x, int axis, int keepdims);
ld_tensor *ld_argmax(ld_tensor *x, int axis);           /* int64, not differentiable */
ld_tensor *ld_argmin(ld_tensor *x, int axis);           /* int64, not differentiable */

/* TF's reduce_* over a list of axes: naxes axes (each -ndim .. ndim-1, none
   twice; none at all reduces over no axis, as TF's axis=[]), or every axis
   when axes is NULL; keepdims leaves them of size 1. sum, mean, max and
   min are the ops above (their dtypes, their gradients) over the axes
   merged into one; prod (TF's reduce_prod) likewise: float32 inside (a half
   x's result rounded once; an integer x's exact, of its dtype, wrapping as
   TF's), 1 over no values, with TF's gradient (the products of the values
   before and after each one: a zero gets the product of the others). var (TF's reduce_variance: population), std and
   logsumexp (TF's: stable, the maximum outside the gradient, inf and NaN
   as TF's) compute in float32; a half x's result is rounded once, an
   integer x's is float32. any and all are over x != 0 (NaN is true) and
   give 1 or 0 in float32, as the comparisons do. */
typedef enum {
    LD_REDUCE_SUM, LD_REDUCE_MEAN, LD_REDUCE_MAX, LD_REDUCE_MIN, LD_REDUCE_PROD, LD_REDUCE_VAR, LD_REDUCE_STD,
    LD_REDUCE_LOGSUMEXP, LD_REDUCE_ANY, LD_REDUCE_ALL
} ld_reduction;
ld_tensor *ld_reduce_axes(ld_reduction r, ld_tensor *x, int naxes, const int *axes, int keepdims);

/* tf.math.cumsum and tf.math.cumprod along `axis` (-ndim .. ndim-1):
   element j is the sum (product) of elements 0..j; exclusive: 0..j-1 (the
   first 0, or 1); reverse: j..n-1 (exclusive: j+1..n-1). Of x's shape and
   dtype: float32 accumulated in float32 in that order (TF's CPU kernel's);
   a half x's cumsum read and written in its dtype, its cumprod computed in
   float32, each result rounded once; an integer x's exact, wrapping as
   TF's. With TF's gradients: cumsum's is the cumsum of g the other way
   (_CumsumGrad); cumprod's is _CumprodGrad's cumsum(y * g, the other way) /
   x, 0 where x is 0 (TF's div_no_nan). */
ld_tensor *ld_cumsum(ld_tensor *x, int axis, int exclusive, int reverse);
ld_tensor *ld_cumprod(ld_tensor *x, int axis, int exclusive, int reverse);

/* ld_cast that the tape records between float dtypes (float32, float16,
   bfloat16): the gradient is cast back to the input's dtype. */
ld_tensor *ld_cast_op(ld_tensor *t, ld_dtype dt);
/* A float32 tensor for t: t itself (retained) when float32, else ld_cast_op's copy. */
ld_tensor *ld_as_float(ld_tensor *t);
/* t itself (retained) when of a float dtype, half included (a layer under a
   half policy computes in it); an integer tensor as float32 (ld_cast_op). */
ld_tensor *ld_as_floating(ld_tensor *t);
ld_tensor *ld_matmul(ld_tensor *a, ld_tensor *b);       /* 2-d x 2-d, or batched 3-d x 2-d */
/* ld_matmul whose half operands (one dtype) give their float32 sums as they
   are, unrounded: a float32 result, for a product whose sums go on (a
   transposed convolution's patches, which ld_col2im sums and rounds once);
   its gradients are ld_matmul's (half products). Float32 operands: ld_matmul. */
ld_tensor *ld_matmul_wide(ld_tensor *a, ld_tensor *b);
ld_tensor *ld_softmax(ld_tensor *x);                    /* over the last axis */
/* A dense layer in one op: x [..., k] @ w [k, n] + b [n] (b may be NULL),
   then relu when asked (in place). */
ld_tensor *ld_linear(ld_tensor *x, ld_tensor *w, ld_tensor *b, int relu);
/* While on (per thread), the backward pass of ld_linear on a CPU device leaves
   the gradient of a variable kernel as its product x^T dy (tensor->pending)
   instead of computing it: the mirrored strategy's collective then computes
   each replica's slice of the sum over replicas from every replica's factors,
   a fused reduce-scatter with no per-replica gradient to zero, fill and add
   (ld_strategy.c). Whoever else reads such a gradient materializes it. */
void ld_defer_weight_grads(int on);
/* Autocast (per thread), Keras's mixed precision: while a layer of a
   mixed_bfloat16 / mixed_float16 policy runs (ld_layer_call sets it), the
   products of ld_linear take their operands in that half dtype (float32
   accumulation, rounded to the half dtype), as Keras's autocast variables
   do; the casts are recorded, so the gradients reach float32 variables in
   float32. ld_linear's result is float32 then, so that the rest of a layer
   built on it (the gates of LSTM and GRU) computes in float32, and the layer
   call rounds the layer's output; Dense and MultiHeadAttention's projections
   stay in the half dtype as Keras's do (ld_linear_half). Returns the
   previous setting; LD_F32 (the default) is off. */
ld_dtype ld_autocast(ld_dtype dt);
ld_dtype ld_autocast_dtype(void);
/* ld_linear whose result stays in the autocast's half dtype: the product's
   half result, the bias cast to it and added in it, as Keras's EinsumDense
   computes under a half policy. For what feeds more products (attention's
   projections, whose products then take half operands: tensor cores on a
   GPU); outside a half autocast it is ld_linear. */
ld_tensor *ld_linear_half(ld_tensor *x, ld_tensor *w, ld_tensor *b, int relu);
/* ld_linear_half of im2col's patches (a convolution's lowering): under a
   half autocast the patches' gradient is left in float32, unrounded, for
   col2im to sum and round once, as a half convolution's input gradient is
   (one rounding: TF's, and the CPU's direct kernels') */
ld_tensor *ld_linear_patches(ld_tensor *col, ld_tensor *w, ld_tensor *b, int relu);
ld_tensor *ld_log_softmax(ld_tensor *x);
/* softmax (log: log_softmax) over any axis (negative: from the end), as
   TF's axis=: over the last one directly, over another with it moved last */
ld_tensor *ld_softmax_axis(ld_tensor *x, int axis, int log);

/* Layers' kernels. Images are NHWC; kernels HWIO (Keras' layout). */
ld_tensor *ld_conv2d(ld_tensor *x, ld_tensor *w, int sh, int sw, int same_padding);
/* The Conv2D layer's op: relu(conv(x, w) + b) (b NULL: no bias; relu 0:
   none), one node. Direct on the CPU (ld_cpu_conv.c); im2col + the fused
   dense op on other backends, or anywhere with LDIST_CONV_REFERENCE=1. */
ld_tensor *ld_conv2d_bias_act(ld_tensor *x, ld_tensor *w, ld_tensor *b, int relu, int sh, int sw, int same_padding);
/* The same followed by max pooling (valid, pool pkh x pkw, strides psh/psw),
   one node: on the CPU the convolution's output is pooled image by image
   from cache and never written whole; elsewhere the two ops. */
ld_tensor *ld_conv2d_pool(ld_tensor *x, ld_tensor *w, ld_tensor *b, int relu, int sh, int sw, int same_padding,
                          int pkh, int pkw, int psh, int psw);
/* Patches of NHWC images as rows: [N*OH*OW, KH*KW*C] in x's dtype (float32,
   float16, bfloat16); differentiable (col2im, its sums in float32). */
ld_tensor *ld_im2col(ld_tensor *x, int kh, int kw, int sh, int sw, int same, int64_t *oh, int64_t *ow);
/* The transpose of ld_im2col: patches col [N*OH*OW, KH*KW*C] (float32 or
   half) summed into NHWC images [n, h, w, c] in dt (float32 or half: float32
   sums, rounded once), each entry added where ld_im2col(x of that shape, kh,
   kw, sh, sw, same) takes it from (entries over the padding dropped; a pixel
   no window covers is 0). Differentiable: col's gradient is im2col of g. A
   transposed convolution is a product, then this op (Conv2DTranspose). */
ld_tensor *ld_col2im(ld_tensor *col, int64_t n, int64_t h, int64_t w, int64_t c, int kh, int kw, int sh, int sw,
                     int same, ld_dtype dt);
/* Max pooling of NHWC images, valid windows; x float32 or half (float16,
   bfloat16): y in its dtype (its own values), dx summed in float32 and
   rounded once. */
ld_tensor *ld_maxpool2d(ld_tensor *x, int kh, int kw, int sh, int sw);
/* The same with TF's SAME padding: ceil(in / s) windows, the padding split
   as ld_avgpool2d's and never the maximum (it gets no gradient). */
ld_tensor *ld_maxpool2d_same(ld_tensor *x, int kh, int kw, int sh, int sw);
/* Element i of the counter-based stream `key`: splitmix64 of key + (i+1)*phi,
   as a uniform in [0, 1). Any element can be computed alone, in any order:
   the training noise below and the image layers' draws (one key per call,
   each value keyed by its place in the global batch) use it, so a batch
   split over replicas draws what one device draws. */
static inline uint64_t ld_splitmix64(uint64_t z) {   /* splitmix64's finalizer */
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static inline double ld_counter_uniform(uint64_t key, uint64_t i) {
    return (double)(ld_splitmix64(key + (i + 1) * 0x9e3779b97f4a7c15ULL) >> 11) * 0x1.0p-53;
}
/* Dropout: keep each element with probability 1-rate and scale it by
   1/(1-rate). One key is drawn from rng (NULL: ld_global_rng()) per call;
   the mask is a function of the key and each element's place in the global
   batch (the replica context's row_offset), so replicas of a split batch
   drop what one device would. */
ld_tensor *ld_dropout(ld_tensor *x, float rate, ld_rng *rng);
/* Keras's training noise, drawn as dropout's mask (one key from rng per
   call, each value a function of it and its place in the global batch, so
   every strategy draws the same): LD_NOISE_DROPOUT as ld_dropout (p the
   rate), LD_NOISE_GAUSSIAN x + N(0, p^2) (GaussianNoise, p the stddev),
   LD_NOISE_GAUSSIAN_DROPOUT x * N(1, p / (1 - p)) (GaussianDropout, p the
   rate), LD_NOISE_ALPHA_DROPOUT Keras's AlphaDropout (p the rate: each
   value kept with probability 1 - p, else set to SELU's negative
   saturation -alpha * scale, then a * . + b with Keras's a and b, so the
   mean and variance stay those of SELU's outputs). The values have
   mask_shape, x's or one that broadcasts to it with the batch first
   ([batch, 1, 1, channels]: SpatialDropout2D's). p == 0 returns x.
   Differentiable (a product or sum with constants). */
typedef enum { LD_NOISE_DROPOUT, LD_NOISE_GAUSSIAN, LD_NOISE_GAUSSIAN_DROPOUT, LD_NOISE_ALPHA_DROPOUT } ld_noise;
ld_tensor *ld_noise_op(ld_noise kind, ld_tensor *x, float p, int mask_ndim, const int64_t *mask_shape, ld_rng *rng);

/* ld_contiguous that keeps the graph: a copy of a strided view that needs a
   gradient is recorded, so the gradient reaches the view's source. NULL
   stays NULL. */
ld_tensor *ld_ops_contig(ld_tensor *x);

/* Differentiable views (record on the tape, unlike the plain views). */
ld_tensor *ld_reshape_op(ld_tensor *x, int ndim, const int64_t *shape);
ld_tensor *ld_transpose_op(ld_tensor *x, int d0, int d1);
/* ld_permute's view, recorded: the gradient is the output's under the
   inverse permutation (tf.transpose with perm) */
ld_tensor *ld_permute_op(ld_tensor *x, const int *perm);
/* ld_clone and ld_to_device, recorded: the gradient passes through (to x's
   device), as tf.identity's and a copy between tf.device scopes do */
ld_tensor *ld_clone_op(ld_tensor *x);
/* tf.stop_gradient: x's values (a view; a copy of a strided x) that no tape
   follows, so no gradient flows through them */
ld_tensor *ld_stop_gradient(ld_tensor *x);
ld_tensor *ld_to_device_op(ld_tensor *x, ld_device *dev);

/* Fused losses: mean over the batch, a 0-d result. labels int32/int64 [N]. */
ld_tensor *ld_sparse_xent_logits(ld_tensor *logits, ld_tensor *labels);
/* The same with the sum divided by `denom` instead of the batch (a replica's
   share of a global batch); denom 0 means the batch. */
ld_tensor *ld_sparse_xent_logits_scaled(ld_tensor *logits, ld_tensor *labels, double denom);

#endif
