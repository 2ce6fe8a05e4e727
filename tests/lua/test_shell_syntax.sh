#!/usr/bin/env bash
# tests/lua/test_shell_syntax.sh - every shell script of the repository parses
# (bash -n). The scripts that no test runs whole (`make bench`, `make
# bench-gpu`, the GPU machine's device_check.sh, CI's entry point) are run
# where a test cannot: an apostrophe inside ${var:+...} once left `make bench`
# stopping at its first line with a syntax error, unnoticed by `make test`.
cd "$(dirname "$0")/../.." || exit 1
n=0
while IFS= read -r f; do
  n=$((n + 1))
  if err=$(bash -n "$f" 2>&1); then echo "ok - $f parses"
  else echo "not ok - $f parses"; echo "$err" | sed 's/^/# /'; fi
done < <({ ls .ci/run; find scripts tests -name '*.sh'; } | sort)
# the scripts named above are among them (the list is not empty or cut short)
for f in scripts/bench/run.sh scripts/bench/cores.sh scripts/gpu/bench.sh scripts/gpu/device_check.sh .ci/run; do
  if [ -f "$f" ]; then echo "ok - $f exists and was checked"; else echo "not ok - $f is missing"; fi
done
[ "$n" -ge 20 ] && echo "ok - $n scripts checked" || echo "not ok - only $n scripts found"
