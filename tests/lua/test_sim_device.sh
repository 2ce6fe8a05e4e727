#!/usr/bin/env bash
# tests/lua/test_sim_device.sh - `make test-gpu` where there is no GPU, on
# sim:0 (LDIST_SIM_DEVICE=1): the CPU's kernels on a device the engine treats
# as a GPU's, whose memory the host may not read or write. The logical CPU
# device cpu:1 (tests/lua/test_ops_device.sh) is host memory, so an op that
# hands a kernel a host pointer of a device tensor (ld_tensor_data) passes
# there and fails only on a GPU; on sim:0 it fails here. Runs tests/ops and
# tests/gpu (tests/gpu/run.sh) on sim:0, and the ldist scripts of
# `make bench-gpu` (training rows, the transformer, large products) a few
# steps each in float32 and bfloat16, and the collector's pacing for device
# memory (tests/lua/sim_device_gc.lua), and the all-reduce inside a step
# refusing a replica on sim:0 (tests/lua/sim_step_reduce.lua). LDIST_BIN:
# the binary under test.
cd "$(dirname "$0")/../.." || exit 1
bin=${LDIST_BIN:-./ldist}
export LDIST_SIM_DEVICE=1
pass=0; fail=0
ok() { echo "ok - $1"; pass=$((pass + 1)); }
not_ok() { echo "not ok - $1"; fail=$((fail + 1)); }
out=$(LDIST="$bin" LDIST_GPU_TEST_DEVICE=sim:0 bash tests/gpu/run.sh 2>&1); st=$?
echo "$out" | grep -E '^(not ok|tests/)' | sed 's/^/# /'
last=$(tail -n 1 <<<"$out")
if [ "$st" = 0 ] && [[ $last =~ ^([0-9]+)\ passed,\ 0\ failed$ ]] && [ "${BASH_REMATCH[1]}" -gt 40 ]; then
  ok "tests/gpu/run.sh on sim:0 ($last)"
else not_ok "tests/gpu/run.sh on sim:0 ($last, status $st)"; fi
rate_ok() {  # NAME OUTPUT: the last line starts with a positive rate, and any loss after it is finite
  local l; l=$(tail -n 1 <<<"$2")
  if awk '{ exit !($1 + 0 > 0 && (NF == 1 || ($2 == $2 + 0 && $2 !~ /nan|inf/))) }' <<<"$l"; then ok "$1 ($l)"
  else not_ok "$1"; sed 's/^/#   /' <<<"$2" | tail -n 8; fi
}
for policy in float32 mixed_bfloat16; do
  for model in mlp cnn resnet; do
    rate_ok "train_bench $model under $policy on sim:0" \
      "$(LDIST_BENCH_POLICY=$policy timeout 120 "$bin" scripts/gpu/train_bench.lua $model 32 2 2 sim:0 2>&1)"
  done
  rate_ok "transformer_bench (d_model 32, 2 blocks, context 16) under $policy on sim:0" \
    "$(LDIST_BENCH_POLICY=$policy timeout 120 "$bin" scripts/gpu/transformer_bench.lua 2 2 2 sim:0 32 2 2 16 2>&1)"
done
for dt in float32 bfloat16 float16; do
  rate_ok "gemm_bench 128^3 $dt on sim:0" "$(timeout 60 "$bin" scripts/gpu/gemm_bench.lua 128 2 sim:0 $dt 2>&1)"
done
out=$(timeout 60 "$bin" scripts/gpu/sanitize_attention.lua sim:0 2>&1); st=$?
if [ "$st" = 0 ] && [ "$(grep -c 'largest difference from the unfused CPU path' <<<"$out")" = 4 ]; then
  ok "sanitize_attention (the fused kernels, float32 and bfloat16) on sim:0"
else not_ok "sanitize_attention on sim:0 (status $st)"; sed 's/^/#   /' <<<"$out" | tail -n 6; fi
# the device refuses host access as a GPU does
out=$(timeout 30 "$bin" -e 'local t = tensor.ones(3):to("sim:0"); print((t + 1):sum():item(), t.device)' 2>&1)
if [ "$out" = "$(printf '6.0\tsim:0')" ] || [ "$out" = "$(printf '6\tsim:0')" ]; then ok "sim:0 computes, and reads back through copies ($out)"
else not_ok "sim:0 computes, and reads back through copies"; sed 's/^/#   /' <<<"$out" | tail -n 4; fi
# the collector's pacing for a GPU's memory (lua_bindings/tensor.c): its own TAP lines
out=$(timeout 120 "$bin" tests/lua/sim_device_gc.lua 2>&1); st=$?
echo "$out" | grep -E '^(ok|not ok|#)'
pass=$((pass + $(grep -c '^ok - ' <<<"$out"))); fail=$((fail + $(grep -c '^not ok - ' <<<"$out")))
if [ "$st" != 0 ] && ! grep -q '^not ok - ' <<<"$out"; then not_ok "tests/lua/sim_device_gc.lua exited with status $st"; fi
# an all-reduce inside the step with a replica on sim:0: a clear error, the session goes on
out=$(timeout 120 "$bin" tests/lua/sim_step_reduce.lua 2>&1); st=$?
echo "$out" | grep -E '^(ok|not ok|#)'
pass=$((pass + $(grep -c '^ok - ' <<<"$out"))); fail=$((fail + $(grep -c '^not ok - ' <<<"$out")))
if [ "$st" != 0 ] && ! grep -q '^not ok - ' <<<"$out"; then not_ok "tests/lua/sim_step_reduce.lua exited with status $st"; fi
# again on a sim:0 of 160 MB, below the pace: an allocation retried after a collection, then the pace adapts
out=$(LDIST_SIM_MEMORY=160M timeout 120 "$bin" tests/lua/sim_device_gc.lua 2>&1); st=$?
echo "$out" | grep -E '^(ok|not ok|#)'
pass=$((pass + $(grep -c '^ok - ' <<<"$out"))); fail=$((fail + $(grep -c '^not ok - ' <<<"$out")))
if [ "$st" != 0 ] && ! grep -q '^not ok - ' <<<"$out"; then not_ok "sim_device_gc.lua (LDIST_SIM_MEMORY=160M) exited with status $st"; fi
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
