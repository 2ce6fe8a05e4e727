#!/usr/bin/env bash
# tests/lua/test_gpu_bench_scripts.sh - the ldist half of `make bench-gpu`
# (scripts/gpu/train_bench.lua, transformer_bench.lua) and device_check's
# scripts/gpu/sanitize_attention.lua on the logical CPU
# device cpu:1, a few steps each, float32 and mixed_bfloat16: a script broken
# here would otherwise be found only on a lent GPU machine, whose minutes are
# few. Each must print "rate loss" with a positive rate and a finite loss;
# a model name the script does not know is an error naming it. Timings are
# not checked (scripts/gpu/bench.sh, BENCH_GPU_DEVICE=cpu:1, prints them).
cd "$(dirname "$0")/../.." || exit 1
bin=${LDIST_BIN:-./ldist}
pass=0; fail=0
ok() { echo "ok - $1"; pass=$((pass + 1)); }
not_ok() { echo "not ok - $1"; fail=$((fail + 1)); }
line_ok() {  # NAME OUTPUT: the last line is "rate loss", rate > 0, loss finite
  local last; last=$(tail -n 1 <<<"$2")
  if awk '{ exit !(NF == 2 && $1 + 0 > 0 && $2 == $2 + 0 && $2 !~ /nan|inf/) }' <<<"$last"; then ok "$1 ($last)"
  else not_ok "$1"; sed 's/^/#   /' <<<"$2" | tail -n 8; fi
}
for policy in float32 mixed_bfloat16; do
  for model in mlp cnn resnet; do
    out=$(LDIST_BENCH_POLICY=$policy timeout 120 "$bin" scripts/gpu/train_bench.lua $model 32 2 2 cpu:1 2>&1)
    line_ok "train_bench $model under $policy on cpu:1" "$out"
  done
  out=$(LDIST_BENCH_POLICY=$policy timeout 120 "$bin" scripts/gpu/transformer_bench.lua 2 2 2 cpu:1 32 2 2 16 2>&1)
  line_ok "transformer_bench (d_model 32, 2 blocks, context 16) under $policy on cpu:1" "$out"
done
out=$(timeout 60 "$bin" scripts/gpu/sanitize_attention.lua cpu:1 2>&1); st=$?
if [ "$st" = 0 ] && [ "$(grep -c 'largest difference from the unfused CPU path' <<<"$out")" = 4 ]; then
  ok "sanitize_attention (device_check's fused attention cases) on cpu:1"
else not_ok "sanitize_attention on cpu:1 (status $st)"; sed 's/^/#   /' <<<"$out" | tail -n 6; fi
out=$(timeout 60 "$bin" scripts/gpu/train_bench.lua lenet 32 2 2 cpu:1 2>&1)
if grep -q "MODEL is mlp, cnn or resnet, not lenet" <<<"$out"; then ok "an unknown model is an error naming it"
else not_ok "an unknown model is an error naming it"; sed 's/^/#   /' <<<"$out" | tail -n 4; fi
out=$(LDIST_BENCH_POLICY=mixed_bfloat61 timeout 60 "$bin" scripts/gpu/train_bench.lua mlp 32 2 2 cpu:1 2>&1)
if grep -q "mixed_bfloat61" <<<"$out" && ! awk 'END { exit !(NF == 2 && $1 + 0 > 0) }' <<<"$out"; then
  ok "a misspelt LDIST_BENCH_POLICY is an error naming it"
else not_ok "a misspelt LDIST_BENCH_POLICY is an error naming it"; sed 's/^/#   /' <<<"$out" | tail -n 4; fi
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
