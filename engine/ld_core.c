/* ld_core.c - errors and the counting host allocator. */
#include "ld_core.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <time.h>

static _Thread_local char err_msg[512];
static _Thread_local ld_status err_status;
volatile int ld_interrupt_flag;

const char *ld_error(void) { return err_msg; }
int ld_error_status(void) { return (int)err_status; }
void ld_clear_error(void) { err_msg[0] = 0; err_status = LD_OK; }

ld_status ld_fail(ld_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_msg, sizeof err_msg, fmt, ap);
    va_end(ap);
    err_status = st;
    return st;
}

void ld_assert_fail(const char *expr, const char *file, int line) {
    fprintf(stderr, "ldist: internal error: %s (%s:%d)\n", expr, file, line);
    abort();
}

/* ---- counting allocator ---- */
static ld_pressure_fn pressure_fn;
static void *pressure_ud;
static pthread_t pressure_thread;   /* the hook only runs on the thread that set it */
static size_t in_use, peak;  /* updated with atomics: several executor threads allocate */

void ld_set_pressure_hook(ld_pressure_fn fn, void *ud) {
    pressure_fn = fn;
    pressure_ud = ud;
    pressure_thread = pthread_self();
}
int ld_memory_pressure(void) {
    if (!pressure_fn || !pthread_equal(pthread_self(), pressure_thread)) return 0;
    pressure_fn(pressure_ud);
    return 1;
}
size_t ld_host_bytes_in_use(void) { return __atomic_load_n(&in_use, __ATOMIC_RELAXED); }
size_t ld_host_bytes_peak(void) { return __atomic_load_n(&peak, __ATOMIC_RELAXED); }

void *ld_host_alloc(size_t nbytes) {
    size_t sz = (nbytes + 63) & ~(size_t)63;
    if (sz == 0) sz = 64;
    void *p = NULL;
    if (posix_memalign(&p, 64, sz) != 0) p = NULL;
    if (!p && pressure_fn && pthread_equal(pthread_self(), pressure_thread)) {
        pressure_fn(pressure_ud);
        if (posix_memalign(&p, 64, sz) != 0) p = NULL;
    }
    if (!p) {
        ld_fail(LD_ENOMEM, "not enough memory: %zu bytes requested, %zu in use by ldist",
                nbytes, ld_host_bytes_in_use());
        return NULL;
    }
    size_t now = __atomic_add_fetch(&in_use, sz, __ATOMIC_RELAXED);
    size_t pk = __atomic_load_n(&peak, __ATOMIC_RELAXED);
    while (now > pk && !__atomic_compare_exchange_n(&peak, &pk, now, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {}
    return p;
}

void ld_host_free(void *p, size_t nbytes) {
    if (!p) return;
    size_t sz = (nbytes + 63) & ~(size_t)63;
    if (sz == 0) sz = 64;
    __atomic_sub_fetch(&in_use, sz, __ATOMIC_RELAXED);
    free(p);
}

double ld_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

double ld_wall_time(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}
