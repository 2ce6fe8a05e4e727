-- seed.lua - the example that started ldist (TensorFlow 2's tf.distribute
-- guide), ported line by line.
--   ldist scripts/seed.lua [epochs] [examples] [cpu devices]
-- With one device it uses the default strategy; with more, the CPU is split
-- into that many logical devices and MirroredStrategy trains on all of them.
local num_epochs = tonumber(arg and arg[1]) or 3
local limit = tonumber(arg and arg[2])          -- train on the first N examples only
local n_devices = tonumber(arg and arg[3]) or 1
local batch_size = 64

if n_devices > 1 then ldist.config.cpu_devices(n_devices) end
local strategy = n_devices > 1 and distribute.MirroredStrategy()   -- every GPU, or every CPU device
                 or distribute.get_strategy()
print(("strategy: %s"):format(tostring(strategy)))
local model, optimizer, loss_object
do
  local _ <close> = strategy:scope()
  model = nn.Sequential{ nn.Flatten(), nn.Dense(128, "relu"), nn.Dense(10) }
  optimizer = optim.Adam()
  loss_object = losses.SparseCategoricalCrossentropy{from_logits = true}
end
local x_train, y_train = datasets.fashion_mnist.load("train")
if limit then x_train, y_train = x_train:slice(0, 0, limit), y_train:slice(0, 0, limit) end
local train_dataset = data.Dataset.from_tensor_slices(x_train, y_train):batch(batch_size)

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

for epoch = 1, num_epochs do
  local total_loss, num_batches = 0.0, 0
  for inputs in strategy:experimental_distribute_dataset(train_dataset) do
    local per_replica_loss = strategy:run(distributed_train_step, inputs)
    total_loss = total_loss + strategy:reduce("sum", per_replica_loss)
    num_batches = num_batches + 1
  end
  print(("Epoch %d: Loss = %.4f"):format(epoch, total_loss / num_batches))
end
