/*
 * ld_io_tfevents.c - TensorBoard event files: TFRecord framing of hand-encoded
 * tensorflow.Event protobufs (see ld_io_tfevents.h for the format).
 */
#define _GNU_SOURCE
#include "ld_io_tfevents.h"
#include "ld_core.h"
#include "ld_file.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define LD_CRC_SSE42 1
#endif

struct ld_tfevents {
    FILE *f;
    char *path;
};

/* ---- crc32c ------------------------------------------------------------- */
static uint32_t crc_table[8][256];
static int crc_hw = -1;             /* -1 unknown, 0 table, 1 SSE4.2 */

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
}

static uint32_t crc_sw(uint32_t c, const unsigned char *p, size_t n) {
    while (n >= 8) {            /* slicing-by-8 */
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        c = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^ crc_table[5][(lo >> 16) & 0xff] ^
            crc_table[4][lo >> 24] ^ crc_table[3][p[4]] ^ crc_table[2][p[5]] ^ crc_table[1][p[6]] ^ crc_table[0][p[7]];
        p += 8; n -= 8;
    }
    while (n--) c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xff];
    return c;
}

#ifdef LD_CRC_SSE42
__attribute__((target("sse4.2")))
static uint32_t crc_sse42(uint32_t c, const unsigned char *p, size_t n) {
#ifdef __x86_64__
    uint64_t c64 = c;
    while (n >= 8) { uint64_t v; memcpy(&v, p, 8); c64 = _mm_crc32_u64(c64, v); p += 8; n -= 8; }
    c = (uint32_t)c64;
#endif
    while (n--) c = _mm_crc32_u8(c, *p++);
    return c;
}
#endif

static pthread_once_t crc_once = PTHREAD_ONCE_INIT;
static void crc_setup(void) {
    crc_init();
#ifdef LD_CRC_SSE42
    __builtin_cpu_init();
    crc_hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
#else
    crc_hw = 0;
#endif
    if (getenv("LDIST_CRC32C_PORTABLE")) crc_hw = 0;      /* tests check the table path */
}

uint32_t ld_crc32c(uint32_t crc, const void *data, size_t n) {
    pthread_once(&crc_once, crc_setup);
    uint32_t c = ~crc;
#ifdef LD_CRC_SSE42
    if (crc_hw) return ~crc_sse42(c, data, n);
#endif
    return ~crc_sw(c, data, n);
}

uint32_t ld_crc32c_masked(const void *data, size_t n) {
    uint32_t c = ld_crc32c(0, data, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static void put32(unsigned char *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i)); }
static void put64(unsigned char *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i)); }

void ld_tfevents_frame(const void *data, size_t n, unsigned char *out) {
    put64(out, (uint64_t)n);
    put32(out + 8, ld_crc32c_masked(out, 8));
    memcpy(out + 12, data, n);
    put32(out + 12 + n, ld_crc32c_masked(data, n));
}

/* ---- protobuf encoding -------------------------------------------------- */
typedef struct { unsigned char *p; size_t n, cap; int bad; } buf;

static void b_put(buf *b, const void *src, size_t n) {
    if (b->bad) return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n) cap *= 2;
        unsigned char *q = realloc(b->p, cap);
        if (!q) { b->bad = 1; return; }
        b->p = q; b->cap = cap;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void b_varint(buf *b, uint64_t v) {
    unsigned char t[10]; int k = 0;
    do { t[k] = (unsigned char)(v & 0x7f); v >>= 7; if (v) t[k] |= 0x80; k++; } while (v);
    b_put(b, t, (size_t)k);
}
static void b_key(buf *b, int field, int wire) { b_varint(b, (uint64_t)(field << 3 | wire)); }
static void b_bytes(buf *b, int field, const void *p, size_t n) {
    b_key(b, field, 2); b_varint(b, n); b_put(b, p, n);
}
static void b_double(buf *b, int field, double d) {
    uint64_t u; memcpy(&u, &d, 8);
    unsigned char t[8]; put64(t, u);
    b_key(b, field, 1); b_put(b, t, 8);
}
static void b_float(buf *b, int field, float f) {
    uint32_t u; memcpy(&u, &f, 4);
    unsigned char t[4]; put32(t, u);
    b_key(b, field, 5); b_put(b, t, 4);
}


/* Frame and write one serialized Event */
static int write_record(ld_tfevents *w, const buf *ev) {
    if (ev->bad) return ld_fail(LD_ENOMEM, "out of memory encoding a TensorBoard event");
    unsigned char head[12], tail[4];
    put64(head, (uint64_t)ev->n);
    put32(head + 8, ld_crc32c_masked(head, 8));
    put32(tail, ld_crc32c_masked(ev->p, ev->n));
    if (fwrite(head, 1, 12, w->f) != 12 || fwrite(ev->p, 1, ev->n, w->f) != ev->n || fwrite(tail, 1, 4, w->f) != 4)
        return ld_fail(LD_EIO, "cannot write %s: %s", w->path, strerror(errno));
    return LD_OK;
}

/* ---- the writer --------------------------------------------------------- */
static int mkdir_p(const char *dir) {
    size_t n = strlen(dir);
    char *b = malloc(n + 1);
    if (!b) return ld_fail(LD_ENOMEM, "out of memory");
    memcpy(b, dir, n + 1);
    for (char *q = b + 1; ; q++) {
        if (*q == '/' || *q == 0) {
            char c = *q;
            *q = 0;
            if (mkdir(b, 0755) && errno != EEXIST) {
                int st = ld_fail(LD_EIO, "cannot create directory %s: %s", b, strerror(errno));
                free(b);
                return st;
            }
            *q = c;
            if (!c) break;
        }
    }
    free(b);
    return LD_OK;
}

static atomic_int writers_opened;

ld_tfevents *ld_tfevents_open(const char *dir) {
    if (!dir || !*dir) { ld_fail(LD_EARG, "an event file needs a directory"); return NULL; }
    if (mkdir_p(dir) != LD_OK) return NULL;
    char host[256] = "localhost";
    if (gethostname(host, sizeof host - 1) != 0) strcpy(host, "localhost");
    host[sizeof host - 1] = 0;
    double wall = ld_wall_time();
    ld_tfevents *w = calloc(1, sizeof *w);
    if (!w) { ld_fail(LD_ENOMEM, "out of memory"); return NULL; }
    for (int tries = 0; tries < 1000; tries++) {
        int k = atomic_fetch_add(&writers_opened, 1);
        free(w->path);
        if (asprintf(&w->path, "%s/events.out.tfevents.%lld.%s.%d.%d.v2", dir, (long long)wall, host, (int)getpid(), k) < 0) {
            w->path = NULL;
            break;
        }
        /* a fresh name, never an existing file or a planted link (ld_file.h) */
        if ((w->f = ld_file_create(w->path))) break;
        if (errno != EEXIST) break;
    }
    if (!w->f) {
        ld_fail(LD_EIO, "cannot create an event file in %s: %s", dir, strerror(errno));
        free(w->path); free(w);
        return NULL;
    }
    buf ev = {0};
    b_double(&ev, 1, (double)(long long)wall);       /* TF writes whole seconds here */
    b_bytes(&ev, 3, "brain.Event:2", 13);
    int st = write_record(w, &ev);
    free(ev.p);
    if (st != LD_OK || ld_tfevents_flush(w) != LD_OK) {
        fclose(w->f); free(w->path); free(w);
        return NULL;
    }
    return w;
}

const char *ld_tfevents_path(const ld_tfevents *w) { return w ? w->path : NULL; }

int ld_tfevents_scalar_at(ld_tfevents *w, const char *tag, float value, int64_t step, double wall_time) {
    if (!w || !w->f) return ld_fail(LD_EARG, "the event file is closed");
    if (!tag || !*tag) return ld_fail(LD_EARG, "a scalar needs a tag");
    size_t tn = strlen(tag);
    buf val = {0}, sum = {0}, ev = {0};
    b_bytes(&val, 1, tag, tn);                      /* Summary.Value */
    b_float(&val, 2, value);
    if (val.bad) sum.bad = 1; else b_bytes(&sum, 1, val.p, val.n);   /* Summary */
    b_double(&ev, 1, wall_time);                    /* Event */
    if (step != 0) { b_key(&ev, 2, 0); b_varint(&ev, (uint64_t)step); }
    if (sum.bad) ev.bad = 1; else b_bytes(&ev, 5, sum.p, sum.n);
    int st = write_record(w, &ev);
    free(val.p); free(sum.p); free(ev.p);
    return st;
}

int ld_tfevents_scalar(ld_tfevents *w, const char *tag, float value, int64_t step) {
    return ld_tfevents_scalar_at(w, tag, value, step, ld_wall_time());
}

/* tf.summary.histogram's buckets (tensorboard/plugins/histogram/summary_v2.py,
   _buckets), in float64 as it computes them: k equal-width buckets over
   [min, max], a value's bucket floor((x - min) / width) clamped to the last,
   the left edges min + i * width (TF's linspace) and the last right edge max
   itself; a single value puts every count in the last bucket with both edges
   at the value; no data gives k rows of zeros. Non-finite values are left
   out (TF's buckets are undefined for them), so a weight gone NaN still
   shows its finite part. out holds k * 3 doubles, row i = left, right, count. */
void ld_tfevents_histogram_buckets(const float *x, size_t n, int k, double *out) {
    memset(out, 0, (size_t)k * 3 * sizeof *out);
    double lo = 0, hi = 0;
    size_t finite = 0;
    for (size_t i = 0; i < n; i++) {
        double v = x[i];
        if (!isfinite(v)) continue;
        if (!finite++) lo = hi = v;
        else { if (v < lo) lo = v; if (v > hi) hi = v; }
    }
    if (!finite || k <= 0) return;
    double range = hi - lo;
    if (range == 0) {
        for (int i = 0; i < k; i++) out[3 * i] = out[3 * i + 1] = hi;
        out[3 * (k - 1) + 2] = (double)finite;
        return;
    }
    double width = range / k;
    for (size_t i = 0; i < n; i++) {
        double v = x[i];
        if (!isfinite(v)) continue;
        double b = floor((v - lo) / width);
        int j = b >= k - 1 ? k - 1 : (int)b;
        out[3 * j + 2] += 1;
    }
    double step = range / k;       /* linspace(lo, hi, k + 1): lo + i * (hi - lo) / k */
    for (int i = 0; i < k; i++) {
        out[3 * i] = lo + step * i;
        out[3 * i + 1] = i + 1 == k ? hi : lo + step * (i + 1);
    }
}

/* Event{wall_time, step, summary{value{tag, tensor (field 8), metadata (9)}}}
   as TF 2's tf.summary.histogram writes it: a float64 TensorProto of shape
   [k, 3] (dtype DT_DOUBLE = 2, tensor_content little-endian) and
   SummaryMetadata{plugin_data{plugin_name "histograms"}, data_class
   DATA_CLASS_TENSOR = 2}. */
int ld_tfevents_histogram(ld_tfevents *w, const char *tag, const float *data, size_t n, int64_t step) {
    if (!w || !w->f) return ld_fail(LD_EARG, "the event file is closed");
    if (!tag || !*tag) return ld_fail(LD_EARG, "a histogram needs a tag");
    enum { K = LD_TFEVENTS_HISTOGRAM_BUCKETS };
    double rows[K * 3];
    ld_tfevents_histogram_buckets(data, n, K, rows);
    unsigned char content[K * 3 * 8];
    for (int i = 0; i < K * 3; i++) { uint64_t u; memcpy(&u, &rows[i], 8); put64(content + 8 * i, u); }
    buf dim0 = {0}, dim1 = {0}, shape = {0}, tensor = {0}, plugin = {0}, meta = {0}, val = {0}, sum = {0}, ev = {0};
    b_key(&dim0, 1, 0); b_varint(&dim0, K);                 /* TensorShapeProto.Dim.size */
    b_key(&dim1, 1, 0); b_varint(&dim1, 3);
    b_bytes(&shape, 2, dim0.p, dim0.n);                       /* TensorShapeProto.dim */
    b_bytes(&shape, 2, dim1.p, dim1.n);
    b_key(&tensor, 1, 0); b_varint(&tensor, 2);               /* TensorProto.dtype = DT_DOUBLE */
    b_bytes(&tensor, 2, shape.p, shape.n);
    b_bytes(&tensor, 4, content, sizeof content);             /* tensor_content */
    b_bytes(&plugin, 1, "histograms", 10);                    /* PluginData.plugin_name */
    b_bytes(&meta, 1, plugin.p, plugin.n);
    b_key(&meta, 4, 0); b_varint(&meta, 2);                   /* data_class = DATA_CLASS_TENSOR */
    b_bytes(&val, 1, tag, strlen(tag));
    b_bytes(&val, 8, tensor.p, tensor.n);
    b_bytes(&val, 9, meta.p, meta.n);
    b_bytes(&sum, 1, val.p, val.n);
    b_double(&ev, 1, ld_wall_time());
    if (step != 0) { b_key(&ev, 2, 0); b_varint(&ev, (uint64_t)step); }
    b_bytes(&ev, 5, sum.p, sum.n);
    /* an allocation that failed anywhere leaves a short buffer behind it */
    ev.bad |= dim0.bad | dim1.bad | shape.bad | tensor.bad | plugin.bad | meta.bad | val.bad | sum.bad;
    int st = write_record(w, &ev);
    free(dim0.p); free(dim1.p); free(shape.p); free(tensor.p); free(plugin.p); free(meta.p);
    free(val.p); free(sum.p); free(ev.p);
    return st;
}

int ld_tfevents_flush(ld_tfevents *w) {
    if (!w || !w->f) return LD_OK;
    if (fflush(w->f) != 0) return ld_fail(LD_EIO, "cannot write %s: %s", w->path, strerror(errno));
    return LD_OK;
}

int ld_tfevents_close(ld_tfevents *w) {
    if (!w) return LD_OK;
    int st = LD_OK;
    if (w->f && fclose(w->f) != 0) st = ld_fail(LD_EIO, "cannot write %s: %s", w->path, strerror(errno));
    free(w->path);
    free(w);
    return st;
}
