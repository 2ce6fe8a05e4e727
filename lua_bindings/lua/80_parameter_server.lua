-- 80_parameter_server.lua - ParameterServerStrategy (TF's
-- tf.distribute.experimental.ParameterServerStrategy) and ClusterCoordinator:
-- asynchronous data parallelism with parameter servers.
--
-- Roles, as in TF 2: a coordinator (this script, the REPL or a notebook),
-- workers and ps tasks. The variables live on the ps tasks (round-robin, or
-- split along axis 0 by a partitioner); the coordinator schedules functions on
-- the workers; a worker pulls the variables it needs from the ps tasks,
-- computes gradients on its own data and pushes them; each ps applies the
-- optimizer's update to its shard as a push arrives (asynchronous SGD).
--
-- Transport: the authenticated control plane of lua_bindings/cluster.c. The
-- coordinator leads one cluster of itself and the workers (tasks and
-- results); each ps task leads a cluster of itself, the coordinator (rank 1)
-- and the workers (ranks 2..W+1), so a worker talks to a ps directly.
-- Tensors travel as raw float32 bytes inside C.pack frames. Receives that
-- must survive a dead worker use c:recv_any (engine/ld_cluster_ps.c).
--
-- Faults: a function on a worker that dies is scheduled again on another
-- (at-least-once: its gradients may be applied twice; the ps tasks count
-- duplicates); a dead ps task is an error at the coordinator naming it. ps
-- tasks write their shards to checkpoint_dir atomically (safetensors through
-- a temporary file) and load them when a new cluster starts on that directory.
local ldist = ...
local C = ldist._cluster
local tensor, distribute, optim, nn, data = ldist.tensor, ldist.distribute, ldist.optim, ldist.nn, ldist.data
local docs = ldist.docs
if not C or not distribute or not distribute.LocalCluster then return end
local StrategyBase = getmetatable(distribute.get_strategy()).__index

local getenv = os.getenv
local function env(k) local v = getenv(k); if v == "" then return nil end return v end
local function rewrap(old, new) if docs[old] then docs[new] = docs[old] end return new end

---------------------------------------------------------------- partitioners
distribute.partitioners = distribute.partitioners or {}
local P = distribute.partitioners

-- a partitioner is called with (shape, bytes per element) and returns the
-- number of shards along axis 0
function P.FixedShardsPartitioner(opts)
  local n = math.tointeger(type(opts) == "table" and opts.num_shards or opts)
  if not n or n < 1 then error("bad argument #1 to 'FixedShardsPartitioner' (num_shards >= 1 expected)", 2) end
  return function(shape) return math.min(n, shape[1] or 1) end
end
function P.MinSizePartitioner(opts)
  opts = opts or {}
  local min_bytes = opts.min_shard_bytes or 256 * 1024
  local max_shards = opts.max_shards or 1
  return function(shape, elem)
    local bytes = elem or 4
    for _, d in ipairs(shape) do bytes = bytes * d end
    local n = math.max(1, math.min(max_shards, bytes // min_bytes))
    return math.min(n, shape[1] or 1)
  end
end
function P.MaxSizePartitioner(opts)
  opts = opts or {}
  local max_bytes = opts.max_shard_bytes or 1024 * 1024
  local max_shards = opts.max_shards or math.huge
  return function(shape, elem)
    local bytes = elem or 4
    for _, d in ipairs(shape) do bytes = bytes * d end
    local n = math.max(1, math.min(max_shards, -((-bytes) // max_bytes)))
    return math.min(n, shape[1] or 1)
  end
end

local function share(rows, n, r)
  local base, extra = rows // n, rows % n
  local lo = r * base + math.min(r, extra)
  return lo, lo + base + (r < extra and 1 or 0)
end

---------------------------------------------------------------- shipping functions, models
local function ship_fn(fn, what)
  local i = 1
  while true do
    local name = debug.getupvalue(fn, i)
    if not name then break end
    if name ~= "_ENV" then
      error(("%s uses the local variable '%s' and cannot be sent to the workers; make it use only its " ..
        "arguments and globals (ldist, ...)"):format(what, name), 0)
    end
    i = i + 1
  end
  return string.dump(fn)
end

local describe_model = function(model) return distribute._describe_model(model, false) end
local build_model, build_loss = distribute._build_model, distribute._build_loss
local build_optimizer = distribute._build_optimizer

local function read_secret()
  local s = env("LDIST_SECRET")
  if not s and env("LDIST_SECRET_FILE") then
    local f = io.open(env("LDIST_SECRET_FILE"), "rb")
    if f then s = f:read("a"):gsub("%s+$", ""); f:close() end
  end
  if not s or #s < 16 then
    error("ParameterServerStrategy needs a shared secret: `ldist launch` and LocalCluster make one; otherwise " ..
      "export LDIST_SECRET (at least 16 characters, the same everywhere)", 0)
  end
  return s
end

-- a dataset's iterator that starts again at its end (TF asks for .repeat());
-- worker w of n takes batches w, w+n, ... (a copy of the same dataset on
-- every worker would otherwise feed them the same batches)
local function endless(ds, w, n)
  local f, st, c
  w, n = w or 0, n or 1
  local function nxt()
    for _ = 1, 2 do
      if not f then f, st, c = ds:iter() end
      local e = f(st, c)
      c = e
      if e ~= nil then return e end
      f = nil
    end
    error("the per-worker dataset is empty", 0)
  end
  local first = true
  return function()
    local skip = first and w or n - 1
    first = false
    for _ = 1, skip do nxt() end
    return nxt()
  end
end

---------------------------------------------------------------- a ps task
local function ps_serve(me, ctl, nworkers)
  local vars, names, opt = {}, {}, nil
  local applied, tasks, dups = 0, {}, 0
  local ckpt
  local function save(dir)
    dir = dir or ckpt
    if not dir then return false end
    C.mkdir_p(dir)
    local t, list = {}, {}
    for n, v in pairs(vars) do t[n] = v; list[#list + 1] = n end
    table.sort(list)
    -- the optimizer's slots (momentum, Adam's m and v) travel with the shards
    local iterations = 0
    if opt and #list > 0 then
      local vl = {}
      for i, n in ipairs(list) do vl[i] = vars[n] end
      local st = C.optimizer_state(opt, vl)
      iterations = st.iterations or 0
      for i, n in ipairs(list) do
        for q = 1, 2 do if st.slots[i] and st.slots[i][q] then t[n .. "#slot" .. q] = st.slots[i][q] end end
      end
    end
    ldist.io.save_safetensors(("%s/ps-%d.safetensors"):format(dir, me), t,
      { applied = tostring(applied), duplicates = tostring(dups), iterations = tostring(iterations) })
    return true
  end
  while true do
    local ok, from, ty, body = pcall(ctl.recv_any, ctl, 0.5)
    if not ok then io.stderr:write("ldist ps: " .. tostring(from) .. "\n"); os.exit(1) end
    local cs = ctl:peer_state(1)
    if cs == "lost" then io.stderr:write("ldist ps: the coordinator is gone; exiting\n"); os.exit(1) end
    if cs == "left" then break end
    if ty == "quit" then break
    elseif ty then
      local okm, m = pcall(C.unpack, body)
      if not okm or type(m) ~= "table" then goto continue end
      if ty == "push" then
        local g, v = {}, {}
        for i, n in ipairs(m.names) do
          if not vars[n] then error("push of an unknown variable " .. tostring(n), 0) end
          g[i], v[i] = m.grads[i], vars[n]
        end
        optim._apply_gradients(opt, g, v)
        applied = applied + 1
        if m.task then
          if tasks[m.task] then dups = dups + 1 end
          tasks[m.task] = (tasks[m.task] or 0) + 1
        end
        ctl:send(from, "ack", C.pack({ req = m.req, version = applied }))
      elseif ty == "pull" then
        local out = {}
        for i, n in ipairs(m.names) do out[i] = vars[n] end
        ctl:send(from, "vals", C.pack({ req = m.req, values = out, version = applied }))
      elseif ty == "init" then
        opt = build_optimizer(m.optimizer)
        ckpt = m.checkpoint_dir
        local restored, slots_restored = false, false
        local file = ckpt and ("%s/ps-%d.safetensors"):format(ckpt, me)
        local f = file and io.open(file, "rb")
        if f then
          f:close()
          local t, meta = ldist.io.load_safetensors(file)
          restored = true
          for n, v in pairs(m.vars) do
            if not t[n] or table.concat(t[n].shape, "x") ~= table.concat(v.shape, "x") then restored = false end
          end
          if restored then
            local list, vl, slots = {}, {}, {}
            for n in pairs(m.vars) do vars[n] = t[n]:contiguous():clone(); list[#list + 1] = n end
            table.sort(list)
            for i, n in ipairs(list) do vl[i] = vars[n]; slots[i] = { t[n .. "#slot1"], t[n .. "#slot2"] } end
            applied = tonumber(meta and meta.applied or 0) or 0
            dups = tonumber(meta and meta.duplicates or 0) or 0
            if #list > 0 and t[list[1] .. "#slot1"] then
              slots_restored = pcall(C.optimizer_set_state, opt, vl,
                { iterations = tonumber(meta and meta.iterations or 0) or 0, slots = slots })
            end
          end
        end
        if not restored then for n, v in pairs(m.vars) do vars[n] = v:contiguous():clone() end end
        ctl:send(from, "init_ok", C.pack({ req = m.req, restored = restored, slots = slots_restored, applied = applied }))
      elseif ty == "save" then
        local okS, err = pcall(save, m.dir)
        ctl:send(from, "saved", C.pack({ req = m.req, ok = okS, error = not okS and tostring(err) or nil }))
      elseif ty == "stats" then
        local uniq = 0
        for _ in pairs(tasks) do uniq = uniq + 1 end
        ctl:send(from, "stats", C.pack({ req = m.req, applied = applied, unique = uniq, duplicates = dups, pid = C.getpid() }))
      end
    end
    ::continue::
  end
end

---------------------------------------------------------------- a worker
local W = { __name = "ldist.ParameterServerWorker" }
W.__index = W
local worker_ctx

-- request/response with ps p: send every request first, then wait for each answer
function W:_ask(requests, reply_type)
  local out, req = {}, (self._req or 0) + 1
  self._req = req
  for p, body in pairs(requests) do body.req = req; self.ps[p]:send(0, ( body._type ), C.pack(body)) end
  for p in pairs(requests) do
    local ctl = self.ps[p]
    while not out[p] do
      local from, ty, b = ctl:recv(self.timeout)
      if from == nil then error(("ps task %d did not answer within %g s"):format(p - 1, self.timeout), 0) end
      local m = C.unpack(b)
      if ty == reply_type and m.req == req then out[p] = m end
    end
  end
  return out
end

function W:pull()
  local reqs = {}
  for p, list in pairs(self.by_ps) do
    local names = {}
    for i, sh in ipairs(list) do names[i] = sh.name end
    reqs[p] = { _type = "pull", names = names }
  end
  local got = self:_ask(reqs, "vals")
  local vars = self.model.trainable_variables
  for p, list in pairs(self.by_ps) do
    for i, sh in ipairs(list) do
      local v = vars[sh.var]
      if sh.whole then v:assign(got[p].values[i]) else v:slice(0, sh.lo, sh.hi):assign(got[p].values[i]) end
    end
  end
end

function W:push(grads, task)
  local reqs = {}
  for p, list in pairs(self.by_ps) do
    local names, gs = {}, {}
    for i, sh in ipairs(list) do
      names[i] = sh.name
      local g = grads[sh.var]:cpu()
      gs[i] = sh.whole and g:contiguous() or g:slice(0, sh.lo, sh.hi):contiguous()
    end
    reqs[p] = { _type = "push", names = names, grads = gs, task = task or self.task }
  end
  self:_ask(reqs, "ack")
end

-- one step of asynchronous SGD on this worker: pull, gradients on the next batch, push
function W:train_step(it)
  local b = type(it) == "function" and it() or it
  local x, y = b[1], b[2]
  self:pull()
  local lv, grads = self.model:_grads(x, y, self.loss)
  self:push(grads)
  return lv:item()
end

function distribute.worker_context() return worker_ctx end
-- the function model:fit and coordinator:schedule use for a training step
distribute.ps_train_step = function(it) return ldist.distribute.worker_context():train_step(it) end

local function worker_serve(me, main, ps, timeout)
  local self = setmetatable({ index = me, ps = ps, timeout = timeout, datasets = {} }, W)
  worker_ctx = self
  local fns = {}
  while true do
    local ok, from, ty, body = pcall(main.recv, main, 1.0)
    if not ok then io.stderr:write("ldist worker: the coordinator is gone; exiting\n"); os.exit(1) end
    if ty == "quit" or (not ty and main:peer_state(0) == "left") then break end
    if ty then
      local okm, m = pcall(C.unpack, body)
      if okm and type(m) == "table" then
        local okj, res = xpcall(function()
          if ty == "setup" then
            self.model = build_model(m.model)
            self.loss = build_loss(m.loss)
            self.by_ps = {}
            for _, sh in ipairs(m.layout) do
              local l = self.by_ps[sh.ps + 1] or {}
              self.by_ps[sh.ps + 1] = l
              l[#l + 1] = sh
            end
            return true
          elseif ty == "dataset" then
            local ds
            if m.fn then self.datasets[m.id] = endless(assert(load(m.fn, "=dataset_fn", "b"))(me))
            else self.datasets[m.id] = endless(distribute._build_dataset(m.recipe), me, m.shard and m.workers or 1) end
            return true
          elseif ty == "task" then
            self.task = m.task
            local fn = fns[m.fn]
            if not fn then fn = assert(load(m.fn, "=scheduled function", "b")); fns[m.fn] = fn end
            local args = m.args or {}
            for i = 1, (args.n or #args) do
              local a = args[i]
              if type(a) == "table" and a.__per_worker then args[i] = self.datasets[a.__per_worker] end
            end
            return table.pack(fn(table.unpack(args, 1, args.n or #args)))
          end
        end, function(e) return debug.traceback(tostring(e), 2) end)
        main:send(0, "reply", C.pack({ task = m.task, op = ty, ok = okj, result = okj and res or nil,
          error = not okj and tostring(res) or nil }))
      end
    end
  end
end

-- the main loop of a worker or ps process (LocalCluster or TF_CONFIG)
local function join_as(role, me, cfg)
  io.stdout:setvbuf("line")
  local secret, timeout = cfg.secret, cfg.timeout
  if role == "ps" then
    local ctl = C.join { rank = 0, size = cfg.workers + 2, leader = cfg.ps_addrs[me + 1], secret = secret,
      data_plane = false, name = "process", timeout = timeout, rendezvous_timeout = 120 }
    local ok, err = pcall(ps_serve, me, ctl, cfg.workers)
    if not ok then io.stderr:write("ldist ps: " .. tostring(err) .. "\n") end
    ctl:close()
    return
  end
  local main = C.join { rank = me + 1, size = cfg.workers + 1, leader = cfg.main, secret = secret,
    data_plane = false, name = "process", timeout = timeout, rendezvous_timeout = 120 }
  local ps = {}
  for p, addr in ipairs(cfg.ps_addrs) do
    ps[p] = C.join { rank = me + 2, size = cfg.workers + 2, leader = addr, secret = secret, data_plane = false,
      name = "process", timeout = timeout, rendezvous_timeout = 120 }
  end
  worker_serve(me, main, ps, timeout)
  for _, c in ipairs(ps) do c:close() end
  main:close()
end

function distribute._ps_serve()
  local addrs = {}
  for a in (env("LDIST_PS_ADDRS") or ""):gmatch("[^,]+") do addrs[#addrs + 1] = a end
  join_as(env("LDIST_PS_ROLE"), tonumber(env("LDIST_PS_INDEX")), { secret = read_secret(),
    timeout = tonumber(env("LDIST_TIMEOUT") or "") or 30, workers = tonumber(env("LDIST_PS_WORKERS")),
    main = env("LDIST_PS_MAIN"), ps_addrs = addrs })
end

---------------------------------------------------------------- the cluster (coordinator side)
local PSCluster = { __name = "ldist.LocalCluster" }
PSCluster.__index = PSCluster
distribute.PSClusterClass = PSCluster

local function describe_exit(ev)
  return ev.signal ~= 0 and ("was killed by signal %d (%s)"):format(ev.signal, ev.signal_name or "?")
    or ("exited with status %d"):format(ev.status)
end

-- the coordinator's end: join the main cluster (leading it) and every ps cluster
local function coordinator_join(self, secret, timeout)
  self._main = C.join { rank = 0, size = self.workers + 1, leader = self._main_addr, secret = secret,
    data_plane = false, name = "process", timeout = timeout, rendezvous_timeout = 120 }
  self._ps = {}
  for p, addr in ipairs(self.ps_addresses) do
    self._ps[p] = C.join { rank = 1, size = self.workers + 2, leader = addr, secret = secret, data_plane = false,
      name = "process", timeout = timeout, rendezvous_timeout = 120 }
  end
end

local function start_local(opts)
  local nw, np = math.tointeger(opts.workers or 2), math.tointeger(opts.ps or 1)
  if not nw or nw < 1 or nw > 64 then error("bad argument #1 to 'LocalCluster' (workers must be 1..64)", 3) end
  if not np or np < 1 or np > 64 then error("bad argument #1 to 'LocalCluster' (ps must be 1..64)", 3) end
  local timeout = opts.timeout or 30
  local host = "127.0.0.1"
  local secret = C.random_hex(32)
  local main = host .. ":" .. C.free_port(host)
  local ps_addrs = {}
  for i = 1, np do ps_addrs[i] = host .. ":" .. C.free_port(host) end
  local threads = opts.threads or 1
  local envs = {}
  local function mk(role, idx)
    return { "LDIST_PS_ROLE=" .. role, "LDIST_PS_INDEX=" .. idx, "LDIST_SECRET=" .. secret,
      "LDIST_PS_MAIN=" .. main, "LDIST_PS_ADDRS=" .. table.concat(ps_addrs, ","), "LDIST_PS_WORKERS=" .. nw,
      "LDIST_NUM_THREADS=" .. threads, "LDIST_TIMEOUT=" .. timeout, "TF_CONFIG=",
      "LUA_CPATH_5_4=" .. package.cpath, "LUA_PATH_5_4=" .. package.path }
  end
  for i = 0, nw - 1 do envs[#envs + 1] = mk("worker", i) end
  for i = 0, np - 1 do envs[#envs + 1] = mk("ps", i) end
  local procs = C.procs_start({ C.self_exe(), "-e", "ldist = ldist or require('ldist'); ldist.distribute._ps_serve()" },
    envs, true)
  local self = setmetatable({ workers = nw, num_workers = nw, num_ps = np, pids = {}, ps_pids = {},
    ps_addresses = ps_addrs, _main_addr = main, _procs = procs, _timeout = timeout, _dead = {}, _local = true }, PSCluster)
  for i = 0, nw - 1 do self.pids[i + 1] = procs:pid(i) end
  for i = 0, np - 1 do self.ps_pids[i + 1] = procs:pid(nw + i) end
  local ok, err = pcall(coordinator_join, self, secret, timeout)
  if not ok then
    self:_forward(0.2)
    procs:close(1)
    self._procs = nil
    error("LocalCluster: the workers and ps tasks did not start: " .. tostring(err), 3)
  end
  return self
end

-- child output as "[worker i]" / "[ps i]" lines; exits become dead tasks
function PSCluster:_forward(timeout)
  local procs = self._procs
  if not procs then return end
  local deadline = ldist.clock() + (timeout or 0)
  repeat
    local ev = procs:poll(0)
    while ev do
      local role, idx = "worker", ev.index
      if ev.index >= self.workers then role, idx = "ps", ev.index - self.workers end
      if ev.kind == "exit" then
        if not self._closing then self._dead[ev.index + 1] = ("%s %d (pid %d) %s"):format(role, idx, procs:pid(ev.index), describe_exit(ev)) end
      else
        local out = ev.kind == "out" and io.stdout or io.stderr
        out:write(("[%s %d] %s\n"):format(role, idx, ev.line))
        out:flush()
      end
      ev = procs:poll(0)
    end
    if ldist.clock() >= deadline then break end
    C.sleep(0.01)
  until false
end

function PSCluster:worker_alive(i)
  if self._dead[i + 1] then return false end
  local s = self._main:peer_state(i + 1)
  return s == "joined"
end

-- a dead ps task is fatal: its variables are gone
function PSCluster:_check_ps()
  self:_forward(0)
  for p = 1, self.num_ps do
    local why = self._dead[self.workers + p]
    if not why and self._ps[p] and self._ps[p]:peer_state(0) == "lost" then
      why = ("ps %d (pid %s) is lost"):format(p - 1, tostring(self.ps_pids[p]))
    end
    if why then
      error(("ParameterServerStrategy: parameter server %s; the variables it held are gone. Shut the cluster down " ..
        "and start a new one (with checkpoint_dir= it resumes from the last checkpoint)"):format(why), 0)
    end
  end
end

function PSCluster:kill_worker(i, sig) return C.kill(self.pids[i + 1], sig or "KILL") end
function PSCluster:kill_ps(i, sig) return C.kill(self.ps_pids[i + 1], sig or "KILL") end

function PSCluster:shutdown()
  if not self._main and not self._procs then return end
  self._closing = true
  if self._main then for r = 1, self.workers do pcall(self._main.send, self._main, r, "quit", "") end end
  for _, c in ipairs(self._ps or {}) do pcall(c.send, c, 0, "quit", "") end
  if self._procs then
    local t0 = ldist.clock()
    while self._procs:running() > 0 and ldist.clock() - t0 < 3 do pcall(self._forward, self, 0.05) end
    pcall(self._forward, self, 0)
    self._procs:close(1)
    self._procs = nil
  end
  for _, c in ipairs(self._ps or {}) do pcall(c.close, c) end
  self._ps = {}
  if self._main then self._main:close(); self._main = nil end
end
PSCluster.__close = PSCluster.shutdown
PSCluster.__gc = function(self) pcall(PSCluster.shutdown, self) end
function PSCluster.__tostring(self)
  if not self._main then return "<LocalCluster (shut down)>" end
  local p = {}
  for _, pid in ipairs(self.pids) do p[#p + 1] = tostring(pid) end
  for _, pid in ipairs(self.ps_pids) do p[#p + 1] = tostring(pid) end
  return ("<LocalCluster of %d workers and %d ps tasks (pids %s)>"):format(self.workers, self.num_ps, table.concat(p, ", "))
end
function PSCluster:alive()
  local k = 0
  for i = 0, self.workers - 1 do if self:worker_alive(i) then k = k + 1 end end
  return k
end

local prev_local = distribute.LocalCluster
distribute.LocalCluster = function(opts)
  if type(opts) == "table" and opts.ps and opts.ps ~= 0 then return start_local(opts) end
  return prev_local(opts)
end
docs[distribute.LocalCluster] = (docs[prev_local] or "distribute.LocalCluster{workers=2}") ..
  "\n\nWith ps=P (distribute.LocalCluster{workers=W, ps=P}) it starts W workers and P parameter servers\n" ..
  "for distribute.ParameterServerStrategy(lc); lc:kill_worker(i), lc:kill_ps(i) send SIGKILL (fault drills)."
docs["distribute.LocalCluster"] = docs[distribute.LocalCluster]

-- TF_CONFIG with "ps" tasks: {"cluster": {"chief": [...], "worker": [...], "ps": [...]}, "task": {...}}
local function ps_tf_config(cfg)
  if type(cfg) == "string" then
    local v, err = C.json_decode(cfg)
    if v == nil then error("TF_CONFIG is not valid JSON: " .. tostring(err), 0) end
    cfg = v
  end
  local cl = cfg.cluster or {}
  local chief = cl.chief and cl.chief[1]
  if not chief then error("ParameterServerStrategy: TF_CONFIG needs a \"chief\" task (the coordinator)", 0) end
  if type(cl.ps) ~= "table" or #cl.ps == 0 then error("ParameterServerStrategy: TF_CONFIG lists no \"ps\" task", 0) end
  if type(cl.worker) ~= "table" or #cl.worker == 0 then error("ParameterServerStrategy: TF_CONFIG lists no \"worker\" task", 0) end
  local task = cfg.task or {}
  return { main = chief, ps_addrs = cl.ps, workers = #cl.worker, task_type = task.type or "chief",
    task_index = math.tointeger(task.index or 0) or 0 }
end
distribute._ps_tf_config = ps_tf_config

-- A cluster from TF_CONFIG: the chief is the coordinator; workers and ps tasks
-- serve (and this call never returns on them: the process exits, as TF's
-- server.join() does).
local function from_tf_config(cfg, opts)
  local spec = ps_tf_config(cfg)
  local secret = read_secret()
  local timeout = opts.timeout or tonumber(env("LDIST_TIMEOUT") or "") or 30
  if spec.task_type == "worker" or spec.task_type == "ps" then
    join_as(spec.task_type, spec.task_index, { secret = secret, timeout = timeout, workers = spec.workers,
      main = spec.main, ps_addrs = spec.ps_addrs })
    os.exit(0)
  end
  local self = setmetatable({ workers = spec.workers, num_workers = spec.workers, num_ps = #spec.ps_addrs,
    pids = {}, ps_pids = {}, ps_addresses = spec.ps_addrs, _main_addr = spec.main, _timeout = timeout, _dead = {} }, PSCluster)
  coordinator_join(self, secret, timeout)
  for r = 1, self.workers do self.pids[r] = self._main:peer_pid(r) end
  for p = 1, self.num_ps do self.ps_pids[p] = self._ps[p]:peer_pid(0) end
  return self
end

---------------------------------------------------------------- the strategy
local PS = setmetatable({}, { __index = StrategyBase })
PS.__index = PS
PS.__name = "ldist.ParameterServerStrategy"
PS.__tostring = function(s)
  return ("<ParameterServerStrategy: %d workers, %d ps>"):format(s._cl.workers, s._cl.num_ps)
end
distribute.ParameterServerStrategyClass = PS

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
  return setmetatable({ kind = "ParameterServerStrategy", devices = { "cpu:0" }, num_replicas_in_sync = cl.workers,
    extended = { should_checkpoint = true, cluster = cl }, cluster_resolver = { task_type = "chief", num_workers = cl.workers,
      num_ps = cl.num_ps }, _depth = 0, _cl = cl, _partitioner = opts.variable_partitioner,
    _checkpoint_dir = opts.checkpoint_dir, _ps_strategy = true, _req = 0 }, PS)
end

function PS:shutdown() if self._cl then self._cl:shutdown() end end

-- request/response with the ps tasks from the coordinator
function PS:_ask(requests, reply_type)
  local cl = self._cl
  self._req = self._req + 1
  local req = self._req
  for p, body in pairs(requests) do
    cl:_check_ps()
    body.req = req
    local ty = body._type
    body._type = nil
    cl._ps[p]:send(0, ty, C.pack(body))
  end
  local out = {}
  for p in pairs(requests) do
    local t0 = ldist.clock()
    while not out[p] do
      cl:_check_ps()
      local ok, from, ty, b = pcall(cl._ps[p].recv_any, cl._ps[p], 0.1)
      if not ok then cl:_check_ps(); error(from, 0) end
      if from then
        local m = C.unpack(b)
        if ty == reply_type and m.req == req then out[p] = m end
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
  local layout, per_ps, rr = {}, {}, 0
  for i, v in ipairs(model.trainable_variables) do
    local shape = v.shape
    local n = 1
    if self._partitioner and v.ndim >= 1 then n = math.max(1, math.min(self._partitioner(shape, 4), shape[1])) end
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
    end
  end
  local reqs = {}
  for p = 1, cl.num_ps do
    reqs[p] = { _type = "init", vars = per_ps[p] or {}, optimizer = C.optimizer_config(model._optimizer),
      checkpoint_dir = self._checkpoint_dir }
  end
  local got = self:_ask(reqs, "init_ok")
  self.restored = got[1].restored
  self.restored_optimizer = got[1].slots
  local spec = { model = describe_model(model), loss = C.loss_config(model._loss), layout = layout }
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
  for p, list in pairs(by) do
    local names = {}
    for i, sh in ipairs(list) do names[i] = sh.name end
    reqs[p] = { _type = "pull", names = names }
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

function PS:run()
  error("ParameterServerStrategy: schedule functions with distribute.ClusterCoordinator(strategy):schedule(fn, args)", 2)
end

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
    _queue = {}, _busy = {}, _tasks = {}, _next = 0, _ds = 0, _datasets = {}, scheduled = 0, completed = 0,
    rescheduled = 0, failed = 0 }, Coord)
  strategy._coordinator = self
  return self
end

-- send a setup message to every live worker and wait for the answers
function Coord:_broadcast(ty, body)
  local cl = self.cluster
  local packed = C.pack(body)
  local want = {}
  for w = 0, cl.workers - 1 do
    if cl:worker_alive(w) then cl._main:send(w + 1, ty, packed); want[w + 1] = true end
  end
  local t0 = ldist.clock()
  while next(want) do
    self:_pump(0.05, { op = ty, want = want })
    if ldist.clock() - t0 > cl._timeout then error(("ClusterCoordinator: the workers did not answer '%s'"):format(ty), 0) end
  end
end

function Coord:create_per_worker_dataset(src)
  self._ds = self._ds + 1
  local body = { id = self._ds }
  if type(src) == "function" then body.fn = ship_fn(src, "the dataset function")
  else
    if type(src) == "table" and src.dataset then src = src.dataset end
    body.recipe = distribute._recipe_of(src)
    body.shard, body.workers = true, self.cluster.workers
  end
  self._datasets[self._ds] = body
  self:_broadcast("dataset", body)
  return setmetatable({ __per_worker = self._ds, coordinator = self }, PerWorker)
end
-- iter(per_worker_dataset): TF's per-worker iterator; the same object here
function PerWorker:iter() return self end
PerWorker.__call = PerWorker.iter

local function in_flight(self)
  local n = 0
  for _ in pairs(self._busy) do n = n + 1 end
  return n
end

-- hand queued tasks to idle live workers
function Coord:_dispatch()
  local cl = self.cluster
  local limit = self.max_staleness and (self.max_staleness + 1) or math.huge
  for w = 0, cl.workers - 1 do
    if #self._queue == 0 then return end
    if in_flight(self) >= limit then return end
    if not self._busy[w] and cl:worker_alive(w) then
      local t = table.remove(self._queue, 1)
      t.worker, t.tries = w, t.tries + 1
      self._busy[w] = t
      cl._main:send(w + 1, "task", t.packed)
    end
  end
end

-- one round: output, dead processes, replies; `setup` collects setup answers
function Coord:_pump(timeout, setup)
  local cl = self.cluster
  cl:_check_ps()
  -- a dead worker: its task goes back to the queue (at-least-once)
  for w = 0, cl.workers - 1 do
    if not cl:worker_alive(w) then
      if setup then setup.want[w + 1] = nil end
      local t = self._busy[w]
      if t then
        self._busy[w] = nil
        t.worker = nil
        self.rescheduled = self.rescheduled + 1
        table.insert(self._queue, 1, t)
      end
    end
  end
  if cl:alive() == 0 then
    error("ClusterCoordinator: every worker is gone (" .. (next(cl._dead) and table.concat((function()
      local l = {}; for _, v in pairs(cl._dead) do l[#l + 1] = v end; return l end)(), "; ") or "lost") .. ")", 0)
  end
  self:_dispatch()
  local from, ty, body = cl._main:recv_any(timeout)
  if not from then return end
  local m = C.unpack(body)
  local w = from - 1
  if m.op == "task" then
    local t = self._busy[w]
    if t and t.id == m.task then
      self._busy[w] = nil
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
  elseif setup and m.op == setup.op then
    if not m.ok then error(("worker %d: %s"):format(w, tostring(m.error)), 0) end
    setup.want[from] = nil
  end
end

-- coordinator:schedule(fn, args) -> RemoteValue: fn runs on some worker with args
-- (a per-worker dataset arrives there as that worker's iterator: call it for a batch)
function Coord:schedule(fn, args)
  if self.strategy._model == nil then
    error("ClusterCoordinator:schedule: no model is placed on the ps tasks yet; create and compile it under " ..
      "strategy:scope() and call coordinator:place(model) (model:fit does)", 2)
  end
  local key = self._fn_cache and self._fn_cache[fn]
  if not key then
    self._fn_cache = self._fn_cache or setmetatable({}, { __mode = "k" })
    key = fn == distribute.ps_train_step and string.dump(fn) or ship_fn(fn, "a scheduled function")
    self._fn_cache[fn] = key
  end
  args = args or {}
  local a = { n = #args }
  for i = 1, #args do
    local v = args[i]
    a[i] = getmetatable(v) == PerWorker and { __per_worker = v.__per_worker } or v
  end
  self._next = self._next + 1
  local t = { id = self._next, state = "pending", tries = 0 }
  t.packed = C.pack({ task = t.id, fn = key, args = a })
  self._tasks[t.id] = t
  self._queue[#self._queue + 1] = t
  self.scheduled = self.scheduled + 1
  self:_dispatch()
  self:_pump(0)
  return setmetatable({ _t = t, _c = self }, RemoteValue)
end

function Coord:place(model) self.strategy:_place(model) end

function Coord:join()
  while #self._queue > 0 or next(self._busy) do self:_pump(0.05) end
  for id, t in pairs(self._tasks) do
    if t.state == "failed" then
      self._tasks[id] = nil
      error("ClusterCoordinator: a scheduled function failed: " .. tostring(t.error), 2)
    end
  end
  self._tasks = {}
end
function Coord:done() return #self._queue == 0 and not next(self._busy) end

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

function Coord:stats()
  local st = self.strategy:ps_stats()
  return { scheduled = self.scheduled, completed = self.completed, rescheduled = self.rescheduled, failed = self.failed,
    applied = st[1].applied, unique = st[1].unique, duplicates = st[1].duplicates, ps = st }
end

---------------------------------------------------------------- model:fit under the strategy
local Model = nn.Model
local made_in = setmetatable({}, { __mode = "k" })
local prev_compile = Model.compile
function Model:compile(opts)
  local r = prev_compile(self, opts)
  local s = distribute.get_strategy()
  if s and s._ps_strategy then made_in[self] = s end
  return r
end
rewrap(prev_compile, Model.compile)

local prev_fit = Model.fit
function Model:fit(x, y, opts)
  local s = made_in[self]
  local cur = distribute.get_strategy()
  if not s and cur and cur._ps_strategy then s = cur end
  if not s then return prev_fit(self, x, y, opts) end
  if type(y) == "table" and not tensor.is_tensor(y) and opts == nil then opts, y = y, nil end
  opts = opts or {}
  local ds = x
  if tensor.is_tensor(x) then
    ds = data.Dataset.from_tensor_slices({ x, y })
    if opts.shuffle ~= false then ds = ds:shuffle(x.shape[1], { seed = opts.seed or 0 }) end
    ds = ds:batch(opts.batch_size or 32)
  end
  local steps = opts.steps_per_epoch
  if not steps then
    error("model:fit under ParameterServerStrategy needs steps_per_epoch (the workers read their datasets endlessly)", 2)
  end
  if not self.built then
    for b in ds do self:build((function() local sh = {}; for d = 2, b[1].ndim do sh[d - 1] = b[1].shape[d] end; return sh end)()); break end
  end
  s:_place(self)
  local coord = distribute.ClusterCoordinator(s)
  local pwd = coord:create_per_worker_dataset(ds)
  local epochs = opts.epochs or 1
  local verbose = opts.verbose == nil and 1 or opts.verbose
  local history = { loss = {} }
  for e = (opts.initial_epoch or 0) + 1, epochs do
    local t0 = ldist.clock()
    local rvs = {}
    for k = 1, steps do rvs[k] = coord:schedule(distribute.ps_train_step, { pwd }) end
    coord:join()
    local sum = 0
    for k = 1, steps do sum = sum + rvs[k]:fetch() end
    history.loss[#history.loss + 1] = sum / steps
    if s._checkpoint_dir then s:checkpoint() end
    for _, cb in ipairs(opts.callbacks or {}) do
      if cb.on_epoch_end then pcall(cb.on_epoch_end, cb, e, { loss = sum / steps }, self) end
    end
    if verbose ~= 0 then
      print(("Epoch %d/%d - %d steps - loss %.4f - %.1f s"):format(e, epochs, steps, sum / steps, ldist.clock() - t0))
    end
  end
  s:_fetch_into(self)
  self.history = history
  return history
end
rewrap(prev_fit, Model.fit)

---------------------------------------------------------------- documentation
local function doc(obj, name, text) docs[name] = text; if obj then docs[obj] = text end end
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
  "worker dies runs again on another (at-least-once); coordinator:stats() counts duplicates.\n" ..
  "max_staleness=k: at most k+1 functions in flight (0: synchronous SGD).")
