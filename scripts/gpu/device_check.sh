#!/usr/bin/env bash
# scripts/gpu/device_check.sh - the one call a lent GPU machine gets (README,
# "GPU"): builds nothing there; runs, from the bundle (scripts/gpu/bundle.sh,
# carried as build/gpu-bundle), `make test-gpu`, `make bench-gpu` and the
# many-core CPU bench `make bench-cores`, each under its own time limit, and
# writes each log to $OUT (or build/device-check) for the README's tables.
#   DEVICE_CHECK_PARTS="test conf bench profile cores"   which parts, in this order
#   DEVICE_CHECK_BUDGET=570   seconds for all of them: a part gets at most
#   what is left (a `run` call stops at 600 s, and what it wrote before
#   comes back only if the call ends itself); T_<PART> caps each part
#   (conf: the conformance matrix's default, one_gpu and mirrored_gpus columns;
#   profile: the transformer bench, short, under LDIST_KERNEL_PROFILE=1, FP32
#   then mixed_bfloat16: where the step's time goes, kernel slot by slot, in
#   profile-fp32.log and profile-bf16.log; sanitize: the fused attention
#   kernels on shapes off their tiles (scripts/gpu/sanitize_attention.lua)
#   under compute-sanitizer's racecheck and memcheck, where the machine has
#   compute-sanitizer; last, so it only takes what the others leave)
cd "$(dirname "$0")/../.." || exit 1
out=${OUT:-build/device-check}; mkdir -p "$out"
parts=${DEVICE_CHECK_PARTS:-test conf bench profile cores sanitize}
budget=${DEVICE_CHECK_BUDGET:-570}
start=$SECONDS
{ date -u; nproc; lscpu | grep -E 'Model name|Flags|Thread|Core|Socket|NUMA node' | sed -E 's/(Flags:).*(avx512[a-z_0-9]*).*/\1 ... avx512 present/'; nvidia-smi -L 2>&1; } >"$out/machine.txt"
# the BLAS kernels CPU products run: ldist's choice, and OpenBLAS's own (LDIST_BLAS)
bash build/gpu-bundle/run.sh bash -c '"$LDIST" -e "print(ldist.config.cpu_split().blas)";
  LDIST_BLAS=libopenblas.so.0 "$LDIST" -e "print(ldist.config.cpu_split().blas)"' 2>&1 | grep -v '^#' >>"$out/machine.txt"
cat "$out/machine.txt"
for p in $parts; do
  case $p in
    test)  limit=${T_TEST:-100}; cmd=(make test-gpu) ;;
    conf)  limit=${T_CONF:-110}; cmd=(env CONFORMANCE_STRATEGIES="default one_gpu mirrored_gpus" CONFORMANCE_ONE_PROCESS=1
             CONFORMANCE_BUDGET=50 bash -c 'LDIST_BIN=$LDIST exec bash tests/dist/test_conformance.sh') ;;
    bench) limit=${T_BENCH:-220}; cmd=(env LDIST_BENCH_QUICK=1 make bench-gpu) ;;
    cores) limit=${T_CORES:-200}; cmd=(env BENCH_CORES_QUICK=${BENCH_CORES_QUICK:-1} make bench-cores) ;;
    profile) limit=${T_PROFILE:-90}; cmd=(env OUT_DIR="$out" bash -c '
             for pol in fp32 bf16; do
               p=float32; [ $pol = bf16 ] && p=mixed_bfloat16
               echo "== transformer, $p, LDIST_KERNEL_PROFILE=1 (tokens/s is slowed by the synchronization)"
               LDIST_KERNEL_PROFILE=1 LDIST_BENCH_POLICY=$p timeout 40 "$LDIST" scripts/gpu/transformer_bench.lua 32 10 3 \
                 >"$OUT_DIR/profile-$pol.log" 2>&1
               echo "status $?"; cat "$OUT_DIR/profile-$pol.log"
             done') ;;
    sanitize) limit=${T_SANITIZE:-90}; cmd=(bash -c '
             cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
             [ -n "$cs" ] || { echo "no compute-sanitizer on this machine"; exit 0; }
             st=0
             for tool in racecheck memcheck; do
               echo "== compute-sanitizer --tool $tool"
               "$cs" --tool $tool --error-exitcode 3 "$LDIST" scripts/gpu/sanitize_attention.lua || st=1
             done
             exit $st') ;;
    *) echo "device_check: unknown part $p"; continue ;;
  esac
  left=$((budget - (SECONDS - start)))
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$left" -lt 20 ]; then echo "== $p: skipped, ${left} s of the ${budget} s budget left"; continue; fi
  echo "== $p: ${cmd[*]} (limit ${limit} s)"
  t0=$SECONDS
  timeout -k 5 "$limit" bash build/gpu-bundle/run.sh "${cmd[@]}" >"$out/$p.log" 2>&1
  st=$?
  echo "== $p: status $st after $((SECONDS - t0)) s"
  grep -vE '^ok - ' "$out/$p.log" | tail -60
done
