#!/usr/bin/env python3
"""tests/cuda_emu/trace_report.py - what one training step asks of a GPU.

    trace_report.py SHORT LONG STEPS [--max-malloc N] [--max-d2h N] [--max-sync N]

SHORT and LONG are CUEMU_TRACE files (tests/cuda_emu/cuemu_runtime.cpp) of
the same run but for STEPS more training steps in LONG (e.g. 1 and 3 steps
after the same warm-up). Their difference, divided by STEPS, is one steady
step: kernel launches (per kernel and call site, with the grid and block),
cuBLAS products (type, shape, FLOPs), copies each way, memsets,
allocations and synchronizations. Prints it and exits 1 when a step
allocates device memory, copies to the host or synchronizes more often than
the limits say (each check prints "ok - ..." or "not ok - ...").

Under CUEMU_SAMPLE=1 only the first block of each launch runs, so a trace of
the full-size model takes seconds; the results are meaningless then, the
launches are not.
"""
import argparse
import collections
import sys


def read(path):
    c = collections.Counter()
    for line in open(path):
        p = line.rstrip("\n").split("\t")
        if p[0] == "launch":   # launch kernel site grid block shmem us
            c[("launch", p[1], p[2], p[3], p[4])] += 1
        elif p[0] == "malloc":   # sizes differ between runs: count them
            c[("malloc",)] += 1
        else:
            c[tuple(p)] += 1
    return c


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("short")
    ap.add_argument("long")
    ap.add_argument("steps", type=int)
    ap.add_argument("--max-malloc", type=float, default=None)
    ap.add_argument("--max-d2h", type=float, default=None)
    ap.add_argument("--max-sync", type=float, default=None)
    ap.add_argument("--label", default="step")
    a = ap.parse_args()
    s, l = read(a.short), read(a.long)
    d = {k: (l[k] - s.get(k, 0)) / a.steps for k in set(l) | set(s)}
    d = {k: v for k, v in d.items() if v}
    per = collections.Counter()
    flops = 0.0
    for k, v in d.items():
        per[k[0]] += v
        if k[0] == "gemm":
            m, n, kk, b = map(int, k[3:7])
            flops += v * 2.0 * m * n * kk * b
    d2h = sum(v for k, v in d.items() if k[0] == "memcpy" and k[1] == "device to host")
    h2d = sum(v for k, v in d.items() if k[0] == "memcpy" and k[1] == "host to device")
    print("%s: %g kernel launches, %g cuBLAS products (%.3g GFLOP), %g copies to the device, %g to the host, "
          "%g memsets, %g allocations, %g synchronizations" %
          (a.label, per["launch"], per["gemm"], flops / 1e9, h2d, d2h, per["memset"], per["malloc"], per["sync"]))
    kern = collections.Counter()
    for k, v in d.items():
        if k[0] == "launch":
            kern["%s (%s) grid %s block %s" % (k[1], k[2], k[3], k[4])] += v
    for name, v in kern.most_common(12):
        print("  %6g x %s" % (v, name))
    for k, v in sorted(((k, v) for k, v in d.items() if k[0] == "gemm"), key=lambda kv: -kv[1]):
        print("  %6g x gemm %s %s m %s n %s k %s batch %s" % ((v,) + k[1:]))
    bad = 0
    for what, got, lim in (("device allocations", per["malloc"], a.max_malloc),
                           ("copies to the host", d2h, a.max_d2h),
                           ("synchronizations", per["sync"], a.max_sync)):
        if lim is None:
            continue
        ok = got <= lim
        bad += not ok
        print("%s - %s: %g %s per steady step (at most %g)" % ("ok" if ok else "not ok", a.label, got, what, lim))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
