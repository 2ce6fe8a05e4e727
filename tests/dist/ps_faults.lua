-- kill -9 of a worker mid-training: its functions run again on the other;
-- every scheduled step is applied (duplicates counted); then a checkpoint,
-- a dead ps, and a restarted cluster that resumes from the checkpoint.
local D, nn, optim, tensor, data = ldist.distribute, ldist.nn, ldist.optim, ldist.tensor, ldist.data
local dir = assert(arg and arg[1], "usage: ps_faults.lua DIR")
local function say(ok, name) print((ok and "ok - " or "not ok - ") .. name) end
tensor.seed(3)
local x, y = tensor.randn({ 512, 16 }), tensor.randn({ 512, 4 })
local ds = data.Dataset.from_tensor_slices({ x, y }):batch(32)
local function setup(lc)
  local s = D.ParameterServerStrategy(lc, { checkpoint_dir = dir })
  local model
  s:scope(function()
    model = nn.Sequential { nn.Dense { units = 64, activation = "relu" }, nn.Dense { units = 4 } }
    model:build({ 16 })
    model:compile { optimizer = optim.SGD { learning_rate = 0.01 }, loss = "mse" }
  end)
  local coord = D.ClusterCoordinator(s)
  coord:place(model)
  return s, coord, model
end
-- a slow step, so the kill lands mid-training; worker 1 lingers after its
-- push, so the kill most likely lands after it (its step then runs twice)
local slow = function(it)
  local c = ldist.distribute.worker_context()
  local loss = c:train_step(it)
  ldist._cluster.sleep(c.index == 1 and 0.05 or 0.005)
  return loss
end

local lc = D.LocalCluster { workers = 2, ps = 1 }
local s, coord = setup(lc)
local pwd = coord:create_per_worker_dataset(ds)
local N = 200
local rvs = {}
for k = 1, N do
  rvs[k] = coord:schedule(slow, { pwd })
  if k == 60 then
    while coord.completed < 20 do coord:_pump(0.01) end
    lc:kill_worker(1)
  end
end
local ok, err = pcall(coord.join, coord)
say(ok, "training completes after kill -9 of worker 1" .. (ok and "" or (": " .. tostring(err))))
local st = coord:stats()
print(("# scheduled %d, completed %d, rescheduled %d, applied %d, unique %d, duplicates %d, alive %d"):format(st.scheduled,
  st.completed, st.rescheduled, st.applied, st.unique, st.duplicates, lc:alive()))
say(st.completed == N, "every scheduled function completed")
say(st.unique == N and st.applied == N + st.duplicates, "steps applied == steps scheduled (duplicates counted)")
say(st.rescheduled >= 1 and st.duplicates <= st.rescheduled, "the killed worker's function ran again; duplicates only from re-runs")
say(lc:alive() == 1, "training continued on the surviving worker")
local losses_ok = true
for k = 1, N do if type(rvs[k]:fetch()) ~= "number" then losses_ok = false end end
say(losses_ok, "every RemoteValue fetches its loss")
s:checkpoint()
local before = s:fetch_variables()
-- a dead ps: a clear error at the coordinator
lc:kill_ps(0)
ldist._cluster.sleep(0.3)
local ok2, err2 = pcall(function()
  for k = 1, 5 do coord:schedule(slow, { pwd }) end
  coord:join()
end)
print("# " .. tostring(err2))
say(not ok2 and tostring(err2):find("parameter server ps 0", 1, true) ~= nil, "a dead ps is a clear error at the coordinator")
lc:shutdown()
-- a new cluster on the same checkpoint_dir resumes
local lc2 = D.LocalCluster { workers = 1, ps = 1 }
local s2, coord2, model2 = setup(lc2)
local after = s2:fetch_variables()
local same = s2.restored
for i, t in ipairs(before) do if (t - after[i]):abs():max():item() ~= 0 then same = false end end
say(same, "a restarted cluster resumes from the ps checkpoint")
local st2 = coord2:stats()
say(st2.applied == N + st.duplicates, "the restored ps remembers how many steps it applied")
lc2:shutdown()
