-- scripts/gpu/transformer_bench.lua BATCH STEPS WARMUP [DEVICE] [D_MODEL HEADS LAYERS CONTEXT]:
-- tokens/s of model:fit for the GPT-style transformer of
-- scripts/models/char_transformer.lua (default d_model 512, 8 heads, 6 pre-norm
-- blocks, context 256, a 96-character vocabulary: 19.1M weights) with Adam on
-- random ids, the model placed by a one-device MirroredStrategy (tensors its
-- call makes land there). One line "tokens_per_s final_loss".
-- scripts/gpu/ref_transformer.py is the same model in PyTorch.
-- LDIST_BENCH_POLICY=mixed_bfloat16 (or mixed_float16) builds the model under
-- that Keras dtype policy (scripts/gpu/bench_policy.lua): the bf16 row of
-- `make bench-gpu`. DEVICE cpu:N tries it on this machine's logical CPUs.
local batch, steps, warm = tonumber(arg[1]), tonumber(arg[2]), tonumber(arg[3])
local dev = arg[4] or "cuda:0"
local d_model, heads = tonumber(arg[5] or 512), tonumber(arg[6] or 8)
local layers, context = tonumber(arg[7] or 6), tonumber(arg[8] or 256)
local vocab = 96
dofile("scripts/gpu/bench_policy.lua").apply(dev)
local CT = dofile("scripts/models/char_transformer.lua")
tensor.seed(0)
local n = batch * 16   -- 16 distinct batches of random ids, repeated
local ids = (tensor.uniform(n, context + 1) * (vocab - 1e-3)):astype("int64")
local x = ids:slice(1, 0, context)
local y = ids:slice(1, 1, context + 1)
local strategy = distribute.MirroredStrategy { devices = { dev } }
local model
do
  local _ <close> = strategy:scope()
  model = CT.build { vocab_size = vocab, context = context, d_model = d_model, heads = heads, layers = layers }
  model:compile { optimizer = optim.Adam(), loss = losses.SparseCategoricalCrossentropy { from_logits = true } }
end
local ds = data.Dataset.from_tensor_slices(x, y):batch(batch, { drop_remainder = true }):repeat_()
local t0, t1, last
local timer = { on_train_batch_end = function(_, index, logs)
  local step = index + 1
  if step == warm then t0 = ldist.clock() elseif step == warm + steps then t1 = ldist.clock() end
  last = logs and logs.loss
end }
model:fit(ds, { epochs = 1, steps_per_epoch = warm + steps, verbose = 0, callbacks = { timer } })
print(("%.1f %.4f"):format(steps * batch * context / (t1 - t0), last or 0 / 0))
