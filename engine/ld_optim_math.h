/*
 * ld_optim_math.h - the optimizers' update of one element (Keras's rules,
 * ld_optim.h), shared by the CPU's opt_update (ld_cpu.c) and the CUDA one
 * (cuda/cuda_optim.cu), so both backends compute the same expressions. Plain
 * C; under nvcc the functions are __host__ __device__. g is the gradient's
 * element already multiplied by the item's gscale (ld_kernels.h).
 */
#ifndef LD_OPTIM_MATH_H
#define LD_OPTIM_MATH_H

#include <math.h>
#include <stdint.h>

#include "ld_elementwise_math.h"

#ifdef __CUDACC__
#define LD_OPT_FN static inline __host__ __device__
#else
#define LD_OPT_FN static inline
#endif

/* Keras 3's weight decay, every rule's: decoupled, w - (w wd) lr before the
   rule's step (keras/src/optimizers/base_optimizer.py, _apply_weight_decay;
   as written there, so the float32 products round alike) */
LD_OPT_FN float ld_opt_decayed(const ld_opt_hyper *b, float w) { return b->wd != 0 ? w - w * b->wd * b->lr : w; }

/* SGD: v = momentum v - lr g; w += v (nesterov: w += momentum v - lr g);
   without a velocity (v NULL) w -= lr g */
LD_OPT_FN void ld_opt_sgd(const ld_opt_hyper *b, float *w, float *v, float g, int64_t i) {
    float wi = ld_opt_decayed(b, w[i]);
    if (v) {
        float vi = b->momentum * v[i] - b->lr * g;
        v[i] = vi;
        w[i] = wi + (b->nesterov ? b->momentum * vi - b->lr * g : vi);
    } else {
        w[i] = wi - b->lr * g;
    }
}

/* Adam(W): m += (g - m)(1 - b1); v += (g^2 - v)(1 - b2); vhat = max(vhat,
   v) with amsgrad; w -= alpha m / (sqrt(v or vhat) + eps) */
LD_OPT_FN void ld_opt_adam(const ld_opt_hyper *b, float *w, float *m, float *v, float *vhat, float g, int64_t i) {
    float wi = ld_opt_decayed(b, w[i]);
    float mi = m[i], vi = v[i];
    mi += (g - mi) * (1 - b->b1);
    vi += (g * g - vi) * (1 - b->b2);
    m[i] = mi;
    v[i] = vi;
    if (vhat) vhat[i] = vi = ld_ew_max(vhat[i], vi);
    w[i] = wi - b->alpha * mi / (sqrtf(vi) + b->eps);
}

/* RMSprop: ms = rho ms + (1 - rho) g^2 (centered: mg = rho mg + (1 - rho) g
   and ms - mg^2 in ms's place); inc = lr g / sqrt(ms + eps); w -= inc, or
   through a velocity mom = momentum mom + inc */
LD_OPT_FN void ld_opt_rmsprop(const ld_opt_hyper *b, float *w, float *ms, float *mom, float *mg, float g, int64_t i) {
    float wi = ld_opt_decayed(b, w[i]);
    float s = b->rho * ms[i] + (1 - b->rho) * g * g;
    ms[i] = s;
    if (mg) {
        float a = b->rho * mg[i] + (1 - b->rho) * g;
        mg[i] = a;
        s -= a * a;
    }
    float inc = b->lr * g / sqrtf(s + b->eps);
    if (mom) {
        float mo = b->momentum * mom[i] + inc;
        mom[i] = mo;
        w[i] = wi - mo;
    } else {
        w[i] = wi - inc;
    }
}

/* element i of item it under rule b (on the CPU, b points to a copy of the
   batch's ld_opt_hyper in a local, which no store through w can alias) */
LD_OPT_FN void ld_opt_elem(const ld_opt_hyper *b, const ld_opt_item *it, float g, int64_t i) {
    switch (b->rule) {
    case LD_UPD_SGD: ld_opt_sgd(b, it->w, it->s[0], g, i); break;
    case LD_UPD_ADAM: ld_opt_adam(b, it->w, it->s[0], it->s[1], it->s[2], g, i); break;
    default: ld_opt_rmsprop(b, it->w, it->s[0], it->s[1], it->s[2], g, i); break;
    }
}

#endif
