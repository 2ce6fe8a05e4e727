#!/usr/bin/env bash
# tests/lua/test_cuda_emu.sh - the CUDA plugin's own code where there is no
# GPU: tests/cuda_emu/run.sh compiles engine/cuda/*.cu with g++ against a CPU
# emulation of CUDA (blocks of fiber threads, real barriers and warp
# shuffles, poisoned fresh memory, cuBLAS on OpenBLAS) and runs the GPU suite
# on the emulated cuda:0, plus its own self-test and extra cases (also with
# each block's threads in reverse order). One line here per stage. The
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
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
