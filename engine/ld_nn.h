/*
 * ld_nn.h - layers, the Sequential model, losses and metrics.
 *
 * A layer is a small object with one protocol (Torch7's lesson): build its
 * variables from the input shape, run forward, list its variables. Backward
 * comes from the tape, so a layer only writes forward.
 *
 *     ld_layer *d = ld_layer_new(&ld_layer_dense);
 *     ld_layer_set_int(d, 0, 128);                     // units (the class's params, in order)
 *     ld_layer_check(d);
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
    LD_ACT_NONE = 0, LD_ACT_RELU, LD_ACT_SIGMOID, LD_ACT_TANH, LD_ACT_SOFTMAX, LD_ACT_GELU,
    LD_ACT_ELU, LD_ACT_SELU, LD_ACT_SOFTPLUS, LD_ACT_SOFTSIGN, LD_ACT_SILU, LD_ACT_LEAKY_RELU, LD_ACT_RELU6,
    LD_ACT_HARD_SIGMOID, LD_ACT_HARD_SILU, LD_ACT_MISH, LD_ACT_EXPONENTIAL, LD_ACT_LOG_SOFTMAX, LD_ACT_COUNT
} ld_activation;
int ld_activation_from_name(const char *name, ld_activation *out);
const char *ld_activation_name(ld_activation a);
ld_tensor *ld_activate(ld_activation a, ld_tensor *x);
/* A layer's activation after its product: activation a of y, y's reference
   taken (NULL passes); with relu_done, relu is left out (the fused product,
   ld_linear / ld_conv2d_bias_act, applied it) */
ld_tensor *ld_layer_activate(ld_activation a, ld_tensor *y, int relu_done);

/* ---- layers: one class per kind ----
 * A layer class (ld_layer_class) is the one place that says what a kind of
 * layer is: its Keras class name, its configuration (Keras's argument names,
 * types and defaults), how it builds its variables from the input shapes, and
 * its forward. Everything else is generic: the Lua constructor nn.<Class>,
 * the unknown-option error, get_config / from_config (shipping a model to
 * other processes, to_json, model:save), summary, weights.
 *
 * Adding a layer: a file engine/ld_layers_<family>.c defining
 *     const ld_layer_class ld_layer_<kind> = {...};
 * and one X(<kind>) line in LD_LAYER_CLASSES below. Parameters are read with
 * ld_p_int/ld_p_float/ld_p_str/ld_p_ints by their index in the class's
 * params (an enum beside the class keeps them named). */
typedef struct { int ndim; int64_t d[LD_MAX_DIMS]; } ld_shape;   /* without the batch axis */

typedef enum { LD_P_INT = 0, LD_P_FLOAT, LD_P_BOOL, LD_P_STR, LD_P_INTS, LD_P_FLOATS } ld_param_type;
typedef struct {
    const char *name;       /* Keras's argument name */
    ld_param_type type;
    const char *def;        /* default as text: "1", "0.99", "true", "valid", "2,2", "" (an empty list;
                               for LD_P_FLOAT none, Keras's None: held as NaN, left out of get_config) */
    int width;              /* LD_P_INTS: a single number stands for `width` copies (kernel_size 3 = 3,3); 0: any length.
                               LD_P_FLOATS: at most `width` numbers (a single one is kept as one: Keras's
                               factor=0.2 and factor=(-0.2, 0.3) mean different things, the class reads them) */
    const char *choices;    /* LD_P_STR: "valid|same"; NULL: any text */
} ld_param_spec;
/* spec entries: LD_PINT("units", NULL) (NULL: required), LD_PSTR("padding", "valid", "valid|same"),
   LD_PINTS("kernel_size", "3", 2), ..., LD_PEND */
#define LD_PINT(n, d) {n, LD_P_INT, d, 0, NULL}
#define LD_PFLOAT(n, d) {n, LD_P_FLOAT, d, 0, NULL}
#define LD_PBOOL(n, d) {n, LD_P_BOOL, d, 0, NULL}
#define LD_PSTR(n, d, choices) {n, LD_P_STR, d, 0, choices}
#define LD_PINTS(n, d, width) {n, LD_P_INTS, d, width, NULL}
#define LD_PFLOATS(n, d, width) {n, LD_P_FLOATS, d, width, NULL}
#define LD_PEND {NULL, LD_P_INT, NULL, 0, NULL}
typedef struct {
    int n;                      /* LD_P_INTS, LD_P_FLOATS: how many */
    int64_t i[LD_MAX_DIMS];     /* LD_P_INT, LD_P_BOOL: i[0]; LD_P_INTS: i[0..n) */
    double f;                   /* LD_P_FLOAT */
    double fs[4];               /* LD_P_FLOATS: fs[0..n) */
    char s[32];                 /* LD_P_STR */
} ld_param_value;

#define LD_LAYER_MAX_PARAMS 16
#define LD_LAYER_MAX_VARS 16
#define LD_LAYER_MAX_INPUTS 8
#define LD_LAYER_MAX_OUTPUTS 5   /* Bidirectional(LSTM) with return_state: the output and 4 states */
typedef struct ld_layer ld_layer;
typedef struct ld_layer_class {
    const char *class_name;     /* Keras's: "Dense"; also the constructor's name, nn.Dense */
    const char *kind;           /* layer names: "dense", "dense_1", ... */
    const char *alias;          /* another constructor name ("MaxPooling2D"), or NULL */
    const char *positional[4];  /* parameters that may be given in order: nn.Dense(64, "relu") */
    ld_param_spec params[LD_LAYER_MAX_PARAMS + 1];   /* ends with {NULL} */
    int min_inputs, max_inputs; /* 1, 1 for most; merging layers take several */
    unsigned flexible;          /* bit a: input axis a (after the batch) may differ from the built shape;
                                   LD_FLEX_ALL_BUT_LAST: every axis but the last (features, channels) */
    int (*check)(ld_layer *l);  /* the configuration's checks (NULL: none): LD_OK or ld_fail */
    /* create the variables (ld_layer_add_weight) and give the output shape */
    int (*build)(ld_layer *l, int n_in, const ld_shape *in, ld_shape *out);
    ld_tensor *(*forward)(ld_layer *l, int n_in, ld_tensor *const *x, int training);
    const char *doc;            /* help text: the call and a line on what it does */
    unsigned roles;             /* LD_ROLE_BIT()s of the weights that take Keras's per-weight options
                                   (<role>_initializer, _regularizer, _constraint; activity_regularizer) */
    /* Keras's compute_mask: the output's mask from the inputs' (their
       keras_mask) as a new reference into *mask (NULL: none), LD_OK or
       ld_fail. NULL here: the class does not support masking (Keras's
       supports_masking false), and a mask stops at it. See "masks" below. */
    int (*compute_mask)(ld_layer *l, int n_in, ld_tensor *const *x, ld_tensor **mask);
    /* Keras's recurrent layers: the inputs after the first are initial
       states (initial_state=), which any call may give or not (from
       min_inputs to max_inputs, whatever the layer was built with); the
       forward checks them */
    int initial_states;
    /* the number of outputs of l's configuration (NULL: one; an RNN's
       return_state: its states too). The first comes from forward, the
       others through ld_layer_emit; build gives their shapes (l->outs). */
    int (*n_outputs)(const ld_layer *l);
    /* what the layer does when a call does not say (training LD_TRAINING_DEFAULT):
       0, inference, for most (Keras's call(..., training=False)); 1 for the image
       augmentation layers, whose Keras call defaults to training=True, so that
       layer(x) and model(x) augment while predict and evaluate do not */
    int training_default;
} ld_layer_class;
/* A call's training when the caller did not give one (layer(x), model(x)):
   each layer resolves it to its class's training_default (ld_layer_call);
   fit passes 1, evaluate and predict 0. Forwards see only 0 or 1. */
#define LD_TRAINING_DEFAULT (-1)

#define LD_FLEX_ALL_BUT_LAST 0x80000000u
/* whether input axis a (of ndim, after the batch) may differ from the shape the layer was built for */
static inline int ld_layer_axis_flexible(const ld_layer_class *c, int a, int ndim) {
    if (c->flexible == LD_FLEX_ALL_BUT_LAST) return a < ndim - 1;
    return a < 31 && (c->flexible >> a & 1);
}

/* ---- per-weight options: Keras's initializers, regularizers and constraints ----
   A class lists the roles of its weights (a Dense has a kernel and a bias);
   the options <role>_initializer, <role>_regularizer and <role>_constraint
   apply to every weight of that role, found by the end of its name
   ("query/kernel" is a kernel, "recurrent_kernel" the recurrent role), so
   no class reads them: ld_layer_add_weight initializes, ld_model_losses
   regularizes, ld_variable_constrain constrains. */
typedef enum {
    LD_ROLE_KERNEL = 0, LD_ROLE_BIAS, LD_ROLE_RECURRENT, LD_ROLE_EMBEDDINGS,
    LD_ROLE_DEPTHWISE,          /* "depthwise_kernel": depthwise_initializer, ... (DepthwiseConv2D, SeparableConv2D) */
    LD_ROLE_POINTWISE,          /* "pointwise_kernel": pointwise_initializer, ... (SeparableConv2D) */
    LD_ROLE_COUNT
} ld_weight_role;
#define LD_ROLE_BIT(r) (1u << (r))
/* Keras's initializers by class: class_name "" is the layer's own default */
typedef struct {
    char class_name[24];        /* "GlorotUniform", "HeNormal", "RandomNormal", "Orthogonal", ... */
    double a, b;                /* the class's parameters (ld_initializer_params names them) */
    int seeded;                 /* a seed given: the same values at every call, from that seed */
    uint64_t seed;
} ld_initializer;
typedef struct { char class_name[8]; double l1, l2; } ld_regularizer;   /* "L1", "L2", "L1L2"; "" none */
typedef struct {
    char class_name[16];        /* "MaxNorm", "NonNeg", "UnitNorm", "MinMaxNorm"; "" none */
    double min_value, max_value, rate;
    int axis;
} ld_constraint;
typedef struct {
    ld_initializer init[LD_ROLE_COUNT];
    ld_regularizer reg[LD_ROLE_COUNT], activity;
    ld_constraint constraint[LD_ROLE_COUNT];
} ld_weight_options;
typedef enum { LD_WOPT_INITIALIZER = 0, LD_WOPT_REGULARIZER, LD_WOPT_CONSTRAINT } ld_wopt_kind;
/* an option name of class c: LD_OK with its role and kind (activity_regularizer: role -1,
   LD_WOPT_REGULARIZER), LD_EARG when c has no such option */
int ld_weight_option_find(const ld_layer_class *c, const char *name, int *role, ld_wopt_kind *kind);
/* the i-th option name of class c into buf: 1, or 0 past the last (for messages and help) */
int ld_weight_option_name(const ld_layer_class *c, int i, char *buf, size_t n);
/* Keras's names of a role ("kernel", "bias", "recurrent", "embeddings", "depthwise", "pointwise") */
const char *ld_weight_role_name(int role);
/* An initializer, regularizer or constraint by Keras's class name or its
   snake_case alias ("he_normal", "l2", "max_norm"), with Keras's defaults;
   LD_EARG naming the choices. Parameters are then set by name with
   ld_*_set (Keras's config keys), and listed back by ld_*_params. */
int ld_initializer_named(const char *name, ld_initializer *out);
/* the i-th class name of a kind (and its snake_case alias into *alias, when not NULL); NULL past the last */
const char *ld_weight_option_class(ld_wopt_kind k, int i, const char **alias);
int ld_initializer_set(ld_initializer *x, const char *key, double v);
int ld_initializer_params(const ld_initializer *x, const char *names[2], double vals[2]);   /* how many */
int ld_regularizer_named(const char *name, ld_regularizer *out);
int ld_regularizer_set(ld_regularizer *x, const char *key, double v);
int ld_regularizer_params(const ld_regularizer *x, const char *names[2], double vals[2]);
int ld_constraint_named(const char *name, ld_constraint *out);
int ld_constraint_set(ld_constraint *x, const char *key, double v);
int ld_constraint_params(const ld_constraint *x, const char *names[4], double vals[4]);
/* the regularization of w (l1 * sum|w| + l2 * sum w^2), recorded on a live tape */
ld_tensor *ld_regularize(const ld_regularizer *r, ld_tensor *w);
/* After an update: v (a variable, or a replica's copy of one) replaced by
   its constraint's projection, when its layer has one (a no-op otherwise).
   base: the variable as the layer holds it (copy 0), to find the constraint. */
int ld_variable_constrain(ld_tensor *base, ld_tensor *v);
int ld_variable_has_constraint(ld_tensor *base);
/* v's constraint into *out: 1 when it has one (a layer's weight, any replica copy, or a tensor given one) */
int ld_variable_constraint(ld_tensor *v, ld_constraint *out);
/* Give a tensor that no layer holds a constraint (a parameter server's copy
   of a constrained weight), retained until it gets another or none (c NULL). */
int ld_tensor_set_constraint(ld_tensor *t, const ld_constraint *c);

/* ---- dtype policies (Keras's mixed precision) ----
   A layer's policy: "float32", "mixed_float16" or "mixed_bfloat16"
   (variables float32, compute in the half dtype). A new layer takes the
   global policy (Keras's set_global_policy), unless given its own dtype=. */
typedef struct {
    char name[16];              /* Keras's name: "float32", "mixed_bfloat16", ... */
    ld_dtype compute;           /* what the layer computes in: LD_F32, LD_F16 or LD_BF16 */
} ld_policy;
/* the policy of that name: LD_OK, or LD_EARG naming the valid ones */
int ld_policy_from_name(const char *name, ld_policy *out);
void ld_policy_set_global(const ld_policy *p);
ld_policy ld_policy_global(void);

struct ld_layer {
    int refcount;                  /* a model and a front end may both hold a layer */
    const ld_layer_class *cls;
    char name[64];                 /* "dense", "dense_1", ... unique per process */
    int built;
    int n_vars;
    ld_tensor *vars[LD_LAYER_MAX_VARS];        /* in creation order; requires_grad set on trainable ones */
    unsigned char var_trainable[LD_LAYER_MAX_VARS];   /* each weight's own (false: BatchNormalization's moving statistics) */
    int frozen;                    /* Keras's layer.trainable = false: no weight of it trains (ld_layer_var_trainable) */
    ld_param_value p[LD_LAYER_MAX_PARAMS];     /* the configuration, by the class's params */
    /* shapes seen at build time (without the batch axis) */
    int n_in;
    ld_shape in[LD_LAYER_MAX_INPUTS], out;
    int n_out;                     /* its outputs (1 for most) */
    ld_shape outs[LD_LAYER_MAX_OUTPUTS - 1];   /* the shapes of outputs 2, 3, ... (build sets them) */
    ld_weight_options wopt;        /* Keras's per-weight options (zeroed: the class's defaults) */
    ld_policy policy;              /* the dtype policy: what the layer computes in (variables are float32) */
    ld_tensor *activity_loss;      /* the activity regularization of the last call, owned */
    double activity_rows;          /* the rows of that call's output (Keras divides by them) */
    uint64_t *seed_draws;          /* a seeded layer's calls that drew, per replica id (ld_layer_draw_key) */
    ld_layer *inner[2];            /* a wrapper's layers (Bidirectional's forward and backward,
                                      TimeDistributed's one), owned; their variables are also the
                                      wrapper's, and their weight options apply to them */
};

/* every class: X(kind) for const ld_layer_class ld_layer_<kind> */
#define LD_LAYER_CLASSES(X) \
    X(dense) X(flatten) X(dropout) X(conv2d) X(max_pooling2d) X(activation) X(reshape) \
    X(batch_normalization) X(layer_normalization) X(embedding) X(average_pooling2d) \
    X(global_average_pooling2d) X(conv1d) X(add) X(multiply) X(concatenate) \
    X(multi_head_attention) X(lstm) X(gru) X(rescaling) X(softmax) X(global_max_pooling2d) \
    X(global_average_pooling1d) X(global_max_pooling1d) X(simple_rnn) X(leaky_relu) X(elu) X(p_re_lu) \
    X(bidirectional) X(subtract) X(average) X(maximum) X(minimum) X(max_pooling1d) X(average_pooling1d) \
    X(zero_padding2d) X(cropping2d) X(up_sampling2d) X(repeat_vector) X(permute) X(conv2d_transpose) \
    X(depthwise_conv2d) X(separable_conv2d) X(group_normalization) X(unit_normalization) \
    X(gaussian_noise) X(gaussian_dropout) X(spatial_dropout1d) X(spatial_dropout2d) X(spatial_dropout3d) X(normalization) \
    X(re_lu) X(identity) X(activity_regularization) X(alpha_dropout) X(zero_padding1d) X(cropping1d) X(up_sampling1d) \
    X(dot) X(conv1d_transpose) X(time_distributed) X(masking) \
    X(attention) X(additive_attention) \
    X(resizing) X(center_crop) X(random_crop) X(random_flip) X(random_rotation) X(random_zoom) X(random_translation) \
    X(random_contrast) X(random_brightness) X(weights)
#define LD_LAYER_DECLARE(k) extern const ld_layer_class ld_layer_##k;
LD_LAYER_CLASSES(LD_LAYER_DECLARE)
#undef LD_LAYER_DECLARE
/* the classes, NULL-terminated; a class by its class name or alias (NULL: none) */
const ld_layer_class *const *ld_layer_classes(void);
const ld_layer_class *ld_layer_class_find(const char *class_name);

/* A layer with the class's defaults; set parameters, then ld_layer_check. */
ld_layer *ld_layer_new(const ld_layer_class *c);
int ld_layer_param_index(const ld_layer_class *c, const char *name);   /* -1: none */
/* Set parameter i from text (the value's type checked against the spec,
   choices too); ints/n for LD_P_INTS. Errors name the layer class and parameter. */
int ld_layer_set_int(ld_layer *l, int i, int64_t v);
int ld_layer_set_float(ld_layer *l, int i, double v);
int ld_layer_set_str(ld_layer *l, int i, const char *v);
int ld_layer_set_bool(ld_layer *l, int i, int v);
int ld_layer_set_ints(ld_layer *l, int i, int n, const int64_t *v);
int ld_layer_set_floats(ld_layer *l, int i, int n, const double *v);
int ld_layer_set_name(ld_layer *l, const char *name);
int ld_layer_check(ld_layer *l);               /* the class's checks, once every parameter is set */
static inline int64_t ld_p_int(const ld_layer *l, int i) { return l->p[i].i[0]; }
static inline double ld_p_float(const ld_layer *l, int i) { return l->p[i].f; }
static inline const char *ld_p_str(const ld_layer *l, int i) { return l->p[i].s; }
static inline const int64_t *ld_p_ints(const ld_layer *l, int i, int *n) { if (n) *n = l->p[i].n; return l->p[i].i; }
static inline const double *ld_p_floats(const ld_layer *l, int i, int *n) { if (n) *n = l->p[i].n; return l->p[i].fs; }
ld_activation ld_p_activation(const ld_layer *l, int i);   /* a LD_P_STR parameter naming an activation */
/* the choices of an activation parameter */
#define LD_ACTIVATION_CHOICES "linear|relu|sigmoid|tanh|softmax|gelu|elu|selu|softplus|softsign|silu|swish|" \
    "leaky_relu|relu6|hard_sigmoid|hard_silu|hard_swish|mish|exponential|log_softmax"

/* Helpers of the layer classes' build functions (ld_layers_*.c). */
/* a layer input's shape as ld_nn.c's shape errors write it: "batchx5x5x3" */
const char *ld_layer_shape_str(const ld_shape *s, char *buf, size_t n);
/* LD_OK for images [batch, height, width, channels]; else an error naming
   the layer and the shape (for [batch, h, w], how to add the channel axis) */
int ld_layer_need_image(const ld_layer *l, const ld_shape *in);
/* LD_OK for sequences [batch, steps, <last>] (last: "features", "channels");
   else an error naming the layer and the shape */
int ld_layer_need_steps(const ld_layer *l, const ld_shape *in, const char *last);
/* Keras 3's ops.normalize (order 2): x * min(rsqrt(sum(x^2 over the axes)),
   1 / epsilon), the axes counted with the batch (UnitNormalization, Dot) */
ld_tensor *ld_l2_normalize(ld_tensor *x, int naxes, const int *axes, double epsilon);
/* the output size of one spatial axis, valid or same padding (TF's rules) */
int64_t ld_layer_out_size(int64_t in, int64_t k, int64_t s, int same);
/* Keras's dilation_rate (atrous convolution). ld_layer_dilated_size: a
   kernel of k taps spread d apart, as the k' = (k - 1) d + 1 taps it spans
   (what ld_layer_out_size takes). ld_layer_dilation_check: each rate >= 1,
   and not with a stride > 1 (Keras's error). ld_layer_atrous: the layer's
   stride-1 convolution of dilation d[2] over NHWC images x, as TF's
   with_space_to_batch computes it: x padded as `padding` says ("valid";
   "same", TF's: the lesser half before; "causal": all before) for the taps
   the dilated kernel spans, split into its d[0] x d[1] phases (every d-th row and column from
   each offset) taken as a batch d[0] d[1] times larger, `conv` (the layer's
   own valid, stride-1, undilated convolution with its bias and activation)
   on that batch, the phases' outputs interleaved back and cut to the
   dilated convolution's size. Reshapes, permutes, a pad and a slice on the
   tape: every device, the direct convolution kernels, no second kernel. */
static inline int64_t ld_layer_dilated_size(int64_t k, int64_t d) { return (k - 1) * d + 1; }
int ld_layer_dilation_check(const ld_layer *l, int n, const int64_t *dilation, const int64_t *strides);
ld_tensor *ld_layer_atrous(ld_layer *l, ld_tensor *x, const int64_t k[2], const int64_t d[2], const char *padding,
                           ld_tensor *(*conv)(ld_layer *l, ld_tensor *x));
/* a pooling layer's strides: its parameter strides_i, or its pool size
   (parameter size_i) when none were given, as Keras's strides=None */
const int64_t *ld_layer_pool_strides(const ld_layer *l, int size_i, int strides_i);

/* ---- masks ----
   Keras's masks travel on the tensors (ld_tensor's keras_mask: float32 1
   where a step counts, 0 where it is masked), as Keras's _keras_mask does,
   so a Sequential, a Functional graph and a subclassed call pass them on
   alike. ld_layer_call sets each output's as Keras's __call__: a mask the
   forward set on its new output itself is kept (Masking's); else the
   class's compute_mask gives it. The layers that use a mask read it from
   their inputs (recurrent layers skip masked steps, GlobalAveragePooling1D
   averages over the steps that count, MultiHeadAttention attends to them),
   and so does the loss (ld_loss_compute) and compile's metrics. */
int ld_mask_pass(ld_layer *l, int n_in, ld_tensor *const *x, ld_tensor **mask);       /* the first input's (Keras's default) */
int ld_mask_merge(ld_layer *l, int n_in, ld_tensor *const *x, ld_tensor **mask);      /* Add, ...: the OR of the inputs' masks, none unless each has one */
int ld_mask_sequences(ld_layer *l, int n_in, ld_tensor *const *x, ld_tensor **mask);  /* recurrent layers: the input's with return_sequences, else none */
/* float32 1 where x != v and 0 where x == v (off the tape), of x's shape;
   any: 1 where any element along the last axis differs (that axis dropped) */
ld_tensor *ld_mask_not_equal(ld_tensor *x, double v, int any);
/* For a layer that uses the mask of sequences x [batch, steps, ...]: *m is
   x's mask (borrowed; NULL: none), checked to be [batch, steps] */
int ld_mask_of_steps(const ld_layer *l, const ld_tensor *x, ld_tensor **m);
/* column t of a mask [batch, steps] as [batch, 1], off the tape */
ld_tensor *ld_mask_step(ld_tensor *m, int64_t t);
/* where(mask, a, b), b NULL meaning zeros of a's dtype: a recurrent step's
   masked state (the previous one) or output */
ld_tensor *ld_mask_select(ld_tensor *mask, ld_tensor *a, ld_tensor *b);

/* Variables, in build: init as Keras's initializers */
typedef enum { LD_INIT_ZEROS = 0, LD_INIT_ONES, LD_INIT_GLOROT_UNIFORM, LD_INIT_UNIFORM, LD_INIT_ORTHOGONAL } ld_init_kind;
typedef struct { ld_init_kind kind; double a, b; } ld_init;   /* glorot: a = fan_in, b = fan_out; uniform: [a, b) */
#define LD_INIT_Z ((ld_init){LD_INIT_ZEROS, 0, 0})
#define LD_INIT_1 ((ld_init){LD_INIT_ONES, 0, 0})
#define LD_INIT_GLOROT(fan_in, fan_out) ((ld_init){LD_INIT_GLOROT_UNIFORM, (double)(fan_in), (double)(fan_out)})
#define LD_INIT_U(lo, hi) ((ld_init){LD_INIT_UNIFORM, (lo), (hi)})
#define LD_INIT_ORTH ((ld_init){LD_INIT_ORTHOGONAL, 0, 0})
ld_tensor *ld_layer_add_weight(ld_layer *l, const char *name, int ndim, const int64_t *shape, ld_init init, int trainable);
/* Keras's Layer.add_weight on a subclassed model (its own weights, held by a
   layer of class ld_layer_weights): a weight of that shape from initializer
   x, mirrored under the model's strategy as a layer's. ld_layer_adopt_weight:
   a Variable made elsewhere (assigned to a subclass's field, as Keras tracks
   it) held by l from now on (retained; named "<layer>/<its name or what>");
   trainable as the variable is. */
ld_tensor *ld_layer_new_weight(ld_layer *l, const char *what, int ndim, const int64_t *shape, const ld_initializer *x,
                               int trainable);
int ld_layer_adopt_weight(ld_layer *l, ld_tensor *v, const char *what);
/* between ld_nn.c and ld_layer_options.c */
ld_tensor *ld_orthogonal_init(int ndim, const int64_t *shape, ld_rng *rng);
ld_tensor *ld_initializer_make(const ld_initializer *x, int ndim, const int64_t *shape, ld_rng *rng);
int ld_weight_role_of(const char *var_name);         /* the role of a weight by its name, -1: none */
int ld_constraint_register(const ld_tensor *var, const ld_constraint *c);
void ld_constraint_unregister(const ld_tensor *var);
int ld_layer_record_activity(ld_layer *l, ld_tensor *y);   /* after each call */
/* A limit, for this thread, on the bytes ld_layer_add_weight may create from
   now on (-1: none, the default); a weight over it fails before it is
   allocated. Loading a model file sets it to what the file holds, so a small
   file that declares huge layers costs an error, not gigabytes. Returns the
   bytes left of the previous limit (-1: there was none). */
int64_t ld_layer_weight_budget(int64_t bytes);

/* The key of one random draw of a layer's call (the values are then
   ld_counter_uniform(key, place in the global batch)). seed NaN (Keras's
   seed=None): the next number of the global generator (the replica's
   stream under a strategy). Else the layer's own stream, Keras's
   SeedGenerator(seed): the k-th call of this replica draws the k-th key of
   seed's stream, whatever the global generator is, the same on every
   replica of a step (each counts its own calls). */
uint64_t ld_layer_draw_key(ld_layer *l, double seed);

/* A wrapper (TimeDistributed) made to hold inner (retained, as l->inner[0];
   its class name becomes l's "layer" parameter), before l is built */
int ld_layer_wrap(ld_layer *l, ld_layer *inner);

ld_layer *ld_layer_retain(ld_layer *l);
void ld_layer_release(ld_layer *l);
/* Build (create variables) for inputs shaped [batch, in...]. */
int ld_layer_build_n(ld_layer *l, int n_in, const ld_shape *in);
int ld_layer_build(ld_layer *l, int in_ndim, const int64_t *in_shape);
ld_tensor *ld_layer_call(ld_layer *l, int n_in, ld_tensor *const *x, int training);
/* Every output of a layer of several (an RNN with return_state): new
   references into out (at most max), their count, or -1 on failure; mask
   as ld_layer_call_masked's (NULL: the inputs').
   ld_layer_call gives the first only. A class's forward gives its outputs
   after the first with ld_layer_emit(i, t) (i >= 1, t retained) during the
   call; a call that wants none drops them. */
int ld_layer_call_outputs(ld_layer *l, int n_in, ld_tensor *const *x, int training, ld_tensor *mask, ld_tensor **out,
                          int max);
/* Keras's layer(x, mask=m): m, not x[0]'s own mask, is the first input's.
   Without it (ld_layer_call), a call takes x[0]'s mask, but for a recurrent
   layer given initial states, which Keras 3 leaves unmasked (its __call__
   fills `mask` only for a call of one tensor argument); the output carries
   the mask either way. */
ld_tensor *ld_layer_call_masked(ld_layer *l, int n_in, ld_tensor *const *x, int training, ld_tensor *mask);
/* the outputs l gives: once built, l->n_out; before, its configuration's */
static inline int ld_layer_outputs(const ld_layer *l) {
    return l->built ? l->n_out : l->cls->n_outputs ? l->cls->n_outputs(l) : 1;
}
/* A recurrent layer's initial states' shapes (inputs 2.. of in, without the
   batch axis): as many as it has states, each [units]; LD_OK or ld_fail */
int ld_layer_check_states(const ld_layer *l, int n_in, const ld_shape *in);
void ld_layer_emit(int i, ld_tensor *t);
ld_tensor *ld_layer_forward(ld_layer *l, ld_tensor *x, int training);
/* Keras's autocast around a layer's forward (ld_nn.c): the float inputs cast
   to l's compute dtype, ld_autocast on, the output in that dtype; fn, when
   given, runs in place of l's forward (a fused pair led by l, ctx the rest) */
typedef ld_tensor *(*ld_fused_forward)(ld_layer *l, void *ctx, ld_tensor *const *x, int training);
ld_tensor *ld_layer_autocast_call(ld_layer *l, int n_in, ld_tensor *const *x, int training, ld_fused_forward fn,
                                  void *ctx);
/* Two consecutive layers run as one op where that pays (a Conv2D with relu
   or no activation, then a MaxPool2D: ld_conv2d_pool): returns 1 with *y
   the second's output (NULL on an error), 0 when the pair is not fused
   (not built yet, another input, not on the CPU, two policies): run them one
   by one. */
int ld_layer_pair_forward(ld_layer *a, ld_layer *b, ld_tensor *x, int training, ld_tensor **y);
int64_t ld_layer_param_count(const ld_layer *l);
int64_t ld_layer_trainable_count(const ld_layer *l);
/* Does weight i of l train: its own trainability, unless the layer is frozen */
int ld_layer_var_trainable(const ld_layer *l, int i);
/* Keras's layer.trainable = on: off freezes every weight of the layer (out of
   the trainable lists, no gradient, a BatchNormalization in inference mode);
   on gives each its own trainability back. Mirrored copies follow. */
void ld_layer_set_trainable(ld_layer *l, int on);

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
/* Where the model computes: its first variable's device (the current
   replica's copy), or NULL before it has variables. */
ld_device *ld_model_device(ld_model *m);
int ld_model_build(ld_model *m, int in_ndim, const int64_t *in_shape);
/* Trainable variables in order (borrowed); returns the count; vars may be NULL to count. */
int ld_model_variables(ld_model *m, ld_tensor **vars, int max);
/* Every variable (Keras's model.weights: each layer's, trainable and not, in
   creation order), borrowed; trainable (may be NULL) tells which are. */
int ld_model_weights(ld_model *m, ld_tensor **vars, unsigned char *trainable, int max);
/* Keras's model.losses: layer by layer, the activity regularization of its
   last call (over that call's rows), then the regularization of each of its
   weights, as new references into out (at most max); returns the count, or
   -1 with the error set. */
int ld_model_losses(ld_model *m, ld_tensor **out, int max);
/* loss + the terms of ld_model_losses (a new reference): the training loss
   Keras minimizes. In a replica of a synchronous strategy with n > 1
   replicas, each weight term is divided by n (tf.nn.scale_regularization_loss)
   and each activity term taken over the global batch instead of the
   replica's rows, so the replicas' gradients add up to one device's. The
   activity terms are used up (a later step has its own). */
ld_tensor *ld_model_add_losses(ld_model *m, ld_tensor *loss);
/* A Keras-like summary table into buf (truncated to n), at most `width`
   columns wide (40 at least): layers, output shapes, parameter counts, then
   Keras's total, trainable and non-trainable lines. */
int ld_model_summary(ld_model *m, char *buf, size_t n, int width);

/* ---- losses ---- */
/* Keras 3's losses (keras/src/losses/losses.py), each its formula: the
   per-example loss is the mean (KLDivergence, CosineSimilarity: the sum;
   CategoricalHinge: one value) over the last axis of an elementwise term */
typedef enum {
    LD_LOSS_SPARSE_CCE = 0, LD_LOSS_CCE, LD_LOSS_BCE, LD_LOSS_MSE,
    LD_LOSS_MAE,             /* |y_pred - y_true| */
    LD_LOSS_MAPE,            /* 100 mean |(y_true - y_pred) / max(|y_true|, eps)| */
    LD_LOSS_MSLE,            /* (log(max(y_pred, eps) + 1) - log(max(y_true, eps) + 1))^2 */
    LD_LOSS_HUBER,           /* e = y_pred - y_true: e^2 / 2 where |e| <= delta, else delta |e| - delta^2 / 2 */
    LD_LOSS_LOGCOSH,         /* e + softplus(-2e) - log 2 */
    LD_LOSS_KLD,             /* sum t log(t / p), t and p clipped to [eps, 1] */
    LD_LOSS_POISSON,         /* y_pred - y_true log(y_pred + eps) */
    LD_LOSS_COSINE,          /* -sum of the l2-normalized y_true and y_pred's product */
    LD_LOSS_HINGE,           /* max(1 - t y_pred, 0), t = 2 y_true - 1 when every label is 0 or 1 */
    LD_LOSS_SQUARED_HINGE,   /* max(1 - t y_pred, 0)^2, t as Hinge's */
    LD_LOSS_CATEGORICAL_HINGE, /* max(max((1 - y_true) y_pred) - sum(y_true y_pred) + 1, 0) */
    LD_LOSS_BINARY_FOCAL,    /* (1 - p_t)^gamma bce (times y alpha + (1 - y)(1 - alpha) when balanced), mean over the last axis */
    LD_LOSS_CATEGORICAL_FOCAL, /* sum over the last axis of -alpha (1 - p)^gamma y log p, p normalised and clipped */
    LD_LOSS_DICE,            /* 1 - 2 sum(y p) / (sum y + sum p + eps), the sums over `axes` */
    LD_LOSS_TVERSKY,         /* 1 - I / (I + alpha sum((1-p) y) + beta sum(p (1-y)) + eps), I = sum(y p) over `axes` */
    LD_LOSS_COUNT
} ld_loss_kind;
typedef struct {
    ld_loss_kind kind;
    int from_logits;
    int reduction_sum;   /* 0: mean over the batch (Keras' default), 1: sum ("none" is not reduced: 2) */
    float label_smoothing;
    float delta;         /* Huber's (Keras's default 1) */
    double alpha, beta, gamma; /* the focal losses' alpha and gamma (0.25, 2); Tversky's alpha and beta (0.5, 0.5) */
    int class_balancing; /* BinaryFocalCrossentropy's apply_class_balancing */
    int has_ignore_class;      /* SparseCategoricalCrossentropy's ignore_class (Keras's): labels equal to */
    int64_t ignore_class;      /* it give 0 and leave the mean's count (ld_loss_reduce) */
    int naxes;           /* Dice and Tversky: the sums run over axes[0..naxes) (each >= 0); 0: every axis (axis=None) */
    int axes[LD_MAX_DIMS];
} ld_loss;
const char *ld_loss_name(ld_loss_kind k);
/* Mean loss over the batch (0-d tensor), or per-example [batch] when reduction is "none". */
ld_tensor *ld_loss_compute(const ld_loss *l, ld_tensor *y_true, ld_tensor *y_pred);
/* Keras 3's Loss.__call__ with its weights: the losses of y_pred against
   y_true (per position), weighted by w (NULL: none; Keras's
   squeeze_or_expand_to_same_rank, then broadcast; weights [batch] of a
   sequence model's losses [batch, steps] weigh each example's positions)
   and by y_pred's mask (its keras_mask: a masked position weighs 0, with
   ignore_class its ignored labels too), reduced as l asks
   (reduce_weighted_values): "none" the weighted losses, "sum" their sum,
   "sum_over_batch_size" their sum over the number of losses, or with a mask
   over the positions that count (apply_mask; 0 when none does), in a
   replica those of the global batch (an in-step all-reduce, as
   ignore_class's), so every strategy gives one device's loss. A scalar or
   an empty loss comes back unreduced, as Keras's. ld_loss_compute is this
   without weights. */
ld_tensor *ld_loss_weighted(const ld_loss *l, ld_tensor *y_true, ld_tensor *y_pred, ld_tensor *w);
/* Per-example (or per-position) losses reduced as l asks: "none" per
   itself, "sum" their sum, "sum_over_batch_size" their mean; in a replica
   of a synchronous strategy with n > 1 replicas, their sum over the global
   batch's positions (the replica's positions per row times the global
   batch), so the replicas' losses add up to one device's.
   With ignore_class, y_true (the labels the losses came from) gives the
   mean's count: the labels that are not ignore_class (Keras 3's apply_mask:
   sum / valid, 0 when none is), in a replica those of the global batch
   (summed across the replicas in the step), so every strategy gives one
   device's loss. y_true may be NULL otherwise. */
ld_tensor *ld_loss_reduce(const ld_loss *l, ld_tensor *per, ld_tensor *y_true);

/* ---- metrics helpers ---- */
/* Number of rows (positions, for predictions [batch, t..., classes]) where argmax(pred) == label
   (sparse) or, for one column, (pred>0.5)==label. */
int ld_count_correct(ld_tensor *y_true, ld_tensor *y_pred, int sparse, int64_t *correct);
/* The same weighted (Keras's weighted_metrics, sample_weight): each
   position's match times its weight (w [rows], one per position, or one for
   all; NULL: 1), summed into *correct, the weights into *total. */
int ld_count_correct_weighted(ld_tensor *y_true, ld_tensor *y_pred, int sparse, ld_tensor *w, double *correct,
                              double *total);

#endif
