#!/usr/bin/env bash
# scripts/gpu/bench.sh - `make bench-gpu`: the MLP, the CNN and the BN-ResNet
# of the CPU bench trained on the GPU by ldist and by PyTorch, in the same run,
# same batches, samples/s and the ratio (goal: ldist at least 2x PyTorch on the
# MLP and the CNN). FP32 on both sides, then TF32 (LDIST_CUDA_TF32=1 / torch
# allow_tf32); the ResNet also in bf16 (mixed_bfloat16 / torch.autocast), with
# its model FLOPs utilisation. Then large products and the GPT-style transformer.
#   LDIST=path/to/ldist   BENCH_BATCH=256   LDIST_BENCH_QUICK=1 (shorter runs)
#   BENCH_GPU_DEVICE=cpu:1 BENCH_STEPS=3: the training rows on a logical CPU
#   device against PyTorch on the CPU, to try the script where no GPU is (the
#   products and the transformer need one: skipped); figures mean nothing there
set -u
cd "$(dirname "$0")/../.." || exit 1
ldist=${LDIST:-./ldist}
batch=${BENCH_BATCH:-256}
mlp_steps=300; cnn_steps=150; warm=20
[ "${LDIST_BENCH_QUICK:-0}" = 1 ] && { mlp_steps=100; cnn_steps=50; }
[ -n "${BENCH_STEPS:-}" ] && { mlp_steps=$BENCH_STEPS; cnn_steps=$BENCH_STEPS; warm=2; }
dev=${BENCH_GPU_DEVICE:-cuda:0}
py=${PYTHON:-python3}
if [[ $dev == cpu:* ]]; then
  export REF_DEVICE=cpu
elif ! "$ldist" -e "for _, d in ipairs(tensor.devices()) do if d == 'cuda:0' then os.exit(0) end end os.exit(1)" 2>/dev/null; then
  echo "bench-gpu skipped: no GPU answers ($("$ldist" -e 'io.write(tensor.device_note())' 2>&1 | head -c 300))"
  exit 0
elif ! "$py" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  # ldist's rows still run: a lent GPU's minutes are not to be lost to a missing reference
  echo "bench-gpu: PyTorch with CUDA is not available to $py: ldist's rows only (PyTorch's read n/a)"
  no_ref=1
fi
echo "== $("$ldist" -e 'io.write(tensor.device_note())'); PyTorch $("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo missing)"

declare -A R L
run() {  # run KEY CMD... -> "samples/s loss"
  local out
  if [ -n "${no_ref:-}" ] && [[ $1 == torch-* ]]; then R[$1]=0; L[$1]=-; return; fi
  out=$("${@:2}" 2>"build/bench-gpu-$1.err" | tail -1)
  R[$1]=${out% *}; L[$1]=${out#* }
  [ -n "${R[$1]}" ] || { R[$1]=0; echo "bench-gpu: $1 failed:"; tail -5 "build/bench-gpu-$1.err"; }
}
mkdir -p build
# MODEL PREC: the rows, in order
rows=("mlp fp32" "cnn fp32" "resnet fp32" "mlp tf32" "cnn tf32" "resnet tf32" "resnet bf16")
for r in "${rows[@]}"; do
  read -r model prec <<<"$r"
  steps=$mlp_steps; [ $model = mlp ] || steps=$cnn_steps
  envs=()
  [ $prec = tf32 ] && envs+=(LDIST_CUDA_TF32=1)
  [ $prec = bf16 ] && envs+=(LDIST_BENCH_POLICY=mixed_bfloat16)
  run "ldist-$model-$prec" env "${envs[@]}" "$ldist" scripts/gpu/train_bench.lua $model "$batch" $steps $warm "$dev"
  run "torch-$model-$prec" "$py" scripts/gpu/ref_bench.py $model "$batch" $steps $warm $prec
done

# The BN-ResNet's FLOPs per image, forward: its convolutions (2 k^2 cin cout
# per output position) and the Dense layer; training counts 3x (the forward,
# and the input and weight gradients). BENCH_PEAK_* as for the transformer below.
resnet_fwd=$(( 2 * (9*1*16*784 + 9*16*16*196 + 9*16*16*196 + 16*16*196 + 9*16*32*49 + 9*32*32*49 + 16*32*49
  + 9*32*64*16 + 9*64*64*16 + 32*64*16 + 64*10) ))
declare -A PEAK=([fp32]=${BENCH_PEAK_FP32:-67} [tf32]=${BENCH_PEAK_TF32:-495} [bf16]=${BENCH_PEAK_BF16:-989})
# mfu RATE FLOPS_PER_ITEM PEAK_TFLOPS
mfu() { awk -v r="$1" -v f="$2" -v p="$3" 'BEGIN{ if (r > 0 && p > 0) printf "%.2f%%", 100 * r * f / (p * 1e12); else print "n/a" }'; }
printf '\n== training on Fashion-MNIST on the GPU, Adam, batch %s (samples/s; last loss; resnet: MFU at %.1f MFLOP/image)\n' \
  "$batch" "$(awk -v f=$resnet_fwd 'BEGIN{print 3 * f / 1e6}')"
printf '%-6s %-5s %18s %18s %10s %8s %8s\n' model prec ldist pytorch vs-pytorch mfu-ld mfu-pt
for r in "${rows[@]}"; do
  read -r model prec <<<"$r"
  l=${R[ldist-$model-$prec]:-0}; t=${R[torch-$model-$prec]:-0}
  m1=; m2=
  [ $model = resnet ] && { m1=$(mfu "$l" $((3 * resnet_fwd)) "${PEAK[$prec]}"); m2=$(mfu "$t" $((3 * resnet_fwd)) "${PEAK[$prec]}"); }
  printf '%-6s %-5s %10s (%5s) %10s (%5s) %9sx %8s %8s\n' $model $prec "$l" "${L[ldist-$model-$prec]:-?}" "$t" \
    "${L[torch-$model-$prec]:-?}" "$(awk -v a="$l" -v b="$t" 'BEGIN{ if (b > 0) printf "%.2f", a / b; else print "n/a" }')" "$m1" "$m2"
done
printf '(bf16: ldist under mixed_bfloat16, PyTorch eager under torch.autocast(dtype=torch.bfloat16))\n'
[[ $dev == cpu:* ]] && { echo "(on $dev: the products and the transformer need a GPU)"; exit 0; }

# ---- large products (TFLOP/s): where a bigger model is bound by the matrix units
printf '\n== matrix products N^3 on the GPU (TFLOP/s); bf16: bfloat16 operands, float32 sums, bfloat16 result\n'
printf '%-6s %-5s %10s %10s %10s\n' N prec ldist pytorch vs-pytorch
for n in 4096 8192; do
  reps=40; [ $n = 8192 ] && reps=10
  for prec in fp32 tf32 bf16; do
    l=n/a
    case $prec in
      fp32) l=$("$ldist" scripts/gpu/gemm_bench.lua $n $reps 2>/dev/null | tail -1) ;;
      tf32) l=$(LDIST_CUDA_TF32=1 "$ldist" scripts/gpu/gemm_bench.lua $n $reps 2>/dev/null | tail -1) ;;
      bf16) l=$("$ldist" scripts/gpu/gemm_bench.lua $n $reps cuda:0 bfloat16 2>/dev/null | tail -1) ;;
    esac
    t=; [ -n "${no_ref:-}" ] || t=$("$py" scripts/gpu/ref_gemm.py $n $reps $prec 2>/dev/null | tail -1)
    printf '%-6s %-5s %10s %10s %9sx\n' $n $prec "${l:-failed}" "${t:-failed}" \
      "$(awk -v a="$l" -v b="$t" 'BEGIN{ if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else print "n/a" }')"
  done
done

# ---- the GPT-style transformer (d_model 512, 8 heads, 6 blocks, context 256, batch 32)
tsteps=40; [ "${LDIST_BENCH_QUICK:-0}" = 1 ] && tsteps=20
run ldist-gpt-fp32 "$ldist" scripts/gpu/transformer_bench.lua 32 $tsteps 10
run ldist-gpt-tf32 env LDIST_CUDA_TF32=1 "$ldist" scripts/gpu/transformer_bench.lua 32 $tsteps 10
# bf16: the model under Keras's mixed_bfloat16 policy (fails, and says why, where the API is missing)
run ldist-gpt-bf16 env LDIST_BENCH_POLICY=mixed_bfloat16 "$ldist" scripts/gpu/transformer_bench.lua 32 $tsteps 10
for prec in fp32 tf32 bf16; do run "torch-gpt-$prec" "$py" scripts/gpu/ref_transformer.py 32 $tsteps 10 $prec; done
# the same with the fused attention kernel (opt-in until a GPU run has
# measured it: these rows decide whether it becomes the default)
run ldist-gpt-fp32-fused env LDIST_FUSED_ATTENTION=on "$ldist" scripts/gpu/transformer_bench.lua 32 $tsteps 10
run ldist-gpt-bf16-fused env LDIST_FUSED_ATTENTION=on LDIST_BENCH_POLICY=mixed_bfloat16 "$ldist" \
  scripts/gpu/transformer_bench.lua 32 $tsteps 10
# Model FLOPs utilisation: 6 N FLOPs per token for the weights' products
# (forward and backward) plus 12 L d T for attention's (PaLM's count), against
# the GPU's dense peak per precision: an H100/H200 SXM's by default (FP32 67,
# TF32 495, BF16 989 TFLOP/s); BENCH_PEAK_FP32/TF32/BF16 (TFLOP/s) for another GPU.
gpt_d=512 gpt_l=6 gpt_t=256 gpt_v=96
gpt_n=$(( gpt_l * (12 * gpt_d * gpt_d + 13 * gpt_d) + (gpt_v + gpt_t) * gpt_d + 2 * gpt_d + gpt_d * gpt_v + gpt_v ))
gpt_fpt=$(( 6 * gpt_n + 12 * gpt_l * gpt_d * gpt_t ))
printf '\n== GPT-style transformer, %.1fM weights, Adam, random ids (tokens/s; last loss; MFU at %.0f MFLOP/token)\n' \
  "$(awk -v n=$gpt_n 'BEGIN{print n / 1e6}')" "$(awk -v f=$gpt_fpt 'BEGIN{print f / 1e6}')"
printf '%-5s %18s %18s %10s %8s %8s\n' prec ldist pytorch vs-pytorch mfu-ld mfu-pt
for prec in fp32 tf32 bf16; do
  l=${R[ldist-gpt-$prec]:-0}; t=${R[torch-gpt-$prec]:-0}
  printf '%-5s %10s (%5s) %10s (%5s) %9sx %8s %8s\n' $prec "${l/#0/n/a}" "${L[ldist-gpt-$prec]:-?}" "$t" "${L[torch-gpt-$prec]:-?}" \
    "$(awk -v a="$l" -v b="$t" 'BEGIN{ if (a > 0 && b > 0) printf "%.2f", a / b; else print "n/a" }')" \
    "$(mfu "$l" $gpt_fpt "${PEAK[$prec]}")" "$(mfu "$t" $gpt_fpt "${PEAK[$prec]}")"
done
for prec in fp32 bf16; do
  l=${R[ldist-gpt-$prec-fused]:-0}; t=${R[torch-gpt-$prec]:-0}
  printf '%-5s %10s (%5s) %10s (%5s) %9sx %8s %8s   (LDIST_FUSED_ATTENTION=on)\n' $prec "${l/#0/n/a}" \
    "${L[ldist-gpt-$prec-fused]:-?}" "$t" "${L[torch-gpt-$prec]:-?}" \
    "$(awk -v a="$l" -v b="$t" 'BEGIN{ if (a > 0 && b > 0) printf "%.2f", a / b; else print "n/a" }')" \
    "$(mfu "$l" $gpt_fpt "${PEAK[$prec]}")" "$(mfu "$t" $gpt_fpt "${PEAK[$prec]}")"
done
printf '(bf16: ldist under mixed_bfloat16, PyTorch eager under torch.autocast(dtype=torch.bfloat16))\n'
