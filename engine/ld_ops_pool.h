/*
 * ld_ops_pool.h - differentiable average pooling ops (NHWC), as Keras'
 * AveragePooling2D and GlobalAveragePooling2D. Like the ops of ld_ops.h:
 * arguments checked (ld_fail with a message naming the op and the shapes;
 * NULL returned), the kernels of the operand's device run, and a node
 * recorded while a tape records. Max pooling: ld_maxpool2d (ld_ops.h).
 */
#ifndef LD_OPS_POOL_H
#define LD_OPS_POOL_H

#include "ld_tensor.h"

/* Average pooling of NHWC x, as Keras' AveragePooling2D: valid padding
   (output (in - k) / s + 1) or same (ceil(in / s), padding split as TF does,
   padded cells left out of each average). */
ld_tensor *ld_avgpool2d(ld_tensor *x, int kh, int kw, int sh, int sw, int same_padding);
/* Mean over H and W of NHWC x: [N, C], or [N, 1, 1, C] with keepdims. */
ld_tensor *ld_global_avgpool2d(ld_tensor *x, int keepdims);

#endif
