-- scripts/gpu/train_bench.lua MODEL BATCH STEPS WARMUP [DEVICE]: samples/s of
-- model:fit on Fashion-MNIST (Adam) on a GPU, the model placed there by a
-- one-device MirroredStrategy; one line "samples_per_s final_loss".
-- The same models and data flow as scripts/bench/train_bench.lua (the CPU
-- bench): batches are cut on the host and copied to the device each step.
-- MODEL: mlp, cnn, or resnet (the BN-ResNet of scripts/resnet_fashion.lua,
-- scripts/models/resnet.lua: 14x14x16, 7x7x32, 4x4x64, one block per stage).
-- LDIST_BENCH_POLICY=mixed_bfloat16 builds it under that Keras dtype policy
-- (scripts/gpu/bench_policy.lua); DEVICE cpu:N tries it on logical CPUs.
-- LDIST_BENCH_METRICS=accuracy compiles it with that metric (the step's
-- predictions and labels are then read after it, one step late).
local which, batch, steps, warm = arg[1], tonumber(arg[2]), tonumber(arg[3]), tonumber(arg[4])
local dev = arg[5] or "cuda:0"
dofile("scripts/gpu/bench_policy.lua").apply(dev)
tensor.seed(0)
local x, y = datasets.fashion_mnist.load("train")
local strategy = distribute.MirroredStrategy { devices = { dev } }
local model
local _ <close> = strategy:scope()
if which == "mlp" then
  model = nn.Sequential { nn.Flatten(), nn.Dense(512, "relu"), nn.Dense(256, "relu"), nn.Dense(10) }
elseif which == "resnet" then
  x = x:reshape(x.shape[1], 28, 28, 1)
  model = dofile("scripts/models/resnet.lua").build { widths = { 16, 32, 64 }, blocks = 1, first_stride = 2 }
elseif which == "cnn" then
  model = nn.Sequential { nn.Reshape { 28, 28, 1 }, nn.Conv2D(32, 3, { activation = "relu" }), nn.MaxPool2D(2),
    nn.Conv2D(64, 3, { activation = "relu" }), nn.MaxPool2D(2), nn.Flatten(), nn.Dense(128, "relu"), nn.Dense(10) }
else
  error("train_bench: MODEL is mlp, cnn or resnet, not " .. tostring(which))
end
local metrics = os.getenv("LDIST_BENCH_METRICS")
model:compile { optimizer = optim.Adam(), loss = losses.SparseCategoricalCrossentropy { from_logits = true },
  metrics = metrics and metrics ~= "" and { metrics } or nil }
local ds = data.Dataset.from_tensor_slices(x, y):shuffle(60000, { seed = 0 }):batch(batch, { drop_remainder = true }):prefetch(2)
-- the clock starts after `warm` steps (allocator cache, cuBLAS handle, kernels loaded)
local t0, t1, last
local timer = { on_train_batch_end = function(_, index, logs)
  local step = index + 1   -- Keras passes the batch index, from 0
  if step == warm then t0 = ldist.clock() elseif step == warm + steps then t1 = ldist.clock() end
  last = logs and logs.loss
end }
model:fit(ds:repeat_(), { epochs = 1, steps_per_epoch = warm + steps, verbose = 0, callbacks = { timer } })
print(("%.1f %.4f"):format(steps * batch / (t1 - t0), last or 0 / 0))
