-- scripts/bench/ps_bench.lua - ParameterServerStrategy (issue 8), called by scripts/bench/ps.sh
--   ldist scripts/bench/ps_bench.lua pushpull      -> "MB pull_MB/s push_MB/s" for 1..64 MB (1 ps)
--   ldist scripts/bench/ps_bench.lua train W STEPS -> "W samples/s" (Fashion-MNIST MLP, batch 128, 1 ps)
local D = ldist.distribute
local mode = arg[1] or "pushpull"
if mode == "pushpull" then
  local lc = D.LocalCluster { workers = 1, ps = 1 }
  for _, mb in ipairs({ 1, 4, 16, 64 }) do
    local s = D.ParameterServerStrategy(lc)
    local units = mb * 1024 * 1024 // (1024 * 4)
    local model
    s:scope(function()
      model = nn.Sequential { nn.Dense { units = units, use_bias = false } }
      model:build({ 1024 })
      model:compile { optimizer = optim.SGD { learning_rate = 0.01 }, loss = "mse" }
    end)
    s:_place(model)
    local g = {}
    for i, v in ipairs(model.trainable_variables) do g[i] = tensor.zeros(v.shape) end
    local best_pull, best_push = math.huge, math.huge
    for _ = 1, 3 do
      local t0 = ldist.clock(); s:fetch_variables(); best_pull = math.min(best_pull, ldist.clock() - t0)
      t0 = ldist.clock(); s:push_gradients(g); best_push = math.min(best_push, ldist.clock() - t0)
    end
    print(("%d %.0f %.0f"):format(mb, mb / best_pull, mb / best_push))
    -- the next size is another model: a fresh strategy on the same cluster
    s._coordinator = nil
  end
  lc:shutdown()
else
  local w, steps = tonumber(arg[2]) or 1, tonumber(arg[3]) or 200
  tensor.seed(1)
  local x, y = datasets.fashion_mnist.load("train")
  local lc = D.LocalCluster { workers = w, ps = 1 }
  local s = D.ParameterServerStrategy(lc)
  local model
  s:scope(function()
    model = nn.Sequential { nn.Flatten(), nn.Dense(128, "relu"), nn.Dense(10) }
    model:build({ 28, 28 })
    model:compile { optimizer = optim.Adam { learning_rate = 1e-3 }, loss = losses.SparseCategoricalCrossentropy { from_logits = true } }
  end)
  local train = data.Dataset.from_tensor_slices(x, y):shuffle(60000, { seed = 1 }):batch(128)
  model:fit(train, { epochs = 1, steps_per_epoch = 10, verbose = 0 })      -- warm up
  local t0 = ldist.clock()
  model:fit(train, { epochs = 1, steps_per_epoch = steps, verbose = 0 })
  print(("%d %.0f"):format(w, steps * 128 / (ldist.clock() - t0)))
  lc:shutdown()
end
