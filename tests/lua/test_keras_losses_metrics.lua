-- test_keras_losses_metrics.lua - Keras 3's focal losses, ignore_class, Dice
-- and Tversky (values, per-example losses and gradients w.r.t. y_pred) and
-- its F-score, R2, IoU and at-recall/precision metrics (two batches, the
-- second weighted), on the host and on the logical device cpu:1, against
-- Keras 3.15.1 / TensorFlow 2.21: the numbers are in
-- tests/fixtures/keras_losses_metrics.lua, written by
-- scripts/fixtures/make_keras_loss_metric_fixtures.py (eager Keras, the
-- gradients by tf.GradientTape).
local T = dofile("tests/lua/testlib.lua")
ldist.config.cpu_devices(2)
local F = dofile("tests/fixtures/keras_losses_metrics.lua")

local function t_of(a, dtype)
  local flat = {}
  for i, v in ipairs(a.v) do flat[i] = v end
  local t = #a.shape == 0 and tensor.new(flat[1]) or tensor.new(flat, dtype and { dtype = dtype } or nil)
  if #a.shape > 1 then t = t:reshape(a.shape) end
  return t
end
local function near_all(got, want, tol, what)
  T.eq(#got, #want, what .. ": count")
  for i = 1, #want do
    local w = want[i]
    T.near(got[i], w, tol * (1 + math.abs(w)), ("%s [%d]"):format(what, i))
  end
end
local function flat(t) return t:cpu():reshape { t:numel() }:totable() end

---------------------------------------------------------------- losses
local function check_loss(name, c, dev)
  local what = ("%s on %s"):format(name, dev)
  local sparse = c.class == "SparseCategoricalCrossentropy"
  local yt = t_of(c.y_true, sparse and "int64" or nil):to(dev)
  local v = tensor.Variable(t_of(c.y_pred):to(dev))
  local w = c.sample_weight and t_of(c.sample_weight):to(dev)
  local loss = losses[c.class](c.opts)
  local tape = autograd.GradientTape()
  local val = tape:record(function() return loss(yt, v, w) end)
  T.eq(val.device, dev, what .. ": computed on the predictions' device")
  T.near(val:item(), c.value, 2e-6 * (1 + math.abs(c.value)), what .. ": value")
  near_all(flat(tape:gradient(val, { v })[1]), c.grad.v, 2e-5, what .. ": gradient (TF's GradientTape)")
  local o = {}
  for k, x in pairs(c.opts) do o[k] = x end
  o.reduction = "none"
  near_all(flat(losses[c.class](o)(yt, v)), c.per.v, 2e-6, what .. ": per example (reduction none)")
end

-- every case of a fixture table, in name order, checked on the host and on cpu:1
local function each_case(title, cases, check)
  local names = {}
  for name in pairs(cases) do names[#names + 1] = name end
  table.sort(names)
  for _, dev in ipairs { "cpu:0", "cpu:1" } do
    T.test(title .. " on " .. dev, function()
      for _, name in ipairs(names) do check(name, cases[name], dev) end
    end)
  end
end
each_case("Keras 3.15's losses: values, per-example losses and gradients", F.losses, check_loss)

T.test("the new losses by Keras's names in compile, and their configs travel", function()
  for _, n in ipairs { "binary_focal_crossentropy", "categorical_focal_crossentropy", "dice", "tversky" } do
    local m = nn.Sequential { nn.Input { shape = { 3 } }, nn.Dense(2, "sigmoid") }
    m:compile { optimizer = "sgd", loss = n }
    T.eq(m._loss.name, n, n)
    local x = tensor.normal(8, 3)
    local y = (x:slice(1, 0, 2):gt(0)):astype("float32")
    local h = m:fit(x, y, { epochs = 1, batch_size = 4, verbose = 0 })
    T.ok(h.history.loss[1] == h.history.loss[1], n .. ": a finite loss in fit")
    local r = m:evaluate(x, y, { verbose = 0 })
    T.near(r.loss, losses[losses._classes[n]]()(y, m:predict(x, { verbose = 0 })):item(), 1e-6, n .. ": evaluate's loss")
  end
  -- every option survives losses._config and nn._build_loss (saved models, a LocalCluster's workers)
  local c = F.losses.bfce_balanced
  local l2 = nn._build_loss(ldist.losses._config(losses.BinaryFocalCrossentropy(c.opts)))
  T.near(l2(t_of(c.y_true), t_of(c.y_pred)):item(), c.value, 2e-6, "binary focal's options travel")
  local s = F.losses.scce_ignore_weighted
  local cfg = ldist.losses._config(losses.SparseCategoricalCrossentropy(s.opts))
  T.eq(cfg.ignore_class, 2, "ignore_class in the config")
  T.near(nn._build_loss(cfg)(t_of(s.y_true, "int64"), t_of(s.y_pred), t_of(s.sample_weight)):item(), s.value, 2e-6,
    "ignore_class travels")
  local d = F.losses.dice_axis
  local dcfg = ldist.losses._config(losses.Dice(d.opts))
  T.eq(#dcfg.axis, 2, "Dice's axes in the config")
  T.near(nn._build_loss(dcfg)(t_of(d.y_true), t_of(d.y_pred)):item(), d.value, 2e-6, "Dice's axes travel")
  local tv = F.losses.tversky_ab_rows
  T.near(nn._build_loss(ldist.losses._config(losses.Tversky(tv.opts)))(t_of(tv.y_true), t_of(tv.y_pred)):item(),
    tv.value, 2e-6, "Tversky's alpha, beta and axis travel")
end)

T.test("the new losses' bad options are errors naming the loss and the problem", function()
  T.raises(function() losses.BinaryFocalCrossentropy { gama = 2 } end,
    "losses.BinaryFocalCrossentropy: unknown option 'gama'; did you mean 'gamma'?")
  T.raises(function() losses.BinaryFocalCrossentropy { alpha = "x" } end,
    "bad argument #1 to 'BinaryFocalCrossentropy' (alpha must be a finite number, got string)")
  T.raises(function() losses.CategoricalFocalCrossentropy { gamma = 0 / 0 } end, "gamma must be a finite number")
  T.raises(function() losses.CategoricalFocalCrossentropy { apply_class_balancing = true } end,
    "losses.CategoricalFocalCrossentropy: unknown option 'apply_class_balancing'")
  T.raises(function() losses.CategoricalFocalCrossentropy { axis = 0 } end, "axis must be -1")
  T.raises(function() losses.SparseCategoricalCrossentropy { ignore_class = 1.5 } end,
    "bad argument #1 to 'SparseCategoricalCrossentropy' (ignore_class must be an integer class id, got 1.5)")
  T.raises(function() losses.Dice { axis = "rows" } end, "bad argument #1 to 'Dice' (axis must be nil, an integer or a list")
  T.raises(function() losses.Dice { axis = {} } end, "axis must list 1 to")
  T.raises(function() losses.Tversky { delta = 1 } end, "losses.Tversky: unknown option 'delta'")
  T.raises(function() losses.Dice { from_logits = true } end, "losses.Dice: unknown option 'from_logits'")
  T.raises(function() losses.Dice { reduction = "avg" } end, "reduction must be")
  T.raises(function() losses.Dice { axis = 5 }(tensor.ones(2, 3), tensor.ones(2, 3)) end, "")
end)

T.test("ignore_class under a strategy divides by the global batch's valid labels: one device's loss", function()
  -- replica 0 holds 3 valid labels, replica 1 one: the mean over the 4, as
  -- on one device (checked against Keras above); Keras on tf.distribute
  -- would average the replicas' own means, 1/3 and 1/1 of their sums
  local c = F.losses.scce_ignore_logits
  local yt, lg = tensor.new({ 0, 1, 3, -1, -1, 2 }, { dtype = "int64" }), t_of(c.y_pred)
  local want = losses.SparseCategoricalCrossentropy(c.opts)(yt, lg):item()
  local strategy = distribute.MirroredStrategy { devices = { "cpu:0", "cpu:1" } }
  local loss
  do
    local _ <close> = strategy:scope()
    loss = losses.SparseCategoricalCrossentropy(c.opts)
  end
  local ds = data.Dataset.from_tensor_slices(yt, lg):batch(6)
  local seen = 0
  for b in strategy:experimental_distribute_dataset(ds) do
    local per = strategy:run(function(inp) return loss(inp[1], inp[2]) end, b)
    T.near(strategy:reduce("sum", per), want, 2e-6, "the replicas' losses add up to one device's")
    seen = seen + 1
  end
  T.eq(seen, 1, "one batch")
end)

---------------------------------------------------------------- metrics
local function check_metric(name, c, dev)
  local what = ("%s on %s"):format(name, dev)
  local sparse = c.class:match("IoU") and c.class ~= "BinaryIoU"
  local yt = t_of(c.y_true, sparse and "int64" or nil):to(dev)
  local yp = t_of(c.y_pred, sparse and "int64" or nil):to(dev)
  local w = t_of(c.sample_weight):to(dev)
  local opts = {}
  for k, v in pairs(c.opts) do opts[k] = v end
  if name == "r2_raw" then opts.class_aggregation = "none" end   -- Keras's None
  local m = metrics[c.class](opts)
  local n = yt.shape[1]
  local function result()
    local r = m:result()
    return type(r) == "number" and { r } or flat(r)
  end
  m:update_state(yt:slice(0, 0, c.split), yp:slice(0, 0, c.split))
  near_all(result(), c.first.v, 2e-6, what .. ": first batch")
  m:update_state(yt:slice(0, c.split, n), yp:slice(0, c.split, n), w)
  near_all(result(), c.result.v, 2e-6, what .. ": then a weighted batch")
  T.ok(tostring(m):match("^<metric "), what .. ": tostring")
  m:reset_state()
  m:update_state(yt:slice(0, 0, c.split), yp:slice(0, 0, c.split))
  near_all(result(), c.first.v, 2e-6, what .. ": after reset_state")
end

each_case("Keras 3.15's F-score, R2, IoU and at-X metrics over two batches", F.metrics, check_metric)

T.test("IoU's int dtype truncates float sample weights, as Keras's (float32 keeps them)", function()
  local a, b = F.metrics.meaniou_float_weights, F.metrics.meaniou_float32
  T.ok(math.abs(a.result.v[1] - b.result.v[1]) > 1e-3, "the fixture shows the difference")
end)

T.test("the new metrics by name in compile, in fit's history, and rebuilt from their description", function()
  local m = nn.Sequential { nn.Input { shape = { 3 } }, nn.Dense(2, "sigmoid") }
  m:compile { optimizer = "adam", loss = "binary_crossentropy",
    metrics = { "f1_score", "r2_score", metrics.FBetaScore { beta = 2, average = "micro" },
      metrics.BinaryIoU { target_class_ids = { 1 } }, metrics.PrecisionAtRecall { recall = 0.5 } } }
  local x = tensor.normal(32, 3)
  local y = (x:slice(1, 0, 2):gt(0)):astype("float32")
  local h = m:fit(x, y, { epochs = 2, batch_size = 8, verbose = 0 })
  for _, k in ipairs { "f1_score", "r2_score", "fbeta_score", "binary_io_u", "precision_at_recall" } do
    T.eq(#h.history[k], 2, "history." .. k)
  end
  T.ok(tensor.is_tensor(h.history.f1_score[1]), "F1Score with average=nil: one score per class (a tensor)")
  local built = nn._build_metrics(nn._describe_metrics(m._metrics))
  T.eq(built[3].beta, 2, "a metric's options travel with its description")
  T.eq(built[4].name, "binary_io_u")
  local r = m:evaluate(x, y, { verbose = 0 })
  local pred = m:predict(x, { verbose = 0 })
  local f = metrics.FBetaScore { beta = 2, average = "micro" }
  f:update_state(y, pred)
  T.near(r.fbeta_score, f:result(), 1e-9, "evaluate's F-beta is the metric's over the predictions")
end)

T.test("the new metrics' bad options are errors naming the metric and the problem", function()
  T.raises(function() metrics.F1Score { average = "mean" } end,
    "metrics.F1Score: average must be nil, \"micro\", \"macro\" or \"weighted\", got mean")
  T.raises(function() metrics.F1Score { beta = 2 } end, "unknown option 'beta'")
  T.raises(function() metrics.FBetaScore { beta = 0 } end, "metrics.FBetaScore: beta must be a number > 0")
  T.raises(function() metrics.F1Score { threshold = 1.5 } end, "threshold must be nil or a number with 0 < threshold <= 1")
  T.raises(function() metrics.R2Score { class_aggregation = "mean" } end, "metrics.R2Score: class_aggregation must be")
  T.raises(function() metrics.R2Score { num_regressors = -1 } end, "num_regressors must be an integer >= 0")
  T.raises(function() metrics.MeanIoU {} end, "metrics.MeanIoU: num_classes must be a positive integer")
  T.raises(function() metrics.IoU { num_classes = 3, target_class_ids = { 3 } } end,
    "metrics.IoU: Target class id 3 is out of range, which is [0, 3)")
  T.raises(function() metrics.IoU { num_classes = 3 } end, "target_class_ids must be a non-empty list")
  T.raises(function() metrics.MeanIoU { num_classes = 3, dtype = "bool" } end, "dtype must be \"int\"")
  local line = debug.getinfo(1, "l").currentline + 1   -- the error points at the caller's line
  T.raises(function() metrics.BinaryIoU { thresold = 0.3 } end,
    ("test_keras_losses_metrics.lua:%d: bad argument #1 to 'metrics.BinaryIoU' (unknown option 'thresold'"):format(line))
  T.raises(function() metrics.PrecisionAtRecall {} end, "metrics.PrecisionAtRecall: recall must be a number in [0, 1]")
  T.raises(function() metrics.SpecificityAtSensitivity { sensitivity = 0.5, num_thresholds = 0 } end,
    "num_thresholds must be an integer > 0")
  local f = metrics.F1Score()
  T.raises(function() f:update_state(tensor.ones(4), tensor.ones(4)) end, "metrics.F1Score")
  T.raises(function() f:update_state(tensor.ones(4, 2), tensor.ones(4, 2), tensor.ones(3)) end,
    "sample_weight of shape {3} for 4 rows")
end)

T.done()
