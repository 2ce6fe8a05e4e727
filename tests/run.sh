#!/usr/bin/env bash
# tests/run.sh [tier...] - run the test tiers (engine, lua, repl, kernel, dist)
# and end with one line "N passed, N failed". Each test program prints TAP-like
# "ok - name" / "not ok - name" lines; a program that dies without saying
# "not ok" counts as one failure. pytest tiers are counted from pytest's summary.
#
# Another build can be tested (make test SANITIZE=address|thread does this):
#   LDIST_BUILD=build-asan   the build folder: engine tests, logs (default build)
#   LDIST_BIN, LDIST_SO      the ldist program and module (default ./ldist and
#                            ./ldist.so for build/, else LDIST_BUILD/ldist[.so])
#   LDIST_SANITIZE=address|thread   the build is sanitized: set ASAN_OPTIONS,
#     UBSAN_OPTIONS or TSAN_OPTIONS (tests/tsan.supp), send every report of
#     every process (workers too) to a file, and count a program that left a
#     report as failed (ASAN_OPTIONS... given by the caller replace the
#     defaults below); LDIST_PRELOAD names the runtime a stock lua5.4 must
#     preload to open the sanitized ldist.so (tests/lua/test_prelude_protocol.sh);
#     LDIST_TEST_TIME_SCALE stretches the tests' time bounds (tu_time_scale(),
#     T.time_scale), as sanitized code runs several times slower.
cd "$(dirname "$0")/.." || exit 1
tiers=("$@"); ((${#tiers[@]})) || tiers=(engine lua repl kernel dist)
pass=0; fail=0
export LDIST_BUILD=${LDIST_BUILD:-build}
# absolute: some tests start ldist from another directory
if [ "$LDIST_BUILD" = build ]; then dflt=$PWD; else dflt=$PWD/$LDIST_BUILD; fi
export LDIST_BIN=${LDIST_BIN:-$dflt/ldist} LDIST_SO=${LDIST_SO:-$dflt/ldist.so}
log=$LDIST_BUILD/test-logs; mkdir -p "$log"
san=${LDIST_SANITIZE:-}
case $san in
  "") ;;
  address)
    export LDIST_PRELOAD=${LDIST_PRELOAD:-$(${CC:-gcc} -print-file-name=libasan.so)}
    # allocator_may_return_null: a huge request fails as it does in production
    # (tests ask for terabytes on purpose); leaks are not checked (yet)
    asan_opts="detect_leaks=0:allocator_may_return_null=1:abort_on_error=0:print_summary=1"
    ubsan_opts="print_stacktrace=1:halt_on_error=1" ;;
  thread)
    # A stock lua5.4 opens a TSan ldist.so only with libtsan preloaded, and then
    # every shell it starts crashes (dash under libtsan: SIGSEGV), so the
    # prelude audit (one Lua thread, io.popen) reads the plain ./ldist.so.
    [ "$LDIST_SO" = "$dflt/ldist.so" ] && LDIST_SO=$PWD/ldist.so
    # halt_on_error=0: every race of a run is reported; the run then exits 66
    tsan_opts="suppressions=$PWD/tests/tsan.supp:halt_on_error=0:second_deadlock_stack=1:allocator_may_return_null=1" ;;
  *) echo "LDIST_SANITIZE is address or thread, not '$san'"; exit 2 ;;
esac
# sanitized builds run several times slower: the tests' time bounds stretch
case $san in
  address) export LDIST_TEST_TIME_SCALE=${LDIST_TEST_TIME_SCALE:-4} ;;
  thread) export LDIST_TEST_TIME_SCALE=${LDIST_TEST_TIME_SCALE:-15} ;;
esac
san_re='runtime error:|ERROR: AddressSanitizer|ERROR: LeakSanitizer|WARNING: ThreadSanitizer|ThreadSanitizer: reported'
[ -n "$san" ] && echo "# testing $LDIST_BIN, $LDIST_SO and $LDIST_BUILD/ under ${san} sanitizer"

count() {   # count NAME STATUS LOGFILE [SANITIZER-REPORT-PREFIX]
  local p f r
  p=$(grep -c '^ok - ' "$3"); f=$(grep -c '^not ok - ' "$3")
  if [ "$2" != 0 ] && [ "$f" = 0 ]; then f=1; echo "not ok - $1 exited with status $2"; fi
  if [ -n "$4" ]; then
    # sanitizer reports of this program and of the processes it started: in
    # files (log_path; ASan and TSan) or on stderr (UBSan ignores log_path)
    local found=0
    for r in "$4".* "$3"; do
      [ -f "$r" ] && grep -qE "$san_re" "$r" || continue
      found=1
      echo "# ---- sanitizer report in $r"
      awk -v re="$san_re" '$0 ~ re { print; n = 8; next } n > 0 && /^ +#[0-9]+ / { print; n--; next } { n = 0 }' "$r" |
        head -60 | sed 's/^/# /'
    done
    if [ "$found" = 1 ] && [ "$f" = 0 ]; then f=1; echo "not ok - $1 left a sanitizer report"; fi
  fi
  pass=$((pass + p)); fail=$((fail + f))
  grep -E '^(not ok|#)' "$3" | head -40
  echo "$1: $p passed, $f failed"
}

run_prog() {  # run_prog NAME CMD...
  local name=$1; shift
  local out="$log/$(echo "$name" | tr '/ ' '__').log"
  if [ -z "$san" ]; then
    timeout 900 "$@" >"$out" 2>&1; local st=$?
    count "$name" "$st" "$out"
    return
  fi
  local rep="$log/san/$(echo "$name" | tr '/ ' '__')"
  mkdir -p "$log/san"; rm -f "$rep".*
  ASAN_OPTIONS="${ASAN_OPTIONS:-$asan_opts}:log_path=$rep" \
  UBSAN_OPTIONS="${UBSAN_OPTIONS:-$ubsan_opts}:log_path=$rep" \
  TSAN_OPTIONS="${TSAN_OPTIONS:-$tsan_opts}:log_path=$rep" \
    timeout 900 "$@" >"$out" 2>&1; local st=$?
  count "$name" "$st" "$out" "$rep"
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
      for t in "$LDIST_BUILD"/tests/engine/*; do [ -x "$t" ] && run_prog "engine/$(basename "$t")" "$t"; done ;;
    lua)
      for t in tests/lua/test_*.lua; do [ -f "$t" ] && run_prog "$t" "$LDIST_BIN" "$t"; done
      for t in tests/lua/test_*.sh; do [ -f "$t" ] && run_prog "$t" bash "$t"; done ;;
    repl|kernel|dist)
      for t in tests/$tier/test_*.sh; do [ -f "$t" ] && run_prog "$t" bash "$t"; done
      run_pytest "tests/$tier" ;;
  esac
done
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
