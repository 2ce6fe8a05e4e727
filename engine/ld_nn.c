/* ld_nn.c - layers, Sequential, losses, metric helpers. */
#include "ld_nn.h"
#include "ld_autograd.h"
#include "ld_replica.h"
#include "ld_ops_index.h"
#include "ld_executor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ================================================================ activations */
/* Keras's names (keras.activations), by ld_activation */
static const char *const act_names[LD_ACT_COUNT] = {
    "linear", "relu", "sigmoid", "tanh", "softmax", "gelu", "elu", "selu", "softplus", "softsign", "silu",
    "leaky_relu", "relu6", "hard_sigmoid", "hard_silu", "mish", "exponential", "log_softmax"};
/* the elementwise op of each that is one (ld_kernels.h's LD_UNARY_OPS) */
static const int act_unary[LD_ACT_COUNT] = {
    [LD_ACT_NONE] = -1, [LD_ACT_RELU] = LD_UN_RELU, [LD_ACT_SIGMOID] = LD_UN_SIGMOID, [LD_ACT_TANH] = LD_UN_TANH,
    [LD_ACT_SOFTMAX] = -1, [LD_ACT_GELU] = LD_UN_GELU, [LD_ACT_ELU] = LD_UN_ELU, [LD_ACT_SELU] = LD_UN_SELU,
    [LD_ACT_SOFTPLUS] = LD_UN_SOFTPLUS, [LD_ACT_SOFTSIGN] = LD_UN_SOFTSIGN, [LD_ACT_SILU] = LD_UN_SILU,
    [LD_ACT_LEAKY_RELU] = LD_UN_LEAKY_RELU, [LD_ACT_RELU6] = LD_UN_RELU6, [LD_ACT_HARD_SIGMOID] = LD_UN_HARD_SIGMOID,
    [LD_ACT_HARD_SILU] = LD_UN_HARD_SILU, [LD_ACT_MISH] = LD_UN_MISH, [LD_ACT_EXPONENTIAL] = LD_UN_EXP,
    [LD_ACT_LOG_SOFTMAX] = -1};

int ld_activation_from_name(const char *name, ld_activation *out) {
    if (!name || !strcmp(name, "none") || !strcmp(name, "linear")) { *out = LD_ACT_NONE; return LD_OK; }
    if (!strcmp(name, "swish")) name = "silu";               /* Keras's aliases */
    else if (!strcmp(name, "hard_swish")) name = "hard_silu";
    for (int i = 1; i < LD_ACT_COUNT; i++) if (!strcmp(name, act_names[i])) { *out = (ld_activation)i; return LD_OK; }
    return ld_fail(LD_EARG, "unknown activation '%s' (%s)", name, LD_ACTIVATION_CHOICES);
}
const char *ld_activation_name(ld_activation a) { return act_names[a]; }

ld_tensor *ld_activate(ld_activation a, ld_tensor *x) {
    switch (a) {
    case LD_ACT_NONE: return ld_tensor_retain(x);
    case LD_ACT_SOFTMAX: return ld_softmax(x);
    case LD_ACT_LOG_SOFTMAX: return ld_log_softmax(x);
    default: return ld_unary((ld_unary_op)act_unary[a], x);
    }
}

ld_tensor *ld_layer_activate(ld_activation a, ld_tensor *y, int relu_done) {
    if (!y || a == LD_ACT_NONE || (relu_done && a == LD_ACT_RELU)) return y;
    ld_tensor *r = ld_activate(a, y);
    ld_tensor_release(y);
    return r;
}

/* ================================================================ dilated convolutions */
int ld_layer_dilation_check(const ld_layer *l, int n, const int64_t *dilation, const int64_t *strides) {
    int dilated = 0, strided = 0;
    for (int i = 0; i < n; i++) {
        if (dilation[i] < 1) return ld_fail(LD_EARG, "%s dilation_rate must be positive", l->cls->class_name);
        dilated |= dilation[i] > 1;
        strided |= strides[i] > 1;
    }
    if (dilated && strided)
        return ld_fail(LD_EARG, "%s: strides > 1 is not supported with dilation_rate > 1 (Keras's rule)", l->cls->class_name);
    return LD_OK;
}

/* the zeros before and after one axis for `padding` of a kernel spanning ke taps */
static void conv_pads(const char *padding, int64_t ke, int64_t *before, int64_t *after) {
    int64_t total = !strcmp(padding, "valid") ? 0 : ke - 1;
    *before = !strcmp(padding, "causal") ? total : total / 2;
    *after = total - *before;
}

/* x with shape s (n dims), a new reference; x's reference dropped */
static ld_tensor *reshape_drop(ld_tensor *x, int n, const int64_t *s) {
    ld_tensor *y = x ? ld_reshape_op(x, n, s) : NULL;
    ld_tensor_release(x);
    return y;
}
static ld_tensor *permute_drop(ld_tensor *x, const int *perm) {
    ld_tensor *y = x ? ld_permute_op(x, perm) : NULL;
    ld_tensor_release(x);
    return y;
}

ld_tensor *ld_layer_atrous(ld_layer *l, ld_tensor *x, const int64_t k[2], const int64_t d[2], const char *padding,
                           ld_tensor *(*conv)(ld_layer *l, ld_tensor *x)) {
    int64_t pad[4];   /* top, bottom, left, right */
    conv_pads(padding, ld_layer_dilated_size(k[0], d[0]), &pad[0], &pad[1]);
    conv_pads(padding, ld_layer_dilated_size(k[1], d[1]), &pad[2], &pad[3]);
    int64_t n = x->shape[0], c = x->shape[3], hp = x->shape[1] + pad[0] + pad[1], wp = x->shape[2] + pad[2] + pad[3];
    int64_t oh = hp - (k[0] - 1) * d[0], ow = wp - (k[1] - 1) * d[1];
    if (oh < 1 || ow < 1) {
        ld_fail(LD_ESHAPE, "%s: images of %lldx%lld (padded) are smaller than the dilated kernel's %lldx%lld", l->name,
                (long long)hp, (long long)wp, (long long)ld_layer_dilated_size(k[0], d[0]),
                (long long)ld_layer_dilated_size(k[1], d[1]));
        return NULL;
    }
    /* the padding, then zeros to whole phases (never read by a kept output) */
    int64_t gh = (hp + d[0] - 1) / d[0], gw = (wp + d[1] - 1) / d[1];
    ld_tensor *a = ld_pad_op(x, 1, pad[0], pad[1] + gh * d[0] - hp, 0.0);
    ld_tensor *b = a ? ld_pad_op(a, 2, pad[2], pad[3] + gw * d[1] - wp, 0.0) : NULL;
    ld_tensor_release(a);
    /* [n, gh, dh, gw, dw, c] -> [dh, dw, n, gh, gw, c] -> the phases as a batch */
    const int64_t s6[6] = {n, gh, d[0], gw, d[1], c}, sb[4] = {d[0] * d[1] * n, gh, gw, c};
    static const int to_batch[6] = {2, 4, 0, 1, 3, 5}, to_space[6] = {2, 3, 0, 4, 1, 5};
    ld_tensor *xb = reshape_drop(permute_drop(reshape_drop(b, 6, s6), to_batch), 4, sb);
    ld_tensor *yb = xb ? conv(l, xb) : NULL;
    ld_tensor_release(xb);
    if (!yb) return NULL;
    /* [dh, dw, n, qh, qw, f] -> [n, qh, dh, qw, dw, f]: output (i d + p) of phase p's i-th */
    int64_t qh = yb->shape[1], qw = yb->shape[2], f = yb->shape[3];
    const int64_t y6[6] = {d[0], d[1], n, qh, qw, f}, ys[4] = {n, qh * d[0], qw * d[1], f};
    ld_tensor *y = reshape_drop(permute_drop(reshape_drop(yb, 6, y6), to_space), 4, ys);
    ld_tensor *yh = y && ys[1] != oh ? ld_slice_view_op(y, 1, 0, oh, 1) : ld_tensor_retain(y);
    ld_tensor_release(y);
    ld_tensor *yw = yh && ys[2] != ow ? ld_slice_view_op(yh, 2, 0, ow, 1) : ld_tensor_retain(yh);
    ld_tensor_release(yh);
    return yw;
}

/* ================================================================ layer classes */
#define LD_LAYER_ADDRESS(k) &ld_layer_##k,
static const ld_layer_class *const classes[] = {LD_LAYER_CLASSES(LD_LAYER_ADDRESS) NULL};
#undef LD_LAYER_ADDRESS
#define N_CLASSES (sizeof classes / sizeof *classes - 1)
static int name_counter[N_CLASSES];

const ld_layer_class *const *ld_layer_classes(void) { return classes; }
const ld_layer_class *ld_layer_class_find(const char *name) {
    for (size_t i = 0; i < N_CLASSES; i++)
        if (!strcmp(classes[i]->class_name, name) || (classes[i]->alias && !strcmp(classes[i]->alias, name)))
            return classes[i];
    return NULL;
}

int ld_layer_param_index(const ld_layer_class *c, const char *name) {
    for (int i = 0; c->params[i].name; i++) if (!strcmp(c->params[i].name, name)) return i;
    return -1;
}

static const char *const type_names[] = {"an integer", "a number", "a boolean", "a string", "a list of integers",
                                         "a number or a list of numbers"};

static int param_fail(const ld_layer *l, int i, ld_param_type got) {
    const ld_param_spec *s = &l->cls->params[i];
    return ld_fail(LD_ETYPE, "%s: %s must be %s%s, got %s", l->cls->class_name, s->name, type_names[s->type],
                   s->type == LD_P_INTS && s->width ? " (or one integer)" : "", type_names[got]);
}

int ld_layer_set_int(ld_layer *l, int i, int64_t v) {
    ld_param_type t = l->cls->params[i].type;
    if (t == LD_P_INTS) return ld_layer_set_ints(l, i, 1, &v);
    if (t == LD_P_FLOAT) { l->p[i].f = (double)v; return LD_OK; }
    if (t == LD_P_FLOATS) { double d = (double)v; return ld_layer_set_floats(l, i, 1, &d); }
    if (t != LD_P_INT) return param_fail(l, i, LD_P_INT);
    l->p[i].i[0] = v;
    return LD_OK;
}
int ld_layer_set_float(ld_layer *l, int i, double v) {
    if (l->cls->params[i].type == LD_P_FLOATS) return ld_layer_set_floats(l, i, 1, &v);
    if (l->cls->params[i].type != LD_P_FLOAT) {
        if (v == (double)(int64_t)v && l->cls->params[i].type != LD_P_BOOL && l->cls->params[i].type != LD_P_STR)
            return ld_layer_set_int(l, i, (int64_t)v);
        return param_fail(l, i, LD_P_FLOAT);
    }
    l->p[i].f = v;
    return LD_OK;
}
int ld_layer_set_bool(ld_layer *l, int i, int v) {
    if (l->cls->params[i].type != LD_P_BOOL) return param_fail(l, i, LD_P_BOOL);
    l->p[i].i[0] = v != 0;
    return LD_OK;
}
int ld_layer_set_str(ld_layer *l, int i, const char *v) {
    const ld_param_spec *s = &l->cls->params[i];
    if (s->type == LD_P_BOOL && (!strcmp(v, "true") || !strcmp(v, "false"))) return ld_layer_set_bool(l, i, !strcmp(v, "true"));
    if (s->type != LD_P_STR) return param_fail(l, i, LD_P_STR);
    if (!strcmp(v, "none") && s->choices && strstr(s->choices, "linear")) v = "linear";   /* activation=None */
    if (s->choices) {
        size_t n = strlen(v);
        const char *c = s->choices;
        int ok = 0;
        while (*c && !ok) {
            const char *e = strchr(c, '|');
            size_t k = e ? (size_t)(e - c) : strlen(c);
            ok = k == n && !strncmp(c, v, n);
            c += k + (e != NULL);
        }
        if (!ok) return ld_fail(LD_EARG, "%s: unknown %s '%s' (%s)", l->cls->class_name, s->name, v, s->choices);
    }
    if (strlen(v) >= sizeof l->p[i].s) return ld_fail(LD_EARG, "%s: %s '%s' is too long", l->cls->class_name, s->name, v);
    snprintf(l->p[i].s, sizeof l->p[i].s, "%s", v);
    return LD_OK;
}
int ld_layer_set_ints(ld_layer *l, int i, int n, const int64_t *v) {
    const ld_param_spec *s = &l->cls->params[i];
    if (s->type == LD_P_INT && n == 1) return ld_layer_set_int(l, i, v[0]);
    if (s->type != LD_P_INTS) return param_fail(l, i, LD_P_INTS);
    if (n == 1 && s->width > 1) {                       /* kernel_size = 3 means 3, 3 */
        l->p[i].n = s->width;
        for (int k = 0; k < s->width; k++) l->p[i].i[k] = v[0];
        return LD_OK;
    }
    if ((s->width && n != s->width && n != 0) || n < 0 || n > LD_MAX_DIMS)
        return ld_fail(LD_EARG, "%s: %s takes %d integers, got %d", l->cls->class_name, s->name,
                       s->width ? s->width : LD_MAX_DIMS, n);
    l->p[i].n = n;
    if (n) memcpy(l->p[i].i, v, (size_t)n * sizeof *v);
    return LD_OK;
}
int ld_layer_set_floats(ld_layer *l, int i, int n, const double *v) {
    const ld_param_spec *s = &l->cls->params[i];
    if (s->type == LD_P_FLOAT && n == 1) return ld_layer_set_float(l, i, v[0]);
    if (s->type != LD_P_FLOATS) return param_fail(l, i, LD_P_FLOATS);
    int most = s->width ? s->width : 4;
    if (n < 1 || n > most)
        return ld_fail(LD_EARG, "%s: %s takes a number or a list of %s%d numbers, got %d", l->cls->class_name, s->name,
                       s->width ? "" : "at most ", most, n);
    for (int k = 0; k < n; k++)
        if (!isfinite(v[k])) return ld_fail(LD_EARG, "%s: %s must be finite, got %g", l->cls->class_name, s->name, v[k]);
    l->p[i].n = n;
    memcpy(l->p[i].fs, v, (size_t)n * sizeof *v);
    return LD_OK;
}
int ld_layer_set_name(ld_layer *l, const char *name) {
    if (!name[0] || strlen(name) >= sizeof l->name || strchr(name, '/'))
        return ld_fail(LD_EARG, "%s: a layer name must be 1 to %d characters without '/'", l->cls->class_name,
                       (int)sizeof l->name - 1);
    snprintf(l->name, sizeof l->name, "%s", name);
    return LD_OK;
}

/* a parameter's default from its text */
static int set_default(ld_layer *l, int i) {
    const ld_param_spec *s = &l->cls->params[i];
    if (!s->def) return LD_OK;                     /* required: checked by ld_layer_check */
    switch (s->type) {
    case LD_P_INT: l->p[i].i[0] = strtoll(s->def, NULL, 10); return LD_OK;
    case LD_P_FLOAT: l->p[i].f = s->def[0] ? strtod(s->def, NULL) : NAN; return LD_OK;   /* "": none */
    case LD_P_BOOL: l->p[i].i[0] = !strcmp(s->def, "true"); return LD_OK;
    case LD_P_STR: snprintf(l->p[i].s, sizeof l->p[i].s, "%s", s->def); return LD_OK;
    case LD_P_INTS: {
        int64_t v[LD_MAX_DIMS];
        int n = 0;
        for (const char *c = s->def; *c && n < LD_MAX_DIMS;) {
            char *e;
            v[n++] = strtoll(c, &e, 10);
            c = *e == ',' ? e + 1 : e;
            if (e == c && *c) break;
        }
        return ld_layer_set_ints(l, i, n, v);
    }
    case LD_P_FLOATS: {
        double v[4];
        int n = 0;
        for (const char *c = s->def; *c && n < 4;) {
            char *e;
            v[n++] = strtod(c, &e);
            if (e == c) break;
            c = *e == ',' ? e + 1 : e;
        }
        if (!n) { l->p[i].n = 0; return LD_OK; }
        return ld_layer_set_floats(l, i, n, v);
    }
    }
    return LD_OK;
}

/* ================================================================ dtype policies */
static ld_policy global_policy = {"float32", LD_F32};

int ld_policy_from_name(const char *name, ld_policy *out) {
    static const struct { const char *name; ld_dtype dt; } known[] = {
        {"float32", LD_F32}, {"mixed_bfloat16", LD_BF16}, {"mixed_float16", LD_F16}};
    for (size_t i = 0; name && i < sizeof known / sizeof *known; i++)
        if (!strcmp(name, known[i].name)) {
            snprintf(out->name, sizeof out->name, "%s", name);
            out->compute = known[i].dt;
            return LD_OK;
        }
    /* Keras also takes "bfloat16" (variables in bfloat16): here variables are float32 */
    return ld_fail(LD_EARG, "unknown dtype policy '%s' (valid: 'float32', 'mixed_bfloat16', 'mixed_float16')",
                   name ? name : "(none)");
}
void ld_policy_set_global(const ld_policy *p) { global_policy = *p; }
ld_policy ld_policy_global(void) { return global_policy; }

ld_layer *ld_layer_new(const ld_layer_class *c) {
    ld_layer *l = calloc(1, sizeof *l);
    if (!l) { ld_fail(LD_ENOMEM, "out of memory"); return NULL; }
    l->refcount = 1;
    l->cls = c;
    size_t ci = 0;
    while (ci < N_CLASSES && classes[ci] != c) ci++;
    int k = ci < N_CLASSES ? __atomic_fetch_add(&name_counter[ci], 1, __ATOMIC_RELAXED) : 0;
    if (k) snprintf(l->name, sizeof l->name, "%s_%d", c->kind, k);
    else snprintf(l->name, sizeof l->name, "%s", c->kind);
    for (int i = 0; c->params[i].name; i++) set_default(l, i);
    l->policy = global_policy;
    return l;
}

static int param_given(const ld_layer *l, int i) {
    const ld_param_spec *s = &l->cls->params[i];
    return s->def || (s->type == LD_P_STR ? l->p[i].s[0] != 0 : s->type == LD_P_INTS || s->type == LD_P_FLOATS ? l->p[i].n > 0 : 1);
}

int ld_layer_check(ld_layer *l) {
    /* a required parameter without a value: ints and numbers have none to test, so the
       binding sets every required one it was given; here only text and lists are told */
    for (int i = 0; l->cls->params[i].name; i++)
        if (!param_given(l, i))
            return ld_fail(LD_EARG, "%s: %s is required", l->cls->class_name, l->cls->params[i].name);
    return l->cls->check ? l->cls->check(l) : LD_OK;
}

ld_activation ld_p_activation(const ld_layer *l, int i) {
    ld_activation a = LD_ACT_NONE;
    ld_activation_from_name(l->p[i].s, &a);
    return a;
}

ld_layer *ld_layer_retain(ld_layer *l) {
    if (l) __atomic_add_fetch(&l->refcount, 1, __ATOMIC_RELAXED);
    return l;
}

void ld_layer_release(ld_layer *l) {
    if (!l || __atomic_sub_fetch(&l->refcount, 1, __ATOMIC_ACQ_REL) != 0) return;
    for (int i = 0; i < l->n_vars; i++) { ld_constraint_unregister(l->vars[i]); ld_tensor_release(l->vars[i]); }
    ld_tensor_release(l->activity_loss);
    ld_layer_release(l->inner[0]);
    ld_layer_release(l->inner[1]);
    free(l->seed_draws);
    free(l);
}

uint64_t ld_layer_draw_key(ld_layer *l, double seed) {
    if (seed != seed) return ld_rng_next(ld_global_rng());
    const ld_replica_ctx *rc = ld_replica_get();
    int id = rc && rc->id >= 0 && rc->id < LD_MAX_LOGICAL ? rc->id : 0;
    if (!l->seed_draws) l->seed_draws = calloc(LD_MAX_LOGICAL, sizeof *l->seed_draws);
    uint64_t k = l->seed_draws ? l->seed_draws[id]++ : 0;
    /* splitmix64 of the seed's k-th step: a key per call, independent of the global generator */
    return ld_splitmix64((uint64_t)(int64_t)seed * 0xd1b54a32d192ed03ULL + (k + 1) * 0x9e3779b97f4a7c15ULL);
}

/* recorded (ld_cast_op): a half input's gradient flows back through the cast */
/* an orthogonal matrix [rows, cols] (Keras's Orthogonal: QR of a normal
   matrix, signs fixed by R's diagonal), here by Gram-Schmidt in double */
static ld_tensor *orthogonal(int64_t rows, int64_t cols, ld_rng *rng) {
    int64_t s[2] = {rows, cols};
    int tr = rows < cols;                           /* orthonormal rows instead of columns */
    int64_t n = tr ? cols : rows, m = tr ? rows : cols;   /* m vectors of length n */
    double *q = malloc(sizeof(double) * (size_t)(n * m));
    ld_tensor *g = ld_tensor_normal(2, s, 0, 1, rng, NULL);
    if (!q || !g) { free(q); ld_tensor_release(g); if (!q) ld_fail(LD_ENOMEM, "out of memory"); return NULL; }
    const float *gv = ld_tensor_data(g);
    for (int64_t j = 0; j < m; j++) {
        double *v = q + j * n;
        for (int64_t i = 0; i < n; i++) v[i] = tr ? gv[j * cols + i] : gv[i * cols + j];
        for (int64_t k = 0; k < j; k++) {
            const double *u = q + k * n;
            double d = 0;
            for (int64_t i = 0; i < n; i++) d += u[i] * v[i];
            for (int64_t i = 0; i < n; i++) v[i] -= d * u[i];
        }
        double nr = 0;
        for (int64_t i = 0; i < n; i++) nr += v[i] * v[i];
        nr = sqrt(nr) > 0 ? 1 / sqrt(nr) : 0;
        for (int64_t i = 0; i < n; i++) v[i] *= nr;
    }
    float *o = ld_tensor_data(g);
    for (int64_t j = 0; j < m; j++)
        for (int64_t i = 0; i < n; i++) o[tr ? j * cols + i : i * cols + j] = (float)q[j * n + i];
    free(q);
    return g;
}

/* an orthogonal weight: rows are every axis but the last */
ld_tensor *ld_orthogonal_init(int ndim, const int64_t *shape, ld_rng *rng) {
    int64_t cols = ndim ? shape[ndim - 1] : 1, rows = 1;
    for (int i = 0; i + 1 < ndim; i++) rows *= shape[i];
    ld_tensor *o = orthogonal(rows, cols, rng);
    if (o) o->requires_grad = 0;
    ld_tensor *v = o ? ld_reshape(o, ndim, shape) : NULL;      /* a view of the fresh, contiguous o */
    ld_tensor_release(o);
    return v;
}

static _Thread_local int64_t weight_budget = -1;

int64_t ld_layer_weight_budget(int64_t bytes) {
    int64_t old = weight_budget;
    weight_budget = bytes < 0 ? -1 : bytes;
    return old;
}

/* v (a reference l takes) as l's next weight, named "<layer>/<what>" */
static int hold_weight(ld_layer *l, const char *what, ld_tensor *v, int trainable) {
    v->requires_grad = trainable != 0 && !l->frozen;
    size_t n = strlen(l->name) + strlen(what) + 2;
    free(v->name);
    v->name = malloc(n);
    if (v->name) snprintf(v->name, n, "%s/%s", l->name, what);
    l->var_trainable[l->n_vars] = trainable != 0;
    l->vars[l->n_vars++] = v;
    return LD_OK;
}

ld_tensor *ld_layer_add_weight(ld_layer *l, const char *what, int ndim, const int64_t *shape, ld_init init, int trainable) {
    if (l->n_vars == LD_LAYER_MAX_VARS) { ld_fail(LD_EARG, "%s: too many variables", l->name); return NULL; }
    if (weight_budget >= 0) {
        int64_t numel;
        char sb[128];
        if (ld_shape_numel(ndim, shape, &numel) || numel > weight_budget / (int64_t)sizeof(float)) {
            ld_fail(LD_EARG, "%s/%s: the architecture declares a weight of shape %s, more than the %lld bytes of weights "
                    "left in the file", l->name, what, ld_shape_fmt(ndim, shape, sb, sizeof sb), (long long)weight_budget);
            return NULL;
        }
        weight_budget -= numel * (int64_t)sizeof(float);
    }
    ld_tensor *v = NULL;
    ld_rng *rng = ld_global_rng(), before = *rng;
    int role = l->cls->roles ? ld_weight_role_of(what) : -1;
    if (role >= 0 && l->wopt.init[role].class_name[0])     /* the user's kernel_initializer, ... */
        v = ld_initializer_make(&l->wopt.init[role], ndim, shape, rng);
    else switch (init.kind) {
    case LD_INIT_ZEROS: v = ld_tensor_zeros(LD_F32, ndim, shape, NULL); break;
    case LD_INIT_ONES: v = ld_tensor_full(LD_F32, ndim, shape, 1.0, NULL); break;
    case LD_INIT_GLOROT_UNIFORM: {
        float lim = sqrtf(6.0f / (float)(init.a + init.b));
        v = ld_tensor_uniform(ndim, shape, -lim, lim, rng, NULL);
        break;
    }
    case LD_INIT_UNIFORM: v = ld_tensor_uniform(ndim, shape, (float)init.a, (float)init.b, rng, NULL); break;
    case LD_INIT_ORTHOGONAL: v = ld_orthogonal_init(ndim, shape, rng); break;
    }
    ld_replica_draws_shared(&before);   /* built once, by whichever replica ran the layer first */
    if (!v || hold_weight(l, what, v, trainable)) return NULL;
    if (ld_variable_created(v)) return NULL;   /* mirrored when a strategy asks for it; v is the layer's */
    if (role >= 0 && l->wopt.constraint[role].class_name[0] && ld_constraint_register(v, &l->wopt.constraint[role]))
        return NULL;
    return v;
}

ld_tensor *ld_layer_new_weight(ld_layer *l, const char *what, int ndim, const int64_t *shape, const ld_initializer *init,
                               int trainable) {
    if (l->n_vars == LD_LAYER_MAX_VARS) { ld_fail(LD_EARG, "%s: too many variables", l->name); return NULL; }
    ld_rng *rng = ld_global_rng(), before = *rng;
    ld_tensor *v = ld_initializer_make(init, ndim, shape, rng);
    ld_replica_draws_shared(&before);
    if (!v || hold_weight(l, what, v, trainable)) return NULL;
    return ld_variable_created(v) ? NULL : v;
}

int ld_layer_adopt_weight(ld_layer *l, ld_tensor *v, const char *what) {
    for (int i = 0; i < l->n_vars; i++) if (l->vars[i] == v) return LD_OK;
    if (l->n_vars == LD_LAYER_MAX_VARS) return ld_fail(LD_EARG, "%s: too many variables", l->name);
    int trainable = v->requires_grad;
    char *had = v->name;
    v->name = NULL;
    if (hold_weight(l, had ? had : what, ld_tensor_retain(v), trainable)) { v->name = had; return ld_error_status(); }
    free(had);
    return LD_OK;
}

int ld_layer_build_n(ld_layer *l, int n_in, const ld_shape *in) {
    if (l->built) return LD_OK;
    const ld_layer_class *c = l->cls;
    if (n_in < c->min_inputs || n_in > c->max_inputs) {
        if (c->min_inputs == c->max_inputs)
            return ld_fail(LD_EARG, "%s takes %d input%s, got %d", l->name, c->min_inputs, c->min_inputs == 1 ? "" : "s", n_in);
        return ld_fail(LD_EARG, "%s takes %d to %d inputs, got %d", l->name, c->min_inputs, c->max_inputs, n_in);
    }
    /* every product of the shapes is of dimensions a user gave: none may pass int64 */
    for (int i = 0; i < n_in; i++) {
        int64_t numel;
        if (ld_shape_numel(in[i].ndim, in[i].d, &numel)) return ld_error_status();
    }
    ld_shape out = {0};
    if (c->build(l, n_in, in, &out)) {
        for (int i = 0; i < l->n_vars; i++) { ld_constraint_unregister(l->vars[i]); ld_tensor_release(l->vars[i]); }   /* nothing half-built stays */
        l->n_vars = 0;
        return ld_error_status();
    }
    l->n_in = n_in;
    memcpy(l->in, in, (size_t)n_in * sizeof *in);
    l->out = out;
    l->n_out = ld_layer_outputs(l);   /* not built yet: from the configuration */
    l->built = 1;
    return LD_OK;
}

int ld_layer_build(ld_layer *l, int in_ndim, const int64_t *in) {
    ld_shape s = {in_ndim, {0}};
    memcpy(s.d, in, (size_t)in_ndim * sizeof *in);
    return ld_layer_build_n(l, 1, &s);
}

static int check_input(ld_layer *l, int k, const ld_tensor *x) {
    const ld_shape *s = &l->in[k];
    if (x->ndim - 1 == s->ndim) {
        int ok = 1;
        for (int i = 0; i < s->ndim && ok; i++)
            ok = x->shape[i + 1] == s->d[i] || ld_layer_axis_flexible(l->cls, i, s->ndim);
        if (ok) return LD_OK;
    }
    char want[96] = "", b[64];
    if (l->cls->flexible == LD_FLEX_ALL_BUT_LAST && x->ndim - 1 == s->ndim)
        return ld_fail(LD_ESHAPE, "%s was built for inputs with %lld on the last axis (features, channels), got %s",
                       l->name, (long long)s->d[s->ndim - 1], ld_shape_str(x, b, sizeof b));
    ld_layer_shape_str(s, want, sizeof want);
    if (l->n_in > 1)
        return ld_fail(LD_ESHAPE, "%s expects input %d of shape %s, got %s", l->name, k + 1, want, ld_shape_str(x, b, sizeof b));
    return ld_fail(LD_ESHAPE, "%s expects inputs of shape %s, got %s", l->name, want, ld_shape_str(x, b, sizeof b));
}

const char *ld_layer_shape_str(const ld_shape *s, char *buf, size_t n) {
    size_t q = (size_t)snprintf(buf, n, "batch");
    for (int i = 0; i < s->ndim && q < n; i++) q += (size_t)snprintf(buf + q, n - q, "x%lld", (long long)s->d[i]);
    return buf;
}

int ld_layer_need_image(const ld_layer *l, const ld_shape *in) {
    if (in->ndim == 3) return LD_OK;
    char b[160];
    ld_layer_shape_str(in, b, sizeof b);
    if (in->ndim == 2)
        return ld_fail(LD_ESHAPE, "%s needs images [batch, height, width, channels]; got inputs of shape %s (one "
                       "channel: add a channel axis with nn.Reshape{%lld, %lld, 1})", l->name, b,
                       (long long)in->d[0], (long long)in->d[1]);
    return ld_fail(LD_ESHAPE, "%s needs images [batch, height, width, channels]; got inputs of shape %s", l->name, b);
}

int ld_layer_need_steps(const ld_layer *l, const ld_shape *in, const char *last) {
    if (in->ndim == 2) return LD_OK;
    char b[160];
    return ld_fail(LD_ESHAPE, "%s needs sequences [batch, steps, %s]; got inputs of shape %s", l->name, last,
                   ld_layer_shape_str(in, b, sizeof b));
}

const int64_t *ld_layer_pool_strides(const ld_layer *l, int size_i, int strides_i) {
    int n;
    const int64_t *s = ld_p_ints(l, strides_i, &n);
    return n ? s : ld_p_ints(l, size_i, NULL);
}

int64_t ld_layer_out_size(int64_t in, int64_t k, int64_t s, int same) {
    if (same) return in / s + (in % s != 0);       /* ceil(in / s), without in + s - 1 passing int64 */
    return in < k ? 0 : (in - k) / s + 1;
}

/* The classes whose float32 inputs Keras does not cast under a half policy
   (their autocast = False): LayerNormalization computes on such an input as
   given, in float32; its output is cast, as every layer's. */
static int keeps_inputs(const ld_layer_class *c) { return c == &ld_layer_layer_normalization; }

/* The one place of Keras's autocast: a layer gets its float inputs in its
   policy's compute dtype (but a float32 input stays float32 for a class that
   keeps_inputs); under a half policy it runs with ld_autocast on
   (its products take half operands, its float32 variables cast on the tape
   so that their gradients come back float32); its float output is given in
   the compute dtype. Integer inputs (an Embedding's ids) pass as they are.
   fn: a fused pair led by l (ld_layer_pair_forward) in place of l's forward. */
ld_tensor *ld_layer_autocast_call(ld_layer *l, int n_in, ld_tensor *const *x, int training, ld_fused_forward fn,
                                  void *ctx) {
    ld_dtype dt = l->policy.compute;
    ld_tensor *xs[LD_LAYER_MAX_INPUTS] = {NULL}, *y = NULL;
    int i;
    for (i = 0; i < n_in; i++) {
        int cast = ld_dtype_is_float(x[i]->dtype) && x[i]->dtype != dt && !(keeps_inputs(l->cls) && x[i]->dtype == LD_F32);
        xs[i] = cast ? ld_cast_op(x[i], dt) : ld_tensor_retain(x[i]);
        if (!xs[i]) break;
        if (cast) ld_tensor_set_mask(xs[i], x[i]->keras_mask);   /* Keras keeps it across the cast */
    }
    if (i == n_in) {
        ld_dtype was = ld_autocast(dt);
        y = fn ? fn(l, ctx, xs, training) : l->cls->forward(l, n_in, xs, training);
        ld_autocast(was);
    }
    for (int k = 0; k < n_in; k++) ld_tensor_release(xs[k]);
    if (y && ld_dtype_is_float(y->dtype) && y->dtype != dt) {
        ld_tensor *c = ld_cast_op(y, dt);
        ld_tensor_release(y);
        y = c;
    }
    return y;
}

/* ================================================================ masks */
int ld_mask_pass(ld_layer *l, int n_in, ld_tensor *const *x, ld_tensor **mask) {
    (void)l; (void)n_in;
    *mask = x[0]->keras_mask ? ld_tensor_retain(x[0]->keras_mask) : NULL;
    return LD_OK;
}

int ld_mask_merge(ld_layer *l, int n_in, ld_tensor *const *x, ld_tensor **mask) {
    *mask = NULL;
    for (int i = 0; i < n_in; i++) if (!x[i]->keras_mask) return LD_OK;
    ld_tensor *acc = ld_tensor_retain(x[0]->keras_mask);
    for (int i = 1; i < n_in && acc; i++) {   /* logical or of 0/1 values */
        ld_tensor *m = x[i]->keras_mask, *o = NULL;
        if (m->ndim != acc->ndim || memcmp(m->shape, acc->shape, sizeof(int64_t) * (size_t)m->ndim)) {
            char b1[LD_SHAPE_STR_MAX], b2[LD_SHAPE_STR_MAX];
            ld_fail(LD_ESHAPE, "%s: its inputs' masks differ in shape (%s and %s)", l->name,
                    ld_shape_str(acc, b1, sizeof b1), ld_shape_str(m, b2, sizeof b2));
        } else o = ld_maximum(acc, m);
        ld_tensor_release(acc);
        acc = o;
    }
    if (!acc) return ld_error_status();
    *mask = acc;
    return LD_OK;
}

int ld_mask_sequences(ld_layer *l, int n_in, ld_tensor *const *x, ld_tensor **mask) {
    int i = ld_layer_param_index(l->cls, "return_sequences");
    if (i >= 0 && ld_p_int(l, i)) return ld_mask_pass(l, n_in, x, mask);
    *mask = NULL;
    return LD_OK;
}

ld_tensor *ld_mask_not_equal(ld_tensor *x, double v, int any) {
    ld_tensor *c = ld_tensor_scalar((float)v, x->storage->device);
    ld_tensor *ne = c ? ld_binary(LD_BIN_NE, x, c) : NULL, *f = ne ? ld_cast(ne, LD_F32) : NULL;
    ld_tensor_release(c);
    ld_tensor_release(ne);
    if (!any || !f) return f;
    ld_tensor *m = ld_max(f, -1, 0);
    ld_tensor_release(f);
    return m;
}

int ld_mask_of_steps(const ld_layer *l, const ld_tensor *x, ld_tensor **m) {
    *m = x->keras_mask;
    if (!*m) return LD_OK;
    if ((*m)->ndim == 2 && x->ndim >= 2 && (*m)->shape[0] == x->shape[0] && (*m)->shape[1] == x->shape[1]) return LD_OK;
    char b1[LD_SHAPE_STR_MAX], b2[LD_SHAPE_STR_MAX];
    return ld_fail(LD_ESHAPE, "%s takes a mask [batch, steps] for its inputs %s; got a mask of shape %s", l->name,
                   ld_shape_str(x, b1, sizeof b1), ld_shape_str(*m, b2, sizeof b2));
}

ld_tensor *ld_mask_step(ld_tensor *m, int64_t t) {
    ld_tensor *v = ld_slice_view_op(m, 1, t, t + 1, 1);
    ld_tensor *c = v ? ld_contiguous(v) : NULL;
    ld_tensor_release(v);
    return c;
}

ld_tensor *ld_mask_select(ld_tensor *mask, ld_tensor *a, ld_tensor *b) {
    if (b) return ld_where(mask, a, b);
    ld_tensor *z = ld_tensor_full(a->dtype, 0, NULL, 0.0, a->storage->device);
    ld_tensor *y = z ? ld_where(mask, a, z) : NULL;
    ld_tensor_release(z);
    return y;
}

/* y's mask, as Keras's __call__ sets it: kept when the forward set it on a
   new tensor; else the class's compute_mask (none for a class without one).
   An output that is an input itself (a layer that returns it as it is) is
   given as a view when its mask must differ. Consumes y; NULL on failure. */
static ld_tensor *output_mask(ld_layer *l, int n_in, ld_tensor *const *x, ld_tensor *y) {
    int is_input = 0;
    for (int i = 0; i < n_in; i++) is_input |= y == x[i];
    if (y->keras_mask && !is_input) return y;
    ld_tensor *m = NULL;
    if (l->cls->compute_mask && l->cls->compute_mask(l, n_in, x, &m)) { ld_tensor_release(y); return NULL; }
    if (m == y->keras_mask) { ld_tensor_release(m); return y; }
    if (is_input) {
        ld_tensor *v = ld_reshape_op(y, y->ndim, y->shape);
        ld_tensor_release(y);
        if (!(y = v)) { ld_tensor_release(m); return NULL; }
    }
    ld_tensor_set_mask(y, m);
    ld_tensor_release(m);
    return y;
}

/* where the layer being called on this thread puts its outputs after the
   first (ld_layer_emit); NULL: nobody wants them. Each call sets its own,
   so a wrapper's inner calls do not give theirs as the wrapper's. */
typedef struct { ld_tensor *t[LD_LAYER_MAX_OUTPUTS]; } out_sink;
static _Thread_local out_sink *cur_sink;

void ld_layer_emit(int i, ld_tensor *t) {
    if (!cur_sink || i < 1 || i >= LD_LAYER_MAX_OUTPUTS || !t) return;
    ld_tensor_release(cur_sink->t[i]);
    cur_sink->t[i] = ld_tensor_retain(t);
}

static ld_tensor *layer_call(ld_layer *l, int n_in, ld_tensor *const *x, int training);
/* The mask a call's forward sees on its first input, as Keras's __call__
   fills its `mask` argument: one given to the call (mask, non-NULL) in
   place of the input's own; none for a recurrent layer given initial
   states (Keras 3 fills `mask` only for a call of one tensor argument:
   with initial_state= its layers leave the steps unmasked, though the
   output carries the input's mask); else the input's. Then the outputs,
   into sink. */
static ld_tensor *call_into(ld_layer *l, int n_in, ld_tensor *const *x, int training, ld_tensor *mask, out_sink *sink) {
    ld_tensor *xs[LD_LAYER_MAX_INPUTS], *const *orig = x;
    if (training < 0) training = l->cls->training_default;   /* not given: the class's own (Keras's call default) */
    else training = training != 0;
    int strip = !mask && l->cls->initial_states && n_in > 1 && n_in <= LD_LAYER_MAX_INPUTS && x[0]->keras_mask;
    if (mask || strip) {   /* the first input as a view with that mask */
        if (n_in < 1 || n_in > LD_LAYER_MAX_INPUTS) { ld_fail(LD_EARG, "%s: %d inputs", l->name, n_in); return NULL; }
        memcpy(xs, x, sizeof *xs * (size_t)n_in);
        if (!(xs[0] = ld_reshape_op(x[0], x[0]->ndim, x[0]->shape))) return NULL;
        ld_tensor_set_mask(xs[0], mask);
        x = xs;
    }
    out_sink *saved = cur_sink;
    cur_sink = sink;
    ld_tensor *y = layer_call(l, n_in, x, training);
    cur_sink = saved;
    if (strip && y && l->cls->compute_mask) {   /* the output's mask from the input's, as Keras's */
        ld_tensor *m = NULL;
        if (l->cls->compute_mask(l, n_in, orig, &m)) { ld_tensor_release(y); y = NULL; }
        else ld_tensor_set_mask(y, m);
        ld_tensor_release(m);
    }
    if (mask || strip) ld_tensor_release(xs[0]);
    return y;
}

ld_tensor *ld_layer_call(ld_layer *l, int n_in, ld_tensor *const *x, int training) {
    return call_into(l, n_in, x, training, NULL, NULL);
}
ld_tensor *ld_layer_call_masked(ld_layer *l, int n_in, ld_tensor *const *x, int training, ld_tensor *mask) {
    return call_into(l, n_in, x, training, mask, NULL);
}

int ld_layer_call_outputs(ld_layer *l, int n_in, ld_tensor *const *x, int training, ld_tensor *mask, ld_tensor **out,
                          int max) {
    out_sink s = {{0}};
    ld_tensor *y = call_into(l, n_in, x, training, mask, &s);
    int n = y ? l->n_out : -1;
    for (int i = 1; i < n; i++)
        if (!s.t[i]) { ld_fail(LD_EINTERNAL, "%s gave no output %d", l->name, i + 1); n = -1; }
    if (n > max) { ld_fail(LD_EARG, "%s gives %d outputs, room for %d", l->name, n, max); n = -1; }
    for (int i = 1; n > 0 && i < n; i++) {   /* in the first's dtype, as Keras's states are the compute dtype's */
        ld_tensor *t = s.t[i];
        if (!ld_dtype_is_float(t->dtype) || t->dtype == y->dtype) continue;
        if (!(s.t[i] = ld_cast_op(t, y->dtype))) n = -1;
        ld_tensor_release(t);
    }
    if (n < 0) {
        ld_tensor_release(y);
        for (int i = 0; i < LD_LAYER_MAX_OUTPUTS; i++) ld_tensor_release(s.t[i]);
        return -1;
    }
    out[0] = y;
    for (int i = 1; i < n; i++) out[i] = s.t[i];
    for (int i = n; i < LD_LAYER_MAX_OUTPUTS; i++) ld_tensor_release(s.t[i]);
    return n;
}

static ld_tensor *layer_call(ld_layer *l, int n_in, ld_tensor *const *x, int training) {
    if (n_in < 1 || n_in > LD_LAYER_MAX_INPUTS) { ld_fail(LD_EARG, "%s: %d inputs", l->name, n_in); return NULL; }
    ld_shape in[LD_LAYER_MAX_INPUTS];
    for (int i = 0; i < n_in; i++) {
        if (x[i]->ndim < 1) { ld_fail(LD_ESHAPE, "%s needs a batch axis; got a scalar", l->name); return NULL; }
        in[i].ndim = x[i]->ndim - 1;
        memcpy(in[i].d, x[i]->shape + 1, (size_t)in[i].ndim * sizeof *in[i].d);
    }
    if (!l->built && ld_layer_build_n(l, n_in, in)) return NULL;
    if (l->cls->initial_states) {   /* states or not at any call: the forward checks them */
        if (n_in < l->cls->min_inputs || n_in > l->cls->max_inputs) {
            ld_fail(LD_EARG, "%s takes its inputs and at most %d initial states, got %d tensors", l->name,
                    l->cls->max_inputs - 1, n_in);
            return NULL;
        }
        if (check_input(l, 0, x[0])) return NULL;
    } else {
        if (n_in != l->n_in) {
            ld_fail(LD_EARG, "%s was built for %d input%s, called with %d", l->name, l->n_in, l->n_in == 1 ? "" : "s", n_in);
            return NULL;
        }
        for (int i = 0; i < n_in; i++) if (check_input(l, i, x[i])) return NULL;
    }
    /* float inputs of another dtype than the policy's are cast (Keras casts a
       float32 layer's half inputs too); a float32 layer given float32 runs as is */
    int cast = l->policy.compute != LD_F32;
    for (int i = 0; i < n_in && !cast; i++) cast = ld_dtype_is_half(x[i]->dtype);
    ld_tensor *y = cast ? ld_layer_autocast_call(l, n_in, x, training, NULL, NULL) : l->cls->forward(l, n_in, x, training);
    if (y && ld_layer_record_activity(l, y)) { ld_tensor_release(y); return NULL; }
    return y ? output_mask(l, n_in, x, y) : NULL;
}

ld_tensor *ld_layer_forward(ld_layer *l, ld_tensor *x, int training) { return ld_layer_call(l, 1, &x, training); }

int64_t ld_layer_param_count(const ld_layer *l) {
    int64_t n = 0;
    for (int i = 0; i < l->n_vars; i++) n += ld_tensor_numel(l->vars[i]);
    return n;
}
int64_t ld_layer_trainable_count(const ld_layer *l) {
    int64_t n = 0;
    for (int i = 0; i < l->n_vars; i++) if (ld_layer_var_trainable(l, i)) n += ld_tensor_numel(l->vars[i]);
    return n;
}

int ld_layer_var_trainable(const ld_layer *l, int i) { return l->var_trainable[i] && !l->frozen; }

void ld_layer_set_trainable(ld_layer *l, int on) {
    for (int k = 0; k < 2; k++) if (l->inner[k]) ld_layer_set_trainable(l->inner[k], on);   /* a wrapper's layers */
    l->frozen = !on;
    for (int i = 0; i < l->n_vars; i++) {
        int rg = ld_layer_var_trainable(l, i);
        for (int r = 0; r < ld_mirror_count(l->vars[i]); r++) {
            ld_tensor *c = ld_mirror_copy(l->vars[i], r);
            if (c) c->requires_grad = rg;
        }
    }
}

/* ================================================================ Sequential */
ld_model *ld_model_new(const char *name) {
    ld_model *m = calloc(1, sizeof *m);
    if (!m) { ld_fail(LD_ENOMEM, "out of memory"); return NULL; }
    snprintf(m->name, sizeof m->name, "%s", name ? name : "sequential");
    return m;
}

void ld_model_free(ld_model *m) {
    if (!m) return;
    for (int i = 0; i < m->n_layers; i++) ld_layer_release(m->layers[i]);
    free(m->layers);
    free(m);
}

int ld_model_add(ld_model *m, ld_layer *l) {
    if (m->n_layers == m->cap_layers) {
        int cap = m->cap_layers ? 2 * m->cap_layers : 8;
        ld_layer **ls = realloc(m->layers, (size_t)cap * sizeof *ls);
        if (!ls) return ld_fail(LD_ENOMEM, "out of memory");
        m->layers = ls;
        m->cap_layers = cap;
    }
    m->layers[m->n_layers++] = ld_layer_retain(l);
    return LD_OK;
}

ld_device *ld_model_device(ld_model *m) {
    for (int i = 0; i < m->n_layers; i++)
        if (m->layers[i]->n_vars) return ld_var(m->layers[i]->vars[0])->storage->device;
    return NULL;
}

ld_tensor *ld_model_forward(ld_model *m, ld_tensor *x, int training) {
    /* a model runs where its variables are (this replica's copies), as TF
       places an op next to the variable it reads: an input from elsewhere
       (data on cpu:0, variables on a OneDeviceStrategy's cpu:1) is copied */
    ld_device *d = ld_model_device(m);
    ld_tensor *cur = d && d != x->storage->device ? ld_to_device(x, d) : ld_tensor_retain(x);
    for (int i = 0; i < m->n_layers && cur; i++) {
        ld_tensor *y;
        if (i + 1 < m->n_layers && ld_layer_pair_forward(m->layers[i], m->layers[i + 1], cur, training, &y)) i++;
        else y = ld_layer_forward(m->layers[i], cur, training);
        ld_tensor_release(cur);
        cur = y;
    }
    return cur;
}

int ld_model_build(ld_model *m, int in_ndim, const int64_t *in_shape) {
    ld_shape s = {in_ndim, {0}};
    memcpy(s.d, in_shape, (size_t)in_ndim * sizeof *s.d);
    for (int i = 0; i < m->n_layers; i++) {
        ld_layer *l = m->layers[i];
        if (!l->built && ld_layer_build_n(l, 1, &s)) return ld_error_status();
        s = l->out;
    }
    return LD_OK;
}

int ld_model_weights(ld_model *m, ld_tensor **vars, unsigned char *trainable, int max) {
    int k = 0;
    for (int i = 0; i < m->n_layers; i++)
        for (int j = 0; j < m->layers[i]->n_vars; j++) {
            if (vars && k < max) vars[k] = m->layers[i]->vars[j];
            if (trainable && k < max) trainable[k] = (unsigned char)ld_layer_var_trainable(m->layers[i], j);
            k++;
        }
    return k;
}

int ld_model_variables(ld_model *m, ld_tensor **vars, int max) {
    int k = 0;
    for (int i = 0; i < m->n_layers; i++)
        for (int j = 0; j < m->layers[i]->n_vars; j++) {
            if (!ld_layer_var_trainable(m->layers[i], j)) continue;
            if (vars && k < max) vars[k] = m->layers[i]->vars[j];
            k++;
        }
    return k;
}

/* "(None, 28, 28)" for a built layer, "?" before it is; a layer of several
   outputs (return_state) lists them, "[(None, 4), (None, 4)]", as Keras's */
static void summary_shape(const ld_layer *l, char *shape, size_t cap) {
    snprintf(shape, cap, "%s", l->cls == &ld_layer_weights ? "" : "?");   /* a model's own weights: no output */
    if (!l->built || l->cls == &ld_layer_weights) return;
    size_t q = 0;
    if (l->n_out > 1) q += (size_t)snprintf(shape, cap, "[");
    for (int k = 0; k < l->n_out && q < cap; k++) {
        const ld_shape *o = k ? &l->outs[k - 1] : &l->out;
        q += (size_t)snprintf(shape + q, cap - q, "%s(None", k ? ", " : "");
        for (int d = 0; d < o->ndim && q < cap; d++) q += (size_t)snprintf(shape + q, cap - q, ", %lld", (long long)o->d[d]);
        if (q < cap) q += (size_t)snprintf(shape + q, cap - q, ")");
    }
    if (l->n_out > 1 && q < cap) snprintf(shape + q, cap - q, "]");
}

/* "399.54 KB", as Keras sizes its parameter counts (float32: 4 bytes each) */
static void summary_bytes(int64_t count, char *out, size_t cap) {
    double b = (double)count * 4;
    if (b < 1024) snprintf(out, cap, "%.2f B", b);
    else if (b < 1024.0 * 1024) snprintf(out, cap, "%.2f KB", b / 1024);
    else if (b < 1024.0 * 1024 * 1024) snprintf(out, cap, "%.2f MB", b / (1024.0 * 1024));
    else snprintf(out, cap, "%.2f GB", b / (1024.0 * 1024 * 1024));
}

int ld_model_summary(ld_model *m, char *buf, size_t n, int width) {
    size_t k = 0;
    int64_t total = 0, trainable = 0;
#define OUT(...) do { if (k < n) k += (size_t)snprintf(buf + k, n - k, __VA_ARGS__); } while (0)
    /* columns: the parameter counts and the shapes as wide as they need,
       the names get the rest of the line (Keras's layer column); a name
       too long for it breaks before its "(Class)" */
    int wshape = (int)strlen("Output Shape"), wparam = (int)strlen("Param #"), wname = (int)strlen("Layer (type)");
    for (int i = 0; i < m->n_layers; i++) {
        char shape[128], cnt[32];
        summary_shape(m->layers[i], shape, sizeof shape);
        int ls = (int)strlen(shape), lc = snprintf(cnt, sizeof cnt, "%lld", (long long)ld_layer_param_count(m->layers[i]));
        int ln = (int)(strlen(m->layers[i]->name) + strlen(m->layers[i]->cls->class_name) + 3);
        if (ls > wshape) wshape = ls;
        if (lc > wparam) wparam = lc;
        if (ln > wname) wname = ln;
    }
    if (width < 40) width = 40;
    /* gaps of 3 where they fit, as Keras's table breathes; the names take
       what is left up to 80 columns (or the width, when narrower) */
    int gap = wname + wshape + wparam + 6 <= width ? 3 : 1;
    int room = width - wshape - wparam - 2 * gap;
    int fill = (width < 80 ? width : 80) - wshape - wparam - 2 * gap;
    if (wname > room) wname = room;
    if (wname < fill) wname = fill;
    if (wname < 12) wname = 12;
    int line = wname + wshape + wparam + 2 * gap;
    OUT("Model: \"%s\"\n", m->name);
    OUT("%-*s%*s%-*s%*s%*s\n", wname, "Layer (type)", gap, "", wshape, "Output Shape", gap, "", wparam, "Param #");
    for (int i = 0; i < line; i++) OUT("=");
    OUT("\n");
    for (int i = 0; i < m->n_layers; i++) {
        ld_layer *l = m->layers[i];
        char shape[128], nm[160], cls[80];
        summary_shape(l, shape, sizeof shape);
        snprintf(nm, sizeof nm, "%s (%s)", l->name, l->cls->class_name);
        int64_t pc = ld_layer_param_count(l);
        total += pc;
        trainable += ld_layer_trainable_count(l);
        if ((int)strlen(nm) <= wname) {
            OUT("%-*s%*s%-*s%*s%*lld\n", wname, nm, gap, "", wshape, shape, gap, "", wparam, (long long)pc);
        } else {
            snprintf(cls, sizeof cls, "(%s)", l->cls->class_name);
            OUT("%-*.*s%*s%-*s%*s%*lld\n", wname, wname, l->name, gap, "", wshape, shape, gap, "", wparam, (long long)pc);
            OUT(" %.*s\n", width - 1, cls);
        }
    }
    for (int i = 0; i < line; i++) OUT("=");
    OUT("\n");
    char b1[32], b2[32], b3[32];
    summary_bytes(total, b1, sizeof b1);
    summary_bytes(trainable, b2, sizeof b2);
    summary_bytes(total - trainable, b3, sizeof b3);
    OUT("Total params: %lld (%s)\n", (long long)total, b1);
    OUT("Trainable params: %lld (%s)\n", (long long)trainable, b2);
    OUT("Non-trainable params: %lld (%s)\n", (long long)(total - trainable), b3);
#undef OUT
    return LD_OK;
}

/* ================================================================ losses */
static const char *const loss_names[] = {"sparse_categorical_crossentropy", "categorical_crossentropy",
                                         "binary_crossentropy", "mean_squared_error", "mean_absolute_error",
                                         "mean_absolute_percentage_error", "mean_squared_logarithmic_error",
                                         "huber_loss", "log_cosh", "kl_divergence", "poisson", "cosine_similarity",
                                         "hinge", "squared_hinge", "categorical_hinge", "binary_focal_crossentropy",
                                         "categorical_focal_crossentropy", "dice", "tversky"};
_Static_assert(sizeof loss_names / sizeof *loss_names == LD_LOSS_COUNT, "a name for each loss");
const char *ld_loss_name(ld_loss_kind k) { return loss_names[k]; }

#define TRY(x) do { if (!(x)) goto fail; } while (0)

/* mean (or sum) over all elements of per-example losses */
/* The mean over the batch; in a replica of a synchronous strategy, the sum
   over the replica's examples divided by the global batch, so the replicas'
   gradients add up to the gradient of the global mean (TF's rule). */
static double replica_denominator(void) {
    const ld_replica_ctx *c = ld_replica_get();
    return c && c->n > 1 && c->global_batch > 0 ? c->global_batch : 0;
}

static ld_tensor *masked_mean(const ld_loss *l, ld_tensor *per, ld_tensor *y_true);

/* Dice and Tversky summed over the batch axis (among others) of predictions
   of in_ndim axes: their loss is no sum over examples, and in a replica each
   replica's part (overlap_loss) already adds up to one device's value */
static int sums_batch(const ld_loss *l, int in_ndim) {
    if (l->kind != LD_LOSS_DICE && l->kind != LD_LOSS_TVERSKY) return 0;
    if (l->naxes == 0) return 1;
    for (int i = 0; i < l->naxes; i++) if (l->axes[i] == 0 || l->axes[i] + in_ndim == 0) return 1;
    return 0;
}

ld_tensor *ld_loss_reduce(const ld_loss *l, ld_tensor *per, ld_tensor *y_true) {
    if (l->reduction_sum == 2) return ld_tensor_retain(per);
    if (l->reduction_sum) return ld_sum(per, LD_ALL_AXES, 0);
    if (l->has_ignore_class) return masked_mean(l, per, y_true);
    if (sums_batch(l, per->ndim + l->naxes)) return ld_mean(per, LD_ALL_AXES, 0);
    double denom = replica_denominator();
    /* a replica's losses of several positions per row ([batch, t] of a
       sequence model's outputs): the global batch's positions */
    if (denom > 0 && per->ndim > 0 && per->shape[0] > 0) denom *= (double)ld_tensor_numel(per) / (double)per->shape[0];
    /* no examples (a replica's share of a small batch): 0, as Keras' safe
       mean gives, through a sum that keeps the loss on the tape */
    if (denom > 0 || ld_tensor_numel(per) == 0) {
        ld_tensor *s = ld_sum(per, LD_ALL_AXES, 0);
        ld_tensor *m = s ? ld_mul_scalar(s, (float)(1.0 / (denom > 0 ? denom : 1))) : NULL;
        ld_tensor_release(s);
        return m;
    }
    return ld_mean(per, LD_ALL_AXES, 0);
}

/* Sparse cross-entropy of labels [batch, t...] against predictions [batch,
   t..., classes] (a sequence model's), as Keras: one loss per position; the
   mean is over every position (in a replica, the sum over the global
   batch's positions), "none" gives them shaped like the labels. */
static ld_tensor *sequence_xent(const ld_loss *l, ld_tensor *y_true, ld_tensor *y_pred) {
    int64_t c = y_pred->shape[y_pred->ndim - 1], per_row = 1, rows;
    for (int i = 1; i + 1 < y_pred->ndim; i++) per_row *= y_pred->shape[i];
    rows = y_pred->shape[0] * per_row;
    int lab_nd = y_true->ndim;
    if (lab_nd == y_pred->ndim && y_true->shape[lab_nd - 1] == 1) lab_nd--;   /* [batch, t, 1] labels */
    int same = lab_nd == y_pred->ndim - 1;
    for (int i = 0; same && i < lab_nd; i++) same = y_true->shape[i] == y_pred->shape[i];
    if (!same) {
        char b1[64], b2[64];
        ld_fail(LD_ESHAPE, "sparse_categorical_crossentropy: labels %s do not match predictions %s "
                "(want labels [batch, ...] and predictions [batch, ..., classes])",
                ld_shape_str(y_true, b1, sizeof b1), ld_shape_str(y_pred, b2, sizeof b2));
        return NULL;
    }
    int64_t s2[2] = {rows, c};
    ld_tensor *p2 = ld_reshape_op(y_pred, 2, s2);
    ld_tensor *l1 = p2 ? ld_reshape(y_true, 1, &rows) : NULL;
    ld_tensor *out = NULL;
    if (l1 && l->reduction_sum == 0) {
        double denom = replica_denominator();            /* the global batch's positions */
        if (l->from_logits) out = ld_sparse_xent_logits_scaled(p2, l1, denom > 0 ? denom * (double)per_row : 0);
        else {
            ld_loss pl = *l;
            pl.reduction_sum = 1;
            ld_tensor *sum = ld_loss_compute(&pl, l1, p2);
            double n = denom > 0 ? denom * (double)per_row : (double)rows;
            out = sum ? ld_mul_scalar(sum, (float)(1.0 / (n > 0 ? n : 1))) : NULL;
            ld_tensor_release(sum);
        }
    } else if (l1) {
        ld_tensor *per = ld_loss_compute(l, l1, p2);     /* a sum, or one loss per position */
        if (per && l->reduction_sum == 2) {
            out = ld_reshape_op(per, lab_nd, y_true->shape);
            ld_tensor_release(per);
        } else out = per;
    }
    ld_tensor_release(p2);
    ld_tensor_release(l1);
    return out;
}

/* Keras' clip of probabilities to [eps, 1 - eps] (backend.epsilon() = 1e-7)
   before their log. maximum and minimum keep NaN (ld_elementwise_math.h),
   as tf.clip_by_value does: a NaN prediction gives a NaN loss, never
   -log(1e-7). */
static ld_tensor *clip_probs(ld_tensor *p) {
    ld_tensor *lo = ld_tensor_scalar(1e-7f, p->storage->device), *hi = ld_tensor_scalar(1 - 1e-7f, p->storage->device);
    ld_tensor *a = lo && hi ? ld_maximum(p, lo) : NULL, *c = a ? ld_minimum(a, hi) : NULL;
    ld_tensor_release(lo); ld_tensor_release(hi); ld_tensor_release(a);
    return c;
}

/* Keras's label smoothing: y (1 - s) + add, in float32 (1 - s rounded from
   double, as Keras's Python float is) */
static ld_tensor *smooth_labels(ld_tensor *y, float s, float add) {
    ld_tensor *a = ld_mul_scalar(y, (float)(1.0 - (double)s)), *b = a ? ld_add_scalar(a, add) : NULL;
    ld_tensor_release(a);
    return b;
}

/* ---- the regression, divergence and hinge losses (Keras 3's formulas) */
/* The temporaries of a formula: each op's result is kept for release at the
   end; after a failure no further op runs (its inputs could be NULL). */
#define LOSS_TMP_MAX 64
typedef struct { ld_tensor *t[LOSS_TMP_MAX]; int n, bad; } loss_tmp;
static ld_tensor *keep(loss_tmp *k, ld_tensor *t) {
    if (!t || k->n == LOSS_TMP_MAX) { ld_tensor_release(t); k->bad = 1; return NULL; }
    return k->t[k->n++] = t;
}
/* the formula's result r (a new reference, NULL after a failure); the
   temporaries released */
static ld_tensor *tmp_done(loss_tmp *k, ld_tensor *r) {
    ld_tensor *out = k->bad || !r ? NULL : ld_tensor_retain(r);
    for (int i = 0; i < k->n; i++) ld_tensor_release(k->t[i]);
    return out;
}
#define K(expr) (kp->bad ? NULL : keep(kp, (expr)))
#define KEPS 1e-7f    /* keras.backend.epsilon() */

static ld_tensor *scalar_on(float v, const ld_tensor *like) { return ld_tensor_scalar(v, like->storage->device); }

/* Keras's convert_binary_labels_to_hinge: labels all 0 or 1 become -1 and
   1 (2y - 1); others stay. The test is a tensor (where's condition), so no
   value is read back from a device that queues. */
static ld_tensor *hinge_labels(loss_tmp *kp, ld_tensor *yt) {
    if (ld_tensor_numel(yt) == 0) return yt;
    ld_tensor *zero = K(scalar_on(0, yt)), *one = K(scalar_on(1, yt));
    ld_tensor *b = K(ld_add(K(ld_binary(LD_BIN_EQ, yt, zero)), K(ld_binary(LD_BIN_EQ, yt, one))));
    ld_tensor *all = K(ld_min(b, LD_ALL_AXES, 0));
    return K(ld_where(all, K(ld_add_scalar(K(ld_mul_scalar(yt, 2.0f)), -1.0f)), yt));
}

/* t summed across the step's replicas (ld_replica_all_reduce_sum) into a
   copy off the tape: a constant of the global batch, NULL after a failure */
static ld_tensor *replica_total(loss_tmp *kp, ld_tensor *t) {
    ld_tensor *g = K(ld_clone(t));
    if (g && ld_replica_all_reduce_sum(g)) kp->bad = 1;
    return kp->bad ? NULL : g;
}

static int in_replicas(void) {
    const ld_replica_ctx *c = ld_replica_get();
    return c && c->n > 1 ? c->n : 0;
}

/* Keras 3's mean of the losses of SparseCategoricalCrossentropy{ignore_class}
   (apply_mask): sum(per) / the labels that are not ignore_class, 0 when all
   are. In a replica of several, the count is the global batch's, so each
   replica's share adds up to one device's loss (Keras on tf.distribute
   would average the replicas' own means instead, which differs from one
   device whenever the replicas hold different numbers of ignored labels). */
/* sum(per) over the positions that count (count: their number, the
   replica's; in a replica of several, the global batch's, summed across the
   replicas in the step): a count is 0 or at least 1, and with none the sum
   is 0. ignore_class's mean and a mask's (ld_loss_weighted). */
static ld_tensor *mean_over_count(loss_tmp *kp, ld_tensor *per, ld_tensor *count) {
    if (count && in_replicas()) count = replica_total(kp, count);
    return K(ld_div(K(ld_sum(per, LD_ALL_AXES, 0)), K(ld_maximum(count, K(scalar_on(1.0f, per))))));
}

static ld_tensor *masked_mean(const ld_loss *l, ld_tensor *per, ld_tensor *y_true) {
    if (!y_true) { ld_fail(LD_EINTERNAL, "ignore_class: the mean needs the labels"); return NULL; }
    loss_tmp k = {{0}, 0, 0}, *kp = &k;
    ld_device *dev = per->storage->device;
    ld_tensor *yt = y_true->storage->device == dev ? y_true : K(ld_to_device(y_true, dev));
    ld_tensor *ign = K(ld_tensor_scalar((float)l->ignore_class, dev));
    ld_tensor *valid = K(ld_sum(K(ld_binary(LD_BIN_NE, yt, ign)), LD_ALL_AXES, 0));
    return tmp_done(kp, mean_over_count(kp, per, valid));
}

/* Keras 3's sparse_categorical_crossentropy with ignore_class: the ignored
   positions get label 0 and predictions 0 (so they carry no NaN and no
   gradient), their losses are 0; per position (labels' shape, a last axis
   of 1 dropped), then reduced as l asks (ld_loss_reduce: the mean over the
   valid labels). */
static ld_tensor *ignored_xent(const ld_loss *l, ld_tensor *y_true, ld_tensor *y_pred) {
    loss_tmp k = {{0}, 0, 0}, *kp = &k;
    ld_device *dev = y_pred->storage->device;
    ld_tensor *yt = y_true->storage->device == dev ? y_true : K(ld_to_device(y_true, dev));
    if (yt && yt->ndim == y_pred->ndim && yt->ndim > 1 && yt->shape[yt->ndim - 1] == 1)
        yt = K(ld_reshape(yt, yt->ndim - 1, yt->shape));
    if (!yt) return tmp_done(kp, NULL);
    ld_tensor *valid = K(ld_binary(LD_BIN_NE, yt, K(ld_tensor_scalar((float)l->ignore_class, dev))));
    ld_tensor *zero_label = K(ld_cast(K(ld_tensor_scalar(0, dev)), yt->dtype));
    ld_tensor *labels = K(ld_where(valid, yt, zero_label));
    int64_t vs[LD_MAX_DIMS + 1];
    int vn = valid ? valid->ndim : 0;
    if (valid) memcpy(vs, valid->shape, sizeof(int64_t) * (size_t)vn);
    vs[vn] = 1;                                            /* the mask over the class axis */
    ld_tensor *pred = K(ld_where(K(ld_reshape(valid, vn + 1, vs)), y_pred, K(scalar_on(0, y_pred))));
    ld_loss inner = *l;
    inner.has_ignore_class = 0;
    inner.reduction_sum = 2;
    ld_tensor *per = pred ? K(ld_loss_compute(&inner, labels, pred)) : NULL;
    if (per && ld_tensor_numel(per) != ld_tensor_numel(valid)) {
        char b1[64], b2[64];
        ld_fail(LD_ESHAPE, "sparse_categorical_crossentropy: labels %s do not match predictions %s",
                ld_shape_str(y_true, b1, sizeof b1), ld_shape_str(y_pred, b2, sizeof b2));
        kp->bad = 1;
    }
    ld_tensor *m = per ? K(ld_reshape(valid, per->ndim, per->shape)) : NULL;
    per = K(ld_where(m, per, K(scalar_on(0, per))));
    return tmp_done(kp, l->reduction_sum == 2 || !per ? per : K(ld_loss_reduce(l, per, yt)));
}

/* -(t log p + (1 - t) log(1 - p)), p clipped to [eps, 1 - eps]: Keras's
   binary cross-entropy of probabilities (TF backend), elementwise */
static ld_tensor *bce_probs(ld_tensor *t, ld_tensor *y_pred) {
    loss_tmp k = {{0}, 0, 0}, *kp = &k;
    ld_tensor *p = K(clip_probs(y_pred));
    ld_tensor *a = K(ld_mul(t, K(ld_log(p))));
    ld_tensor *b = K(ld_mul(K(ld_add_scalar(K(ld_mul_scalar(t, -1.0f)), 1.0f)),
                            K(ld_log(K(ld_add_scalar(K(ld_mul_scalar(p, -1.0f)), 1.0f))))));
    return tmp_done(kp, K(ld_neg(K(ld_add(a, b)))));
}

/* Keras's probabilities for a categorical cross-entropy: normalised over
   the last axis, then clipped to [eps, 1 - eps] */
static ld_tensor *normalized_probs(ld_tensor *y_pred) {
    loss_tmp k = {{0}, 0, 0}, *kp = &k;
    return tmp_done(kp, K(clip_probs(K(ld_div(y_pred, K(ld_sum(y_pred, -1, 1)))))));
}

/* ---- Dice and Tversky: ratios of sums over l's axes */
static ld_tensor *axes_sum(loss_tmp *kp, const ld_loss *l, ld_tensor *x) {
    return K(ld_reduce_axes(LD_REDUCE_SUM, x, l->naxes, l->naxes ? l->axes : NULL, 0));
}

/* the loss of the sums s: Dice's (intersection, sum y, sum p), 1 - 2 I / (Y
   + P + eps); Tversky's (intersection, Keras's "fp" sum((1 - p) y), its
   "fn" sum(p (1 - y))), 1 - I / (I + alpha fp + beta fn + eps). Each in
   Keras's order of operations. */
static ld_tensor *overlap_value(loss_tmp *kp, const ld_loss *l, ld_tensor *const *s) {
    ld_tensor *q;
    if (l->kind == LD_LOSS_DICE)
        q = K(ld_div(K(ld_mul_scalar(s[0], 2.0f)), K(ld_add_scalar(K(ld_add(s[1], s[2])), KEPS))));
    else
        q = K(ld_div(s[0], K(ld_add_scalar(K(ld_add(K(ld_add(s[0], K(ld_mul_scalar(s[1], (float)l->alpha)))),
                                                    K(ld_mul_scalar(s[2], (float)l->beta)))), KEPS))));
    return K(ld_add_scalar(K(ld_neg(q)), 1.0f));
}

/* d[k]: the loss's derivative by s[k], at the sums s */
static void overlap_partials(loss_tmp *kp, const ld_loss *l, ld_tensor *const *s, ld_tensor **d) {
    if (l->kind == LD_LOSS_DICE) {
        ld_tensor *r = K(ld_unary(LD_UN_RECIPROCAL, K(ld_add_scalar(K(ld_add(s[1], s[2])), KEPS))));
        d[0] = K(ld_mul_scalar(r, -2.0f));
        d[1] = d[2] = K(ld_mul(K(ld_mul_scalar(s[0], 2.0f)), K(ld_unary(LD_UN_SQUARE, r))));
        return;
    }
    ld_tensor *rest = K(ld_add_scalar(K(ld_add(K(ld_mul_scalar(s[1], (float)l->alpha)),
                                               K(ld_mul_scalar(s[2], (float)l->beta)))), KEPS));
    ld_tensor *r2 = K(ld_unary(LD_UN_SQUARE, K(ld_unary(LD_UN_RECIPROCAL, K(ld_add(s[0], rest))))));
    d[0] = K(ld_neg(K(ld_mul(rest, r2))));
    ld_tensor *ir2 = K(ld_mul(s[0], r2));
    d[1] = K(ld_mul_scalar(ir2, (float)l->alpha));
    d[2] = K(ld_mul_scalar(ir2, (float)l->beta));
}

/* Dice or Tversky of yt and yp (float32, one shape), of the shape left
   after the sums. Summed over the batch axis in a replica of several, the
   loss is no sum over examples: with the sums G of the global batch
   (summed across the replicas) and the loss's derivatives d there, each
   replica gives (f(G) - sum_k d_k G_k) / n + sum_k d_k s_k, its own sums s
   on the tape: the replicas' values add up to f(G) and their gradients to
   one device's (the loss's linearisation at G, exact at G). */
static ld_tensor *overlap_loss(loss_tmp *kp, const ld_loss *l, ld_tensor *yt, ld_tensor *yp) {
    ld_tensor *s[3];
    s[0] = axes_sum(kp, l, K(ld_mul(yt, yp)));
    if (l->kind == LD_LOSS_DICE) {
        s[1] = axes_sum(kp, l, yt);
        s[2] = axes_sum(kp, l, yp);
    } else {
        s[1] = axes_sum(kp, l, K(ld_mul(K(ld_add_scalar(K(ld_neg(yp)), 1.0f)), yt)));
        s[2] = axes_sum(kp, l, K(ld_mul(yp, K(ld_add_scalar(K(ld_neg(yt)), 1.0f)))));
    }
    int n = in_replicas();
    if (!n || !sums_batch(l, yp->ndim)) return overlap_value(kp, l, s);
    ld_tensor *g[3], *d[3];
    for (int i = 0; i < 3; i++) g[i] = s[i] ? replica_total(kp, s[i]) : NULL;
    ld_tensor *f = overlap_value(kp, l, g);
    overlap_partials(kp, l, g, d);
    ld_tensor *dg = K(ld_add(K(ld_add(K(ld_mul(d[0], g[0])), K(ld_mul(d[1], g[1])))), K(ld_mul(d[2], g[2]))));
    ld_tensor *c = K(ld_mul_scalar(K(ld_sub(f, dg)), (float)(1.0 / n)));
    ld_tensor *lin = K(ld_add(K(ld_add(K(ld_mul(d[0], s[0])), K(ld_mul(d[1], s[1])))), K(ld_mul(d[2], s[2]))));
    return K(ld_add(c, lin));
}

/* per-example losses of MSE and the kinds above: yt (float32, y_pred's shape) and yp */
static ld_tensor *regression_loss(const ld_loss *l, ld_tensor *yt, ld_tensor *yp) {
    loss_tmp k = {{0}, 0, 0}, *kp = &k;
    ld_tensor *e = NULL, *per = NULL;
    int sum_last = 0;
    switch (l->kind) {
    case LD_LOSS_MSE: e = K(ld_unary(LD_UN_SQUARE, K(ld_sub(yp, yt)))); break;
    case LD_LOSS_MAE: e = K(ld_unary(LD_UN_ABS, K(ld_sub(yp, yt)))); break;
    case LD_LOSS_MAPE: {
        ld_tensor *den = K(ld_maximum(K(ld_unary(LD_UN_ABS, yt)), K(scalar_on(KEPS, yt))));
        e = K(ld_unary(LD_UN_ABS, K(ld_div(K(ld_sub(yt, yp)), den))));
        break;
    }
    case LD_LOSS_MSLE: {
        ld_tensor *eps = K(scalar_on(KEPS, yp));
        ld_tensor *a = K(ld_log(K(ld_add_scalar(K(ld_maximum(yp, eps)), 1.0f))));
        ld_tensor *b = K(ld_log(K(ld_add_scalar(K(ld_maximum(yt, eps)), 1.0f))));
        e = K(ld_unary(LD_UN_SQUARE, K(ld_sub(a, b))));
        break;
    }
    case LD_LOSS_HUBER: {
        float d = l->delta;
        ld_tensor *err = K(ld_sub(yp, yt)), *ae = K(ld_unary(LD_UN_ABS, err));
        ld_tensor *quad = K(ld_mul_scalar(K(ld_unary(LD_UN_SQUARE, err)), 0.5f));
        ld_tensor *lin = K(ld_add_scalar(K(ld_mul_scalar(ae, d)), -(0.5f * (d * d))));
        e = K(ld_where(K(ld_binary(LD_BIN_LE, ae, K(scalar_on(d, ae)))), quad, lin));
        break;
    }
    case LD_LOSS_LOGCOSH: {
        ld_tensor *x = K(ld_sub(yp, yt));
        ld_tensor *sp = K(ld_unary(LD_UN_SOFTPLUS, K(ld_mul_scalar(x, -2.0f))));
        e = K(ld_add_scalar(K(ld_add(x, sp)), -logf(2.0f)));
        break;
    }
    case LD_LOSS_KLD: {
        ld_tensor *eps = K(scalar_on(KEPS, yp)), *one = K(scalar_on(1.0f, yp));
        ld_tensor *t = K(ld_clip_by_value(yt, eps, one)), *p = K(ld_clip_by_value(yp, eps, one));
        e = K(ld_mul(t, K(ld_log(K(ld_div(t, p))))));
        sum_last = 1;
        break;
    }
    case LD_LOSS_POISSON:
        e = K(ld_sub(yp, K(ld_mul(yt, K(ld_log(K(ld_add_scalar(yp, KEPS))))))));
        break;
    case LD_LOSS_COSINE: {
        /* Keras's normalize: x / max(||x||_2, eps) along the last axis */
        ld_tensor *eps = K(scalar_on(KEPS, yp));
        ld_tensor *np = K(ld_maximum(K(ld_sqrt(K(ld_sum(K(ld_unary(LD_UN_SQUARE, yp)), -1, 1)))), eps));
        ld_tensor *nt = K(ld_maximum(K(ld_sqrt(K(ld_sum(K(ld_unary(LD_UN_SQUARE, yt)), -1, 1)))), eps));
        e = K(ld_neg(K(ld_mul(K(ld_div(yt, nt)), K(ld_div(yp, np))))));
        sum_last = 1;
        break;
    }
    case LD_LOSS_HINGE: case LD_LOSS_SQUARED_HINGE: {
        ld_tensor *t = hinge_labels(kp, yt);
        ld_tensor *h = K(ld_maximum(K(ld_add_scalar(K(ld_neg(K(ld_mul(t, yp)))), 1.0f)), K(scalar_on(0, yp))));
        e = l->kind == LD_LOSS_HINGE ? h : K(ld_unary(LD_UN_SQUARE, h));
        break;
    }
    case LD_LOSS_CATEGORICAL_HINGE: {
        if (yp->ndim < 1) { ld_fail(LD_ESHAPE, "categorical_hinge: predictions need a class axis"); break; }
        ld_tensor *pos = K(ld_sum(K(ld_mul(yt, yp)), -1, 0));
        ld_tensor *neg = K(ld_max(K(ld_mul(K(ld_add_scalar(K(ld_neg(yt)), 1.0f)), yp)), -1, 0));
        per = K(ld_maximum(K(ld_add_scalar(K(ld_sub(neg, pos)), 1.0f)), K(scalar_on(0, yp))));
        break;
    }
    case LD_LOSS_BINARY_FOCAL: {
        float ls = l->label_smoothing;
        ld_tensor *t = ls > 0 ? K(smooth_labels(yt, ls, 0.5f * ls)) : yt;
        ld_tensor *p = l->from_logits ? K(ld_sigmoid(yp)) : yp;
        ld_tensor *bce = K(bce_probs(t, p));
        ld_tensor *omt = K(ld_add_scalar(K(ld_neg(t)), 1.0f));
        ld_tensor *pt = K(ld_add(K(ld_mul(t, p)), K(ld_mul(omt, K(ld_add_scalar(K(ld_neg(p)), 1.0f))))));
        e = K(ld_mul(K(ld_pow_scalar(K(ld_add_scalar(K(ld_neg(pt)), 1.0f)), (float)l->gamma)), bce));
        if (l->class_balancing)
            e = K(ld_mul(K(ld_add(K(ld_mul_scalar(t, (float)l->alpha)), K(ld_mul_scalar(omt, (float)(1.0 - l->alpha))))), e));
        break;
    }
    case LD_LOSS_CATEGORICAL_FOCAL: {
        if (yp->ndim < 1) { ld_fail(LD_ESHAPE, "categorical_focal_crossentropy: predictions need a class axis"); break; }
        float ls = l->label_smoothing;
        ld_tensor *t = ls > 0 ? K(smooth_labels(yt, ls, ls / (float)yp->shape[yp->ndim - 1])) : yt;
        ld_tensor *out = K(normalized_probs(l->from_logits ? K(ld_softmax(yp)) : yp));
        ld_tensor *cce = K(ld_mul(K(ld_neg(t)), K(ld_log(out))));
        ld_tensor *mod = K(ld_pow_scalar(K(ld_add_scalar(K(ld_neg(out)), 1.0f)), (float)l->gamma));
        e = K(ld_mul(K(ld_mul_scalar(mod, (float)l->alpha)), cce));
        sum_last = 1;
        break;
    }
    case LD_LOSS_DICE: case LD_LOSS_TVERSKY: per = overlap_loss(kp, l, yt, yp); break;
    default: ld_fail(LD_EINTERNAL, "loss %d has no formula", (int)l->kind); break;
    }
    if (!per && e) {
        if (e->ndim < 1) per = e;
        else if (sum_last) per = K(ld_sum(e, -1, 0));
        else {
            per = K(ld_mean(e, -1, 0));
            if (l->kind == LD_LOSS_MAPE) per = K(ld_mul_scalar(per, 100.0f));
        }
    }
    return tmp_done(kp, per);
}
/* Keras's squeeze_or_expand_to_same_rank of losses x and weights w (new
   references in *xo, *wo): a rank apart with a last axis of 1, that axis
   dropped from the longer, or a vector made a column. Then, weights [batch]
   of losses [batch, steps, ...] (a sequence model's) weigh each example's
   positions: ldist's choice where Keras 3 fails on the shapes. */
static int weights_rank(ld_tensor *x, ld_tensor *w, ld_tensor **xo, ld_tensor **wo) {
    *xo = ld_tensor_retain(x);
    *wo = ld_tensor_retain(w);
    for (int pass = 0; pass < 2; pass++) {
        ld_tensor **a = pass ? wo : xo, **b = pass ? xo : wo;   /* a: the longer */
        if ((*a)->ndim != (*b)->ndim + 1 || (*a)->shape[(*a)->ndim - 1] != 1) continue;
        int64_t s[LD_MAX_DIMS];
        ld_tensor *r;
        if ((*b)->ndim == 1) {
            s[0] = (*b)->shape[0], s[1] = 1;
            r = ld_reshape_op(*b, 2, s);
            ld_tensor_release(*b);
            *b = r;
        } else {
            memcpy(s, (*a)->shape, sizeof(int64_t) * (size_t)((*a)->ndim - 1));
            r = ld_reshape_op(*a, (*a)->ndim - 1, s);
            ld_tensor_release(*a);
            *a = r;
        }
        if (!r) return ld_error_status();
        break;
    }
    if ((*wo)->ndim >= 1 && (*wo)->ndim < (*xo)->ndim) {
        int64_t s[LD_MAX_DIMS];
        int same = 1;
        for (int i = 0; i < (*wo)->ndim; i++) { s[i] = (*wo)->shape[i]; same &= s[i] == (*xo)->shape[i]; }
        if (same) {
            for (int i = (*wo)->ndim; i < (*xo)->ndim; i++) s[i] = 1;
            ld_tensor *r = ld_reshape_op(*wo, (*xo)->ndim, s);
            ld_tensor_release(*wo);
            if (!(*wo = r)) return ld_error_status();
        }
    }
    return LD_OK;
}

ld_tensor *ld_loss_weighted(const ld_loss *l, ld_tensor *y_true, ld_tensor *y_pred, ld_tensor *w) {
    ld_tensor *mask = y_pred->keras_mask;
    if (!mask && !w) return ld_loss_compute(l, y_true, y_pred);
    loss_tmp k = {{0}, 0, 0}, *kp = &k;
    char b1[LD_SHAPE_STR_MAX], b2[LD_SHAPE_STR_MAX];
    /* the predictions without their mask (a view: the mask is applied here once) */
    ld_tensor *bare = mask ? K(ld_reshape_op(y_pred, y_pred->ndim, y_pred->shape)) : y_pred;
    ld_loss per_l = *l;
    per_l.reduction_sum = 2;
    ld_tensor *per = bare ? K(ld_loss_compute(&per_l, y_true, bare)) : NULL, *valid = NULL;
    if (!per) return tmp_done(kp, NULL);
    ld_device *dev = per->storage->device;
    if (mask) {
        ld_tensor *m = mask->storage->device == dev ? mask : K(ld_to_device(mask, dev));
        if (m && ld_tensor_numel(m) != ld_tensor_numel(per)) {
            ld_fail(LD_ESHAPE, "%s: the predictions' mask %s does not match their losses %s", ld_loss_name(l->kind),
                    ld_shape_str(mask, b1, sizeof b1), ld_shape_str(per, b2, sizeof b2));
            return tmp_done(kp, NULL);
        }
        m = K(ld_reshape(m, per->ndim, per->shape));
        if (m && l->has_ignore_class) {   /* Keras: the mask and ignore_class's, both */
            ld_tensor *yt = y_true->storage->device == dev ? y_true : K(ld_to_device(y_true, dev));
            ld_tensor *ok = yt && ld_tensor_numel(yt) == ld_tensor_numel(per)
                ? K(ld_binary(LD_BIN_NE, K(ld_reshape(yt, per->ndim, per->shape)), K(ld_tensor_scalar((float)l->ignore_class, dev))))
                : NULL;
            m = ok ? K(ld_mul(m, K(ld_cast(ok, LD_F32)))) : m;
        }
        per = K(ld_mul(per, m));
        if (per && l->reduction_sum == 0) valid = K(ld_sum(m, LD_ALL_AXES, 0));
    }
    if (per && w) {
        ld_tensor *wd = w->storage->device == dev ? w : K(ld_to_device(w, dev)), *pr = NULL, *wr = NULL;
        if (wd && weights_rank(per, wd, &pr, &wr)) kp->bad = 1;
        keep(kp, pr);
        keep(kp, wr);
        ld_tensor *pw = pr && wr ? ld_mul(pr, wr) : NULL;
        if (pr && wr && !pw) {
            ld_fail(LD_ESHAPE, "sample_weight %s does not broadcast against the losses %s", ld_shape_str(w, b1, sizeof b1),
                    ld_shape_str(per, b2, sizeof b2));
            kp->bad = 1;
        }
        per = K(pw);
    }
    if (!per) return tmp_done(kp, NULL);
    /* Keras returns a scalar or an empty loss unreduced */
    if (l->reduction_sum == 2 || per->ndim == 0 || (per->ndim == 1 && ld_tensor_numel(per) == 0)) return tmp_done(kp, per);
    if (l->reduction_sum == 1) return tmp_done(kp, K(ld_sum(per, LD_ALL_AXES, 0)));
    if (!valid) return tmp_done(kp, K(ld_loss_reduce(l, per, y_true)));
    return tmp_done(kp, mean_over_count(kp, per, valid));
}

#undef K

ld_tensor *ld_loss_compute(const ld_loss *l, ld_tensor *y_true, ld_tensor *y_pred) {
    char b1[64], b2[64];
    if (ld_dtype_is_half(y_pred->dtype)) {
        /* Keras computes a loss in float32: half predictions (a mixed
           precision model's) are cast first, on the tape, their mask kept */
        ld_tensor *p32 = ld_cast_op(y_pred, LD_F32), *v = NULL;
        if (p32) {
            ld_tensor_set_mask(p32, y_pred->keras_mask);
            v = ld_loss_compute(l, y_true, p32);
        }
        ld_tensor_release(p32);
        return v;
    }
    if (y_pred->keras_mask) return ld_loss_weighted(l, y_true, y_pred, NULL);
    ld_tensor *t1 = NULL, *t2 = NULL, *t3 = NULL, *per = NULL, *out = NULL, *yt = NULL;
    int sparse = l->kind == LD_LOSS_SPARSE_CCE;
    switch (l->kind) {
    case LD_LOSS_SPARSE_CCE: {
        if (l->has_ignore_class) return ignored_xent(l, y_true, y_pred);
        if (y_pred->ndim > 2) return sequence_xent(l, y_true, y_pred);
        ld_tensor *lab = y_true;
        int64_t n1 = ld_tensor_numel(y_true);
        if (y_pred->ndim != 2 || n1 != y_pred->shape[0]) {
            ld_fail(LD_ESHAPE, "sparse_categorical_crossentropy: labels %s do not match predictions %s "
                    "(want labels [batch] and predictions [batch, classes])",
                    ld_shape_str(y_true, b1, sizeof b1), ld_shape_str(y_pred, b2, sizeof b2));
            return NULL;
        }
        TRY(t1 = ld_reshape(lab, 1, &n1));
        if (l->from_logits && l->reduction_sum == 0) {
            out = ld_sparse_xent_logits_scaled(y_pred, t1, replica_denominator());
            ld_tensor_release(t1);
            return out;
        }
        /* probabilities (or another reduction): -log p[label] through a one-hot product */
        int64_t c = y_pred->shape[1];
        int64_t oh_shape[2] = {n1, c};
        if (ld_device_is_async(t1->storage->device)) {
            /* labels on a device that queues: reading them here would wait for
               its queue, which may hold a collective of the step that waits
               for replicas not issued yet (synchronized BatchNorm). So the
               one-hot rows are picked from an identity on the device, the
               embedding kernel reporting a label out of range. */
            int64_t eye_shape[2] = {c, c};
            TRY(t2 = ld_tensor_empty(LD_F32, 2, eye_shape, NULL));
            memset(t2->storage->data, 0, (size_t)(c * c) * sizeof(float));
            for (int64_t i = 0; i < c; i++) ((float *)t2->storage->data)[i * c + i] = 1.0f;
            TRY(t3 = ld_to_device(t2, y_pred->storage->device));
            ld_tensor_release(t2); t2 = NULL;
            yt = ld_embedding_op(t3, t1);
            ld_tensor_release(t3); t3 = NULL;
            ld_tensor_release(t1); t1 = NULL;
            TRY(yt);
            goto categorical;
        }
        /* written here, on the host: ld_tensor_zeros would queue its fill on
           cpu:0 when the host queues (a strategy's step), and that fill could
           run after the ones below */
        TRY(t2 = ld_tensor_empty(LD_F32, 2, oh_shape, NULL));
        memset(t2->storage->data, 0, (size_t)(n1 * c) * sizeof(float));
        for (int64_t i = 0; i < n1; i++) {
            int64_t k = (int64_t)ld_tensor_get_flat(t1, i);
            if (k < 0 || k >= c) { ld_fail(LD_EARG, "label %lld at position %lld is outside [0, %lld)", (long long)k, (long long)i, (long long)c); goto fail; }
            ((float *)t2->storage->data)[i * c + k] = 1.0f;
        }
        ld_tensor_release(t1); t1 = NULL;
        yt = ld_to_device(t2, y_pred->storage->device);
        ld_tensor_release(t2); t2 = NULL;
        TRY(yt);
        goto categorical;
    }
    case LD_LOSS_CCE:
        if (!ld_same_shape(y_true, y_pred)) goto shape;
        if (l->label_smoothing > 0) {   /* Keras: y (1 - s) + s / classes */
            float cls = y_pred->ndim ? (float)y_pred->shape[y_pred->ndim - 1] : 1.0f;
            TRY(yt = smooth_labels(y_true, l->label_smoothing, l->label_smoothing / cls));
        } else {
            yt = ld_tensor_retain(y_true);
        }
    categorical: {
        ld_tensor *logp;
        if (l->from_logits) TRY(logp = ld_log_softmax(y_pred));
        else if (sparse) {
            /* Keras (TF backend): clip, log, then the log-softmax of those
               logs (an infinite probability is clipped, not normalised) */
            TRY(t2 = clip_probs(y_pred));
            TRY(t1 = ld_log(t2));
            ld_tensor_release(t2); t2 = NULL;
            logp = ld_log_softmax(t1);
            ld_tensor_release(t1); t1 = NULL;
            TRY(logp);
        } else {
            /* Keras: normalise, clip to [eps, 1-eps], log */
            TRY(t2 = normalized_probs(y_pred));
            logp = ld_log(t2);
            ld_tensor_release(t2); t2 = NULL;
            TRY(logp);
        }
        t1 = ld_mul(yt, logp);
        ld_tensor_release(logp);
        TRY(t1);
        TRY(t2 = ld_sum(t1, -1, 0));
        TRY(per = ld_neg(t2));
        break;
    }
    case LD_LOSS_BCE: {
        if (!ld_same_shape(y_true, y_pred)) {
            if (ld_tensor_numel(y_true) != ld_tensor_numel(y_pred)) goto shape;
            TRY(yt = ld_reshape(y_true, y_pred->ndim, y_pred->shape));
        } else yt = ld_tensor_retain(y_true);
        ld_tensor *yf = ld_cast(yt, LD_F32);
        ld_tensor_release(yt);
        TRY(yt = yf);
        if (l->label_smoothing > 0) {   /* Keras: y (1 - s) + s / 2 */
            ld_tensor *ys = smooth_labels(yt, l->label_smoothing, 0.5f * l->label_smoothing);
            ld_tensor_release(yt);
            TRY(yt = ys);
        }
        if (l->from_logits) {
            /* max(x,0) - x*z + log(1 + exp(-|x|)) */
            ld_tensor *r = ld_relu(y_pred), *xz = r ? ld_mul(y_pred, yt) : NULL;
            ld_tensor *ab = xz ? ld_unary(LD_UN_ABS, y_pred) : NULL;
            ld_tensor *na = ab ? ld_neg(ab) : NULL, *e = na ? ld_exp(na) : NULL;
            ld_tensor *e1 = e ? ld_add_scalar(e, 1.0f) : NULL, *lg = e1 ? ld_log(e1) : NULL;
            ld_tensor *d = lg ? ld_sub(r, xz) : NULL;
            t1 = d ? ld_add(d, lg) : NULL;
            ld_tensor_release(r); ld_tensor_release(xz); ld_tensor_release(ab); ld_tensor_release(na);
            ld_tensor_release(e); ld_tensor_release(e1); ld_tensor_release(lg); ld_tensor_release(d);
        } else {
            t1 = bce_probs(yt, y_pred);
        }
        TRY(t1);
        TRY(per = ld_mean(t1, -1, 0));
        break;
    }
    case LD_LOSS_MSE: case LD_LOSS_MAE: case LD_LOSS_MAPE: case LD_LOSS_MSLE: case LD_LOSS_HUBER: case LD_LOSS_LOGCOSH:
    case LD_LOSS_KLD: case LD_LOSS_POISSON: case LD_LOSS_COSINE: case LD_LOSS_HINGE: case LD_LOSS_SQUARED_HINGE:
    case LD_LOSS_CATEGORICAL_HINGE: case LD_LOSS_BINARY_FOCAL: case LD_LOSS_CATEGORICAL_FOCAL: case LD_LOSS_DICE:
    case LD_LOSS_TVERSKY:
        if (!ld_same_shape(y_true, y_pred)) {
            if (ld_tensor_numel(y_true) != ld_tensor_numel(y_pred)) goto shape;
            TRY(t1 = ld_reshape(y_true, y_pred->ndim, y_pred->shape));   /* [batch] labels of [batch, 1] */
        } else t1 = ld_tensor_retain(y_true);
        TRY(yt = ld_as_float(t1));
        TRY(per = regression_loss(l, yt, y_pred));
        break;
    case LD_LOSS_COUNT: ld_fail(LD_EINTERNAL, "no such loss"); goto fail;
    }
    out = ld_loss_reduce(l, per, y_true);
fail:
    ld_tensor_release(t1); ld_tensor_release(t2); ld_tensor_release(t3);
    ld_tensor_release(per); ld_tensor_release(yt);
    return out;
shape:
    ld_fail(LD_ESHAPE, "%s: labels %s and predictions %s do not match", loss_names[l->kind],
            ld_shape_str(y_true, b1, sizeof b1), ld_shape_str(y_pred, b2, sizeof b2));
    return NULL;
}

/* ================================================================ metrics */
/* each position's match (the argmax, or one column's 0.5 threshold) times
   its weight (w NULL: 1), summed into *correct, the weights into *total */
int ld_count_correct_weighted(ld_tensor *y_true, ld_tensor *y_pred, int sparse, ld_tensor *w, double *correct,
                              double *total) {
    char b1[64], b2[64];
    int64_t n;   /* positions: rows, or every position of a sequence model's [batch, t..., classes] */
    *correct = *total = 0;
    ld_tensor *pc = ld_to_device(y_pred, ld_device_cpu()), *tc = pc ? ld_to_device(y_true, ld_device_cpu()) : NULL;
    ld_tensor *p = tc ? (pc->dtype == LD_F32 ? ld_contiguous(pc) : ld_cast(pc, LD_F32)) : NULL;   /* half predictions too */
    ld_tensor *wc = p && w ? ld_to_device(w, ld_device_cpu()) : NULL, *wf = wc ? ld_cast(wc, LD_F32) : NULL;
    int st = LD_OK;
    if (!p || (w && !wf)) { st = ld_error_status(); goto done; }
    int64_t c = p->ndim >= 2 ? p->shape[p->ndim - 1] : 1;
    n = c > 0 ? ld_tensor_numel(p) / c : 0;
    if (sparse && c > 1) {
        if (ld_tensor_numel(tc) != n) goto shape;
    } else if (ld_tensor_numel(tc) != n * c) goto shape;
    /* each weight covers `per` positions: one per row of the batch, or one per position */
    int64_t nw = wf ? ld_tensor_numel(wf) : 0, per = nw > 0 && n % nw == 0 ? n / nw : 0;
    if (wf && (per == 0 || (nw != n && nw != 1 && nw != (p->ndim ? p->shape[0] : 1)))) {
        st = ld_fail(LD_ESHAPE, "accuracy: sample_weight %s matches neither the rows nor the positions of predictions %s",
                     ld_shape_str(w, b1, sizeof b1), ld_shape_str(y_pred, b2, sizeof b2));
        goto done;
    }
    const float *pp = ld_tensor_data(p), *wp = wf ? ld_tensor_data(wf) : NULL;
    if (!pp || (wf && !wp)) { st = ld_error_status(); goto done; }
    for (int64_t i = 0; i < n; i++) {
        int match;
        if (c == 1) {
            match = (pp[i] > 0.5f) == (ld_tensor_get_flat(tc, i) > 0.5);
        } else {
            int64_t best = 0;
            for (int64_t j = 1; j < c; j++) if (pp[i * c + j] > pp[i * c + best]) best = j;
            int64_t want;
            if (sparse) want = (int64_t)ld_tensor_get_flat(tc, i);
            else {
                want = 0;
                for (int64_t j = 1; j < c; j++) if (ld_tensor_get_flat(tc, i * c + j) > ld_tensor_get_flat(tc, i * c + want)) want = j;
            }
            match = best == want;
        }
        double wi = wp ? wp[i / per] : 1.0;
        *correct += match ? wi : 0.0;
        *total += wi;
    }
    goto done;
shape:
    st = ld_fail(LD_ESHAPE, "accuracy: labels %s do not match predictions %s",
                 ld_shape_str(y_true, b1, sizeof b1), ld_shape_str(y_pred, b2, sizeof b2));
done:
    ld_tensor_release(pc); ld_tensor_release(tc); ld_tensor_release(p);
    ld_tensor_release(wc); ld_tensor_release(wf);
    return st;
}

int ld_count_correct(ld_tensor *y_true, ld_tensor *y_pred, int sparse, int64_t *correct) {
    double c, t;
    int st = ld_count_correct_weighted(y_true, y_pred, sparse, NULL, &c, &t);
    *correct = (int64_t)c;
    return st;
}
