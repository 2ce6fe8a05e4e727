/*
 * ld_executor.h - logical CPU devices with executor threads, and the spans
 * they record for tracing.
 *
 *     ld_cpu_devices(2);                 // cpu:0 (the host) and cpu:1 (an executor thread)
 *     ld_device *d = ld_device_find("cpu:1");
 *     ld_tensor *y = ld_matmul(a_on_d, b_on_d);   // queued; returns at once
 *     ld_tensor_item(y, &v);                      // waits for the queue
 *
 * cpu:0 stays the host device and runs kernels inline on the calling thread
 * (with its share of the cores); cpu:1.. queue them to their own thread.
 */
#ifndef LD_EXECUTOR_H
#define LD_EXECUTOR_H

#include "ld_device.h"

#include <stdint.h>
#include <stdio.h>

#define LD_MAX_LOGICAL 64

/* Grow the CPU to n logical devices (cpu:0 .. cpu:n-1); cores are shared out. */
int ld_cpu_devices(int n);
int ld_cpu_device_count(void);
int ld_device_is_async(const ld_device *d);
/* Switch the host device cpu:0 to queue its kernels to an executor (on) or
   run them inline again (off, after draining). */
int ld_host_async(int on);
/* Wait until every kernel queued on d has run. */
void ld_device_synchronize(ld_device *d);
/* Fences: a position in a device's queue, like a CUDA event. The fence of a
   device is the position after every kernel queued on it so far (0 on a
   synchronous device); waiting for it waits for those kernels only, not for
   what is queued later. */
uint64_t ld_device_fence(ld_device *d);
void ld_device_wait_fence(ld_device *d, uint64_t fence);
/* Queue fn(ctx, d) on d to run once src has run its kernels up to `fence`
   (d's executor waits, recorded as a wait span); on a synchronous d, wait
   and run it now. The order of fences taken by one issuing thread can never
   deadlock: a wait only refers to work queued before it. */
void ld_executor_submit_after(ld_device *d, ld_device *src, uint64_t fence, void (*fn)(void *ctx, ld_device *d),
                              void *ctx);
/* Queue fn(ctx, d) on d's executor (or run it now on the host device).
   Out of memory, the task comes from a small reserve; with that taken too,
   fn does not run and the failure is kept on d (ld_device_take_error). */
void ld_executor_submit(ld_device *d, void (*fn)(void *ctx, ld_device *d), void *ctx, int span_kind);

/* Bad input found by a queued kernel (an out-of-range label): like a CUDA
   device-side error, the first one is kept and reported by the next read
   of tensor memory (ld_tensor_data, a pending read), which fails with it.
   Reporting it drops the errors of everything queued until then, on every
   device (the rest of the failed step would only repeat it). */
void ld_executor_kernel_error(ld_device *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* LD_OK, or the kept error (d's first, else any device's), set with ld_fail
   and cleared. */
int ld_device_take_error(ld_device *d);
/* A kernel of d could not do its work (no BLAS library): set for this
   thread with ld_fail and kept on d (cpu:0 too, while it runs inline), so
   the next read of tensor memory fails with it, whatever was queued since. */
void ld_device_fault(ld_device *d, ld_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* For tests only: the next n allocations of queued tasks fail (as malloc
   out of memory would). */
void ld_executor_fail_allocs(int n);

/* Kernel coverage: the kernels of ld_kernels.h by slot (0 .. ld_kernel_count()-1),
   and how often each was queued to a logical device's executor in this process
   (kernels cpu:0 runs inline are not counted). */
int ld_kernel_count(void);
const char *ld_kernel_name(int k);
uint64_t ld_kernel_calls(int k);
/* The kernel profile: with LDIST_KERNEL_PROFILE=1 in the environment when
   the program starts, every kernel call on every device is timed per slot
   (a GPU synchronized after each, so the time is the kernel's), and a table
   of the slots by total time (calls, total ms, share) goes to stderr at
   exit. Off by default, at no cost. attach: a device that runs its kernels
   at the call (a GPU) joins it when registered (ld_device_register). */
int ld_kernel_profile_on(void);
void ld_kernel_profile_attach(ld_device *d);
void ld_kernel_profile_print(FILE *f);

/* ---- tracing ---- */
/* A span's kind: what the device was doing. COMPUTE is work of no known
   phase; INPUT..OPTIMIZER are the phases of a training step, as the issuing
   thread declared them (ld_trace_phase). */
enum { LD_SPAN_NONE = 0, LD_SPAN_COMPUTE, LD_SPAN_WAIT, LD_SPAN_ALLREDUCE,
       LD_SPAN_INPUT, LD_SPAN_FORWARD, LD_SPAN_BACKWARD, LD_SPAN_OPTIMIZER, LD_SPAN_KINDS };
typedef struct { int kind, step; double start, end; } ld_span;   /* seconds, ld_now(); step 0: none */
/* The phase (LD_SPAN_COMPUTE, LD_SPAN_INPUT..OPTIMIZER, or LD_SPAN_NONE: none) and the step
   number (0: none) of the work this thread issues from now on: kernels it
   queues are recorded under them when they run (instead of COMPUTE), and
   spans recorded while they run carry the step. While cpu:0 runs inline and
   is traced, switching the phase records the time since the last switch on
   cpu:0 under the phase left (the thread ran that phase's kernels itself).
   Each returns the previous value. */
int ld_trace_phase(int kind);
int ld_trace_step(int step);
void ld_trace_enable(ld_device *d, int on);
void ld_executor_record(ld_device *d, int kind, double t0, double t1);
/* The spans recorded since the last take (malloc'ed; free them). */
int ld_trace_take(ld_device *d, ld_span **spans);

#endif
