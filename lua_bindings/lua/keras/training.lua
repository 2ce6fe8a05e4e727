-- keras/training.lua - metrics and the Keras-style model API (callbacks: keras/callbacks.lua):
-- model:compile{...}, model:fit(...), model:evaluate(...), model:predict(...),
-- model:summary(). The training step itself runs in C (model:train_step).
local ldist = ...
local tensor, nn = ldist.tensor, ldist.nn
local Model = nn.Model
local docs = ldist.docs

local doc = ldist.document

---------------------------------------------------------------- metrics
local metrics = {}
ldist.metrics = metrics

local Mean = {}
Mean.__index = Mean
Mean.__name = "ldist.metrics.Mean"
function metrics.Mean(name)
  if type(name) == "table" then name = name.name end
  return setmetatable({ name = name or "mean", total = 0.0, count = 0.0 }, Mean)
end

-- Keras 3's reduce_to_samplewise_values (keras/src/metrics/reduction_metrics.py)
-- on the host, on {shape = {...}, n = elements, [1..n] = values} arrays: the
-- metrics' arithmetic is a few numbers per step, so doubles in Lua are enough.
local function host_array(x, what)
  if type(x) == "number" then return { shape = {}, n = 1, x } end
  if not tensor.is_tensor(x) then
    if type(x) ~= "table" then
      error(("bad argument #%d to 'update_state' (tensor, number or table of numbers expected, got %s)")
        :format(what, type(x)), 3)
    end
    x = tensor.new(x)
  end
  local shape, n = {}, x:numel()
  for d = 1, x.ndim do shape[d] = x.shape[d] end
  local a
  if x.ndim == 0 then a = { x:item() }
  else a = n > 0 and x:float():reshape({ n }):totable() or {} end
  a.shape, a.n = shape, n
  return a
end

local shape_str = ldist._util.shape_str

-- the mean over the axes from..#shape (1-based), keeping the leading ones
local function mean_trailing(a, from)
  local lead, inner, shape = 1, 1, {}
  for d = 1, #a.shape do
    if d < from then lead = lead * a.shape[d]; shape[#shape + 1] = a.shape[d]
    else inner = inner * a.shape[d] end
  end
  local r = { shape = shape, n = lead }
  for i = 0, lead - 1 do
    local s = 0.0
    for j = 1, inner do s = s + a[i * inner + j] end
    r[i + 1] = s / inner
  end
  return r
end

-- NumPy's broadcast_to
local function broadcast_to(a, shape)
  local r, nd, sd = #shape, #shape, #a.shape
  local ok = sd <= nd
  for k = 0, sd - 1 do
    local s, t = a.shape[sd - k], shape[nd - k]
    if s ~= 1 and s ~= t then ok = false end
  end
  if not ok then
    error(("bad argument #2 to 'update_state' (sample_weight of shape %s cannot be broadcast to the values' shape %s)")
      :format(shape_str(a.shape), shape_str(shape)), 3)
  end
  local n = 1
  for d = 1, r do n = n * shape[d] end
  local out = { shape = shape, n = n }
  -- source strides, 0 on broadcast dimensions
  local stride, acc = {}, 1
  for d = r, 1, -1 do
    local sdim = a.shape[d - (nd - sd)]
    stride[d] = (sdim == nil or sdim == 1) and 0 or acc
    if sdim then acc = acc * sdim end
  end
  for i = 0, n - 1 do
    local rem, src = i, 0
    for d = r, 1, -1 do
      local idx = rem % shape[d]
      rem = rem // shape[d]
      src = src + idx * stride[d]
    end
    out[i + 1] = a[src + 1]
  end
  return out
end

-- keras/src/losses/loss.py squeeze_or_expand_to_same_rank: shapes only
local function squeeze_or_expand(x1, x2)
  local r1, r2 = #x1.shape, #x2.shape
  local function expand(a) a.shape = table.move(a.shape, 1, #a.shape, 1, {}); a.shape[#a.shape + 1] = 1 end
  local function squeeze(a) a.shape = table.move(a.shape, 1, #a.shape - 1, 1, {}) end
  if r1 == r2 + 1 and x1.shape[r1] == 1 then
    if r2 == 1 then expand(x2) else squeeze(x1) end
  elseif r2 == r1 + 1 and x2.shape[r2] == 1 then
    if r1 == 1 then expand(x1) else squeeze(x2) end
  end
end

local function sum(a)
  local s = 0.0
  for i = 1, a.n do s = s + a[i] end
  return s
end

-- m:update_state(values, sample_weight): as Keras 3's Mean. A tensor counts
-- each of its rows (first-dimension entries) as one sample, after averaging
-- over the other dimensions; with sample_weight, count grows by the weights'
-- sum. See tests/lua/test_keras_semantics.lua for TF's numbers.
function Mean:update_state(values, sample_weight)
  local v = host_array(values, 1)
  local w
  if sample_weight ~= nil then
    w = host_array(sample_weight, 2)
    squeeze_or_expand(v, w)
    local wd = #w.shape
    if #v.shape > wd then v = mean_trailing(v, wd + 1) end
    w = broadcast_to(w, v.shape)
    for i = 1, v.n do v[i] = v[i] * w[i] end
    if wd > 1 then w = mean_trailing(w, 2) end
  end
  if #v.shape > 1 then v = mean_trailing(v, 2) end
  self.total = self.total + sum(v)
  if w then self.count = self.count + sum(w)
  else self.count = self.count + (#v.shape >= 1 and v.shape[1] or 1) end
end
-- divide_no_nan: 0 while nothing (or a zero total weight) was seen
function Mean:result() return self.count ~= 0 and self.total / self.count or 0.0 end
function Mean:reset_state() self.total, self.count = 0.0, 0.0 end
Mean.__tostring = function(m) return ("<metric %s: %.4f>"):format(m.name, m:result()) end
doc(metrics.Mean, "metrics.Mean", "metrics.Mean(name)\n\nA running (weighted) mean, as Keras 3's: m:update_state(values, sample_weight),\n" ..
  "m:result(), m:reset_state(). A tensor counts one sample per row (its first dimension),\n" ..
  "averaged over the other dimensions; sample_weight (a number or a tensor broadcast to\n" ..
  "the values' shape) weights them: result = sum(w * v) / sum(w).")

-- Keras's MeanMetricWrapper metrics (the accuracies, the error metrics)
-- leave out the masked positions of the predictions (their keras_mask, a
-- layer's; apply_mask with reduction "sum"): the mask is their weight, times
-- the sample weights (a row's on each of its positions) when there are some
local function masked_weights(y_pred, sample_weight)
  local m = tensor.is_tensor(y_pred) and y_pred.keras_mask
  if not m then return sample_weight end
  if sample_weight == nil then return m end
  local w = tensor.is_tensor(sample_weight) and sample_weight or tensor.new(sample_weight)
  if w.device ~= m.device then w = w:to(m.device) end
  if w.ndim >= 1 and w.ndim < m.ndim then
    local s = w.shape
    for i = w.ndim + 1, m.ndim do s[i] = 1 end
    w = w:reshape(s)
  end
  return m * w
end

local Acc = {}
Acc.__index = Acc
Acc.__name = "ldist.metrics.Accuracy"
Acc.__tostring = Mean.__tostring
Acc._direction = "up"   -- higher is better (Keras 3's metrics say so; EarlyStopping's mode="auto" reads it)
local function accuracy(kind, name)
  return setmetatable({ name = name or "accuracy", kind = kind, correct = 0, count = 0 }, Acc)
end
-- sparse: labels are class ids; categorical: one-hot labels; binary: one column
function metrics.SparseCategoricalAccuracy(name) return accuracy("sparse", name) end
function metrics.CategoricalAccuracy(name) return accuracy("categorical", name) end
function metrics.BinaryAccuracy(name) return accuracy("binary", name) end
function metrics.Accuracy(name) return accuracy("sparse", name) end
function Acc:update_state(y_true, y_pred, sample_weight)
  sample_weight = masked_weights(y_pred, sample_weight)
  y_true, y_pred = tensor.new(y_true), tensor.new(y_pred)
  if sample_weight ~= nil then   -- Keras's: sum(w * match) / sum(w), each row's weight on its positions
    local c, t = nn._count_correct(y_true, y_pred, self.kind == "sparse", tensor.new(sample_weight))
    self.correct, self.count = self.correct + c, self.count + t
    return
  end
  self.correct = self.correct + nn._count_correct(y_true, y_pred, self.kind == "sparse")
  -- rows, or every position of a sequence model's predictions [batch, t..., classes]
  local c = y_pred.ndim >= 2 and y_pred.shape[y_pred.ndim] or 1
  self.count = self.count + (y_pred.ndim == 0 and 1 or c > 0 and y_pred:numel() // c or 0)
end
function Acc:result() return self.count > 0 and self.correct / self.count or 0.0 end
function Acc:reset_state() self.correct, self.count = 0, 0 end
doc(metrics.SparseCategoricalAccuracy, "metrics.SparseCategoricalAccuracy",
  "metrics.SparseCategoricalAccuracy(name)\n\nFraction of rows whose argmax equals the integer label.\n" ..
  "acc:update_state(y_true, y_pred [, sample_weight]), acc:result(), acc:reset_state().")
doc(metrics.Accuracy, "metrics.Accuracy", "metrics.Accuracy(name): the same as SparseCategoricalAccuracy.")

-- Keras's MeanMetricWrapper metrics: the running (weighted) mean of a
-- per-example function of (y_true, y_pred), here the unreduced loss of the
-- same formula (one place for each formula: ld_nn.c's), negated for
-- CosineSimilarity (the metric is the similarity, the loss its negative).
-- RootMeanSquaredError is the square root of the mean of the squared errors.
local Wrap = setmetatable({}, { __index = Mean })
Wrap.__index = Wrap
Wrap.__name = "ldist.metrics.MeanMetricWrapper"
Wrap.__tostring = Mean.__tostring
Wrap._direction = "down"     -- an error: lower is better
local WRAPPED = {   -- metric class -> the loss class, its default name, {sign, direction, root}
  MeanSquaredError = { "MeanSquaredError", "mean_squared_error" },
  MeanAbsoluteError = { "MeanAbsoluteError", "mean_absolute_error" },
  MeanAbsolutePercentageError = { "MeanAbsolutePercentageError", "mean_absolute_percentage_error" },
  MeanSquaredLogarithmicError = { "MeanSquaredLogarithmicError", "mean_squared_logarithmic_error" },
  RootMeanSquaredError = { "MeanSquaredError", "root_mean_squared_error", root = true },
  LogCoshError = { "LogCosh", "logcosh" },
  CosineSimilarity = { "CosineSimilarity", "cosine_similarity", sign = -1, direction = "up" },
  KLDivergence = { "KLDivergence", "kl_divergence" },
  Poisson = { "Poisson", "poisson" },
  Hinge = { "Hinge", "hinge" },
  SquaredHinge = { "SquaredHinge", "squared_hinge" },
  CategoricalHinge = { "CategoricalHinge", "categorical_hinge" },
}
for class, w in pairs(WRAPPED) do
  metrics[class] = function(name)
    if type(name) == "table" then name = name.name end
    return setmetatable({ name = name or w[2], total = 0.0, count = 0.0, class = class,
                          _loss = ldist.losses[w[1]] { reduction = "none" }, _sign = w.sign, _root = w.root,
                          _direction = w.direction }, Wrap)
  end
  doc(metrics[class], "metrics." .. class, ("metrics.%s([name])\n\nKeras's %s metric: the running (weighted) mean of %s\n" ..
    "per example (losses.%s's formula%s), over every batch seen; m:update_state(y_true, y_pred,\n" ..
    "[sample_weight]), m:result(), m:reset_state(). compile takes it by name too (metrics = {\"%s\"})."):format(
    class, class, w.root and "the squared error" or w[2]:gsub("_", " "), w[1],
    w.root and ", then the square root of the mean" or w.sign and ", negated: 1 for the same direction" or "", w[2]))
end
function Wrap:update_state(y_true, y_pred, sample_weight)
  -- computed where the predictions are (a GPU's, a strategy's device): the
  -- labels (often the host's) go there; only the per-example values come back
  if not tensor.is_tensor(y_pred) then y_pred = tensor.new(y_pred) end
  if not tensor.is_tensor(y_true) then y_true = tensor.new(y_true) end
  if y_true.device ~= y_pred.device then y_true = y_true:to(y_pred.device) end
  sample_weight = masked_weights(y_pred, sample_weight)
  -- the unreduced loss of the predictions without their mask (applied here, as a weight)
  local per = self._loss(y_true, y_pred.keras_mask and y_pred:reshape(y_pred.shape) or y_pred)
  if self._sign then per = per * self._sign end
  Mean.update_state(self, per, sample_weight)
end
function Wrap:result()
  local r = Mean.result(self)
  return self._root and math.sqrt(r) or r
end
-- Keras's confusion-matrix metrics (keras/src/metrics/confusion_metrics.py):
-- every element of y_true counts as positive when nonzero, of y_pred when
-- above a threshold; counts weighted by sample_weight (broadcast to the
-- predictions' shape). One counting for all of them: for each element, the
-- number of thresholds below its prediction, histogrammed per label; the
-- counts at threshold j are then the histogram's tail past j.
local Conf = {}
Conf.__index = Conf
Conf.__name = "ldist.metrics.ConfusionMetric"
Conf.__tostring = Mean.__tostring
Conf._direction = "up"
local function conf_new(name, thresholds, kind, opts)
  return setmetatable({ name = name, kind = kind, thresholds = thresholds, opts = opts or {},
                        tp = {}, fp = {}, tn = {}, fn = {} }, Conf)
end
function Conf:reset_state()
  for j = 1, #self.thresholds do self.tp[j], self.fp[j], self.tn[j], self.fn[j] = 0.0, 0.0, 0.0, 0.0 end
end
function Conf:update_state(y_true, y_pred, sample_weight)
  local t, p = host_array(y_true, 1), host_array(y_pred, 2)
  if t.n ~= p.n then
    error(("bad argument #1 to 'update_state' (y_true has %d values, y_pred %d)"):format(t.n, p.n), 2)
  end
  local w
  if sample_weight ~= nil then   -- Keras's squeeze_or_expand_to_same_rank, then a broadcast
    w = host_array(sample_weight, 3)
    squeeze_or_expand(p, w)
    w = broadcast_to(w, p.shape)
  end
  local th, T = self.thresholds, #self.thresholds
  local pos, neg = {}, {}   -- [k]: the weight of elements above exactly the first k thresholds
  for k = 0, T do pos[k], neg[k] = 0.0, 0.0 end
  for i = 1, p.n do
    local v, k = p[i], 0
    local lo, hi = 0, T       -- thresholds ascend: the count below v, by bisection
    while lo < hi do
      local mid = (lo + hi + 1) // 2
      if v > th[mid] then lo = mid else hi = mid - 1 end
    end
    k = lo
    local wi = w and w[i] or 1.0
    if t[i] ~= 0 then pos[k] = pos[k] + wi else neg[k] = neg[k] + wi end
  end
  local above_p, above_n, total_p, total_n = 0.0, 0.0, 0.0, 0.0
  for k = 0, T do total_p, total_n = total_p + pos[k], total_n + neg[k] end
  for j = T, 1, -1 do   -- above threshold j: the elements above at least j thresholds
    above_p, above_n = above_p + pos[j], above_n + neg[j]
    self.tp[j], self.fp[j] = self.tp[j] + above_p, self.fp[j] + above_n
    self.fn[j], self.tn[j] = self.fn[j] + total_p - above_p, self.tn[j] + total_n - above_n
  end
end
local function div0(a, b) return b ~= 0 and a / b or 0.0 end
Conf.results = {}   -- more kinds' results from the same counts (keras/scores.lua)
-- AUC's Riemann sum over the thresholds (Keras's result(): ROC or PR, its summation methods)
local function auc(self)
  local n, tp, fp, tn, fn = #self.thresholds, self.tp, self.fp, self.tn, self.fn
  local sum = 0.0
  if self.opts.curve == "PR" and self.opts.summation_method == "interpolation" then
    -- Davis and Goadrich's interpolation, as Keras's interpolate_pr_auc
    for i = 1, n - 1 do
      local dtp, p0, p1 = tp[i] - tp[i + 1], tp[i] + fp[i], tp[i + 1] + fp[i + 1]
      local slope = div0(dtp, math.max(p0 - p1, 0))
      local intercept = tp[i + 1] - slope * p1
      local ratio = (p0 > 0 and p1 > 0) and div0(p0, math.max(p1, 0)) or 1.0
      sum = sum + div0(slope * (dtp + intercept * math.log(ratio)), math.max(tp[i + 1] + fn[i + 1], 0))
    end
    return sum
  end
  local x, y = {}, {}
  for i = 1, n do
    local recall = div0(tp[i], tp[i] + fn[i])
    if self.opts.curve == "PR" then x[i], y[i] = recall, div0(tp[i], tp[i] + fp[i])
    else x[i], y[i] = div0(fp[i], fp[i] + tn[i]), recall end
  end
  for i = 1, n - 1 do
    local h = self.opts.summation_method == "minoring" and math.min(y[i], y[i + 1])
      or self.opts.summation_method == "majoring" and math.max(y[i], y[i + 1]) or (y[i] + y[i + 1]) / 2
    sum = sum + (x[i] - x[i + 1]) * h
  end
  return sum
end
function Conf:result()
  local k = self.kind
  if k == "auc" then return auc(self) end
  if Conf.results[k] then return Conf.results[k](self) end
  if k == "precision" then return div0(self.tp[1], self.tp[1] + self.fp[1]) end
  if k == "recall" then return div0(self.tp[1], self.tp[1] + self.fn[1]) end
  return self[k][1]   -- tp, fp, tn, fn
end
local check_opts = ldist._util.check_opts
local function threshold_of(class, opts)
  local t = opts.thresholds == nil and 0.5 or opts.thresholds
  if type(t) ~= "number" or not (t >= 0 and t <= 1) then
    error(("metrics.%s: thresholds must be one number in [0, 1], got %s"):format(class, tostring(t)), 3)
  end
  return t
end
for class, kind in pairs { Precision = "precision", Recall = "recall", TruePositives = "tp", FalsePositives = "fp",
                           TrueNegatives = "tn", FalseNegatives = "fn" } do
  local default = class:gsub("(%l)(%u)", "%1_%2"):lower()
  metrics[class] = function(opts)
    if type(opts) == "string" then opts = { name = opts } end
    opts = opts or {}
    check_opts("metrics." .. class, opts, { thresholds = true, name = true })
    local m = conf_new(opts.name or default, { threshold_of(class, opts) }, kind)
    m:reset_state()
    return m
  end
  doc(metrics[class], "metrics." .. class, ("metrics.%s{thresholds=0.5, name=\"%s\"}\n\nKeras's %s: over every element, " ..
    "y_true nonzero is positive, y_pred > thresholds\npredicts positive (give probabilities: a sigmoid's, not logits); " ..
    "update_state(y_true, y_pred,\n[sample_weight]) weights the counts."):format(class, default, class))
end
function metrics.AUC(opts)
  if type(opts) == "string" then opts = { name = opts } end
  opts = opts or {}
  check_opts("metrics.AUC", opts, { num_thresholds = true, curve = true, summation_method = true, name = true })
  local n = opts.num_thresholds or 200
  if math.type(n) ~= "integer" or n < 2 then error("metrics.AUC: num_thresholds must be an integer > 1", 2) end
  local curve, method = opts.curve or "ROC", opts.summation_method or "interpolation"
  if curve ~= "ROC" and curve ~= "PR" then error("metrics.AUC: curve must be \"ROC\" or \"PR\"", 2) end
  if method ~= "interpolation" and method ~= "minoring" and method ~= "majoring" then
    error("metrics.AUC: summation_method must be \"interpolation\", \"minoring\" or \"majoring\"", 2)
  end
  -- Keras's thresholds: evenly spaced in (0, 1), and -epsilon and 1 + epsilon at the ends
  local th = { -1e-7 }
  for i = 1, n - 2 do th[#th + 1] = i / (n - 1) end
  th[#th + 1] = 1 + 1e-7
  local m = conf_new(opts.name or "auc", th, "auc", { curve = curve, summation_method = method })
  m:reset_state()
  return m
end
doc(metrics.AUC, "metrics.AUC", "metrics.AUC{num_thresholds=200, curve=\"ROC\"|\"PR\", summation_method=\"interpolation\"}\n\n" ..
  "Keras's area under the ROC (or precision-recall) curve, from counts at num_thresholds\nthresholds " ..
  "(Keras's, evenly spaced; its interpolations). Give probabilities, not logits.")

-- Keras's top-k accuracies: the label among the k highest predictions (a
-- tie with the k-th counts as in, as TF's in_top_k)
local TopK = setmetatable({}, { __index = Acc })
TopK.__index = TopK
TopK.__name = "ldist.metrics.TopKAccuracy"
TopK.__tostring = Mean.__tostring
local function top_k(sparse, default)
  return function(opts)
    if type(opts) == "string" then opts = { name = opts } end
    opts = opts or {}
    local class = sparse and "SparseTopKCategoricalAccuracy" or "TopKCategoricalAccuracy"
    check_opts("metrics." .. class, opts, { k = true, name = true })
    local k = opts.k or 5
    if math.type(k) ~= "integer" or k < 1 then error(("metrics.%s: k must be a positive integer"):format(class), 2) end
    -- _spec: the class and options, so a saved model or a LocalCluster's workers make it again
    return setmetatable({ name = opts.name or default, k = k, sparse = sparse, correct = 0, count = 0,
      _spec = { class = class, opts = { k = k, name = opts.name } } }, TopK)
  end
end
metrics.SparseTopKCategoricalAccuracy = top_k(true, "sparse_top_k_categorical_accuracy")
metrics.TopKCategoricalAccuracy = top_k(false, "top_k_categorical_accuracy")
function TopK:update_state(y_true, y_pred, sample_weight)
  sample_weight = masked_weights(y_pred, sample_weight)
  local p = host_array(y_pred, 2)
  local c = p.shape[#p.shape]
  local rows = c and c > 0 and p.n // c or 0
  local label
  if self.sparse then label = host_array(y_true, 1)
  else label = host_array((tensor.is_tensor(y_true) and y_true or tensor.new(y_true)):argmax(-1), 1) end
  -- each weight covers `per` positions: one for all, one per row (its positions), or one per position
  local w = sample_weight ~= nil and host_array(sample_weight, 1) or nil
  local per = w and (w.n == 1 and rows or (w.n > 0 and rows % w.n == 0 and rows // w.n)) or 1
  if w and not per then
    error(("%s: sample_weight of %d values for %d positions"):format(self.name, w.n, rows), 2)
  end
  for r = 0, rows - 1 do
    local target = p[r * c + math.floor(label[r + 1]) + 1]
    local higher = 0
    for j = 1, c do if p[r * c + j] > target then higher = higher + 1 end end
    local wr = w and w[r // per + 1] or 1
    if higher < self.k then self.correct = self.correct + wr end
    self.count = self.count + wr
  end
end
doc(metrics.SparseTopKCategoricalAccuracy, "metrics.SparseTopKCategoricalAccuracy",
  "metrics.SparseTopKCategoricalAccuracy{k=5}\n\nThe fraction of rows whose integer label is among the k highest " ..
  "predictions (Keras's;\na tie with the k-th counts, as TF's in_top_k).")
doc(metrics.TopKCategoricalAccuracy, "metrics.TopKCategoricalAccuracy",
  "metrics.TopKCategoricalAccuracy{k=5}\n\nThe same with one-hot labels.")

-- Keras's names of these metrics in compile (keras.metrics.get)
local metric_by_name = {
  mse = "MeanSquaredError", mean_squared_error = "MeanSquaredError", mae = "MeanAbsoluteError",
  mean_absolute_error = "MeanAbsoluteError", mape = "MeanAbsolutePercentageError",
  mean_absolute_percentage_error = "MeanAbsolutePercentageError", msle = "MeanSquaredLogarithmicError",
  mean_squared_logarithmic_error = "MeanSquaredLogarithmicError", root_mean_squared_error = "RootMeanSquaredError",
  log_cosh_error = "LogCoshError", cosine_similarity = "CosineSimilarity",
  kl_divergence = "KLDivergence", poisson = "Poisson", hinge = "Hinge",
  squared_hinge = "SquaredHinge", categorical_hinge = "CategoricalHinge",
  precision = "Precision", recall = "Recall", auc = "AUC", sparse_top_k_categorical_accuracy = "SparseTopKCategoricalAccuracy",
  top_k_categorical_accuracy = "TopKCategoricalAccuracy",
}

-- what keras/scores.lua builds its metrics from (one copy of each helper)
ldist._util.metric_kit = { host_array = host_array, broadcast_to = broadcast_to, squeeze_or_expand = squeeze_or_expand,
  conf_new = conf_new, Conf = Conf, div0 = div0, by_name = metric_by_name }

-- turn what compile got ("accuracy", a metric object) into metric objects
local function make_metric(m, loss)
  if type(m) == "table" and m.update_state then return m end
  if m == "accuracy" or m == "acc" then
    if type(loss) == "userdata" and loss.sparse then return metrics.SparseCategoricalAccuracy("accuracy") end
    if type(loss) == "userdata" and loss.name == "binary_crossentropy" then return metrics.BinaryAccuracy("accuracy") end
    return metrics.CategoricalAccuracy("accuracy")
  end
  if m == "sparse_categorical_accuracy" then return metrics.SparseCategoricalAccuracy(m) end
  if m == "categorical_accuracy" then return metrics.CategoricalAccuracy(m) end
  if m == "binary_accuracy" then return metrics.BinaryAccuracy(m) end
  if metric_by_name[m] then return metrics[metric_by_name[m]](m) end
  error(("unknown metric %s (accuracy, sparse_categorical_accuracy, categorical_accuracy, " ..
    "binary_accuracy, mae, mse, mape, msle, root_mean_squared_error, ..., or a metrics.* object)"):format(tostring(m)), 3)
end

---------------------------------------------------------------- compile / fit / evaluate / predict
local loss_by_name = {
  sparse_categorical_crossentropy = function() return ldist.losses.SparseCategoricalCrossentropy() end,
  categorical_crossentropy = function() return ldist.losses.CategoricalCrossentropy() end,
  binary_crossentropy = function() return ldist.losses.BinaryCrossentropy() end,
}
-- Keras's names for its losses (keras.losses.get)
for class, names in pairs {
  MeanSquaredError = { "mse", "MSE", "mean_squared_error" },
  MeanAbsoluteError = { "mae", "MAE", "mean_absolute_error" },
  MeanAbsolutePercentageError = { "mape", "MAPE", "mean_absolute_percentage_error" },
  MeanSquaredLogarithmicError = { "msle", "MSLE", "mean_squared_logarithmic_error" },
  Huber = { "huber", "huber_loss" }, LogCosh = { "log_cosh", "logcosh" },
  KLDivergence = { "kld", "KLD", "kl_divergence", "kullback_leibler_divergence" }, Poisson = { "poisson" },
  CosineSimilarity = { "cosine_similarity" }, Hinge = { "hinge" }, SquaredHinge = { "squared_hinge" },
  CategoricalHinge = { "categorical_hinge" }, BinaryFocalCrossentropy = { "binary_focal_crossentropy" },
  CategoricalFocalCrossentropy = { "categorical_focal_crossentropy" }, Dice = { "dice" }, Tversky = { "tversky" },
} do
  for _, n in ipairs(names) do loss_by_name[n] = function() return ldist.losses[class]() end end
end
-- compile's optimizer names, as keras.optimizers.get's
local opt_by_name = { sgd = "SGD", adam = "Adam", adamw = "AdamW", rmsprop = "RMSprop", adagrad = "Adagrad",
  adamax = "Adamax", nadam = "Nadam", lion = "Lion", adadelta = "Adadelta", ftrl = "Ftrl" }

---------------------------------------------------------------- several inputs and outputs
-- Values that are a tensor or a table of them (a model's several inputs or
-- outputs: a list, or a table keyed by name). The strategies use these too
-- (ldist._util.nest), so one place knows how such a value is sliced and joined.
local nest = {}
ldist._util.nest = nest
local function is_pr(v) local d = ldist.distribute; return d ~= nil and d.is_per_replica(v) end
function nest.map(v, f)
  if v == nil or tensor.is_tensor(v) or type(v) ~= "table" or is_pr(v) then return v ~= nil and f(v) or nil end
  local r = {}
  for k, x in pairs(v) do r[k] = nest.map(x, f) end
  return r
end
function nest.first(v)
  if tensor.is_tensor(v) or type(v) ~= "table" or is_pr(v) then return v end
  if v[1] ~= nil then return nest.first(v[1]) end
  local keys = {}
  for k in pairs(v) do keys[#keys + 1] = k end
  table.sort(keys)
  return keys[1] ~= nil and nest.first(v[keys[1]]) or nil
end
-- rows of the batch: the first dimension of its first tensor
function nest.rows(v)
  local t = nest.first(v)
  if not tensor.is_tensor(t) then return t and t.global_batch end   -- split over a strategy's replicas
  return t.ndim > 0 and t.shape[1] or 1
end
-- parts (a list of values of one structure) joined along the first axis
function nest.concat(parts)
  local p1 = parts[1]
  if tensor.is_tensor(p1) then return #parts == 1 and p1 or tensor.concat(parts, 0) end
  local r = {}
  for k in pairs(p1) do
    local ks = {}
    for i, p in ipairs(parts) do ks[i] = p[k] end
    r[k] = nest.concat(ks)
  end
  return r
end

-- the names of a Functional model's inputs (or outputs: their layers'
-- names, Keras's output_names) when it has several; nil otherwise
local function io_names(model, which)
  local g = model._graph
  if not g or not (which == "inputs" and g.multi_in or which == "outputs" and g.multi_out) then return nil end
  local names = {}
  for i, t in ipairs(g[which]) do names[i] = which == "inputs" and t.name or t._layer.name end
  return names
end
Model._io_names = io_names

-- v (a batch's x or y) as the model takes it: the list in the order of
-- names, from a list or a table keyed by the names (Keras's dicts)
local function in_order(v, names, what, fname)
  if names == nil or v == nil then return v end
  if tensor.is_tensor(v) or is_pr(v) or type(v) ~= "table" then
    error(("bad argument to '%s' (the model has %d %s (%s): give %s as a list of %d tensors or a table keyed by those " ..
      "names, not a %s)"):format(fname, #names, what, table.concat(names, ", "), what == "inputs" and "x" or "y",
      #names, tensor.is_tensor(v) and "single tensor" or type(v)), 0)
  end
  if v[1] ~= nil then
    if #v ~= #names then
      error(("bad argument to '%s' (%d %s given for a model of %d: %s)"):format(fname, #v, what, #names,
        table.concat(names, ", ")), 0)
    end
    return v
  end
  local out, known = {}, {}
  for i, n in ipairs(names) do
    known[n] = true
    out[i] = v[n]
    if out[i] == nil then
      error(("bad argument to '%s' (no value for %s '%s'; the model's %s are %s)"):format(fname,
        what == "inputs" and "input" or "output", n, what, table.concat(names, ", ")), 0)
    end
  end
  for k in pairs(v) do
    if not known[k] then
      error(("bad argument to '%s' (%s has no %s named '%s'; they are %s)"):format(fname, "the model",
        what == "inputs" and "input" or "output", tostring(k), table.concat(names, ", ")), 0)
    end
  end
  return out
end

-- compile's loss for a model of several outputs (keras/src/trainers/
-- compile_utils.py, CompileLoss): loss_weights[i] * loss_i(y[i], pred[i], w)
-- summed over the outputs that have a loss. The training step in C calls it
-- under its tape (nn.c, lua_step_loss).
local CompiledLoss = { __name = "ldist.CompiledLoss" }
CompiledLoss.__index = CompiledLoss
function CompiledLoss.__call(c, y, pred, w)
  local total
  for _, e in ipairs(c.entries) do
    local l = e.loss(y[e.index], pred[e.index], w)
    if e.weight ~= 1 then l = l * e.weight end
    total = total and total + l or l
  end
  return total
end
CompiledLoss.__tostring = function(c)
  local parts = {}
  for _, e in ipairs(c.entries) do parts[#parts + 1] = ("%s: %s x %s"):format(e.name, tostring(e.weight), tostring(e.loss)) end
  return "<CompiledLoss " .. table.concat(parts, ", ") .. ">"
end

local function is_loss(v) return type(v) == "userdata" and getmetatable(v) and getmetatable(v).__name == "ldist.Loss" end

-- one output's loss as compile was given it: a name or a Loss
local function one_loss(l, where)
  if type(l) == "string" then
    local f = loss_by_name[l]
    if not f then error(("bad argument #1 to 'compile' (unknown loss '%s'%s)"):format(l, where), 4) end
    return f()
  end
  if not is_loss(l) then
    error(("bad argument #1 to 'compile' (%sa loss name or a losses.* object expected, got %s)"):format(
      where ~= "" and where:sub(3) .. ": " or "", type(l)), 4)
  end
  return l
end

-- per output: something given as a list (one per output) or a table keyed by
-- the output names; returns a table index -> value (missing outputs: nil)
local function per_output(v, names, what)
  local r = {}
  if v[1] ~= nil or next(v) == nil then
    if #v ~= #names then
      error(("bad argument #1 to 'compile' (%s has %d entries for a model of %d outputs (%s))"):format(what, #v,
        #names, table.concat(names, ", ")), 4)
    end
    for i = 1, #names do r[i] = v[i] end
    return r
  end
  local index = {}
  for i, n in ipairs(names) do index[n] = i end
  for k, x in pairs(v) do
    if not index[k] then
      error(("bad argument #1 to 'compile' (%s names output '%s', which the model does not have; its outputs are %s)")
        :format(what, tostring(k), table.concat(names, ", ")), 4)
    end
    r[index[k]] = x
  end
  return r
end

-- a metric object as compile lists it: a view of m named `name` (reading
-- output i; weighted: given the step's sample weights, Keras's
-- weighted_metrics), its state its own
local function metric_view(base, name, i, weighted)
  local v = setmetatable({ name = name, _output = i, _weighted = weighted or nil, _base = base },
    { __index = base, __tostring = getmetatable(base).__tostring })
  v:reset_state()
  return v
end
-- one of compile's weighted_metrics added to ms, named as Keras 3's
-- CompileMetrics names it: prefix .. its name, or prefix .. "weighted_" ..
-- its name when a metric before it has that name
local function add_weighted(ms, base, prefix, i)
  local name = prefix .. base.name
  for _, o in ipairs(ms) do if o.name == name then name = prefix .. "weighted_" .. base.name break end end
  ms[#ms + 1] = metric_view(base, name, i, true)
end
-- compile's metrics (what "metrics" or "weighted_metrics") of a model of
-- several outputs, each named "<output>_<metric>" and reading its output,
-- added to ms; a weighted one whose name is taken is "<output>_weighted_<metric>"
local function output_metrics(ms, mt, names, c, what)
  if mt == nil or next(mt) == nil then return end
  if mt[1] ~= nil and type(mt[1]) ~= "table" or (mt[1] ~= nil and getmetatable(mt[1]) and mt[1].update_state) then
    error(("bad argument #1 to 'compile' (%s for a model of %d outputs: a list of lists, one per output " ..
      "({{\"accuracy\"}, {}}), or a table keyed by the output names ({%s = {\"accuracy\"}}))"):format(what, #names, names[1]), 4)
  end
  local per = per_output(mt, names, what)
  for i, n in ipairs(names) do
    local list = per[i]
    if list ~= nil and (type(list) ~= "table" or list.update_state) then list = { list } end
    local loss_i
    for _, e in ipairs(c.entries) do if e.index == i then loss_i = e.loss end end
    for _, m in ipairs(list or {}) do
      local base = make_metric(m, loss_i)
      if what == "weighted_metrics" then add_weighted(ms, base, n .. "_", i)
      else ms[#ms + 1] = metric_view(base, n .. "_" .. base.name, i) end
    end
  end
end

-- compile{loss=, loss_weights=, metrics=} for a model of several outputs:
-- the CompiledLoss, the metrics (each named "<output>_<metric>" and reading
-- its output) and the per-output loss trackers ("<output>_loss"), as Keras
local function compile_outputs(self, opts, names)
  local lt = opts.loss
  local losses_ = {}
  if type(lt) == "table" then losses_ = per_output(lt, names, "loss")
  else for i = 1, #names do losses_[i] = lt end end          -- one loss for every output, as Keras
  local weights = opts.loss_weights and per_output(opts.loss_weights, names, "loss_weights") or {}
  local c = setmetatable({ entries = {}, names = names }, CompiledLoss)
  for i, n in ipairs(names) do
    if losses_[i] ~= nil then
      local w = weights[i] == nil and 1 or weights[i]
      if type(w) ~= "number" then
        error(("bad argument #1 to 'compile' (loss_weights for '%s' is a %s, a number expected)"):format(n, type(w)), 3)
      end
      c.entries[#c.entries + 1] = { index = i, name = n, weight = w, loss = one_loss(losses_[i], " for output '" .. n .. "'") }
    end
  end
  if #c.entries == 0 then error("bad argument #1 to 'compile' (no output has a loss)", 3) end
  local ms = {}
  output_metrics(ms, opts.metrics, names, c, "metrics")
  output_metrics(ms, opts.weighted_metrics, names, c, "weighted_metrics")
  return c, ms
end

-- An option a Model method does not know is an error naming it (a misspelt
-- option silently ignored trains something else than asked); `known` is a
-- set of names. level: the error's level, as error()'s, from the caller of
-- this function's caller.
local function check_options(fname, opts, known, level)
  for k in pairs(opts) do
    if not known[k] then
      local names = {}
      for name in pairs(known) do names[#names + 1] = name end
      table.sort(names)
      error(("bad argument to '%s' (unknown option '%s'; options: %s)"):format(fname, tostring(k), table.concat(names, ", ")),
        level + 1)
    end
  end
end
-- compile: Keras's execution knobs (run_eagerly, jit_compile,
-- steps_per_execution, auto_scale_loss) change how a step runs, not what it
-- computes: accepted, and ldist's C step loop runs either way
local compile_options = { optimizer = true, loss = true, loss_weights = true, metrics = true, weighted_metrics = true, run_eagerly = true,
  jit_compile = true, steps_per_execution = true, auto_scale_loss = true }
local evaluate_options = { batch_size = true, sample_weight = true, steps = true, verbose = true, return_dict = true }
local predict_options = { batch_size = true, steps = true, verbose = true }

function Model:compile(opts)
  if type(opts) ~= "table" then error("bad argument #1 to 'compile' (table expected)", 2) end
  check_options("compile", opts, compile_options, 2)
  local opt = opts.optimizer or "adam"
  if type(opt) == "string" then
    local k = opt_by_name[opt:lower()]
    if not k then error(("bad argument #1 to 'compile' (unknown optimizer '%s')"):format(opt), 2) end
    opt = ldist.optim[k]()
  end
  local loss = opts.loss
  if loss == nil then error("bad argument #1 to 'compile' (loss is required)", 2) end
  local names = io_names(self, "outputs")
  if not names and type(loss) == "table" and not is_loss(loss) then
    -- a subclassed model's outputs have no names: a list of losses, one per output
    if loss[1] == nil then
      error("bad argument #1 to 'compile' (a loss keyed by output names needs a Functional model of several outputs)", 2)
    end
    names = {}
    for i = 1, #loss do names[i] = "output_" .. i end
  end
  local ms = {}
  if names then
    loss, ms = compile_outputs(self, opts, names)
  else
    if type(loss) == "string" then
      local f = loss_by_name[loss]
      if not f then error(("bad argument #1 to 'compile' (unknown loss '%s')"):format(loss), 2) end
      loss = f()
    end
    if not is_loss(loss) and type(loss) ~= "function" then
      error(("bad argument #1 to 'compile' (loss must be a name, a losses.* object or a function(y_true, y_pred), " ..
        "got %s)"):format(type(loss)), 2)
    end
    if opts.loss_weights ~= nil then
      error("bad argument #1 to 'compile' (loss_weights weighs the losses of a model of several outputs; " ..
        "this model has one)", 2)
    end
    for i, m in ipairs(opts.metrics or {}) do ms[i] = make_metric(m, loss) end
    -- Keras's weighted_metrics: given the step's sample weights (sample_weight, class_weight);
    -- one whose name a metric has is "weighted_<name>"
    if opts.weighted_metrics ~= nil and type(opts.weighted_metrics) ~= "table" then
      error("bad argument #1 to 'compile' (weighted_metrics must be a list of metrics)", 2)
    end
    for _, m in ipairs(opts.weighted_metrics or {}) do add_weighted(ms, make_metric(m, loss), "") end
  end
  -- under mixed_float16, loss scaling (Keras wraps the optimizer in a LossScaleOptimizer here)
  opt = ldist.mixed_precision._wrap_for(self, opt)
  self._optimizer, self._loss, self._metrics = opt, loss, ms
  self._compiled = true
  -- a model made outside any scope but compiled inside one trains under that
  -- strategy (its variables are placed there when it is built)
  local d = ldist.distribute
  if d and not self.distribute_strategy and d.has_strategy() then
    if #self.weights > 0 then   -- TF's error: its variables are not the strategy's
      error(("bad argument #1 to 'compile' (the model's variables were made outside the scope of %s, which compiles " ..
        "it: make (or build) the model inside the scope, as TF requires)"):format(tostring(d.get_strategy())), 2)
    end
    d._on_model_created(self)
  end
  -- nothing returned, as Keras: the prompt echoes nothing
end

local function check_compiled(self, what)
  if not self._compiled then
    error(("call model:compile{optimizer=, loss=, metrics=} before model:%s"):format(what), 3)
  end
end

-- x (or y) given as arrays: a tensor, or a plain table of them (several
-- inputs or outputs: a list, or keyed by name)
local function is_arrays(v)
  return tensor.is_tensor(v) or (type(v) == "table" and getmetatable(v) == nil and tensor.is_tensor(nest.first(v)))
end

-- Accept a Dataset, or (x, y) arrays with opts.batch_size (Keras' arrays;
-- opts.sample_weight a third component); shuffle: shuffle the rows first.
-- Several inputs or outputs make nested elements {{xa, xb}, {ya, yb}}.
--
-- Every array must have as many samples (rows) as the others: Keras's "Data
-- cardinality is ambiguous", named here by what differs (fname: the caller).
local function check_samples(fname, x, y, w, what)
  local seen, first = {}, nil
  for _, part in ipairs({ { "x", x }, { "y", y }, { "sample_weight", w } }) do
    local sizes, uniq = {}, {}
    nest.map(part[2], function(t)
      if tensor.is_tensor(t) then
        local n = t.ndim > 0 and t.shape[1] or 1
        if not uniq[n] then uniq[n] = true; sizes[#sizes + 1] = n end
        first = first or n
        if n ~= first then seen.differ = true end
      end
      return t
    end)
    table.sort(sizes)
    if #sizes > 0 then seen[#seen + 1] = ("%s %s"):format(part[1], table.concat(sizes, " and ")) end
  end
  if seen.differ then
    error(("bad argument to '%s' (%sthe arrays differ in their number of samples, the first axis: %s; " ..
      "every array needs one row per sample)"):format(fname, what and what .. ": " or "", table.concat(seen, ", ")), 0)
  end
end

local function as_dataset(x, y, opts, shuffle, fname, what)
  if is_arrays(x) then
    local w = opts.sample_weight
    check_samples(fname, x, y, w, what)
    local ds = ldist.data.Dataset.from_tensor_slices(y and (w and { x, y, w } or { x, y }) or { x })
    if shuffle then ds = ds:shuffle(nest.rows(x), { seed = opts.seed }) end
    return ds:batch(opts.batch_size or 32)
  end
  return x
end

-- fit(x, y, opts) or fit(ds, opts): is v (the second argument) the options?
local data_keys = { sample_weight = true }
local function is_options(v)
  if type(v) ~= "table" or tensor.is_tensor(v) or is_pr(v) then return false end
  if v[1] ~= nil then return not is_arrays(v[1]) end
  for k in pairs(v) do if type(k) == "string" and not data_keys[k] and not tensor.is_tensor(v[k]) then return true end end
  return not is_arrays(v)
end

-- for the strategies that run fit themselves (distribute/local_cluster.lua, distribute/parameter_server.lua)
ldist._util.as_dataset, ldist._util.is_arrays = as_dataset, is_arrays


-- a batch's inputs, targets and (Keras's third component) sample weights
local function batch_xy(batch)
  if tensor.is_tensor(batch) then return batch, nil end
  return batch[1], batch[2], batch[3]
end
-- a batch without y, where the compiled loss needs targets (compile requires a loss)
local function no_targets(fname)
  error(("bad argument to '%s' (no targets: the loss compares the predictions with y, and the data has none; " ..
    "give %s(x, y, ...) or a dataset of {x, y} elements)"):format(fname, fname), 0)
end

-- the per-output loss trackers of a model of several outputs ("<output>_loss",
-- Keras's unweighted loss of each output, averaged over the rows)
local function output_losses(model)
  local outs = {}
  if getmetatable(model._loss) == CompiledLoss then
    for _, e in ipairs(model._loss.entries) do outs[#outs + 1] = { e = e, m = metrics.Mean(e.name .. "_loss") } end
  end
  return outs
end
-- a step's metrics and per-output losses, from its targets and predictions
-- (a list per output for a model of several outputs)
local function update_outputs(ms, outs, y, pred, w, rows)
  for _, m in ipairs(ms) do
    local mw = m._weighted and w or nil   -- weighted_metrics get the step's sample weights
    if m._output then m:update_state(y[m._output], pred[m._output], mw) else m:update_state(y, pred, mw) end
  end
  for _, o in ipairs(outs) do
    local yi, pi = y[o.e.index], pred[o.e.index]
    if pi.device ~= yi.device then pi = pi:to(yi.device) end
    local wi = w
    if wi ~= nil and wi.device ~= yi.device then wi = wi:to(yi.device) end
    o.m:update_state(o.e.loss(yi, pi, wi):item(), rows)
  end
end
-- the logs: loss, <output>_loss, the metrics
local function epoch_logs(loss_m, outs, ms)
  local logs = { loss = loss_m:result() }
  for _, o in ipairs(outs) do logs[o.m.name] = o.m:result() end
  for _, m in ipairs(ms) do logs[m.name] = m:result() end
  return logs
end

-- Keras's return_dict=False form of logs: the loss alone without metrics or
-- output losses, else the list loss, the output losses, then the metrics in
-- compile's order (Keras's metrics_names)
local function logs_list(model, logs)
  local outs = output_losses(model)
  if #outs == 0 and #model._metrics == 0 then return logs.loss end
  local r = { logs.loss }
  for _, o in ipairs(outs) do r[#r + 1] = logs[o.m.name] end
  for _, m in ipairs(model._metrics) do r[#r + 1] = logs[m.name] end
  return r
end

-- For a strategy with its own fit loop (distribute/parameter_server.lua): the
-- epoch's metrics and per-output losses from each step's targets and
-- predictions, and the epoch's logs for its loss.
function Model:_epoch_tracker()
  local outs = output_losses(self)
  for _, m in ipairs(self._metrics) do m:reset_state() end
  return {
    want_pred = #self._metrics > 0 or #outs > 0,
    update = function(y, pred, w, rows) update_outputs(self._metrics, outs, y, pred, w, rows) end,
    logs = function(loss_value)
      local logs = epoch_logs(metrics.Mean("loss"), outs, self._metrics)
      logs.loss = loss_value
      return logs
    end,
  }
end
-- a batch's x and y in the model's input and output order (lists), as fit takes them
function Model:_batch_in_order(x, y, fname)
  local out_names = getmetatable(self._loss) == CompiledLoss and self._loss.names or nil
  return in_order(x, io_names(self, "inputs"), "inputs", fname), in_order(y, out_names, "outputs", fname)
end

-- Keras's class_weight: each example weighs class_weight[its class] (every
-- class in the data must have one). Together with sample weights (sample_weight=
-- or a dataset's third component) it is refused, as Keras 3 refuses it: the
-- product ldist used to take is not what a Keras user's code would get.
-- y may be split over a strategy's replicas (a PerReplica value).
local CW_AND_SW = "bad argument to 'fit' (you cannot give class_weight and sample_weight at the same time, as in " ..
  "Keras 3: fold the class weights into the sample weights)"
local function class_weights(cw, y, w)
  if w ~= nil then error(CW_AND_SW, 0) end
  local d = ldist.distribute
  if d and d.is_per_replica(y) then
    local vals = {}
    for r, yr in ipairs(y.values) do
      vals[r] = class_weights(cw, yr, nil)
    end
    return d.PerReplica(vals, y.global_batch, y.offsets)
  end
  local labels = y
  if labels.ndim > 1 and labels.shape[labels.ndim] > 1 then labels = labels:argmax(-1) end
  local ids = labels:cpu():reshape({ labels:numel() }):totable()
  local out = {}
  for i, c in ipairs(ids) do
    c = math.tointeger(c)
    local cwc = cw[c]
    if cwc == nil then
      error(("bad argument to 'fit' (class_weight has no weight for class %s, which is in the data)"):format(tostring(c)), 0)
    end
    out[i] = cwc
  end
  local t = #out > 0 and tensor.new(out) or tensor.zeros(0)
  return t.device == y.device and t or t:to(y.device)
end
-- the weights of y's rows (a strategy that weighs every example before it ships the data)
ldist._util.class_weights = function(cw, y) return class_weights(cw, y, nil) end


local count_rows = nest.rows

-- the options fit knows; anything else is an error naming it
local fit_options = { epochs = true, batch_size = true, validation_data = true, verbose = true, callbacks = true,
  steps_per_epoch = true, shuffle = true, seed = true, initial_epoch = true, sample_weight = true, class_weight = true,
  validation_split = true, validation_freq = true, validation_steps = true }
-- steps_per_epoch, validation_steps, evaluate's steps, batch_size: nil or a
-- positive integer (min 1); epochs and initial_epoch: non-negative (min 0)
local function check_steps(v, name, fname, level, min)
  min = min or 1
  if v ~= nil and not (math.tointeger(v) and v >= min) then
    error(("bad argument to '%s' (%s must be a %s integer, got %s)"):format(fname, name,
      min > 0 and "positive" or "non-negative", type(v) == "string" and ("%q"):format(v) or tostring(v)), level)
  end
end

-- verbose, as Keras takes it: 0 (silent), 1 (a progress bar), 2 (a line per epoch) or "auto" (1)
local function check_verbose(v, fname, level)
  if v ~= nil and v ~= 0 and v ~= 1 and v ~= 2 and v ~= "auto" then
    error(("bad argument to '%s' (verbose must be 0, 1, 2 or \"auto\", got %s)"):format(fname,
      type(v) == "string" and ("%q"):format(v) or tostring(v)), level)
  end
end

local function check_fit_options(opts)
  check_options("fit", opts, fit_options, 3)
  for _, k in ipairs { "steps_per_epoch", "validation_steps", "batch_size" } do check_steps(opts[k], k, "fit", 4) end
  check_steps(opts.epochs, "epochs", "fit", 4, 0)
  check_verbose(opts.verbose, "fit", 4)
  if opts.shuffle ~= nil and type(opts.shuffle) ~= "boolean" then
    error(("bad argument to 'fit' (shuffle must be true or false, got %s)"):format(tostring(opts.shuffle)), 3)
  end
  local vf = opts.validation_freq
  if vf ~= nil then
    local good = math.tointeger(vf) and vf > 0
    if type(vf) == "table" then          -- Keras also takes a list of (1-based) epochs
      good = true
      for _, e in ipairs(vf) do if not (math.tointeger(e) and e > 0) then good = false end end
    end
    if not good then
      error(("bad argument to 'fit' (validation_freq must be a positive integer or a list of epochs, got %s)")
        :format(tostring(vf)), 3)
    end
  end
  local vs = opts.validation_split
  if vs ~= nil and not (type(vs) == "number" and vs >= 0 and vs < 1) then
    error(("bad argument to 'fit' (validation_split must be a number in [0, 1), got %s)"):format(tostring(vs)), 3)
  end
  if opts.class_weight ~= nil and opts.sample_weight ~= nil then error(CW_AND_SW, 3) end
  check_steps(opts.initial_epoch, "initial_epoch", "fit", 4, 0)
  local cbs = opts.callbacks
  if cbs ~= nil and type(cbs) ~= "table" then
    error(("bad argument to 'fit' (callbacks must be a list of callbacks, got %s)"):format(type(cbs)), 3)
  end
  for i, cb in ipairs(cbs or {}) do
    if type(cb) ~= "table" then
      error(("bad argument to 'fit' (callbacks[%d] is a %s; a callback is a table of on_epoch_end, " ..
        "on_train_batch_end, ... functions, or one of ldist.callbacks)"):format(i, type(cb)), 3)
    end
  end
end

-- Keras's validation_split (keras/src/trainers/data_adapters/array_slicing.py,
-- train_validation_split): the LAST floor(n * split) rows of x, y (and
-- sample_weight) are the validation data, taken before any shuffling; a
-- Dataset cannot be split. validation_data, when given, wins.
local function split_validation(x, y, opts)
  local vs = opts.validation_split
  if not vs or vs == 0 or opts.validation_data ~= nil then return x, y, opts end
  if not is_arrays(x) then
    error("bad argument to 'fit' (validation_split is only supported for tensors, as in Keras; " ..
      "a Dataset cannot be split: pass validation_data)", 3)
  end
  local n = nest.rows(x)
  local split_at = math.floor(n * (1.0 - vs))
  if split_at == 0 or split_at == n then
    error(("bad argument to 'fit' (training data contains %d samples, which is not sufficient to split it into " ..
      "a validation and training set as specified by validation_split=%s)"):format(n, tostring(vs)), 3)
  end
  local function part(t, a, b) return nest.map(t, function(u) return u:slice(0, a, b) end) end   -- each input / output
  local o = {}
  for k, v in pairs(opts) do o[k] = v end
  o.validation_split = nil
  o.sample_weight = part(opts.sample_weight, 0, split_at)
  o.validation_data = { part(x, split_at, n), part(y, split_at, n), part(opts.sample_weight, split_at, n) }
  return part(x, 0, split_at), part(y, 0, split_at), o
end

-- Keras's EpochIterator (keras/src/trainers/epoch_iterator.py): one data
-- iterator for a whole fit (and one for its validation). Without steps, each
-- epoch reads the data from the start to its end. With steps (steps_per_epoch,
-- validation_steps), the iterator goes on where the last epoch stopped, so a
-- repeated dataset is read on, not started again; a finite dataset starts
-- again once it has handed out all its batches (Keras cuts the epoch that
-- reaches its end short, with "ran out of data", and so does this).
-- open() -> next (called with no argument: a batch or nil), closer or nil.
local EpochIter = { __name = "ldist.EpochIterator" }
EpochIter.__index = EpochIter
local function epoch_iterator(ds, steps, open)
  local card = type(ds) ~= "function" and ds.cardinality and ds:cardinality() or -2
  return setmetatable({ ds = ds, steps = steps, open = open, seen = 0,
    num_batches = math.tointeger(card) and card >= 0 and card or nil }, EpochIter)
end
function EpochIter:close()
  local c = self.closer
  self.next, self.closer, self.seen = nil, nil, 0
  if c ~= nil then
    local mt = getmetatable(c)
    if type(mt) == "table" and mt.__close then mt.__close(c) end
  end
end
local function ran_out(self)
  if self.steps and not self.warned then
    self.warned = true
    io.stderr:write("Your input ran out of data; interrupting training. Make sure that your dataset or generator can " ..
      "generate at least `steps_per_epoch * epochs` batches. You may need to use the `:repeat_()` function when " ..
      "building your dataset.\n")
  end
end
-- the batches of the next epoch, as a function for a generic for
function EpochIter:epoch()
  if not self.steps or self.next == nil or (self.num_batches and self.seen >= self.num_batches) then
    self:close()
    self.next, self.closer = self.open(self.ds)
  end
  local step, carried = 0, self.seen > 0
  return function()
    if self.steps and step >= self.steps then return nil end
    if self.num_batches and self.seen >= self.num_batches then ran_out(self); return nil end
    local b = self.next and self.next()
    if b == nil and step == 0 and carried then
      -- a dataset of unknown length ended exactly where the last epoch
      -- stopped: this epoch reads it again from the start
      self:close()
      self.next, self.closer = self.open(self.ds)
      b = self.next()
    end
    if b == nil then
      if self.steps and step < self.steps then ran_out(self) end
      self:close()
      return nil
    end
    step, self.seen = step + 1, self.seen + 1
    return b
  end
end

-- a dataset's batches in order: a Dataset's ds:iter() (a to-be-closed
-- iterator), or a for-loop iterable (a Lua function or an object with __call,
-- as BackupAndRestore's resumed dataset), or a Lua object's iter()
local function open_batches(ds)
  local mt = type(ds) == "table" and getmetatable(ds)
  local callable = type(ds) == "function" or (type(mt) == "table" and mt.__call ~= nil)
  if not callable and type(ds.iter) == "function" then
    local f, s, c, closer = ds:iter()
    return function() local b = f(s, c); c = b; return b end, closer
  end
  local prev
  return function() prev = ds(nil, prev); return prev end, nil
end

-- Keras's Trainer._should_eval: validation_freq counts epochs from 1
local function should_eval(epoch, freq)
  if freq == nil then return true end
  if type(freq) == "table" then
    for _, e in ipairs(freq) do if e == epoch + 1 then return true end end
    return false
  end
  return (epoch + 1) % freq == 0
end

-- the strategy a model trains under: the one it was made (or compiled) in,
-- else the one whose scope is open
local function strategy_of(model)
  local d = ldist.distribute
  return model.distribute_strategy or (d and d.get_strategy()) or nil
end
Model._strategy_of = strategy_of

-- model:fit(dataset, {epochs=1, validation_data=, verbose=1, callbacks=, steps_per_epoch=})
-- model:fit(x, y, {batch_size=32, epochs=1, ...})
function Model:fit(x, y, opts)
  check_compiled(self, "fit")
  if opts == nil and is_options(y) then opts, y = y, nil end
  opts = opts or {}
  if type(opts) ~= "table" then error(("bad argument to 'fit' (options table expected, got %s)"):format(type(opts)), 2) end
  check_fit_options(opts)
  -- Keras: "Expected input data to be non-empty" (else a zero-size shuffle
  -- buffer reported the problem in the data pipeline's words)
  if is_arrays(x) and nest.rows(x) == 0 then
    error(("bad argument #1 to 'fit' (x holds no samples: its first tensor has shape %s)")
      :format(shape_str(nest.first(x).shape)), 2)
  end
  x, y, opts = split_validation(x, y, opts)
  local strategy = strategy_of(self)
  -- a strategy that trains elsewhere (a LocalCluster's workers, ps tasks)
  if strategy and strategy._fit then return strategy:_fit(self, x, y, opts) end
  -- a callback may change where fit starts (BackupAndRestore resumes)
  for _, cb in ipairs(opts.callbacks or {}) do
    if type(cb) == "table" and cb._before_fit then x, y, opts = cb:_before_fit(self, x, y, opts, strategy) end
  end
  -- Keras trains under model.distribute_strategy.scope()
  if strategy and strategy.scope then
    return strategy:scope(function() return self:_fit_loop(x, y, opts, strategy) end)
  end
  return self:_fit_loop(x, y, opts, strategy)
end

-- Ctrl-C (or a notebook's interrupt) raises "interrupted" in Lua or from a C
-- loop that polls for it.
local function is_interrupt(err)
  return type(err) == "string" and (err:match("interrupted$") or err:match("interrupted\nstack traceback:")) ~= nil
end

-- Ctrl-C during fit: the progress bar ends its line with the steps done, and
-- the error is one line (an object whose text is its message, so no
-- traceback of fit's insides follows) saying what model.history holds.
local INTERRUPT_MT = { __name = "ldist.Interrupted", __tostring = function(e) return e.message end }
local function epochs_done(model)
  local done = 0
  for _, v in pairs(model.history and model.history.history or {}) do done = math.max(done, #v) end
  return done
end
local function fit_interrupted(model, callbacks, epoch, epochs, step, total)
  for _, cb in ipairs(callbacks) do
    if type(cb) == "table" and type(cb.bar) == "table" and cb.bar.finish then pcall(cb.bar.finish, cb.bar) end
  end
  local done = epochs_done(model)
  local msg = ("interrupted: fit stopped in epoch %d/%d at step %d%s; model.history holds the %d %s done"):format(
    epoch + 1, epochs, step, total and ("/" .. total) or "", done, done == 1 and "epoch" or "epochs")
  error(setmetatable({ message = msg }, INTERRUPT_MT), 0)
end

-- A worker of the job died (strategy:_lost_peer() names it): as Ctrl-C,
-- one message (torchrun's failure summary: who, pid, the epoch and step)
-- and model.history keeps the epochs done; it points to BackupAndRestore.
-- The error is an object with the fields (lost, epoch, epochs, step, total),
-- so a LocalCluster's coordinator can say where its chief stopped.
local FIT_STOPPED_MT = { __name = "ldist.FitStopped", __tostring = function(e) return e.message end }
function nn._fit_stopped(fields) return setmetatable(fields, FIT_STOPPED_MT) end
function nn._is_fit_stopped(e) return getmetatable(e) == FIT_STOPPED_MT end
function nn._backup_hint(callbacks)
  for _, cb in ipairs(callbacks or {}) do
    if getmetatable(cb) == ldist.callbacks._BackupAndRestore then
      return ("BackupAndRestore keeps its checkpoint in %s: fit again with it, on a cluster whose workers all run, " ..
        "and training resumes there."):format(cb.dir)
    end
  end
  return "To resume after a failure instead of starting again, train with callbacks.BackupAndRestore{dir = ...}."
end
local function fit_lost_peer(model, callbacks, lost, epoch, epochs, step, total)
  for _, cb in ipairs(callbacks) do
    if type(cb) == "table" and type(cb.bar) == "table" and cb.bar.finish then pcall(cb.bar.finish, cb.bar) end
  end
  local done = epochs_done(model)
  -- step: the steps done; the one that failed is the next
  local msg = ("fit stopped: %s, during step %d%s of epoch %d/%d; model.history holds the %d %s done.\n%s")
    :format(lost, step + 1, total and ("/" .. total) or "", epoch + 1, epochs, done, done == 1 and "epoch" or "epochs",
      nn._backup_hint(callbacks))
  error(nn._fit_stopped({ message = msg, lost = lost, epoch = epoch, epochs = epochs, step = step + 1, total = total }), 0)
end

-- A step's loss and metrics read (p: the step's lv and pred, values or
-- functions that read them, its targets by, weights bw and rows n) into the
-- trackers: fit's steps, one step late, and train_on_batch's.
local function settle_step(self, strategy, loss_m, outs, want_pred, p)
  local lv = type(p.lv) == "function" and p.lv() or p.lv
  loss_m:update_state(lv, p.n)
  if want_pred then
    local pred = type(p.pred) == "function" and p.pred() or p.pred
    local yb, wb = p.by, p.bw
    if is_pr(yb) then yb = strategy:gather(yb) end   -- split over the replicas
    if is_pr(wb) then wb = strategy:gather(wb) end
    update_outputs(self._metrics, outs, yb, pred, wb, p.n)
    -- the step's labels and weights on the replicas' devices are read:
    -- their memory goes back now, not when the collector gets to them
    if is_pr(p.by) then strategy:_release_step(p.by) end
    if is_pr(p.bw) then strategy:_release_step(p.bw) end
  end
end

-- One training step of a batch under the model's strategy (or none): its
-- loss and predictions as settle_step reads them, and its weights
local function issue_step(self, strategy, bx, by, bw, class_weight, want_pred, out_names, fname)
  if class_weight then
    if out_names then error(("bad argument to '%s' (class_weight is for a model of one output, as in Keras; " ..
      "give sample weights instead)"):format(fname), 0) end
    bw = class_weights(class_weight, by, bw)
  end
  local lv, pred
  if strategy and strategy.train_step then
    lv, pred = strategy:train_step(self, bx, by, self._loss, self._optimizer, want_pred, bw)
  else
    lv, pred = self:train_step(bx, by, self._loss, self._optimizer, bw)
  end
  return lv, pred, bw
end

function Model:_fit_loop(x, y, opts, strategy)
  local ds = as_dataset(x, y, opts, opts.shuffle ~= false, "fit")
  local epochs, verbose = opts.epochs or 1, opts.verbose == nil and 1 or opts.verbose
  local initial = opts.initial_epoch or 0
  local val = opts.validation_data
  if type(val) == "table" and getmetatable(val) == nil and is_arrays(val[1]) then
    -- validation sample weights are val[3], never the training ones
    val = as_dataset(val[1], val[2], { batch_size = opts.batch_size, sample_weight = val[3] }, false, "fit", "validation_data")
  end
  local total = opts.steps_per_epoch or (ds.cardinality and ds:cardinality()) or nil
  if total and total < 0 then total = nil end
  -- one iterator for the whole fit (Keras's EpochIterator): with
  -- steps_per_epoch, each epoch reads on where the last one stopped. A
  -- strategy may split the batches over its replicas as it gathers them.
  local batches = epoch_iterator(ds, opts.steps_per_epoch, function(d)
    if strategy and strategy._fit_batches then
      local sf, _, _, sit = strategy:_fit_batches(d)
      if sf then return sf, sit end
    end
    return open_batches(d)
  end)

  -- Keras's CallbackList: the user's callbacks, then the progress bar (a
  -- ProgbarLogger, unless one is given); the history is recorded after them
  -- all, so what a callback adds to the logs (learning_rate) is in it.
  local callbacks, has_bar = {}, false
  for i, cb in ipairs(opts.callbacks or {}) do
    callbacks[i] = cb
    if getmetatable(cb) == ldist.callbacks._ProgbarLogger then has_bar = true end
  end
  if verbose ~= 0 and not has_bar then callbacks[#callbacks + 1] = ldist.callbacks.ProgbarLogger() end
  -- Keras's History callback comes last (the user's own, when the list has
  -- one); model.history is it from the start and fills epoch by epoch, so
  -- an error or an interrupt in a later epoch keeps the epochs done
  local history
  for _, cb in ipairs(callbacks) do if getmetatable(cb) == ldist.callbacks._History then history = cb end end
  if not history then history = ldist.callbacks.History(); callbacks[#callbacks + 1] = history end
  local params = { epochs = epochs, steps = total, verbose = verbose }
  for _, cb in ipairs(callbacks) do if type(cb.set_params) == "function" then cb:set_params(params) end end
  self.history = history
  local opt = self._optimizer
  local in_names, out_names = io_names(self, "inputs"), getmetatable(self._loss) == CompiledLoss and self._loss.names or nil
  self.stop_training = false
  for _, cb in ipairs(callbacks) do if cb.on_train_begin then cb:on_train_begin(self) end end
  -- epochs are numbered from 0, as Keras's callbacks see them (the bar shows epoch + 1)
  for epoch = initial, epochs - 1 do
    for _, cb in ipairs(callbacks) do if cb.on_epoch_begin then cb:on_epoch_begin(epoch, self) end end
    local loss_m, outs = metrics.Mean("loss"), output_losses(self)
    for _, m in ipairs(self._metrics) do m:reset_state() end
    local want_pred = #self._metrics > 0 or #outs > 0
    local step = 0
    -- A step's loss and predictions are read one step late: the next step is
    -- issued first, so a strategy whose devices queue work keeps them busy
    -- while the host reads values (which waits for the device).
    local pending
    local function settle(p)
      settle_step(self, strategy, loss_m, outs, want_pred, p)
      -- Keras's batch logs: the running means so far in the epoch
      local vals = epoch_logs(loss_m, outs, self._metrics)
      -- Keras's batch argument: the batch's index in the epoch, from 0
      for _, cb in ipairs(callbacks) do if cb.on_train_batch_end then cb:on_train_batch_end(p.step - 1, vals, self) end end
    end
    if strategy and strategy._fit_begin then strategy:_fit_begin() end
    -- device memory's collections at the steps' ends (tensor.c): each step
    -- then meets the same garbage, and a GPU's pool stops growing early
    local gc_steps = ldist._distribute.collector_steps(true)
    local ok, err = xpcall(function()
      for batch in batches:epoch() do
        local bx, by, bw = batch_xy(batch)
        if by == nil then no_targets("fit") end
        bx, by = in_order(bx, in_names, "inputs", "fit"), in_order(by, out_names, "outputs", "fit")
        local lv, pred
        lv, pred, bw = issue_step(self, strategy, bx, by, bw, opts.class_weight, want_pred, out_names, "fit")
        step = step + 1
        ldist._distribute.collector_step()
        if pending then
          settle(pending)
          -- a batch callback stopped training (TerminateOnNaN): Keras stops
          -- after that batch; the step issued since is not counted
          if self.stop_training then pending = nil; break end
        end
        pending = { lv = lv, pred = pred, by = by, bw = bw, n = count_rows(bx), step = step }
        if self.stop_training then break end
      end
      if pending then settle(pending); pending = nil end
    end, ldist._keep_traceback)   -- its frames survive the rethrow (state.c)
    ldist._distribute.collector_steps(gc_steps)
    if strategy and strategy._fit_end then strategy:_fit_end() end
    if not ok then
      batches:close()
      if is_interrupt(err) then fit_interrupted(self, callbacks, epoch, epochs, step, total) end
      local lost = strategy and strategy._lost_peer and strategy:_lost_peer()
      if lost then fit_lost_peer(self, callbacks, lost, epoch, epochs, step, total) end
      error(err, 0)
    end
    local logs = epoch_logs(loss_m, outs, self._metrics)
    if val and should_eval(epoch, opts.validation_freq) then
      local r = self:_evaluate_batches(val, opts.validation_steps)
      for k, v in pairs(r) do logs["val_" .. k] = v end
    end
    for _, cb in ipairs(callbacks) do if cb.on_epoch_end then cb:on_epoch_end(epoch, logs, self) end end
    if self.stop_training then break end
  end
  batches:close()
  -- Keras's finalize_variable_values: with use_ema the variables take their moving averages
  if epochs > 0 then ldist.optim._finalize(opt, self.trainable_variables) end
  for _, cb in ipairs(callbacks) do if cb.on_train_end then cb:on_train_end(self) end end
  self.history = history
  return history
end
doc(Model.fit, "Model:fit",
  "model:fit(dataset, {epochs=1, validation_data=, verbose=1, callbacks=, steps_per_epoch=})\n" ..
  "model:fit(x, y, {batch_size=32, epochs=1, shuffle=true, ...})\n\n" ..
  "Train the compiled model; each step runs in C. Shows a progress bar per epoch and returns\n" ..
  "a callbacks.History (Keras's): h.history = {loss={...}, accuracy={...}, val_loss={...}, ...}, h.epoch\n" ..
  "(the epochs run, from 0), h.params = {epochs=, steps=, verbose=}; h.loss is h.history.loss.\n" ..
  "Options: epochs, batch_size, shuffle, seed, steps_per_epoch, verbose, callbacks, initial_epoch\n" ..
  "(fit runs epochs initial_epoch .. epochs-1), validation_data={x, y[, w]} or a Dataset,\n" ..
  "validation_split (the LAST fraction of x/y, before shuffling, as Keras), validation_freq\n" ..
  "(validate every n epochs, or a list of 1-based epochs), validation_steps, sample_weight, class_weight\n" ..
  "(not both, as Keras 3).\n" ..
  "With steps_per_epoch each epoch reads on where the last one stopped, as Keras's: a repeated\n" ..
  "dataset is not started again; a finite one starts again once read through. Each validation\n" ..
  "reads validation_steps batches from the start of the validation data (Keras's too).\n" ..
  "Callbacks see Keras's epoch numbers, from 0: on_epoch_begin(epoch), on_epoch_end(epoch, logs).")

-- model:evaluate(dataset | x, y, {batch_size=, verbose=, steps=, return_dict=true}) -> {loss=, <metric>=}
function Model:evaluate(x, y, opts)
  check_compiled(self, "evaluate")
  if opts == nil and is_options(y) then opts, y = y, nil end
  opts = opts or {}
  check_options("evaluate", opts, evaluate_options, 2)
  check_steps(opts.steps, "steps", "evaluate", 3)
  check_steps(opts.batch_size, "batch_size", "evaluate", 3)
  check_verbose(opts.verbose, "evaluate", 3)
  if opts.return_dict ~= nil and type(opts.return_dict) ~= "boolean" then
    error(("bad argument to 'evaluate' (return_dict must be a boolean, got %s)"):format(type(opts.return_dict)), 2)
  end
  local r = self:_evaluate_batches(as_dataset(x, y, opts, false, "evaluate"), opts.steps)
  if (opts.verbose or 0) ~= 0 then
    local parts = {}
    for k, v in pairs(r) do parts[#parts + 1] = ("%s: %.4f"):format(k, v) end
    table.sort(parts)
    print(table.concat(parts, " - "))
  end
  -- the table by default (ldist's evaluate always gave it); return_dict=false gives Keras's default list
  if opts.return_dict == false then return logs_list(self, r) end
  return r
end

-- the loss and metrics over a dataset, or its first `steps` batches
-- (evaluate, and fit's validation: Keras reads the validation data from its
-- start every time, validation_steps batches of it)
function Model:_evaluate_batches(ds, steps)
  local batches = epoch_iterator(ds, steps, open_batches)
  local ok, r = xpcall(self._evaluate_epoch, ldist._keep_traceback, self, batches)   -- frames kept (state.c)
  batches:close()
  if not ok then error(r, 0) end
  return r
end
-- One batch's loss and metrics in inference (evaluate's, test_on_batch's),
-- on the first device of the model's strategy
local function eval_batch(self, loss_m, outs, ms, bx, by, bw, fname)
  local dev = self.distribute_strategy and self.distribute_strategy.devices[1]
  local in_names, out_names = io_names(self, "inputs"), getmetatable(self._loss) == CompiledLoss and self._loss.names or nil
  local function to_dev(t) return t.device ~= dev and t:to(dev) or t end
  bx, by = in_order(bx, in_names, "inputs", fname), in_order(by, out_names, "outputs", fname)
  if dev then bx, by, bw = nest.map(bx, to_dev), nest.map(by, to_dev), nest.map(bw, to_dev) end
  local pred = self(bx, { training = false })
  -- with sample weights, each batch's weighted loss (sum w*l / rows), the
  -- batches averaged by their rows: Keras's evaluate
  local rows = count_rows(bx)
  loss_m:update_state(self._loss(by, pred, bw):item() + self:_regularization_loss(), rows)
  update_outputs(ms, outs, by, pred, bw, rows)
end

function Model:_evaluate_epoch(batches)
  local loss_m, outs = metrics.Mean("loss"), output_losses(self)
  local ms = {}
  for i, m in ipairs(self._metrics) do
    ms[i] = setmetatable({}, { __index = m }); ms[i]:reset_state()
  end
  for batch in batches:epoch() do
    local bx, by, bw = batch_xy(batch)
    if by == nil then no_targets("evaluate") end
    eval_batch(self, loss_m, outs, ms, bx, by, bw, "evaluate")
  end
  return epoch_logs(loss_m, outs, ms)
end
doc(Model.evaluate, "Model:evaluate",
  "model:evaluate(dataset | x, y, {batch_size=32, verbose=0, steps=, return_dict=true})\n\nLoss and metrics over the data: " ..
  "{loss=, accuracy=}; return_dict=false gives Keras's list (loss, then the metrics).\n" ..
  "steps: read only that many batches (needed for a repeated dataset), as Keras.")

---------------------------------------------------------------- one batch at a time
-- Keras 3's train_on_batch, test_on_batch and predict_on_batch: the loss and
-- metrics of that batch alone (the metrics are reset first, as Keras 3's are).
local on_batch_options = { sample_weight = true, class_weight = true, return_dict = true }
local function batch_trackers(self)
  for _, m in ipairs(self._metrics) do m:reset_state() end
  return { loss_m = metrics.Mean("loss"), outs = output_losses(self) }
end
function Model:reset_metrics()
  for _, m in ipairs(self._metrics or {}) do m:reset_state() end
end
-- Keras's return: the loss alone without metrics, else loss, the output
-- losses, then the metrics in compile's order; or the table (return_dict)
local function batch_result(self, s, return_dict)
  local logs = epoch_logs(s.loss_m, s.outs, self._metrics)
  return return_dict and logs or logs_list(self, logs)
end
-- the batch as fit's dataset would give it (tables of numbers made tensors,
-- sample weights checked against the rows)
local function one_batch(x, y, opts, fname)
  if not is_arrays(x) then error(("bad argument #1 to '%s' (a tensor, or a list or table of tensors, expected: " ..
    "one batch, not a dataset)"):format(fname), 0) end
  if y == nil then no_targets(fname) end
  local rows = nest.rows(x)
  if rows == 0 then error(("bad argument #1 to '%s' (x holds no samples)"):format(fname), 0) end
  local next_batch, closer = open_batches(as_dataset(x, y, { batch_size = rows, sample_weight = opts.sample_weight },
    false, fname))
  local b = next_batch()
  if closer then closer() end
  return batch_xy(b)
end

function Model:train_on_batch(x, y, opts)
  check_compiled(self, "train_on_batch")
  opts = opts or {}
  check_options("train_on_batch", opts, on_batch_options, 2)
  local strategy = strategy_of(self)
  if strategy and strategy._fit then
    error(("train_on_batch: %s trains in its own processes; use fit"):format(tostring(strategy)), 2)
  end
  local s = batch_trackers(self)
  local want_pred = #self._metrics > 0 or #s.outs > 0
  local out_names = getmetatable(self._loss) == CompiledLoss and self._loss.names or nil
  local function run()
    local bx, by, bw = one_batch(x, y, opts, "train_on_batch")
    bx, by = in_order(bx, io_names(self, "inputs"), "inputs", "train_on_batch"),
      in_order(by, out_names, "outputs", "train_on_batch")
    local lv, pred
    lv, pred, bw = issue_step(self, strategy, bx, by, bw, opts.class_weight, want_pred, out_names, "train_on_batch")
    settle_step(self, strategy, s.loss_m, s.outs, want_pred, { lv = lv, pred = pred, by = by, bw = bw, n = count_rows(bx) })
  end
  if strategy and strategy.scope then strategy:scope(run) else run() end
  return batch_result(self, s, opts.return_dict)
end
doc(Model.train_on_batch, "Model:train_on_batch",
  "model:train_on_batch(x, y, {sample_weight=, class_weight=, return_dict=false})\n\nOne training step on one batch, " ..
  "under the model's strategy (Keras 3's): this batch's loss, or {loss, metrics...} with metrics, or the\n" ..
  "table (return_dict), computed before the step's update, as Keras 3's.")

function Model:test_on_batch(x, y, opts)
  check_compiled(self, "test_on_batch")
  opts = opts or {}
  check_options("test_on_batch", opts, { sample_weight = true, return_dict = true }, 2)
  local s = batch_trackers(self)
  local bx, by, bw = one_batch(x, y, opts, "test_on_batch")
  eval_batch(self, s.loss_m, s.outs, self._metrics, bx, by, bw, "test_on_batch")
  return batch_result(self, s, opts.return_dict)
end
doc(Model.test_on_batch, "Model:test_on_batch",
  "model:test_on_batch(x, y, {sample_weight=, return_dict=false})\n\nThe loss and metrics of one batch in inference " ..
  "(Keras 3's), returned as train_on_batch's.")

function Model:predict_on_batch(x)
  if not is_arrays(x) then error("bad argument #1 to 'predict_on_batch' (a tensor, or a list or table of tensors, " ..
    "expected: one batch)", 2) end
  return self:predict(x, { batch_size = math.max(1, nest.rows(x)) })
end
doc(Model.predict_on_batch, "Model:predict_on_batch", "model:predict_on_batch(x)\n\nThe predictions for one batch (model:predict of it whole).")
doc(Model.reset_metrics, "Model:reset_metrics",
  "model:reset_metrics()\n\nThe compiled metrics' state back to empty (Keras's).")

-- model:predict(x | dataset, {batch_size=32}) -> predictions for every row
-- (a list of them, one per output, for a model of several outputs)
function Model:predict(x, opts)
  opts = opts or {}
  check_options("predict", opts, predict_options, 2)
  check_steps(opts.batch_size, "batch_size", "predict", 3)
  check_steps(opts.steps, "steps", "predict", 3)
  check_verbose(opts.verbose, "predict", 3)
  local parts = {}
  local in_names = io_names(self, "inputs")
  if is_arrays(x) then
    x = in_order(x, in_names, "inputs", "predict")
    local n, bs = nest.rows(x), opts.batch_size or 256
    for s = 0, n - 1, bs do
      parts[#parts + 1] = self(nest.map(x, function(t) return t:slice(0, s, s + bs) end), { training = false })
    end
  else
    local batches = epoch_iterator(x, opts.steps, open_batches)
    local ok, err = xpcall(function()
      for batch in batches:epoch() do
        local bx = batch_xy(batch)
        parts[#parts + 1] = self(in_order(bx, in_names, "inputs", "predict"), { training = false })
      end
    end, ldist._keep_traceback)   -- its frames survive the rethrow (state.c)
    batches:close()
    if not ok then error(err, 0) end
  end
  if #parts == 0 then error("predict: no data", 2) end
  return nest.concat(parts)
end
doc(Model.predict, "Model:predict", "model:predict(x | dataset, {batch_size=256, steps=})\n\nThe model's outputs for every row, in inference mode\n" ..
  "(a list, one per output, for a model of several outputs; x a list or a table keyed by the\n" ..
  "input names for a model of several inputs).")

-- model:summary() shows the table (text on a terminal, an HTML table in the
-- notebook) and returns nothing, as Keras does; model:summary_text() gives the text.
local Summary = { __name = "ldist.ModelSummary" }
Summary.__index = Summary
Summary.__tostring = function(s) return s.text end
local html_escape = ldist._util.html_escape
function Summary.__mimebundle(s)
  local rows = {}
  for line in (s.wide or s.text):gmatch("[^\n]+") do
    local name, shape, params = line:match("^(%S+ %b())%s+(%(.-%)%S*)%s+(%d+)$")
    if not name then name, shape, params = line:match("^(%S+ %b())%s+(%?)%s+(%d+)$") end
    if name then
      rows[#rows + 1] = ("<tr><td>%s</td><td>%s</td><td style='text-align:right'>%s</td></tr>")
        :format(html_escape(name), html_escape(shape), params)
    end
  end
  local title = s.text:match("^([^\n]*)") or ""
  local totals = {}
  for line in s.text:gmatch("[^\n]+") do
    if line:match("params:") then totals[#totals + 1] = html_escape(line) end
  end
  local html = ("<div><b>%s</b><table><tr><th>Layer (type)</th><th>Output Shape</th><th>Param #</th></tr>%s</table>" ..
    "<p>%s</p></div>"):format(html_escape(title), table.concat(rows), table.concat(totals, "<br>"))
  return { ["text/html"] = html, ["text/plain"] = s.text }
end

-- model:get_weights() -> copies of the weights on the host, in order (Keras's
-- list of arrays); model:set_weights(list) writes them back, to every
-- replica's copy under a strategy (a cross-replica write). A layer has both
-- too (layer:get_weights(), Keras's), over its own weights.
local function get_weights(self)
  local w = {}
  for i, v in ipairs(self.weights) do w[i] = v:clone():cpu() end
  return w
end
local function set_weights(self, list, what)
  if type(list) ~= "table" then error(("bad argument #1 to 'set_weights' (list of tensors expected, got %s)"):format(type(list)), 3) end
  local vars = self.weights
  if #list ~= #vars then
    error(("bad argument #1 to 'set_weights' (%d tensors for a %s with %d weights)"):format(#list, what, #vars), 3)
  end
  for i, v in ipairs(vars) do
    local w = tensor.is_tensor(list[i]) and list[i] or tensor.new(list[i])
    local a, b = table.concat(w.shape, "x"), table.concat(v.shape, "x")
    if a ~= b then
      error(("bad argument #1 to 'set_weights' (weight %d has shape %s, the %s's %s)"):format(i, a, what, b), 3)
    end
  end
  for i, v in ipairs(vars) do v:assign(list[i]) end
  return self
end
function Model:get_weights() return get_weights(self) end
function Model:set_weights(list) return set_weights(self, list, "model") end
doc(Model.get_weights, "Model:get_weights", "model:get_weights()\n\nCopies of the model's weights on the host, in order (Keras's get_weights).")
doc(Model.set_weights, "Model:set_weights", "model:set_weights(list)\n\nWrite the weights (count and shapes must match); under a strategy every replica's\n" ..
  "copy gets them (Keras's set_weights).")
local LayerMethods = nn._layer_methods
function LayerMethods.get_weights(layer) return get_weights(layer) end
function LayerMethods.set_weights(layer, list) return set_weights(layer, list, "layer") end
doc(LayerMethods.get_weights, "Layer:get_weights", "layer:get_weights()\n\nCopies of the layer's weights on the host, in order (Keras's).")
doc(LayerMethods.set_weights, "Layer:set_weights", "layer:set_weights(list)\n\nWrite the layer's weights (count and shapes must match; every replica's copy\n" ..
  "under a strategy), Keras's.")

function Model:summary()
  -- the terminal's width (80 when unknown); the notebook's table reads the
  -- one-line-per-layer text of a wide one
  local s = setmetatable({ text = self:summary_text(ldist.width and ldist.width() or 80), wide = self:summary_text(1000) },
    Summary)
  if ldist.display then ldist.display(s) else io.write(s.text) end
end
doc(Model.summary, "Model:summary", "model:summary()\n\nShow the layers, their output shapes and parameter counts\n" ..
  "(a table in the notebook). model:summary_text() returns the text.")

-- the notebook shows a model as its summary
ldist.globals.tensor = true
ldist.globals.nn = true
ldist.globals.optim = true
ldist.globals.losses = true
ldist.globals.autograd = true
ldist.globals.metrics = true
