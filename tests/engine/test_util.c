#include "test_util.h"
#include <stdlib.h>
#include <string.h>

int tu_failed_checks;
static int failed_tests, passed_tests;
static char current[256];

void tu_begin(const char *name) {
    snprintf(current, sizeof current, "%s", name);
    tu_failed_checks = 0;
}
int tu_end(void) {
    if (tu_failed_checks) { printf("not ok - %s\n", current); failed_tests++; return 1; }
    printf("ok - %s\n", current); passed_tests++; return 0;
}
int tu_summary(void) { fflush(stdout); return failed_tests ? 1 : 0; }

double tu_time_scale(void) {
    const char *s = getenv("LDIST_TEST_TIME_SCALE");
    double v = s ? atof(s) : 1;
    return v >= 1 ? v : 1;
}

double tu_norm_err(const ld_tensor *a, const ld_tensor *b) {
    int64_t n = ld_tensor_numel(b);
    if (ld_tensor_numel(a) != n) return INFINITY;
    double m = 1, e = 0;
    for (int64_t i = 0; i < n; i++) {
        double bv = ld_tensor_get_flat(b, i), av = ld_tensor_get_flat(a, i);
        if (fabs(bv) > m) m = fabs(bv);
        if (!(fabs(av - bv) <= e)) e = fabs(av - bv);
        if (isnan(av) != isnan(bv)) return INFINITY;
    }
    return e / m;
}

/* ---- a scratch folder for tests that write files ---- */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

char tu_dir[64];

int tu_scratch_init(const char *prefix) {
    snprintf(tu_dir, sizeof tu_dir, "/tmp/%s.XXXXXX", prefix);
    if (!mkdtemp(tu_dir)) { perror("mkdtemp"); return 1; }
    return 0;
}

const char *tu_path(const char *name) {
    static char buf[8][256];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tu_dir, name);
    return buf[k];
}

void tu_write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fwrite(data, 1, n, f);
    fclose(f);
}

int tu_count_prefixed(const char *prefix) {
    DIR *d = opendir(tu_dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) n += !strncmp(e->d_name, prefix, strlen(prefix));
    if (d) closedir(d);
    return n;
}

int tu_contains(const char *hay, const char *needle) {
    if (!strstr(hay, needle)) { printf("#   message '%s' lacks '%s'\n", hay, needle); return 0; }
    return 1;
}
