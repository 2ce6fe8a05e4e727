/* test_io.c - IDX, CSV and safetensors readers and writer (engine/ld_io.c). */
#include "test_util.h"
#include "ld_io.h"
#include "ld_device.h"

#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>



static void write_gz(const char *path, const void *data, size_t n) {
    gzFile g = gzopen(path, "wb");
    gzwrite(g, data, (unsigned)n);
    gzclose(g);
}
static void write_text(const char *path, const char *s) { tu_write_file(path, s, strlen(s)); }
static int exists(const char *path) { struct stat st; return stat(path, &st) == 0; }
/* bytes of live tensors on cpu:0 (the host allocator's count includes the backend's cache) */
static size_t live_bytes(void) { return __atomic_load_n(&ld_device_cpu()->bytes_in_use, __ATOMIC_RELAXED); }

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
/* make test installs what these need, so a missing piece is a failure, not a skip */
static void skip(const char *name, const char *why) { printf("not ok - %s (cannot run: %s)\n", name, why); }

/* An IDX header for `ndim` dims of type `code`. Returns its length. */
static size_t idx_header(unsigned char *h, int code, int ndim, const uint32_t *dims) {
    h[0] = 0; h[1] = 0; h[2] = (unsigned char)code; h[3] = (unsigned char)ndim;
    for (int i = 0; i < ndim; i++) {
        h[4 + 4 * i] = dims[i] >> 24; h[5 + 4 * i] = dims[i] >> 16; h[6 + 4 * i] = dims[i] >> 8; h[7 + 4 * i] = dims[i];
    }
    return 4 + 4 * (size_t)ndim;
}

static void test_idx(void) {
    const char *fm = getenv("LDIST_DATA_DIR");
    char img[512], lab[512];
    snprintf(img, sizeof img, "%s/train-images-idx3-ubyte.gz", fm ? fm : "/usr/share/datasets/fashion-mnist");
    snprintf(lab, sizeof lab, "%s/train-labels-idx1-ubyte.gz", fm ? fm : "/usr/share/datasets/fashion-mnist");
    if (!exists(img) || !exists(lab)) {
        skip("idx: Fashion-MNIST training set", "dataset-fashion-mnist is not installed (make setup)");
    } else TEST("idx: Fashion-MNIST training set (60000x28x28 uint8, labels < 10, fast)") {
        double t0 = now();
        ld_tensor *x = ld_load_idx(img);
        double t1 = now();
        CHECK(x != NULL);
        if (x) {
            CHECK(x->dtype == LD_U8 && x->ndim == 3);
            CHECK(x->shape[0] == 60000 && x->shape[1] == 28 && x->shape[2] == 28);
            const uint8_t *p = ld_tensor_data(x);
            int64_t nonzero = 0, big = 0;
            for (int64_t i = 0; i < 60000 * 784; i++) { nonzero += p[i] != 0; big += p[i] > 200; }
            CHECK(nonzero > 60000 * 784 / 4);   /* real images, not zeros */
            CHECK(big > 0);
        }
        printf("#   60000 images (uint8) in %.3f s\n", t1 - t0);
        CHECK(t1 - t0 < 2.0 * tu_time_scale());        /* about 0.3 s on an idle core; the margin is for loaded CI machines */
        ld_tensor_release(x);
        ld_tensor *y = ld_load_idx(lab);
        CHECK(y != NULL);
        if (y) {
            CHECK(y->dtype == LD_U8 && y->ndim == 1 && y->shape[0] == 60000);
            int counts[256] = {0};
            const uint8_t *p = ld_tensor_data(y);
            for (int i = 0; i < 60000; i++) counts[p[i]]++;
            for (int c = 0; c < 10; c++) CHECK(counts[c] == 6000);   /* Fashion-MNIST is balanced */
        }
        ld_tensor_release(y);
        t0 = now();
        ld_tensor *xf = ld_load_idx_as(img, LD_F32, 1.0 / 255);
        t1 = now();
        printf("#   60000 images (float32 / 255) in %.3f s\n", t1 - t0);
        CHECK(xf && xf->dtype == LD_F32 && xf->shape[0] == 60000);
        if (xf) {
            const float *p = ld_tensor_data(xf);
            float mx = 0, mn = 1;
            for (int64_t i = 0; i < 60000 * 784; i++) { if (p[i] > mx) mx = p[i]; if (p[i] < mn) mn = p[i]; }
            CHECK_NEAR(mx, 1.0, 1e-6);
            CHECK(mn == 0.0f);
        }
        CHECK(t1 - t0 < 2.0 * tu_time_scale());        /* about 0.4 s on an idle core */
        ld_tensor_release(xf);
        ld_tensor *yl = ld_load_idx_as(lab, LD_I64, 1);
        CHECK(yl && yl->dtype == LD_I64 && yl->shape[0] == 60000);
        if (yl) { CHECK(ld_tensor_get_flat(yl, 0) == 9); }   /* the first training label is 9 (ankle boot) */
        ld_tensor_release(yl);
    }

    TEST("idx: uint8 plain and gzip files read the same") {
        unsigned char buf[64];
        uint32_t dims[2] = {3, 2};
        size_t h = idx_header(buf, 0x08, 2, dims);
        for (int i = 0; i < 6; i++) buf[h + i] = (unsigned char)(10 * i + 1);
        tu_write_file(tu_path("u8.idx"), buf, h + 6);
        write_gz(tu_path("u8.idx.gz"), buf, h + 6);
        for (int k = 0; k < 2; k++) {
            ld_tensor *t = ld_load_idx(tu_path(k ? "u8.idx.gz" : "u8.idx"));
            CHECK(t && t->dtype == LD_U8 && t->ndim == 2 && t->shape[0] == 3 && t->shape[1] == 2);
            if (t) for (int i = 0; i < 6; i++) CHECK(ld_tensor_get_flat(t, i) == 10 * i + 1);
            ld_tensor_release(t);
        }
        ld_tensor *f = ld_load_idx_as(tu_path("u8.idx.gz"), LD_F32, 0.5);
        CHECK(f && f->dtype == LD_F32);
        if (f) CHECK_NEAR(ld_tensor_get_flat(f, 5), 25.5, 1e-6);
        ld_tensor_release(f);
    }

    TEST("idx: big-endian int16, int32, float32, float64 payloads") {
        unsigned char buf[128];
        uint32_t dims[1] = {2};
        /* int16: -2, 300 */
        size_t h = idx_header(buf, 0x0B, 1, dims);
        unsigned char i16[] = {0xFF, 0xFE, 0x01, 0x2C};
        memcpy(buf + h, i16, 4);
        tu_write_file(tu_path("i16.idx"), buf, h + 4);
        ld_tensor *t = ld_load_idx(tu_path("i16.idx"));
        CHECK(t && t->dtype == LD_I32);
        if (t) { CHECK(ld_tensor_get_flat(t, 0) == -2); CHECK(ld_tensor_get_flat(t, 1) == 300); }
        ld_tensor_release(t);
        /* int32: -70000, 5 */
        h = idx_header(buf, 0x0C, 1, dims);
        unsigned char i32[] = {0xFF, 0xFE, 0xEE, 0x90, 0, 0, 0, 5};
        memcpy(buf + h, i32, 8);
        tu_write_file(tu_path("i32.idx"), buf, h + 8);
        t = ld_load_idx(tu_path("i32.idx"));
        CHECK(t && t->dtype == LD_I32);
        if (t) { CHECK(ld_tensor_get_flat(t, 0) == -70000); CHECK(ld_tensor_get_flat(t, 1) == 5); }
        ld_tensor_release(t);
        /* float32: 1.5, -2.25 */
        h = idx_header(buf, 0x0D, 1, dims);
        unsigned char f32[] = {0x3F, 0xC0, 0, 0, 0xC0, 0x10, 0, 0};
        memcpy(buf + h, f32, 8);
        tu_write_file(tu_path("f32.idx"), buf, h + 8);
        t = ld_load_idx(tu_path("f32.idx"));
        CHECK(t && t->dtype == LD_F32);
        if (t) { CHECK(ld_tensor_get_flat(t, 0) == 1.5); CHECK(ld_tensor_get_flat(t, 1) == -2.25); }
        ld_tensor_release(t);
        /* float64: 0.1, 3 */
        h = idx_header(buf, 0x0E, 1, dims);
        unsigned char f64[] = {0x3F, 0xB9, 0x99, 0x99, 0x99, 0x99, 0x99, 0x9A, 0x40, 0x08, 0, 0, 0, 0, 0, 0};
        memcpy(buf + h, f64, 16);
        write_gz(tu_path("f64.idx.gz"), buf, h + 16);
        t = ld_load_idx(tu_path("f64.idx.gz"));
        CHECK(t && t->dtype == LD_F32);
        if (t) { CHECK_NEAR(ld_tensor_get_flat(t, 0), 0.1, 1e-7); CHECK(ld_tensor_get_flat(t, 1) == 3); }
        ld_tensor_release(t);
    }

    TEST("idx: a missing file names the file and the reason") {
        ld_tensor *t = ld_load_idx(tu_path("nope/missing.gz"));
        CHECK(t == NULL);
        CHECK(ld_error_status() == LD_EIO);
        CHECK(tu_contains(ld_error(), "cannot open '"));
        CHECK(tu_contains(ld_error(), "missing.gz': No such file or directory"));
    }

    TEST("idx: not an IDX file (bad magic), plain and gzip") {
        write_text(tu_path("text.idx"), "hello, world\n");
        ld_tensor *t = ld_load_idx(tu_path("text.idx"));
        CHECK(t == NULL);
        CHECK(tu_contains(ld_error(), "is not an IDX file (magic 0x68656c6c)"));
        write_gz(tu_path("text.idx.gz"), "\x00\x00\x07\x01zzzz", 8);   /* type 0x07 does not exist */
        t = ld_load_idx(tu_path("text.idx.gz"));
        CHECK(t == NULL);
        CHECK(tu_contains(ld_error(), "is not an IDX file (magic 0x00000701)"));
        tu_write_file(tu_path("tiny.idx"), "\x00\x00", 2);
        t = ld_load_idx(tu_path("tiny.idx"));
        CHECK(t == NULL && tu_contains(ld_error(), "truncated"));
    }

    TEST("idx: truncated data, plain and gzip, give errors") {
        unsigned char buf[256];
        uint32_t dims[2] = {10, 10};
        size_t h = idx_header(buf, 0x08, 2, dims);
        memset(buf + h, 7, 50);                   /* 50 of 100 bytes */
        tu_write_file(tu_path("trunc.idx"), buf, h + 50);
        write_gz(tu_path("trunc.idx.gz"), buf, h + 50);
        ld_tensor *t = ld_load_idx(tu_path("trunc.idx"));
        CHECK(t == NULL && tu_contains(ld_error(), "trunc.idx' is truncated"));
        t = ld_load_idx(tu_path("trunc.idx.gz"));
        CHECK(t == NULL && tu_contains(ld_error(), "truncated"));
        t = ld_load_idx_as(tu_path("trunc.idx.gz"), LD_F32, 1);  /* the converting path too */
        CHECK(t == NULL && tu_contains(ld_error(), "truncated"));
        /* a .gz file cut in the middle of its compressed stream */
        memset(buf + h, 0, 100);
        for (int i = 0; i < 100; i++) buf[h + i] = (unsigned char)(i * 37);
        write_gz(tu_path("cut.gz"), buf, h + 100);
        FILE *f = fopen(tu_path("cut.gz"), "rb");
        unsigned char gzbytes[512];
        size_t n = fread(gzbytes, 1, sizeof gzbytes, f);
        fclose(f);
        tu_write_file(tu_path("cut.gz"), gzbytes, n / 2);
        t = ld_load_idx(tu_path("cut.gz"));
        CHECK(t == NULL);
        printf("#   cut gzip: %s\n", ld_error());
    }

    TEST("idx: a header announcing a huge array allocates nothing") {
        unsigned char buf[64];
        uint32_t dims[4] = {0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 2};
        size_t h = idx_header(buf, 0x0E, 4, dims);
        tu_write_file(tu_path("huge.idx"), buf, h + 8);
        size_t before = live_bytes();
        ld_tensor *t = ld_load_idx(tu_path("huge.idx"));
        CHECK(t == NULL && tu_contains(ld_error(), "impossibly large"));
        uint32_t dims2[2] = {60000, 60000};        /* 3.6 GB claimed by a tiny gzip file */
        h = idx_header(buf, 0x08, 2, dims2);
        write_gz(tu_path("huge2.idx.gz"), buf, h + 8);
        t = ld_load_idx(tu_path("huge2.idx.gz"));
        CHECK(t == NULL && tu_contains(ld_error(), "truncated or corrupt"));
        CHECK(live_bytes() == before);
    }
}

static void test_csv(void) {
    TEST("csv: header detected, values and column names") {
        write_text(tu_path("a.csv"), "x,y,label\n1,2.5,0\n-3,4e2,1\n");
        char **names = NULL;
        int nn = 0;
        ld_tensor *t = ld_load_csv(tu_path("a.csv"), NULL, &names, &nn);
        CHECK(t && t->dtype == LD_F32 && t->ndim == 2 && t->shape[0] == 2 && t->shape[1] == 3);
        if (t) {
            double want[] = {1, 2.5, 0, -3, 400, 1};
            for (int i = 0; i < 6; i++) CHECK(ld_tensor_get_flat(t, i) == want[i]);
        }
        CHECK(nn == 3 && names && !strcmp(names[0], "x") && !strcmp(names[2], "label"));
        ld_strings_free(names, nn);
        ld_tensor_release(t);
    }

    TEST("csv: no header, CRLF, blank lines, spaces, ';' delimiter") {
        write_text(tu_path("b.csv"), "1; 2\r\n\r\n 3 ;4\r\n");
        ld_csv_options o = {-1, ';'};
        char **names = (char **)1;
        int nn = 5;
        ld_tensor *t = ld_load_csv(tu_path("b.csv"), &o, &names, &nn);
        CHECK(t && t->shape[0] == 2 && t->shape[1] == 2);
        if (t) for (int i = 0; i < 4; i++) CHECK(ld_tensor_get_flat(t, i) == i + 1);
        CHECK(names == NULL && nn == 0);
        ld_tensor_release(t);
    }

    TEST("csv: forced header and forced no header") {
        write_text(tu_path("c.csv"), "1,2\n3,4\n");
        ld_csv_options o = {1, ','};
        char **names = NULL;
        int nn = 0;
        ld_tensor *t = ld_load_csv(tu_path("c.csv"), &o, &names, &nn);
        CHECK(t && t->shape[0] == 1 && nn == 2 && names && !strcmp(names[1], "2"));
        ld_strings_free(names, nn);
        ld_tensor_release(t);
        write_text(tu_path("d.csv"), "a,b\n3,4\n");
        o.header = 0;
        t = ld_load_csv(tu_path("d.csv"), &o, NULL, NULL);
        CHECK(t == NULL && tu_contains(ld_error(), "line 1, column 1: 'a' is not a number"));
    }

    TEST("csv: quoted header names, empty fields are NaN, header only gives 0 rows") {
        write_text(tu_path("e.csv"), "\"sepal, length\",\"say \"\"hi\"\"\"\n1,\n");
        char **names = NULL;
        int nn = 0;
        ld_tensor *t = ld_load_csv(tu_path("e.csv"), NULL, &names, &nn);
        CHECK(t && t->shape[0] == 1 && t->shape[1] == 2);
        CHECK(nn == 2 && names && !strcmp(names[0], "sepal, length") && !strcmp(names[1], "say \"hi\""));
        if (t) { CHECK(ld_tensor_get_flat(t, 0) == 1); CHECK(isnan(ld_tensor_get_flat(t, 1))); }
        ld_strings_free(names, nn);
        ld_tensor_release(t);
        write_text(tu_path("f.csv"), "a,b,c\n");
        t = ld_load_csv(tu_path("f.csv"), NULL, NULL, NULL);
        CHECK(t && t->shape[0] == 0 && t->shape[1] == 3);
        ld_tensor_release(t);
    }

    TEST("csv: ragged rows, bad numbers, empty and missing files are errors") {
        write_text(tu_path("g.csv"), "1,2,3\n4,5\n");
        ld_tensor *t = ld_load_csv(tu_path("g.csv"), NULL, NULL, NULL);
        CHECK(t == NULL && tu_contains(ld_error(), "g.csv' line 2 has 2 fields, expected 3"));
        write_text(tu_path("h.csv"), "1,2\n3,x4\n");
        t = ld_load_csv(tu_path("h.csv"), NULL, NULL, NULL);
        CHECK(t == NULL && tu_contains(ld_error(), "line 2, column 2: 'x4' is not a number"));
        write_text(tu_path("i.csv"), "");
        t = ld_load_csv(tu_path("i.csv"), NULL, NULL, NULL);
        CHECK(t == NULL && tu_contains(ld_error(), "is empty"));
        t = ld_load_csv(tu_path("none.csv"), NULL, NULL, NULL);
        CHECK(t == NULL && tu_contains(ld_error(), "none.csv': No such file or directory"));
    }

    TEST("csv: 100000 rows x 10 columns") {
        FILE *f = fopen(tu_path("big.csv"), "w");
        fprintf(f, "c0,c1,c2,c3,c4,c5,c6,c7,c8,c9\n");
        for (int i = 0; i < 100000; i++) {
            for (int j = 0; j < 10; j++) fprintf(f, j ? ",%d.5" : "%d.5", i + j);
            fputc('\n', f);
        }
        fclose(f);
        double t0 = now();
        ld_tensor *t = ld_load_csv(tu_path("big.csv"), NULL, NULL, NULL);
        printf("#   100000x10 CSV in %.3f s\n", now() - t0);
        CHECK(t && t->shape[0] == 100000 && t->shape[1] == 10);
        if (t) CHECK(ld_tensor_get_flat(t, 999999) == 100008.5);
        ld_tensor_release(t);
    }
}

/* ---- safetensors ---- */

static ld_tensor *make(ld_dtype dt, int ndim, const int64_t *shape, double base) {
    ld_tensor *t = ld_tensor_empty(dt, ndim, shape, NULL);
    int64_t n = ld_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        void *p = ld_tensor_data(t);
        double v = base + (double)i * (dt == LD_F32 ? 0.25 : 1);
        if (dt == LD_F32) ((float *)p)[i] = (float)(v - 3);
        else if (dt == LD_I32) ((int32_t *)p)[i] = (int32_t)v - 7;
        else if (dt == LD_I64) ((int64_t *)p)[i] = (int64_t)v * 3000000000LL;
        else ((uint8_t *)p)[i] = (uint8_t)v;
    }
    return t;
}

static int same_tensor(const ld_tensor *a, const ld_tensor *b) {
    if (!a || !b || a->dtype != b->dtype || !ld_same_shape(a, b)) return 0;
    size_t nb = (size_t)ld_tensor_numel(a) * ld_dtype_size(a->dtype);
    return memcmp(ld_tensor_data(a), ld_tensor_data(b), nb) == 0;
}

static int find(const ld_tensor_dict *d, const char *name) {
    for (int i = 0; i < d->n; i++) if (!strcmp(d->names[i], name)) return i;
    return -1;
}

static int have_python_safetensors(void) {
    return system("python3 -c 'import safetensors, numpy' >/dev/null 2>&1") == 0;
}

static void test_safetensors(void) {
    int64_t s23[2] = {2, 3}, s4[1] = {4}, s0[1] = {0}, s234[3] = {2, 3, 4};
    ld_tensor *ts[6] = {
        make(LD_F32, 2, s23, 1), make(LD_I32, 1, s4, 2), make(LD_I64, 3, s234, 3),
        make(LD_U8, 1, s4, 250), make(LD_F32, 0, NULL, 9), make(LD_I64, 1, s0, 0),
    };
    const char *names[6] = {"dense/kernel", "ids", "big \"quoted\" \\name", "bytes", "scalar", "empty"};
    const char *meta[4] = {"format", "pt", "note", "épsilon\nline"};
    char path[256];
    snprintf(path, sizeof path, "%s", tu_path("w.safetensors"));

    TEST("safetensors: round trip of every dtype, 0-d and empty tensors, metadata") {
        CHECK(ld_save_safetensors(path, 6, names, ts, 2, meta) == LD_OK);
        CHECK(tu_count_prefixed("w.safetensors.tmp") == 0);
        ld_tensor_dict d = {0};
        int nm = 0;
        char **kv = NULL;
        CHECK(ld_load_safetensors_meta(path, &d, &nm, &kv) == LD_OK);
        CHECK(d.n == 6);
        for (int i = 0; i < 6; i++) {
            int j = find(&d, names[i]);
            CHECK(j >= 0);
            if (j >= 0) CHECK(same_tensor(d.tensors[j], ts[i]));
        }
        CHECK(nm == 2);
        if (nm == 2) {
            int fi = !strcmp(kv[0], "format") ? 0 : 2, ni = 2 - fi;
            CHECK(!strcmp(kv[fi], "format") && !strcmp(kv[fi + 1], "pt"));
            CHECK(!strcmp(kv[ni], "note") && !strcmp(kv[ni + 1], "épsilon\nline"));
        }
        ld_strings_free(kv, 2 * nm);
        ld_tensor_dict_free(&d);
        CHECK(d.n == 0);
    }

    TEST("safetensors: file layout (length prefix, padded header, aligned data)") {
        FILE *f = fopen(path, "rb");
        unsigned char b[8] = {0};
        CHECK(f && fread(b, 1, 8, f) == 8);
        if (!f) f = fopen("/dev/null", "rb");
        uint64_t hl = 0;
        for (int i = 7; i >= 0; i--) hl = hl << 8 | b[i];
        CHECK(hl % 8 == 0);
        if (hl > 1 << 20) hl = 0;
        char *h = calloc(1, hl + 1);
        CHECK(fread(h, 1, hl, f) == hl);
        CHECK(h[0] == '{');
        CHECK(strstr(h, "\"dtype\":\"I64\"") != NULL && strstr(h, "\"__metadata__\"") != NULL);
        /* 8-byte dtypes come first so every tensor is aligned to its element size */
        CHECK(strstr(h, "\"big \\\"quoted\\\" \\\\name\":{\"dtype\":\"I64\",\"shape\":[2,3,4],\"data_offsets\":[0,192]}") != NULL);
        free(h);
        fclose(f);
    }

    TEST("safetensors: non-contiguous tensors are saved as their values") {
        ld_tensor *tr = ld_transpose(ts[0], 0, 1);   /* 3x2 view */
        ld_tensor *one[1] = {tr};
        const char *nm[1] = {"t"};
        CHECK(ld_save_safetensors(tu_path("tr.safetensors"), 1, nm, one, 0, NULL) == LD_OK);
        ld_tensor_dict d = {0};
        CHECK(ld_load_safetensors(tu_path("tr.safetensors"), &d) == LD_OK);
        CHECK(d.n == 1 && d.tensors[0]->shape[0] == 3 && d.tensors[0]->shape[1] == 2);
        if (d.n == 1) CHECK(tu_norm_err(d.tensors[0], tr) == 0);
        ld_tensor_dict_free(&d);
        ld_tensor_release(tr);
    }

    TEST("safetensors: bad arguments are errors (duplicate, empty or reserved names)") {
        const char *dup[2] = {"a", "a"};
        CHECK(ld_save_safetensors(tu_path("x.safetensors"), 2, dup, ts, 0, NULL) == LD_EARG);
        CHECK(tu_contains(ld_error(), "two tensors are named 'a'"));
        const char *res[1] = {"__metadata__"};
        CHECK(ld_save_safetensors(tu_path("x.safetensors"), 1, res, ts, 0, NULL) == LD_EARG);
        const char *emp[1] = {""};
        CHECK(ld_save_safetensors(tu_path("x.safetensors"), 1, emp, ts, 0, NULL) == LD_EARG);
        CHECK(!exists(tu_path("x.safetensors")) && tu_count_prefixed("x.safetensors") == 0);
    }

    TEST("safetensors: a failed write leaves the old file intact and no temporary") {
        FILE *f = fopen(path, "rb");
        char old[4096];
        size_t on = f ? fread(old, 1, sizeof old, f) : 0;
        if (f) fclose(f);
        CHECK(on > 0);
        /* a file size limit of 64 bytes: writing the new file fails with EFBIG
           (a link at PATH.tmp to /dev/full no longer works: links are not followed) */
        struct rlimit was, lim;
        getrlimit(RLIMIT_FSIZE, &was);
        lim = was;
        lim.rlim_cur = 64;
        void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
        CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
        int st = ld_save_safetensors(path, 6, names, ts, 0, NULL);
        setrlimit(RLIMIT_FSIZE, &was);
        signal(SIGXFSZ, old_handler);
        CHECK(st == LD_EIO);
        CHECK(tu_contains(ld_error(), "File too large"));
        CHECK(tu_count_prefixed("w.safetensors.tmp") == 0);
        f = fopen(path, "rb");
        char now_[4096];
        size_t nn = f ? fread(now_, 1, sizeof now_, f) : 0;
        if (f) fclose(f);
        CHECK(nn == on && memcmp(old, now_, on) == 0);
        /* a directory that does not exist */
        CHECK(ld_save_safetensors(tu_path("no/such/dir.safetensors"), 1, names, ts, 0, NULL) == LD_EIO);
        CHECK(tu_contains(ld_error(), "No such file or directory"));
    }

    TEST("safetensors: corrupt files are errors, never crashes") {
        ld_tensor_dict d = {0};
        CHECK(ld_load_safetensors(tu_path("missing.safetensors"), &d) == LD_EIO);
        CHECK(tu_contains(ld_error(), "missing.safetensors': No such file or directory"));
        tu_write_file(tu_path("c1"), "\x05\x00", 2);
        CHECK(ld_load_safetensors(tu_path("c1"), &d) == LD_EFORMAT && tu_contains(ld_error(), "truncated"));
        /* a header length of 2^62 */
        tu_write_file(tu_path("c2"), "\x00\x00\x00\x00\x00\x00\x00\x40{}", 10);
        CHECK(ld_load_safetensors(tu_path("c2"), &d) == LD_EFORMAT);
        struct { const char *name, *json, *want; } cases[] = {
            {"c3", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}", "expected ',' or '}'"},
            {"c4", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,12]}}", "do not match"},
            {"c5", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", "truncated"},
            {"c6", "{\"a\":{\"dtype\":\"C64\",\"shape\":[1],\"data_offsets\":[0,8]}}", "dtype C64"},
            {"c7", "{\"a\":{\"dtype\":\"F32\",\"shape\":[99999999999,99999999999],\"data_offsets\":[0,8]}}", "overflows"},
            {"c8", "[1,2]", "expected '{'"},
            {"c9", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", "more than 8"},
            {"c10", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", "lacks"},
            {"c11", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                    "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", "two tensors"},
            {"c12", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", "non-negative"},
            {"c13", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}} x", "trailing"},
        };
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            unsigned char buf[512] = {0};
            size_t hl = strlen(cases[i].json);
            for (int k = 0; k < 8; k++) buf[k] = (unsigned char)(hl >> (8 * k));
            memcpy(buf + 8, cases[i].json, hl);
            memset(buf + 8 + hl, 0, 8);               /* 8 data bytes */
            tu_write_file(tu_path(cases[i].name), buf, 8 + hl + 8);
            int st = ld_load_safetensors(tu_path(cases[i].name), &d);
            CHECK(st != LD_OK && d.n == 0);
            if (!strstr(ld_error(), cases[i].want)) { printf("#   case %s\n", cases[i].name); CHECK(tu_contains(ld_error(), cases[i].want)); }
        }
    }

    if (!have_python_safetensors()) {
        skip("safetensors: Python's safetensors reads our file", "python3 lacks safetensors/numpy (make setup)");
        skip("safetensors: we read Python's safetensors file", "python3 lacks safetensors/numpy (make setup)");
    } else {
        TEST("safetensors: Python's safetensors reads our file") {
            char cmd[2048];
            snprintf(cmd, sizeof cmd,
                "python3 - '%s' <<'EOF'\n"
                "import sys, numpy as np\n"
                "from safetensors import safe_open\n"
                "from safetensors.numpy import load_file\n"
                "d = load_file(sys.argv[1])\n"
                "assert sorted(d) == sorted(['dense/kernel','ids','big \"quoted\" \\\\name','bytes','scalar','empty']), sorted(d)\n"
                "assert d['dense/kernel'].dtype == np.float32 and d['dense/kernel'].shape == (2, 3)\n"
                "assert np.array_equal(d['dense/kernel'].ravel(), np.arange(6, dtype=np.float32) * 0.25 - 2)\n"
                "assert d['ids'].dtype == np.int32 and list(d['ids']) == [-5, -4, -3, -2]\n"
                "assert d['big \"quoted\" \\\\name'].dtype == np.int64 and d['big \"quoted\" \\\\name'].shape == (2, 3, 4)\n"
                "assert d['big \"quoted\" \\\\name'].ravel()[5] == 8 * 3000000000\n"
                "assert d['bytes'].dtype == np.uint8 and list(d['bytes']) == [250, 251, 252, 253]\n"
                "assert d['scalar'].shape == () and d['scalar'] == 6\n"
                "assert d['empty'].shape == (0,)\n"
                "with safe_open(sys.argv[1], 'np') as f:\n"
                "    assert f.metadata() == {'format': 'pt', 'note': '\\u00e9psilon\\nline'}, f.metadata()\n"
                "EOF", tu_path("w2.safetensors"));
            CHECK(ld_save_safetensors(tu_path("w2.safetensors"), 6, names, ts, 2, meta) == LD_OK);
            CHECK(system(cmd) == 0);
        }
        TEST("safetensors: we read Python's safetensors file (with dtype conversions)") {
            char cmd[2048];
            snprintf(cmd, sizeof cmd,
                "python3 - '%s' <<'EOF'\n"
                "import sys, numpy as np\n"
                "from safetensors.numpy import save_file\n"
                "save_file({'f32': np.arange(12, dtype=np.float32).reshape(3, 4) / 4,\n"
                "           'i64': np.array([-1, 2**40], dtype=np.int64),\n"
                "           'i32': np.array([[7]], dtype=np.int32), 'u8': np.array([0, 255], dtype=np.uint8),\n"
                "           'f16': np.array([1.5, -0.0001, 65504], dtype=np.float16),\n"
                "           'f64': np.array([0.1], dtype=np.float64), 'b': np.array([True, False]),\n"
                "           'i16': np.array([-300], dtype=np.int16)},\n"
                "          sys.argv[1], metadata={'epoch': '3'})\n"
                "EOF", tu_path("py.safetensors"));
            CHECK(system(cmd) == 0);
            ld_tensor_dict d = {0};
            int nm = 0;
            char **kv = NULL;
            CHECK(ld_load_safetensors_meta(tu_path("py.safetensors"), &d, &nm, &kv) == LD_OK);
            CHECK(d.n == 8);
            CHECK(nm == 1 && !strcmp(kv[0], "epoch") && !strcmp(kv[1], "3"));
            ld_strings_free(kv, 2 * nm);
            int i;
            CHECK((i = find(&d, "f32")) >= 0 && d.tensors[i]->dtype == LD_F32 && d.tensors[i]->shape[1] == 4 &&
                  ld_tensor_get_flat(d.tensors[i], 11) == 2.75);
            CHECK((i = find(&d, "i64")) >= 0 && d.tensors[i]->dtype == LD_I64 &&
                  ld_tensor_get_flat(d.tensors[i], 1) == 1099511627776.0 && ld_tensor_get_flat(d.tensors[i], 0) == -1);
            CHECK((i = find(&d, "i32")) >= 0 && d.tensors[i]->dtype == LD_I32 && ld_tensor_get_flat(d.tensors[i], 0) == 7);
            CHECK((i = find(&d, "u8")) >= 0 && d.tensors[i]->dtype == LD_U8 && ld_tensor_get_flat(d.tensors[i], 1) == 255);
            CHECK((i = find(&d, "f16")) >= 0 && d.tensors[i]->dtype == LD_F16);   /* kept as float16 */
            if (i >= 0) {
                CHECK(ld_tensor_get_flat(d.tensors[i], 0) == 1.5);
                CHECK_NEAR(ld_tensor_get_flat(d.tensors[i], 1), -0.0001, 1e-3);   /* a float16 subnormal */
                CHECK(ld_tensor_get_flat(d.tensors[i], 2) == 65504);
            }
            CHECK((i = find(&d, "f64")) >= 0 && d.tensors[i]->dtype == LD_F32);
            if (i >= 0) CHECK_NEAR(ld_tensor_get_flat(d.tensors[i], 0), 0.1, 1e-7);
            CHECK((i = find(&d, "b")) >= 0 && d.tensors[i]->dtype == LD_U8 && ld_tensor_get_flat(d.tensors[i], 0) == 1);
            CHECK((i = find(&d, "i16")) >= 0 && d.tensors[i]->dtype == LD_I32 && ld_tensor_get_flat(d.tensors[i], 0) == -300);
            ld_tensor_dict_free(&d);
        }
    }
    for (int i = 0; i < 6; i++) ld_tensor_release(ts[i]);
}

/* ld_tensor_borrow: a tensor over memory the caller owns (the parameter
   server's shared-memory segments): no copy, and the owner hears once,
   when the last view of it goes */
static int borrow_released;
static void borrow_release(void *ctx) { borrow_released += *(int *)ctx; }
static void test_borrow(void) {
    TEST("borrow: a view without a copy, released once after its last view") {
        float mem[6] = {1, 2, 3, 4, 5, 6};
        int one = 1;
        int64_t shape[2] = {2, 3};
        borrow_released = 0;
        ld_tensor *t = ld_tensor_borrow(LD_F32, 2, shape, mem, NULL, borrow_release, &one);
        CHECK(t != NULL);
        if (t) {
            CHECK(ld_tensor_get_flat(t, 4) == 5.0);
            mem[4] = 50;                                   /* the same memory: no copy */
            CHECK(ld_tensor_get_flat(t, 4) == 50.0);
            ld_tensor *row = ld_slice(t, 0, 1, 2, 1);     /* a view keeps the storage */
            ld_tensor_release(t);
            CHECK(borrow_released == 0);
            CHECK(row && ld_tensor_get_flat(row, 1) == 50.0);
            ld_tensor_release(row);
            CHECK(borrow_released == 1);
            CHECK(mem[0] == 1 && mem[5] == 6);            /* nothing freed or written */
        }
        int64_t bad[1] = {-1};
        CHECK(ld_tensor_borrow(LD_F32, 1, bad, mem, NULL, borrow_release, &one) == NULL);
        CHECK(borrow_released == 1);
    }
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (tu_scratch_init("ldist_test_io")) return 1;
    test_borrow();
    test_idx();
    test_csv();
    test_safetensors();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tu_dir);
    if (system(cmd) != 0) printf("# could not remove %s\n", tu_dir);
    return tu_summary();
}
