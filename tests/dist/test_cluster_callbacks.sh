#!/usr/bin/env bash
# Callbacks that change training (LearningRateScheduler, ReduceLROnPlateau,
# ModelCheckpoint, TerminateOnNaN) run on a LocalCluster's workers and give
# one device's numbers: tests/dist/cluster_callbacks.lua.
source "$(dirname "$0")/lib.sh"
timeout 180 "$LDIST" tests/dist/cluster_callbacks.lua "$T/ck" > "$T/cb.log" 2>&1
st=$?
grep -E '^(not )?ok - ' "$T/cb.log"
failures=$((failures + $(grep -c '^not ok - ' "$T/cb.log")))
check "all 7 checks ran" test "$(grep -cE '^(not )?ok - ' "$T/cb.log")" = 7
check "the script exits 0" test $st = 0
[ $st = 0 ] || show "$T/cb.log"
sleep 0.2
pids=$(sed -n 's/^# worker pids: //p' "$T/cb.log")
alive() { for p in $pids; do kill -0 "$p" 2>/dev/null && echo "$p"; done; }
check "no worker left behind (pids ${pids:-?})" test -n "$pids" -a -z "$(alive)"
finish
