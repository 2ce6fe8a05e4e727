-- test_keras_semantics.lua - metrics.Mean, callbacks.EarlyStopping, dict
-- datasets and weighted losses behave as TensorFlow 2.21 / Keras 3.15.1 do.
-- Every expected number below was printed by that TensorFlow (in
-- /work/tfvenv) running the same few lines; the Python is quoted next to it.
local T = dofile("tests/lua/testlib.lua")
ldist.config.cpu_devices(2)

local function vec(t) return t:cpu():totable() end
local function near_all(got, want, tol, what)
  T.eq(#got, #want, what)
  for i = 1, #want do T.near(got[i], want[i], tol or 1e-6, (what or "") .. " [" .. i .. "]") end
end

---------------------------------------------------------------- metrics.Mean
-- TF: m = tf.keras.metrics.Mean(); m.update_state(values, sample_weight=...);
-- m.result(), m.total, m.count
local function mean_after(updates)
  local m = metrics.Mean()
  for _, u in ipairs(updates) do m:update_state(u[1], u[2]) end
  return m
end
local function check_mean(m, result, total, count)
  T.near(m:result(), result, 1e-6, "result")
  T.near(m.total, total, 1e-6, "total")
  T.near(m.count, count, 1e-6, "count")
end

T.test("Mean counts every element of a tensor", function()
  -- update_state([1,2,3]) -> result 2.0, count 3.0; then [10] -> 4.0, count 4.0
  local m = mean_after{ { tensor.new{1, 2, 3} } }
  check_mean(m, 2.0, 6.0, 3.0)
  m:update_state(tensor.new{10})
  check_mean(m, 4.0, 16.0, 4.0)
  -- a 2-D tensor: rows are the samples, each the mean of its row:
  -- update_state([[1,2],[3,4]]) -> 2.5, total 5.0, count 2.0
  check_mean(mean_after{ { tensor.new{{1, 2}, {3, 4}} } }, 2.5, 5.0, 2.0)
end)

T.test("Mean with a number sample_weight (Keras 3: a tensor first becomes its mean)", function()
  -- update_state([1,2,3], sample_weight=2.0) -> 2.0, total 4.0, count 2.0;
  -- then update_state([10], sample_weight=1.0) -> 4.6666665, total 14.0, count 3.0
  local m = mean_after{ { tensor.new{1, 2, 3}, 2.0 } }
  check_mean(m, 2.0, 4.0, 2.0)
  m:update_state(tensor.new{10}, 1.0)
  check_mean(m, 14 / 3, 14.0, 3.0)
  -- update_state([[1,2],[3,4]], sample_weight=2.0) -> 2.5, total 5.0, count 2.0
  check_mean(mean_after{ { tensor.new{{1, 2}, {3, 4}}, 2.0 } }, 2.5, 5.0, 2.0)
end)

T.test("Mean with a tensor sample_weight: weighted sum over summed weights", function()
  -- update_state([1,2,3], sample_weight=[1,0,3]) -> 2.5, total 10.0, count 4.0
  check_mean(mean_after{ { tensor.new{1, 2, 3}, tensor.new{1, 0, 3} } }, 2.5, 10.0, 4.0)
  -- [[1,2],[3,4]] with [1,3] -> 3.0 (12, 4); with [[1],[3]] -> 3.0 (12, 4);
  -- with [[1,2]] (broadcast over rows) -> 2.6666667 (8, 3)
  check_mean(mean_after{ { tensor.new{{1, 2}, {3, 4}}, tensor.new{1, 3} } }, 3.0, 12.0, 4.0)
  check_mean(mean_after{ { tensor.new{{1, 2}, {3, 4}}, tensor.new{{1}, {3}} } }, 3.0, 12.0, 4.0)
  check_mean(mean_after{ { tensor.new{{1, 2}, {3, 4}}, tensor.new{{1, 2}} } }, 8 / 3, 8.0, 3.0)
  -- [[1],[2],[3]] with [1,2,3] -> 2.3333333 (14, 6), and [1,2,3] with [[1],[2],[3]] the same
  check_mean(mean_after{ { tensor.new{{1}, {2}, {3}}, tensor.new{1, 2, 3} } }, 7 / 3, 14.0, 6.0)
  check_mean(mean_after{ { tensor.new{1, 2, 3}, tensor.new{{1}, {2}, {3}} } }, 7 / 3, 14.0, 6.0)
  -- a table of numbers is a tensor too
  check_mean(mean_after{ { tensor.new{1, 2, 3}, { 1, 0, 3 } } }, 2.5, 10.0, 4.0)
end)

T.test("Mean of numbers, zero weights, reset", function()
  -- update_state(5.0); update_state(7.0, sample_weight=3) -> 6.5, total 26.0, count 4.0
  local m = mean_after{ { 5.0 }, { 7.0, 3 } }
  check_mean(m, 6.5, 26.0, 4.0)
  -- update_state([1,2,3], sample_weight=[0,0,0]) -> 0.0 (divide_no_nan), total 0, count 0
  check_mean(mean_after{ { tensor.new{1, 2, 3}, tensor.new{0, 0, 0} } }, 0.0, 0.0, 0.0)
  -- a fresh Mean -> 0.0
  T.eq(metrics.Mean():result(), 0.0)
  m:reset_state()
  check_mean(m, 0.0, 0.0, 0.0)
end)

T.test("Mean: weights that do not broadcast are an error", function()
  -- TF: update_state([1,2,3], sample_weight=[1,2]) -> InvalidArgumentError
  -- "Incompatible shapes: [2] vs. [3] [Op:BroadcastTo]"
  T.raises(function() metrics.Mean():update_state(tensor.new{1, 2, 3}, tensor.new{1, 2}) end,
    "sample_weight of shape [2] cannot be broadcast to the values' shape [3]")
  -- update_state(5.0, sample_weight=[1,2,3]) -> InvalidArgumentError (rank of input
  -- must be no greater than rank of output)
  T.raises(function() metrics.Mean():update_state(5.0, { 1, 2, 3 }) end, "cannot be broadcast")
  T.raises(function() metrics.Mean():update_state("x") end, "bad argument #1 to 'update_state'")
end)

---------------------------------------------------------------- callbacks.EarlyStopping
-- Callbacks get Keras's epoch numbers (from 0), so stopped_epoch / best_epoch are Keras's.
-- The Keras runs set the model's kernel to the epoch index before each
-- on_epoch_end, so the weights left at the end tell which epoch was restored.
local function drive(seq, opts)
  local w = tensor.Variable(tensor.new{ 0.0 })
  local model = { trainable_variables = { w }, weights = { w }, _metrics = { metrics.Accuracy("accuracy") },
    get_weights = nn.Model.get_weights, set_weights = nn.Model.set_weights }
  local cb = callbacks.EarlyStopping(opts)
  cb:on_train_begin(model)
  local stopped, waits = 0, {}
  for e, v in ipairs(seq) do
    w:assign(tensor.new{ e })
    cb:on_epoch_end(e - 1, { [opts.monitor or "val_loss"] = v }, model)   -- Keras's epoch number
    waits[#waits + 1] = cb.wait
    if model.stop_training then stopped = e; break end
  end
  cb:on_train_end(model)
  return { stopped = stopped, cb = cb, waits = table.concat(waits, ","), weight = w[0] }
end

-- {values, options, Keras' stopped_epoch (0-based, 0 = not stopped), best, best_epoch (0-based), waits}
local es_cases = {
  { { 1.0, 0.9, 0.95, 0.8 }, { patience = 0 }, 2, 0.9, 1, "0,0,1" },
  { { 1.0, 1.1, 1.2, 0.5 }, { patience = 2 }, 2, 1.0, 0, "0,1,2" },     -- wait >= patience (old code: >)
  { { 1.0, 1.1, 1.2, 0.5 }, { patience = 3 }, 0, 0.5, 3, "0,1,2,0" },
  { { 1.0, 0.9, 0.8, 0.7 }, { patience = 1, baseline = 0.5 }, 0, 0.7, 3, "1,2,3,4" },
  { { 1.0, 1.0, 1.0 }, { patience = 1, baseline = 0.5 }, 1, 1.0, 0, "1,2" },
  { { 1.0, 0.4, 0.45, 0.42 }, { patience = 1, baseline = 0.5 }, 2, 0.4, 1, "1,0,1" },
  { { 1.0, 0.95, 0.85 }, { patience = 1, min_delta = 0.1 }, 1, 1.0, 0, "0,1" },
  { { 1.0, 0.95, 0.85 }, { patience = 1, min_delta = -0.1 }, 1, 1.0, 0, "0,1" },
  { { 0.5, 0.6, 0.55, 0.58 }, { patience = 1, monitor = "val_accuracy" }, 2, 0.6, 1, "0,0,1" },
  { { 0.5, 0.6, 0.55, 0.58 }, { patience = 1, monitor = "val_accuracy", mode = "min" }, 1, 0.5, 0, "0,1" },
  { { 1, 2, 3, 4 }, { patience = 0, start_from_epoch = 2 }, 3, 3, 2, "0,0,0,1" },
  { { 1.0, 2.0 }, { monitor = "val_foo", mode = "min" }, 1, 1.0, 0, "0,1" },
}

T.test("EarlyStopping counts, stops and records epochs as Keras 3", function()
  -- Python: cb = keras.callbacks.EarlyStopping(**opts); cb.set_model(m); cb.on_train_begin()
  -- for e, v in enumerate(seq): cb.on_epoch_end(e, {monitor: v}); stop when m.stop_training
  for i, c in ipairs(es_cases) do
    local r = drive(c[1], c[2])
    local what = ("case %d"):format(i)
    local want_stop = c[3] > 0 and c[3] + 1 or 0
    T.eq(r.cb.stopped_epoch, c[3], what .. " stopped_epoch")
    T.eq(r.stopped, want_stop, what .. " the epoch fit stopped after")
    T.near(r.cb.best, c[4], 1e-12, what .. " best")
    T.eq(r.cb.best_epoch, c[5], what .. " best_epoch")
    T.eq(r.waits, c[6], what .. " wait after each epoch")
  end
end)

T.test("EarlyStopping restore_best_weights restores at the end, stopped or not (Keras 3)", function()
  -- patience=5, [1.0, 0.5, 0.7, 0.9]: not stopped, kernel after on_train_end 1.0
  -- (epoch index 1, the best); Keras 2 restored only on a stop
  local r = drive({ 1.0, 0.5, 0.7, 0.9 }, { patience = 5, restore_best_weights = true })
  T.eq(r.cb.stopped_epoch, 0)
  T.eq(r.weight, 2.0)                  -- ldist's epoch 2 is Keras' epoch 1
  -- patience=1: stopped at 2 (0-based), kernel 1.0
  r = drive({ 1.0, 0.5, 0.7, 0.9 }, { patience = 1, restore_best_weights = true })
  T.eq(r.cb.stopped_epoch, 2)
  T.eq(r.weight, 2.0)
  -- baseline=0.1 never beaten: best_weights are the first epoch's, kernel 0.0
  r = drive({ 1.0, 1.2, 1.3 }, { patience = 5, restore_best_weights = true, baseline = 0.1 })
  T.eq(r.weight, 1.0)
  -- without restore_best_weights the last weights stay
  r = drive({ 1.0, 0.5, 0.7, 0.9 }, { patience = 5 })
  T.eq(r.weight, 4.0)
end)

T.test("EarlyStopping mode=auto: loss down, accuracy up, else by name", function()
  local function dir(monitor, model)
    local cb = callbacks.EarlyStopping{ monitor = monitor }
    cb:on_train_begin(model)
    return cb:_direction(model)
  end
  local compiled = { _metrics = { metrics.SparseCategoricalAccuracy("sparse_categorical_accuracy") } }
  T.eq(dir("val_loss", compiled), "min")
  T.eq(dir("loss", {}), "min")
  T.eq(dir("val_sparse_categorical_accuracy", compiled), "max")   -- the metric's _direction "up"
  T.eq(dir("val_acc", {}), "max")
  T.eq(dir("val_mae", {}), "min")
  T.raises(function() callbacks.EarlyStopping{ mode = "down" } end, "mode must be")
end)

T.test("EarlyStopping ships to a LocalCluster's workers with its options", function()
  local es = callbacks.EarlyStopping{ monitor = "loss", patience = 2, min_delta = 0.01, baseline = 0.5,
    restore_best_weights = true, start_from_epoch = 1, mode = "min" }
  local c = es:_ship()
  local copy = callbacks[c.class](c.config)
  for _, k in ipairs{ "monitor", "patience", "min_delta", "baseline", "restore_best_weights", "start_from_epoch", "mode", "verbose" } do
    T.eq(copy[k], es[k], k)
  end
  -- the copy decides as Keras with these options: [0.9, 0.8, 0.85, 0.86, 0.87] ->
  -- stopped_epoch 2, best 0.8, best_epoch 1, waits [0, 1, 2], kernel after end 1.0
  local r = drive({ 0.9, 0.8, 0.85, 0.86, 0.87 }, c.config)
  T.eq(r.cb.stopped_epoch, 2)
  T.eq(r.cb.best_epoch, 1)
  T.eq(r.waits, "0,1,2")
  T.eq(r.weight, 2.0)
end)

-- a model whose val_loss is scripted: a LambdaCallback listed before the
-- EarlyStopping writes it into the epoch's logs, and keeps each epoch's weights
local function scripted_fit(model, x, y, script, es)
  local seen = {}
  local lambda = callbacks.LambdaCallback{ on_epoch_end = function(_, epoch, logs, m)
    logs.val_loss = script[epoch + 1]      -- epoch is Keras's, from 0
    local w = {}
    for i, v in ipairs(m.trainable_variables) do w[i] = v:cpu():clone() end
    seen[epoch + 1] = w
  end }
  local h = model:fit(x, y, { epochs = #script, batch_size = 16, verbose = 0, callbacks = { lambda, es } })
  return h, seen
end

local function max_diff(a, b) return (a:cpu() - b:cpu()):abs():max():item() end

T.test("EarlyStopping in a real fit: stops at Keras' epoch and restores the best weights", function()
  tensor.seed(3)
  local x = tensor.normal(64, 4)
  local y = x:slice(1, 0, 1) * 2 + 1
  local model = nn.Sequential{ nn.Dense(1) }
  model:compile{ optimizer = optim.SGD{ learning_rate = 0.05 }, loss = "mse" }
  local es = callbacks.EarlyStopping{ patience = 2, restore_best_weights = true }
  -- Keras with these val_loss values: best at epoch index 1, stopped_epoch 3 (0-based)
  local h, seen = scripted_fit(model, x, y, { 1.0, 0.5, 0.6, 0.7, 0.4, 0.3 }, es)
  T.eq(#h.loss, 4, "epochs run")
  T.eq(es.stopped_epoch, 3)
  T.eq(es.best_epoch, 1)
  for i, v in ipairs(model.trainable_variables) do
    T.eq(max_diff(v, seen[2][i]), 0, "weights are epoch 2's")
    T.ok(max_diff(v, seen[4][i]) > 0, "epoch 4 trained further")
  end
end)

T.test("EarlyStopping restores every replica of a mirrored variable", function()
  local strategy = distribute.MirroredStrategy{ devices = { "cpu:0", "cpu:1" } }
  tensor.seed(4)
  local x = tensor.normal(64, 4)
  local y = x:slice(1, 0, 1) * 2 + 1
  local model
  do
    local _ <close> = strategy:scope()
    model = nn.Sequential{ nn.Dense(1) }
    model:compile{ optimizer = optim.SGD{ learning_rate = 0.05 }, loss = "mse" }
  end
  local es = callbacks.EarlyStopping{ patience = 1, restore_best_weights = true }
  local h, seen = scripted_fit(model, x, y, { 0.9, 0.3, 0.8, 0.2 }, es)
  T.eq(#h.loss, 3, "epochs run")
  T.eq(es.stopped_epoch, 2)
  for i, v in ipairs(model.trainable_variables) do
    local copies = ldist._distribute.mirror_copies(v)
    T.eq(#copies, 2, "two replicas")
    for r, c in ipairs(copies) do T.eq(max_diff(c, seen[2][i]), 0, ("replica %d holds epoch 2's weights"):format(r - 1)) end
  end
end)

---------------------------------------------------------------- dict datasets
-- ds = tf.data.Dataset.from_tensor_slices({"feat": a, "label": b}) with
-- a = [[0,1],[2,3],[4,5]] (float32), b = [0,1,2] (int64):
--   elements [{'feat': [0.0, 1.0], 'label': 0}, {'feat': [2.0, 3.0], 'label': 1}, {'feat': [4.0, 5.0], 'label': 2}]
--   batch(2) [{'feat': [[0.0, 1.0], [2.0, 3.0]], 'label': [0, 1]}, {'feat': [[4.0, 5.0]], 'label': [2]}]
--   cardinality 3, take(2) 2, skip(1) 2, repeat(2) 6
local a = tensor.new{ { 0, 1 }, { 2, 3 }, { 4, 5 } }
local b = tensor.new{ 0, 1, 2 }:long()
local function dict_ds() return data.Dataset.from_tensor_slices{ feat = a, label = b } end
local function keys_of(t)
  local k = {}
  for key in pairs(t) do k[#k + 1] = tostring(key) end
  table.sort(k)
  return table.concat(k, ",")
end

T.test("from_tensor_slices of a dict yields tables with the same keys", function()
  local rows = {}
  for e in dict_ds() do
    T.eq(keys_of(e), "feat,label")
    rows[#rows + 1] = { vec(e.feat), e.label:item(), e.label.dtype }
  end
  T.eq(#rows, 3)
  for i = 1, 3 do
    near_all(rows[i][1], { 2 * (i - 1), 2 * (i - 1) + 1 }, 0, "feat row")
    T.eq(rows[i][2], i - 1)
    T.eq(rows[i][3], "int64")
  end
  T.ok(tostring(dict_ds()):find("of {feat, label}", 1, true), tostring(dict_ds()))
end)

T.test("batch of a dict dataset gives tables of batched tensors", function()
  local got = {}
  for e in dict_ds():batch(2) do
    T.eq(keys_of(e), "feat,label")
    got[#got + 1] = e
  end
  T.eq(#got, 2)
  T.eq(got[1].feat.shape[1], 2); T.eq(got[1].feat.shape[2], 2)
  near_all(vec(got[1].feat:reshape{ 4 }), { 0, 1, 2, 3 }, 0)
  near_all(vec(got[1].label), { 0, 1 }, 0)
  T.eq(got[2].feat.shape[1], 1)
  near_all(vec(got[2].label), { 2 }, 0)
  local n = 0
  for _ in dict_ds():batch(2, { drop_remainder = true }) do n = n + 1 end
  T.eq(n, 1)
end)

T.test("a dict flows through shuffle, take, skip, repeat, prefetch and cardinality", function()
  local ds = dict_ds()
  T.eq(ds:cardinality(), 3); T.eq(ds:take(2):cardinality(), 2)
  T.eq(ds:skip(1):cardinality(), 2); T.eq(ds:repeat_(2):cardinality(), 6)
  -- shuffling keeps each row's feat and label together, and is a permutation
  local seen = {}
  for e in ds:shuffle(3, { seed = 5 }):repeat_(2):prefetch(2) do
    local l = e.label:item()
    near_all(vec(e.feat), { 2 * l, 2 * l + 1 }, 0, "row " .. l)
    seen[l] = (seen[l] or 0) + 1
  end
  T.eq(seen[0], 2); T.eq(seen[1], 2); T.eq(seen[2], 2)
  local labels = {}
  for e in ds:skip(1):take(1) do labels[#labels + 1] = e.label:item() end
  T.eq(table.concat(labels, ","), "1")
  local it = ds:iter()
  T.eq(keys_of(it()), "feat,label")
  it:close()
end)

T.test("map over a dict gets the dict and may return a dict or a list", function()
  -- ds.map(lambda d: d["feat"] * 10) -> [[0.0, 10.0], [20.0, 30.0], [40.0, 50.0]]
  local out = {}
  for e in dict_ds():map(function(d) return d.feat * 10 end) do out[#out + 1] = vec(e[1]) end
  near_all(out[2], { 20, 30 }, 0)
  -- ds.map(lambda d: {"x": d["feat"] + 1, "y": d["label"]}) ->
  -- [{'x': [1.0, 2.0], 'y': 0}, {'x': [3.0, 4.0], 'y': 1}, {'x': [5.0, 6.0], 'y': 2}]
  local m = dict_ds():map(function(d) return { x = d.feat + 1, y = d.label } end)
  local bs = {}
  for e in m:batch(3) do T.eq(keys_of(e), "x,y"); bs[#bs + 1] = e end
  near_all(vec(bs[1].x:reshape{ 6 }), { 1, 2, 3, 4, 5, 6 }, 0)
  near_all(vec(bs[1].y), { 0, 1, 2 }, 0)
  -- a dict after a dict-returning map, and back to a list
  for e in m:map(function(d) return d.x, d.y end):take(1) do
    near_all(vec(e[1]), { 1, 2 }, 0); T.eq(e[2]:item(), 0)
  end
  T.raises(function()
    for _ in dict_ds():map(function(d) if d.label:item() == 1 then return d.feat end return { x = d.feat } end) do end
  end, "the map function returned a list of tensors here, but a table with keys {x} for an earlier element")
end)

T.test("a dict with no keys, uneven rows or a scalar is an error naming the keys", function()
  -- TF: from_tensor_slices({}) -> ValueError "Invalid `element`. `element` should not be empty."
  T.raises(function() data.Dataset.from_tensor_slices{} end, "the table is empty")
  -- TF: {"feat": a, "label": arange(4)} -> ValueError "Dimensions 3 and 4 are not compatible"
  T.raises(function() data.Dataset.from_tensor_slices{ feat = a, label = tensor.new{ 1, 2, 3, 4 } } end,
    "the first dimensions differ: 'feat' has 3 rows, 'label' has 4")
  T.raises(function() data.Dataset.from_tensor_slices{ feat = a, label = tensor.new(3) } end,
    "'label' is a scalar")
  T.raises(function() data.Dataset.from_tensor_slices{ feat = a, label = "x" } end, "'label' is a string")
  T.raises(function() data.Dataset.from_tensor_slices{ a, b, name = a } end, "cannot have other keys too")
end)

T.test("a list {x, y} and separate tensors still give lists", function()
  -- from_tensor_slices((a, b)).batch(2) -> ([[0,1],[2,3]], [0,1]), ([[4,5]], [2])
  for _, ds in ipairs{ data.Dataset.from_tensor_slices{ a, b }, data.Dataset.from_tensor_slices(a, b) } do
    local got = {}
    for e in ds:batch(2) do got[#got + 1] = e end
    T.eq(#got, 2)
    near_all(vec(got[1][2]), { 0, 1 }, 0)
    near_all(vec(got[2][1]:reshape{ 2 }), { 4, 5 }, 0)
  end
  -- tables of numbers as dict values become float32 tensors
  local n = 0
  for e in data.Dataset.from_tensor_slices{ feat = { { 1, 2 }, { 3, 4 } }, w = { 5, 6 } } do
    n = n + 1
    T.eq(e.w.dtype, "float32")
  end
  T.eq(n, 2)
end)

---------------------------------------------------------------- losses with sample_weight
-- y_true = [0, 2, 1]; y_pred = [[0.7,0.2,0.1],[0.1,0.3,0.6],[0.25,0.5,0.25]];
-- logits = [[2,1,0.1],[0.5,-1,1.5],[0,0.3,-0.2]]; w = [1.0, 0.5, 2.0]
local yt = tensor.new{ 0, 2, 1 }:long()
local yp = tensor.new{ { 0.7, 0.2, 0.1 }, { 0.1, 0.3, 0.6 }, { 0.25, 0.5, 0.25 } }
local logits = tensor.new{ { 2.0, 1.0, 0.1 }, { 0.5, -1.0, 1.5 }, { 0.0, 0.3, -0.2 } }
local w = tensor.new{ 1.0, 0.5, 2.0 }
local SCCE = losses.SparseCategoricalCrossentropy

T.test("sparse categorical cross-entropy with sample_weight", function()
  T.near(SCCE()(yt, yp):item(), 0.5202159285545349, 1e-6)                  -- no weights
  T.near(SCCE()(yt, yp, w):item(), 0.6661273837089539, 1e-6)               -- sum(w*l)/3
  T.near(SCCE()(yt, yp, 2.0):item(), 1.0404318571090698, 1e-6)             -- a number
  T.near(SCCE()(yt, yp, w:reshape{ 3, 1 }):item(), 0.6661273837089539, 1e-6)  -- [3, 1]
  T.near(SCCE()(yt, yp, { 1.0, 0.5, 2.0 }):item(), 0.6661273837089539, 1e-6)  -- a table
  T.near(SCCE()(yt, yp, tensor.new{ 0, 0, 0 }):item(), 0.0, 1e-9)          -- not NaN
  T.near(SCCE{ from_logits = true }(yt, logits, w):item(), 0.7697908878326416, 1e-6)
  T.near(SCCE{ reduction = "sum" }(yt, yp, w):item(), 1.9983820915222168, 1e-6)
  near_all(vec(SCCE{ reduction = "none" }(yt, yp, w)),
    { 0.3566749691963196, 0.2554127871990204, 1.3862943649291992 }, 1e-6)
end)

T.test("other losses with sample_weight", function()
  T.near(losses.CategoricalCrossentropy()(tensor.new{ { 1, 0, 0 }, { 0, 0, 1 }, { 0, 1, 0 } }, yp, w):item(),
    0.6661273837089539, 1e-6)
  T.near(losses.BinaryCrossentropy()(tensor.new{ { 1 }, { 0 }, { 1 } }, tensor.new{ { 0.9 }, { 0.2 }, { 0.4 } }, w):item(),
    0.683171272277832, 1e-6)
  local yr, pr = tensor.new{ { 1, 2 }, { 3, 4 }, { 5, 6 } }, tensor.new{ { 1.5, 2 }, { 2, 4.5 }, { 5, 8 } }
  T.near(losses.MeanSquaredError()(yr, pr):item(), 0.9166666865348816, 1e-6)
  T.near(losses.MeanSquaredError()(yr, pr, w):item(), 1.4791666269302368, 1e-6)
  -- 1-D y: Keras' per-example MSE is one scalar (the mean over the last axis),
  -- which the weights then broadcast: mean([1,0.5,2] * 1.6667) = 1.9444443
  local y1, p1 = tensor.new{ 1, 2, 3 }, tensor.new{ 2, 2, 5 }
  T.near(losses.MeanSquaredError()(y1, p1):item(), 1.6666666269302368, 1e-6)
  T.near(losses.MeanSquaredError()(y1, p1, w):item(), 1.9444442987442017, 1e-6)
  near_all(vec(losses.MeanSquaredError{ reduction = "none" }(y1, p1, w)),
    { 1.6666666269302368, 0.8333333134651184, 3.3333332538604736 }, 1e-6)
end)

T.test("label_smoothing as Keras 3.15 (values from keras.losses in the bench venv)", function()
  local y, p = tensor.new{ { 0, 1, 0 }, { 1, 0, 0 } }, tensor.new{ { 0.1, 0.8, 0.1 }, { 0.6, 0.3, 0.1 } }
  T.near(losses.CategoricalCrossentropy{ label_smoothing = 0.1 }(y, p):item(), 0.4777144193649292, 1e-6)
  T.near(losses.CategoricalCrossentropy{ from_logits = true, label_smoothing = 0.2 }(y, p):item(), 0.8448399305343628, 1e-6)
  local yb, pb = tensor.new{ { 1 }, { 0 } }, tensor.new{ { 0.8 }, { 0.3 } }
  T.near(losses.BinaryCrossentropy{ label_smoothing = 0.2 }(yb, pb):item(), 0.4015888571739197, 1e-6)
  T.near(losses.BinaryCrossentropy{ from_logits = true, label_smoothing = 0.2 }(yb, pb):item(), 0.6377279758453369, 1e-6)
  -- it travels with the loss's config (saved models, shipped to workers)
  local c = ldist.losses._config(losses.CategoricalCrossentropy{ label_smoothing = 0.1 })
  T.near(c.label_smoothing, 0.1, 1e-7)
  T.near(nn._build_loss(c)(y, p):item(), 0.4777144193649292, 1e-6)
end)

T.test("Keras's regression and hinge metrics: two updates, the second weighted (Keras 3.15's results)", function()
  -- m = keras.metrics.<Name>(); m.update_state(t, p); m.update_state(t[:2], p[:2], w[:2]); m.result()
  local want = {
    MeanSquaredError = 1.21611106, MeanAbsoluteError = 0.850000083, MeanAbsolutePercentageError = 33333408,
    MeanSquaredLogarithmicError = 0.181039795, RootMeanSquaredError = 1.10277426, LogCoshError = 0.44216308,
    CosineSimilarity = 0.707716048, KLDivergence = 0.869926929, Poisson = 1.25552177, Hinge = 1.46111107,
    SquaredHinge = 3.71166682, CategoricalHinge = 2.23333335,
  }
  local yt = tensor.new{ { 0.5, 1.5, -1 }, { 2, 0, 1 }, { 0.2, 0.3, 0.5 } }
  local yp = tensor.new{ { 1, 1, 0 }, { 0.5, 0.2, 3 }, { 0.3, 0.3, 0.4 } }
  local ytb = tensor.new{ { 0, 1, 1 }, { 1, 0, 0 }, { 0, 0, 1 } }
  local w = tensor.new{ 1, 2, 0.5 }
  for name, v in pairs(want) do
    local m = metrics[name]()
    local t = name:match("Hinge") and ytb or (name == "KLDivergence" or name == "Poisson") and yt:abs() or yt
    local p = (name == "KLDivergence" or name == "Poisson") and yp:abs() + 0.1 or yp
    m:update_state(t, p)
    m:update_state(t:slice(0, 0, 2), p:slice(0, 0, 2), w:slice(0, 0, 2))
    T.near(m:result(), v, 2e-6 * (1 + math.abs(v)), name)
    m:reset_state()
    T.eq(m:result(), 0.0, name .. " after reset_state")
  end
  -- Keras's default names, and its names in compile
  T.eq(metrics.LogCoshError().name, "logcosh")
  T.eq(metrics.RootMeanSquaredError().name, "root_mean_squared_error")
  T.eq(metrics.MeanAbsoluteError("my_mae").name, "my_mae")
end)

T.test("regression losses and metrics by Keras's names in compile, fit, evaluate and a saved model", function()
  tensor.seed(1)
  local x = tensor.normal(64, 3)
  local y = x:matmul(tensor.new{ { 1, -1 }, { 0.5, 2 }, { 0, 1 } }) + 0.1
  local m = nn.Sequential{ nn.Dense(2) }
  m:compile{ optimizer = optim.SGD{ learning_rate = 0.05 }, loss = "huber",
             metrics = { "mae", "mse", "root_mean_squared_error", metrics.CosineSimilarity() } }
  local h = m:fit(x, y, { epochs = 2, batch_size = 16, verbose = 0, validation_data = { x, y } })
  for _, k in ipairs { "loss", "mae", "mse", "root_mean_squared_error", "cosine_similarity", "val_loss", "val_mae",
                       "val_mse", "val_root_mean_squared_error", "val_cosine_similarity" } do
    T.eq(#h.history[k], 2, "history." .. k)
  end
  T.near(h.history.val_root_mean_squared_error[2], math.sqrt(h.history.val_mse[2]), 1e-9, "rmse is the root of mse")
  -- the metrics from the predictions, as a user would compute them
  local pred = m:predict(x, { verbose = 0 })
  local r = m:evaluate(x, y, { verbose = 0, return_dict = true })
  T.near(r.mae, (pred - y):abs():mean():item(), 1e-6, "evaluate's mae")
  T.near(r.loss, losses.Huber()(y, pred):item(), 1e-6, "evaluate's loss is Huber's")
  local path = os.tmpname()
  m:save(path)
  local m2 = nn.load_model(path)
  os.remove(path)
  local r2 = m2:evaluate(x, y, { verbose = 0 })
  T.near(r2.root_mean_squared_error, r.root_mean_squared_error, 1e-9, "a saved model keeps its metrics")
  T.near(r2.loss, r.loss, 1e-9, "and its loss")
  local d = ldist.losses._config(losses.Huber{ delta = 0.25 })
  T.eq(d.name, "huber_loss")
  T.near(nn._build_loss(d)(tensor.new{ { 1 } }, tensor.new{ { 2 } }):item(), 0.25 * 1 - 0.5 * 0.0625, 1e-7,
    "Huber's delta travels with its config")
  T.raises(function() m:compile{ optimizer = "sgd", loss = "mae", metrics = { "rmse" } } end, "unknown metric rmse")
  -- return_dict=false: Keras's list, loss first, then the metrics in compile's order
  local l = m:evaluate(x, y, { return_dict = false })
  T.eq(#l, 1 + #m._metrics, "the loss and each metric")
  T.near(l[1], r.loss, 1e-9, "the list's loss")
  T.near(l[#l], r[m._metrics[#m._metrics].name], 1e-9, "the list's last metric, in compile's order")
  T.raises(function() m:evaluate(x, y, { return_dict = "no" }) end, "return_dict must be a boolean")
  T.raises(function() losses.Huber{ delta = -1 } end, "delta must be a positive number")
  T.raises(function() losses.Huber{ delt = 1 } end, "did you mean 'delta'?")
  T.raises(function() losses.MeanAbsoluteError{ from_logits = true } end, "unknown option 'from_logits'")
end)

T.test("a loss's unknown option, or one of Keras's that ldist does not do, is an error naming it", function()
  T.raises(function() losses.SparseCategoricalCrossentropy{ label_smoothing = 0.1 } end,
    "losses.SparseCategoricalCrossentropy: unknown option 'label_smoothing' (it takes from_logits, ignore_class, axis,")
  T.raises(function() losses.MeanSquaredError{ from_logits = true } end, "losses.MeanSquaredError: unknown option 'from_logits' (it takes reduction, name, dtype)")
  T.raises(function() losses.CategoricalCrossentropy{ from_logit = true } end, "unknown option 'from_logit'; did you mean 'from_logits'?")
  T.raises(function() losses.SparseCategoricalCrossentropy{ ignore_class = "void" } end, "ignore_class must be an integer")
  T.raises(function() losses.BinaryCrossentropy{ axis = 0 } end, "axis must be -1")
  T.raises(function() losses.CategoricalCrossentropy{ label_smoothing = 1.5 } end, "label_smoothing must be in [0, 1]")
  T.ok(losses.CategoricalCrossentropy{ axis = -1, name = "cce", dtype = "float32" }, "Keras's defaults")
  T.ok(losses.MeanSquaredError{ from_logits = false }, "a saved config's from_logits = false")
end)

T.test("the gradient of a weighted loss is TF's", function()
  -- with tf.GradientTape() as t: l = SCCE(from_logits=True)(y_true, v, sample_weight=w); t.gradient(l, v)
  local v = tensor.Variable(logits:clone())
  local tape = autograd.GradientTape()
  local loss = tape:record(function() return SCCE{ from_logits = true }(yt, v, w) end)
  local g = vec(tape:gradient(loss, { v })[1]:reshape{ 9 })
  near_all(g, { -0.11366628110408783, 0.08081100136041641, 0.03285530209541321,
    0.04228603094816208, 0.009435288608074188, -0.051721327006816864,
    0.21039855480194092, -0.38265833258628845, 0.17225977778434753 }, 1e-5)
end)

T.test("weights made on the host weigh losses computed on another device", function()
  -- the same as SCCE(from_logits=True)(y_true, logits, sample_weight=w) above: 0.7697908878
  local l = SCCE{ from_logits = true }(yt:to("cpu:1"), logits:to("cpu:1"), w)
  T.eq(l.device, "cpu:1")
  T.near(l:item(), 0.7697908878326416, 1e-6)
end)

T.test("sample_weight that does not broadcast is an error", function()
  -- TF: sample_weight=[1, 1] -> InvalidArgumentError "Incompatible shapes: [3] vs. [2] [Op:Mul]"
  T.raises(function() SCCE()(yt, yp, tensor.new{ 1, 1 }) end, "bad argument #3 to 'loss' (sample_weight 2 does not broadcast")
  T.raises(function() SCCE()(yt, yp, "x") end, "sample_weight must be a number or a tensor")
end)

T.test("evaluate with sample weights: each batch's weighted loss, averaged by rows (Keras 3.15: 2.2 and 2.0)", function()
  local m = nn.Sequential { nn.Dense(1) }
  m:build { 2 }
  m:set_weights { tensor.ones(2, 1), tensor.zeros(1) }
  m:compile { optimizer = "sgd", loss = "mean_squared_error" }
  local x, y = tensor.new { { 1, 0 }, { 0, 1 }, { 1, 1 }, { 2, 0 }, { 0, 0 } }, tensor.zeros(5, 1)
  local w = tensor.new { 1, 0, 2, 0.5, 3 }
  T.near(m:evaluate(x, y, { sample_weight = w, batch_size = 2 }).loss, 2.2, 1e-6)
  T.near(m:evaluate(x, y, { batch_size = 2 }).loss, 2.0, 1e-6)
end)

-- Keras 3's train_on_batch / test_on_batch / predict_on_batch: each call's
-- values are that batch's alone, computed before its update. Keras 3.15's, by:
--   m = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
--   m.compile(optimizer=keras.optimizers.SGD(), loss="mse", metrics=["mae"])
--   m.set_weights([[[0.1, -0.2], [0.3, 0.4], [-0.5, 0.6]], [0, 0]]); x, y = ones((4, 3)), zeros((4, 2))
--   train_on_batch(x, y) three times, the third with return_dict=True, then test_on_batch(x, y)
local KERAS_ON_BATCH = { { 0.32500001788139343, 0.44999998807907104 }, { 0.29952001571655273, 0.4320000112056732 },
  { 0.27603766322135925, 0.4147200286388397 }, { 0.2543962895870209, 0.39813122153282166 } }
local function on_batch_model(metrics)
  local m = nn.Sequential { nn.Input { shape = { 3 } }, nn.Dense(2) }
  m:compile { optimizer = optim.SGD(), loss = "mse", metrics = metrics }
  m:set_weights({ tensor.new { { 0.1, -0.2 }, { 0.3, 0.4 }, { -0.5, 0.6 } }, tensor.zeros(2) })
  return m
end
for _, how in ipairs({ "default", "OneDevice cpu:1", "Mirrored over cpu:0 and cpu:1" }) do
  T.test("train_on_batch / test_on_batch / predict_on_batch equal Keras 3's under " .. how, function()
    local strategy = how:match("^OneDevice") and distribute.OneDeviceStrategy("cpu:1")
      or how:match("^Mirrored") and distribute.MirroredStrategy { devices = { "cpu:0", "cpu:1" } } or nil
    local m
    if strategy then strategy:scope(function() m = on_batch_model({ "mae" }) end) else m = on_batch_model({ "mae" }) end
    local x, y = tensor.ones(4, 3), tensor.zeros(4, 2)
    local r1, r2 = m:train_on_batch(x, y), m:train_on_batch(x, y)
    local d = m:train_on_batch(x, y, { return_dict = true })
    local r4 = m:test_on_batch(x, y)
    for i, got in ipairs({ r1, r2, { d.loss, d.mae }, r4 }) do
      T.near(got[1], KERAS_ON_BATCH[i][1], 1e-6, how .. ": loss of call " .. i)
      T.near(got[2], KERAS_ON_BATCH[i][2], 1e-6, how .. ": mae of call " .. i)
    end
    local p = m:predict_on_batch(x)
    T.eq(table.concat(p.shape, ","), "4,2", "predict_on_batch: one row per sample")
    T.near(p[0][1], 0.8 * 0.96 ^ 3, 1e-6, "the predictions after three SGD steps")
    T.eq(m.history, nil, "train_on_batch leaves model.history alone")
  end)
end

T.test("train_on_batch: weights, the loss alone without metrics, GAN-style alternation, and errors", function()
  local m = on_batch_model(nil)
  local x, y = tensor.ones(4, 3), tensor.zeros(4, 2)
  T.eq(type(m:train_on_batch(x, y)), "number", "no metrics: the loss alone, as Keras's")
  -- sample weights: sum(w * l) / rows; class weights on integer labels
  local m2 = on_batch_model(nil)
  local w = tensor.new { 1, 0, 0, 0 }
  T.near(m2:test_on_batch(x, y, { sample_weight = w }), 0.325 / 4, 1e-7, "a sample weight of 1 in 4 rows")
  local c = nn.Sequential { nn.Input { shape = { 3 } }, nn.Dense(2) }
  c:compile { optimizer = optim.SGD(), loss = losses.SparseCategoricalCrossentropy { from_logits = true } }
  local yi = tensor.new({ 0, 1, 1, 0 }, { dtype = "int64" })
  local plain = c:test_on_batch(x, yi)
  local cw = c:test_on_batch(x, yi, { sample_weight = tensor.new { 2, 2, 2, 2 } })
  T.near(cw, 2 * plain, 1e-6, "weights scale the loss")
  local before = c:get_weights()[1]:clone()
  c:train_on_batch(x, yi, { class_weight = { [0] = 0, [1] = 0 } })
  T.eq((c:get_weights()[1] - before):abs():sum():item(), 0, "class weights of 0: no update")
  -- a generator and a discriminator trained in turn, as GAN tutorials do
  local g = nn.Sequential { nn.Input { shape = { 2 } }, nn.Dense(3, "tanh") }
  local dsc = nn.Sequential { nn.Input { shape = { 3 } }, nn.Dense(1) }
  dsc:compile { optimizer = optim.Adam(), loss = losses.BinaryCrossentropy { from_logits = true } }
  g:compile { optimizer = optim.Adam(), loss = "mse" }
  local first, last
  for i = 1, 20 do
    local fake = g:predict_on_batch(tensor.normal(8, 2))
    local l = dsc:train_on_batch(tensor.concat({ tensor.normal(8, 3) + 2, fake }, 0),
      tensor.concat({ tensor.ones(8, 1), tensor.zeros(8, 1) }, 0))
    first = first or l
    last = l
  end
  T.ok(last < first, ("the discriminator learns: %.4f -> %.4f"):format(first, last))
  -- errors, and the session goes on
  T.raises(function() m:train_on_batch(x) end, "no targets")
  T.raises(function() m:train_on_batch(x, y, { epochs = 2 }) end, "epochs")
  T.raises(function() m:train_on_batch(data.Dataset.from_tensor_slices(x, y):batch(2)) end, "one batch, not a dataset")
  T.raises(function() m:train_on_batch(x, tensor.zeros(3, 2)) end, "")
  T.raises(function() nn.Sequential { nn.Dense(1) }:train_on_batch(x, y) end, "compile")
  T.eq(type(m:train_on_batch(x, y)), "number", "the session goes on")
end)

-- Keras's confusion-matrix metrics, AUC and top-k accuracies: Keras 3.15's
-- results on these arrays (two update_state calls of 25 and 15 rows; then
-- one with sample weights), and compile's names for them
T.test("Precision, Recall, TP/FP/TN/FN, AUC (ROC, PR, minoring), top-k accuracies equal Keras 3's", function()
  local yt = tensor.new({ 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0 }):reshape(40, 1)
  local yp = tensor.new({ 0.6139808893203735, 0.8592576384544373, 0.1648615151643753, 0.5, 0.5599156618118286, 0.35494768619537354, 0.35446950793266296, 1.0, 0.01017539668828249, 0.0, 0.3600780665874481, 0.5914487838745117, 0.2575165033340454, 0.9657161235809326, 0.5795977115631104, 0.9555094838142395, 0.38931185007095337, 0.1680947244167328, 0.8189951777458191, 0.4720728099346161, 0.4789436459541321, 0.324677050113678, 0.4553219974040985, 0.4486581087112427, 0.3749626576900482, 0.7845556139945984, 0.4447707533836365, 0.5635587573051453, 0.8589663505554199, 0.13581782579421997, 0.5733212232589722, 0.5585536956787109, 0.266332745552063, 0.49928051233291626, 0.4287624657154083, 0.658700704574585, 0.9941737055778503, 0.5065733790397644, 0.5661906599998474, 0.40700551867485046 }):reshape(40, 1)
  local w = tensor.new({ 0.7128902673721313, 0.8476243615150452, 0.401225745677948, 0.5532500147819519, 0.47948774695396423, 0.9585229754447937, 0.31727784872055054, 0.4020845293998718, 0.0009197891340591013, 0.42018452286720276, 0.6314361095428467, 0.9349610805511475, 0.923676609992981, 0.32734981179237366, 0.9888610243797302, 0.18767493963241577, 0.8232520222663879, 0.1572594940662384, 0.40509864687919617, 0.07347331196069717, 0.8580389022827148, 0.8287980556488037, 0.13978929817676544, 0.5271064639091492, 0.25814148783683777, 0.4917756915092468, 0.5532060265541077, 0.10626205056905746, 0.8643755912780762, 0.27869632840156555, 0.44712331891059875, 0.05725859850645065, 0.002745206467807293, 0.19515952467918396, 0.34167519211769104, 0.9281134009361267, 0.889728307723999, 0.4805010259151459, 0.454759806394577, 0.6669930219650269 })
  local cases = {
    { "prec", function() return metrics.Precision() end, 0.611111104, 0.626504898 },
    { "rec", function() return metrics.Recall() end, 0.6875, 0.747588992 },
    { "prec_t", function() return metrics.Precision{ thresholds = 0.7 } end, 0.875, 0.908942342 },
    { "tp", function() return metrics.TruePositives() end, 11, 6.26876402 },
    { "fp", function() return metrics.FalsePositives() end, 7, 3.73716617 },
    { "tn", function() return metrics.TrueNegatives() end, 17, 7.79428387 },
    { "fn", function() return metrics.FalseNegatives() end, 5, 2.11654425 },
    { "auc", function() return metrics.AUC() end, 0.74609375, 0.761516094 },
    { "auc_pr", function() return metrics.AUC{ curve = "PR" } end, 0.643702865, 0.680521786 },
    { "auc_50", function() return metrics.AUC{ num_thresholds = 50 } end, 0.744791687, 0.763010383 },
    { "auc_min", function() return metrics.AUC{ summation_method = "minoring" } end, 0.744791687, 0.761266232 },
  }
  for _, c in ipairs(cases) do
    local m = c[2]()
    m:update_state(yt:slice(0, 0, 25), yp:slice(0, 0, 25))
    m:update_state(yt:slice(0, 25, 40), yp:slice(0, 25, 40))
    T.near(m:result(), c[3], 2e-6 * (1 + math.abs(c[3])), c[1] .. ": two batches")
    local mw = c[2]()
    mw:update_state(yt, yp, w)
    T.near(mw:result(), c[4], 2e-6 * (1 + math.abs(c[4])), c[1] .. ": with sample weights")
    m:reset_state()
    T.eq(m:result(), 0, c[1] .. ": reset")
  end
  local lab = tensor.new({ 2, 5, 1, 2, 0, 4, 3, 2, 5, 3, 5, 4, 3, 3, 1, 4, 4, 4, 2, 0, 4, 0, 4, 0, 1, 1, 3, 1, 1, 0 }, { dtype = "int64" })
  local pr = tensor.new({ 0.5, 0.5, 0.5, 0.10000000149011612, 0.10000000149011612, 0.10000000149011612, 0.6803417801856995, 0.7852739691734314, 0.9409580826759338, 0.3757000267505646, 0.7067741751670837, 0.34163400530815125, 0.8240017890930176, 0.23064890503883362, 0.8710137009620667, 0.5051052570343018, 0.7253440022468567, 0.5349929928779602, 0.31612133979797363, 0.4943018853664398, 0.050450414419174194, 0.04299256578087807, 0.5299633145332336, 0.4771744906902313, 0.8331373333930969, 0.020122617483139038, 0.5568838119506836, 0.4906370937824249, 0.5979971289634705, 0.7295786142349243, 0.5247406363487244, 0.5630382299423218, 0.49178388714790344, 0.6152070164680481, 0.24812722206115723, 0.5526134371757507, 0.6723868250846863, 0.19111278653144836, 0.99036705493927, 0.7464594841003418, 0.9553312659263611, 0.29394638538360596, 0.4434928894042969, 0.2614385485649109, 0.046691615134477615, 0.01667683757841587, 0.24674783647060394, 0.8612625598907471, 0.16369415819644928, 0.6896225810050964, 0.249381884932518, 0.06558293849229813, 0.19248656928539276, 0.6779263615608215, 0.5016562342643738, 0.5490310192108154, 0.453164279460907, 0.2743479311466217, 0.4883478283882141, 0.9224461317062378, 0.20149493217468262, 0.7327340841293335, 0.251129686832428, 0.1934160441160202, 0.32384538650512695, 0.09277916699647903, 0.9353743195533752, 0.36513400077819824, 0.1758376657962799, 1.3601257933260058e-06, 0.06042750924825668, 0.2146514654159546, 0.4176536500453949, 0.6015702486038208, 0.9810306429862976, 0.890477180480957, 0.2422540783882141, 0.6115452647209167, 0.9215418100357056, 0.10160234570503235, 0.8540389537811279, 0.3960706889629364, 0.7816874384880066, 0.3225971758365631, 0.6257228255271912, 0.5070158243179321, 0.1044212058186531, 0.7598021030426025, 0.8229442238807678, 0.48298484086990356, 0.38801032304763794, 0.9474916458129883, 0.37430962920188904, 0.8796188235282898, 0.4185740649700165, 0.3735162019729614, 0.3614276349544525, 0.05999748781323433, 0.2773185968399048, 0.22948013246059418, 0.06234436109662056, 0.5415686368942261, 0.4422011077404022, 0.0251083392649889, 0.15591910481452942, 0.9187073707580566, 0.13360507786273956, 0.37332820892333984, 0.9507765769958496, 0.11335588991641998, 0.4098284840583801, 0.8011138439178467, 0.019083460792899132, 0.06782404333353043, 0.9299284815788269, 0.6842315793037415, 0.2610379159450531, 0.48023921251296997, 0.2489478886127472, 0.8924385905265808, 0.94980788230896, 0.07102689146995544, 0.5240841507911682, 0.1840382069349289, 0.40438222885131836, 0.7411945462226868, 0.713327944278717, 0.18981485068798065, 0.3322775959968567, 0.4252674877643585, 0.3862852454185486, 0.6821418404579163, 0.788353443145752, 0.33543023467063904, 0.44121652841567993, 0.06730397790670395, 0.36680716276168823, 0.9469578862190247, 0.5021780133247375, 0.557190477848053, 0.6061164736747742, 0.5671790838241577, 0.8044566512107849, 0.2595764398574829, 0.3165814280509949, 0.8868231177330017, 0.49993106722831726, 0.9598375558853149, 0.13894230127334595, 0.7831586003303528, 0.47301599383354187, 0.4738501310348511, 0.881075382232666, 0.13064506649971008, 0.5144471526145935, 0.24957634508609772, 0.3428289294242859, 0.8173229694366455, 0.39816081523895264, 0.7844124436378479, 0.013489318080246449, 0.9993380308151245, 0.9552664160728455, 0.6785007119178772, 0.19681482017040253, 0.6568306088447571, 0.19022563099861145, 0.3734138011932373, 0.03497752174735069, 0.07023100554943085, 0.15773683786392212, 0.181855246424675, 0.838448703289032, 0.2440519481897354, 0.8254251480102539, 0.006191901862621307, 0.05787551775574684, 0.06089194491505623, 0.9316419959068298, 0.817267656326294 }):reshape(30, 6)
  local k2 = metrics.SparseTopKCategoricalAccuracy { k = 2 }
  k2:update_state(lab, pr)
  T.near(k2:result(), 0.30000001192092896, 1e-7, "sparse top-2 (a tie with the 2nd counts, as TF's in_top_k)")
  local k5 = metrics.SparseTopKCategoricalAccuracy()
  k5:update_state(lab, pr)
  T.near(k5:result(), 0.8333333134651184, 1e-7, "sparse top-5")
  local k3 = metrics.TopKCategoricalAccuracy { k = 3 }
  k3:update_state(tensor.one_hot(lab, 6), pr)
  T.near(k3:result(), 0.46666666865348816, 1e-7, "top-3 of one-hot labels")
  -- compile takes Keras's names; fit's history has Keras's keys
  local m = nn.Sequential { nn.Input { shape = { 3 } }, nn.Dense(1, "sigmoid") }
  m:compile { optimizer = "adam", loss = "binary_crossentropy", metrics = { "precision", "recall", "auc" } }
  local x = tensor.normal(64, 3)
  local h = m:fit(x, (x:slice(1, 0, 1):gt(0)):astype("float32"), { epochs = 2, verbose = 0, batch_size = 16 })
  T.ok(h.history.precision and h.history.recall and h.history.auc, "history keys precision, recall, auc")
  T.raises(function() return metrics.Precision { top_k = 3 } end, "unknown option 'top_k'")
  T.raises(function() return metrics.AUC { curve = "roc" } end, "curve must be")
  T.raises(function() return metrics.Precision { thresholds = 2 } end, "thresholds must be one number in [0, 1]")
end)

-- Keras's weighted_metrics (compile): given the step's sample weights (sample_weight,
-- class_weight); one whose name a plain metric has is "weighted_<name>". Keras 3.15's
-- numbers for a Dense(3) of fixed weights: evaluate with sample_weight (batches of 5),
-- fit one epoch with class_weight (batches of 4), as written by Keras's evaluate and
-- fit (build/bench-venv) on the same values.
T.test("weighted_metrics: the step's sample weights (sample_weight, class_weight), Keras's names and numbers", function()
  local x = tensor.new { { 0.428, -0.571, 2.654, -1.609 }, { 0.662, -0.143, -0.355, 1.066 }, { -1.818, -0.985, -0.114, 1.741 },
    { 0.089, 0.896, -1.863, -1.239 }, { 0.97, -0.628, -0.063, 0.731 }, { -2.205, -1.201, -0.094, -1.546 },
    { -0.711, -0.042, -0.665, -0.269 }, { 0.041, 1.33, 1.579, -0.395 }, { -0.828, 0.889, 0.511, 0.249 },
    { -0.908, 0.645, 0.872, -1.785 }, { 1.017, -0.073, -0.743, -1.577 }, { -0.342, -0.061, -0.375, -1.204 } }
  local y = tensor.new({ 0, 0, 1, 1, 0, 2, 2, 2, 0, 1, 2, 2 }, { dtype = "int64" })
  local w = tensor.new { 1.47, 0.775, 0.426, 2.453, 0.451, 1.945, 2.587, 0.778, 2.256, 0.352, 0.111, 2.028 }
  local k = tensor.new { { -0.511, 1.246, 0.407 }, { -0.092, 0.408, 0.358 }, { -0.032, -0.249, -0.374 }, { -0.386, 0.279, -0.118 } }
  local b = tensor.new { 0.964, 1.38, -0.055 }
  local function model(weighted)
    local m = nn.Sequential { nn.Dense(3) }
    m(x)
    m:set_weights { k, b }
    m:compile { optimizer = "sgd", loss = losses.SparseCategoricalCrossentropy { from_logits = true },
      metrics = { "accuracy" }, weighted_metrics = weighted }
    return m
  end
  local m = model { "accuracy", metrics.SparseTopKCategoricalAccuracy { k = 2 } }
  local r = m:evaluate(x, y, { sample_weight = w, batch_size = 5 })
  T.near(r.accuracy, 0.25, 1e-7, "the plain accuracy")
  T.near(r.weighted_accuracy, 0.3952789008617401, 1e-6, "weighted_accuracy")
  T.near(r.sparse_top_k_categorical_accuracy, 0.6479017734527588, 1e-6, "a weighted top-k accuracy keeps its name")
  T.near(r.loss, 2.2944023609161377, 1e-6, "the loss")
  local m2 = model { "accuracy" }
  local h = m2:fit(x, y, { class_weight = { [0] = 1.0, [1] = 3.0, [2] = 0.5 }, batch_size = 4, epochs = 1, shuffle = false, verbose = 0 })
  T.near(h.history.accuracy[1], 0.25, 1e-7, "fit's plain accuracy")
  T.near(h.history.weighted_accuracy[1], 0.32258063554763794, 1e-6, "fit's weighted accuracy: the class weights")
  T.near(h.history.loss[1], 2.346713066101074, 1e-5, "fit's loss")
  T.near(m2.weights[1]:totable()[1][1], -0.4877217710018158, 1e-6, "the weights after the epoch")
  -- without weights a weighted metric is the plain one; saved and loaded it stays weighted
  local plain = m:evaluate(x, y, { batch_size = 5 })
  T.eq(plain.weighted_accuracy, plain.accuracy)
  local file = T.tmpdir() .. "/weighted.safetensors"
  m:save(file)
  local back = nn.load_model(file):evaluate(x, y, { sample_weight = w, batch_size = 5 })
  T.near(back.weighted_accuracy, 0.3952789008617401, 1e-6, "weighted after load_model")
  T.near(back.sparse_top_k_categorical_accuracy, 0.6479017734527588, 1e-6, "top-k weighted after load_model")
  T.raises(function() model("accuracy") end, "weighted_metrics must be a list of metrics")
  -- a sequence model's predictions [batch, t, classes]: each row's weight on its positions (Keras 3.15's numbers)
  local ps = tensor.new { { { -0.802, -1.324, -0.248, 0.42, 1.136 }, { 0.11, -0.553, -0.785, 0.749, 1.635 }, { 0.273, -1.233, -0.958, 1.6, 0.203 } },
    { { -1.732, -0.084, -1.163, -0.629, -0.488 }, { -0.713, 0.553, -0.063, -0.589, 0.41 }, { 0.83, -1.643, -0.257, -0.981, -0.173 } },
    { { -1.289, 0.021, -0.038, -0.304, -1.048 }, { -0.396, -1.091, -1.355, 0.225, -1.109 }, { 1.17, 0.717, -1.998, 0.272, -1.102 } },
    { { 0.033, 0.044, -1.988, -0.233, -0.256 }, { 0.962, -1.181, 0.738, -1.099, -0.331 }, { -0.84, 1.449, 0.568, 2.432, 0.642 } } }
  local ys = tensor.new({ { 4, 3, 3 }, { 2, 4, 1 }, { 1, 3, 3 }, { 0, 0, 3 } }, { dtype = "int64" })
  local ws = tensor.new { 1.0, 0.5, 2.0, 0.0 }
  local sa = metrics.SparseCategoricalAccuracy()
  sa:update_state(ys, ps, ws)
  T.near(sa:result(), 0.5714285969734192, 1e-7, "weighted accuracy over a sequence's positions")
  local st = metrics.SparseTopKCategoricalAccuracy { k = 2 }
  st:update_state(ys, ps, ws)
  T.near(st:result(), 0.7142857313156128, 1e-7, "weighted top-2 accuracy over a sequence's positions")
  -- several outputs: weighted_metrics per output, Keras's names (<output>_weighted_<metric> where taken)
  tensor.seed(3)
  local a = nn.Input { shape = { 3 } }
  local hid = nn.Dense(8, "tanh")(a)
  local mo = nn.Model { inputs = a, outputs = { nn.Dense(3, { name = "out_a" })(hid), nn.Dense(1, { name = "out_b" })(hid) } }
  mo:compile { optimizer = "sgd", loss = { out_a = losses.SparseCategoricalCrossentropy { from_logits = true }, out_b = "mse" },
    metrics = { out_a = { "accuracy" } }, weighted_metrics = { out_a = { "accuracy" }, out_b = { "mae" } } }
  local xo, ya, yb = tensor.normal(10, 3), tensor.new({ 0, 1, 2, 0, 1, 2, 0, 1, 2, 0 }, { dtype = "int64" }), tensor.normal(10, 1)
  local wo = tensor.new { 1, 0, 0, 0, 0, 0, 0, 0, 0, 1 }   -- rows 1 and 10 only
  local ro = mo:evaluate(xo, { ya, yb }, { sample_weight = wo })
  local pa, pb = table.unpack(mo:predict(xo))
  local hits, arg, lab, pbt, ybt = 0, pa:argmax(1):totable(), ya:totable(), pb:totable(), yb:totable()
  for _, i in ipairs { 1, 10 } do if arg[i] == lab[i] then hits = hits + 1 end end
  T.near(ro.out_a_weighted_accuracy, hits / 2, 1e-7, "out_a_weighted_accuracy: the weighted rows only")
  local mae = (math.abs(pbt[1][1] - ybt[1][1]) + math.abs(pbt[10][1] - ybt[10][1])) / 2
  T.near(ro.out_b_mae, mae, 1e-5, "out_b_mae (weighted, its name free)")
  T.ok(ro.out_a_accuracy ~= nil, "the plain accuracy is there too")
end)

T.done()
