/*
 * ld_ops_index.h - differentiable indexing ops: concatenation, slicing,
 * padding, embedding lookups, gathers along an axis. (Average pooling: ld_ops_pool.h.)
 *
 * STATUS: ld_concat_op and ld_slice_op are done and tested (CPU; CUDA kernel
 * compiled), ready to use. The embedding op below too.
 *
 * Like the ops of ld_ops.h: arguments checked (ld_fail with a message naming
 * the op and the shapes; NULL returned), the kernels of the operands' device
 * run, and a node recorded while a tape records and an input needs a
 * gradient. Results are new contiguous tensors.
 */
#ifndef LD_OPS_INDEX_H
#define LD_OPS_INDEX_H

#include "ld_device.h"

/* Concatenation of n >= 1 tensors along `axis` (negative counts from the
   end); every other axis equal. float32 tensors get their gradients here;
   tensors of one half dtype too (through float32); others are ld_concat's
   copy. Any n (more than LD_NODE_MAX_IN inputs
   are recorded as a chain of nodes over views of the result: no extra
   copies). n == 1 returns xs[0] retained. */
ld_tensor *ld_concat_op(int n, ld_tensor *const *xs, int axis);
/* x with `before` and `after` slices filled with `value` along `axis`
   (negative counts from the end): a concatenation, float32 as ld_concat_op;
   the gradient is the middle block's (none reaches the padding). x itself,
   retained, when both are 0. ZeroPadding2D's zeros, causal Conv1D's, and
   the -inf around a SAME max pooling's input (ld_maxpool2d_same). */
ld_tensor *ld_pad_op(ld_tensor *x, int axis, int64_t before, int64_t after, double value);
/* x[..., start:start+len, ...] along `axis` (negative counts from the end),
   as a new contiguous tensor; 0 <= start, start + len <= x->shape[axis].
   The gradient is the output's gradient written into a zero tensor's block. */
ld_tensor *ld_slice_op(ld_tensor *x, int axis, int64_t start, int64_t len);
/* t:slice and t[i] as differentiable views (any dtype; a float x gets its
   gradient): ld_slice's view [start, stop) by step (bounds as Python's) and
   ld_select's view without the axis, recorded while a tape records and x
   needs a gradient. Unlike ld_slice_op no copy is made: a write through the
   view reaches x. */
ld_tensor *ld_slice_view_op(ld_tensor *x, int axis, int64_t start, int64_t stop, int64_t step);
ld_tensor *ld_select_op(ld_tensor *x, int axis, int64_t index);

/* table [V, D] float32, ids int32/int64 of any shape S -> [S..., D].
   Host ids outside [0, V) are an error naming the id and V; on a device
   that queues kernels a bad id gives a zero row and a kernel error reported
   by the next read. The table's gradient: zero, then rows scatter-added
   (repeated ids add up). The ids get none. */
ld_tensor *ld_embedding_op(ld_tensor *table, ld_tensor *ids);

/* tf.gather(t, idx, axis): the slices of t at indices idx (int32/int64, any
   shape; negative ones count from the end) along `axis` (negative from the
   end), shaped t.shape[:axis] + idx.shape + t.shape[axis+1:], on t's
   device. An axis or an index out of range is an error naming it. A float
   t gets its gradient (scatter-added, as the embedding's); idx none. */
ld_tensor *ld_gather(ld_tensor *t, ld_tensor *idx, int axis);

/* tf.math.top_k: the k largest values along the last axis, in descending
   order, and their int32 indices (ties: the lower index first, as TF's);
   the values are x's (gathered: a float x gets its gradient, scattered to
   those places). NaN counts as above +inf (NumPy's rule; TF's NaN order is
   not total). The order is found on the host. */
int ld_top_k(ld_tensor *x, int64_t k, ld_tensor **values, ld_tensor **indices);
/* tf.argsort and tf.sort along axis, ascending or descending, stable (ties
   keep their order); argsort's int32, sort's values differentiable as top_k's */
ld_tensor *ld_argsort(ld_tensor *x, int axis, int descending);
ld_tensor *ld_sort(ld_tensor *x, int axis, int descending);

#endif
