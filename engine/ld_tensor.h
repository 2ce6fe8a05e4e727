/*
 * ld_tensor.h - tensors of the ldist engine.
 *
 * A tensor is a view (shape, strides, offset) on a refcounted storage that
 * lives on one device. Views share storage:
 *
 *     int64_t shape[2] = {3, 4};
 *     ld_tensor *a = ld_tensor_zeros(LD_F32, 2, shape, NULL);   // NULL = cpu:0
 *     ld_tensor *t = ld_transpose(a, 0, 1);                      // 4x3 view of a
 *     ld_tensor_release(t); ld_tensor_release(a);
 *
 * Every function returning ld_tensor* returns a new reference (release it)
 * or NULL with ld_error() set. Strides and offsets count elements, not bytes.
 */
#ifndef LD_TENSOR_H
#define LD_TENSOR_H

#include "ld_core.h"

#define LD_MAX_DIMS 8

/* LD_F16 (IEEE half) and LD_BF16 (bfloat16) hold 16 bits each; ops on them
   compute in float32 (ld_half.h converts). */
typedef enum { LD_F32 = 0, LD_I32, LD_I64, LD_U8, LD_F16, LD_BF16, LD_DTYPE_COUNT } ld_dtype;
/* float32, float16 or bfloat16 */
static inline int ld_dtype_is_float(ld_dtype dt) { return dt == LD_F32 || dt == LD_F16 || dt == LD_BF16; }
/* float16 or bfloat16 */
static inline int ld_dtype_is_half(ld_dtype dt) { return dt == LD_F16 || dt == LD_BF16; }
size_t ld_dtype_size(ld_dtype dt);          /* bytes per element */
const char *ld_dtype_name(ld_dtype dt);     /* "float32", "int32", "int64", "uint8", "float16", "bfloat16" */
int ld_dtype_from_name(const char *name, ld_dtype *out); /* LD_OK or LD_EARG */

typedef struct ld_device ld_device;  /* see ld_device.h */
struct ld_node;                      /* autograd, see ld_autograd.h */

/* What a module outside the tensor core keeps with a tensor (a strategy's
   per-replica copies of a variable, ld_strategy.c). The owner embeds this as
   the first member of its own struct and sets t->ext; the tensor owns it
   from then on and calls free(ext) when it goes. One owner at a time: an
   owner recognises its extension by its free function. */
typedef struct ld_tensor_ext {
    void (*free)(struct ld_tensor_ext *ext);
} ld_tensor_ext;

typedef struct ld_storage {
    int refcount;
    void *data;          /* device memory */
    size_t nbytes;       /* size of data in bytes */
    ld_device *device;
    /* borrowed memory (ld_tensor_borrow): called instead of freeing data */
    void (*release)(void *ctx);
    void *release_ctx;
    /* owned, NULL for most: why these values are stale (a parameter server
       that held the variable died); the bindings refuse to read them while
       it is set (ld_tensor_set_lost) */
    char *lost;
} ld_storage;

typedef struct ld_tensor {
    int refcount;
    ld_dtype dtype;
    int ndim;
    int64_t shape[LD_MAX_DIMS];
    int64_t strides[LD_MAX_DIMS];   /* in elements */
    int64_t offset;                 /* in elements, from storage->data */
    ld_storage *storage;
    /* autograd */
    int requires_grad;              /* a trainable variable or a watched tensor */
    struct ld_node *grad_fn;        /* the op that produced it while a tape recorded */
    char *name;                     /* optional, owned (variables: "dense/kernel") */
    ld_tensor_ext *ext;             /* owned, NULL for most tensors; views never share it */
    struct ld_pending *pending;     /* a weight gradient not computed yet (ld_ops.h) */
    /* names this header for the process's life, never reused (an address
       is, once the tensor is freed): what a strategy keys "already
       broadcast" by, so the decision never depends on when memory is freed */
    uint64_t serial;
    /* Keras's mask (its _keras_mask), retained, NULL for most: float32, 1
       where a step counts and 0 where it is masked, shaped as the tensor's
       leading axes ([batch, steps] for [batch, steps, features]). Layers
       set it (ld_layer_call: an Embedding with mask_zero, Masking) and pass
       it on as Keras's do; ops never do; views do not share it. */
    struct ld_tensor *keras_mask;
} ld_tensor;

/* A weight gradient left as its product, a^T b (a [rows, m], b [rows, n],
   both retained): a strategy's collective computes each replica's slice of
   the sum over replicas straight from the factors (ld_strategy.c), and
   ld_tensor_materialize computes it where anything else needs the values. */
struct ld_pending { ld_tensor *a, *b; };

/* ---- lifetime ---- */
ld_tensor *ld_tensor_retain(ld_tensor *t);
void ld_tensor_release(ld_tensor *t);          /* NULL is fine */
/* Compute a pending weight gradient into t (queued on its device, like any
   kernel) and drop its factors; nothing to do for other tensors. */
void ld_tensor_materialize(ld_tensor *t);
void ld_pending_free(struct ld_pending *p);    /* releases the factors; NULL is fine */
/* t's Keras mask becomes mask (retained; NULL: none), the old one released */
void ld_tensor_set_mask(ld_tensor *t, ld_tensor *mask);

/* ---- creation (dev NULL = cpu:0) ---- */
ld_tensor *ld_tensor_empty(ld_dtype dt, int ndim, const int64_t *shape, ld_device *dev);
ld_tensor *ld_tensor_zeros(ld_dtype dt, int ndim, const int64_t *shape, ld_device *dev);
ld_tensor *ld_tensor_full(ld_dtype dt, int ndim, const int64_t *shape, double value, ld_device *dev);
ld_tensor *ld_tensor_arange(double start, double stop, double step, ld_dtype dt, ld_device *dev);
/* Copies n elements of `src` (host memory, dtype dt) into a new tensor. */
ld_tensor *ld_tensor_from_data(ld_dtype dt, int ndim, const int64_t *shape, const void *src, ld_device *dev);
/* A contiguous tensor over memory someone else owns (`data`, on device
   dev): no copy; when its storage goes, release(ctx) is called instead of
   freeing data (the owner keeps the memory alive until then). */
ld_tensor *ld_tensor_borrow(ld_dtype dt, int ndim, const int64_t *shape, void *data, ld_device *dev,
                            void (*release)(void *ctx), void *ctx);
ld_tensor *ld_tensor_scalar(float v, ld_device *dev);   /* 0-d float32 */

/* ---- text: ldist has no string dtype; a string (a line of a text file, a
   file name) travels through a dataset as a uint8 [n] host tensor of its
   bytes marked as text (an ld_tensor_ext), which the front ends show as a
   string. Views and arithmetic drop the mark; ld_tensor_mark_text sets it
   on a uint8 vector (copies of text keep it that way). ---- */
ld_tensor *ld_tensor_text(const char *s, size_t n);
int ld_tensor_is_text(const ld_tensor *t);
int ld_tensor_mark_text(ld_tensor *t);          /* LD_OK, or LD_EARG when t is no uint8 vector or has an ext */

/* ---- lost values: a variable whose true values lived elsewhere (a
   parameter server task that died) keeps its stale local copy; the mark,
   on the storage so every view of it shares it, says why. The engine only
   keeps the mark; the front ends refuse every read of a marked tensor
   (lua_bindings/tensor.c) until a restore clears it. ---- */
int ld_tensor_set_lost(ld_tensor *t, const char *why);   /* why NULL clears; LD_OK or LD_ENOMEM */
const char *ld_tensor_lost(const ld_tensor *t);          /* the mark, or NULL */

/* ---- random numbers: one seeded, reproducible generator (per thread state) ---- */
typedef struct ld_rng { uint64_t s[4]; } ld_rng;
void ld_rng_seed(ld_rng *r, uint64_t seed);
uint64_t ld_rng_next(ld_rng *r);
double ld_rng_uniform(ld_rng *r);               /* [0, 1) */
double ld_rng_normal(ld_rng *r);
ld_rng *ld_global_rng(void);                    /* the generator ldist.seed() resets, or the redirect's */
/* While fn is set, ld_global_rng() returns fn() instead (NULL: the seeded
   generator again). A strategy gives each replica its stream this way
   (ld_strategy.h). */
void ld_rng_redirect(ld_rng *(*fn)(void));
ld_tensor *ld_tensor_uniform(int ndim, const int64_t *shape, float lo, float hi, ld_rng *r, ld_device *dev);
ld_tensor *ld_tensor_normal(int ndim, const int64_t *shape, float mean, float std, ld_rng *r, ld_device *dev);

/* ---- inspection ---- */
int64_t ld_tensor_numel(const ld_tensor *t);
int ld_tensor_is_contiguous(const ld_tensor *t);
int ld_same_shape(const ld_tensor *a, const ld_tensor *b);
/* "3x4" into buf; returns buf. LD_SHAPE_STR_MAX holds any shape. */
#define LD_SHAPE_STR_MAX (LD_MAX_DIMS * 21 + 1)
char *ld_shape_str(const ld_tensor *t, char *buf, size_t n);
char *ld_shape_fmt(int ndim, const int64_t *shape, char *buf, size_t n);
/* The element count of a shape given by a user; LD_ESHAPE naming the shape
   when a dimension is negative or a product of dimensions overflows int64. */
int ld_shape_numel(int ndim, const int64_t *shape, int64_t *numel);
/* A reshape target: at most one -1 (its index in *infer, else -1), no other
   negative entry, and *known = the product of the others, checked. */
int ld_shape_target(int ndim, const int64_t *shape, int *infer, int64_t *known);
/* Host pointer to the first element; NULL + error when not on the host. */
void *ld_tensor_data(const ld_tensor *t);
/* The same without waiting for the device's queued kernels: only for memory
   no queued kernel writes (a tensor just created, or one synchronized since
   its last write). */
void *ld_tensor_data_unsynced(const ld_tensor *t);
/* Element i (flat, row-major over the view) as a double; host only. */
double ld_tensor_get_flat(const ld_tensor *t, int64_t i);
/* Out-of-range values are refused (LD_EARG naming the value), never wrapped:
   an integer dtype takes a finite value whose integer part fits (the fraction
   is dropped, as int(2.7) does); float32 takes any value (past its range it
   is inf, IEEE 754's rule). The _int forms keep 64-bit integers exact. */
int ld_tensor_set_flat(ld_tensor *t, int64_t i, double v);
int ld_tensor_set_flat_int(ld_tensor *t, int64_t i, int64_t v);
int64_t ld_tensor_get_flat_int(const ld_tensor *t, int64_t i);   /* float32: truncated, saturated */
/* The same for a host tensor just created, that no queued kernel uses yet
   (filling it from a Lua table): no wait, and no other kernel's error taken. */
int ld_tensor_init_flat(ld_tensor *t, int64_t i, double v);
int ld_tensor_init_flat_int(ld_tensor *t, int64_t i, int64_t v);
int ld_dtype_check_value(ld_dtype dt, double v);
int ld_dtype_check_int(ld_dtype dt, int64_t v);
/* Value of a one-element tensor. */
int ld_tensor_item(const ld_tensor *t, double *out);

/* ---- views: share storage ---- */
ld_tensor *ld_reshape(ld_tensor *t, int ndim, const int64_t *shape);  /* one -1 allowed; copies if not viewable */
ld_tensor *ld_transpose(ld_tensor *t, int d0, int d1);
ld_tensor *ld_permute(ld_tensor *t, const int *perm);
ld_tensor *ld_slice(ld_tensor *t, int dim, int64_t start, int64_t stop, int64_t step); /* [start, stop) */
/* ld_slice's bounds along an axis of size n, as Python's: negative ones from
   the end, then clamped to [0, n] with stop >= start */
void ld_slice_bounds(int64_t n, int64_t *start, int64_t *stop);
ld_tensor *ld_select(ld_tensor *t, int dim, int64_t index);   /* drops dim */
ld_tensor *ld_contiguous(ld_tensor *t);  /* t itself (retained) when already contiguous */
ld_tensor *ld_clone(const ld_tensor *t);
/* A float out of an integer dtype's range becomes the nearest bound, NaN 0:
   defined, never what a user means, so values a user converts are checked
   first with ld_cast_check (LD_EARG naming the first value that does not fit). */
ld_tensor *ld_cast(const ld_tensor *t, ld_dtype dt);
int ld_cast_check(ld_tensor *t, ld_dtype dt);
ld_tensor *ld_to_device(ld_tensor *t, ld_device *dev);
/* A contiguous copy of t in host memory (t itself, retained, when it is one
   already): what data pipelines and files read row by row. */
ld_tensor *ld_host_contiguous(ld_tensor *t);
/* Read t's values without waiting for the kernels queued after it: the copy
   to host memory is queued behind the kernels that write t (on a device that
   queues; elsewhere it is read at once). Wait returns the values (t's dtype,
   row-major), valid until free; NULL + error when a queued kernel of that
   device found bad input (ld_device_take_error). */
typedef struct ld_pending_read ld_pending_read;
ld_pending_read *ld_tensor_read_async(ld_tensor *t);
const void *ld_pending_read_wait(ld_pending_read *r, ld_dtype *dtype, int64_t *numel);
void ld_pending_read_free(ld_pending_read *r);
/* dst[...] = src, broadcasting src; shapes must be broadcast-compatible. */
int ld_copy_into(ld_tensor *dst, const ld_tensor *src);
ld_tensor *ld_concat(ld_tensor *const *ts, int n, int dim);

#endif
