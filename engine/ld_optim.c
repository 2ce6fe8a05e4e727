/* ld_optim.c - optimizers (Keras' update rules) and learning-rate schedules. */
#include "ld_optim.h"
#include "ld_device.h"
#include "ld_ops.h"
#include "ld_autograd.h"
#include "ld_strategy.h"
#include "ld_nn.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const opt_names[] = {"SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adamax", "Nadam", "Lion", "Adadelta", "Ftrl"};
const char *ld_optimizer_name(ld_opt_kind k) { return opt_names[k]; }

double ld_schedule_at(const ld_schedule *s, int64_t step) {
    switch (s->kind) {
    case LD_SCHED_EXP_DECAY: {
        double p = (double)step / (double)(s->decay_steps > 0 ? s->decay_steps : 1);
        if (s->staircase) p = floor(p);
        return s->initial * pow(s->decay_rate, p);
    }
    case LD_SCHED_COSINE: {
        double from = s->initial, t = (double)step;
        if (s->warmup) {   /* Keras 3: warmup_steps of a line to warmup_target, then the cosine from it */
            double w = (double)s->warmup_steps;
            if (t > (double)s->decay_steps + w) t = (double)s->decay_steps + w;
            if (t < w) return (s->warmup_target - s->initial) * (t / w) + s->initial;
            t -= w;
            from = s->warmup_target;
        } else if (t > (double)s->decay_steps) t = (double)s->decay_steps;
        double cosd = 0.5 * (1 + cos(M_PI * t / (double)(s->decay_steps > 0 ? s->decay_steps : 1)));
        return from * ((1 - s->alpha) * cosd + s->alpha);
    }
    case LD_SCHED_INVERSE_TIME: {
        double p = (double)step / (double)(s->decay_steps > 0 ? s->decay_steps : 1);
        if (s->staircase) p = floor(p);
        return s->initial / (1 + s->decay_rate * p);
    }
    case LD_SCHED_POLYNOMIAL: {
        double t = (double)step, d = (double)(s->decay_steps > 0 ? s->decay_steps : 1);
        if (s->cycle) d *= step == 0 ? 1.0 : ceil(t / d);
        else if (t > d) t = d;
        return (s->initial - s->end_lr) * pow(1 - t / d, s->power) + s->end_lr;
    }
    case LD_SCHED_COSINE_RESTARTS: {
        double f = (double)step / (double)(s->decay_steps > 0 ? s->decay_steps : 1), i;
        if (s->t_mul == 1.0) {
            i = floor(f);
            f -= i;
        } else {   /* restarts of lengths first * t_mul^i */
            i = floor(log(1.0 - f * (1.0 - s->t_mul)) / log(s->t_mul));
            double sum = (1.0 - pow(s->t_mul, i)) / (1.0 - s->t_mul);
            f = (f - sum) / pow(s->t_mul, i);
        }
        double cosd = 0.5 * pow(s->m_mul, i) * (1.0 + cos(M_PI * f));
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
    o->beta1 = 0.9f; o->beta2 = 0.999f; o->epsilon = 1e-7f; o->rho = 0.9f; o->ema_momentum = 0.99f;
    o->initial_accumulator = 0.1f;
    switch (kind) {
    case LD_OPT_SGD: o->lr.initial = 0.01; break;
    case LD_OPT_LION: o->lr.initial = 0.001; o->beta2 = 0.99f; break;
    case LD_OPT_ADAMW: o->lr.initial = 0.001; o->weight_decay = 0.004f; break;
    case LD_OPT_ADADELTA: o->lr.initial = 0.001; o->rho = 0.95f; break;
    case LD_OPT_FTRL: o->lr.initial = 0.001; o->lr_power = -0.5f; break;
    default: o->lr.initial = 0.001; break;
    }
    return o;
}

/* which of the slots 0..2 the optimizer's rule keeps, as configured (ld_optim.h) */
static void rule_uses(const ld_optimizer *o, int *use) {
    int adam = o->kind == LD_OPT_ADAM || o->kind == LD_OPT_ADAMW, rms = o->kind == LD_OPT_RMSPROP;
    /* m and v (Adamax: u; Adadelta: the squares' means; Ftrl: n and z) */
    int two = adam || o->kind == LD_OPT_ADAMAX || o->kind == LD_OPT_NADAM || o->kind == LD_OPT_ADADELTA ||
              o->kind == LD_OPT_FTRL;
    use[0] = o->kind != LD_OPT_SGD || o->momentum != 0;
    use[1] = two || (rms && o->momentum != 0);
    use[2] = (adam && o->amsgrad) || (rms && o->centered);
}

static void plan_free(struct ld_shard_plan *p);
static ld_slot *slot_find(ld_optimizer *o, ld_tensor *var);

void ld_optimizer_free(ld_optimizer *o) {
    if (!o) return;
    plan_free(o->shard);
    for (int i = 0; i < o->n_slots; i++) {
        ld_tensor_release(o->slots[i].var);
        for (int q = 0; q < LD_OPT_SLOTS; q++) ld_tensor_release(o->slots[i].s[q]);
    }
    free(o->slots);
    free(o);
}

double ld_optimizer_lr(const ld_optimizer *o) { return ld_schedule_at(&o->lr, o->iterations); }

double ld_optimizer_loss_factor(const ld_optimizer *o) { return o->loss_scale.on ? o->loss_scale.scale : 1.0; }

/* Each gradient's sum of squares (clipnorm, global_clipnorm), computed on
   the gradient's device into a vector there, the vector read back once per
   device: a step waits for a device once, not once per variable (the bench
   transformer's 153 gradients: 153 waits and copies a step, each draining a
   GPU's queue). out[i] is 0 where grads[i] is NULL. The loss scale's check
   for infs is grads_finite's. */
static int grad_square_sums(int n, ld_tensor *const *grads, double *out) {
    for (int i = 0; i < n; i++) out[i] = 0;
    int *slot = malloc(sizeof *slot * (size_t)(n > 0 ? n : 1));
    if (!slot) return ld_fail(LD_ENOMEM, "out of memory");
    for (int i = 0; i < n; i++) slot[i] = -1;
    int st = LD_OK;
    for (int i = 0; i < n && !st; i++) {
        if (!grads[i] || slot[i] >= 0) continue;
        ld_device *d = grads[i]->storage->device;
        int64_t cnt = 0;
        for (int j = i; j < n; j++)
            if (grads[j] && grads[j]->storage->device == d) slot[j] = (int)cnt++;
        ld_tensor *vec = ld_tensor_empty(LD_F32, 1, &cnt, d);
        if (!vec) { st = ld_error_status(); break; }
        for (int j = i; j < n && !st; j++) {
            if (!grads[j] || grads[j]->storage->device != d) continue;
            ld_tensor *src = ld_unary(LD_UN_SQUARE, grads[j]);
            if (!src) { st = ld_error_status(); break; }
            d->backend->reduce(d, LD_RED_SUM, (float *)vec->storage->data + vec->offset + slot[j], LD_F32, LD_F32,
                               (const char *)src->storage->data + (size_t)src->offset * ld_dtype_size(src->dtype),
                               src->dtype, 1, ld_tensor_numel(src), 1);
            ld_tensor_release(src);
        }
        ld_tensor *h = st ? NULL : ld_host_contiguous(vec);
        const float *v = h ? ld_tensor_data(h) : NULL;
        if (!st && !v && !(st = (int)ld_error_status())) st = ld_fail(LD_EDEVICE, "reading the gradients' checks failed");
        for (int j = i; j < n && v; j++)
            if (grads[j] && grads[j]->storage->device == d) out[j] = v[slot[j]];
        ld_tensor_release(h);
        ld_tensor_release(vec);
    }
    free(slot);
    return st;
}

/* whether every gradient is finite: 1, 0, or -1 on an error. One flag per
   gradient, on its device, set by nonfinite_flags (LD_OPT_BATCH gradients
   a launch, as the update's), the flags read back once per device: where
   a reduction per gradient ran (102 launches a step of the bench
   transformer under mixed_float16). */
static int grads_finite(int n, ld_tensor *const *grads) {
    char *done = calloc((size_t)(n > 0 ? n : 1), 1);
    if (!done) { ld_fail(LD_ENOMEM, "out of memory"); return -1; }
    int finite = 1, st = LD_OK;
    for (int i = 0; i < n && !st; i++) {
        if (!grads[i] || done[i]) continue;
        ld_device *d = grads[i]->storage->device;
        int64_t cnt = 0;
        for (int j = i; j < n; j++) if (grads[j] && grads[j]->storage->device == d) cnt++;
        ld_tensor *flags = ld_tensor_zeros(LD_F32, 1, &cnt, d);
        if (!flags) { st = ld_error_status(); break; }
        ld_check_batch b = {.n = 0};
        ld_tensor *held[LD_OPT_BATCH];
        int64_t base = 0;
        for (int j = i; j < n && !st; j++) {
            if (!grads[j] || grads[j]->storage->device != d) continue;
            done[j] = 1;
            ld_tensor *c = ld_contiguous(grads[j]);
            if (!c) { st = ld_error_status(); break; }
            b.item[b.n] = (ld_check_item){(const char *)c->storage->data + (size_t)c->offset * ld_dtype_size(c->dtype),
                                          c->dtype, ld_tensor_numel(c)};
            held[b.n++] = c;
            if (b.n == LD_OPT_BATCH) {
                d->backend->nonfinite_flags(d, b, (float *)flags->storage->data + flags->offset + base);
                for (int q = 0; q < b.n; q++) ld_tensor_release(held[q]);
                base += b.n;
                b.n = 0;
            }
        }
        if (b.n && !st) d->backend->nonfinite_flags(d, b, (float *)flags->storage->data + flags->offset + base);
        for (int q = 0; q < b.n; q++) ld_tensor_release(held[q]);
        ld_tensor *h = st ? NULL : ld_host_contiguous(flags);
        const float *v = h ? ld_tensor_data(h) : NULL;
        if (!st && !v && !(st = (int)ld_error_status())) st = ld_fail(LD_EDEVICE, "reading the gradients' checks failed");
        for (int64_t q = 0; v && q < cnt; q++) if (v[q] != 0) finite = 0;
        ld_tensor_release(h);
        ld_tensor_release(flags);
    }
    free(done);
    return st ? -1 : finite;
}

static int apply_resolved(ld_optimizer *o, int n, ld_tensor *const *grads, ld_tensor *const *vars, int commit);

ld_slot *ld_optimizer_slot(ld_optimizer *o, ld_tensor *var) {
    ld_slot *found = slot_find(o, var);
    if (found) return found;
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
    int need[LD_OPT_SLOTS];
    rule_uses(o, need);
    need[LD_SLOT_EMA] = o->use_ema;
    need[LD_SLOT_ACCUM] = o->accum_steps >= 2;
    for (int q = 0; q < LD_OPT_SLOTS; q++) {
        if (!need[q]) continue;
        /* Adagrad's and Ftrl's accumulator starts at initial_accumulator_value, as Keras's */
        s->s[q] = q == 0 && (o->kind == LD_OPT_ADAGRAD || o->kind == LD_OPT_FTRL)
                      ? ld_tensor_full(LD_F32, var->ndim, var->shape, o->initial_accumulator, d)
                      : ld_tensor_zeros(LD_F32, var->ndim, var->shape, d);
        if (!s->s[q]) {
            while (q-- > 0) ld_tensor_release(s->s[q]);
            return NULL;
        }
    }
    s->var = ld_tensor_retain(var);
    o->n_slots++;
    return s;
}

int ld_optimizer_apply(ld_optimizer *o, int n, ld_tensor *const *grads, ld_tensor *const *vars_in) {
    /* In a replica, each replica updates its own copy of a mirrored variable
       with the same (all-reduced) gradients; the step counts once, when the
       last replica (replica 0, issued last) applies. */
    const ld_replica_ctx *rc = ld_replica_get();
    if (o->shard && ld_optimizer_consolidate(o)) return ld_error_status();
    ld_tensor *vsmall[64], **vars = n <= 64 ? vsmall : malloc(sizeof *vars * (size_t)n);
    if (!vars) return ld_fail(LD_ENOMEM, "out of memory");
    for (int i = 0; i < n; i++) vars[i] = ld_var(vars_in[i]);
    int st = apply_resolved(o, n, grads, vars, !rc || rc->id == 0);
    /* Keras's optimizer.apply: each variable's constraint after the update */
    for (int i = 0; i < n && !st; i++) if (grads[i]) st = ld_variable_constrain(vars_in[i], vars[i]);
    if (vars != vsmall) free(vars);
    return st;
}

/* Nadam's momentum schedule (Keras 3's): mu_t = b1 (1 - 0.96^t / 2), from 0.96^t */
static double nadam_mu(double b1, double decay_t) { return b1 * (1.0 - 0.5 * decay_t); }

/* one step's rule and hyperparameters (ld_kernels.h's ld_opt_hyper) */
static ld_opt_hyper hyper_of(const ld_optimizer *o, float lr, int64_t step) {
    ld_opt_hyper h = {.lr = lr, .momentum = o->momentum, .b1 = o->beta1, .b2 = o->beta2, .eps = o->epsilon,
                      .rho = o->rho, .nesterov = o->nesterov, .wd = o->weight_decay};
    switch (o->kind) {
    case LD_OPT_SGD:
        h.rule = LD_UPD_SGD;
        break;
    case LD_OPT_ADAM:
    case LD_OPT_ADAMW:   /* Keras 3: AdamW is Adam with a default weight decay (every decay is decoupled) */
        h.rule = LD_UPD_ADAM;
        h.alpha = (float)((double)lr * sqrt(1.0 - pow((double)o->beta2, (double)step)) /
                          (1.0 - pow((double)o->beta1, (double)step)));
        break;
    case LD_OPT_RMSPROP:
        h.rule = LD_UPD_RMSPROP;
        break;
    case LD_OPT_ADAGRAD:
        h.rule = LD_UPD_ADAGRAD;
        break;
    case LD_OPT_ADAMAX:
        h.rule = LD_UPD_ADAMAX;
        h.bc1 = (float)(1.0 - pow((double)o->beta1, (double)step));
        break;
    case LD_OPT_NADAM: {
        /* the product mu_1 ... mu_t (Keras's u_product), from the start: it
           reaches 0 after some thousands of steps, where the loop stops */
        double prod = 1, decay = 1;   /* 0.96^k, k by k: no pow per factor on every step's path */
        for (int64_t k = 1; k <= step && prod != 0; k++) {
            decay *= 0.96;
            prod *= nadam_mu(o->beta1, decay);
        }
        double mu1 = nadam_mu(o->beta1, pow(0.96, (double)(step + 1)));
        h.rule = LD_UPD_NADAM;
        h.mu = (float)nadam_mu(o->beta1, pow(0.96, (double)step));
        h.mu1 = (float)mu1;
        h.bc1 = (float)(1.0 - prod);
        h.bc1n = (float)(1.0 - prod * mu1);
        h.bc2 = (float)(1.0 - pow((double)o->beta2, (double)step));
        break;
    }
    case LD_OPT_ADADELTA:
        h.rule = LD_UPD_ADADELTA;
        break;
    case LD_OPT_FTRL: {
        /* as Keras's float32 ops: l2 + beta / (2 lr), doubled; 2 l2_shrinkage (a Python double, then float32) */
        float l2reg = o->l2 + o->ftrl_beta / (2.0f * lr);
        h.rule = LD_UPD_FTRL;
        h.lrp = -o->lr_power;
        h.l1 = o->l1;
        h.l2x2 = 2.0f * l2reg;
        h.shrink = (float)(2.0 * (double)o->l2_shrinkage);
        break;
    }
    default:
        h.rule = LD_UPD_LION;
        break;
    }
    return h;
}

/* the rule's slots of s (ld_opt_item's s[]: NULL where the rule, as
   configured, keeps none) */
static void rule_slots(const ld_optimizer *o, const ld_slot *s, float **p) {
    int use[3];
    rule_uses(o, use);
    for (int q = 0; q < 3; q++) p[q] = use[q] && s->s[q] ? (float *)s->s[q]->storage->data : NULL;
}

/* The variables of a step go to their devices' opt_update LD_OPT_BATCH at
   a time. A batch holds its gradients until it is sent: a CPU device runs
   the kernel at the call, so they must outlive the loop's own references. */
typedef struct {
    ld_device *d;
    ld_opt_batch b;
    ld_tensor *held[LD_OPT_BATCH];
} opt_batcher;

static void batch_flush(opt_batcher *q) {
    if (q->b.n) q->d->backend->opt_update(q->d, q->b);
    for (int k = 0; k < q->b.n; k++) ld_tensor_release(q->held[k]);
    q->b.n = 0;
}

/* variable v (slots s) with gradient g (a reference, taken) times gscale */
static void batch_add(opt_batcher *q, const ld_optimizer *o, const ld_opt_hyper *h, ld_tensor *v, const ld_slot *s,
                      ld_tensor *g, float gscale) {
    ld_device *d = v->storage->device;
    if (q->b.n && (q->d != d || q->b.n == LD_OPT_BATCH)) batch_flush(q);
    q->d = d;
    q->b.h = *h;
    ld_opt_item *it = &q->b.item[q->b.n];
    it->w = (float *)v->storage->data + v->offset;
    rule_slots(o, s, it->s);
    it->g = (const float *)g->storage->data + g->offset;
    it->n = ld_tensor_numel(v);
    it->gscale = gscale;
    q->held[q->b.n++] = g;
}

int ld_loss_scale_step(ld_loss_scale *ls, int n, ld_tensor *const *grads, int commit, double *unscale) {
    *unscale = 1.0;
    if (!ls->on) return 1;
    int finite = ls->dynamic ? grads_finite(n, grads) : 1;
    if (finite < 0) return -1;
    if (!finite) {                       /* Keras: skip the step, halve the scale */
        if (commit) { ls->scale /= 2; ls->good_steps = 0; ls->skipped++; }
        return 0;
    }
    *unscale = 1.0 / ls->scale;          /* taken before the scale may grow below */
    if (commit && ls->dynamic && ++ls->good_steps >= ls->growth_steps) {   /* Keras: double after N good steps */
        ls->scale *= 2;
        ls->good_steps = 0;
    }
    return 1;
}

/* clipvalue: g clipped to [-v, v] elementwise (NaN stays NaN, as in
   TensorFlow's clip_by_value); takes g, returns the clipped copy or NULL */
static ld_tensor *clip_values(ld_tensor *g, float v) {
    ld_device *d = g->storage->device;
    ld_tensor *lo = ld_tensor_full(LD_F32, 0, NULL, -v, d), *hi = ld_tensor_full(LD_F32, 0, NULL, v, d);
    ld_tensor *a = lo ? ld_maximum(g, lo) : NULL, *b = a && hi ? ld_minimum(a, hi) : NULL;
    ld_tensor_release(lo); ld_tensor_release(hi); ld_tensor_release(a); ld_tensor_release(g);
    return b;
}

/* the slot tensor q of variable v (made with the others on first use) */
static ld_tensor *slot_of(ld_optimizer *o, ld_tensor *v, int q) {
    ld_slot *s = ld_optimizer_slot(o, v);
    if (s && !s->s[q]) ld_fail(LD_EINTERNAL, "optimizer: variable %s has no slot %d", v->name ? v->name : "", q + 1);
    return s ? s->s[q] : NULL;
}

static void release_all(ld_tensor **t, int n) {
    for (int i = 0; t && i < n; i++) ld_tensor_release(t[i]);
    free(t);
}

/* Gradient accumulation (Keras's): each gradient, times unscale, is added to
   its variable's accumulator; on an update call *mean instead gets
   (g + acc) / steps for each variable (new references, NULL where no
   gradient) and the accumulators are emptied. */
static int accumulate(ld_optimizer *o, int n, ld_tensor *const *grads, ld_tensor *const *vars, float unscale,
                      int update, ld_tensor ***mean) {
    ld_tensor **m = update ? calloc((size_t)(n ? n : 1), sizeof *m) : NULL;
    if (update && !m) return ld_fail(LD_ENOMEM, "out of memory");
    int st = LD_OK;
    ld_tape_pause(1);   /* an update, not a step of the computation a tape may be recording */
    for (int i = 0; i < n && !st; i++) {
        if (!grads[i]) continue;
        ld_tensor *acc = slot_of(o, vars[i], LD_SLOT_ACCUM);
        ld_tensor *g = !acc ? NULL : unscale != 1.0f ? ld_mul_scalar(grads[i], unscale) : ld_tensor_retain(grads[i]);
        ld_tensor *sum = g ? ld_add(g, acc) : NULL, *k = NULL;
        if (!sum) st = ld_error_status();
        else if (!update) st = ld_variable_write(acc, sum);
        else if (!(k = ld_tensor_full(LD_F32, 0, NULL, (double)o->accum_steps, acc->storage->device)) ||
                 !(m[i] = ld_div(sum, k)))
            st = ld_error_status();
        else {
            ld_tensor *zero = ld_tensor_full(LD_F32, 0, NULL, 0.0, acc->storage->device);
            st = zero ? ld_variable_write(acc, zero) : ld_error_status();
            ld_tensor_release(zero);
        }
        ld_tensor_release(g); ld_tensor_release(sum); ld_tensor_release(k);
    }
    ld_tape_pause(0);
    if (st) { release_all(m, n); return st; }
    *mean = m;
    return LD_OK;
}

/* use_ema after a call (Keras's _update_model_variables_moving_average):
   each variable's average moves toward it, with momentum 0 while no update
   has been counted; every ema_overwrite_frequency-th call, the averages
   are written into the variables. before: the updates counted before this
   call (Keras's optimizer.iterations during it). */
static int ema_step(ld_optimizer *o, int n, ld_tensor *const *grads, ld_tensor *const *vars, int64_t before) {
    if (!o->use_ema) return LD_OK;
    float m = before != 0 ? o->ema_momentum : 0.0f;
    int over = o->ema_overwrite_frequency > 0 && (before + 1) % o->ema_overwrite_frequency == 0;
    int st = LD_OK;
    ld_tape_pause(1);
    for (int i = 0; i < n && !st; i++) {
        if (!grads[i]) continue;
        ld_tensor *avg = slot_of(o, vars[i], LD_SLOT_EMA);
        ld_tensor *a = avg ? ld_mul_scalar(avg, m) : NULL, *b = a ? ld_mul_scalar(vars[i], 1.0f - m) : NULL;
        ld_tensor *c = b ? ld_add(a, b) : NULL;
        st = c ? ld_variable_write(avg, c) : ld_error_status();
        if (!st && over) st = ld_variable_write(vars[i], avg);
        ld_tensor_release(a); ld_tensor_release(b); ld_tensor_release(c);
    }
    ld_tape_pause(0);
    return st;
}

int ld_optimizer_finalize(ld_optimizer *o, int n, ld_tensor *const *vars) {
    if (!o->use_ema) return LD_OK;
    if (o->shard && ld_optimizer_consolidate(o)) return ld_error_status();
    for (int i = 0; i < n; i++)
        for (int r = 0; r < ld_mirror_count(vars[i]); r++) {
            ld_tensor *copy = ld_mirror_copy(vars[i], r);
            ld_slot *s = slot_find(o, copy);
            if (s && s->s[LD_SLOT_EMA] && ld_variable_write(copy, s->s[LD_SLOT_EMA])) return ld_error_status();
        }
    return LD_OK;
}

static int apply_resolved(ld_optimizer *o, int n, ld_tensor *const *grads_in, ld_tensor *const *vars, int commit) {
    char b1[64], b2[64];
    ld_tensor *const *grads = grads_in;
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
    double unscale = 1.0;
    int go = ld_loss_scale_step(&o->loss_scale, n, grads, commit, &unscale);
    if (go <= 0) return go < 0 ? ld_error_status() : LD_OK;   /* 0: a step skipped */
    int64_t before = o->iterations;
    ld_tensor **mean = NULL;
    if (o->accum_steps >= 2) {
        int64_t calls = o->accum_calls;
        int update = (calls + 1) % o->accum_steps == 0;
        if (commit) o->accum_calls = calls + 1;
        if (accumulate(o, n, grads, vars, (float)unscale, update, &mean)) return ld_error_status();
        if (!update) return ema_step(o, n, grads, vars, before);
        grads = mean;   /* the mean of the accumulated gradients, unscaled */
        unscale = 1.0;
    }
    /* each gradient's factor: the unscaling, and clipnorm's or global_clipnorm's */
    float one_scale = (float)unscale, *scales = NULL;
    int st = LD_OK;
    if (o->clipnorm > 0 || o->global_clipnorm > 0) {
        if (!(scales = malloc(sizeof *scales * (size_t)(n ? n : 1)))) return ld_fail(LD_ENOMEM, "out of memory");
        /* the squared norms computed on the gradients' devices, read back once per device */
        double small[64], *sq = n <= 64 ? small : malloc(sizeof *sq * (size_t)(n > 0 ? n : 1));
        if (!sq) { st = ld_fail(LD_ENOMEM, "out of memory"); goto out; }
        st = grad_square_sums(n, grads, sq);
        double ss = 0;
        for (int i = 0; i < n && !st; i++) {
            scales[i] = one_scale;
            if (!grads[i]) continue;
            double v = sq[i];
            ss += v;
            if (o->clipnorm > 0) {   /* Keras's _clip_by_norm: g c / max(|g|, c); NaN stays NaN */
                double norm = sqrt(v) * unscale, c = o->clipnorm;
                scales[i] = (float)(isnan(norm) ? NAN : unscale * c / (norm > c ? norm : c));
            }
        }
        if (sq != small) free(sq);
        if (st) goto out;
        if (o->global_clipnorm > 0) {
            /* Keras's clip_by_global_norm: c min(1/|g|, 1/c), NaN when the norm is inf or NaN */
            double norm = sqrt(ss) * unscale, c = o->global_clipnorm;
            double f = isfinite(norm) ? c * fmin(1.0 / norm, 1.0 / c) : NAN;
            for (int i = 0; i < n; i++) scales[i] = (float)(unscale * f);
        }
    }
    int64_t step = o->iterations + 1;
    if (commit) o->iterations = step;
    ld_opt_hyper h = hyper_of(o, (float)ld_schedule_at(&o->lr, step - 1), step);
    opt_batcher q = {.b.n = 0};
    for (int i = 0; i < n && !st; i++) {
        if (!grads[i]) continue;
        ld_slot *s = ld_optimizer_slot(o, vars[i]);
        ld_tensor *g = s ? ld_contiguous(grads[i]) : NULL;
        float scale = scales ? scales[i] : one_scale;
        if (g && o->clipvalue > 0) {   /* clipvalue clips the scaled gradient: the product first */
            if (scale != 1.0f) {
                ld_tensor *gs = ld_mul_scalar(g, scale);
                ld_tensor_release(g);
                g = gs;
            }
            if (g) g = clip_values(g, o->clipvalue);
            scale = 1.0f;
        }
        if (!g) st = ld_error_status();
        else batch_add(&q, o, &h, vars[i], s, g, scale);
    }
    batch_flush(&q);
    if (st) goto out;
    st = ema_step(o, n, grads, vars, before);
out:
    free(scales);
    release_all(mean, n);
    return st;
}

/* ================================================================ sharded steps */
struct ld_shard_plan {
    int n, k;
    ld_tensor **vars;          /* [k] the mirrored variables, retained */
    int64_t lo[LD_MAX_LOGICAL], hi[LD_MAX_LOGICAL];   /* replica r's slice of their concatenation */
};

static void plan_free(struct ld_shard_plan *p) {
    if (!p) return;
    for (int i = 0; i < p->k; i++) ld_tensor_release(p->vars[i]);
    free(p->vars);
    free(p);
}

static ld_slot *slot_find(ld_optimizer *o, ld_tensor *var) {
    for (int i = 0; i < o->n_slots; i++) if (o->slots[i].var == var) return &o->slots[i];
    return NULL;
}

int ld_optimizer_consolidate(ld_optimizer *o) {
    struct ld_shard_plan *p = o->shard;
    if (!p) return LD_OK;
    o->shard = NULL;
    for (int i = 0; i < p->k; i++)
        for (int r = 0; r < p->n; r++) ld_device_synchronize(ld_mirror_copy(p->vars[i], r)->storage->device);
    for (int owner = 0; owner < p->n; owner++) {
        int64_t lo = p->lo[owner], hi = p->hi[owner], base = 0;
        for (int i = 0; i < p->k; i++) {
            int64_t len = ld_tensor_numel(p->vars[i]);
            int64_t a = lo > base ? lo - base : 0, b = hi - base < len ? hi - base : len;
            base += len;
            if (a >= b) continue;
            ld_slot *src = slot_find(o, ld_mirror_copy(p->vars[i], owner));
            for (int q = 0; q < p->n && src; q++) {
                ld_slot *dst = q == owner ? NULL : slot_find(o, ld_mirror_copy(p->vars[i], q));
                if (!dst) continue;
                size_t nb = (size_t)(b - a) * sizeof(float);
                for (int q = 0; q < LD_OPT_SLOTS; q++)
                    if (src->s[q] && dst->s[q])
                        memcpy((float *)dst->s[q]->storage->data + a, (float *)src->s[q]->storage->data + a, nb);
            }
        }
    }
    plan_free(p);
    return LD_OK;
}

typedef struct {
    ld_opt_hyper h;
    int k;
    float **w;                  /* [n*k] */
    float **s;                  /* [n*k][3]: the rule's slots' data (o->slots may move; their storage does not) */
} shard_ctx;

static void shard_update(void *ctx, int r, int i, int64_t a, int64_t b, const float *sum, ld_device *d) {
    shard_ctx *x = ctx;
    int j = r * x->k + i;
    ld_opt_batch bt = {.h = x->h, .n = 1};
    ld_opt_item *it = &bt.item[0];
    it->w = x->w[j] + a;
    for (int q = 0; q < 3; q++) it->s[q] = x->s[j * 3 + q] ? x->s[j * 3 + q] + a : NULL;
    it->g = sum;
    it->n = b - a;
    it->gscale = 1.0f;
    ld_cpu_backend()->opt_update(d, bt);
}
static void shard_free(void *ctx) {
    shard_ctx *x = ctx;
    free(x->w);
    free(x);
}

int ld_optimizer_apply_sharded(ld_optimizer *o, ld_comm *c, int k, ld_tensor *const *grads, ld_tensor *const *vars) {
    int n = ld_comm_size(c);
    if (o->clipnorm > 0 || o->global_clipnorm > 0 || o->clipvalue > 0 || o->loss_scale.on || o->use_ema ||
        o->accum_steps >= 2 || n < 2 || k < 1)
        return -1;
    for (int r = 0; r < n; r++)
        if (!ld_device_is_host(ld_comm_device(c, r))) return -1;
    int64_t total = 0;
    for (int i = 0; i < k; i++) {
        if (!vars[i] || ld_mirror_count(vars[i]) != n) return -1;
        if (ld_variable_has_constraint(vars[i])) return -1;   /* a constraint needs the whole variable: ld_optimizer_apply */
        for (int r = 0; r < n; r++) {
            ld_tensor *w = ld_mirror_copy(vars[i], r), *g = grads[r * k + i];
            if (!g || w->storage->device != ld_comm_device(c, r) || !ld_tensor_is_contiguous(w) || w->dtype != LD_F32)
                return -1;
        }
        total += ld_tensor_numel(vars[i]);
    }
    /* a step over other variables (or another replica count) first makes the slots whole */
    struct ld_shard_plan *p = o->shard;
    int same = p && p->n == n && p->k == k;
    for (int i = 0; same && i < k; i++) same = p->vars[i] == vars[i];
    if (p && !same && ld_optimizer_consolidate(o)) return ld_error_status();
    shard_ctx *x = calloc(1, sizeof *x);
    float **arr = x ? calloc((size_t)((1 + 3) * n * k), sizeof *arr) : NULL;
    if (!arr) { free(x); return ld_fail(LD_ENOMEM, "out of memory"); }
    x->k = k;
    x->w = arr; x->s = arr + n * k;
    ld_tensor **outs = malloc(sizeof *outs * (size_t)(n * k));
    if (!outs) { shard_free(x); return ld_fail(LD_ENOMEM, "out of memory"); }
    for (int i = 0; i < k; i++)
        for (int r = 0; r < n; r++) {
            int j = r * k + i;
            ld_tensor *w = ld_mirror_copy(vars[i], r);
            ld_slot *s = ld_optimizer_slot(o, w);
            if (!s) { free(outs); shard_free(x); return ld_error_status(); }
            outs[j] = w;
            x->w[j] = (float *)w->storage->data + w->offset;
            rule_slots(o, s, x->s + j * 3);
        }
    int64_t step = o->iterations + 1;
    x->h = hyper_of(o, (float)ld_schedule_at(&o->lr, step - 1), step);
    int st = ld_comm_reduce_scatter_update(c, k, grads, outs, 0, shard_update, x, shard_free);
    free(outs);
    if (st) return st;
    o->iterations = step;
    if (!same) {
        p = calloc(1, sizeof *p);
        ld_tensor **vs = p ? malloc(sizeof *vs * (size_t)k) : NULL;
        if (!vs) { free(p); return ld_fail(LD_ENOMEM, "out of memory"); }
        p->n = n; p->k = k; p->vars = vs;
        ld_comm_slices(c, k, vars, p->lo, p->hi);
        for (int i = 0; i < k; i++) vs[i] = ld_tensor_retain(vars[i]);
        o->shard = p;
    }
    return LD_OK;
}
