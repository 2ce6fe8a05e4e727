-- sync_bn_mw.lua COMMUNICATION OUT - fit a model with synchronized BatchNorm under
-- MultiWorkerMirroredStrategy (its statistics are all-reduced inside the step,
-- ld_replica_set_reducer) and write OUT.<rank>.safetensors
local s = distribute.MultiWorkerMirroredStrategy { communication = arg[1] }
local rank = s.cluster_resolver.rank
tensor.seed(5)
local x = tensor.normal(64, 6)
local y = x:slice(1, 0, 3):argmax(1):astype("int64")
local model
do
  local _ <close> = s:scope()
  model = nn.Sequential { nn.Dense(8, { use_bias = false }), nn.BatchNormalization { synchronized = true }, nn.Dense(3) }
  model:compile { optimizer = optim.SGD { learning_rate = 0.1 }, loss = losses.SparseCategoricalCrossentropy { from_logits = true } }
end
model:fit(data.Dataset.from_tensor_slices(x, y):batch(16), { epochs = 3, verbose = 0 })
model:save_weights(("%s.%d.safetensors"):format(arg[2], rank))
print(rank, s.extended.communication)
