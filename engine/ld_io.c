/*
 * ld_io.c - IDX and CSV loaders, safetensors save/load (see ld_io.h).
 *
 * Only libc and zlib. Every reader bounds what it allocates by what the file
 * can actually hold, so a corrupt header costs an error message, never a
 * multi-gigabyte allocation or a crash.
 */
#include "ld_io.h"
#include "ld_device.h"
#include "ld_half.h"
#include "ld_file.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "ld_io.c writes safetensors with host byte order: a little-endian host is assumed"
#endif

/* ======================================================================
 * IDX (http://yann.lecun.com/exdb/mnist/): magic 00 00 TYPE NDIM, NDIM
 * big-endian uint32 sizes, then big-endian data.
 * ==================================================================== */

typedef struct { int code; int size; const char *name; ld_dtype natural; } idx_type;
static const idx_type idx_types[] = {
    {0x08, 1, "uint8", LD_U8},   {0x09, 1, "int8", LD_I32},  {0x0B, 2, "int16", LD_I32},
    {0x0C, 4, "int32", LD_I32},  {0x0D, 4, "float32", LD_F32}, {0x0E, 8, "float64", LD_F32},
};

static double idx_decode(const idx_type *ty, const unsigned char *p) {
    switch (ty->code) {
    case 0x08: return p[0];
    case 0x09: return (int8_t)p[0];
    case 0x0B: return (int16_t)(uint16_t)((p[0] << 8) | p[1]);
    case 0x0C: return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
    case 0x0D: {
        uint32_t u = ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
        float f; memcpy(&f, &u, 4); return f;
    }
    default: {
        uint64_t u = 0;
        for (int i = 0; i < 8; i++) u = (u << 8) | p[i];
        double d; memcpy(&d, &u, 8); return d;
    }
    }
}

/* 0 when v (NaN included) does not fit an integer dtype: a cast would be undefined. */
static int store_as(void *dst, ld_dtype dt, int64_t i, double v) {
    switch (dt) {
    case LD_F32: ((float *)dst)[i] = (float)v; return 1;
    case LD_I32: if (!(v > -2147483649.0 && v < 2147483648.0)) return 0; ((int32_t *)dst)[i] = (int32_t)v; return 1;
    case LD_I64: if (!(v >= -9223372036854775808.0 && v < 9223372036854775808.0)) return 0; ((int64_t *)dst)[i] = (int64_t)v; return 1;
    case LD_U8: if (!(v > -1.0 && v < 256.0)) return 0; ((uint8_t *)dst)[i] = (uint8_t)v; return 1;
    case LD_F16: ((uint16_t *)dst)[i] = ld_f32_to_f16((float)v); return 1;
    case LD_BF16: ((uint16_t *)dst)[i] = ld_f32_to_bf16((float)v); return 1;
    default: return 0;
    }
}

/* Read exactly n bytes; returns the count read (short = end of file) or -1. */
static int64_t gz_read_all(gzFile gz, void *buf, int64_t n) {
    int64_t got = 0;
    while (got < n) {
        unsigned chunk = (unsigned)((n - got) > (1 << 30) ? (1 << 30) : (n - got));
        int r = gzread(gz, (char *)buf + got, chunk);
        if (r < 0) return -1;
        if (r == 0) break;
        got += r;
    }
    return got;
}

static const char *gz_errmsg(gzFile gz) {
    int errnum = 0;
    const char *m = gzerror(gz, &errnum);
    if (errnum == Z_ERRNO) return strerror(errno);
    return m && *m ? m : "read error";
}

ld_tensor *ld_load_idx_as(const char *path, int dtype, double scale) {
    if (!path) { ld_fail(LD_EARG, "load_idx: no path given"); return NULL; }
    if (dtype >= LD_DTYPE_COUNT) { ld_fail(LD_EARG, "load_idx: bad dtype %d", dtype); return NULL; }
    if (!isfinite(scale)) { ld_fail(LD_EARG, "load_idx: scale must be a finite number, got %g", scale); return NULL; }
    /* The size of the file opened, not of whatever the path names a moment later. */
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        ld_fail(LD_EIO, "cannot open '%s': %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        return NULL;
    }
    int64_t fsz = (int64_t)st.st_size;
    errno = 0;
    gzFile gz = gzdopen(fd, "rb");
    if (!gz) {
        ld_fail(LD_EIO, "cannot open '%s': %s", path, errno ? strerror(errno) : "out of memory");
        close(fd);
        return NULL;
    }
    gzbuffer(gz, 1 << 20);
    ld_tensor *out = NULL;
    unsigned char *stage = NULL;
    unsigned char hdr[4 + 4 * 255];
    int64_t r = gz_read_all(gz, hdr, 4);
    if (r < 0) { ld_fail(LD_EFORMAT, "'%s': %s", path, gz_errmsg(gz)); goto done; }
    if (r < 4) { ld_fail(LD_EFORMAT, "'%s' is truncated: %d bytes, an IDX file has at least 4", path, (int)r); goto done; }
    const idx_type *ty = NULL;
    for (size_t i = 0; i < sizeof idx_types / sizeof idx_types[0]; i++)
        if (idx_types[i].code == hdr[2]) ty = &idx_types[i];
    int ndim = hdr[3];
    if (hdr[0] != 0 || hdr[1] != 0 || !ty || ndim < 1 || ndim > LD_MAX_DIMS) {
        ld_fail(LD_EFORMAT, "'%s' is not an IDX file (magic 0x%02x%02x%02x%02x)", path, hdr[0], hdr[1], hdr[2], hdr[3]);
        goto done;
    }
    r = gz_read_all(gz, hdr + 4, 4 * ndim);
    if (r < 0) { ld_fail(LD_EFORMAT, "'%s': %s", path, gz_errmsg(gz)); goto done; }
    if (r < 4 * ndim) { ld_fail(LD_EFORMAT, "'%s' is truncated in its header (%d dimensions announced)", path, ndim); goto done; }
    int64_t shape[LD_MAX_DIMS], numel = 1;
    for (int d = 0; d < ndim; d++) {
        const unsigned char *p = hdr + 4 + 4 * d;
        shape[d] = ((int64_t)p[0] << 24) | ((int64_t)p[1] << 16) | ((int64_t)p[2] << 8) | p[3];
        if (__builtin_mul_overflow(numel, shape[d], &numel) || numel > ((int64_t)1 << 40)) {
            ld_fail(LD_EFORMAT, "'%s' announces an impossibly large IDX array", path);
            goto done;
        }
    }
    int64_t payload = numel * ty->size;
    /* Bound the allocation by what the file can hold: exactly for plain
       files, by deflate's best ratio (about 1032:1) for compressed ones. */
    int64_t header_bytes = 4 + 4 * (int64_t)ndim;
    int64_t can_hold = gzdirect(gz) ? fsz - header_bytes : fsz * 1040 + 4096;
    if (fsz >= 0 && payload > can_hold) {
        if (gzdirect(gz))
            ld_fail(LD_EFORMAT, "'%s' is truncated: its header announces %lld bytes of data, the file holds %lld",
                    path, (long long)payload, (long long)(fsz - header_bytes));
        else
            ld_fail(LD_EFORMAT, "'%s' is truncated or corrupt: its header announces %lld bytes of data, "
                    "more than a %lld-byte gzip file can hold", path, (long long)payload, (long long)fsz);
        goto done;
    }
    ld_dtype dt = dtype < 0 ? ty->natural : (ld_dtype)dtype;
    out = ld_tensor_empty(dt, ndim, shape, NULL);
    if (!out) goto done;
    void *dst = ld_tensor_data(out);
    if (!dst && numel) { ld_tensor_release(out); out = NULL; goto done; }

    if (ty->code == 0x08 && dt == LD_U8 && scale == 1.0) {       /* the common case: straight in */
        r = gz_read_all(gz, dst, payload);
        if (r < 0) { ld_fail(LD_EFORMAT, "'%s': %s", path, gz_errmsg(gz)); goto fail; }
        if (r < payload) goto truncated;
        goto done;
    }
    /* Convert through a staging buffer. A uint8 source uses a 256-entry table. */
    const int64_t chunk_elems = (1 << 20) / ty->size;
    stage = malloc((size_t)(chunk_elems * ty->size));
    if (!stage) { ld_fail(LD_ENOMEM, "load_idx: out of memory"); goto fail; }
    float lut[256];
    if (ty->code == 0x08)
        for (int i = 0; i < 256; i++) lut[i] = (float)(i * scale);
    for (int64_t i0 = 0; i0 < numel; i0 += chunk_elems) {
        int64_t k = numel - i0 < chunk_elems ? numel - i0 : chunk_elems;
        r = gz_read_all(gz, stage, k * ty->size);
        if (r < 0) { ld_fail(LD_EFORMAT, "'%s': %s", path, gz_errmsg(gz)); goto fail; }
        if (r < k * ty->size) { payload = i0 * ty->size + r; goto truncated; }
        if (ty->code == 0x08 && dt == LD_F32) {
            float *o = (float *)dst + i0;
            for (int64_t j = 0; j < k; j++) o[j] = lut[stage[j]];
        } else if (ty->code == 0x08 && dt == LD_I64 && scale == 1.0) {
            int64_t *o = (int64_t *)dst + i0;
            for (int64_t j = 0; j < k; j++) o[j] = stage[j];
        } else {
            for (int64_t j = 0; j < k; j++) {
                double v = idx_decode(ty, stage + j * ty->size) * scale;
                if (!store_as(dst, dt, i0 + j, v)) {
                    ld_fail(LD_EARG, "load_idx: element %lld of '%s' is %g (scaled by %g), which %s cannot hold",
                            (long long)(i0 + j), path, v, scale, ld_dtype_name(dt));
                    goto fail;
                }
            }
        }
    }
    goto done;
truncated:
    ld_fail(LD_EFORMAT, "'%s' is truncated: its header announces %lld bytes of data, the file holds fewer",
            path, (long long)(numel * ty->size));
fail:
    ld_tensor_release(out);
    out = NULL;
done:
    free(stage);
    gzclose(gz);
    return out;
}

ld_tensor *ld_load_idx(const char *path) { return ld_load_idx_as(path, -1, 1.0); }

/* ======================================================================
 * CSV
 * ==================================================================== */

void ld_strings_free(char **s, int n) {
    if (!s) return;
    for (int i = 0; i < n; i++) free(s[i]);
    free(s);
}

#define LD_CSV_MAX_FIELDS (1 << 24)   /* columns in a line: an int, with room to spare */

/* Split `line` in place at `delim`; returns the field count (fields[] up to max). */
static int csv_split(char *line, char delim, char **fields, int max) {
    int n = 0;
    char *p = line;
    for (;;) {
        char *f = p, *e;
        if (*f == '"') {                     /* quoted: up to the closing quote ("" escapes a quote) */
            char *w = f;
            p = f + 1;
            while (*p) {
                if (*p == '"' && p[1] == '"') { *w++ = '"'; p += 2; }
                else if (*p == '"') { p++; break; }
                else *w++ = *p++;
            }
            *w = 0;
            e = strchr(p, delim);
            if (n < max) fields[n] = f;
            n++;
            if (!e) break;
            p = e + 1;
            continue;
        }
        e = strchr(p, delim);
        if (e) *e = 0;
        if (n < max) fields[n] = f;
        n++;
        if (!e) break;
        p = e + 1;
    }
    return n;
}

static char *trim(char *s) {
    while (*s == ' ' || *s == '\t') s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\n')) s[--n] = 0;
    return s;
}

/* 1 and *v when s is a number (or empty: NaN), else 0. */
static int parse_number(const char *s, float *v) {
    if (!*s) { *v = NAN; return 1; }
    char *end;
    double d = strtod(s, &end);
    if (end == s || *end) return 0;
    *v = (float)d;
    return 1;
}

ld_tensor *ld_load_csv(const char *path, const ld_csv_options *opt, char ***col_names, int *n_names) {
    if (col_names) *col_names = NULL;
    if (n_names) *n_names = 0;
    if (!path) { ld_fail(LD_EARG, "load_csv: no path given"); return NULL; }
    int header = opt ? opt->header : -1;
    char delim = opt && opt->delimiter ? opt->delimiter : ',';
    FILE *f = fopen(path, "r");
    if (!f) { ld_fail(LD_EIO, "cannot open '%s': %s", path, strerror(errno)); return NULL; }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    char **fields = NULL, **names = NULL;
    int max_fields = 0, cols = -1, nnames = 0;
    float *vals = NULL;
    size_t nvals = 0, vcap = 0;
    int64_t rows = 0, lineno = 0;
    int first = 1;
    ld_tensor *out = NULL;
    while ((len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        char *s = line;
        if (lineno == 1 && (unsigned char)s[0] == 0xEF && (unsigned char)s[1] == 0xBB && (unsigned char)s[2] == 0xBF)
            s += 3;                          /* a UTF-8 byte order mark */
        if (!*trim(s)) continue;             /* blank lines */
        /* Size the field array by the delimiters (an upper bound), then split in place. */
        int64_t bound = 1;
        for (const char *q = s; *q; q++) bound += *q == delim;
        if (bound > LD_CSV_MAX_FIELDS) {
            ld_fail(LD_EFORMAT, "'%s' line %lld has %lld fields, more than the %d allowed", path, (long long)lineno,
                    (long long)bound, LD_CSV_MAX_FIELDS);
            goto fail;
        }
        if (bound > max_fields) {
            char **nfp = realloc(fields, sizeof *fields * (size_t)bound);
            if (!nfp) { ld_fail(LD_ENOMEM, "load_csv: out of memory"); goto fail; }
            fields = nfp;
            max_fields = (int)bound;
        }
        int nf = csv_split(s, delim, fields, max_fields);
        if (cols < 0) cols = nf;
        if (first) {
            first = 0;
            int is_header = header;
            if (is_header < 0) {
                is_header = 0;
                for (int i = 0; i < nf; i++) { float v; if (!parse_number(trim(fields[i]), &v)) is_header = 1; }
            }
            if (is_header) {
                names = calloc((size_t)nf, sizeof *names);
                if (!names) { ld_fail(LD_ENOMEM, "load_csv: out of memory"); goto fail; }
                nnames = nf;
                for (int i = 0; i < nf; i++)
                    if (!(names[i] = strdup(trim(fields[i])))) { ld_fail(LD_ENOMEM, "load_csv: out of memory"); goto fail; }
                continue;
            }
        }
        if (nf != cols) {
            ld_fail(LD_EFORMAT, "'%s' line %lld has %d fields, expected %d", path, (long long)lineno, nf, cols);
            goto fail;
        }
        if (nvals + (size_t)nf > vcap) {
            size_t nc = vcap ? vcap * 2 : 4096;
            while (nc < nvals + (size_t)nf) nc *= 2;
            float *nv = realloc(vals, nc * sizeof *vals);
            if (!nv) { ld_fail(LD_ENOMEM, "load_csv: out of memory"); goto fail; }
            vals = nv;
            vcap = nc;
        }
        for (int i = 0; i < nf; i++) {
            char *fs = trim(fields[i]);
            if (!parse_number(fs, &vals[nvals + i])) {
                ld_fail(LD_EFORMAT, "'%s' line %lld, column %d: '%.40s' is not a number", path, (long long)lineno, i + 1, fs);
                goto fail;
            }
        }
        nvals += (size_t)nf;
        rows++;
    }
    if (ferror(f)) { ld_fail(LD_EIO, "cannot read '%s': %s", path, strerror(errno)); goto fail; }
    if (cols < 0) { ld_fail(LD_EFORMAT, "'%s' is empty", path); goto fail; }
    int64_t shape[2] = {rows, cols};
    out = ld_tensor_empty(LD_F32, 2, shape, NULL);
    if (!out) goto fail;
    if (nvals) {
        void *dst = ld_tensor_data(out);
        if (!dst) { ld_tensor_release(out); out = NULL; goto fail; }
        memcpy(dst, vals, nvals * sizeof *vals);
    }
    if (col_names && names) { *col_names = names; names = NULL; if (n_names) *n_names = nnames; }
fail:
    ld_strings_free(names, nnames);
    free(vals);
    free(fields);
    free(line);
    fclose(f);
    return out;
}

/* ======================================================================
 * safetensors
 * ==================================================================== */

void ld_tensor_dict_free(ld_tensor_dict *d) {
    if (!d) return;
    for (int i = 0; i < d->n; i++) {
        if (d->names) free(d->names[i]);
        if (d->tensors) ld_tensor_release(d->tensors[i]);
    }
    free(d->names);
    free(d->tensors);
    d->n = 0;
    d->names = NULL;
    d->tensors = NULL;
}

/* ---- a growing string buffer ---- */
typedef struct { char *p; size_t n, cap; int oom; } sbuf;
static void sb_add(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 256;
        while (nc < b->n + n + 1) nc *= 2;
        char *np = realloc(b->p, nc);
        if (!np) { b->oom = 1; return; }
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
static void sb_str(sbuf *b, const char *s) { sb_add(b, s, strlen(s)); }
static void sb_printf(sbuf *b, const char *fmt, long long v) {
    char tmp[32];
    int n = snprintf(tmp, sizeof tmp, fmt, v);
    sb_add(b, tmp, (size_t)n);
}
static void sb_json_string(sbuf *b, const char *s) {
    sb_add(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        if (*p == '"') sb_add(b, "\\\"", 2);
        else if (*p == '\\') sb_add(b, "\\\\", 2);
        else if (*p == '\n') sb_add(b, "\\n", 2);
        else if (*p == '\t') sb_add(b, "\\t", 2);
        else if (*p == '\r') sb_add(b, "\\r", 2);
        else if (*p < 0x20) { snprintf(esc, sizeof esc, "\\u%04x", *p); sb_add(b, esc, 6); }
        else sb_add(b, (const char *)p, 1);
    }
    sb_add(b, "\"", 1);
}

const char *ld_safetensors_dtype_name(ld_dtype dt) {
    switch (dt) {
    case LD_F32: return "F32";
    case LD_I32: return "I32";
    case LD_I64: return "I64";
    case LD_U8: return "U8";
    case LD_F16: return "F16";
    case LD_BF16: return "BF16";
    default: return NULL;
    }
}

int ld_save_safetensors(const char *path, int n, const char *const *names, ld_tensor *const *tensors,
                        int n_meta, const char *const *meta_kv) {
    if (!path || !*path) return ld_fail(LD_EARG, "save_safetensors: no path given");
    if (n < 0 || (n > 0 && (!names || !tensors))) return ld_fail(LD_EARG, "save_safetensors: bad tensor list");
    if (n_meta < 0 || (n_meta > 0 && !meta_kv)) return ld_fail(LD_EARG, "save_safetensors: bad metadata list");
    for (int i = 0; i < n; i++) {
        if (!names[i] || !*names[i]) return ld_fail(LD_EARG, "save_safetensors: tensor %d has an empty name", i + 1);
        if (!strcmp(names[i], "__metadata__")) return ld_fail(LD_EARG, "save_safetensors: '__metadata__' cannot name a tensor");
        if (!tensors[i]) return ld_fail(LD_EARG, "save_safetensors: tensor '%s' is missing", names[i]);
        if (!ld_safetensors_dtype_name(tensors[i]->dtype))
            return ld_fail(LD_ETYPE, "save_safetensors: tensor '%s' has an unsupported dtype", names[i]);
        for (int j = 0; j < i; j++)
            if (!strcmp(names[i], names[j])) return ld_fail(LD_EARG, "save_safetensors: two tensors are named '%s'", names[i]);
    }
    for (int i = 0; i < 2 * n_meta; i++)
        if (!meta_kv[i]) return ld_fail(LD_EARG, "save_safetensors: metadata entry %d is missing", i / 2 + 1);

    int status = LD_OK;
    ld_tensor **host = calloc((size_t)n + 1, sizeof *host);
    int *order = calloc((size_t)n + 1, sizeof *order);
    sbuf hb = {0};
    if (!host || !order) { status = ld_fail(LD_ENOMEM, "save_safetensors: out of memory"); goto out; }
    for (int i = 0; i < n; i++)
        if (!(host[i] = ld_host_contiguous(tensors[i]))) { status = ld_error_status() ? ld_error_status() : LD_EINTERNAL; goto out; }
    /* Largest elements first (stable), as the reference writer does, so every
       tensor's data is aligned to its element size in the file. */
    int k = 0;
    for (size_t sz = 8; sz >= 1; sz /= 2)
        for (int i = 0; i < n; i++)
            if (ld_dtype_size(host[i]->dtype) == sz) order[k++] = i;
    LD_ASSERT(k == n);

    sb_str(&hb, "{");
    int first = 1;
    if (n_meta > 0) {
        sb_str(&hb, "\"__metadata__\":{");
        for (int i = 0; i < n_meta; i++) {
            if (i) sb_str(&hb, ",");
            sb_json_string(&hb, meta_kv[2 * i]);
            sb_str(&hb, ":");
            sb_json_string(&hb, meta_kv[2 * i + 1]);
        }
        sb_str(&hb, "}");
        first = 0;
    }
    long long off = 0;
    for (int j = 0; j < n; j++) {
        ld_tensor *t = host[order[j]];
        long long nb = (long long)(ld_tensor_numel(t) * (int64_t)ld_dtype_size(t->dtype));
        if (!first) sb_str(&hb, ",");
        first = 0;
        sb_json_string(&hb, names[order[j]]);
        sb_str(&hb, ":{\"dtype\":\"");
        sb_str(&hb, ld_safetensors_dtype_name(t->dtype));
        sb_str(&hb, "\",\"shape\":[");
        for (int d = 0; d < t->ndim; d++) sb_printf(&hb, d ? ",%lld" : "%lld", (long long)t->shape[d]);
        sb_printf(&hb, "],\"data_offsets\":[%lld,", off);
        sb_printf(&hb, "%lld]}", off + nb);
        off += nb;
    }
    sb_str(&hb, "}");
    while (!hb.oom && hb.n % 8) sb_add(&hb, " ", 1);
    if (hb.oom) { status = ld_fail(LD_ENOMEM, "save_safetensors: out of memory"); goto out; }

    ld_wfile w;
    if (ld_wfile_begin(&w, path) != LD_OK) { status = ld_error_status(); goto out; }
    FILE *f = w.f;
    unsigned char len8[8];
    uint64_t hl = hb.n;
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)(hl >> (8 * i));
    int ok = fwrite(len8, 1, 8, f) == 8 && fwrite(hb.p, 1, hb.n, f) == hb.n;
    for (int j = 0; ok && j < n; j++) {
        ld_tensor *t = host[order[j]];
        size_t nb = (size_t)ld_tensor_numel(t) * ld_dtype_size(t->dtype);
        const void *p = nb ? ld_tensor_data(t) : NULL;
        if (nb && !p) { status = ld_error_status(); ld_wfile_abort(&w); goto out; }
        if (nb) ok = fwrite(p, 1, nb, f) == nb;
    }
    if (!ok) {
        int er = errno;
        status = ld_fail(LD_EIO, "cannot write '%s': %s", path, strerror(er ? er : EIO));
        ld_wfile_abort(&w);
        goto out;
    }
    status = ld_wfile_commit(&w);
out:
    if (host)
        for (int i = 0; i < n; i++) ld_tensor_release(host[i]);
    free(host);
    free(order);
    free(hb.p);
    return status;
}

/* ---- a minimal JSON reader for the safetensors header ---- */
typedef struct { const char *p, *end; const char *path; int failed; const char *base; } jr;

static int jr_fail(jr *j, const char *what) {
    if (!j->failed) ld_fail(LD_EFORMAT, "'%s' has a malformed safetensors header: %s", j->path, what);
    j->failed = 1;
    return 0;
}
static void jr_ws(jr *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
}
static int jr_peek(jr *j) { jr_ws(j); return j->p < j->end ? (unsigned char)*j->p : -1; }
static int jr_expect(jr *j, char c) {
    if (jr_peek(j) != c) {
        char m[48];
        snprintf(m, sizeof m, "expected '%c' at byte %ld", c, (long)(j->p - j->base));
        return jr_fail(j, m);
    }
    j->p++;
    return 1;
}
static void utf8_put(sbuf *b, unsigned cp) {
    char u[4];
    if (cp < 0x80) { u[0] = (char)cp; sb_add(b, u, 1); }
    else if (cp < 0x800) { u[0] = (char)(0xC0 | (cp >> 6)); u[1] = (char)(0x80 | (cp & 0x3F)); sb_add(b, u, 2); }
    else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | (cp >> 12)); u[1] = (char)(0x80 | ((cp >> 6) & 0x3F)); u[2] = (char)(0x80 | (cp & 0x3F));
        sb_add(b, u, 3);
    } else {
        u[0] = (char)(0xF0 | (cp >> 18)); u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); u[3] = (char)(0x80 | (cp & 0x3F));
        sb_add(b, u, 4);
    }
}
static int hex4(const char *p, unsigned *v) {
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return 0;
        *v = *v * 16 + (unsigned)d;
    }
    return 1;
}
/* A JSON string; returns a malloc'ed copy (NULL on failure). */
static char *jr_string(jr *j) {
    if (jr_peek(j) != '"') { jr_fail(j, "expected a string"); return NULL; }
    j->p++;
    /* The usual string has no escape: one copy (headers can hold 10^5 names). */
    const char *q = j->p;
    while (q < j->end && *q != '"' && *q != '\\' && (unsigned char)*q >= 0x20) q++;
    if (q < j->end && *q == '"') {
        char *s = malloc((size_t)(q - j->p) + 1);
        if (!s) { ld_fail(LD_ENOMEM, "out of memory"); j->failed = 1; return NULL; }
        memcpy(s, j->p, (size_t)(q - j->p));
        s[q - j->p] = 0;
        j->p = q + 1;
        return s;
    }
    sbuf b = {0};
    sb_add(&b, "", 0);
    while (j->p < j->end && *j->p != '"') {
        unsigned char c = (unsigned char)*j->p++;
        if (c < 0x20) { free(b.p); jr_fail(j, "control character in a string"); return NULL; }
        if (c != '\\') { sb_add(&b, (const char *)&c, 1); continue; }
        if (j->p >= j->end) break;
        char e = *j->p++;
        unsigned cp;
        switch (e) {
        case '"': sb_add(&b, "\"", 1); break;
        case '\\': sb_add(&b, "\\", 1); break;
        case '/': sb_add(&b, "/", 1); break;
        case 'b': sb_add(&b, "\b", 1); break;
        case 'f': sb_add(&b, "\f", 1); break;
        case 'n': sb_add(&b, "\n", 1); break;
        case 'r': sb_add(&b, "\r", 1); break;
        case 't': sb_add(&b, "\t", 1); break;
        case 'u':
            if (j->end - j->p < 4 || !hex4(j->p, &cp)) { free(b.p); jr_fail(j, "bad \\u escape"); return NULL; }
            j->p += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && j->end - j->p >= 6 && j->p[0] == '\\' && j->p[1] == 'u') {
                unsigned lo;
                if (hex4(j->p + 2, &lo) && lo >= 0xDC00 && lo < 0xE000) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    j->p += 6;
                }
            }
            utf8_put(&b, cp);
            break;
        default: free(b.p); jr_fail(j, "bad escape in a string"); return NULL;
        }
    }
    if (j->p >= j->end) { free(b.p); jr_fail(j, "unterminated string"); return NULL; }
    j->p++;
    if (b.oom) { free(b.p); ld_fail(LD_ENOMEM, "out of memory"); j->failed = 1; return NULL; }
    return b.p;
}
/* A non-negative integer below 2^53. */
static int jr_uint(jr *j, uint64_t *v) {
    jr_ws(j);
    if (j->p >= j->end || *j->p < '0' || *j->p > '9') return jr_fail(j, "expected a non-negative integer");
    uint64_t x = 0;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
        x = x * 10 + (uint64_t)(*j->p++ - '0');
        if (x > ((uint64_t)1 << 53)) return jr_fail(j, "integer too large");
    }
    if (j->p < j->end && (*j->p == '.' || *j->p == 'e' || *j->p == 'E')) return jr_fail(j, "expected an integer");
    *v = x;
    return 1;
}
/* Skip any JSON value (unknown keys), depth bounded. */
static int jr_skip(jr *j, int depth) {
    if (depth > 64) return jr_fail(j, "nested too deeply");
    int c = jr_peek(j);
    if (c == '"') { char *s = jr_string(j); free(s); return s != NULL; }
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        j->p++;
        if (jr_peek(j) == close) { j->p++; return 1; }
        for (;;) {
            if (c == '{') {
                char *k = jr_string(j);
                if (!k) return 0;
                free(k);
                if (!jr_expect(j, ':')) return 0;
            }
            if (!jr_skip(j, depth + 1)) return 0;
            int d = jr_peek(j);
            if (d == ',') { j->p++; continue; }
            if (d == close) { j->p++; return 1; }
            return jr_fail(j, "expected ',' or a closing bracket");
        }
    }
    /* number, true, false, null */
    const char *s = j->p;
    while (j->p < j->end && (strchr("+-.eE0123456789", *j->p) || (*j->p >= 'a' && *j->p <= 'z'))) j->p++;
    return j->p > s ? 1 : jr_fail(j, "unexpected character");
}

typedef struct {
    char *name;
    char *dtype;
    int ndim;
    int64_t shape[LD_MAX_DIMS];
    uint64_t begin, end;
    int has_offsets, has_shape;
    const struct st_dtype *sd;   /* set by validation */
} st_entry;

static int parse_entry(jr *j, st_entry *e) {
    if (!jr_expect(j, '{')) return 0;
    if (jr_peek(j) == '}') { j->p++; return 1; }
    for (;;) {
        char *k = jr_string(j);
        if (!k) return 0;
        if (!jr_expect(j, ':')) { free(k); return 0; }
        if (!strcmp(k, "dtype")) {
            free(e->dtype);
            if (!(e->dtype = jr_string(j))) { free(k); return 0; }
        } else if (!strcmp(k, "shape")) {
            if (!jr_expect(j, '[')) { free(k); return 0; }
            e->ndim = 0;
            e->has_shape = 1;
            if (jr_peek(j) == ']') j->p++;
            else for (;;) {
                uint64_t v;
                if (!jr_uint(j, &v)) { free(k); return 0; }
                if (e->ndim >= LD_MAX_DIMS) { free(k); return jr_fail(j, "a tensor has more than 8 dimensions"); }
                e->shape[e->ndim++] = (int64_t)v;
                int d = jr_peek(j);
                if (d == ',') { j->p++; continue; }
                if (d == ']') { j->p++; break; }
                free(k);
                return jr_fail(j, "bad shape list");
            }
        } else if (!strcmp(k, "data_offsets")) {
            if (!jr_expect(j, '[') || !jr_uint(j, &e->begin) || !jr_expect(j, ',') || !jr_uint(j, &e->end) ||
                !jr_expect(j, ']')) { free(k); return 0; }
            e->has_offsets = 1;
        } else if (!jr_skip(j, 1)) { free(k); return 0; }
        free(k);
        int d = jr_peek(j);
        if (d == ',') { j->p++; continue; }
        if (d == '}') { j->p++; return 1; }
        return jr_fail(j, "expected ',' or '}' in a tensor entry");
    }
}

/* File dtypes we read, and what they become. */
enum { ST_F32, ST_I32, ST_I64, ST_U8, ST_F64, ST_F16, ST_BF16, ST_I8, ST_I16, ST_U16, ST_U32, ST_U64, ST_BOOL };
typedef struct st_dtype { const char *name; int size; ld_dtype to; int code; } st_dtype;
static const st_dtype st_dtypes[] = {
    {"F32", 4, LD_F32, ST_F32}, {"I32", 4, LD_I32, ST_I32}, {"I64", 8, LD_I64, ST_I64}, {"U8", 1, LD_U8, ST_U8},
    {"F64", 8, LD_F32, ST_F64}, {"F16", 2, LD_F16, ST_F16}, {"BF16", 2, LD_BF16, ST_BF16}, {"I8", 1, LD_I32, ST_I8},
    {"I16", 2, LD_I32, ST_I16}, {"U16", 2, LD_I32, ST_U16}, {"U32", 4, LD_I64, ST_U32}, {"U64", 8, LD_I64, ST_U64},
    {"BOOL", 1, LD_U8, ST_BOOL},
};

/* n elements of file dtype sd at src into dst (of dtype sd->to). */
static void st_convert(const st_dtype *sd, void *dst, const unsigned char *src, int64_t n) {
    switch (sd->code) {
    case ST_F64: for (int64_t i = 0; i < n; i++) { double d; memcpy(&d, src + 8 * i, 8); ((float *)dst)[i] = (float)d; } break;
    case ST_I8: for (int64_t i = 0; i < n; i++) ((int32_t *)dst)[i] = (int8_t)src[i]; break;
    case ST_I16: for (int64_t i = 0; i < n; i++) { int16_t v; memcpy(&v, src + 2 * i, 2); ((int32_t *)dst)[i] = v; } break;
    case ST_U16: for (int64_t i = 0; i < n; i++) { uint16_t v; memcpy(&v, src + 2 * i, 2); ((int32_t *)dst)[i] = v; } break;
    case ST_U32: for (int64_t i = 0; i < n; i++) { uint32_t v; memcpy(&v, src + 4 * i, 4); ((int64_t *)dst)[i] = v; } break;
    case ST_U64: for (int64_t i = 0; i < n; i++) { uint64_t v; memcpy(&v, src + 8 * i, 8); ((int64_t *)dst)[i] = (int64_t)v; } break;
    case ST_BOOL: for (int64_t i = 0; i < n; i++) ((uint8_t *)dst)[i] = src[i] != 0; break;
    default: memcpy(dst, src, (size_t)n * (size_t)sd->size); break;   /* same layout */
    }
}

#define ST_MAX_HEADER 100000000   /* the reference implementation's limit */

/* "[2,3]" into buf, for messages. */
static const char *st_shape_str(const st_entry *e, char *buf, size_t n) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < e->ndim && k < n; d++) k += (size_t)snprintf(buf + k, n - k, d ? ",%lld" : "%lld", (long long)e->shape[d]);
    if (k < n) snprintf(buf + k, n - k, "]");
    return buf;
}

/* Sorting entries: by position in the data section (empty tensors before a
   non-empty one at the same offset), and by name for the duplicate check. */
static int st_by_offset(const void *a, const void *b) {
    const st_entry *x = *(const st_entry *const *)a, *y = *(const st_entry *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return x < y ? -1 : x > y;               /* stable: header order */
}
static int st_by_name(const void *a, const void *b) {
    return strcmp((*(const st_entry *const *)a)->name, (*(const st_entry *const *)b)->name);
}

/* Everything the format requires of the header, checked before any tensor is
   allocated or any data read (a hostile header costs an error, not memory):
   each entry's dtype, shape (overflow-checked) and byte length agree; names are
   unique; the entries tile the data section exactly, without overlap or gap.
   On success by_off[] holds the entries in file order. */
static int st_validate(const char *path, st_entry *ents, int nents, uint64_t data_len, st_entry **by_off) {
    char sb[160];
    for (int i = 0; i < nents; i++) {
        st_entry *e = &ents[i];
        if (!e->dtype || !e->has_shape || !e->has_offsets)
            return ld_fail(LD_EFORMAT, "'%s': tensor '%s' lacks a dtype, shape or data_offsets", path, e->name);
        e->sd = NULL;
        for (size_t k = 0; k < sizeof st_dtypes / sizeof st_dtypes[0]; k++)
            if (!strcmp(e->dtype, st_dtypes[k].name)) e->sd = &st_dtypes[k];
        if (!e->sd) return ld_fail(LD_ETYPE, "'%s': tensor '%s' has dtype %s, which ldist cannot read", path, e->name, e->dtype);
        /* numel, and the product of the nonzero sizes: strides are built from
           the latter, so [0, 2^53, 2^53] must be refused though it holds nothing */
        uint64_t numel = 1, span = 1, nbytes;
        int over = 0;
        for (int d = 0; d < e->ndim; d++) {
            uint64_t s = (uint64_t)e->shape[d];
            over |= __builtin_mul_overflow(numel, s, &numel);
            over |= __builtin_mul_overflow(span, s ? s : 1, &span);
        }
        over |= __builtin_mul_overflow(span, (uint64_t)e->sd->size, &nbytes) || nbytes > (uint64_t)INT64_MAX / 2;
        if (over)
            return ld_fail(LD_EFORMAT, "'%s': tensor '%s' has shape %s, whose size overflows 64 bits", path, e->name,
                           st_shape_str(e, sb, sizeof sb));
        nbytes = numel * (uint64_t)e->sd->size;
        if (e->end < e->begin || e->end - e->begin != nbytes)
            return ld_fail(LD_EFORMAT, "'%s': tensor '%s' has data_offsets [%llu, %llu] that do not match its shape %s "
                           "and dtype %s (%llu bytes)", path, e->name, (unsigned long long)e->begin,
                           (unsigned long long)e->end, st_shape_str(e, sb, sizeof sb), e->dtype, (unsigned long long)nbytes);
        if (e->end > data_len)
            return ld_fail(LD_EFORMAT, "'%s' is truncated: tensor '%s' ends at byte %llu of a %llu-byte data section",
                           path, e->name, (unsigned long long)e->end, (unsigned long long)data_len);
    }
    for (int i = 0; i < nents; i++) by_off[i] = &ents[i];
    qsort(by_off, (size_t)nents, sizeof *by_off, st_by_name);
    for (int i = 1; i < nents; i++)
        if (!strcmp(by_off[i - 1]->name, by_off[i]->name))
            return ld_fail(LD_EFORMAT, "'%s': two tensors are named '%s'", path, by_off[i]->name);
    qsort(by_off, (size_t)nents, sizeof *by_off, st_by_offset);
    uint64_t at = 0;
    for (int i = 0; i < nents; i++) {
        const st_entry *e = by_off[i];
        if (e->begin < at)
            return ld_fail(LD_EFORMAT, "'%s': tensors '%s' and '%s' overlap in the data section (bytes %llu to %llu); "
                           "each byte belongs to one tensor", path, by_off[i - 1]->name, e->name,
                           (unsigned long long)e->begin, (unsigned long long)at);
        if (e->begin > at)
            return ld_fail(LD_EFORMAT, "'%s': bytes %llu to %llu of the data section belong to no tensor",
                           path, (unsigned long long)at, (unsigned long long)e->begin);
        at = e->end;
    }
    if (at != data_len)
        return ld_fail(LD_EFORMAT, "'%s': the data section has %llu bytes but its tensors cover %llu",
                       path, (unsigned long long)data_len, (unsigned long long)at);
    return LD_OK;
}

int ld_load_safetensors_checked(const char *path, ld_tensor_dict *out, int *n_meta, char ***meta_kv,
                                ld_safetensors_check check, void *ctx) {
    if (n_meta) *n_meta = 0;
    if (meta_kv) *meta_kv = NULL;
    if (!out) return ld_fail(LD_EARG, "load_safetensors: no output given");
    out->n = 0;
    out->names = NULL;
    out->tensors = NULL;
    if (!path) return ld_fail(LD_EARG, "load_safetensors: no path given");
    FILE *f = fopen(path, "rb");
    if (!f) return ld_fail(LD_EIO, "cannot open '%s': %s", path, strerror(errno));
    int status = LD_OK;
    char *hdr = NULL;
    st_entry *ents = NULL, **by_off = NULL;
    ld_safetensors_entry *info = NULL;
    int nents = 0, ecap = 0;
    char **meta = NULL;
    int nmeta = 0, mcap = 0;
    unsigned char *stage = NULL;
    /* The size of the file we opened (not of whatever the path names now:
       a concurrent save may have renamed a new file over it). */
    struct stat st;
    if (fstat(fileno(f), &st) != 0) { status = ld_fail(LD_EIO, "cannot read '%s': %s", path, strerror(errno)); goto out; }
    uint64_t fsz = (uint64_t)st.st_size;
    unsigned char len8[8];
    if (fread(len8, 1, 8, f) != 8) {
        status = ld_fail(LD_EFORMAT, "'%s' is truncated: a safetensors file starts with an 8-byte header length", path);
        goto out;
    }
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = (hl << 8) | len8[i];
    if (hl > ST_MAX_HEADER || hl > fsz - 8) {
        status = ld_fail(LD_EFORMAT, "'%s' is not a safetensors file or is truncated (header length %llu, file size %llu)",
                         path, (unsigned long long)hl, (unsigned long long)fsz);
        goto out;
    }
    hdr = malloc(hl + 1);
    if (!hdr) { status = ld_fail(LD_ENOMEM, "load_safetensors: out of memory"); goto out; }
    if (fread(hdr, 1, hl, f) != hl) { status = ld_fail(LD_EFORMAT, "'%s' is truncated in its header", path); goto out; }
    hdr[hl] = 0;
    uint64_t data_len = fsz - 8 - hl;

    jr j = {hdr, hdr + hl, path, 0, hdr};
    if (!jr_expect(&j, '{')) { status = LD_EFORMAT; goto out; }
    if (jr_peek(&j) == '}') j.p++;
    else for (;;) {
        char *key = jr_string(&j);
        if (!key || !jr_expect(&j, ':')) { free(key); status = LD_EFORMAT; goto out; }
        if (!strcmp(key, "__metadata__")) {
            free(key);
            if (jr_peek(&j) == 'n') { if (!jr_skip(&j, 1)) { status = LD_EFORMAT; goto out; } }
            else {
                if (!jr_expect(&j, '{')) { status = LD_EFORMAT; goto out; }
                if (jr_peek(&j) == '}') j.p++;
                else for (;;) {
                    if (nmeta + 1 > mcap) {
                        mcap = mcap ? mcap * 2 : 8;
                        char **nm = realloc(meta, sizeof *meta * 2 * (size_t)mcap);
                        if (!nm) { status = ld_fail(LD_ENOMEM, "load_safetensors: out of memory"); goto out; }
                        meta = nm;
                    }
                    char *k = jr_string(&j);
                    if (!k) { status = LD_EFORMAT; goto out; }
                    meta[2 * nmeta] = k;
                    meta[2 * nmeta + 1] = NULL;
                    nmeta++;
                    if (!jr_expect(&j, ':') || !(meta[2 * nmeta - 1] = jr_string(&j))) { status = LD_EFORMAT; goto out; }
                    int d = jr_peek(&j);
                    if (d == ',') { j.p++; continue; }
                    if (d == '}') { j.p++; break; }
                    jr_fail(&j, "expected ',' or '}' in __metadata__");
                    status = LD_EFORMAT;
                    goto out;
                }
            }
        } else {
            if (nents + 1 > ecap) {
                ecap = ecap ? ecap * 2 : 16;
                st_entry *ne = realloc(ents, sizeof *ents * (size_t)ecap);
                if (!ne) { free(key); status = ld_fail(LD_ENOMEM, "load_safetensors: out of memory"); goto out; }
                ents = ne;
            }
            st_entry *e = &ents[nents++];
            memset(e, 0, sizeof *e);
            e->name = key;
            if (!parse_entry(&j, e)) { status = LD_EFORMAT; goto out; }
        }
        int d = jr_peek(&j);
        if (d == ',') { j.p++; continue; }
        if (d == '}') { j.p++; break; }
        jr_fail(&j, "expected ',' or '}'");
        status = LD_EFORMAT;
        goto out;
    }
    if (jr_peek(&j) != -1) { jr_fail(&j, "trailing characters after the header object"); status = LD_EFORMAT; goto out; }
    free(hdr);
    hdr = NULL;

    by_off = malloc(sizeof *by_off * ((size_t)nents + 1));
    if (!by_off) { status = ld_fail(LD_ENOMEM, "load_safetensors: out of memory"); goto out; }
    if ((status = st_validate(path, ents, nents, data_len, by_off)) != LD_OK) goto out;
    if (check) {
        info = malloc(sizeof *info * ((size_t)nents + 1));
        if (!info) { status = ld_fail(LD_ENOMEM, "load_safetensors: out of memory"); goto out; }
        for (int i = 0; i < nents; i++) {
            const st_entry *e = by_off[i];
            info[i] = (ld_safetensors_entry){e->name, e->sd->name, e->sd->to, e->ndim, e->shape};
        }
        if ((status = check(ctx, path, nents, info)) != LD_OK) goto out;
    }

    out->names = calloc((size_t)nents + 1, sizeof *out->names);
    out->tensors = calloc((size_t)nents + 1, sizeof *out->tensors);
    if (!out->names || !out->tensors) { status = ld_fail(LD_ENOMEM, "load_safetensors: out of memory"); goto out; }
    /* The entries tile the data section, so it is read front to back. */
    if (fseeko(f, (off_t)(8 + hl), SEEK_SET) != 0) { status = ld_fail(LD_EIO, "cannot read '%s': %s", path, strerror(errno)); goto out; }
    const size_t stage_bytes = 1 << 20;
    for (int i = 0; i < nents; i++) {
        st_entry *e = by_off[i];
        const st_dtype *sd = e->sd;
        ld_tensor *t = ld_tensor_empty(sd->to, e->ndim, e->shape, NULL);
        if (!t) { status = ld_error_status() ? ld_error_status() : LD_ENOMEM; goto out; }
        out->tensors[out->n] = t;
        out->names[out->n] = e->name;
        e->name = NULL;
        out->n++;
        uint64_t nbytes = e->end - e->begin;
        if (!nbytes) continue;
        unsigned char *dst = ld_tensor_data(t);
        if (!dst) { status = ld_error_status(); goto out; }
        if ((int)ld_dtype_size(sd->to) == sd->size && sd->code <= ST_U8) {
            if (fread(dst, 1, nbytes, f) != nbytes) { status = ld_fail(LD_EFORMAT, "'%s' is truncated", path); goto out; }
            continue;
        }
        /* Converted through a bounded staging buffer. */
        if (!stage && !(stage = malloc(stage_bytes))) { status = ld_fail(LD_ENOMEM, "load_safetensors: out of memory"); goto out; }
        const uint64_t chunk = stage_bytes / (size_t)sd->size;
        const uint64_t numel = nbytes / (uint64_t)sd->size, esz = ld_dtype_size(sd->to);
        for (uint64_t k0 = 0; k0 < numel; k0 += chunk) {
            uint64_t k = numel - k0 < chunk ? numel - k0 : chunk;
            if (fread(stage, (size_t)sd->size, k, f) != k) { status = ld_fail(LD_EFORMAT, "'%s' is truncated", path); goto out; }
            st_convert(sd, dst + k0 * esz, stage, (int64_t)k);
        }
    }
    if (meta_kv) { *meta_kv = meta; meta = NULL; if (n_meta) *n_meta = nmeta; }
out:
    if (status != LD_OK) ld_tensor_dict_free(out);
    for (int i = 0; i < nents; i++) { free(ents[i].name); free(ents[i].dtype); }
    free(ents);
    free(by_off);
    free(info);
    ld_strings_free(meta, 2 * nmeta);
    free(stage);
    free(hdr);
    fclose(f);
    return status;
}

int ld_load_safetensors_meta(const char *path, ld_tensor_dict *out, int *n_meta, char ***meta_kv) {
    return ld_load_safetensors_checked(path, out, n_meta, meta_kv, NULL, NULL);
}

int ld_load_safetensors(const char *path, ld_tensor_dict *out) {
    return ld_load_safetensors_checked(path, out, NULL, NULL, NULL, NULL);
}
