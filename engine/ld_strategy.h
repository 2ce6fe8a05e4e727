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
#include "ld_replica.h"

/* The replica context, the step's random streams and a variable's
   per-replica copies are declared in ld_replica.h, for the layers below
   (ops, autograd, layers, optimizers) that need only those. */
/* ---- mirrored variables ----
   A mirrored variable is copy 0 of its copies (one per replica device); the
   tensor keeps the others in its extension slot (ld_tensor.h). */
/* While devices are set, new variables (ld_variable_created, ld_replica.h)
   are mirrored on them. */
int ld_mirror_set_devices(int n, ld_device *const *devs);

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
