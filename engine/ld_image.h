/*
 * ld_image.h - image files for input pipelines: PNG (libpng) and JPEG
 * (libjpeg-turbo) decoding, TensorFlow's bilinear resize, numpy's legacy
 * RandomState shuffle, and the dataset behind Keras's
 * image_dataset_from_directory:
 *
 *     ld_image_index ix;
 *     if (ld_image_index_directory("flowers", NULL, 0, 0, 1, 42, &ix) != LD_OK) ...;
 *     ld_image_opts o = {.height = 180, .width = 180, .channels = 3,
 *                        .batch_size = 32, .label_mode = LD_IMAGE_LABELS_INT,
 *                        .num_classes = ix.nclasses, .shuffle = 1, .seed = 42};
 *     ld_dataset *ds = ld_image_dataset(ix.n, (const char *const *)ix.paths, ix.labels, &o);
 *     ld_image_index_free(&ix);     // the dataset keeps its own copies
 *
 * Decoding follows tf.image.decode_image(channels=c): 16-bit samples keep
 * their high byte, palettes expand, alpha is dropped (or 255 added) without
 * compositing, RGB becomes gray with libpng's integer weights 0.299/0.587
 * (as TF's PNG decoder) or libjpeg's own Y channel, gray is replicated.
 * Resizing is tf.image.resize(method="bilinear"): half-pixel centres, no
 * antialiasing, float32 arithmetic; an image already at the target size is
 * only converted to float. Values stay in 0..255.
 */
#ifndef LD_IMAGE_H
#define LD_IMAGE_H

#include "ld_data.h"

#include <stdint.h>

/* ---- numpy's legacy RandomState (MT19937, init_genrand seeding) ---- */
typedef struct { uint32_t mt[624]; int pos; } ld_mt19937;
void ld_mt19937_seed(ld_mt19937 *r, uint32_t seed);
uint32_t ld_mt19937_next(ld_mt19937 *r);
/* np.random.RandomState(seed).shuffle(x) applied to x[0..n) (Fisher-Yates
   from the end, random_interval's masked rejection on 32-bit draws). */
void ld_np_shuffle_i64(uint32_t seed, int64_t n, int64_t *x);

/* ---- one image ---- */
/* Decoding refuses an image of more than this many pixels (0: no limit) with
   a message naming the file and the limit; Pillow's MAX_IMAGE_PIXELS. */
#define LD_IMAGE_MAX_PIXELS_DEFAULT ((int64_t)1024 * 1024 * 1024 / 4 / 3)
int64_t ld_image_max_pixels(void);
void ld_image_set_max_pixels(int64_t n);
/* Decode the PNG or JPEG file at path into *pix (malloc'd, [h, w, channels]
   uint8, channels 1, 3 or 4). LD_OK, or a status after ld_fail with a
   message "PATH: what is wrong". */
int ld_image_load(const char *path, int channels, uint8_t **pix, int *h, int *w);
/* The same from memory; `name` is used in messages. */
int ld_image_decode(const uint8_t *buf, size_t n, const char *name, int channels, uint8_t **pix, int *h, int *w);
/* tf.image.resize(bilinear) of a uint8 [ih, iw, c] image into float [oh, ow, c]. */
void ld_image_resize_bilinear(const uint8_t *in, int ih, int iw, int c, float *out, int oh, int ow);
/* Write a uint8 [h, w, c] image (c 1, 2 (gray+alpha), 3 or 4): PNG, or JPEG
   when the path ends in .jpg/.jpeg (c 1 or 3; quality 1..100). */
int ld_image_save(const char *path, const uint8_t *pix, int h, int w, int c, int quality);

/* ---- a folder of images, one class per sub-folder ---- */
typedef struct {
    int64_t n;              /* files */
    char **paths;           /* dir/class/.../file */
    int32_t *labels;        /* class index of each file */
    int nclasses;
    char **class_names;
    int64_t skipped;        /* .bmp/.gif files seen and left out */
} ld_image_index;
/* Keras's index_directory: the sub-folders of dir (not starting with '.',
   sorted; or the class_names given, in their order, which must all exist)
   are the classes; each is walked recursively (symbolic links to folders
   followed only with follow_links), folders in sorted path order, files
   sorted, keeping .png .jpg .jpeg (any case). With shuffle, paths and
   labels are shuffled as np.random.RandomState(seed).shuffle does.
   class_names {""}: no classes, every image file under dir (Keras's labels=None). */
int ld_image_index_directory(const char *dir, const char *const *class_names, int nclass_names,
                             int follow_links, int shuffle, uint32_t seed, ld_image_index *out);
void ld_image_index_free(ld_image_index *ix);

enum { LD_IMAGE_LABELS_NONE, LD_IMAGE_LABELS_INT, LD_IMAGE_LABELS_CATEGORICAL, LD_IMAGE_LABELS_BINARY };
typedef struct {
    int height, width, channels;   /* the images' size; channels 1, 3 or 4 */
    int64_t batch_size;            /* 0: unbatched elements */
    int label_mode;                /* LD_IMAGE_LABELS_* */
    int num_classes;
    int shuffle;                   /* a new order every epoch, from seed */
    uint64_t seed;
} ld_image_opts;
/* The files (copied) as a dataset of {images float32 [b, h, w, c], labels}
   (labels: int32 [b], float32 one-hot [b, k] or float32 [b, 1]; none with
   LD_IMAGE_LABELS_NONE), in this order or reshuffled each epoch, with a
   known cardinality. Each batch's files are decoded in parallel on the CPU
   pool, straight into the batch; a file that fails ends the iterator with
   "PATH: what is wrong". A prefetch is added on top (as Keras does). */
ld_dataset *ld_image_dataset(int64_t n, const char *const *paths, const int32_t *labels, const ld_image_opts *o);

#endif
