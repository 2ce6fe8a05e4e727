-- equiv.lua OPT MODE OUT [STEPS [COMMUNICATION [WIDTH]]] - train 100 steps at global batch 40 under
-- MultiWorkerMirroredStrategy (one process alone, or N under `ldist launch`)
-- and write every worker's final weights to OUT.<rank>.safetensors.
--   OPT: sgd (momentum 0.9) | adam;  MODE: loop (strategy:run) | fit (model:fit)
--   COMMUNICATION: the strategy's communication= ("auto" when absent)
--   WIDTH: the hidden layer's units (16): wide, the gradients fill chunks
--          large enough for the ring to split its sums over a process's threads
local opt_name, mode, out = arg[1], arg[2], arg[3]
local steps = tonumber(arg[4] or "100")
local strategy = distribute.MultiWorkerMirroredStrategy { timeout = 20, communication = arg[5] }
local rank = strategy.cluster_resolver.rank

tensor.seed(11)
local x = tensor.normal(800, 6)
local y = x:slice(1, 0, 3):argmax(1):astype("int64")
local B = 40
local ds = data.Dataset.from_tensor_slices(x, y):shuffle(800, { seed = 3 }):batch(B)

-- a different seed on every worker: the strategy must give them rank 0's weights
tensor.seed(7 + rank)
local model, opt
do
  local _ <close> = strategy:scope()
  model = nn.Sequential { nn.Dense(tonumber(arg[6] or "16"), "tanh"), nn.Dense(3) }
  model:build({ 6 })
  opt = opt_name == "sgd" and optim.SGD { learning_rate = 0.1, momentum = 0.9 } or optim.Adam { learning_rate = 0.01 }
end
if rank ~= 0 then tensor.seed(7) end
local loss_object = losses.SparseCategoricalCrossentropy { from_logits = true }

local first, last
if mode == "loop" then
  local dist = strategy:experimental_distribute_dataset(ds)
  local function step(inputs)
    local tape = autograd.GradientTape()
    local loss = tape:record(function() return loss_object(inputs[2], model(inputs[1], { training = true })) end)
    opt:apply_gradients(tape:gradient(loss, model.trainable_variables), model.trainable_variables)
    return loss
  end
  local n = 0
  while n < steps do
    for inputs in dist do
      local l = strategy:reduce("sum", strategy:run(step, inputs))
      first = first or l; last = l
      n = n + 1
      if n == steps then break end
    end
  end
else
  model:compile { optimizer = opt, loss = loss_object, metrics = { "accuracy" } }
  local h = model:fit(ds, { epochs = steps // 20, verbose = 0 })
  first, last = h.loss[1], h.loss[#h.loss]
end
print(("worker %d of %d: loss %.4f -> %.4f, %d optimizer steps"):format(rank, strategy.num_replicas_in_sync, first, last,
  opt.iterations))
print(("worker %d: communication %s, cluster from %s"):format(rank, strategy.extended.communication,
  strategy.cluster_resolver.source))
if strategy._c then
  local st = strategy._c:stats()
  print(("worker %d ring links: to next %s, from previous %s"):format(rank, st.link_to_next, st.link_from_prev))
end
model:save_weights(("%s.%d.safetensors"):format(out, rank))
