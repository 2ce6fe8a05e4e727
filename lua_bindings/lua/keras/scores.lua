-- keras/scores.lua - Keras 3's F-scores (F1Score, FBetaScore), R2Score, the
-- IoU metrics (IoU, MeanIoU, BinaryIoU) and the confusion metrics at a fixed
-- recall, precision, sensitivity or specificity, each accumulating over the
-- batches as Keras's stateful metric does, with sample weights where Keras
-- takes them. Their arithmetic is a few numbers per step, done on the host
-- in doubles; where Keras compares a float32 value with a Python float (a
-- threshold, a target recall), the float is rounded to float32 first, as
-- TF does. keras/training.lua has the helpers (ldist._util.metric_kit) and
-- the confusion counting (Conf), one copy each.
-- tests/lua/test_keras_losses_metrics.lua checks them against Keras 3.15.
local ldist = ...
local tensor, metrics = ldist.tensor, ldist.metrics
local kit, check_opts, doc = ldist._util.metric_kit, ldist._util.check_opts, ldist.document
local host_array, broadcast_to, squeeze_or_expand = kit.host_array, kit.broadcast_to, kit.squeeze_or_expand

-- x rounded to float32 (TF casts a Python float to the tensor's dtype)
local function f32(x) return (string.unpack("f", string.pack("f", x))) end
local EPS = 1e-7   -- keras.backend.epsilon()

-- a result of several values (Keras's array): a float32 tensor; one: a number
local function vector(v) return tensor.new(v) end
local function show(m)
  local r = m:result()
  if type(r) == "number" then return ("<metric %s: %.4f>"):format(m.name, r) end
  return ("<metric %s: %s>"):format(m.name, tostring(r))
end

-- opts as a table (a string is a name), checked against known; class: for messages
local function options(class, opts, known)
  if type(opts) == "string" then opts = { name = opts } end
  opts = opts or {}
  known.name = true
  check_opts("metrics." .. class, opts, known, 4)   -- the error at the constructor's caller
  return opts
end
-- a bad value: the message names the metric and the problem (no position:
-- the constructors check at different depths)
local function bad(class, fmt, ...) error(("metrics.%s: " .. fmt):format(class, ...), 0) end
local function is_num(v) return type(v) == "number" and v == v end

-- the metric's class and options, so it can be rebuilt elsewhere (a saved
-- model, a LocalCluster's workers: keras/models.lua's describe_metrics)
local function spec(m, class, opts)
  local o = {}
  for k, v in pairs(opts) do o[k] = v end
  m._spec = { class = class, opts = o }
  return m
end

-- the rows of a 2-d y_true and y_pred of one shape (Keras's FBetaScore and
-- R2Score take only these); classes fixed by the first update
local function rows_cols(self, class, t, p)
  if #t.shape ~= 2 or #p.shape ~= 2 then
    bad(class, "expects 2-d inputs (batch_size, output_dim), got y_true of shape {%s} and y_pred of shape {%s}",
      table.concat(t.shape, ", "), table.concat(p.shape, ", "))
  end
  local n, c = p.shape[1], p.shape[2]
  if t.shape[1] ~= n or t.shape[2] ~= c then
    bad(class, "y_true of shape {%s} and y_pred of shape {%s} differ", table.concat(t.shape, ", "), table.concat(p.shape, ", "))
  end
  if self.classes and self.classes ~= c then
    bad(class, "built for %d outputs, got %d", self.classes, c)
  end
  self.classes = c
  return n, c
end

-- one weight per row: nil (1), a number, or [rows] / [rows, 1]
local function row_weights(class, sw, n)
  if sw == nil then return nil end
  local w = host_array(sw, 3)
  if w.n == 1 then
    local v = w[1]
    w = { n = n }
    for i = 1, n do w[i] = v end
    return w
  end
  if w.n ~= n or #w.shape > 2 or (#w.shape == 2 and w.shape[2] ~= 1) then
    bad(class, "sample_weight of shape {%s} for %d rows (one weight per row expected)", table.concat(w.shape, ", "), n)
  end
  return w
end

---------------------------------------------------------------- F-scores
local FScore = { __name = "ldist.metrics.FBetaScore", __tostring = show, _direction = "up" }
FScore.__index = FScore
local AVERAGES = { micro = true, macro = true, weighted = true }
local function fscore(class, default_name, opts, beta_given)
  local avg, th, beta = opts.average, opts.threshold, opts.beta
  if avg ~= nil and not AVERAGES[avg] then
    bad(class, "average must be nil, \"micro\", \"macro\" or \"weighted\", got %s", tostring(avg))
  end
  if beta_given then
    if not is_num(beta) or beta <= 0 then bad(class, "beta must be a number > 0, got %s", tostring(beta)) end
  else beta = 1.0 end
  if th ~= nil and not (is_num(th) and th > 0 and th <= 1) then
    bad(class, "threshold must be nil or a number with 0 < threshold <= 1, got %s", tostring(th))
  end
  local m = setmetatable({ name = opts.name or default_name, average = avg, beta = beta,
                           threshold = th and f32(th), class = class }, FScore)
  m:reset_state()
  return spec(m, class, opts)
end
function metrics.FBetaScore(opts)
  opts = options("FBetaScore", opts, { average = true, beta = true, threshold = true })
  return fscore("FBetaScore", "fbeta_score", opts, true)
end
function metrics.F1Score(opts)
  opts = options("F1Score", opts, { average = true, threshold = true })
  return fscore("F1Score", "f1_score", opts, false)
end
function FScore:reset_state() self.tp, self.fp, self.fn, self.support, self.classes = {}, {}, {}, {}, nil end
function FScore:update_state(y_true, y_pred, sample_weight)
  local t, p = host_array(y_true, 1), host_array(y_pred, 2)
  local n, c = rows_cols(self, self.class, t, p)
  local w = row_weights(self.class, sample_weight, n)
  for j = 1, c do
    self.tp[j], self.fp[j] = self.tp[j] or 0.0, self.fp[j] or 0.0
    self.fn[j], self.support[j] = self.fn[j] or 0.0, self.support[j] or 0.0
  end
  for i = 0, n - 1 do
    local top = -math.huge
    if not self.threshold then for j = 1, c do top = math.max(top, p[i * c + j]) end end
    local wi = w and w[i + 1] or 1.0
    for j = 1, c do
      local v, y = p[i * c + j], t[i * c + j]
      -- Keras: the row's maximum (not a near-zero one), or above the threshold
      local yes = self.threshold and v > self.threshold or (not self.threshold and v >= top and math.abs(v) > 1e-9)
      local pv = yes and 1.0 or 0.0
      self.tp[j] = self.tp[j] + pv * y * wi
      self.fp[j] = self.fp[j] + pv * (1 - y) * wi
      self.fn[j] = self.fn[j] + (1 - pv) * y * wi
      self.support[j] = self.support[j] + y * wi
    end
  end
end
function FScore:result()
  local c = self.classes or 0
  local tp, fp, fn = self.tp, self.fp, self.fn
  if self.average == "micro" then   -- Keras keeps totals over the classes
    local a, b, d = 0.0, 0.0, 0.0
    for j = 1, c do a, b, d = a + tp[j], b + fp[j], d + fn[j] end
    tp, fp, fn, c = { a }, { b }, { d }, 1
  end
  local b2, f = self.beta * self.beta, {}
  for j = 1, c do
    local precision = tp[j] / (tp[j] + fp[j] + EPS)
    local recall = tp[j] / (tp[j] + fn[j] + EPS)
    f[j] = precision * recall / (b2 * precision + recall + EPS) * (1 + b2)
  end
  if self.average == nil then return vector(f) end
  local s = 0.0
  if self.average == "weighted" then
    local total = 0.0
    for j = 1, c do total = total + self.support[j] end
    for j = 1, c do s = s + f[j] * (self.support[j] / (total + EPS)) end
    return s
  end
  for j = 1, c do s = s + f[j] end
  return c > 0 and s / c or 0.0
end
for class, default in pairs { F1Score = "f1_score", FBetaScore = "fbeta_score" } do
  doc(metrics[class], "metrics." .. class, ("metrics.%s{%saverage=nil, threshold=nil, name=\"%s\"}\n\n" ..
    "Keras's %s for multi-label or one-hot targets y_true [batch, classes] and scores y_pred of\n" ..
    "that shape: a prediction is positive where y_pred > threshold, or (threshold=nil) where it is\n" ..
    "its row's maximum. (1 + beta^2) precision recall / (beta^2 precision + recall), per class over\n" ..
    "every batch seen (true and false positives, false negatives weighted by sample_weight, one per row).\n" ..
    "average: nil gives a tensor of one score per class; \"micro\" one score of the counts summed over\n" ..
    "the classes; \"macro\" the scores' mean; \"weighted\" their mean weighted by each class's positives."):format(
    class, class == "FBetaScore" and "beta=1, " or "", default, class))
end

---------------------------------------------------------------- R2Score
local R2 = { __name = "ldist.metrics.R2Score", __tostring = show, _direction = "up" }
R2.__index = R2
local AGGREGATIONS = { uniform_average = true, variance_weighted_average = true, none = true }
function metrics.R2Score(opts)
  opts = options("R2Score", opts, { class_aggregation = true, num_regressors = true })
  local agg = opts.class_aggregation
  if agg == nil then agg = "uniform_average" elseif agg == false then agg = "none" end
  if not AGGREGATIONS[agg] then
    bad("R2Score", "class_aggregation must be \"uniform_average\", \"variance_weighted_average\" or \"none\" " ..
      "(Keras's None: one score per output), got %s", tostring(agg))
  end
  local p = opts.num_regressors or 0
  if math.type(p) ~= "integer" or p < 0 then bad("R2Score", "num_regressors must be an integer >= 0, got %s", tostring(p)) end
  local m = setmetatable({ name = opts.name or "r2_score", aggregation = agg, num_regressors = p }, R2)
  m:reset_state()
  return spec(m, "R2Score", opts)
end
function R2:reset_state()
  self.sum, self.squared_sum, self.residual, self.count, self.num_samples, self.classes = {}, {}, {}, {}, 0, nil
end
function R2:update_state(y_true, y_pred, sample_weight)
  local t, p = host_array(y_true, 1), host_array(y_pred, 2)
  squeeze_or_expand(t, p)
  local n, c = rows_cols(self, "R2Score", t, p)
  local w
  if sample_weight ~= nil then
    w = host_array(sample_weight, 3)
    if #w.shape == 1 then w.shape = { w.shape[1], 1 } end   -- Keras: one weight per row
    w = broadcast_to(w, t.shape)
  end
  for j = 1, c do
    self.sum[j], self.squared_sum[j] = self.sum[j] or 0.0, self.squared_sum[j] or 0.0
    self.residual[j], self.count[j] = self.residual[j] or 0.0, self.count[j] or 0.0
  end
  for i = 0, n - 1 do
    for j = 1, c do
      local k = i * c + j
      local wk, y = w and w[k] or 1.0, t[k]
      self.sum[j] = self.sum[j] + y * wk
      self.squared_sum[j] = self.squared_sum[j] + y * y * wk
      self.residual[j] = self.residual[j] + (y - p[k]) ^ 2 * wk
      self.count[j] = self.count[j] + wk
    end
  end
  self.num_samples = self.num_samples + t.n
end
local warned = {}
local function warn_once(msg)
  if warned[msg] then return end
  warned[msg] = true
  io.stderr:write("warning: " .. msg .. "\n")
end
function R2:result()
  local c = self.classes or 0
  local raw, total = {}, {}
  for j = 1, c do
    local mean = self.sum[j] / self.count[j]
    total[j] = self.squared_sum[j] - self.sum[j] * mean
    raw[j] = 1 - self.residual[j] / total[j]
    if raw[j] == math.huge or raw[j] == -math.huge then raw[j] = 0.0 end   -- Keras: an infinite score counts 0
  end
  local r2
  if self.aggregation == "none" then r2 = raw
  elseif self.aggregation == "uniform_average" then
    r2 = 0.0
    for j = 1, c do r2 = r2 + raw[j] end
    r2 = r2 / c
  else
    local ws, sw = 0.0, 0.0
    for j = 1, c do ws, sw = ws + total[j] * raw[j], sw + total[j] end
    r2 = ws / sw
  end
  local p, n = self.num_regressors, self.num_samples
  if p ~= 0 then
    if p > n - 1 then warn_once("More independent predictors than datapoints in adjusted R2 score. Falling back to " ..
      "standard R2 score.")
    elseif p == n - 1 then warn_once("Division by zero in Adjusted R2 score. Falling back to standard R2 score.")
    elseif type(r2) == "table" then
      for j = 1, c do r2[j] = 1 - (1 - r2[j]) * (n - 1) / (n - p - 1) end
    else r2 = 1 - (1 - r2) * (n - 1) / (n - p - 1) end
  end
  return type(r2) == "table" and vector(r2) or r2
end
doc(metrics.R2Score, "metrics.R2Score", "metrics.R2Score{class_aggregation=\"uniform_average\", num_regressors=0, " ..
  "name=\"r2_score\"}\n\nKeras's coefficient of determination of y_pred [batch, outputs] against y_true, over every " ..
  "batch\nseen: 1 - residual sum of squares / total sum of squares, per output (sample_weight weighs the rows).\n" ..
  "class_aggregation: the outputs' mean, \"variance_weighted_average\" (weighted by each output's total\n" ..
  "sum of squares), or \"none\" (Keras's None: a tensor of one score per output). num_regressors p > 0\n" ..
  "gives the adjusted score 1 - (1 - r2)(n - 1)/(n - p - 1), n the values seen (Keras's count).")

---------------------------------------------------------------- IoU
-- A confusion matrix cm[true][pred] of num_classes, weighted. Keras's
-- default dtype is "int": labels, predictions and sample weights are cast
-- to integers (a weight of 0.5 counts 0, as Keras's, which warns); dtype =
-- "float32" keeps the weights.
local IoU = { __name = "ldist.metrics.IoU", __tostring = show, _direction = "up" }
IoU.__index = IoU
local INT_DTYPES = { int = true, int32 = true, int64 = true }
local FLOAT_DTYPES = { float32 = true, float64 = true, float16 = true }
local function trunc(v) return v >= 0 and math.floor(v) or math.ceil(v) end
local function class_ids(class, ids, num)
  if type(ids) ~= "table" or #ids == 0 then bad(class, "target_class_ids must be a non-empty list of class ids") end
  local out = {}
  for i, c in ipairs(ids) do
    if math.type(c) ~= "integer" or c < 0 then bad(class, "target_class_ids[%d] must be a class id >= 0, got %s", i, tostring(c)) end
    if c >= num then bad(class, "Target class id %d is out of range, which is [0, %d)", c, num) end
    out[i] = c
  end
  return out
end
local function iou_new(class, default_name, opts, num, targets)
  if math.type(num) ~= "integer" or num < 1 then bad(class, "num_classes must be a positive integer, got %s", tostring(num)) end
  local dtype = opts.dtype or "int"
  if not INT_DTYPES[dtype] and not FLOAT_DTYPES[dtype] then
    bad(class, "dtype must be \"int\" (Keras's default: weights are truncated to integers) or \"float32\", got %s",
      tostring(dtype))
  end
  local ig = opts.ignore_class
  if ig ~= nil and math.type(ig) ~= "integer" then bad(class, "ignore_class must be an integer, got %s", tostring(ig)) end
  if opts.axis ~= nil and opts.axis ~= -1 then bad(class, "axis must be -1 (the classes on the last axis)") end
  local m = setmetatable({ name = opts.name or default_name, num_classes = num, targets = targets,
    int = INT_DTYPES[dtype] or false, ignore_class = ig, threshold = opts.threshold and f32(opts.threshold),
    sparse_y_true = opts.sparse_y_true ~= false, sparse_y_pred = opts.sparse_y_pred ~= false }, IoU)
  m:reset_state()
  return spec(m, class, opts)
end
local IOU_OPTS = { num_classes = true, target_class_ids = true, ignore_class = true, sparse_y_true = true,
  sparse_y_pred = true, axis = true, dtype = true }
function metrics.IoU(opts)
  opts = options("IoU", opts, IOU_OPTS)
  return iou_new("IoU", "io_u", opts, opts.num_classes, class_ids("IoU", opts.target_class_ids,
    math.type(opts.num_classes) == "integer" and opts.num_classes or math.huge))
end
function metrics.MeanIoU(opts)
  if math.type(opts) == "integer" then opts = { num_classes = opts } end
  opts = options("MeanIoU", opts, { num_classes = true, ignore_class = true, sparse_y_true = true, sparse_y_pred = true,
    axis = true, dtype = true })
  local all = {}
  for c = 0, (math.type(opts.num_classes) == "integer" and opts.num_classes or 0) - 1 do all[#all + 1] = c end
  return iou_new("MeanIoU", "mean_io_u", opts, opts.num_classes, all)
end
function metrics.BinaryIoU(opts)
  opts = options("BinaryIoU", opts, { target_class_ids = true, threshold = true, dtype = true })
  local th = opts.threshold == nil and 0.5 or opts.threshold
  if not is_num(th) then bad("BinaryIoU", "threshold must be a number, got %s", tostring(th)) end
  local o = {}
  for k, v in pairs(opts) do o[k] = v end
  o.threshold = th
  local m = iou_new("BinaryIoU", "binary_io_u", o, 2, class_ids("BinaryIoU", opts.target_class_ids or { 0, 1 }, 2))
  m._spec.opts = opts
  return m
end
function IoU:reset_state()
  self.cm = {}
  for i = 1, self.num_classes * self.num_classes do self.cm[i] = 0.0 end
end
-- the class ids of labels or predictions: argmax over the last axis when not sparse
local function ids_of(v, sparse, what)
  if not sparse then
    v = tensor.is_tensor(v) and v or tensor.new(v)
    v = v:argmax(-1)
  end
  return host_array(v, what)
end
function IoU:update_state(y_true, y_pred, sample_weight)
  local t = ids_of(y_true, self.sparse_y_true, 1)
  local p
  if self.threshold then   -- BinaryIoU: class 1 where y_pred >= threshold
    p = host_array(y_pred, 2)
    for i = 1, p.n do p[i] = p[i] >= self.threshold and 1 or 0 end
  else p = ids_of(y_pred, self.sparse_y_pred, 2) end
  if t.n ~= p.n then
    error(("bad argument #1 to 'update_state' (y_true has %d values, y_pred %d)"):format(t.n, p.n), 2)
  end
  local w
  if sample_weight ~= nil then
    w = host_array(sample_weight, 3)
    w.shape = { w.n }                                   -- flattened, as Keras
    if w.n == 1 then w.shape = {} end
    w = broadcast_to(w, { t.n })
  end
  local C, cm, ig = self.num_classes, self.cm, self.ignore_class
  for i = 1, t.n do
    local a, b = t[i], p[i]
    if self.int then a, b = trunc(a), trunc(b) end
    local wi = w and w[i] or 1.0
    if self.int then wi = trunc(wi) end
    if a >= 0 and a < C and b >= 0 and b < C and a ~= ig then
      local k = math.tointeger(math.floor(a)) * C + math.tointeger(math.floor(b)) + 1
      cm[k] = cm[k] + wi
    end
  end
end
function IoU:result()
  local C, cm = self.num_classes, self.cm
  local sum, valid = 0.0, 0
  for _, c in ipairs(self.targets) do
    local row, col = 0.0, 0.0   -- the true class's count, the predicted class's count
    for j = 0, C - 1 do row, col = row + cm[c * C + j + 1], col + cm[j * C + c + 1] end
    local tp = cm[c * C + c + 1]
    local denom = f32(row + col - tp)
    if denom > 1e-9 then   -- a class absent from both counts nothing (Keras)
      valid = valid + 1
      sum = sum + tp / (denom + EPS)
    end
  end
  return sum / (valid + EPS)
end
doc(metrics.IoU, "metrics.IoU", "metrics.IoU{num_classes=, target_class_ids={...}, ignore_class=nil, " ..
  "sparse_y_true=true,\nsparse_y_pred=true, dtype=\"int\"}\n\nKeras's intersection over union of the classes " ..
  "target_class_ids (ids from 0), from a confusion\nmatrix of integer labels and predicted ids over every batch " ..
  "seen: tp / (tp + fp + fn) per class, the\nmean over the classes that occur. Labels equal to ignore_class count " ..
  "nothing; sparse_y_* = false\ntakes the argmax of one-hot (or score) rows. As Keras's, dtype \"int\" truncates " ..
  "sample weights to\nintegers (0.5 counts 0); dtype = \"float32\" keeps them.")
doc(metrics.MeanIoU, "metrics.MeanIoU", "metrics.MeanIoU{num_classes=, ignore_class=nil, sparse_y_true=true, " ..
  "sparse_y_pred=true, dtype=\"int\"}\n\nKeras's MeanIoU: metrics.IoU over every class.")
doc(metrics.BinaryIoU, "metrics.BinaryIoU", "metrics.BinaryIoU{target_class_ids={0, 1}, threshold=0.5, dtype=\"int\"}" ..
  "\n\nKeras's BinaryIoU: metrics.IoU of 2 classes, a prediction being class 1 where y_pred >= threshold.")

---------------------------------------------------------------- at a fixed recall, precision, ...
-- Keras's SensitivitySpecificityBase: the counts of Precision and AUC
-- (keras/training.lua's Conf) at num_thresholds thresholds 0, 1/(n-1), ..., 1;
-- the result is the best `dependent` over the thresholds where `constrained`
-- reaches the value (0 when none does), each ratio as TF's float32 one.
local function ratio(a, b) return f32(kit.div0(f32(a), f32(b))) end
local function rates(self, j)
  local tp, fp, tn, fn = self.tp[j], self.fp[j], self.tn[j], self.fn[j]
  return { recall = ratio(tp, tp + fn), precision = ratio(tp, tp + fp), specificity = ratio(tn, tn + fp) }
end
local AT = {   -- class -> its option, what it constrains, what it maximises, Keras's default name
  PrecisionAtRecall = { "recall", "recall", "precision", "precision_at_recall" },
  RecallAtPrecision = { "precision", "precision", "recall", "recall_at_precision" },
  SensitivityAtSpecificity = { "specificity", "specificity", "recall", "sensitivity_at_specificity" },
  SpecificityAtSensitivity = { "sensitivity", "recall", "specificity", "specificity_at_sensitivity" },
}
for class, a in pairs(AT) do
  local opt, constrained, dependent, default = a[1], a[2], a[3], a[4]
  local kind = default
  kit.Conf.results[kind] = function(self)
    local best, value = 0.0, self.opts.value
    for j = 1, #self.thresholds do
      local r = rates(self, j)
      if r[constrained] >= value and r[dependent] > best then best = r[dependent] end
    end
    return best
  end
  metrics[class] = function(opts)
    if is_num(opts) then opts = { [opt] = opts } end
    opts = options(class, opts, { [opt] = true, num_thresholds = true })
    local v = opts[opt]
    if not is_num(v) or v < 0 or v > 1 then bad(class, "%s must be a number in [0, 1], got %s", opt, tostring(v)) end
    local n = opts.num_thresholds or 200
    if math.type(n) ~= "integer" or n < 1 then bad(class, "num_thresholds must be an integer > 0, got %s", tostring(n)) end
    local th = { 0.5 }
    if n > 1 then
      th = { 0.0 }
      for i = 1, n - 2 do th[#th + 1] = i / (n - 1) end
      th[#th + 1] = 1.0
    end
    local m = kit.conf_new(opts.name or default, th, kind, { value = f32(v) })
    m:reset_state()
    return spec(m, class, opts)
  end
  doc(metrics[class], "metrics." .. class, ("metrics.%s{%s=, num_thresholds=200, name=\"%s\"}\n\n" ..
    "Keras's %s: the best %s over num_thresholds thresholds (0, 1/(n-1), ..., 1) where the %s\n" ..
    "is at least %s, from Precision's counts over every batch seen (y_true nonzero is positive, y_pred >\n" ..
    "the threshold predicts positive; sample_weight weighs the counts). 0 where no threshold reaches it."):format(
    class, opt, default, class, dependent, constrained, opt))
end

-- compile's names (Keras's metrics.get: the classes' snake_case names)
for name, class in pairs { f1_score = "F1Score", f_beta_score = "FBetaScore",
                           r2_score = "R2Score" } do
  kit.by_name[name] = class
end
