/*
 * cuda_optim.cu - the optimizer updates, each one fused kernel reading the
 * gradient once and updating weights and slots in place (Keras' formulas, as
 * in ld_cpu.c and ld_optim.h).
 */
#include "cuda_common.cuh"
#include "ld_elementwise_math.h"

#include <math.h>

__global__ void k_sgd(float *w, float *v, const float *g, int64_t n, float lr, float mom, int nesterov, float wd) {
    CU_LOOP(i, n) {
        float gi = g[i] + wd * w[i];
        if (v) {
            float vi = mom * v[i] - lr * gi;
            v[i] = vi;
            w[i] += nesterov ? mom * vi - lr * gi : vi;
        } else {
            w[i] -= lr * gi;
        }
    }
}

void cu_sgd_update(ld_device *d, float *w, float *v, const float *g, int64_t n, float lr, float momentum,
                   int nesterov, float weight_decay) {
    if (n <= 0) return;
    cu_dev *cd = cu_begin(d);
    if (!cd) return;
    k_sgd<<<cu_grid(n, 256), 256, 0, cd->stream>>>(w, v, g, n, lr, momentum, nesterov, weight_decay);
    cu_launched(cd, "sgd_update kernel");
}

/* a = lr * sqrt(1 - b2^t) / (1 - b1^t), computed on the host in double as the CPU does */
__global__ void k_adam(float *w, float *m, float *v, float *vhat, const float *g, int64_t n, float lr, float a,
                       float c1, float c2, float eps, float wd, int decoupled) {
    CU_LOOP(i, n) {
        float gi = g[i], wi = w[i];
        if (decoupled) wi -= lr * wd * wi;
        else gi += wd * wi;
        float mi = m[i], vi = v[i];
        mi += (gi - mi) * c1;
        vi += (gi * gi - vi) * c2;
        m[i] = mi;
        v[i] = vi;
        if (vhat) vhat[i] = vi = ld_ew_max(vhat[i], vi);   /* amsgrad */
        w[i] = wi - a * mi / (sqrtf(vi) + eps);
    }
}

void cu_adam_update(ld_device *d, float *w, float *m, float *v, float *vhat, const float *g, int64_t n, float lr,
                    float b1, float b2, float eps, int64_t step, float weight_decay, int decoupled) {
    if (n <= 0) return;
    cu_dev *cd = cu_begin(d);
    if (!cd) return;
    double alpha = lr * sqrt(1.0 - pow(b2, (double)step)) / (1.0 - pow(b1, (double)step));
    k_adam<<<cu_grid(n, 256), 256, 0, cd->stream>>>(w, m, v, vhat, g, n, lr, (float)alpha, 1 - b1, 1 - b2, eps,
                                                     weight_decay, decoupled);
    cu_launched(cd, "adam_update kernel");
}

__global__ void k_rmsprop(float *w, float *ms, float *mom, float *mg, const float *g, int64_t n, float lr, float rho,
                          float momentum, float eps) {
    CU_LOOP(i, n) {
        float gi = g[i];
        float s = rho * ms[i] + (1 - rho) * gi * gi;
        ms[i] = s;
        if (mg) {   /* centered */
            float a = rho * mg[i] + (1 - rho) * gi;
            mg[i] = a;
            s -= a * a;
        }
        float inc = lr * gi / sqrtf(s + eps);
        if (mom) {
            float mo = momentum * mom[i] + inc;
            mom[i] = mo;
            w[i] -= mo;
        } else {
            w[i] -= inc;
        }
    }
}

void cu_rmsprop_update(ld_device *d, float *w, float *ms, float *mom, float *mg, const float *g, int64_t n,
                       float lr, float rho, float momentum, float eps) {
    if (n <= 0) return;
    cu_dev *cd = cu_begin(d);
    if (!cd) return;
    k_rmsprop<<<cu_grid(n, 256), 256, 0, cd->stream>>>(w, ms, mom, mg, g, n, lr, rho, momentum, eps);
    cu_launched(cd, "rmsprop_update kernel");
}
