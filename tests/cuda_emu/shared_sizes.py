#!/usr/bin/env python3
"""shared_sizes.py - the static shared memory of each kernel of the emulated
plugin (tests/cuda_emu): the __shared__ arrays are function-local statics
that shared.ld gathers into the section cuemu_shared, so their sizes are in
the symbol table (demangled "kernel<args>(params)::name"). Prints the largest
kernels and exits 1 if one needs more than the 48 KiB a block may declare
statically (a GPU refuses to launch it).

usage: shared_sizes.py build/cuda_emu/ldist_cuda.so
"""
import subprocess
import sys

LIMIT = 48 << 10


def main():
    so = sys.argv[1]
    out = subprocess.run(["nm", "-S", "-C", so], capture_output=True, text=True, check=True).stdout
    syms = {}
    for line in out.splitlines():
        parts = line.split(None, 3)
        if len(parts) == 3 and parts[2] in ("cuemu_shared_begin", "cuemu_shared_end"):
            syms[parts[2]] = int(parts[0], 16)
    lo, hi = syms.get("cuemu_shared_begin"), syms.get("cuemu_shared_end")
    if lo is None or hi is None:
        sys.exit("shared_sizes.py: no cuemu_shared section in " + so)
    per = {}
    for line in out.splitlines():
        parts = line.split(None, 3)
        if len(parts) != 4 or "::" not in parts[3]:
            continue
        try:
            addr, size = int(parts[0], 16), int(parts[1], 16)
        except ValueError:
            continue
        if not lo <= addr < hi:
            continue
        func = parts[3].rsplit("::", 1)[0]
        kernel = func.split("(")[0]
        per[kernel] = per.get(kernel, 0) + size
    worst = sorted(per.items(), key=lambda kv: -kv[1])
    over = [kv for kv in worst if kv[1] > LIMIT]
    print("shared_sizes.py: %d kernels with shared memory; the largest: %s" % (
        len(per), ", ".join("%s %d B" % kv for kv in worst[:4])))
    for k, v in over:
        print("shared_sizes.py: %s declares %d bytes of shared memory, over the 48 KiB limit" % (k, v))
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
