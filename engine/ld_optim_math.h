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

/* Adagrad: acc += g^2; w -= lr g / sqrt(acc + eps) */
LD_OPT_FN void ld_opt_adagrad(const ld_opt_hyper *b, float *w, float *acc, float g, int64_t i) {
    float wi = ld_opt_decayed(b, w[i]);
    float a = acc[i] + g * g;
    acc[i] = a;
    w[i] = wi - (b->lr * g) / sqrtf(a + b->eps);
}

/* Adamax: m += (g - m)(1 - b1); u = max(b2 u, |g|); w -= lr m / ((1 - b1^t)(u + eps)) */
LD_OPT_FN void ld_opt_adamax(const ld_opt_hyper *b, float *w, float *m, float *u, float g, int64_t i) {
    float wi = ld_opt_decayed(b, w[i]);
    float mi = m[i] + (g - m[i]) * (1 - b->b1), ui = ld_ew_max(b->b2 * u[i], fabsf(g));
    m[i] = mi;
    u[i] = ui;
    w[i] = wi - (b->lr * mi) / (b->bc1 * (ui + b->eps));
}

/* Nadam (Keras 3's): Adam's m and v; m_hat = mu_{t+1} m / (1 - prod mu_..t+1)
   + (1 - mu_t) g / (1 - prod mu_..t); v_hat = v / (1 - b2^t); w -= m_hat lr /
   (sqrt(v_hat) + eps) */
LD_OPT_FN void ld_opt_nadam(const ld_opt_hyper *b, float *w, float *m, float *v, float g, int64_t i) {
    float wi = ld_opt_decayed(b, w[i]);
    float mi = m[i] + (g - m[i]) * (1 - b->b1), vi = v[i] + (g * g - v[i]) * (1 - b->b2);
    m[i] = mi;
    v[i] = vi;
    float mh = (b->mu1 * mi) / b->bc1n + ((1 - b->mu) * g) / b->bc1, vh = vi / b->bc2;
    w[i] = wi - (mh * b->lr) / (sqrtf(vh) + b->eps);
}

/* Lion: w -= lr sign(b1 m + (1 - b1) g); m = b2 m + (1 - b2) g */
LD_OPT_FN void ld_opt_lion(const ld_opt_hyper *b, float *w, float *m, float g, int64_t i) {
    float wi = ld_opt_decayed(b, w[i]);
    float c = m[i] * b->b1 + g * (1 - b->b1);
    w[i] = wi - b->lr * (c > 0 ? 1.0f : c < 0 ? -1.0f : c);   /* sign: 0 and NaN as they are */
    m[i] = m[i] * b->b2 + g * (1 - b->b2);
}

/* Adadelta (Keras's): ag = rho ag + (1 - rho) g^2; d = -(sqrt(ad + eps) g) /
   sqrt(ag + eps); ad = rho ad + (1 - rho) d^2; w += lr d */
LD_OPT_FN void ld_opt_adadelta(const ld_opt_hyper *b, float *w, float *ag, float *ad, float g, int64_t i) {
    float wi = ld_opt_decayed(b, w[i]);
    float a = b->rho * ag[i] + (1 - b->rho) * (g * g);
    ag[i] = a;
    float d = -((sqrtf(ad[i] + b->eps) * g) / sqrtf(a + b->eps));
    ad[i] = b->rho * ad[i] + (1 - b->rho) * (d * d);
    w[i] = wi + b->lr * d;
}

/* Ftrl (Keras's, McMahan et al. 2013): n' = n + g^2; z += g + shrink w -
   (n'^lrp - n^lrp) / lr w; w = (clip(z, -l1, l1) - z) / (n'^lrp / lr + l2x2) */
LD_OPT_FN void ld_opt_ftrl(const ld_opt_hyper *b, float *w, float *acc, float *lin, float g, int64_t i) {
    float wi = ld_opt_decayed(b, w[i]);
    float n = acc[i], n1 = n + g * g, p1 = powf(n1, b->lrp);
    float z = lin[i] + ((g + b->shrink * wi) - ((p1 - powf(n, b->lrp)) / b->lr) * wi);
    lin[i] = z;
    w[i] = (ld_ew_min(ld_ew_max(z, -b->l1), b->l1) - z) / (p1 / b->lr + b->l2x2);
    acc[i] = n1;
}

/* one element under the rule: every backend's dispatch (ld_cpu.c's loops over
   a piece, cuda_optim.cu's per element) */
LD_OPT_FN void ld_opt_rule(const ld_opt_hyper *b, float *w, float *s0, float *s1, float *s2, float g, int64_t i) {
    switch (b->rule) {
    case LD_UPD_SGD: ld_opt_sgd(b, w, s0, g, i); break;
    case LD_UPD_ADAM: ld_opt_adam(b, w, s0, s1, s2, g, i); break;
    case LD_UPD_RMSPROP: ld_opt_rmsprop(b, w, s0, s1, s2, g, i); break;
    case LD_UPD_ADAGRAD: ld_opt_adagrad(b, w, s0, g, i); break;
    case LD_UPD_ADAMAX: ld_opt_adamax(b, w, s0, s1, g, i); break;
    case LD_UPD_NADAM: ld_opt_nadam(b, w, s0, s1, g, i); break;
    case LD_UPD_ADADELTA: ld_opt_adadelta(b, w, s0, s1, g, i); break;
    case LD_UPD_FTRL: ld_opt_ftrl(b, w, s0, s1, g, i); break;
    default: ld_opt_lion(b, w, s0, g, i); break;
    }
}

/* element i of item it under rule b (on the CPU, b points to a copy of the
   batch's ld_opt_hyper in a local, which no store through w can alias) */
LD_OPT_FN void ld_opt_elem(const ld_opt_hyper *b, const ld_opt_item *it, float g, int64_t i) {
    ld_opt_rule(b, it->w, it->s[0], it->s[1], it->s[2], g, i);
}

#endif
