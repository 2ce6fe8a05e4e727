-- scripts/gpu/gemm_bench.lua N REPS [DEVICE]: TFLOP/s of an N x N x N float32
-- product (a:matmul(b)) on DEVICE (cuda:0), timed over REPS products after 3
-- untimed ones; LDIST_CUDA_TF32=1 lets cuBLAS use TF32. One line "tflops".
-- scripts/gpu/ref_gemm.py times PyTorch's.
local n, reps, dev = tonumber(arg[1]), tonumber(arg[2]), arg[3] or "cuda:0"
local cpu_n = dev:match("^cpu:(%d+)$")
if cpu_n and tonumber(cpu_n) > 0 then ldist.config.cpu_devices(tonumber(cpu_n) + 1) end
tensor.seed(0)
local a, b = tensor.normal(n, n):to(dev), tensor.normal(n, n):to(dev)
local function sync(t) return t:slice(0, 0, 1):slice(1, 0, 1):cpu():item() end
local c
for _ = 1, 3 do c = a:matmul(b) end
sync(c)
local t0 = ldist.clock()
for _ = 1, reps do c = a:matmul(b) end
sync(c)
print(("%.2f"):format(2 * n ^ 3 * reps / (ldist.clock() - t0) / 1e12))
