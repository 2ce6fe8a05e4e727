/* test_io_faults.c - engine/ld_io.c against hostile files and racing writers:
 * a link planted at the temporary name, concurrent saves to one path, a
 * safetensors header that would make the reader allocate gigabytes or take
 * minutes, sizes that overflow, and an IDX scale that is not a number. */
#include "test_util.h"
#include "ld_io.h"
#include "ld_device.h"

#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>


static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
/* The process's peak resident set (VmHWM), in bytes. */
static long long peak_rss(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6)) kb = atoll(line + 6);
    if (f) fclose(f);
    return kb * 1024;
}

/* A safetensors file from a header (padded to 8 bytes) and `data_len` bytes of `fill`. */
static void write_st(const char *path, const char *json, size_t data_len, unsigned char fill) {
    size_t hl = strlen(json), pad = (8 - hl % 8) % 8;
    FILE *f = fopen(path, "wb");
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((hl + pad) >> (8 * i));
    fwrite(len8, 1, 8, f);
    fwrite(json, 1, hl, f);
    for (size_t i = 0; i < pad; i++) fputc(' ', f);
    unsigned char chunk[4096];
    memset(chunk, fill, sizeof chunk);
    for (size_t left = data_len; left; ) {
        size_t k = left < sizeof chunk ? left : sizeof chunk;
        fwrite(chunk, 1, k, f);
        left -= k;
    }
    fclose(f);
}

/* ---- concurrent saves: run first, before this process starts the engine,
   so the forked writers start from a clean state ---- */

enum { WRITERS = 6, SAVES = 40 };

/* Writer w's save number s: every value of every tensor is its stamp, and the
   sizes vary so a torn file cannot pass for a whole one. */
static int writer(const char *path, int w) {
    int fails = 0;
    for (int s = 0; s < SAVES; s++) {
        float stamp = (float)(w * 1000 + s);
        int64_t sa[2] = {16 + 8 * ((w + s) % 5), 64}, sb[1] = {1000 + 100 * w};
        ld_tensor *a = ld_tensor_empty(LD_F32, 2, sa, NULL), *b = ld_tensor_empty(LD_I32, 1, sb, NULL);
        float *pa = ld_tensor_data(a);
        int32_t *pb = ld_tensor_data(b);
        for (int64_t i = 0; i < sa[0] * sa[1]; i++) pa[i] = stamp;
        for (int64_t i = 0; i < sb[0]; i++) pb[i] = (int32_t)stamp;
        const char *names[2] = {"a", "b"};
        ld_tensor *ts[2] = {a, b};
        if (ld_save_safetensors(path, 2, names, ts, 0, NULL) != LD_OK) {
            if (!fails) printf("#   writer %d save %d: %s\n", w, s, ld_error());
            fails++;
        }
        ld_tensor_release(a);
        ld_tensor_release(b);
    }
    return fails ? 1 : 0;
}

static void test_concurrent_saves(void) {
    const char *path = tu_path("race.safetensors");
    pid_t pids[WRITERS];
    for (int w = 0; w < WRITERS; w++) {
        pids[w] = fork();
        if (pids[w] == 0) {
            /* the first save must exist before the reader starts: writer 0 makes it */
            _exit(writer(path, w));
        }
    }
    TEST("safetensors: concurrent saves to one path never show a torn file, and all succeed") {
        /* wait for the first file, then read while any writer runs */
        for (int i = 0; i < 2000 && access(path, F_OK) != 0; i++) usleep(1000);
        int loads = 0, bad = 0, alive = WRITERS, exits_ok = 0;
        int done[WRITERS] = {0};
        while (alive) {
            ld_tensor_dict d = {0};
            if (ld_load_safetensors(path, &d) != LD_OK) {
                if (!bad) printf("#   load %d: %s\n", loads, ld_error());
                bad++;
            } else {
                int ok = d.n == 2 && d.tensors[0]->dtype == LD_F32 && d.tensors[1]->dtype == LD_I32;
                if (ok) {
                    const float *pa = ld_tensor_data(d.tensors[0]);
                    const int32_t *pb = ld_tensor_data(d.tensors[1]);
                    int64_t na = ld_tensor_numel(d.tensors[0]), nb = ld_tensor_numel(d.tensors[1]);
                    for (int64_t i = 0; ok && i < na; i++) ok = pa[i] == pa[0];
                    for (int64_t i = 0; ok && i < nb; i++) ok = pb[i] == (int32_t)pa[0];
                    ok = ok && nb == 1000 + 100 * ((int)pa[0] / 1000);
                }
                if (!ok) { if (!bad) printf("#   load %d: a mixed or torn file\n", loads); bad++; }
            }
            ld_tensor_dict_free(&d);
            loads++;
            for (int w = 0; w < WRITERS; w++) {
                int st;
                if (!done[w] && waitpid(pids[w], &st, WNOHANG) == pids[w]) {
                    done[w] = 1;
                    alive--;
                    exits_ok += WIFEXITED(st) && WEXITSTATUS(st) == 0;
                }
            }
        }
        printf("#   %d loads during %d x %d saves\n", loads, WRITERS, SAVES);
        CHECK(bad == 0);
        CHECK(exits_ok == WRITERS);
        CHECK(loads > 0);
        CHECK(tu_count_prefixed("race.safetensors.tmp") == 0);
    }
}

/* ---- the temporary file ---- */

static void test_planted_link(void) {
    int64_t s[1] = {4};
    ld_tensor *t = ld_tensor_empty(LD_F32, 1, s, NULL);
    for (int i = 0; i < 4; i++) ((float *)ld_tensor_data(t))[i] = (float)i;
    const char *names[1] = {"w"};
    TEST("safetensors: a link planted at PATH.tmp is not followed") {
        const char *victim = tu_path("victim.txt");
        tu_write_file(victim, "precious\n", 9);
        CHECK(symlink(victim, tu_path("ck.safetensors.tmp")) == 0);
        /* and a dangling one, which fopen("wb") would have created a file through */
        CHECK(symlink(tu_path("made-through-link"), tu_path("ck2.safetensors.tmp")) == 0);
        CHECK(ld_save_safetensors(tu_path("ck.safetensors"), 1, names, &t, 0, NULL) == LD_OK);
        CHECK(ld_save_safetensors(tu_path("ck2.safetensors"), 1, names, &t, 0, NULL) == LD_OK);
        char buf[64] = {0};
        FILE *f = fopen(victim, "rb");
        size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
        if (f) fclose(f);
        CHECK(n == 9 && !strcmp(buf, "precious\n"));
        CHECK(access(tu_path("made-through-link"), F_OK) != 0);
        struct stat st;
        CHECK(lstat(tu_path("ck.safetensors"), &st) == 0 && S_ISREG(st.st_mode));
        ld_tensor_dict d = {0};
        CHECK(ld_load_safetensors(tu_path("ck.safetensors"), &d) == LD_OK && d.n == 1);
        ld_tensor_dict_free(&d);
        /* the saver leaves someone else's link alone and no temporary of its own */
        CHECK(lstat(tu_path("ck.safetensors.tmp"), &st) == 0 && S_ISLNK(st.st_mode));
        CHECK(tu_count_prefixed("ck.safetensors.tmp") == 1);
    }
    ld_tensor_release(t);
}

/* ---- headers ---- */

static void test_overlapping_entries(void) {
    TEST("safetensors: 3000 entries on the same 1 MiB are refused before any large allocation") {
        /* 1 MiB of data; every entry claims all of it: 3 GB if believed */
        size_t cap = 3000 * 100 + 64, k = 0;
        char *json = malloc(cap);
        k += (size_t)snprintf(json + k, cap - k, "{");
        for (int i = 0; i < 3000; i++)
            k += (size_t)snprintf(json + k, cap - k, "%s\"w%d\":{\"dtype\":\"F32\",\"shape\":[262144],\"data_offsets\":[0,1048576]}",
                                  i ? "," : "", i);
        snprintf(json + k, cap - k, "}");
        write_st(tu_path("overlap.safetensors"), json, 1 << 20, 0);
        free(json);
        long long before = peak_rss();
        ld_tensor_dict d = {0};
        int st = ld_load_safetensors(tu_path("overlap.safetensors"), &d);
        long long grew = peak_rss() - before;
        printf("#   peak RSS grew by %lld KiB\n", grew / 1024);
        CHECK(st == LD_EFORMAT && d.n == 0);
        CHECK(tu_contains(ld_error(), "overlap"));
        CHECK(grew < (64 << 20));
        ld_tensor_dict_free(&d);
    }
    TEST("safetensors: gaps, overlaps and trailing bytes in the data section are refused") {
        struct { const char *json; size_t data; const char *want; } cases[] = {
            {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
             12, "overlap"},
            {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}",
             20, "belong to no tensor"},
            {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 16, "cover 8"},
            {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "belong to no tensor"},
            {"{\"a\":{\"dtype\":\"F32\",\"shape\":[0,9007199254740992,9007199254740992],\"data_offsets\":[0,0]}}", 0, "overflows"},
            {"{\"a\":{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}", 8, "overflows"},
        };
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            write_st(tu_path("bad.safetensors"), cases[i].json, cases[i].data, 0);
            ld_tensor_dict d = {0};
            int st = ld_load_safetensors(tu_path("bad.safetensors"), &d);
            if (st == LD_OK || !strstr(ld_error(), cases[i].want)) printf("#   case %zu\n", i);
            CHECK(st == LD_EFORMAT && d.n == 0);
            CHECK(tu_contains(ld_error(), cases[i].want));
            ld_tensor_dict_free(&d);
        }
        /* empty tensors anywhere in the order are fine */
        write_st(tu_path("ok.safetensors"),
                 "{\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,8]},\"a\":{\"dtype\":\"F32\",\"shape\":[2],"
                 "\"data_offsets\":[0,8]},\"z\":{\"dtype\":\"I64\",\"shape\":[0,3],\"data_offsets\":[0,0]}}", 8, 0);
        ld_tensor_dict d = {0};
        CHECK(ld_load_safetensors(tu_path("ok.safetensors"), &d) == LD_OK && d.n == 3);
        ld_tensor_dict_free(&d);
    }
}

static void test_large_header(void) {
    enum { N = 100000 };
    size_t cap = (size_t)N * 80 + 64, k = 0;
    char *json = malloc(cap);
    /* entries in reverse file order, the worst case for an insertion sort */
    k += (size_t)snprintf(json + k, cap - k, "{");
    for (int i = 0; i < N; i++) {
        int at = N - 1 - i;
        k += (size_t)snprintf(json + k, cap - k, "%s\"t%d\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[%d,%d]}",
                              i ? "," : "", at, 4 * at, 4 * at + 4);
    }
    snprintf(json + k, cap - k, "}");
    write_st(tu_path("many.safetensors"), json, 4 * (size_t)N, 0);
    TEST("safetensors: a 100,000-entry header loads in under a second") {
        ld_tensor_dict d = {0};
        double t0 = now();
        int st = ld_load_safetensors(tu_path("many.safetensors"), &d);
        double dt = now() - t0;
        printf("#   100000 entries in %.3f s\n", dt);
        CHECK(st == LD_OK && d.n == N);
        CHECK(dt < 1.0 * tu_time_scale());
        if (d.n == N) CHECK(!strcmp(d.names[0], "t0") && !strcmp(d.names[N - 1], "t99999"));   /* file order */
        ld_tensor_dict_free(&d);
    }
    TEST("safetensors: a 100,000-entry header with a duplicate name is refused in under a second") {
        /* rename the last entry (t0) to t1 */
        char *last = strstr(json + k - 80, "\"t0\"");
        CHECK(last != NULL);
        if (last) memcpy(last, "\"t1\"", 4);
        write_st(tu_path("dup.safetensors"), json, 4 * (size_t)N, 0);
        ld_tensor_dict d = {0};
        double t0 = now();
        int st = ld_load_safetensors(tu_path("dup.safetensors"), &d);
        double dt = now() - t0;
        CHECK(st == LD_EFORMAT && tu_contains(ld_error(), "two tensors are named 't1'"));
        CHECK(dt < 1.0 * tu_time_scale());
        ld_tensor_dict_free(&d);
    }
    free(json);
}

/* A check that refuses everything: load_weights' hook runs before any data is read. */
static int refuse_all(void *ctx, const char *path, int n, const ld_safetensors_entry *e) {
    *(int *)ctx = n;
    return ld_fail(LD_ESHAPE, "'%s': %d entries, first %s %s", path, n, e[0].name, e[0].dtype);
}

static void test_check_hook(void) {
    TEST("safetensors: the check sees the validated header before any data is allocated") {
        /* 64 MiB of valid data in 64 tensors */
        size_t cap = 64 * 100 + 16, k = 0;
        char *json = malloc(cap);
        k += (size_t)snprintf(json + k, cap - k, "{");
        for (int i = 0; i < 64; i++)
            k += (size_t)snprintf(json + k, cap - k, "%s\"%d/w\":{\"dtype\":\"F16\",\"shape\":[524288],\"data_offsets\":[%d,%d]}",
                                  i ? "," : "", i, i << 20, (i + 1) << 20);
        snprintf(json + k, cap - k, "}");
        write_st(tu_path("big.safetensors"), json, 64 << 20, 0);
        free(json);
        int seen = 0;
        long long before = peak_rss();
        ld_tensor_dict d = {0};
        int st = ld_load_safetensors_checked(tu_path("big.safetensors"), &d, NULL, NULL, refuse_all, &seen);
        long long grew = peak_rss() - before;
        CHECK(st == LD_ESHAPE && seen == 64 && d.n == 0);
        CHECK(tu_contains(ld_error(), "64 entries, first 0/w F16"));
        CHECK(grew < (32 << 20));
        unlink(tu_path("big.safetensors"));
    }
}

/* ---- IDX ---- */

static void test_idx_scale(void) {
    unsigned char f[4 + 4 + 3] = {0, 0, 0x08, 1, 0, 0, 0, 3, 1, 2, 255};
    tu_write_file(tu_path("s.idx"), f, sizeof f);
    TEST("idx: a NaN or infinite scale is an error, not INT64_MIN") {
        CHECK(ld_load_idx_as(tu_path("s.idx"), LD_I64, NAN) == NULL);
        CHECK(tu_contains(ld_error(), "scale must be a finite number"));
        CHECK(ld_load_idx_as(tu_path("s.idx"), LD_F32, INFINITY) == NULL);
        CHECK(ld_load_idx_as(tu_path("s.idx"), LD_I32, -INFINITY) == NULL);
    }
    TEST("idx: a scale that takes values out of the dtype's range is an error") {
        CHECK(ld_load_idx_as(tu_path("s.idx"), LD_I32, 1e300) == NULL);
        CHECK(tu_contains(ld_error(), "int32 cannot hold"));
        CHECK(ld_load_idx_as(tu_path("s.idx"), LD_U8, -1) == NULL);
        CHECK(tu_contains(ld_error(), "uint8 cannot hold"));
        ld_tensor *t = ld_load_idx_as(tu_path("s.idx"), LD_I64, 2);
        CHECK(t && ld_tensor_get_flat(t, 2) == 510);
        ld_tensor_release(t);
    }
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    if (tu_scratch_init("ldist_test_io_faults")) return 1;
    test_concurrent_saves();
    test_planted_link();
    test_overlapping_entries();
    test_large_header();
    test_check_hook();
    test_idx_scale();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tu_dir);
    if (system(cmd) != 0) printf("# could not remove %s\n", tu_dir);
    return tu_summary();
}
