/* test_util.h - a tiny TAP-style harness for the engine's C tests.
 * Each CHECK prints nothing when it holds; each test prints "ok - name" or
 * "not ok - name" with the failed checks above it. tests/run.sh counts them. */
#ifndef TEST_UTIL_H
#define TEST_UTIL_H
#include <stdio.h>
#include <math.h>
#include "ld_tensor.h"

extern int tu_failed_checks;
void tu_begin(const char *name);
int tu_end(void);        /* prints ok / not ok; returns 1 when the test failed */
int tu_summary(void);    /* exit status for main */

#define CHECK(cond) do { if (!(cond)) { tu_failed_checks++; \
    printf("#   check failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); } } while (0)
#define CHECK_NEAR(a, b, tol) do { double _a = (a), _b = (b); \
    if (!(fabs(_a - _b) <= (tol) * (1 + fabs(_b)))) { tu_failed_checks++; \
    printf("#   check failed: %s = %g, expected %s = %g (%s:%d)\n", #a, _a, #b, _b, __FILE__, __LINE__); } } while (0)
#define TEST(name) for (int _once = (tu_begin(name), 1); _once; _once = 0, tu_end())
/* max |a-b| / max(1, max|b|) over two same-shaped host tensors */
double tu_norm_err(const ld_tensor *a, const ld_tensor *b);
/* what a time bound is multiplied by: $LDIST_TEST_TIME_SCALE, which tests/run.sh
   sets for sanitized builds (they run several times slower); 1 otherwise */
double tu_time_scale(void);

/* ---- a scratch folder for tests that write files ---- */
int tu_scratch_init(const char *prefix);   /* mkdtemp /tmp/<prefix>.XXXXXX; 0 on success */
extern char tu_dir[64];                     /* the folder */
const char *tu_path(const char *name);      /* tu_dir/name (8 rotating buffers) */
void tu_write_file(const char *path, const void *data, size_t n);
int tu_count_prefixed(const char *prefix);  /* files in tu_dir whose name starts with prefix */
int tu_contains(const char *hay, const char *needle);   /* strstr, printing the miss */
/* ---- finite-difference gradient checks (test_grad.c and the op tests) ---- */
/* the tests' random numbers: main seeds it; tu_rnd draws from it */
extern ld_rng tu_rng;
ld_tensor *tu_rnd(int ndim, const int64_t *shape, float lo, float hi);   /* uniform in [lo, hi) */
double tu_weighted_sum(ld_tensor *y, ld_tensor *r);                       /* sum(y * r) */
typedef ld_tensor *(*tu_op_fn)(ld_tensor **in, void *ud);
/* One test `name`: the tape's d/d in[k] of L = sum(f(in, ud) * R), R a fixed
 * random tensor from tu_rng, against central differences, for every k < n with
 * check[k] set (only those are watched); fails when max error / max(1, max
 * |numeric|) > tol for one of them. Any n. */
void tu_gradcheck(const char *name, tu_op_fn f, void *ud, int n, ld_tensor **in, const int *check, double tol);
#endif
