/*
 * ld_ops_norm.h - normalization ops for the LayerNormalization and
 * BatchNormalization layers (Keras 3 semantics). Both take float32 and the
 * half dtypes (float16, bfloat16), with float32 arithmetic.
 *
 *     y = ld_layer_norm(x, gamma, beta, 1e-3f);                 // over the last axis
 *     y = ld_batch_norm(x, gamma, beta, ld_var(mm), ld_var(mv), 0.99f, 1e-3f, training, 0);
 */
#ifndef LD_OPS_NORM_H
#define LD_OPS_NORM_H

#include "ld_device.h"

/* Normalize over the LAST axis: (x - mean) / sqrt(var + eps) * gamma + beta,
   biased variance; gamma, beta [C] or NULL (none). Differentiable in x,
   gamma and beta. x float32 or half (float16, bfloat16): the arithmetic is
   float32's, the result in x's dtype, or in the half dtype of a half
   autocast (Keras's LayerNormalization computes in float32 and casts its
   output to the compute dtype), rounded once; dx in x's dtype. */
ld_tensor *ld_layer_norm(ld_tensor *x, ld_tensor *gamma, ld_tensor *beta, float eps);

/* Batch normalization with the channels on the LAST axis (NHWC images,
   [batch, features]); statistics over all the other axes.
   training = 0: y = (x - moving_mean) / sqrt(moving_var + eps) * gamma + beta.
   training = 1: the batch's mean and biased variance normalize x (gradients
   flow through them), and the moving statistics are updated in place, off
   the tape, queued on the device like any kernel:
       moving = moving * momentum + batch_stat * (1 - momentum)
   An empty batch returns an empty output and leaves them alone.
   synchronized = 1: the batch statistics are those of the global batch of
   the step's replicas, combined with ld_replica_all_reduce_sum in two
   rounds ([count, sum] per channel, then the sum of squared deviations from
   the global mean), and the backward pass sums its two per-channel
   reductions the same way. With one replica it is the unsynchronized op.
   gamma, beta: [C] or NULL; moving_mean, moving_var: [C], contiguous, on
   x's device (pass ld_var(v): the current replica's copy).
   x float32 or half: the arithmetic is float32's (statistics in double)
   whatever x's dtype, y and dx in x's dtype, rounded once (Keras computes a
   half input's normalization in float32 and casts the output back). */
ld_tensor *ld_batch_norm(ld_tensor *x, ld_tensor *gamma, ld_tensor *beta, ld_tensor *moving_mean,
                         ld_tensor *moving_var, float momentum, float eps, int training, int synchronized);

#endif
