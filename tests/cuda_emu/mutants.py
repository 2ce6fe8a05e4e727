#!/usr/bin/env python3
"""mutants.py - does the emulator catch the bugs it is meant to catch?

Each mutant is one typical kernel bug (a missing barrier, an index or offset
slip, a bad launch configuration, a wrong half conversion, a missing write,
a wrong cuBLAS argument), applied to a COPY of one engine/cuda/*.cu under
build/cuda_emu/mut/ (the repository's files are never touched). The copy is
converted and compiled, linked with the other objects of build/cuda_emu/obj
into build/cuda_emu/mut/ldist_cuda.so, and tests/ops/test_ops.lua runs
and the tests below run against it on the emulated cuda:0. A mutant is "caught" when a test fails
or the emulator reports a diagnostic. The tests: tests/ops/test_ops.lua (the
suite's op tests), tests/cuda_emu/test_emu_extra.lua and
build/cuda_emu/test_attn_offsets (the emulator's extra tests). Run after tests/cuda_emu/run.sh built
build/cuda_emu:

    python3 tests/cuda_emu/mutants.py [NAME...]
"""
import os
import re
import shutil
import subprocess
import sys
import time

E = "tests/cuda_emu"
O = "build/cuda_emu"
M = O + "/mut"

# name, file, what the bug is, old text, new text (old must occur exactly once)
MUTANTS = [
    ("missing-barrier", "cuda_reduce.cu", "k_reduce_rows: no __syncthreads between the warps' writes to shv and warp 0's reads",
     "            if (lane == 0) shv[wid] = best;\n            __syncthreads();\n",
     "            if (lane == 0) shv[wid] = best;\n"),
    ("war-race", "cuda_attn.cu", "k_flash_fwd: no barrier before a key tile overwrites the last one",
     "            __syncthreads();   /* every thread is done with the last tile */\n", ""),
    ("causal-offset", "cuda_attn.cu", "k_flash_bw_kv: the first query that sees key j0 computed without the offset",
     "int64_t istart = causal ? (j0 - offset > whole ? j0 - offset : whole) : 0;",
     "int64_t istart = causal ? (j0 > whole ? j0 : whole) : 0;"),
    ("launch-config", "cuda_softmax.cu", "cu_softmax: 4x the threads per block (2048 for long rows)",
     "k_softmax<<<grid, row_threads(cols), 0, cd->stream>>>",
     "k_softmax<<<grid, 4 * row_threads(cols), 0, cd->stream>>>"),
    ("half-conversion", "cuda_copy.cu", "cu_conv<cu_bf16>::put rounds to float16 bits",
     "static __device__ cu_bf16 put(double v) { return cu_bf16{ld_f32_to_bf16((float)v)}; }",
     "static __device__ cu_bf16 put(double v) { return cu_bf16{ld_f32_to_f16((float)v)}; }"),
    ("missing-write", "cuda_attn.cu", "k_masked_softmax_bw: the masked columns are not written",
     "for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) dr[j] = j < lim ?",
     "for (int64_t j = threadIdx.x; j < lim; j += blockDim.x) dr[j] = j < lim ?"),
    ("cublas-ld", "cuda_gemm.cu", "cu_gemm: lda and ldb swapped in the cuBLAS call",
     "(int)m, (int)k, &alpha, b, (int)ldb, a, (int)lda, &beta, c, (int)ldc);",
     "(int)m, (int)k, &alpha, b, (int)lda, a, (int)ldb, &beta, c, (int)ldc);"),
    ("grid-stride", "cuda_elementwise.cu", "k_unary: one element per thread, no grid-stride loop (wrong past 65536 blocks)",
     "    CU_LOOP(i, n) y[i] = cu_put<T>(ld_ew_unary((ld_unary_op)op, cu_get(x[i])));",
     "    { int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = cu_put<T>(ld_ew_unary((ld_unary_op)op, cu_get(x[i]))); }"),
    ("shuffle-lanes", "cuda_reduce.cu", "k_reduce_rows: warp 0's final reduction done by lanes < nw only (full mask, exited lanes)",
     "            if (wid == 0) {\n                best = lane < nw ? shv[lane] : vi{-INFINITY, INT64_MAX};",
     "            if (wid == 0 && lane < nw) {\n                best = lane < nw ? shv[lane] : vi{-INFINITY, INT64_MAX};"),
]


def run(cmd, env=None, timeout=None):
    return subprocess.run(cmd, shell=True, env=env, capture_output=True, text=True, timeout=timeout)


def main():
    names = sys.argv[1:]
    if not os.path.exists(O + "/ldist_cuda.so"):
        sys.exit("mutants.py: build/cuda_emu is not built: bash tests/cuda_emu/run.sh first")
    cxxflags = ("-O2 -march=native -ffp-contract=fast -g -std=gnu++17 -fPIC -fvisibility=hidden -w "
                "-include %s/cuda_emu.h -I%s/include -Iengine -Iengine/cuda" % (E, E))
    caught = 0
    todo = [m for m in MUTANTS if not names or m[0] in names]
    for name, fname, what, old, new in todo:
        t0 = time.time()
        d = "%s/%s" % (M, name)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d + "/cu")
        text = open("engine/cuda/" + fname, encoding="utf-8").read()
        if text.count(old) != 1:
            print("%-16s the text to mutate occurs %d times in %s: mutant out of date" % (name, text.count(old), fname))
            continue
        open("%s/cu/%s" % (d, fname), "w", encoding="utf-8").write(text.replace(old, new))
        r = run("python3 %s/convert.py %s/src %s/cu/%s" % (E, d, d, fname))
        if r.returncode:
            print("%-16s convert.py failed: %s" % (name, r.stdout + r.stderr))
            continue
        obj = "%s/%s.o" % (d, fname[:-3])
        r = run("g++ %s -c %s/src/%s.cpp -o %s" % (cxxflags, d, fname[:-3], obj))
        if r.returncode:
            print("%-16s does not compile: %s" % (name, r.stderr[-400:]))
            continue
        objs = [obj] + [o for o in sorted(os.listdir(O + "/obj"))
                        if o.endswith(".o") and o != fname[:-3] + ".o" and o != "selftest.o"]
        objs = [obj] + ["%s/obj/%s" % (O, o) for o in objs[1:]]
        so = d + "/ldist_cuda.so"
        r = run("g++ -shared -fPIC -o %s %s -Wl,-T,%s/shared.ld -Wl,-z,defs -ldl -lpthread" % (so, " ".join(objs), E))
        if r.returncode:
            print("%-16s does not link: %s" % (name, r.stderr[-400:]))
            continue
        env = dict(os.environ, LDIST_CUDA_PLUGIN=os.path.abspath(so),
                   LD_LIBRARY_PATH=os.path.abspath(O + "/lib"), LDIST_GPU_TEST_DEVICE="cuda:0",
                   CUEMU_LOG=os.path.abspath(d + "/diagnostics.log"))
        env.pop("CUEMU_STRICT", None)
        out = ""
        for cmd in ("./ldist tests/ops/test_ops.lua", "./ldist %s/test_emu_extra.lua" % E, "%s/test_attn_offsets" % O):
            try:
                r = run("timeout 300 " + cmd, env=env, timeout=320)
                out += r.stdout + r.stderr
            except subprocess.TimeoutExpired:
                out += "not ok - %s timed out\n" % cmd
        open(d + "/test_ops.log", "w").write(out)
        fails = [l for l in out.splitlines() if l.startswith("not ok")]
        firsterr = [l for l in out.splitlines() if l.startswith("# ") and ("error" in l or "NaN" in l or "failed" in l)]
        diags = open(d + "/diagnostics.log").read().splitlines() if os.path.exists(d + "/diagnostics.log") else []
        ok = bool(fails or diags)
        caught += ok
        print("%-16s %s (%s): %s, %d failed tests, %d emulator diagnostics (%.0f s)" % (
            name, fname, what, "CAUGHT" if ok else "MISSED", len(fails), len(diags), time.time() - t0))
        for l in fails[:2]:
            print("                   " + l[:220])
        for l in (diags[:1] + firsterr[:1]):
            print("                   " + l[:220])
    print("mutants.py: %d of %d mutants caught" % (caught, len(todo)))
    return 0 if caught == len(todo) else 1


if __name__ == "__main__":
    sys.exit(main())
