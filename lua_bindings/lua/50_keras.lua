-- 50_keras.lua - metrics, callbacks and the Keras-style model API:
-- model:compile{...}, model:fit(...), model:evaluate(...), model:predict(...),
-- model:summary(). The training step itself runs in C (model:train_step).
local ldist = ...
local tensor, nn = ldist.tensor, ldist.nn
local Model = nn.Model
local docs = ldist.docs

local function doc(obj, name, text)
  docs[name] = text
  if obj ~= nil then docs[obj] = text end
end

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
function Mean:update_state(value, weight)
  weight = weight or 1
  if tensor.is_tensor(value) then
    local n = value:numel()
    if n == 0 then return end
    value = value:sum():item() / n
  end
  self.total = self.total + value * weight
  self.count = self.count + weight
end
function Mean:result() return self.count > 0 and self.total / self.count or 0.0 end
function Mean:reset_state() self.total, self.count = 0.0, 0.0 end
Mean.__tostring = function(m) return ("<metric %s: %.4f>"):format(m.name, m:result()) end
doc(metrics.Mean, "metrics.Mean", "metrics.Mean(name)\n\nA running (weighted) mean: m:update_state(v, weight), m:result(), m:reset_state().")

local Acc = {}
Acc.__index = Acc
Acc.__name = "ldist.metrics.Accuracy"
Acc.__tostring = Mean.__tostring
local function accuracy(kind, name)
  return setmetatable({ name = name or "accuracy", kind = kind, correct = 0, count = 0 }, Acc)
end
-- sparse: labels are class ids; categorical: one-hot labels; binary: one column
function metrics.SparseCategoricalAccuracy(name) return accuracy("sparse", name) end
function metrics.CategoricalAccuracy(name) return accuracy("categorical", name) end
function metrics.BinaryAccuracy(name) return accuracy("binary", name) end
function metrics.Accuracy(name) return accuracy("sparse", name) end
function Acc:update_state(y_true, y_pred)
  y_true, y_pred = tensor.new(y_true), tensor.new(y_pred)
  self.correct = self.correct + nn._count_correct(y_true, y_pred, self.kind == "sparse")
  self.count = self.count + (y_pred.ndim > 0 and y_pred.shape[1] or 1)
end
function Acc:result() return self.count > 0 and self.correct / self.count or 0.0 end
function Acc:reset_state() self.correct, self.count = 0, 0 end
doc(metrics.SparseCategoricalAccuracy, "metrics.SparseCategoricalAccuracy",
  "metrics.SparseCategoricalAccuracy(name)\n\nFraction of rows whose argmax equals the integer label.\n" ..
  "acc:update_state(y_true, y_pred), acc:result(), acc:reset_state().")
doc(metrics.Accuracy, "metrics.Accuracy", "metrics.Accuracy(name): the same as SparseCategoricalAccuracy.")

-- turn what compile got ("accuracy", a metric object) into metric objects
local function make_metric(m, loss)
  if type(m) == "table" and m.update_state then return m end
  if m == "accuracy" or m == "acc" then
    if loss and loss.sparse then return metrics.SparseCategoricalAccuracy("accuracy") end
    if loss and loss.name == "binary_crossentropy" then return metrics.BinaryAccuracy("accuracy") end
    return metrics.CategoricalAccuracy("accuracy")
  end
  if m == "sparse_categorical_accuracy" then return metrics.SparseCategoricalAccuracy(m) end
  if m == "categorical_accuracy" then return metrics.CategoricalAccuracy(m) end
  if m == "binary_accuracy" then return metrics.BinaryAccuracy(m) end
  error(("unknown metric %s (accuracy, sparse_categorical_accuracy, categorical_accuracy, " ..
    "binary_accuracy, or a metrics.* object)"):format(tostring(m)), 3)
end

---------------------------------------------------------------- compile / fit / evaluate / predict
local loss_by_name = {
  sparse_categorical_crossentropy = function() return ldist.losses.SparseCategoricalCrossentropy() end,
  categorical_crossentropy = function() return ldist.losses.CategoricalCrossentropy() end,
  binary_crossentropy = function() return ldist.losses.BinaryCrossentropy() end,
  mse = function() return ldist.losses.MeanSquaredError() end,
  mean_squared_error = function() return ldist.losses.MeanSquaredError() end,
}
local opt_by_name = { sgd = "SGD", adam = "Adam", adamw = "AdamW", rmsprop = "RMSprop" }

function Model:compile(opts)
  if type(opts) ~= "table" then error("bad argument #1 to 'compile' (table expected)", 2) end
  local opt = opts.optimizer or "adam"
  if type(opt) == "string" then
    local k = opt_by_name[opt:lower()]
    if not k then error(("bad argument #1 to 'compile' (unknown optimizer '%s')"):format(opt), 2) end
    opt = ldist.optim[k]()
  end
  local loss = opts.loss
  if type(loss) == "string" then
    local f = loss_by_name[loss]
    if not f then error(("bad argument #1 to 'compile' (unknown loss '%s')"):format(loss), 2) end
    loss = f()
  end
  if loss == nil then error("bad argument #1 to 'compile' (loss is required)", 2) end
  local ms = {}
  for i, m in ipairs(opts.metrics or {}) do ms[i] = make_metric(m, loss) end
  self._optimizer, self._loss, self._metrics = opt, loss, ms
  self._compiled = true
  -- like Keras, a model compiled inside a strategy's scope trains under it
  local d = ldist.distribute
  self._strategy = d and d.has_strategy() and d.get_strategy() or nil
  return self
end

local function check_compiled(self, what)
  if not self._compiled then
    error(("call model:compile{optimizer=, loss=, metrics=} before model:%s"):format(what), 3)
  end
end

-- Accept a Dataset, or (x, y) tensors with opts.batch_size (Keras' arrays).
local function as_dataset(x, y, opts, shuffle)
  if tensor.is_tensor(x) then
    local ds = ldist.data.Dataset.from_tensor_slices(y and { x, y } or { x })
    if shuffle then ds = ds:shuffle(x.shape[1], { seed = opts.seed }) end
    return ds:batch(opts.batch_size or 32)
  end
  return x
end

local function progress(total, title)
  if ldist.progress and ldist.progress.new then
    return ldist.progress.new { total = total, title = title }
  end
  return {  -- plain lines when the progress module is absent
    update = function() end,
    finish = function(_, values)
      local parts = {}
      for k, v in pairs(values or {}) do parts[#parts + 1] = ("%s: %.4f"):format(k, v) end
      table.sort(parts)
      print(title .. " - " .. table.concat(parts, " - "))
    end,
  }
end

local function batch_xy(batch)
  if tensor.is_tensor(batch) then return batch, nil end
  return batch[1], batch[2]
end

local function count_rows(t)
  if not tensor.is_tensor(t) then return t.global_batch end   -- split over a strategy's replicas
  return t.ndim > 0 and t.shape[1] or 1
end

-- model:fit(dataset, {epochs=1, validation_data=, verbose=1, callbacks=, steps_per_epoch=})
-- model:fit(x, y, {batch_size=32, epochs=1, ...})
function Model:fit(x, y, opts)
  check_compiled(self, "fit")
  if type(y) == "table" and not tensor.is_tensor(y) and opts == nil then opts, y = y, nil end
  opts = opts or {}
  local ds = as_dataset(x, y, opts, opts.shuffle ~= false)
  local epochs, verbose = opts.epochs or 1, opts.verbose == nil and 1 or opts.verbose
  local initial = opts.initial_epoch or 0
  local val = opts.validation_data
  if type(val) == "table" and tensor.is_tensor(val[1]) then val = as_dataset(val[1], val[2], opts, false) end
  local callbacks = opts.callbacks or {}
  local history = {}
  local loss_obj, opt = self._loss, self._optimizer
  local total = opts.steps_per_epoch or (ds.cardinality and ds:cardinality()) or nil
  if total and total < 0 then total = nil end
  local strategy = self._strategy or (ldist.distribute and ldist.distribute.get_strategy()) or nil
  self.stop_training = false
  for _, cb in ipairs(callbacks) do if cb.on_train_begin then cb:on_train_begin(self) end end
  for epoch = initial + 1, epochs do
    for _, cb in ipairs(callbacks) do if cb.on_epoch_begin then cb:on_epoch_begin(epoch, self) end end
    local bar = verbose ~= 0 and progress(total, ("Epoch %d/%d"):format(epoch, epochs)) or nil
    local loss_m = metrics.Mean("loss")
    for _, m in ipairs(self._metrics) do m:reset_state() end
    local step = 0
    -- A step's loss and predictions are read one step late: the next step is
    -- issued first, so a strategy whose devices queue work keeps them busy
    -- while the host reads values (which waits for the device).
    local pending
    local function settle(p)
      local lv = type(p.lv) == "function" and p.lv() or p.lv
      loss_m:update_state(lv, p.n)
      if #self._metrics > 0 then
        local pred = type(p.pred) == "function" and p.pred() or p.pred
        local yb = p.by
        if not tensor.is_tensor(yb) then yb = strategy:gather(yb) end   -- split over the replicas
        for _, m in ipairs(self._metrics) do m:update_state(yb, pred) end
      end
      if bar then
        local vals = { loss = loss_m:result() }
        for _, m in ipairs(self._metrics) do vals[m.name] = m:result() end
        bar:update(p.step, vals)
      end
      for _, cb in ipairs(callbacks) do if cb.on_train_batch_end then cb:on_train_batch_end(p.step, { loss = lv }, self) end end
    end
    if strategy and strategy._fit_begin then strategy:_fit_begin() end
    -- a strategy may split the batches over its replicas as it gathers them
    local batches, closer = ds, nil
    if strategy and strategy._fit_batches then
      local sf, _, _, sit = strategy:_fit_batches(ds)
      if sf then batches, closer = sf, sit end
    end
    local ok, err = pcall(function()
      for batch in batches, nil, nil, closer do
        local bx, by = batch_xy(batch)
        local lv, pred
        if strategy and strategy.train_step then
          lv, pred = strategy:train_step(self, bx, by, loss_obj, opt, #self._metrics > 0)
        else
          lv, pred = self:train_step(bx, by, loss_obj, opt)
        end
        step = step + 1
        if pending then settle(pending) end
        pending = { lv = lv, pred = pred, by = by, n = count_rows(bx), step = step }
        if opts.steps_per_epoch and step >= opts.steps_per_epoch then break end
      end
      if pending then settle(pending); pending = nil end
    end)
    if strategy and strategy._fit_end then strategy:_fit_end() end
    if not ok then error(err, 0) end
    local logs = { loss = loss_m:result() }
    for _, m in ipairs(self._metrics) do logs[m.name] = m:result() end
    if val then
      local r = self:evaluate(val, { verbose = 0 })
      for k, v in pairs(r) do logs["val_" .. k] = v end
    end
    for k, v in pairs(logs) do
      history[k] = history[k] or {}
      table.insert(history[k], v)
    end
    if bar then bar:finish(logs) end
    for _, cb in ipairs(callbacks) do if cb.on_epoch_end then cb:on_epoch_end(epoch, logs, self) end end
    if self.stop_training then break end
  end
  for _, cb in ipairs(callbacks) do if cb.on_train_end then cb:on_train_end(self) end end
  self.history = history
  return history
end
doc(Model.fit, "Model:fit",
  "model:fit(dataset, {epochs=1, validation_data=, verbose=1, callbacks=, steps_per_epoch=})\n" ..
  "model:fit(x, y, {batch_size=32, epochs=1, shuffle=true, ...})\n\n" ..
  "Train the compiled model; each step runs in C. Shows a progress bar per epoch and returns\n" ..
  "the history: {loss={...}, accuracy={...}, val_loss={...}, ...} (Keras' history.history).")

-- model:evaluate(dataset | x, y, {batch_size=, verbose=}) -> {loss=, <metric>=}
function Model:evaluate(x, y, opts)
  check_compiled(self, "evaluate")
  if type(y) == "table" and not tensor.is_tensor(y) and opts == nil then opts, y = y, nil end
  opts = opts or {}
  local ds = as_dataset(x, y, opts, false)
  local loss_m = metrics.Mean("loss")
  local ms = {}
  for i, m in ipairs(self._metrics) do
    ms[i] = setmetatable({}, { __index = m }); ms[i]:reset_state()
  end
  for batch in ds do
    local bx, by = batch_xy(batch)
    local pred = self(bx, { training = false })
    loss_m:update_state(self._loss(by, pred):item(), count_rows(bx))
    for _, m in ipairs(ms) do m:update_state(by, pred) end
  end
  local r = { loss = loss_m:result() }
  for _, m in ipairs(ms) do r[m.name] = m:result() end
  if (opts.verbose or 0) ~= 0 then
    local parts = {}
    for k, v in pairs(r) do parts[#parts + 1] = ("%s: %.4f"):format(k, v) end
    table.sort(parts)
    print(table.concat(parts, " - "))
  end
  return r
end
doc(Model.evaluate, "Model:evaluate",
  "model:evaluate(dataset | x, y, {batch_size=32, verbose=0})\n\nLoss and metrics over the data: {loss=, accuracy=}.")

-- model:predict(x | dataset, {batch_size=32}) -> predictions for every row
function Model:predict(x, opts)
  opts = opts or {}
  local parts = {}
  if tensor.is_tensor(x) then
    local n, bs = x.shape[1], opts.batch_size or 256
    for s = 0, n - 1, bs do parts[#parts + 1] = self(x:slice(0, s, s + bs), { training = false }) end
  else
    for batch in x do parts[#parts + 1] = self((batch_xy(batch)), { training = false }) end
  end
  if #parts == 0 then error("predict: no data", 2) end
  return #parts == 1 and parts[1] or tensor.concat(parts, 0)
end
doc(Model.predict, "Model:predict", "model:predict(x | dataset, {batch_size=256})\n\nThe model's outputs for every row, in inference mode.")

-- model:summary() shows the table (text on a terminal, an HTML table in the
-- notebook) and returns nothing, as Keras does; model:summary_text() gives the text.
local Summary = { __name = "ldist.ModelSummary" }
Summary.__index = Summary
Summary.__tostring = function(s) return s.text end
local function html_escape(x) return (x:gsub("&", "&amp;"):gsub("<", "&lt;"):gsub(">", "&gt;")) end
function Summary.__mimebundle(s)
  local rows = {}
  for line in s.text:gmatch("[^\n]+") do
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

function Model:summary()
  local s = setmetatable({ text = self:summary_text() }, Summary)
  if ldist.display then ldist.display(s) else io.write(s.text) end
end
doc(Model.summary, "Model:summary", "model:summary()\n\nShow the layers, their output shapes and parameter counts\n" ..
  "(a table in the notebook). model:summary_text() returns the text.")

-- the notebook shows a model as its summary
---------------------------------------------------------------- callbacks
local callbacks = {}
ldist.callbacks = callbacks

function callbacks.EarlyStopping(opts)
  opts = opts or {}
  local cb = { monitor = opts.monitor or "val_loss", patience = opts.patience or 0,
    min_delta = opts.min_delta or 0, mode = opts.mode or "min", wait = 0 }
  function cb:on_train_begin() self.best, self.wait = nil, 0 end
  function cb:on_epoch_end(epoch, logs, model)
    local v = logs[self.monitor]
    if v == nil then return end
    local better = self.best == nil or
      (self.mode == "min" and v < self.best - self.min_delta) or
      (self.mode == "max" and v > self.best + self.min_delta)
    if better then self.best, self.wait = v, 0
    else
      self.wait = self.wait + 1
      if self.wait > self.patience then model.stop_training = true; self.stopped_epoch = epoch end
    end
  end
  return cb
end
doc(callbacks.EarlyStopping, "callbacks.EarlyStopping",
  "callbacks.EarlyStopping{monitor=\"val_loss\", patience=0, min_delta=0, mode=\"min\"}\n\nStop fit when a logged value stops improving.")

function callbacks.LambdaCallback(fns) return fns end
doc(callbacks.LambdaCallback, "callbacks.LambdaCallback",
  "callbacks.LambdaCallback{on_epoch_end=function(self, epoch, logs, model) end, ...}\n\nA callback from plain functions.")

ldist.globals.tensor = true
ldist.globals.nn = true
ldist.globals.optim = true
ldist.globals.losses = true
ldist.globals.autograd = true
ldist.globals.metrics = true
ldist.globals.callbacks = true
