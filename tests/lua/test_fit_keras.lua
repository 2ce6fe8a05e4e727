-- test_fit_keras.lua - model:fit as Keras 3 runs it, checked against numbers
-- printed by TensorFlow 2.21 / Keras 3.15 (build/bench-venv) running
-- scripts/fixtures/keras_fit_reference.py: the same model, weights, data
-- and options (all made from formulas, so nothing random differs).
--   1. the data iterator across epochs: steps_per_epoch on a repeated
--      dataset reads on (it does not start the data again each epoch); a
--      finite dataset starts again once read through; each validation reads
--      validation_steps batches from the start (Keras resets its validation
--      iterator before every evaluate); evaluate(steps=).
--   2. a Functional model of 2 inputs and 2 outputs: fit on a dataset of
--      nested elements keyed by name, loss and metrics per output,
--      loss_weights, validation data as lists; evaluate, predict; errors.
--   4. the History object fit returns: history, epoch, params.
--   7. class_weight with sample weights is refused, as Keras 3 refuses it;
--      ldist.json.encode never drops a key: a NaN or an infinity (TF's
--      history after TerminateOnNaN holds one) is an error naming where.
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

-- the Python's multi_io_case model: xa (3), xb (2) -> Concatenate -> Dense(4, tanh) "hidden"
-- -> Dense(3) "out_a" (sparse CE from logits, accuracy), Dense(1) "out_b" (mse); loss_weights 1, 0.5
local function multi_model(compile_opts)
  local ia, ib = nn.Input { shape = { 3 }, name = "xa" }, nn.Input { shape = { 2 }, name = "xb" }
  local hidden = nn.Dense(4, { activation = "tanh", name = "hidden" })
  local h = hidden(nn.Concatenate()({ ia, ib }))
  local la, lb = nn.Dense(3, { name = "out_a" }), nn.Dense(1, { name = "out_b" })
  local m = nn.Model { inputs = { ia, ib }, outputs = { la(h), lb(h) } }
  local w1, b1 = dense_weights(5, 4, 3)
  local w2, b2 = dense_weights(4, 3, 7)
  local w3, b3 = dense_weights(4, 1, 2)
  m:set_weights { w1, b1, w2, b2, w3, b3 }
  local o = { optimizer = optim.SGD(0.1),
    loss = { out_a = losses.SparseCategoricalCrossentropy { from_logits = true }, out_b = "mse" },
    loss_weights = { out_a = 1.0, out_b = 0.5 }, metrics = { out_a = { "accuracy" } } }
  for k, v in pairs(compile_opts or {}) do o[k] = v end
  m:compile(o)
  return m
end
local function multi_data()
  return rows(24, 3), rows(24, 2, 9), labels(24), rows(24, 1, 4), rows(10, 3, 30), rows(10, 2, 40), labels(10), rows(10, 1, 50)
end

T.test("2 inputs, 2 outputs: fit, evaluate, predict give Keras's numbers", function()
  local xa, xb, ya, yb, va, vb, vya, vyb = multi_data()
  local m = multi_model()
  -- Keras: from_tensor_slices(({"xa": xa, "xb": xb}, {"out_a": ya, "out_b": yb})).batch(8)
  local ds = data.Dataset.from_tensor_slices({ { xa = xa, xb = xb }, { out_a = ya, out_b = yb } }):batch(8)
  local h = m:fit(ds, { epochs = 3, validation_data = { { va, vb }, { vya, vyb } }, batch_size = 5, verbose = 0 })
  local want = {
    loss = { 1.9049248, 1.7106085, 1.5898968 },
    out_a_accuracy = { 0.33333334, 0.33333334, 0.375 },
    out_a_loss = { 1.3795485, 1.3403817, 1.3050786 },
    out_b_loss = { 1.0507523, 0.74045324, 0.5696364 },
    val_loss = { 1.899853, 1.8105681, 1.7425222 },
    val_out_a_accuracy = { 0.2, 0.2, 0.2 },
    val_out_a_loss = { 1.3581632, 1.336118, 1.3159863 },
    val_out_b_loss = { 1.0833795, 0.94890004, 0.85307199 },
  }
  local keys = {}
  for k in pairs(h.history) do keys[#keys + 1] = k end
  table.sort(keys)
  T.eq(table.concat(keys, " "), "loss out_a_accuracy out_a_loss out_b_loss val_loss val_out_a_accuracy " ..
    "val_out_a_loss val_out_b_loss", "Keras's history keys")
  for k, v in pairs(want) do near_all(h.history[k], v, 3e-6, k) end
  local w = m:get_weights()
  local wantw = {
    { -1.0067296, -0.42402965, 0.20745128, 0.75188732, -0.61425769, -0.15312524, 0.41216469, 0.93371576, -0.50944066,
      0.060428485, 0.62224227, -1.0140438, -0.33027357, 0.16637646, 0.79473197, -0.8258546, -0.16579551, 0.35916719,
      0.9717347, -0.65655482 },
    { -0.14402917, -0.012291828, 0.089149028, -0.10477974 },
    { -0.84058267, 0.27416301, -0.43358043, 1.0266305, 0.16740619, -0.59403664, 0.6958282, 0.065917917, -0.76174611,
      0.5246194, -0.17245965, -0.9521597 },
    { -0.11043832, 0.023587959, 0.08685036 },
    { -0.61130762, -0.49323863, -0.3896949, -0.028064627 },
    { 0.0047414359 },
  }
  for i = 1, 6 do near_all(flat(w[i]), wantw[i], 3e-6, "w" .. i) end
  local r = m:evaluate({ va, vb }, { vya, vyb }, { batch_size = 5 })
  T.near(r.loss, 1.7425222, 3e-6, "evaluate loss")
  T.near(r.out_a_loss, 1.3159863, 3e-6, "evaluate out_a_loss")
  T.near(r.out_b_loss, 0.85307199, 3e-6, "evaluate out_b_loss")
  T.near(r.out_a_accuracy, 0.2, 1e-7, "evaluate out_a_accuracy")
  local p = m:predict({ xa = va:slice(0, 0, 3), xb = vb:slice(0, 0, 3) })
  T.eq(#p, 2, "one prediction per output")
  near_all(flat(p[1]), { -0.16225405, -0.12031189, 0.30754244, 0.89982104, 0.24691084, 0.10636113, -0.57425857,
    -0.45056725, 0.43737704 }, 3e-6, "predict out_a")
  near_all(flat(p[2]), { 0.32942373, -0.39259461, 0.95292532 }, 3e-6, "predict out_b")
end)

T.test("2 inputs, 2 outputs: x and y as lists or keyed tables train alike", function()
  local xa, xb, ya, yb = multi_data()
  local m1, m2, m3 = multi_model(), multi_model(), multi_model()
  m1:fit({ xa, xb }, { ya, yb }, { epochs = 2, batch_size = 8, shuffle = false, verbose = 0 })
  m2:fit({ xb = xb, xa = xa }, { out_b = yb, out_a = ya }, { epochs = 2, batch_size = 8, shuffle = false, verbose = 0 })
  m3:fit(data.Dataset.from_tensor_slices({ { xa, xb }, { ya, yb } }):batch(8), { epochs = 2, verbose = 0 })
  for i, v in ipairs(m1:get_weights()) do
    T.eq((v - m2:get_weights()[i]):abs():max():item(), 0, "keyed tables, weight " .. i)
    T.eq((v - m3:get_weights()[i]):abs():max():item(), 0, "a dataset of nested lists, weight " .. i)
  end
  -- the same loss for every output, metrics as a list of lists
  local m4 = multi_model { loss = "mse", loss_weights = { 1, 2 }, metrics = { {}, {} } }
  local h = m4:fit({ xa, xb }, { rows(24, 3, 7), yb }, { epochs = 1, batch_size = 8, verbose = 0 })
  T.ok(h.history.out_a_loss and h.history.out_b_loss and not h.history.out_a_accuracy, "per-output losses only")
  T.near(h.history.loss[1], h.history.out_a_loss[1] + 2 * h.history.out_b_loss[1], 1e-5, "loss = out_a + 2 out_b")
end)

T.test("several inputs and outputs: validation_split, and a subclassed model of two outputs", function()
  local xa, xb, ya, yb = multi_data()
  local m = multi_model()
  -- Keras's validation_split: the last 25% of every input and output
  local h = m:fit({ xa, xb }, { ya, yb }, { epochs = 1, batch_size = 6, validation_split = 0.25, shuffle = false, verbose = 0 })
  local r = m:evaluate({ xa:slice(0, 18, 24), xb:slice(0, 18, 24) }, { ya:slice(0, 18, 24), yb:slice(0, 18, 24) })
  T.near(h.history.val_loss[1], r.loss, 1e-6, "val_loss is the loss on the last 6 rows")
  T.near(h.history.val_out_b_loss[1], r.out_b_loss, 1e-6, "val_out_b_loss")
  -- a subclass returning two outputs, compiled with a list of losses (names output_1, output_2)
  local Two = nn.Model:extend("TwoHeads")
  function Two:init() self.h = nn.Dense(4, "tanh"); self.a = nn.Dense(3); self.b = nn.Dense(1) end
  function Two:call(x) local h = self.h(x); return { self.a(h), self.b(h) } end
  local t = Two()
  t:compile { optimizer = optim.SGD(0.1), loss = { losses.SparseCategoricalCrossentropy { from_logits = true }, "mse" },
    metrics = { { "accuracy" }, {} } }
  local th = t:fit(xa, { ya, yb }, { epochs = 2, batch_size = 8, verbose = 0 })
  T.ok(th.history.output_1_loss and th.history.output_2_loss and th.history.output_1_accuracy, "per-output keys")
  T.near(th.history.loss[2], th.history.output_1_loss[2] + th.history.output_2_loss[2], 1e-5, "loss is their sum")
end)

T.test("a Lua function as the loss trains as the same Loss object does (Keras takes a function too)", function()
  local x, y = rows(16, 3), rows(16, 2, 5)
  local function make(loss)
    local m = nn.Sequential { nn.Dense(2) }
    m:build { 3 }
    m:set_weights { dense_weights(3, 2, 3) }
    m:compile { optimizer = optim.SGD(0.1), loss = loss }
    return m, m:fit(x, y, { epochs = 2, batch_size = 8, shuffle = false, verbose = 0 })
  end
  local m1, h1 = make(function(yt, yp) return ((yt - yp) * (yt - yp)):mean() end)
  local m2, h2 = make("mse")
  near_all(h1.history.loss, h2.history.loss, 1e-6, "loss")
  for i, w in ipairs(m1:get_weights()) do near_all(flat(w), flat(m2:get_weights()[i]), 1e-6, "weight " .. i) end
  T.raises(function() nn.Sequential { nn.Dense(2) }:compile { loss = 3 } end,
    "loss must be a name, a losses.* object or a function(y_true, y_pred), got number")
end)

T.test("several outputs: clear errors at compile and fit", function()
  local xa, xb, ya, yb = multi_data()
  local ce = losses.SparseCategoricalCrossentropy { from_logits = true }
  T.raises(function() multi_model { loss = { ce, "mse", "mse" } } end,
    "loss has 3 entries for a model of 2 outputs (out_a, out_b)")
  T.raises(function() multi_model { loss = { out_c = "mse" }, loss_weights = nil } end,
    "loss names output 'out_c', which the model does not have; its outputs are out_a, out_b")
  T.raises(function() multi_model { metrics = { "accuracy" } } end, "metrics for a model of 2 outputs: a list of lists")
  T.raises(function() multi_model { loss = { ce, "nope" }, loss_weights = { 1, 1 } } end, "unknown loss 'nope' for output 'out_b'")
  local m = multi_model()
  T.raises(function() m:fit({ xa, xb }, ya, { epochs = 1, verbose = 0 }) end,
    "the model has 2 outputs (out_a, out_b): give y as a list of 2 tensors or a table keyed by those names, not a single tensor")
  T.raises(function() m:fit(xa, { ya, yb }, { epochs = 1, verbose = 0 }) end,
    "the model has 2 inputs (xa, xb): give x as a list of 2 tensors")
  T.raises(function() m:fit({ xa = xa, xc = xb }, { ya, yb }, { epochs = 1, verbose = 0 }) end, "no value for input 'xb'")
  T.raises(function() m:fit({ xa, xb, xb }, { ya, yb }, { epochs = 1, verbose = 0 }) end, "3 inputs given for a model of 2: xa, xb")
  T.raises(function() m:fit({ xa, xb }, { ya, yb }, { epochs = 1, verbose = 0, class_weight = { [0] = 1 } }) end,
    "class_weight is for a model of one output")
  T.raises(function()
    local s = nn.Sequential { nn.Dense(2) }
    s:compile { optimizer = "sgd", loss = "mse", loss_weights = 0.5 }
  end, "loss_weights weighs the losses of a model of several outputs")
end)

T.test("a model of several outputs saves and loads with its per-output compile settings", function()
  local xa, xb, ya, yb, va, vb, vya, vyb = multi_data()
  local m = multi_model()
  m:fit({ xa, xb }, { ya, yb }, { epochs = 1, batch_size = 8, verbose = 0 })
  local path = os.tmpname()
  m:save(path)
  local m2 = nn.load_model(path)
  os.remove(path)
  local r1 = m:evaluate({ va, vb }, { vya, vyb }, { batch_size = 5 })
  local r2 = m2:evaluate({ va, vb }, { vya, vyb }, { batch_size = 5 })
  for _, k in ipairs { "loss", "out_a_loss", "out_b_loss", "out_a_accuracy" } do
    T.ok(r2[k] ~= nil, "the loaded model reports " .. k)
    T.near(r2[k], r1[k], 1e-6, k)
  end
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

T.test("class_weight together with sample weights is refused, as in Keras 3", function()
  local m = iterator_model()
  local x, y = rows(20, 4), labels(20)
  local cw = { [0] = 1, [1] = 2, [2] = 3 }
  -- Keras: ValueError("You cannot `class_weight` and `sample_weight` at the same time.")
  T.raises(function() m:fit(x, y, { class_weight = cw, sample_weight = tensor.ones(20), verbose = 0 }) end,
    "you cannot give class_weight and sample_weight at the same time")
  local ds = data.Dataset.from_tensor_slices(x, y, tensor.ones(20)):batch(8)
  T.raises(function() m:fit(ds, { class_weight = cw, verbose = 0 }) end,
    "you cannot give class_weight and sample_weight at the same time")
  local h = m:fit(x, y, { class_weight = cw, verbose = 0, epochs = 1 })   -- alone it applies
  T.eq(#h.history.loss, 1)
end)

T.test("json.encode names a NaN, an infinity or a non-string key instead of dropping it", function()
  local json = ldist.json
  T.raises(function() json.encode({ history = { loss = { 1.5, 0 / 0 } } }) end,
    "json.encode: the value at history.loss[2] is nan, which JSON cannot hold")
  T.raises(function() json.encode({ lr = 1 / 0 }) end, "the value at lr is inf")
  T.raises(function() json.encode({ a = { b = -1 / 0 } }) end, "the value at a.b is -inf")
  T.raises(function() json.encode({ class_weight = { [0] = 1, [3] = 2 } }) end,
    "the key 0 in class_weight is a number; a JSON object's keys are strings")
  T.eq(json.encode({ loss = { 1.5, 2 }, name = "x" }), '{"loss":[1.5,2],"name":"x"}')
  T.eq(json.decode(json.encode({ v = 0.1 })).v, 0.1)
end)

T.test("steps options are checked", function()
  local m = iterator_model()
  local ds = data.Dataset.from_tensor_slices(rows(20, 4), labels(20)):batch(8)
  T.raises(function() m:fit(ds, { steps_per_epoch = 0, verbose = 0 }) end, "steps_per_epoch must be a positive integer, got 0")
  T.raises(function() m:fit(ds, { validation_steps = 1.5, verbose = 0 }) end, "validation_steps must be a positive integer")
  T.raises(function() m:evaluate(ds, { steps = -1 }) end, "bad argument to 'evaluate' (steps must be a positive integer, got -1)")
  -- fit's, evaluate's and predict's other numbers and flags, by name (an epochs
  -- of "two" was an arithmetic error inside fit, a batch_size of 0 'batch''s)
  local x, y = rows(20, 4), labels(20)
  T.raises(function() m:fit(x, y, { epochs = "two", verbose = 0 }) end,
    "bad argument to 'fit' (epochs must be a non-negative integer, got \"two\")")
  T.raises(function() m:fit(x, y, { epochs = 2.5, verbose = 0 }) end, "epochs must be a non-negative integer, got 2.5")
  T.raises(function() m:fit(x, y, { batch_size = 0, verbose = 0 }) end,
    "bad argument to 'fit' (batch_size must be a positive integer, got 0)")
  T.raises(function() m:fit(x, y, { verbose = "loud" }) end,
    "bad argument to 'fit' (verbose must be 0, 1, 2 or \"auto\", got \"loud\")")
  T.raises(function() m:fit(x, y, { shuffle = "yes", verbose = 0 }) end, "shuffle must be true or false, got yes")
  T.raises(function() m:fit(x, y, { initial_epoch = -1, verbose = 0 }) end, "initial_epoch must be a non-negative integer, got -1")
  T.raises(function() m:evaluate(x, y, { batch_size = "x" }) end, "bad argument to 'evaluate' (batch_size must be a positive integer")
  T.raises(function() m:evaluate(x, y, { verbose = 3 }) end, "bad argument to 'evaluate' (verbose must be 0, 1, 2")
  T.raises(function() m:predict(x, { batch_size = 0 }) end, "bad argument to 'predict' (batch_size must be a positive integer, got 0)")
  T.raises(function() m:predict(x, { steps = 0 }) end, "bad argument to 'predict' (steps must be a positive integer, got 0)")
  T.raises(function() m:fit(x, y, { callbacks = { 42 }, verbose = 0 }) end,
    "bad argument to 'fit' (callbacks[1] is a number; a callback is a table")
  T.raises(function() m:fit(x, y, { callbacks = "EarlyStopping", verbose = 0 }) end,
    "callbacks must be a list of callbacks, got string")
  T.eq(#m:fit(x, y, { epochs = 0, verbose = 0 }).epoch, 0, "epochs = 0 trains nothing, as Keras")
  T.eq(#m:fit(x, y, { epochs = 1, verbose = "auto", shuffle = false }).epoch, 1)
  -- no samples at all (Keras: "Expected input data to be non-empty")
  T.raises(function() m:fit(tensor.zeros(0, 4), labels(0), { verbose = 0 }) end,
    "bad argument #1 to 'fit' (x holds no samples: its first tensor has shape [0, 4])")
  T.raises(function() m:fit(tensor.zeros(0, 3, 4), labels(0), { shuffle = false, verbose = 0 }) end,
    "x holds no samples: its first tensor has shape [0, 3, 4]")
  -- arrays of different lengths (Keras: "Data cardinality is ambiguous"); it
  -- was from_tensor_slices's error, naming a function the script never called
  T.raises(function() m:fit(x, labels(19), { verbose = 0 }) end,
    "bad argument to 'fit' (the arrays differ in their number of samples, the first axis: x 20, y 19;")
  T.raises(function() m:fit(x, y, { sample_weight = tensor.ones(21), verbose = 0 }) end,
    "the first axis: x 20, y 20, sample_weight 21;")
  T.raises(function() m:fit(x, y, { validation_data = { rows(5, 4), labels(4) }, verbose = 0 }) end,
    "bad argument to 'fit' (validation_data: the arrays differ in their number of samples, the first axis: x 5, y 4;")
  T.raises(function() m:evaluate(rows(3, 4), labels(4), { verbose = 0 }) end, "bad argument to 'evaluate' (the arrays differ")
  -- no y (Keras: "None values not supported"): it was train_step's 'Tensor expected, got nil'
  T.raises(function() m:fit(x, { verbose = 0 }) end,
    "bad argument to 'fit' (no targets: the loss compares the predictions with y, and the data has none;")
  T.raises(function() m:fit(data.Dataset.from_tensor_slices(x):batch(8), { verbose = 0 }) end, "(no targets:")
  T.raises(function() m:evaluate(x, nil, { verbose = 0 }) end, "bad argument to 'evaluate' (no targets:")
  -- a model's input without a batch axis names its shape (it said "bad argument #2 to 'self'")
  T.raises(function() nn.Sequential { nn.Dense(2) }:predict(tensor.ones(4)) end,
    "needs inputs with a feature axis; the input's shape is 4 (its first axis is the batch)")
  T.raises(function() m:predict(tensor.ones(4)) end, "expects inputs of shape batchx4, got 4")
end)

T.test("compile, evaluate and predict name an option they do not know", function()
  local m = iterator_model()
  local ds = data.Dataset.from_tensor_slices(rows(20, 4), labels(20)):batch(8)
  T.raises(function() m:compile { optimizer = "sgd", loss = "sparse_categorical_crossentropy", metric = { "accuracy" } } end,
    "bad argument to 'compile' (unknown option 'metric'; options: auto_scale_loss, jit_compile, loss, loss_weights, metrics,")
  T.raises(function() m:compile { optimizer = "sgd", loss = "sparse_categorical_crossentropy", weighted_metrics = { "acuracy" } } end,
    "unknown metric acuracy")
  -- Keras's execution knobs change how a step runs, not what it computes
  m:compile { optimizer = "sgd", loss = "sparse_categorical_crossentropy", jit_compile = true, steps_per_execution = 4 }
  T.raises(function() m:evaluate(ds, { batchsize = 4 }) end,
    "bad argument to 'evaluate' (unknown option 'batchsize'; options: batch_size, return_dict, sample_weight, steps, verbose)")
  T.raises(function() m:predict(rows(4, 4), { batch_sizes = 2 }) end,
    "bad argument to 'predict' (unknown option 'batch_sizes'; options: batch_size, steps, verbose)")
  T.eq(m:predict(rows(4, 4), { batch_size = 2 }).shape[1], 4, "predict with its options")
end)

T.done()
