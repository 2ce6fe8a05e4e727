-- `ldist launch -n 2 --ps 1 tests/dist/ps_launch.lua`: TF_CONFIG gives each
-- process its role; workers and the ps serve inside ParameterServerStrategy()
-- and the chief trains (model:fit with steps_per_epoch).
local D = ldist.distribute
local s = D.ParameterServerStrategy()
print(("chief: %d workers, %d ps"):format(s._cl.workers, s._cl.num_ps))
tensor.seed(2)
local x, y = tensor.randn({ 256, 8 }), tensor.randn({ 256, 1 })
local model
s:scope(function()
  model = nn.Sequential { nn.Dense { units = 16, activation = "relu" }, nn.Dense { units = 1 } }
  model:build({ 8 })
  model:compile { optimizer = optim.SGD { learning_rate = 0.05 }, loss = "mse" }
end)
local h = model:fit(x, y, { epochs = 3, steps_per_epoch = 20, batch_size = 32, verbose = 0 })
local st = D.ClusterCoordinator(s):stats()
print(("loss %.4f -> %.4f, applied %d"):format(h.loss[1], h.loss[3], st.applied))
print((st.applied == 60 and h.loss[3] < h.loss[1]) and "ok - launched cluster trains" or "not ok - launched cluster trains")
s:shutdown()
