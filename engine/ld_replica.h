/*
 * ld_replica.h - the replica context: what the layers below the strategies
 * (ops, autograd, layers, optimizers) need to know about the replica they
 * run in, without seeing the strategies' collectives (ld_strategy.h).
 *
 * A strategy sets the context around each replica's work of a step
 * (ld_strategy.h shows the loop); tensors made in a replica go to its
 * device, random draws come from its stream, and a mirrored variable reads
 * as the replica's copy (ld_var). Implemented by the strategy layer
 * (ld_strategy.c), which owns the step and its collectives.
 */
#ifndef LD_REPLICA_H
#define LD_REPLICA_H

#include "ld_tensor.h"
#include "ld_device.h"

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

/* Mirrored variables (ld_strategy.h makes them): copy 0 of a variable's
   copies, one per replica device. */
ld_tensor *ld_var(ld_tensor *v);                   /* the current replica's copy (borrowed) */
int ld_mirror_count(const ld_tensor *v);           /* 1 for a tensor that is not mirrored */
ld_tensor *ld_mirror_copy(ld_tensor *v, int r);    /* borrowed, NULL when out of range */
/* A new variable v: mirrored on the devices set (moved to the first, copied
   to the others). LD_OK, or a status (out of memory on a device) with v left
   as it was, on its own device and not mirrored. */
int ld_variable_created(ld_tensor *v);
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

#endif
