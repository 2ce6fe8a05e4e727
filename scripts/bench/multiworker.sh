#!/usr/bin/env bash
# scripts/bench/multiworker.sh - MultiWorkerMirroredStrategy (issue 7):
#  1. the ring all-reduce between 2 and 4 local processes (ldist launch), 1-64 MB,
#     against torch.distributed with gloo on the same machine, same sizes, same
#     timing (best of 3), and against the in-process all-reduce of
#     MirroredStrategy (2 logical devices). The ring's link between ranks on
#     one host is shared memory; the "tcp" columns force the ZeroMQ link
#     (LDIST_RING_TRANSPORT=tcp) that ranks on different hosts use;
#  2. training samples/s (Fashion-MNIST MLP, Adam, global batch 256) on 1, 2
#     and 4 processes, over both links.
# Bus bandwidth as nccl-tests defines it: 2(n-1)/n x bytes / time.
# Called by scripts/bench/run.sh; alone: bash scripts/bench/multiworker.sh
#   LDIST_BENCH_QUICK=1 shortens the training runs.
set -u
cd "$(dirname "$0")/../.." || exit 1
py=${PY:-build/bench-venv/bin/python}
steps=100; [ "${LDIST_BENCH_QUICK:-0}" = 1 ] && steps=30
declare -A L T G M
for k in 2 4; do
  while read -r n mb sec bw; do L[$k,$mb]=$bw; done < <(./ldist launch -n $k scripts/bench/multiworker_bench.lua allreduce 2>/dev/null | sed 's/^\[0\] //')
  while read -r n mb sec bw; do T[$k,$mb]=$bw; done < <(LDIST_RING_TRANSPORT=tcp ./ldist launch -n $k scripts/bench/multiworker_bench.lua allreduce 2>/dev/null | sed 's/^\[0\] //')
  if $py -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null; then
    while read -r n mb sec bw; do G[$k,$mb]=$bw; done < <($py scripts/bench/gloo_allreduce.py $k 2>/dev/null)
  fi
done
while read -r mb sec bw; do M[$mb]=$bw; done < <(./ldist scripts/bench/mirrored_bench.lua allreduce 2>/dev/null)
ratio() { awk -v a="${1:-}" -v b="${2:-}" 'BEGIN { if (a > 0 && b > 0) printf "%.2fx", a / b; else print "n/a" }'; }
echo "== all-reduce bus bandwidth (GB/s): ldist ring between processes (shm link; tcp = ZeroMQ link) vs torch.distributed (gloo)"
for k in 2 4; do
  printf '%6s %10s %10s %8s %10s %8s\n' MB "ldist ${k}p" "gloo ${k}p" ratio "tcp ${k}p" ratio
  for mb in 1 4 16 64; do
    printf '%6s %10s %10s %8s %10s %8s\n' $mb "${L[$k,$mb]:-?}" "${G[$k,$mb]:-n/a}" "$(ratio "${L[$k,$mb]:-}" "${G[$k,$mb]:-}")" \
      "${T[$k,$mb]:-?}" "$(ratio "${T[$k,$mb]:-}" "${G[$k,$mb]:-}")"
  done
done
printf '%6s %16s\n' MB "in-process 2dev"
for mb in 1 4 16 64; do printf '%6s %16s\n' $mb "${M[$mb]:-?}"; done
echo
echo "== MultiWorkerMirroredStrategy training, MLP 784-512-256-10, Adam, global batch 256 (samples/s)"
train() { ./ldist launch -n $1 scripts/bench/multiworker_bench.lua train $steps 2>/dev/null | sed -n 's/^\[0\] //p' | tail -1; }
r=$(./ldist scripts/bench/multiworker_bench.lua train $steps 2>/dev/null | tail -1)
printf '1 process:    %10s\n' "${r:-?}"
for k in 2 4; do
  r=$(train $k); t=$(LDIST_RING_TRANSPORT=tcp train $k)
  printf '%d processes: %10s   (tcp link: %s)\n' $k "${r:-?}" "${t:-?}"
done
echo "(on $(nproc) cores; each process gets cores/n BLAS threads)"
