#!/usr/bin/env bash
# scripts/bench/cores.sh - `make bench-cores` (issue 29): ldist on every core of
# whatever machine it is given, with the goals of issue 29 and whether each is met:
#   1. one device against PyTorch CPU on all cores: the MLP 784-512-256-10 at
#      batch 256 and 2048 and the CNN of `make bench` at 256, Adam (goal 1.2x);
#      on an SMT machine the MLP rows on one thread per physical core too;
#   2. one device on 1, 2, 4, ... threads at batch 256: how the pool scales;
#   3. MirroredStrategy on 1/2/4/8/16 CPU devices, 256 per replica (weak scaling:
#      goal 85% of N x one device alone on the cores one of N devices gets,
#      pinned there with taskset; 2 devices at least as fast as one device at
#      the same global batch, 512);
#   4. MultiWorkerMirroredStrategy on 1/2/4/8 processes (ldist launch), 256 per
#      process (goal 80%, the same measure: a process gets the same cores);
# The yardstick is pinned because an unpinned one on cores/N threads gets a
# whole physical core per thread from the scheduler on an SMT machine, where
# N devices together share each core's two hardware threads; the old
# unpinned measure is printed beside it (column "vs-thr").
#   5. the ring all-reduce and MPI_Allreduce (communication="mpi", under Open MPI's
#      mpirun) between 4 processes against torch.distributed (gloo);
# and, on processors with AVX-512, row 1's MLP and CNN on the AVX2 paths
# (LDIST_CPU_ISA=avx2: what a processor without AVX-512 runs).
# The runs are those of `make bench` (train_bench.lua, ref_bench.py,
# mirrored_bench.lua, multiworker_bench.lua, gloo_allreduce.py), shorter: one
# run per row, about 4 minutes on 16 cores. Rows needing more devices,
# processes or threads than the machine has cores are skipped.
#
# Needs only ldist and a Python with PyTorch (and numpy): from the GPU bundle,
#   bash build/gpu-bundle/run.sh bash scripts/bench/cores.sh
# (run.sh sets LDIST to the bundle's ldist and LDIST_DATA_DIR to its data).
#   LDIST=path/to/ldist  PYTHON=python3  BENCH_CORES_QUICK=1 (shorter rows)
set -u
cd "$(dirname "$0")/../.." || exit 1
ldist=${LDIST:-./ldist}
if [ -n "${PYTHON:-}" ]; then py=$PYTHON
elif [ -x build/bench-venv/bin/python ]; then py=build/bench-venv/bin/python
else py=python3; fi
cores=$("$ldist" -e 'io.write(#ldist.config.cpu_split().cores)' 2>/dev/null)
[ -n "$cores" ] || { echo "bench-cores: $ldist does not start"; "$ldist" -e 'print(1)'; exit 1; }
torch_ok=1
"$py" -c 'import torch, numpy' 2>/dev/null || { torch_ok=0; echo "bench-cores: no PyTorch in $py: its columns stay empty"; }
q=${BENCH_CORES_QUICK:-0}
sc() { if [ "$q" = 1 ]; then echo $(( ($1 + 2) / 3 )); else echo "$1"; fi; }   # steps, shortened when quick
mkdir -p build
log=build/bench-cores.log; : >"$log"
topo=$("$ldist" -e 'local s = ldist.config.cpu_split(); io.write(s.physical_cores, " physical, ", s.smt, " thread", s.smt > 1 and "s" or "", " per core")' 2>/dev/null)
echo "== bench-cores: $cores cores ($topo; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'));" \
  "flags: $(grep -m1 -o -w 'avx512f\|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')"
[ "$torch_ok" = 1 ] && echo "== PyTorch $("$py" -c 'import torch; print(torch.__version__)') on $cores threads"

# run LABEL CMD...: the first field of the command's last line (samples/s), or 0
run() {
  local label=$1 t0=$SECONDS out; shift
  out=$("$@" 2>>"$log" | tail -1 | sed 's/^\[0\] //')
  out=${out%% *}
  echo "# $label: ${out:-failed} ($((SECONDS - t0)) s)" >>"$log"
  echo "${out:-0}"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (a > 0 && b > 0) printf "%.2f", a / b; else print "n/a" }'; }
pct() { awk -v a="$1" -v b="$2" 'BEGIN{ if (a > 0 && b > 0) printf "%.0f%%", 100 * a / b; else print "n/a" }'; }
goal() { awk -v v="$1" -v g="$2" 'BEGIN{ if (v + 0 <= 0) print "unmeasured"; else if (v + 0 >= g) print "met"; else print "NOT met" }'; }

# ---- 1. one device against PyTorch, every core
echo
echo "== 1. one device, every core ($cores threads), Adam, Fashion-MNIST (samples/s); goal: 1.2x PyTorch"
printf '%-5s %6s %10s %10s %7s  %s\n' model batch ldist pytorch ratio goal
declare -A ONE
for row in "mlp 256 300" "mlp 2048 60" "cnn 256 60"; do
  set -- $row
  l=$(run "ldist $1 $2" "$ldist" scripts/bench/train_bench.lua "$1" "$2" "$(sc "$3")" 10)
  t=0
  [ "$torch_ok" = 1 ] && t=$(run "torch $1 $2" env BENCH_THREADS="$cores" "$py" scripts/bench/ref_bench.py torch "$1" "$2" "$(sc "$3")" 10)
  ONE[$1-$2]=$l
  r=$(ratio "$l" "$t")
  printf '%-5s %6s %10s %10s %6sx  %s\n' "$1" "$2" "$l" "$t" "$r" "$(goal "$r" 1.2)"
done
# the prefetch thread gathers each batch (2048 rows: 6.4 MB of random rows)
# on a core that the pool's threads also run on: the same row without it
np=$(run "ldist mlp 2048 no prefetch" env BENCH_PREFETCH=0 "$ldist" scripts/bench/train_bench.lua mlp 2048 "$(sc 60)" 10)
printf '%-5s %6s %10s %10s %6sx  (of the row above: no prefetch thread, BENCH_PREFETCH=0)\n' mlp 2048 "$np" "" \
  "$(ratio "$np" "${ONE[mlp-2048]}")"
# SMT: both on one thread per physical core (PyTorch's default thread count),
# to tell whether the second hardware thread of each core helps the products
phys=$("$ldist" -e 'io.write(ldist.config.cpu_split().physical_cores)' 2>/dev/null)
if [ -n "$phys" ] && [ "$phys" -gt 0 ] && [ "$phys" -lt "$cores" ]; then
  echo "   one thread per physical core ($phys threads: LDIST_NUM_THREADS, torch.set_num_threads), the MLP rows:"
  for row in "mlp 256 300" "mlp 2048 60"; do
    set -- $row
    l=$(run "ldist $1 $2 on $phys threads" env LDIST_NUM_THREADS="$phys" "$ldist" scripts/bench/train_bench.lua "$1" "$2" "$(sc "$3")" 10)
    t=0
    [ "$torch_ok" = 1 ] && t=$(run "torch $1 $2 on $phys threads" env BENCH_THREADS="$phys" "$py" scripts/bench/ref_bench.py torch "$1" "$2" "$(sc "$3")" 10)
    printf '%-5s %6s %10s %10s %6sx  (ldist %sx of its %s-thread row)\n' "$1" "$2" "$l" "$t" "$(ratio "$l" "$t")" \
      "$(ratio "$l" "${ONE[$1-$2]}")" "$cores"
  done
fi

# the AVX2 paths (what a processor without AVX-512 runs: small products in
# AVX2, convolutions through im2col + BLAS), forced on this one
if [ "$("$ldist" -e 'io.write(ldist.config.cpu_split().isa)' 2>/dev/null)" = avx512 ]; then
  echo "   LDIST_CPU_ISA=avx2 (the paths of processors without AVX-512), same rows:"
  for row in "mlp 256 300" "cnn 256 60"; do
    set -- $row
    a=$(run "avx2 $1 $2" env LDIST_CPU_ISA=avx2 "$ldist" scripts/bench/train_bench.lua "$1" "$2" "$(sc "$3")" 10)
    printf '%-5s %6s %10s %10s %6sx  (of the avx512 row)\n' "$1" "$2" "$a" "" "$(ratio "$a" "${ONE[$1-$2]}")"
  done
fi

# ---- 2. the pool's scaling: one device on T threads, batch 256
echo
echo "== 2. one device on T threads (LDIST_NUM_THREADS), MLP batch 256 (samples/s)"
printf '%8s %10s %9s %11s\n' threads ldist speedup efficiency
declare -A TH
for t in 1 2 4 8 16 32 64; do
  [ "$t" -le "$cores" ] || break
  TH[$t]=$(run "threads $t" env LDIST_NUM_THREADS=$t "$ldist" scripts/bench/train_bench.lua mlp 256 "$(sc $((60 + 20 * t)))" 10)
done
[ "$cores" -gt 1 ] && [ -z "${TH[$cores]:-}" ] && TH[$cores]=${ONE[mlp-256]}   # all cores: row 1
for t in $(printf '%s\n' "${!TH[@]}" | sort -n); do
  printf '%8s %10s %8sx %11s\n' "$t" "${TH[$t]}" "$(ratio "${TH[$t]}" "${TH[1]}")" \
    "$(pct "${TH[$t]}" "$(awk -v a="${TH[1]}" -v t="$t" 'BEGIN{ print a * t }')")"
done

# the ops of one step, microseconds per call on T threads (scripts/bench/pool_ops.lua):
# where the pool stops scaling; batch 2048 on 1 thread and every core only
declare -A OPS
for b in 256 2048; do
  ths=$(printf '%s\n' "${!TH[@]}" | sort -n)
  [ "$b" = 2048 ] && ths=$(printf '%s\n' 1 "$cores" | sort -nu)
  names=()
  for t in $ths; do
    while read -r line; do
      [ "$t" = 1 ] && names+=("${line% *}")
      OPS[$b,$t,${line% *}]=${line##* }
    done < <(LDIST_NUM_THREADS=$t "$ldist" scripts/bench/pool_ops.lua $b 2>>"$log")
  done
  echo
  printf '   %-28s' "ops at batch $b (us/call)"
  for t in $ths; do printf ' %8s' "T=$t"; done
  printf ' %8s\n' speedup
  for op in "${names[@]}"; do
    printf '   %-28s' "$op"
    for t in $ths; do printf ' %8s' "${OPS[$b,$t,$op]:-?}"; done
    printf ' %7sx\n' "$(ratio "${OPS[$b,1,$op]:-0}" "${OPS[$b,$cores,$op]:-0}")"
  done
done

# the yardstick of weak scaling: one device alone on the cores cpu:0 gets when
# the cores are split N ways (the share of process 0 of N is the same), the
# process bound there with taskset, MLP batch 256
declare -A YD
echo
if command -v taskset > /dev/null; then
  echo "== one device alone on one share of the cores (taskset), MLP batch 256: the yardstick of rows 3 and 4"
  printf '%8s %-24s %10s\n' shares cores ldist
  YD[1]=${ONE[mlp-256]}
  for n in 2 4 8 16; do
    [ "$n" -le "$cores" ] || break
    list=$("$ldist" -e "ldist.config.cpu_devices($n); local c = ldist.config.cpu_split().devices[1].cores; table.sort(c); io.write(table.concat(c, ','))" 2>>"$log")
    [ -n "$list" ] || continue
    YD[$n]=$(run "alone on $list" taskset -c "$list" "$ldist" scripts/bench/train_bench.lua mlp 256 "$(sc $((60 + 20 * cores / n)))" 10)
    printf '%8s %-24s %10s\n' "$n" "$list" "${YD[$n]}"
  done
else
  echo "== no taskset: weak scaling is measured against one device on cores/N unpinned threads"
fi
# weak scaling of N replicas: N x the yardstick (or, without it, one device on
# cores/N unpinned threads); thr: always the latter
weak_of() { awk -v m="$2" -v a="$1" -v n="$3" 'BEGIN{ if (a > 0 && m > 0) printf "%.0f%%", 100 * m / (a * n); else print "n/a" }'; }
weak() { weak_of "${YD[$1]:-${TH[$(( cores / $1 ))]:-0}}" "$2" "$1"; }
weak_thr() { local per=$(( cores / $1 )); [ "$per" -ge 1 ] && weak_of "${TH[$per]:-0}" "$2" "$1" || echo "n/a"; }

# ---- 3. MirroredStrategy, 256 per replica
echo
echo "== 3. MirroredStrategy on N CPU devices (cores/N threads each, pinned), MLP, 256 per replica (samples/s)"
echo "   weak = samples/s over N x one device alone on one share (goal 85%); vs-thr = over N x one device on cores/N"
echo "   unpinned threads; vs-one = over one device on every core"
printf '%8s %8s %10s %8s %8s %8s  %s\n' devices batch ldist weak vs-thr vs-one goal
for n in 1 2 4 8 16; do
  [ "$n" -le "$cores" ] || { printf '%8s %8s %10s\n' "$n" $((256 * n)) "skipped ($cores cores)"; continue; }
  m=$(run "mirrored $n" "$ldist" scripts/bench/mirrored_bench.lua "mirror$n" "$(sc 100)" $((256 * n)))
  w=$(weak "$n" "$m")
  printf '%8s %8s %10s %8s %8s %7sx  %s\n' "$n" $((256 * n)) "$m" "$w" "$(weak_thr "$n" "$m")" "$(ratio "$m" "${ONE[mlp-256]}")" \
    "$([ "$n" = 1 ] && echo - || goal "${w%\%}" 85)"
  [ "$n" = 2 ] && M2=$m
done
if [ "$cores" -ge 2 ]; then
  o512=$(run "one device 512" "$ldist" scripts/bench/train_bench.lua mlp 512 "$(sc 150)" 10)
  r=$(ratio "${M2:-0}" "$o512")
  echo "   2 devices against one device at the same global batch (512, $o512 samples/s): ${r}x; goal 1.0x: $(goal "$r" 1.0)"
fi

# ---- 4. MultiWorkerMirroredStrategy, 256 per process
echo
echo "== 4. MultiWorkerMirroredStrategy on K processes (ldist launch: cores/K each, pinned), MLP, 256 per process"
echo "   weak = samples/s over K x one device alone on one share (goal 80%); vs-thr as in row 3"
printf '%9s %8s %10s %8s %8s  %s\n' processes batch ldist weak vs-thr goal
for k in 1 2 4 8; do
  [ "$k" -le "$cores" ] || { printf '%9s %8s %10s\n' "$k" $((256 * k)) "skipped ($cores cores)"; continue; }
  if [ "$k" = 1 ]; then
    m=$(run "multiworker 1" "$ldist" scripts/bench/multiworker_bench.lua train "$(sc 100)" 256)
  else
    m=$(run "multiworker $k" "$ldist" launch -n "$k" scripts/bench/multiworker_bench.lua train "$(sc 100)" 256)
  fi
  w=$(weak "$k" "$m")
  printf '%9s %8s %10s %8s %8s  %s\n' "$k" $((256 * k)) "$m" "$w" "$(weak_thr "$k" "$m")" "$([ "$k" = 1 ] && echo - || goal "${w%\%}" 80)"
done

# ---- 5. the ring all-reduce and MPI against gloo
k=4; [ "$cores" -lt 4 ] && k=2
echo
echo "== 5. all-reduce between $k processes, bus bandwidth (GB/s): ldist's ring and MPI against torch.distributed (gloo)"
declare -A RL RG
while read -r _ mb _ bw; do RL[$mb]=$bw; done < <("$ldist" launch -n $k scripts/bench/multiworker_bench.lua allreduce 2>>"$log" | sed 's/^\[0\] //')
if [ "$torch_ok" = 1 ]; then
  while read -r _ mb _ bw; do RG[$mb]=$bw; done < <("$py" scripts/bench/gloo_allreduce.py $k 2>>"$log")
fi
# MPI_Allreduce through ldist (communication="mpi"), where Open MPI is installed
declare -A RM
if command -v mpirun > /dev/null; then
  while read -r _ mb _ bw; do RM[$mb]=$bw; done < <(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    mpirun -n $k --oversubscribe --bind-to none "$ldist" scripts/bench/multiworker_bench.lua allreduce mpi 2>>"$log")
fi
printf '%6s %10s %10s %10s %8s %8s\n' MB ring mpi gloo ring/gloo mpi/gloo
for mb in 1 4 16 64; do
  printf '%6s %10s %10s %10s %7sx %7sx\n' $mb "${RL[$mb]:-?}" "${RM[$mb]:-n/a}" "${RG[$mb]:-n/a}" \
    "$(ratio "${RL[$mb]:-0}" "${RG[$mb]:-0}")" "$(ratio "${RM[$mb]:-0}" "${RG[$mb]:-0}")"
done
echo "(per-run timings in $log)"
