/*
 * ld_data_text.c - dataset sources of text (ld_tensor_text): the lines of
 * files (tf.data's TextLineDataset) and a list of strings (from_tensor_slices
 * of strings, list_files). Both are generator sources (ld_data.h) that run
 * on any thread, so a prefetch above them reads ahead.
 */
#include "ld_data.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* ---- a list of strings, shared by every pass ---- */
typedef struct {
    int n;
    char **s;
    size_t *len;
} strlist;

static void strlist_free(void *ud) {
    strlist *l = ud;
    if (!l) return;
    for (int i = 0; i < l->n; i++) free(l->s[i]);
    free(l->s);
    free(l->len);
    free(l);
}

static strlist *strlist_new(int n, const char *const *s, const size_t *len, const char *what) {
    strlist *l = calloc(1, sizeof *l);
    if (!l || !(l->s = calloc((size_t)(n ? n : 1), sizeof *l->s)) || !(l->len = calloc((size_t)(n ? n : 1), sizeof *l->len))) {
        strlist_free(l);
        ld_fail(LD_ENOMEM, "%s: out of memory", what);
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        size_t k = len ? len[i] : strlen(s[i]);
        if (!(l->s[i] = malloc(k + 1))) { strlist_free(l); ld_fail(LD_ENOMEM, "%s: out of memory", what); return NULL; }
        memcpy(l->s[i], s[i], k);
        l->s[i][k] = 0;
        l->len[i] = k;
        l->n = i + 1;
    }
    return l;
}

/* ---- from strings: element i is {text s[i]} ---- */
typedef struct { int pos; } str_pos;

static void *str_open(void *ud) {
    (void)ud;
    str_pos *p = calloc(1, sizeof *p);
    if (!p) ld_fail(LD_ENOMEM, "dataset: out of memory");
    return p;
}
static int str_next(void *ud, void *state, ld_element *out) {
    strlist *l = ud;
    str_pos *p = state;
    if (p->pos >= l->n) return 0;
    ld_tensor *t = ld_tensor_text(l->s[p->pos], l->len[p->pos]);
    if (!t) return -1;
    p->pos++;
    out->t[0] = t;
    out->n = 1;
    return 1;
}
static void str_close(void *ud, void *state) { (void)ud; free(state); }

ld_dataset *ld_dataset_from_strings(int n, const char *const *s, const size_t *len) {
    if (n < 0 || (n && !s)) { ld_fail(LD_EARG, "from_tensor_slices: no strings given"); return NULL; }
    strlist *l = strlist_new(n, s, len, "from_tensor_slices");
    if (!l) return NULL;
    ld_generator g = {str_open, str_next, str_close, 1, 1, n};
    return ld_dataset_from_generator(&g, l, strlist_free, 0);
}

/* ---- the lines of files ---- */
typedef struct {
    int file;                  /* index of the open file, or the next to open */
    gzFile f;                  /* zlib reads plain and gzip-compressed files alike */
    long long line;            /* lines read from the open file */
    char *buf;
    size_t cap;
} lines_pos;

static void *lines_open(void *ud) {
    (void)ud;
    lines_pos *p = calloc(1, sizeof *p);
    if (!p) ld_fail(LD_ENOMEM, "TextLineDataset: out of memory");
    return p;
}

static int lines_next(void *ud, void *state, ld_element *out) {
    strlist *l = ud;
    lines_pos *p = state;
    for (;;) {
        if (!p->f) {
            if (p->file >= l->n) return 0;
            errno = 0;
            if (!(p->f = gzopen(l->s[p->file], "rb")))
                return ld_fail(LD_EIO, "TextLineDataset: cannot read '%s': %s", l->s[p->file],
                               errno ? strerror(errno) : "out of memory"), -1;
            gzbuffer(p->f, 1 << 16);
            p->line = 0;
        }
        size_t n = 0;
        int got = 0, eol = 0;
        for (;;) {                           /* one line, however long */
            if (p->cap - n < 2) {
                size_t nc = p->cap ? p->cap * 2 : 256;
                char *nb = realloc(p->buf, nc);
                if (!nb) return ld_fail(LD_ENOMEM, "TextLineDataset: out of memory"), -1;
                p->buf = nb;
                p->cap = nc;
            }
            if (!gzgets(p->f, p->buf + n, (int)(p->cap - n > (size_t)1 << 30 ? (size_t)1 << 30 : p->cap - n))) break;
            size_t k = strlen(p->buf + n);   /* a NUL inside a line ends it early; text files have none */
            got = 1;
            n += k;
            if (n && p->buf[n - 1] == '\n') { eol = 1; break; }
            if (gzeof(p->f)) break;
        }
        int err = Z_OK;
        const char *msg = got ? NULL : gzerror(p->f, &err);   /* lines read before a damaged part come first */
        if (err != Z_OK && err != Z_STREAM_END) {
            ld_fail(LD_EIO, "TextLineDataset: '%s' line %lld: %s", l->s[p->file], p->line + 1,
                    err == Z_ERRNO ? strerror(errno) : (msg && *msg ? msg : "a damaged compressed file"));
            return -1;
        }
        if (!got) {                          /* the end of this file */
            gzclose(p->f);
            p->f = NULL;
            p->file++;
            continue;
        }
        if (eol) n--;
        if (eol && n && p->buf[n - 1] == '\r') n--;   /* "\r\n" ends a line too, as in TF */
        p->line++;
        ld_tensor *t = ld_tensor_text(p->buf, n);
        if (!t) return -1;
        out->t[0] = t;
        out->n = 1;
        return 1;
    }
}

static void lines_close(void *ud, void *state) {
    (void)ud;
    lines_pos *p = state;
    if (!p) return;
    if (p->f) gzclose(p->f);
    free(p->buf);
    free(p);
}

ld_dataset *ld_dataset_text_lines(int n, const char *const *paths) {
    if (n < 1 || !paths) { ld_fail(LD_EARG, "TextLineDataset: no files given"); return NULL; }
    for (int i = 0; i < n; i++) {          /* a missing file is named now, not in the middle of an epoch */
        gzFile f;
        errno = 0;
        if (!(f = gzopen(paths[i], "rb"))) {
            ld_fail(LD_EIO, "TextLineDataset: cannot read '%s': %s", paths[i], errno ? strerror(errno) : "out of memory");
            return NULL;
        }
        gzclose(f);
    }
    strlist *l = strlist_new(n, paths, NULL, "TextLineDataset");
    if (!l) return NULL;
    static const ld_generator g = {lines_open, lines_next, lines_close, 1, 1, LD_CARD_UNKNOWN};
    return ld_dataset_from_generator(&g, l, strlist_free, 0);
}
