-- test_train.lua - a short Fashion-MNIST training on the GPU whose losses
-- match the same training on the CPU: the seed's custom loop (GradientTape,
-- Adam) on an MLP, a small CNN, and Keras fit. The model is placed on the
-- GPU by a one-device MirroredStrategy, as TF places it on a GPU.
local G = dofile("tests/ops/devlib.lua")
local T, dev = G.T, G.dev

local x_all, y_all = datasets.fashion_mnist.load("train")
local n_train = 4096
local x_train, y_train = x_all:slice(0, 0, n_train), y_all:slice(0, 0, n_train)
local x_test, y_test = datasets.fashion_mnist.load("test")
x_test, y_test = x_test:slice(0, 0, 1000), y_test:slice(0, 0, 1000)

local function mlp() return nn.Sequential { nn.Flatten(), nn.Dense(128, "relu"), nn.Dense(10) } end
local function cnn()
  return nn.Sequential { nn.Reshape { 28, 28, 1 }, nn.Conv2D(16, 3, { activation = "relu" }), nn.MaxPool2D(2),
    nn.Conv2D(32, 3, { activation = "relu" }), nn.MaxPool2D(2), nn.Flatten(), nn.Dense(10) }
end

-- the seed example's loop; strategy nil = the CPU, no strategy
local function custom_loop(make, on_gpu, steps, batch)
  local strategy = on_gpu and distribute.MirroredStrategy { devices = { dev } } or distribute.get_strategy()
  local model, optimizer
  tensor.seed(3)
  do
    local _ <close> = strategy:scope()
    model = make()
    optimizer = optim.Adam { learning_rate = 1e-3 }
  end
  local loss_object = losses.SparseCategoricalCrossentropy { from_logits = true }
  local ds = data.Dataset.from_tensor_slices(x_train, y_train):batch(batch)
  local function step(inputs)
    local tape = autograd.GradientTape()
    local loss = tape:record(function() return loss_object(inputs[2], model(inputs[1], { training = true })) end)
    optimizer:apply_gradients(tape:gradient(loss, model.trainable_variables), model.trainable_variables)
    return loss
  end
  local losses_seen = {}
  local dist = strategy:experimental_distribute_dataset(ds)
  for inputs in dist do
    losses_seen[#losses_seen + 1] = strategy:reduce("sum", strategy:run(step, inputs))
    if #losses_seen == steps then break end
  end
  for _, v in ipairs(model.trainable_variables) do
    if on_gpu then T.eq(v.device, dev, "a variable is not on " .. dev) end
  end
  return losses_seen, model, strategy
end

local function compare_losses(gl, cl, tol, what)
  T.eq(#gl, #cl, what .. ": steps")
  local worst = 0
  for i = 1, #cl do
    local r = math.abs(gl[i] - cl[i]) / math.max(1e-6, math.abs(cl[i]))
    worst = math.max(worst, r)
    if not (r <= tol) then
      error(("%s: step %d loss %.7g on %s, %.7g on the CPU (relative %.2g > %.2g)")
        :format(what, i, gl[i], dev, cl[i], r, tol), 2)
    end
  end
  print(("# %s: %d steps, first loss %.5f, last %.5f, worst relative difference %.2g")
    :format(what, #cl, cl[1], cl[#cl], worst))
end

T.test("MLP, custom loop: the GPU's losses follow the CPU's", function()
  local gl, gm = custom_loop(mlp, true, 32, 128)
  local cl, cm = custom_loop(mlp, false, 32, 128)
  compare_losses(gl, cl, 2e-3, "MLP")
  T.ok(cl[#cl] < cl[1] * 0.8, "the loss did not go down")
  -- the trained models agree on the test images
  local pg, pc = gm(x_test:to(dev)):argmax(1):cpu(), cm(x_test):argmax(1)
  local agree = pg:eq(pc):astype("float32"):mean():item()
  T.ok(agree >= 0.98, ("the models agree on %.1f%% of the test images"):format(agree * 100))
end)

T.test("CNN (conv, pooling), custom loop: the GPU's losses follow the CPU's", function()
  local gl = custom_loop(cnn, true, 12, 64)
  local cl = custom_loop(cnn, false, 12, 64)
  compare_losses(gl, cl, 2e-3, "CNN")
end)

T.test("Keras fit under the one-GPU strategy matches fit on the CPU", function()
  local function fit(on_gpu)
    local strategy = on_gpu and distribute.MirroredStrategy { devices = { dev } } or distribute.get_strategy()
    tensor.seed(4)
    local model
    do
      local _ <close> = strategy:scope()
      model = mlp()
      model:compile { optimizer = optim.Adam(), loss = losses.SparseCategoricalCrossentropy { from_logits = true } }
      local ds = data.Dataset.from_tensor_slices(x_train, y_train):shuffle(n_train, { seed = 1 }):batch(256)
      model:fit(ds, { epochs = 2, verbose = 0 })
    end
    return model.history.loss
  end
  local gh, ch = fit(true), fit(false)
  compare_losses(gh, ch, 2e-3, "fit, loss per epoch")
end)

T.done()
