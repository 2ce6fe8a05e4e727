-- test_sync_bn.lua - the lesson of synchronized BatchNorm, by numbers: under
-- MirroredStrategy on 2 CPU devices, a model with BatchNormalization{synchronized
-- = true} trains exactly as on one device at the same global batch (the
-- statistics are the global batch's), and without it it does not (each replica
-- normalizes its own half, as TF does).
local T = dofile("tests/lua/testlib.lua")
ldist.config.cpu_devices(2)

local function data_set()
  tensor.seed(4)
  local x = tensor.normal(64, 6) * 3 + 1
  local y = x:slice(1, 0, 3):argmax(1):astype("int64")
  return data.Dataset.from_tensor_slices(x, y):batch(16)
end

local function train(strategy, synchronized)
  local model
  tensor.seed(9)
  local function make()
    model = nn.Sequential { nn.Dense(8, { use_bias = false }), nn.BatchNormalization { synchronized = synchronized },
      nn.Activation("tanh"), nn.Dense(3) }
    model:compile { optimizer = optim.SGD { learning_rate = 0.1 }, loss = losses.SparseCategoricalCrossentropy { from_logits = true } }
  end
  if strategy then
    local _ <close> = strategy:scope()
    make()
  else
    make()
  end
  model:fit(data_set(), { epochs = 3, verbose = 0 })
  return model:get_weights()
end

local function maxdiff(a, b)
  local m = 0
  for i = 1, #a do m = math.max(m, (a[i] - b[i]):abs():max():item()) end
  return m
end

T.test("synchronized BatchNorm: 2 replicas equal one device; local BatchNorm does not", function()
  local one = train(nil, true)
  local mirrored = distribute.MirroredStrategy { devices = { "cpu:0", "cpu:1" } }
  local sync = train(mirrored, true)
  local local_bn = train(mirrored, false)
  local d_sync, d_local = maxdiff(sync, one), maxdiff(local_bn, train(nil, false))
  print(("# max |w - one device|: synchronized %.3g, local %.3g"):format(d_sync, d_local))
  T.ok(d_sync < 1e-5, "synchronized BatchNorm differs from one device by " .. d_sync)
  T.ok(d_local > 1e-3, "local BatchNorm should differ from one device (each replica normalizes its half), got " .. d_local)
  -- the moving statistics are those of the global batches, on every replica
  local mm = sync[4]
  T.ok(maxdiff({ mm }, { one[4] }) < 1e-5, "moving mean")
end)

T.done()
