-- distribute/ps_tasks.lua - the processes of parameter-server training: ps tasks
-- (which hold the variables and apply pushed gradients), workers (which run
-- scheduled functions), and the cluster of them as the coordinator sees it
-- (a LocalCluster with ps tasks, or TF_CONFIG). The strategy and the
-- coordinator are in distribute/parameter_server.lua.
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
-- Between processes of one host the tensors of pulls and pushes go through a
-- shared-memory segment per (client, ps) pair, and the requests themselves
-- through its mailbox (see "the data path" below, engine/net/ld_ps_shm.c);
-- elsewhere tensors travel as raw float32 bytes inside C.pack frames.
-- Receives that must survive a dead worker use c:recv_any
-- (engine/ld_cluster_ps.c). The coordinator keeps up to two tasks on each
-- worker (distribute/parameter_server.lua), and a worker whose next task is already
-- there sends that task's pull right behind its push (W:_push_pull).
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

local net = distribute._net
local env, ship_fn, share = net.env, net.ship_fn, ldist._util.share
local D = ldist._distribute
local ps = {}          -- what distribute/parameter_server.lua uses of this file
net.ps = ps

-- Traces (strategy:trace(true) at the coordinator, distribute/parameter_server.lua):
-- each process keeps its spans {kind, start, end, step, bytes=, note=, mark=}
-- (step: the coordinator's task number) and sends them back, with its clock
-- and boot id (the same boot id: the same monotonic clock), when asked.
local boot_id = ldist._util.boot_id
local function trace_reply(spans)
  return { spans = spans, boot = boot_id(), clock = ldist.clock(), pid = C.getpid() }
end
local function nbytes(list)
  local b = 0
  for _, t in pairs(list) do b = b + 4 * t:numel() end
  return b
end

---------------------------------------------------------------- the data path
-- Between processes of one host the tensors of pulls and pushes go through a
-- shared-memory segment per (client, ps task) pair (engine/net/ld_ps_shm.c):
-- the client (coordinator or worker) makes it, and its requests name it (with
-- a random tag, in the authenticated control message); the ps task maps it at
-- the first such request and writes the values of a pull there, or reads the
-- gradients of a push from there; the control messages carry only names,
-- offsets and shapes. A ps task that cannot map it (another host) answers
-- noshm, and that pair goes on over the network (tensors inside the control
-- messages). LDIST_PS_TRANSPORT=tcp keeps every pair on the network.
local function shm_wanted() return env("LDIST_PS_TRANSPORT") ~= "tcp" and C.shm_create ~= nil end
local function align(n) return (n + 63) // 64 * 64 end
local MSG_MAX = 8000   -- bytes: the largest request or answer that goes through a mailbox
local function shape_of(t) local s = {}; for i = 1, t.ndim do s[i] = t.shape[i] end; return s end

-- bytes of shard sh of variable v (float32)
local function shard_bytes(v, sh)
  local n = v:numel()
  if not sh.whole and v.ndim >= 1 and v.shape[1] > 0 then n = n // v.shape[1] * (sh.hi - sh.lo) end
  return align(4 * n)
end
ps.shard_bytes = shard_bytes

-- owner._links[p]: {seg=, desc=} (a live link), false (the network path)
local function link(owner, p, bytes)
  owner._links = owner._links or {}
  local l = owner._links[p]
  if l == false or not shm_wanted() then return nil end
  if l and l.seg:size() >= bytes then return l end
  if l then l.seg:close() end
  local seg = C.shm_create(math.max(4096, bytes))
  if not seg then owner._links[p] = false; return nil end
  l = { seg = seg, desc = { name = seg:name(), tag = seg:tag(), size = seg:size() } }
  owner._links[p] = l
  return l
end

-- the packed request r ({_type=, names=, grads= (push), bytes= (pull: the
-- bytes of the values asked for)}) for ps task p
local function encode(owner, p, r, req)
  local body = {}
  for k, v in pairs(r) do if k ~= "_type" and k ~= "bytes" then body[k] = v end end
  body.req = req
  local need = r.bytes or 0
  if r.grads then for _, g in ipairs(r.grads) do need = need + align(4 * g:numel()) end end
  local l = need > 0 and link(owner, p, need)
  if l then
    body.shm = l.desc
    if r.grads then
      local at, shapes, off = {}, {}, 0
      for i, g in ipairs(r.grads) do
        at[i], shapes[i] = off, shape_of(g)
        off = off + align(l.seg:write(off, g))
      end
      body.grads, body.at, body.shapes = nil, at, shapes
      owner.shm_bytes = (owner.shm_bytes or 0) + off
    end
  end
  return C.pack(body)
end
-- an answer: its values (pull), from the segment or the message; nil when the
-- ps could not map the segment (then this pair uses the network from now on).
-- view: the values from the segment are views over it, not copies: only for a
-- reader that consumes them before its next request on this link (a worker's
-- pull assigning its variables), since the ps writes the next answer there
local function decode(owner, p, m, view)
  local l = owner._links and owner._links[p]
  if m.noshm then
    if l then l.seg:close() end
    owner._links[p] = false
    return nil
  end
  if l then l.seg:unlink(); l.ok = true end   -- the ps has it mapped (or never will): no name left behind
  if not m.at then return m.values or {} end
  local out = {}
  for i, off in ipairs(m.at) do
    out[i] = view and l.seg:view(off, m.shapes[i]) or l.seg:tensor(off, m.shapes[i])
    owner.shm_bytes = (owner.shm_bytes or 0) + 4 * out[i]:numel()
  end
  return out
end
ps.encode, ps.decode = encode, decode

-- The mailbox: once the ps has mapped the segment (an answer came), a
-- request of at most MSG_MAX bytes goes in the segment's mailbox instead of
-- the control plane, when `slots` slots are free there (a request and the
-- one posted right behind it must travel the same way: the ps answers each
-- way in order). -> the segment, or nil (use the control plane)
local function mailbox(owner, p, slots, ty, ...)
  if env("LDIST_PS_MAILBOX") == "0" or not (ty == "pull" or ty == "push" or ty == "stats") then return nil end
  local l = owner._links and owner._links[p]
  if not (l and l.ok) or l.seg:room() < slots then return nil end
  for i = 1, select("#", ...) do if #select(i, ...) > MSG_MAX then return nil end end
  return l.seg
end
ps.mailbox = mailbox

-- the next answer from ps p: from its mailbox box[p] (a "ctl" there: this
-- one came by the control plane, too large for a slot) or the control
-- plane; recv(): from, type, body | nil. pend[p]: answers owed by the control plane
local function next_answer(box, pend, p, wait_s, recv, ctl)
  if box[p] and (pend[p] or 0) == 0 then
    local ty, b
    if ctl then   -- a worker: wait in slices, and give up at once when the ps is lost
      local t0 = ldist.clock()
      repeat
        ty, b = box[p]:wait(math.min(0.5, wait_s))
        if not ty and ctl:peer_state(0) == "lost" then error(("ps task %d is lost"):format(p - 1), 0) end
      until ty or ldist.clock() - t0 >= wait_s
    else ty, b = box[p]:wait(wait_s) end
    if ty ~= "ctl" then return ty, b end
    pend[p] = (pend[p] or 0) + 1
  end
  local from, ty, b = recv()
  if from and pend[p] then pend[p] = pend[p] - 1 end
  return ty, b
end
ps.next_answer = next_answer
function ps.close_links(owner)
  for _, l in pairs(owner._links or {}) do if l then l.seg:close() end end
  owner._links = {}
end
ps.shm_wanted, ps.MSG_MAX = shm_wanted, MSG_MAX

-- The task link: between the coordinator and a worker of the same host,
-- tasks and their replies go through a mailbox in a shared-memory segment
-- (the coordinator's, as a client's to a ps task) instead of the control
-- plane, whose thread hops (coordinator, its control thread and ZeroMQ's,
-- then the worker's) cost more than the messages: a task and its reply are
-- two wake-ups, not a dozen. The coordinator sends "tasklink" (the
-- segment's name and tag) over the control plane; the worker maps it and
-- writes its doorbell there; from then on the coordinator posts tasks in
-- it and rings; the worker answers each with its reply (or "ctl": too
-- large for a slot, sent over the control plane) and rings the
-- coordinator's doorbell. Setup messages (model, datasets, traces) stay on
-- the control plane. A worker on another host cannot map it: the tasks keep
-- the control plane.

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

---------------------------------------------------------------- shipping functions, models
local describe_model = function(model) return distribute._describe_model(model, false) end
local build_model = distribute._build_model
local build_optimizer = distribute._build_optimizer

-- ps training always has several processes: a secret is required
local function read_secret() return net.read_secret(2) end

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
  -- the other workers' batches are skipped without being built where the
  -- dataset can (it:_skip(): a batch of rows draws its row numbers only)
  local function pass()
    for _ = 1, 2 do
      if not f then f, st, c = ds:iter() end
      if type(f) == "userdata" and f._skip then
        if f:_skip() then return end
      elseif f(st, c) ~= nil then return end
      f = nil
    end
    error("the per-worker dataset is empty", 0)
  end
  local first = true
  return function()
    local skip = first and w or n - 1
    first = false
    for _ = 1, skip do pass() end
    return nxt()
  end
end

---------------------------------------------------------------- a ps task
local function ps_serve(me, ctl, nworkers)
  local vars, names, opt = {}, {}, nil
  local applied, tasks, dups = 0, {}, 0
  local spans   -- while tracing: one "apply" span per push
  local ckpt
  local links, shm_bytes, net_bytes = {}, 0, 0   -- the clients' segments (by rank), bytes moved
  local bell
  local function seg_of(from, d)   -- the segment a request names; false: not on this host
    local l = links[from]
    if l and l.name == d.name then return l.seg end
    if l then l.seg:close(); links[from] = nil end
    local seg = C.shm_open(tostring(d.name), tostring(d.tag), math.tointeger(d.size) or -1)
    if not seg then return false end
    links[from] = { name = d.name, seg = seg }
    if bell then seg:set_bell(bell:path()) end   -- from now on the client may post its requests there
    return seg
  end
  local function save(dir)
    dir = dir or ckpt
    if not dir then return false end
    ldist.io._mkdir_p(dir)
    local t, list = {}, {}
    for n, v in pairs(vars) do t[n] = v; list[#list + 1] = n end
    table.sort(list)
    -- the optimizer's slots (momentum, Adam's m and v, amsgrad's max) travel with the shards
    local iterations, accum_calls = 0, nil
    if opt and #list > 0 then
      local vl = {}
      for i, n in ipairs(list) do vl[i] = vars[n] end
      local st = ldist.optim._state(opt, vl)
      iterations, accum_calls = st.iterations or 0, st.accum_calls
      for i, n in ipairs(list) do
        for q = 1, ldist.optim._n_slots do if st.slots[i] and st.slots[i][q] then t[n .. "#slot" .. q] = st.slots[i][q] end end
      end
    end
    ldist.io.save_safetensors(("%s/ps-%d.safetensors"):format(dir, me), t,
      { applied = tostring(applied), duplicates = tostring(dups), iterations = tostring(iterations),
        accum_calls = accum_calls and tostring(accum_calls) or nil })
    return true
  end
  -- one request (type ty, packed body) from rank `from`; via: the segment
  -- whose mailbox it came through (the answer goes there), or nil (the
  -- control plane)
  local function handle(from, ty, body, via)
    local function reply(rty, packed)
      if via and #packed <= MSG_MAX then via:answer(rty, packed); return end
      ctl:send(from, rty, packed)
      -- too large for the mailbox: the answer went by the control plane, and the mailbox says so
      if via then via:answer("ctl", "") end
    end
    local okm, m = pcall(C.unpack, body)
    if not okm or type(m) ~= "table" then return end
    local seg = m.shm and seg_of(from, m.shm)
    if seg == false then   -- another host: the client goes on over the network
      reply(ty == "push" and "ack" or "vals", C.pack({ req = m.req, noshm = true }))
      return
    end
    if ty == "push" then
      local g, v = {}, {}
      for i, n in ipairs(m.names) do
        if not vars[n] then error("push of an unknown variable " .. tostring(n), 0) end
        -- from the segment: a view, no copy (the client writes there again only after the answer,
        -- and the update below is done before it goes)
        if seg then g[i] = seg:view(m.at[i], m.shapes[i])
        else g[i] = m.grads[i] end
        v[i] = vars[n]
        if seg then shm_bytes = shm_bytes + 4 * g[i]:numel() else net_bytes = net_bytes + 4 * g[i]:numel() end
      end
      local t0 = spans and ldist.clock()
      optim._apply_gradients(opt, g, v)
      applied = applied + 1
      if t0 then
        local who = from == 1 and "the coordinator" or ("worker %d"):format(from - 2)   -- ranks: 0 ps, 1 coordinator, 2.. workers
        spans[#spans + 1] = { "apply", t0, ldist.clock(), m.task or 0, bytes = nbytes(g),
          note = ("the push of %s: version %d -> %d"):format(who, applied - 1, applied) }
      end
      if m.task then
        if tasks[m.task] then dups = dups + 1 end
        tasks[m.task] = (tasks[m.task] or 0) + 1
      end
      reply("ack", C.pack({ req = m.req, version = applied }))
    elseif ty == "pull" then
      local out, need = {}, 0
      for i, n in ipairs(m.names) do
        out[i] = vars[n]
        if not out[i] then error("pull of an unknown variable " .. tostring(n), 0) end
        need = need + align(4 * out[i]:numel())
      end
      if seg and need <= seg:size() then
        local at, shapes, off = {}, {}, 0
        for i, t in ipairs(out) do
          at[i], shapes[i] = off, shape_of(t)
          off = off + align(seg:write(off, t))
        end
        shm_bytes = shm_bytes + need
        reply("vals", C.pack({ req = m.req, at = at, shapes = shapes, version = applied }))
      else
        net_bytes = net_bytes + need
        reply("vals", C.pack({ req = m.req, values = out, version = applied }))
      end
    elseif ty == "init" then
      for _, v in pairs(vars) do ldist.nn._constrain(v, nil) end   -- a model before this one: its constraints go
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
          for i, n in ipairs(list) do
            vl[i] = vars[n]
            slots[i] = {}
            for q = 1, ldist.optim._n_slots do slots[i][q] = t[n .. "#slot" .. q] end
          end
          applied = tonumber(meta and meta.applied or 0) or 0
          dups = tonumber(meta and meta.duplicates or 0) or 0
          if #list > 0 and t[list[1] .. "#slot1"] then
            slots_restored = pcall(ldist.optim._set_state, opt, vl,
              { iterations = tonumber(meta and meta.iterations or 0) or 0, slots = slots,
                accum_calls = meta and meta.accum_calls and math.tointeger(tonumber(meta.accum_calls)) })
          end
        end
      end
      if not restored then for n, v in pairs(m.vars) do vars[n] = v:contiguous():clone() end end
      for n, con in pairs(m.constraints or {}) do ldist.nn._constrain(vars[n], con) end   -- after each update here
      reply("init_ok", C.pack({ req = m.req, restored = restored, slots = slots_restored, applied = applied }))
    elseif ty == "save" then
      local okS, err = pcall(save, m.dir)
      reply("saved", C.pack({ req = m.req, ok = okS, error = not okS and tostring(err) or nil }))
    elseif ty == "finalize" then   -- the end of fit: use_ema's averages into the variables held here
      local vl = {}
      for _, v in pairs(vars) do vl[#vl + 1] = v end
      local okF, err = pcall(ldist.optim._finalize, opt, vl)
      reply("finalized", C.pack({ req = m.req, ok = okF, error = not okF and tostring(err) or nil }))
    elseif ty == "trace" then   -- on: start afresh; off: stop and send the spans
      local out = spans
      spans = m.on and {} or nil
      reply("trace_ok", C.pack({ req = m.req, trace = trace_reply(out or {}) }))
    elseif ty == "stats" then
      local uniq = 0
      for _ in pairs(tasks) do uniq = uniq + 1 end
      reply("stats", C.pack({ req = m.req, applied = applied, iterations = opt and opt.iterations, unique = uniq,
        duplicates = dups, pid = C.getpid(),
        shm_bytes = shm_bytes, net_bytes = net_bytes }))
    end
  end
  -- the doorbell of the clients' mailboxes (engine/net/ld_ps_shm.c); none: the control plane only
  bell = shm_wanted() and C.ps_bell() or nil
  while true do
    local ready = bell and C.ps_wait(ctl, bell, 0.5) or 1
    if ready >= 2 then
      bell:drain()
      local segs = {}
      for from, l in pairs(links) do segs[#segs + 1] = { from, l.seg } end
      for _, e in ipairs(segs) do
        while true do
          local okt, ty, body = pcall(e[2].take, e[2])
          if not okt or not ty then break end
          handle(e[1], ty, body, e[2])
        end
      end
    end
    local ok, from, ty, body = true, nil, nil, nil
    if ready % 2 == 1 then ok, from, ty, body = pcall(ctl.recv_any, ctl, bell and 0 or 0.5) end
    if not ok then io.stderr:write("ldist ps: " .. tostring(from) .. "\n"); os.exit(1) end
    local cs = ctl:peer_state(1)
    if cs == "lost" then io.stderr:write("ldist ps: the coordinator is gone; exiting\n"); os.exit(1) end
    if cs == "left" then break end
    if ty == "quit" then break
    elseif ty then handle(from, ty, body, nil) end
  end
  if bell then bell:close(); bell = nil end
end

---------------------------------------------------------------- a worker
local W = { __name = "ldist.ParameterServerWorker" }
W.__index = W
local worker_ctx

-- request/response with ps p: send every request first, then wait for each answer
-- view: the values of a "vals" answer may be views over the link (see decode)
function W:_ask(requests, reply_type, view)
  local out, req = {}, (self._req or 0) + 1
  self._req = req
  local box, pend = {}, {}
  for p, r in pairs(requests) do
    local packed = encode(self, p, r, req)
    local seg = mailbox(self, p, 1, r._type, packed)
    if seg and seg:post(r._type, packed) then box[p] = seg else self.ps[p]:send(0, r._type, packed) end
  end
  for p, r in pairs(requests) do
    local ctl = self.ps[p]
    while not out[p] do
      local ty, b = next_answer(box, pend, p, self.timeout, function() return ctl:recv(self.timeout) end, ctl)
      if ty == nil then error(("ps task %d did not answer within %g s"):format(p - 1, self.timeout), 0) end
      local m = C.unpack(b)
      if ty == reply_type and m.req == req then
        local vals = decode(self, p, m, view)
        if vals then m.values = vals; out[p] = m
        else ctl:send(0, r._type, encode(self, p, r, req)) end   -- the ps cannot map it: over the network
      end
    end
  end
  return out
end

function W:_pull_reqs()
  local reqs = {}
  for p, list in pairs(self.by_ps) do
    local names, bytes = {}, 0
    for i, sh in ipairs(list) do names[i] = sh.name; bytes = bytes + shard_bytes(self.model.trainable_variables[sh.var], sh) end
    reqs[p] = { _type = "pull", names = names, bytes = bytes }
  end
  return reqs
end

-- Pipelined steps: when the next task is already here as a push goes out,
-- the pull of that task goes out with it, right behind it (the ps answers
-- in order: the push is applied first), so a step costs one round trip to
-- each ps, not two. Only with a live shared-memory link to every ps; the
-- values are kept for that task alone. max_staleness=0 never has a next
-- task waiting (one in flight), so it pulls as before.
-- what has come from the coordinator, into self._inbox ({from, type, body,
-- via the task link}): the task link's mailbox, then the control plane;
-- waits up to `timeout` s when nothing has
function W:_fill(timeout)
  local inbox, tl = self._inbox, self._tl
  local r = tl and C.ps_wait(self._main, tl.bell, timeout) or 1
  if r >= 2 then
    tl.bell:drain()
    while true do
      local ty, b = tl.seg:take()
      if not ty then break end
      inbox[#inbox + 1] = { 0, ty, b, true }
    end
  end
  if r % 2 == 1 or r == 0 then   -- nothing at all: recv still reports a coordinator that is gone
    local from, ty, b = self._main:recv(tl and 0 or timeout)
    if from then inbox[#inbox + 1] = { from, ty, b } end
  end
end

function W:_next_task()
  local inbox = self._inbox
  if #inbox == 0 then self:_fill(0) end
  local e = inbox[1]
  if not e or e[2] ~= "task" then return nil end
  if e.m == nil then
    local okm, m = pcall(C.unpack, e[3])
    e.m = okm and type(m) == "table" and m or false
  end
  return e.m and e.m.task
end

function W:_push_pull(push_reqs)
  local nxt = self._main and self.task and self:_next_task()
  if not nxt or nxt == self.task or env("LDIST_PS_PREFETCH") == "0" then return self:_ask(push_reqs, "ack") end
  for p in pairs(self.by_ps) do
    local l = self._links and self._links[p]
    if not (l and l.ok) then return self:_ask(push_reqs, "ack") end
  end
  local pull_reqs = self:_pull_reqs()
  for p, r in pairs(pull_reqs) do   -- one segment holds the push's gradients, then the pull's values
    local need = 0
    for _, g in ipairs(push_reqs[p].grads) do need = need + align(4 * g:numel()) end
    if math.max(need, r.bytes) > self._links[p].seg:size() then return self:_ask(push_reqs, "ack") end
  end
  local rq = (self._req or 0) + 2
  self._req = rq
  local box, pend = {}, {}
  for p, r in pairs(push_reqs) do
    local a, b = encode(self, p, r, rq - 1), encode(self, p, pull_reqs[p], rq)
    local seg = mailbox(self, p, 2, "push", a, b)
    if seg and seg:post("push", a) then
      box[p] = seg
      assert(seg:post("pull", b), "the mailbox refused a request it had room for")
    else
      self.ps[p]:send(0, "push", a)
      self.ps[p]:send(0, "pull", b)
    end
  end
  local acks, vals = {}, {}
  for p in pairs(push_reqs) do
    local ctl = self.ps[p]
    while not (acks[p] and vals[p]) do
      local ty, b = next_answer(box, pend, p, self.timeout, function() return ctl:recv(self.timeout) end, ctl)
      if ty == nil then error(("ps task %d did not answer within %g s"):format(p - 1, self.timeout), 0) end
      local m = C.unpack(b)
      if m.noshm then error("ps task " .. (p - 1) .. " dropped the shared-memory link", 0) end
      if ty == "ack" and m.req == rq - 1 then decode(self, p, m); acks[p] = m
      elseif ty == "vals" and m.req == rq then m.values = decode(self, p, m, true); vals[p] = m end
    end
  end
  self._prefetched = { task = nxt, got = vals }
  return acks
end

-- Traced (self.spans), pull and push record their own spans, whoever calls
-- them: model:fit's step (train_step) and a step written by hand alike; the
-- compute between them is push's to record (see push_spans).
local function read_versions_note(self)
  local l = {}
  for p, v in pairs(self.read_versions or {}) do l[#l + 1] = ("ps %d: %d"):format(p - 1, v) end
  table.sort(l)
  return ("read version %s"):format(table.concat(l, ", "))
end

function W:pull()
  local t0 = self.spans and ldist.clock()
  local pf = self._prefetched
  self._prefetched = nil
  local got
  -- the values are views over the links: assigned below, before the next request
  if pf and pf.task == self.task then got = pf.got else got = self:_ask(self:_pull_reqs(), "vals", true) end
  local vars = self.model.trainable_variables
  self.read_versions, self.pulled_bytes = {}, 0
  for p, list in pairs(self.by_ps) do
    self.read_versions[p] = got[p].version   -- the ps's update count when it sent these weights
    self.pulled_bytes = self.pulled_bytes + nbytes(got[p].values)
    for i, sh in ipairs(list) do
      local v = vars[sh.var]
      if sh.whole then v:assign(got[p].values[i]) else v:slice(0, sh.lo, sh.hi):assign(got[p].values[i]) end
    end
  end
  if t0 then
    local t1 = ldist.clock()
    self.spans[#self.spans + 1] = { "pull", t0, t1, self.task or 0, bytes = self.pulled_bytes, note = read_versions_note(self) }
    self._pulled_at = t1
  end
end

-- the spans of the work between the pull and the push (t0..t1): forward and
-- backward as the engine recorded them (model:fit's step), else one
-- "compute" span (a hand-written step: its phases are not told apart)
local function compute_spans(self, t0, t1)
  local tr, any = self.spans, false
  for _, s in ipairs(D.trace_take("cpu:0")) do
    if s[1] == "forward" or s[1] == "backward" then tr[#tr + 1] = s; any = true end
  end
  if not any and t0 and t1 > t0 then tr[#tr + 1] = { "compute", t0, t1, self.task or 0 } end
end

function W:push(grads, task)
  local t0 = self.spans and ldist.clock()
  if t0 then compute_spans(self, self._pulled_at, t0); self._pulled_at = nil end
  local bytes0 = self.pushed_bytes or 0
  local reqs = {}
  for p, list in pairs(self.by_ps) do
    local names, gs = {}, {}
    for i, sh in ipairs(list) do
      names[i] = sh.name
      local g = grads[sh.var]:cpu()
      gs[i] = sh.whole and g:contiguous() or g:slice(0, sh.lo, sh.hi):contiguous()
    end
    reqs[p] = { _type = "push", names = names, grads = gs, task = task or self.task }
    self.pushed_bytes = (self.pushed_bytes or 0) + nbytes(gs)
  end
  local acks = self:_push_pull(reqs)
  -- staleness: the updates other pushes made between the weights this step
  -- read (the version in the pull's answer) and this one (the ack's version)
  local worst, read, upd = nil, nil, nil
  for p, a in pairs(acks) do
    local r = self.read_versions and self.read_versions[p]
    if r and a.version then
      local st = a.version - 1 - r
      if not worst or st > worst then worst, read, upd = st, r, a.version end
    end
  end
  self.staleness, self.version_read, self.version_updated = worst, read, upd
  if t0 then
    self.spans[#self.spans + 1] = { "push", t0, ldist.clock(), task or self.task or 0, bytes = self.pushed_bytes - bytes0,
      staleness = worst, mark = worst and worst > 0 and ("s" .. worst) or nil,
      note = worst and ("read version %d, updated version %d: staleness %d (updates by others in between)"):format(
        read, upd, worst) or nil }
  end
  return worst
end

-- one step of asynchronous SGD on this worker: pull, gradients on the next batch, push
-- -> the loss; for model:fit (fit = true) also the batch's rows, and with
-- with_pred the labels and the predictions (for its metrics)
function W:train_step(it, fit, with_pred)
  local tr = self.spans
  local t0 = tr and ldist.clock()
  local b = type(it) == "function" and it() or it
  if tr then tr[#tr + 1] = { "input", t0, ldist.clock(), self.task or 0 } end
  local x, y, w = b[1], b[2], b[3]   -- w: sample weights, when the dataset has them
  x, y = self.model:_batch_in_order(x, y, "fit")   -- lists, for a model of several inputs or outputs
  self:pull()                        -- pull and push record their spans (and the forward, backward between)
  local opt = self.model._optimizer
  local lv, grads, pred = self.model:_grads(x, y, self.loss, false, w, opt)   -- forward, backward: recorded on cpu:0
  self.pushed_bytes = 0
  -- a LossScaleOptimizer's step: unscaled here, or skipped (nothing pushed) on an inf or NaN
  grads = ldist.optim._unscale(opt, grads)
  if grads then self:push(grads) end
  if not fit then return lv:item() end
  local nest = ldist._util.nest
  local rows = nest.rows(x)
  local function cpu(t) return t:cpu() end
  if with_pred then return lv:item(), rows, nest.map(y, cpu), nest.map(pred, cpu), nest.map(w, cpu) end
  return lv:item(), rows
end

function distribute.worker_context() return worker_ctx end
-- the function model:fit and coordinator:schedule use for a training step
distribute.ps_train_step = function(it) return ldist.distribute.worker_context():train_step(it) end
distribute._ps_fit_step = function(it) return ldist.distribute.worker_context():train_step(it, true) end
distribute._ps_fit_pred_step = function(it) return ldist.distribute.worker_context():train_step(it, true, true) end

local function worker_serve(me, main, ps, timeout)
  -- A worker's Lua heap is mostly the tensors of finished steps, and each
  -- large tensor made steps the collector (lua_bindings/tensor.c): cycles
  -- that start later (pause 400%) and do more per step (stepmul 400%) cost a
  -- third less of the worker's time here (measured: 2 workers 123k -> 150k
  -- samples/s, the same peak RSS). LDIST_PS_GC=default keeps Lua's defaults.
  if env("LDIST_PS_GC") ~= "default" then collectgarbage("incremental", 400, 400) end
  local self = setmetatable({ index = me, ps = ps, timeout = timeout, datasets = {}, _main = main, _inbox = {} }, W)
  worker_ctx = self
  local fns = {}
  while true do
    local ok, from, ty, body, via = true, nil, nil, nil, nil
    if #self._inbox == 0 then ok, from = pcall(self._fill, self, 1.0) end
    if ok and #self._inbox > 0 then from, ty, body, via = table.unpack(table.remove(self._inbox, 1), 1, 4) end
    if not ok then io.stderr:write("ldist worker: the coordinator is gone; exiting\n"); os.exit(1) end
    if ty == "quit" or (not ty and main:peer_state(0) == "left") then break end
    if ty then
      local okm, m = pcall(C.unpack, body)
      if okm and type(m) == "table" then
        local okj, res = xpcall(function()
          if ty == "setup" then
            self.model = build_model(m.model)
            -- compile's loss (one per output for a model of several): the
            -- optimizer is the parameter servers', this one is never used
            local args = ldist.nn._compile_args(self.model, m.compile)
            -- its loss scale, for a LossScaleOptimizer's: this worker's steps are scaled with it
            args.optimizer = ldist.optim.SGD(m.loss_scale and { loss_scale = m.loss_scale } or nil)
            self.model:compile(args)
            self.loss = self.model._loss
            -- the coordinator's random generator: dropout draws what one process would
            if m.rng then tensor.set_rng_state(m.rng) end
            self.by_ps = {}
            for _, sh in ipairs(m.layout) do
              local l = self.by_ps[sh.ps + 1] or {}
              self.by_ps[sh.ps + 1] = l
              l[#l + 1] = sh
            end
            return true
          elseif ty == "dataset" then
            if m.fn then self.datasets[m.id] = endless(assert(load(m.fn, "=dataset_fn", "b"))(me))
            else
              -- the tensors read from files (Fashion-MNIST, ...) are read once per worker, not at every fit
              self._src_cache = self._src_cache or {}
              local ds = distribute._build_dataset(m.recipe, self._src_cache)
              if m.policy == "FILE" then self.datasets[m.id] = endless(assert(distribute._file_shard(ds, m.workers, me)))
              elseif m.policy == "OFF" or not m.shard then self.datasets[m.id] = endless(ds)
              else self.datasets[m.id] = endless(ds, me, m.workers) end
            end
            return true
          elseif ty == "tasklink" then   -- the coordinator's mailbox for tasks (see "the task link")
            local d = m.shm or {}
            local seg = C.shm_open(tostring(d.name), tostring(d.tag), math.tointeger(d.size) or -1)
            if not seg then return false end   -- another host: tasks keep the control plane
            local bell = self._tl and self._tl.bell or C.ps_bell()
            if not bell then seg:close(); return false end
            if self._tl then self._tl.seg:close() end
            seg:set_bell(bell:path())
            self._tl = { seg = seg, bell = bell }
            return true
          elseif ty == "trace" then   -- on: start afresh; off: stop and send the spans
            local out = self.spans
            self.spans = m.on and {} or nil
            D.trace_enable({ "cpu:0" }, m.on and true or false)
            D.trace_take("cpu:0")
            if not m.on then D.trace_step(0) end
            self.idle_since = nil
            return trace_reply(out or {})
          elseif ty == "task" then
            if self.spans and self.idle_since then   -- idle since the last task's answer
              self.spans[#self.spans + 1] = { "wait", self.idle_since, ldist.clock(), 0, note = "(idle: no task from the coordinator)" }
            end
            self.task = m.task
            -- the engine's spans of this task (forward, backward) carry its number
            if self.spans then D.trace_step(m.task or 0); D.trace_take("cpu:0") end
            self._pulled_at = nil
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
        local packed = C.pack({ task = m.task, op = ty, ok = okj, result = okj and res or nil,
          error = not okj and tostring(res) or nil })
        if via and self._tl and #packed <= MSG_MAX then self._tl.seg:answer("reply", packed)
        else
          main:send(0, "reply", packed)
          -- every request in the mailbox gets its answer there: this one's is on the control plane
          if via and self._tl then self._tl.seg:answer("ctl", "") end
        end
        if ty == "task" and self.spans then self.idle_since = ldist.clock() end
      end
    end
  end
end

-- the main loop of a worker or ps process (LocalCluster or TF_CONFIG)
local function join_as(role, me, cfg)
  io.stdout:setvbuf("line")
  local secret, timeout = cfg.secret, cfg.timeout
  -- started by a LocalCluster, which reports a lost process once itself
  local quiet = env("LDIST_SUPERVISED") == "1"
  if role == "ps" then
    local ctl = C.join { rank = 0, size = cfg.workers + 2, leader = cfg.ps_addrs[me + 1], secret = secret,
      data_plane = false, name = "process", timeout = timeout, rendezvous_timeout = 120, quiet_loss = quiet }
    local ok, err = pcall(ps_serve, me, ctl, cfg.workers)
    if not ok then io.stderr:write("ldist ps: " .. tostring(err) .. "\n") end
    ctl:close()
    return
  end
  local main = C.join { rank = me + 1, size = cfg.workers + 1, leader = cfg.main, secret = secret,
    data_plane = false, name = "process", timeout = timeout, rendezvous_timeout = 120, quiet_loss = quiet }
  local ps = {}
  for p, addr in ipairs(cfg.ps_addrs) do
    ps[p] = C.join { rank = me + 2, size = cfg.workers + 2, leader = addr, secret = secret, data_plane = false,
      name = "process", timeout = timeout, rendezvous_timeout = 120, quiet_loss = quiet }
  end
  worker_serve(me, main, ps, timeout)
  if worker_ctx then
    net.ps.close_links(worker_ctx)
    if worker_ctx._tl then worker_ctx._tl.seg:close(); worker_ctx._tl.bell:close(); worker_ctx._tl = nil end
  end
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
-- the class, and the ps step fit schedules (still there for whoever names it)
ldist.internal(distribute, "PSClusterClass", "ps_train_step")

local describe_exit = net.describe_exit

-- the coordinator's end: join the main cluster (leading it) and every ps cluster
local function coordinator_join(self, secret, timeout)
  -- a LocalCluster's coordinator reports a lost worker once itself (distribute/parameter_server.lua)
  local quiet = self._local
  self._main = C.join { rank = 0, size = self.workers + 1, leader = self._main_addr, secret = secret,
    data_plane = false, name = "process", timeout = timeout, rendezvous_timeout = 120, quiet_loss = quiet }
  self._ps = {}
  for p, addr in ipairs(self.ps_addresses) do
    self._ps[p] = C.join { rank = 1, size = self.workers + 2, leader = addr, secret = secret, data_plane = false,
      name = "process", timeout = timeout, rendezvous_timeout = 120, quiet_loss = quiet }
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
      "LDIST_NUM_THREADS=" .. threads, "LDIST_TIMEOUT=" .. timeout, "TF_CONFIG=", "LDIST_SUPERVISED=1",
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
  net.forward_output(procs, timeout, function(i)
    if i >= self.workers then return "ps " .. (i - self.workers) end
    return "worker " .. i
  end, function(ev, name)
    if not self._closing then self._dead[ev.index + 1] = ("%s (pid %d) %s"):format(name, procs:pid(ev.index), describe_exit(ev)) end
  end)
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
      if self._on_ps_lost then self._on_ps_lost(why) end
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

-- distribute.LocalCluster{workers=, ps=} (distribute/local_cluster.lua) starts this one
distribute._ps_local_cluster = start_local
docs[distribute.LocalCluster] = (docs[distribute.LocalCluster] or "distribute.LocalCluster{workers=2}") ..
  "\n\nWith ps=P (distribute.LocalCluster{workers=W, ps=P}) it starts W workers and P parameter servers\n" ..
  "for distribute.ParameterServerStrategy(lc); lc:kill_worker(i), lc:kill_ps(i) send SIGKILL (fault drills)."
docs["distribute.LocalCluster"] = docs[distribute.LocalCluster]

-- TF_CONFIG with "ps" tasks: {"cluster": {"chief": [...], "worker": [...], "ps": [...]}, "task": {...}}
-- (parsed by the one TF_CONFIG parser, net.tf_config; without a task this
-- process is the chief)
local function ps_tf_config(cfg)
  local parsed = net.tf_config(cfg, "TF_CONFIG")
  local cl = parsed.cluster
  local chief = cl.chief and cl.chief[1]
  if not chief then error("ParameterServerStrategy: TF_CONFIG needs a \"chief\" task (the coordinator)", 0) end
  if type(cl.ps) ~= "table" or #cl.ps == 0 then error("ParameterServerStrategy: TF_CONFIG lists no \"ps\" task", 0) end
  if type(cl.worker) ~= "table" or #cl.worker == 0 then error("ParameterServerStrategy: TF_CONFIG lists no \"worker\" task", 0) end
  local task = parsed.task or { type = "chief", index = 0 }
  return { main = chief, ps_addrs = cl.ps, workers = #cl.worker, task_type = task.type, task_index = task.index }
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

ps.Cluster, ps.from_tf_config = PSCluster, from_tf_config
