#!/usr/bin/env bash
# tests/gpu/run.sh - `make test-gpu`: the op suite tests/ops/test_ops.lua and
# every tests/gpu/test_*.lua on the GPU,
# each against the CPU result; ends with "N passed, N failed". Where no GPU
# answers it prints one line saying why and exits 0.
#   LDIST=path/to/ldist                 the binary (default ./ldist; the GPU bundle sets it)
#   LDIST_GPU_TEST_DEVICE=cpu:1         run the same scripts on a logical CPU device
#                                       (how they are checked on a machine without a GPU)
cd "$(dirname "$0")/../.." || exit 1
ldist=${LDIST:-./ldist}
dev=${LDIST_GPU_TEST_DEVICE:-cuda:0}
[ -x "$ldist" ] || { echo "gpu tests: $ldist is not built (make, or scripts/gpu/bundle.sh)"; exit 1; }

if [[ $dev == cuda:* ]]; then
  if ! "$ldist" -e "for _, d in ipairs(tensor.devices()) do if d == '$dev' then os.exit(0) end end os.exit(1)" 2>/dev/null; then
    echo "gpu tests skipped: no GPU answers ($("$ldist" -e 'io.write(tensor.device_note())' 2>&1 | head -c 300))"
    exit 0
  fi
  "$ldist" -e 'print("# " .. tensor.device_note())'
fi

log=build/test-logs/gpu; mkdir -p "$log"
pass=0; fail=0
t_start=$SECONDS
for t in tests/ops/test_*.lua tests/gpu/test_*.lua; do
  out="$log/$(basename "$t" .lua).log"
  t0=$SECONDS
  timeout 240 "$ldist" "$t" >"$out" 2>&1; st=$?
  p=$(grep -c '^ok - ' "$out"); f=$(grep -c '^not ok - ' "$out")
  if [ "$st" != 0 ] && [ "$f" = 0 ]; then
    f=1; echo "not ok - $t exited with status $st$( [ $st = 124 ] && echo ' (timed out)')"; tail -5 "$out"
  fi
  grep -E '^(not ok|#)' "$out" | head -60
  echo "$t: $p passed, $f failed ($((SECONDS - t0)) s)"
  pass=$((pass + p)); fail=$((fail + f))
done
echo "gpu tests on $dev took $((SECONDS - t_start)) s"
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
