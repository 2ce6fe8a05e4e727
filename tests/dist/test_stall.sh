#!/usr/bin/env bash
# A worker stopped (SIGSTOP) past the heartbeat timeout and continued: each
# worker's error names the one that actually stalled (tests/dist/stall.lua),
# for the leader stopped and for a member stopped.
source "$(dirname "$0")/lib.sh"
for stall in 0 1; do
  mkdir -p "$T/$stall"
  STALL_RANK=$stall STALL_DIR=$T/$stall timeout 120 "$LDIST" launch -n 2 tests/dist/stall.lua > "$T/stall$stall.log" 2>&1 &
  launch=$!
  for _ in $(seq 200); do [ -f "$T/$stall/pid$stall" ] && [ -f "$T/$stall/pid$((1 - stall))" ] && break; sleep 0.1; done
  pid=$(cat "$T/$stall/pid$stall" 2>/dev/null)
  sleep 1
  [ -n "$pid" ] && kill -STOP "$pid"
  sleep 9                       # past the heartbeat timeout (4 s) and the collective's (4 s)
  [ -n "$pid" ] && kill -CONT "$pid"
  wait $launch
  sed -nE "s/^\[([0-9]+)\] (not )?ok - /\2ok - stalled $stall, worker \1: /p; s/^\[([0-9]+)\] (# .*)/\2/p" "$T/stall$stall.log"
  n=$(grep -cE '^\[[01]\] ok - ' "$T/stall$stall.log")
  check "worker $stall stalled: both workers name it" test "$n" = 4
  [ "$n" = 4 ] || show "$T/stall$stall.log"
done
finish
