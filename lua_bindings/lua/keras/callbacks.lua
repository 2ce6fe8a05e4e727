-- keras/callbacks.lua - every Keras callback (tf.keras.callbacks): History
-- (what fit returns), ProgbarLogger (fit's bar), EarlyStopping,
-- LambdaCallback, ModelCheckpoint, CSVLogger, LearningRateScheduler,
-- ReduceLROnPlateau, TerminateOnNaN and TensorBoard. model:fit (keras/training.lua)
-- calls them; BackupAndRestore, which resumes a distributed job, is
-- distribute/backup_restore.lua's. Under MultiWorkerMirroredStrategy only the writer
-- process (the chief: s:_is_writer(), the strategy protocol) writes files.
local ldist = ...
local tensor = ldist.tensor
local doc = ldist.document
local stderr = io.stderr   -- Lua's, whatever the globals become

local callbacks = {}
ldist.callbacks = callbacks
ldist.globals.callbacks = true

-- the strategy a fit runs under writes files here (nil: no strategy, alone)
local function writer(s) return not s or s:_is_writer() end

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

-- a constructor's options table: unknown keys are errors (a misspelt monitor
-- would watch val_loss, silently)
local check_opts = ldist._util.check_opts
local function check_mode(name, mode)
  if mode ~= "auto" and mode ~= "min" and mode ~= "max" then
    error(("bad argument #1 to '%s' (mode must be \"auto\", \"min\" or \"max\", got %s)"):format(name, tostring(mode)), 3)
  end
end
-- opts[k] for each of keys: nil or a non-negative integer (patience, cooldown)
local function check_counts(name, opts, keys)
  for _, k in ipairs(keys) do
    local v = opts[k]
    if v ~= nil and not (math.tointeger(v) and v >= 0) then
      error(("bad argument #1 to '%s' (%s must be a non-negative integer, got %s)"):format(name, k, tostring(v)), 3)
    end
  end
end

-- callbacks.EarlyStopping: Keras 3's (keras/src/callbacks/early_stopping.py
-- and monitor_callback.py, checked against Keras 3.15.1). Callbacks get
-- Keras's epoch numbers, from 0, so stopped_epoch / best_epoch are Keras's
-- (0-based: the bar showed "Epoch 4/10" for stopped_epoch 3).
local ES = { __name = "ldist.callbacks.EarlyStopping" }
ES.__index = ES
ES.__tostring = function(c)
  return ("<EarlyStopping monitor=%s patience=%d wait=%d best=%s>"):format(c.monitor, c.patience, c.wait, tostring(c.best))
end

local es_opts = { monitor = true, min_delta = true, patience = true, verbose = true, mode = true, baseline = true,
  restore_best_weights = true, start_from_epoch = true }
function callbacks.EarlyStopping(opts)
  opts = check_opts("EarlyStopping", opts, es_opts)
  check_counts("EarlyStopping", opts, { "patience", "start_from_epoch" })
  local mode = opts.mode or "auto"
  check_mode("EarlyStopping", mode)
  return setmetatable({ monitor = opts.monitor or "val_loss", patience = opts.patience or 0,
    min_delta = math.abs(opts.min_delta or 0), mode = mode, baseline = opts.baseline,
    verbose = opts.verbose or 0, restore_best_weights = opts.restore_best_weights or false,
    start_from_epoch = opts.start_from_epoch or 0, wait = 0, stopped_epoch = 0, best_epoch = 0 }, ES)
end

function ES:on_train_begin(model)
  -- a callback may be reused across fits
  self.model = model or self.model
  self.wait, self.stopped_epoch, self.best, self.best_weights, self.best_epoch = 0, 0, nil, nil, 0
  self._warned, self._dir = nil, nil
end

-- "min" or "max". auto: the loss is minimised; a compiled metric of that name
-- says its direction (_direction, as Keras 3's metrics); otherwise a name with
-- "acc" in it is maximised and anything else minimised (Keras 3 raises there).
-- Keras's MonitorCallback rules, shared by every callback that watches a
-- value (EarlyStopping, ModelCheckpoint, ReduceLROnPlateau): the direction ("min" or "max") of `monitor` under
-- `mode`, and whether v improves on ref by more than min_delta
local function monitor_direction(mode, monitor, model)
  if mode ~= "auto" then return mode end
  local name = monitor:gsub("^val_", "")
  if name == "loss" then return "min" end
  for _, m in ipairs(model and model._metrics or {}) do
    if m.name == name and m._direction then return m._direction == "up" and "max" or "min" end
  end
  return name:find("acc", 1, true) and "max" or "min"
end
local function improves(dir, min_delta, v, ref)
  if ref == nil then return true end
  if dir == "min" then return v + min_delta < ref end
  return v - min_delta > ref
end

function ES:_direction(model) return monitor_direction(self.mode, self.monitor, model) end
function ES:_is_improvement(v, ref) return improves(self._dir, self.min_delta, v, ref) end

local function get_weights(model) return model:get_weights() end

function ES:on_epoch_end(epoch, logs, model)
  model = model or self.model
  self.model = model
  self._dir = self._dir or self:_direction(model)
  local current = logs and logs[self.monitor]
  if current == nil then
    if not self._warned then
      self._warned = true
      local names = {}
      for k in pairs(logs or {}) do names[#names + 1] = k end
      table.sort(names)
      stderr:write(("EarlyStopping conditioned on metric `%s` which is not available. Available metrics are: %s\n")
        :format(self.monitor, table.concat(names, ",")))
    end
    return
  end
  if tensor.is_tensor(current) then current = current:item() end
  if epoch < self.start_from_epoch then return end           -- still warming up
  if self.restore_best_weights and self.best_weights == nil then
    -- the first monitored epoch's weights are the best seen so far
    self.best_weights, self.best_epoch = get_weights(model), epoch
  end
  self.wait = self.wait + 1
  if self:_is_improvement(current, self.best) then
    self.best, self.best_epoch = current, epoch
    if self.restore_best_weights then self.best_weights = get_weights(model) end
    -- wait restarts only when the value beats the baseline too
    if self.baseline == nil or self:_is_improvement(current, self.baseline) then self.wait = 0 end
    return
  end
  if self.wait >= self.patience and epoch > 0 then
    self.stopped_epoch = epoch
    model.stop_training = true
  end
end

-- A LocalCluster's fit runs this callback on its workers (where training
-- happens, so a stop stops them and the restored weights are those sent
-- back); the object given to fit then keeps its own, unused, state.
function ES:_ship()
  return { class = "EarlyStopping", config = { monitor = self.monitor, min_delta = self.min_delta,
    patience = self.patience, verbose = self.verbose, mode = self.mode, baseline = self.baseline,
    restore_best_weights = self.restore_best_weights, start_from_epoch = self.start_from_epoch } }
end

-- Keras 3 restores the best weights at the end of training, whether it
-- stopped early or ran all its epochs (Keras 2 restored only on a stop).
function ES:on_train_end(model)
  model = model or self.model
  if self.stopped_epoch > 0 and self.verbose > 0 then
    print(("Epoch %d: early stopping"):format(self.stopped_epoch + 1))
  end
  if self.restore_best_weights and self.best_weights then
    if self.verbose > 0 then
      print(("Restoring model weights from the end of the best epoch: %d."):format(self.best_epoch + 1))
    end
    -- assign writes every replica of a mirrored variable
    model:set_weights(self.best_weights)
  end
end
doc(callbacks.EarlyStopping, "callbacks.EarlyStopping",
  "callbacks.EarlyStopping{monitor=\"val_loss\", patience=0, min_delta=0, mode=\"auto\", baseline=nil,\n" ..
  "  restore_best_weights=false, start_from_epoch=0, verbose=0}\n\n" ..
  "Stop fit when the monitored value has not improved for `patience` epochs (Keras 3's rule:\n" ..
  "wait counts epochs since the best; a stop needs wait >= patience, never on the first epoch).\n" ..
  "mode=\"auto\" minimises losses and maximises accuracies. With baseline, wait only restarts\n" ..
  "when a value beats the baseline too. restore_best_weights puts back the best epoch's\n" ..
  "weights when training ends, stopped or not. cb.stopped_epoch is the epoch it stopped at\n" ..
  "(Keras's number, from 0; 0 when it did not stop), cb.best and cb.best_epoch the best value\n" ..
  "and its epoch (from 0).")

-- callbacks.History: Keras's (keras/src/callbacks/history.py). fit adds one
-- (after the other callbacks, so what they add to the logs is in it) and
-- returns it. h.history[k] lists the value of k per epoch; h.epoch the
-- epochs run (from 0); h.params what fit told the callbacks. h.loss reads
-- h.history.loss and pairs(h) goes over h.history, so code that took fit's
-- result as the table of lists (ldist before it had the object) keeps working.
local History = { __name = "ldist.callbacks.History" }
callbacks._History = History
History.__index = function(h, k)
  local m = History[k]
  if m ~= nil then return m end
  local hist = rawget(h, "history")
  return hist and hist[k]
end
-- pairs(h) goes over h.history, as over the table fit returned before
History.__pairs = function(h) return next, rawget(h, "history") or {}, nil end
History.__tostring = function(h)
  local keys = {}
  for k in pairs(h.history) do keys[#keys + 1] = k end
  table.sort(keys)
  return ("<History: %d epochs of %s>"):format(#h.epoch, #keys > 0 and table.concat(keys, ", ") or "nothing")
end
-- the history of a fit run elsewhere (its plain lists), as a History
function History._of(hist, params, epochs)
  local h = setmetatable({ history = hist or {}, epoch = {}, params = params or {} }, History)
  if epochs then h.epoch = epochs
  else
    local n, first = 0, params and params.initial_epoch or 0
    for _, v in pairs(h.history) do n = math.max(n, #v) end
    for i = 1, n do h.epoch[i] = first + i - 1 end
  end
  return h
end
function callbacks.History(opts)
  if opts ~= nil and type(opts) ~= "table" then
    error(("bad argument #1 to 'History' (table or nothing expected, got %s)"):format(type(opts)), 2)
  end
  return setmetatable({ history = {}, epoch = {}, params = {} }, History)
end
function History:set_params(p) rawset(self, "params", p) end
function History:on_train_begin(model) rawset(self, "epoch", {}); rawset(self, "model", model) end
function History:on_epoch_end(epoch, logs, model)
  local ep = rawget(self, "epoch")
  ep[#ep + 1] = epoch
  local hist = rawget(self, "history")
  for k, v in pairs(logs or {}) do
    hist[k] = hist[k] or {}
    table.insert(hist[k], v)
  end
  if model then model.history = self end
end
doc(callbacks.History, "callbacks.History",
  "callbacks.History()\n\nWhat model:fit returns (and leaves in model.history), as Keras's: h.history = {loss={...},\n" ..
  "val_loss={...}, ...} (a list per key, one value per epoch), h.epoch = the epochs run (from 0),\n" ..
  "h.params = {epochs=, steps=, verbose=}. h.loss is h.history.loss, pairs(h) goes over h.history.\n" ..
  "fit adds one after the other\n" ..
  "callbacks; give your own in callbacks= to keep it (it is then the one returned).")

function callbacks.LambdaCallback(fns) return fns end
doc(callbacks.LambdaCallback, "callbacks.LambdaCallback",
  "callbacks.LambdaCallback{on_epoch_end=function(self, epoch, logs, model) end, ...}\n\nA callback from plain functions:\n" ..
  "on_train_begin(self, model), on_epoch_begin(self, epoch, model), on_train_batch_end(self, batch, logs, model),\n" ..
  "on_epoch_end(self, epoch, logs, model), on_train_end(self, model). epoch is Keras's, from 0 (the bar\n" ..
  "shows epoch + 1); batch is the batch's index in the epoch, also from 0 (Keras's); batch logs hold the\n" ..
  "epoch's running means.")

-- callbacks.ProgbarLogger: the progress bar fit shows, as a callback (Keras
-- adds one after the user's callbacks when verbose ~= 0, unless one is given).
local PB = { __name = "ldist.callbacks.ProgbarLogger" }
PB.__index = PB
callbacks._ProgbarLogger = PB
function callbacks.ProgbarLogger(opts)
  if opts ~= nil and type(opts) ~= "table" then
    error(("bad argument #1 to 'ProgbarLogger' (table or nothing expected, got %s)"):format(type(opts)), 2)
  end
  return setmetatable({ verbose = 1, epochs = 1 }, PB)
end
function PB:set_params(p) self.verbose, self.epochs, self.target = p.verbose, p.epochs, p.steps end
function PB:on_epoch_begin(epoch)
  if self.verbose ~= 0 then self.bar = progress(self.target, ("Epoch %d/%d"):format(epoch + 1, self.epochs)) end
end
function PB:on_train_batch_end(batch, logs) if self.bar then self.bar:update(batch + 1, logs) end end
function PB:on_epoch_end(_, logs) if self.bar then self.bar:finish(logs); self.bar = nil end end
doc(callbacks.ProgbarLogger, "callbacks.ProgbarLogger",
  "callbacks.ProgbarLogger()\n\nThe progress bar fit shows (\"Epoch 1/10\" and the epoch's running means), as a\n" ..
  "callback: fit adds one after the others when verbose ~= 0 unless the list has one, as Keras.")

---------------------------------------------------------------- Keras's other callbacks
-- ModelCheckpoint, CSVLogger, LearningRateScheduler, ReduceLROnPlateau and
-- TerminateOnNaN, after keras/src/callbacks/*.py of Keras 3.15 (checked by
-- running them there; tests/lua/test_callbacks.lua holds the numbers). Epochs
-- are Keras's, from 0; file names and messages show epoch + 1 as Keras does.
-- Under MultiWorkerMirroredStrategy only the chief (rank 0) writes files.


-- Python's str(float): the shortest digits that read back as the same double,
-- fixed notation for exponents -4 .. 15, else "1e-05" / "1.5e+16"
local function pyfloat(v)
  if math.type(v) == "integer" then return tostring(v) end
  if v ~= v then return "nan" end
  if v == math.huge then return "inf" elseif v == -math.huge then return "-inf" end
  if v == 0 then return (1 / v < 0) and "-0.0" or "0.0" end
  local s
  for p = 0, 16 do
    s = ("%." .. p .. "e"):format(v)
    if tonumber(s) == v then break end
  end
  local sign, m, e = s:match("^(-?)([%d%.]+)e([-+]%d+)$")
  local digits, exp = m:gsub("%.", ""), tonumber(e)
  digits = digits:gsub("0+$", "")
  if digits == "" then digits = "0" end
  if exp >= -4 and exp < 16 then
    if exp >= 0 then
      local int = digits:sub(1, exp + 1)
      int = int .. ("0"):rep(exp + 1 - #int)
      local frac = digits:sub(exp + 2)
      return sign .. int .. "." .. (frac == "" and "0" or frac)
    end
    return sign .. "0." .. ("0"):rep(-exp - 1) .. digits
  end
  local mant = digits:sub(1, 1) .. (#digits > 1 and ("." .. digits:sub(2)) or "")
  return ("%s%se%s%02d"):format(sign, mant, exp < 0 and "-" or "+", math.abs(exp))
end
callbacks._pyfloat = pyfloat

local function num(v)
  if tensor and tensor.is_tensor(v) then return v:item() end
  return v
end
local function pystr(v)
  v = num(v)
  if type(v) == "number" then return pyfloat(v) end
  return tostring(v)
end

-- Python's str.format for a file name template: "{epoch:02d}", "{val_loss:.2f}",
-- "{epoch}", "{{" and "}}"; a name the values lack is an error naming it.
local function pyformat(template, values, what)
  local out, i, n = {}, 1, #template
  while i <= n do
    local c = template:sub(i, i)
    if c == "{" and template:sub(i + 1, i + 1) == "{" then out[#out + 1] = "{"; i = i + 2
    elseif c == "}" and template:sub(i + 1, i + 1) == "}" then out[#out + 1] = "}"; i = i + 2
    elseif c == "{" then
      local j = template:find("}", i, true)
      if not j then error(("%s: unmatched '{' in \"%s\""):format(what, template), 0) end
      local field = template:sub(i + 1, j - 1)
      local name, spec = field:match("^([^:]*):(.*)$")
      if not name then name, spec = field, "" end
      local v = values[name]
      if v == nil then
        local keys = {}
        for k in pairs(values) do keys[#keys + 1] = k end
        table.sort(keys)
        error(("%s: failed to format the file path \"%s\": no value for '%s' (values: %s)")
          :format(what, template, name, table.concat(keys, ", ")), 0)
      end
      v = num(v)
      local zero, width, prec, ty = spec:match("^(0?)(%d*)%.?(%d*)([dfFeEgGs%%]?)$")
      if not zero then error(("%s: unsupported format spec '%s' in \"%s\""):format(what, spec, template), 0) end
      if spec:find(".", 1, true) == nil then prec = "" end
      local s
      if ty == "d" then
        local iv = math.tointeger(v)
        if not iv then error(("%s: format code 'd' for the non-integer %s in \"%s\""):format(what, name, template), 0) end
        s = ("%" .. zero .. width .. "d"):format(iv)
      elseif ty == "%" then
        s = ("%" .. zero .. width .. "." .. (prec ~= "" and prec or "6") .. "f"):format(v * 100) .. "%"
      elseif ty ~= "" and ty ~= "s" then
        s = ("%" .. zero .. width .. (prec ~= "" and ("." .. prec) or "") .. ty):format(v)
      else
        s = pystr(v)
        if prec ~= "" and type(v) == "number" then s = ("%." .. prec .. "g"):format(v) end
        if width ~= "" and #s < tonumber(width) then
          local pad = (zero ~= "" and "0" or " "):rep(tonumber(width) - #s)
          s = type(v) == "number" and pad .. s or s .. pad     -- numbers right, strings left
        end
      end
      out[#out + 1] = s
      i = j + 1
    else
      local j = template:find("[{}]", i) or n + 1
      out[#out + 1] = template:sub(i, j - 1)
      i = j
    end
  end
  return table.concat(out)
end
callbacks._format_path = pyformat

-- the float32 value of a number: Keras keeps the learning rate in a float32
-- variable, so that is what it reads back (0.1 -> 0.10000000149011612)
local function f32(x) return (string.unpack("<f", string.pack("<f", x))) end
local function get_lr(model)
  local opt = model._optimizer
  if opt == nil then error("the model has no optimizer (compile it first)", 0) end
  return f32(opt.learning_rate)
end



local function sorted_keys(t)
  local keys = {}
  for k in pairs(t or {}) do keys[#keys + 1] = k end
  table.sort(keys)
  return keys
end

---------------------------------------------------------------- ModelCheckpoint
-- A LocalCluster's fit runs the callbacks that have a _ship on its workers,
-- where training happens (distribute/local_cluster.lua): a callback that sets the
-- learning rate, stops training or saves the model must act on the
-- workers' model, not on this session's copy, which gets the weights only
-- when fit returns. Their options travel; a schedule function travels as
-- bytecode (it may use only its arguments and globals).
local function ship(class, config) return { class = class, config = config } end

local MC = { __name = "ldist.callbacks.ModelCheckpoint" }
MC.__index = MC
MC.__tostring = function(c) return ("<ModelCheckpoint %s monitor=%s>"):format(c.filepath, c.monitor) end
local mc_opts = { filepath = true, monitor = true, verbose = true, save_best_only = true, save_weights_only = true,
  mode = true, save_freq = true, initial_value_threshold = true }
function callbacks.ModelCheckpoint(opts)
  if type(opts) == "string" then opts = { filepath = opts } end
  opts = check_opts("ModelCheckpoint", opts, mc_opts)
  if type(opts.filepath) ~= "string" or opts.filepath == "" then
    error("bad argument #1 to 'ModelCheckpoint' (filepath= expected: a file name, may hold {epoch:02d}, {val_loss:.2f}, ...)", 2)
  end
  local mode = opts.mode or "auto"
  check_mode("ModelCheckpoint", mode)
  local freq = opts.save_freq or "epoch"
  if freq ~= "epoch" and not (math.tointeger(freq) and freq > 0) then
    error(("bad argument #1 to 'ModelCheckpoint' (save_freq must be \"epoch\" or a positive number of batches, got %s)")
      :format(tostring(freq)), 2)
  end
  return setmetatable({ filepath = opts.filepath, monitor = opts.monitor or "val_loss", verbose = opts.verbose or 0,
    save_best_only = opts.save_best_only or false, save_weights_only = opts.save_weights_only or false,
    mode = mode, save_freq = freq, best = opts.initial_value_threshold, _threshold = opts.initial_value_threshold }, MC)
end
function MC:_before_fit(model, x, y, opts, s)
  self._strategy = s
  return x, y, opts
end
function MC:on_train_begin(model)
  self.model = model or self.model
  self._seen, self._last = 0, nil
end
function MC:on_epoch_begin(epoch) self._epoch = epoch end
function MC:on_train_batch_end(batch, logs, model)
  if self.save_freq == "epoch" then return end
  -- Keras's _should_save_on_batch, on the count of batches done
  local step = batch + 1
  if self._last == nil or step <= self._last then self._seen = self._seen + step
  else self._seen = self._seen + step - self._last end
  self._last = step
  if self._seen >= self.save_freq then
    self._seen = 0
    self:_save(model or self.model, self._epoch or 0, step, logs)
  end
end
function MC:on_epoch_end(epoch, logs, model)
  if self.save_freq == "epoch" then self:_save(model or self.model, epoch, nil, logs) end
end
function MC:_path(epoch, batch, logs)
  local values = {}
  for k, v in pairs(logs or {}) do values[k] = v end
  values.epoch = epoch + 1
  if batch and values.batch == nil then values.batch = batch end
  return pyformat(self.filepath, values, "ModelCheckpoint")
end
function MC:_save(model, epoch, batch, logs)
  local path = self:_path(epoch, batch, logs)
  if self.save_best_only then
    local current = logs and logs[self.monitor]
    if current == nil then
      stderr:write(("ModelCheckpoint: can save best model only with %s available, saving anyway\n"):format(self.monitor))
    else
      current = num(current)
      self._dir = self._dir or monitor_direction(self.mode, self.monitor, model)
      local best = self.best
      if not improves(self._dir, 0, current, best) then
        if self.verbose > 0 then
          print(("Epoch %d: %s did not improve from %.5f"):format(epoch + 1, self.monitor, best))
        end
        return
      end
      if self.verbose > 0 then
        print(("Epoch %d: %s improved from %s to %.5f, saving model to %s"):format(epoch + 1, self.monitor,
          best == nil and "None" or ("%.5f"):format(best), current, path))
      end
      self.best = current
    end
  elseif self.verbose > 0 then
    print(("Epoch %d: saving model to %s"):format(epoch + 1, path))
  end
  self.last_saved = path
  if not writer(self._strategy) then return end
  local dir = path:match("^(.*)/[^/]*$")
  if dir and dir ~= "" and ldist.io and ldist.io._mkdir_p then ldist.io._mkdir_p(dir) end
  if self.save_weights_only then model:save_weights(path) else model:save(path) end
end
function MC:_ship()
  return ship("ModelCheckpoint", { filepath = self.filepath, monitor = self.monitor, verbose = self.verbose,
    save_best_only = self.save_best_only, save_weights_only = self.save_weights_only, mode = self.mode,
    save_freq = self.save_freq, initial_value_threshold = self.best })
end
doc(callbacks.ModelCheckpoint, "callbacks.ModelCheckpoint",
  "callbacks.ModelCheckpoint{filepath=, monitor=\"val_loss\", save_best_only=false, save_weights_only=false,\n" ..
  "  mode=\"auto\", save_freq=\"epoch\"|N, initial_value_threshold=nil, verbose=0}\n\n" ..
  "Save the model (model:save, or model:save_weights with save_weights_only) at the end of each\n" ..
  "epoch, or every N batches. filepath is a Python format string as in Keras: \"ck/m-{epoch:02d}-\n" ..
  "{val_loss:.2f}\" gives ck/m-03-0.42 ({epoch} counts from 1, {batch} too; any log value by name).\n" ..
  "save_best_only saves only when the monitored value improves (mode=\"auto\": losses down,\n" ..
  "accuracies up). cb.last_saved is the last file written.")

---------------------------------------------------------------- CSVLogger
local CSV = { __name = "ldist.callbacks.CSVLogger" }
CSV.__index = CSV
CSV.__tostring = function(c) return ("<CSVLogger %s>"):format(c.filename) end
function callbacks.CSVLogger(filename, opts)
  if type(filename) == "table" and opts == nil then opts, filename = filename, filename.filename end
  if type(filename) ~= "string" or filename == "" then
    error("bad argument #1 to 'CSVLogger' (a file name expected)", 2)
  end
  opts = check_opts("CSVLogger", opts, { filename = true, separator = true, append = true })
  local sep = opts.separator or ","
  if type(sep) ~= "string" or #sep ~= 1 then
    error(("bad argument #2 to 'CSVLogger' (separator must be one character, got %s)"):format(tostring(sep)), 2)
  end
  return setmetatable({ filename = filename, sep = sep, append = opts.append or false }, CSV)
end
function CSV:on_train_begin()
  self.append_header = true
  if self.append then
    local f = io.open(self.filename, "rb")
    if f then
      local line = f:read("l")
      f:close()
      self.append_header = not (line ~= nil)
    end
  end
  if self.file then self.file:close() end
  -- never through a link planted at the name (ldist.io._open_write); "s"
  -- writes the file as it goes, so each epoch's row can be read at once
  local f, err = ldist.io._open_write(self.filename, self.append and "a" or "s")
  if not f then error(("CSVLogger: cannot open %s: %s"):format(self.filename, tostring(err)), 0) end
  self.file, self.keys, self._header_done = f, nil, false
end
-- csv.excel's QUOTE_MINIMAL: quote a field holding the separator, a quote or a line break
function CSV:_field(v)
  local s
  if type(v) == "table" and not (tensor and tensor.is_tensor(v)) then
    local parts = {}
    for i, x in ipairs(v) do parts[i] = pystr(x) end
    s = '"[' .. table.concat(parts, ", ") .. ']"'
    return s
  end
  s = pystr(v)
  if s:find(self.sep, 1, true) or s:find('"', 1, true) or s:find("[\r\n]") then
    s = '"' .. s:gsub('"', '""') .. '"'
  end
  return s
end
function CSV:on_epoch_end(epoch, logs)
  logs = logs or {}
  if not self.file then self:on_train_begin() end
  if self.keys == nil then
    -- Keras: the first epoch's keys, sorted, plus val_<key> for each when
    -- that epoch had no validation (validation_freq > 1 adds them later)
    self.keys = sorted_keys(logs)
    local has_val = false
    for _, k in ipairs(self.keys) do if k:sub(1, 4) == "val_" then has_val = true end end
    if not has_val then
      local n = #self.keys
      for i = 1, n do self.keys[#self.keys + 1] = "val_" .. self.keys[i] end
    end
  end
  if not self._header_done then
    self._header_done = true
    if self.append_header then
      local h = { "epoch" }
      for _, k in ipairs(self.keys) do h[#h + 1] = self:_field(k) end
      self.file:write(table.concat(h, self.sep), "\r\n")
    end
  end
  local row = { tostring(epoch) }
  for _, k in ipairs(self.keys) do
    local v = logs[k]
    -- Keras's logs hold float32 values: the file shows that value
    -- (4.930000305175781 for a loss of 4.93), not the double ldist kept
    if math.type(v) == "float" and v == v and math.abs(v) < math.huge then v = string.unpack("f", string.pack("f", v)) end
    row[#row + 1] = v == nil and "NA" or self:_field(v)
  end
  self.file:write(table.concat(row, self.sep), "\r\n")
  self.file:flush()
end
function CSV:on_train_end()
  if self.file then self.file:close(); self.file = nil end
end
doc(callbacks.CSVLogger, "callbacks.CSVLogger",
  "callbacks.CSVLogger(filename, {separator=\",\", append=false})\n\n" ..
  "Write each epoch's logs to a CSV file as Keras does: a header \"epoch,<keys sorted>\" (with\n" ..
  "val_<key> columns added when the first epoch had no validation), one row per epoch with\n" ..
  "Keras's epoch number (from 0), values as Python prints them, NA for a missing one, lines\n" ..
  "ending in \\r\\n. append=true adds to an existing file (no second header).")

---------------------------------------------------------------- LearningRateScheduler
local LRS = { __name = "ldist.callbacks.LearningRateScheduler" }
LRS.__index = LRS
function callbacks.LearningRateScheduler(schedule, opts)
  if type(schedule) == "table" and getmetatable(schedule) == nil and opts == nil then
    opts, schedule = schedule, schedule.schedule
  end
  if type(schedule) ~= "function" then
    error(("bad argument #1 to 'LearningRateScheduler' (schedule(epoch, lr) -> lr function expected, got %s)")
      :format(type(schedule)), 2)
  end
  opts = check_opts("LearningRateScheduler", opts, { schedule = true, verbose = true })
  return setmetatable({ schedule = schedule, verbose = opts.verbose or 0 }, LRS)
end
function LRS:on_epoch_begin(epoch, model)
  local lr = self.schedule(epoch, get_lr(model))
  if type(lr) ~= "number" then
    error(("LearningRateScheduler: the schedule must return a number, got %s at epoch %d"):format(tostring(lr), epoch), 0)
  end
  model._optimizer.learning_rate = lr
  if self.verbose > 0 then
    print(("Epoch %d: LearningRateScheduler setting learning rate to %s."):format(epoch + 1, pyfloat(lr)))
  end
end
function LRS:on_epoch_end(_, logs, model) if logs then logs.learning_rate = get_lr(model) end end
function LRS:_ship()
  return ship("LearningRateScheduler", { verbose = self.verbose,
    schedule = { __function = ldist.distribute._net.ship_fn(self.schedule, "LearningRateScheduler's schedule") } })
end
doc(callbacks.LearningRateScheduler, "callbacks.LearningRateScheduler",
  "callbacks.LearningRateScheduler(function(epoch, lr) return new_lr end, {verbose=0})\n\n" ..
  "At the start of each epoch (Keras's number, from 0) set the optimizer's learning rate to\n" ..
  "schedule(epoch, current lr); adds learning_rate to the epoch's logs (and so to the history).")

---------------------------------------------------------------- ReduceLROnPlateau
local RL = { __name = "ldist.callbacks.ReduceLROnPlateau" }
RL.__index = RL
RL.__tostring = function(c)
  return ("<ReduceLROnPlateau monitor=%s wait=%d cooldown_counter=%d best=%s>"):format(c.monitor, c.wait,
    c.cooldown_counter, tostring(c.best))
end
local rl_opts = { monitor = true, factor = true, patience = true, verbose = true, mode = true, min_delta = true,
  cooldown = true, min_lr = true }
function callbacks.ReduceLROnPlateau(opts)
  opts = check_opts("ReduceLROnPlateau", opts, rl_opts)
  local mode = opts.mode or "auto"
  check_mode("ReduceLROnPlateau", mode)
  local factor = opts.factor or 0.1
  if type(factor) ~= "number" or factor >= 1.0 then
    error(("bad argument #1 to 'ReduceLROnPlateau' (factor must be < 1.0, got %s)"):format(tostring(factor)), 2)
  end
  check_counts("ReduceLROnPlateau", opts, { "patience", "cooldown" })
  for _, k in ipairs{ "min_delta", "min_lr" } do
    if opts[k] ~= nil and type(opts[k]) ~= "number" then
      error(("bad argument #1 to 'ReduceLROnPlateau' (%s must be a number, got %s)"):format(k, tostring(opts[k])), 2)
    end
  end
  return setmetatable({ monitor = opts.monitor or "val_loss", factor = factor, patience = opts.patience or 10,
    verbose = opts.verbose or 0, mode = mode, min_delta = math.abs(opts.min_delta or 1e-4), cooldown = opts.cooldown or 0,
    min_lr = opts.min_lr or 0.0, wait = 0, cooldown_counter = 0 }, RL)
end
function RL:on_train_begin(model)
  self.model = model or self.model
  self.best, self.wait, self.cooldown_counter, self._dir, self._warned = nil, 0, 0, nil, nil
end
function RL:in_cooldown() return self.cooldown_counter > 0 end
-- Keras 3.15's on_epoch_end: the logs get the learning rate of this epoch
-- (before any reduction); a reduction needs lr > float32(min_lr).
function RL:on_epoch_end(epoch, logs, model)
  model = model or self.model
  self.model = model
  self._dir = self._dir or monitor_direction(self.mode, self.monitor, model)
  logs = logs or {}
  logs.learning_rate = get_lr(model)
  local current = logs[self.monitor]
  if current == nil then
    if not self._warned then
      self._warned = true
      stderr:write(("Learning rate reduction is conditioned on metric `%s` which is not available. Available metrics are: %s.\n")
        :format(self.monitor, table.concat(sorted_keys(logs), ",")))
    end
    return
  end
  current = num(current)
  if self:in_cooldown() then
    self.cooldown_counter = self.cooldown_counter - 1
    self.wait = 0
  end
  if improves(self._dir, self.min_delta, current, self.best) then
    self.best, self.wait = current, 0
  elseif not self:in_cooldown() then
    self.wait = self.wait + 1
    if self.wait >= self.patience then
      local old = get_lr(model)
      if old > f32(self.min_lr) then
        local new = math.max(old * self.factor, self.min_lr)
        model._optimizer.learning_rate = new
        if self.verbose > 0 then
          print(("Epoch %d: ReduceLROnPlateau reducing learning rate to %s."):format(epoch + 1, pyfloat(new)))
        end
        self.cooldown_counter, self.wait = self.cooldown, 0
      end
    end
  end
end
function RL:_ship()
  return ship("ReduceLROnPlateau", { monitor = self.monitor, factor = self.factor, patience = self.patience,
    verbose = self.verbose, mode = self.mode, min_delta = self.min_delta, cooldown = self.cooldown, min_lr = self.min_lr })
end
doc(callbacks.ReduceLROnPlateau, "callbacks.ReduceLROnPlateau",
  "callbacks.ReduceLROnPlateau{monitor=\"val_loss\", factor=0.1, patience=10, min_delta=1e-4, cooldown=0,\n" ..
  "  min_lr=0, mode=\"auto\", verbose=0}\n\n" ..
  "Keras 3's rule: when the monitored value has not improved by more than min_delta for\n" ..
  "`patience` epochs, multiply the learning rate by factor (not below min_lr; nothing once it\n" ..
  "is at min_lr), then wait `cooldown` epochs before counting again. Adds learning_rate (the\n" ..
  "epoch's rate, before a reduction) to the epoch's logs.")

---------------------------------------------------------------- TerminateOnNaN
local TN = { __name = "ldist.callbacks.TerminateOnNaN" }
TN.__index = TN
function callbacks.TerminateOnNaN(opts)
  opts = check_opts("TerminateOnNaN", opts, { raise_error = true })
  return setmetatable({ raise_error = opts.raise_error or false }, TN)
end
function TN:on_train_batch_end(batch, logs, model)
  local loss = logs and num(logs.loss)
  if type(loss) ~= "number" then return end
  if loss ~= loss or loss == math.huge or loss == -math.huge then
    if self.raise_error then
      error(("NaN or Inf loss encountered at batch %d. Loss value: %s. Terminating training immediately.")
        :format(batch, pyfloat(loss)), 0)
    end
    print(("Batch %d: Invalid loss, terminating training"):format(batch))
    model.stop_training = true
  end
end
function TN:_ship() return ship("TerminateOnNaN", { raise_error = self.raise_error }) end
doc(callbacks.TerminateOnNaN, "callbacks.TerminateOnNaN",
  "callbacks.TerminateOnNaN{raise_error=false}\n\n" ..
  "Stop fit after the batch whose loss is NaN or infinite (Keras prints \"Batch N: Invalid loss,\n" ..
  "terminating training\", N from 0); raise_error=true raises an error instead.")

---------------------------------------------------------------- TensorBoard
-- Keras 3.15's keras.callbacks.TensorBoard, scalars only (checked by running
-- it and reading its files with TensorBoard's EventAccumulator):
--  * LOG_DIR/train: epoch_<name> for every log that is not val_*, plus
--    epoch_learning_rate (the optimizer's rate, as float32), at step = epoch
--    (from 0); with update_freq=N (or "batch" = 1) batch_<name> (the running
--    means fit reports) every N batches, at step = the batch count since
--    fit began (from 1).
--  * LOG_DIR/validation: epoch_<name> for each val_<name> (prefix dropped) at
--    step = epoch, and evaluation_<name>_vs_iterations at step = the
--    optimizer's iterations.
--  * histogram_freq=N (N > 0): every N epochs (epoch % N == 0, from 0), one
--    histogram per weight in LOG_DIR/train at step = epoch, tagged
--    "<weight path>/histogram" with Keras 3's weight.path: the model's name
--    first for a Sequential or subclassed model ("sequential/dense/kernel"),
--    the layer's alone in a Functional one ("dense/kernel"); written as
--    tf.summary.histogram writes them (30 buckets, plugin "histograms").
-- Each fit opens new event files, as Keras does. Not written: the model's
-- config ("keras" tag), graphs, images, profiles. Keras writes
-- scalars as float tensors (plugin "scalars"); ldist writes simple_value,
-- the other form TensorBoard reads as scalars. Keras under update_freq=N
-- also drops epoch scalars whose epoch ends off a multiple of N (its
-- record_if); ldist writes every epoch.
-- Under a strategy that records per-replica traces (MirroredStrategy),
-- replica_step_time=true traces the fit and adds, per epoch,
-- epoch_replica_<r>_step_time: replica r's compute seconds per step.
local TB = { __name = "ldist.callbacks.TensorBoard" }
TB.__index = TB
TB.__tostring = function(c) return ("<TensorBoard %s update_freq=%s>"):format(c.log_dir, tostring(c.update_freq)) end
function callbacks.TensorBoard(opts)
  if type(opts) == "string" then opts = { log_dir = opts } end
  opts = check_opts("TensorBoard", opts, { log_dir = true, update_freq = true, replica_step_time = true,
    histogram_freq = true })
  local dir = opts.log_dir or "logs"
  if type(dir) ~= "string" or dir == "" then
    error("bad argument #1 to 'TensorBoard' (log_dir must be a directory name)", 2)
  end
  local freq = opts.update_freq or "epoch"
  if freq == "batch" then freq = 1 end
  if freq ~= "epoch" and not (math.tointeger(freq) and freq > 0) then
    error(("bad argument #1 to 'TensorBoard' (update_freq must be \"epoch\", \"batch\" or a positive number of batches, got %s)")
      :format(tostring(freq)), 2)
  end
  local hfreq = opts.histogram_freq or 0
  if not (math.tointeger(hfreq) and hfreq >= 0) then
    error(("bad argument #1 to 'TensorBoard' (histogram_freq must be a number of epochs, 0 or more, got %s)")
      :format(tostring(hfreq)), 2)
  end
  if not ldist._summary then error("TensorBoard: this ldist was built without the summary writer", 2) end
  return setmetatable({ log_dir = dir, update_freq = math.tointeger(freq) or freq,
    histogram_freq = math.tointeger(hfreq),
    replica_step_time = opts.replica_step_time or false, _writers = {} }, TB)
end
function TB:_writer(which)
  local w = self._writers[which]
  if not w then
    w = ldist._summary.open(self.log_dir .. "/" .. which)
    self._writers[which] = w
  end
  return w
end
function TB:_close()
  for k, w in pairs(self._writers) do w:close(); self._writers[k] = nil end
end
local function scalar_logs(logs, keep)
  local out = {}
  for _, k in ipairs(sorted_keys(logs)) do
    local v = num(logs[k])
    if type(v) == "number" and keep(k) then out[#out + 1] = { k, v } end
  end
  return out
end
function TB:_before_fit(model, x, y, opts, s)
  self._strategy = s
  return x, y, opts
end
function TB:on_train_begin(model)
  self:_close()                    -- Keras: new writers (new files) for every fit
  self._global_batch = 0
  self:_writer("train")
  local s = self._strategy
  self._trace = nil
  if self.replica_step_time and s and s.trace and s.trace_summary then
    self._trace = { was_on = s._tracing, prev = {} }
    if not s._tracing then s:trace(true) end
  end
end
function TB:on_epoch_begin(epoch)
  self._epoch_batches = 0
  local t = self._trace
  if t then
    for r, p in ipairs(self._strategy:trace_summary().per_replica) do t.prev[r] = p.compute or 0 end
  end
end
function TB:on_train_batch_end(step, logs, model)
  self._global_batch = (self._global_batch or 0) + 1
  self._epoch_batches = (self._epoch_batches or 0) + 1
  if self.update_freq == "epoch" or self._global_batch % self.update_freq ~= 0 then return end
  local w = self:_writer("train")
  for _, kv in ipairs(scalar_logs(logs or {}, function() return true end)) do
    w:scalar("batch_" .. kv[1], kv[2], self._global_batch)
  end
end
-- Keras's _log_weights: every layer's weights, in the model's layer order.
function TB:_log_weights(model, epoch)
  local w = self:_writer("train")
  local prefix = model._kind == "Functional" and "" or (model.name and model.name .. "/" or "")
  for _, layer in ipairs(model.layers or {}) do
    for _, v in ipairs(layer.weights or {}) do
      w:histogram(prefix .. tostring(v.name):gsub(":", "_") .. "/histogram", v, epoch)
    end
  end
end
function TB:on_epoch_end(epoch, logs, model)
  logs = logs or {}
  model = model or self.model
  local train = scalar_logs(logs, function(k) return k:sub(1, 4) ~= "val_" end)
  local val = scalar_logs(logs, function(k) return k:sub(1, 4) == "val_" end)
  local w = self:_writer("train")
  for _, kv in ipairs(train) do
    if kv[1] ~= "learning_rate" then w:scalar("epoch_" .. kv[1], kv[2], epoch) end
  end
  if model and model._optimizer and model._optimizer.learning_rate then
    w:scalar("epoch_learning_rate", get_lr(model), epoch)
  end
  local t = self._trace
  if t and (self._epoch_batches or 0) > 0 then
    for r, p in ipairs(self._strategy:trace_summary().per_replica) do
      w:scalar(("epoch_replica_%d_step_time"):format(r - 1), ((p.compute or 0) - (t.prev[r] or 0)) / self._epoch_batches, epoch)
    end
  end
  if model and self.histogram_freq > 0 and epoch % self.histogram_freq == 0 then self:_log_weights(model, epoch) end
  w:flush()
  if #val > 0 then
    local v = self:_writer("validation")
    local it = model and model._optimizer and math.tointeger(model._optimizer.iterations)
    if it then
      for _, kv in ipairs(val) do v:scalar("evaluation_" .. kv[1]:sub(5) .. "_vs_iterations", kv[2], it) end
    end
    for _, kv in ipairs(val) do v:scalar("epoch_" .. kv[1]:sub(5), kv[2], epoch) end
    v:flush()
  end
end
function TB:on_train_end()
  local t, s = self._trace, self._strategy
  if t and not t.was_on and s then s:trace(false) end
  self._trace = nil
  self:_close()
end
doc(callbacks.TensorBoard, "callbacks.TensorBoard",
  "callbacks.TensorBoard{log_dir=\"logs\", update_freq=\"epoch\"|\"batch\"|N, histogram_freq=0,\n" ..
  "                      replica_step_time=false}\n\n" ..
  "Write TensorBoard event files as Keras does (run `tensorboard --logdir LOG_DIR`):\n" ..
  "LOG_DIR/train gets epoch_loss, epoch_<metric> and epoch_learning_rate at step = epoch (from 0),\n" ..
  "and with update_freq=N batch_loss, batch_<metric> every N batches (step = batches since fit\n" ..
  "began); LOG_DIR/validation gets epoch_loss, epoch_<metric> of the validation (the val_ prefix\n" ..
  "dropped) and evaluation_<name>_vs_iterations at step = optimizer iterations. Each fit writes new\n" ..
  "files. Under MirroredStrategy, replica_step_time=true traces the fit and adds\n" ..
  "epoch_replica_<r>_step_time, replica r's compute seconds per step. histogram_freq=N writes a\n" ..
  "histogram of every weight every N epochs (Histograms and Distributions tabs), tagged as Keras\n" ..
  "tags them: \"sequential/dense/kernel/histogram\".")
