/*
 * ld_data.h - input pipelines in the style of tf.data, for any front end.
 *
 * A dataset is an immutable, refcounted description of a pipeline; an
 * iterator runs it once (one epoch):
 *
 *     ld_tensor *xy[2] = {x, y};                          // x [N,28,28], y [N]
 *     ld_dataset *s = ld_dataset_from_tensor_slices(2, xy);
 *     ld_dataset *h = ld_dataset_shuffle(s, 1000, 42, 1);
 *     ld_dataset *b = ld_dataset_batch(h, 32, 0);
 *     ld_dataset *p = ld_dataset_prefetch(b, 2);          // a background thread
 *     ld_dataset_release(s); ld_dataset_release(h); ld_dataset_release(b);
 *
 *     ld_dataset_iter *it = ld_dataset_iter_new(p);
 *     ld_element e = {0};
 *     int r;
 *     while ((r = ld_dataset_iter_next(it, &e)) == 1) {   // e.t[0] [32,28,28], e.t[1] [32]
 *         ...
 *         ld_element_clear(&e);
 *     }
 *     if (r < 0) fprintf(stderr, "%s\n", ld_error());
 *     ld_dataset_iter_free(it);                           // fine mid-way: stops the thread
 *
 * Builders take their own reference on the input (release yours when done)
 * and return a new reference, or NULL with ld_error() set. Datasets may be
 * shared between threads; one iterator is used by one thread at a time.
 *
 * What runs where: everything runs on the thread that calls
 * ld_dataset_iter_next, except the stages below a prefetch, which run on
 * that prefetch's own thread. A map whose callback must stay on the calling
 * thread (LD_MAP_CALLER_THREAD: a Lua function) is never moved: a prefetch
 * built above such a map is placed just below the lowest such map instead,
 * so the C stages before it still run ahead on a background thread.
 *
 * Elements are host tensors. from_tensor_slices keeps a reference to its
 * inputs (no copy when they are contiguous host tensors, so writing into
 * them later changes what the dataset yields; tensors on a GPU are copied
 * to the host, as tf.data keeps datasets on the host too). Every element
 * and batch is a fresh contiguous tensor that the caller owns.
 */
#ifndef LD_DATA_H
#define LD_DATA_H

#include "ld_tensor.h"

#define LD_ELEMENT_MAX 16   /* components of one element */

/* One element: n tensors (x, y, ...), each an owned reference. */
typedef struct {
    int n;
    ld_tensor *t[LD_ELEMENT_MAX];
} ld_element;
void ld_element_clear(ld_element *e);       /* releases the tensors; n = 0 */

typedef struct ld_dataset ld_dataset;
typedef struct ld_dataset_iter ld_dataset_iter;

/* tf.data's cardinality constants */
#define LD_CARD_INFINITE (-1)
#define LD_CARD_UNKNOWN (-2)
#define LD_AUTOTUNE (-1)

/* n tensors sharing dimension 0; element i = (ts[0][i], ..., ts[n-1][i]). */
ld_dataset *ld_dataset_from_tensor_slices(int n, ld_tensor *const *ts);
/* One int64 scalar per element: start, start+step, ... (stop excluded). */
ld_dataset *ld_dataset_range(int64_t start, int64_t stop, int64_t step);

/* Stack `n` consecutive elements into [b, ...] tensors; the last batch is
   smaller unless drop_remainder. Elements must agree in shape and dtype. */
ld_dataset *ld_dataset_batch(ld_dataset *in, int64_t n, int drop_remainder);
/* tf.data's shuffle: a buffer of `buffer_size` elements, each output drawn
   uniformly from it and replaced by the next input. The order depends only
   on `seed` and on how many iterators this node has started, so a program
   sees the same sequence on every run; with reshuffle_each_iteration each
   new iterator (each epoch) gets a different order. */
ld_dataset *ld_dataset_shuffle(ld_dataset *in, int64_t buffer_size, uint64_t seed, int reshuffle_each_iteration);
/* count times (-1: forever). Stops when an epoch of the input is empty. */
ld_dataset *ld_dataset_repeat(ld_dataset *in, int64_t count);
ld_dataset *ld_dataset_take(ld_dataset *in, int64_t n);    /* -1: all */
ld_dataset *ld_dataset_skip(ld_dataset *in, int64_t n);
/* Run the input on a background thread, up to n elements ahead (n = 0: no
   prefetch, LD_AUTOTUNE: 2). */
ld_dataset *ld_dataset_prefetch(ld_dataset *in, int n);

/* A map callback: fill `out` (empty on entry) with new references; return
   LD_OK, or a status after ld_fail (the iterator reports it). */
typedef int (*ld_map_fn)(void *ud, const ld_element *in, ld_element *out);
#define LD_MAP_CALLER_THREAD 1   /* run only on the thread calling ld_dataset_iter_next */
/* `ud` belongs to the dataset from this call on (even when it fails):
   free_ud(ud) runs when the last node using it goes away, on the thread
   that drops the last reference. */
ld_dataset *ld_dataset_map(ld_dataset *in, ld_map_fn fn, void *ud, void (*free_ud)(void *), int flags);

/* A filter predicate: set *keep (nonzero: keep the element); return LD_OK or
   a status after ld_fail. flags and ud as for map. */
typedef int (*ld_filter_fn)(void *ud, const ld_element *in, int *keep);
ld_dataset *ld_dataset_filter(ld_dataset *in, ld_filter_fn fn, void *ud, void (*free_ud)(void *), int flags);
/* tf.data's zip: element i is the components of element i of every input,
   side by side (flat); stops at the end of the shortest input. */
ld_dataset *ld_dataset_zip(int n, ld_dataset *const *ins);
/* Elements i with i % num_shards == index (1 <= num_shards, 0 <= index < num_shards). */
ld_dataset *ld_dataset_shard(ld_dataset *in, int64_t num_shards, int64_t index);
/* {int64 scalar start + i, the element's components...} */
ld_dataset *ld_dataset_enumerate(ld_dataset *in, int64_t start);
/* The rows of every element (components must share dimension 0). */
ld_dataset *ld_dataset_unbatch(ld_dataset *in);
/* Keeps the elements of the first complete pass in memory; later iterators
   read them (copies) instead of the input. A pass left before its end keeps
   nothing. */
ld_dataset *ld_dataset_cache(ld_dataset *in);
/* tf.data's cache(filename): when the file exists, every iterator reads its
   elements from it (the input does not run, even in another program);
   otherwise a pass writes a temporary file beside it and, when the pass is
   complete, renames it to the name. A pass left before its end writes
   nothing. A file that is not an ldist cache, or is damaged, is an error. */
ld_dataset *ld_dataset_cache_file(ld_dataset *in, const char *path);

/* padded_batch: like batch, but the components of a batch may differ in
   their sizes (not their ranks or dtypes): each is padded at the end of
   every dimension, to the longest in the batch or to a fixed size.
   Component c < n: ndim[c] = -1 pads every dimension to the longest;
   otherwise ndim[c] must be the component's rank and shape[c][i] is the
   size of dimension i (-1: the longest in the batch; an element longer than
   a fixed size is an error); components c >= n: the longest. value[c] is
   component c's padding value (every c). pad NULL: the longest, and 0. */
typedef struct {
    int n;
    int ndim[LD_ELEMENT_MAX];
    int64_t shape[LD_ELEMENT_MAX][LD_MAX_DIMS];
    double value[LD_ELEMENT_MAX];
} ld_padding;
ld_dataset *ld_dataset_padded_batch(ld_dataset *in, int64_t n, const ld_padding *pad, int drop_remainder);

/* A source whose elements a callback produces (tf.data's from_generator):
   open(ud) makes the state of one iterator (one pass; NULL after ld_fail is
   an error), next(ud, state, out) fills out with new references and returns
   1, or 0 at the end, or -1 after ld_fail; close(ud, state) frees the state
   (on the thread that frees the iterator). flags and ud as for map
   (LD_MAP_CALLER_THREAD: a prefetch above it runs nothing ahead). */
typedef struct {
    void *(*open)(void *ud);
    int (*next)(void *ud, void *state, ld_element *out);
    void (*close)(void *ud, void *state);
    /* what a C source knows (known != 0): its components per element and
       its cardinality (or LD_CARD_UNKNOWN); else both are unknown */
    int known, components;
    int64_t cardinality;
} ld_generator;
ld_dataset *ld_dataset_from_generator(const ld_generator *g, void *ud, void (*free_ud)(void *), int flags);

/* Text sources (ld_data_text.c). Elements are one text tensor each
   (ld_tensor_text: a uint8 vector of the bytes, shown to Lua as a string).
   text_lines: tf.data's TextLineDataset, the lines of the files in order
   without their "\n" or "\r\n"; gzip-compressed files are read as text too.
   A file that cannot be opened is an error now, naming it; a read error
   during a pass ends that pass with an error naming the file and line.
   from_strings: element i is s[i] (len NULL: NUL-terminated). */
ld_dataset *ld_dataset_text_lines(int n, const char *const *paths);
ld_dataset *ld_dataset_from_strings(int n, const char *const *s, const size_t *len);

ld_dataset *ld_dataset_retain(ld_dataset *ds);
void ld_dataset_release(ld_dataset *ds);                   /* NULL is fine */
/* Elements per epoch when known, LD_CARD_INFINITE or LD_CARD_UNKNOWN. */
int64_t ld_dataset_cardinality(const ld_dataset *ds);
/* "from_tensor_slices(60000x28x28 float32, 60000 int64) -> batch(32)" into buf. */
char *ld_dataset_describe(const ld_dataset *ds, char *buf, size_t n);
/* Components per element, or -1 when only a map could tell. */
int ld_dataset_components(const ld_dataset *ds);

ld_dataset_iter *ld_dataset_iter_new(ld_dataset *ds);     /* NULL + ld_error() */
/* 1: an element in *out (out->n tensors, owned by the caller); 0: the end
   (and every later call); -1: an error, ld_error() says which. */
int ld_dataset_iter_next(ld_dataset_iter *it, ld_element *out);
void ld_dataset_iter_free(ld_dataset_iter *it);             /* NULL is fine */

/* Batches split over the devices of a synchronous strategy. When ds yields
   batches of rows of one source (batch over from_tensor_slices or range,
   through shuffle, repeat, take and skip), each replica's rows can be
   gathered straight into a tensor on its device, by that device's executor
   when it has one, in parallel: nothing gathers the whole batch on the
   issuing thread and nothing copies it again to the replicas. */
int ld_dataset_splittable(const ld_dataset *ds);
/* The next batch split over n devices: of its k rows replica r gets
   floor(k/n), plus one of the k % n left over for the first ones (an uneven
   last batch gives smaller or empty parts); parts[r] receives its tensors,
   on devs[r] (CPU devices get their rows gathered there; other devices get
   a host gather copied over). *rows = k. 1, 0 (the end), -1 (error). Only
   for an iterator of a splittable dataset; use it or ld_dataset_iter_next
   throughout. */
int ld_dataset_iter_next_split(ld_dataset_iter *it, int n, ld_device *const *devs, ld_element *parts, int64_t *rows);
/* One worker's part of the next batch, for a worker among n (several
   processes, each reading the same batches): part r of its k rows split as
   above, into *part on dev, and sources whole_from.. of all k rows into
   *whole on the host (the labels, for metrics of the whole batch); *rows =
   k, *first = the part's first row. A worker gathers only its own rows of
   the large inputs. A range source gives no whole sources. 1, 0, -1 as above. */
int ld_dataset_iter_next_part(ld_dataset_iter *it, int n, int r, ld_device *dev, int whole_from, ld_element *part,
                              ld_element *whole, int64_t *rows, int64_t *first);
/* Advance past one element: 1, 0 at the end, -1 on error. A batch of rows of
   one source (from_tensor_slices, shuffle, take, skip, batch) draws its row
   numbers only and gathers nothing (ParameterServerStrategy's workers skip
   the batches of the others this way). */
int ld_dataset_iter_skip(ld_dataset_iter *it);

#endif
