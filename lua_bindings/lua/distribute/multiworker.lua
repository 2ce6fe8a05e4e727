-- distribute/multiworker.lua - MultiWorkerMirroredStrategy (TF's
-- tf.distribute.MultiWorkerMirroredStrategy): synchronous data parallelism
-- over several processes, on one machine or many, and LocalCluster, which
-- starts such processes from the REPL or a notebook and trains on them.
--
-- Each process is one replica (cpu:0, or a GPU through NCCL); the processes
-- form a cluster (lua_bindings/cluster.c, engine/ld_cluster.h): rank 0 (TF's
-- chief, else worker 0) leads an authenticated rendezvous, and gradients are
-- summed over a ring of sockets. A step runs the replica function as a
-- coroutine, exactly as MirroredStrategy does; when it yields a collective
-- (optimizer:apply_gradients, all_reduce) the collective runs across the
-- processes and the coroutine resumes.
--
-- The replica context (ldist._distribute.set_replica) is (0, N, global batch):
-- id 0 because it indexes this process's own copies of a variable and makes
-- the optimizer count the step (ld_optimizer_apply commits the step on local
-- replica 0: here the only one); N > 1 and the global batch make the loss
-- the sum over this worker's examples divided by the global batch, so the
-- workers' gradients add up to the gradient of the global mean (TF's rule).
-- The worker's place in the cluster (replica_id_in_sync_group) is its rank.
local ldist = ...
local C, D, distribute, docs = ldist._cluster, ldist._distribute, ldist.distribute, ldist.docs
local tensor, optim = ldist.tensor, ldist.optim
if not C or not D then return end
local net = distribute._net
local env = net.env
local is_pr, per_replica = distribute.is_per_replica, distribute.PerReplica

---------------------------------------------------------------- the strategy
local MW = distribute._strategy_class("ldist.MultiWorkerMirroredStrategy")
MW.__tostring = function(s)
  return ("<MultiWorkerMirroredStrategy: worker %d of %d (%s), %s>"):format(s._rank, s._size,
    s.cluster_resolver.source, s.extended.communication)
end
distribute.MultiWorkerMirroredStrategyClass = MW
ldist.internal(distribute, "MultiWorkerMirroredStrategyClass")

local LocalCluster   -- below

function distribute.MultiWorkerMirroredStrategy(opts)
  opts = opts or {}
  if type(opts) ~= "table" then error("bad argument #1 to 'MultiWorkerMirroredStrategy' (options table expected)", 2) end
  if getmetatable(opts.cluster) == distribute.LocalClusterClass then return opts.cluster:_strategy(opts) end
  local ok, spec = pcall(distribute.resolve_cluster, opts.cluster)
  if not ok then error("MultiWorkerMirroredStrategy: " .. tostring(spec), 2) end
  -- under `ldist launch` stdout is a pipe: send lines as they come
  if env("LDIST_LOCAL_RANK") then io.stdout:setvbuf("line") end
  local timeout = opts.timeout or tonumber(env("LDIST_TIMEOUT") or "") or 30
  local comm = opts.communication or (type(opts.communication_options) == "table" and opts.communication_options.implementation) or "auto"
  comm = tostring(comm):lower()
  if comm ~= "auto" and comm ~= "ring" and comm ~= "nccl" and comm ~= "mpi" then
    error(("bad argument #1 to 'MultiWorkerMirroredStrategy' (communication must be \"auto\", \"ring\", \"nccl\" " ..
      "or \"mpi\", not '%s')"):format(comm), 2)
  end
  if comm == "mpi" then
    local avail, why = C.mpi_available()
    if not avail then error("MultiWorkerMirroredStrategy: communication=\"mpi\" needs an MPI library: " .. why, 2) end
  end
  local device = opts.device or "cpu:0"
  if comm == "nccl" and not opts.device then device = "cuda:" .. (tonumber(env("LDIST_LOCAL_RANK") or "0") or 0) end
  local secret = spec.secret        -- the MPI rendezvous brought rank 0's
  if not secret then
    ok, secret = pcall(net.read_secret, spec.size)
    if not ok then error("MultiWorkerMirroredStrategy: " .. tostring(secret), 2) end
  end
  local c
  ok, c = pcall(C.join, { rank = spec.rank, size = spec.size, leader = spec.leader, listen = spec.listen,
    secret = secret, timeout = timeout, rendezvous_timeout = opts.rendezvous_timeout, heartbeat = opts.heartbeat,
    heartbeat_timeout = opts.heartbeat_timeout, name = "worker", mpi = comm == "mpi",
    -- started by ldist launch or a LocalCluster, which report a lost process once themselves
    quiet_loss = env("LDIST_SUPERVISED") == "1" })
  if not ok then error("MultiWorkerMirroredStrategy: " .. tostring(c), 2) end
  local s = setmetatable({ kind = "MultiWorkerMirroredStrategy", devices = { device }, num_replicas_in_sync = spec.size,
    extended = { should_checkpoint = spec.rank == 0, should_save_summary = spec.rank == 0,
      communication = (comm == "nccl" or comm == "mpi") and comm or "ring", timeout = timeout },
    cluster_resolver = { task_type = spec.task_type, task_id = spec.task_index, rank = spec.rank,
      num_workers = spec.size, cluster_spec = spec.tasks, source = spec.source, pid = C.getpid() },
    _depth = 0, _c = c, _rank = spec.rank, _size = spec.size, _synced = {}, _mw = true,
    _models = {},
    _auto_shard = opts.auto_shard_policy }, MW)
  if comm == "nccl" or (comm == "auto" and device:match("^cuda")) then
    local okn, nc = pcall(c.nccl, c, device)
    if not okn then error("MultiWorkerMirroredStrategy: " .. tostring(nc), 2) end
    s._nccl = nc
    s.extended.communication = "nccl"
  end
  return s
end

function MW:shutdown()
  if self._c then self._c:close() end
  self._nccl = nil
end
MW.__close = MW.shutdown
MW.__gc = MW.shutdown

function MW:is_chief() return self._rank == 0 end
-- fit calls it as each epoch begins (the protocol's fit begin)
function MW:_fit_begin() self._epoch_first = true end

-- How `ldist launch` saw task r die ("worker 1 (pid 4242) was killed by
-- signal 9 (Killed)"), from its notes directory, waiting a moment for it;
-- the lowest surviving rank marks it told, so the launcher adds no line of
-- its own (ld_cluster_launch.c). nil when not under ldist launch.
local function launch_note(rank, r)
  local dir = env("LDIST_LAUNCH_NOTES")
  if not dir or dir == "" then return nil end
  local t0 = ldist.clock()
  repeat
    local f = io.open(("%s/task-%d"):format(dir, r), "r")
    if f then
      local what = f:read("a")
      f:close()
      if rank == (r == 0 and 1 or 0) then
        local told = io.open(dir .. "/told", "w")
        if told then told:close() end
      end
      return what ~= "" and what or nil
    end
    ldist._cluster.sleep(0.02)
  until ldist.clock() - t0 > 1
  return nil
end

-- "worker 1 (pid 4242) is lost" (or, under ldist launch, how it died) when a
-- process of this job is lost (a collective failed because it died), else
-- nil: model:fit's message (keras/training.lua)
function MW:_lost_peer()
  if self._size <= 1 or pcall(self._c.check, self._c) then return nil end
  -- the cluster failed; which peer is lost may reach this rank a moment
  -- later (the leader's notice, when the ring broke elsewhere)
  local t0 = ldist.clock()
  repeat
    for r = 0, self._size - 1 do
      if r ~= self._rank and self._c:peer_state(r) == "lost" then
        return launch_note(self._rank, r) or ("worker %d (pid %d) is lost"):format(r, self._c:peer_pid(r)), r
      end
    end
    ldist._cluster.sleep(0.02)
  until ldist.clock() - t0 > 2
  return nil
end

-- after an error in a replica function this worker takes part in no more
-- collectives (fail-stop)
function MW:_usable()
  if self._broken then
    error(("this worker stopped taking part in collectives after an error in a replica function (%s); " ..
      "the workers no longer agree on where they are"):format(self._broken), 0)
  end
end

-- Sum (mean) a list of tensors across the workers, in place: the ring for host
-- tensors, NCCL for GPU tensors when the strategy has it.
function MW:_all_reduce(list, mean)
  if self._size == 1 or #list == 0 then return list end
  self:_usable()
  for i, t in ipairs(list) do
    if t.dtype ~= "float32" then error(("all_reduce: tensor %d is %s; float32 expected"):format(i, t.dtype), 0) end
    list[i] = t:contiguous()
  end
  if self._nccl and tostring(list[1].device):match("^cuda") then self._nccl:all_reduce(list, mean)
  else self._c:all_reduce(list, mean) end
  return list
end

-- Make every worker's copy of these variables rank 0's (once per variable):
-- TF broadcasts initial values the same way, so workers need not agree on seeds.
function MW:_sync(vars)
  if self._size == 1 then return end
  local todo = {}
  for _, v in ipairs(vars) do
    local id = C.tensor_id(v)
    if not self._synced[id] then todo[#todo + 1] = v; self._synced[id] = true end
  end
  if #todo == 0 then return end
  self:_usable()
  local host, staged = {}, {}
  for i, v in ipairs(todo) do
    if tostring(v.device):match("^cpu") then host[i] = v
    else host[i] = v:cpu():contiguous(); staged[i] = true end
  end
  self._c:broadcast(host, 0)
  for i in pairs(staged) do todo[i]:assign(host[i]:to(todo[i].device)) end
  -- and rank 0's random generator: every worker then draws the same dropout
  -- keys, as one device would for the whole global batch
  tensor.set_rng_state(self._c:broadcast_string(self._rank == 0 and tensor.get_rng_state() or nil, 0))
end

function MW:broadcast(values, root)
  local list = tensor.is_tensor(values) and { values } or values
  self._c:broadcast(list, root or 0)
  return values
end
function MW:barrier() self._c:barrier() end

---------------------------------------------------------------- input: each worker its share
distribute.AutoShardPolicy = ldist.data.experimental.AutoShardPolicy

-- Rows [lo, hi) of a global batch of `rows` that worker r of n takes: floor(rows/n)
-- each, one more for the first rows % n (the split MirroredStrategy uses).
local share = ldist._util.share
-- (an element: a tensor, or a list of elements: {x, y}, {{xa, xb}, y} for a model of two inputs)
local function rows_of(e)
  while not tensor.is_tensor(e) do e = e[1] end
  return e.ndim > 0 and e.shape[1] or 1
end
local function slice_element(e, lo, hi)
  if tensor.is_tensor(e) then return e:slice(0, lo, hi) end
  local out = {}
  for i, t in ipairs(e) do out[i] = slice_element(t, lo, hi) end
  return out
end

-- A dataset made from files: distribute.FileDataset(files, build) where build(list)
-- returns a Dataset reading those files. Auto-sharding by FILE gives each worker
-- its own files (worker r: files r+1, r+1+n, ...).
local FileDataset = distribute._iterable({ __name = "ldist.FileDataset" })
FileDataset.__index = FileDataset
function distribute.FileDataset(files, build)
  if type(files) ~= "table" or #files == 0 then error("bad argument #1 to 'FileDataset' (a list of files expected)", 2) end
  if type(build) ~= "function" then error("bad argument #2 to 'FileDataset' (function(files) -> Dataset expected)", 2) end
  return setmetatable({ files = files, build = build }, FileDataset)
end
function FileDataset:_dataset(files) return self.build(files or self.files) end
function FileDataset:iter() return self:_dataset():iter() end
function FileDataset:cardinality() return self:_dataset():cardinality() end

-- What `for inputs in dist do` yields: a PerReplica of this worker's part; its
-- [1], [2] are the local tensors too, so model:fit can take it as a batch.
local function local_value(s, e, global_batch, offset)
  local v = per_replica({ e }, global_batch, { offset or 0 })
  if tensor.is_tensor(e) then v[1] = e else for i, t in ipairs(e) do v[i] = t end end
  s._local = { x = tensor.is_tensor(e) and e or e[1], gb = global_batch, offset = offset }
  return v
end

local MWDist = distribute._iterable({ __name = "ldist.DistributedDataset" })
MWDist.__index = MWDist
-- the dataset this worker reads: its own files under FILE, else the whole one
function MWDist:_source()
  if self.policy == "FILE" then
    if getmetatable(self.dataset) == FileDataset then
      local s, mine = self.strategy, {}
      for i = s._rank + 1, #self.dataset.files, s._size do mine[#mine + 1] = self.dataset.files[i] end
      return self.dataset:_dataset(mine)
    end
    return self.files_ds
  end
  return getmetatable(self.dataset) == FileDataset and self.dataset:_dataset() or self.dataset
end
function MWDist:iter()
  local s, n, r = self.strategy, self.strategy._size, self.strategy._rank
  local policy = self.policy
  if policy == "FILE" or policy == "OFF" then
    -- TF's rebatching: every batch of B rows this worker reads is split into
    -- n per-replica batches, each one step (FILE: its own files; OFF: all the data)
    -- (the per-replica sizes come from the first batch, and a smaller last
    -- batch fills them in order, as tf.data's rebatch does: [8, 9] of a
    -- batch of 4 over 2 replicas is one step of 2 rows, not two of 1)
    local it = self:_source():iter()
    local pieces, sizes = {}, nil
    return function()
      if #pieces == 0 then
        local e = it()
        if e == nil then return nil end
        local rows = rows_of(e)
        if not sizes then
          sizes = {}
          for q = 0, n - 1 do local lo, hi = share(rows, n, q); sizes[q + 1] = hi - lo end
        end
        local lo = 0
        for q = 1, n do
          local hi = math.min(rows, lo + sizes[q])
          if hi > lo or (q == 1 and rows == 0) then pieces[#pieces + 1] = slice_element(e, lo, hi) end
          lo = hi
        end
      end
      local p = table.remove(pieces, 1)
      return local_value(s, p, rows_of(p) * n)
    end
  end
  local f, st, c = self:_source():iter()
  return function()
    local e = f(st, c)
    c = e
    if e == nil then return nil end
    local rows = rows_of(e)
    local lo, hi = share(rows, n, r)
    return local_value(s, slice_element(e, lo, hi), rows, lo)
  end
end
function MWDist:cardinality()
  if self.policy == "FILE" then return -2 end
  local d = self:_source()
  local c = d.cardinality and d:cardinality() or -2
  if self.policy == "OFF" and c > 0 then return c * self.strategy._size end
  return c
end
-- start (and drop) one iteration: a reshuffling dataset then orders the next
-- epoch as it would have after a full one (BackupAndRestore's resume)
function MWDist:_burn()
  local it = self:_source():iter()
  if type(it) == "userdata" and it.close then it:close() end
end

-- strategy:experimental_distribute_dataset(ds, {auto_shard_policy="AUTO"|"FILE"|"DATA"|"OFF"})
-- The policy is the one given here, else the dataset's (ds:with_options), else
-- the strategy's (MultiWorkerMirroredStrategy{auto_shard_policy=}), else AUTO.
-- As in TF, each global batch of B rows becomes per-replica batches of B/n:
--   FILE: every worker reads its own files (worker r: files r+1, r+1+n, ...) of a
--         data.TextLineDataset, of a list of files opened by interleave or
--         flat_map, or of a distribute.FileDataset; fewer files than workers,
--         or a dataset that reads no files, is an error.
--   DATA: every worker reads every global batch and keeps its 1/n of the rows.
--   AUTO: FILE when the dataset can be split by files, else DATA (as in TF).
--   OFF:  no sharding: every worker reads all the data, each batch split into
--         n steps of B/n rows (so each worker sees every element).
function MW:experimental_distribute_dataset(ds, opts)
  if type(ds) ~= "table" and type(ds) ~= "userdata" then
    error("bad argument #1 to 'experimental_distribute_dataset' (dataset expected)", 2)
  end
  local given = type(opts) == "table" and (opts.auto_shard_policy or opts.policy)
  if not given and type(ds) == "userdata" and ds._auto_shard_policy then given = ds:_auto_shard_policy() end
  local policy = tostring(given or self._auto_shard or "AUTO"):upper()
  if not distribute.AutoShardPolicy[policy] then
    error("bad argument #2 to 'experimental_distribute_dataset' (auto_shard_policy must be AUTO, FILE, DATA or OFF)", 2)
  end
  local n = self._size
  local ok, why, files_ds
  if policy == "AUTO" or policy == "FILE" then
    if getmetatable(ds) == FileDataset then
      ok = #ds.files >= n
      why = ("%d file(s) for %d workers; every worker needs at least one file"):format(#ds.files, n)
    else
      files_ds, why = distribute._file_shard(ds, n, self._rank)   -- this worker's files, or why not
      ok = files_ds ~= nil
    end
  end
  if policy == "AUTO" then policy = ok and "FILE" or "DATA" end
  if policy == "FILE" and not ok then
    error(("auto_shard_policy FILE: the dataset cannot be split by files: %s (use more files, or DATA to shard by rows)")
      :format(why), 2)
  end
  return setmetatable({ dataset = ds, strategy = self, policy = policy, files_ds = files_ds }, MWDist)
end

-- the protocol's input: one pipeline per worker
function MW:_input_pipelines() return self._size, self._rank end
-- the chief (rank 0) writes the job's files and is the source of broadcasts
function MW:_is_writer() return self._rank == 0 end
function MW:_broadcast(v)
  if self._size == 1 then return v end
  return C.unpack(self._c:broadcast_string(self._rank == 0 and C.pack(v) or nil, 0))
end

---------------------------------------------------------------- run, collectives, reduce
-- (a value a replica gives as a number is made a tensor)
local function dedupe(values) return ldist._util.dedupe(values, true) end

function MW:_all_gather(t, axis)
  if (axis or 0) ~= 0 then error("all_gather across workers concatenates along axis 0 only", 0) end
  local n, r = self._size, self._rank
  if n == 1 then return t end
  local dtype = t.dtype
  local x = t:cpu():astype("float32"):contiguous()
  local counts = {}
  for q = 1, n do counts[q] = 0 end
  counts[r + 1] = x.ndim > 0 and x.shape[1] or 1
  local sizes = tensor.new(counts):astype("float32")
  self._c:all_reduce(sizes)
  counts = sizes:totable()
  local total, at = 0, 0
  for q = 1, n do
    local k = math.floor(counts[q] + 0.5)
    if q - 1 < r then at = at + k end
    total = total + k
  end
  local shape = { total }
  for d = 2, x.ndim do shape[d] = x.shape[d] end
  local full = tensor.zeros(shape)
  local k = x.ndim > 0 and x.shape[1] or 1
  if k > 0 then full:slice(0, at, at + k):assign(x:reshape(#shape > 1 and { k, table.unpack(shape, 2) } or { k })) end
  self._c:all_reduce(full)
  return dtype == "float32" and full or full:astype(dtype)
end

function MW:_collective(q)
  if q.kind == "all_reduce" then
    if q.vars then self:_sync(q.vars) end
    local vals = dedupe(q.values)
    local t0 = self._tracing and ldist.clock()
    self:_all_reduce(vals, q.op == "mean")
    if t0 then self:_trace_allreduce(t0, vals) end
    return vals
  elseif q.kind == "all_gather" then
    local out = {}
    for i, v in ipairs(q.values) do out[i] = self:_all_gather(v, q.axis) end
    return out
  end
  error("unknown collective " .. tostring(q.kind), 0)
end

function MW:_run(fn, args)
  local gb, offset
  local a = {}
  local dev = self.devices[1]
  for i = 1, args.n do
    local v = args[i]
    if is_pr(v) then
      a[i] = v.values[1]
      if not gb then gb, offset = v.global_batch, v.offsets and v.offsets[1] end
    else
      if tensor.is_tensor(v) and v.device ~= dev then v = v:to(dev) end
      a[i] = v
    end
  end
  if not gb then   -- plain tensors: each worker's share of an equal split
    for i = 1, args.n do
      local v = a[i]
      local t = tensor.is_tensor(v) and v or (type(v) == "table" and tensor.is_tensor(v[1]) and v[1])
      if t then
        local rows = t.ndim > 0 and t.shape[1] or 1
        gb, offset = rows * self._size, rows * self._rank
        break
      end
    end
  end
  gb = math.tointeger(gb) or 0
  if self._size > 1 then self:_sync_models() end
  local co = coroutine.create(fn)
  self._last_batch = gb
  if self._tracing then self:_trace_step(); self._paths.run = true end
  local ok, res = xpcall(function()
    local input = table.pack(table.unpack(a, 1, args.n))
    D.step_begin(1)
    while true do
      D.set_replica(0, self._size, gb, dev, offset or 0)
      if self._size > 1 then self._c:set_step_reducer(true) end
      local was = D.trace_phase("compute")   -- the replica function's phases are not told apart
      local r = table.pack(coroutine.resume(co, table.unpack(input, 1, input.n)))
      D.trace_phase(was)
      if self._size > 1 then self._c:set_step_reducer(false) end
      D.set_replica(nil)
      if not r[1] then   -- with the replica's frames (state.c)
        error(ldist._keep_traceback(("worker %d: %s"):format(self._rank, tostring(r[2])), co, r[2]), 0)
      end
      if coroutine.status(co) == "dead" then return table.pack(table.unpack(r, 2, r.n)) end
      local q = r[2]
      if type(q) ~= "table" or not q.kind then
        error("a replica function yielded outside a collective; coroutine.yield is not allowed in it", 0)
      end
      input = table.pack(self:_collective(q))
    end
  end, ldist._keep_traceback)   -- its frames survive the rethrow (state.c)
  D.set_replica(nil)
  D.step_end()
  if not ok then
    -- fail-stop: a worker that skipped a collective must not pair its next
    -- one with the others' previous one
    if self._size > 1 then self._broken = tostring(res) end
    error(res, 0)
  end
  local outs = { n = res.n }
  for i = 1, res.n do outs[i] = per_replica({ res[i] }, gb) end
  return outs
end

-- reduce and gather across the workers (every worker must call them, as in TF)
function MW:_sum_across(total, count)
  if self._size == 1 then return total, count end
  local t = tensor.is_tensor(total) and total:contiguous():clone() or tensor.new(total)
  local cnt = tensor.new({ count }):astype("float32")
  self:_all_reduce({ t, cnt }, false)
  return (tensor.is_tensor(total) and t or t:item()), cnt:item()
end
function MW:_gather_across(t, axis) return self:_all_gather(t, axis) end

-- The replica context inside run: this worker's rank, the collectives across workers.
function MW:_replica_context()
  return distribute._replica_context(self, self._rank, self._size, self.devices[1])
end

-- optimizer:apply_gradients in a worker's replica: sum the gradients across the
-- workers (and, the first time, take rank 0's values of the variables).
function MW:_reduce_gradients(grads, vars)
  if self._size == 1 then return grads end
  return coroutine.yield({ kind = "all_reduce", op = "sum", values = grads, vars = vars })
end

---------------------------------------------------------------- Keras fit under the strategy
local nest = ldist._util.nest

-- model:fit's batches: every worker reads every global batch (DATA sharding)
-- but, for a dataset of rows of one source, gathers only its own rows of the
-- first source (the inputs) and the whole batch of the others (labels and
-- sample weights, for metrics of the whole batch, as one device computes
-- them): K workers no longer each gather K x their rows, a cost that grew
-- with K. Elements {x, y[, w]}: x a PerReplica of this worker's rows (with
-- the global batch and its first row), y and w whole; nil for other datasets.
local dataset_mt = getmetatable(ldist.data.Dataset.range(0))
function MW:_fit_batches(ds)
  if self._size == 1 or getmetatable(ds) ~= dataset_mt or not ds:_splittable() then return nil end
  if not tostring(self.devices[1]):match("^cpu") then return nil end
  local it, n, r, dev = ds:iter(), self._size, self._rank, { self.devices[1] }
  return function()
    local part, whole, rows, first = it:_next_part(n, r, dev, 2)
    if not part then return nil end
    local el = { per_replica({ part[1] }, rows, { first }) }
    el[1]._mw_part = true
    for i = 1, #whole do el[i + 1] = whole[i] end
    return el
  end, nil, nil, it
end
local function sync_model(self, model, x)
  if model._mw_synced == self then return end
  if not model.built and tensor.is_tensor(x) then   -- a model of several inputs is Functional: built
    local shape = {}
    for d = 2, x.ndim do shape[d - 1] = x.shape[d] end
    model:build(shape)
  end
  self:_sync(model.trainable_variables)
  model._mw_synced = self
end

-- One step of model:fit: this worker's share of the global batch, forward and
-- backward, then ONE all-reduce carrying the gradients, the loss and the
-- predictions (each worker writes its rows into a zero buffer), then the update.
function MW:train_step(model, x, y, loss, opt, want_pred, w)
  local n, r = self._size, self._rank
  local loc = self._local
  local xl, yl, wl, gb, lo, hi, rows
  if is_pr(x) and x._mw_part then
    -- this worker's rows of the inputs, the whole batch of the rest (_fit_batches)
    xl, gb, lo, rows = x.values[1], x.global_batch, x.offsets[1], x.global_batch
    hi = lo + nest.rows(xl)
    local function mine(t) return t:slice(0, lo, hi) end
    yl, wl = nest.map(y, mine), nest.map(w, mine)
  elseif loc and rawequal(loc.x, x) then
    xl, yl, wl, gb = x, y, w, loc.gb   -- already this worker's part (a distributed dataset)
  else
    -- x, y: a tensor, or a list per input / output (ldist._util.nest, keras/training.lua)
    rows = nest.rows(x)
    lo, hi = share(rows, n, r)
    local function mine(t) return t:slice(0, lo, hi) end
    xl, yl, wl, gb = nest.map(x, mine), nest.map(y, mine), nest.map(w, mine), rows
  end
  sync_model(self, model, xl)
  -- explain() narrates a step of the full global batch: an epoch's first
  -- step sets it, a last partial one does not shrink it
  if self._epoch_first or gb > (self._last_batch or 0) or not (self._last and self._last.model == model) then
    self._last_batch, self._epoch_first = gb, false
  end
  self._last = setmetatable({ model = model }, { __mode = "v" })
  if self._tracing then self:_trace_step(); self._paths.fit = true end
  D.step_begin(1)
  D.set_replica(0, n, gb, self.devices[1], lo or (loc and loc.offset) or 0)
  if n > 1 then self._c:set_step_reducer(true) end   -- synchronized BatchNorm's statistics
  local ok, lv, grads, pred = xpcall(model._grads, ldist._keep_traceback, model, xl, yl, loss, false, wl, opt)
  if n > 1 then self._c:set_step_reducer(false) end
  D.set_replica(nil)
  D.step_end()
  if not ok then error(lv, 0) end
  if n == 1 then
    local was = D.trace_phase("optimizer")
    optim._apply_gradients(opt, grads, model.trainable_variables)
    D.trace_phase(was)
    return lv:item(), pred
  end
  if want_pred == false then rows = nil end      -- no metrics: no predictions to gather
  grads = dedupe(grads)
  local list = {}
  for i, g in ipairs(grads) do list[i] = g end
  local full
  if rows then
    full = nest.map(pred, function(p)
      local shape = { rows }
      for d = 2, p.ndim do shape[d] = p.shape[d] end
      local f = tensor.zeros(shape)
      if hi > lo then f:slice(0, lo, hi):assign(p:cpu()) end
      list[#list + 1] = f
      return f
    end)
  end
  local lvc = lv:cpu():contiguous()
  list[#list + 1] = lvc
  local t0 = self._tracing and ldist.clock()
  self:_all_reduce(list, false)
  if t0 then self:_trace_allreduce(t0, list) end
  for i = 1, #grads do grads[i] = list[i] end
  local was = D.trace_phase("optimizer")
  optim._apply_gradients(opt, grads, model.trainable_variables)
  D.trace_phase(was)
  if want_pred == false then return lvc:item(), nil end
  return lvc:item(), full or pred
end

-- Models made in the scope (the protocol tells: _model_created) are given
-- rank 0's weights before a step of run(), as TF broadcasts initial values.
-- Every worker must broadcast the same models in the same order, so the
-- list is in creation order and holds its models strongly until they are
-- synced: with weak references a model the program dropped would be
-- broadcast by a worker whose collector had not yet freed it and skipped by
-- another, and their collectives would no longer match. An unbuilt model
-- stays until it is built (it has no weights to hold); those fit synced
-- (sync_model) leave the list as the next model joins it.
function MW:_model_created(model)
  if self._size == 1 then return end
  local keep = {}
  for _, m in ipairs(self._models) do
    if m._mw_synced ~= self then keep[#keep + 1] = m end
  end
  keep[#keep + 1] = model
  self._models = keep
end

function MW:_sync_models()
  local keep = {}
  for _, m in ipairs(self._models) do
    if m._mw_synced ~= self then
      if m.built then
        self:_sync(m.trainable_variables)
        m._mw_synced = self
      else
        keep[#keep + 1] = m
      end
    end
  end
  self._models = keep
end

---------------------------------------------------------------- watching it: traces
-- Each worker records its own spans: forward, backward and the optimizer's
-- update (the engine records them on cpu:0, which runs them inline on this
-- thread, as the phases switch: C.trace_phase), and the all-reduce, timed
-- here with the bytes it carried. trace(false) gathers every worker's
-- spans (a collective: every worker calls it, as it calls fit) on a common
-- clock: processes of one machine (the same boot id) share CLOCK_MONOTONIC;
-- between machines each clock is shifted by its reading right after a
-- barrier, against rank 0's (the error is about the barrier's latency).
-- A worker's all-reduce cannot finish before the last worker enters it: the
-- time from its own entry to the last entry is drawn as its wait.
local boot_id = ldist._util.boot_id

function MW:_trace_step()
  self._step = (self._step or 0) + 1
  D.trace_step(self._step)
end

function MW:_trace_allreduce(t0, list)
  local bytes = 0
  for _, t in ipairs(list) do bytes = bytes + 4 * t:numel() end   -- float32
  local sp = self._ar
  sp[#sp + 1] = { "allreduce", t0, ldist.clock(), self._step or 0, bytes = bytes }
end

function MW:trace(on)
  on = on and true or false
  if on then
    self._tracing, self._step, self._ar, self._paths, self._gathered = true, 0, {}, {}, nil
    D.trace_enable(self.devices, true)
    D.trace_take(self.devices[1])   -- drop what an earlier trace left
  elseif self._tracing then
    self._gathered = self:_trace_gather()
    self._tracing = false
    D.trace_enable(self.devices, false)
    D.trace_step(0)
  end
  return self
end

-- every worker's spans, on rank 0's clock: {workers = {{rank=, device=, spans=}, ...}, notes = {...}, ...}
function MW:_trace_gather()
  local mine = {}
  for _, s in ipairs(D.trace_take(self.devices[1])) do mine[#mine + 1] = s end
  for _, s in ipairs(self._ar or {}) do mine[#mine + 1] = s end
  local rec = { rank = self._rank, device = self.devices[1], boot = boot_id(), pid = C.getpid(), host = C.hostname(),
    spans = mine, paths = self._paths, batch = self._last_batch }
  local got = {}
  if self._size == 1 then got[1] = rec
  else
    self._c:barrier()
    rec.sync = ldist.clock()
    local packed = C.pack(rec)
    for q = 0, self._size - 1 do got[q + 1] = C.unpack(self._c:broadcast_string(q == self._rank and packed or nil, q)) end
  end
  return distribute._mw_align(got, self._size)
end

-- shift clocks, split each all-reduce into its wait and its transfer
function distribute._mw_align(got, size)
  local same = true
  for _, g in ipairs(got) do if g.boot ~= got[1].boot then same = false end end
  local notes = {}
  if not same then
    for _, g in ipairs(got) do
      local off = (g.sync or 0) - (got[1].sync or 0)
      for _, s in ipairs(g.spans) do s[2], s[3] = s[2] - off, s[3] - off end
    end
    notes[#notes + 1] = "the workers' clocks (several machines) are aligned at a barrier: times across rows are good to about its latency"
  else
    notes[#notes + 1] = "one machine: every worker's times are read from the same monotonic clock"
  end
  -- the last entry into each step's all-reduce
  local last = {}
  for _, g in ipairs(got) do
    for _, s in ipairs(g.spans) do
      if s[1] == "allreduce" then
        last[s[4] or 0] = math.max(last[s[4] or 0] or -math.huge, s[2])
      end
    end
  end
  for _, g in ipairs(got) do
    local out = {}
    for _, s in ipairs(g.spans) do
      local l = s[1] == "allreduce" and last[s[4] or 0]
      if l and size > 1 and l > s[2] and l < s[3] then
        out[#out + 1] = { "wait", s[2], l, s[4] }
        out[#out + 1] = { "allreduce", l, s[3], s[4], bytes = s.bytes }
      else out[#out + 1] = s end
    end
    g.spans = out
  end
  return { workers = got, notes = notes }
end

local function gathered(self)
  if self._tracing then return self:_trace_gather() end
  if not self._gathered then error("nothing traced yet: strategy:trace(true), train, strategy:trace(false)", 3) end
  return self._gathered
end

-- the timeline of gathered spans (here, or brought back from a LocalCluster)
function distribute._mw_timeline(g, opts, title)
  local rows = {}
  for i, w in ipairs(g.workers) do
    local list = {}
    for _, s in ipairs(w.spans) do
      list[#list + 1] = { kind = s[1], t0 = s[2], t1 = s[3], step = (s[4] or 0) > 0 and s[4] or nil, bytes = s.bytes }
    end
    rows[i] = { who = ("worker %d"):format(w.rank), label = ("worker %d (pid %d, %s)"):format(w.rank, w.pid or 0, w.device or "cpu:0"),
      spans = list }
  end
  local notes = { table.unpack(g.notes or {}) }
  local p = g.workers[1] and g.workers[1].paths or {}
  if p.run then notes[#notes + 1] = "in strategy:run your function's forward, backward and update are one \"compute\" phase" end
  notes[#notes + 1] = "input: each worker reads its share of the batch in model:fit's loop, not drawn (not separated)"
  return distribute._timeline({ title = title or ("MultiWorkerMirroredStrategy: %d workers"):format(#rows),
    subtitle = ("one process per worker, ring all-reduce; %s"):format(g.workers[1] and ("host " .. tostring(g.workers[1].host)) or ""),
    rows = rows, waits_for = true, notes = notes,
    empty_text = "nothing recorded yet (strategy:trace(true), then train)" }, opts)
end

function distribute._mw_summary(g, title)
  local rows, tot, per = {}, { compute = 0, wait = 0, allreduce = 0, bytes = 0, calls = 0 }, {}
  local lo, hi = math.huge, -math.huge
  for i, w in ipairs(g.workers) do
    local s = { compute = 0, wait = 0, allreduce = 0, bytes = 0, calls = 0 }
    for _, sp in ipairs(w.spans) do
      local d = sp[3] - sp[2]
      s[sp[1]] = (s[sp[1]] or 0) + d
      if sp[1] ~= "wait" and sp[1] ~= "allreduce" and sp[1] ~= "compute" then s.compute = s.compute + d end
      if sp[1] == "allreduce" then s.bytes, s.calls = s.bytes + (sp.bytes or 0), s.calls + 1 end
      lo, hi = math.min(lo, sp[2]), math.max(hi, sp[3])
    end
    per[i] = s
    for k in pairs(tot) do tot[k] = math.max(tot[k], s[k]) end
    local n = #g.workers
    s.bus_bandwidth = s.allreduce > 0 and 2 * (n - 1) / n * s.bytes / s.allreduce or 0
    rows[i] = { who = ("worker %d"):format(w.rank), compute = s.compute, wait = s.wait, comm = s.allreduce, bytes = s.bytes,
      bus_bandwidth = s.bus_bandwidth }
  end
  local n = #g.workers
  tot.bus_bandwidth = tot.allreduce > 0 and 2 * (n - 1) / n * tot.bytes / tot.allreduce or 0
  tot.per_replica = per
  return distribute._trace_summary(tot, rows, { title = title or ("MultiWorkerMirroredStrategy (%d workers)"):format(n),
    over = hi > lo and hi - lo or nil, comm_name = "all-reduce",
    notes = { "compute: forward, backward, update; wait: in the all-reduce until the last worker enters it;",
      "bytes: all-reduced per worker; bus bandwidth = 2(n-1)/n x bytes / all-reduce time" } })
end

-- mw:timeline{steps=, save=} / mw:trace_summary(): after trace(false) on every
-- worker (which gathers the spans to each), or while tracing (a collective then)
function MW:timeline(opts) return distribute._mw_timeline(gathered(self), opts) end
function MW:trace_summary() return distribute._mw_summary(gathered(self)) end

-- one step of MultiWorkerMirrored, with this run's numbers
function distribute._mw_explain(n, gb, model, where)
  local out = { ("MultiWorkerMirroredStrategy: synchronous data parallelism over %d worker processes (%s), one replica each.")
    :format(n, where) }
  if gb and gb > 0 then
    local parts = {}
    for r = 0, n - 1 do
      local lo, hi = share(gb, n, r)
      parts[#parts + 1] = ("worker %d rows %d-%d (%d)"):format(r, lo, hi - 1, hi - lo)
    end
    out[#out + 1] = ("1. Input: the global batch of %d examples is split by rows: %s."):format(gb, table.concat(parts, ", "))
  else
    out[#out + 1] = ("1. Input: each worker takes its 1/%d of every global batch (no step has run yet)."):format(n)
  end
  out[#out + 1] = "2. Each worker: forward on its rows, the loss (its rows' sum over the global batch size), backward."
  local nv, count = ldist._util.model_numbers(model)
  if nv then
    local b = count * 4
    out[#out + 1] = ("3. One ring all-reduce sums the %d gradients (%d numbers, %s per worker) with the loss: %d step%s " ..
      "of reduce-scatter and %d of all-gather, each worker sending 2 x %d/%d x %s = %s (shared memory between processes " ..
      "of one machine, ZeroMQ between machines)."):format(nv, count, ldist._util.fmt_bytes(b), n - 1, n == 2 and "" or "s",
      n - 1, n - 1, n, ldist._util.fmt_bytes(b), ldist._util.fmt_bytes(2 * (n - 1) / n * b))
  else
    out[#out + 1] = "3. A ring all-reduce sums the gradients over the workers (4 bytes per trainable number; fit a model to see its size)."
  end
  out[#out + 1] = "4. Update: every worker applies the same optimizer step to the same summed gradients, so the weights stay identical."
  return ldist.text(table.concat(out, "\n"))
end
function MW:explain()
  return distribute._mw_explain(self._size, self._last_batch, self._last and self._last.model,
    ("this is worker %d"):format(self._rank)) ..
    (self.extended.communication == "mpi" and "\nThe sums go through MPI_Allreduce (communication=\"mpi\"), not the ring." or "") ..
    "\nCores of this worker: " .. D.cpu_split().text .. "."
end

local doc = ldist.document
doc(distribute.MultiWorkerMirroredStrategy, "distribute.MultiWorkerMirroredStrategy",
  "distribute.MultiWorkerMirroredStrategy{cluster=, timeout=30, communication=\"auto\"|\"ring\"|\"nccl\"|\"mpi\",\n" ..
  "                                       auto_shard_policy=\"AUTO\", heartbeat_timeout=}\n\n" ..
  "Synchronous training over several processes (one replica each): gradients are summed across\n" ..
  "them with a ring all-reduce (NCCL on GPUs) whose links are shared memory between processes of\n" ..
  "one machine and ZeroMQ between machines (LDIST_RING_TRANSPORT=tcp: ZeroMQ everywhere). The\n" ..
  "cluster comes from cluster= (a TF_CONFIG table or JSON string, or a distribute.LocalCluster),\n" ..
  "else the TF_CONFIG environment variable, else LDIST_RANK/LDIST_WORLD_SIZE/LDIST_LEADER, Slurm\n" ..
  "or mpirun variables.\n" ..
  "`ldist launch -n 4 script.lua` starts 4 such processes on this machine.\n" ..
  "Under mpirun or srun, `mpirun -n 4 ldist script.lua` is enough: the ranks meet through MPI.\n" ..
  "communication=\"mpi\" sums through MPI_Allreduce (Open MPI, opened at run time) instead of the ring.\n" ..
  "Every collective fails within `timeout` seconds, naming the worker, when one dies.\n" ..
  "strategy:run(fn, inputs), strategy:reduce(op, v), strategy:experimental_distribute_dataset(ds),\n" ..
  "model:fit under strategy:scope() work as with MirroredStrategy; strategy:is_chief().")
doc(distribute.FileDataset, "distribute.FileDataset",
  "distribute.FileDataset(files, function(files) return dataset end)\n\n" ..
  "A dataset read from files, which auto_shard_policy FILE splits by file across workers.")
doc(MW.trace, "MultiWorkerMirroredStrategy:trace",
  "strategy:trace(true|false)   (every worker calls it, as it calls fit)\n\n" ..
  "Each worker records its forward, backward, all-reduce (with the wait for the last worker to\n" ..
  "enter it) and optimizer spans; trace(false) gathers every worker's spans on one clock. Then\n" ..
  "strategy:timeline{steps=, save=} (one row per worker), strategy:trace_summary(),\n" ..
  "strategy:explain(). On a LocalCluster, trace(true) in the notebook traces the next fits and\n" ..
  "the timeline comes back to the notebook.")
doc(MW.timeline, "MultiWorkerMirroredStrategy:timeline",
  "strategy:timeline{steps = {a, b}, save = \"t.svg\"} -> Timeline: one row per worker process, on one clock,\n" ..
  "after strategy:trace(false) (which gathers the spans to every worker; save it on the chief).")
doc(MW.trace_summary, "MultiWorkerMirroredStrategy:trace_summary",
  "strategy:trace_summary() -> a table per worker (compute, wait, all-reduce, bytes, bus bandwidth), printed\n" ..
  "with units; the numbers as fields (compute, wait, allreduce, bytes, bus_bandwidth, per_replica[r]).")
doc(MW.explain, "MultiWorkerMirroredStrategy:explain",
  "strategy:explain() -> Text: one step of this strategy narrated with this run's numbers.")
