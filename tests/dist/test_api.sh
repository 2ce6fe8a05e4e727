#!/usr/bin/env bash
# The strategy's API across 2 processes (sharding policies, run/reduce,
# replica context, mismatched collectives): tests/dist/api.lua on each worker.
source "$(dirname "$0")/lib.sh"
timeout 120 "$LDIST" launch -n 2 tests/dist/api.lua > "$T/api.log" 2>&1
st=$?
sed -nE 's/^\[([0-9]+)\] (not )?ok - /\2ok - worker \1: /p; s/^\[([0-9]+)\] (# .*)/\2/p' "$T/api.log"
check "both workers ran every check" test "$(grep -cE '^\[[01]\] ok - ' "$T/api.log")" = 26
check "ldist launch succeeds when every worker does" test $st = 0
[ $st = 0 ] || show "$T/api.log"
finish
