#!/usr/bin/env bash
# The conformance suite (tests/conformance/), in the manner of TensorFlow's
# strategy_combinations: every case of tests/conformance/cases.lua runs under
# every strategy that tests/conformance/run.lua lists (default, OneDevice,
# Mirrored on 1/2/3 logical CPUs, MultiWorkerMirrored on 1/2/3 processes,
# ParameterServer and a LocalCluster for the cases that opt in); each result is
# compared with the default strategy's; one TAP line per cell, then a matrix.
#
# Each (strategy, case) cell is its own process (or `ldist launch -n K`), under
# a wall-clock limit, so one case that breaks or hangs its strategy fails only
# its own cell; whatever a run leaves in its process group is killed.
#   CONFORMANCE_STRATEGIES="default mirrored2"  only these strategies
#   CONFORMANCE_CASES="fit_sgd contexts"        only these cases
#   CONFORMANCE_CASE_TIMEOUT=60                 seconds per cell
#   CONFORMANCE_BUDGET=120                      seconds per strategy, then its
#                                               remaining cells fail unrun
#   CONFORMANCE_SUITE_BUDGET=540                seconds for the whole suite, the
#                                               same (tests/run.sh stops a test at 900)
#   CONFORMANCE_CASES_FILE=path                 another list of cases (to try the harness)
#   CONFORMANCE_ONE_PROCESS=1                   one process (or launch) per strategy
#                                               running all its cases in turn, under
#                                               CONFORMANCE_BUDGET as its time limit
#   KEEP=1                                      keep the scratch directory
#   LDIST_SIM_DEVICE=0                          no one_sim column (sim:0: the CPU's
#                                               kernels on a device the host may not
#                                               read, as a GPU's; on by default)
source "$(dirname "$0")/lib.sh"
export LDIST_SIM_DEVICE=${LDIST_SIM_DEVICE-1}
RUN=tests/conformance/run.lua
D=$T/conformance
mkdir -p "$D"
CASE_TIMEOUT=${CONFORMANCE_CASE_TIMEOUT:-60}
BUDGET=${CONFORMANCE_BUDGET:-120}
SUITE_BUDGET=${CONFORMANCE_SUITE_BUDGET:-540}
suite_start=$SECONDS

if ! "$LDIST" "$RUN" --strategies > "$D/all_columns" 2> "$D/list.log" </dev/null; then
  not_ok "conformance: the runner lists its strategies"; show "$D/list.log"; finish
fi
: > "$D/columns"
while read -r col procs; do
  if [ -n "${CONFORMANCE_STRATEGIES:-}" ] && [[ " $CONFORMANCE_STRATEGIES " != *" $col "* ]]; then continue; fi
  echo "$col $procs" >> "$D/columns"
done < "$D/all_columns"

while read -r col procs; do
  "$LDIST" "$RUN" --list "$col" > "$D/$col.all_cases" 2>> "$D/list.log" </dev/null
  : > "$D/$col.cases"
  while read -r case; do
    if [ -n "${CONFORMANCE_CASES:-}" ] && [[ " $CONFORMANCE_CASES " != *" $case "* ]]; then continue; fi
    echo "$case" >> "$D/$col.cases"
  done < "$D/$col.all_cases"
  : > "$D/$col.status"
  col_start=$SECONDS
  if [ -n "${CONFORMANCE_ONE_PROCESS:-}" ]; then
    if ((procs > 1)); then cmd=("$LDIST" launch -n "$procs" "$RUN" "$col" "$D/$col.res")
    else cmd=("$LDIST" "$RUN" "$col" "$D/$col.res"); fi
    mapfile -t cs < "$D/$col.cases"
    ((${#cs[@]})) || continue
    timeout -k 5 "$BUDGET" "${cmd[@]}" "${cs[@]}" > "$D/$col.all.log" 2>&1 </dev/null &
    pid=$!
    wait "$pid"; rc=$?
    kill -KILL -- "-$pid" 2>/dev/null
    for case in "${cs[@]}"; do echo "$case $rc $((SECONDS - col_start))" >> "$D/$col.status"; cp "$D/$col.all.log" "$D/$col.$case.log"; done
    echo "$col $((SECONDS - col_start))" >> "$D/times"
    continue
  fi
  while read -r case; do
    if ((SECONDS - col_start > BUDGET || SECONDS - suite_start > SUITE_BUDGET)); then
      echo "$case budget" >> "$D/$col.status"; continue
    fi
    if ((procs > 1)); then cmd=("$LDIST" launch -n "$procs" "$RUN" "$col" "$D/$col.res" "$case")
    else cmd=("$LDIST" "$RUN" "$col" "$D/$col.res" "$case"); fi
    t0=$EPOCHREALTIME
    # timeout leads a process group of its own: on expiry it signals the whole
    # group; afterwards the group is killed in case a run left something behind
    timeout -k 5 "$CASE_TIMEOUT" "${cmd[@]}" > "$D/$col.$case.log" 2>&1 </dev/null &
    pid=$!
    wait "$pid"; rc=$?
    kill -KILL -- "-$pid" 2>/dev/null
    secs=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
    echo "$case $rc $secs" >> "$D/$col.status"
  done < "$D/$col.cases"
  echo "$col $((SECONDS - col_start))" >> "$D/times"
done < "$D/columns"

"$LDIST" tests/conformance/report.lua "$D" </dev/null; st=$?
echo "# conformance suite: $((SECONDS - suite_start)) s in all"
# a report that died without a verdict counts as one failure
[ $st = 0 ] || [ $st = 1 ] || not_ok "conformance: the report ran (status $st)"
exit $((st != 0 || failures > 0))
