-- test_fit_keras.lua - model:fit as Keras 3 runs it, checked against numbers
-- printed by TensorFlow 2.21 / Keras 3.15 (build/bench-venv) running
-- scripts/fixtures/keras_fit_reference.py: the same model, weights, data
-- and options (all made from formulas, so nothing random differs).
--   1. the data iterator across epochs: steps_per_epoch on a repeated
--      dataset reads on (it does not start the data again each epoch); a
--      finite dataset starts again once read through; each validation reads
--      validation_steps batches from the start (Keras resets its validation
--      iterator before every evaluate); evaluate(steps=).
--   4. the History object fit returns: history, epoch, params.
local T = dofile("tests/lua/testlib.lua")

local function near_all(got, want, tol, what)
  T.eq(#got, #want, (what or "") .. " length")
  for i = 1, #want do T.near(got[i], want[i], tol or 2e-6, (what or "") .. " [" .. i .. "]") end
end
local function flat(t) return t:cpu():reshape({ t:numel() }):totable() end

-- the Python's rows(n, d, off): (((i * d + j) % 7) - 3) / 3
local function rows(n, d, off)
  local r = {}
  for i = 0, n - 1 do
    r[i + 1] = {}
    for j = 0, d - 1 do r[i + 1][j + 1] = ((((i + (off or 0)) * d + j) % 7) - 3) / 3 end
  end
  return tensor.new(r)
end
local function labels(n) local r = {} for i = 0, n - 1 do r[i + 1] = i % 3 end return tensor.new(r, { dtype = "int64" }) end
-- the Python's dense_weights(din, dout, k)
local function dense_weights(din, dout, k)
  local w, b = {}, {}
  for a = 0, din - 1 do
    w[a + 1] = {}
    for c = 0, dout - 1 do w[a + 1][c + 1] = ((((a * dout + c) * k) % 11) - 5) / 5 end
  end
  for c = 0, dout - 1 do b[c + 1] = (c % 3 - 1) / 10 end
  return tensor.new(w), tensor.new(b)
end

-- the Python's iterator_case model: Dense(5, tanh), Dense(3), SGD(0.1), sparse CE from logits
local function iterator_model()
  local m = nn.Sequential { nn.Dense(5, "tanh"), nn.Dense(3) }
  m:build { 4 }
  local w1, b1 = dense_weights(4, 5, 3)
  local w2, b2 = dense_weights(5, 3, 7)
  m:set_weights { w1, b1, w2, b2 }
  m:compile { optimizer = optim.SGD(0.1), loss = losses.SparseCategoricalCrossentropy { from_logits = true } }
  return m
end
local function batch_logger(out)
  return callbacks.LambdaCallback { on_train_batch_end = function(_, _, logs) out[#out + 1] = logs.loss end }
end

T.test("steps_per_epoch on a repeated dataset reads on across epochs (Keras's numbers)", function()
  local m = iterator_model()
  local ds = data.Dataset.from_tensor_slices(rows(20, 4), labels(20)):batch(8):repeat_()
  local vds = data.Dataset.from_tensor_slices(rows(12, 4, 5), labels(12)):batch(5):repeat_()
  local logs = {}
  local h = m:fit(ds, { epochs = 3, steps_per_epoch = 4, validation_data = vds, validation_steps = 2, verbose = 0,
    callbacks = { batch_logger(logs) } })
  -- Keras: repeat batch logs (the running mean of each epoch after each batch)
  near_all(logs, { 1.2577516, 1.2947254, 1.3258886, 1.2892132, 1.3089604, 1.3240528, 1.258173, 1.2684596,
    1.2819613, 1.1834716, 1.2236221, 1.2238768 }, 2e-6, "batch logs")
  near_all(h.history.loss, { 1.2892132, 1.2684596, 1.2238768 }, 2e-6, "loss")
  -- validation_steps=2 on a repeated dataset of batches 5, 5, 2: each
  -- validation reads its first two batches (Keras's val_loss)
  near_all(h.history.val_loss, { 1.5246884, 1.45992, 1.4140654 }, 2e-6, "val_loss")
  local w = m:get_weights()
  near_all(flat(w[1]), { -0.97026789, -0.49381989, 0.12908977, 0.7031641, -0.77044219, -0.19553737, 0.40179676,
    1.0157937, -0.63892192, 0.022910407, 0.58404291, -0.89263272, -0.28305063, 0.28591281, 0.75647569, -0.79843771,
    -0.20235398, 0.36905891, 1.0226855, -0.62907952 }, 2e-6, "w1")
  near_all(flat(w[2]), { -0.055447731, 0.071775995, 0.20999008, -0.0477072, -0.076029941 }, 2e-6, "w2")
  near_all(flat(w[3]), { -0.85668272, 0.38679761, -0.53011471, 0.92994064, 0.17428918, -0.50422966, 0.73487252,
    -0.0058009531, -0.7290715, 0.59209204, -0.180531, -1.0115609, 0.5378288, -0.40383467, 0.86600596 }, 2e-6, "w3")
  near_all(flat(w[4]), { -0.13112752, 0.090499014, 0.0406285 }, 2e-6, "w4")
  -- evaluate(steps=3) on the repeated validation data: 5 + 5 + 2 rows, from the start
  T.near(m:evaluate(vds, { steps = 3 }).loss, 1.3923826, 2e-6, "evaluate steps=3")
end)

T.test("a finite dataset with steps_per_epoch starts again once read through (Keras's numbers)", function()
  local m = iterator_model()
  local ds = data.Dataset.from_tensor_slices(rows(20, 4), labels(20)):batch(8)   -- 3 batches
  local logs = {}
  local h = m:fit(ds, { epochs = 3, steps_per_epoch = 2, verbose = 0, callbacks = { batch_logger(logs) } })
  -- epoch 1: batches 1, 2; epoch 2: batch 3 alone (the data ran out); epoch 3: batches 1, 2
  near_all(logs, { 1.2577516, 1.2947254, 1.4505413, 1.1975247, 1.2532425 }, 2e-6, "batch logs")
  near_all(h.history.loss, { 1.2947254, 1.4505413, 1.2532425 }, 2e-6, "loss")
  local w = m:get_weights()
  near_all(flat(w[4]), { -0.097098522, 0.038452499, 0.058646016 }, 2e-6, "w4")
  near_all(flat(w[2]), { -0.084021263, 0.040495232, 0.15778568, -0.070244059, -0.038050443 }, 2e-6, "w2")
end)

T.test("fit returns Keras's History: history, epoch, params", function()
  local m = iterator_model()
  local ds = data.Dataset.from_tensor_slices(rows(20, 4), labels(20)):batch(8):repeat_()
  local h = m:fit(ds, { epochs = 3, steps_per_epoch = 4, verbose = 0 })
  -- Keras: h.params == {'verbose': 0, 'epochs': 3, 'steps': 4}, h.epoch == [0, 1, 2]
  T.eq(getmetatable(h).__name, "ldist.callbacks.History")
  T.eq(h.params.epochs, 3); T.eq(h.params.steps, 4); T.eq(h.params.verbose, 0)
  T.eq(table.concat(h.epoch, ","), "0,1,2")
  T.eq(#h.history.loss, 3)
  T.eq(h.loss, h.history.loss, "h.loss reads h.history.loss")
  T.eq(m.history, h, "model.history is the History fit returned")
  T.ok(tostring(h):find("<History: 3 epochs of loss>", 1, true), tostring(h))
  -- initial_epoch: the epochs run keep their numbers (Keras: [1, 2])
  local h2 = m:fit(ds, { epochs = 3, initial_epoch = 1, steps_per_epoch = 2, verbose = 0 })
  T.eq(table.concat(h2.epoch, ","), "1,2")
  T.eq(#h2.history.loss, 2)
  -- a History given in callbacks is the one fit fills and returns; like
  -- Keras's it keeps its lists over fits, its epochs per fit
  local mine = callbacks.History()
  local h3 = m:fit(ds, { epochs = 2, steps_per_epoch = 1, verbose = 0, callbacks = { mine } })
  T.eq(h3, mine)
  m:fit(ds, { epochs = 1, steps_per_epoch = 1, verbose = 0, callbacks = { mine } })
  T.eq(#mine.history.loss, 3); T.eq(table.concat(mine.epoch, ","), "0")
end)

T.test("steps options are checked", function()
  local m = iterator_model()
  local ds = data.Dataset.from_tensor_slices(rows(20, 4), labels(20)):batch(8)
  T.raises(function() m:fit(ds, { steps_per_epoch = 0, verbose = 0 }) end, "steps_per_epoch must be a positive integer, got 0")
  T.raises(function() m:fit(ds, { validation_steps = 1.5, verbose = 0 }) end, "validation_steps must be a positive integer")
  T.raises(function() m:evaluate(ds, { steps = -1 }) end, "bad argument to 'evaluate' (steps must be a positive integer, got -1)")
end)

T.done()
