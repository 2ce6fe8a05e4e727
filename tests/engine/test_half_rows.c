/* test_half_rows.c - the vector rows of ld_cpu_half.c (float32 <-> float16 /
   bfloat16) against ld_half.h's scalar conversions, bit for bit: every
   16-bit pattern widened; float32 values narrowed over every pattern of the
   top 16 bits with the low bits at and around the ties of both formats,
   plus a sweep of the whole float32 range; with the processor's flush of
   subnormals off and on (ldist's threads run with FTZ and DAZ); rows of
   every length up to 40 at odd offsets (the masked and scalar tails). The
   path is the one ld_cpu_isa picks; the program runs itself again with
   LDIST_CPU_ISA=avx2 and =generic where the processor has more, so all
   three are checked here. */
#include "test_util.h"
#include "ld_cpu_internal.h"
#include "ld_half.h"
#include "ld_elementwise_math.h"

#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

static uint32_t bits_of(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float float_of(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* n float32 bit patterns narrowed by the row and by ld_half.h; mismatches counted, the first few printed */
static int narrow_mismatches(ld_dtype dt, const uint32_t *u, int64_t n, int *printed) {
    float *f = malloc((size_t)n * 4);
    uint16_t *h = malloc((size_t)n * 2);
    for (int64_t i = 0; i < n; i++) f[i] = float_of(u[i]);
    ld_cpu_f32_to_half(h, f, dt, n);
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        uint16_t want = dt == LD_F16 ? ld_f32_to_f16(f[i]) : ld_f32_to_bf16(f[i]);
        if (h[i] != want) {
            bad++;
            if ((*printed)++ < 5) printf("#   %s: float32 %08x -> %04x, ld_half.h gives %04x\n", ld_dtype_name(dt), u[i], h[i], want);
        }
    }
    free(f); free(h);
    return bad;
}

static int check_narrow(ld_dtype dt) {
    enum { CHUNK = 1 << 16 };
    static const uint32_t lows[] = {0x0000, 0x0001, 0x0fff, 0x1000, 0x1001, 0x2fff, 0x3000, 0x3001,
                                    0x7fff, 0x8000, 0x8001, 0xbfff, 0xc000, 0xffff};
    uint32_t *u = malloc(sizeof(uint32_t) * CHUNK);
    int bad = 0, printed = 0;
    for (size_t l = 0; l < sizeof lows / sizeof *lows; l++) {   /* every top half, the low bits at the ties */
        for (uint32_t hi = 0; hi < 65536; hi++) u[hi] = hi << 16 | lows[l];
        bad += narrow_mismatches(dt, u, CHUNK, &printed);
    }
    for (uint64_t base = 0; base < ((uint64_t)1 << 32); base += (uint64_t)CHUNK * 4099) {   /* a sweep */
        for (uint32_t i = 0; i < CHUNK; i++) u[i] = (uint32_t)(base + (uint64_t)i * 4099);
        bad += narrow_mismatches(dt, u, CHUNK, &printed);
    }
    /* float16's edges: overflow to inf, the smallest normal, half the smallest subnormal, their neighbours */
    static const uint32_t edges[] = {0x477fefff, 0x477ff000, 0x477ff001, 0x387fffff, 0x38800000, 0x38800001,
                                     0x32ffffff, 0x33000000, 0x33000001, 0x33800000, 0x7f800000, 0x7f800001,
                                     0x7fc00000, 0xffffffff, 0x80000001, 0x00000001};
    bad += narrow_mismatches(dt, edges, sizeof edges / sizeof *edges, &printed);
    free(u);
    return bad;
}

static int check_widen(ld_dtype dt) {
    uint16_t *h = malloc(2 * 65536);
    float *f = malloc(4 * 65536);
    for (int i = 0; i < 65536; i++) h[i] = (uint16_t)i;
    ld_cpu_half_to_f32(f, h, dt, 65536);
    int bad = 0;
    for (int i = 0; i < 65536; i++) {
        float want = dt == LD_F16 ? ld_f16_to_f32(h[i]) : ld_bf16_to_f32(h[i]);
        if (bits_of(f[i]) != bits_of(want) && bad++ < 5)
            printf("#   %s %04x -> %08x, ld_half.h gives %08x\n", ld_dtype_name(dt), h[i], bits_of(f[i]), bits_of(want));
    }
    free(h); free(f);
    return bad;
}

/* rows of every length to 40 at odd offsets: nothing written past the row, every element right */
static int check_tails(ld_dtype dt) {
    int bad = 0;
    for (int n = 0; n <= 40; n++)
        for (int off = 0; off < 3; off++) {
            float src[48], back[48];
            uint16_t h[48];
            for (int i = 0; i < 48; i++) { src[i] = (float)(i * 1.37 - 20.1); h[i] = 0xabcd; back[i] = -7.0f; }
            ld_cpu_f32_to_half(h + off, src + off, dt, n);
            for (int i = 0; i < 48; i++) {
                int in = i >= off && i < off + n;
                uint16_t want = in ? (dt == LD_F16 ? ld_f32_to_f16(src[i]) : ld_f32_to_bf16(src[i])) : 0xabcd;
                if (h[i] != want) bad++;
            }
            ld_cpu_half_to_f32(back + off, h + off, dt, n);
            for (int i = 0; i < 48; i++) {
                int in = i >= off && i < off + n;
                float want = in ? (dt == LD_F16 ? ld_f16_to_f32(h[i]) : ld_bf16_to_f32(h[i])) : -7.0f;
                if (bits_of(back[i]) != bits_of(want)) bad++;
            }
        }
    if (bad) printf("#   %s: %d elements wrong or written past the row\n", ld_dtype_name(dt), bad);
    return bad;
}

/* relu and its gradient on half rows (ld_cpu.c's bitwise path) against the
   float32 formulas (ld_elementwise_math.h) on the widened values, rounded
   as ld_half.h rounds: forward over every pattern; the gradient over every
   x with 40 dy, and every dy with 40 x (zeros, subnormals, normals, infs,
   quiet and signalling NaNs of both signs). Run on this thread in pieces
   below the pool's split, under the flush mode the caller set. */
static uint16_t round_half(ld_dtype dt, float f) { return dt == LD_F16 ? ld_f32_to_f16(f) : ld_f32_to_bf16(f); }
static float widen_half(ld_dtype dt, uint16_t h) { return dt == LD_F16 ? ld_f16_to_f32(h) : ld_bf16_to_f32(h); }
static int check_relu(ld_dtype dt) {
    enum { N = 65536, PIECE = 4096, SPECIAL = 40 };
    const ld_backend *cpu = ld_cpu_backend();
    uint16_t *x = malloc(N * 2), *y = malloc(N * 2), *dy = malloc(N * 2), *sp = malloc(SPECIAL * 2);
    uint16_t inf = dt == LD_F16 ? 0x7c00 : 0x7f80;
    const uint16_t base[] = {0x0000, 0x0001, 0x0003, 0x007f, 0x0080, 0x0081, 0x03ff, 0x0400, 0x3c00, 0x3f80,
                             0x7bff, 0x7f7f, 0x1234, 0x5555};
    int k = 0, bad = 0, printed = 0;
    for (size_t i = 0; i < sizeof base / sizeof *base; i++) { sp[k++] = base[i]; sp[k++] = (uint16_t)(base[i] | 0x8000); }
    sp[k++] = inf; sp[k++] = (uint16_t)(inf | 0x8000);
    sp[k++] = (uint16_t)(inf | 1); sp[k++] = (uint16_t)(inf | 1 | 0x8000);                 /* signalling NaNs */
    sp[k++] = (uint16_t)(inf | (inf >> 1 & ~inf)); sp[k++] = 0xffff;                        /* quiet NaNs */
    while (k < SPECIAL) { sp[k] = (uint16_t)(k * 2654435761u >> 16); k++; }
    for (int i = 0; i < N; i++) x[i] = (uint16_t)i;
    for (int i = 0; i < N; i += PIECE) cpu->unary(NULL, LD_UN_RELU, dt, y + i, x + i, PIECE);
    for (int i = 0; i < N; i++) {
        uint16_t want = round_half(dt, ld_ew_relu(widen_half(dt, x[i])));
        if (y[i] != want && bad++ < 1000 && printed++ < 5)
            printf("#   %s relu(%04x) = %04x, the float32 formula gives %04x\n", ld_dtype_name(dt), x[i], y[i], want);
    }
    for (int pass = 0; pass < 2; pass++)   /* every x against each special dy, every dy against each special x */
        for (int s = 0; s < SPECIAL; s++) {
            for (int i = 0; i < N; i++) {
                x[i] = pass ? sp[s] : (uint16_t)i;
                dy[i] = pass ? (uint16_t)i : sp[s];
            }
            for (int i = 0; i < N; i += PIECE) cpu->unary_backward(NULL, LD_UN_RELU, dt, y + i, dy + i, x + i, x + i, PIECE);
            for (int i = 0; i < N; i++) {
                float g = ld_ew_unary_grad(LD_UN_RELU, widen_half(dt, dy[i]), widen_half(dt, x[i]), widen_half(dt, x[i]));
                uint16_t want = round_half(dt, g);
                if (y[i] != want && bad++ < 1000 && printed++ < 5)
                    printf("#   %s relu'(x %04x) dy %04x = %04x, the float32 formula gives %04x\n", ld_dtype_name(dt), x[i],
                           dy[i], y[i], want);
            }
        }
    free(x); free(y); free(dy); free(sp);
    return bad;
}

int main(int argc, char **argv) {
    (void)argc;
    const char *forced = getenv("LDIST_CPU_ISA");
    static const ld_dtype dts[] = {LD_F16, LD_BF16};
    char name[200];
    for (int flush = 0; flush < 2; flush++) {
#if defined(__x86_64__)
        if (flush) _mm_setcsr(_mm_getcsr() | 0x8040);   /* FTZ and DAZ, as ldist's threads run */
#else
        if (flush) break;
#endif
        for (int k = 0; k < 2; k++) {
            snprintf(name, sizeof name, "%s rows widened and narrowed as ld_half.h, bit for bit (%s path%s)",
                     ld_dtype_name(dts[k]), ld_cpu_isa_name(), flush ? ", FTZ and DAZ set" : "");
            TEST(name) {
                CHECK(check_widen(dts[k]) == 0);
                CHECK(check_narrow(dts[k]) == 0);
                CHECK(check_tails(dts[k]) == 0);
            }
            snprintf(name, sizeof name, "%s relu and its gradient in the halves' bits: the float32 formulas rounded, every pattern%s",
                     ld_dtype_name(dts[k]), flush ? ", FTZ and DAZ set" : "");
            TEST(name) { CHECK(check_relu(dts[k]) == 0); }
        }
    }
    /* the lesser paths, where the processor has more: the same test in processes where LDIST_CPU_ISA says so */
    static const char *const lesser[] = {"avx2", "generic"};
    for (int l = 0; l < 2 && !forced; l++) {
        if (ld_cpu_isa() <= (l == 0 ? LD_ISA_AVX2 : LD_ISA_GENERIC)) continue;
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            setenv("LDIST_CPU_ISA", lesser[l], 1);
            execv("/proc/self/exe", argv);
            _exit(127);
        }
        int st = 0;
        snprintf(name, sizeof name, "the %s path, forced with LDIST_CPU_ISA=%s, passes the same test", lesser[l], lesser[l]);
        TEST(name) { CHECK(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0); }
    }
    return tu_summary();
}
