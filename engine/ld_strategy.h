/*
 * ld_strategy.h - what synchronous data parallelism needs from the engine:
 * a replica context, mirrored variables and an all-reduce over devices.
 *
 * A front end runs one step like this (MirroredStrategy in lua_bindings):
 *
 *     ld_replica_step_begin(n);                // random streams: each replica draws as one device
 *     for r = n-1 .. 0:                        // replica 0 last: cpu:0 runs inline
 *         ld_replica_set(&(ld_replica_ctx){r, n, global_batch, devices[r], first_row[r]});
 *         ... forward, loss, backward on devices[r] (queued to its executor) ...
 *     ld_comm_all_reduce(comm, k, grads);      // k tensors per replica, summed in place
 *     for r: ld_replica_set(r); ld_optimizer_apply(...)   // same update everywhere
 *     ld_replica_set(NULL); ld_replica_step_end();
 *
 * Variables created while mirroring is on get one copy per device;
 * ld_var(v) is the copy of the current replica, which layers, tapes and
 * optimizers use, so their code does not change.
 */
#ifndef LD_STRATEGY_H
#define LD_STRATEGY_H

#include "ld_tensor.h"
#include "ld_executor.h"

typedef struct {
    int id, n;                  /* replica id in [0, n) */
    double global_batch;        /* examples in the global batch (0: unknown) */
    ld_device *device;          /* the replica's device, where tensors made in the replica go (NULL: none) */
    int64_t row_offset;         /* the global batch's row that is this replica's first row (0: unknown) */
} ld_replica_ctx;

void ld_replica_set(const ld_replica_ctx *ctx);    /* NULL: cross-replica context */
const ld_replica_ctx *ld_replica_get(void);        /* NULL outside a replica */

/* Random numbers in a step. step_begin(n) copies the global generator's
   state into n per-replica streams; while replica r's context is set,
   ld_global_rng() is replica r's stream, so every replica draws what one
   device would have drawn in its place (dropout draws one key per call and
   indexes its mask by global row, ld_ops.c). step_end() leaves the global
   generator where replica 0's stream is, as after one device's step. Draws
   made outside a replica between the two are lost. n in [1, LD_MAX_LOGICAL]. */
int ld_replica_step_begin(int n);
void ld_replica_step_end(void);
/* The current replica's stream went from `before` to where it is now making
   something made once for all replicas (a layer's initial variables: the
   first replica to run a layer builds it). The other replicas' streams skip
   those draws when they reach `before`, as one device's generator would
   have made them there. A no-op outside a step's replicas. */
void ld_replica_draws_shared(const ld_rng *before);

/* Sum a small contiguous float32 tensor t across the replicas of the step,
   in place (synchronized BatchNorm's statistics): replica r's k-th call
   meets every other replica's k-th call; the sum is queued on t's device
   like a kernel, in replica order (the same bits on every replica). A
   no-op outside a replica or with one replica. CPU devices. */
int ld_replica_all_reduce_sum(ld_tensor *t);
/* When the step's replicas span processes (MultiWorkerMirrored: each runs
   its share of the replicas, ld_replica_step_begin counting the local ones),
   ld_replica_all_reduce_sum calls this reducer, which sums t across every
   process in place (blocking). The strategy sets it around its steps; NULL
   unsets it. */
typedef int (*ld_step_reducer)(void *ctx, ld_tensor *t);
void ld_replica_set_reducer(ld_step_reducer fn, void *ctx);

/* ---- mirrored variables ----
   A mirrored variable is copy 0 of its copies (one per replica device); the
   tensor keeps the others in its extension slot (ld_tensor.h). */
/* While devices are set, new variables (ld_variable_created) are mirrored on them. */
int ld_mirror_set_devices(int n, ld_device *const *devs);
/* A new variable v: mirrored on the devices set (moved to the first, copied
   to the others). LD_OK, or a status (out of memory on a device) with v left
   as it was, on its own device and not mirrored. */
int ld_variable_created(ld_tensor *v);
ld_tensor *ld_var(ld_tensor *v);                   /* the current replica's copy (borrowed) */
int ld_mirror_count(const ld_tensor *v);           /* 1 for a tensor that is not mirrored */
ld_tensor *ld_mirror_copy(ld_tensor *v, int r);    /* borrowed, NULL when out of range */
/* Writing a variable, TF's rule for mirrored ones: inside a replica context
   only the current replica's copy is written; in cross-replica context every
   copy. src is broadcast as by ld_copy_into and moved to each copy's device;
   any other tensor is written like a one-copy variable. On a shape error
   nothing is written. _index writes v[index] (along axis 0, negative from
   the end), as `v[i] = x` does. Increments read ld_var(v), add, and write:
   one path for every write. */
int ld_variable_write(ld_tensor *v, ld_tensor *src);
int ld_variable_write_index(ld_tensor *v, int64_t index, ld_tensor *src);
int ld_variable_add(ld_tensor *v, ld_tensor *delta, int subtract);

/* ---- collectives between the devices of one process ---- */
typedef enum { LD_COMM_ALL_REDUCE = 0, LD_COMM_REDUCE_TO_ONE } ld_comm_impl;
typedef struct ld_comm ld_comm;
ld_comm *ld_comm_new(int n, ld_device *const *devs, ld_comm_impl impl);
void ld_comm_free(ld_comm *c);
/* Sum (or average) k tensors across the n replicas, in place: t[r*k + i] is
   tensor i of replica r, on devs[r]; shapes must agree across replicas.
   The work is queued on every device; replica r sums slice r of the data
   and writes the sum into every replica's tensors (over shared memory the
   reduce-scatter and the all-gather are one pass between two barriers).
   When every replica's tensor i is a pending weight gradient (x_q^T dy_q,
   ld_tensor.h), replica r computes its slice of sum_q x_q^T dy_q straight
   from every replica's factors instead of summing computed gradients: the
   same products in all, with no per-replica gradient to fill and re-read
   (a reduce-scatter fused into the products). Otherwise pending tensors
   are computed first. */
int ld_comm_all_reduce(ld_comm *c, int k, ld_tensor *const *t, int mean);
/* Reduce-scatter, update, all-gather: replica r sums its slice of the k
   tensors t (n*k, as in all_reduce), calls update(ctx, r, i, a, b, dev) on
   each block [a, b) of tensor i in that slice (on its device's thread, right
   after summing it), and writes the updated block of the k tensors `out`
   (n*k, shaped like t) into every other replica's `out`. The other slices
   of t are left partly summed. This is the sharded optimizer step (ZeRO stage
   1) over shared memory: each replica updates 1/n of the variables and the
   updated variables are gathered, instead of every replica updating all of
   them. CPU devices only. ctx_free(ctx) runs when every replica is done
   (also on failure). */
typedef void (*ld_slice_fn)(void *ctx, int r, int i, int64_t a, int64_t b, const float *sum, ld_device *dev);
int ld_comm_reduce_scatter_update(ld_comm *c, int k, ld_tensor *const *t, ld_tensor *const *out, int mean,
                                  ld_slice_fn update, void *ctx, void (*ctx_free)(void *));
/* Every replica's slice [lo[r], hi[r]) of the concatenation of k tensors
   shaped like t (about equal shares, boundaries on rows of 2-d tensors). */
void ld_comm_slices(const ld_comm *c, int k, ld_tensor *const *t, int64_t *lo, int64_t *hi);
int ld_comm_size(const ld_comm *c);
ld_device *ld_comm_device(const ld_comm *c, int r);
typedef struct {
    int64_t calls, bytes;       /* bytes reduced per replica, summed over calls */
    double seconds;             /* time inside all-reduce, slowest replica, summed */
    int64_t products;           /* tensors summed from their factors (weight gradients, ld_ops.h) */
} ld_comm_stats;
void ld_comm_stats_get(ld_comm *c, ld_comm_stats *s, int reset);

#endif
