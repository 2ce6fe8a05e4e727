/* sgemm.c - this machine's OpenBLAS sgemm rate for the MLP's shapes, two ways:
 * one call using every core, and one single-threaded call per core on a
 * slice of the rows (what ldist's CPU device does). Prints the best GFLOP/s. */
#include <cblas.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
typedef struct { int m, n, k, reps; float *a, *b, *c; } job;
static void *run(void *p) {
    job *j = p;
    for (int r = 0; r < j->reps; r++)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, j->m, j->n, j->k, 1, j->a, j->k, j->b, j->n, 0, j->c, j->n);
    return NULL;
}
int main(int argc, char **argv) {
    int m = 256, n = 512, k = 784, reps = 200, cores = 2;
    if (argc > 1) cores = atoi(argv[1]);
    float *a = malloc(sizeof(float) * m * k), *b = malloc(sizeof(float) * k * n), *c = malloc(sizeof(float) * m * n * 2);
    for (int i = 0; i < m * k; i++) a[i] = (float)rand() / RAND_MAX;
    for (int i = 0; i < k * n; i++) b[i] = (float)rand() / RAND_MAX;
    double flops = 2.0 * m * n * k * reps;
    openblas_set_num_threads(cores);
    job j = {m, n, k, 10, a, b, c};
    run(&j);
    j.reps = reps;
    double t0 = now(); run(&j); double one = flops / (now() - t0) / 1e9;
    openblas_set_num_threads(1);
    pthread_t th[64];
    job js[64];
    t0 = now();
    for (int i = 0; i < cores; i++) {
        js[i] = (job){m / cores, n, k, reps, a + (size_t)i * (m / cores) * k, b, c + (size_t)i * (m / cores) * n};
        pthread_create(&th[i], NULL, run, &js[i]);
    }
    for (int i = 0; i < cores; i++) pthread_join(th[i], NULL);
    double split = flops / (now() - t0) / 1e9;
    printf("sgemm %dx%dx%d: one call on %d threads %.1f GFLOP/s, %d single-threaded calls %.1f GFLOP/s\n",
           m, k, n, cores, one, cores, split);
    printf("%.1f\n", one > split ? one : split);
    return 0;
}
