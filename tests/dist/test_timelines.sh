#!/usr/bin/env bash
# Timelines that teach (issue 18): the timeline of a 2-replica Mirrored fit,
# of a 2-process MultiWorker fit (`ldist launch -n 2`, and a LocalCluster) and
# of a 2-worker ParameterServer run (and the comparison of a synchronous and
# an asynchronous run), each rendered to PNG with rsvg-convert; the SVG must
# hold axis ticks with units, step numbers, a legend and the wait annotations,
# and the PNG must be a real picture. The PNGs are kept in build/timelines/.
source "$(dirname "$0")/lib.sh"
OUT=build/timelines
mkdir -p "$OUT"
rm -f "$OUT"/*.svg "$OUT"/*.png "$OUT"/*.txt
if ! command -v rsvg-convert > /dev/null; then
  echo "not ok - rsvg-convert is installed (package librsvg2-bin; scripts/setup.sh installs it)"
  finish
fi
run() {  # run NAME TIMEOUT ARGS...: its TAP lines, and the log when it fails
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > "$T/$name.log" 2>&1
  local st=$?
  sed -nE 's/^(\[[0-9]+\] )?((not )?ok - .*)/\2/p' "$T/$name.log"
  failures=$((failures + $(grep -c 'not ok - ' "$T/$name.log")))
  check "$name exits 0 ($((SECONDS - t0)) s)" test $st = 0
  [ $st = 0 ] || show "$T/$name.log"
}
run mirrored 60 "$LDIST" tests/dist/timelines.lua mirrored "$OUT"
run mw 60 "$LDIST" launch -n 2 tests/dist/timelines.lua mw "$OUT"
run lc 60 "$LDIST" tests/dist/timelines.lua lc "$OUT"
run ps 90 "$LDIST" tests/dist/timelines.lua ps "$OUT"

# png_ok FILE: a PNG of at least 20 kB and 600x150 pixels (its IHDR header)
png_ok() {
  [ -s "$1" ] && [ "$(stat -c %s "$1")" -gt 20000 ] || return 1
  [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || return 1
  local b; read -r -a b <<< "$(od -An -tu1 -j16 -N8 "$1")"
  local w=$(( (b[0] << 24) + (b[1] << 16) + (b[2] << 8) + b[3] )) h=$(( (b[4] << 24) + (b[5] << 16) + (b[6] << 8) + b[7] ))
  note "$1: ${w}x${h}, $(stat -c %s "$1") bytes"
  [ "$w" -ge 600 ] && [ "$h" -ge 150 ]
}
# count PATTERN FILE: lines of the SVG matching it (one element a line)
count() { grep -cE "$1" "$2"; }
ticks_ok() {  # at least 3 axis ticks, in ms or us or s, the first at 0
  [ "$(count 'class="tick"[^>]*>[0-9.]+ (ms|us|s)<' "$1")" -ge 3 ] && grep -qE 'class="tick"[^>]*>0(\.0+)? (ms|us|s)<' "$1"
}
for name in mirrored mirrored_zoom mw lc ps compare; do
  svg=$OUT/$name.svg
  if [ ! -s "$svg" ]; then not_ok "$name: the timeline was saved"; continue; fi
  check "$name: rsvg-convert renders it" rsvg-convert "$svg" -o "$OUT/$name.png"
  check "$name: the PNG is a real picture" png_ok "$OUT/$name.png"
  check "$name: axis ticks with units" ticks_ok "$svg"
  check "$name: step numbers" test "$(count 'class="step-label"' "$svg")" -ge 3
  check "$name: a title" grep -qE '<text x="10" y="22"[^>]*>(Mirrored|MultiWorkerMirrored|ParameterServer)Strategy' "$svg"
done
for name in mirrored mirrored_zoom mw lc compare; do   # synchronous: phases and who waits for whom
  svg=$OUT/$name.svg
  check "$name: a legend of the phases" eval "grep -q 'class=\"legend\".*>forward<' $svg && grep -q 'class=\"legend\".*>backward<' $svg && grep -q 'class=\"legend\".*>all-reduce<' $svg && grep -q 'class=\"legend\".*>wait<' $svg"
  check "$name: the waits are annotated" grep -qE 'class="annotation"[^>]*>1\. (replica|worker) [0-9] waits [0-9.]+ (us|ms|s) for (replica|worker) [0-9]' "$svg"
done
check "mirrored: the input phase is in the legend" grep -q 'class="legend".*>input pipeline<' "$OUT/mirrored.svg"
check "ps: a legend of pull, forward, push, apply" eval "grep -q '>pull weights<' $OUT/ps.svg && grep -q '>push gradients<' $OUT/ps.svg && grep -q '>apply pushed gradients<' $OUT/ps.svg"
check "ps: the idle waits are annotated" grep -qE 'class="annotation"[^>]*>1\. worker [0-9] waits [0-9.]+ (us|ms|s) \(idle' "$OUT/ps.svg"
check "ps: the pushes' staleness is in their hover titles" grep -qE 'staleness [0-9]+ \(updates by others' "$OUT/ps.svg"
check "compare: both runs on one picture, each with its time axis" test "$(grep -c 'time since the first span' "$OUT/compare.svg")" = 2
note "pictures: $OUT/*.png"
finish
