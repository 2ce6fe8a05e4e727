-- Callbacks that change training act on a LocalCluster's workers, where
-- fit trains (MultiWorkerMirroredStrategy{cluster = lc}): a
-- LearningRateScheduler's rate reaches the workers' optimizer, a
-- ReduceLROnPlateau's too, ModelCheckpoint saves the trained weights (the
-- chief writes), TerminateOnNaN stops them. Each is compared with the same
-- fit on one device, whose numbers the cluster must give.
local D, nn, optim, tensor, data, callbacks = ldist.distribute, ldist.nn, ldist.optim, ldist.tensor, ldist.data, ldist.callbacks
local dir = assert(arg and arg[1], "usage: cluster_callbacks.lua DIR")
local function say(ok, name) print((ok and "ok - " or "not ok - ") .. name) end
tensor.seed(3)
local x = tensor.randn({ 64, 4 })
local y = (x:sum(1) * 0.5):reshape({ 64, 1 })
local function mk(s)
  local m
  local function make()
    m = nn.Sequential { nn.Dense { units = 1 } }
    m:build({ 4 })
    m:set_weights({ tensor.zeros(4, 1), tensor.zeros(1) })
    m:compile { optimizer = optim.SGD { learning_rate = 0.1 }, loss = "mse" }
  end
  if s then s:scope(make) else make() end
  return m
end
local function maxdiff(a, b)
  local d = 0
  for i, v in ipairs(a.weights) do d = math.max(d, (v:cpu() - b.weights[i]:cpu()):abs():max():item()) end
  return d
end
local function fit(m, cbs, epochs)
  return m:fit(data.Dataset.from_tensor_slices(x, y):batch(16), { epochs = epochs or 3, verbose = 0, callbacks = cbs })
end
local lc = D.LocalCluster { workers = 2 }
print("# worker pids: " .. table.concat(lc.pids, " "))
local s = D.MultiWorkerMirroredStrategy { cluster = lc }

-- the rate: 0.1, then 0.001 from epoch 1 on
local function sched(epoch, lr) if epoch >= 1 then return 0.001 end return lr end
local one, two = mk(), mk(s)
local h1 = fit(one, { callbacks.LearningRateScheduler(sched) })
local h2 = fit(two, { callbacks.LearningRateScheduler(sched) })
say(maxdiff(one, two) < 1e-6, ("LearningRateScheduler on the workers: the weights of one device (max diff %.2e)"):format(maxdiff(one, two)))
say(h2.learning_rate and math.abs(h2.learning_rate[3] - 0.001) < 1e-9, "the history has the workers' rates")
local plain = mk(s)
fit(plain, {})
say(maxdiff(plain, two) > 1e-3, ("without the schedule the cluster trains elsewhere (diff %.3f)"):format(maxdiff(plain, two)))

-- ReduceLROnPlateau on the loss, patience 0, factor 0.5, min_delta 10: every epoch after the
-- first halves the rate (Keras logs each epoch's rate before its reduction: 0.1, 0.1, 0.05)
local three, four = mk(), mk(s)
local h3 = fit(three, { callbacks.ReduceLROnPlateau { monitor = "loss", patience = 0, factor = 0.5, min_delta = 10 } })
local h4 = fit(four, { callbacks.ReduceLROnPlateau { monitor = "loss", patience = 0, factor = 0.5, min_delta = 10 } })
say(maxdiff(three, four) < 1e-6 and math.abs(h4.learning_rate[3] - 0.05) < 1e-7 and four._optimizer.learning_rate < 0.03,
  ("ReduceLROnPlateau on the workers: rates %s, the weights of one device"):format(table.concat(h4.learning_rate, " ")))

-- ModelCheckpoint: the file holds the trained weights (the workers'), written once by the chief
local five = mk(s)
local mc = callbacks.ModelCheckpoint { filepath = dir .. "/m-{epoch}.weights", save_weights_only = true }
fit(five, { mc })
local saved = mk()
saved:load_weights(dir .. "/m-3.weights")
say(maxdiff(saved, five) == 0, "ModelCheckpoint saves the weights the workers trained")

-- TerminateOnNaN: a huge rate makes the loss infinite, the workers stop after that batch
local six = mk(s)
six._optimizer.learning_rate = 1e30
local h6 = fit(six, { callbacks.TerminateOnNaN() }, 5)
say(#h6.loss < 5, ("TerminateOnNaN stops the workers (%d of 5 epochs)"):format(#h6.loss))

-- a schedule that uses a local variable cannot travel: the error says so
local factor = 0.5
local ok, err = pcall(fit, mk(s), { callbacks.LearningRateScheduler(function(e, lr) return lr * factor end) })
say(not ok and tostring(err):find("uses the local variable 'factor'", 1, true) ~= nil, "an unshippable schedule: " .. tostring(err))
lc:shutdown()
