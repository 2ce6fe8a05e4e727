#!/usr/bin/env bash
# Acceptance 2: kill -9 of one of 3 workers mid-epoch: the other two report it
# (naming the worker) within the collective timeout and exit non-zero, and
# `ldist launch` fails; launching again with BackupAndRestore resumes at the
# saved epoch and step and ends with the weights of an uninterrupted run.
# Also: a hung worker (SIGSTOP) is caught by the heartbeats.
source "$(dirname "$0")/lib.sh"
TIMEOUT=10

# the uninterrupted run, for reference
timeout 120 "$LDIST" launch -n 3 tests/dist/backup.lua "$T/refck" "$T/ref" > "$T/ref.log" 2>&1
check "an uninterrupted run of 3 workers completes" test -f "$T/ref.2.safetensors"

# wait_for FILE REGEX [SECONDS]: until a line of FILE matches
wait_for() {
  local i
  for ((i = 0; i < ${3:-60} * 20; i++)); do grep -qE "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done
  return 1
}
now() { date +%s.%N; }

# ---- kill -9 mid-epoch
log=$T/crash.log
( timeout 120 "$LDIST" launch -n 3 --timeout $TIMEOUT tests/dist/backup.lua "$T/ck" "$T/crash" 0.05 > "$log" 2>&1
  echo "launcher exit $?" >> "$log" ) &
launcher=$!
if wait_for "$log" '^\[1\] at epoch 2 step 8$' 60; then
  pid=$(sed -n 's/^\[1\] worker 1 pid \([0-9]*\)$/\1/p' "$log")
  t0=$(now)
  kill -9 "$pid"
  wait $launcher
  t1=$(now)
  elapsed=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
  note "after kill -9 of worker 1 (pid $pid), ldist launch ended in $elapsed s"
  check "ldist launch exits non-zero when a worker is killed" grep -qE '^launcher exit [1-9]' "$log"
  for r in 0 2; do
    check "worker $r reports worker 1 lost, naming it and how it died (ldist launch's note)" \
      grep -qE "^\[$r\] ldist: fit stopped: worker 1 \(pid $pid\) was killed by signal 9 \(Killed\), during step" "$log"
  done
  # the survivors told it: the launcher adds no line of its own
  check "the launcher prints no second report" bash -c "! grep -q '^ldist launch:' '$log'"
  check "within the timeout ($elapsed s < $TIMEOUT s)" le "$elapsed" $TIMEOUT
  # the ring's shared-memory links were unlinked once mapped: a killed rank leaks none
  check "no shared-memory segment is left in /dev/shm after kill -9" sh -c '! ls /dev/shm | grep -q "^ldist-"'
else
  not_ok "the run reached epoch 2 step 8 to be killed"; show "$log"
  kill $launcher 2>/dev/null; wait
fi

# ---- what the last checkpoint holds
read -r epoch step iters < <(timeout 30 "$LDIST" -e "
  local _, m = ldist.io.load_safetensors('$T/ck/checkpoint.safetensors')
  print(m.epoch, m.step, m.iterations)" 2>/dev/null)
note "checkpoint: $epoch epoch(s) done, $step step(s) into the next, $iters optimizer steps"
check "the checkpoint was saved mid-epoch 2 (epoch 1 done, 0 < step < 20)" \
  awk -v e="$epoch" -v s="$step" 'BEGIN { exit !(e == 1 && s > 0 && s < 20) }'
check "the checkpoint's optimizer step count is 20 x epochs + steps" test "$iters" = "$((epoch * 20 + step))"
cp -r "$T/ck" "$T/ckcopy"

# ---- relaunch: resumes there, ends like the uninterrupted run
timeout 120 "$LDIST" launch -n 3 tests/dist/backup.lua "$T/ck" "$T/resumed" > "$T/resumed.log" 2>&1
check "the relaunch succeeds" grep -q '^\[0\] worker 0 done' "$T/resumed.log"
check "it resumes at the saved epoch and step" \
  grep -qF "BackupAndRestore: resuming from $T/ck/checkpoint.safetensors at epoch $((epoch + 1)), step $step" "$T/resumed.log"
check "the resumed run trains the remaining epochs only" \
  test "$(grep -c 'done: 2 epoch(s) run here' "$T/resumed.log")" = 3
first=$(grep -m1 '^\[0\] at epoch' "$T/resumed.log")
check "its first step is the one after the checkpoint ($first)" \
  test "$first" = "[0] at epoch $((epoch + 1)) step 1"
for r in 0 1 2; do
  d=$(maxdiff "$T/ref.$r.safetensors" "$T/resumed.$r.safetensors")
  check "worker $r: the final weights equal the uninterrupted run's (max |dw| = $d)" le "$d" 1e-6
done
check "the completed run deleted its checkpoint" test ! -e "$T/ck/checkpoint.safetensors"
timeout 120 "$LDIST" launch -n 3 tests/dist/backup.lua "$T/ckcopy" "$T/again" > "$T/again.log" 2>&1
d=$(maxdiff "$T/resumed.0.safetensors" "$T/again.0.safetensors")
check "a second run from the same checkpoint ends with the same weights (max |dw| = $d)" le "$d" 0

# ---- a hung worker: no heartbeat
log=$T/hang.log
( TEST_TIMEOUT=4 timeout 120 "$LDIST" launch -n 3 --grace 1 tests/dist/backup.lua "$T/ck2" "$T/hang" 0.05 > "$log" 2>&1
  echo "launcher exit $?" >> "$log" ) &
launcher=$!
if wait_for "$log" '^\[2\] at epoch 1 step 5$' 60; then
  pid=$(sed -n 's/^\[2\] worker 2 pid \([0-9]*\)$/\1/p' "$log")
  t0=$(now)
  kill -STOP "$pid"
  wait_for "$log" '^\[0\] .*worker 2 .*no heartbeat' 30
  t1=$(now)
  elapsed=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
  check "a stopped worker is reported lost by the heartbeats ($elapsed s, timeout 4 s)" le "$elapsed" 6
  kill -CONT "$pid" 2>/dev/null
  wait $launcher
  check "and the run fails" grep -qE '^launcher exit [1-9]' "$log"
else
  not_ok "the run reached step 5 to stop a worker"; show "$log"
  kill $launcher 2>/dev/null; wait
fi
finish
