/*
 * ld_nn.h - layers, the Sequential model, losses and metrics.
 *
 * A layer is a small object with one protocol (Torch7's lesson): build its
 * variables from the input shape, run forward, list its variables. Backward
 * comes from the tape, so a layer only writes forward.
 *
 *     ld_layer *d = ld_dense_new(128, LD_ACT_RELU, 1);
 *     ld_tensor *y = ld_layer_forward(d, x, 1);       // builds on first call
 *
 * Shapes are Keras': Dense acts on the last axis; images are NHWC; Conv2D
 * kernels are HWIO; variables are created with Keras' default initialisers
 * (glorot_uniform kernels, zero biases) from the global generator.
 */
#ifndef LD_NN_H
#define LD_NN_H

#include "ld_ops.h"

typedef enum {
    LD_ACT_NONE = 0, LD_ACT_RELU, LD_ACT_SIGMOID, LD_ACT_TANH, LD_ACT_SOFTMAX, LD_ACT_GELU
} ld_activation;
int ld_activation_from_name(const char *name, ld_activation *out);
const char *ld_activation_name(ld_activation a);
ld_tensor *ld_activate(ld_activation a, ld_tensor *x);

typedef enum {
    LD_LAYER_DENSE = 0, LD_LAYER_FLATTEN, LD_LAYER_DROPOUT, LD_LAYER_CONV2D, LD_LAYER_MAXPOOL2D,
    LD_LAYER_ACTIVATION, LD_LAYER_RESHAPE
} ld_layer_kind;

#define LD_LAYER_MAX_VARS 2
typedef struct ld_layer {
    int refcount;                  /* a model and a front end may both hold a layer */
    ld_layer_kind kind;
    char name[64];                 /* "dense", "dense_1", ... unique per process */
    int built;
    int n_vars;
    ld_tensor *vars[LD_LAYER_MAX_VARS];   /* trainable variables, requires_grad set */
    /* configuration (what applies to the kind) */
    int64_t units, filters;
    int kh, kw, sh, sw, same_padding, use_bias;
    float rate;                    /* dropout */
    ld_activation act;
    int target_ndim;               /* reshape */
    int64_t target_shape[LD_MAX_DIMS];
    /* shapes seen at build time (without the batch axis) */
    int in_ndim, out_ndim;
    int64_t in_shape[LD_MAX_DIMS], out_shape[LD_MAX_DIMS];
} ld_layer;

ld_layer *ld_dense_new(int64_t units, ld_activation act, int use_bias);
ld_layer *ld_flatten_new(void);
ld_layer *ld_dropout_new(float rate);
ld_layer *ld_conv2d_new(int64_t filters, int kh, int kw, int sh, int sw, int same, ld_activation act, int use_bias);
ld_layer *ld_maxpool2d_new(int kh, int kw, int sh, int sw);
ld_layer *ld_activation_layer_new(ld_activation act);
ld_layer *ld_reshape_layer_new(int ndim, const int64_t *shape);
ld_layer *ld_layer_retain(ld_layer *l);
void ld_layer_release(ld_layer *l);
const char *ld_layer_kind_name(ld_layer_kind k);
/* Build (create variables) for inputs shaped [batch, in_shape...]. */
int ld_layer_build(ld_layer *l, int in_ndim, const int64_t *in_shape);
ld_tensor *ld_layer_forward(ld_layer *l, ld_tensor *x, int training);
int64_t ld_layer_param_count(const ld_layer *l);

/* ---- Sequential ---- */
typedef struct ld_model {
    char name[64];
    int n_layers, cap_layers;
    ld_layer **layers;   /* retained */
} ld_model;
ld_model *ld_model_new(const char *name);
void ld_model_free(ld_model *m);
int ld_model_add(ld_model *m, ld_layer *l);   /* retains l */
ld_tensor *ld_model_forward(ld_model *m, ld_tensor *x, int training);
int ld_model_build(ld_model *m, int in_ndim, const int64_t *in_shape);
/* Trainable variables in order (borrowed); returns the count; vars may be NULL to count. */
int ld_model_variables(ld_model *m, ld_tensor **vars, int max);
/* A Keras-like summary table into buf (truncated to n). */
int ld_model_summary(ld_model *m, char *buf, size_t n);

/* ---- losses ---- */
typedef enum {
    LD_LOSS_SPARSE_CCE = 0, LD_LOSS_CCE, LD_LOSS_BCE, LD_LOSS_MSE
} ld_loss_kind;
typedef struct {
    ld_loss_kind kind;
    int from_logits;
    int reduction_sum;   /* 0: mean over the batch (Keras' default), 1: sum ("none" is not reduced: 2) */
    float label_smoothing;
} ld_loss;
const char *ld_loss_name(ld_loss_kind k);
/* Mean loss over the batch (0-d tensor), or per-example [batch] when reduction is "none". */
ld_tensor *ld_loss_compute(const ld_loss *l, ld_tensor *y_true, ld_tensor *y_pred);

/* ---- metrics helpers ---- */
/* Number of rows where argmax(pred) == label (sparse) or, for one column, (pred>0.5)==label. */
int ld_count_correct(ld_tensor *y_true, ld_tensor *y_pred, int sparse, int64_t *correct);

#endif
