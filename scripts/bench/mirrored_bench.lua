-- mirrored_bench.lua MODE [STEPS [BATCH]]: MLP 784-512-256-10, Adam, global batch BATCH (256).
--   one1    1 replica on 1 device using 1 core
--   one2    1 replica on 1 device using every core
--   mirrorN MirroredStrategy, N replicas on N CPU devices (mirror2: 2), each
--           with its share of the cores (make bench-cores: 256 per replica)
--   allreduce  bus bandwidth of the in-process all-reduce over 2 devices, 1-64 MB
-- Prints "samples_per_s" (or lines "MB seconds busbw_GBps" for allreduce).
local mode, steps, batch = arg[1], tonumber(arg[2]) or 150, tonumber(arg[3]) or 256
local warm = 10
if mode == "allreduce" then
  ldist.config.cpu_devices(2)
  local C = ldist._distribute
  local comm = C.comm_new({"cpu:0", "cpu:1"})
  for _, mb in ipairs({1, 4, 8, 16, 32, 64}) do
    local n = mb * 1024 * 1024 // 4
    local a, b = tensor.ones(n), tensor.ones(n):to("cpu:1")
    for _ = 1, 2 do comm:all_reduce({{a}, {b}}); C.sync("cpu:1") end
    local reps = math.max(3, 256 // mb)
    local t0 = ldist.clock()
    for _ = 1, reps do comm:all_reduce({{a}, {b}}); C.sync("cpu:1") end
    local dt = (ldist.clock() - t0) / reps
    print(("%d %.6f %.2f"):format(mb, dt, (2 * (2 - 1) / 2) * mb * 1048576 / dt / 1e9))
  end
  return
end
tensor.seed(0)
local x, y = datasets.fashion_mnist.load("train")
local strategy = distribute.get_strategy()
if mode == "one1" then ldist.set_num_threads(1)
elseif mode:match("^mirror%d+$") then
  local n = tonumber(mode:match("%d+"))
  ldist.config.cpu_devices(n)
  local devs = {}
  for i = 0, n - 1 do devs[i + 1] = "cpu:" .. i end
  strategy = distribute.MirroredStrategy{devices = devs}
elseif mode ~= "one2" then
  error("mirrored_bench.lua: mode one1, one2, mirrorN or allreduce, not " .. tostring(mode))
end
local model
do
  local _ <close> = strategy:scope()
  model = nn.Sequential{nn.Flatten(), nn.Dense(512, "relu"), nn.Dense(256, "relu"), nn.Dense(10)}
  model:compile{optimizer = optim.Adam(), loss = losses.SparseCategoricalCrossentropy{from_logits = true}}
end
local ds = data.Dataset.from_tensor_slices(x, y):shuffle(60000, {seed = 0}):batch(batch, {drop_remainder = true})
local t0, t1
local timer = {on_train_batch_end = function(_, index)
  local step = index + 1   -- Keras passes the batch index, from 0
  if step == warm then t0 = ldist.clock() elseif step == warm + steps then t1 = ldist.clock() end
end}
do
  local _ <close> = strategy:scope()
  model:fit(ds:repeat_(), {epochs = 1, steps_per_epoch = warm + steps, verbose = 0, callbacks = {timer}})
end
print(("%.1f"):format(steps * batch / (t1 - t0)))
