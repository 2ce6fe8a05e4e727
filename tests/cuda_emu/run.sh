#!/usr/bin/env bash
# tests/cuda_emu/run.sh - the CUDA plugin's sources (engine/cuda/*.cu, as they
# are) compiled by g++ against a CPU emulation of CUDA, then the GPU test
# suite (tests/gpu/run.sh) against that plugin: the plugin's logic (indexing,
# launch configurations, barriers, shuffles, half conversions, cuBLAS
# arguments) checked on a machine without a GPU. tests/cuda_emu/README.md
# says how it works. Ends with the suite's own "N passed, N failed"; exits
# non-zero on a build failure, a self-test failure or a failed test.
#
#   bash tests/cuda_emu/run.sh   build; the emulator's self-test; the extra tests
#                                (test_emu_extra.lua, test_attn_offsets.c); the op
#                                tests and the extra ones with each block's threads in
#                                reverse order (races); the GPU suite, forward order
#   CUEMU_EXTRA=0                skip the extra tests
#   CUEMU_RACE=0                 skip the reverse-order pass
#   CUEMU_ORDER=reverse|random   run the suite in that order (and skip the pass)
#   CUEMU_STRICT=1               abort at the first emulator diagnostic
# Outputs: build/cuda_emu/ (the plugin, fake libraries, diagnostics.log,
# kernel-stats.tsv: launches, blocks, threads and seconds per kernel).
# The suite itself writes its logs to build/test-logs/gpu/ as it always does.
set -o pipefail
cd "$(dirname "$0")/../.." || exit 1
E=tests/cuda_emu
O=build/cuda_emu
t0=$SECONDS

# ---- the ldist binary
if [ ! -x ./ldist ] || [ ! -f build/libldist_engine.a ]; then
  echo "cuda_emu: ./ldist or build/libldist_engine.a is missing: make -j2 all"
  make -j2 all || { echo "cuda_emu: building ldist failed"; exit 1; }
fi

# ---- convert and build
mkdir -p "$O/src" "$O/obj" "$O/lib"
if grep -n '<<<' engine/cuda/*.cuh; then
  echo "cuda_emu: a kernel launch in a header: convert.py converts only the .cu files"; exit 1
fi
echo "cuda_emu: converting the kernel launches (convert.py)"
python3 "$E/convert.py" "$O/src" engine/cuda/*.cu || { echo "cuda_emu: conversion failed"; exit 1; }
python3 "$E/convert.py" "$O/src" "$E/selftest.cu" >/dev/null || { echo "cuda_emu: conversion of selftest.cu failed"; exit 1; }
echo "cuda_emu: building (g++, make -f $E/emu.mk)"
tb=$SECONDS
make --no-print-directory -f "$E/emu.mk" -j2 >"$O/build.log" 2>&1
st=$?
grep -E "error|warning" "$O/build.log" | head -40
if [ $st != 0 ]; then tail -30 "$O/build.log"; echo "cuda_emu: build failed (log: $O/build.log)"; exit 1; fi
echo "cuda_emu: built in $((SECONDS - tb)) s"
# the real CUDA headers must not have been used (only tests/cuda_emu/include's stand-ins)
if cat "$O"/obj/*.d | tr ' \\' '\n\n' | grep -E '^(/usr/local/cuda|/usr/local/include|/usr/include/(cuda|cublas|nccl))'; then
  echo "cuda_emu: a real CUDA header was included (above)"; exit 1
fi

# the static shared memory of every kernel within the 48 KiB a GPU allows
python3 "$E/shared_sizes.py" "$O/ldist_cuda.so" || { echo "cuda_emu: a kernel declares too much shared memory"; exit 1; }

# ---- the emulator's own tests
"$O/selftest" 2>"$O/selftest.err" | tee "$O/selftest.log" || {
  cat "$O/selftest.err"; echo "cuda_emu: the emulator's self-test failed"; exit 1; }

# ---- the suite against the emulated plugin
export LDIST_CUDA_PLUGIN=$PWD/$O/ldist_cuda.so
export LD_LIBRARY_PATH=$PWD/$O/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export LDIST_GPU_TEST_DEVICE=cuda:0
export CUEMU_LOG=$PWD/$O/diagnostics.log CUEMU_STATS=$PWD/$O/kernel-stats.tsv
: >"$CUEMU_LOG"
: >"$CUEMU_STATS"
./ldist -e 'io.write("cuda_emu: tensor.devices(): ", table.concat(tensor.devices(), " "), "\n")'
found=$(./ldist -e "for _, d in ipairs(tensor.devices()) do if d == 'cuda:0' then io.write('yes') end end")
if [ "$found" != yes ]; then
  echo "cuda_emu: the emulated plugin did not register cuda:0: $(./ldist -e 'io.write(tensor.device_note())')"
  exit 1
fi
# one test program: its "not ok" and "#" lines, then a count; 1 when something failed
extra_st=0
run_test() {   # label log command...
  local label=$1 log=$2 t1=$SECONDS st p f
  shift 2
  timeout 600 "$@" >"$log" 2>&1; st=$?
  grep -E '^(not ok|#)' "$log" | grep -v '^# kernel calls are counted' | head -40
  p=$(grep -c '^ok - ' "$log"); f=$(grep -c '^not ok - ' "$log")
  if [ "$st" != 0 ] && [ "$f" = 0 ]; then f=1; tail -5 "$log"; fi
  echo "cuda_emu: $label: $p passed, $f failed ($((SECONDS - t1)) s)"
  [ "$f" = 0 ] || extra_st=1
}

# ---- harder shapes than the suite's, for the kernels it reaches with small
# ones, and the causal offsets only C reaches (CUEMU_EXTRA=0 skips)
if [ "${CUEMU_EXTRA:-1}" != 0 ]; then
  run_test "extra tests ($E/test_emu_extra.lua)" "$O/extra.log" ./ldist "$E/test_emu_extra.lua"
  run_test "extra tests ($E/test_attn_offsets.c)" "$O/attn_offsets.log" "$O/test_attn_offsets"
fi
# ---- races the forward order hides (a thread overwriting shared memory that
# a later thread has yet to read): the op tests again with every block's
# threads run in reverse order between barriers (CUEMU_RACE=0 skips; not
# when CUEMU_ORDER is set: the suite below then runs in that order)
if [ "${CUEMU_RACE:-1}" != 0 ] && [ -z "${CUEMU_ORDER:-}" ]; then
  CUEMU_ORDER=reverse run_test "reverse order: tests/ops/test_ops.lua" "$O/reverse_ops.log" ./ldist tests/ops/test_ops.lua
  if [ "${CUEMU_EXTRA:-1}" != 0 ]; then
    CUEMU_ORDER=reverse run_test "reverse order: $E/test_emu_extra.lua" "$O/reverse_extra.log" ./ldist "$E/test_emu_extra.lua"
    CUEMU_ORDER=reverse run_test "reverse order: $E/test_attn_offsets.c" "$O/reverse_offsets.log" "$O/test_attn_offsets"
  fi
fi

# ---- what a steady training step asks of the GPU, at the bench's full sizes
# (CUEMU_SAMPLE=none: no kernel runs and no product is computed, so the results
# are meaningless, but every launch is made and its configuration checked): no device allocation, one copy to the host (the loss the
# step's callback reads, copied behind the backward pass and waited for after the optimizer's kernels are queued)
# and one synchronization, that read (three under mixed_float16: the check for infs before the update; a batch
# copied from pageable memory counts as one, as CUDA syncs the stream before such a copy), for the
# rows of `make bench-gpu` (trace_report.py; CUEMU_EXTRA=0 skips)
if [ "${CUEMU_EXTRA:-1}" != 0 ]; then
  ttrace() {   # label max-sync command... : traces of 1 and 3 steps after 8 warm-up steps (the data pipeline's prefetched batches and the allocator's cache settle by then), compared
    local label=$1 maxs=$2; shift 2
    rm -f "$O/trace-1.tsv" "$O/trace-3.tsv"
    if CUEMU_TRACE=$PWD/$O/trace-1.tsv CUEMU_SAMPLE=none "$@" 1 8 cuda:0 >/dev/null 2>>"$O/traces.err" &&
      CUEMU_TRACE=$PWD/$O/trace-3.tsv CUEMU_SAMPLE=none "$@" 3 8 cuda:0 >/dev/null 2>>"$O/traces.err"; then
      python3 "$E/trace_report.py" "$O/trace-1.tsv" "$O/trace-3.tsv" 2 --label "$label" \
        --max-malloc 0 --max-d2h "${TRACE_MAX_D2H:-1}" --max-sync "$maxs"
    else
      echo "not ok - $label: the traced runs failed ($O/traces.err)"
    fi
  }
  : >"$O/traces.err"
  tt1=$SECONDS
  {
    ttrace "MLP step (batch 512)" 1 ./ldist scripts/gpu/train_bench.lua mlp 512
    ttrace "CNN step (batch 512)" 1 ./ldist scripts/gpu/train_bench.lua cnn 512
    # with a metric: the predictions' copy to the host too, and three synchronizations (as before the labels
    # were given back); the labels, read one step late, go back to the cache then (0.5 cudaMalloc a step before)
    TRACE_MAX_D2H=2 ttrace "MLP step with accuracy" 3 env LDIST_BENCH_METRICS=accuracy ./ldist scripts/gpu/train_bench.lua mlp 512
    ttrace "transformer step, float32" 1 ./ldist scripts/gpu/transformer_bench.lua 32
    ttrace "transformer step, mixed_bfloat16" 1 env LDIST_BENCH_POLICY=mixed_bfloat16 ./ldist scripts/gpu/transformer_bench.lua 32
    # the LossScaleOptimizer's check for infs: one copy of all the gradients' counts, not one per gradient
    TRACE_MAX_D2H=2 ttrace "transformer step, mixed_float16" 3 env LDIST_BENCH_POLICY=mixed_float16 ./ldist scripts/gpu/transformer_bench.lua 32
  } >"$O/traces.log" 2>&1
  grep -vE '^(ok|not ok) - ' "$O/traces.log" | grep -E '^[A-Za-z]'
  grep -E '^not ok - ' "$O/traces.log"
  tp=$(grep -c '^ok - ' "$O/traces.log"); tf=$(grep -c '^not ok - ' "$O/traces.log")
  echo "cuda_emu: steady training steps at full size ($O/traces.log): $tp passed, $tf failed ($((SECONDS - tt1)) s)"
  [ "$tf" = 0 ] && [ "$tp" = 18 ] || extra_st=1
fi

echo "cuda_emu: running the GPU suite on the emulated cuda:0 (order: ${CUEMU_ORDER:-forward})"
ts=$SECONDS
# every line but the last as it comes; the last ("N passed, N failed") after the summary
bash tests/gpu/run.sh 2>&1 | tee "$O/suite.log" | sed '$d'
suite_st=${PIPESTATUS[0]}

# ---- summary: what the emulator reported, which kernels ran
nd=$(grep -c '^cuda_emu: ' "$CUEMU_LOG")
echo "cuda_emu: suite took $((SECONDS - ts)) s, all in all $((SECONDS - t0)) s"
echo "cuda_emu: $nd emulator diagnostic(s) during the tests ($O/diagnostics.log)"
sed 's/^/  /' "$CUEMU_LOG" | sort | uniq -c | sort -rn | head -20
if [ -s "$CUEMU_STATS" ]; then
  awk -F'\t' '{ l[$1] += $2; t[$1] += $4; s[$1] += $5 } END {
      for (k in l) { n++; tl += l[k]; tt += t[k]; ts += s[k] }
      printf "cuda_emu: %d kernel instantiations launched, %d launches, %d threads, %.1f s in kernels (%s)\n",
             n, tl, tt, ts, ENVIRON["CUEMU_STATS"] }' "$CUEMU_STATS"
fi
[ "$extra_st" = 0 ] || echo "cuda_emu: the extra or reverse-order tests failed (above; logs in $O/)"
tail -1 "$O/suite.log"
[ "$suite_st" = 0 ] && [ "$extra_st" = 0 ]
