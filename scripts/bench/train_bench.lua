-- train_bench.lua MODEL BATCH STEPS WARMUP: samples/s of model:fit on Fashion-MNIST
-- (Adam), printed as one line "samples_per_s peak_rss_mb".
local which, batch, steps, warm = arg[1], tonumber(arg[2]), tonumber(arg[3]), tonumber(arg[4])
tensor.seed(0)
local x, y = datasets.fashion_mnist.load("train")
local model
if which == "mlp" then
  model = nn.Sequential{nn.Flatten(), nn.Dense(512, "relu"), nn.Dense(256, "relu"), nn.Dense(10)}
else
  model = nn.Sequential{nn.Reshape{28, 28, 1}, nn.Conv2D(32, 3, {activation = "relu"}), nn.MaxPool2D(2),
    nn.Conv2D(64, 3, {activation = "relu"}), nn.MaxPool2D(2), nn.Flatten(), nn.Dense(128, "relu"), nn.Dense(10)}
end
model:compile{optimizer = optim.Adam(), loss = losses.SparseCategoricalCrossentropy{from_logits = true}}
local ds = data.Dataset.from_tensor_slices(x, y):shuffle(60000, {seed = 0}):batch(batch, {drop_remainder = true}):prefetch(2)
-- one fit; the clock starts after `warm` steps (allocator, caches, shuffle buffer)
local t0, t1
local timer = {on_train_batch_end = function(_, step)
  if step == warm then t0 = ldist.clock() elseif step == warm + steps then t1 = ldist.clock() end
end}
model:fit(ds:repeat_(), {epochs = 1, steps_per_epoch = warm + steps, verbose = 0, callbacks = {timer}})
local dt = t1 - t0
local rss = 0
for line in io.lines("/proc/self/status") do
  local v = line:match("^VmHWM:%s+(%d+)")
  if v then rss = tonumber(v) / 1024 end
end
print(("%.1f %.1f"):format(steps * batch / dt, rss))
