#!/usr/bin/env bash
# An all-reduce of tensors of equal size but different shapes across 2
# processes is an error on both (tests/dist/shapes.lua).
source "$(dirname "$0")/lib.sh"
timeout 120 "$LDIST" launch -n 2 tests/dist/shapes.lua > "$T/shapes.log" 2>&1
sed -nE 's/^\[([0-9]+)\] (not )?ok - /\2ok - worker \1: /p; s/^\[([0-9]+)\] (# .*)/\2/p' "$T/shapes.log"
check "both workers ran both checks" test "$(grep -cE '^\[[01]\] ok - ' "$T/shapes.log")" = 4
[ "$(grep -cE '^\[[01]\] ok - ' "$T/shapes.log")" = 4 ] || show "$T/shapes.log"
finish
