#!/usr/bin/env bash
# scripts/bench/images.sh - data.image_dataset_from_directory against Keras's
# keras.utils.image_dataset_from_directory on the same folder of 10,000
# Fashion-MNIST PNGs (28x28 gray, written once into build/bench-images/ by
# ldist), batch 32, alternating rounds (5; 2 with LDIST_BENCH_QUICK=1),
# medians. Issue: at least as fast as Keras, and a CNN trains from them.
set -u
cd "$(dirname "$0")/../.." || exit 1
py=build/bench-venv/bin/python
dir=build/bench-images
n=10000
rounds=5; [ "${LDIST_BENCH_QUICK:-0}" = 1 ] && rounds=2
if [ "$(find "$dir" -name '*.png' 2>/dev/null | wc -l)" != "$n" ]; then
  rm -rf "$dir"; ./ldist scripts/bench/image_bench.lua write "$dir" "$n" || exit 1
fi
l1=""; l2=""; k1=""; k2=""
for ((i = 0; i < rounds; i++)); do
  read -r a b < <(./ldist scripts/bench/image_bench.lua read "$dir" 2>/dev/null | tail -1); l1+="$a "; l2+="$b "
  read -r a b < <($py scripts/bench/image_ref.py "$dir" 2>/dev/null | tail -1); k1+="$a "; k2+="$b "
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2); else print 0 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
ml1=$(median <<<"$l1"); ml2=$(median <<<"$l2"); mk1=$(median <<<"$k1"); mk2=$(median <<<"$k2")
echo "image_dataset_from_directory: $n PNGs 28x28 gray, batch 32, $(nproc) cores (images/s, median of $rounds)"
printf '%-28s %12s %12s %10s\n' pass ldist keras ratio
printf '%-28s %12s %12s %9sx\n' "first (call + one epoch)" "$ml1" "$mk1" "$(ratio "$ml1" "$mk1")"
printf '%-28s %12s %12s %9sx\n' "second epoch" "$ml2" "$mk2" "$(ratio "$ml2" "$mk2")"
echo "(runs: ldist $l1| keras $k1| ldist 2nd $l2| keras 2nd $k2)"
./ldist scripts/bench/image_bench.lua train "$dir" 2>/dev/null | tail -1
