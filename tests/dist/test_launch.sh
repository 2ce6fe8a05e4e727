#!/usr/bin/env bash
# `ldist launch` (TF_CONFIG, prefixes, exit status, --chief/--ps) and where a
# process finds its place: TF_CONFIG, Slurm and mpirun variables (simulated
# with real processes on loopback), and the errors when it cannot.
source "$(dirname "$0")/lib.sh"
S=$T/s.lua

cat > "$S" <<'LUA'
local tf = ldist.json.decode(os.getenv("TF_CONFIG"))
io.stdout:setvbuf("line")
local split = ldist.config.cpu_split()
print(("%s %d of %d workers, %d ps, secret %d chars, threads %d, local %d/%d"):format(tf.task.type, tf.task.index,
  #(tf.cluster.worker or {}), #(tf.cluster.ps or {}), #os.getenv("LDIST_SECRET"), ldist.get_num_threads(),
  split.local_rank, split.local_size))
if tf.task.type == "worker" and tf.task.index == 2 then os.exit(3) end
LUA
timeout 60 "$LDIST" launch -n 3 "$S" > "$T/l1.out" 2> "$T/l1.err"; st=$?
check "launch: every worker gets TF_CONFIG, a 64-character secret, a share of the cores" \
  test "$(grep -cE '^\[([012])\] worker \1 of 3 workers, 0 ps, secret 64 chars, threads [0-9]+, local \1/3$' "$T/l1.out")" = 3
check "launch: the exit status is the failing worker's (3)" test $st = 3
check "launch: it names the failing worker" grep -q 'worker 2 (pid [0-9]*) failed with exit status 3' "$T/l1.err"
timeout 60 "$LDIST" launch -n 2 --chief --ps 1 "$S" > "$T/l2.out" 2>&1; st=$?
check "launch --chief --ps: chief, worker and ps tasks with their own prefixes" \
  bash -c "grep -q '^\[chief 0\] chief 0 of 1 workers, 1 ps' '$T/l2.out' && grep -q '^\[worker 0\] worker 0 of 1 workers, 1 ps' '$T/l2.out' && grep -q '^\[ps 0\] ps 0' '$T/l2.out'"
check "launch: success is exit status 0" test $st = 0
timeout 20 "$LDIST" launch -n 2 "$T/missing.lua" > /dev/null 2>&1
check "launch: a script that cannot run fails the launch" test $? != 0

# resolve_cluster from the environment, without starting anything
res() { env -u TF_CONFIG -u LDIST_SECRET "$@" "$LDIST" -e '
  local ok, c = pcall(distribute.resolve_cluster)
  if not ok then print("error: " .. c) else print(c.rank, c.size, c.leader, c.listen, c.source) end' 2>&1; }
r=$(res TF_CONFIG='{"cluster": {"chief": ["c:1"], "worker": ["w0:2", "w1:3"], "ps": ["p:4"]}, "task": {"type": "worker", "index": 1}}')
check "TF_CONFIG: the chief is rank 0, workers follow ($r)" test "$r" = $'2\t3\tc:1\tw1:3\tTF_CONFIG'
r=$(res TF_CONFIG='{"cluster": {"worker": ["a:1"], "ps": ["p:4"]}, "task": {"type": "ps", "index": 0}}')
check "TF_CONFIG: a ps task is told it does not train here" grep -q "MultiWorkerMirroredStrategy trains on the chief and the workers only" <<<"$r"
r=$(res TF_CONFIG='{"cluster": {"worker": ["a:1"]}, "task": ')
check "TF_CONFIG: malformed JSON is an error that says so" grep -q "TF_CONFIG is not valid JSON" <<<"$r"
r=$(res TF_CONFIG='{"cluster": {"worker": ["nocolon"]}, "task": {"type": "worker", "index": 0}}')
check "TF_CONFIG: a bad address is named" grep -q "cluster.worker\[0\] is 'nocolon', not \"host:port\"" <<<"$r"
# one parser for both strategies over processes: the same checks, the same words
pst() { env -u LDIST_SECRET TF_CONFIG="$1" "$LDIST" -e '
  local ok, e = pcall(distribute.ParameterServerStrategy); print("error: " .. tostring(e))' 2>&1; }
tf='{"cluster": {"chief": ["c:1"], "worker": ["w:2"], "ps": ["nocolon"]}, "task": {"type": "chief", "index": 0}}'
r=$(res TF_CONFIG="$tf"); r2=$(pst "$tf")
check "TF_CONFIG: a bad ps address is named under both strategies" \
  test "$(grep -cF "TF_CONFIG: cluster.ps[0] is 'nocolon', not \"host:port\"" <<<"$r
$r2")" = 2
tf='{"cluster": {"chief": ["c:1"], "workers": ["w:2"], "ps": ["p:3"]}, "task": {"type": "chief", "index": 0}}'
r=$(res TF_CONFIG="$tf"); r2=$(pst "$tf")
check "TF_CONFIG: a misspelt task type (workers) is named under both strategies" \
  test "$(grep -cF "cluster.workers is not a task type" <<<"$r
$r2")" = 2
r2=$(pst '{"cluster": {"chief": ["c:1"], "worker": ["w:2"], "ps": ["p:3"]}, "task": ')
check "TF_CONFIG: malformed JSON under the parameter server says so" grep -q "TF_CONFIG is not valid JSON" <<<"$r2"
r=$(res SLURM_PROCID=1 SLURM_NTASKS=4 SLURM_JOB_NODELIST='node[03-05],gpu1' LDIST_PORT=1234)
check "Slurm: rank, size and the first node as the leader ($r)" test "$r" = $'1\t4\tnode03:1234\tnil\tSlurm (SLURM_PROCID/SLURM_NTASKS)'
r=$(res OMPI_COMM_WORLD_RANK=2 OMPI_COMM_WORLD_SIZE=3 MASTER_ADDR=h MASTER_PORT=99)
check "mpirun (Open MPI): rank, size, MASTER_ADDR:MASTER_PORT ($r)" test "$r" = $'2\t3\th:99\tnil\tmpirun (OMPI_COMM_WORLD_RANK/SIZE)'
r=$(res PMI_RANK=0 PMI_SIZE=2)
check "mpirun (PMI) without a leader address: an error that says what to set" grep -q "set LDIST_LEADER=host:port" <<<"$r"
r=$(env -u LDIST_SECRET TF_CONFIG='{"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}, "task": {"type": "worker", "index": 0}}' \
  "$LDIST" -e 'distribute.MultiWorkerMirroredStrategy()' 2>&1)
check "no shared secret: refused before anything listens" grep -q "a cluster needs a shared secret" <<<"$r"

# Slurm and mpirun for real: two processes each, started as srun/mpirun would
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
for r in 0 1; do
  env -u TF_CONFIG SLURM_PROCID=$r SLURM_NTASKS=2 SLURM_JOB_NODELIST=localhost LDIST_PORT=$port \
    LDIST_SECRET=7c1e9a3f5b2d8046e1a9c3f7b5d20e84 timeout 60 "$LDIST" launch tests/dist/auth_target.lua "$T/slurm$r" \
    > "$T/slurm$r.log" 2>&1 &
done
wait
check "under Slurm, \`ldist launch script\` runs the task in place and the tasks train together" \
  bash -c "grep -q 'worker 0: reduced 40000' '$T/slurm0.log' && grep -q 'worker 1: reduced 40000' '$T/slurm1.log'"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
for r in 0 1; do
  env -u TF_CONFIG OMPI_COMM_WORLD_RANK=$r OMPI_COMM_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    LDIST_SECRET=0ygbAwBKEvojKEXO32njng== timeout 60 "$LDIST" tests/dist/auth_target.lua "$T/mpi$r" > "$T/mpi$r.log" 2>&1 &
done
wait
check "under mpirun the ranks train together" \
  bash -c "grep -q 'worker 0: reduced 40000' '$T/mpi0.log' && grep -q 'worker 1: reduced 40000' '$T/mpi1.log'"
r=$(env -u LDIST_SECRET SLURM_PROCID=0 SLURM_NTASKS=2 timeout 10 "$LDIST" launch tests/dist/auth_target.lua x 2>&1)
check "launch under Slurm without LDIST_SECRET: a clear error" grep -q "need a shared secret: set LDIST_SECRET" <<<"$r"
finish
