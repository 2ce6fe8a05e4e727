-- train_bench.lua MODEL BATCH STEPS WARMUP: samples/s of model:fit on Fashion-MNIST
-- (Adam), printed as one line "samples_per_s peak_rss_mb".
local which, batch, steps, warm = arg[1], tonumber(arg[2]), tonumber(arg[3]), tonumber(arg[4])
tensor.seed(0)

-- one fit of warm + steps batches of the endless dataset ds; the clock starts
-- after `warm` steps (allocator, caches, shuffle buffer); prints the rate and
-- the peak RSS
local function measure(model, ds)
  local t0, t1
  local timer = {on_train_batch_end = function(_, index)
  local step = index + 1   -- Keras passes the batch index, from 0
    if step == warm then t0 = ldist.clock() elseif step == warm + steps then t1 = ldist.clock() end
  end}
  model:fit(ds, {epochs = 1, steps_per_epoch = warm + steps, verbose = 0, callbacks = {timer}})
  local rss = 0
  for line in io.lines("/proc/self/status") do
    local v = line:match("^VmHWM:%s+(%d+)")
    if v then rss = tonumber(v) / 1024 end
  end
  print(("%.1f %.1f"):format(steps * batch / (t1 - t0), rss))
end
-- ---- transformer (char-level, scripts/models/char_transformer.lua) -------------
-- MODEL "transformer": BATCH sequences of 64 characters of
-- /usr/share/common-licenses/GPL-3 (every window, shuffled); d_model 64, 4 heads,
-- 2 blocks; samples/s counts sequences (x64 for characters/s).
if which == "transformer" then
  local CT = dofile("scripts/models/char_transformer.lua")
  local f = assert(io.open("/usr/share/common-licenses/GPL-3", "rb")); local text = f:read("a"); f:close()
  local vocab = CT.vocab(text)
  local tx, ty = CT.windows(CT.encode(vocab, text), 64, 1)
  local tmodel = CT.build{vocab_size = vocab.size, context = 64, d_model = 64, heads = 4, layers = 2}
  tmodel:compile{optimizer = optim.Adam(), loss = losses.SparseCategoricalCrossentropy{from_logits = true}}
  local tds = data.Dataset.from_tensor_slices(tx, ty):shuffle(tx.shape[1], {seed = 0})
    :batch(batch, {drop_remainder = true}):repeat_():prefetch(2)
  return measure(tmodel, tds)
end
-- ---- end transformer -----------------------------------------------------------
-- ---- resnet (BN-ResNet, scripts/models/resnet.lua) ---------------------------
-- MODEL "resnet": the model of scripts/resnet_fashion.lua: stem conv 3x3 16 + BN
-- + relu at 28x28, one residual block per stage at 14x14x16, 7x7x32, 4x4x64
-- (conv-BN-relu-conv-BN + projection shortcut, Add, relu), GAP, Dense(10).
if which == "resnet" then
  local resnet = dofile("scripts/models/resnet.lua")
  local rx, ry = datasets.fashion_mnist.load("train")
  rx = rx:reshape(rx.shape[1], 28, 28, 1)
  local rmodel = resnet.build{widths = {16, 32, 64}, blocks = 1, first_stride = 2}
  rmodel:compile{optimizer = optim.Adam(), loss = losses.SparseCategoricalCrossentropy{from_logits = true}}
  local rds = data.Dataset.from_tensor_slices(rx, ry):shuffle(60000, {seed = 0})
    :batch(batch, {drop_remainder = true}):prefetch(2)
  return measure(rmodel, rds:repeat_())
end
-- ---- end resnet ----------------------------------------------------------------
local x, y = datasets.fashion_mnist.load("train")
local model
if which == "mlp" then
  model = nn.Sequential{nn.Flatten(), nn.Dense(512, "relu"), nn.Dense(256, "relu"), nn.Dense(10)}
else
  model = nn.Sequential{nn.Reshape{28, 28, 1}, nn.Conv2D(32, 3, {activation = "relu"}), nn.MaxPool2D(2),
    nn.Conv2D(64, 3, {activation = "relu"}), nn.MaxPool2D(2), nn.Flatten(), nn.Dense(128, "relu"), nn.Dense(10)}
end
model:compile{optimizer = optim.Adam(), loss = losses.SparseCategoricalCrossentropy{from_logits = true}}
-- BENCH_PREFETCH=0: no prefetch thread (the batch is gathered in the step,
-- on the issuing thread): make bench-cores compares the two, since on a
-- machine whose every core runs the device's pool the prefetch thread
-- shares a core with one of its threads
local ds = data.Dataset.from_tensor_slices(x, y):shuffle(60000, {seed = 0}):batch(batch, {drop_remainder = true})
if os.getenv("BENCH_PREFETCH") ~= "0" then ds = ds:prefetch(2) end
measure(model, ds:repeat_())
