-- distribute/local_cluster.lua - LocalCluster: worker processes started from the
-- REPL or a notebook, which train with MultiWorkerMirroredStrategy on what
-- this session ships them (distribute/shipping.lua), and the strategy object that
-- stands for them here (its fit runs on the workers).
local ldist = ...
local C, distribute, docs = ldist._cluster, ldist.distribute, ldist.docs
local tensor, nn = ldist.tensor, ldist.nn
if not C then return end
local net = distribute._net
local env = net.env
local describe_model, build_model = distribute._describe_model, distribute._build_model
local build_optimizer = distribute._build_optimizer
local recipe_of, build_dataset = distribute._recipe_of, distribute._build_dataset
local LocalCluster

---------------------------------------------------------------- LocalCluster: workers started from here
LocalCluster = { __name = "ldist.LocalCluster" }
LocalCluster.__index = LocalCluster
distribute.LocalClusterClass = LocalCluster
ldist.internal(distribute, "LocalClusterClass")

-- the workers' output as "[worker i]" lines; an exit breaks the cluster
local function worker_name(i) return "worker " .. i end
local function forward_output(self, timeout)
  net.forward_output(self._procs, timeout, worker_name, function(ev, name)
    self._exited[ev.index + 1] = ev
    if not self._closing and not self._broken then
      self._broken = ("%s (pid %d) %s"):format(name, self.pids[ev.index + 1], net.describe_exit(ev))
    end
  end)
end

-- distribute.LocalCluster{workers=2, timeout=30, threads=} starts `workers` ldist
-- processes on this machine that wait for work from this session; stopping the
-- session (or lc:shutdown()) stops them.
function distribute.LocalCluster(opts)
  opts = opts or {}
  if type(opts) ~= "table" then error("bad argument #1 to 'LocalCluster' (options table expected)", 2) end
  -- with ps tasks: the parameter-server cluster (distribute/parameter_server.lua)
  if opts.ps and opts.ps ~= 0 then
    if not distribute._ps_local_cluster then error("LocalCluster: parameter servers are not available", 2) end
    return distribute._ps_local_cluster(opts)
  end
  local n = math.tointeger(opts.workers or 2)
  if not n or n < 1 or n > 64 then error("bad argument #1 to 'LocalCluster' (workers must be 1..64)", 2) end
  local timeout = opts.timeout or 30
  local host = "127.0.0.1"
  local secret = C.random_hex(32)
  local cport = C.free_port(host)
  local addrs = {}
  for i = 1, n do addrs[i] = host .. ":" .. C.free_port(host) end
  -- without threads=, each worker takes its share of the cores, pinned there
  -- (LDIST_LOCAL_RANK/SIZE; ld_pool.c), unless LDIST_NUM_THREADS is set here
  local threads = opts.threads and math.tointeger(opts.threads)
  if opts.threads ~= nil and (not threads or threads < 1 or threads > 256) then
    error("bad argument #1 to 'LocalCluster' (threads must be 1..256)", 2)
  end
  local envs = {}
  for i = 0, n - 1 do
    envs[i + 1] = {
      "TF_CONFIG=" .. ldist.json.encode({ cluster = { worker = addrs }, task = { type = "worker", index = i } }),
      "LDIST_SECRET=" .. secret, "LDIST_COORDINATOR=" .. host .. ":" .. cport,
      "LDIST_COORDINATOR_RANK=" .. (i + 1), "LDIST_COORDINATOR_SIZE=" .. (n + 1),
      threads and "LDIST_NUM_THREADS=" .. threads or "LDIST_LOCAL_SIZE=" .. n, "LDIST_TIMEOUT=" .. timeout,
      "LDIST_LOCAL_RANK=" .. i, "LDIST_SUPERVISED=1",
      "LUA_CPATH_5_4=" .. package.cpath, "LUA_PATH_5_4=" .. package.path,
    }
  end
  -- the ldist program, or lua5.4 with `require "ldist"` (ldist.so)
  local procs = C.procs_start({ C.self_exe(), "-e", "ldist = ldist or require('ldist'); ldist.distribute._serve()" },
    envs, true)
  local self = setmetatable({ workers = n, num_workers = n, pids = {}, addresses = addrs, _procs = procs,
    _exited = {}, _job = 0, _timeout = timeout }, LocalCluster)
  for i = 0, n - 1 do self.pids[i + 1] = procs:pid(i) end
  local ok, ctl = pcall(C.join, { rank = 0, size = n + 1, leader = host .. ":" .. cport, secret = secret,
    data_plane = false, name = "process", timeout = timeout, rendezvous_timeout = opts.start_timeout or 60,
    procs = procs, quiet_loss = true })   -- a worker's death: forward_output reports it, once
  if not ok then
    forward_output(self, 0.2)
    self._closing = true
    procs:close(1)
    self._procs = nil
    error("LocalCluster: the workers did not start: " .. tostring(ctl), 2)
  end
  self._ctl = ctl
  return self
end

function LocalCluster.__tostring(self)
  if not self._ctl then return "<LocalCluster (shut down)>" end
  local p = {}
  for i, pid in ipairs(self.pids) do p[i] = tostring(pid) end
  return ("<LocalCluster of %d workers on 127.0.0.1 (pids %s)%s>"):format(self.workers, table.concat(p, ", "),
    self._broken and ": broken, " .. self._broken or "")
end

function LocalCluster:shutdown()
  if not self._ctl and not self._procs then return end
  self._closing = true
  if self._ctl then
    for r = 1, self.workers do pcall(self._ctl.send, self._ctl, r, "quit", "") end
  end
  if self._procs then
    local t0 = ldist.clock()
    while self._procs:running() > 0 and ldist.clock() - t0 < 3 do pcall(forward_output, self, 0.05) end
    pcall(forward_output, self, 0)
    self._procs:close(1)
    self._procs = nil
  end
  if self._ctl then self._ctl:close(); self._ctl = nil end
end
LocalCluster.__close = LocalCluster.shutdown
LocalCluster.__gc = function(self) pcall(LocalCluster.shutdown, self) end
function LocalCluster:alive()
  local k = 0
  for i = 0, self.workers - 1 do if self._procs and self._procs:alive(i) then k = k + 1 end end
  return k
end

function LocalCluster:_check()
  if not self._ctl then error("this LocalCluster has been shut down", 3) end
  forward_output(self, 0)
  if self._broken then
    error(("this LocalCluster lost a worker: %s; shut it down and start a new one"):format(self._broken), 3)
  end
end

-- Send `job` to every worker and wait for their replies, forwarding their output;
-- on_progress(msg) gets the progress messages. Ctrl-C interrupts the workers too.
function LocalCluster:_run_job(job, on_progress)
  self:_check()
  self._job = self._job + 1
  job.id = self._job
  job.reset = self._reset_next     -- after a failed job every worker rejoins, or none could
  self._reset_next = nil
  local payload = C.pack(job)
  for r = 1, self.workers do self._ctl:send(r, "job", payload) end
  local replies, got = {}, 0
  local ok, err = pcall(function()
    while got < self.workers do
      local from, ty, body = self._ctl:recv(0.02)
      if from then
        local okm, msg = pcall(C.unpack, body)
        if okm and type(msg) == "table" and msg.id == job.id then
          if ty == "reply" and not replies[from] then replies[from] = msg; got = got + 1
          elseif ty == "progress" and on_progress then on_progress(msg) end
        end
      end
      forward_output(self, 0)
      if self._broken then
        -- the survivors' jobs fail at their next collective: their replies
        -- say where they stopped (fit's step and epoch)
        local t0 = ldist.clock()
        while got < self:alive() and ldist.clock() - t0 < 5 do
          local f, t, b = self._ctl:recv(0.05)
          if f and t == "reply" and not replies[f] then
            local okm, msg = pcall(C.unpack, b)
            if okm and type(msg) == "table" and msg.id == job.id then replies[f] = msg; got = got + 1 end
          end
        end
        self._failed_replies = replies
        error("LocalCluster: " .. self._broken .. " during the job", 0)
      end
    end
  end)
  if not ok then
    self._reset_next = true
    if tostring(err):find("interrupted", 1, true) then
      -- stop the workers' job too, and wait (a little) for them to say so
      C.clear_interrupt()
      for r = 1, self.workers do pcall(self._ctl.send, self._ctl, r, "__interrupt__", "") end
      local t0 = ldist.clock()
      while got < self.workers and ldist.clock() - t0 < 10 do
        local from, ty, body = self._ctl:recv(0.05)
        if from and ty == "reply" then
          local okm, msg = pcall(C.unpack, body)
          if okm and type(msg) == "table" and msg.id == job.id and not replies[from] then replies[from] = msg; got = got + 1 end
        end
        forward_output(self, 0)
      end
      error("interrupted (the workers stopped their job)", 0)
    end
    error(err, 0)
  end
  local results = {}
  for r = 1, self.workers do
    local m = replies[r]
    if not m.ok then self._reset_next = true; error(("worker %d: %s"):format(r - 1, tostring(m.error)), 0) end
    results[r] = m.result
  end
  forward_output(self, 0.05)
  return results
end

-- lc:run(code | function, ...) runs Lua code on every worker (in its own
-- interpreter) and returns {result of worker 0, result of worker 1, ...}.
function LocalCluster:run(code, ...)
  if type(code) == "function" then code = net.ship_fn(code, "the function")
  elseif type(code) ~= "string" then error("bad argument #1 to 'run' (code string or function expected)", 2) end
  local res = self:_run_job({ op = "exec", code = code, args = table.pack(...) })
  local out = {}
  for i, r in ipairs(res) do out[i] = r[1] end
  return out
end

---------------------------------------------------------------- the strategy on a LocalCluster
local Remote = distribute._strategy_class("ldist.MultiWorkerMirroredStrategy")
Remote.__tostring = function(s)
  return ("<MultiWorkerMirroredStrategy on a LocalCluster of %d workers>"):format(s.num_replicas_in_sync)
end

function LocalCluster:_strategy(opts)
  return setmetatable({ kind = "MultiWorkerMirroredStrategy", devices = { "cpu:0" }, num_replicas_in_sync = self.workers,
    extended = { communication = "ring", cluster = self }, cluster_resolver = { task_type = "coordinator",
      num_workers = self.workers, source = "LocalCluster" }, _depth = 0, _lc = self, _remote = true,
    _options = opts }, Remote)
end

local function remote_only()
  error("strategy:run needs the replicas in this process; with a LocalCluster, train with model:fit, " ..
    "or run code on the workers with cluster:run(code)", 0)
end
Remote._run = remote_only
Remote._sum_across = remote_only

local util = ldist._util

local function shippable_callbacks(list)
  local remote, here = {}, {}
  for _, cb in ipairs(list or {}) do
    if type(cb) == "table" and cb._ship then remote[#remote + 1] = cb:_ship() else here[#here + 1] = cb end
  end
  return remote, here
end

-- A worker died during fit: the session's model takes the chief's weights
-- and optimizer state at the end of the last epoch done (the chief sent
-- them then), model.history keeps those epochs, and one message says who
-- died, how, where the chief was, what the model holds and how to resume.
local function worker_lost(lc, model, opts, params, hist, done, snap, at)
  local chief = lc._failed_replies and lc._failed_replies[1]
  local where = chief and chief.stopped
  if where then at = where else
    -- the chief is the one that died, or it stopped elsewhere: its last report
    for _, r in pairs(lc._failed_replies or {}) do if r.stopped then at = r.stopped; break end end
  end
  local total = at.total or params.steps
  local step = ("step %d%s of epoch %d/%d"):format(math.max(at.step or 0, 1), total and ("/" .. total) or "",
    (at.epoch or 0) + 1, params.epochs)
  local kept
  if snap then
    for i, v in ipairs(model.weights) do v:assign(snap.weights[i]) end
    ldist.optim._set_state(model._optimizer, model.trainable_variables, snap.optimizer_state)
    kept = ("The model has worker 0's weights and optimizer state from the end of epoch %d, and model.history its %d %s.")
      :format(snap.epoch + 1, #done, #done == 1 and "epoch" or "epochs")
  else
    kept = "No epoch was completed: the model keeps its weights from before fit, and model.history is empty."
  end
  model.history = ldist.callbacks._History._of(hist, params, done)
  local msg = ("fit stopped: %s, during %s.\n%s\n%s This LocalCluster is broken: shut it down (cluster:shutdown()) and start a new one.")
    :format(lc._broken, step, kept, nn._backup_hint(opts.callbacks))
  error(nn._fit_stopped({ message = msg, lost = lc._broken, epoch = at.epoch, epochs = params.epochs, step = at.step,
    total = total }), 0)
end

-- model:fit on a LocalCluster: the workers rebuild the model (with its
-- weights), the optimizer (with its state), the loss, the metrics and the
-- dataset, train under MultiWorkerMirroredStrategy, and worker 0 sends back
-- the history, the weights and the optimizer state, which this model takes.
function Remote:_fit(model, x, y, opts)
  if not model._compiled then error("call model:compile{optimizer=, loss=, metrics=} before model:fit", 3) end
  local lc = self._lc
  lc:_check()
  local ds = util.as_dataset(x, y, opts, opts.shuffle ~= false, "fit")
  if not model.built then
    local first
    for b in ds do first = b; break end
    if not first then error("fit: the dataset is empty", 3) end
    local t = tensor.is_tensor(first) and first or first[1]
    local shape = {}
    for d = 2, t.ndim do shape[d - 1] = t.shape[d] end
    model:build(shape)
  end
  local vars = model.trainable_variables
  local remote_cbs, local_cbs = shippable_callbacks(opts.callbacks)
  local val = opts.validation_data
  if type(val) == "table" and getmetatable(val) == nil and util.is_arrays(val[1]) then
    val = util.as_dataset(val[1], val[2], { batch_size = opts.batch_size, sample_weight = val[3] }, false, "fit",
      "validation_data")
  end
  local spec = {
    model = describe_model(model), optimizer = ldist.optim._config(model._optimizer),
    optimizer_state = ldist.optim._state(model._optimizer, vars), compile = nn._describe_compile(model), data = recipe_of(ds), validation = val and recipe_of(val) or nil,
    fit = { epochs = opts.epochs or 1, initial_epoch = opts.initial_epoch, steps_per_epoch = opts.steps_per_epoch,
      validation_steps = opts.validation_steps, class_weight = opts.class_weight },
    callbacks = remote_cbs,
    rng = tensor.get_rng_state(),   -- the workers draw what this session would (dropout)
    trace = self._tracing or nil,   -- strategy:trace(true) here: the workers trace the fit, worker 0 sends it back
  }
  local verbose = opts.verbose == nil and 1 or opts.verbose
  local bar
  -- what a failure leaves: the history of the epochs done, the chief's
  -- weights at the last one's end, the epoch and step it was in
  local hist, done, snap, at = {}, {}, nil, { epoch = spec.fit.initial_epoch or 0, step = 0 }
  for _, cb in ipairs(local_cbs) do if cb.on_train_begin then cb:on_train_begin(model) end end
  local function on_progress(m)
    if m.kind == "epoch_begin" then
      at.epoch, at.step, at.total = m.epoch, 0, m.total
      for _, cb in ipairs(local_cbs) do if cb.on_epoch_begin then cb:on_epoch_begin(m.epoch, model) end end
      if verbose ~= 0 and ldist.progress then
        bar = ldist.progress.new { total = m.total and m.total > 0 and m.total or nil,
          title = ("Epoch %d/%d"):format(m.epoch + 1, spec.fit.epochs) }   -- callbacks count from 0
      end
    elseif m.kind == "batch" then
      at.step = m.step
      if bar then bar:update(m.step, m.logs) end
    elseif m.kind == "epoch_end" then
      snap = { epoch = m.epoch, weights = m.weights, optimizer_state = m.optimizer_state }
      for k, v in pairs(m.logs or {}) do hist[k] = hist[k] or {}; table.insert(hist[k], v) end
      done[#done + 1] = m.epoch
      if bar then
        if m.steps then bar:update(m.steps, m.logs) end
        bar:finish(m.logs)
        bar = nil
      end
      for _, cb in ipairs(local_cbs) do if cb.on_epoch_end then cb:on_epoch_end(m.epoch, m.logs, model) end end
    end
  end
  local params = { epochs = spec.fit.epochs, steps = opts.steps_per_epoch
    or (ds.cardinality and ds:cardinality() >= 0 and ds:cardinality()) or nil, verbose = verbose }
  local ok, results = pcall(lc._run_job, lc, { op = "fit", spec = spec }, on_progress)
  if not ok then
    if bar then pcall(bar.finish, bar) end
    if not lc._broken then error(results, 0) end
    worker_lost(lc, model, opts, params, hist, done, snap, at)
  end
  local r0 = results[1]
  for i, v in ipairs(model.weights) do v:assign(r0.weights[i]) end   -- BatchNormalization's statistics too
  ldist.optim._set_state(model._optimizer, vars, r0.optimizer_state)
  if r0.learning_rate then model._optimizer.learning_rate = r0.learning_rate end
  if r0.rng then tensor.set_rng_state(r0.rng) end
  for _, cb in ipairs(local_cbs) do if cb.on_train_end then cb:on_train_end(model) end end
  -- the workers' History, as one here (Keras's object: history, epoch, params)
  model.history = ldist.callbacks._History._of(r0.history, params, r0.epoch)
  self._last_batch, self._last = r0.batch, setmetatable({ model = model }, { __mode = "v" })
  if r0.trace then   -- the spans of this fit, after those of earlier fits of the same trace
    local g = self._gathered
    if not g then self._gathered = r0.trace
    else
      for i, w in ipairs(r0.trace.workers) do
        for _, sp in ipairs(w.spans) do
          if (sp[4] or 0) > 0 then sp[4] = sp[4] + (g.steps or 0) end
          table.insert(g.workers[i].spans, sp)
        end
      end
    end
    self._gathered.steps = (g and g.steps or 0) + (r0.trace.steps or 0)
  end
  return model.history
end

-- Traces on a LocalCluster: strategy:trace(true) here makes every worker
-- trace the fits that follow (MultiWorkerMirroredStrategy:trace, distribute/multiworker.lua);
-- worker 0 gathers the workers' spans on one clock and sends them back with
-- the history, so timeline() and trace_summary() draw them here.
function Remote:trace(on)
  self._tracing = on and true or false
  if self._tracing then self._gathered = nil end
  return self
end
function Remote:timeline(opts)
  if not self._gathered then
    return distribute._timeline({ title = ("MultiWorkerMirroredStrategy: %d workers"):format(self.num_replicas_in_sync),
      rows = {}, empty_text = "nothing recorded yet (strategy:trace(true), then model:fit)" }, opts)
  end
  return distribute._mw_timeline(self._gathered, opts,
    ("MultiWorkerMirroredStrategy on a LocalCluster: %d workers"):format(self.num_replicas_in_sync))
end
function Remote:trace_summary()
  if not self._gathered then error("nothing traced yet: strategy:trace(true), then model:fit", 2) end
  return distribute._mw_summary(self._gathered)
end
function Remote:explain()
  return distribute._mw_explain(self.num_replicas_in_sync, self._last_batch, self._last and self._last.model,
    "worker processes of a LocalCluster, driven from this session")
end

---------------------------------------------------------------- a worker of a LocalCluster
local function progress_callback(ctl, id, total)
  local last, sum, count = 0, 0, 0
  local cb = {}
  local function send(m) m.id = id; pcall(ctl.send, ctl, 0, "progress", C.pack(m)) end
  function cb:on_epoch_begin(epoch) sum, count = 0, 0; send({ kind = "epoch_begin", epoch = epoch, total = total }) end
  function cb:on_train_batch_end(batch, logs)
    local step = batch + 1
    sum, count = sum + (logs.loss or 0), count + 1
    local now = ldist.clock()
    if now - last > 0.2 then last = now; send({ kind = "batch", step = step, logs = { loss = sum / count } }) end
  end
  -- with the chief's weights and optimizer state: what the session's model
  -- takes back if a worker dies in a later epoch
  function cb:on_epoch_end(epoch, logs, model)
    local w = {}
    for i, v in ipairs(model.weights) do w[i] = v:cpu() end
    send({ kind = "epoch_end", epoch = epoch, logs = logs, steps = count, weights = w,
      optimizer_state = ldist.optim._state(model._optimizer, model.trainable_variables) })
  end
  return cb
end

local function worker_fit(state, spec, ctl, id)
  if not state.strategy then state.strategy = distribute.MultiWorkerMirroredStrategy { timeout = tonumber(env("LDIST_TIMEOUT") or "") } end
  local s = state.strategy
  local model, opt
  s:scope(function()
    model = build_model(spec.model)
    opt = build_optimizer(spec.optimizer)
    ldist.optim._set_state(opt, model.trainable_variables, spec.optimizer_state)
    local args = nn._compile_args(model, spec.compile)
    args.optimizer = opt
    model:compile(args)
  end)
  if spec.rng then tensor.set_rng_state(spec.rng) end
  local cache = {}
  local ds = build_dataset(spec.data, cache)
  local cbs = {}
  for i, c in ipairs(spec.callbacks or {}) do
    local make = ldist.callbacks[c.class]
    if not make then error("unknown callback " .. tostring(c.class), 0) end
    cbs[i] = make(distribute._unship(c.config))
  end
  if s:_is_writer() then
    local card = ds.cardinality and ds:cardinality() or -2
    cbs[#cbs + 1] = progress_callback(ctl, id, spec.fit.steps_per_epoch or (card >= 0 and card or nil))
  end
  if spec.trace then s:trace(true) end
  local history = model:fit(ds, { epochs = spec.fit.epochs, initial_epoch = spec.fit.initial_epoch,
    steps_per_epoch = spec.fit.steps_per_epoch, validation_steps = spec.fit.validation_steps, verbose = 0, callbacks = cbs, class_weight = spec.fit.class_weight,
    validation_data = spec.validation and build_dataset(spec.validation, cache) or nil })
  local trace
  if spec.trace then
    s:trace(false)   -- every worker: it gathers the spans
    trace = s._gathered
    trace.steps = s._step
  end
  if s._rank ~= 0 then return { rank = s._rank } end
  local w = {}
  for i, v in ipairs(model.weights) do w[i] = v:cpu() end
  -- the rate a callback (LearningRateScheduler, ReduceLROnPlateau) left, when it is a number
  local lr = type(opt.learning_rate) == "number" and opt.learning_rate or nil
  return { history = history.history, epoch = history.epoch, weights = w, optimizer_state = ldist.optim._state(opt, model.trainable_variables),
    rng = tensor.get_rng_state(), learning_rate = lr, trace = trace, batch = s._last_batch }
end

local function run_job(state, job, ctl)
  if job.op == "exec" then
    if type(job.code) ~= "string" then error("exec: no code", 0) end
    local fn, err = load(job.code, "=cluster:run", "bt")
    if not fn then error(err, 0) end
    local args = job.args or {}
    return table.pack(fn(table.unpack(args, 1, args.n or #args)))
  elseif job.op == "fit" then
    return worker_fit(state, job.spec, ctl, job.id)
  end
  error("unknown job " .. tostring(job.op), 0)
end

-- The main loop of a LocalCluster worker (`ldist -e "ldist.distribute._serve()"`):
-- authenticated jobs from the coordinator, one at a time; a job that fails
-- (or a malformed one) is answered with its error and the worker carries on.
function distribute._serve()
  io.stdout:setvbuf("line")
  local rank, size = tonumber(env("LDIST_COORDINATOR_RANK") or ""), tonumber(env("LDIST_COORDINATOR_SIZE") or "")
  if not rank or not size or not env("LDIST_COORDINATOR") then
    error("ldist.distribute._serve() is the main loop of a LocalCluster worker; LocalCluster starts it", 0)
  end
  local ctl = C.join { rank = rank, size = size, leader = env("LDIST_COORDINATOR"), secret = net.read_secret(size),
    data_plane = false, name = "process", timeout = tonumber(env("LDIST_TIMEOUT") or "") or 30, quiet_loss = true }
  local state = {}
  while true do
    local ok, from, ty, body = pcall(ctl.recv, ctl, 1.0)
    if not ok then
      io.stderr:write("ldist worker: the coordinator is gone (" .. tostring(from) .. "); exiting\n")
      os.exit(1)
    end
    if ty == "quit" then break end
    if ty == "job" then
      C.clear_interrupt()
      local okm, job = pcall(C.unpack, body)
      local reply
      if not okm or type(job) ~= "table" then
        io.stderr:write("ldist worker: rejected a malformed job: " .. tostring(job) .. "\n")
        reply = { id = -1, ok = false, error = "malformed job: " .. tostring(job) }
      else
        if job.reset and state.strategy then state.strategy:shutdown(); state.strategy = nil end
        local okj, res = xpcall(run_job, function(e)
          if nn._is_fit_stopped(e) then return e end   -- a lost worker: its fields say where fit stopped
          return debug.traceback(tostring(e), 2)
        end, state, job, ctl)
        reply = { id = job.id, ok = okj, result = okj and res or nil, error = (not okj) and tostring(res) or nil,
          stopped = not okj and nn._is_fit_stopped(res) and { epoch = res.epoch, step = res.step, total = res.total } or nil }
        if not okj and state.strategy and (state.strategy._broken or not pcall(state.strategy._c.check, state.strategy._c)) then
          -- this worker can no longer take part: rejoin at the next job (the
          -- coordinator tells the others to as well)
          state.strategy:shutdown()
          state.strategy = nil
        end
      end
      local okp, packed = pcall(C.pack, reply)
      if not okp then packed = C.pack({ id = reply.id, ok = false, error = "the result cannot be sent: " .. tostring(packed) }) end
      ctl:send(0, "reply", packed)
    elseif ty then
      io.stderr:write(("ldist worker: ignored a '%s' message\n"):format(ty))
    end
  end
  if state.strategy then state.strategy:shutdown() end
  ctl:close()
end


local doc = ldist.document
doc(distribute.LocalCluster, "distribute.LocalCluster",
  "distribute.LocalCluster{workers=2, timeout=30, threads=}\n\n" ..
  "Start worker processes on this machine that wait for work from this session (authenticated\n" ..
  "with a fresh secret). MultiWorkerMirroredStrategy{cluster=lc} + model:fit trains on them: the\n" ..
  "model, its weights, optimizer and the dataset's recipe travel to the workers; the history and\n" ..
  "the trained weights come back. lc:run(code) runs Lua code on every worker. lc:shutdown()\n" ..
  "(or the end of the session) stops them. Each worker takes 1/workers of this machine's cores,\n" ..
  "pinned there (ldist.config.cpu_split() in a worker says which); threads=n gives each n threads\n" ..
  "instead, unpinned.")
doc(Remote.trace, "MultiWorkerMirroredStrategy(LocalCluster):trace",
  "strategy:trace(true|false) on a LocalCluster: the workers trace the fits that follow; worker 0 sends\n" ..
  "every worker's spans back, so strategy:timeline{steps=, save=} and strategy:trace_summary() work here.")
doc(Remote.timeline, "MultiWorkerMirroredStrategy(LocalCluster):timeline",
  "strategy:timeline{steps = {a, b}, save = \"t.svg\"} -> Timeline of the traced fits, one row per worker.")
doc(Remote.trace_summary, "MultiWorkerMirroredStrategy(LocalCluster):trace_summary",
  "strategy:trace_summary() -> a table per worker (compute, wait, all-reduce, bytes, bus bandwidth).")
doc(Remote.explain, "MultiWorkerMirroredStrategy(LocalCluster):explain",
  "strategy:explain() -> Text: one step of this strategy narrated with the last fit's numbers.")
