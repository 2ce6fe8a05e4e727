#!/usr/bin/env bash
# A worker dies (SIGKILL) during model:fit (issue 31 item 4): under
# MultiWorkerMirroredStrategy on a LocalCluster and under `ldist launch`, and
# under ParameterServerStrategy. One message names the worker as the others
# do (worker i, its pid, the signal, the step and epoch), with no second name
# for the process ("process 2"), no "ldist cluster:" lines and no stack
# trace; model.history keeps the epochs done and, on a LocalCluster, the
# model the chief's weights at the last one's end (worker_lost.lua checks
# inside); the message points to BackupAndRestore.
source "$(dirname "$0")/lib.sh"
tap() { sed -nE 's/^(\[[0-9]+\] )?((not )?ok - .*)/\2/p' "$1"; failures=$((failures + $(grep -c 'not ok - ' "$1"))); }
one_name() {  # one_name LOG PID: every line naming PID calls it "worker 1 (pid PID)"
  [ -n "$2" ] && ! grep -E "\b$2\b" "$1" | grep -vqE "worker 1 \(pid $2\)"
}
common() {  # common NAME LOG
  check "$1: no stack trace" bash -c "! grep -qE 'stack traceback|\\[ldist prelude' '$2'"
  check "$1: no line of the cluster layer about the lost process" bash -c "! grep -qE 'ldist cluster:|process [0-9]' '$2'"
}

# ---- MultiWorkerMirrored on a LocalCluster
log=$T/lc.log
timeout 120 "$LDIST" tests/dist/worker_lost.lua lc "$T/backup" > "$log" 2>&1
st=$?
tap "$log"
check "lc: the script fails (exit $st)" test $st = 1
pid=$(sed -nE 's/.*worker 1 \(pid ([0-9]+)\) was killed.*/\1/p' "$log" | head -1)
check "lc: one message: fit stopped, worker 1, its pid, signal 9, the step and epoch" \
  test "$(grep -cE '^ldist: fit stopped: worker 1 \(pid [0-9]+\) was killed by signal 9 \(Killed\), during step [0-9]+/12 of epoch [0-9]/5\.$' "$log")" = 1
check "lc: the message says what the model holds" grep -qE "^The model has worker 0's weights and optimizer state from the end of epoch [0-9]" "$log"
check "lc: the process has one name" one_name "$log" "$pid"
common lc "$log"
[ $failures = 0 ] || show "$log"

# ---- MultiWorkerMirrored under ldist launch
log=$T/launch.log
TMPDIR=$T timeout 120 "$LDIST" launch -n 2 tests/dist/worker_lost.lua launch > "$log" 2>&1
st=$?
tap "$log"
check "launch: the launch fails (exit $st)" test $st != 0
pid=$(sed -nE 's/^\[1\] worker 1 \(pid ([0-9]+)\)$/\1/p' "$log")
check "launch: one message: fit stopped, worker 1, its pid, signal 9, the step and epoch, the history kept" \
  test "$(grep -cE "^\[0\] ldist: fit stopped: worker 1 \(pid $pid\) was killed by signal 9 \(Killed\), during step 1/12 of epoch 3/5; model.history holds the 2 epochs done\.$" "$log")" = 1
check "launch: the launcher adds no line of its own" bash -c "! grep -q '^ldist launch:' '$log'"
check "launch: the launcher's notes are removed" bash -c "! ls -d '$T'/ldist-launch-* 2>/dev/null"
check "launch: it points to BackupAndRestore" grep -qE '^\[0\] To resume after a failure .*callbacks\.BackupAndRestore' "$log"
check "launch: the process has one name" one_name "$log" "$pid"
common launch "$log"
[ $failures = 0 ] || show "$log"

# ---- ParameterServer on a LocalCluster: training goes on
log=$T/ps.log
timeout 120 "$LDIST" tests/dist/worker_lost.lua ps > "$log" 2>&1
st=$?
tap "$log"
check "ps: fit completes (exit $st)" test $st = 0
pid=$(sed -nE 's/^worker 1 \(pid ([0-9]+)\)$/\1/p' "$log")
check "ps: one message names the worker, its pid, the signal, the steps and epoch" \
  test "$(grep -cE "^ParameterServerStrategy: worker 1 \(pid $pid\) was killed by signal 9 \(Killed\) (during steps? [0-9, and]+ of epoch 2/3|in epoch 2/3, between steps); " "$log")" = 1
check "ps: the process has one name" one_name "$log" "$pid"
check "ps: nothing else names it" test "$(grep -cE "\b$pid\b" "$log")" = 2
common ps "$log"
[ $failures = 0 ] || show "$log"
finish
