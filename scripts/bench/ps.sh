#!/usr/bin/env bash
# scripts/bench/ps.sh - ParameterServerStrategy (issue 8):
#  1. pull and push throughput (MB/s) between the coordinator and one ps task
#     (authenticated control plane, whole float32 tensors), 1-64 MB, best of 3;
#  2. training samples/s (Fashion-MNIST MLP 784-128-10, Adam, batch 128, 1 ps)
#     with 1, 2 and 4 workers (asynchronous: every step is one worker's batch),
#     alternating, medians.
# Alone: bash scripts/bench/ps.sh; LDIST_BENCH_QUICK=1 shortens the training runs.
set -u
cd "$(dirname "$0")/../.." || exit 1
steps=2000; [ "${LDIST_BENCH_QUICK:-0}" = 1 ] && steps=400
echo "== ParameterServerStrategy: pull/push between the coordinator and a ps task (MB/s, best of 3)"
printf '%6s %10s %10s\n' MB pull push
# the 64 MB figures and the training rates also go to build/bench-ps.txt, for run.sh's goals table
out=build/bench-ps.txt
: > "$out"
./ldist scripts/bench/ps_bench.lua pushpull 2>/dev/null | while read -r mb pull push; do
  printf '%6s %10s %10s\n' "$mb" "$pull" "$push"
  [ "$mb" = 64 ] && echo "pushpull $pull $push" >> "$out"
done
# 1, 2 and 4 workers alternate, 5 rounds of 2,000 steps (2 rounds of 400 when quick), and each reports its
# median: the 1 -> 2 workers ratio compares runs that saw the same neighbours
rounds=5; [ "${LDIST_BENCH_QUICK:-0}" = 1 ] && rounds=2
median() { tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2); else print 0 }'; }
declare -A runs
for _ in $(seq "$rounds"); do
  for w in 1 2 4; do
    r=$(./ldist scripts/bench/ps_bench.lua train $w $steps 2>/dev/null | awk '{ print $2 }')
    runs[$w]="${runs[$w]:-} ${r:-0}"
  done
done
echo "== ParameterServerStrategy: training samples/s (Fashion-MNIST MLP, batch 128, 1 ps, $steps steps; $(nproc) cores; median of $rounds alternating rounds)"
printf '%8s %12s   %s\n' workers samples/s runs
for w in 1 2 4; do
  m=$(median <<<"${runs[$w]}")
  printf '%8s %12.0f  %s\n' "$w" "$m" "${runs[$w]}"
  echo "train $w $m" >> "$out"
done
