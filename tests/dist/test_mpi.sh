#!/usr/bin/env bash
# MPI for CPU clusters (issue 29, item 5), driven as a user does: `mpirun -n N
# ldist script.lua` with nothing else set. The ranks meet through MPI (no
# LDIST_LEADER, no LDIST_SECRET); MultiWorkerMirroredStrategy{communication=
# "mpi"} sums through MPI_Allreduce and gives the ring's weights within
# float32 rounding; a missing library or a bad value is a clear error.
source "$(dirname "$0")/lib.sh"
TOL=1e-6
if ! command -v mpirun > /dev/null; then
  not_ok "mpirun is installed (scripts/setup.sh installs Debian's openmpi-bin)"; finish
fi
# CI runs as root, which Open MPI refuses unless told
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unset LDIST_LEADER LDIST_SECRET LDIST_SECRET_FILE LDIST_RANK LDIST_WORLD_SIZE MASTER_ADDR TF_CONFIG
mpi() { local n=$1; shift; timeout 120 mpirun -n "$n" --oversubscribe --allow-run-as-root "$LDIST" "$@"; }

# one process alone: the reference of the equivalence tests
ref=$T/ref
timeout 120 "$LDIST" tests/dist/equiv.lua adam fit "$ref" > "$ref.log" 2>&1 || { not_ok "one process trains"; show "$ref.log"; }

for comm in ring mpi; do
  for k in 2 3; do
    out=$T/$comm-$k
    # "auto" for the ring: mpirun keeps today's choice
    if ! mpi $k tests/dist/equiv.lua adam fit "$out" 100 $([ $comm = mpi ] && echo mpi) > "$out.log" 2>&1; then
      not_ok "$comm: mpirun -n $k ldist trains"; show "$out.log"; continue
    fi
    check "$comm: mpirun -n $k: every rank met through MPI (no LDIST_LEADER, no LDIST_SECRET)" \
      test "$(grep -c "communication $comm, cluster from mpirun (OMPI_COMM_WORLD_RANK/SIZE) through MPI" "$out.log")" = $k
    check "$comm: mpirun -n $k: each rank applied 100 optimizer steps" \
      test "$(grep -c "of $k: .* 100 optimizer steps" "$out.log")" = $k
    want=$([ $comm = mpi ] && echo "to next mpi, from previous mpi" || echo "to next shm, from previous shm")
    check "$comm: mpirun -n $k: the data goes $want" test "$(grep -c "ring links: $want" "$out.log")" = $k
    same=1
    for ((r = 1; r < k; r++)); do [ "$(maxdiff "$out.0.safetensors" "$out.$r.safetensors")" = 0 ] || same=0; done
    check "$comm: mpirun -n $k: the ranks hold identical weights" test $same = 1
    d=$(maxdiff "$ref.0.safetensors" "$out.0.safetensors")
    check "$comm: mpirun -n $k gives one process's weights (max |dw| $d <= 1e-5)" le "$d" 1e-5
  done
done
for k in 2 3; do
  d=$(maxdiff "$T/ring-$k.0.safetensors" "$T/mpi-$k.0.safetensors")
  note "mpirun -n $k: MPI_Allreduce vs the ring: max |dw| = $d"
  check "mpirun -n $k: communication=\"mpi\" gives the ring's weights (max |dw| $d <= $TOL)" le "$d" $TOL
done
# the custom loop (strategy:run, SGD with momentum) too
for comm in ring mpi; do
  mpi 2 tests/dist/equiv.lua sgd loop "$T/loop-$comm" 100 $([ $comm = mpi ] && echo mpi) > "$T/loop-$comm.log" 2>&1 ||
    { not_ok "$comm: the custom loop trains under mpirun"; show "$T/loop-$comm.log"; }
done
d=$(maxdiff "$T/loop-ring.0.safetensors" "$T/loop-mpi.0.safetensors")
check "custom loop: communication=\"mpi\" gives the ring's weights (max |dw| $d <= $TOL)" le "$d" $TOL

# synchronized BatchNorm: its statistics are summed inside the step, through MPI too
for comm in ring mpi; do
  mpi 2 tests/dist/sync_bn_mw.lua $comm "$T/bn-$comm" > "$T/bn-$comm.log" 2>&1 ||
    { not_ok "$comm: synchronized BatchNorm trains under mpirun"; show "$T/bn-$comm.log"; }
done
d=$(maxdiff "$T/bn-ring.0.safetensors" "$T/bn-mpi.0.safetensors")
check "synchronized BatchNorm: communication=\"mpi\" gives the ring's weights (max |dw| $d <= $TOL)" le "$d" $TOL

# the leader given by hand (LDIST_LEADER + LDIST_SECRET, as before) with MPI's collectives
out=$T/given
port=$("$LDIST" -e 'print(ldist._cluster.free_port("127.0.0.1"))')
if LDIST_LEADER=127.0.0.1:$port LDIST_SECRET=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n') \
   mpi 2 tests/dist/equiv.lua adam fit "$out" 100 mpi > "$out.log" 2>&1; then
  check "LDIST_LEADER given: the ranks meet there and reduce through MPI" \
    test "$(grep -c "communication mpi, cluster from mpirun (OMPI_COMM_WORLD_RANK/SIZE)$" "$out.log")" = 2
  d=$(maxdiff "$T/mpi-2.0.safetensors" "$out.0.safetensors")
  check "LDIST_LEADER given: the same weights (max |dw| $d <= $TOL)" le "$d" $TOL
else
  not_ok "LDIST_LEADER given: mpirun -n 2 trains with communication=\"mpi\""; show "$out.log"
fi

# srun --mpi=pmix as mpirun plays it: Slurm's variables beside MPI's PMIx ones
out=$T/srun
if timeout 120 mpirun -n 2 --oversubscribe --allow-run-as-root bash -c 'SLURM_PROCID=$OMPI_COMM_WORLD_RANK SLURM_NTASKS=$OMPI_COMM_WORLD_SIZE SLURM_JOB_NODELIST=nowhere \
     PMIX_RANK=$OMPI_COMM_WORLD_RANK exec "$0" "$@"' "$LDIST" tests/dist/equiv.lua adam fit "$out" 100 mpi > "$out.log" 2>&1; then
  check "srun with PMIx: the tasks meet through MPI, not at the first node of the list" \
    test "$(grep -c "communication mpi, cluster from Slurm (SLURM_PROCID/SLURM_NTASKS) through MPI" "$out.log")" = 2
  d=$(maxdiff "$T/mpi-2.0.safetensors" "$out.0.safetensors")
  check "srun with PMIx: the same weights (max |dw| $d <= $TOL)" le "$d" $TOL
else
  not_ok "srun with PMIx: 2 tasks train with communication=\"mpi\""; show "$out.log"
fi
# an srun whose PMI MPI does not answer (MPI alone: rank 0 of 1) keeps Slurm's own leader
r=$(PMIX_RANK=1 SLURM_PROCID=1 SLURM_NTASKS=4 SLURM_JOB_NODELIST='node[03-05]' LDIST_PORT=1234 timeout 60 "$LDIST" -e '
  local c = distribute.resolve_cluster() print(c.rank, c.size, c.leader, c.source)' 2>&1)
check "srun without MPI's answer: the first node leads, as before ($r)" \
  test "$r" = $'1\t4\tnode03:1234\tSlurm (SLURM_PROCID/SLURM_NTASKS)'

# rank 0's secret reaches every rank through MPI, and so does its refusal of a weak one
LDIST_SECRET=abc mpi 2 tests/dist/equiv.lua adam fit "$T/weak" > "$T/weak.log" 2>&1
check "a weak LDIST_SECRET on rank 0 stops every rank with the reason" \
  test "$(grep -c "rank 0 could not lead the MPI rendezvous: the cluster secret in LDIST_SECRET is too weak" "$T/weak.log")" = 2

# bad input
"$LDIST" tests/dist/equiv.lua adam fit "$T/x" 20 bogus > "$T/bogus.log" 2>&1
check "an unknown communication is refused by name" \
  grep -q "communication must be \"auto\", \"ring\", \"nccl\" or \"mpi\", not 'bogus'" "$T/bogus.log"
LDIST_MPI_LIB=/nonexistent/libmpi.so "$LDIST" tests/dist/equiv.lua adam fit "$T/x" 20 mpi > "$T/nolib.log" 2>&1
check "communication=\"mpi\" without an MPI library says what is missing" \
  grep -q 'communication="mpi" needs an MPI library: no MPI library (/nonexistent/libmpi.so.*install Open MPI' "$T/nolib.log"
LDIST_MPI_LIB=/nonexistent/libmpi.so mpi 2 tests/dist/equiv.lua adam fit "$T/x" > "$T/norv.log" 2>&1
check "mpirun without an MPI library to meet through: set LDIST_LEADER or install Open MPI" \
  test "$(grep -c "gives rank . of 2 but not where rank 0 listens: set LDIST_LEADER=host:port, or install Open MPI" "$T/norv.log")" = 2
timeout 60 "$LDIST" launch -n 2 tests/dist/equiv.lua adam fit "$T/x" 20 mpi > "$T/launch.log" 2>&1
check "communication=\"mpi\" outside mpirun: MPI's ranks are not the cluster's" \
  grep -q 'MPI gives rank 0 of 1 but the cluster rank . of 2: run every rank under one mpirun or srun' "$T/launch.log"
finish
