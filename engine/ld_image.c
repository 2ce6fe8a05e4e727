/*
 * ld_image.c - PNG/JPEG decoding, TF's bilinear resize, numpy's legacy
 * shuffle, and image_dataset_from_directory's dataset (see ld_image.h).
 */
#include "ld_image.h"
#include "ld_core.h"
#include "ld_file.h"
#include "ld_pool.h"
#include "ld_tensor.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <png.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jpeglib.h>
#include <jerror.h>

/* ================================================================ numpy */

void ld_mt19937_seed(ld_mt19937 *r, uint32_t seed) {
    r->mt[0] = seed;
    for (int i = 1; i < 624; i++)
        r->mt[i] = 1812433253u * (r->mt[i - 1] ^ (r->mt[i - 1] >> 30)) + (uint32_t)i;
    r->pos = 624;
}

uint32_t ld_mt19937_next(ld_mt19937 *r) {
    if (r->pos >= 624) {
        uint32_t *mt = r->mt;
        for (int i = 0; i < 624; i++) {
            uint32_t y = (mt[i] & 0x80000000u) | (mt[(i + 1) % 624] & 0x7fffffffu);
            mt[i] = mt[(i + 397) % 624] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
        }
        r->pos = 0;
    }
    uint32_t y = r->mt[r->pos++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

/* numpy's random_interval(bitgen, max) */
static uint64_t np_interval(ld_mt19937 *r, uint64_t max) {
    if (max == 0) return 0;
    uint64_t mask = max, v;
    mask |= mask >> 1; mask |= mask >> 2; mask |= mask >> 4;
    mask |= mask >> 8; mask |= mask >> 16; mask |= mask >> 32;
    if (max <= 0xffffffffu) {
        while ((v = (ld_mt19937_next(r) & mask)) > max) {}
    } else {
        while ((v = ((((uint64_t)ld_mt19937_next(r) << 32) | ld_mt19937_next(r)) & mask)) > max) {}
    }
    return v;
}

void ld_np_shuffle_i64(uint32_t seed, int64_t n, int64_t *x) {
    ld_mt19937 r;
    ld_mt19937_seed(&r, seed);
    for (int64_t i = n - 1; i >= 1; i--) {
        int64_t j = (int64_t)np_interval(&r, (uint64_t)i);
        int64_t t = x[i]; x[i] = x[j]; x[j] = t;
    }
}

/* ================================================================ decoding */

/* A message "name: what" for the thread that decodes. */
typedef struct { char msg[320]; } dec_err;

/* The most pixels a decoded image may have: Pillow's MAX_IMAGE_PIXELS (a
   quarter GiB of 3-byte pixels), so a small crafted file cannot ask for
   gigabytes. Raised with ld_image_set_max_pixels. */
static int64_t max_pixels = LD_IMAGE_MAX_PIXELS_DEFAULT;

int64_t ld_image_max_pixels(void) { return __atomic_load_n(&max_pixels, __ATOMIC_RELAXED); }
void ld_image_set_max_pixels(int64_t n) { __atomic_store_n(&max_pixels, n > 0 ? n : 0, __ATOMIC_RELAXED); }

/* 0 when w x h pixels may be decoded, else -1 and the message */
static int check_pixels(uint64_t w, uint64_t h, dec_err *e) {
    int64_t lim = ld_image_max_pixels();
    if (lim > 0 && w * h > (uint64_t)lim) {
        snprintf(e->msg, sizeof e->msg, "%llux%llu = %llu pixels, over the limit of %lld pixels (a decompression bomb? "
                 "ldist.io.max_image_pixels(n) raises the limit, as Pillow's Image.MAX_IMAGE_PIXELS)",
                 (unsigned long long)w, (unsigned long long)h, (unsigned long long)(w * h), (long long)lim);
        return -1;
    }
    return 0;
}

/* ---- PNG ---- */
typedef struct {
    const uint8_t *p;
    size_t n, off;
    dec_err *err;
    jmp_buf *jb;
} png_src;

static void png_err_fn(png_structp p, png_const_charp msg) {
    png_src *s = png_get_error_ptr(p);
    snprintf(s->err->msg, sizeof s->err->msg, "%s", msg);
    png_longjmp(p, 1);
}
static void png_warn_fn(png_structp p, png_const_charp msg) { (void)p; (void)msg; }

static void png_read_mem(png_structp p, png_bytep out, png_size_t n) {
    png_src *s = png_get_io_ptr(p);
    if (n > s->n - s->off) png_error(p, "truncated PNG file");
    memcpy(out, s->p + s->off, n);
    s->off += n;
}

static int decode_png(const uint8_t *buf, size_t n, int channels, uint8_t **pix, int *ph, int *pw, dec_err *e) {
    png_src src = {buf, n, 0, e, NULL};
    png_structp p = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, png_err_fn, png_warn_fn);
    if (!p) { snprintf(e->msg, sizeof e->msg, "out of memory"); return LD_ENOMEM; }
    png_infop info = png_create_info_struct(p);
    uint8_t *volatile out = NULL;
    png_bytep *volatile rows = NULL;
    if (!info) { png_destroy_read_struct(&p, NULL, NULL); snprintf(e->msg, sizeof e->msg, "out of memory"); return LD_ENOMEM; }
    if (setjmp(png_jmpbuf(p))) {
        png_destroy_read_struct(&p, &info, NULL);
        free(out);
        free(rows);
        return LD_EFORMAT;
    }
    png_set_read_fn(p, &src, png_read_mem);
    png_read_info(p, info);
    png_uint_32 w = png_get_image_width(p, info), h = png_get_image_height(p, info);
    if (check_pixels(w, h, e)) { png_destroy_read_struct(&p, &info, NULL); return LD_EFORMAT; }
    int ct = png_get_color_type(p, info), bd = png_get_bit_depth(p, info);
    int has_trns = png_get_valid(p, info, PNG_INFO_tRNS) != 0;
    if (bd == 16) png_set_strip_16(p);
    if (ct == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(p);
    if (ct == PNG_COLOR_TYPE_GRAY && bd < 8) png_set_expand_gray_1_2_4_to_8(p);
    int color = ct == PNG_COLOR_TYPE_PALETTE || (ct & PNG_COLOR_MASK_COLOR);
    int alpha = (ct & PNG_COLOR_MASK_ALPHA) != 0;
    if (channels == 4) {
        if (!color) png_set_gray_to_rgb(p);
        if (has_trns) png_set_tRNS_to_alpha(p);
        else if (!alpha) png_set_add_alpha(p, 0xff, PNG_FILLER_AFTER);
    } else {
        png_set_strip_alpha(p);                 /* an alpha channel, or a tRNS expanded */
        if (channels == 3 && !color) png_set_gray_to_rgb(p);
        if (channels == 1 && color) png_set_rgb_to_gray(p, 1, 0.299, 0.587);   /* TF's png_io.cc */
    }
    png_set_interlace_handling(p);
    png_read_update_info(p, info);
    size_t rb = png_get_rowbytes(p, info);
    if (rb != (size_t)w * channels) png_error(p, "unsupported PNG layout");
    out = malloc((size_t)h * rb);
    rows = malloc(sizeof(png_bytep) * h);
    if (!out || !rows) png_error(p, "out of memory");
    for (png_uint_32 y = 0; y < h; y++) rows[y] = out + y * rb;
    png_read_image(p, rows);
    png_destroy_read_struct(&p, &info, NULL);
    free(rows);
    *pix = out; *ph = (int)h; *pw = (int)w;
    return LD_OK;
}

/* ---- JPEG ---- */
typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    dec_err *err;
} jpg_err;

static void jpg_error_exit(j_common_ptr c) {
    jpg_err *je = (jpg_err *)c->err;
    char m[JMSG_LENGTH_MAX];
    c->err->format_message(c, m);
    snprintf(je->err->msg, sizeof je->err->msg, "%s", m);
    longjmp(je->jb, 1);
}
static void jpg_emit(j_common_ptr c, int level) {
    /* a premature end of data is only a warning to libjpeg (it pads with
       gray); TF reports it as an error, and so do we */
    if (level < 0 && c->err->msg_code == JWRN_JPEG_EOF) {
        jpg_err *je = (jpg_err *)c->err;
        snprintf(je->err->msg, sizeof je->err->msg, "truncated JPEG file");
        longjmp(je->jb, 1);
    }
}

static int decode_jpeg(const uint8_t *buf, size_t n, int channels, uint8_t **pix, int *ph, int *pw, dec_err *e) {
    struct jpeg_decompress_struct ci;
    jpg_err je;
    uint8_t *volatile out = NULL;
    ci.err = jpeg_std_error(&je.pub);
    je.pub.error_exit = jpg_error_exit;
    je.pub.emit_message = jpg_emit;
    je.err = e;
    if (setjmp(je.jb)) {
        jpeg_destroy_decompress(&ci);
        free(out);
        return LD_EFORMAT;
    }
    jpeg_create_decompress(&ci);
    jpeg_mem_src(&ci, buf, (unsigned long)n);
    jpeg_read_header(&ci, TRUE);
    if (check_pixels(ci.image_width, ci.image_height, e)) { jpeg_destroy_decompress(&ci); return LD_EFORMAT; }
    ci.out_color_space = channels == 1 ? JCS_GRAYSCALE : channels == 3 ? JCS_RGB : JCS_EXT_RGBA;
    ci.dct_method = JDCT_IFAST;          /* TF's decode_jpeg default ("INTEGER_FAST") */
    ci.do_fancy_upsampling = TRUE;
    jpeg_start_decompress(&ci);
    if (ci.output_components != channels) {
        snprintf(e->msg, sizeof e->msg, "unsupported JPEG color space");
        jpeg_destroy_decompress(&ci);
        return LD_EFORMAT;
    }
    size_t rb = (size_t)ci.output_width * channels;
    out = malloc(rb * ci.output_height);
    if (!out) { snprintf(e->msg, sizeof e->msg, "out of memory"); jpeg_destroy_decompress(&ci); return LD_ENOMEM; }
    while (ci.output_scanline < ci.output_height) {
        JSAMPROW row = out + rb * ci.output_scanline;
        jpeg_read_scanlines(&ci, &row, 1);
    }
    *ph = (int)ci.output_height; *pw = (int)ci.output_width;
    jpeg_destroy_decompress(&ci);
    *pix = out;
    return LD_OK;
}

static int decode_any(const uint8_t *buf, size_t n, int channels, uint8_t **pix, int *h, int *w, dec_err *e) {
    static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    *pix = NULL;
    if (channels != 1 && channels != 3 && channels != 4) {
        snprintf(e->msg, sizeof e->msg, "channels must be 1, 3 or 4, not %d", channels);
        return LD_EARG;
    }
    if (n >= 8 && !memcmp(buf, png_sig, 8)) return decode_png(buf, n, channels, pix, h, w, e);
    if (n >= 3 && buf[0] == 0xff && buf[1] == 0xd8 && buf[2] == 0xff) return decode_jpeg(buf, n, channels, pix, h, w, e);
    if (n == 0) snprintf(e->msg, sizeof e->msg, "empty file, not a PNG or JPEG file");
    else if ((n >= 4 && !memcmp(buf, "GIF8", 4)) || (n >= 2 && buf[0] == 'B' && buf[1] == 'M'))
        snprintf(e->msg, sizeof e->msg, "a GIF or BMP file: ldist reads PNG and JPEG files only");
    else snprintf(e->msg, sizeof e->msg, "not a PNG or JPEG file");
    return LD_EFORMAT;
}

/* Read a whole file into *buf (grown as needed). */
static int read_file(const char *path, uint8_t **buf, size_t *cap, size_t *n, dec_err *e) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) { snprintf(e->msg, sizeof e->msg, "cannot open: %s", strerror(errno)); return LD_EIO; }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(e->msg, sizeof e->msg, "not a regular file");
        close(fd);
        return LD_EIO;
    }
    size_t want = (size_t)st.st_size + 1;
    if (want > *cap) {
        uint8_t *nb = realloc(*buf, want);
        if (!nb) { close(fd); snprintf(e->msg, sizeof e->msg, "out of memory"); return LD_ENOMEM; }
        *buf = nb; *cap = want;
    }
    size_t got = 0;
    for (;;) {
        if (got == *cap) {   /* the file grew since fstat */
            uint8_t *nb = realloc(*buf, *cap * 2);
            if (!nb) { close(fd); snprintf(e->msg, sizeof e->msg, "out of memory"); return LD_ENOMEM; }
            *buf = nb; *cap *= 2;
        }
        ssize_t r = read(fd, *buf + got, *cap - got);
        if (r < 0) {
            if (errno == EINTR) continue;
            snprintf(e->msg, sizeof e->msg, "cannot read: %s", strerror(errno));
            close(fd);
            return LD_EIO;
        }
        if (r == 0) break;
        got += (size_t)r;
    }
    close(fd);
    *n = got;
    return LD_OK;
}

int ld_image_decode(const uint8_t *buf, size_t n, const char *name, int channels, uint8_t **pix, int *h, int *w) {
    dec_err e = {{0}};
    int st = decode_any(buf, n, channels, pix, h, w, &e);
    if (st != LD_OK) return ld_fail(st, "%s: %s", name, e.msg);
    return LD_OK;
}

int ld_image_load(const char *path, int channels, uint8_t **pix, int *h, int *w) {
    dec_err e = {{0}};
    uint8_t *buf = NULL;
    size_t cap = 0, n = 0;
    *pix = NULL;
    int st = read_file(path, &buf, &cap, &n, &e);
    if (st == LD_OK) st = decode_any(buf, n, channels, pix, h, w, &e);
    free(buf);
    if (st != LD_OK) return ld_fail(st, "%s: %s", path, e.msg);
    return LD_OK;
}

/* ================================================================ resize */

typedef struct { int64_t lower, upper; float lerp; } interp;

/* TF's compute_interpolation_weights with HalfPixelScaler */
static void interp_weights(int64_t out_size, int64_t in_size, float scale, interp *w) {
    for (int64_t i = 0; i < out_size; i++) {
        volatile float in = ((float)i + 0.5f) * scale - 0.5f;   /* no fused multiply-add */
        float in_f = floorf(in);
        w[i].lower = (int64_t)in_f > 0 ? (int64_t)in_f : 0;
        w[i].upper = (int64_t)ceilf(in) < in_size - 1 ? (int64_t)ceilf(in) : in_size - 1;
        w[i].lerp = in - in_f;
    }
}

#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
void ld_image_resize_bilinear(const uint8_t *in, int ih, int iw, int c, float *out, int oh, int ow) {
    if (ih == oh && iw == ow) {
        size_t n = (size_t)ih * iw * c;
        for (size_t i = 0; i < n; i++) out[i] = in[i];
        return;
    }
    interp xsb[256], ysb[256];
    interp *xs = ow <= 256 ? xsb : malloc(sizeof(interp) * ow);
    interp *ys = oh <= 256 ? ysb : malloc(sizeof(interp) * oh);
    if (!xs || !ys) {   /* cannot happen at sane sizes; leave zeros */
        memset(out, 0, sizeof(float) * oh * ow * c);
        goto done;
    }
    interp_weights(ow, iw, (float)iw / (float)ow, xs);
    interp_weights(oh, ih, (float)ih / (float)oh, ys);
    for (int y = 0; y < oh; y++) {
        const uint8_t *lo = in + (size_t)ys[y].lower * iw * c, *hi = in + (size_t)ys[y].upper * iw * c;
        float yl = ys[y].lerp;
        float *o = out + (size_t)y * ow * c;
        for (int x = 0; x < ow; x++) {
            size_t xl = (size_t)xs[x].lower * c, xu = (size_t)xs[x].upper * c;
            float xw = xs[x].lerp;
            for (int k = 0; k < c; k++) {
                float top = (float)lo[xl + k] + ((float)lo[xu + k] - (float)lo[xl + k]) * xw;
                float bot = (float)hi[xl + k] + ((float)hi[xu + k] - (float)hi[xl + k]) * xw;
                o[(size_t)x * c + k] = top + (bot - top) * yl;
            }
        }
    }
done:
    if (xs != xsb) free(xs);
    if (ys != ysb) free(ys);
}
#pragma GCC pop_options

/* ================================================================ saving */

/* Both write a temporary file beside the path and rename it at the end
   (ld_file.h): a planted link is never followed, a failed save keeps the old
   image. `out` is filled before setjmp and not changed after it, so it is
   still valid when an error longjmps back. */
static int save_png(const char *path, const uint8_t *pix, int h, int w, int c) {
    ld_wfile out;
    if (ld_wfile_begin(&out, path) != LD_OK) return ld_error_status();
    dec_err e = {{0}};
    png_src src = {NULL, 0, 0, &e, NULL};
    png_structp p = png_create_write_struct(PNG_LIBPNG_VER_STRING, &src, png_err_fn, png_warn_fn);
    png_infop info = p ? png_create_info_struct(p) : NULL;
    if (!info) { png_destroy_write_struct(&p, NULL); ld_wfile_abort(&out); return ld_fail(LD_ENOMEM, "%s: out of memory", path); }
    if (setjmp(png_jmpbuf(p))) {
        png_destroy_write_struct(&p, &info);
        ld_wfile_abort(&out);
        return ld_fail(LD_EIO, "%s: %s", path, e.msg);
    }
    png_init_io(p, out.f);
    static const int types[5] = {0, PNG_COLOR_TYPE_GRAY, PNG_COLOR_TYPE_GRAY_ALPHA, PNG_COLOR_TYPE_RGB, PNG_COLOR_TYPE_RGBA};
    png_set_IHDR(p, info, (png_uint_32)w, (png_uint_32)h, 8, types[c], PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(p, info);
    for (int y = 0; y < h; y++) png_write_row(p, (png_const_bytep)(pix + (size_t)y * w * c));
    png_write_end(p, NULL);
    png_destroy_write_struct(&p, &info);
    return ld_wfile_commit(&out);
}

static int save_jpeg(const char *path, const uint8_t *pix, int h, int w, int c, int quality) {
    ld_wfile out;
    if (ld_wfile_begin(&out, path) != LD_OK) return ld_error_status();
    struct jpeg_compress_struct ci;
    jpg_err je;
    dec_err e = {{0}};
    ci.err = jpeg_std_error(&je.pub);
    je.pub.error_exit = jpg_error_exit;
    je.err = &e;
    if (setjmp(je.jb)) {
        jpeg_destroy_compress(&ci);
        ld_wfile_abort(&out);
        return ld_fail(LD_EIO, "%s: %s", path, e.msg);
    }
    jpeg_create_compress(&ci);
    jpeg_stdio_dest(&ci, out.f);
    ci.image_width = (JDIMENSION)w;
    ci.image_height = (JDIMENSION)h;
    ci.input_components = c;
    ci.in_color_space = c == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_set_defaults(&ci);
    jpeg_set_quality(&ci, quality, TRUE);
    jpeg_start_compress(&ci, TRUE);
    while (ci.next_scanline < ci.image_height) {
        JSAMPROW row = (JSAMPROW)(pix + (size_t)ci.next_scanline * w * c);
        jpeg_write_scanlines(&ci, &row, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    return ld_wfile_commit(&out);
}

static int has_ext(const char *name, const char *const *exts) {
    size_t n = strlen(name);
    for (int i = 0; exts[i]; i++) {
        size_t k = strlen(exts[i]);
        if (n >= k && !strcasecmp(name + n - k, exts[i])) return 1;
    }
    return 0;
}

int ld_image_save(const char *path, const uint8_t *pix, int h, int w, int c, int quality) {
    static const char *const jpg[] = {".jpg", ".jpeg", NULL};
    if (h < 1 || w < 1) return ld_fail(LD_EARG, "save_image: an empty image (%dx%d)", h, w);
    if (has_ext(path, jpg)) {
        if (c != 1 && c != 3) return ld_fail(LD_EARG, "save_image: a JPEG has 1 or 3 channels, not %d", c);
        if (quality < 1 || quality > 100) return ld_fail(LD_EARG, "save_image: quality must be in 1..100, not %d", quality);
        return save_jpeg(path, pix, h, w, c, quality);
    }
    if (c < 1 || c > 4) return ld_fail(LD_EARG, "save_image: a PNG has 1 to 4 channels, not %d", c);
    return save_png(path, pix, h, w, c);
}

/* ================================================================ index */

typedef struct { char **v; int64_t n, cap; } strvec;

static int sv_push(strvec *s, char *str) {
    if (!str) return -1;
    if (s->n == s->cap) {
        int64_t nc = s->cap ? s->cap * 2 : 64;
        char **nv = realloc(s->v, sizeof(char *) * nc);
        if (!nv) { free(str); return -1; }
        s->v = nv; s->cap = nc;
    }
    s->v[s->n++] = str;
    return 0;
}
static void sv_free(strvec *s) {
    for (int64_t i = 0; i < s->n; i++) free(s->v[i]);
    free(s->v);
    memset(s, 0, sizeof *s);
}
static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }
static void sv_sort(strvec *s) { if (s->n > 1) qsort(s->v, (size_t)s->n, sizeof(char *), cmp_str); }

static char *join(const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b);
    char *s = malloc(na + nb + 2);
    if (!s) return NULL;
    memcpy(s, a, na);
    size_t k = na;
    if (na && a[na - 1] != '/') s[k++] = '/';
    memcpy(s + k, b, nb + 1);
    return s;
}

/* Every folder under root (root included) that os.walk(followlinks=follow) visits. */
static int walk_dirs(const char *root, int follow, strvec *dirs, int depth) {
    if (depth > 64) return 0;
    char *copy = strdup(root);
    if (sv_push(dirs, copy) != 0) return -1;
    DIR *d = opendir(root);
    if (!d) return 0;                      /* os.walk ignores unreadable folders */
    struct dirent *de;
    strvec sub = {0};
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        char *p = join(root, de->d_name);
        if (!p) { closedir(d); sv_free(&sub); return -1; }
        struct stat st, lst;
        int isdir = stat(p, &st) == 0 && S_ISDIR(st.st_mode);
        int islink = lstat(p, &lst) == 0 && S_ISLNK(lst.st_mode);
        if (isdir && (follow || !islink)) {
            if (sv_push(&sub, p) != 0) { closedir(d); sv_free(&sub); return -1; }
        } else free(p);
    }
    closedir(d);
    for (int64_t i = 0; i < sub.n; i++)
        if (walk_dirs(sub.v[i], follow, dirs, depth + 1) != 0) { sv_free(&sub); return -1; }
    sv_free(&sub);
    return 0;
}

/* The image files directly in dir, sorted, appended to files; bmp/gif counted. */
static int list_files(const char *dir, strvec *files, int64_t *skipped) {
    static const char *const ok[] = {".png", ".jpg", ".jpeg", NULL};
    static const char *const other[] = {".bmp", ".gif", NULL};
    DIR *d = opendir(dir);
    if (!d) return 0;
    strvec names = {0};
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        int want = has_ext(de->d_name, ok), skip = !want && has_ext(de->d_name, other);
        if (!want && !skip) continue;
        char *p = join(dir, de->d_name);
        if (!p) { closedir(d); sv_free(&names); return -1; }
        struct stat st;
        if (stat(p, &st) == 0 && S_ISDIR(st.st_mode)) { free(p); continue; }   /* os.walk: a folder */
        if (skip) { (*skipped)++; free(p); continue; }
        free(p);
        if (sv_push(&names, strdup(de->d_name)) != 0) { closedir(d); sv_free(&names); return -1; }
    }
    closedir(d);
    sv_sort(&names);
    for (int64_t i = 0; i < names.n; i++)
        if (sv_push(files, join(dir, names.v[i])) != 0) { sv_free(&names); return -1; }
    sv_free(&names);
    return 0;
}

void ld_image_index_free(ld_image_index *ix) {
    if (!ix) return;
    for (int64_t i = 0; i < ix->n; i++) free(ix->paths[i]);
    free(ix->paths);
    free(ix->labels);
    for (int i = 0; i < ix->nclasses; i++) free(ix->class_names[i]);
    free(ix->class_names);
    memset(ix, 0, sizeof *ix);
}

int ld_image_index_directory(const char *dir, const char *const *class_names, int nclass_names,
                             int follow_links, int shuffle, uint32_t seed, ld_image_index *out) {
    memset(out, 0, sizeof *out);
    struct stat st;
    if (stat(dir, &st) != 0)
        return ld_fail(LD_EIO, "image_dataset_from_directory: %s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return ld_fail(LD_EIO, "image_dataset_from_directory: %s: not a directory", dir);
    strvec classes = {0}, files = {0};
    int32_t *labels = NULL;
    int64_t nlab = 0, caplab = 0;
    DIR *d = opendir(dir);
    if (!d) return ld_fail(LD_EIO, "image_dataset_from_directory: %s: %s", dir, strerror(errno));
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char *p = join(dir, de->d_name);
        int isdir = p && stat(p, &st) == 0 && S_ISDIR(st.st_mode);
        free(p);
        if (isdir && sv_push(&classes, strdup(de->d_name)) != 0) goto nomem;
    }
    closedir(d);
    d = NULL;
    sv_sort(&classes);
    if (class_names && nclass_names == 1 && !class_names[0][0]) {   /* no labels: every file under dir */
        sv_free(&classes);
        if (sv_push(&classes, strdup("")) != 0) goto nomem;
    } else if (class_names) {
        for (int i = 0; i < nclass_names; i++) {
            int found = 0;
            for (int64_t j = 0; j < classes.n && !found; j++) found = !strcmp(classes.v[j], class_names[i]);
            if (!found) {
                ld_fail(LD_EARG, "image_dataset_from_directory: class_names: %s has no sub-folder '%s'", dir, class_names[i]);
                sv_free(&classes);
                return LD_EARG;
            }
        }
        sv_free(&classes);
        for (int i = 0; i < nclass_names; i++)
            if (sv_push(&classes, strdup(class_names[i])) != 0) goto nomem;
    }
    if (classes.n == 0) {
        sv_free(&classes);
        return ld_fail(LD_EARG, "image_dataset_from_directory: %s has no sub-folders (one per class)", dir);
    }
    for (int64_t c = 0; c < classes.n; c++) {
        char *cdir = join(dir, classes.v[c]);
        strvec dirs = {0};
        if (!cdir || walk_dirs(cdir, follow_links, &dirs, 0) != 0) { free(cdir); sv_free(&dirs); goto nomem; }
        free(cdir);
        sv_sort(&dirs);
        int64_t before = files.n;
        for (int64_t i = 0; i < dirs.n; i++)
            if (list_files(dirs.v[i], &files, &out->skipped) != 0) { sv_free(&dirs); goto nomem; }
        sv_free(&dirs);
        if (files.n > caplab) {
            int64_t nc = files.n * 2;
            int32_t *nl = realloc(labels, sizeof(int32_t) * nc);
            if (!nl) goto nomem;
            labels = nl; caplab = nc;
        }
        for (int64_t i = before; i < files.n; i++) labels[nlab++] = (int32_t)c;
    }
    if (shuffle && files.n > 1) {
        /* paths and labels shuffled with the same seed: the same permutation */
        int64_t *perm = malloc(sizeof(int64_t) * files.n);
        char **pv = malloc(sizeof(char *) * files.n);
        int32_t *lv = malloc(sizeof(int32_t) * files.n);
        if (!perm || !pv || !lv) { free(perm); free(pv); free(lv); goto nomem; }
        for (int64_t i = 0; i < files.n; i++) perm[i] = i;
        ld_np_shuffle_i64(seed, files.n, perm);
        for (int64_t i = 0; i < files.n; i++) { pv[i] = files.v[perm[i]]; lv[i] = labels[perm[i]]; }
        memcpy(files.v, pv, sizeof(char *) * files.n);
        memcpy(labels, lv, sizeof(int32_t) * files.n);
        free(perm); free(pv); free(lv);
    }
    out->n = files.n;
    out->paths = files.v;
    out->labels = labels;
    out->nclasses = (int)classes.n;
    out->class_names = classes.v;
    return LD_OK;
nomem:
    if (d) closedir(d);
    sv_free(&classes);
    sv_free(&files);
    free(labels);
    return ld_fail(LD_ENOMEM, "image_dataset_from_directory: out of memory");
}

/* ================================================================ dataset */

typedef struct {
    int64_t n;
    char **paths;
    int32_t *labels;
    ld_image_opts o;
} img_src;

static void img_src_free(void *ud) {
    img_src *s = ud;
    if (!s) return;
    for (int64_t i = 0; i < s->n; i++) free(s->paths[i]);
    free(s->paths);
    free(s->labels);
    free(s);
}

typedef struct {
    const img_src *s;
    const int64_t *idx;
    int64_t b;
    float *out;
    dec_err *errs;
    int *status;
} load_job;

static void load_part(void *ctx, int part, int nparts) {
    load_job *j = ctx;
    const ld_image_opts *o = &j->s->o;
    int64_t lo = j->b * part / nparts, hi = j->b * (part + 1) / nparts;
    size_t per = (size_t)o->height * o->width * o->channels;
    uint8_t *buf = NULL;
    size_t cap = 0;
    for (int64_t i = lo; i < hi; i++) {
        const char *path = j->s->paths[j->idx[i]];
        size_t n = 0;
        uint8_t *pix = NULL;
        int h = 0, w = 0;
        int st = read_file(path, &buf, &cap, &n, &j->errs[i]);
        if (st == LD_OK) st = decode_any(buf, n, o->channels, &pix, &h, &w, &j->errs[i]);
        if (st == LD_OK) ld_image_resize_bilinear(pix, h, w, o->channels, j->out + per * i, o->height, o->width);
        free(pix);
        j->status[i] = st;
    }
    free(buf);
}

/* the map: int64 indices [b] (or one scalar index) -> images, labels */
static int img_map(void *ud, const ld_element *in, ld_element *out) {
    const img_src *s = ud;
    const ld_image_opts *o = &s->o;
    const ld_tensor *it = in->t[0];
    int batched = it->ndim == 1;
    int64_t b = batched ? it->shape[0] : 1;
    const int64_t *idx = ld_tensor_data(it);
    if (!idx) return ld_error_status() ? ld_error_status() : LD_EINTERNAL;
    int64_t ishape[4] = {b, o->height, o->width, o->channels};
    ld_tensor *img = batched ? ld_tensor_empty(LD_F32, 4, ishape, NULL) : ld_tensor_empty(LD_F32, 3, ishape + 1, NULL);
    if (!img) return ld_error_status();
    dec_err *errs = calloc((size_t)b, sizeof *errs);
    int *status = calloc((size_t)b, sizeof *status);
    if (!errs || !status) {
        free(errs); free(status); ld_tensor_release(img);
        return ld_fail(LD_ENOMEM, "image_dataset_from_directory: out of memory");
    }
    load_job j = {s, idx, b, ld_tensor_data(img), errs, status};
    int want = b < 64 ? (int)b : 64;
    if (want > 1) ld_cpu_parallel(load_part, &j, want);
    else load_part(&j, 0, 1);
    for (int64_t i = 0; i < b; i++)
        if (status[i] != LD_OK) {
            ld_fail(status[i], "image_dataset_from_directory: %s: %s", s->paths[idx[i]], errs[i].msg);
            int st = status[i];
            free(errs); free(status); ld_tensor_release(img);
            return st;
        }
    free(errs); free(status);
    out->t[out->n++] = img;
    if (o->label_mode == LD_IMAGE_LABELS_NONE) return LD_OK;
    ld_tensor *lab;
    if (o->label_mode == LD_IMAGE_LABELS_INT) {
        lab = batched ? ld_tensor_empty(LD_I32, 1, &b, NULL) : ld_tensor_empty(LD_I32, 0, NULL, NULL);
        if (lab) { int32_t *p = ld_tensor_data(lab); for (int64_t i = 0; i < b; i++) p[i] = s->labels[idx[i]]; }
    } else if (o->label_mode == LD_IMAGE_LABELS_BINARY) {
        int64_t sh[2] = {b, 1};
        lab = batched ? ld_tensor_empty(LD_F32, 2, sh, NULL) : ld_tensor_empty(LD_F32, 1, sh + 1, NULL);
        if (lab) { float *p = ld_tensor_data(lab); for (int64_t i = 0; i < b; i++) p[i] = (float)s->labels[idx[i]]; }
    } else {
        int64_t sh[2] = {b, o->num_classes};
        lab = batched ? ld_tensor_zeros(LD_F32, 2, sh, NULL) : ld_tensor_zeros(LD_F32, 1, sh + 1, NULL);
        if (lab) {
            float *p = ld_tensor_data(lab);
            for (int64_t i = 0; i < b; i++) p[i * o->num_classes + s->labels[idx[i]]] = 1.0f;
        }
    }
    if (!lab) { ld_element_clear(out); return ld_error_status(); }
    out->t[out->n++] = lab;
    return LD_OK;
}

ld_dataset *ld_image_dataset(int64_t n, const char *const *paths, const int32_t *labels, const ld_image_opts *o) {
    if (n < 1) { ld_fail(LD_EARG, "image_dataset_from_directory: no images"); return NULL; }
    if (o->height < 1 || o->width < 1 || o->height > 65536 || o->width > 65536) {
        ld_fail(LD_EARG, "image_dataset_from_directory: image_size must be positive, not %dx%d", o->height, o->width);
        return NULL;
    }
    if (o->channels != 1 && o->channels != 3 && o->channels != 4) {
        ld_fail(LD_EARG, "image_dataset_from_directory: channels must be 1, 3 or 4, not %d", o->channels);
        return NULL;
    }
    if (o->batch_size < 0) { ld_fail(LD_EARG, "image_dataset_from_directory: batch_size must be positive"); return NULL; }
    if (o->label_mode != LD_IMAGE_LABELS_NONE) {
        if (!labels) { ld_fail(LD_EARG, "image_dataset_from_directory: no labels given"); return NULL; }
        for (int64_t i = 0; i < n; i++)
            if (labels[i] < 0 || (o->label_mode != LD_IMAGE_LABELS_INT && labels[i] >= o->num_classes)) {
                ld_fail(LD_EARG, "image_dataset_from_directory: label %d out of range", (int)labels[i]);
                return NULL;
            }
    }
    img_src *s = calloc(1, sizeof *s);
    ld_tensor *idx = NULL;
    if (!s || !(s->paths = calloc((size_t)n, sizeof(char *))) || !(s->labels = calloc((size_t)n, sizeof(int32_t)))) goto nomem;
    s->n = n;
    s->o = *o;
    for (int64_t i = 0; i < n; i++) {
        if (!(s->paths[i] = strdup(paths[i]))) goto nomem;
        s->labels[i] = labels ? labels[i] : 0;
    }
    idx = ld_tensor_empty(LD_I64, 1, &n, NULL);
    if (!idx) { img_src_free(s); return NULL; }
    int64_t *ip = ld_tensor_data(idx);
    for (int64_t i = 0; i < n; i++) ip[i] = i;
    ld_dataset *cur = ld_dataset_from_tensor_slices(1, &idx), *next;
    ld_tensor_release(idx);
    if (!cur) { img_src_free(s); return NULL; }
#define STEP(expr) do { next = (expr); ld_dataset_release(cur); cur = next; if (!cur) return NULL; } while (0)
    if (o->shuffle) STEP(ld_dataset_shuffle(cur, n, o->seed, 1));
    if (o->batch_size > 0) STEP(ld_dataset_batch(cur, o->batch_size, 0));
    next = ld_dataset_map(cur, img_map, s, img_src_free, 0);   /* owns s from here */
    ld_dataset_release(cur);
    cur = next;
    if (!cur) return NULL;
    STEP(ld_dataset_prefetch(cur, LD_AUTOTUNE));
#undef STEP
    return cur;
nomem:
    img_src_free(s);
    ld_fail(LD_ENOMEM, "image_dataset_from_directory: out of memory");
    return NULL;
}
