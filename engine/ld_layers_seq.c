/* ld_layers_seq.c - sequence layers (classes of ld_nn.h): MultiHeadAttention,
 * LSTM and GRU, with Keras 3's variables, names, shapes and defaults.
 * Inputs are [batch, T, features]; the sequence axis may change between
 * calls (flexible axis 0). */
#include "ld_nn.h"
#include "ld_ops_attn.h"
#include "ld_ops_index.h"
#include "ld_replica.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* release a list of temporaries (NULLs allowed) */
static void rel(int n, ld_tensor **t) { for (int i = 0; i < n; i++) { ld_tensor_release(t[i]); t[i] = NULL; } }

static int need_seq(const ld_layer *l, const char *which, const ld_shape *in) {
    if (in->ndim == 2) return LD_OK;
    char b[LD_SHAPE_STR_MAX + LD_MAX_DIMS * 2] = "";
    size_t k = 0;
    for (int i = 0; i < in->ndim && k < sizeof b; i++) k += snprintf(b + k, sizeof b - k, ", %lld", (long long)in->d[i]);
    return ld_fail(LD_ESHAPE, "%s needs %s of shape [batch, T, features]; got inputs of shape (batch%s)", l->name, which, b);
}

/* a glorot_uniform initialiser with Keras's fans for a kernel shape
   (keras.initializers' compute_fans: [..., in, out] counts the leading axes
   as a receptive field, as for convolution kernels) */
static ld_init glorot(int ndim, const int64_t *s) {
    double rf = 1;
    for (int i = 0; i + 2 < ndim; i++) rf *= (double)s[i];
    return (ld_init){LD_INIT_GLOROT_UNIFORM, (double)s[ndim - 2] * rf, (double)s[ndim - 1] * rf};
}

/* ================================================================ MultiHeadAttention */
enum { MHA_HEADS, MHA_KEY_DIM, MHA_VALUE_DIM, MHA_DROPOUT, MHA_BIAS, MHA_OUT, MHA_CAUSAL };
static int64_t mha_vdim(const ld_layer *l) {
    return ld_p_int(l, MHA_VALUE_DIM) ? ld_p_int(l, MHA_VALUE_DIM) : ld_p_int(l, MHA_KEY_DIM);
}
static int mha_check(ld_layer *l) {
    if (ld_p_int(l, MHA_HEADS) < 1)
        return ld_fail(LD_EARG, "MultiHeadAttention num_heads must be a positive integer, got %lld", (long long)ld_p_int(l, MHA_HEADS));
    if (ld_p_int(l, MHA_KEY_DIM) < 1)
        return ld_fail(LD_EARG, "MultiHeadAttention key_dim must be a positive integer, got %lld", (long long)ld_p_int(l, MHA_KEY_DIM));
    if (ld_p_int(l, MHA_VALUE_DIM) < 0)
        return ld_fail(LD_EARG, "MultiHeadAttention value_dim must be a positive integer (0: key_dim), got %lld",
                       (long long)ld_p_int(l, MHA_VALUE_DIM));
    if (ld_p_int(l, MHA_OUT) < 0)
        return ld_fail(LD_EARG, "MultiHeadAttention output_shape must be a positive integer (0: the query's last axis), got %lld",
                       (long long)ld_p_int(l, MHA_OUT));
    double r = ld_p_float(l, MHA_DROPOUT);
    if (!(r >= 0 && r < 1)) return ld_fail(LD_EARG, "MultiHeadAttention dropout must be in [0, 1), got %g", r);
    if (ld_p_int(l, MHA_HEADS) > (1 << 20) || ld_p_int(l, MHA_KEY_DIM) > (1 << 20) || mha_vdim(l) > (1 << 20))
        return ld_fail(LD_EARG, "MultiHeadAttention num_heads, key_dim and value_dim must be at most %d", 1 << 20);
    return LD_OK;
}
static int mha_build(ld_layer *l, int n_in, const ld_shape *in, ld_shape *out) {
    static const char *const which[3] = {"a query", "a value", "a key"};
    for (int i = 0; i < n_in; i++) if (need_seq(l, which[i], &in[i])) return ld_error_status();
    const ld_shape *q = &in[0], *v = n_in > 1 ? &in[1] : &in[0], *k = n_in > 2 ? &in[2] : v;
    if (k->d[0] != v->d[0])
        return ld_fail(LD_ESHAPE, "%s: the key (batch, %lld, %lld) and the value (batch, %lld, %lld) must have the same length",
                       l->name, (long long)k->d[0], (long long)k->d[1], (long long)v->d[0], (long long)v->d[1]);
    int64_t H = ld_p_int(l, MHA_HEADS), kd = ld_p_int(l, MHA_KEY_DIM), vd = mha_vdim(l);
    int64_t od = ld_p_int(l, MHA_OUT) ? ld_p_int(l, MHA_OUT) : q->d[1];
    int bias = (int)ld_p_int(l, MHA_BIAS);
    struct { const char *name; int64_t d, per; } proj[3] = {
        {"query", q->d[1], kd}, {"key", k->d[1], kd}, {"value", v->d[1], vd}};
    char nm[32];
    for (int i = 0; i < 3; i++) {
        int64_t ks[3] = {proj[i].d, H, proj[i].per};
        snprintf(nm, sizeof nm, "%s/kernel", proj[i].name);
        if (!ld_layer_add_weight(l, nm, 3, ks, glorot(3, ks), 1)) return ld_error_status();
        snprintf(nm, sizeof nm, "%s/bias", proj[i].name);
        if (bias && !ld_layer_add_weight(l, nm, 2, ks + 1, (ld_init){LD_INIT_ZEROS}, 1)) return ld_error_status();
    }
    int64_t os[3] = {H, vd, od};
    if (!ld_layer_add_weight(l, "attention_output/kernel", 3, os, glorot(3, os), 1)) return ld_error_status();
    if (bias && !ld_layer_add_weight(l, "attention_output/bias", 1, &od, (ld_init){LD_INIT_ZEROS}, 1))
        return ld_error_status();
    out->ndim = 2;
    out->d[0] = q->d[0];
    out->d[1] = od;
    return LD_OK;
}
/* x [N, T, d] @ kernel viewed [d, cols] (+ bias viewed [cols]). Under a
   half policy x comes in that dtype and so does the result (ld_linear_half),
   so that attention's products take half operands, as in Keras. */
static ld_tensor *proj_op(ld_tensor *x, ld_tensor *kernel, ld_tensor *bias, int64_t d, int64_t cols) {
    int64_t ks[2] = {d, cols};
    ld_tensor *t[3] = {ld_as_floating(x), ld_reshape_op(ld_var(kernel), 2, ks),
                       bias ? ld_reshape_op(ld_var(bias), 1, &cols) : NULL};
    ld_tensor *y = t[0] && t[1] && (!bias || t[2]) ? ld_linear_half(t[0], t[1], t[2], 0) : NULL;
    rel(3, t);
    return y;
}
/* m [..., T, S] (consumed) times Keras's causal mask: key j counts for
   query i where j <= i (written on the host, moved to m's device) */
static ld_tensor *times_causal(ld_tensor *m, int64_t T, int64_t S) {
    int64_t ts[2] = {T, S};
    ld_tensor *h = ld_tensor_empty(LD_F32, 2, ts, NULL), *d = NULL, *y = NULL;
    if (h) {
        float *c = ld_tensor_data_unsynced(h);
        for (int64_t i = 0; i < T; i++) for (int64_t j = 0; j < S; j++) c[i * S + j] = j <= i;
        if ((d = ld_to_device(h, m->storage->device))) y = ld_mul(m, d);
    }
    ld_tensor_release(h); ld_tensor_release(d); ld_tensor_release(m);
    return y;
}

/* Keras's attention mask from the inputs' masks (_compute_attention_mask):
   query i attends to key j where the query's mask has i, the value's (and a
   key's of its own) j, and, causal, j <= i: float32 [N*H, T, S] (each
   example's repeated for its heads, as ld_split_heads lays them), or NULL
   with *none set when no input has a mask (the fused kernel runs then) */
static ld_tensor *mha_mask(const ld_layer *l, int n_in, ld_tensor *const *x, int H, int causal, int *none) {
    ld_tensor *q = x[0], *v = n_in > 1 ? x[1] : x[0], *k = n_in > 2 ? x[2] : NULL;
    ld_tensor *qm, *vm, *km = NULL;
    *none = 0;
    if (ld_mask_of_steps(l, q, &qm) || ld_mask_of_steps(l, v, &vm) || (k && ld_mask_of_steps(l, k, &km))) return NULL;
    if (!qm && !vm && !km) { *none = 1; return NULL; }
    int64_t N = q->shape[0], T = q->shape[1], S = v->shape[1];
    ld_device *dev = q->storage->device;
    int64_t full[4] = {N, H, T, S}, qs[4] = {N, 1, T, 1}, ss[4] = {N, 1, 1, S};
    ld_tensor *a = ld_tensor_full(LD_F32, 4, full, 1.0, dev), *t = NULL;
    ld_tensor *parts[3] = {qm, vm, km};
    for (int i = 0; i < 3 && a; i++) {
        if (!parts[i]) continue;
        ld_tensor *r = ld_reshape(parts[i], 4, i ? ss : qs), *p = r ? ld_mul(a, r) : NULL;
        ld_tensor_release(r);
        ld_tensor_release(a);
        a = p;
    }
    if (a && causal) a = times_causal(a, T, S);
    int64_t flat[3] = {N * H, T, S};
    t = a ? ld_reshape(a, 3, flat) : NULL;
    ld_tensor_release(a);
    return t;
}
/* attention with Keras's mask m [N*H, T, S] (mha_mask): the scaled scores,
   in float32, where m is 0 a large negative (dot_product_attention's -0.7
   of the dtype's largest value; with dropout, the Softmax layer's -1e9, and
   the weights of a query that attends to nothing zeroed, as Keras's other
   path), the softmax, dropout in training, the values' weighted sum */
static ld_tensor *mha_masked(ld_tensor *q, ld_tensor *k, ld_tensor *v, ld_tensor *m, float rate, int training) {
    ld_tensor *t[8] = {0}, *y = NULL;
    int half = ld_dtype_is_half(q->dtype);
    double neg = rate > 0 ? -1e9 : -0.7 * (q->dtype == LD_F16 ? 65500.0 : 3.38953e38);
    if (!(t[0] = ld_bmm(q, k, 0, 1)) || !(t[1] = ld_as_float(t[0]))) goto out;
    if (!(t[2] = ld_mul_scalar(t[1], (float)(1.0 / sqrt((double)q->shape[2]))))) goto out;
    if (!(t[3] = ld_tensor_full(LD_F32, 0, NULL, neg, q->storage->device)) || !(t[4] = ld_where(m, t[2], t[3]))) goto out;
    if (!(t[5] = ld_softmax(t[4]))) goto out;
    if (rate > 0) {
        ld_tensor *z = ld_mask_select(m, t[5], NULL);
        ld_tensor_release(t[5]);
        if (!(t[5] = z)) goto out;
        if (training) {
            ld_tensor *d = ld_dropout(t[5], rate, NULL);
            ld_tensor_release(t[5]);
            if (!(t[5] = d)) goto out;
        }
    }
    if (half && !(t[6] = ld_cast_op(t[5], q->dtype))) goto out;
    y = ld_bmm(half ? t[6] : t[5], v, 0, 0);
out:
    rel(8, t);
    return y;
}
static ld_tensor *mha_forward(ld_layer *l, int n_in, ld_tensor *const *x, int training) {
    ld_tensor *q = x[0], *v = n_in > 1 ? x[1] : x[0], *k = n_in > 2 ? x[2] : v;
    char a[LD_SHAPE_STR_MAX], b[LD_SHAPE_STR_MAX];
    if (k->shape[1] != v->shape[1] || k->shape[0] != v->shape[0]) {
        ld_fail(LD_ESHAPE, "%s: the key %s and the value %s must have the same batch and length", l->name,
                ld_shape_str(k, a, sizeof a), ld_shape_str(v, b, sizeof b));
        return NULL;
    }
    if (q->shape[0] != v->shape[0]) {
        ld_fail(LD_ESHAPE, "%s: the query %s and the value %s must have the same batch", l->name,
                ld_shape_str(q, a, sizeof a), ld_shape_str(v, b, sizeof b));
        return NULL;
    }
    int H = (int)ld_p_int(l, MHA_HEADS), bias = (int)ld_p_int(l, MHA_BIAS);
    int causal = ld_p_int(l, MHA_CAUSAL) ? LD_CAUSAL : LD_CAUSAL_NONE;
    int64_t kd = ld_p_int(l, MHA_KEY_DIM), vd = mha_vdim(l), od = l->out.d[1];
    int s = bias ? 2 : 1;   /* variables per projection */
    ld_tensor *t[10] = {0}, *y = NULL;
    /* projections [N, T, H*k], then heads [N*H, T, k] */
    if (!(t[0] = proj_op(q, l->vars[0], bias ? l->vars[1] : NULL, q->shape[2], H * kd))) goto out;
    if (!(t[1] = proj_op(k, l->vars[s], bias ? l->vars[s + 1] : NULL, k->shape[2], H * kd))) goto out;
    if (!(t[2] = proj_op(v, l->vars[2 * s], bias ? l->vars[2 * s + 1] : NULL, v->shape[2], H * vd))) goto out;
    for (int i = 0; i < 3; i++) if (!(t[3 + i] = ld_split_heads(t[i], H))) goto out;
    float rate = (float)ld_p_float(l, MHA_DROPOUT);
    int none;
    ld_tensor *am = mha_mask(l, n_in, x, H, causal == LD_CAUSAL, &none);
    if (!am && !none) goto out;
    if (am) {
        t[8] = mha_masked(t[3], t[4], t[5], am, rate, training);
        ld_tensor_release(am);
        if (!t[8]) goto out;
    } else if (training && rate > 0) {
        /* Keras drops attention weights, then multiplies by the values */
        if (!(t[6] = ld_attention_weights(t[3], t[4], causal, 0))) goto out;
        if (!(t[7] = ld_dropout(t[6], rate, NULL))) goto out;
        if (!(t[8] = ld_bmm(t[7], t[5], 0, 0))) goto out;
    } else if (!(t[8] = ld_attention(t[3], t[4], t[5], causal, 0, NULL))) goto out;
    if (!(t[9] = ld_merge_heads(t[8], H))) goto out;           /* [N, T, H*v] */
    y = proj_op(t[9], l->vars[3 * s], bias ? l->vars[3 * s + 1] : NULL, H * vd, od);
out:
    rel(10, t);
    return y;
}
const ld_layer_class ld_layer_multi_head_attention = {
    "MultiHeadAttention", "multi_head_attention", NULL, {"num_heads", "key_dim"},
    {LD_PINT("num_heads", NULL), LD_PINT("key_dim", NULL), LD_PINT("value_dim", "0"), LD_PFLOAT("dropout", "0.0"),
     LD_PBOOL("use_bias", "true"), LD_PINT("output_shape", "0"), LD_PBOOL("use_causal_mask", "false"), LD_PEND},
    1, 3, 1u /* the sequence length */, mha_check, mha_build, mha_forward,
    "nn.MultiHeadAttention(num_heads, key_dim, {value_dim=key_dim, dropout=0, use_bias=true,\n"
    "                      output_shape=query's last axis, use_causal_mask=false})\n\n"
    "Keras 3's multi-head attention. Call it on x (self-attention), {query, value} or\n"
    "{query, value, key}, each [batch, T, features] (key defaults to value) -> [batch, T, output_shape].\n"
    "value_dim 0 means key_dim; output_shape 0 means the query's last axis. use_causal_mask is an\n"
    "option of the layer here (Keras takes it per call): query i attends to keys j <= i.\n"
    "dropout applies to the attention weights in training. Variables as Keras's: query/kernel\n"
    "[dq, heads, key_dim], query/bias [heads, key_dim], key/..., value/..., attention_output/kernel\n"
    "[heads, value_dim, out], attention_output/bias [out]. kernel_/bias_ initializer, regularizer,\n"
    "constraint and activity_regularizer as Keras's (for every kernel and bias).",
    LD_ROLE_BIT(LD_ROLE_KERNEL) | LD_ROLE_BIT(LD_ROLE_BIAS), .compute_mask = ld_mask_pass};

/* ================================================================ Attention, AdditiveAttention */
/* Keras's dot-product (Luong) and additive (Bahdanau) attention layers,
   called on {query, value} or {query, value, key} ([batch, Tq, dim],
   [batch, Tv, dim]; key defaults to value): scores [batch, Tq, Tv] (below),
   the value's masked steps (and, with use_causal_mask, the later keys)
   lowered by 1e9 (65504 in float16), the softmax, dropout in training, the
   weighted sum of the values; the query's masked steps give 0, and the
   output carries the query's mask. Scores: Attention's "dot" q k^T (times
   the scalar `scale` with use_scale), "concat" concat_score_weight *
   sum(tanh(scale * (q + k))); AdditiveAttention's sum(scale * tanh(q + k)),
   scale a vector [dim] (use_scale, the default). */
enum { ATT_SCALE, ATT_MODE, ATT_DROPOUT, ATT_CAUSAL };
enum { ADD_SCALE, ADD_DROPOUT, ADD_CAUSAL };
static int additive(const ld_layer *l) { return l->cls == &ld_layer_additive_attention; }
static int att_check(ld_layer *l) {
    double r = ld_p_float(l, additive(l) ? ADD_DROPOUT : ATT_DROPOUT);
    if (!(r >= 0 && r < 1)) return ld_fail(LD_EARG, "%s dropout must be in [0, 1), got %g", l->cls->class_name, r);
    return LD_OK;
}
static int att_build(ld_layer *l, int n_in, const ld_shape *in, ld_shape *out) {
    static const char *const which[3] = {"a query", "a value", "a key"};
    for (int i = 0; i < n_in; i++) if (need_seq(l, which[i], &in[i])) return ld_error_status();
    const ld_shape *q = &in[0], *v = &in[1], *k = n_in > 2 ? &in[2] : v;
    if (k->d[0] != v->d[0])
        return ld_fail(LD_ESHAPE, "%s: the key (batch, %lld, %lld) and the value (batch, %lld, %lld) must have the same length",
                       l->name, (long long)k->d[0], (long long)k->d[1], (long long)v->d[0], (long long)v->d[1]);
    if (q->d[1] != k->d[1])
        return ld_fail(LD_ESHAPE, "%s: the query's last axis (%lld) and the key's (%lld) must be equal", l->name,
                       (long long)q->d[1], (long long)k->d[1]);
    if (additive(l)) {
        int64_t d = q->d[1];
        if (ld_p_int(l, ADD_SCALE) && !ld_layer_add_weight(l, "scale", 1, &d, LD_INIT_GLOROT(d, d), 1)) return ld_error_status();
    } else {
        if (ld_p_int(l, ATT_SCALE) && !ld_layer_add_weight(l, "scale", 0, NULL, LD_INIT_1, 1)) return ld_error_status();
        if (!strcmp(ld_p_str(l, ATT_MODE), "concat") && !ld_layer_add_weight(l, "concat_score_weight", 0, NULL, LD_INIT_1, 1))
            return ld_error_status();
    }
    *out = (ld_shape){2, {q->d[0], v->d[1]}};
    return LD_OK;
}
/* [N, Tq, d] and [N, Tk, d] as [N, Tq, 1, d] + [N, 1, Tk, d] */
static ld_tensor *pair_sum(ld_tensor *q, ld_tensor *k) {
    int64_t qs[4] = {q->shape[0], q->shape[1], 1, q->shape[2]}, ks[4] = {k->shape[0], 1, k->shape[1], k->shape[2]};
    ld_tensor *a = ld_reshape_op(q, 4, qs), *b = a ? ld_reshape_op(k, 4, ks) : NULL, *y = b ? ld_add(a, b) : NULL;
    ld_tensor_release(a); ld_tensor_release(b);
    return y;
}
static ld_tensor *att_scores(ld_layer *l, ld_tensor *q, ld_tensor *k) {
    ld_tensor *t[5] = {0}, *y = NULL;
    if (additive(l)) {   /* sum(scale * tanh(q + k)) */
        if (!(t[0] = pair_sum(q, k)) || !(t[1] = ld_tanh(t[0]))) goto out;
        if (ld_p_int(l, ADD_SCALE) && !(t[2] = ld_mul(t[1], ld_var(l->vars[0])))) goto out;
        y = ld_sum(t[2] ? t[2] : t[1], -1, 0);
    } else if (!strcmp(ld_p_str(l, ATT_MODE), "dot")) {   /* q k^T (* scale) */
        if (!(t[0] = ld_bmm(q, k, 0, 1))) goto out;
        y = ld_p_int(l, ATT_SCALE) ? ld_mul(t[0], ld_var(l->vars[0])) : ld_tensor_retain(t[0]);
    } else {             /* concat_score_weight * sum(tanh(scale * (q + k))) */
        int scaled = (int)ld_p_int(l, ATT_SCALE);
        if (!(t[0] = pair_sum(q, k))) goto out;
        if (scaled && !(t[1] = ld_mul(t[0], ld_var(l->vars[0])))) goto out;
        if (!(t[2] = ld_tanh(scaled ? t[1] : t[0])) || !(t[3] = ld_sum(t[2], -1, 0))) goto out;
        y = ld_mul(t[3], ld_var(l->vars[scaled ? 1 : 0]));
    }
out:
    rel(5, t);
    return y;
}
static ld_tensor *att_forward(ld_layer *l, int n_in, ld_tensor *const *x, int training) {
    ld_tensor *q = x[0], *v = x[1], *k = n_in > 2 ? x[2] : v, *qm, *vm;
    char a[LD_SHAPE_STR_MAX], b[LD_SHAPE_STR_MAX];
    if (k->shape[1] != v->shape[1] || k->shape[0] != v->shape[0] || q->shape[0] != v->shape[0]) {
        ld_fail(LD_ESHAPE, "%s: the query %s, the value %s and the key must have the same batch, the key and value the same "
                "length", l->name, ld_shape_str(q, a, sizeof a), ld_shape_str(v, b, sizeof b));
        return NULL;
    }
    if (ld_mask_of_steps(l, q, &qm) || ld_mask_of_steps(l, v, &vm)) return NULL;
    int64_t N = q->shape[0], Tq = q->shape[1], Tv = v->shape[1];
    int causal = (int)ld_p_int(l, additive(l) ? ADD_CAUSAL : ATT_CAUSAL);
    float rate = (float)ld_p_float(l, additive(l) ? ADD_DROPOUT : ATT_DROPOUT);
    ld_tensor *t[10] = {0}, *y = NULL;
    ld_device *dev = q->storage->device;
    if (!(t[0] = att_scores(l, q, k))) goto out;
    if (vm || causal) {   /* where the scores mask is 0: the scores less 1e9 */
        int64_t ms[3] = {vm ? N : 1, Tq, Tv}, vs[3] = {N, 1, Tv};
        if (!(t[1] = ld_tensor_full(LD_F32, 3, ms, 1.0, dev))) goto out;
        if (vm) {
            ld_tensor *r = ld_reshape(vm, 3, vs), *p = r ? ld_mul(t[1], r) : NULL;
            ld_tensor_release(r); ld_tensor_release(t[1]);
            if (!(t[1] = p)) goto out;
        }
        if (causal && !(t[1] = times_causal(t[1], Tq, Tv))) goto out;
        if (!(t[2] = ld_add_scalar(t[0], t[0]->dtype == LD_F16 ? -65504.0f : -1e9f)) || !(t[3] = ld_where(t[1], t[0], t[2])))
            goto out;
    }
    if (!(t[4] = ld_softmax(t[3] ? t[3] : t[0]))) goto out;
    if (training && rate > 0 && !(t[5] = ld_dropout(t[4], rate, NULL))) goto out;
    if (t[5] ? t[5]->dtype != v->dtype : t[4]->dtype != v->dtype) {   /* a float32 scale under a half policy */
        ld_tensor *c = ld_cast_op(t[5] ? t[5] : t[4], v->dtype);
        ld_tensor_release(t[5]);
        if (!(t[5] = c)) goto out;
    }
    if (!(t[6] = ld_bmm(t[5] ? t[5] : t[4], v, 0, 0))) goto out;
    if (qm) {   /* the query's masked steps: 0 */
        int64_t qs[3] = {N, Tq, 1};
        if (!(t[7] = ld_reshape(qm, 3, qs))) goto out;
        y = ld_mask_select(t[7], t[6], NULL);
    } else y = ld_tensor_retain(t[6]);
out:
    rel(10, t);
    return y;
}
const ld_layer_class ld_layer_attention = {
    "Attention", "attention", NULL, {NULL},
    {LD_PBOOL("use_scale", "false"), LD_PSTR("score_mode", "dot", "dot|concat"), LD_PFLOAT("dropout", "0.0"),
     LD_PBOOL("use_causal_mask", "false"), LD_PEND},
    2, 3, 1u /* the steps */, att_check, att_build, att_forward,
    "nn.Attention{use_scale=false, score_mode=\"dot\", dropout=0, use_causal_mask=false}\n\n"
    "Keras's dot-product (Luong) attention: layer({query, value}) or layer({query, value, key}), each\n"
    "[batch, T, dim] -> [batch, Tq, value dim]: softmax(scores) @ value, scores q k^T (times a scalar\n"
    "`scale` with use_scale; score_mode \"concat\": concat_score_weight * sum(tanh(scale * (q + k)))).\n"
    "The value's mask (Embedding's mask_zero, Masking) leaves its steps out, the query's zeroes its\n"
    "steps and goes on with the output; use_causal_mask (a layer option here; Keras takes it per\n"
    "call): query i sees keys j <= i. dropout applies to the attention weights in training.",
    0, .compute_mask = ld_mask_pass};
const ld_layer_class ld_layer_additive_attention = {
    "AdditiveAttention", "additive_attention", NULL, {NULL},
    {LD_PBOOL("use_scale", "true"), LD_PFLOAT("dropout", "0.0"), LD_PBOOL("use_causal_mask", "false"), LD_PEND},
    2, 3, 1u /* the steps */, att_check, att_build, att_forward,
    "nn.AdditiveAttention{use_scale=true, dropout=0, use_causal_mask=false}\n\n"
    "Keras's additive (Bahdanau) attention: layer({query, value}) or layer({query, value, key}), each\n"
    "[batch, T, dim] -> [batch, Tq, value dim]: softmax(scores) @ value, scores sum(scale * tanh(q + k))\n"
    "over dim (scale [dim] glorot_uniform; 1 without use_scale). Masks, use_causal_mask and dropout as\n"
    "nn.Attention's.",
    0, .compute_mask = ld_mask_pass};

/* ================================================================ recurrent layers */
/* LSTM and GRU share their parameters' first six and the loop's shape */
enum { RNN_UNITS, RNN_ACT, RNN_RACT, RNN_BIAS, RNN_SEQ, RNN_BACK, RNN_EXTRA /* unit_forget_bias / reset_after */,
       RNN_ZERO /* zero_output_for_mask */, RNN_DROP, RNN_RDROP, RNN_STATE /* return_state */ };
static int rnn_check(ld_layer *l) {
    if (ld_p_int(l, RNN_UNITS) < 1 || ld_p_int(l, RNN_UNITS) > (1 << 24))
        return ld_fail(LD_EARG, "%s units must be a positive integer, got %lld", l->cls->class_name,
                       (long long)ld_p_int(l, RNN_UNITS));
    static const char *const rates[2] = {"dropout", "recurrent_dropout"};
    for (int i = 0; i < 2; i++) {
        int k = ld_layer_param_index(l->cls, rates[i]);
        double r = k < 0 ? 0 : ld_p_float(l, k);
        if (!(r >= 0 && r < 1)) return ld_fail(LD_EARG, "%s %s must be in [0, 1), got %g", l->cls->class_name, rates[i], r);
    }
    return LD_OK;
}
/* ---- Keras's initial_state= and return_state: a recurrent layer's states
   (LSTM's h and c, the others' h), each [batch, units] */
static int rnn_states(const ld_layer *l) { return l->cls == &ld_layer_lstm ? 2 : 1; }
static int rnn_n_outputs(const ld_layer *l) {
    int i = ld_layer_param_index(l->cls, "return_state");
    return 1 + (ld_p_int(l, i) ? rnn_states(l) : 0);
}
/* as many initial states as the layer has (inputs after the first), or none */
static int states_count(const ld_layer *l, int n_in) {
    if (n_in == 1 || n_in - 1 == rnn_states(l)) return LD_OK;
    return ld_fail(LD_EARG, "%s's initial_state is %s, got %d tensor%s", l->name, rnn_states(l) == 2 ? "{h, c}" : "{h}",
                   n_in - 1, n_in == 2 ? "" : "s");
}
int ld_layer_check_states(const ld_layer *l, int n_in, const ld_shape *in) {
    if (states_count(l, n_in)) return ld_error_status();
    int64_t u = ld_p_int(l, ld_layer_param_index(l->cls, "units"));
    for (int i = 1; i < n_in; i++)
        if (in[i].ndim != 1 || in[i].d[0] != u) {
            char b[160];
            return ld_fail(LD_ESHAPE, "%s: initial state %d must be [batch, %lld] (its units); got %s", l->name, i,
                           (long long)u, ld_layer_shape_str(&in[i], b, sizeof b));
        }
    return LD_OK;
}
/* the output's shape ([units], or [steps, units] with return_sequences),
   the states' shapes, and the initial states' (inputs after the first) */
static int rnn_shapes(ld_layer *l, int n_in, const ld_shape *in, ld_shape *out) {
    int64_t u = ld_p_int(l, ld_layer_param_index(l->cls, "units"));
    if (ld_p_int(l, ld_layer_param_index(l->cls, "return_sequences"))) *out = (ld_shape){2, {in->d[0], u}};
    else *out = (ld_shape){1, {u}};
    for (int i = 0; i < rnn_states(l); i++) l->outs[i] = (ld_shape){1, {u}};
    return ld_layer_check_states(l, n_in, in);
}
/* the initial states given to a call (checked as at build: any call may
   give them), each the state to start from: st[i] retained, NULL without */
static int rnn_initial(const ld_layer *l, int n_in, ld_tensor *const *x, ld_tensor **st) {
    int64_t u = ld_p_int(l, ld_layer_param_index(l->cls, "units"));
    for (int i = 0; i < rnn_states(l); i++) st[i] = NULL;
    if (states_count(l, n_in)) return ld_error_status();
    for (int i = 1; i < n_in; i++) {
        if (x[i]->ndim != 2 || x[i]->shape[0] != x[0]->shape[0] || x[i]->shape[1] != u || !ld_dtype_is_float(x[i]->dtype)) {
            char b1[LD_SHAPE_STR_MAX], b2[LD_SHAPE_STR_MAX];
            return ld_fail(LD_ESHAPE, "%s: initial state %d must be [%lld, %lld] (the batch, its units) of floats; got %s %s "
                           "(inputs %s)", l->name, i, (long long)x[0]->shape[0], (long long)u, ld_dtype_name(x[i]->dtype),
                           ld_shape_str(x[i], b1, sizeof b1), ld_shape_str(x[0], b2, sizeof b2));
        }
        st[i - 1] = ld_as_float(x[i]);
        if (!st[i - 1]) return ld_error_status();
    }
    return LD_OK;
}
/* write a host vector into a new variable in every copy (a strategy may
   mirror it; the layer may be built inside a replica's step) */
static int write_initial(ld_tensor *var, int64_t n, const float *vals) {
    ld_tensor *h = ld_tensor_from_data(LD_F32, 1, &n, vals, NULL);
    if (!h) return ld_error_status();
    const ld_replica_ctx *cur = ld_replica_get();
    ld_replica_ctx saved;
    if (cur) { saved = *cur; ld_replica_set(NULL); }
    int st = ld_variable_write(var, h);
    if (cur) ld_replica_set(&saved);
    ld_tensor_release(h);
    return st;
}
static ld_tensor *act(ld_activation a, ld_tensor *x) { return x ? ld_activate(a, x) : NULL; }
static ld_tensor *gate(ld_activation a, ld_tensor *z, int64_t start, int64_t u) {
    ld_tensor *s = ld_slice_op(z, 1, start, u);
    ld_tensor *r = act(a, s);
    ld_tensor_release(s);
    return r;
}
/* row t of xw [N, T, c] as [N, c] */
static ld_tensor *step_of(ld_tensor *xw, int64_t t) {
    ld_tensor *s = ld_slice_op(xw, 1, t, 1);
    int64_t sh[2] = {xw->shape[0], xw->shape[2]};
    ld_tensor *r = s ? ld_reshape_op(s, 2, sh) : NULL;
    ld_tensor_release(s);
    return r;
}
static int need_steps(const ld_layer *l, const ld_tensor *x) {
    if (x->ndim == 3 && x->shape[1] >= 1) return LD_OK;
    char b[LD_SHAPE_STR_MAX];
    return ld_fail(LD_ESHAPE, "%s needs at least one time step; got inputs of shape %s", l->name, ld_shape_str(x, b, sizeof b));
}
/* the outputs: the last step's, or every step's stacked on axis 1 (in the
   order processed, as Keras's go_backwards) */
static ld_tensor *rnn_result(ld_layer *l, int64_t T, ld_tensor **hs, ld_tensor *last) {
    if (!ld_p_int(l, RNN_SEQ)) return ld_tensor_retain(last);
    return ld_concat_op((int)T, hs, 1);
}
static ld_tensor *h3(ld_tensor *h) {   /* [N, u] -> [N, 1, u] */
    int64_t s[3] = {h->shape[0], 1, h->shape[1]};
    return ld_reshape_op(h, 3, s);
}
/* Keras's masked steps (backend rnn): where step t's mask mt [N, 1] is 0
   the state stays the previous one (zeros before the first step), so
   *state (consumed) becomes where(mt, *state, prev); no mask, no change */
static int mask_state(ld_tensor *mt, ld_tensor **state, ld_tensor *prev) {
    if (!mt || !*state) return *state ? LD_OK : ld_error_status();
    ld_tensor *k = ld_mask_select(mt, *state, prev);
    ld_tensor_release(*state);
    *state = k;
    return k ? LD_OK : ld_error_status();
}
/* the step's output (a new reference): its state h, or with
   zero_output_for_mask (Bidirectional's with return_sequences) zeros where
   the step is masked */
static ld_tensor *step_output(ld_tensor *mt, int zero_out, ld_tensor *h) {
    return mt && zero_out ? ld_mask_select(mt, h, NULL) : ld_tensor_retain(h);
}
/* column t of a recurrent layer's mask m (ld_mask_of_steps), NULL without one */
static ld_tensor *mask_at(ld_tensor *m, int64_t t) { return m ? ld_mask_step(m, t) : NULL; }

/* ---- Keras's dropout and recurrent_dropout (DropoutRNNCell): in training,
   masks drawn once per call, each [batch, size] (kept 1 / (1 - rate), else
   0), the same at every step: `dropout` on the inputs, `recurrent_dropout`
   on the previous state. Keras's implementation 2 (no recurrent dropout)
   draws one input mask for all the gates; with recurrent dropout it takes
   implementation 1, a mask per gate on each side. Drawn by the noise op, so
   every strategy draws what one device does. */
#define RNN_MAX_GATES 4
typedef struct {
    int gates;                          /* LSTM 4, GRU 3, SimpleRNN 1 */
    ld_tensor *in[RNN_MAX_GATES];       /* input masks [N, features] (in[0] alone: one for all gates) */
    ld_tensor *rec[RNN_MAX_GATES];      /* recurrent masks [N, units], NULL: none */
    int n_in;                           /* input masks drawn: 0, 1 or gates */
} rnn_drop;
static void drop_free(rnn_drop *d) { rel(RNN_MAX_GATES, d->in); rel(RNN_MAX_GATES, d->rec); }
static ld_tensor *drop_mask(int64_t n, int64_t size, float rate, ld_device *dev) {
    int64_t s[2] = {n, size};
    ld_tensor *ones = ld_tensor_full(LD_F32, 2, s, 1.0, dev);
    ld_tensor *m = ones ? ld_noise_op(LD_NOISE_DROPOUT, ones, rate, 2, s, NULL) : NULL;
    ld_tensor_release(ones);
    return m;
}
static int drop_init(ld_layer *l, rnn_drop *d, int gates, const ld_tensor *x, int64_t units, int training) {
    memset(d, 0, sizeof *d);
    d->gates = gates;
    if (!training) return LD_OK;
    int di = ld_layer_param_index(l->cls, "dropout"), ri = ld_layer_param_index(l->cls, "recurrent_dropout");
    float rate = (float)ld_p_float(l, di), rrate = (float)ld_p_float(l, ri);
    ld_device *dev = x->storage->device;
    if (rate > 0) {
        d->n_in = rrate > 0 ? gates : 1;
        for (int g = 0; g < d->n_in; g++)
            if (!(d->in[g] = drop_mask(x->shape[0], x->shape[2], rate, dev))) return ld_error_status();
    }
    if (rrate > 0)
        for (int g = 0; g < gates; g++)
            if (!(d->rec[g] = drop_mask(x->shape[0], units, rrate, dev))) return ld_error_status();
    return LD_OK;
}
/* x [N, T, F] times input mask m [N, F], at every step */
static ld_tensor *drop_steps(ld_tensor *x, ld_tensor *m) {
    int64_t s[3] = {m->shape[0], 1, m->shape[1]};
    ld_tensor *m3 = ld_reshape(m, 3, s), *xf = m3 ? ld_as_floating(x) : NULL;
    ld_tensor *y = xf ? ld_mul(xf, m3) : NULL;
    ld_tensor_release(m3);
    ld_tensor_release(xf);
    return y;
}
/* x [N, T, F] @ kernel [F, gates*u] + bias for every step, each gate's
   columns from the inputs under its mask (one mask: all of them) */
static ld_tensor *drop_inputs(const rnn_drop *d, ld_tensor *x, ld_tensor *kernel, ld_tensor *bias) {
    if (d->n_in == 0) {
        ld_tensor *xf = ld_as_float(x);
        ld_tensor *y = xf ? ld_linear(xf, kernel, bias, 0) : NULL;
        ld_tensor_release(xf);
        return y;
    }
    if (d->n_in == 1) {
        ld_tensor *xd = drop_steps(x, d->in[0]);
        ld_tensor *y = xd ? ld_linear(xd, kernel, bias, 0) : NULL;
        ld_tensor_release(xd);
        return y;
    }
    int64_t u = kernel->shape[1] / d->gates;
    ld_tensor *parts[RNN_MAX_GATES] = {0}, *y = NULL;
    int g = 0;
    for (; g < d->gates; g++) {
        ld_tensor *xd = drop_steps(x, d->in[g]), *k = xd ? ld_slice_op(kernel, 1, g * u, u) : NULL;
        ld_tensor *b = k && bias ? ld_slice_op(bias, 0, g * u, u) : NULL;
        parts[g] = k && (b || !bias) ? ld_linear(xd, k, b, 0) : NULL;
        ld_tensor_release(xd); ld_tensor_release(k); ld_tensor_release(b);
        if (!parts[g]) break;
    }
    if (g == d->gates) y = ld_concat_op(d->gates, parts, 2);
    rel(RNN_MAX_GATES, parts);
    return y;
}
/* the recurrent product h [N, u] @ rk [u, k*u] for gates first..first+k-1,
   each gate's columns from h under its recurrent mask */
static ld_tensor *drop_recurrent(const rnn_drop *d, ld_tensor *h, ld_tensor *rk, int first, int k) {
    if (!d->rec[first]) return ld_matmul(h, rk);
    int64_t u = rk->shape[1] / k;
    ld_tensor *parts[RNN_MAX_GATES] = {0}, *y = NULL;
    int g = 0;
    for (; g < k; g++) {
        ld_tensor *hd = ld_mul(h, d->rec[first + g]), *r = hd ? ld_slice_op(rk, 1, g * u, u) : NULL;
        parts[g] = r ? ld_matmul(hd, r) : NULL;
        ld_tensor_release(hd); ld_tensor_release(r);
        if (!parts[g]) break;
    }
    if (g == k) y = k == 1 ? ld_tensor_retain(parts[0]) : ld_concat_op(k, parts, 1);
    rel(RNN_MAX_GATES, parts);
    return y;
}

/* the recurrent layers' shared help: dropout and masks */
#define RNN_DOC "\ndropout / recurrent_dropout (Keras's): in training, a fraction of the inputs / of the\n" \
    "previous state dropped, one mask per sequence, the same at every step (one per gate with\n" \
    "recurrent_dropout). A mask on the inputs (Embedding's mask_zero, Masking) skips the masked\n" \
    "steps: the state carries over, the output repeats (zeros with zero_output_for_mask).\n" \
    "layer(x, {initial_state = {h, c}}) starts from given states ({h} but for LSTM), each\n" \
    "[batch, units]; return_state=true gives them at the end too: local y, h, c = lstm(x)."

/* ---------------------------------------------------------------- SimpleRNN */
/* Keras's: h = activation(x @ kernel + bias + h @ recurrent_kernel), h0 = 0 */
enum { SRNN_UNITS, SRNN_ACT, SRNN_BIAS, SRNN_SEQ, SRNN_BACK, SRNN_ZERO, SRNN_DROP, SRNN_RDROP, SRNN_STATE };
static int srnn_build(ld_layer *l, int n_in, const ld_shape *in, ld_shape *out) {
    if (need_seq(l, "inputs", in)) return ld_error_status();
    int64_t u = ld_p_int(l, SRNN_UNITS), ks[2] = {in->d[1], u}, rs[2] = {u, u};
    if (!ld_layer_add_weight(l, "kernel", 2, ks, glorot(2, ks), 1)) return ld_error_status();
    if (!ld_layer_add_weight(l, "recurrent_kernel", 2, rs, (ld_init){LD_INIT_ORTHOGONAL, 0, 0}, 1)) return ld_error_status();
    if (ld_p_int(l, SRNN_BIAS) && !ld_layer_add_weight(l, "bias", 1, &u, (ld_init){LD_INIT_ZEROS}, 1))
        return ld_error_status();
    return rnn_shapes(l, n_in, in, out);
}
static ld_tensor *srnn_forward(ld_layer *l, int n_in, ld_tensor *const *x, int training) {
    if (need_steps(l, x[0])) return NULL;
    int64_t T = x[0]->shape[1];
    int seq = (int)ld_p_int(l, SRNN_SEQ), back = (int)ld_p_int(l, SRNN_BACK), zero_out = (int)ld_p_int(l, SRNN_ZERO);
    ld_activation a = ld_p_activation(l, SRNN_ACT);
    ld_tensor *m;
    if (ld_mask_of_steps(l, x[0], &m)) return NULL;
    rnn_drop dr;
    if (drop_init(l, &dr, 1, x[0], ld_p_int(l, SRNN_UNITS), training)) { drop_free(&dr); return NULL; }
    ld_tensor *xw = drop_inputs(&dr, x[0], ld_var(l->vars[0]), ld_p_int(l, SRNN_BIAS) ? ld_var(l->vars[2]) : NULL);
    ld_tensor *rk = ld_var(l->vars[1]), *h = NULL, *y = NULL, *o = NULL;
    ld_tensor **hs = seq ? calloc((size_t)T, sizeof *hs) : NULL;
    if (seq && !hs) { ld_fail(LD_ENOMEM, "out of memory"); goto out; }
    if (!xw) goto out;
    if (rnn_initial(l, n_in, x, &h)) goto out;   /* h0: initial_state's, else 0 */
    for (int64_t s = 0; s < T; s++) {
        int64_t t = back ? T - 1 - s : s;
        ld_tensor *w[4] = {0};
        w[0] = step_of(xw, t);
        w[3] = mask_at(m, t);
        if (w[0] && h) {   /* h0 = 0: the first step has no recurrent term */
            w[1] = drop_recurrent(&dr, h, rk, 0, 1);
            w[2] = w[1] ? ld_add(w[0], w[1]) : NULL;
        } else if (w[0]) w[2] = ld_tensor_retain(w[0]);
        ld_tensor *nh = act(a, w[2]);
        int st = mask_state(w[3], &nh, h);
        ld_tensor_release(h);
        h = nh;
        ld_tensor_release(o);
        o = st ? NULL : step_output(w[3], zero_out, h);
        rel(4, w);
        if (!o) goto out;
        if (seq && !(hs[s] = h3(o))) goto out;
    }
    y = seq ? ld_concat_op((int)T, hs, 1) : ld_tensor_retain(o);
    ld_layer_emit(1, h);   /* return_state's */
out:
    if (hs) { rel((int)T, hs); free(hs); }
    ld_tensor_release(xw); ld_tensor_release(h); ld_tensor_release(o);
    drop_free(&dr);
    return y;
}
const ld_layer_class ld_layer_simple_rnn = {
    "SimpleRNN", "simple_rnn", NULL, {"units"},
    {LD_PINT("units", NULL), LD_PSTR("activation", "tanh", LD_ACTIVATION_CHOICES), LD_PBOOL("use_bias", "true"),
     LD_PBOOL("return_sequences", "false"), LD_PBOOL("go_backwards", "false"), LD_PBOOL("zero_output_for_mask", "false"),
     LD_PFLOAT("dropout", "0.0"), LD_PFLOAT("recurrent_dropout", "0.0"), LD_PBOOL("return_state", "false"), LD_PEND},
    1, 2 /* initial_state's h */, 1u /* the number of steps */, rnn_check, srnn_build, srnn_forward,
    "nn.SimpleRNN(units, {activation=\"tanh\", use_bias=true, return_sequences=false, go_backwards=false,\n"
    "             dropout=0, recurrent_dropout=0, zero_output_for_mask=false})\n\n"
    "Keras 3's SimpleRNN over [batch, T, features] -> [batch, units] (the last state), or\n"
    "[batch, T, units] with return_sequences: h = activation(x @ kernel + bias + h @ recurrent_kernel),\n"
    "h0 = 0. Variables: kernel [features, units] glorot_uniform, recurrent_kernel [units, units]\n"
    "orthogonal, bias [units] zeros. kernel_, recurrent_ and bias_ initializer, regularizer,\n"
    "constraint and activity_regularizer as Keras's." RNN_DOC,
    LD_ROLE_BIT(LD_ROLE_KERNEL) | LD_ROLE_BIT(LD_ROLE_BIAS) | LD_ROLE_BIT(LD_ROLE_RECURRENT), .compute_mask = ld_mask_sequences,
    .initial_states = 1, .n_outputs = rnn_n_outputs};

/* ---------------------------------------------------------------- Bidirectional */
/* Keras's Bidirectional(layer, merge_mode): the recurrent layer (its class
   and options) once forward and once over the reversed steps, the backward
   one's sequence put back in order, the two merged. The two layers are the
   wrapper's inner ones, named <name>/forward_<kind> and <name>/backward_<kind>
   (so their weights are bidirectional/forward_lstm/kernel, ...); their
   weights are the wrapper's, in that order. */
enum { BI_LAYER, BI_MERGE, BI_UNITS, BI_ACT, BI_RACT, BI_BIAS, BI_SEQ, BI_FORGET, BI_RESET, BI_DROP, BI_RDROP, BI_STATE };
static int bi_check(ld_layer *l) {
    if (ld_p_int(l, BI_UNITS) < 1 || ld_p_int(l, BI_UNITS) > (1 << 24))
        return ld_fail(LD_EARG, "Bidirectional units must be a positive integer, got %lld", (long long)ld_p_int(l, BI_UNITS));
    return LD_OK;
}
static int bi_build(ld_layer *l, int n_in, const ld_shape *in, ld_shape *out) {
    const ld_layer_class *c = ld_layer_class_find(ld_p_str(l, BI_LAYER));
    if (!c) return ld_fail(LD_EARG, "%s: unknown layer class '%s'", l->name, ld_p_str(l, BI_LAYER));
    for (int k = 0; k < 2; k++) {
        ld_layer_release(l->inner[k]);   /* a build that failed before */
        ld_layer *s = l->inner[k] = ld_layer_new(c);
        if (!s) return ld_error_status();
        char name[sizeof l->name + 32];
        snprintf(name, sizeof name, "%s/%s_%s", l->name, k ? "backward" : "forward", c->kind);
        if (strlen(name) >= sizeof s->name) return ld_fail(LD_EARG, "%s: its name is too long for its inner layers' names", l->name);
        memcpy(s->name, name, strlen(name) + 1);
        /* the wrapper's options, by name, into the layer's; the backward one reads backwards */
        for (int i = 0; c->params[i].name; i++) {
            int j = ld_layer_param_index(l->cls, c->params[i].name);
            if (j > BI_MERGE) s->p[i] = l->p[j];
            else if (!strcmp(c->params[i].name, "go_backwards")) s->p[i].i[0] = k;
            /* Keras's Bidirectional: masked steps output zeros when it returns sequences */
            else if (!strcmp(c->params[i].name, "zero_output_for_mask")) s->p[i].i[0] = ld_p_int(l, BI_SEQ);
        }
        s->policy = l->policy;
        s->frozen = l->frozen;
        if (ld_layer_check(s) || ld_layer_build_n(s, n_in, in)) return ld_error_status();
        for (int i = 0; i < s->n_vars; i++) {
            if (l->n_vars == LD_LAYER_MAX_VARS) return ld_fail(LD_EARG, "%s: too many weights", l->name);
            l->var_trainable[l->n_vars] = s->var_trainable[i];
            l->vars[l->n_vars++] = ld_tensor_retain(s->vars[i]);
        }
    }
    *out = l->inner[0]->out;
    if (!strcmp(ld_p_str(l, BI_MERGE), "concat")) out->d[out->ndim - 1] *= 2;
    /* return_state: the forward layer's states, then the backward one's (Keras's order) */
    int ns = l->inner[0]->n_out - 1;
    for (int k = 0; k < 2; k++) for (int i = 0; i < ns; i++) l->outs[k * ns + i] = l->inner[k]->outs[i];
    return LD_OK;
}
static int bi_n_outputs(const ld_layer *l) {
    if (!ld_p_int(l, BI_STATE)) return 1;
    return 1 + 2 * (!strcmp(ld_p_str(l, BI_LAYER), "LSTM") ? 2 : 1);
}
static ld_tensor *bi_forward(ld_layer *l, int n_in, ld_tensor *const *x, int training) {
    ld_tensor *fo[LD_LAYER_MAX_OUTPUTS] = {0}, *bo[LD_LAYER_MAX_OUTPUTS] = {0};
    int nf = ld_layer_call_outputs(l->inner[0], 1, x, training, NULL, fo, LD_LAYER_MAX_OUTPUTS);
    int nb = nf > 0 ? ld_layer_call_outputs(l->inner[1], 1, x, training, NULL, bo, LD_LAYER_MAX_OUTPUTS) : -1;
    ld_tensor *f = fo[0], *b = bo[0], *y = NULL;
    for (int i = 1; i < nf && nb > 0; i++) {   /* return_state: forward's states, then backward's */
        ld_layer_emit(i, fo[i]);
        ld_layer_emit(nf - 1 + i, bo[i]);
    }
    rel(LD_LAYER_MAX_OUTPUTS - 1, fo + 1);
    rel(LD_LAYER_MAX_OUTPUTS - 1, bo + 1);
    if (b && ld_p_int(l, BI_SEQ)) {   /* the backward sequence in the steps' order again */
        int64_t T = b->shape[1];
        int64_t *rev = malloc((size_t)T * sizeof *rev);
        if (rev) for (int64_t t = 0; t < T; t++) rev[t] = T - 1 - t;
        else ld_fail(LD_ENOMEM, "out of memory");
        ld_tensor *ih = rev ? ld_tensor_from_data(LD_I64, 1, &T, rev, NULL) : NULL;
        ld_tensor *id = ih ? ld_to_device(ih, b->storage->device) : NULL;
        ld_tensor *rb = id ? ld_gather(b, id, 1) : NULL;
        free(rev); ld_tensor_release(ih); ld_tensor_release(id); ld_tensor_release(b);
        b = rb;
    }
    if (b) {
        const char *m = ld_p_str(l, BI_MERGE);
        ld_tensor *two[2] = {f, b};
        if (!strcmp(m, "concat")) y = ld_concat_op(2, two, b->ndim - 1);
        else if (!strcmp(m, "sum")) y = ld_add(f, b);
        else if (!strcmp(m, "mul")) y = ld_mul(f, b);
        else {   /* ave */
            ld_tensor *s = ld_add(f, b);
            y = s ? ld_mul_scalar(s, 0.5f) : NULL;
            ld_tensor_release(s);
        }
    }
    ld_tensor_release(f); ld_tensor_release(b);
    return y;
}
const ld_layer_class ld_layer_bidirectional = {
    "Bidirectional", "bidirectional", NULL, {"layer"},
    {LD_PSTR("layer", NULL, "LSTM|GRU|SimpleRNN"), LD_PSTR("merge_mode", "concat", "concat|sum|mul|ave"),
     LD_PINT("units", NULL), LD_PSTR("activation", "tanh", LD_ACTIVATION_CHOICES),
     LD_PSTR("recurrent_activation", "sigmoid", LD_ACTIVATION_CHOICES), LD_PBOOL("use_bias", "true"),
     LD_PBOOL("return_sequences", "false"), LD_PBOOL("unit_forget_bias", "true"), LD_PBOOL("reset_after", "true"),
     LD_PFLOAT("dropout", "0.0"), LD_PFLOAT("recurrent_dropout", "0.0"), LD_PBOOL("return_state", "false"), LD_PEND},
    1, 1, 1u /* the number of steps */, bi_check, bi_build, bi_forward,
    "nn.Bidirectional(nn.LSTM(64, {...}), {merge_mode=\"concat\"})\n\n"
    "Keras's Bidirectional: the recurrent layer (an LSTM, GRU or SimpleRNN, taken with its options)\n"
    "over the steps forward and over them backward, merged: concat (the default: [batch, 2*units]),\n"
    "sum, mul or ave. With return_sequences the backward outputs are put back in the steps' order.\n"
    "Its weights: the forward layer's, then the backward one's. It takes the layer's dropout and\n"
    "recurrent_dropout; a mask on its inputs reaches both layers (their masked steps output zeros\n"
    "with return_sequences, as Keras's). return_state: the output, then the forward layer's states,\n"
    "then the backward one's.", 0, .compute_mask = ld_mask_sequences, .n_outputs = bi_n_outputs};

/* ---------------------------------------------------------------- TimeDistributed */
/* Keras's TimeDistributed(layer): the layer (any of one input, held as the
   wrapper's inner[0], given by ld_layer_wrap) applied to every step of
   [batch, steps, ...], the steps folded into the batch: [batch * steps,
   ...] through the layer, the output split again. Its weights are the
   layer's. Keras 3 calls the layer on each step, which is the same for
   every layer whose rows do not see each other; BatchNormalization in
   training takes its statistics over every step here. In a replica the
   folded batch's rows are placed as the global batch's (row_offset and
   global_batch times the steps), so a Dropout inside draws what one device
   draws. As Keras 3's, the layer's activity regularizer is left out (it
   calls layer.call); its weights' regularizers count (ld_model_losses). */
enum { TD_LAYER };
int ld_layer_wrap(ld_layer *l, ld_layer *inner) {
    if (l->cls != &ld_layer_time_distributed) return ld_fail(LD_EARG, "%s wraps no layer", l->cls->class_name);
    if (inner == l) return ld_fail(LD_EARG, "%s cannot wrap itself", l->name);
    if (inner->cls->min_inputs != 1)
        return ld_fail(LD_EARG, "%s wraps layers of one input; %s takes %d or more", l->cls->class_name, inner->name,
                       inner->cls->min_inputs);
    if (l->built) return ld_fail(LD_EARG, "%s is built: its layer cannot change", l->name);
    if (ld_layer_set_str(l, TD_LAYER, inner->cls->class_name)) return ld_error_status();
    ld_layer_release(l->inner[0]);
    l->inner[0] = ld_layer_retain(inner);
    l->policy = inner->policy;
    l->frozen = inner->frozen;
    return LD_OK;
}
static int td_check(ld_layer *l) {
    if (!l->inner[0] || strcmp(l->inner[0]->cls->class_name, ld_p_str(l, TD_LAYER)))
        return ld_fail(LD_EARG, "TimeDistributed needs the layer itself: nn.TimeDistributed(nn.Dense(8))");
    return LD_OK;
}
static int td_build(ld_layer *l, int n_in, const ld_shape *in, ld_shape *out) {
    ld_layer *s = l->inner[0];
    char b[160];
    if (in->ndim < 2)
        return ld_fail(LD_ESHAPE, "%s needs inputs of 3 axes or more [batch, steps, ...]; got inputs of shape %s",
                       l->name, ld_layer_shape_str(in, b, sizeof b));
    ld_shape step = {in->ndim - 1, {0}};
    memcpy(step.d, in->d + 1, (size_t)step.ndim * sizeof *step.d);
    if (ld_layer_build_n(s, 1, &step)) return ld_error_status();   /* nothing to do when it is built */
    if (s->out.ndim + 2 > LD_MAX_DIMS)
        return ld_fail(LD_ESHAPE, "%s: %s's outputs have too many axes to add the steps", l->name, s->name);
    for (int i = 0; i < s->n_vars; i++) {
        l->var_trainable[l->n_vars] = s->var_trainable[i];
        l->vars[l->n_vars++] = ld_tensor_retain(s->vars[i]);
    }
    out->ndim = s->out.ndim + 1;
    out->d[0] = in->d[0];
    memcpy(out->d + 1, s->out.d, (size_t)s->out.ndim * sizeof *out->d);
    return LD_OK;
}
static ld_tensor *td_forward(ld_layer *l, int n_in, ld_tensor *const *xs, int training) {
    ld_tensor *x = xs[0];
    int64_t t = x->shape[1], fs[LD_MAX_DIMS], ys[LD_MAX_DIMS];
    fs[0] = x->shape[0] * t;
    memcpy(fs + 1, x->shape + 2, (size_t)(x->ndim - 2) * sizeof *fs);
    ld_tensor *xf = ld_reshape_op(x, x->ndim - 1, fs), *yf = NULL, *y = NULL;
    if (!xf) return NULL;
    const ld_replica_ctx *rc = ld_replica_get();
    ld_replica_ctx saved, folded;
    if (rc) {
        saved = folded = *rc;
        folded.row_offset *= t;
        folded.global_batch *= (double)t;
        ld_replica_set(&folded);
    }
    yf = ld_layer_call(l->inner[0], 1, &xf, training);
    if (rc) ld_replica_set(&saved);
    ld_tensor_release(l->inner[0]->activity_loss);   /* Keras 3 leaves it out (above) */
    l->inner[0]->activity_loss = NULL;
    if (yf) {
        ys[0] = x->shape[0];
        ys[1] = t;
        memcpy(ys + 2, yf->shape + 1, (size_t)(yf->ndim - 1) * sizeof *ys);
        y = ld_reshape_op(yf, yf->ndim + 1, ys);
    }
    ld_tensor_release(xf);
    ld_tensor_release(yf);
    return y;
}
const ld_layer_class ld_layer_time_distributed = {
    "TimeDistributed", "time_distributed", NULL, {"layer"}, {LD_PSTR("layer", NULL, NULL), LD_PEND},
    1, 1, ~0u /* the layer checks its own inputs */, td_check, td_build, td_forward,
    "nn.TimeDistributed(layer)\n\nKeras's TimeDistributed: the layer (any layer of one input: nn.Dense(8),\n"
    "nn.Conv2D(...), nn.Dropout(0.2); not a model) applied to every step of [batch, steps, ...]:\n"
    "nn.TimeDistributed(nn.Dense(8)) on [b, t, 16] gives [b, t, 8]. The steps are folded into the\n"
    "batch ([b * t, ...] through the layer), so a BatchNormalization in training takes its statistics\n"
    "over every step. Its weights are the layer's; td.layer is the layer.", 0, .compute_mask = ld_mask_pass};

/* ---------------------------------------------------------------- LSTM */
static int lstm_build(ld_layer *l, int n_in, const ld_shape *in, ld_shape *out) {
    if (need_seq(l, "inputs", in)) return ld_error_status();
    int64_t u = ld_p_int(l, RNN_UNITS), ks[2] = {in->d[1], 4 * u}, rs[2] = {u, 4 * u}, bs = 4 * u;
    if (!ld_layer_add_weight(l, "kernel", 2, ks, glorot(2, ks), 1)) return ld_error_status();
    if (!ld_layer_add_weight(l, "recurrent_kernel", 2, rs, (ld_init){LD_INIT_ORTHOGONAL, 0, 0}, 1)) return ld_error_status();
    if (ld_p_int(l, RNN_BIAS)) {
        ld_tensor *b = ld_layer_add_weight(l, "bias", 1, &bs, (ld_init){LD_INIT_ZEROS}, 1);
        if (!b) return ld_error_status();
        if (ld_p_int(l, RNN_EXTRA)) {   /* unit_forget_bias: the forget gate's quarter starts at 1 */
            float *vals = calloc((size_t)bs, sizeof *vals);
            if (!vals) return ld_fail(LD_ENOMEM, "out of memory");
            ld_tensor *h = l->wopt.init[LD_ROLE_BIAS].class_name[0] ? ld_to_device(b, ld_device_cpu()) : NULL;
            if (h) { memcpy(vals, ld_tensor_data(h), (size_t)bs * sizeof *vals); ld_tensor_release(h); }   /* Keras: the others from bias_initializer */
            for (int64_t i = u; i < 2 * u; i++) vals[i] = 1;
            int st = write_initial(b, bs, vals);
            free(vals);
            if (st) return st;
        }
    }
    return rnn_shapes(l, n_in, in, out);
}
static ld_tensor *lstm_forward(ld_layer *l, int n_in, ld_tensor *const *x, int training) {
    if (need_steps(l, x[0])) return NULL;
    int64_t u = ld_p_int(l, RNN_UNITS), T = x[0]->shape[1];
    int seq = (int)ld_p_int(l, RNN_SEQ), back = (int)ld_p_int(l, RNN_BACK), zero_out = (int)ld_p_int(l, RNN_ZERO);
    ld_activation a = ld_p_activation(l, RNN_ACT), ra = ld_p_activation(l, RNN_RACT);
    ld_tensor *m;
    if (ld_mask_of_steps(l, x[0], &m)) return NULL;
    rnn_drop dr;
    if (drop_init(l, &dr, 4, x[0], u, training)) { drop_free(&dr); return NULL; }
    ld_tensor *xw = drop_inputs(&dr, x[0], ld_var(l->vars[0]), ld_p_int(l, RNN_BIAS) ? ld_var(l->vars[2]) : NULL);
    ld_tensor *rk = ld_var(l->vars[1]), *h = NULL, *c = NULL, *y = NULL, *o = NULL;
    ld_tensor **hs = seq ? calloc((size_t)T, sizeof *hs) : NULL;
    if (seq && !hs) { ld_fail(LD_ENOMEM, "out of memory"); goto out; }
    if (!xw) goto out;
    {   /* h0, c0: initial_state's, else 0 */
        ld_tensor *st[2];
        if (rnn_initial(l, n_in, x, st)) { rel(2, st); goto out; }
        h = st[0], c = st[1];
    }
    for (int64_t s = 0; s < T; s++) {
        int64_t t = back ? T - 1 - s : s;
        ld_tensor *w[8] = {0};
        w[0] = step_of(xw, t);
        if (!w[0]) goto out;
        if (h) {   /* h0 = c0 = 0: the first step has no recurrent term */
            w[1] = drop_recurrent(&dr, h, rk, 0, 4);
            w[2] = w[1] ? ld_add(w[0], w[1]) : NULL;
        } else w[2] = ld_tensor_retain(w[0]);
        ld_tensor *z = w[2];
        if (!z) { rel(8, w); goto out; }
        ld_tensor *i = gate(ra, z, 0, u), *f = gate(ra, z, u, u), *g = gate(a, z, 2 * u, u), *og = gate(ra, z, 3 * u, u);
        ld_tensor *ig = i && g ? ld_mul(i, g) : NULL, *nc = NULL;
        if (ig) {
            if (c) {
                ld_tensor *fc = f ? ld_mul(f, c) : NULL;
                nc = fc ? ld_add(fc, ig) : NULL;
                ld_tensor_release(fc);
            } else nc = ld_tensor_retain(ig);
        }
        ld_tensor *ac = nc ? act(a, nc) : NULL, *nh = ac && og ? ld_mul(og, ac) : NULL;
        ld_tensor_release(i); ld_tensor_release(f); ld_tensor_release(g); ld_tensor_release(og);
        ld_tensor_release(ig); ld_tensor_release(ac);
        w[7] = mask_at(m, t);
        int st = mask_state(w[7], &nc, c) || mask_state(w[7], &nh, h);
        ld_tensor_release(c); ld_tensor_release(h);
        c = nc; h = nh;
        ld_tensor_release(o);
        o = st || !c || !h ? NULL : step_output(w[7], zero_out, h);
        rel(8, w);
        if (!o) goto out;
        if (seq && !(hs[s] = h3(o))) goto out;
    }
    y = rnn_result(l, T, hs, o);
    ld_layer_emit(1, h);   /* return_state's */
    ld_layer_emit(2, c);
out:
    if (hs) { rel((int)T, hs); free(hs); }
    ld_tensor_release(xw); ld_tensor_release(h); ld_tensor_release(c); ld_tensor_release(o);
    drop_free(&dr);
    return y;
}
const ld_layer_class ld_layer_lstm = {
    "LSTM", "lstm", NULL, {"units"},
    {LD_PINT("units", NULL), LD_PSTR("activation", "tanh", LD_ACTIVATION_CHOICES),
     LD_PSTR("recurrent_activation", "sigmoid", LD_ACTIVATION_CHOICES), LD_PBOOL("use_bias", "true"),
     LD_PBOOL("return_sequences", "false"), LD_PBOOL("go_backwards", "false"), LD_PBOOL("unit_forget_bias", "true"),
     LD_PBOOL("zero_output_for_mask", "false"), LD_PFLOAT("dropout", "0.0"), LD_PFLOAT("recurrent_dropout", "0.0"),
     LD_PBOOL("return_state", "false"), LD_PEND},
    1, 3 /* initial_state's h and c */, 1u /* the number of steps */, rnn_check, lstm_build, lstm_forward,
    "nn.LSTM(units, {activation=\"tanh\", recurrent_activation=\"sigmoid\", use_bias=true,\n"
    "        return_sequences=false, go_backwards=false, unit_forget_bias=true, dropout=0,\n"
    "        recurrent_dropout=0, zero_output_for_mask=false})\n\n"
    "Keras 3's LSTM over [batch, T, features] -> [batch, units] (the last state), or\n"
    "[batch, T, units] with return_sequences. Gates i, f, c, o; h0 = c0 = 0. Variables: kernel\n"
    "[features, 4*units] glorot_uniform, recurrent_kernel [units, 4*units] orthogonal, bias [4*units]\n"
    "zeros (the forget gate's quarter ones with unit_forget_bias). go_backwards reads the steps in\n"
    "reverse (and returns the sequence in that order, as Keras). kernel_, recurrent_ and bias_\n"
    "initializer, regularizer, constraint and activity_regularizer as Keras's." RNN_DOC,
    LD_ROLE_BIT(LD_ROLE_KERNEL) | LD_ROLE_BIT(LD_ROLE_BIAS) | LD_ROLE_BIT(LD_ROLE_RECURRENT), .compute_mask = ld_mask_sequences,
    .initial_states = 1, .n_outputs = rnn_n_outputs};

/* ---------------------------------------------------------------- GRU */
static int gru_build(ld_layer *l, int n_in, const ld_shape *in, ld_shape *out) {
    if (need_seq(l, "inputs", in)) return ld_error_status();
    int64_t u = ld_p_int(l, RNN_UNITS), ks[2] = {in->d[1], 3 * u}, rs[2] = {u, 3 * u};
    if (!ld_layer_add_weight(l, "kernel", 2, ks, glorot(2, ks), 1)) return ld_error_status();
    if (!ld_layer_add_weight(l, "recurrent_kernel", 2, rs, (ld_init){LD_INIT_ORTHOGONAL, 0, 0}, 1)) return ld_error_status();
    if (ld_p_int(l, RNN_BIAS)) {   /* reset_after: [2, 3u] (input bias, recurrent bias); else [3u] */
        int after = (int)ld_p_int(l, RNN_EXTRA);
        int64_t bs[2] = {2, 3 * u};
        if (!ld_layer_add_weight(l, "bias", after ? 2 : 1, after ? bs : bs + 1, (ld_init){LD_INIT_ZEROS}, 1))
            return ld_error_status();
    }
    return rnn_shapes(l, n_in, in, out);
}
static ld_tensor *gru_forward(ld_layer *l, int n_in, ld_tensor *const *x, int training) {
    if (need_steps(l, x[0])) return NULL;
    int64_t u = ld_p_int(l, RNN_UNITS), T = x[0]->shape[1], N = x[0]->shape[0];
    int seq = (int)ld_p_int(l, RNN_SEQ), back = (int)ld_p_int(l, RNN_BACK), after = (int)ld_p_int(l, RNN_EXTRA);
    int bias = (int)ld_p_int(l, RNN_BIAS), zero_out = (int)ld_p_int(l, RNN_ZERO);
    ld_tensor *m, *o = NULL;
    if (ld_mask_of_steps(l, x[0], &m)) return NULL;
    rnn_drop dr;
    if (drop_init(l, &dr, 3, x[0], u, training)) { drop_free(&dr); return NULL; }
    ld_activation a = ld_p_activation(l, RNN_ACT), ra = ld_p_activation(l, RNN_RACT);
    ld_tensor *rk = ld_var(l->vars[1]), *h = NULL, *y = NULL, *xw = NULL, *ib = NULL, *rb = NULL, *rk_zr = NULL, *rk_h = NULL;
    ld_tensor **hs = seq ? calloc((size_t)T, sizeof *hs) : NULL;
    if (seq && !hs) { ld_fail(LD_ENOMEM, "out of memory"); goto out; }
    if (bias && after) {   /* rows of the [2, 3u] bias, differentiable */
        ld_tensor *b = ld_var(l->vars[2]), *r0 = ld_slice_op(b, 0, 0, 1), *r1 = ld_slice_op(b, 0, 1, 1);
        int64_t n3 = 3 * u;
        ib = r0 ? ld_reshape_op(r0, 1, &n3) : NULL;
        rb = r1 ? ld_reshape_op(r1, 1, &n3) : NULL;
        ld_tensor_release(r0); ld_tensor_release(r1);
        if (!ib || !rb) goto out;
    } else if (bias && !(ib = ld_tensor_retain(ld_var(l->vars[2])))) goto out;
    if (!after && (!(rk_zr = ld_slice_op(rk, 1, 0, 2 * u)) || !(rk_h = ld_slice_op(rk, 1, 2 * u, u)))) goto out;
    /* x @ kernel + input bias, every step */
    if (!(xw = drop_inputs(&dr, x[0], ld_var(l->vars[0]), ib))) goto out;
    if (rnn_initial(l, n_in, x, &h)) goto out;   /* h0: initial_state's */
    if (!h) {   /* h0 = 0 (the recurrent bias still counts in the first step) */
        int64_t hsz[2] = {N, u};
        if (!(h = ld_tensor_zeros(LD_F32, 2, hsz, xw->storage->device))) goto out;
    }
    for (int64_t s = 0; s < T; s++) {
        int64_t t = back ? T - 1 - s : s;
        ld_tensor *w[16] = {0}, *nh = NULL;
        if (!(w[0] = step_of(xw, t))) goto out;
        if (after) {
            /* inner = h @ rk + rb; z, r from x + inner; hh = act(x_h + r * inner_h) */
            if (dr.rec[0]) {   /* each gate's columns from h under its recurrent mask */
                if (!(w[15] = drop_recurrent(&dr, h, rk, 0, 3)) || !(w[1] = rb ? ld_add(w[15], rb) : ld_tensor_retain(w[15])))
                    goto step_fail;
            } else if (!(w[1] = ld_linear(h, rk, rb, 0))) goto step_fail;
            if (!(w[2] = ld_slice_op(w[0], 1, 0, 2 * u)) || !(w[3] = ld_slice_op(w[1], 1, 0, 2 * u))) goto step_fail;
            if (!(w[4] = ld_add(w[2], w[3]))) goto step_fail;
            if (!(w[5] = gate(ra, w[4], 0, u)) || !(w[6] = gate(ra, w[4], u, u))) goto step_fail;   /* z, r */
            if (!(w[7] = ld_slice_op(w[1], 1, 2 * u, u)) || !(w[8] = ld_mul(w[6], w[7]))) goto step_fail;
            if (!(w[9] = ld_slice_op(w[0], 1, 2 * u, u)) || !(w[10] = ld_add(w[9], w[8]))) goto step_fail;
        } else {
            /* z, r from x + h @ rk[:, :2u]; hh = act(x_h + (r * h) @ rk[:, 2u:]) */
            if (!(w[1] = drop_recurrent(&dr, h, rk_zr, 0, 2))) goto step_fail;
            if (!(w[2] = ld_slice_op(w[0], 1, 0, 2 * u)) || !(w[4] = ld_add(w[2], w[1]))) goto step_fail;
            if (!(w[5] = gate(ra, w[4], 0, u)) || !(w[6] = gate(ra, w[4], u, u))) goto step_fail;
            if (!(w[15] = dr.rec[2] ? ld_mul(h, dr.rec[2]) : ld_tensor_retain(h))) goto step_fail;
            if (!(w[7] = ld_mul(w[6], w[15])) || !(w[8] = ld_matmul(w[7], rk_h))) goto step_fail;
            if (!(w[9] = ld_slice_op(w[0], 1, 2 * u, u)) || !(w[10] = ld_add(w[9], w[8]))) goto step_fail;
        }
        if (!(w[11] = act(a, w[10]))) goto step_fail;                       /* hh */
        /* h = z * h + (1 - z) * hh = hh + z * (h - hh) */
        if (!(w[12] = ld_sub(h, w[11])) || !(w[13] = ld_mul(w[5], w[12]))) goto step_fail;
        nh = ld_add(w[11], w[13]);
        w[14] = mask_at(m, t);
        if (nh && mask_state(w[14], &nh, h)) nh = NULL;
        ld_tensor_release(o);
        o = nh ? step_output(w[14], zero_out, nh) : NULL;
    step_fail:
        rel(16, w);
        ld_tensor_release(h);
        h = nh;
        if (!h || !o) goto out;
        if (seq && !(hs[s] = h3(o))) goto out;
    }
    y = rnn_result(l, T, hs, o);
    ld_layer_emit(1, h);   /* return_state's */
out:
    if (hs) { rel((int)T, hs); free(hs); }
    ld_tensor_release(xw); ld_tensor_release(h); ld_tensor_release(ib); ld_tensor_release(rb); ld_tensor_release(o);
    ld_tensor_release(rk_zr); ld_tensor_release(rk_h);
    drop_free(&dr);
    return y;
}
const ld_layer_class ld_layer_gru = {
    "GRU", "gru", NULL, {"units"},
    {LD_PINT("units", NULL), LD_PSTR("activation", "tanh", LD_ACTIVATION_CHOICES),
     LD_PSTR("recurrent_activation", "sigmoid", LD_ACTIVATION_CHOICES), LD_PBOOL("use_bias", "true"),
     LD_PBOOL("return_sequences", "false"), LD_PBOOL("go_backwards", "false"), LD_PBOOL("reset_after", "true"),
     LD_PBOOL("zero_output_for_mask", "false"), LD_PFLOAT("dropout", "0.0"), LD_PFLOAT("recurrent_dropout", "0.0"),
     LD_PBOOL("return_state", "false"), LD_PEND},
    1, 2 /* initial_state's h */, 1u /* the number of steps */, rnn_check, gru_build, gru_forward,
    "nn.GRU(units, {activation=\"tanh\", recurrent_activation=\"sigmoid\", use_bias=true,\n"
    "       return_sequences=false, go_backwards=false, reset_after=true, dropout=0,\n"
    "       recurrent_dropout=0, zero_output_for_mask=false})\n\n"
    "Keras 3's GRU over [batch, T, features] -> [batch, units], or [batch, T, units] with\n"
    "return_sequences. Gates z, r, h; h0 = 0; h = z * h + (1 - z) * hh. Variables: kernel\n"
    "[features, 3*units] glorot_uniform, recurrent_kernel [units, 3*units] orthogonal, bias\n"
    "zeros: [2, 3*units] (input and recurrent biases) with reset_after, else [3*units]. kernel_,\n"
    "recurrent_ and bias_ initializer, regularizer, constraint and activity_regularizer as Keras's." RNN_DOC,
    LD_ROLE_BIT(LD_ROLE_KERNEL) | LD_ROLE_BIT(LD_ROLE_BIAS) | LD_ROLE_BIT(LD_ROLE_RECURRENT), .compute_mask = ld_mask_sequences,
    .initial_states = 1, .n_outputs = rnn_n_outputs};
