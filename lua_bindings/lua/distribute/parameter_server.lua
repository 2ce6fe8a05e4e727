-- distribute/parameter_server.lua - ParameterServerStrategy (TF's
-- tf.distribute.experimental.ParameterServerStrategy) and ClusterCoordinator:
-- asynchronous data parallelism with parameter servers. The processes it
-- drives (ps tasks, workers) are in distribute/ps_tasks.lua.
local ldist = ...
local C = ldist._cluster
local tensor, distribute, optim, nn, data = ldist.tensor, ldist.distribute, ldist.optim, ldist.nn, ldist.data
local docs = ldist.docs
if not C or not distribute or not distribute._net or not distribute._net.ps then return end
local net = distribute._net
local env, ship_fn, share, ps = net.env, net.ship_fn, ldist._util.share, net.ps
local PSCluster, from_tf_config = ps.Cluster, ps.from_tf_config
local describe_model = function(model) return distribute._describe_model(model, false) end

---------------------------------------------------------------- the strategy
local PS = distribute._strategy_class("ldist.ParameterServerStrategy")
PS.__tostring = function(s)
  return ("<ParameterServerStrategy: %d workers, %d ps>"):format(s._cl.workers, s._cl.num_ps)
end
distribute.ParameterServerStrategyClass = PS
ldist.internal(distribute, "ParameterServerStrategyClass")

function distribute.ParameterServerStrategy(cluster, opts)
  if type(cluster) == "table" and getmetatable(cluster) ~= PSCluster and opts == nil and not cluster.cluster then
    opts, cluster = cluster, nil
  end
  opts = opts or {}
  local cl = cluster
  if getmetatable(cl) ~= PSCluster then
    local cfg = cl or env("TF_CONFIG")
    if not cfg then
      error("ParameterServerStrategy needs a cluster: distribute.LocalCluster{workers=, ps=}, a TF_CONFIG table, " ..
        "or the TF_CONFIG environment variable (`ldist launch -n W --ps P script.lua` sets it)", 2)
    end
    if type(cfg) == "table" and cfg.cluster_resolver then cfg = cfg.cluster_resolver end
    if io.stdout.setvbuf and env("LDIST_LOCAL_RANK") then io.stdout:setvbuf("line") end
    cl = from_tf_config(cfg, opts)
  end
  local s = setmetatable({ kind = "ParameterServerStrategy", devices = { "cpu:0" }, num_replicas_in_sync = cl.workers,
    extended = { should_checkpoint = true, cluster = cl }, cluster_resolver = { task_type = "chief", num_workers = cl.workers,
      num_ps = cl.num_ps }, _depth = 0, _cl = cl, _partitioner = opts.variable_partitioner,
    _checkpoint_dir = opts.checkpoint_dir, _ps_strategy = true, _req = 0 }, PS)
  -- A ps that dies takes the true values of its variables with it: this
  -- process's copies are stale, so the model refuses to be read (weights,
  -- evaluate, predict, save) until they are restored (nn.c: model._lost).
  cl._on_ps_lost = function(why)
    if s._model then
      s._model._lost = ("its variables lived on parameter server %s and the values here are stale; restore them " ..
        "(callbacks.BackupAndRestore, or model:load_weights(path)) before using the model"):format(why)
    end
  end
  return s
end

function PS:shutdown()
  ps.close_links(self)
  if self._coordinator then self._coordinator:_close_links() end
  if self._cl then self._cl:shutdown() end
end

-- request/response with the ps tasks from the coordinator
function PS:_ask(requests, reply_type)
  local cl = self._cl
  self._req = self._req + 1
  local req = self._req
  local box, pend = {}, {}
  for p, r in pairs(requests) do
    cl:_check_ps()
    local packed = ps.encode(self, p, r, req)
    local seg = ps.mailbox(self, p, 1, r._type, packed)
    if seg and seg:post(r._type, packed) then box[p] = seg else cl._ps[p]:send(0, r._type, packed) end
  end
  local out = {}
  for p, r in pairs(requests) do
    local t0 = ldist.clock()
    while not out[p] do
      cl:_check_ps()
      local ok, from, ty, b
      if box[p] then
        ok, ty, b = pcall(ps.next_answer, box, pend, p, 0.1, function() return cl._ps[p]:recv_any(0.1) end)
        if not ok then from = ty else from = ty and 0 or nil end
      else ok, from, ty, b = pcall(cl._ps[p].recv_any, cl._ps[p], 0.1) end
      if not ok then cl:_check_ps(); error(from, 0) end
      if from then
        local m = C.unpack(b)
        if ty == reply_type and m.req == req then
          local vals = ps.decode(self, p, m)
          if vals then m.values = vals; out[p] = m
          else cl._ps[p]:send(0, r._type, ps.encode(self, p, r, req)) end   -- the ps cannot map it: over the network
        end
      elseif ldist.clock() - t0 > cl._timeout then
        error(("ParameterServerStrategy: ps %d did not answer within %g s"):format(p - 1, cl._timeout), 0)
      end
    end
  end
  return out
end

-- Put a model's variables on the ps tasks: round-robin, or shards along axis 0
function PS:_place(model, x)
  if self._model == model then return end
  if self._model then error("ParameterServerStrategy: one model per strategy (make another strategy for another model)", 0) end
  if not model.built then
    if not x then error("ParameterServerStrategy: build the model (model:build(shape)) before training it", 0) end
    local shape = {}
    for d = 2, x.ndim do shape[d - 1] = x.shape[d] end
    model:build(shape)
  end
  if not model._compiled then error("call model:compile{optimizer=, loss=} before training under ParameterServerStrategy", 0) end
  local cl = self._cl
  local layout, per_ps, cons, rr = {}, {}, {}, 0
  for i, v in ipairs(model.trainable_variables) do
    local shape = v.shape
    local n = 1
    if self._partitioner and v.ndim >= 1 then n = math.max(1, math.min(self._partitioner(shape, 4), shape[1])) end
    local con = ldist.nn._constraint_of(v)   -- applied on its ps task, after each update there
    if con and n > 1 then
      error(("variable %d has a %s constraint, which needs the whole variable: it cannot be partitioned " ..
        "(leave it out of variable_partitioner)"):format(i, con.class_name), 0)
    end
    for j = 0, n - 1 do
      local p = rr % cl.num_ps
      rr = rr + 1
      local sh = { var = i, ps = p, name = ("v%d/part%d"):format(i, j), whole = n == 1 }
      local val
      if n == 1 then val = v:cpu():contiguous()
      else sh.lo, sh.hi = share(shape[1], n, j); val = v:cpu():slice(0, sh.lo, sh.hi):contiguous() end
      layout[#layout + 1] = sh
      per_ps[p + 1] = per_ps[p + 1] or {}
      per_ps[p + 1][sh.name] = val
      if con then cons[p + 1] = cons[p + 1] or {}; cons[p + 1][sh.name] = con end
    end
  end
  local reqs = {}
  -- a LossScaleOptimizer's scale lives on the workers (each checks and unscales
  -- its own step's whole gradient before pushing it, W:train_step): the ps
  -- shards, applying pushes asynchronously, could not agree to skip a step
  local opt_config = ldist.optim._config(model._optimizer)
  local loss_scale = opt_config.loss_scale
  opt_config.loss_scale = nil
  for p = 1, cl.num_ps do
    reqs[p] = { _type = "init", vars = per_ps[p] or {}, constraints = cons[p], optimizer = opt_config,
      checkpoint_dir = self._checkpoint_dir }
  end
  local got = self:_ask(reqs, "init_ok")
  self.restored = got[1].restored
  self.restored_optimizer = got[1].slots
  local spec = { model = describe_model(model), compile = nn._describe_compile(model), layout = layout,
    rng = tensor.get_rng_state(), loss_scale = loss_scale }
  self._layout = layout
  self._model = model
  self._coordinator = self._coordinator or distribute.ClusterCoordinator(self)
  self._coordinator:_broadcast("setup", spec)
  if self.restored then self:_fetch_into(model) end
end

function PS:_fetch_into(model)
  local vals = self:fetch_variables()
  for i, v in ipairs(model.trainable_variables) do v:assign(vals[i]) end
end

-- every variable, reassembled from its shards
function PS:fetch_variables()
  local reqs, by = {}, {}
  for _, sh in ipairs(self._layout) do
    by[sh.ps + 1] = by[sh.ps + 1] or {}
    table.insert(by[sh.ps + 1], sh)
  end
  local vars = self._model.trainable_variables
  for p, list in pairs(by) do
    local names, bytes = {}, 0
    for i, sh in ipairs(list) do names[i] = sh.name; bytes = bytes + ps.shard_bytes(vars[sh.var], sh) end
    reqs[p] = { _type = "pull", names = names, bytes = bytes }
  end
  local got = self:_ask(reqs, "vals")
  local parts = {}
  for p, list in pairs(by) do
    for i, sh in ipairs(list) do
      parts[sh.var] = parts[sh.var] or {}
      table.insert(parts[sh.var], { lo = sh.lo or 0, t = got[p].values[i] })
    end
  end
  local out = {}
  for i, ps in ipairs(parts) do
    table.sort(ps, function(a, b) return a.lo < b.lo end)
    if #ps == 1 then out[i] = ps[1].t
    else
      local ts = {}
      for k, q in ipairs(ps) do ts[k] = q.t end
      out[i] = tensor.concat(ts, 0)
    end
  end
  return out
end

-- push gradients (one per variable of the placed model) from the coordinator
-- itself: the ps tasks apply them as they would a worker's (benchmarks, tests)
function PS:push_gradients(grads)
  local reqs = {}
  for _, sh in ipairs(self._layout) do
    local r = reqs[sh.ps + 1] or { _type = "push", names = {}, grads = {} }
    reqs[sh.ps + 1] = r
    local g = grads[sh.var]:cpu()
    r.names[#r.names + 1] = sh.name
    r.grads[#r.grads + 1] = sh.whole and g:contiguous() or g:slice(0, sh.lo, sh.hi):contiguous()
  end
  self:_ask(reqs, "ack")
end

-- the ps tasks write their shards to dir (default checkpoint_dir), atomically
function PS:checkpoint(dir)
  dir = dir or self._checkpoint_dir
  if not dir then error("checkpoint: no directory (pass one, or checkpoint_dir= to the strategy)", 2) end
  local reqs = {}
  for p = 1, self._cl.num_ps do reqs[p] = { _type = "save", dir = dir } end
  for p, m in pairs(self:_ask(reqs, "saved")) do
    if not m.ok then error(("checkpoint: ps %d: %s"):format(p - 1, tostring(m.error)), 2) end
  end
  return dir
end

-- {applied=, unique=, duplicates=} per ps task
function PS:ps_stats()
  local reqs = {}
  for p = 1, self._cl.num_ps do reqs[p] = { _type = "stats" } end
  local got = self:_ask(reqs, "stats")
  local out = {}
  for p = 1, self._cl.num_ps do out[p] = got[p] end
  return out
end

function PS:_run()
  error("ParameterServerStrategy: schedule functions with distribute.ClusterCoordinator(strategy):schedule(fn, args)", 0)
end

-- variables created in the scope live on the ps tasks (as in TF): the model
-- made in the scope is placed there when it is first needed
function PS:_model_created(model) self._made = model end

---------------------------------------------------------------- the coordinator
local Coord = { __name = "ldist.ClusterCoordinator" }
Coord.__index = Coord
local RemoteValue = { __name = "ldist.RemoteValue" }
RemoteValue.__index = RemoteValue
local PerWorker = { __name = "ldist.PerWorkerDataset" }
PerWorker.__index = PerWorker

function distribute.ClusterCoordinator(strategy, opts)
  if getmetatable(strategy) ~= PS then error("bad argument #1 to 'ClusterCoordinator' (ParameterServerStrategy expected)", 2) end
  if strategy._coordinator then
    if type(opts) == "table" and opts.max_staleness ~= nil then strategy._coordinator.max_staleness = opts.max_staleness end
    return strategy._coordinator
  end
  opts = opts or {}
  local self = setmetatable({ strategy = strategy, cluster = strategy._cl, max_staleness = opts.max_staleness,
    _queue = { first = 1, last = 0 }, _busy = {}, _tasks = {}, _next = 0, _ds = 0, _datasets = {}, scheduled = 0, completed = 0,
    rescheduled = 0, failed = 0, tasks_linked = 0, replies_linked = 0, _reported = {} }, Coord)
  strategy._coordinator = self
  return self
end

-- send a setup message to every live worker and wait for the answers
-- (-> {[worker + 1] = {result = its answer, at = when it came}})
function Coord:_broadcast(ty, body)
  local cl = self.cluster
  local packed = C.pack(body)
  local want = {}
  for w = 0, cl.workers - 1 do
    if cl:worker_alive(w) then cl._main:send(w + 1, ty, packed); want[w + 1] = true end
  end
  local t0 = ldist.clock()
  local setup = { op = ty, want = want, got = {} }
  while next(want) do
    self:_pump(0.05, setup)
    if ldist.clock() - t0 > cl._timeout then error(("ClusterCoordinator: the workers did not answer '%s'"):format(ty), 0) end
  end
  return setup.got
end

function Coord:create_per_worker_dataset(src)
  self._ds = self._ds + 1
  local body = { id = self._ds }
  if type(src) == "function" then body.fn = ship_fn(src, "the dataset function")
  else
    if type(src) == "table" and src.dataset then src = src.dataset end
    body.recipe = distribute._recipe_of(src)
    body.shard, body.workers = true, self.cluster.workers
    -- the dataset's auto-shard policy (ds:with_options), as MultiWorker reads it:
    -- FILE gives each worker its own files, DATA every n-th element, OFF all of it
    local policy = src._auto_shard_policy and src:_auto_shard_policy() or "AUTO"
    local ok, why = distribute._file_shardable(src, self.cluster.workers)
    if policy == "AUTO" then policy = ok and "FILE" or "DATA" end
    if policy == "FILE" and not ok then
      error(("create_per_worker_dataset: auto_shard_policy FILE, but the dataset cannot be split by files: %s"):format(why), 2)
    end
    body.policy = policy
  end
  self._datasets[self._ds] = body
  self:_broadcast("dataset", body)
  return setmetatable({ __per_worker = self._ds, coordinator = self }, PerWorker)
end
-- iter(per_worker_dataset): TF's per-worker iterator; the same object here
function PerWorker:iter() return self end
PerWorker.__call = PerWorker.iter

-- self._queue: the tasks no worker holds yet, in order, as a deque
-- (q[first..last]): taking the next one costs the same with 30,000 queued as with 3
local function q_len(q) return q.last - q.first + 1 end
local function q_pop(q)
  local t = q[q.first]
  q[q.first] = nil
  q.first = q.first + 1
  return t
end
local function q_push(q, t) q.last = q.last + 1; q[q.last] = t end
local function q_push_front(q, t) q.first = q.first - 1; q[q.first] = t end

-- self._busy[w]: the tasks worker w holds, oldest first (absent: none)
local function in_flight(self)
  local n = 0
  for _, l in pairs(self._busy) do n = n + #l end
  return n
end

-- Tasks a worker may hold at once: it runs them in order, and the next one is
-- already there when it answers the last (no round trip through the
-- coordinator between steps). LDIST_PS_PIPELINE=1: one at a time.
local pipeline_depth = math.max(1, math.tointeger(tonumber(env("LDIST_PS_PIPELINE") or "") or 2) or 2)

-- worker w's task link (distribute/ps_tasks.lua, "the task link"): {seg=} once
-- asked for, false where there is none (another host, LDIST_PS_TRANSPORT=tcp)
local function task_link(self, w)
  local links = self._tl
  if not links then links = {}; self._tl = links end
  local l = links[w]
  if l ~= nil then return l end
  links[w] = false
  if not ps.shm_wanted() or env("LDIST_PS_MAILBOX") == "0" or env("LDIST_PS_TASKLINK") == "0" then return false end
  self._bell = self._bell or C.ps_bell() or false
  if not self._bell then return false end
  local seg = C.shm_create(4096)
  if not seg then return false end
  seg:set_client_bell(self._bell:path())
  l = { seg = seg }
  links[w] = l
  self.cluster._main:send(w + 1, "tasklink", C.pack({ shm = { name = seg:name(), tag = seg:tag(), size = seg:size() } }))
  return l
end
local function drop_task_link(self, w)
  local l = self._tl and self._tl[w]
  if l then l.seg:close() end
  if self._tl then self._tl[w] = nil end
end
function Coord:_close_links()
  for w in pairs(self._tl or {}) do drop_task_link(self, w) end
  if self._bell then self._bell:close() end
  self._bell = nil
end

local function send_task(self, w, t)
  local l = task_link(self, w)
  -- the mailbox once the worker has mapped it (room() is 0 before)
  if l and l.seg:room() > 0 and #t.packed <= ps.MSG_MAX and l.seg:post("task", t.packed) then
    self.tasks_linked = self.tasks_linked + 1
    return
  end
  self.cluster._main:send(w + 1, "task", t.packed)
end

-- hand queued tasks to live workers with room: the least loaded first; at
-- most max_staleness + 1 in flight in all
function Coord:_dispatch()
  local cl = self.cluster
  local limit = self.max_staleness and (self.max_staleness + 1) or math.huge
  local n = in_flight(self)
  for depth = 0, pipeline_depth - 1 do
    for w = 0, cl.workers - 1 do
      if q_len(self._queue) == 0 or n >= limit then return end
      local l = self._busy[w]
      if (l and #l or 0) == depth and cl:worker_alive(w) then
        local t = q_pop(self._queue)
        t.worker, t.tries = w, t.tries + 1
        if not l then l = {}; self._busy[w] = l end
        l[#l + 1] = t
        n = n + 1
        send_task(self, w, t)
      end
    end
  end
end

-- one round: output, dead processes, replies; `setup` collects setup answers
-- (the processes' output and exits are looked at every few milliseconds, not
-- at every reply: with a thousand replies a second the wait4 and poll calls
-- would cost the coordinator a tenth of a core)
-- A worker died: one message, as torchrun's failure summary (which worker,
-- its pid and exit, the step and epoch), once; the ldist processes the
-- LocalCluster started keep quiet about it (quiet_loss)
local function report_lost_worker(self, w, busy)
  local cl = self.cluster
  -- its connection closed as it died: the exit status (the signal) comes a moment later
  local t0 = ldist.clock()
  while cl._procs and cl._dead and not cl._dead[w + 1] and ldist.clock() - t0 < 1 do cl:_forward(0.05) end
  local what = cl._dead and cl._dead[w + 1] or ("worker %d (pid %s) is lost"):format(w, tostring(cl.pids and cl.pids[w + 1] or "?"))
  local steps = {}
  for _, t in ipairs(busy or {}) do steps[#steps + 1] = tostring(t.id) end
  -- steps: the coordinator's numbers of the functions it was running
  local at = #steps == 1 and (" during step %s"):format(steps[1])
    or #steps > 1 and (" during steps %s and %s"):format(table.concat(steps, ", ", 1, #steps - 1), steps[#steps]) or ""
  if self._epoch then
    -- "during step 14 of epoch 2/3", or between its steps: "in epoch 2/3"
    at = at .. (#steps > 0 and " of epoch %d/%d" or " in epoch %d/%d, between steps"):format(self._epoch[1], self._epoch[2])
  end
  io.stderr:write(("ParameterServerStrategy: %s%s; %s\n"):format(what, at, #steps == 1 and
    "the step runs again on another worker (at least once), and training goes on" or #steps > 1 and
    "they run again on another worker (at least once), and training goes on" or "training goes on without it"))
end

function Coord:_pump(timeout, setup)
  local cl = self.cluster
  local now = ldist.clock()
  if setup or not self._checked_at or now - self._checked_at >= 0.005 then
    cl:_check_ps()
    self._checked_at = now
  end
  -- a dead worker: its task goes back to the queue (at-least-once)
  for w = 0, cl.workers - 1 do
    if not cl:worker_alive(w) then
      if setup then setup.want[w + 1] = nil end
      if self._tl and self._tl[w] ~= nil then drop_task_link(self, w) end   -- a worker that comes back maps a new one
      local l = self._busy[w]
      if not self._reported[w] then self._reported[w] = true; report_lost_worker(self, w, l) end
      if l then
        self._busy[w] = nil
        for k = #l, 1, -1 do   -- back to the front of the queue, in their order
          local t = l[k]
          t.worker = nil
          self.rescheduled = self.rescheduled + 1
          q_push_front(self._queue, t)
        end
      end
    end
  end
  if cl:alive() == 0 then
    error("ClusterCoordinator: every worker is gone (" .. (next(cl._dead) and table.concat((function()
      local l = {}; for _, v in pairs(cl._dead) do l[#l + 1] = v end; return l end)(), "; ") or "lost") .. ")", 0)
  end
  self:_dispatch()
  -- the replies: from the task links' mailboxes (their doorbell rang) and the control plane
  local got = {}
  local r = self._bell and C.ps_wait(cl._main, self._bell, timeout) or 1
  if r >= 2 then
    self._bell:drain()
    for w, l in pairs(self._tl) do
      while l do
        local ty, b = l.seg:wait(0)
        if not ty then break end
        -- "ctl": that one is on the control plane
        if ty ~= "ctl" then got[#got + 1] = { w + 1, ty, b }; self.replies_linked = self.replies_linked + 1 end
      end
    end
  end
  if r % 2 == 1 then
    local from, ty, body = cl._main:recv_any(self._bell and 0 or timeout)
    if from then got[#got + 1] = { from, ty, body } end
  end
  for _, e in ipairs(got) do self:_reply(e[1], e[3], setup) end
end

-- a worker's answer (packed body) from rank `from`
function Coord:_reply(from, body, setup)
  local cl = self.cluster
  local m = C.unpack(body)
  local w = from - 1
  if m.op == "task" then
    local l = self._busy[w]
    -- its task: the oldest it holds, as a rule (a task sent before the task
    -- link was ready may be answered after one sent through it)
    local k = 1
    while l and l[k] and l[k].id ~= m.task do k = k + 1 end
    local t = l and l[k]
    if t then
      table.remove(l, k)
      if #l == 0 then self._busy[w] = nil end
      if not m.ok then
        cl:_check_ps()       -- a ps that died is the real story
        t.state, t.error = "failed", m.error
        self.failed = self.failed + 1
      else
        t.state, t.result = "done", m.result
        self.completed = self.completed + 1
      end
      t.packed = nil
    end
    self:_dispatch()
  elseif m.op == "tasklink" then
    if not (m.ok and m.result) then drop_task_link(self, w); self._tl[w] = false   -- the control plane, then
    elseif self._tl and self._tl[w] then self._tl[w].seg:unlink() end   -- mapped at both ends: no name left in /dev/shm
  elseif setup and m.op == setup.op then
    if not m.ok then error(("worker %d: %s"):format(w, tostring(m.error)), 0) end
    setup.want[from] = nil
    if setup.got then setup.got[from] = { result = m.result, at = ldist.clock() } end
  end
end

-- coordinator:schedule(fn, args) -> RemoteValue: fn runs on some worker with args
-- (a per-worker dataset arrives there as that worker's iterator: call it for a batch)
function Coord:schedule(fn, args)
  local s = self.strategy
  if s._model == nil and s._made and s._made.built and s._made._compiled then s:_place(s._made) end
  if s._model == nil then
    error("ClusterCoordinator:schedule: no model lives on the ps tasks yet; create it under strategy:scope(), " ..
      "build it (model:build(shape)) and compile it", 2)
  end
  local key = self._fn_cache and self._fn_cache[fn]
  if not key then
    self._fn_cache = self._fn_cache or setmetatable({}, { __mode = "k" })
    key = (fn == distribute.ps_train_step or fn == distribute._ps_fit_step or fn == distribute._ps_fit_pred_step)
      and string.dump(fn)
      or ship_fn(fn, "a scheduled function")
    self._fn_cache[fn] = key
  end
  args = args or {}
  -- TF's keyword: schedule(fn, {args = {...}}) as well as schedule(fn, {...})
  if args[1] == nil and type(args.args) == "table" then args = args.args end
  local a = { n = #args }
  for i = 1, #args do
    local v = args[i]
    a[i] = getmetatable(v) == PerWorker and { __per_worker = v.__per_worker } or v
  end
  self._next = self._next + 1
  local t = { id = self._next, state = "pending", tries = 0 }
  t.packed = C.pack({ task = t.id, fn = key, args = a })
  self._tasks[t.id] = t
  q_push(self._queue, t)
  self.scheduled = self.scheduled + 1
  self:_dispatch()
  self:_pump(0)
  return setmetatable({ _t = t, _c = self }, RemoteValue)
end

function Coord:place(model) self.strategy:_place(model) end

function Coord:join()
  while q_len(self._queue) > 0 or next(self._busy) do self:_pump(0.05) end
  for id, t in pairs(self._tasks) do
    if t.state == "failed" then
      self._tasks[id] = nil
      error("ClusterCoordinator: a scheduled function failed: " .. tostring(t.error), 2)
    end
  end
  self._tasks = {}
end
function Coord:done() return q_len(self._queue) == 0 and not next(self._busy) end

function RemoteValue:fetch()
  local t = self._t
  while t.state == "pending" do self._c:_pump(0.02) end
  if t.state == "failed" then error("the scheduled function failed: " .. tostring(t.error), 2) end
  return table.unpack(t.result, 1, t.result.n)
end
RemoteValue.get = RemoteValue.fetch
RemoteValue.__tostring = function(r) return ("<RemoteValue of function %d: %s>"):format(r._t.id, r._t.state) end

-- coordinator:fetch(v): a RemoteValue's value, or (a table of) variables reassembled from the ps tasks
function Coord:fetch(v)
  if getmetatable(v) == RemoteValue then return v:fetch() end
  if type(v) == "table" and getmetatable(v) == nil then
    local out = {}
    for k, x in pairs(v) do out[k] = self:fetch(x) end
    return out
  end
  local s = self.strategy
  if s._model and tensor.is_tensor(v) then
    local vals = s:fetch_variables()
    for i, mv in ipairs(s._model.trainable_variables) do
      if rawequal(mv, v) or C.tensor_id(mv) == C.tensor_id(v) then return vals[i] end
    end
  end
  return v
end

-- a coordinator prints as one line, never its internals
Coord.__tostring = function(c)
  local busy = in_flight(c)
  return ("<ClusterCoordinator: %d workers, %d ps; %d scheduled, %d done, %d running, %d queued%s%s>"):format(
    c.cluster.workers, c.cluster.num_ps, c.scheduled, c.completed, busy, q_len(c._queue),
    c.failed > 0 and (", %d failed"):format(c.failed) or "", c.rescheduled > 0 and (", %d rescheduled"):format(c.rescheduled) or "")
end

-- coordinator:timeline(opts), coordinator:trace_summary(): the strategy's (strategy:trace(true) records)
function Coord:timeline(opts) return self.strategy:timeline(opts) end
function Coord:trace_summary() return self.strategy:trace_summary() end

function Coord:stats()
  local st = self.strategy:ps_stats()
  return { scheduled = self.scheduled, completed = self.completed, rescheduled = self.rescheduled, failed = self.failed,
    applied = st[1].applied, unique = st[1].unique, duplicates = st[1].duplicates, ps = st,
    -- tasks sent, and replies received, through the workers' task links (the rest: the control plane)
    tasks_linked = self.tasks_linked, replies_linked = self.replies_linked,
    -- bytes of pulls and pushes through shared memory / the network, at the ps tasks (workers and this process)
    shm_bytes = (function() local b = 0; for _, x in ipairs(st) do b = b + (x.shm_bytes or 0) end; return b end)(),
    net_bytes = (function() local b = 0; for _, x in ipairs(st) do b = b + (x.net_bytes or 0) end; return b end)() }
end

---------------------------------------------------------------- model:fit under the strategy
-- The protocol's _fit: model:fit (keras/training.lua) hands the whole fit to the
-- strategy, which schedules steps on the workers.
function PS:_fit(model, x, y, opts)
  if opts.class_weight then
    -- the workers read the examples: each weighs its class's weight, given to
    -- them as its sample weight (the same weighting as fit's per batch)
    if not ldist._util.is_arrays(x) or not tensor.is_tensor(y) then
      error("bad argument to 'fit' (class_weight under ParameterServerStrategy takes x and y as tensors; for a " ..
        "dataset, give each example its weight as a third dataset component)", 3)
    end
    local o = {}
    for k, v in pairs(opts) do o[k] = v end
    o.sample_weight, o.class_weight = ldist._util.class_weights(opts.class_weight, y), nil
    opts = o
  end
  local ds = ldist._util.as_dataset(x, y, opts, opts.shuffle ~= false, "fit")
  local steps = opts.steps_per_epoch
  if not steps then
    error("model:fit under ParameterServerStrategy needs steps_per_epoch (the workers read their datasets endlessly)", 3)
  end
  if not model.built then
    for b in ds do model:build((function() local sh = {}; for d = 2, b[1].ndim do sh[d - 1] = b[1].shape[d] end; return sh end)()); break end
  end
  -- non-trainable weights that change in training (moving statistics): their
  -- updates would stay on the workers, and inference here would use stale
  -- values. A frozen layer's (layer.trainable = false) never change.
  local fixed = {}
  for _, l in ipairs(model.layers) do
    if l.trainable then
      for _, v in ipairs(l.non_trainable_variables) do fixed[#fixed + 1] = v end
    end
  end
  if #fixed > 0 then
    error(("bad argument to 'fit' (the model has %d non-trainable weights, such as %s (BatchNormalization's moving " ..
      "statistics): the parameter servers do not keep them yet, so this model cannot train under " ..
      "ParameterServerStrategy; use MirroredStrategy or MultiWorkerMirroredStrategy)"):format(#fixed, fixed[1].name or "?"), 3)
  end
  self:_place(model)
  local coord = distribute.ClusterCoordinator(self)
  local pwd = coord:create_per_worker_dataset(ds)
  local epochs = opts.epochs or 1
  local verbose = opts.verbose == nil and 1 or opts.verbose
  local history, done_epochs = {}, {}
  local callbacks = opts.callbacks or {}
  local val = opts.validation_data
  if type(val) == "table" and getmetatable(val) == nil and ldist._util.is_arrays(val[1]) then
    val = ldist._util.as_dataset(val[1], val[2], { batch_size = opts.batch_size, sample_weight = val[3] }, false, "fit",
      "validation_data")
  end
  local function record(k, v) history[k] = history[k] or {}; table.insert(history[k], v) end
  model.stop_training = false
  for _, cb in ipairs(callbacks) do if cb.on_train_begin then cb:on_train_begin(model) end end
  for e = (opts.initial_epoch or 0) + 1, epochs do
    -- callbacks number epochs from 0, as Keras's
    for _, cb in ipairs(callbacks) do if cb.on_epoch_begin then cb:on_epoch_begin(e - 1, model) end end
    -- the progress bar every strategy's fit shows (ldist.progress), live
    -- as the steps come back
    local bar = verbose ~= 0 and ldist.progress and ldist.progress.new { total = steps, title = ("Epoch %d/%d"):format(e, epochs) }
    local rvs = {}
    local tracker = model:_epoch_tracker()
    local with_pred = tracker.want_pred
    local step_fn = with_pred and distribute._ps_fit_pred_step or distribute._ps_fit_step
    coord._epoch = { e, epochs }   -- for the message of a worker that dies
    for k = 1, steps do rvs[k] = coord:schedule(step_fn, { pwd }) end
    -- the training metrics, from each step's labels and predictions (the
    -- weights that step read), as Keras's running metrics
    -- the epoch's loss: the mean over its examples, as one process reports it
    local sum, rows = 0, 0
    for k = 1, steps do
      local l, n, yb, pred, wb = rvs[k]:fetch()   -- in order: steps finish about in order
      sum, rows = sum + l * n, rows + n
      -- explain() narrates a step of the full batch, not the last partial one
      if k == 1 or n > self._last_batch then self._last_batch = n end
      if with_pred then tracker.update(yb, pred, wb, n) end
      if bar then bar:update(k, tracker.logs(sum / rows)) end
    end
    coord:join()
    local logs = tracker.logs(rows > 0 and sum / rows or 0)
    if self._checkpoint_dir then self:checkpoint() end
    if val then
      self:_fetch_into(model)
      local r = model:_evaluate_batches(val, opts.validation_steps)
      for k, v in pairs(r) do logs["val_" .. k] = v end
    end
    for k, v in pairs(logs) do record(k, v) end
    if bar then bar:finish(logs) end
    for _, cb in ipairs(callbacks) do if cb.on_epoch_end then cb:on_epoch_end(e - 1, logs, model) end end
    done_epochs[#done_epochs + 1] = e - 1
    if model.stop_training then break end
  end
  coord._epoch = nil
  -- Keras's finalize_variable_values, where the variables and their averages are: the ps tasks
  if epochs > 0 and ldist.optim._config(model._optimizer).use_ema then
    local reqs = {}
    for p = 1, self._cl.num_ps do reqs[p] = { _type = "finalize" } end
    for p, m in pairs(self:_ask(reqs, "finalized")) do
      if not m.ok then error(("fit: ps %d: %s"):format(p - 1, tostring(m.error)), 0) end
    end
  end
  self:_fetch_into(model)
  -- the optimizer counts the updates the ps tasks applied (TF's optimizer.iterations; with gradient
  -- accumulation, the ps's optimizer counts the updates among them)
  local st = self:ps_stats()[1]
  ldist.optim._set_state(model._optimizer, {},
    { iterations = math.tointeger(tonumber(st.iterations or st.applied)) or 0, accum_calls = math.tointeger(tonumber(st.applied)) })
  for _, cb in ipairs(callbacks) do if cb.on_train_end then cb:on_train_end(model) end end
  model.history = ldist.callbacks._History._of(history, { epochs = epochs, steps = steps, verbose = verbose }, done_epochs)
  return model.history
end

---------------------------------------------------------------- watching it: traces
-- strategy:trace(true) tells every worker and ps task to record: a worker
-- one "input", "pull", "forward", "backward" and "push" span per step (the
-- step is the coordinator's task number; a push carries its staleness: the
-- updates other pushes made between the version its weights were read at
-- and the one it made) and the time it sat idle between tasks ("wait"); a
-- ps task one "apply" span per push. trace(false) fetches them. Clocks:
-- processes with this machine's boot id share its monotonic clock; any
-- other is shifted by the difference between its clock in its answer and
-- this clock when the answer came (good to about one message's latency).
local function my_boot()
  local f = io.open("/proc/sys/kernel/random/boot_id")
  local id = f and f:read("l") or C.hostname()
  if f then f:close() end
  return id
end

function PS:trace(on)
  on = on and true or false
  local coord = distribute.ClusterCoordinator(self)
  local cl = self._cl
  local reqs = {}
  for p = 1, cl.num_ps do reqs[p] = { _type = "trace", on = on } end
  if on then
    coord:join()   -- the trace starts with no task in flight
    coord:_broadcast("trace", { on = true })
    self:_ask(reqs, "trace_ok")
    self._tracing, self._trace = true, nil
    return self
  end
  if not self._tracing then return self end
  coord:join()
  local boot, shifted = my_boot(), false
  local function aligned(tr, at)
    local off = 0
    if tr.boot ~= boot then off = tr.clock - at; shifted = true end
    for _, sp in ipairs(tr.spans) do sp[2], sp[3] = sp[2] - off, sp[3] - off end
    return tr
  end
  local workers = {}
  for w, g in pairs(coord:_broadcast("trace", { on = false })) do workers[w] = aligned(g.result, g.at) end
  local ps_tr = {}
  local t_ask = ldist.clock()
  for p, m in pairs(self:_ask(reqs, "trace_ok")) do ps_tr[p] = aligned(m.trace, ldist.clock() - (ldist.clock() - t_ask) / 2) end
  self._tracing = false
  self._trace = { workers = workers, ps = ps_tr, shifted = shifted }
  return self
end

local function traced(self)
  if self._tracing then error("stop the trace first: strategy:trace(false) gathers it from the workers and ps tasks", 3) end
  if not self._trace then error("nothing traced yet: strategy:trace(true), train, strategy:trace(false)", 3) end
  return self._trace
end

-- strategy:timeline{steps=, save=}: one row per worker, then one per ps task
function PS:timeline(opts)
  if not self._trace and not self._tracing then
    return distribute._timeline({ title = "ParameterServerStrategy", rows = {},
      empty_text = "nothing recorded yet (strategy:trace(true), train, strategy:trace(false))" }, opts)
  end
  local tr = traced(self)
  local rows, cl = {}, self._cl
  local function spans_of(list)
    local out = {}
    for _, sp in ipairs(list) do
      out[#out + 1] = { kind = sp[1], t0 = sp[2], t1 = sp[3], step = (sp[4] or 0) > 0 and sp[4] or nil, bytes = sp.bytes,
        note = sp.note, mark = sp.mark }
    end
    return out
  end
  local lost = {}
  for w = 1, cl.workers do
    local t = tr.workers[w]
    if t then rows[#rows + 1] = { who = ("worker %d"):format(w - 1), label = ("worker %d (pid %d)"):format(w - 1, t.pid or 0), spans = spans_of(t.spans) }
    else lost[#lost + 1] = ("worker %d"):format(w - 1) end
  end
  for p = 1, cl.num_ps do
    local t = tr.ps[p]
    if t then rows[#rows + 1] = { who = ("ps %d"):format(p - 1), label = ("ps %d (pid %d)"):format(p - 1, t.pid or 0), spans = spans_of(t.spans) } end
  end
  local notes = { "asynchronous: each worker pulls the weights, computes its gradients and pushes them; each ps applies a " ..
    "push as it comes (\"apply\"). A step is one scheduled function; its number (the coordinator's task number) is " ..
    "marked where it begins on its worker's row.",
    "s<k> above a push: its staleness, the updates other workers pushed between the weights it read and its own",
    tr.shifted and "clocks of other machines are aligned by the clock in their answer (good to about one message's latency)"
      or "one machine: every process's times are read from the same monotonic clock" }
  if #lost > 0 then   -- a worker that died during the trace took its record with it
    notes[#notes + 1] = ("%s died during the trace: no row (its record died with it); the ps rows still show the pushes it made")
      :format(table.concat(lost, ", "))
  end
  return distribute._timeline({ title = ("ParameterServerStrategy: %d workers, %d ps"):format(cl.workers, cl.num_ps),
    subtitle = "coordinator in this process; workers and ps tasks are processes", rows = rows, waits_for = false, async = true,
    notes = notes }, opts)
end

function PS:trace_summary()
  local tr = traced(self)
  local rows, per, tot = {}, {}, { compute = 0, wait = 0, communication = 0, bytes = 0, pushes = 0, max_staleness = 0 }
  local stale_sum, stale_n = 0, 0
  local lo, hi = math.huge, -math.huge
  local function add_row(who, spans)
    local s = { compute = 0, wait = 0, communication = 0, bytes = 0, pushes = 0 }
    for _, sp in ipairs(spans) do
      local d = sp[3] - sp[2]
      s[sp[1]] = (s[sp[1]] or 0) + d
      if sp[1] == "apply" then s.bytes = s.bytes + (sp.bytes or 0) end   -- a ps: the gradients it received
      if sp[1] == "pull" or sp[1] == "push" then s.communication = s.communication + d; s.bytes = s.bytes + (sp.bytes or 0)
      elseif sp[1] ~= "wait" then s.compute = s.compute + d end
      if sp[1] == "push" then
        s.pushes = s.pushes + 1
        if sp.staleness then stale_sum, stale_n = stale_sum + sp.staleness, stale_n + 1; tot.max_staleness = math.max(tot.max_staleness, sp.staleness) end
      end
      lo, hi = math.min(lo, sp[2]), math.max(hi, sp[3])
    end
    per[#per + 1] = s
    rows[#rows + 1] = { who = who, compute = s.compute, wait = s.wait, comm = s.communication, bytes = s.bytes,
      bus_bandwidth = s.communication > 0 and s.bytes / s.communication or nil }
    for _, k in ipairs({ "compute", "wait", "communication" }) do tot[k] = math.max(tot[k], s[k]) end
    tot.bytes, tot.pushes = tot.bytes + s.bytes, tot.pushes + s.pushes
  end
  for w = 1, self._cl.workers do if tr.workers[w] then add_row(("worker %d"):format(w - 1), tr.workers[w].spans) end end
  for p = 1, self._cl.num_ps do if tr.ps[p] then add_row(("ps %d"):format(p - 1), tr.ps[p].spans) end end
  tot.mean_staleness = stale_n > 0 and stale_sum / stale_n or 0
  tot.per_task = per
  return distribute._trace_summary(tot, rows, { title = ("ParameterServerStrategy (%d workers, %d ps)"):format(self._cl.workers,
    self._cl.num_ps), over = hi > lo and hi - lo or nil, comm_name = "pull + push", bw_name = "bandwidth",
    notes = { "workers: compute = input, forward, backward; wait = idle between tasks; bytes pulled + pushed;",
      "ps tasks: compute = applying pushes; bandwidth column = bytes / (pull + push) time;",
      ("staleness of the pushes: mean %.2f, max %d (updates by other workers between a step's read and its push)")
        :format(tot.mean_staleness, tot.max_staleness) } })
end

function PS:explain()
  local cl = self._cl
  local out = { ("ParameterServerStrategy: asynchronous data parallelism - %d workers, %d ps tasks, this process coordinates.")
    :format(cl.workers, cl.num_ps) }
  local nv, count = ldist._util.model_numbers(self._model)
  if nv then
    local per = {}
    for _, sh in ipairs(self._layout) do per[sh.ps + 1] = (per[sh.ps + 1] or 0) + 1 end
    local parts = {}
    for p = 1, cl.num_ps do parts[#parts + 1] = ("ps %d holds %d"):format(p - 1, per[p] or 0) end
    out[#out + 1] = ("0. The model's %d trainable variables (%d numbers, %s) live on the ps tasks: %s (variable shards)."):format(
      nv, count, ldist._util.fmt_bytes(count * 4), table.concat(parts, ", "))
  else
    out[#out + 1] = "0. The model's variables live on the ps tasks (compile and fit a model under strategy:scope() to see them)."
  end
  local b = self._last_batch
  out[#out + 1] = ("1. The coordinator schedules steps; an idle worker takes the next one and reads its own batch%s " ..
    "(batches are not split: each worker trains on whole batches)."):format(b and (" (%d examples)"):format(b) or "")
  local size = nv and ldist._util.fmt_bytes(count * 4) or "every weight"
  out[#out + 1] = ("2. Pull: the worker fetches the current weights from every ps (%s)."):format(size)
  out[#out + 1] = "3. It runs forward, the loss (the mean over its batch) and backward on its own, waiting for no other worker."
  out[#out + 1] = ("4. Push: it sends its gradients (%s) to the ps tasks, each of which applies the optimizer to its " ..
    "variables at once - nothing is averaged across workers."):format(size)
  local st = self._trace and not self._tracing and self:trace_summary()
  out[#out + 1] = "5. Meanwhile the other workers have pushed too: a gradient is applied to weights newer than it was " ..
    "computed on (its staleness)" .. (st and (" - in the trace, %.2f updates on average, at most %d."):format(st.mean_staleness, st.max_staleness) or ".")
  return ldist.text(table.concat(out, "\n"))
end

---------------------------------------------------------------- documentation
local doc = ldist.document
doc(distribute.ParameterServerStrategy, "distribute.ParameterServerStrategy",
  "distribute.ParameterServerStrategy(cluster, {variable_partitioner=, checkpoint_dir=, timeout=30})\n\n" ..
  "Asynchronous training with parameter servers. cluster: distribute.LocalCluster{workers=W, ps=P},\n" ..
  "or a TF_CONFIG table (default: the TF_CONFIG variable; `ldist launch -n W --ps P script.lua`\n" ..
  "sets it; on worker and ps tasks this call serves and never returns). The model compiled under\n" ..
  "strategy:scope() lives on the ps tasks: each variable on one (round-robin) or split along axis 0\n" ..
  "by variable_partitioner (distribute.partitioners.FixedShardsPartitioner{num_shards=},\n" ..
  "MinSizePartitioner{min_shard_bytes=, max_shards=}). Each ps applies the optimizer to its shards\n" ..
  "as gradient pushes arrive. model:fit(ds, {epochs=, steps_per_epoch=}) trains through a\n" ..
  "ClusterCoordinator; strategy:checkpoint([dir]) writes every shard (atomically);\n" ..
  "strategy:fetch_variables() reassembles them.")
doc(distribute.ClusterCoordinator, "distribute.ClusterCoordinator",
  "distribute.ClusterCoordinator(strategy, {max_staleness=})\n\n" ..
  "coordinator:schedule(fn, {args}) -> RemoteValue (rv:fetch()); coordinator:join();\n" ..
  "coordinator:fetch(v); coordinator:create_per_worker_dataset(dataset | function(worker_index))\n" ..
  "fn runs on a worker (it may use only its arguments and globals); distribute.ps_train_step(it)\n" ..
  "is one step of asynchronous SGD: pull, gradients on it()'s batch, push. A function whose\n" ..
  "worker dies runs again on another (at-least-once); coordinator:stats() counts duplicates,\n" ..
  "and the bytes the ps tasks moved through shared memory (shm_bytes) and the network (net_bytes).\n" ..
  "max_staleness=k: at most k+1 functions in flight (0: synchronous SGD).")
doc(PS.trace, "ParameterServerStrategy:trace",
  "strategy:trace(true|false)\n\n" ..
  "Record on every worker (input, pull, forward, backward, push with its staleness, idle time) and\n" ..
  "every ps task (applying each push); trace(false) gathers them here. Then strategy:timeline{steps=,\n" ..
  "save=} (also coordinator:timeline()), strategy:trace_summary(), strategy:explain(), and\n" ..
  "distribute.compare_timelines{mirrored:timeline(), ps_strategy:timeline()}.")
doc(PS.timeline, "ParameterServerStrategy:timeline",
  "strategy:timeline{steps = {a, b}, save = \"t.svg\", marks = {{at =, text =}}} -> Timeline: a row per\n" ..
  "worker (input, pull, forward, backward - or compute for a step written by hand -, push marked with its\n" ..
  "staleness, idle waits) and per ps task (applying each push). coordinator:timeline() is the same.\n" ..
  "distribute.compare_timelines{sync, async} draws two on one picture.")
doc(PS.trace_summary, "ParameterServerStrategy:trace_summary",
  "strategy:trace_summary() -> a table per worker and ps task (compute, wait, pull + push, bytes,\n" ..
  "bandwidth) and the pushes' staleness; fields compute, wait, communication, bytes, pushes,\n" ..
  "mean_staleness, max_staleness, per_task.")
doc(PS.explain, "ParameterServerStrategy:explain",
  "strategy:explain() -> Text: one asynchronous step narrated with this run's numbers.")
doc(Coord.timeline, "ClusterCoordinator:timeline", "coordinator:timeline(opts): the strategy's timeline (strategy:trace(true) records).")
doc(Coord.trace_summary, "ClusterCoordinator:trace_summary", "coordinator:trace_summary(): the strategy's trace summary.")
