/* membw.c - memory bandwidth of this machine: every core copies its own
 * 64 MB buffer back and forth with memcpy at once; prints GB/s of bytes
 * copied (each byte is read once and written once). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#define SZ ((size_t)64 << 20)
#define REPS 10
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
typedef struct { char *a, *b; } bufs;
static void *run(void *p) {
    bufs *x = p;
    for (int i = 0; i < REPS; i++) memcpy(i & 1 ? x->a : x->b, i & 1 ? x->b : x->a, SZ);
    return NULL;
}
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 2;
    pthread_t t[64];
    bufs b[64];
    for (int i = 0; i < n; i++) {
        b[i].a = malloc(SZ); b[i].b = malloc(SZ);
        memset(b[i].a, 1, SZ); memset(b[i].b, 2, SZ);
    }
    double t0 = now();
    for (int i = 0; i < n; i++) pthread_create(&t[i], NULL, run, &b[i]);
    for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
    printf("%.2f\n", (double)n * REPS * SZ / (now() - t0) / 1e9);
    return 0;
}
