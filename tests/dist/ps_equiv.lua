-- ParameterServerStrategy with one worker and max_staleness=0 equals plain SGD
local D, nn, optim, tensor, data = ldist.distribute, ldist.nn, ldist.optim, ldist.tensor, ldist.data
tensor.seed(7)
local x, y = tensor.randn({96, 8}), tensor.randn({96, 3})
local function make()
  local m = nn.Sequential { nn.Dense { units = 16, activation = "relu" }, nn.Dense { units = 3 } }
  m:build({ 8 })
  return m
end
local lc = D.LocalCluster { workers = 1, ps = 2 }
local s = D.ParameterServerStrategy(lc, { variable_partitioner = D.partitioners.FixedShardsPartitioner { num_shards = 2 } })
local model
s:scope(function()
  model = make()
  model:compile { optimizer = optim.SGD { learning_rate = 0.05 }, loss = "mse" }
end)
local ref = make()
for i, v in ipairs(ref.trainable_variables) do v:assign(model.trainable_variables[i]) end
local ds = data.Dataset.from_tensor_slices({ x, y }):batch(16)
local coord = D.ClusterCoordinator(s, { max_staleness = 0 })
coord:place(model)
local pwd = coord:create_per_worker_dataset(ds)
local rvs = {}
for k = 1, 12 do rvs[k] = coord:schedule(D.ps_train_step, { pwd }) end
coord:join()
local ropt, rloss = optim.SGD { learning_rate = 0.05 }, ldist.losses.MeanSquaredError()
local it = ds
local k = 0
for e = 1, 2 do
  for b in ds do ref:train_step(b[1], b[2], rloss, ropt); k = k + 1 end
end
local got = s:fetch_variables()
local worst = 0
for i, v in ipairs(ref.trainable_variables) do
  local d = (got[i] - v):abs():max():item()
  if d > worst then worst = d end
end
print(("steps %d maxdiff %.3g loss1 %.4f loss12 %.4f"):format(k, worst, rvs[1]:fetch(), rvs[12]:fetch()))
print(worst < 1e-5 and "ok - one worker with max_staleness=0 equals plain SGD" or "not ok - one worker with max_staleness=0 equals plain SGD")
lc:shutdown()
