-- backup.lua DIR OUT [DELAY] - model:fit for 3 epochs of 20 steps (Adam, a
-- dataset that reshuffles every epoch) under MultiWorkerMirroredStrategy with
-- BackupAndRestore{dir=DIR, save_freq=5}; writes OUT.<rank>.safetensors.
-- DELAY seconds of sleep per step give a test time to kill a worker mid-epoch.
local dir, out, delay = arg[1], arg[2], tonumber(arg[3] or "0")
local strategy = distribute.MultiWorkerMirroredStrategy { timeout = tonumber(os.getenv("TEST_TIMEOUT") or "10") }
local rank = strategy.cluster_resolver.rank
print(("worker %d pid %d"):format(rank, strategy.cluster_resolver.pid))

tensor.seed(11)
local x = tensor.normal(800, 6)
local y = x:slice(1, 0, 3):argmax(1):astype("int64")
local ds = data.Dataset.from_tensor_slices(x, y):shuffle(800, { seed = 3 }):batch(40)

tensor.seed(7)
local model
do
  local _ <close> = strategy:scope()
  model = nn.Sequential { nn.Dense(16, "tanh"), nn.Dense(3) }
  model:compile { optimizer = optim.Adam { learning_rate = 0.01 },
    loss = losses.SparseCategoricalCrossentropy { from_logits = true }, metrics = { "accuracy" } }
end

local epoch_now = 0
local progress = callbacks.LambdaCallback {
  on_epoch_begin = function(_, epoch) epoch_now = epoch + 1 end,   -- Keras numbers epochs from 0
  on_train_batch_end = function(_, batch)
    print(("at epoch %d step %d"):format(epoch_now, batch + 1))
    if delay > 0 then ldist._cluster.sleep(delay) end
  end,
}
local h = model:fit(ds, { epochs = 3, verbose = 0,
  callbacks = { callbacks.BackupAndRestore { dir = dir, save_freq = 5 }, progress } })
print(("worker %d done: %d epoch(s) run here, last loss %.4f"):format(rank, #h.loss, h.loss[#h.loss]))
model:save_weights(("%s.%d.safetensors"):format(out, rank))
