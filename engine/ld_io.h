/*
 * ld_io.h - reading data sets and saving weights.
 *
 *  - IDX files (the MNIST family), plain or gzip-compressed (zlib's gzopen
 *    reads both): uint8/int8/int16/int32/float32/float64 payloads become a
 *    tensor of the matching ldist dtype (uint8 stays uint8, int8/int16/int32
 *    become int32, float/double become float32).
 *  - CSV: numeric columns into a float32 [rows, cols] tensor; an optional
 *    header line is detected or forced.
 *  - safetensors (https://github.com/huggingface/safetensors): an 8-byte
 *    little-endian header length, a JSON header {"name": {"dtype", "shape",
 *    "data_offsets"}, "__metadata__": {...}}, then the raw little-endian data.
 *    A write goes to a new temporary file beside PATH (created with O_EXCL, so
 *    a planted link is never followed; unique, so concurrent saves never share
 *    it), is synced and renamed over PATH: a reader sees the old file or the
 *    new one, never a torn one. A header is checked whole (offsets tile the
 *    data, sizes overflow-checked, names unique) before any data is read.
 */
#ifndef LD_IO_H
#define LD_IO_H

#include "ld_tensor.h"

ld_tensor *ld_load_idx(const char *path);
/* The same, converted to `dtype` (-1: the natural dtype above) with every
   value multiplied by `scale` (1: none). Fashion-MNIST images as float32 in
   [0, 1]: ld_load_idx_as(path, LD_F32, 1.0 / 255). One pass, no temporary. */
ld_tensor *ld_load_idx_as(const char *path, int dtype, double scale);

typedef struct {
    int header;        /* -1 detect, 0 none, 1 first line is a header */
    char delimiter;    /* default ',' */
} ld_csv_options;
/* On success *col_names (may be NULL) gets a malloc'ed array of malloc'ed names
   when a header was read, *n_names its length. */
ld_tensor *ld_load_csv(const char *path, const ld_csv_options *opt, char ***col_names, int *n_names);

typedef struct {
    int n;
    char **names;        /* owned */
    ld_tensor **tensors; /* owned references */
} ld_tensor_dict;
void ld_tensor_dict_free(ld_tensor_dict *d);

/* metadata: NULL or n_meta pairs of key/value strings. */
int ld_save_safetensors(const char *path, int n, const char *const *names, ld_tensor *const *tensors,
                        int n_meta, const char *const *meta_kv);
/* The file dtype of an ldist dtype ("F32", "BF16", ...), NULL for none. */
const char *ld_safetensors_dtype_name(ld_dtype dt);
/* Tensors come back in file order. F32/I32/I64/U8/F16/BF16 keep their dtype;
   files written by others may also hold F64 (read as float32), I8/I16/U16 (int32),
   U32/U64 (int64) and BOOL (uint8). On failure *out is empty. */
int ld_load_safetensors(const char *path, ld_tensor_dict *out);
/* The same, and the "__metadata__" map: *meta_kv gets 2 * *n_meta malloc'ed
   strings (key, value, key, value ...); free with ld_strings_free. */
int ld_load_safetensors_meta(const char *path, ld_tensor_dict *out, int *n_meta, char ***meta_kv);
/* One tensor as a validated header describes it (pointers valid during the call). */
typedef struct {
    const char *name;
    const char *dtype;      /* as the file names it: "F32", "F16", "BF16", "I64", ... */
    ld_dtype as;            /* the dtype it is loaded as */
    int ndim;
    const int64_t *shape;
} ld_safetensors_entry;
/* Called after the header is validated and before any tensor is allocated or
   read, with the n entries in file order (the order of the result). Returns
   LD_OK to go on, or a status set with ld_fail to refuse the file. */
typedef int (*ld_safetensors_check)(void *ctx, const char *path, int n, const ld_safetensors_entry *entries);
/* ld_load_safetensors_meta with a check (NULL: none) of what the file holds. */
int ld_load_safetensors_checked(const char *path, ld_tensor_dict *out, int *n_meta, char ***meta_kv,
                                ld_safetensors_check check, void *ctx);
/* Frees n malloc'ed strings and the array holding them (NULL is fine). */
void ld_strings_free(char **s, int n);

#endif
