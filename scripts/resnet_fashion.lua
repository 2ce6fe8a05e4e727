-- resnet_fashion.lua - a small ResNet (Conv2D + BatchNormalization + Add,
-- GlobalAveragePooling2D; scripts/models/resnet.lua) on Fashion-MNIST with
-- model:fit; prints the test accuracy and the seconds of every epoch.
--   ldist scripts/resnet_fashion.lua [--mirrored] [--epochs N] [--train-rows N]
--                                    [--batch N] [--widths 16,32,64] [--blocks N] [--first-stride 1|2]
--                                    [--lr X] [--constant-lr] [--bn-momentum X] [--test-rows N] [--quiet]
-- Adam; the learning rate decays from --lr (1e-3) along a cosine to 0 over the
-- run (optim.schedules.CosineDecay) unless --constant-lr.
-- --mirrored: MirroredStrategy on 2 logical CPU devices (one core each), with
-- synchronized BatchNormalization (statistics of the global batch).
local opts = { mirrored = false, epochs = 10, train_rows = 60000, batch = 128,
               widths = { 16, 32, 64 }, blocks = 1, first_stride = 2, lr = 1e-3, test_rows = 10000, verbose = 1 }
local i = 1
while arg and arg[i] do
  local a = arg[i]
  local function val() i = i + 1; return (assert(arg[i], a .. " needs a value")) end
  if a == "--mirrored" then opts.mirrored = true
  elseif a == "--epochs" then opts.epochs = assert(tonumber(val()), "--epochs N")
  elseif a == "--train-rows" then opts.train_rows = assert(tonumber(val()), "--train-rows N")
  elseif a == "--test-rows" then opts.test_rows = assert(tonumber(val()), "--test-rows N")
  elseif a == "--batch" then opts.batch = assert(tonumber(val()), "--batch N")
  elseif a == "--blocks" then opts.blocks = assert(tonumber(val()), "--blocks N")
  elseif a == "--first-stride" then opts.first_stride = assert(tonumber(val()), "--first-stride N")
  elseif a == "--lr" then opts.lr = assert(tonumber(val()), "--lr X")
  elseif a == "--bn-momentum" then opts.bn_momentum = assert(tonumber(val()), "--bn-momentum X")
  elseif a == "--constant-lr" then opts.constant_lr = true
  elseif a == "--quiet" then opts.verbose = 0
  elseif a == "--widths" then
    opts.widths = {}
    for w in val():gmatch("%d+") do opts.widths[#opts.widths + 1] = tonumber(w) end
  else error("unknown argument " .. a .. " (see the header of scripts/resnet_fashion.lua)") end
  i = i + 1
end

local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
local resnet = dofile(here .. "/models/resnet.lua")

tensor.seed(1)
local x_train, y_train = datasets.fashion_mnist.load("train")   -- [60000,28,28] in [0,1]
local x_test, y_test = datasets.fashion_mnist.load("test")
local n, nt = math.min(opts.train_rows, x_train.shape[1]), math.min(opts.test_rows, x_test.shape[1])
if n < x_train.shape[1] then x_train, y_train = x_train:slice(0, 0, n), y_train:slice(0, 0, n) end
if nt < x_test.shape[1] then x_test, y_test = x_test:slice(0, 0, nt), y_test:slice(0, 0, nt) end
x_train = x_train:reshape(n, 28, 28, 1)     -- NHWC
x_test = x_test:reshape(nt, 28, 28, 1)

local strategy
if opts.mirrored then
  ldist.config.cpu_devices(2)
  strategy = distribute.MirroredStrategy()
end
local function make()
  model = resnet.build { widths = opts.widths, blocks = opts.blocks, first_stride = opts.first_stride,
    momentum = opts.bn_momentum, synchronized = opts.mirrored }
  model:compile {
    optimizer = optim.Adam { learning_rate = opts.constant_lr and opts.lr or optim.schedules.CosineDecay {
      initial_learning_rate = opts.lr, decay_steps = opts.epochs * math.ceil(n / opts.batch) } },
    loss = losses.SparseCategoricalCrossentropy { from_logits = true },
    metrics = { "accuracy" },
  }
end
if strategy then
  local _ <close> = strategy:scope()
  make()
else
  make()
end
local params = 0
for _, v in ipairs(model.trainable_variables) do params = params + v:numel() end
print(("resnet widths %s, %d block(s)/stage, %d trainable params; %s; %d train rows, batch %d, %d epochs"):format(
  table.concat(opts.widths, "/"), opts.blocks, params,
  strategy and ("MirroredStrategy on " .. strategy.num_replicas_in_sync .. " CPU devices, synchronized BN") or "one device",
  n, opts.batch, opts.epochs))

local train = data.Dataset.from_tensor_slices(x_train, y_train):shuffle(n, { seed = 1 }):batch(opts.batch):prefetch(2)
local test = data.Dataset.from_tensor_slices(x_test, y_test):batch(1000)
-- train seconds per epoch (without the test pass), then the test accuracy
local t0
epochs_log = {}
local timer = {
  on_epoch_begin = function() t0 = ldist.clock() end,
  on_epoch_end = function(_, epoch, logs, m)
    local dt = ldist.clock() - t0
    local r = m:evaluate(test, { verbose = 0 })
    epochs_log[epoch + 1] = { seconds = dt, accuracy = r.accuracy, loss = r.loss, train_accuracy = logs.accuracy }
    print(("epoch %d: %.1f s (%.0f samples/s)  train acc %.4f loss %.4f  test acc %.4f loss %.4f"):format(
      epoch + 1, dt, n / dt, logs.accuracy, logs.loss, r.accuracy, r.loss))
  end,
}
history = model:fit(train, { epochs = opts.epochs, callbacks = { timer }, verbose = opts.verbose })
local r = epochs_log[#epochs_log] or model:evaluate(test, { verbose = 0 })
local total = 0
for _, e in ipairs(epochs_log) do total = total + e.seconds end
print(("test accuracy %.4f  (loss %.4f); %.1f s per epoch"):format(r.accuracy, r.loss, total / math.max(#epochs_log, 1)))
return r.accuracy
