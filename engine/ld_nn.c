/* ld_nn.c - layers, Sequential, losses, metric helpers. */
#include "ld_nn.h"
#include "ld_autograd.h"
#include "ld_strategy.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ================================================================ activations */
static const char *const act_names[] = {"linear", "relu", "sigmoid", "tanh", "softmax", "gelu"};

int ld_activation_from_name(const char *name, ld_activation *out) {
    if (!name || !strcmp(name, "none") || !strcmp(name, "linear")) { *out = LD_ACT_NONE; return LD_OK; }
    for (int i = 1; i < 6; i++) if (!strcmp(name, act_names[i])) { *out = (ld_activation)i; return LD_OK; }
    return ld_fail(LD_EARG, "unknown activation '%s' (relu, sigmoid, tanh, softmax, gelu, linear)", name);
}
const char *ld_activation_name(ld_activation a) { return act_names[a]; }

ld_tensor *ld_activate(ld_activation a, ld_tensor *x) {
    switch (a) {
    case LD_ACT_RELU: return ld_relu(x);
    case LD_ACT_SIGMOID: return ld_sigmoid(x);
    case LD_ACT_TANH: return ld_tanh(x);
    case LD_ACT_SOFTMAX: return ld_softmax(x);
    case LD_ACT_GELU: return ld_gelu(x);
    default: return ld_tensor_retain(x);
    }
}

/* ================================================================ layers */
static const char *const kind_names[] = {"dense", "flatten", "dropout", "conv2d", "max_pooling2d",
                                         "activation", "reshape"};
const char *ld_layer_kind_name(ld_layer_kind k) { return kind_names[k]; }
static int name_counter[8];

static ld_layer *layer_new(ld_layer_kind kind) {
    ld_layer *l = calloc(1, sizeof *l);
    if (!l) { ld_fail(LD_ENOMEM, "out of memory"); return NULL; }
    l->refcount = 1;
    l->kind = kind;
    int k = __atomic_fetch_add(&name_counter[kind], 1, __ATOMIC_RELAXED);
    if (k) snprintf(l->name, sizeof l->name, "%s_%d", kind_names[kind], k);
    else snprintf(l->name, sizeof l->name, "%s", kind_names[kind]);
    return l;
}

ld_layer *ld_dense_new(int64_t units, ld_activation act, int use_bias) {
    if (units < 1) { ld_fail(LD_EARG, "Dense units must be positive, got %lld", (long long)units); return NULL; }
    ld_layer *l = layer_new(LD_LAYER_DENSE);
    if (l) { l->units = units; l->act = act; l->use_bias = use_bias; }
    return l;
}
ld_layer *ld_flatten_new(void) { return layer_new(LD_LAYER_FLATTEN); }
ld_layer *ld_dropout_new(float rate) {
    if (!(rate >= 0 && rate < 1)) { ld_fail(LD_EARG, "Dropout rate must be in [0, 1), got %g", rate); return NULL; }
    ld_layer *l = layer_new(LD_LAYER_DROPOUT);
    if (l) l->rate = rate;
    return l;
}
ld_layer *ld_conv2d_new(int64_t filters, int kh, int kw, int sh, int sw, int same, ld_activation act, int use_bias) {
    if (filters < 1 || kh < 1 || kw < 1 || sh < 1 || sw < 1) {
        ld_fail(LD_EARG, "Conv2D filters, kernel size and strides must be positive");
        return NULL;
    }
    ld_layer *l = layer_new(LD_LAYER_CONV2D);
    if (l) {
        l->filters = filters; l->kh = kh; l->kw = kw; l->sh = sh; l->sw = sw;
        l->same_padding = same; l->act = act; l->use_bias = use_bias;
    }
    return l;
}
ld_layer *ld_maxpool2d_new(int kh, int kw, int sh, int sw) {
    if (kh < 1 || kw < 1 || sh < 1 || sw < 1) { ld_fail(LD_EARG, "MaxPool2D sizes must be positive"); return NULL; }
    ld_layer *l = layer_new(LD_LAYER_MAXPOOL2D);
    if (l) { l->kh = kh; l->kw = kw; l->sh = sh; l->sw = sw; }
    return l;
}
ld_layer *ld_activation_layer_new(ld_activation act) {
    ld_layer *l = layer_new(LD_LAYER_ACTIVATION);
    if (l) l->act = act;
    return l;
}
ld_layer *ld_reshape_layer_new(int ndim, const int64_t *shape) {
    if (ndim < 1 || ndim >= LD_MAX_DIMS) { ld_fail(LD_EARG, "Reshape target must have 1 to %d dimensions", LD_MAX_DIMS - 1); return NULL; }
    int infer;
    int64_t known;
    if (ld_shape_target(ndim, shape, &infer, &known)) return NULL;   /* t:reshape's rules and messages */
    ld_layer *l = layer_new(LD_LAYER_RESHAPE);
    if (l) { l->target_ndim = ndim; memcpy(l->target_shape, shape, (size_t)ndim * sizeof *shape); }
    return l;
}

ld_layer *ld_layer_retain(ld_layer *l) {
    if (l) __atomic_add_fetch(&l->refcount, 1, __ATOMIC_RELAXED);
    return l;
}

void ld_layer_release(ld_layer *l) {
    if (!l || __atomic_sub_fetch(&l->refcount, 1, __ATOMIC_ACQ_REL) != 0) return;
    for (int i = 0; i < l->n_vars; i++) ld_tensor_release(l->vars[i]);
    free(l);
}

static ld_tensor *new_variable(ld_layer *l, const char *what, int ndim, const int64_t *shape,
                               int64_t fan_in, int64_t fan_out, int zeros) {
    ld_tensor *v;
    ld_rng *rng = ld_global_rng(), before = *rng;
    if (zeros) v = ld_tensor_zeros(LD_F32, ndim, shape, NULL);
    else {
        float lim = sqrtf(6.0f / (float)(fan_in + fan_out));   /* glorot_uniform */
        v = ld_tensor_uniform(ndim, shape, -lim, lim, rng, NULL);
    }
    ld_replica_draws_shared(&before);   /* built once, by whichever replica ran the layer first */
    if (!v) return NULL;
    v->requires_grad = 1;
    size_t n = strlen(l->name) + strlen(what) + 2;
    v->name = malloc(n);
    if (v->name) snprintf(v->name, n, "%s/%s", l->name, what);
    l->vars[l->n_vars++] = v;
    if (ld_variable_created(v)) return NULL;   /* mirrored when a strategy asks for it; v is the layer's */
    return v;
}

int ld_layer_build(ld_layer *l, int in_ndim, const int64_t *in) {
    if (l->built) return LD_OK;
    int64_t out[LD_MAX_DIMS], numel;
    /* every product below is of dimensions a user gave: none may pass int64 */
    if (ld_shape_numel(in_ndim, in, &numel)) return ld_error_status();
    int on = in_ndim;
    memcpy(out, in, (size_t)in_ndim * sizeof *in);
    switch (l->kind) {
    case LD_LAYER_DENSE: {
        if (in_ndim < 1) return ld_fail(LD_ESHAPE, "%s needs inputs with a feature axis", l->name);
        int64_t ks[2] = {in[in_ndim - 1], l->units}, bs[1] = {l->units};
        if (!new_variable(l, "kernel", 2, ks, ks[0], ks[1], 0)) return ld_error_status();
        if (l->use_bias && !new_variable(l, "bias", 1, bs, 0, 0, 1)) return ld_error_status();
        out[on - 1] = l->units;
        break;
    }
    case LD_LAYER_FLATTEN: {
        on = 1; out[0] = numel;
        break;
    }
    case LD_LAYER_CONV2D: {
        if (in_ndim != 3)
            return ld_fail(LD_ESHAPE, "%s needs images [batch, height, width, channels]; got %d axes after the batch "
                           "(add a channel axis with nn.Reshape{28, 28, 1})", l->name, in_ndim);
        int64_t ks[4] = {l->kh, l->kw, in[2], l->filters}, bs[1] = {l->filters};
        int64_t rf = (int64_t)l->kh * l->kw, fan_in, fan_out;
        if (__builtin_mul_overflow(rf, in[2], &fan_in) || __builtin_mul_overflow(rf, (int64_t)l->filters, &fan_out)) {
            char b[LD_SHAPE_STR_MAX];
            return ld_fail(LD_ESHAPE, "%s: kernel shape %s is too large (its size overflows int64)", l->name,
                           ld_shape_fmt(4, ks, b, sizeof b));
        }
        if (!new_variable(l, "kernel", 4, ks, fan_in, fan_out, 0)) return ld_error_status();
        if (l->use_bias && !new_variable(l, "bias", 1, bs, 0, 0, 1)) return ld_error_status();
        if (l->same_padding) {   /* ceil(in / stride), without in + stride - 1 passing int64 */
            out[0] = in[0] / l->sh + (in[0] % l->sh != 0);
            out[1] = in[1] / l->sw + (in[1] % l->sw != 0);
        }
        else { out[0] = (in[0] - l->kh) / l->sh + 1; out[1] = (in[1] - l->kw) / l->sw + 1; }
        out[2] = l->filters;
        break;
    }
    case LD_LAYER_MAXPOOL2D:
        if (in_ndim != 3) return ld_fail(LD_ESHAPE, "%s needs images [batch, height, width, channels]", l->name);
        out[0] = (in[0] - l->kh) / l->sh + 1; out[1] = (in[1] - l->kw) / l->sw + 1;
        break;
    case LD_LAYER_RESHAPE: {
        int64_t n = numel, known;
        int infer;
        if (ld_shape_target(l->target_ndim, l->target_shape, &infer, &known)) return ld_error_status();
        on = l->target_ndim;
        memcpy(out, l->target_shape, (size_t)on * sizeof *out);
        if (infer >= 0 && known > 0) { out[infer] = n / known; known *= out[infer]; }
        if (known != n) return ld_fail(LD_ESHAPE, "%s cannot reshape %lld features into the target shape", l->name, (long long)n);
        break;
    }
    default: break;
    }
    l->in_ndim = in_ndim; memcpy(l->in_shape, in, (size_t)in_ndim * sizeof *in);
    l->out_ndim = on; memcpy(l->out_shape, out, (size_t)on * sizeof *out);
    l->built = 1;
    return LD_OK;
}

static int check_input(ld_layer *l, ld_tensor *x) {
    char b[64];
    if (x->ndim - 1 != l->in_ndim) goto bad;
    for (int i = 0; i < l->in_ndim; i++) {
        if (l->kind == LD_LAYER_CONV2D || l->kind == LD_LAYER_MAXPOOL2D) {
            if (i == 2 && x->shape[3] != l->in_shape[2]) goto bad;   /* any image size, same channels */
        } else if (x->shape[i + 1] != l->in_shape[i]) goto bad;
    }
    return LD_OK;
bad:;
    char want[96] = "";
    size_t k = snprintf(want, sizeof want, "batch");
    for (int i = 0; i < l->in_ndim && k < sizeof want; i++) k += snprintf(want + k, sizeof want - k, "x%lld", (long long)l->in_shape[i]);
    return ld_fail(LD_ESHAPE, "%s expects inputs of shape %s, got %s", l->name, want, ld_shape_str(x, b, sizeof b));
}

ld_tensor *ld_layer_forward(ld_layer *l, ld_tensor *x, int training) {
    if (x->ndim < 1) { ld_fail(LD_ESHAPE, "%s needs a batch axis; got a scalar", l->name); return NULL; }
    if (!l->built && ld_layer_build(l, x->ndim - 1, x->shape + 1)) return NULL;
    if (check_input(l, x)) return NULL;
    switch (l->kind) {
    case LD_LAYER_DENSE: {
        int relu = l->act == LD_ACT_RELU;
        ld_tensor *xf = x->dtype == LD_F32 ? ld_tensor_retain(x) : ld_cast(x, LD_F32);
        ld_tensor *y = xf ? ld_linear(xf, ld_var(l->vars[0]), l->use_bias ? ld_var(l->vars[1]) : NULL, relu) : NULL;
        ld_tensor_release(xf);
        if (!y || relu || l->act == LD_ACT_NONE) return y;
        ld_tensor *a = ld_activate(l->act, y);
        ld_tensor_release(y);
        return a;
    }
    case LD_LAYER_FLATTEN: {
        /* the width from the feature axes, not -1: a replica's share of a
           small batch may have no rows, and 0 elements fix no -1 */
        int64_t s[2] = {x->shape[0], 1};
        for (int i = 1; i < x->ndim; i++) s[1] *= x->shape[i];
        if (x->dtype != LD_F32) {
            ld_tensor *f = ld_cast(x, LD_F32);
            ld_tensor *y = f ? ld_reshape_op(f, 2, s) : NULL;
            ld_tensor_release(f);
            return y;
        }
        return ld_reshape_op(x, 2, s);
    }
    case LD_LAYER_RESHAPE: {
        int64_t s[LD_MAX_DIMS];
        s[0] = x->shape[0];
        memcpy(s + 1, l->out_shape, (size_t)l->out_ndim * sizeof *s);
        return ld_reshape_op(x, l->out_ndim + 1, s);
    }
    case LD_LAYER_DROPOUT:
        return training ? ld_dropout(x, l->rate, NULL) : ld_tensor_retain(x);
    case LD_LAYER_CONV2D: {
        /* im2col, then the fused dense op (bias and relu folded in), then NHWC */
        int64_t oh, ow, k = (int64_t)l->kh * l->kw * x->shape[3];
        ld_tensor *xf = x->dtype == LD_F32 ? ld_tensor_retain(x) : ld_cast(x, LD_F32);
        ld_tensor *col = xf ? ld_im2col(xf, l->kh, l->kw, l->sh, l->sw, l->same_padding, &oh, &ow) : NULL;
        ld_tensor_release(xf);
        int64_t w2s[2] = {k, l->filters};
        ld_tensor *w2 = col ? ld_reshape_op(ld_var(l->vars[0]), 2, w2s) : NULL;
        int relu = l->act == LD_ACT_RELU;
        ld_tensor *y2 = w2 ? ld_linear(col, w2, l->use_bias ? ld_var(l->vars[1]) : NULL, relu) : NULL;
        int64_t ys[4] = {x->shape[0], oh, ow, l->filters};
        ld_tensor *y = y2 ? ld_reshape_op(y2, 4, ys) : NULL;
        ld_tensor_release(col); ld_tensor_release(w2); ld_tensor_release(y2);
        if (!y || relu || l->act == LD_ACT_NONE) return y;
        ld_tensor *a = ld_activate(l->act, y);
        ld_tensor_release(y);
        return a;
    }
    case LD_LAYER_MAXPOOL2D:
        return ld_maxpool2d(x, l->kh, l->kw, l->sh, l->sw);
    case LD_LAYER_ACTIVATION:
        return ld_activate(l->act, x);
    }
    return NULL;
}

int64_t ld_layer_param_count(const ld_layer *l) {
    int64_t n = 0;
    for (int i = 0; i < l->n_vars; i++) n += ld_tensor_numel(l->vars[i]);
    return n;
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

ld_tensor *ld_model_forward(ld_model *m, ld_tensor *x, int training) {
    /* a model runs where its variables are (this replica's copies), as TF
       places an op next to the variable it reads: an input from elsewhere
       (data on cpu:0, variables on a OneDeviceStrategy's cpu:1) is copied */
    ld_tensor *cur = NULL;
    for (int i = 0; i < m->n_layers && !cur; i++)
        if (m->layers[i]->n_vars) {
            ld_device *d = ld_var(m->layers[i]->vars[0])->storage->device;
            if (d != x->storage->device && !(cur = ld_to_device(x, d))) return NULL;
            break;
        }
    if (!cur) cur = ld_tensor_retain(x);
    for (int i = 0; i < m->n_layers && cur; i++) {
        ld_tensor *y = ld_layer_forward(m->layers[i], cur, training);
        ld_tensor_release(cur);
        cur = y;
    }
    return cur;
}

int ld_model_build(ld_model *m, int in_ndim, const int64_t *in_shape) {
    int nd = in_ndim;
    int64_t s[LD_MAX_DIMS];
    memcpy(s, in_shape, (size_t)in_ndim * sizeof *s);
    for (int i = 0; i < m->n_layers; i++) {
        ld_layer *l = m->layers[i];
        if (ld_layer_build(l, nd, s)) return ld_error_status();
        nd = l->out_ndim;
        memcpy(s, l->out_shape, (size_t)nd * sizeof *s);
    }
    return LD_OK;
}

int ld_model_variables(ld_model *m, ld_tensor **vars, int max) {
    int k = 0;
    for (int i = 0; i < m->n_layers; i++)
        for (int j = 0; j < m->layers[i]->n_vars; j++) {
            if (vars && k < max) vars[k] = m->layers[i]->vars[j];
            k++;
        }
    return k;
}

int ld_model_summary(ld_model *m, char *buf, size_t n) {
    size_t k = 0;
    int64_t total = 0;
#define OUT(...) do { if (k < n) k += snprintf(buf + k, n - k, __VA_ARGS__); } while (0)
    OUT("Model: \"%s\"\n", m->name);
    OUT("%-28s %-22s %12s\n", "Layer (type)", "Output Shape", "Param #");
    OUT("%.64s\n", "================================================================");
    for (int i = 0; i < m->n_layers; i++) {
        ld_layer *l = m->layers[i];
        char shape[64] = "?", nm[160];
        if (l->built) {
            size_t q = snprintf(shape, sizeof shape, "(None");
            for (int d = 0; d < l->out_ndim && q < sizeof shape; d++)
                q += snprintf(shape + q, sizeof shape - q, ", %lld", (long long)l->out_shape[d]);
            if (q < sizeof shape) snprintf(shape + q, sizeof shape - q, ")");
        }
        snprintf(nm, sizeof nm, "%s (%s)", l->name, kind_names[l->kind]);
        int64_t pc = ld_layer_param_count(l);
        total += pc;
        OUT("%-28s %-22s %12lld\n", nm, shape, (long long)pc);
    }
    OUT("%.64s\n", "================================================================");
    OUT("Total params: %lld (%.2f KB)\n", (long long)total, total * 4 / 1024.0);
    OUT("Trainable params: %lld\n", (long long)total);
#undef OUT
    return LD_OK;
}

/* ================================================================ losses */
static const char *const loss_names[] = {"sparse_categorical_crossentropy", "categorical_crossentropy",
                                         "binary_crossentropy", "mean_squared_error"};
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

static ld_tensor *reduce_loss(const ld_loss *l, ld_tensor *per) {
    if (l->reduction_sum == 2) return ld_tensor_retain(per);
    if (l->reduction_sum) return ld_sum(per, LD_ALL_AXES, 0);
    double denom = replica_denominator();
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

ld_tensor *ld_loss_compute(const ld_loss *l, ld_tensor *y_true, ld_tensor *y_pred) {
    char b1[64], b2[64];
    ld_tensor *t1 = NULL, *t2 = NULL, *t3 = NULL, *per = NULL, *out = NULL, *yt = NULL;
    switch (l->kind) {
    case LD_LOSS_SPARSE_CCE: {
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
        yt = ld_tensor_retain(y_true);
    categorical: {
        ld_tensor *logp;
        if (l->from_logits) TRY(logp = ld_log_softmax(y_pred));
        else {
            /* Keras: normalise, clip to [eps, 1-eps], log */
            TRY(t1 = ld_sum(y_pred, -1, 1));
            TRY(t2 = ld_div(y_pred, t1));
            ld_tensor_release(t1);
            TRY(t1 = ld_tensor_scalar(1e-7f, y_pred->storage->device));
            TRY(t3 = ld_maximum(t2, t1));
            ld_tensor_release(t2); ld_tensor_release(t1); t1 = NULL;
            TRY(t1 = ld_tensor_scalar(1 - 1e-7f, y_pred->storage->device));
            TRY(t2 = ld_minimum(t3, t1));
            ld_tensor_release(t3); t3 = NULL; ld_tensor_release(t1); t1 = NULL;
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
            /* -(z log p + (1-z) log(1-p)), p clipped to [eps, 1-eps] */
            ld_tensor *lo = ld_tensor_scalar(1e-7f, y_pred->storage->device), *hi = ld_tensor_scalar(1 - 1e-7f, y_pred->storage->device);
            ld_tensor *p1 = lo && hi ? ld_maximum(y_pred, lo) : NULL, *p = p1 ? ld_minimum(p1, hi) : NULL;
            ld_tensor *lp = p ? ld_log(p) : NULL;
            ld_tensor *omp = p ? ld_mul_scalar(p, -1.0f) : NULL, *omp1 = omp ? ld_add_scalar(omp, 1.0f) : NULL;
            ld_tensor *l1p = omp1 ? ld_log(omp1) : NULL;
            ld_tensor *omz = ld_mul_scalar(yt, -1.0f), *omz1 = omz ? ld_add_scalar(omz, 1.0f) : NULL;
            ld_tensor *a = lp ? ld_mul(yt, lp) : NULL, *b = l1p && omz1 ? ld_mul(omz1, l1p) : NULL;
            ld_tensor *s = a && b ? ld_add(a, b) : NULL;
            t1 = s ? ld_neg(s) : NULL;
            ld_tensor *all[] = {lo, hi, p1, p, lp, omp, omp1, l1p, omz, omz1, a, b, s};
            for (size_t i = 0; i < sizeof all / sizeof *all; i++) ld_tensor_release(all[i]);
        }
        TRY(t1);
        TRY(per = ld_mean(t1, -1, 0));
        break;
    }
    case LD_LOSS_MSE: {
        if (!ld_same_shape(y_true, y_pred)) {
            if (ld_tensor_numel(y_true) != ld_tensor_numel(y_pred)) goto shape;
            TRY(yt = ld_reshape(y_true, y_pred->ndim, y_pred->shape));
        } else yt = ld_tensor_retain(y_true);
        TRY(t1 = ld_sub(y_pred, yt));
        TRY(t2 = ld_unary(LD_UN_SQUARE, t1));
        if (t2->ndim >= 1) TRY(per = ld_mean(t2, -1, 0));
        else per = ld_tensor_retain(t2);
        break;
    }
    }
    out = reduce_loss(l, per);
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
int ld_count_correct(ld_tensor *y_true, ld_tensor *y_pred, int sparse, int64_t *correct) {
    char b1[64], b2[64];
    int64_t n = y_pred->ndim ? y_pred->shape[0] : 1;
    *correct = 0;
    ld_tensor *pc = ld_to_device(y_pred, ld_device_cpu()), *tc = pc ? ld_to_device(y_true, ld_device_cpu()) : NULL;
    ld_tensor *p = tc ? ld_contiguous(pc) : NULL;
    int st = LD_OK;
    if (!p) { st = ld_error_status(); goto done; }
    int64_t c = p->ndim >= 2 ? p->shape[p->ndim - 1] : 1;
    if (ld_tensor_numel(p) != n * c) { st = ld_fail(LD_ESHAPE, "accuracy needs predictions [batch, classes]"); goto done; }
    if (sparse && c > 1) {
        if (ld_tensor_numel(tc) != n) goto shape;
    } else if (ld_tensor_numel(tc) != n * c) goto shape;
    const float *pp = ld_tensor_data(p);
    if (!pp) { st = ld_error_status(); goto done; }
    for (int64_t i = 0; i < n; i++) {
        if (c == 1) {
            *correct += (pp[i] > 0.5f) == (ld_tensor_get_flat(tc, i) > 0.5);
        } else {
            int64_t best = 0;
            for (int64_t j = 1; j < c; j++) if (pp[i * c + j] > pp[i * c + best]) best = j;
            int64_t want;
            if (sparse) want = (int64_t)ld_tensor_get_flat(tc, i);
            else {
                want = 0;
                for (int64_t j = 1; j < c; j++) if (ld_tensor_get_flat(tc, i * c + j) > ld_tensor_get_flat(tc, i * c + want)) want = j;
            }
            *correct += best == want;
        }
    }
    goto done;
shape:
    st = ld_fail(LD_ESHAPE, "accuracy: labels %s do not match predictions %s",
                 ld_shape_str(y_true, b1, sizeof b1), ld_shape_str(y_pred, b2, sizeof b2));
done:
    ld_tensor_release(pc); ld_tensor_release(tc); ld_tensor_release(p);
    return st;
}
