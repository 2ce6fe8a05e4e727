#!/usr/bin/env bash
# An all-reduce of tensors of equal size but different shapes across 2
# processes is an error on both (tests/dist/shapes.lua).
source "$(dirname "$0")/lib.sh"
timeout 120 "$LDIST" launch -n 2 tests/dist/shapes.lua > "$T/shapes.log" 2>&1
sed -nE 's/^\[([0-9]+)\] (not )?ok - /\2ok - worker \1: /p; s/^\[([0-9]+)\] (# .*)/\2/p' "$T/shapes.log"
check "both workers ran both checks" test "$(grep -cE '^\[[01]\] ok - ' "$T/shapes.log")" = 4
[ "$(grep -cE '^\[[01]\] ok - ' "$T/shapes.log")" = 4 ] || show "$T/shapes.log"
# the same through MPI_Allreduce (issue 29's communication="mpi"), under mpirun
if command -v mpirun > /dev/null; then
  SHAPES_COMM=mpi timeout 120 mpirun -n 2 --oversubscribe --allow-run-as-root --tag-output "$LDIST" tests/dist/shapes.lua \
    > "$T/mpi.log" 2>&1
  sed -nE 's/^\[1,([0-9]+)\]<stdout>:(not )?ok - /\2ok - mpi worker \1: /p' "$T/mpi.log"
  check "under MPI both workers ran both checks" test "$(grep -cE '^\[1,[01]\]<stdout>:ok - ' "$T/mpi.log")" = 4
  [ "$(grep -cE '^\[1,[01]\]<stdout>:ok - ' "$T/mpi.log")" = 4 ] || show "$T/mpi.log"
else
  not_ok "mpirun is installed (scripts/setup.sh installs Debian's openmpi-bin)"
fi
finish
