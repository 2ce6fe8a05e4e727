-- multiworker_bench.lua MODE [STEPS] - run under `ldist launch -n K`.
--   allreduce [mpi]  ring (or MPI) all-reduce across the processes, 1-64 MB: rank 0 prints
--              "K MB seconds busbw_GBps" (busbw = 2(K-1)/K x bytes / time, as nccl-tests)
--   train      Fashion-MNIST MLP 784-512-256-10, Adam, global batch 256 under
--              MultiWorkerMirroredStrategy: rank 0 prints samples/s
--   train STEPS PER_WORKER: global batch PER_WORKER x K (weak scaling, make bench-cores)
local mode, steps = arg[1], tonumber(arg[2]) or 100
-- allreduce COMMUNICATION: "mpi" under mpirun measures MPI_Allreduce instead of the ring
local s = distribute.MultiWorkerMirroredStrategy { timeout = 60, communication = mode == "allreduce" and arg[2] or nil }
local k, rank = s.num_replicas_in_sync, s.cluster_resolver.rank
local C = s._c

if mode == "allreduce" then
  for _, mb in ipairs({ 1, 4, 16, 64 }) do
    local t = tensor.ones(mb * 1048576 // 4)
    for _ = 1, 2 do s:_all_reduce({ t }) end
    local reps = math.max(4, 192 // mb)
    local best = math.huge
    for _ = 1, 3 do                     -- best of 3 rounds: the machine is shared
      C:barrier()
      local t0 = ldist.clock()
      for _ = 1, reps do s:_all_reduce({ t }) end
      best = math.min(best, (ldist.clock() - t0) / reps)
    end
    if rank == 0 then print(("%d %d %.6f %.3f"):format(k, mb, best, 2 * (k - 1) / k * mb * 1048576 / best / 1e9)) end
  end
  return
end

tensor.seed(0)
local x, y = datasets.fashion_mnist.load("train")
local model
do
  local _ <close> = s:scope()
  model = nn.Sequential { nn.Flatten(), nn.Dense(512, "relu"), nn.Dense(256, "relu"), nn.Dense(10) }
  model:compile { optimizer = optim.Adam(), loss = losses.SparseCategoricalCrossentropy { from_logits = true } }
end
local batch = arg[3] and tonumber(arg[3]) * k or 256
local ds = data.Dataset.from_tensor_slices(x, y):shuffle(60000, { seed = 0 }):batch(batch, { drop_remainder = true })
local warm = 10
model:fit(ds, { epochs = 1, steps_per_epoch = warm, verbose = 0 })
C:barrier()
local t0 = ldist.clock()
model:fit(ds, { epochs = 1, steps_per_epoch = steps, verbose = 0 })
C:barrier()
local dt = ldist.clock() - t0
if rank == 0 then print(("%.1f"):format(steps * batch / dt)) end
