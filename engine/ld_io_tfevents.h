/*
 * ld_io_tfevents.h - TensorBoard event files (what tf.summary's file writer and
 * Keras's TensorBoard callback write): scalars and weight histograms.
 *
 * A file is a sequence of TFRecords: uint64 length (little-endian), uint32
 * masked crc32c of those 8 bytes, the data, uint32 masked crc32c of the data.
 * Each record is a serialized tensorflow.Event: wall_time (double, field 1),
 * step (int64, 2), and either file_version (string, 3; "brain.Event:2", the
 * first record) or summary (5): Summary{ repeated Value value = 1 { string
 * tag = 1; float simple_value = 2 } }. The three messages are encoded here by
 * hand (a few varints and fixed-width fields), no protobuf library needed.
 *
 * The file is DIR/events.out.tfevents.<unix seconds>.<hostname>.<pid>.<n>.v2,
 * TensorFlow 2's name (n counts the writers this process opened).
 *
 *     ld_tfevents *w = ld_tfevents_open("logs/train");
 *     ld_tfevents_scalar(w, "epoch_loss", 0.42f, 3);
 *     ld_tfevents_close(w);
 */
#ifndef LD_IO_TFEVENTS_H
#define LD_IO_TFEVENTS_H

#include <stddef.h>
#include <stdint.h>

typedef struct ld_tfevents ld_tfevents;

/* Create DIR (and its parents) and a new event file in it, holding the
   file_version record. NULL + ld_error on failure. */
ld_tfevents *ld_tfevents_open(const char *dir);
/* The file's path. */
const char *ld_tfevents_path(const ld_tfevents *w);
/* One scalar: an Event{wall_time = now, step, summary{value{tag, simple_value}}}.
   LD_OK, or LD_EIO / LD_EARG + ld_error. */
int ld_tfevents_scalar(ld_tfevents *w, const char *tag, float value, int64_t step);
/* The same with a given wall time (seconds since the epoch). */
int ld_tfevents_scalar_at(ld_tfevents *w, const char *tag, float value, int64_t step, double wall_time);
/* A histogram of n floats as tf.summary.histogram (TF 2) writes one: a
   summary value holding a float64 tensor of LD_TFEVENTS_HISTOGRAM_BUCKETS rows
   [left edge, right edge, count] with plugin "histograms", which TensorBoard
   shows under Histograms and Distributions. */
#define LD_TFEVENTS_HISTOGRAM_BUCKETS 30      /* tf.summary.histogram's default */
int ld_tfevents_histogram(ld_tfevents *w, const char *tag, const float *data, size_t n, int64_t step);
/* The buckets alone (k rows of 3 doubles into out), TF's _buckets rule. */
void ld_tfevents_histogram_buckets(const float *x, size_t n, int k, double *out);
/* Write what is buffered to the file (TensorBoard reads a file as it grows). */
int ld_tfevents_flush(ld_tfevents *w);
/* Flush, close and free (NULL: nothing). LD_OK or LD_EIO. */
int ld_tfevents_close(ld_tfevents *w);

/* CRC-32C (Castagnoli), as TFRecord uses it: crc32c("123456789") = 0xE3069283.
   The SSE4.2 crc32 instruction where the CPU has it, else a table. */
uint32_t ld_crc32c(uint32_t crc, const void *data, size_t n);
/* TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8 */
uint32_t ld_crc32c_masked(const void *data, size_t n);
/* The TFRecord framing of `n` bytes of data into out (n + 16 bytes). */
void ld_tfevents_frame(const void *data, size_t n, unsigned char *out);

#endif
