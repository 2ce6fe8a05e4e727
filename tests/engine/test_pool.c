/* test_pool.c - the CPU thread pools (ld_pool.c): every part of every
 * run runs exactly once, with any number of parts, whether the waiters spin
 * or sleep (futex), and devices' pools run at the same time without mixing
 * their runs. The pool hands parts over through per-worker slots and counts
 * them down with atomics, so a lost wake-up would hang the test (run.sh's
 * timeout) and a part run twice or never shows in the counts. */
#include "test_util.h"
#include "ld_device.h"
#include "ld_executor.h"
#include "ld_pool.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

enum { SLOTS = 64, RUNS = 3000 };

typedef struct { int count[SLOTS]; int nparts_seen; } job;

static void part(void *ctx, int p, int np) {
    job *j = ctx;
    __atomic_add_fetch(&j->count[p], 1, __ATOMIC_RELAXED);
    int prev = __atomic_exchange_n(&j->nparts_seen, np, __ATOMIC_RELAXED);
    if (prev && prev != np) __atomic_store_n(&j->nparts_seen, -1, __ATOMIC_RELAXED);
}

/* RUNS runs of 1..8 wanted parts on the calling thread's pool; 0 when every
   part ran once per run and each run saw one part count */
static int runs(int threads, int seed) {
    int bad = 0;
    for (int r = 0; r < RUNS; r++) {
        job j = {{0}, 0};
        int want = 1 + (r * 7 + seed) % 8;
        ld_cpu_parallel(part, &j, want);
        int np = j.nparts_seen, expect = want < threads ? want : threads;
        if (np != expect) bad++;
        for (int p = 0; p < SLOTS; p++) if (j.count[p] != (p < np ? 1 : 0)) bad++;
    }
    return bad;
}

/* a part that starts a run of its own: that one runs serially, in the part */
static job inner[SLOTS];
static void outer_part(void *ctx, int p, int np) {
    part(ctx, p, np);
    ld_cpu_parallel(part, &inner[p], 8);
}

typedef struct { int dev, threads, bad; } dev_run;
static void *on_device(void *arg) {
    dev_run *d = arg;
    ld_cpu_pool_bind(d->dev);   /* as an executor thread does */
    d->bad = runs(d->threads, d->dev);
    return NULL;
}

int main(int argc, char **argv) {
    /* 12 pretended cores, so that each of 3 devices gets a pool of 4 threads */
    if (!getenv("LDIST_CPU_CORES")) {
        setenv("LDIST_CPU_CORES", "12", 1);
        unsetenv("LDIST_NUM_THREADS");
        execv("/proc/self/exe", argv);
    }
    (void)argc;
    TEST("every part of every run runs once: waiters spinning, then yielding, then sleeping") {
        ld_cpu_set_threads(4);
        CHECK(runs(4, 0) == 0);
        ld_cpu_pool_set_spin(0, 0);   /* always through the futex */
        CHECK(runs(4, 1) == 0);
        ld_cpu_pool_set_spin(0, 8);   /* yields only */
        CHECK(runs(4, 2) == 0);
        ld_cpu_pool_set_spin(2000, 64);
    }
    TEST("a run started from a part runs serially, in that part") {
        ld_cpu_set_threads(3);
        job j = {{0}, 0};
        ld_cpu_parallel(outer_part, &j, 8);
        CHECK(j.nparts_seen == 3);
        for (int p = 0; p < 3; p++) CHECK(inner[p].nparts_seen == 1 && inner[p].count[0] == 1 && inner[p].count[1] == 0);
        CHECK(ld_cpu_threads() == 3);
    }
    TEST("three devices' pools run at once, each with its own share of threads") {
        CHECK(ld_cpu_split(3) == LD_OK);
        pthread_t t[2];
        dev_run d[3] = {{0, 0, 0}, {1, 0, 0}, {2, 0, 0}};
        for (int i = 0; i < 3; i++) {
            d[i].threads = ld_cpu_device_threads(i);
            CHECK(d[i].threads == 4);
        }
        for (int i = 1; i < 3; i++) pthread_create(&t[i - 1], NULL, on_device, &d[i]);
        d[0].bad = runs(d[0].threads, 0);
        for (int i = 1; i < 3; i++) pthread_join(t[i - 1], NULL);
        for (int i = 0; i < 3; i++) CHECK(d[i].bad == 0);
    }
    return tu_summary();
}
