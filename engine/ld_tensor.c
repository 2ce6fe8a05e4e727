/* ld_tensor.c - storage, creation, views, copies. Kernels live in the backends. */
#include "ld_tensor.h"
#include "ld_device.h"
#include "ld_autograd.h"
#include "ld_executor.h"
#include "ld_half.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ dtypes */
static const size_t dt_size[] = {4, 4, 8, 1, 2, 2};
static const char *const dt_name[] = {"float32", "int32", "int64", "uint8", "float16", "bfloat16"};
_Static_assert(sizeof dt_size / sizeof *dt_size == LD_DTYPE_COUNT, "a size for each dtype");
_Static_assert(sizeof dt_name / sizeof *dt_name == LD_DTYPE_COUNT, "a name for each dtype");
size_t ld_dtype_size(ld_dtype dt) { return dt_size[dt]; }
const char *ld_dtype_name(ld_dtype dt) { return dt < LD_DTYPE_COUNT ? dt_name[dt] : "?"; }
int ld_dtype_from_name(const char *name, ld_dtype *out) {
    for (int i = 0; i < LD_DTYPE_COUNT; i++)
        if (!strcmp(name, dt_name[i])) { *out = (ld_dtype)i; return LD_OK; }
    if (!strcmp(name, "float")) { *out = LD_F32; return LD_OK; }
    if (!strcmp(name, "int")) { *out = LD_I64; return LD_OK; }
    if (!strcmp(name, "half")) { *out = LD_F16; return LD_OK; }   /* torch.half */
    return ld_fail(LD_EARG, "unknown dtype '%s' (float32, float16, bfloat16, int32, int64 or uint8)", name);
}

/* ------------------------------------------------------------------ lifetime */
static ld_storage *storage_new(size_t nbytes, ld_device *dev) {
    ld_storage *s = calloc(1, sizeof *s);
    if (!s) { ld_fail(LD_ENOMEM, "out of memory"); return NULL; }
    s->refcount = 1;
    s->device = dev;
    s->nbytes = nbytes;
    s->data = ld_device_alloc(dev, nbytes ? nbytes : 1);
    if (!s->data) { free(s); return NULL; }
    return s;
}

static void storage_release(ld_storage *s) {
    if (!s) return;
    if (__atomic_sub_fetch(&s->refcount, 1, __ATOMIC_ACQ_REL) == 0) {
        if (s->release) s->release(s->release_ctx);
        else ld_device_free(s->device, s->data, s->nbytes ? s->nbytes : 1);
        free(s->lost);
        free(s);
    }
}

ld_tensor *ld_tensor_retain(ld_tensor *t) {
    if (t) __atomic_add_fetch(&t->refcount, 1, __ATOMIC_RELAXED);
    return t;
}

void ld_tensor_release(ld_tensor *t) {
    if (!t) return;
    if (__atomic_sub_fetch(&t->refcount, 1, __ATOMIC_ACQ_REL) == 0) {
        storage_release(t->storage);
        if (t->grad_fn) ld_node_release(t->grad_fn);
        if (t->ext) t->ext->free(t->ext);
        ld_pending_free(t->pending);
        ld_tensor_release(t->keras_mask);
        free(t->name);
        free(t);
    }
}

void ld_tensor_set_mask(ld_tensor *t, ld_tensor *mask) {
    if (t->keras_mask == mask) return;
    ld_tensor *old = t->keras_mask;
    t->keras_mask = mask ? ld_tensor_retain(mask) : NULL;
    ld_tensor_release(old);
}

void ld_pending_free(struct ld_pending *p) {
    if (!p) return;
    ld_tensor_release(p->a);
    ld_tensor_release(p->b);
    free(p);
}

void ld_tensor_materialize(ld_tensor *t) {
    struct ld_pending *p = t ? t->pending : NULL;
    if (!p) return;
    t->pending = NULL;
    ld_device *d = t->storage->device;
    int64_t k = p->a->shape[0], m = p->a->shape[1], n = p->b->shape[1];
    d->backend->gemm(d, 1, 0, m, n, k, 1.0f, (const float *)p->a->storage->data + p->a->offset, m < 1 ? 1 : m,
                     (const float *)p->b->storage->data + p->b->offset, n < 1 ? 1 : n, 0.0f,
                     (float *)t->storage->data + t->offset, n < 1 ? 1 : n);
    ld_pending_free(p);
}

/* Row-major strides for t's shape. A zero dimension makes the element count
   0 but not the strides of the axes before it, so every product is checked
   (ld_shape_numel refuses those shapes before a tensor is made). */
static int set_contiguous_strides(ld_tensor *t) {
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        t->strides[i] = s;
        if (t->shape[i] && __builtin_mul_overflow(s, t->shape[i], &s)) {
            char b[LD_SHAPE_STR_MAX];
            return ld_fail(LD_ESHAPE, "shape %s is too large (its size overflows int64)",
                           ld_shape_fmt(t->ndim, t->shape, b, sizeof b));
        }
    }
    return LD_OK;
}

static uint64_t next_serial(void) {
    static uint64_t serial;
    return __atomic_add_fetch(&serial, 1, __ATOMIC_RELAXED);
}

/* A tensor header over existing storage (retained). */
static ld_tensor *view_of(ld_tensor *base) {
    ld_tensor_materialize(base);   /* a view reads what the product will write */
    ld_tensor *t = calloc(1, sizeof *t);
    if (!t) { ld_fail(LD_ENOMEM, "out of memory"); return NULL; }
    /* every field but the reference count, which an executor may be
       decrementing at this moment (a plain copy of it is a race: TSan) */
    _Static_assert(offsetof(ld_tensor, refcount) == 0, "refcount comes first");
    memcpy((char *)t + sizeof t->refcount, (const char *)base + sizeof base->refcount,
           sizeof *t - sizeof t->refcount);
    t->refcount = 1;
    t->requires_grad = 0;
    t->grad_fn = NULL;
    t->name = NULL;
    t->ext = NULL;
    t->pending = NULL;
    t->keras_mask = NULL;
    t->serial = next_serial();
    __atomic_add_fetch(&base->storage->refcount, 1, __ATOMIC_RELAXED);
    return t;
}

/* ------------------------------------------------------------------ shapes */
char *ld_shape_fmt(int ndim, const int64_t *shape, char *buf, size_t n) {
    size_t k = 0;
    if (n == 0) return buf;
    buf[0] = 0;
    if (ndim == 0) { snprintf(buf, n, "scalar"); return buf; }
    for (int i = 0; i < ndim && k < n; i++) {
        int w = snprintf(buf + k, n - k, i ? "x%lld" : "%lld", (long long)shape[i]);
        if (w < 0) break;
        k += (size_t)w;
    }
    return buf;
}

/* The element count, and the product of the nonzero dimensions (which sets
   the strides), must both fit int64: a [0, 2^53, 2^53] tensor is refused as
   NumPy refuses it. */
int ld_shape_numel(int ndim, const int64_t *shape, int64_t *numel) {
    char b[LD_SHAPE_STR_MAX];
    if (ndim < 0 || ndim > LD_MAX_DIMS)
        return ld_fail(LD_ESHAPE, "tensors have at most %d dimensions, got %d", LD_MAX_DIMS, ndim);
    int64_t n = 1, nonzero = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return ld_fail(LD_ESHAPE, "negative dimension %lld in shape %s", (long long)shape[i],
                           ld_shape_fmt(ndim, shape, b, sizeof b));
        if (shape[i] && __builtin_mul_overflow(nonzero, shape[i], &nonzero))
            return ld_fail(LD_ESHAPE, "shape %s is too large (its size overflows int64)",
                           ld_shape_fmt(ndim, shape, b, sizeof b));
        n = shape[i] ? n * shape[i] : 0;   /* n <= nonzero: no overflow */
    }
    *numel = n;
    return LD_OK;
}

int ld_shape_target(int ndim, const int64_t *shape, int *infer, int64_t *known) {
    char b[LD_SHAPE_STR_MAX];
    int64_t k = 1, nonzero = 1;   /* as in ld_shape_numel: a zero hides no overflow */
    *infer = -1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == -1) {
            if (*infer >= 0) return ld_fail(LD_ESHAPE, "only one dimension can be -1");
            *infer = i;
        } else if (shape[i] < 0) {
            return ld_fail(LD_ESHAPE, "negative dimension %lld in shape %s", (long long)shape[i],
                           ld_shape_fmt(ndim, shape, b, sizeof b));
        } else if (shape[i] && __builtin_mul_overflow(nonzero, shape[i], &nonzero)) {
            return ld_fail(LD_ESHAPE, "shape %s is too large (its size overflows int64)",
                           ld_shape_fmt(ndim, shape, b, sizeof b));
        } else {
            k = shape[i] ? k * shape[i] : 0;   /* k <= nonzero */
        }
    }
    *known = k;
    return LD_OK;
}

static int check_shape(int ndim, const int64_t *shape, int64_t *numel) {
    if (ld_shape_numel(ndim, shape, numel)) return ld_error_status();
    int64_t bytes;
    if (__builtin_mul_overflow(*numel, (int64_t)16, &bytes)) {
        char b[LD_SHAPE_STR_MAX];
        return ld_fail(LD_ENOMEM, "tensor too large (shape %s)", ld_shape_fmt(ndim, shape, b, sizeof b));
    }
    return LD_OK;
}

ld_tensor *ld_tensor_empty(ld_dtype dt, int ndim, const int64_t *shape, ld_device *dev) {
    int64_t n = 0;
    if (check_shape(ndim, shape, &n)) return NULL;
    if (!dev) dev = ld_device_cpu();
    ld_tensor *t = calloc(1, sizeof *t);
    if (!t) { ld_fail(LD_ENOMEM, "out of memory"); return NULL; }
    t->refcount = 1;
    t->serial = next_serial();
    t->dtype = dt;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    if (set_contiguous_strides(t)) { free(t); return NULL; }
    t->storage = storage_new((size_t)n * ld_dtype_size(dt), dev);
    if (!t->storage) { free(t); return NULL; }
    return t;
}

ld_tensor *ld_tensor_borrow(ld_dtype dt, int ndim, const int64_t *shape, void *data, ld_device *dev,
                            void (*release)(void *ctx), void *ctx) {
    int64_t n = 0;
    if (check_shape(ndim, shape, &n)) return NULL;
    if (!dev) dev = ld_device_cpu();
    ld_tensor *t = calloc(1, sizeof *t);
    ld_storage *s = calloc(1, sizeof *s);
    if (!t || !s) { free(t); free(s); ld_fail(LD_ENOMEM, "out of memory"); return NULL; }
    t->refcount = 1;
    t->serial = next_serial();
    t->dtype = dt;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    if (set_contiguous_strides(t)) { free(t); free(s); return NULL; }
    s->refcount = 1;
    s->device = dev;
    s->nbytes = (size_t)n * ld_dtype_size(dt);
    s->data = data;
    s->release = release;
    s->release_ctx = ctx;
    t->storage = s;
    return t;
}

ld_tensor *ld_tensor_full(ld_dtype dt, int ndim, const int64_t *shape, double v, ld_device *dev) {
    if (ld_dtype_check_value(dt, v)) return NULL;
    ld_tensor *t = ld_tensor_empty(dt, ndim, shape, dev);
    if (!t) return NULL;
    const ld_backend *be = t->storage->device->backend;
    be->fill(t->storage->device, t->storage->data, dt, ld_tensor_numel(t), v);
    return t;
}

ld_tensor *ld_tensor_zeros(ld_dtype dt, int ndim, const int64_t *shape, ld_device *dev) {
    return ld_tensor_full(dt, ndim, shape, 0.0, dev);
}

ld_tensor *ld_tensor_arange(double start, double stop, double step, ld_dtype dt, ld_device *dev) {
    if (step == 0) { ld_fail(LD_EARG, "arange step must not be zero"); return NULL; }
    double nd = ceil((stop - start) / step);
    if (nd != nd || nd >= 0x1p62) {   /* a NaN bound, or more elements than memory holds (inf too) */
        if (nd != nd) ld_fail(LD_EARG, "arange: a bound or the step is nan");
        else ld_fail(LD_EARG, "arange(%g, %g, %g) has too many elements", start, stop, step);
        return NULL;
    }
    int64_t n = nd > 0 ? (int64_t)nd : 0;
    ld_tensor *t = ld_tensor_empty(dt, 1, &n, NULL);
    if (!t) return NULL;
    for (int64_t i = 0; i < n; i++)
        if (ld_tensor_init_flat(t, i, start + (double)i * step)) { ld_tensor_release(t); return NULL; }
    if (dev && dev != ld_device_cpu()) {
        ld_tensor *d = ld_to_device(t, dev);
        ld_tensor_release(t);
        return d;
    }
    return t;
}

ld_tensor *ld_tensor_from_data(ld_dtype dt, int ndim, const int64_t *shape, const void *src, ld_device *dev) {
    ld_tensor *t = ld_tensor_empty(dt, ndim, shape, dev);
    if (!t) return NULL;
    ld_device *d = t->storage->device;
    if (d->backend->from_host(d, t->storage->data, src, (size_t)ld_tensor_numel(t) * ld_dtype_size(dt))) {
        ld_tensor_release(t);
        return NULL;
    }
    return t;
}

ld_tensor *ld_tensor_scalar(float v, ld_device *dev) {
    return ld_tensor_full(LD_F32, 0, NULL, v, dev);
}

/* ------------------------------------------------------------------ text */
static void text_free(ld_tensor_ext *e) { free(e); }

int ld_tensor_set_lost(ld_tensor *t, const char *why) {
    char *m = NULL;
    if (why && !(m = strdup(why))) return ld_fail(LD_ENOMEM, "out of memory");
    free(t->storage->lost);
    t->storage->lost = m;
    return LD_OK;
}
const char *ld_tensor_lost(const ld_tensor *t) { return t && t->storage ? t->storage->lost : NULL; }

int ld_tensor_is_text(const ld_tensor *t) { return t && t->ext && t->ext->free == text_free; }

int ld_tensor_mark_text(ld_tensor *t) {
    if (ld_tensor_is_text(t)) return LD_OK;
    if (!t || t->dtype != LD_U8 || t->ndim != 1 || t->ext)
        return ld_fail(LD_EARG, "only a uint8 vector can hold text");
    ld_tensor_ext *e = malloc(sizeof *e);
    if (!e) return ld_fail(LD_ENOMEM, "out of memory");
    e->free = text_free;
    t->ext = e;
    return LD_OK;
}

ld_tensor *ld_tensor_text(const char *s, size_t n) {
    int64_t shape[1] = {(int64_t)n};
    ld_tensor *t = ld_tensor_from_data(LD_U8, 1, shape, s, NULL);
    if (t && ld_tensor_mark_text(t) != LD_OK) { ld_tensor_release(t); return NULL; }
    return t;
}

/* ------------------------------------------------------------------ random */
static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
void ld_rng_seed(ld_rng *r, uint64_t seed) {
    /* splitmix64 to fill the xoshiro256** state */
    for (int i = 0; i < 4; i++) {
        uint64_t z = (seed += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        r->s[i] = z ^ (z >> 31);
    }
}
uint64_t ld_rng_next(ld_rng *r) {
    uint64_t *s = r->s, res = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3]; s[2] ^= t; s[3] = rotl(s[3], 45);
    return res;
}
double ld_rng_uniform(ld_rng *r) { return (double)(ld_rng_next(r) >> 11) * 0x1.0p-53; }
double ld_rng_normal(ld_rng *r) {
    double u1 = ld_rng_uniform(r), u2 = ld_rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}
static ld_rng global_rng;
static int global_rng_ready;
static ld_rng *(*rng_redirect)(void);
ld_rng *ld_global_rng(void) {
    if (rng_redirect) return rng_redirect();
    if (!global_rng_ready) { ld_rng_seed(&global_rng, 42); global_rng_ready = 1; }
    return &global_rng;
}
void ld_rng_redirect(ld_rng *(*fn)(void)) { rng_redirect = fn; }

static ld_tensor *random_tensor(int ndim, const int64_t *shape, float a, float b, int normal,
                                ld_rng *r, ld_device *dev) {
    ld_tensor *t = ld_tensor_empty(LD_F32, ndim, shape, NULL);
    if (!t) return NULL;
    if (!r) r = ld_global_rng();
    float *p = t->storage->data;
    int64_t n = ld_tensor_numel(t);
    for (int64_t i = 0; i < n; i++)
        p[i] = normal ? (float)(a + b * ld_rng_normal(r)) : (float)(a + (b - a) * ld_rng_uniform(r));
    if (dev && dev != ld_device_cpu()) {
        ld_tensor *d = ld_to_device(t, dev);
        ld_tensor_release(t);
        return d;
    }
    return t;
}
ld_tensor *ld_tensor_uniform(int ndim, const int64_t *shape, float lo, float hi, ld_rng *r, ld_device *dev) {
    return random_tensor(ndim, shape, lo, hi, 0, r, dev);
}
ld_tensor *ld_tensor_normal(int ndim, const int64_t *shape, float mean, float std, ld_rng *r, ld_device *dev) {
    return random_tensor(ndim, shape, mean, std, 1, r, dev);
}

/* ------------------------------------------------------------------ inspection */
int64_t ld_tensor_numel(const ld_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

int ld_tensor_is_contiguous(const ld_tensor *t) {
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->strides[i] != s) return 0;
        s *= t->shape[i];
    }
    return 1;
}

int ld_same_shape(const ld_tensor *a, const ld_tensor *b) {
    if (a->ndim != b->ndim) return 0;
    for (int i = 0; i < a->ndim; i++) if (a->shape[i] != b->shape[i]) return 0;
    return 1;
}

char *ld_shape_str(const ld_tensor *t, char *buf, size_t n) {
    return ld_shape_fmt(t->ndim, t->shape, buf, n);
}

void *ld_tensor_data(const ld_tensor *t) {
    if (!ld_device_is_host(t->storage->device)) {
        ld_fail(LD_EDEVICE, "tensor is on %s; move it with :cpu() first", t->storage->device->name);
        return NULL;
    }
    ld_device_synchronize(t->storage->device);
    if (ld_device_take_error(t->storage->device)) return NULL;   /* bad input a queued kernel found */
    return (char *)t->storage->data + t->offset * (int64_t)ld_dtype_size(t->dtype);
}

void *ld_tensor_data_unsynced(const ld_tensor *t) {
    if (!ld_device_is_host(t->storage->device)) return ld_tensor_data(t);
    return (char *)t->storage->data + t->offset * (int64_t)ld_dtype_size(t->dtype);
}

static int64_t flat_offset(const ld_tensor *t, int64_t i) {
    int64_t off = t->offset;
    for (int d = t->ndim - 1; d >= 0; d--) {
        int64_t s = t->shape[d];
        off += (i % s) * t->strides[d];
        i /= s;
    }
    return off;
}

static double read_elem(const void *base, ld_dtype dt, int64_t off) {
    switch (dt) {
    case LD_F32: return ((const float *)base)[off];
    case LD_I32: return ((const int32_t *)base)[off];
    case LD_I64: return (double)((const int64_t *)base)[off];
    case LD_U8: return ((const uint8_t *)base)[off];
    case LD_F16: return ld_f16_to_f32(((const uint16_t *)base)[off]);
    case LD_BF16: return ld_bf16_to_f32(((const uint16_t *)base)[off]);
    default: return 0;
    }
}

double ld_tensor_get_flat(const ld_tensor *t, int64_t i) {
    if (!ld_device_is_host(t->storage->device)) {
        double v = 0;
        ld_tensor *c = ld_to_device((ld_tensor *)t, ld_device_cpu());
        if (c) { v = ld_tensor_get_flat(c, i); ld_tensor_release(c); }
        return v;
    }
    ld_device_synchronize(t->storage->device);
    return read_elem(t->storage->data, t->dtype, flat_offset(t, i));
}

/* ------------------------------------------------------------------ values */
/* The largest value of each integer dtype plus one, exactly (a power of two),
   and the smallest; float32 has no bound here. */
/* The integer dtypes' bounds; hi + 1 is a power of two, exact as a double. */
static const int64_t int_lo[] = {0, INT32_MIN, INT64_MIN, 0, 0, 0}, int_hi[] = {0, INT32_MAX, INT64_MAX, UINT8_MAX, 0, 0};

int ld_dtype_check_value(ld_dtype dt, double v) {
    if (ld_dtype_is_float(dt)) return LD_OK;   /* beyond the float's range: inf, IEEE 754's rule */
    if (v != v) return ld_fail(LD_EARG, "cannot convert nan to %s", ld_dtype_name(dt));
    if (v == INFINITY || v == -INFINITY)
        return ld_fail(LD_EARG, "cannot convert %s to %s", v > 0 ? "inf" : "-inf", ld_dtype_name(dt));
    double w = trunc(v);   /* the fraction is dropped, as int(2.7) does */
    if (w < (double)int_lo[dt] || w >= (double)int_hi[dt] + 1.0)
        return ld_fail(LD_EARG, w == v && fabs(v) < 1e21 ? "value %.0f is out of range for %s (%lld to %lld)"
                                                         : "value %.17g is out of range for %s (%lld to %lld)",
                       v, ld_dtype_name(dt), (long long)int_lo[dt], (long long)int_hi[dt]);
    return LD_OK;
}

int ld_dtype_check_int(ld_dtype dt, int64_t v) {
    if (ld_dtype_is_float(dt)) return LD_OK;
    if (v < int_lo[dt] || v > int_hi[dt])
        return ld_fail(LD_EARG, "value %lld is out of range for %s (%lld to %lld)", (long long)v,
                       ld_dtype_name(dt), (long long)int_lo[dt], (long long)int_hi[dt]);
    return LD_OK;
}

/* Where element i of t lives: after t's device has run what it queued
   (and handed over a kernel's error), or at once for a tensor nothing else
   has seen yet (the _init forms). */
static void *elem_base(ld_tensor *t, int synced) {
    return synced ? ld_tensor_data(t) : ld_tensor_data_unsynced(t);
}

static int store_double(ld_tensor *t, int64_t i, double v, int synced) {
    if (ld_dtype_check_value(t->dtype, v)) return ld_error_status();
    if (!elem_base(t, synced)) return ld_error_status();
    int64_t off = flat_offset(t, i);
    void *b = t->storage->data;
    switch (t->dtype) {
    case LD_F32: ((float *)b)[off] = (float)v; break;
    case LD_I32: ((int32_t *)b)[off] = (int32_t)v; break;
    case LD_I64: ((int64_t *)b)[off] = (int64_t)v; break;
    case LD_U8: ((uint8_t *)b)[off] = (uint8_t)v; break;
    case LD_F16: ((uint16_t *)b)[off] = ld_f32_to_f16((float)v); break;
    case LD_BF16: ((uint16_t *)b)[off] = ld_f32_to_bf16((float)v); break;
    default: break;
    }
    return LD_OK;
}

static int store_int(ld_tensor *t, int64_t i, int64_t v, int synced) {
    if (ld_dtype_is_float(t->dtype)) return store_double(t, i, (double)v, synced);
    if (ld_dtype_check_int(t->dtype, v)) return ld_error_status();
    if (!elem_base(t, synced)) return ld_error_status();
    int64_t off = flat_offset(t, i);
    void *b = t->storage->data;
    switch (t->dtype) {
    case LD_I32: ((int32_t *)b)[off] = (int32_t)v; break;
    case LD_I64: ((int64_t *)b)[off] = v; break;
    case LD_U8: ((uint8_t *)b)[off] = (uint8_t)v; break;
    default: break;
    }
    return LD_OK;
}

int ld_tensor_set_flat(ld_tensor *t, int64_t i, double v) { return store_double(t, i, v, 1); }
int ld_tensor_set_flat_int(ld_tensor *t, int64_t i, int64_t v) { return store_int(t, i, v, 1); }
int ld_tensor_init_flat(ld_tensor *t, int64_t i, double v) { return store_double(t, i, v, 0); }
int ld_tensor_init_flat_int(ld_tensor *t, int64_t i, int64_t v) { return store_int(t, i, v, 0); }

int64_t ld_tensor_get_flat_int(const ld_tensor *t, int64_t i) {
    if (t->dtype != LD_I64) {
        double v = ld_tensor_get_flat(t, i);
        /* float32: truncated and saturated, NaN as 0 (what the caller asked for is an integer) */
        if (v != v) return 0;
        if (v >= 0x1p63) return INT64_MAX;
        if (v < -0x1p63) return INT64_MIN;
        return (int64_t)v;
    }
    if (!ld_device_is_host(t->storage->device)) {
        int64_t v = 0;
        ld_tensor *c = ld_to_device((ld_tensor *)t, ld_device_cpu());
        if (c) { v = ld_tensor_get_flat_int(c, i); ld_tensor_release(c); }
        return v;
    }
    ld_device_synchronize(t->storage->device);
    return ((const int64_t *)t->storage->data)[flat_offset(t, i)];
}

int ld_tensor_item(const ld_tensor *t, double *out) {
    if (ld_tensor_numel(t) != 1) {
        char b[64];
        return ld_fail(LD_ESHAPE, "item() needs a tensor with one element, got shape %s",
                       ld_shape_str(t, b, sizeof b));
    }
    if (!ld_device_is_host(t->storage->device)) {   /* a device's: the copy reports its kernels' errors */
        ld_tensor *c = ld_to_device((ld_tensor *)t, ld_device_cpu());
        int st = c ? LD_OK : (int)ld_error_status();
        if (!c) return st ? st : (int)ld_fail(LD_EDEVICE, "item(): the read failed");
        *out = ld_tensor_get_flat(c, 0);
        ld_tensor_release(c);
        return LD_OK;
    }
    *out = ld_tensor_get_flat(t, 0);   /* waits for the kernels queued on t's device */
    /* a queued kernel's error (an out-of-range label) is reported by the next
       read of tensor memory: this one, as ld_tensor_data's */
    return ld_device_take_error(t->storage->device);
}

/* ------------------------------------------------------------------ views */
static int norm_dim(const ld_tensor *t, int *d, int extra) {
    int n = t->ndim + extra;
    if (*d < 0) *d += n;
    if (*d < 0 || *d >= n)
        return ld_fail(LD_EARG, "dimension out of range (tensor has %d dimensions)", t->ndim);
    return LD_OK;
}

ld_tensor *ld_reshape(ld_tensor *t, int ndim, const int64_t *shape) {
    int64_t s[LD_MAX_DIMS], known, n = ld_tensor_numel(t);
    int infer;
    if (ndim < 0 || ndim > LD_MAX_DIMS) { ld_fail(LD_ESHAPE, "bad number of dimensions %d", ndim); return NULL; }
    if (ld_shape_target(ndim, shape, &infer, &known)) return NULL;
    for (int i = 0; i < ndim; i++) s[i] = shape[i];
    if (infer >= 0) {
        if (known == 0 || n % known) goto bad;
        s[infer] = n / known;
        known = n;
    }
    if (known != n) goto bad;
    ld_tensor *src = ld_contiguous(t);
    if (!src) return NULL;
    ld_tensor *v = view_of(src);
    ld_tensor_release(src);
    if (!v) return NULL;
    v->ndim = ndim;
    for (int i = 0; i < ndim; i++) v->shape[i] = s[i];
    if (set_contiguous_strides(v)) { ld_tensor_release(v); return NULL; }
    return v;
bad:;
    char b1[LD_SHAPE_STR_MAX], b2[LD_SHAPE_STR_MAX];
    ld_fail(LD_ESHAPE, "cannot reshape %s (%lld elements) into %s", ld_shape_str(t, b1, sizeof b1),
            (long long)n, ld_shape_fmt(ndim, shape, b2, sizeof b2));
    return NULL;
}

ld_tensor *ld_transpose(ld_tensor *t, int d0, int d1) {
    if (norm_dim(t, &d0, 0) || norm_dim(t, &d1, 0)) return NULL;
    ld_tensor *v = view_of(t);
    if (!v) return NULL;
    int64_t a = v->shape[d0]; v->shape[d0] = v->shape[d1]; v->shape[d1] = a;
    a = v->strides[d0]; v->strides[d0] = v->strides[d1]; v->strides[d1] = a;
    return v;
}

ld_tensor *ld_permute(ld_tensor *t, const int *perm) {
    int seen[LD_MAX_DIMS] = {0};
    for (int i = 0; i < t->ndim; i++) {
        if (perm[i] < 0 || perm[i] >= t->ndim || seen[perm[i]]) {
            ld_fail(LD_EARG, "permutation is not a permutation of 0..%d", t->ndim - 1);
            return NULL;
        }
        seen[perm[i]] = 1;
    }
    ld_tensor *v = view_of(t);
    if (!v) return NULL;
    for (int i = 0; i < t->ndim; i++) { v->shape[i] = t->shape[perm[i]]; v->strides[i] = t->strides[perm[i]]; }
    return v;
}

void ld_slice_bounds(int64_t n, int64_t *start, int64_t *stop) {
    if (*start < 0) *start += n;
    if (*stop < 0) *stop += n;
    if (*start < 0) *start = 0;
    if (*stop > n) *stop = n;
    if (*start > n) *start = n;
    if (*stop < *start) *stop = *start;
}

ld_tensor *ld_slice(ld_tensor *t, int dim, int64_t start, int64_t stop, int64_t step) {
    if (norm_dim(t, &dim, 0)) return NULL;
    int64_t n = t->shape[dim];
    if (step <= 0) { ld_fail(LD_EARG, "slice step must be positive"); return NULL; }
    ld_slice_bounds(n, &start, &stop);
    ld_tensor *v = view_of(t);
    if (!v) return NULL;
    v->offset += start * t->strides[dim];
    v->shape[dim] = (stop - start + step - 1) / step;
    v->strides[dim] *= step;
    return v;
}

ld_tensor *ld_select(ld_tensor *t, int dim, int64_t index) {
    if (norm_dim(t, &dim, 0)) return NULL;
    int64_t n = t->shape[dim];
    if (index < 0) index += n;
    if (index < 0 || index >= n) {
        ld_fail(LD_EARG, "index %lld out of range for dimension %d of size %lld",
                (long long)index, dim, (long long)n);
        return NULL;
    }
    ld_tensor *v = view_of(t);
    if (!v) return NULL;
    v->offset += index * t->strides[dim];
    for (int i = dim; i < t->ndim - 1; i++) { v->shape[i] = t->shape[i + 1]; v->strides[i] = t->strides[i + 1]; }
    v->ndim--;
    return v;
}

/* A contiguous copy of t in dtype dt (on t's device). */
static ld_tensor *copy_as(const ld_tensor *t, ld_dtype dt) {
    ld_device *d = t->storage->device;
    ld_tensor *c = ld_tensor_empty(dt, t->ndim, t->shape, d);
    if (!c) return NULL;
    d->backend->copy_strided(d, c->storage->data, dt,
                             (char *)t->storage->data + t->offset * (int64_t)ld_dtype_size(t->dtype),
                             t->dtype, t->ndim, t->shape, t->strides);
    return c;
}

ld_tensor *ld_contiguous(ld_tensor *t) {
    if (ld_tensor_is_contiguous(t)) return ld_tensor_retain(t);
    return copy_as(t, t->dtype);
}

ld_tensor *ld_clone(const ld_tensor *t) { return copy_as(t, t->dtype); }

ld_tensor *ld_cast(const ld_tensor *t, ld_dtype dt) { return copy_as(t, dt); }

int ld_cast_check(ld_tensor *t, ld_dtype dt) {
    if (ld_dtype_is_float(dt) || dt == t->dtype || (dt == LD_I64 && !ld_dtype_is_float(t->dtype)))
        return LD_OK;   /* every value fits (a float out of range becomes inf) */
    ld_tensor *h = ld_to_device(t, ld_device_cpu()), *c = h ? ld_contiguous(h) : NULL;
    ld_tensor_release(h);
    const void *p = c ? ld_tensor_data(c) : NULL;
    if (!p) { ld_tensor_release(c); return ld_error_status(); }
    int64_t n = ld_tensor_numel(c);
    int st = LD_OK;
    for (int64_t i = 0; i < n && !st; i++) {
        switch (c->dtype) {
        case LD_F32: st = ld_dtype_check_value(dt, ((const float *)p)[i]); break;
        case LD_I32: st = ld_dtype_check_int(dt, ((const int32_t *)p)[i]); break;
        case LD_I64: st = ld_dtype_check_int(dt, ((const int64_t *)p)[i]); break;
        case LD_F16: st = ld_dtype_check_value(dt, ld_f16_to_f32(((const uint16_t *)p)[i])); break;
        case LD_BF16: st = ld_dtype_check_value(dt, ld_bf16_to_f32(((const uint16_t *)p)[i])); break;
        default: st = ld_dtype_check_int(dt, ((const uint8_t *)p)[i]); break;
        }
        if (st) {
            char msg[256];
            snprintf(msg, sizeof msg, "%s", ld_error());
            st = ld_fail(st, "element %lld: %s", (long long)i, msg);
        }
    }
    ld_tensor_release(c);
    return st;
}

typedef struct { ld_storage *keep; void *dst; const void *src; size_t nbytes; } xcopy;
static void run_xcopy(void *ctx, ld_device *d) {
    xcopy *x = ctx;
    memcpy(x->dst, x->src, x->nbytes);
    storage_release(x->keep);
    free(x);
}
/* a destination's wait for a copy in the source's queue (ld_to_device) */
static void run_nothing(void *ctx, ld_device *d) { (void)ctx; (void)d; }

/* ---- reading values without waiting for the whole queue ---- */
struct ld_pending_read {
    ld_device *dev;
    uint64_t fence;     /* an async CPU device's queued copy */
    void *handle;       /* another device's (backend read_begin) */
    size_t nbytes;
    ld_dtype dtype;
    int64_t numel;
    unsigned char data[];
};
typedef struct { ld_pending_read *r; const void *src; } rd_a;
static void run_read(void *ctx, ld_device *d) {
    rd_a *a = ctx;
    memcpy(a->r->data, a->src, a->r->nbytes);
    free(a);
}

ld_pending_read *ld_tensor_read_async(ld_tensor *t) {
    ld_device *d = t->storage->device;
    size_t nb = (size_t)ld_tensor_numel(t) * ld_dtype_size(t->dtype);
    ld_pending_read *r = calloc(1, sizeof *r + (nb ? nb : 1));
    if (!r) { ld_fail(LD_ENOMEM, "out of memory"); return NULL; }
    r->dev = d;
    r->nbytes = nb;
    r->dtype = t->dtype;
    r->numel = ld_tensor_numel(t);
    const void *src = (char *)t->storage->data + t->offset * (int64_t)ld_dtype_size(t->dtype);
    if (ld_device_is_host(d) && ld_device_is_async(d) && ld_tensor_is_contiguous(t)) {
        rd_a *a = malloc(sizeof *a);
        if (!a) { free(r); ld_fail(LD_ENOMEM, "out of memory"); return NULL; }
        *a = (rd_a){r, src};
        /* a queued free of t's memory runs after this copy: the pointer stays valid */
        ld_executor_submit(d, run_read, a, LD_SPAN_NONE);
        r->fence = ld_device_fence(d);
        return r;
    }
    /* a device's queue is in order: a later kernel reusing t's memory runs after the copy */
    if (!ld_device_is_host(d) && d->backend->read_begin && nb && ld_tensor_is_contiguous(t) &&
        (r->handle = d->backend->read_begin(d, src, nb)))
        return r;
    ld_tensor *h = ld_device_is_host(d) ? ld_contiguous(t) : ld_to_device(t, ld_device_cpu());
    const void *p = h ? ld_tensor_data(h) : NULL;
    if (!p) { ld_tensor_release(h); free(r); return NULL; }
    memcpy(r->data, p, nb);
    ld_tensor_release(h);
    return r;
}

const void *ld_pending_read_wait(ld_pending_read *r, ld_dtype *dtype, int64_t *numel) {
    ld_device_wait_fence(r->dev, r->fence);
    r->fence = 0;
    int st = LD_OK;
    if (r->handle) {
        st = r->dev->backend->read_end(r->dev, r->handle, r->data, r->nbytes, 1);
        r->handle = NULL;
    }
    if (dtype) *dtype = r->dtype;
    if (numel) *numel = r->numel;
    if (st) return NULL;
    if (ld_device_take_error(r->dev)) return NULL;   /* bad input a queued kernel found */
    return r->data;
}

void ld_pending_read_free(ld_pending_read *r) {
    if (r && r->fence) ld_device_wait_fence(r->dev, r->fence);   /* its copy must not write freed memory */
    if (r && r->handle) r->dev->backend->read_end(r->dev, r->handle, r->data, r->nbytes, 0);
    free(r);
}

ld_tensor *ld_host_contiguous(ld_tensor *t) {
    ld_device *d = t->storage ? t->storage->device : NULL;
    if (d && !ld_device_is_host(d)) {
        ld_tensor *h = ld_to_device(t, ld_device_cpu());
        if (!h) return NULL;
        ld_tensor *c = ld_contiguous(h);
        ld_tensor_release(h);
        return c;
    }
    return ld_contiguous(t);
}

ld_tensor *ld_to_device(ld_tensor *t, ld_device *dev) {
    ld_device *src = t->storage->device;
    if (src == dev) return ld_tensor_retain(t);
    ld_tensor *c = ld_contiguous(t);
    if (!c) return NULL;
    ld_tensor *out = ld_tensor_empty(t->dtype, t->ndim, t->shape, dev);
    if (!out) { ld_tensor_release(c); return NULL; }
    size_t nb = (size_t)ld_tensor_numel(t) * ld_dtype_size(t->dtype);
    const void *p = (char *)c->storage->data + c->offset * (int64_t)ld_dtype_size(c->dtype);
    if (ld_device_is_host(src) && ld_device_is_host(dev) && ld_device_is_async(src)) {
        /* Between two CPU devices, from one that queues: the copy runs in the
           source's queue, after the source's kernels queued so far and before
           any queued later, so an in-place write the source does next (a
           BatchNorm's moving mean, an optimizer's update) cannot change what
           is copied; the source memory is kept until then. A destination that
           queues waits for that point of the source's queue (a fence, not the
           whole queue) before its later kernels read the copy; a synchronous
           one waits for it now. `out` is a fresh block no queued kernel of
           the destination still reads (ld_tensor_empty, not stream-ordered),
           so the source's executor may write it early. As CUDA's copy between
           streams does. */
        xcopy *x = malloc(sizeof *x);
        if (!x) { ld_tensor_release(c); ld_tensor_release(out); ld_fail(LD_ENOMEM, "out of memory"); return NULL; }
        *x = (xcopy){c->storage, out->storage->data, p, nb};
        __atomic_add_fetch(&c->storage->refcount, 1, __ATOMIC_RELAXED);
        ld_executor_submit(src, run_xcopy, x, LD_SPAN_COMPUTE);
        uint64_t copied = ld_device_fence(src);
        if (ld_device_is_async(dev)) ld_executor_submit_after(dev, src, copied, run_nothing, NULL);
        else ld_device_wait_fence(src, copied);
        ld_tensor_release(c);
        return out;
    }
    ld_device_synchronize(src);   /* the source's queued kernels must have written it */
    int st;
    if (ld_device_is_host(src)) st = dev->backend->from_host(dev, out->storage->data, p, nb);
    else if (ld_device_is_host(dev)) st = src->backend->to_host(src, out->storage->data, p, nb);
    else {
        void *tmp = malloc(nb ? nb : 1);
        st = tmp ? src->backend->to_host(src, tmp, p, nb) : (int)ld_fail(LD_ENOMEM, "out of memory");
        if (!st) st = dev->backend->from_host(dev, out->storage->data, tmp, nb);
        free(tmp);
    }
    ld_tensor_release(c);
    if (st) { ld_tensor_release(out); return NULL; }
    return out;
}

int ld_copy_into(ld_tensor *dst, const ld_tensor *src) {
    /* broadcast src to dst's shape with zero strides */
    if (src->ndim > dst->ndim) goto bad;
    int64_t ss[LD_MAX_DIMS];
    for (int i = 0; i < dst->ndim; i++) {
        int j = i - (dst->ndim - src->ndim);
        if (j < 0) { ss[i] = 0; continue; }
        if (src->shape[j] == dst->shape[i]) ss[i] = src->strides[j];
        else if (src->shape[j] == 1) ss[i] = 0;
        else goto bad;
    }
    if (dst->storage->device != src->storage->device)
        return ld_fail(LD_EDEVICE, "cannot copy from %s into %s", src->storage->device->name,
                       dst->storage->device->name);
    ld_device *d = dst->storage->device;
    const void *sp = (char *)src->storage->data + src->offset * (int64_t)ld_dtype_size(src->dtype);
    if (ld_tensor_is_contiguous(dst)) {
        d->backend->copy_strided(d, (char *)dst->storage->data + dst->offset * (int64_t)ld_dtype_size(dst->dtype),
                                 dst->dtype, sp, src->dtype, dst->ndim, dst->shape, ss);
        return LD_OK;
    }
    /* non-contiguous destination: element by element (host only; rare) */
    if (!ld_tensor_data(dst)) return ld_error_status();
    ld_tensor tmp = *src;
    tmp.ndim = dst->ndim;
    for (int i = 0; i < dst->ndim; i++) { tmp.shape[i] = dst->shape[i]; tmp.strides[i] = ss[i]; }
    int64_t n = ld_tensor_numel(dst);
    for (int64_t i = 0; i < n; i++)
        if (ld_tensor_set_flat(dst, i, ld_tensor_get_flat(&tmp, i))) return ld_error_status();
    return LD_OK;
bad:;
    char b1[64], b2[64];
    return ld_fail(LD_ESHAPE, "cannot assign shape %s to shape %s", ld_shape_str(src, b1, sizeof b1),
                   ld_shape_str(dst, b2, sizeof b2));
}

ld_tensor *ld_concat(ld_tensor *const *ts, int n, int dim) {
    if (n < 1) { ld_fail(LD_EARG, "concat needs at least one tensor"); return NULL; }
    const ld_tensor *f = ts[0];
    if (norm_dim(f, &dim, 0)) return NULL;
    int64_t shape[LD_MAX_DIMS];
    memcpy(shape, f->shape, sizeof shape);
    shape[dim] = 0;
    for (int i = 0; i < n; i++) {
        if (ts[i]->ndim != f->ndim || ts[i]->dtype != f->dtype) goto bad;
        for (int d = 0; d < f->ndim; d++)
            if (d != dim && ts[i]->shape[d] != f->shape[d]) goto bad;
        shape[dim] += ts[i]->shape[dim];
    }
    ld_tensor *out = ld_tensor_empty(f->dtype, f->ndim, shape, f->storage->device);
    if (!out) return NULL;
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
        ld_tensor *v = ld_slice(out, dim, at, at + ts[i]->shape[dim], 1);
        int st = v ? ld_copy_into(v, ts[i]) : ld_error_status();
        ld_tensor_release(v);
        if (st) { ld_tensor_release(out); return NULL; }
        at += ts[i]->shape[dim];
    }
    return out;
bad:;
    char b1[64], b2[64];
    ld_fail(LD_ESHAPE, "concat: shapes %s and %s do not match", ld_shape_str(f, b1, sizeof b1),
            ld_shape_str(ts[n - 1], b2, sizeof b2));
    return NULL;
}
