-- Variables larger than one shard are split across 2 ps tasks and reassembled
-- exactly: fetch equals the checkpoint the ps tasks wrote.
local D, nn, optim, tensor, data = ldist.distribute, ldist.nn, ldist.optim, ldist.tensor, ldist.data
local dir = assert(arg and arg[1], "usage: ps_shards.lua DIR")
local function say(ok, name) print((ok and "ok - " or "not ok - ") .. name) end
tensor.seed(5)
local x, y = tensor.randn({ 256, 784 }), tensor.randn({ 256, 10 })
local lc = D.LocalCluster { workers = 2, ps = 2 }
local s = D.ParameterServerStrategy(lc, { variable_partitioner =
  D.partitioners.MinSizePartitioner { min_shard_bytes = 64 * 1024, max_shards = 2 } })
local model
s:scope(function()
  model = nn.Sequential { nn.Dense { units = 256, activation = "relu" }, nn.Dense { units = 10 } }
  model:build({ 784 })
  model:compile { optimizer = optim.Adam { learning_rate = 1e-3 }, loss = "mse" }
end)
local coord = D.ClusterCoordinator(s)
model:fit(data.Dataset.from_tensor_slices({ x, y }):batch(32), { epochs = 1, steps_per_epoch = 20, verbose = 0 })
local split = {}
for _, sh in ipairs(s._layout) do split[sh.var] = (split[sh.var] or 0) + 1 end
local ps_of = {}
for _, sh in ipairs(s._layout) do if sh.var == 1 then ps_of[#ps_of + 1] = sh.ps end end
say(split[1] == 2 and ps_of[1] ~= ps_of[2], "the 784x256 kernel is split in 2 shards on 2 ps tasks")
say((split[2] or 0) == 1, "a small variable stays whole")
s:checkpoint(dir)
local fetched = {}
for i, v in ipairs(model.trainable_variables) do fetched[i] = coord:fetch(v) end
local files = {}
for p = 0, 1 do
  local t = ldist.io.load_safetensors(("%s/ps-%d.safetensors"):format(dir, p))
  for k, v in pairs(t) do files[k] = v end
end
local exact = true
for i, f in ipairs(fetched) do
  local parts = {}
  for j = 0, 9 do local t = files[("v%d/part%d"):format(i, j)]; if t then parts[#parts + 1] = t end end
  local whole = #parts == 1 and parts[1] or tensor.concat(parts, 0)
  if table.concat(whole.shape, "x") ~= table.concat(f.shape, "x") or (whole - f):abs():max():item() ~= 0 then exact = false end
  -- the local model got the trained weights too
  if (model.trainable_variables[i] - f):abs():max():item() ~= 0 then exact = false end
end
say(exact, "fetch equals the saved checkpoint, exactly")
lc:shutdown()
-- a new cluster on that checkpoint: the shards and Adam's slots come back
local lc2 = D.LocalCluster { workers = 1, ps = 2 }
local s2 = D.ParameterServerStrategy(lc2, { checkpoint_dir = dir, variable_partitioner =
  D.partitioners.MinSizePartitioner { min_shard_bytes = 64 * 1024, max_shards = 2 } })
local m2
s2:scope(function()
  m2 = nn.Sequential { nn.Dense { units = 256, activation = "relu" }, nn.Dense { units = 10 } }
  m2:build({ 784 })
  m2:compile { optimizer = optim.Adam { learning_rate = 1e-3 }, loss = "mse" }
end)
D.ClusterCoordinator(s2):place(m2)
local same = s2.restored
for i, f in ipairs(s2:fetch_variables()) do if (f - fetched[i]):abs():max():item() ~= 0 then same = false end end
say(same and s2.restored_optimizer, "a restarted cluster resumes the shards and the optimizer's slots")
lc2:shutdown()
-- a constrained kernel needs its whole self on one ps task: partitioning it is an error naming it
local lc3 = D.LocalCluster { workers = 1, ps = 2 }
local s3 = D.ParameterServerStrategy(lc3, { variable_partitioner =
  D.partitioners.MinSizePartitioner { min_shard_bytes = 64 * 1024, max_shards = 2 } })
local m3
s3:scope(function()
  m3 = nn.Sequential { nn.Dense { units = 256, kernel_constraint = ldist.constraints.MaxNorm(1) }, nn.Dense { units = 10 } }
  m3:build({ 784 })
  m3:compile { optimizer = optim.SGD(0.1), loss = "mse" }
end)
local c3 = D.ClusterCoordinator(s3)
local okc, errc = pcall(c3.place, c3, m3)
say(not okc and tostring(errc):find("variable 1 has a MaxNorm constraint, which needs the whole variable", 1, true),
  "a constrained variable is not partitioned: " .. tostring(errc))
lc3:shutdown()
