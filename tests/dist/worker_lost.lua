-- worker_lost.lua MODE [DIR] - a worker dies during model:fit (issue 31 item 4).
-- Prints TAP lines for what it checks inside; test_worker_lost.sh checks the
-- whole output (one message, no traceback, no second name for the process).
--   lc      MultiWorkerMirroredStrategy on a LocalCluster of 2 workers, worker 1
--           killed (SIGKILL) at the end of the first epoch; DIR: BackupAndRestore's
--   launch  under `ldist launch -n 2`: worker 1 kills itself at the end of epoch 2
--   ps      ParameterServerStrategy (2 workers, 1 ps), worker 1 killed in epoch 2
-- The fit error is raised again at the end, as a script that does not catch it.
local mode, dir = arg[1], arg[2]
local function check(name, cond, detail)
  print(((cond and "ok - " or "not ok - ") .. mode .. ": " .. name) .. ((not cond and detail) and (" (" .. tostring(detail) .. ")") or ""))
end
local EPOCHS = 5
local function data_set()
  tensor.seed(7)
  local x = tensor.normal(1150, 32)
  local y = x:slice(1, 0, 3):argmax(1):astype("int64")
  return data.Dataset.from_tensor_slices(x, y):batch(100)   -- 12 steps, the last of 50
end
local function make_model(s)
  tensor.seed(3)
  local model
  local _ <close> = s:scope()
  model = nn.Sequential{ nn.Dense(16, "relu"), nn.Dense(3) }
  model:compile{ optimizer = optim.Adam{ learning_rate = 0.01 },
    loss = losses.SparseCategoricalCrossentropy{ from_logits = true }, metrics = { "accuracy" } }
  model:build({ 32 })
  return model
end

if mode == "lc" then
  -- the reference: the same arithmetic in one process (two replicas, each batch split in two)
  ldist.config.cpu_devices(2)
  local lc = distribute.LocalCluster{ workers = 2 }
  local s = distribute.MultiWorkerMirroredStrategy{ cluster = lc }
  local model = make_model(s)
  local w0 = model.weights[1]:clone()
  -- a complete fit first: explain() narrates a step of the full batch of 100, not the last one of 50
  model:fit(data_set(), { epochs = 1, verbose = 0 })
  local ex = tostring(s:explain())
  check("explain narrates the full global batch", ex:find("global batch of 100 examples", 1, true) ~= nil, ex)
  model = make_model(s)
  local killer = callbacks.LambdaCallback{ on_epoch_end = function(_, epoch)
    if epoch == 0 then os.execute("kill -9 " .. lc.pids[2]) end
  end }
  local ok, err = pcall(model.fit, model, data_set(), { epochs = EPOCHS, verbose = 0,
    callbacks = { callbacks.BackupAndRestore{ dir = dir, save_freq = "epoch" }, killer } })
  check("fit fails", not ok)
  local msg = tostring(err)
  check("the message names the worker, its pid and the signal", msg:find(("worker 1 (pid %d) was killed by signal 9"):format(lc.pids[2]), 1, true) ~= nil, msg)
  check("the message says the step and the epoch", msg:match("during step %d+/12 of epoch %d/5") ~= nil, msg)
  check("the message points to BackupAndRestore's checkpoint", msg:find("BackupAndRestore keeps its checkpoint in " .. dir, 1, true) ~= nil, msg)
  local done = model.history and model.history.loss and #model.history.loss or 0
  check("model.history keeps the epochs done", done >= 1 and done < EPOCHS and #model.history.epoch == done, done)
  check("the message says what the model holds", msg:find(("from the end of epoch %d, and model.history its %d epoch"):format(done, done), 1, true) ~= nil, msg)
  check("the weights are not those from before fit", (model.weights[1] - w0):abs():max():item() > 1e-3)
  local iters = model.optimizer and model.optimizer.iterations or model._optimizer.iterations
  check("the optimizer's state is the chief's at that epoch's end", tonumber(tostring(iters)) == 12 * done, tostring(iters))
  lc:shutdown()
  -- the same epochs in one process (Mirrored, 2 replicas): the same weights
  local m = distribute.MirroredStrategy{ devices = { "cpu:0", "cpu:1" } }
  local ref = make_model(m)
  ref:fit(data_set(), { epochs = done, verbose = 0 })
  local diff = 0
  for i, v in ipairs(ref.weights) do diff = math.max(diff, (v - model.weights[i]):abs():max():item()) end
  check("the weights are the chief's at the end of the last epoch done", diff < 1e-4, diff)
  error(err, 0)
elseif mode == "launch" then
  local s = distribute.MultiWorkerMirroredStrategy()
  local model = make_model(s)
  local me = s.cluster_resolver.task_id
  local killer = callbacks.LambdaCallback{ on_epoch_end = function(_, epoch)
    if epoch == 1 and me == 1 then print(("worker 1 (pid %d)"):format(ldist._cluster.getpid())); os.execute("kill -9 " .. ldist._cluster.getpid()) end
  end }
  local ok, err = pcall(model.fit, model, data_set(), { epochs = EPOCHS, verbose = 0, callbacks = { killer } })
  check("fit fails", not ok)
  check("model.history keeps the 2 epochs done", model.history and #model.history.loss == 2, model.history and #model.history.loss)
  error(err, 0)
elseif mode == "ps" then
  local lc = distribute.LocalCluster{ workers = 2, ps = 1 }
  local s = distribute.ParameterServerStrategy(lc)
  local model = make_model(s)
  print(("worker 1 (pid %d)"):format(lc.pids[2]))
  local killer = callbacks.LambdaCallback{ on_epoch_begin = function(_, epoch)
    if epoch == 1 then lc:kill_worker(1) end
  end }
  local h = model:fit(data_set(), { epochs = 3, steps_per_epoch = 12, verbose = 0, callbacks = { killer } })
  check("fit goes on without the worker", #h.loss == 3 and lc:alive() == 1, #h.loss)
  local ex = tostring(s:explain())
  check("explain narrates the full batch", ex:find("100 examples", 1, true) ~= nil and not ex:find("50 examples", 1, true), ex)
  lc:shutdown()
end
