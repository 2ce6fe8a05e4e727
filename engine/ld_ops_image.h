/*
 * ld_ops_image.h - image geometry for Keras's image preprocessing layers
 * (Resizing, CenterCrop, RandomCrop, RandomFlip, RandomRotation,
 * RandomZoom, RandomTranslation): TF's projective transform and resize.
 *
 * The transform is one kernel per backend (ld_kernels.h's image_transform,
 * where each output pixel reads computed in the kernel by ld_image_math.h:
 * only the 8 numbers of each image's matrix cross from the host) with its
 * adjoint as gradient (a bilinear resize is that kernel too); nearest
 * resizes and crops are composed of ops every device has (gathers,
 * slices), their gradients the tape's. Images are NHWC float tensors; a half input is
 * widened, computed in float32 and rounded once, as TF's kernels do.
 */
#ifndef LD_OPS_IMAGE_H
#define LD_OPS_IMAGE_H

#include "ld_device.h"

/* TF's fill modes (ImageProjectiveTransformV3's): how a point outside the
   image reads. REFLECT (d c b a | a b c d | d c b a), WRAP (a b c d | a b c
   d | a b c d), CONSTANT (fill_value), NEAREST (a a a a | a b c d | d d d d) */
typedef enum { LD_FILL_REFLECT = 0, LD_FILL_WRAP, LD_FILL_CONSTANT, LD_FILL_NEAREST } ld_fill_mode;
/* "reflect", "wrap", "constant", "nearest" -> 0 or 1 (unknown); for the layers' choices */
int ld_fill_mode_from_name(const char *name, ld_fill_mode *out);

/* tf.raw_ops.ImageProjectiveTransformV3 (Keras 3's ops.image.affine_transform)
   on images x [batch, height, width, channels]: output pixel (row y, column
   x) of image b reads x's image b at ((a0 x + a1 y + a2) / k, (b0 x + b1 y +
   b2) / k), k = c0 x + c1 y + 1, with t = transforms + 8 b (every image the
   same t when n_transforms is 1) = a0 a1 a2 b0 b1 b2 c0 c1; that point mapped
   by fill_mode, then read by bilinear (or nearest: TF's round half away from
   zero) interpolation, each corner outside the image (CONSTANT's) reading
   fill_value at its weight, as TF 2.21's kernel; k == 0 reads fill_value.
   The output has x's shape and dtype. */
ld_tensor *ld_image_transform(ld_tensor *x, const float *transforms, int64_t n_transforms, int nearest,
                              ld_fill_mode fill_mode, float fill_value);
/* The same into images of oh x ow (TF's output_shape): output pixel (oy, ox)
   as above, ox < ow, oy < oh. */
ld_tensor *ld_image_transform_to(ld_tensor *x, const float *transforms, int64_t n_transforms, int64_t oh, int64_t ow,
                                 int nearest, ld_fill_mode fill_mode, float fill_value);

/* tf.image.resize(x, (height, width), method = bilinear or nearest,
   antialias = False): half-pixel centres, as TF 2's. Bilinear is the
   transform above (a scale and a shift, clamped at the edges as TF's);
   nearest a gather along each axis that changes size. The output has x's
   dtype. */
ld_tensor *ld_image_resize(ld_tensor *x, int64_t height, int64_t width, int nearest);

/* images x[:, top:top+h, left:left+w, :] (a copy on the tape) */
ld_tensor *ld_image_crop(ld_tensor *x, int64_t top, int64_t left, int64_t h, int64_t w);

/* The largest centred window of an H x W image with height:width = h:w,
   as Keras's smart_resize computes it: its top, left, height and width */
void ld_image_aspect_window(int64_t H, int64_t W, int64_t h, int64_t w, int64_t *top, int64_t *left, int64_t *wh,
                            int64_t *ww);

/* Keras's crop to the target's aspect ratio (its smart_resize, Resizing's
   crop_to_aspect_ratio, RandomCrop at inference): the largest centred
   window of x with height:width = h:w, resized to h x w (bilinear or
   nearest). pad instead pads x (fill_value on both sides, Keras's
   pad_to_aspect_ratio) to that ratio before resizing. */
ld_tensor *ld_image_fit_aspect(ld_tensor *x, int64_t h, int64_t w, int nearest, int pad, float fill_value);

#endif
