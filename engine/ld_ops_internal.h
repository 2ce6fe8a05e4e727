/*
 * ld_ops_internal.h - helpers the op files share (ld_ops.c, ld_ops_index.c,
 * ld_ops_attn.c, ld_ops_norm.c); defined in ld_ops.c. Not part of the API.
 */
#ifndef LD_OPS_INTERNAL_H
#define LD_OPS_INTERNAL_H

#include "ld_device.h"

#define DEV(t) ((t)->storage->device)
#define BE(t) (DEV(t)->backend)
#define FPTR(t) ((float *)(t)->storage->data + (t)->offset)
/* t's first element on its device, of any dtype: what a kernel of that
   device gets (never read by the host: a GPU's memory is not host memory) */
#define DPTR(t) ((void *)((char *)(t)->storage->data + (t)->offset * (int64_t)ld_dtype_size((t)->dtype)))

/* An op's output: written only by the kernel the op queues on its device,
   so it may reuse a block whose old kernels are still queued there
   (ld_alloc_stream_ordered). Anything the host writes is ld_tensor_empty. */
ld_tensor *ld_ops_out_empty(ld_dtype dt, int ndim, const int64_t *shape, ld_device *dev);

/* LD_EDEVICE (with the message "<op>: tensors are on A and B; move one with
   :to()") unless a and b are on the same device */
int ld_check_same_device(const ld_tensor *a, const ld_tensor *b, const char *op);

/* *axis in [-ndim, ndim) made non-negative; LD_EARG past it */
int ld_ops_norm_axis(const ld_tensor *t, int *axis, const char *op);

/* the products of shape's dimensions before and after axis */
void ld_ops_split_axis(int ndim, const int64_t *shape, int axis, int64_t *outer, int64_t *inner);

/* "same" padding along one axis of size in, kernel k, stride s: the output
   size ceil(in / s) and the padding before it (half the total, rounded down) */
void ld_ops_same_pad(int64_t in, int64_t k, int64_t s, int64_t *out, int64_t *pad);

/* float16 and bfloat16 (ld_half.h): an op computes in float32 (its operands
   cast in, sums, softmax and norms accumulating in float32) and hands its
   result back in the operands' half dtype. ld_ops_result_dtype gives that
   dtype for operands a and b (b NULL for one): the half dtype when an operand
   is half and the other is the same half dtype, an integer or absent;
   LD_F32 otherwise (float16 with bfloat16, or a half with float32, widen to
   float32 as PyTorch does). ld_ops_in_dtype returns out in dtype dt: out
   itself for float32 or NULL, else a cast copy (out released). */
ld_dtype ld_ops_result_dtype(const ld_tensor *a, const ld_tensor *b);
ld_tensor *ld_ops_in_dtype(ld_tensor *out, ld_dtype dt);
/* y + b (b cast to y's dtype; NULL: none), then relu when asked, recorded;
   takes y's reference (released, NULL passes through): the epilogue of a
   half product (ld_linear_half, a convolution under autocast) */
ld_tensor *ld_ops_bias_relu(ld_tensor *y, ld_tensor *b, int relu);

#endif
