/*
 * ld_autograd.h - reverse-mode differentiation with a gradient tape (TF style).
 *
 *     ld_tape *tape = ld_tape_new(0);
 *     ld_tape_push(tape);                      // record ops on this thread
 *     ld_tensor *y = ld_mul(x, x);             // x->requires_grad set, or ld_tape_watch(tape, x)
 *     ld_tape_pop(tape);
 *     ld_tensor *dx;
 *     ld_tape_gradient(tape, y, 1, &x, &dx);   // dx = 2x
 *     ld_tape_free(tape);
 *
 * An op records a node while some tape is active on the calling thread and
 * one of its inputs requires a gradient (a variable, a watched tensor, or a
 * recorded result). Nodes hold references to what backward needs; the output
 * holds its node. Tapes are per thread, so replicas on several threads record
 * independently.
 */
#ifndef LD_AUTOGRAD_H
#define LD_AUTOGRAD_H

#include "ld_tensor.h"

typedef struct ld_node ld_node;
/* Given the gradient of the output, return gradients for each input (NULL
   where an input needs none). Returns LD_OK or a status. */
typedef int (*ld_backward_fn)(ld_node *n, ld_tensor *grad_out, ld_tensor **grad_in);

#define LD_NODE_MAX_IN 4
#define LD_NODE_MAX_SAVED 4
struct ld_node {
    int refcount;
    const char *op;                         /* op name, for messages */
    ld_backward_fn backward;
    int n_in;
    ld_tensor *in[LD_NODE_MAX_IN];          /* retained */
    ld_tensor *saved[LD_NODE_MAX_SAVED];    /* retained; op specific */
    double args[8];                         /* op specific scalars */
    int64_t out_shape[LD_MAX_DIMS];
    int out_ndim;
    uint64_t seq;                           /* creation order (topological) */
};

typedef struct ld_tape ld_tape;
ld_tape *ld_tape_new(int persistent);
void ld_tape_free(ld_tape *t);
void ld_tape_push(ld_tape *t);         /* start recording on this thread */
void ld_tape_pop(ld_tape *t);
int ld_tape_watch(ld_tape *t, ld_tensor *x);
int ld_tape_persistent(const ld_tape *t);
int ld_tape_recording(void);           /* some tape active on this thread */
/* stop recording temporarily (optimizer updates, a stop_gradient); returns
   the previous setting, to restore */
int ld_tape_pause(int paused);
/* grads[i] = d target / d sources[i] (zeros when not connected; NULL never).
   A non-persistent tape can compute gradients once. */
int ld_tape_gradient(ld_tape *t, ld_tensor *target, int n, ld_tensor **sources, ld_tensor **grads);
/* The same with target's gradient given (TF's output_gradients: a vector-
   Jacobian product), a tensor of target's shape; NULL: ones. */
int ld_tape_gradient_seeded(ld_tape *t, ld_tensor *target, ld_tensor *output_grad, int n, ld_tensor **sources,
                            ld_tensor **grads);
/* TF's tape.jacobian: *out [target's shape..., source's shape...], float32 on
   the source's device, row by row (one backward pass per element of
   target, each seeded by one element); one use of a non-persistent tape. */
int ld_tape_jacobian(ld_tape *t, ld_tensor *target, ld_tensor *source, ld_tensor **out);

/* Used by ops: record a node for `out` when recording and an input requires grad.
   Returns the node (owned by out) or NULL when nothing was recorded. */
ld_node *ld_record(ld_tensor *out, const char *op, ld_backward_fn bw, int n_in, ld_tensor **in);
void ld_node_release(ld_node *n);
/* Whether a gradient must flow into t (a variable, watched, or recorded result).
   Backward functions skip the work for inputs that need none. */
int ld_needs_grad(const ld_tensor *t);

#endif
