#include "test_util.h"
#include "ld_ops.h"
#include "ld_autograd.h"
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

/* ---- finite-difference gradient checks ---- */
ld_rng tu_rng;

ld_tensor *tu_rnd(int ndim, const int64_t *shape, float lo, float hi) {
    return ld_tensor_uniform(ndim, shape, lo, hi, &tu_rng, NULL);
}

double tu_weighted_sum(ld_tensor *y, ld_tensor *r) {
    double s = 0;
    int64_t n = ld_tensor_numel(y);
    for (int64_t i = 0; i < n; i++) s += ld_tensor_get_flat(y, i) * ld_tensor_get_flat(r, i);
    return s;
}

void tu_gradcheck(const char *name, tu_op_fn f, void *ud, int n, ld_tensor **in, const int *check, double tol) {
    TEST(name) {
        /* analytic: the gradient of sum(f(x) * r) from the tape */
        ld_tape *tape = ld_tape_new(0);
        for (int k = 0; k < n; k++) if (check[k]) ld_tape_watch(tape, in[k]);
        ld_tape_push(tape);
        ld_tensor *y = f(in, ud);
        if (!y) { ld_tape_pop(tape); CHECK(y != NULL); printf("#   %s\n", ld_error()); ld_tape_free(tape); continue; }
        ld_tensor *r = tu_rnd(y->ndim, y->shape, 0.5f, 1.5f);
        ld_tensor *prod = ld_mul(y, r), *loss = ld_sum(prod, LD_ALL_AXES, 0);
        ld_tape_pop(tape);
        ld_tensor **grads = calloc((size_t)(n > 0 ? n : 1), sizeof *grads);
        int st = ld_tape_gradient(tape, loss, n, in, grads);
        CHECK(st == LD_OK);
        if (st) printf("#   %s\n", ld_error());
        ld_tape_pause(1);
        for (int k = 0; k < n && !st; k++) {
            if (!check[k]) continue;
            int64_t m = ld_tensor_numel(in[k]);
            double worst = 0, scale = 1;
            for (int64_t i = 0; i < m; i++) {
                double x0 = ld_tensor_get_flat(in[k], i), h = 1e-3 * (fabs(x0) > 1 ? fabs(x0) : 1);
                /* read each result at once: a view op's result shares x's storage */
                ld_tensor_set_flat(in[k], i, x0 + h);
                ld_tensor *yp = f(in, ud);
                double lp = tu_weighted_sum(yp, r);
                ld_tensor_set_flat(in[k], i, x0 - h);
                ld_tensor *ym = f(in, ud);
                double lm = tu_weighted_sum(ym, r);
                ld_tensor_set_flat(in[k], i, x0);
                double num = (lp - lm) / (2 * h);
                double ana = ld_tensor_get_flat(grads[k], i);
                if (fabs(num) > scale) scale = fabs(num);
                if (fabs(num - ana) > worst) worst = fabs(num - ana);
                ld_tensor_release(yp);
                ld_tensor_release(ym);
            }
            if (worst / scale > tol) printf("#   input %d: max error %.3g (scale %.3g)\n", k, worst, scale);
            CHECK(worst / scale <= tol);
        }
        ld_tape_pause(0);
        for (int k = 0; k < n; k++) ld_tensor_release(grads[k]);
        free(grads);
        ld_tensor_release(prod); ld_tensor_release(loss); ld_tensor_release(y); ld_tensor_release(r);
        ld_tape_free(tape);
    }
}
