-- scripts/gpu/gemm_bench.lua N REPS [DEVICE] [DTYPE]: TFLOP/s of an N x N x N
-- product (a:matmul(b)) on DEVICE (cuda:0), timed over REPS products after 3
-- untimed ones. DTYPE float32 (default), bfloat16 or float16: half operands
-- (astype) give a half product with float32 sums (gemm_half: cublasGemmEx on
-- the tensor cores) and a result in their dtype, as PyTorch's bf16 matmul.
-- LDIST_CUDA_TF32=1 lets cuBLAS use TF32 for float32. One line "tflops".
-- scripts/gpu/ref_gemm.py times PyTorch's.
local n, reps, dev = tonumber(arg[1]), tonumber(arg[2]), arg[3] or "cuda:0"
local dtype = arg[4] or "float32"
local cpu_n = dev:match("^cpu:(%d+)$")
if cpu_n and tonumber(cpu_n) > 0 then ldist.config.cpu_devices(tonumber(cpu_n) + 1) end
tensor.seed(0)
local a, b = tensor.normal(n, n):astype(dtype):to(dev), tensor.normal(n, n):astype(dtype):to(dev)
local function sync(t) return t:slice(0, 0, 1):slice(1, 0, 1):astype("float32"):cpu():item() end
local c
for _ = 1, 3 do c = a:matmul(b) end
sync(c)
local t0 = ldist.clock()
for _ = 1, reps do c = a:matmul(b) end
sync(c)
print(("%.2f"):format(2 * n ^ 3 * reps / (ldist.clock() - t0) / 1e12))
