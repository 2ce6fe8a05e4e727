/* ld_layers_image.c - Keras 3's image preprocessing and augmentation layers:
   Resizing, CenterCrop, RandomCrop, RandomFlip, RandomRotation, RandomZoom,
   RandomTranslation, RandomContrast, RandomBrightness.

   Images are NHWC (Keras's channels_last, the only data_format here). The
   geometry is TF's (ld_ops_image.h: the projective transform Keras's
   affine_transform calls, tf.image.resize), so with the same draws the
   outputs are TF's. The draws: one key per call (ld_layer_draw_key: the
   global generator, or the layer's own stream with seed=), each image's
   values ld_counter_uniform(key, its row in the global batch), so a batch
   split over replicas is augmented as one device augments it, under every
   strategy. As Keras's, the Random layers augment when a call says training
   or does not say (layer(x), model(x): their class's training_default), and
   pass images through in evaluate and predict. */
#include "ld_nn.h"
#include "ld_ops_image.h"
#include "ld_ops_index.h"
#include "ld_replica.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int image_build(ld_layer *l, int n_in, const ld_shape *in, ld_shape *out) {
    if (ld_layer_need_image(l, in)) return ld_error_status();
    *out = *in;
    return LD_OK;
}

/* the images as a float tensor: a float input as it is (the layer call cast
   it to the policy's dtype), an integer one (uint8 pixels) as float32 */
static ld_tensor *images_of(ld_tensor *x) { return ld_as_floating(x); }

/* the global batch's row of this replica's image b (for the draws) */
static uint64_t global_row(int64_t b) {
    const ld_replica_ctx *rc = ld_replica_get();
    return (uint64_t)((rc ? rc->row_offset : 0) + b);
}
/* uniform in [lo, hi) for image b's j-th value of a call keyed by key (of
   `per` values per image), in float32 as TF's random.uniform gives it */
static float draw(uint64_t key, int64_t b, int j, int per, float lo, float hi) {
    float u = (float)ld_counter_uniform(key, global_row(b) * (uint64_t)per + (uint64_t)j);
    return lo + (hi - lo) * u;
}

/* Keras's factor rules. base: BaseImagePreprocessingLayer._set_factor with
   bounds [blo, bhi]: a number f gives (max(-|f|, blo), |f|), a pair its
   sorted values; an error when outside. */
static int factor_range(const ld_layer *l, int i, double blo, double bhi, float *lo, float *hi) {
    int n;
    const double *f = ld_p_floats(l, i, &n);
    const char *name = l->cls->params[i].name;
    if (n == 2) {
        double a = f[0] < f[1] ? f[0] : f[1], b = f[0] < f[1] ? f[1] : f[0];
        if (f[0] > bhi || f[1] < blo)
            return ld_fail(LD_EARG, "%s: %s should be a number (or a list of two numbers) in the range [%g, %g], got "
                           "{%g, %g}", l->cls->class_name, name, blo, bhi, f[0], f[1]);
        *lo = (float)a; *hi = (float)b;
        return LD_OK;
    }
    if (n != 1) return ld_fail(LD_EARG, "%s: %s takes a number or two, got %d", l->cls->class_name, name, n);
    if (f[0] < blo || f[0] > bhi)
        return ld_fail(LD_EARG, "%s: %s should be a number (or a list of two numbers) in the range [%g, %g], got %g",
                       l->cls->class_name, name, blo, bhi, f[0]);
    double a = fabs(f[0]);
    *lo = (float)(-a < blo ? blo : -a); *hi = (float)a;
    return LD_OK;
}
/* RandomZoom's and RandomTranslation's _set_factor: a number f gives
   (-|f|, |f|), a pair sorted; each value in (-1, 1] (zoom) or [-1, 1] */
static int shift_range(const ld_layer *l, int i, int open_low, float *lo, float *hi) {
    int n;
    const double *f = ld_p_floats(l, i, &n);
    for (int k = 0; k < n; k++)
        if (f[k] > 1 || (open_low ? f[k] <= -1 : f[k] < -1))
            return ld_fail(LD_EARG, "%s: %s should be a number (or a list of two numbers) in the range %s-1.0, 1.0], "
                           "got %g", l->cls->class_name, l->cls->params[i].name, open_low ? "(" : "[", f[k]);
    if (n == 2) { *lo = (float)fmin(f[0], f[1]); *hi = (float)fmax(f[0], f[1]); return LD_OK; }
    if (n != 1) return ld_fail(LD_EARG, "%s: %s takes a number or two, got %d", l->cls->class_name, l->cls->params[i].name, n);
    *lo = (float)-fabs(f[0]); *hi = (float)fabs(f[0]);
    return LD_OK;
}

/* The geometric layers (RandomFlip, RandomRotation, RandomZoom, RandomTranslation):
   ranges(l, r) reads the configuration's draw ranges into r (and is the
   class's check), make(r, key, b, H, W, t) gives image b's matrix; the
   interpolation, fill_mode, fill_value and seed parameters by name. */
typedef void (*matrix_fn)(const float *range, uint64_t key, int64_t b, int64_t H, int64_t W, float *t);
typedef struct {
    const ld_layer_class *cls;
    int (*ranges)(const ld_layer *l, float *r);
    matrix_fn make;
} geometry;
static const geometry *geometry_of(const ld_layer *l);
static int geometry_check(ld_layer *l) {
    float r[5];
    return geometry_of(l)->ranges(l, r);
}
static ld_tensor *geometry_forward(ld_layer *l, int n_in, ld_tensor *const *xs, int training) {
    if (!training) return images_of(xs[0]);
    const geometry *g = geometry_of(l);
    float r[5];
    const ld_layer_class *c = l->cls;
    if (g->ranges(l, r)) return NULL;
    /* RandomFlip has none of these: it reads whole pixels at exact coordinates (nearest, a gather) */
    int fi = ld_layer_param_index(c, "fill_mode"), ii = ld_layer_param_index(c, "interpolation");
    int vi = ld_layer_param_index(c, "fill_value");
    ld_fill_mode fill = LD_FILL_NEAREST;   /* the parameter's choices are the four modes */
    if (fi >= 0) ld_fill_mode_from_name(ld_p_str(l, fi), &fill);
    int nearest = ii < 0 || !strcmp(ld_p_str(l, ii), "nearest");
    ld_tensor *x = images_of(xs[0]);
    if (!x) return NULL;
    int64_t B = x->shape[0], H = x->shape[1], W = x->shape[2];
    float *t = malloc(sizeof(float) * 8 * (size_t)(B ? B : 1));
    if (!t) { ld_tensor_release(x); ld_fail(LD_ENOMEM, "out of memory"); return NULL; }
    uint64_t key = ld_layer_draw_key(l, ld_p_float(l, ld_layer_param_index(c, "seed")));
    for (int64_t b = 0; b < B; b++) g->make(r, key, b, H, W, t + 8 * b);
    ld_tensor *y = ld_image_transform(x, t, B, nearest, fill, vi >= 0 ? (float)ld_p_float(l, vi) : 0);
    free(t);
    ld_tensor_release(x);
    return y;
}

/* ================================================================ Resizing */
enum { RS_H, RS_W, RS_INTERP, RS_CROP, RS_PAD, RS_FILL_MODE, RS_FILL_VALUE, RS_ANTIALIAS, RS_FORMAT };
static int resizing_check(ld_layer *l) {
    if (ld_p_int(l, RS_H) < 1 || ld_p_int(l, RS_W) < 1)
        return ld_fail(LD_EARG, "Resizing: height and width must be positive, got %lld and %lld", (long long)ld_p_int(l, RS_H),
                       (long long)ld_p_int(l, RS_W));
    if (ld_p_int(l, RS_CROP) && ld_p_int(l, RS_PAD))
        return ld_fail(LD_EARG, "Resizing: only one of pad_to_aspect_ratio and crop_to_aspect_ratio can be true");
    if (ld_p_int(l, RS_ANTIALIAS))
        return ld_fail(LD_EARG, "Resizing: antialias=true is not supported (TF's antialiased kernels); "
                       "downscale by steps, or leave it false as Keras's default");
    return LD_OK;
}
static int sized_build(ld_layer *l, int n_in, const ld_shape *in, ld_shape *out) {
    if (ld_layer_need_image(l, in)) return ld_error_status();
    *out = *in;
    out->d[0] = ld_p_int(l, 0);   /* height and width: parameters 0 and 1 of Resizing, CenterCrop, RandomCrop */
    out->d[1] = ld_p_int(l, 1);
    return LD_OK;
}
static ld_tensor *resizing_forward(ld_layer *l, int n_in, ld_tensor *const *xs, int training) {
    ld_tensor *x = images_of(xs[0]);
    if (!x) return NULL;
    int64_t h = ld_p_int(l, RS_H), w = ld_p_int(l, RS_W);
    int nearest = !strcmp(ld_p_str(l, RS_INTERP), "nearest");
    ld_tensor *y = ld_p_int(l, RS_CROP) || ld_p_int(l, RS_PAD)
                       ? ld_image_fit_aspect(x, h, w, nearest, (int)ld_p_int(l, RS_PAD), (float)ld_p_float(l, RS_FILL_VALUE))
                       : ld_image_resize(x, h, w, nearest);
    ld_tensor_release(x);
    return y;
}
const ld_layer_class ld_layer_resizing = {
    "Resizing", "resizing", NULL, {"height", "width"},
    {LD_PINT("height", NULL), LD_PINT("width", NULL), LD_PSTR("interpolation", "bilinear", "bilinear|nearest"),
     LD_PBOOL("crop_to_aspect_ratio", "false"), LD_PBOOL("pad_to_aspect_ratio", "false"),
     LD_PSTR("fill_mode", "constant", "constant"), LD_PFLOAT("fill_value", "0"), LD_PBOOL("antialias", "false"),
     LD_PSTR("data_format", "channels_last", "channels_last"), LD_PEND},
    1, 1, 3u, resizing_check, sized_build, resizing_forward,
    "nn.Resizing(height, width, {interpolation=\"bilinear\"|\"nearest\", crop_to_aspect_ratio=, pad_to_aspect_ratio=,\n"
    "fill_value=0})\n\nNHWC images resized to height x width, as tf.image.resize (half-pixel centres); with\n"
    "crop_to_aspect_ratio the largest centred window of the target's aspect ratio first, with pad_to_aspect_ratio\n"
    "fill_value around the image to that ratio (Keras's). Integer pixels come out as float32.", 0, .compute_mask = NULL};

/* ================================================================ CenterCrop */
enum { CC_H, CC_W, CC_FORMAT };
static int crop_size_check(ld_layer *l) {
    if (ld_p_int(l, 0) < 1 || ld_p_int(l, 1) < 1)
        return ld_fail(LD_EARG, "%s: height and width must be positive, got %lld and %lld", l->cls->class_name,
                       (long long)ld_p_int(l, 0), (long long)ld_p_int(l, 1));
    return LD_OK;
}
static ld_tensor *center_crop_forward(ld_layer *l, int n_in, ld_tensor *const *xs, int training) {
    ld_tensor *x = images_of(xs[0]);
    if (!x) return NULL;
    int64_t h = ld_p_int(l, CC_H), w = ld_p_int(l, CC_W), H = x->shape[1], W = x->shape[2];
    /* Keras's: a centred window when the images are at least that large, else its smart_resize */
    ld_tensor *y = H >= h && W >= w ? ld_image_crop(x, (H - h) / 2, (W - w) / 2, h, w) : ld_image_fit_aspect(x, h, w, 0, 0, 0);
    ld_tensor_release(x);
    return y;
}
const ld_layer_class ld_layer_center_crop = {
    "CenterCrop", "center_crop", NULL, {"height", "width"},
    {LD_PINT("height", NULL), LD_PINT("width", NULL), LD_PSTR("data_format", "channels_last", "channels_last"), LD_PEND},
    1, 1, 3u, crop_size_check, sized_build, center_crop_forward,
    "nn.CenterCrop(height, width)\n\nThe centred height x width window of NHWC images; images smaller than that are\n"
    "cropped to its aspect ratio and resized up (Keras's smart_resize).", 0, .compute_mask = NULL};

/* ================================================================ RandomCrop */
enum { RC_H, RC_W, RC_SEED, RC_FORMAT };
static ld_tensor *random_crop_forward(ld_layer *l, int n_in, ld_tensor *const *xs, int training) {
    ld_tensor *x = images_of(xs[0]);
    if (!x) return NULL;
    int64_t h = ld_p_int(l, RC_H), w = ld_p_int(l, RC_W), H = x->shape[1], W = x->shape[2];
    ld_tensor *y;
    if (!training) {
        /* inference: the largest centred window of the target's ratio, resized (Keras's docstring; Keras 3.15
           itself passes the images through uncropped there, against its own output shape) */
        y = ld_image_fit_aspect(x, h, w, 0, 0, 0);
    } else if (H > h && W > w) {   /* one window for the whole batch, as Keras's */
        uint64_t key = ld_layer_draw_key(l, ld_p_float(l, RC_SEED));
        int64_t top = (int64_t)((float)(H - h + 1) * (float)ld_counter_uniform(key, 0));
        int64_t left = (int64_t)((float)(W - w + 1) * (float)ld_counter_uniform(key, 1));
        if (top > H - h) top = H - h;
        if (left > W - w) left = W - w;
        y = ld_image_crop(x, top, left, h, w);
    } else {
        /* not larger on both axes: Keras's centred offsets of the ratio's window, a window of the target's size
           from there (held to the image), resized to the target when it is not */
        int64_t top, left, ch, cw;
        ld_image_aspect_window(H, W, h, w, &top, &left, &ch, &cw);
        int64_t hh = top + h > H ? H - top : h, ww = left + w > W ? W - left : w;
        ld_tensor *c = ld_image_crop(x, top, left, hh, ww);
        y = c ? ld_image_resize(c, h, w, 0) : NULL;
        ld_tensor_release(c);
    }
    ld_tensor_release(x);
    return y;
}
const ld_layer_class ld_layer_random_crop = {
    "RandomCrop", "random_crop", NULL, {"height", "width"},
    {LD_PINT("height", NULL), LD_PINT("width", NULL), LD_PFLOAT("seed", ""),
     LD_PSTR("data_format", "channels_last", "channels_last"), LD_PEND},
    1, 1, 3u, crop_size_check, sized_build, random_crop_forward,
    "nn.RandomCrop(height, width, {seed=})\n\nIn training, a height x width window of NHWC images at a random place, "
    "the same\nfor the whole batch (Keras's); in inference, and for images not larger than that, the largest centred\n"
    "window of that aspect ratio, resized.", 0, .training_default = 1};

/* ================================================================ RandomFlip */
/* r: whether each axis flips (columns, rows), from the mode */
static int flip_ranges(const ld_layer *l, float *r) {
    const char *mode = ld_p_str(l, 0);
    r[0] = strcmp(mode, "vertical") != 0;
    r[1] = strcmp(mode, "horizontal") != 0;
    return LD_OK;
}
static void flip_matrix(const float *axes, uint64_t key, int64_t b, int64_t H, int64_t W, float *t) {
    int flip = draw(key, b, 0, 1, 0, 1) <= 0.5f;   /* Keras: uniform <= 0.5, one draw per image */
    int hz = flip && axes[0] != 0, vt = flip && axes[1] != 0;
    float m[8] = {hz ? -1.f : 1.f, 0, hz ? (float)(W - 1) : 0, 0, vt ? -1.f : 1.f, vt ? (float)(H - 1) : 0, 0, 0};
    memcpy(t, m, sizeof m);
}
const ld_layer_class ld_layer_random_flip = {
    "RandomFlip", "random_flip", NULL, {"mode"},
    {LD_PSTR("mode", "horizontal_and_vertical", "horizontal|vertical|horizontal_and_vertical"), LD_PFLOAT("seed", ""),
     LD_PSTR("data_format", "channels_last", "channels_last"), LD_PEND},
    1, 1, ~0u, geometry_check, image_build, geometry_forward,
    "nn.RandomFlip(mode=\"horizontal_and_vertical\", {seed=})\n\nIn training, each NHWC image flipped left-right "
    "(\"horizontal\"), upside down (\"vertical\")\nor both with probability 1/2 (Keras 3's: in horizontal_and_vertical "
    "one draw flips both axes).", 0, .training_default = 1};

/* ================================================================ RandomRotation */
static int rotation_ranges(const ld_layer *l, float *r) { return factor_range(l, 0, -1, 1, &r[0], &r[1]); }
/* Keras's _compute_affine_matrix (centre 0.5, scale 1, no shear or
   translation) in float32, its order of operations */
static void rotation_matrix(const float *range, uint64_t key, int64_t b, int64_t H, int64_t W, float *t) {
    float angle = draw(key, b, 0, 1, range[0] * 360.0f, range[1] * 360.0f);
    float rad = angle * (float)(M_PI / 180.0);
    float cx = 0.5f * ((float)W - 1), cy = 0.5f * ((float)H - 1), c = cosf(rad), s = sinf(rad);
    /* Keras's scale 1 and shears 0 leave a0 = cos, a1 = -sin, b0 = sin, b1 = cos exactly */
    t[0] = c; t[1] = -s; t[2] = cx - cx * c - cy * -s;
    t[3] = s; t[4] = c; t[5] = cy - cx * s - cy * c;
    t[6] = t[7] = 0;
}
/* the geometric layers' parameters after their factors (read by name by geometry_forward) */
#define GEOMETRY_PARAMS LD_PSTR("fill_mode", "reflect", "reflect|wrap|constant|nearest"), \
    LD_PSTR("interpolation", "bilinear", "bilinear|nearest"), LD_PFLOAT("seed", ""), LD_PFLOAT("fill_value", "0"), \
    LD_PSTR("data_format", "channels_last", "channels_last"), LD_PEND
const ld_layer_class ld_layer_random_rotation = {
    "RandomRotation", "random_rotation", NULL, {"factor"},
    {LD_PFLOATS("factor", NULL, 2), GEOMETRY_PARAMS},
    1, 1, ~0u, geometry_check, image_build, geometry_forward,
    "nn.RandomRotation(factor, {fill_mode=\"reflect\", interpolation=\"bilinear\", fill_value=0, seed=})\n\n"
    "In training, each NHWC image rotated about its centre by a random angle in [lower, upper] x 360 degrees\n"
    "(factor f: [-f, f]; {lower, upper}; counter-clockwise positive), the corners filled by fill_mode (TF's\n"
    "reflect, wrap, constant or nearest), as Keras's.", 0, .training_default = 1};

/* ================================================================ RandomZoom */
/* r: height's lower and upper, width's, and whether width has its own (else it follows the height's draw) */
static int zoom_ranges(const ld_layer *l, float *r) {
    r[4] = l->p[1].n > 0;
    if (shift_range(l, 0, 1, &r[0], &r[1])) return ld_error_status();
    return r[4] != 0 ? shift_range(l, 1, 1, &r[2], &r[3]) : LD_OK;
}
static void zoom_matrix(const float *range, uint64_t key, int64_t b, int64_t H, int64_t W, float *t) {
    float zh = draw(key, b, 0, 2, 1.0f + range[0], 1.0f + range[1]);
    float zw = range[4] != 0 ? draw(key, b, 1, 2, 1.0f + range[2], 1.0f + range[3]) : zh;
    t[0] = zw; t[1] = 0; t[2] = ((float)W - 1.0f) / 2.0f * (1.0f - zw);
    t[3] = 0; t[4] = zh; t[5] = ((float)H - 1.0f) / 2.0f * (1.0f - zh);
    t[6] = t[7] = 0;
}
const ld_layer_class ld_layer_random_zoom = {
    "RandomZoom", "random_zoom", NULL, {"height_factor", "width_factor"},
    {LD_PFLOATS("height_factor", NULL, 2), LD_PFLOATS("width_factor", "", 2), GEOMETRY_PARAMS},
    1, 1, ~0u, geometry_check, image_build, geometry_forward,
    "nn.RandomZoom(height_factor, {width_factor=, fill_mode=\"reflect\", interpolation=\"bilinear\", fill_value=0, "
    "seed=})\n\nIn training, each NHWC image zoomed about its centre: the sampling grid scaled by a random\n"
    "1 + [lower, upper] (factor f: [-f, f]; positive zooms out, as Keras's), the width by the same unless\n"
    "width_factor is given.", 0, .training_default = 1};

/* ================================================================ RandomTranslation */
static int translation_ranges(const ld_layer *l, float *r) {
    return shift_range(l, 0, 0, &r[0], &r[1]) ? ld_error_status() : shift_range(l, 1, 0, &r[2], &r[3]);
}
static void translation_matrix(const float *range, uint64_t key, int64_t b, int64_t H, int64_t W, float *t) {
    float dy = draw(key, b, 0, 2, range[0], range[1]) * (float)H, dx = draw(key, b, 1, 2, range[2], range[3]) * (float)W;
    float m[8] = {1, 0, -dx, 0, 1, -dy, 0, 0};
    memcpy(t, m, sizeof m);
}
const ld_layer_class ld_layer_random_translation = {
    "RandomTranslation", "random_translation", NULL, {"height_factor", "width_factor"},
    {LD_PFLOATS("height_factor", NULL, 2), LD_PFLOATS("width_factor", NULL, 2), GEOMETRY_PARAMS},
    1, 1, ~0u, geometry_check, image_build, geometry_forward,
    "nn.RandomTranslation(height_factor, width_factor, {fill_mode=\"reflect\", interpolation=\"bilinear\", "
    "fill_value=0, seed=})\n\nIn training, each NHWC image shifted by a random [lower, upper] fraction of its "
    "height and of its\nwidth (factor f: [-f, f]; positive moves it down and right), as Keras's.", 0,
    .training_default = 1};

static const geometry *geometry_of(const ld_layer *l) {
    static const geometry table[] = {{&ld_layer_random_rotation, rotation_ranges, rotation_matrix},
                                     {&ld_layer_random_flip, flip_ranges, flip_matrix},
                                     {&ld_layer_random_zoom, zoom_ranges, zoom_matrix},
                                     {&ld_layer_random_translation, translation_ranges, translation_matrix}};
    for (size_t i = 1; i < sizeof table / sizeof *table; i++) if (table[i].cls == l->cls) return &table[i];
    return &table[0];
}

/* ================================================================ RandomContrast, RandomBrightness */
enum { RCB_FACTOR, RCB_RANGE, RCB_SEED };
static int value_range_of(const ld_layer *l, float *lo, float *hi) {
    int n;
    const double *v = ld_p_floats(l, RCB_RANGE, &n);
    if (n != 2) return ld_fail(LD_EARG, "%s: value_range should be a list of two numbers, got %d", l->cls->class_name, n);
    *lo = (float)fmin(v[0], v[1]); *hi = (float)fmax(v[0], v[1]);
    return LD_OK;
}
static int contrast_check(ld_layer *l) {
    float lo, hi;
    return value_range_of(l, &lo, &hi) ? ld_error_status() : factor_range(l, RCB_FACTOR, 0, 1, &lo, &hi);
}
static int brightness_check(ld_layer *l) {
    float lo, hi;
    return value_range_of(l, &lo, &hi) ? ld_error_status() : factor_range(l, RCB_FACTOR, -1, 1, &lo, &hi);
}
/* one value per image [B, 1, 1, 1] on x's device */
static ld_tensor *per_image(ld_layer *l, ld_tensor *x, float lo, float hi, float times) {
    int64_t B = x->shape[0], s[4] = {B, 1, 1, 1};
    ld_tensor *f = ld_tensor_empty(LD_F32, 4, s, NULL);
    if (!f) return NULL;
    float *p = ld_tensor_data_unsynced(f);
    uint64_t key = ld_layer_draw_key(l, ld_p_float(l, RCB_SEED));
    for (int64_t b = 0; b < B; b++) p[b] = draw(key, b, 0, 1, lo, hi) * times;
    ld_tensor *d = ld_to_device(f, x->storage->device);
    ld_tensor_release(f);
    return d;
}
static ld_tensor *clip_to(ld_tensor *y, float lo, float hi) {
    ld_tensor *a = y ? ld_tensor_scalar(lo, y->storage->device) : NULL, *b = a ? ld_tensor_scalar(hi, y->storage->device) : NULL;
    ld_tensor *r = b ? ld_clip_by_value(y, a, b) : NULL;
    ld_tensor_release(a); ld_tensor_release(b); ld_tensor_release(y);
    return r;
}
static ld_tensor *random_contrast_forward(ld_layer *l, int n_in, ld_tensor *const *xs, int training) {
    if (!training) return ld_tensor_retain(xs[0]);   /* Keras's: the images as they came */
    float lo = 0, hi = 0, vlo = 0, vhi = 0;
    int n;
    ld_p_floats(l, RCB_FACTOR, &n);
    if (factor_range(l, RCB_FACTOR, 0, 1, &lo, &hi) || value_range_of(l, &vlo, &vhi)) return NULL;
    if (n == 1) lo = hi;   /* a number f: [1 - f, 1 + f], as Keras's docstring says (see the note below) */
    ld_tensor *x = images_of(xs[0]);
    if (!x) return NULL;
    int axes[2] = {1, 2};
    ld_tensor *f = per_image(l, x, 1.0f - lo, 1.0f + hi, 1.0f);
    ld_tensor *m = f ? ld_reduce_axes(LD_REDUCE_MEAN, x, 2, axes, 1) : NULL;
    ld_tensor *d = m ? ld_sub(x, m) : NULL, *s = d ? ld_mul(d, f) : NULL, *y = s ? ld_add(s, m) : NULL;
    ld_tensor_release(f); ld_tensor_release(m); ld_tensor_release(d); ld_tensor_release(s); ld_tensor_release(x);
    return clip_to(y, vlo, vhi);
}
const ld_layer_class ld_layer_random_contrast = {
    "RandomContrast", "random_contrast", NULL, {"factor"},
    {LD_PFLOATS("factor", NULL, 2), LD_PFLOATS("value_range", "0,255", 2), LD_PFLOAT("seed", ""), LD_PEND},
    1, 1, ~0u, contrast_check, image_build, random_contrast_forward,
    "nn.RandomContrast(factor, {value_range={0, 255}, seed=})\n\nIn training, each channel of each NHWC image moved "
    "from its mean by a random factor:\n(x - mean) * c + mean, c in [1 - f, 1 + f] (factor f) or [1 - lower, 1 + upper], "
    "then clipped to\nvalue_range. (Keras 3.15 draws c from [1, 1 + f] for a number f, against its docstring; ldist "
    "follows\nthe docstring, as Keras 2 did.)", 0, .training_default = 1};

static ld_tensor *random_brightness_forward(ld_layer *l, int n_in, ld_tensor *const *xs, int training) {
    if (!training) return ld_tensor_retain(xs[0]);
    float lo = 0, hi = 0, vlo = 0, vhi = 0;
    if (factor_range(l, RCB_FACTOR, -1, 1, &lo, &hi) || value_range_of(l, &vlo, &vhi)) return NULL;
    ld_tensor *x = images_of(xs[0]);
    if (!x) return NULL;
    ld_tensor *d = per_image(l, x, lo, hi, vhi - vlo), *y = d ? ld_add(x, d) : NULL;
    ld_tensor_release(d); ld_tensor_release(x);
    return clip_to(y, vlo, vhi);
}
const ld_layer_class ld_layer_random_brightness = {
    "RandomBrightness", "random_brightness", NULL, {"factor"},
    {LD_PFLOATS("factor", NULL, 2), LD_PFLOATS("value_range", "0,255", 2), LD_PFLOAT("seed", ""), LD_PEND},
    1, 1, ~0u, brightness_check, image_build, random_brightness_forward,
    "nn.RandomBrightness(factor, {value_range={0, 255}, seed=})\n\nIn training, a random delta added to each NHWC "
    "image: [lower, upper] (factor f: [-f, f]) times\nthe value range's width, then clipped to value_range, as "
    "Keras's.", 0, .training_default = 1};
