/*
 * ld_core.h - status codes, error messages and the counting allocator of the
 * ldist engine.
 *
 * Every engine function that can fail on user input returns a status (or NULL)
 * and leaves a message for the calling thread:
 *
 *     ld_tensor *c = ld_matmul(a, b);
 *     if (!c) fprintf(stderr, "%s\n", ld_error());   // "shapes 3x4 and 5x6 do not match"
 *
 * The engine never exits or aborts on bad input; LD_ASSERT is for bugs only.
 * The engine never includes lua.h.
 */
#ifndef LD_CORE_H
#define LD_CORE_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    LD_OK = 0,
    LD_EARG,      /* a bad argument value */
    LD_ESHAPE,    /* shapes do not match */
    LD_ETYPE,     /* a wrong dtype */
    LD_ENOMEM,    /* allocation failed (after one retry) */
    LD_EIO,       /* a file could not be read or written */
    LD_EFORMAT,   /* a file or message is malformed */
    LD_EDEVICE,   /* a device failed or is missing */
    LD_EINTERRUPT,/* the user interrupted a long operation */
    LD_EINTERNAL  /* a bug in ldist */
} ld_status;

/* Message of the last failure on this thread ("" when none). */
const char *ld_error(void);
int ld_error_status(void);
/* Record a failure for this thread; returns `st` so callers can `return ld_fail(...)`. */
ld_status ld_fail(ld_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ld_clear_error(void);

/* Clocks, in seconds: monotonic (intervals, deadlines, trace spans) and the
   wall clock (timestamps a file records, as TensorBoard's wall_time). */
double ld_now(void);
double ld_wall_time(void);

/* Internal invariants: a failure is a bug in ldist, reported and aborted. */
void ld_assert_fail(const char *expr, const char *file, int line);
#define LD_ASSERT(e) ((e) ? (void)0 : ld_assert_fail(#e, __FILE__, __LINE__))

/* ---- memory -------------------------------------------------------------
 * Host memory for tensors goes through one allocator that counts bytes and,
 * when malloc fails, calls a pressure hook once (the Lua bindings run a full
 * garbage collection there) and retries. */
typedef void (*ld_pressure_fn)(void *ud);
void ld_set_pressure_hook(ld_pressure_fn fn, void *ud);
/* Run the pressure hook now (device allocators, before their one retry);
   1 when it ran (it runs only on the thread that set it). */
int ld_memory_pressure(void);
void *ld_host_alloc(size_t nbytes);   /* 64-byte aligned; NULL + ld_error on failure */
void ld_host_free(void *p, size_t nbytes);
size_t ld_host_bytes_in_use(void);
size_t ld_host_bytes_peak(void);
/* A long-running engine loop polls this; the front end sets it on Ctrl-C. */
extern volatile int ld_interrupt_flag;

#define LD_VERSION "0.1.0"

#endif
