#include "test_util.h"
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
