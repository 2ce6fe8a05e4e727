/* ld_optim.c - optimizers (Keras' update rules) and learning-rate schedules. */
#include "ld_optim.h"
#include "ld_device.h"
#include "ld_ops.h"
#include "ld_autograd.h"
#include "ld_strategy.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const opt_names[] = {"SGD", "Adam", "AdamW", "RMSprop"};
const char *ld_optimizer_name(ld_opt_kind k) { return opt_names[k]; }

double ld_schedule_at(const ld_schedule *s, int64_t step) {
    switch (s->kind) {
    case LD_SCHED_EXP_DECAY: {
        double p = (double)step / (double)(s->decay_steps > 0 ? s->decay_steps : 1);
        if (s->staircase) p = floor(p);
        return s->initial * pow(s->decay_rate, p);
    }
    case LD_SCHED_COSINE: {
        double t = (double)(step < s->decay_steps ? step : s->decay_steps) / (double)(s->decay_steps > 0 ? s->decay_steps : 1);
        double cosd = 0.5 * (1 + cos(M_PI * t));
        return s->initial * ((1 - s->alpha) * cosd + s->alpha);
    }
    case LD_SCHED_PIECEWISE:
        for (int i = 0; i < s->n_bounds; i++) if (step <= s->bounds[i]) return s->values[i];
        return s->values[s->n_bounds];
    default:
        return s->initial;
    }
}

ld_optimizer *ld_optimizer_new(ld_opt_kind kind) {
    ld_optimizer *o = calloc(1, sizeof *o);
    if (!o) { ld_fail(LD_ENOMEM, "out of memory"); return NULL; }
    o->kind = kind;
    o->beta1 = 0.9f; o->beta2 = 0.999f; o->epsilon = 1e-7f; o->rho = 0.9f;
    switch (kind) {
    case LD_OPT_SGD: o->lr.initial = 0.01; break;
    case LD_OPT_ADAMW: o->lr.initial = 0.001; o->weight_decay = 0.004f; break;
    default: o->lr.initial = 0.001; break;
    }
    return o;
}

void ld_optimizer_free(ld_optimizer *o) {
    if (!o) return;
    for (int i = 0; i < o->n_slots; i++) {
        ld_tensor_release(o->slots[i].var);
        ld_tensor_release(o->slots[i].s1);
        ld_tensor_release(o->slots[i].s2);
    }
    free(o->slots);
    free(o);
}

double ld_optimizer_lr(const ld_optimizer *o) { return ld_schedule_at(&o->lr, o->iterations); }

static int apply_resolved(ld_optimizer *o, int n, ld_tensor *const *grads, ld_tensor *const *vars, int commit);

static ld_slot *slot_for(ld_optimizer *o, ld_tensor *var) {
    for (int i = 0; i < o->n_slots; i++) if (o->slots[i].var == var) return &o->slots[i];
    if (o->n_slots == o->cap_slots) {
        int cap = o->cap_slots ? 2 * o->cap_slots : 16;
        ld_slot *s = realloc(o->slots, (size_t)cap * sizeof *s);
        if (!s) { ld_fail(LD_ENOMEM, "out of memory"); return NULL; }
        o->slots = s;
        o->cap_slots = cap;
    }
    ld_slot *s = &o->slots[o->n_slots];
    memset(s, 0, sizeof *s);
    ld_device *d = var->storage->device;
    int need1 = o->kind != LD_OPT_SGD || o->momentum != 0;
    int need2 = o->kind == LD_OPT_ADAM || o->kind == LD_OPT_ADAMW || (o->kind == LD_OPT_RMSPROP && o->momentum != 0);
    if (need1 && !(s->s1 = ld_tensor_zeros(LD_F32, var->ndim, var->shape, d))) return NULL;
    if (need2 && !(s->s2 = ld_tensor_zeros(LD_F32, var->ndim, var->shape, d))) { ld_tensor_release(s->s1); return NULL; }
    s->var = ld_tensor_retain(var);
    o->n_slots++;
    return s;
}

int ld_optimizer_apply(ld_optimizer *o, int n, ld_tensor *const *grads, ld_tensor *const *vars_in) {
    /* In a replica, each replica updates its own copy of a mirrored variable
       with the same (all-reduced) gradients; the step counts once, when the
       last replica (replica 0, issued last) applies. */
    const ld_replica_ctx *rc = ld_replica_get();
    ld_tensor *vsmall[64], **vars = n <= 64 ? vsmall : malloc(sizeof *vars * (size_t)n);
    if (!vars) return ld_fail(LD_ENOMEM, "out of memory");
    for (int i = 0; i < n; i++) vars[i] = ld_var(vars_in[i]);
    int st = apply_resolved(o, n, grads, vars, !rc || rc->id == 0);
    if (vars != vsmall) free(vars);
    return st;
}

static int apply_resolved(ld_optimizer *o, int n, ld_tensor *const *grads, ld_tensor *const *vars, int commit) {
    char b1[64], b2[64];
    for (int i = 0; i < n; i++) {
        if (!grads[i]) continue;
        if (!ld_same_shape(grads[i], vars[i]))
            return ld_fail(LD_ESHAPE, "gradient %d has shape %s but its variable %s has shape %s", i + 1,
                           ld_shape_str(grads[i], b1, sizeof b1), vars[i]->name ? vars[i]->name : "",
                           ld_shape_str(vars[i], b2, sizeof b2));
        if (vars[i]->dtype != LD_F32 || grads[i]->dtype != LD_F32)
            return ld_fail(LD_ETYPE, "optimizers update float32 variables");
        if (!ld_tensor_is_contiguous(vars[i]))
            return ld_fail(LD_EARG, "variable %d is not contiguous", i + 1);
        if (vars[i]->storage->device != grads[i]->storage->device)
            return ld_fail(LD_EDEVICE, "gradient %d is on %s, its variable on %s", i + 1,
                           grads[i]->storage->device->name, vars[i]->storage->device->name);
    }
    float scale = 1.0f;
    if (o->clipnorm > 0) {
        /* the squared norm computed on the gradients' devices, one value read each */
        double ss = 0;
        for (int i = 0; i < n; i++) {
            if (!grads[i]) continue;
            ld_tensor *sq = ld_unary(LD_UN_SQUARE, grads[i]), *s = sq ? ld_sum(sq, LD_ALL_AXES, 0) : NULL;
            double v = 0;
            int st = s ? ld_tensor_item(s, &v) : ld_error_status();
            ld_tensor_release(sq); ld_tensor_release(s);
            if (st) return st;
            ss += v;
        }
        double norm = sqrt(ss);
        if (norm > o->clipnorm) scale = (float)(o->clipnorm / norm);
    }
    int64_t step = o->iterations + 1;
    if (commit) o->iterations = step;
    float lr = (float)ld_schedule_at(&o->lr, step - 1);
    for (int i = 0; i < n; i++) {
        if (!grads[i]) continue;
        ld_slot *s = slot_for(o, vars[i]);
        if (!s) return ld_error_status();
        ld_tensor *g = ld_contiguous(grads[i]);
        if (!g) return ld_error_status();
        if (scale != 1.0f) {
            ld_tensor *gs = ld_mul_scalar(g, scale);
            ld_tensor_release(g);
            if (!(g = gs)) return ld_error_status();
        }
        ld_tensor *v = vars[i];
        ld_device *d = v->storage->device;
        const ld_backend *be = d->backend;
        float *w = (float *)v->storage->data + v->offset, *gp = (float *)g->storage->data + g->offset;
        float *s1 = s->s1 ? (float *)s->s1->storage->data : NULL, *s2 = s->s2 ? (float *)s->s2->storage->data : NULL;
        int64_t m = ld_tensor_numel(v);
        switch (o->kind) {
        case LD_OPT_SGD:
            be->sgd_update(d, w, o->momentum != 0 ? s1 : NULL, gp, m, lr, o->momentum, o->nesterov, o->weight_decay);
            break;
        case LD_OPT_ADAM:
            be->adam_update(d, w, s1, s2, gp, m, lr, o->beta1, o->beta2, o->epsilon, step, o->weight_decay, 0);
            break;
        case LD_OPT_ADAMW:
            be->adam_update(d, w, s1, s2, gp, m, lr, o->beta1, o->beta2, o->epsilon, step, o->weight_decay, 1);
            break;
        case LD_OPT_RMSPROP:
            be->rmsprop_update(d, w, s1, o->momentum != 0 ? s2 : NULL, gp, m, lr, o->rho, o->momentum, o->epsilon);
            break;
        }
        ld_tensor_release(g);
    }
    return LD_OK;
}
