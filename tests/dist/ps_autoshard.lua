-- The parameter server honours a dataset's auto-shard policy
-- (ds:with_options) in create_per_worker_dataset: FILE gives each of the 2
-- workers its own files of a TextLineDataset, DATA every other element, OFF
-- all of it. Each scheduled function drains its worker's iterator, so the
-- list it returns is that worker's stream (whichever worker ran it).
local D, data = ldist.distribute, ldist.data
local dir = assert(arg and arg[1], "usage: ps_autoshard.lua DIR")
local function say(ok, name) print((ok and "ok - " or "not ok - ") .. name) end
local files = dofile("tests/lua/datalib.lua").number_files(dir)
local lc = D.LocalCluster { workers = 2, ps = 1 }
local s = D.ParameterServerStrategy(lc)
local model
s:scope(function()
  model = ldist.nn.Sequential { ldist.nn.Dense { units = 1 } }
  model:build({ 1 })
  model:compile { optimizer = ldist.optim.SGD { learning_rate = 0.1 }, loss = "mse" }
end)
local coord = D.ClusterCoordinator(s)
coord:place(model)
local function with(policy)
  local ds = data.TextLineDataset(files):map(function(l) return tonumber(l) end)
  if not policy then return ds end
  local o = data.Options()
  o.experimental_distribute.auto_shard_policy = policy
  return ds:with_options(o)
end
local function drain(it, n)
  local out = {}
  for i = 1, n do out[i] = ("%d"):format(it()[1]:item()) end
  return table.concat(out, " ")
end
local function streams(policy, n)
  local pw = coord:create_per_worker_dataset(with(policy))
  local rv = {}
  for i = 1, 4 do rv[i] = coord:schedule(drain, { args = { pw, n } }) end
  coord:join()
  local got = {}
  for i = 1, 4 do got[i] = rv[i]:fetch() end
  return got
end
local function all_in(got, allowed)
  for _, g in ipairs(got) do
    local ok = false
    for _, a in ipairs(allowed) do ok = ok or g == a end
    if not ok then return false, g end
  end
  return true
end
-- the streams TF's auto-shard gives worker 0 and worker 1 of 2 (tests/dist/api.lua)
local ok, bad = all_in(streams(nil, 6), { "0 1 2 20 21 22", "10 11 12 30 31 32" })
say(ok, "AUTO on a TextLineDataset: each worker reads its own files " .. tostring(bad or ""))
ok, bad = all_in(streams("FILE", 6), { "0 1 2 20 21 22", "10 11 12 30 31 32" })
say(ok, "FILE: each worker reads its own files " .. tostring(bad or ""))
ok, bad = all_in(streams("DATA", 6), { "0 2 11 20 22 31", "1 10 12 21 30 32" })
say(ok, "DATA: each worker every other element " .. tostring(bad or ""))
ok, bad = all_in(streams("OFF", 12), { "0 1 2 10 11 12 20 21 22 30 31 32" })
say(ok, "OFF: each worker all of it " .. tostring(bad or ""))
local o = data.Options()
o.experimental_distribute.auto_shard_policy = "FILE"
local e = select(2, pcall(coord.create_per_worker_dataset, coord, data.Dataset.range(8):with_options(o)))
say(tostring(e):find("cannot be split by files: its source %(range%) reads no files") ~= nil, "FILE on a range is an error: " .. tostring(e))
lc:shutdown()
os.execute("rm -rf " .. dir)
