-- test_train.lua - real Fashion-MNIST (Debian's dataset-fashion-mnist):
-- short trainings must reach a meaningful bar, and the seed example's loss falls.
local T = dofile("tests/lua/testlib.lua")

local x_train, y_train = datasets.fashion_mnist.load("train")
local x_test, y_test = datasets.fashion_mnist.load("test")

T.test("the data set is the real one", function()
  T.eq(x_train.shape[1], 60000); T.eq(x_test.shape[1], 10000)
  T.eq(y_train:max():item(), 9)
end)

T.test("MLP: one epoch reaches 80% test accuracy", function()
  tensor.seed(1)
  local model = nn.Sequential{nn.Flatten(), nn.Dense(256, "relu"), nn.Dense(10)}
  model:compile{optimizer = optim.Adam(), loss = losses.SparseCategoricalCrossentropy{from_logits = true},
    metrics = {"accuracy"}}
  local train = data.Dataset.from_tensor_slices(x_train, y_train):shuffle(60000, {seed = 1}):batch(128)
  local h = model:fit(train, {epochs = 1, verbose = 0})
  local r = model:evaluate(data.Dataset.from_tensor_slices(x_test, y_test):batch(1000))
  T.ok(r.accuracy >= 0.80, ("test accuracy %.4f"):format(r.accuracy))
  T.ok(h.loss[1] < 0.7, ("training loss %.4f"):format(h.loss[1]))
end)

-- issue 30: the same MLP under mixed_bfloat16 (Dense products in bfloat16,
-- float32 variables, loss in float32) reaches the float32 run's test
-- accuracy within 0.005 (measured: 0.8468 float32, 0.8467 mixed_bfloat16)
T.test("MLP under mixed_bfloat16: the float32 run's test accuracy within 0.005", function()
  local function run(policy)
    mixed_precision.set_global_policy(policy)
    tensor.seed(1)
    local model = nn.Sequential{nn.Flatten(), nn.Dense(256, "relu"), nn.Dense(10)}
    mixed_precision.set_global_policy("float32")
    model:compile{optimizer = optim.Adam(), loss = losses.SparseCategoricalCrossentropy{from_logits = true},
      metrics = {"accuracy"}}
    local train = data.Dataset.from_tensor_slices(x_train, y_train):shuffle(60000, {seed = 1}):batch(128)
    model:fit(train, {epochs = 1, verbose = 0})
    T.eq(model.layers[2].compute_dtype, policy == "float32" and "float32" or "bfloat16")
    return model:evaluate(data.Dataset.from_tensor_slices(x_test, y_test):batch(1000)).accuracy
  end
  local a32, a16 = run("float32"), run("mixed_bfloat16")
  T.ok(a32 >= 0.80, ("float32 test accuracy %.4f"):format(a32))
  T.ok(math.abs(a16 - a32) <= 0.005, ("mixed_bfloat16 test accuracy %.4f, float32 %.4f"):format(a16, a32))
end)

T.test("CNN: 12000 examples reach 75% test accuracy", function()
  tensor.seed(2)
  local model = nn.Sequential{nn.Reshape{28, 28, 1}, nn.Conv2D(16, 3, {activation = "relu"}), nn.MaxPool2D(2),
    nn.Conv2D(32, 3, {activation = "relu"}), nn.MaxPool2D(2), nn.Flatten(), nn.Dense(64, "relu"), nn.Dense(10)}
  model:compile{optimizer = optim.Adam(), loss = losses.SparseCategoricalCrossentropy{from_logits = true},
    metrics = {"accuracy"}}
  local train = data.Dataset.from_tensor_slices(x_train:slice(0, 0, 12000), y_train:slice(0, 0, 12000)):batch(64)
  model:fit(train, {epochs = 1, verbose = 0})
  local r = model:evaluate(x_test:slice(0, 0, 2000), y_test:slice(0, 0, 2000), {batch_size = 500})
  T.ok(r.accuracy >= 0.75, ("test accuracy %.4f"):format(r.accuracy))
end)

T.test("the seed example runs and its loss falls", function()
  local f = assert(io.popen((arg and arg[-1] or "./ldist") .. " scripts/seed.lua 3 6000 2>&1"))
  local out = f:read("a"); f:close()
  local losses_seen = {}
  for v in out:gmatch("Epoch %d+: Loss = ([%d%.]+)") do losses_seen[#losses_seen + 1] = tonumber(v) end
  T.eq(#losses_seen, 3, out)
  T.ok(losses_seen[3] < losses_seen[1], out)
end)

T.test("the seed example runs under MirroredStrategy on 2 CPU devices and its loss falls", function()
  local f = assert(io.popen((arg and arg[-1] or "./ldist") .. " scripts/seed.lua 3 6000 2 2>&1"))
  local out = f:read("a"); f:close()
  T.ok(out:find("MirroredStrategy on cpu:0, cpu:1", 1, true), out)
  local seen = {}
  for v in out:gmatch("Epoch %d+: Loss = ([%d%.]+)") do seen[#seen + 1] = tonumber(v) end
  T.eq(#seen, 3, out)
  T.ok(seen[3] < seen[1], out)
end)

T.done()
