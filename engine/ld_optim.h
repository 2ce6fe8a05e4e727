/*
 * ld_optim.h - optimizers with Keras' update rules, and learning-rate schedules.
 *
 *     ld_optimizer *o = ld_optimizer_new(LD_OPT_ADAM);   // lr 0.001, Keras' defaults
 *     ld_optimizer_apply(o, n, grads, vars);              // one step
 *
 * Slots (momentum, Adam's m and v) are created per variable on first use and
 * live on the variable's device; a step is one fused kernel (opt_update, ld_kernels.h)
 * per device and LD_OPT_BATCH variables, the rules in ld_optim_math.h.
 *
 *  SGD:     v = momentum*v - lr*g;  w += v   (nesterov: w += momentum*v - lr*g)
 *  Adam:    m += (g-m)(1-b1); v += (g^2-v)(1-b2); w -= lr*sqrt(1-b2^t)/(1-b1^t) * m/(sqrt(v)+eps)
 *           (amsgrad: vhat = max(vhat, v), and vhat in v's place)
 *  AdamW:   Adam with weight_decay 0.004 by default
 *  Every one with weight_decay wd: w -= lr*wd*w first (Keras 3's decoupled weight decay)
 *  RMSprop: ms = rho*ms + (1-rho) g^2; w -= lr*g/sqrt(ms+eps)  (with momentum: through a velocity;
 *           centered: mg = rho*mg + (1-rho) g, and ms - mg^2 in ms's place)
 *  Adagrad: acc += g^2 (acc from initial_accumulator_value); w -= lr*g/sqrt(acc+eps)
 *  Adamax:  m += (g-m)(1-b1); u = max(b2*u, |g|); w -= lr*m / ((1-b1^t)(u+eps))
 *  Nadam:   Adam's m and v with Nesterov's momentum schedule mu_t = b1 (1 - 0.96^t / 2) (Keras 3's)
 *  Lion:    w -= lr*sign(b1*m + (1-b1) g); m = b2*m + (1-b2) g
 *  Adadelta: ag = rho ag + (1-rho) g^2; d = -sqrt(ad+eps) g / sqrt(ag+eps); ad = rho ad + (1-rho) d^2; w += lr d
 *  Ftrl:    n' = n + g^2; z += g + 2 l2s w - (n'^-p - n^-p)/lr w; w = (clip(z, -l1, l1) - z) / (n'^-p/lr + 2 l2 + beta/lr)
 *           (p = learning_rate_power, n from initial_accumulator_value)
 */
#ifndef LD_OPTIM_H
#define LD_OPTIM_H

#include "ld_tensor.h"

typedef enum {
    LD_OPT_SGD = 0, LD_OPT_ADAM, LD_OPT_ADAMW, LD_OPT_RMSPROP, LD_OPT_ADAGRAD, LD_OPT_ADAMAX, LD_OPT_NADAM, LD_OPT_LION,
    LD_OPT_ADADELTA, LD_OPT_FTRL, LD_OPT_COUNT
} ld_opt_kind;

/* Keras 3's learning-rate schedules (keras/src/optimizers/schedules) */
typedef enum {
    LD_SCHED_CONSTANT = 0, LD_SCHED_EXP_DECAY, LD_SCHED_COSINE, LD_SCHED_PIECEWISE, LD_SCHED_INVERSE_TIME,
    LD_SCHED_POLYNOMIAL, LD_SCHED_COSINE_RESTARTS
} ld_sched_kind;
typedef struct {
    ld_sched_kind kind;
    double initial, decay_rate, alpha;
    int64_t decay_steps;     /* CosineDecayRestarts: first_decay_steps */
    int staircase;
    double end_lr, power;    /* PolynomialDecay: end_learning_rate, power; cycle */
    int cycle;
    double t_mul, m_mul;     /* CosineDecayRestarts */
    int warmup;              /* CosineDecay: a linear warmup from initial to warmup_target over warmup_steps first */
    double warmup_target;
    int64_t warmup_steps;
    int n_bounds;
    int64_t bounds[16];
    double values[17];
} ld_schedule;
double ld_schedule_at(const ld_schedule *s, int64_t step);

/* A variable's slots, NULL where its optimizer does not keep them:
     SGD      s[0] the momentum's velocity
     Adam(W)  s[0] m, s[1] v, s[2] amsgrad's running maximum of v
     RMSprop  s[0] the mean square, s[1] the momentum's velocity, s[2] the
              centered variant's mean gradient
     Adagrad  s[0] the accumulator; Adamax s[0] m, s[1] u; Nadam s[0] m, s[1] v; Lion s[0] m
     Adadelta s[0] the mean square of the gradients, s[1] of the steps; Ftrl s[0] the accumulator n, s[1] the linear z
   and with any of them s[3], use_ema's moving average of the variable, and
   s[4], the gradients summed by gradient accumulation. */
#define LD_OPT_SLOTS 5
#define LD_SLOT_EMA 3
#define LD_SLOT_ACCUM 4
typedef struct ld_slot { ld_tensor *var; ld_tensor *s[LD_OPT_SLOTS]; } ld_slot;

/* Loss scaling (Keras's mixed_precision.LossScaleOptimizer). The training
   step multiplies the loss by `scale` before the backward pass, so that
   float16 gradients do not underflow; ld_optimizer_apply then checks the
   (already reduced, float32) gradients: any inf or NaN skips the step (no
   update, no iteration) and, when dynamic, halves the scale; otherwise the
   gradients are divided by the scale and applied, and after growth_steps
   such steps in a row the scale doubles. The check reads the gradients'
   values: one wait for the devices per step, only when loss scaling is on.
   Every replica applies the same reduced gradients, so every replica
   decides alike; the state moves once per step (with the step count). */
typedef struct {
    int on;                  /* 0: no loss scaling (the default) */
    int dynamic;             /* 0: a fixed scale, non-finite steps applied as TF's dynamic=False */
    double scale;            /* the current scale (initial 2^15) */
    int64_t growth_steps;    /* good steps before the scale doubles (2000) */
    int64_t good_steps;      /* good steps since the last change (Keras's step_counter) */
    int64_t skipped;         /* steps skipped for non-finite gradients, in all */
} ld_loss_scale;

typedef struct ld_optimizer {
    ld_opt_kind kind;
    ld_schedule lr;          /* LD_SCHED_CONSTANT: lr.initial */
    float momentum, beta1, beta2, epsilon, rho, weight_decay;
    float initial_accumulator;   /* Adagrad's and Ftrl's initial_accumulator_value (0.1) */
    /* Ftrl's learning_rate_power (-0.5), l1/l2/l2_shrinkage_regularization_strength and beta (0) */
    float lr_power, l1, l2, l2_shrinkage, ftrl_beta;
    int nesterov;
    int amsgrad, centered;   /* Adam(W)'s and RMSprop's variants: a third slot */
    /* Keras's gradient clipping (0 = off; at most one is set): clipnorm
       scales each gradient to norm <= clipnorm on its own, global_clipnorm
       all of them together by their joint norm, clipvalue clips each element
       to [-clipvalue, clipvalue]; on the unscaled gradients (loss scaling),
       after they are summed across replicas */
    float clipnorm, global_clipnorm, clipvalue;
    /* Keras's use_ema: after every call each variable's moving average
       avg = m avg + (1 - m) w (m = 0 while no update has been counted),
       written into the variables on the calls where iterations + 1 is a
       multiple of ema_overwrite_frequency (0: never) and when fit ends
       (ld_optimizer_finalize) */
    int use_ema;
    float ema_momentum;
    int64_t ema_overwrite_frequency;
    /* Keras's gradient_accumulation_steps (0: off, else >= 2): each call adds
       its (unscaled, replica-summed) gradients to the variables'
       accumulators; every accum_steps-th call applies their mean instead
       (then clipping and the update) and empties them. iterations counts the
       updates (Keras's optimizer.iterations), accum_calls every call. */
    int64_t accum_steps, accum_calls;
    int64_t iterations;      /* steps applied */
    int n_slots, cap_slots;
    ld_slot *slots;
    struct ld_shard_plan *shard;   /* set while replicas hold only their slice of the slots */
    ld_loss_scale loss_scale;
} ld_optimizer;

ld_optimizer *ld_optimizer_new(ld_opt_kind kind);   /* Keras' defaults */
void ld_optimizer_free(ld_optimizer *o);
const char *ld_optimizer_name(ld_opt_kind k);
/* The slot (momentum, Adam's m and v) of one variable copy, made (zeroed) the
   first time; NULL on out-of-memory. */
ld_slot *ld_optimizer_slot(ld_optimizer *o, ld_tensor *var);

/* ---- an optimizer's state (ld_optim_state.c), for checkpoints and shipping ----
   Per variable: the slot tensors (ld_slot's s[q] of variable i at
   slots[q*n + i], q < LD_OPT_SLOTS) or NULL, as new references; set copies
   them into the optimizer's slots (made when absent) and sets the step count. */
int ld_optimizer_state_get(ld_optimizer *o, int n, ld_tensor *const *vars, ld_tensor **slots);
int ld_optimizer_state_set(ld_optimizer *o, int64_t iterations, int n, ld_tensor *const *vars,
                           ld_tensor *const *slots);
double ld_optimizer_lr(const ld_optimizer *o);       /* at the current iteration */
/* The loss scale's rule for one step's gradients (ld_optimizer_apply's, and
   a parameter-server worker's before it pushes): 1 to apply them multiplied
   by *unscale, 0 to skip the step, -1 on an error. commit: move the state
   (halve, count, double); replicas that repeat a step's check pass 0. */
int ld_loss_scale_step(ld_loss_scale *ls, int n, ld_tensor *const *grads, int commit, double *unscale);
/* The factor a training step multiplies its loss by: the loss scale, or 1. */
double ld_optimizer_loss_factor(const ld_optimizer *o);
/* One update of every var by its grad. Errors on shape mismatch. */
int ld_optimizer_apply(ld_optimizer *o, int n, ld_tensor *const *grads, ld_tensor *const *vars);
/* Keras's finalize_variable_values, at the end of fit: with use_ema, every
   copy of each variable takes its moving average; otherwise nothing. */
int ld_optimizer_finalize(ld_optimizer *o, int n, ld_tensor *const *vars);

/* One step of k mirrored variables with the update sharded over the
   replicas of c (ld_comm_reduce_scatter_update): grads holds n*k tensors,
   tensor i of replica r at grads[r*k + i], each summed in place over the
   replicas for the slice that replica updates. Each replica then holds
   current slots (momentum, Adam's m and v) for its slice only; the slots are
   made whole again (ld_optimizer_consolidate) before anything else reads or
   updates them. Returns LD_OK once queued, -1 (no error set) when this
   optimizer or communicator cannot shard (clipnorm and loss scaling need
   the whole gradient; non-CPU devices), or an error. */
typedef struct ld_comm ld_comm;
int ld_optimizer_apply_sharded(ld_optimizer *o, ld_comm *c, int k, ld_tensor *const *grads, ld_tensor *const *vars);
/* Copy every replica's slice of the slots to the other replicas (waits for
   the devices); a no-op unless a sharded step left them partial. */
int ld_optimizer_consolidate(ld_optimizer *o);

#endif
