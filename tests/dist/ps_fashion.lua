-- Fashion-MNIST MLP under ParameterServerStrategy (2 workers, 1 ps) with model:fit
local D = ldist.distribute
local epochs, workers = tonumber(arg and arg[1]) or 8, tonumber(arg and arg[2]) or 2
tensor.seed(1)
local x_train, y_train = datasets.fashion_mnist.load("train")
local x_test, y_test = datasets.fashion_mnist.load("test")
local lc = D.LocalCluster { workers = workers, ps = 1 }
local s = D.ParameterServerStrategy(lc)
local model
s:scope(function()
  model = nn.Sequential { nn.Flatten(), nn.Dense(128, "relu"), nn.Dense(10) }
  model:build({ 28, 28 })
  model:compile { optimizer = optim.Adam { learning_rate = 1e-3 },
    loss = losses.SparseCategoricalCrossentropy { from_logits = true }, metrics = { "accuracy" } }
end)
local train = data.Dataset.from_tensor_slices(x_train, y_train):shuffle(60000, { seed = 1 }):batch(64)
local t0 = ldist.clock()
local h = model:fit(train, { epochs = epochs, steps_per_epoch = 938 })
local dt = ldist.clock() - t0
local st = D.ClusterCoordinator(s):stats()
local r = model:evaluate(data.Dataset.from_tensor_slices(x_test, y_test):batch(1000))
print(("# %d epochs x 938 steps in %.1f s (%.0f samples/s), applied %d, test accuracy %.4f"):format(epochs, dt,
  epochs * 938 * 64 / dt, st.applied, r.accuracy))
print((r.accuracy >= 0.85 and "ok" or "not ok") .. " - Fashion-MNIST MLP, 2 workers + 1 ps: test accuracy >= 0.85")
print((st.applied == epochs * 938 and "ok" or "not ok") .. " - every scheduled step applied once")
lc:shutdown()
