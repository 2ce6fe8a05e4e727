/* test_gemm.c - the product without packing (ld_cpu_gemm_small.c) against a
   double-precision reference, over the shapes whose edges it handles:
   row blocks of 12/8/4/1 (AVX-512) or 6/4/2/1 (AVX2), column panels of 32
   or 16 with a masked last one, depth cut into passes of at most 512,
   strided operands, beta 0 and 1. Each version this processor has is
   tested: the program runs again with LDIST_CPU_ISA=avx2 (the version is
   chosen once per process). */
#include "test_util.h"
#include "ld_cpu_gemm_small.h"
#include "ld_cpu_internal.h"

#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static float frand(unsigned *s) { *s = *s * 1103515245u + 12345u; return (float)((*s >> 8) & 0xFFFF) / 65536.0f - 0.5f; }

/* 1 when the product matched (or the machine has no AVX-512: 0 returned by it and nothing written) */
static int check(int64_t m, int64_t n, int64_t k, int pad, float beta, int *ran) {
    int64_t lda = k + pad, ldb = n + pad, ldc = n + 2 * pad;
    float *a = malloc(sizeof(float) * m * lda), *b = malloc(sizeof(float) * k * ldb), *c = malloc(sizeof(float) * m * ldc);
    double *ref = malloc(sizeof(double) * m * ldc);
    unsigned s = (unsigned)(m * 7 + n * 13 + k);
    for (int64_t i = 0; i < m * lda; i++) a[i] = frand(&s);
    for (int64_t i = 0; i < k * ldb; i++) b[i] = frand(&s);
    for (int64_t i = 0; i < m * ldc; i++) { c[i] = frand(&s); ref[i] = c[i]; }
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double acc = beta == 1.0f ? ref[i * ldc + j] : 0;
            for (int64_t q = 0; q < k; q++) acc += (double)a[i * lda + q] * b[q * ldb + j];
            ref[i * ldc + j] = acc;
        }
    int ok = 1;
    *ran = ld_cpu_gemm_small(m, n, k, a, lda, b, ldb, beta, c, ldc);
    if (*ran) {
        for (int64_t i = 0; i < m && ok; i++)
            for (int64_t j = 0; j < ldc && ok; j++) {
                double want = ref[i * ldc + j];   /* past column n: the padding, untouched */
                if (fabs(c[i * ldc + j] - want) > 1e-4 * (1 + sqrt((double)k))) {
                    printf("#   m=%lld n=%lld k=%lld pad=%d beta=%g: c[%lld][%lld] = %g, expected %g\n", (long long)m,
                           (long long)n, (long long)k, pad, beta, (long long)i, (long long)j, c[i * ldc + j], want);
                    ok = 0;
                }
            }
    }
    free(a); free(b); free(c); free(ref);
    return ok;
}

int main(int argc, char **argv) {
    (void)argc;
    const char *forced = getenv("LDIST_CPU_ISA");
    char name[160];
    snprintf(name, sizeof name, "a product without packing B equals the reference on every edge of its blocking (%s)",
             ld_cpu_isa_name());
    TEST(name) {
        static const int64_t ms[] = {1, 2, 3, 4, 5, 6, 7, 8, 11, 12, 13, 25, 47, 48, 49, 128, 256};
        static const int64_t ns[] = {256, 257, 264, 272, 280, 300, 512};
        static const int64_t ks[] = {256, 511, 513, 784, 1100};
        int ran = 0, any = 0;
        for (size_t x = 0; x < sizeof ms / sizeof *ms; x++)
            for (size_t y = 0; y < sizeof ns / sizeof *ns; y++)
                for (size_t z = 0; z < sizeof ks / sizeof *ks; z++) {
                    if (ms[x] > 13 && (ns[y] != 280 && ns[y] != 512)) continue;   /* keep the test short */
                    int pad = (int)((x + y + z) % 3) * 5;
                    CHECK(check(ms[x], ns[y], ks[z], pad, (x + z) % 2 ? 1.0f : 0.0f, &ran));
                    any |= ran;
                }
        if (!any) printf("# no AVX2 here: ld_cpu_gemm_small declines and BLAS computes every product\n");
        /* a beta it does not handle is declined, never computed wrongly */
        float a1[1] = {1}, b1[1] = {1}, c1[1] = {5};
        CHECK(ld_cpu_gemm_small(1, 1, 1, a1, 1, b1, 1, 0.5f, c1, 1) == 0 && c1[0] == 5);
    }
    /* the AVX2 version too, where the processor has more: the same test in a
       process where LDIST_CPU_ISA=avx2 */
    if (!forced && ld_cpu_isa() > LD_ISA_AVX2) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            setenv("LDIST_CPU_ISA", "avx2", 1);
            execv("/proc/self/exe", argv);
            _exit(127);
        }
        int st = 0;
        TEST("the AVX2 version, forced with LDIST_CPU_ISA=avx2, passes the same test") {
            CHECK(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
        }
    }
    if (forced && !strcmp(forced, "avx2") && ld_cpu_isa() == LD_ISA_AVX2) {
        TEST("LDIST_CPU_ISA=avx2: rows past 48 go to BLAS (the AVX2 version falls behind there)") {
            float a1[49 * 256] = {0}, b1[256 * 256] = {0}, c1[49 * 256];
            CHECK(ld_cpu_gemm_small(49, 256, 256, a1, 256, b1, 256, 0.0f, c1, 256) == 0);
            CHECK(ld_cpu_gemm_small(48, 256, 256, a1, 256, b1, 256, 0.0f, c1, 256) == 1);
        }
    }
    return tu_summary();
}
