-- test_callbacks.lua - Keras's callbacks (ModelCheckpoint, CSVLogger,
-- LearningRateScheduler, ReduceLROnPlateau, TerminateOnNaN, ProgbarLogger),
-- the epoch numbers callbacks see, and fit's validation_split /
-- validation_freq / initial_epoch. Every expected number was printed by
-- TensorFlow 2.21 / Keras 3.15 (build/bench-venv) running the same lines; the
-- Python is quoted next to it. The reference model: Dense(1) with zero
-- weights, SGD, mse, x = arange(20).reshape(10, 2) / 10, y = x.sum(1).
local T = dofile("tests/lua/testlib.lua")

local TMP = os.tmpname()
os.remove(TMP)
os.execute("mkdir -p " .. TMP)
local function path(name) return TMP .. "/" .. name end
local function read(p) local f = io.open(p, "rb"); if not f then return nil end local s = f:read("a"); f:close(); return s end
local function ls(dir)
  local out, p = {}, io.popen("ls " .. dir .. " 2>/dev/null")
  for l in p:lines() do out[#out + 1] = l end
  p:close()
  return table.concat(out, " ")
end
local function near_all(got, want, tol, what)
  T.eq(#got, #want, (what or "") .. " length")
  for i = 1, #want do T.near(got[i], want[i], tol or 1e-6, (what or "") .. " [" .. i .. "]") end
end

-- m = Sequential([Input((2,)), Dense(1, kernel_initializer="zeros")]);
-- m.compile(optimizer=SGD(learning_rate=lr), loss="mse")
local function mk(lr)
  local m = nn.Sequential{ nn.Dense(1) }
  m:build({ 2 })
  m:set_weights({ tensor.zeros(2, 1), tensor.zeros(1) })
  m:compile{ optimizer = optim.SGD{ learning_rate = lr or 0.01 }, loss = "mse" }
  return m
end
local rows = {}
for i = 0, 9 do rows[#rows + 1] = { (2 * i) / 10, (2 * i + 1) / 10 } end
local x = tensor.new(rows)
local y = x:sum(1):reshape({ 10, 1 })
-- Keras: fit(x, y, epochs=3, batch_size=10, shuffle=False) -> loss
local LOSS3 = { 4.930000305175781, 4.319375514984131, 3.7858376502990723 }

---------------------------------------------------------------- epoch numbers
T.test("callbacks see Keras's epoch numbers (from 0), initial_epoch, validation_freq", function()
  -- LambdaCallback(on_epoch_begin=..., on_epoch_end=...); fit(epochs=5, initial_epoch=2,
  -- validation_data=(x, y), validation_freq=2, batch_size=4) ->
  -- [('b',2), ('e',2,['loss']), ('b',3), ('e',3,['loss','val_loss']), ('b',4), ('e',4,['loss'])]
  -- history lengths {'loss': 3, 'val_loss': 1}
  local seen = {}
  local lam = callbacks.LambdaCallback{
    on_epoch_begin = function(_, e) seen[#seen + 1] = "b" .. e end,
    on_epoch_end = function(_, e, logs) seen[#seen + 1] = "e" .. e .. (logs.val_loss and "v" or "") end }
  local h = mk():fit(x, y, { epochs = 5, initial_epoch = 2, batch_size = 4, verbose = 0, validation_data = { x, y },
    validation_freq = 2, callbacks = { lam } })
  T.eq(table.concat(seen, " "), "b2 e2 b3 e3v b4 e4")
  T.eq(#h.loss, 3); T.eq(#h.val_loss, 1)
  -- fit(epochs=4, initial_epoch=1): on_epoch_begin 1, 2, 3
  seen = {}
  mk():fit(x, y, { epochs = 4, initial_epoch = 1, batch_size = 10, verbose = 0, callbacks = { lam } })
  T.eq(table.concat(seen, " "), "b1 e1 b2 e2 b3 e3")
end)

T.test("on_train_batch_end gets Keras's batch index, from 0 in every epoch", function()
  -- Keras: LambdaCallback(on_train_batch_end=lambda b, logs: seen.append(b)); fit(x, y, epochs=2,
  -- batch_size=4) with 10 rows -> [0, 1, 2, 0, 1, 2]
  local seen = {}
  mk():fit(x, y, { epochs = 2, batch_size = 4, verbose = 0, callbacks = { callbacks.LambdaCallback{
    on_train_batch_end = function(_, b) seen[#seen + 1] = b end } } })
  T.eq(table.concat(seen, " "), "0 1 2 0 1 2")
end)

T.test("validation_freq: val_ logs only every n-th epoch (Keras numbers)", function()
  -- fit(epochs=3, batch_size=10, shuffle=False, validation_data=(x[:4], y[:4]), validation_freq=2)
  -- -> loss [4.930000305175781, 4.319375514984131, 3.7858376502990723], val_loss [0.47663941979408264]
  local h = mk():fit(x, y, { epochs = 3, batch_size = 10, shuffle = false, verbose = 0,
    validation_data = { x:slice(0, 0, 4), y:slice(0, 0, 4) }, validation_freq = 2 })
  near_all(h.loss, LOSS3, 1e-6, "loss")
  near_all(h.val_loss, { 0.47663941979408264 }, 1e-6, "val_loss")
  -- validation_freq=[1, 3] (Keras's list form): epochs 1 and 3 of 3
  h = mk():fit(x, y, { epochs = 3, batch_size = 10, verbose = 0, validation_data = { x, y }, validation_freq = { 1, 3 } })
  T.eq(#h.val_loss, 2)
  T.raises(function() mk():fit(x, y, { epochs = 1, verbose = 0, validation_freq = 0 }) end, "validation_freq")
  T.raises(function() mk():fit(x, y, { epochs = 1, verbose = 0, validation_freq = 1.5 }) end, "validation_freq")
end)

---------------------------------------------------------------- validation_split
T.test("validation_split takes the LAST fraction before shuffling (Keras)", function()
  -- fit(x, y, epochs=2, batch_size=10, validation_split=0.3) -> loss [2.3299999237060547,
  -- 2.1570146083831787], val_loss [10.322436332702637, 9.694781303405762]: the same as
  -- fit(x[:7], y[:7], validation_data=(x[7:], y[7:])), and the same with shuffle=True
  for _, shuffle in ipairs{ false, true } do
    local h = mk():fit(x, y, { epochs = 2, batch_size = 10, shuffle = shuffle, verbose = 0, validation_split = 0.3 })
    near_all(h.loss, { 2.3299999237060547, 2.1570146083831787 }, 1e-6, "loss")
    near_all(h.val_loss, { 10.322436332702637, 9.694781303405762 }, 1e-6, "val_loss")
  end
  -- sample_weight is split too: the training rows keep their weights (1 here, the
  -- validation rows' 0 would change the loss if they trained)
  local w = tensor.new{ 1, 1, 1, 1, 1, 1, 1, 0, 0, 0 }
  local h = mk():fit(x, y, { epochs = 1, batch_size = 10, verbose = 0, validation_split = 0.3, sample_weight = w })
  T.near(h.loss[1], 2.3299999237060547, 1e-6)
  -- Keras: ValueError "Argument `validation_split` is only supported for tensors or NumPy arrays."
  local ds = data.Dataset.from_tensor_slices(x, y):batch(2)
  T.raises(function() mk():fit(ds, { epochs = 1, verbose = 0, validation_split = 0.2 }) end, "validation_split is only supported for tensors")
  -- Keras: "Training data contains 10 samples, which is not sufficient to split it ..."
  T.raises(function() mk():fit(x, y, { epochs = 1, verbose = 0, validation_split = 0.95 }) end, "not sufficient to split")
  T.raises(function() mk():fit(x, y, { epochs = 1, verbose = 0, validation_split = 1.5 }) end, "validation_split must be")
  T.raises(function() mk():fit(x, y, { epochs = 1, verbose = 0, validation_splitt = 0.2 }) end, "unknown option 'validation_splitt'")
end)

---------------------------------------------------------------- ReduceLROnPlateau
-- m = the model above with SGD(learning_rate=1.0); cb = ReduceLROnPlateau(**kw);
-- cb.set_model(m); cb.on_train_begin(); for e, v in enumerate(seq):
-- logs = {"val_loss": v}; cb.on_epoch_end(e, logs) -> the optimizer's lr after each
-- epoch, logs["learning_rate"], and cb.wait / cb.cooldown_counter at the end
local function rlrop(seq, opts)
  local model = { _optimizer = { learning_rate = 1.0 }, _metrics = {} }
  local cb = callbacks.ReduceLROnPlateau(opts)
  cb:on_train_begin(model)
  local lrs, logged = {}, {}
  for e, v in ipairs(seq) do
    local logs = { val_loss = v }
    cb:on_epoch_end(e - 1, logs, model)
    logged[e] = logs.learning_rate
    lrs[e] = string.unpack("<f", string.pack("<f", model._optimizer.learning_rate))
  end
  return lrs, logged, cb
end
local f = 0.10000000149011612
local rl_cases = {
  { { 1, 1, 1, 1, 1, 1 }, { patience = 2, factor = 0.5 },
    { 1, 1, 0.5, 0.5, 0.25, 0.25 }, { 1, 1, 1, 0.5, 0.5, 0.25 }, 1, 0 },
  { { 1.0, 0.99995, 0.9999, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9 }, { patience = 1, factor = 0.5, cooldown = 2 },
    { 1, 0.5, 0.5, 0.5, 0.25, 0.25, 0.125, 0.125, 0.0625 }, { 1, 1, 0.5, 0.5, 0.5, 0.25, 0.25, 0.125, 0.125 }, 0, 2 },
  { { 1, 1, 1, 1, 1, 1, 1, 1 }, { patience = 1, factor = 0.1, min_lr = 0.005 },
    { 1, f, 0.009999999776482582, 0.004999999888241291, 0.004999999888241291, 0.004999999888241291,
      0.004999999888241291, 0.004999999888241291 },
    { 1, 1, f, 0.009999999776482582, 0.004999999888241291, 0.004999999888241291, 0.004999999888241291,
      0.004999999888241291 }, 4, 0 },
  { { 1.0, 0.95, 0.92, 0.91 }, { patience = 1, factor = 0.5, min_delta = 0.05 }, { 1, 0.5, 0.5, 0.25 }, { 1, 1, 0.5, 0.5 }, 0, 0 },
}
T.test("ReduceLROnPlateau: patience, factor, cooldown, min_delta, min_lr as Keras 3", function()
  for i, c in ipairs(rl_cases) do
    local lrs, logged, cb = rlrop(c[1], c[2])
    near_all(lrs, c[3], 1e-12, ("case %d lr"):format(i))
    near_all(logged, c[4], 1e-12, ("case %d logs.learning_rate"):format(i))
    T.eq(cb.wait, c[5], ("case %d wait"):format(i))
    T.eq(cb.cooldown_counter, c[6], ("case %d cooldown_counter"):format(i))
  end
  -- Keras: "ReduceLROnPlateau does not support a factor >= 1.0. Received factor=1.0"
  T.raises(function() callbacks.ReduceLROnPlateau{ factor = 1.0 } end, "factor must be < 1.0")
  T.raises(function() callbacks.ReduceLROnPlateau{ patiense = 1 } end, "unknown option 'patiense'")
  -- EarlyStopping too (a misspelt monitor watched val_loss, silently)
  T.raises(function() callbacks.EarlyStopping{ monitr = "loss" } end, "bad argument #1 to 'EarlyStopping' (unknown option 'monitr'; options: baseline,")
  T.raises(function() callbacks.EarlyStopping{ patience = 1.5 } end, "patience must be a non-negative integer, got 1.5")
  T.raises(function() callbacks.ReduceLROnPlateau{ mode = "up" } end, "mode must be")
end)

-- SGD(0.1): fit(epochs=4, batch_size=10, shuffle=False, callbacks=[...]) -> history
local LRS_LOSS = { 4.930000305175781, 0.6773306131362915, 0.1596640795469284, 0.11798665672540665 }
local LRS_LR = { 0.10000000149011612, 0.10000000149011612, 0.05000000074505806, 0.02500000037252903 }
T.test("ReduceLROnPlateau in a real fit: learning_rate in the history", function()
  -- ReduceLROnPlateau(monitor="loss", patience=0, factor=0.5, min_delta=10)
  local h = mk(0.1):fit(x, y, { epochs = 4, batch_size = 10, shuffle = false, verbose = 0,
    callbacks = { callbacks.ReduceLROnPlateau{ monitor = "loss", patience = 0, factor = 0.5, min_delta = 10 } } })
  near_all(h.loss, LRS_LOSS, 1e-6, "loss")
  near_all(h.learning_rate, LRS_LR, 1e-12, "learning_rate")
end)

---------------------------------------------------------------- LearningRateScheduler
T.test("LearningRateScheduler: schedule(epoch, lr) at each epoch's start, learning_rate logged", function()
  -- LearningRateScheduler(lambda e, lr: lr if e < 2 else lr * 0.5): the same history as above;
  -- the schedule saw (epoch, lr) = (1, 0.10000000149011612), (2, 0.10000000149011612), (3, 0.05000000074505806)
  local got = {}
  local sched = callbacks.LearningRateScheduler(function(e, lr)
    got[#got + 1] = { e, lr }
    if e < 2 then return lr end
    return lr * 0.5
  end)
  local h = mk(0.1):fit(x, y, { epochs = 4, batch_size = 10, shuffle = false, verbose = 0, callbacks = { sched } })
  near_all(h.loss, LRS_LOSS, 1e-6, "loss")
  near_all(h.learning_rate, LRS_LR, 1e-12, "learning_rate")
  T.eq(#got, 4)
  for e = 0, 3 do T.eq(got[e + 1][1], e) end
  T.near(got[2][2], 0.10000000149011612, 1e-15); T.near(got[4][2], 0.05000000074505806, 1e-15)
  T.raises(function() callbacks.LearningRateScheduler(3) end, "schedule(epoch, lr)")
  T.raises(function()
    mk():fit(x, y, { epochs = 1, verbose = 0, callbacks = { callbacks.LearningRateScheduler(function() return "x" end) } })
  end, "must return a number")
end)

---------------------------------------------------------------- TerminateOnNaN
T.test("TerminateOnNaN stops after the batch with an infinite loss", function()
  -- SGD(1e30), x = 1e20 everywhere, 8 rows, batch_size=2, epochs=3, TerminateOnNaN():
  -- prints "Batch 0: Invalid loss, terminating training", history {'loss': [inf]}
  tensor.seed(1)
  local m = nn.Sequential{ nn.Dense(1) }
  m:compile{ optimizer = optim.SGD{ learning_rate = 1e30 }, loss = "mse" }
  local xb, yb = tensor.full({ 8, 2 }, 1e20), tensor.zeros(8, 1)
  local h = m:fit(xb, yb, { epochs = 3, batch_size = 2, shuffle = false, verbose = 0, callbacks = { callbacks.TerminateOnNaN() } })
  T.eq(#h.loss, 1)
  T.eq(h.loss[1], math.huge)
  m = nn.Sequential{ nn.Dense(1) }
  m:compile{ optimizer = optim.SGD{ learning_rate = 1e30 }, loss = "mse" }
  T.raises(function()
    m:fit(xb, yb, { epochs = 1, batch_size = 2, verbose = 0, callbacks = { callbacks.TerminateOnNaN{ raise_error = true } } })
  end, "NaN or Inf loss encountered at batch 0")
  T.raises(function() callbacks.TerminateOnNaN{ raise = true } end, "unknown option 'raise'")
end)

---------------------------------------------------------------- CSVLogger
local function csv_rows(s)
  local rows = {}
  for line in s:gmatch("([^\n]*)\n") do rows[#rows + 1] = line end
  return rows
end
T.test("CSVLogger writes Keras's file", function()
  -- fit(epochs=3, batch_size=10, shuffle=False, callbacks=[CSVLogger(p)]): bytes
  -- 'epoch,loss,val_loss\r\n0,4.930000305175781,NA\r\n1,4.319375514984131,NA\r\n2,3.7858376502990723,NA\r\n'
  local p = path("log.csv")
  mk():fit(x, y, { epochs = 3, batch_size = 10, shuffle = false, verbose = 0, callbacks = { callbacks.CSVLogger(p) } })
  local rows = csv_rows(read(p))
  T.eq(#rows, 4)
  T.eq(rows[1], "epoch,loss,val_loss\r")
  for e = 0, 2 do
    local ep, loss, val = rows[e + 2]:match("^(%d+),([^,]+),(NA)\r$")
    T.eq(ep, tostring(e)); T.eq(val, "NA")
    T.near(tonumber(loss), LOSS3[e + 1], 1e-6)
  end
  -- a float32 value, printed as Python prints the double it is (Keras's
  -- 4.930000305175781; ldist's mean of the same batches is one float32 step off)
  local v1 = tonumber(rows[2]:match("^0,([^,]+),"))
  T.eq(string.unpack("f", string.pack("f", v1)), v1, "the logged value is a float32 value")
  T.ok(rows[2]:match("^0,4%.9299998%d+,NA\r$") or rows[2]:match("^0,4%.9300003%d+,NA\r$"), rows[2])
  -- validation_freq=2 with validation_data=(x[:4], y[:4]): '...\r\n1,4.319375514984131,0.47663941979408264\r\n2,...,NA\r\n'
  local p2 = path("freq.csv")
  mk():fit(x, y, { epochs = 3, batch_size = 10, shuffle = false, verbose = 0, validation_freq = 2,
    validation_data = { x:slice(0, 0, 4), y:slice(0, 0, 4) }, callbacks = { callbacks.CSVLogger(p2) } })
  rows = csv_rows(read(p2))
  T.eq(rows[1], "epoch,loss,val_loss\r")
  T.ok(rows[2]:match(",NA\r$")); T.ok(rows[4]:match(",NA\r$"))
  T.near(tonumber(rows[3]:match(",([^,]+)\r$")), 0.47663941979408264, 1e-6)
  -- separator=";" listed before a ReduceLROnPlateau: its keys are fixed at the first epoch,
  -- before learning_rate is added -> header 'epoch;loss;val_loss'; then append=True adds
  -- '0;9.02...;NA\r\n' without a second header
  local p3 = path("semi.csv")
  mk():fit(x, y, { epochs = 2, batch_size = 10, shuffle = false, verbose = 0, validation_data = { x, y },
    callbacks = { callbacks.CSVLogger(p3, { separator = ";" }), callbacks.ReduceLROnPlateau() } })
  mk():fit(x, y, { epochs = 1, batch_size = 10, verbose = 0, callbacks = { callbacks.CSVLogger(p3, { separator = ";", append = true }) } })
  rows = csv_rows(read(p3))
  T.eq(#rows, 4)
  T.eq(rows[1], "epoch;loss;val_loss\r")
  T.ok(rows[2]:match("^0;[%d.e+-]+;[%d.e+-]+\r$"), rows[2])
  T.ok(rows[4]:match("^0;[%d.e+-]+;NA\r$"), rows[4])
  T.raises(function() callbacks.CSVLogger(p, { sep = ";" }) end, "unknown option 'sep'")
  T.raises(function() callbacks.CSVLogger(nil) end, "a file name expected")
end)

T.test("numbers are written as Python's str(float)", function()
  local py = callbacks._pyfloat
  -- str(0.1), str(1e-05), str(100.0), str(1e16), str(0.0001), str(-2.5e-07), str(float32(0.1))
  T.eq(py(0.1), "0.1"); T.eq(py(1e-5), "1e-05"); T.eq(py(100.0), "100.0"); T.eq(py(1e16), "1e+16")
  T.eq(py(0.0001), "0.0001"); T.eq(py(-2.5e-7), "-2.5e-07"); T.eq(py(0.10000000149011612), "0.10000000149011612")
  T.eq(py(1 / 0), "inf"); T.eq(py(0 / 0 ~= 0 / 0 and 0 / 0 or 0 / 0), "nan")
end)

---------------------------------------------------------------- ModelCheckpoint
T.test("ModelCheckpoint file name templates as Python formats them", function()
  local fmt = callbacks._format_path
  -- "ck/m-{epoch:02d}-{val_loss:.2f}.keras" at epoch index 0 with val_loss 11.634 -> m-01-11.63.keras
  T.eq(fmt("ck/m-{epoch:02d}-{val_loss:.2f}.keras", { epoch = 1, val_loss = 11.634 }, "t"), "ck/m-01-11.63.keras")
  -- "{val_loss}".format(val_loss=0.5); "{epoch:03d}|{v:.3e}|{v:8.3f}|{v:g}".format(epoch=7, v=1234.5678)
  T.eq(fmt("{val_loss}", { val_loss = 0.5 }, "t"), "0.5")
  T.eq(fmt("{epoch:03d}|{v:.3e}|{v:8.3f}|{v:g}|{{x}}", { epoch = 7, v = 1234.5678 }, "t"), "007|1.235e+03|1234.568|1234.57|{x}")
  T.raises(function() fmt("m-{val_acc}", { epoch = 1 }, "ModelCheckpoint") end, "no value for 'val_acc'")
end)

T.test("ModelCheckpoint save_best_only / save_freq / save_weights_only in a real fit", function()
  -- val_loss scripted [0.5, 0.7, 0.4, 0.45, 0.3] by a LambdaCallback listed first;
  -- ModelCheckpoint("ck/b-{epoch}-{val_loss:.2f}.keras", save_best_only=True) ->
  -- ['b-1-0.50.keras', 'b-3-0.40.keras', 'b-5-0.30.keras']
  local script = { 0.5, 0.7, 0.4, 0.45, 0.3 }
  local lam = callbacks.LambdaCallback{ on_epoch_end = function(_, e, logs) logs.val_loss = script[e + 1] end }
  local dir = path("ck")
  local mc = callbacks.ModelCheckpoint{ filepath = dir .. "/b-{epoch}-{val_loss:.2f}.safetensors", save_best_only = true }
  local m = mk()
  m:fit(x, y, { epochs = 5, batch_size = 10, verbose = 0, callbacks = { lam, mc } })
  T.eq(ls(dir), "b-1-0.50.safetensors b-3-0.40.safetensors b-5-0.30.safetensors")
  T.near(mc.best, 0.3, 1e-12)
  -- the whole model, loadable, holding the weights at the end of epoch 5
  local back = nn.load_model(dir .. "/b-5-0.30.safetensors")
  local a, b = back:get_weights(), m:get_weights()
  for i = 1, #b do T.eq((a[i]:cpu() - b[i]:cpu()):abs():max():item(), 0) end
  -- ModelCheckpoint("ck2/s-{epoch}-{batch}.weights.h5", save_weights_only=True, save_freq=3),
  -- batch_size=2 (5 batches an epoch), epochs=2 -> ['s-1-3...', 's-2-1...', 's-2-4...']
  local dir2 = path("ck2")
  local seen = {}
  local m2 = mk()
  local rec = callbacks.LambdaCallback{ on_train_batch_end = function(_, step, _, model)
    seen[#seen + 1] = model:get_weights()[1]:cpu():clone() end }
  m2:fit(x, y, { epochs = 2, batch_size = 2, verbose = 0, callbacks = { rec,
    callbacks.ModelCheckpoint{ filepath = dir2 .. "/s-{epoch}-{batch}.w", save_weights_only = true, save_freq = 3 } } })
  T.eq(ls(dir2), "s-1-3.w s-2-1.w s-2-4.w")
  -- the weights file holds the weights after batch 3 of epoch 1
  local m3 = mk()
  m3:load_weights(dir2 .. "/s-1-3.w")
  T.eq((m3:get_weights()[1]:cpu() - seen[3]):abs():max():item(), 0)
  T.raises(function() callbacks.ModelCheckpoint{} end, "filepath= expected")
  T.raises(function() callbacks.ModelCheckpoint{ filepath = "a", save_freq = 0 } end, "save_freq must be")
  T.raises(function() callbacks.ModelCheckpoint{ filepath = "a", save_best = true } end, "unknown option 'save_best'")
end)

---------------------------------------------------------------- ProgbarLogger, help
T.test("ProgbarLogger: fit's bar as a callback, given its params", function()
  local pb = callbacks.ProgbarLogger()
  local params
  local set = pb.set_params
  pb.set_params = function(self, p) params = p; return set(self, p) end
  pb.on_epoch_begin = function() end      -- quiet here
  mk():fit(x, y, { epochs = 2, batch_size = 5, verbose = 1, callbacks = { pb } })
  T.eq(params.epochs, 2); T.eq(params.steps, 2); T.eq(params.verbose, 1)
end)

T.test("every callback has help text", function()
  for _, name in ipairs{ "ModelCheckpoint", "CSVLogger", "LearningRateScheduler", "ReduceLROnPlateau", "TerminateOnNaN",
    "ProgbarLogger", "EarlyStopping", "BackupAndRestore", "LambdaCallback" } do
    T.ok(type(ldist.docs[callbacks[name]]) == "string", name .. " has no help")
    T.ok(type(ldist.docs["callbacks." .. name]) == "string", "callbacks." .. name .. " has no help")
  end
end)

os.execute("rm -rf " .. TMP)
T.done()
