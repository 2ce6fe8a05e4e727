#!/usr/bin/env bash
# tests/run.sh [tier...] - run the test tiers (engine, lua, repl, kernel, dist)
# and end with one line "N passed, N failed". Each test program prints TAP-like
# "ok - name" / "not ok - name" lines; a program that dies without saying
# "not ok" counts as one failure. pytest tiers are counted from pytest's summary.
cd "$(dirname "$0")/.." || exit 1
tiers=("$@"); ((${#tiers[@]})) || tiers=(engine lua repl kernel dist)
pass=0; fail=0
log=build/test-logs; mkdir -p "$log"

count() {   # count NAME STATUS LOGFILE
  local p f
  p=$(grep -c '^ok - ' "$3"); f=$(grep -c '^not ok - ' "$3")
  if [ "$2" != 0 ] && [ "$f" = 0 ]; then f=1; echo "not ok - $1 exited with status $2"; fi
  pass=$((pass + p)); fail=$((fail + f))
  grep -E '^(not ok|#)' "$3" | head -40
  echo "$1: $p passed, $f failed"
}

run_prog() {  # run_prog NAME CMD...
  local name=$1; shift
  local out="$log/$(echo "$name" | tr '/ ' '__').log"
  timeout 900 "$@" >"$out" 2>&1; local st=$?
  count "$name" "$st" "$out"
}

run_pytest() {  # run_pytest DIR
  local dir=$1 out="$log/pytest_$(basename "$1").log"
  ls "$dir"/test_*.py >/dev/null 2>&1 || return 0
  timeout 1800 python3 -m pytest -q -p no:cacheprovider "$dir" >"$out" 2>&1; local st=$?
  local summary p f e
  summary=$(tail -n 1 "$out")
  p=$(grep -oE '[0-9]+ passed' <<<"$summary" | grep -oE '[0-9]+' || echo 0)
  f=$(grep -oE '[0-9]+ failed' <<<"$summary" | grep -oE '[0-9]+' || echo 0)
  e=$(grep -oE '[0-9]+ errors?' <<<"$summary" | grep -oE '[0-9]+' || echo 0)
  f=$((f + e))
  if [ "$st" != 0 ] && [ "$f" = 0 ]; then f=1; fi
  [ "$f" = 0 ] || grep -E '^(FAILED|ERROR)|Error' "$out" | head -40
  pass=$((pass + p)); fail=$((fail + f))
  echo "$dir: $p passed, $f failed"
}

for tier in "${tiers[@]}"; do
  case $tier in
    engine)
      for t in build/tests/engine/*; do [ -x "$t" ] && run_prog "engine/$(basename "$t")" "$t"; done ;;
    lua)
      for t in tests/lua/test_*.lua; do [ -f "$t" ] && run_prog "$t" ./ldist "$t"; done
      for t in tests/lua/test_*.sh; do [ -f "$t" ] && run_prog "$t" bash "$t"; done ;;
    repl|kernel|dist)
      for t in tests/$tier/test_*.sh; do [ -f "$t" ] && run_prog "$t" bash "$t"; done
      run_pytest "tests/$tier" ;;
  esac
done
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
