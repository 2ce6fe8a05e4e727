/* ld_layer_options.c - Keras's per-weight options of layers: initializers,
 * regularizers and constraints (ld_nn.h), by Keras's class names and config
 * keys, with Keras's formulas. */
#include "ld_nn.h"
#include "ld_autograd.h"
#include "ld_replica.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ================================================================ option names */
static const char *const role_names[LD_ROLE_COUNT] = {"kernel", "bias", "recurrent", "embeddings", "depthwise",
                                                        "pointwise"};
static const char *const kind_suffix[] = {"_initializer", "_regularizer", "_constraint"};

const char *ld_weight_role_name(int role) { return role >= 0 && role < LD_ROLE_COUNT ? role_names[role] : "activity"; }

int ld_weight_option_find(const ld_layer_class *c, const char *name, int *role, ld_wopt_kind *kind) {
    if (!c->roles) return LD_EARG;
    if (!strcmp(name, "activity_regularizer")) { *role = -1; *kind = LD_WOPT_REGULARIZER; return LD_OK; }
    for (int r = 0; r < LD_ROLE_COUNT; r++) {
        size_t n = strlen(role_names[r]);
        if (!(c->roles & LD_ROLE_BIT(r)) || strncmp(name, role_names[r], n)) continue;
        for (int k = 0; k < 3; k++)
            if (!strcmp(name + n, kind_suffix[k])) { *role = r; *kind = (ld_wopt_kind)k; return LD_OK; }
    }
    return LD_EARG;
}

int ld_weight_option_name(const ld_layer_class *c, int i, char *buf, size_t n) {
    for (int r = 0; r < LD_ROLE_COUNT; r++)
        for (int k = 0; k < 3 && (c->roles & LD_ROLE_BIT(r)); k++)
            if (i-- == 0) { snprintf(buf, n, "%s%s", role_names[r], kind_suffix[k]); return 1; }
    if (c->roles && i == 0) { snprintf(buf, n, "activity_regularizer"); return 1; }
    return 0;
}

/* ================================================================ tables
   One row per Keras class: its snake_case alias and its config keys with
   their defaults. */
typedef struct {
    const char *class_name, *alias;
    const char *keys[4];
    double defs[4];
} opt_class;

static const opt_class init_classes[] = {
    {"GlorotUniform", "glorot_uniform", {NULL}, {0}},
    {"GlorotNormal", "glorot_normal", {NULL}, {0}},
    {"HeNormal", "he_normal", {NULL}, {0}},
    {"HeUniform", "he_uniform", {NULL}, {0}},
    {"LecunNormal", "lecun_normal", {NULL}, {0}},
    {"LecunUniform", "lecun_uniform", {NULL}, {0}},
    {"Zeros", "zeros", {NULL}, {0}},
    {"Ones", "ones", {NULL}, {0}},
    {"Constant", "constant", {"value"}, {0}},
    {"RandomNormal", "random_normal", {"mean", "stddev"}, {0, 0.05}},
    {"RandomUniform", "random_uniform", {"minval", "maxval"}, {-0.05, 0.05}},
    {"TruncatedNormal", "truncated_normal", {"mean", "stddev"}, {0, 0.05}},
    {"Orthogonal", "orthogonal", {"gain"}, {1.0}},
    {NULL, NULL, {NULL}, {0}}};
static const opt_class reg_classes[] = {
    {"L1", "l1", {"l1"}, {0.01}},
    {"L2", "l2", {"l2"}, {0.01}},
    {"L1L2", "l1_l2", {"l1", "l2"}, {0.0, 0.0}},
    {NULL, NULL, {NULL}, {0}}};
static const opt_class constraint_classes[] = {
    {"MaxNorm", "max_norm", {"max_value", "axis"}, {2.0, 0}},
    {"NonNeg", "non_neg", {NULL}, {0}},
    {"UnitNorm", "unit_norm", {"axis"}, {0}},
    {"MinMaxNorm", "min_max_norm", {"min_value", "max_value", "rate", "axis"}, {0.0, 1.0, 1.0, 0}},
    {NULL, NULL, {NULL}, {0}}};

const char *ld_weight_option_class(ld_wopt_kind k, int i, const char **alias) {
    const opt_class *t = k == LD_WOPT_INITIALIZER ? init_classes : k == LD_WOPT_REGULARIZER ? reg_classes : constraint_classes;
    for (int j = 0; t[j].class_name; j++)
        if (j == i) { if (alias) *alias = t[j].alias; return t[j].class_name; }
    return NULL;
}

static const opt_class *find_class(const opt_class *t, const char *name, const char *what) {
    for (const opt_class *c = t; c->class_name; c++)
        if (!strcmp(c->class_name, name) || !strcmp(c->alias, name)) return c;
    char choices[400];
    size_t q = 0;
    for (const opt_class *c = t; c->class_name && q < sizeof choices; c++)
        q += (size_t)snprintf(choices + q, sizeof choices - q, "%s%s", q ? ", " : "", c->alias);
    ld_fail(LD_EARG, "unknown %s '%s' (%s, or their Keras class names)", what, name, choices);
    return NULL;
}
static const opt_class *class_of(const opt_class *t, const char *class_name) {
    for (const opt_class *c = t; c->class_name; c++) if (!strcmp(c->class_name, class_name)) return c;
    return NULL;
}
static int key_index(const opt_class *c, const char *key, const char *what) {
    for (int i = 0; i < 4 && c->keys[i]; i++) if (!strcmp(c->keys[i], key)) return i;
    char keys[128] = "";
    size_t q = 0;
    for (int i = 0; i < 4 && c->keys[i]; i++) q += (size_t)snprintf(keys + q, sizeof keys - q, "%s%s", q ? ", " : "", c->keys[i]);
    ld_fail(LD_EARG, "%s %s has no option '%s' (%s)", what, c->class_name, key, q ? keys : "it takes none");
    return -1;
}
static int list_params(const opt_class *c, const double *vals, const char **names, double *out) {
    int n = 0;
    for (; c && n < 4 && c->keys[n]; n++) { names[n] = c->keys[n]; out[n] = vals[n]; }
    return n;
}

/* ---- initializers */
int ld_initializer_named(const char *name, ld_initializer *out) {
    const opt_class *c = find_class(init_classes, name, "initializer");
    if (!c) return ld_error_status();
    memset(out, 0, sizeof *out);
    snprintf(out->class_name, sizeof out->class_name, "%s", c->class_name);
    out->a = c->defs[0];
    out->b = c->defs[1];
    return LD_OK;
}
int ld_initializer_set(ld_initializer *x, const char *key, double v) {
    if (!strcmp(key, "seed")) {
        if (v < 0 || v != floor(v)) return ld_fail(LD_EARG, "initializer seed must be a non-negative integer, got %g", v);
        x->seeded = 1;
        x->seed = (uint64_t)v;
        return LD_OK;
    }
    const opt_class *c = class_of(init_classes, x->class_name);
    int i = key_index(c, key, "initializer");
    if (i < 0) return ld_error_status();
    if (i == 0) x->a = v; else x->b = v;
    return LD_OK;
}
int ld_initializer_params(const ld_initializer *x, const char *names[2], double vals[2]) {
    const char *nm[4];
    double v[4], in[4] = {x->a, x->b, 0, 0};
    int n = list_params(class_of(init_classes, x->class_name), in, nm, v);
    for (int i = 0; i < n && i < 2; i++) { names[i] = nm[i]; vals[i] = v[i]; }
    return n;
}

/* ---- regularizers */
int ld_regularizer_named(const char *name, ld_regularizer *out) {
    const opt_class *c = find_class(reg_classes, name, "regularizer");
    if (!c) return ld_error_status();
    memset(out, 0, sizeof *out);
    snprintf(out->class_name, sizeof out->class_name, "%s", c->class_name);
    for (int i = 0; i < 2 && c->keys[i]; i++) {
        if (!strcmp(c->keys[i], "l1")) out->l1 = c->defs[i]; else out->l2 = c->defs[i];
    }
    return LD_OK;
}
int ld_regularizer_set(ld_regularizer *x, const char *key, double v) {
    const opt_class *c = class_of(reg_classes, x->class_name);
    if (key_index(c, key, "regularizer") < 0) return ld_error_status();
    if (!(v >= 0) || isinf(v)) return ld_fail(LD_EARG, "regularizer %s: %s must be a number >= 0, got %g", x->class_name, key, v);
    if (!strcmp(key, "l1")) x->l1 = v; else x->l2 = v;
    return LD_OK;
}
int ld_regularizer_params(const ld_regularizer *x, const char *names[2], double vals[2]) {
    const opt_class *c = class_of(reg_classes, x->class_name);
    int n = 0;
    for (; c && n < 2 && c->keys[n]; n++) { names[n] = c->keys[n]; vals[n] = !strcmp(c->keys[n], "l1") ? x->l1 : x->l2; }
    return n;
}

/* ---- constraints: config keys min_value, max_value, rate (numbers), axis (an integer) */
static double constraint_get(const ld_constraint *x, const char *key) {
    if (!strcmp(key, "min_value")) return x->min_value;
    if (!strcmp(key, "max_value")) return x->max_value;
    if (!strcmp(key, "rate")) return x->rate;
    return x->axis;
}
static void constraint_put(ld_constraint *x, const char *key, double v) {
    if (!strcmp(key, "min_value")) x->min_value = v;
    else if (!strcmp(key, "max_value")) x->max_value = v;
    else if (!strcmp(key, "rate")) x->rate = v;
    else x->axis = (int)v;
}
int ld_constraint_named(const char *name, ld_constraint *out) {
    const opt_class *c = find_class(constraint_classes, name, "constraint");
    if (!c) return ld_error_status();
    memset(out, 0, sizeof *out);
    snprintf(out->class_name, sizeof out->class_name, "%s", c->class_name);
    for (int i = 0; i < 4 && c->keys[i]; i++) constraint_put(out, c->keys[i], c->defs[i]);
    return LD_OK;
}
int ld_constraint_set(ld_constraint *x, const char *key, double v) {
    const opt_class *c = class_of(constraint_classes, x->class_name);
    if (key_index(c, key, "constraint") < 0) return ld_error_status();
    if (!strcmp(key, "axis")) {
        if (v != floor(v) || fabs(v) > LD_MAX_DIMS) return ld_fail(LD_EARG, "constraint %s: axis must be an integer, got %g", x->class_name, v);
    } else if (!(v >= 0) || isinf(v))
        return ld_fail(LD_EARG, "constraint %s: %s must be a number >= 0, got %g", x->class_name, key, v);
    constraint_put(x, key, v);
    return LD_OK;
}
int ld_constraint_params(const ld_constraint *x, const char *names[4], double vals[4]) {
    const opt_class *c = class_of(constraint_classes, x->class_name);
    int n = 0;
    for (; c && n < 4 && c->keys[n]; n++) { names[n] = c->keys[n]; vals[n] = constraint_get(x, c->keys[n]); }
    return n;
}

/* ================================================================ initializing
   Keras's compute_fans: a vector's fans are its length; a matrix's its two
   axes; more axes multiply both by the receptive field (every axis but the
   last two). */
static void fans(int ndim, const int64_t *s, double *fan_in, double *fan_out) {
    if (ndim == 0) { *fan_in = *fan_out = 1; return; }
    if (ndim == 1) { *fan_in = *fan_out = (double)s[0]; return; }
    double rf = 1;
    for (int i = 0; i < ndim - 2; i++) rf *= (double)s[i];
    *fan_in = (double)s[ndim - 2] * rf;
    *fan_out = (double)s[ndim - 1] * rf;
}

/* normal draws redrawn outside two standard deviations (Keras's truncated_normal) */
static ld_tensor *truncated(int ndim, const int64_t *shape, double mean, double std, ld_rng *rng) {
    ld_tensor *t = ld_tensor_empty(LD_F32, ndim, shape, NULL);
    if (!t) return NULL;
    float *d = ld_tensor_data_unsynced(t);
    int64_t n = ld_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        double z;
        do z = ld_rng_normal(rng); while (fabs(z) > 2);
        d[i] = (float)(mean + std * z);
    }
    return t;
}


/* the initial value of a weight shaped `shape` from x, drawn from rng */
ld_tensor *ld_initializer_make(const ld_initializer *x, int ndim, const int64_t *shape, ld_rng *rng) {
    ld_rng own;
    if (x->seeded) { ld_rng_seed(&own, x->seed); rng = &own; }   /* Keras: a seeded initializer repeats its values */
    const char *c = x->class_name;
    double fi, fo;
    fans(ndim, shape, &fi, &fo);
    if (!strcmp(c, "Zeros")) return ld_tensor_zeros(LD_F32, ndim, shape, NULL);
    if (!strcmp(c, "Ones")) return ld_tensor_full(LD_F32, ndim, shape, 1.0, NULL);
    if (!strcmp(c, "Constant")) return ld_tensor_full(LD_F32, ndim, shape, x->a, NULL);
    if (!strcmp(c, "RandomNormal")) return ld_tensor_normal(ndim, shape, (float)x->a, (float)x->b, rng, NULL);
    if (!strcmp(c, "RandomUniform")) return ld_tensor_uniform(ndim, shape, (float)x->a, (float)x->b, rng, NULL);
    if (!strcmp(c, "TruncatedNormal")) return truncated(ndim, shape, x->a, x->b, rng);
    if (!strcmp(c, "Orthogonal")) {
        ld_tensor *o = ld_orthogonal_init(ndim, shape, rng);
        if (!o || x->a == 1.0) return o;
        ld_tensor *g = ld_mul_scalar(o, (float)x->a);
        ld_tensor_release(o);
        return g;
    }
    /* VarianceScaling: scale / fan, uniform in +-sqrt(3 var) or a normal
       truncated at 2 std whose std is corrected (/0.8796...) to sqrt(var) */
    double scale = !strncmp(c, "He", 2) ? 2.0 : 1.0;
    double fan = !strncmp(c, "Glorot", 6) ? (fi + fo) / 2 : fi;
    double var = scale / (fan > 1 ? fan : 1);
    if (strstr(c, "Uniform")) {
        float lim = (float)sqrt(3 * var);
        return ld_tensor_uniform(ndim, shape, -lim, lim, rng, NULL);
    }
    return truncated(ndim, shape, 0, sqrt(var) / 0.87962566103423978, rng);
}

/* ================================================================ regularizing */
ld_tensor *ld_regularize(const ld_regularizer *r, ld_tensor *w) {
    ld_tensor *total = NULL;
    for (int k = 0; k < 2; k++) {
        double f = k ? r->l2 : r->l1;
        if (f == 0) continue;
        ld_tensor *e = ld_unary(k ? LD_UN_SQUARE : LD_UN_ABS, w);
        ld_tensor *s = e ? ld_sum(e, LD_ALL_AXES, 0) : NULL;
        ld_tensor *t = s ? ld_mul_scalar(s, (float)f) : NULL;
        ld_tensor_release(e);
        ld_tensor_release(s);
        if (!t) { ld_tensor_release(total); return NULL; }
        if (total) {
            ld_tensor *u = ld_add(total, t);
            ld_tensor_release(total);
            ld_tensor_release(t);
            if (!(total = u)) return NULL;
        } else total = t;
    }
    if (!total) total = ld_tensor_scalar(0.0f, w->storage->device);   /* L1L2(0, 0) */
    return total;
}

/* ================================================================ constraints
   A registry from variables (copy 0, as the layer holds it) to their
   constraints, filled when a layer makes a constrained weight and emptied
   when the layer goes; the optimizer asks it after each update, so no
   strategy path has to. */
typedef struct { const ld_tensor *var; ld_constraint c; int owned; } constrained;   /* owned: retained by the entry */
static constrained *reg_list;
static int reg_n, reg_cap;
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;

static int add_entry(const ld_tensor *var, const ld_constraint *c, int owned) {
    pthread_mutex_lock(&reg_lock);
    if (reg_n == reg_cap) {
        int cap = reg_cap ? 2 * reg_cap : 16;
        constrained *p = realloc(reg_list, (size_t)cap * sizeof *p);
        if (!p) { pthread_mutex_unlock(&reg_lock); return ld_fail(LD_ENOMEM, "out of memory"); }
        reg_list = p;
        reg_cap = cap;
    }
    reg_list[reg_n++] = (constrained){var, *c, owned};
    pthread_mutex_unlock(&reg_lock);
    return LD_OK;
}
int ld_constraint_register(const ld_tensor *var, const ld_constraint *c) { return add_entry(var, c, 0); }

int ld_tensor_set_constraint(ld_tensor *t, const ld_constraint *c) {
    ld_constraint_unregister(t);
    if (!c || !c->class_name[0]) return LD_OK;
    ld_tensor_retain(t);   /* the entry keeps t alive, so its address names no other tensor */
    int st = add_entry(t, c, 1);
    if (st) ld_tensor_release(t);
    return st;
}
void ld_constraint_unregister(const ld_tensor *var) {
    ld_tensor *drop = NULL;
    pthread_mutex_lock(&reg_lock);
    for (int i = 0; i < reg_n; i++)
        if (reg_list[i].var == var) {
            if (reg_list[i].owned) drop = (ld_tensor *)var;
            reg_list[i--] = reg_list[--reg_n];
        }
    pthread_mutex_unlock(&reg_lock);
    ld_tensor_release(drop);
}
static int lookup(const ld_tensor *var, ld_constraint *out) {
    if (!__atomic_load_n(&reg_n, __ATOMIC_RELAXED)) return 0;   /* the common case: nothing constrained */
    int found = 0;
    pthread_mutex_lock(&reg_lock);
    for (int i = 0; i < reg_n && !found; i++) {
        ld_tensor *v = (ld_tensor *)reg_list[i].var;   /* the variable, or any replica's copy of it */
        for (int r = 0, n = ld_mirror_count(v); r < n && !found; r++)
            if (ld_mirror_copy(v, r) == var) { *out = reg_list[i].c; found = 1; }
    }
    pthread_mutex_unlock(&reg_lock);
    return found;
}
int ld_variable_has_constraint(ld_tensor *base) {
    ld_constraint c;
    return lookup(base, &c);
}
int ld_variable_constraint(ld_tensor *v, ld_constraint *out) { return lookup(v, out); }

/* Keras's formulas: MaxNorm w * clip(n, 0, max) / (eps + n); UnitNorm
   w / (eps + n); MinMaxNorm w * (rate * clip(n, min, max) + (1 - rate) * n) / (eps + n);
   NonNeg w * (w >= 0); n the L2 norm over `axis`, eps = 1e-7 */
static ld_tensor *project(const ld_constraint *c, ld_tensor *w) {
    if (!strcmp(c->class_name, "NonNeg")) {
        ld_tensor *z = ld_tensor_zeros(LD_F32, 0, NULL, w->storage->device);
        ld_tensor *r = z ? ld_maximum(w, z) : NULL;
        ld_tensor_release(z);
        return r;
    }
    int axis = c->axis;
    if (w->ndim == 0) return ld_tensor_retain(w);
    if (axis < -w->ndim || axis >= w->ndim) {
        ld_fail(LD_EARG, "constraint %s: axis %d out of range for a weight of %d axes", c->class_name, axis, w->ndim);
        return NULL;
    }
    ld_tensor *sq = ld_unary(LD_UN_SQUARE, w), *s = sq ? ld_sum(sq, axis, 1) : NULL, *n = s ? ld_sqrt(s) : NULL;
    ld_tensor_release(sq);
    ld_tensor_release(s);
    if (!n) return NULL;
    ld_tensor *den = ld_add_scalar(n, 1e-7f), *num = NULL;
    if (!strcmp(c->class_name, "UnitNorm")) num = ld_tensor_full(LD_F32, 0, NULL, 1.0, w->storage->device);
    else {
        double lo = !strcmp(c->class_name, "MinMaxNorm") ? c->min_value : 0;
        double rate = !strcmp(c->class_name, "MinMaxNorm") ? c->rate : 1;
        ld_tensor *lot = ld_tensor_full(LD_F32, 0, NULL, lo, w->storage->device);
        ld_tensor *hit = ld_tensor_full(LD_F32, 0, NULL, c->max_value, w->storage->device);
        ld_tensor *a = lot ? ld_maximum(n, lot) : NULL, *cl = a && hit ? ld_minimum(a, hit) : NULL;
        ld_tensor_release(a);
        ld_tensor_release(lot);
        ld_tensor_release(hit);
        if (cl && rate != 1) {
            ld_tensor *p = ld_mul_scalar(cl, (float)rate), *q = ld_mul_scalar(n, (float)(1 - rate));
            num = p && q ? ld_add(p, q) : NULL;
            ld_tensor_release(p);
            ld_tensor_release(q);
            ld_tensor_release(cl);
        } else num = cl;
    }
    ld_tensor *f = num && den ? ld_div(num, den) : NULL, *r = f ? ld_mul(w, f) : NULL;
    ld_tensor_release(n);
    ld_tensor_release(den);
    ld_tensor_release(num);
    ld_tensor_release(f);
    return r;
}

int ld_variable_constrain(ld_tensor *base, ld_tensor *v) {
    ld_constraint c;
    if (!lookup(base, &c) && !lookup(v, &c)) return LD_OK;
    int rg = v->requires_grad;
    v->requires_grad = 0;                    /* the projection is no op of the model's graph */
    ld_tensor *p = project(&c, v);
    v->requires_grad = rg;
    if (!p) return ld_error_status();
    int st = ld_copy_into(v, p);
    ld_tensor_release(p);
    return st;
}

/* ================================================================ model.losses */
/* a weight's role by the end of its name: "<role>_kernel" for the kernels
   of a role of their own, else "kernel", "bias", "embeddings" after a '/',
   a '_' or nothing */
static int role_of(const char *var_name) {
    size_t n = strlen(var_name);
    static const char *const ends[] = {"kernel", "bias", "recurrent_kernel", "embeddings", "depthwise_kernel",
                                       "pointwise_kernel"};
    static const int own[] = {LD_ROLE_RECURRENT, LD_ROLE_DEPTHWISE, LD_ROLE_POINTWISE};
    for (int i = 0; i < 3; i++) {
        size_t k = strlen(ends[own[i]]);
        if (n >= k && !strcmp(var_name + n - k, ends[own[i]])) return own[i];
    }
    for (int r = 0; r < LD_ROLE_COUNT; r++) {
        if (r == LD_ROLE_RECURRENT || r == LD_ROLE_DEPTHWISE || r == LD_ROLE_POINTWISE) continue;
        size_t k = strlen(ends[r]);
        if (n >= k && !strcmp(var_name + n - k, ends[r]) && (n == k || var_name[n - k - 1] == '/' || var_name[n - k - 1] == '_'))
            return r;
    }
    return -1;
}
int ld_weight_role_of(const char *var_name) { return role_of(var_name); }

/* t * f as a new reference (t itself, retained, when f is 1) */
static ld_tensor *scaled(ld_tensor *t, double f) {
    return f == 1.0 ? ld_tensor_retain(t) : ld_mul_scalar(t, (float)f);
}

/* the weight options that apply to variable v of l: those of the layer
   that made it (a wrapper's inner layer's), else l's */
static const ld_weight_options *var_options(const ld_layer *l, const ld_tensor *v) {
    for (int k = 0; k < 2; k++)
        for (int j = 0; l->inner[k] && j < l->inner[k]->n_vars; j++)
            if (l->inner[k]->vars[j] == v) return var_options(l->inner[k], v);
    return &l->wopt;
}

/* model.losses (step 0), or the terms a training step adds (step 1): in a
   replica of n > 1, each weight term / n (tf.nn.scale_regularization_loss)
   and each activity term over the global batch instead of the replica's
   rows, so the replicas' terms add up to one device's */
static int collect(ld_model *m, ld_tensor **out, int max, int step) {
    const ld_replica_ctx *rc = step ? ld_replica_get() : NULL;
    int split = rc && rc->n > 1;
    double share = split ? 1.0 / rc->n : 1.0;
    int k = 0;
    for (int i = 0; i < m->n_layers; i++) {
        ld_layer *l = m->layers[i];
        const char *nm;
        if (l->activity_loss && k < max) {          /* Keras's order: a layer's activity, then its weights */
            double f = !split ? 1.0 : rc->global_batch > 0 ? l->activity_rows / rc->global_batch : share;
            if (!(out[k] = scaled(l->activity_loss, f))) goto fail;
            k++;
        }
        for (int j = 0; j < l->n_vars && (nm = l->vars[j]->name); j++) {
            const char *slash = strrchr(nm, '/');
            const ld_weight_options *w = var_options(l, l->vars[j]);
            int r = role_of(slash ? slash + 1 : nm);
            if (r < 0 || !w->reg[r].class_name[0] || k == max) continue;
            ld_tensor *v = ld_regularize(&w->reg[r], ld_var(l->vars[j]));
            out[k] = v ? scaled(v, share) : NULL;
            ld_tensor_release(v);
            if (!out[k]) goto fail;
            k++;
        }
    }
    return k;
fail:
    while (k) ld_tensor_release(out[--k]);
    return -1;
}

int ld_model_losses(ld_model *m, ld_tensor **out, int max) { return collect(m, out, max, 0); }

ld_tensor *ld_model_add_losses(ld_model *m, ld_tensor *loss) {
    if (!loss) return NULL;
    int max = 0;
    for (int i = 0; i < m->n_layers; i++) max += m->layers[i]->n_vars + 1;
    ld_tensor *small[64], **terms = max <= 64 ? small : malloc(sizeof *terms * (size_t)max);
    if (!terms) { ld_fail(LD_ENOMEM, "out of memory"); return NULL; }
    ld_tensor *total = ld_tensor_retain(loss);
    int n = collect(m, terms, max, 1);
    if (n < 0) { ld_tensor_release(total); total = NULL; }
    for (int i = 0; i < n; i++) {
        ld_tensor *t = terms[i], *s = NULL;
        if (t->storage->device != total->storage->device)   /* no move the tape could differentiate */
            ld_fail(LD_EDEVICE, "the regularization of '%s' is on %s and the loss on %s: the model's output and its "
                    "variables must be on one device", m->name, t->storage->device->name, total->storage->device->name);
        else s = ld_add(total, t);
        ld_tensor_release(total);
        ld_tensor_release(t);
        total = s;
        if (!total) { for (int j = i + 1; j < n; j++) ld_tensor_release(terms[j]); break; }
    }
    if (terms != small) free(terms);
    if (!total) return NULL;
    for (int i = 0; i < m->n_layers; i++) {   /* the step took them */
        ld_tensor_release(m->layers[i]->activity_loss);
        m->layers[i]->activity_loss = NULL;
    }
    return total;
}

/* the activity regularization of a layer's output y, kept as its last
   call's: Keras's, over the rows of y (a replica's share in a replica) */
int ld_layer_record_activity(ld_layer *l, ld_tensor *y) {
    if (!l->wopt.activity.class_name[0]) return LD_OK;   /* every call, as Keras records it */
    double rows = y->ndim > 0 && y->shape[0] > 0 ? (double)y->shape[0] : 1;
    ld_tensor *r = ld_regularize(&l->wopt.activity, y);
    ld_tensor *s = r ? ld_mul_scalar(r, (float)(1.0 / rows)) : NULL;
    ld_tensor_release(r);
    if (!s) return ld_error_status();
    ld_tensor_release(l->activity_loss);
    l->activity_loss = s;
    l->activity_rows = rows;
    return LD_OK;
}
