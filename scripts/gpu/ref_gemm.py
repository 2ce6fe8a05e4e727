"""scripts/gpu/ref_gemm.py N REPS fp32|tf32|bf16 - TFLOP/s of PyTorch's N^3
product on cuda:0 (torch.matmul; bf16 inputs accumulate in float32), timed as
scripts/gpu/gemm_bench.lua times ldist's. One line "tflops"."""
import sys, time
import torch

n, reps, prec = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
torch.backends.cuda.matmul.allow_tf32 = prec == "tf32"
dt = torch.bfloat16 if prec == "bf16" else torch.float32
torch.manual_seed(0)
a = torch.randn(n, n, device="cuda:0").to(dt)
b = torch.randn(n, n, device="cuda:0").to(dt)
for _ in range(3):
    c = a @ b
torch.cuda.synchronize()
t0 = time.perf_counter()
for _ in range(reps):
    c = a @ b
torch.cuda.synchronize()
print("%.2f" % (2 * n ** 3 * reps / (time.perf_counter() - t0) / 1e12))
