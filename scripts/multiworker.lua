-- multiworker.lua - the seed example under MultiWorkerMirroredStrategy: the
-- same code as seed.lua, run by several processes that train as one.
--   ldist launch -n 2 scripts/multiworker.lua [epochs] [examples]      (this machine)
--   TF_CONFIG=... LDIST_SECRET=... ldist scripts/multiworker.lua        (each machine)
--   srun ldist launch scripts/multiworker.lua                           (Slurm; export LDIST_SECRET)
--   mpirun -n 4 ldist scripts/multiworker.lua                           (Open MPI: the ranks meet through MPI)
-- Every worker reads Fashion-MNIST and takes its share of every global batch;
-- gradients are summed across the workers at each step. Then model:fit with
-- BackupAndRestore: kill a worker (kill -9) and launch again, and training
-- resumes from the last checkpoint.
local num_epochs = tonumber(arg and arg[1]) or 2
local limit = tonumber(arg and arg[2]) or 20000
local global_batch_size = 64 * 2

local strategy = distribute.MultiWorkerMirroredStrategy()   -- the cluster from TF_CONFIG (ldist launch sets it)
local rank = strategy.cluster_resolver.rank
local function say(...) if strategy:is_chief() then print(...) end end
say(("strategy: %s"):format(tostring(strategy)))

local model, optimizer, loss_object
do
  local _ <close> = strategy:scope()
  model = nn.Sequential{ nn.Flatten(), nn.Dense(128, "relu"), nn.Dense(10) }
  optimizer = optim.Adam()
  loss_object = losses.SparseCategoricalCrossentropy{from_logits = true}
end
local x_train, y_train = datasets.fashion_mnist.load("train")
x_train, y_train = x_train:slice(0, 0, limit), y_train:slice(0, 0, limit)
local train_dataset = data.Dataset.from_tensor_slices(x_train, y_train):shuffle(limit, {seed = 1}):batch(global_batch_size)

local function distributed_train_step(inputs)
  local features, labels = inputs[1], inputs[2]
  local tape = autograd.GradientTape()
  local loss = tape:record(function()
    local predictions = model(features, {training = true})
    return loss_object(labels, predictions)
  end)
  local gradients = tape:gradient(loss, model.trainable_variables)
  optimizer:apply_gradients(gradients, model.trainable_variables)
  return loss
end

-- the custom loop of the seed example: each worker runs its share, the losses are summed across workers
for epoch = 1, num_epochs do
  local total_loss, num_batches = 0.0, 0
  for inputs in strategy:experimental_distribute_dataset(train_dataset) do
    local per_replica_loss = strategy:run(distributed_train_step, inputs)
    total_loss = total_loss + strategy:reduce("sum", per_replica_loss)
    num_batches = num_batches + 1
  end
  say(("Epoch %d: Loss = %.4f"):format(epoch, total_loss / num_batches))
end

-- the Keras way, with checkpoints every 50 steps that a relaunch resumes from
model:compile{optimizer = optimizer, loss = loss_object, metrics = {"accuracy"}}
local backup = os.getenv("LDIST_BACKUP_DIR") or "/tmp/ldist-multiworker-backup"
local history = model:fit(train_dataset, {epochs = num_epochs, verbose = rank == 0 and 1 or 0,
  callbacks = {callbacks.BackupAndRestore{dir = backup, save_freq = 50}}})
say(("fit: loss %.4f, accuracy %.4f"):format(history.loss[#history.loss], history.accuracy[#history.accuracy]))
local stats = strategy._c:stats()
say(("all-reduce: %d calls, %.1f MB, %.2f s"):format(stats.calls, stats.bytes / 1e6, stats.seconds))
