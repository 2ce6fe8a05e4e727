#!/usr/bin/env bash
# tests/lua/test_cuda_emu.sh - the CUDA plugin's own code where there is no
# GPU: tests/cuda_emu/run.sh compiles engine/cuda/*.cu with g++ against a CPU
# emulation of CUDA (blocks of fiber threads, real barriers and warp
# shuffles, poisoned fresh memory, cuBLAS on OpenBLAS) and runs the GPU suite
# on the emulated cuda:0, plus its own self-test and extra cases (also with
# each block's threads in reverse order), and the conformance matrix's GPU
# columns on it. One line here per stage. The
# emulated plugin loads into ./ldist: under a sanitizer tier (LDIST_SANITIZE)
# this is the plain tier's test, not run again.
cd "$(dirname "$0")/../.." || exit 1
if [ -n "${LDIST_SANITIZE:-}" ]; then echo "# the plain tier runs the CUDA emulator (./ldist); not again here"; exit 0; fi
log=build/test-logs/cuda_emu.log; mkdir -p build/test-logs
bash tests/cuda_emu/run.sh >"$log" 2>&1; st=$?
pass=0; fail=0
while IFS= read -r l; do
  if [[ $l =~ ^(cuda_emu:\ )?(.*):\ ([0-9]+)\ passed,\ ([0-9]+)\ failed ]]; then
    name=${BASH_REMATCH[2]} p=${BASH_REMATCH[3]} f=${BASH_REMATCH[4]}
    if [ "$f" = 0 ] && [ "$p" -gt 0 ]; then echo "ok - CUDA emulator: $name ($p passed)"; pass=$((pass + 1))
    else echo "not ok - CUDA emulator: $name ($p passed, $f failed)"; fail=$((fail + 1)); fi
  fi
done < <(grep -E '^(cuda_emu: .*|selftest|tests/[^ ]*): [0-9]+ passed, [0-9]+ failed' "$log")
last=$(tail -1 "$log")
if [ "$st" != 0 ] || ! [[ $last =~ ^([0-9]+)\ passed,\ 0\ failed$ ]] || [ "${BASH_REMATCH[1]}" -lt 40 ]; then
  echo "not ok - tests/cuda_emu/run.sh exited with status $st ($pass stages passed; log: $log)"; tail -15 "$log" | sed 's/^/#   /'
  fail=$((fail + 1))
else
  echo "ok - tests/cuda_emu/run.sh: $(tail -1 "$log")"; pass=$((pass + 1))
fi
grep -E '^cuda_emu: [0-9]+ emulator diagnostic|kernel instantiations' "$log" | sed 's/^/# /'
# the conformance matrix's GPU columns (one_gpu, mirrored_gpus) on the emulated cuda:0 (each column
# in one process: about 90 s of emulated kernels on this machine, 300 s allowed)
clog=build/test-logs/cuda_emu_conformance.log
LDIST_CUDA_PLUGIN=$PWD/build/cuda_emu/ldist_cuda.so LD_LIBRARY_PATH=$PWD/build/cuda_emu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
  CONFORMANCE_STRATEGIES="default one_gpu mirrored_gpus" CONFORMANCE_ONE_PROCESS=1 CONFORMANCE_BUDGET=${CUEMU_CONF_BUDGET:-300} \
  bash tests/dist/test_conformance.sh >"$clog" 2>&1; cst=$?
cl=$(grep -E '^# conformance: [0-9]+ cells ok' "$clog")
if [ "$cst" = 0 ] && grep -qE '^#   one_gpu +[1-9][0-9]* ok +0 FAIL' "$clog" && grep -qE '^#   mirrored_gpus +[1-9][0-9]* ok +0 FAIL' "$clog"; then
  echo "ok - CUDA emulator: the conformance matrix's one_gpu and mirrored_gpus columns (${cl#\# })"; pass=$((pass + 1))
else
  echo "not ok - CUDA emulator: the conformance matrix's GPU columns (status $cst; log: $clog)"
  grep -E '^(not ok|# +(one_gpu|mirrored_gpus))' "$clog" | head -10 | sed 's/^/#   /'; fail=$((fail + 1))
fi
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
