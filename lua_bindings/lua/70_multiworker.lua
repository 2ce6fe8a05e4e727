-- 70_multiworker.lua - MultiWorkerMirroredStrategy (TF's
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
local C = ldist._cluster
local D = ldist._distribute
local tensor, distribute, optim, nn, data = ldist.tensor, ldist.distribute, ldist.optim, ldist.nn, ldist.data
local docs = ldist.docs
if not C or not D then return end

local getenv = os.getenv
-- a function that replaces another keeps its docstring (docs are keyed by function)
local function rewrap(old, new)
  if docs[old] then docs[new] = docs[old] end
  return new
end
local function env(k) local v = getenv(k); if v == "" then return nil end return v end
local is_pr, per_replica = distribute.is_per_replica, distribute.PerReplica
local StrategyBase = getmetatable(distribute.get_strategy()).__index

---------------------------------------------------------------- the cluster: where this process stands
-- Each source gives {source=, rank=, size=, leader="host:port", listen=, task_type=, task_index=, tasks=}.

local function check_addr(addr, what)
  if type(addr) ~= "string" or not addr:match("^%[?[%w%.%-_:]+%]?:%d+$") then
    error(("%s is %s, not \"host:port\""):format(what, type(addr) == "string" and ("'" .. addr .. "'") or tostring(addr)), 0)
  end
  return addr
end

-- TF_CONFIG, as TensorFlow reads it: {"cluster": {"chief": [...], "worker": [...], "ps": [...]},
-- "task": {"type": "worker", "index": 1}}. Ranks: the chief, then the workers.
local function from_tf_config(cfg, where)
  if type(cfg) == "string" then
    local v, err = C.json_decode(cfg)
    if v == nil then error(("%s is not valid JSON: %s"):format(where, err), 0) end
    cfg = v
  end
  if type(cfg) ~= "table" or type(cfg.cluster) ~= "table" then
    error(where .. ' must look like {"cluster": {"worker": ["host:port", ...]}, "task": {"type": "worker", "index": 0}}', 0)
  end
  local tasks = {}
  for _, ty in ipairs({ "chief", "worker" }) do
    local list = cfg.cluster[ty]
    if list ~= nil then
      if type(list) ~= "table" then error(("%s: cluster.%s must be a list of \"host:port\""):format(where, ty), 0) end
      for i, addr in ipairs(list) do
        tasks[#tasks + 1] = { type = ty, index = i - 1, address = check_addr(addr, ("%s: cluster.%s[%d]"):format(where, ty, i - 1)) }
      end
    end
  end
  if #tasks == 0 then error(where .. ": the cluster lists no chief and no worker", 0) end
  local task = cfg.task
  if type(task) ~= "table" then error(where .. ': "task" is missing ({"type": "worker", "index": 0})', 0) end
  local ty, idx = task.type, math.tointeger(task.index or 0)
  if ty == "ps" or ty == "evaluator" then
    error(("%s: this process is task %s %s; MultiWorkerMirroredStrategy trains on the chief and the workers only")
      :format(where, tostring(ty), tostring(idx)), 0)
  end
  local rank
  for i, t in ipairs(tasks) do if t.type == ty and t.index == idx then rank = i - 1 end end
  if not rank then
    error(("%s: task %s %s is not in the cluster (it lists %d chief/worker tasks)"):format(where, tostring(ty), tostring(idx), #tasks), 0)
  end
  return { source = where, rank = rank, size = #tasks, leader = tasks[1].address,
    listen = rank > 0 and tasks[rank + 1].address or nil, task_type = ty, task_index = idx, tasks = tasks,
    ps = cfg.cluster.ps }
end

-- "node[01-03,07],gpu5" -> "node01": rank 0 of a Slurm step runs on the first node
local function first_slurm_host(list)
  local head = list:match("^([^,%[]+%b[])") or list:match("^([^,]+)")
  local prefix, inner = head:match("^(.-)%[(.-)%]$")
  if not prefix then return head end
  return prefix .. (inner:match("^([^,%-]+)") or "")
end

local function from_ranks(rank, size, leader, source)
  if size > 1 and not leader then
    error(("%s gives rank %d of %d but not where rank 0 listens: set LDIST_LEADER=host:port"):format(source, rank, size), 0)
  end
  return { source = source, rank = rank, size = size, leader = leader and check_addr(leader, "the leader's address") or nil,
    task_type = "worker", task_index = rank }
end

-- Where this process stands: cluster= (a TF_CONFIG table or JSON string), else
-- TF_CONFIG, else LDIST_RANK/LDIST_WORLD_SIZE/LDIST_LEADER, else Slurm, else
-- mpirun (Open MPI, MPICH's PMI), else one process alone.
function distribute.resolve_cluster(cluster)
  if cluster ~= nil then return from_tf_config(cluster, "cluster") end
  local tf = env("TF_CONFIG")
  if tf then return from_tf_config(tf, "TF_CONFIG") end
  local port = env("LDIST_PORT") or env("MASTER_PORT") or "29500"
  local leader = env("LDIST_LEADER") or (env("MASTER_ADDR") and env("MASTER_ADDR") .. ":" .. port)
  local r, n = tonumber(env("LDIST_RANK") or ""), tonumber(env("LDIST_WORLD_SIZE") or "")
  if r and n then return from_ranks(r, n, leader, "LDIST_RANK/LDIST_WORLD_SIZE") end
  r, n = tonumber(env("SLURM_PROCID") or ""), tonumber(env("SLURM_NTASKS") or "")
  if r and n then
    local nodes = env("SLURM_STEP_NODELIST") or env("SLURM_JOB_NODELIST")
    return from_ranks(r, n, leader or (nodes and first_slurm_host(nodes) .. ":" .. port), "Slurm (SLURM_PROCID/SLURM_NTASKS)")
  end
  r, n = tonumber(env("OMPI_COMM_WORLD_RANK") or ""), tonumber(env("OMPI_COMM_WORLD_SIZE") or "")
  if r and n then return from_ranks(r, n, leader, "mpirun (OMPI_COMM_WORLD_RANK/SIZE)") end
  r, n = tonumber(env("PMI_RANK") or ""), tonumber(env("PMI_SIZE") or "")
  if r and n then return from_ranks(r, n, leader, "mpirun (PMI_RANK/PMI_SIZE)") end
  return { source = "a single process", rank = 0, size = 1, task_type = "worker", task_index = 0 }
end

local function read_secret(size)
  local s = env("LDIST_SECRET")
  if not s and env("LDIST_SECRET_FILE") then
    local f = io.open(env("LDIST_SECRET_FILE"), "rb")
    if not f then error("cannot read LDIST_SECRET_FILE " .. env("LDIST_SECRET_FILE"), 0) end
    s = f:read("a"):gsub("%s+$", "")
    f:close()
  end
  if size > 1 and (not s or #s < 16) then
    error("a cluster needs a shared secret (a peer without it is refused): `ldist launch` and LocalCluster make one; " ..
      "otherwise export LDIST_SECRET (the same for every process, at least 16 characters, e.g. " ..
      "$(openssl rand -hex 32)) or LDIST_SECRET_FILE", 0)
  end
  return s
end

---------------------------------------------------------------- the strategy
local MW = setmetatable({}, { __index = StrategyBase })
MW.__index = MW
MW.__name = "ldist.MultiWorkerMirroredStrategy"
MW.__tostring = function(s)
  return ("<MultiWorkerMirroredStrategy: worker %d of %d (%s), %s>"):format(s._rank, s._size,
    s.cluster_resolver.source, s.extended.communication)
end
distribute.MultiWorkerMirroredStrategyClass = MW

local LocalCluster   -- below

function distribute.MultiWorkerMirroredStrategy(opts)
  opts = opts or {}
  if type(opts) ~= "table" then error("bad argument #1 to 'MultiWorkerMirroredStrategy' (options table expected)", 2) end
  if getmetatable(opts.cluster) == LocalCluster then return opts.cluster:_strategy(opts) end
  local ok, spec = pcall(distribute.resolve_cluster, opts.cluster)
  if not ok then error("MultiWorkerMirroredStrategy: " .. tostring(spec), 2) end
  -- under `ldist launch` stdout is a pipe: send lines as they come
  if env("LDIST_LOCAL_RANK") then io.stdout:setvbuf("line") end
  local timeout = opts.timeout or tonumber(env("LDIST_TIMEOUT") or "") or 30
  local comm = opts.communication or (type(opts.communication_options) == "table" and opts.communication_options.implementation) or "auto"
  comm = tostring(comm):lower()
  if comm ~= "auto" and comm ~= "ring" and comm ~= "nccl" then
    error("bad argument #1 to 'MultiWorkerMirroredStrategy' (communication must be \"auto\", \"ring\" or \"nccl\")", 2)
  end
  local device = opts.device or "cpu:0"
  if comm == "nccl" and not opts.device then device = "cuda:" .. (tonumber(env("LDIST_LOCAL_RANK") or "0") or 0) end
  local secret
  ok, secret = pcall(read_secret, spec.size)
  if not ok then error("MultiWorkerMirroredStrategy: " .. tostring(secret), 2) end
  local c
  ok, c = pcall(C.join, { rank = spec.rank, size = spec.size, leader = spec.leader, listen = spec.listen,
    secret = secret, timeout = timeout, rendezvous_timeout = opts.rendezvous_timeout, heartbeat = opts.heartbeat,
    heartbeat_timeout = opts.heartbeat_timeout, name = "worker" })
  if not ok then error("MultiWorkerMirroredStrategy: " .. tostring(c), 2) end
  local s = setmetatable({ kind = "MultiWorkerMirroredStrategy", devices = { device }, num_replicas_in_sync = spec.size,
    extended = { should_checkpoint = spec.rank == 0, should_save_summary = spec.rank == 0,
      communication = comm == "nccl" and "nccl" or "ring", timeout = timeout },
    cluster_resolver = { task_type = spec.task_type, task_id = spec.task_index, rank = spec.rank,
      num_workers = spec.size, cluster_spec = spec.tasks, source = spec.source, pid = C.getpid() },
    _depth = 0, _c = c, _rank = spec.rank, _size = spec.size, _synced = {}, _mw = true,
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
end

function MW:broadcast(values, root)
  local list = tensor.is_tensor(values) and { values } or values
  self._c:broadcast(list, root or 0)
  return values
end
function MW:barrier() self._c:barrier() end

---------------------------------------------------------------- input: each worker its share
distribute.AutoShardPolicy = { AUTO = "AUTO", FILE = "FILE", DATA = "DATA", OFF = "OFF" }

-- Rows [lo, hi) of a global batch of `rows` that worker r of n takes: floor(rows/n)
-- each, one more for the first rows % n (the split MirroredStrategy uses).
local function share(rows, n, r)
  local base, extra = rows // n, rows % n
  local lo = r * base + math.min(r, extra)
  return lo, lo + base + (r < extra and 1 or 0)
end
local function rows_of(e)
  local t = tensor.is_tensor(e) and e or e[1]
  return t.ndim > 0 and t.shape[1] or 1
end
local function slice_element(e, lo, hi)
  if tensor.is_tensor(e) then return e:slice(0, lo, hi) end
  local out = {}
  for i, t in ipairs(e) do out[i] = t:slice(0, lo, hi) end
  return out
end

-- A dataset made from files: distribute.FileDataset(files, build) where build(list)
-- returns a Dataset reading those files. Auto-sharding by FILE gives each worker
-- its own files (worker r: files r+1, r+1+n, ...).
local FileDataset = { __name = "ldist.FileDataset" }
FileDataset.__index = FileDataset
function distribute.FileDataset(files, build)
  if type(files) ~= "table" or #files == 0 then error("bad argument #1 to 'FileDataset' (a list of files expected)", 2) end
  if type(build) ~= "function" then error("bad argument #2 to 'FileDataset' (function(files) -> Dataset expected)", 2) end
  return setmetatable({ files = files, build = build }, FileDataset)
end
function FileDataset:_dataset(files) return self.build(files or self.files) end
function FileDataset:iter() return self:_dataset():iter() end
function FileDataset:cardinality() return self:_dataset():cardinality() end
function FileDataset.__call(self, _, prev)
  if prev == nil then self._it = self:_dataset():iter() end
  return self._it()
end

-- What `for inputs in dist do` yields: a PerReplica of this worker's part; its
-- [1], [2] are the local tensors too, so model:fit can take it as a batch.
local function local_value(s, e, global_batch)
  local v = per_replica({ e }, global_batch)
  if tensor.is_tensor(e) then v[1] = e else for i, t in ipairs(e) do v[i] = t end end
  s._local = { x = tensor.is_tensor(e) and e or e[1], gb = global_batch }
  return v
end

local MWDist = { __name = "ldist.DistributedDataset" }
MWDist.__index = MWDist
function MWDist:iter()
  local s, n, r = self.strategy, self.strategy._size, self.strategy._rank
  local policy = self.policy
  if policy == "FILE" then
    local mine = {}
    for i = r + 1, #self.dataset.files, n do mine[#mine + 1] = self.dataset.files[i] end
    local it = self.dataset:_dataset(mine):iter()
    local pieces = {}
    -- each of this worker's batches of B rows feeds n steps of B/n rows (TF's rebatching)
    return function()
      if #pieces == 0 then
        local e = it()
        if e == nil then return nil end
        local rows = rows_of(e)
        for q = 0, n - 1 do local lo, hi = share(rows, n, q); pieces[#pieces + 1] = { slice_element(e, lo, hi), rows } end
      end
      local p = table.remove(pieces, 1)
      return local_value(s, p[1], p[2])
    end
  end
  local base = getmetatable(self.dataset) == FileDataset and self.dataset:_dataset() or self.dataset
  local f, st, c = base:iter()
  return function()
    local e = f(st, c)
    c = e
    if e == nil then return nil end
    if policy == "OFF" then return local_value(s, e, rows_of(e) * n) end
    local rows = rows_of(e)
    local lo, hi = share(rows, n, r)
    return local_value(s, slice_element(e, lo, hi), rows)
  end
end
function MWDist.__call(self, _, prev)
  if prev == nil then self._next = self:iter() end
  return self._next()
end
function MWDist:cardinality()
  if self.policy == "FILE" then return -2 end
  local d = getmetatable(self.dataset) == FileDataset and self.dataset:_dataset() or self.dataset
  return d.cardinality and d:cardinality() or -2
end
-- start (and drop) one iteration: a reshuffling dataset then orders the next
-- epoch as it would have after a full one (BackupAndRestore's resume)
function MWDist:_burn()
  local d = getmetatable(self.dataset) == FileDataset and self.dataset:_dataset() or self.dataset
  local it = d:iter()
  if type(it) == "userdata" and it.close then it:close() end
end

-- strategy:experimental_distribute_dataset(ds, {auto_shard_policy="AUTO"|"FILE"|"DATA"|"OFF"})
--   DATA: every worker reads every global batch and keeps its 1/n of the rows.
--   FILE: every worker reads its own files (distribute.FileDataset); fewer files
--         than workers is an error.
--   AUTO: FILE for a FileDataset with enough files, else DATA (TF falls back the same way).
--   OFF:  no sharding: every batch is this worker's batch (the global batch is n x its rows).
function MW:experimental_distribute_dataset(ds, opts)
  if type(ds) ~= "table" and type(ds) ~= "userdata" then
    error("bad argument #1 to 'experimental_distribute_dataset' (dataset expected)", 2)
  end
  local policy = tostring((type(opts) == "table" and (opts.auto_shard_policy or opts.policy)) or self._auto_shard or "AUTO"):upper()
  if not distribute.AutoShardPolicy[policy] then
    error("bad argument #2 to 'experimental_distribute_dataset' (auto_shard_policy must be AUTO, FILE, DATA or OFF)", 2)
  end
  local files = getmetatable(ds) == FileDataset and #ds.files or 0
  if policy == "AUTO" then policy = files >= self._size and "FILE" or "DATA" end
  if policy == "FILE" then
    if files == 0 then
      error("auto_shard_policy FILE needs a dataset made from files (distribute.FileDataset(files, build)); " ..
        "use DATA to shard by rows", 2)
    end
    if files < self._size then
      error(("auto_shard_policy FILE: %d file(s) for %d workers; every worker needs at least one file " ..
        "(use more files, or DATA to shard by rows)"):format(files, self._size), 2)
    end
  end
  return setmetatable({ dataset = ds, strategy = self, policy = policy }, MWDist)
end

-- strategy:distribute_datasets_from_function(function(ctx) ... end): each worker
-- builds its own pipeline; ctx.input_pipeline_id is its rank.
function MW:distribute_datasets_from_function(fn)
  local n, s = self._size, self
  local ctx = { num_input_pipelines = n, input_pipeline_id = self._rank, num_replicas_in_sync = n,
    get_per_replica_batch_size = function(_, global)
      if global % n ~= 0 then error(("global batch %d is not divisible by %d replicas"):format(global, n), 2) end
      return global // n
    end }
  local ds = fn(ctx)
  local obj = { dataset = ds, strategy = s, policy = "OFF" }
  return setmetatable(obj, MWDist)
end

---------------------------------------------------------------- run, collectives, reduce
local function dedupe(values)
  local seen, out = {}, {}
  for i, v in ipairs(values) do
    if type(v) == "number" then v = tensor.new(v) end
    if seen[v] then out[i] = v:clone() else out[i] = v; seen[v] = true end
  end
  return out
end

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
    self:_all_reduce(vals, q.op == "mean")
    return vals
  elseif q.kind == "all_gather" then
    local out = {}
    for i, v in ipairs(q.values) do out[i] = self:_all_gather(v, q.axis) end
    return out
  end
  error("unknown collective " .. tostring(q.kind), 0)
end

function MW:run(fn, ...)
  if type(fn) ~= "function" then error("bad argument #1 to 'run' (function expected)", 2) end
  local args = table.pack(...)
  local gb
  local a = {}
  for i = 1, args.n do
    local v = args[i]
    if is_pr(v) then
      a[i] = v.values[1]
      gb = gb or v.global_batch
    else
      a[i] = v
    end
  end
  if not gb then   -- plain tensors: each worker's share of an equal split
    for i = 1, args.n do
      local v = a[i]
      local t = tensor.is_tensor(v) and v or (type(v) == "table" and tensor.is_tensor(v[1]) and v[1])
      if t then gb = (t.ndim > 0 and t.shape[1] or 1) * self._size; break end
    end
  end
  gb = gb or 0
  if self._size > 1 then self:_sync_models() end
  local co = coroutine.create(fn)
  local prev = MW._active
  MW._active = self
  local ok, res = pcall(function()
    local input = table.pack(table.unpack(a, 1, args.n))
    while true do
      D.set_replica(0, self._size, gb)
      local r = table.pack(coroutine.resume(co, table.unpack(input, 1, input.n)))
      D.set_replica(nil)
      if not r[1] then error(("worker %d: %s"):format(self._rank, tostring(r[2])), 0) end
      if coroutine.status(co) == "dead" then return table.pack(table.unpack(r, 2, r.n)) end
      local q = r[2]
      if type(q) ~= "table" or not q.kind then
        error("a replica function yielded outside a collective; coroutine.yield is not allowed in it", 0)
      end
      input = table.pack(self:_collective(q))
    end
  end)
  MW._active = prev
  D.set_replica(nil)
  if not ok then
    -- fail-stop: a worker that skipped a collective must not pair its next
    -- one with the others' previous one
    if self._size > 1 then self._broken = tostring(res) end
    error(res, 2)
  end
  local outs = {}
  for i = 1, res.n do outs[i] = per_replica({ res[i] }, gb) end
  return table.unpack(outs, 1, res.n)
end

-- strategy:reduce("sum"|"mean", per_replica, {axis=}): across the workers (every
-- worker must call it, as in TF).
function MW:reduce(op, v, opts)
  op = type(op) == "string" and op:lower() or op
  if op ~= "sum" and op ~= "mean" then
    error(("bad argument #1 to 'reduce' (\"sum\" or \"mean\" expected, got %s)"):format(tostring(op)), 2)
  end
  local axis = type(opts) == "table" and opts.axis or nil
  local x = is_pr(v) and v.values[1] or v
  if type(x) == "number" then x = tensor.new(x)
  elseif not tensor.is_tensor(x) then
    error(("bad argument #2 to 'reduce' (tensor or number expected, got %s)"):format(type(x)), 2)
  end
  x = x:cpu()
  if x.dtype ~= "float32" then x = x:astype("float32") end
  local count = 1
  if axis ~= nil then count = x.shape[axis + 1] or 0; x = x:sum(axis) end
  local buf, cnt = x:contiguous():clone(), tensor.new({ count }):astype("float32")
  self:_all_reduce({ buf, cnt }, false)
  if op == "mean" then buf = buf * (1 / math.max(cnt:item(), 1)) end
  if buf.ndim == 0 then return buf:item() end
  return buf
end

function MW:gather(v, axis) return self:_all_gather(is_pr(v) and v.values[1] or v, axis) end
function MW:experimental_local_results(v) return is_pr(v) and v.values or { v } end

-- The replica context inside run: this worker's rank, the collectives across workers.
local RC = { __name = "ldist.ReplicaContext" }
RC.__index = RC
function RC:all_reduce(op, value)
  op = type(op) == "string" and op:lower() or op
  if op ~= "sum" and op ~= "mean" then error("bad argument #1 to 'all_reduce' (\"sum\" or \"mean\" expected)", 2) end
  if self.num_replicas_in_sync == 1 then return value end
  local single = tensor.is_tensor(value) or type(value) == "number"
  local out = coroutine.yield({ kind = "all_reduce", op = op, values = single and { value } or value })
  return single and out[1] or out
end
function RC:all_gather(value, axis)
  if self.num_replicas_in_sync == 1 then return value end
  local single = tensor.is_tensor(value)
  local out = coroutine.yield({ kind = "all_gather", axis = axis or 0, values = single and { value } or value })
  return single and out[1] or out
end
local prev_get_rc = distribute.get_replica_context
distribute.get_replica_context = function()
  local s = MW._active
  if s and D.replica() ~= nil then
    return setmetatable({ replica_id_in_sync_group = s._rank, num_replicas_in_sync = s._size, strategy = s }, RC)
  end
  return prev_get_rc()
end
rewrap(prev_get_rc, distribute.get_replica_context)

-- optimizer:apply_gradients in a worker's replica: sum the gradients across the
-- workers (and, the first time, take rank 0's values of the variables).
local prev_apply = optim.Optimizer.apply_gradients
function optim.Optimizer.apply_gradients(self, grads, vars)
  local s = MW._active
  if s and D.replica() ~= nil and s._size > 1 then
    if vars == nil then
      local g, v = {}, {}
      for i, p in ipairs(grads) do g[i], v[i] = p[1], p[2] end
      grads, vars = g, v
    end
    grads = coroutine.yield({ kind = "all_reduce", op = "sum", values = grads, vars = vars })
    return optim._apply_gradients(self, grads, vars)
  end
  return prev_apply(self, grads, vars)
end
rewrap(prev_apply, optim.Optimizer.apply_gradients)

---------------------------------------------------------------- Keras fit under the strategy
local function sync_model(self, model, x)
  if model._mw_synced == self then return end
  if not model.built then
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
function MW:train_step(model, x, y, loss, opt, want_pred)
  local n, r = self._size, self._rank
  sync_model(self, model, x)
  local loc = self._local
  local xl, yl, gb, lo, hi, rows
  if loc and rawequal(loc.x, x) then
    xl, yl, gb = x, y, loc.gb          -- already this worker's part (a distributed dataset)
  else
    rows = x.ndim > 0 and x.shape[1] or 1
    lo, hi = share(rows, n, r)
    xl, yl, gb = x:slice(0, lo, hi), y:slice(0, lo, hi), rows
  end
  D.set_replica(0, n, gb)
  local ok, lv, grads, pred = pcall(model._grads, model, xl, yl, loss)
  D.set_replica(nil)
  if not ok then error(lv, 0) end
  if n == 1 then
    optim._apply_gradients(opt, grads, model.trainable_variables)
    return lv:item(), pred
  end
  if want_pred == false then rows = nil end      -- no metrics: no predictions to gather
  grads = dedupe(grads)
  local list = {}
  for i, g in ipairs(grads) do list[i] = g end
  local full
  if rows then
    local shape = { rows }
    for d = 2, pred.ndim do shape[d] = pred.shape[d] end
    full = tensor.zeros(shape)
    if hi > lo then full:slice(0, lo, hi):assign(pred:cpu()) end
    list[#list + 1] = full
  end
  local lvc = lv:cpu():contiguous()
  list[#list + 1] = lvc
  self:_all_reduce(list, false)
  for i = 1, #grads do grads[i] = list[i] end
  optim._apply_gradients(opt, grads, model.trainable_variables)
  if want_pred == false then return lvc:item(), nil end
  return lvc:item(), full or pred
end

-- Models remember the strategy whose scope created (or compiled) them, as TF
-- keeps it with the model: fit runs under it even when called outside the
-- scope, and run() gives every worker rank 0's weights before the first step.
local Model = nn.Model
local made_in = setmetatable({}, { __mode = "k" })   -- model -> strategy
if nn.Sequential then
  local orig = { Sequential = nn.Sequential }
  nn.Sequential = rewrap(orig.Sequential, load("local orig, made_in, distribute = ...; return function(...) " ..
    "local m = orig.Sequential(...); local s = distribute.get_strategy(); " ..
    "if s and (s._mw or s._remote) then made_in[m] = s end; return m end", "=Sequential", "t")(orig, made_in, distribute))
end
local prev_compile = Model.compile
function Model:compile(opts)
  local r = prev_compile(self, opts)
  local s = distribute.get_strategy()
  if s and (s._mw or s._remote) then made_in[self] = s end
  return r
end
rewrap(prev_compile, Model.compile)
local function strategy_of(model) return made_in[model] end

-- before a step of run(): the built models of this strategy hold rank 0's weights
function MW:_sync_models()
  for m, s in pairs(made_in) do
    if s == self and m._mw_synced ~= self and m.built then
      self:_sync(m.trainable_variables)
      m._mw_synced = self
    end
  end
end

local keras_fit = Model.fit
function Model:fit(x, y, opts)
  local s = strategy_of(self)
  local cur = distribute.get_strategy()
  if s == nil and (cur._mw or cur._remote) then s = cur end
  if s and s._remote then return s:_remote_fit(self, x, y, opts) end
  if type(y) == "table" and not tensor.is_tensor(y) and opts == nil then opts, y = y, nil end
  local cb = ldist.callbacks
  if cb and cb._before_fit then x, y, opts = cb._before_fit(self, x, y, opts or {}, s) end
  if s and s._mw and cur ~= s then
    return s:scope(function() return keras_fit(self, x, y, opts) end)
  end
  return keras_fit(self, x, y, opts)
end
rewrap(keras_fit, Model.fit)

---------------------------------------------------------------- what a model, a dataset, an optimizer are made of
-- LocalCluster ships these descriptions to its workers, which rebuild the objects.

-- Datasets remember how they were made: the constructor or method and its
-- arguments, and (for tensors read from ldist.datasets) which data set they are,
-- so a worker reads Fashion-MNIST itself instead of receiving it.
local recipes = setmetatable({}, { __mode = "k" })
local sources = setmetatable({}, { __mode = "k" })
distribute._recipes = recipes

local Dataset = data and data.Dataset
if Dataset then
  local orig = {}
  local function record(ds, op, parent, ...)
    if ds ~= nil then recipes[ds] = { op = op, parent = parent, args = table.pack(...) } end
  end
  -- wrappers call the originals as fields of `orig`, so argument errors still
  -- name 'from_tensor_slices', 'batch', ...
  for _, name in ipairs({ "from_tensor_slices", "range" }) do
    if Dataset[name] then
      orig[name] = Dataset[name]
      Dataset[name] = rewrap(Dataset[name], load(("local orig, record = ...; return function(...) local ds = orig.%s(...); " ..
        "record(ds, %q, nil, ...); return ds end"):format(name, name), "=dataset", "t")(orig, record))
    end
  end
  for _, name in ipairs({ "batch", "shuffle", "repeat", "repeat_", "take", "skip", "prefetch", "map" }) do
    if Dataset[name] then
      orig[name] = Dataset[name]
      Dataset[name] = rewrap(Dataset[name], load(("local orig, record = ...; return function(self, ...) local ds = orig[%q](self, ...); " ..
        "record(ds, %q, self, ...); return ds end"):format(name, name), "=dataset", "t")(orig, record))
    end
  end
end
-- tensors read from files remember the call that read them (datasets.*.load
-- reads through these), so a worker on this machine reads the file itself
if data then
  local orig = {}
  for _, name in ipairs({ "load_idx", "load_csv" }) do
    if data[name] then
      orig[name] = data[name]
      local w = load(("local orig, sources = ...; return function(...) local r = table.pack(orig.%s(...)); " ..
        "for i = 1, r.n do if type(r[i]) == 'userdata' then sources[r[i]] = { fn = %q, args = table.pack(...), part = i } end end; " ..
        "return table.unpack(r, 1, r.n) end"):format(name, name), "=data", "t")(orig, sources)
      if docs[data[name]] then docs[w] = docs[data[name]] end
      data[name] = w
    end
  end
end

local function ship_value(v, depth)
  depth = depth or 0
  if depth > 20 then error("dataset arguments nested too deeply", 0) end
  if tensor.is_tensor(v) then
    local src = sources[v]
    if src then return { __source = src } end
    return v
  elseif type(v) == "function" then
    local i = 1
    while true do
      local name = debug.getupvalue(v, i)
      if not name then break end
      if name ~= "_ENV" then
        error(("a dataset map function that uses the local variable '%s' cannot be sent to the workers; " ..
          "make it use only its arguments and globals"):format(name), 0)
      end
      i = i + 1
    end
    return { __function = string.dump(v) }
  elseif type(v) == "table" then
    local out = {}
    for k, x in pairs(v) do out[k] = ship_value(x, depth + 1) end
    return out
  end
  return v
end

local function recipe_of(ds)
  if getmetatable(ds) == MWDist then ds = ds.dataset end
  local r = recipes[ds]
  if not r then
    error("this dataset cannot be sent to the workers: make it with data.Dataset (from_tensor_slices, range, " ..
      "batch, shuffle, ...) in this session", 0)
  end
  local out = { op = r.op, n = r.args.n, args = {} }
  for i = 1, r.args.n do out.args[i] = ship_value(r.args[i]) end
  if r.parent then out.parent = recipe_of(r.parent) end
  return out
end
distribute._recipe_of = recipe_of

local function unship_value(v, cache)
  if type(v) ~= "table" or tensor.is_tensor(v) then return v end
  if v.__source then
    local s = v.__source
    local key = s.fn .. "|" .. C.pack(s.args)
    if not cache[key] then cache[key] = table.pack(data[s.fn](table.unpack(s.args, 1, s.args.n))) end
    return cache[key][s.part]
  elseif v.__function then
    return assert(load(v.__function, "=map function", "b"))
  end
  local out = {}
  for k, x in pairs(v) do out[k] = unship_value(x, cache) end
  return out
end

local function build_dataset(r, cache)
  cache = cache or {}
  local args = {}
  for i = 1, r.n do args[i] = unship_value(r.args[i], cache) end
  if r.parent then
    local p = build_dataset(r.parent, cache)
    return p[r.op](p, table.unpack(args, 1, r.n))
  end
  return Dataset[r.op](table.unpack(args, 1, r.n))
end
distribute._build_dataset = build_dataset

-- A model as data for another process: its layers' configurations and, unless
-- weights is false, its weights (the parameter-server strategy keeps them on
-- the ps tasks).
local function describe_model(model, weights)
  local layers = {}
  for i, l in ipairs(model.layers) do layers[i] = C.layer_config(l) end
  local w
  if weights ~= false then
    w = {}
    for i, v in ipairs(model.trainable_variables) do w[i] = v:cpu() end
  end
  return { name = model.name, layers = layers, input_shape = layers[1] and layers[1].input_shape, weights = w }
end

local function act(a) return a ~= "linear" and a or nil end
local layer_makers = {
  dense = function(c) return nn.Dense { units = c.units, activation = act(c.activation), use_bias = c.use_bias } end,
  flatten = function() return nn.Flatten() end,
  dropout = function(c) return nn.Dropout(c.rate) end,
  conv2d = function(c)
    return nn.Conv2D(c.filters, c.kernel_size, { strides = c.strides, padding = c.padding, activation = act(c.activation),
      use_bias = c.use_bias })
  end,
  max_pooling2d = function(c) return nn.MaxPool2D(c.kernel_size, { strides = c.strides }) end,
  activation = function(c) return nn.Activation(c.activation) end,
  reshape = function(c) return nn.Reshape(c.target_shape) end,
}

local function build_model(d)
  local layers = {}
  for i, c in ipairs(d.layers) do
    local make = layer_makers[c.kind]
    if not make then error("cannot rebuild a layer of kind " .. tostring(c.kind), 0) end
    layers[i] = make(c)
  end
  local model = nn.Sequential(layers)
  if d.input_shape and (not d.weights or #d.weights > 0) then model:build(d.input_shape) end
  if not d.weights then return model end   -- layers only
  local vars = model.trainable_variables
  if #vars ~= #d.weights then error(("the model has %d weights, %d were sent"):format(#vars, #d.weights), 0) end
  for i, v in ipairs(vars) do v:assign(d.weights[i]) end
  return model
end

local function describe_metrics(ms)
  local out = {}
  for i, m in ipairs(ms or {}) do
    if m.kind and m.correct ~= nil then out[i] = { kind = m.kind, name = m.name }
    else error(("metric %s cannot be sent to the workers (accuracy metrics can)"):format(tostring(m.name)), 0) end
  end
  return out
end
local function build_metrics(d)
  local M, out = ldist.metrics, {}
  for i, m in ipairs(d) do
    local make = m.kind == "sparse" and M.SparseCategoricalAccuracy or m.kind == "binary" and M.BinaryAccuracy
      or M.CategoricalAccuracy
    out[i] = make(m.name)
  end
  return out
end

local loss_makers = {
  sparse_categorical_crossentropy = "SparseCategoricalCrossentropy", categorical_crossentropy = "CategoricalCrossentropy",
  binary_crossentropy = "BinaryCrossentropy", mean_squared_error = "MeanSquaredError" }
local function build_loss(d)
  return ldist.losses[loss_makers[d.name]] { from_logits = d.from_logits, reduction = d.reduction }
end
local function build_optimizer(d)
  local o = {}
  for k, v in pairs(d) do if k ~= "name" then o[k] = v end end
  return optim[d.name](o)
end
-- for the parameter-server strategy (80_parameter_server.lua)
distribute._describe_model, distribute._build_model = describe_model, build_model
distribute._build_loss, distribute._build_optimizer = build_loss, build_optimizer

---------------------------------------------------------------- LocalCluster: workers started from here
LocalCluster = { __name = "ldist.LocalCluster" }
LocalCluster.__index = LocalCluster
distribute.LocalClusterClass = LocalCluster

local function forward_output(self, timeout)
  local procs = self._procs
  if not procs then return end
  local deadline = ldist.clock() + (timeout or 0)
  repeat
    local ev = procs:poll(0)
    while ev do
      if ev.kind == "exit" then
        self._exited[ev.index + 1] = ev
        if not self._closing and not self._broken then
          self._broken = ("worker %d (pid %d) %s"):format(ev.index, self.pids[ev.index + 1],
            ev.signal ~= 0 and ("was killed by signal %d (%s)"):format(ev.signal, ev.signal_name or "?")
            or ("exited with status %d"):format(ev.status))
        end
      else
        local out = ev.kind == "out" and io.stdout or io.stderr
        out:write(("[worker %d] %s%s"):format(ev.index, ev.line, ev.ending == "\r" and "\r" or "\n"))
        out:flush()
      end
      ev = procs:poll(0)
    end
    if ldist.clock() >= deadline then break end
    C.sleep(0.01)
  until false
end

-- distribute.LocalCluster{workers=2, timeout=30, threads=} starts `workers` ldist
-- processes on this machine that wait for work from this session; stopping the
-- session (or lc:shutdown()) stops them.
function distribute.LocalCluster(opts)
  opts = opts or {}
  if type(opts) ~= "table" then error("bad argument #1 to 'LocalCluster' (options table expected)", 2) end
  local n = math.tointeger(opts.workers or 2)
  if not n or n < 1 or n > 64 then error("bad argument #1 to 'LocalCluster' (workers must be 1..64)", 2) end
  local timeout = opts.timeout or 30
  local host = "127.0.0.1"
  local secret = C.random_hex(32)
  local cport = C.free_port(host)
  local addrs = {}
  for i = 1, n do addrs[i] = host .. ":" .. C.free_port(host) end
  local threads = opts.threads or math.max(1, C.cores() // n)
  local envs = {}
  for i = 0, n - 1 do
    envs[i + 1] = {
      "TF_CONFIG=" .. C.json_encode({ cluster = { worker = addrs }, task = { type = "worker", index = i } }),
      "LDIST_SECRET=" .. secret, "LDIST_COORDINATOR=" .. host .. ":" .. cport,
      "LDIST_COORDINATOR_RANK=" .. (i + 1), "LDIST_COORDINATOR_SIZE=" .. (n + 1),
      "LDIST_NUM_THREADS=" .. threads, "LDIST_TIMEOUT=" .. timeout, "LDIST_LOCAL_RANK=" .. i,
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
    data_plane = false, name = "process", timeout = timeout, rendezvous_timeout = opts.start_timeout or 60 })
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
      if self._broken then error("LocalCluster: " .. self._broken .. " during the job", 0) end
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
  if type(code) == "function" then code = ship_value(code).__function
  elseif type(code) ~= "string" then error("bad argument #1 to 'run' (code string or function expected)", 2) end
  local res = self:_run_job({ op = "exec", code = code, args = table.pack(...) })
  local out = {}
  for i, r in ipairs(res) do out[i] = r[1] end
  return out
end

---------------------------------------------------------------- the strategy on a LocalCluster
local Remote = setmetatable({}, { __index = StrategyBase })
Remote.__index = Remote
Remote.__name = "ldist.MultiWorkerMirroredStrategy"
Remote.__tostring = function(s)
  return ("<MultiWorkerMirroredStrategy on a LocalCluster of %d workers>"):format(s.num_replicas_in_sync)
end

function LocalCluster:_strategy(opts)
  return setmetatable({ kind = "MultiWorkerMirroredStrategy", devices = { "cpu:0" }, num_replicas_in_sync = self.workers,
    extended = { communication = "ring", cluster = self }, cluster_resolver = { task_type = "coordinator",
      num_workers = self.workers, source = "LocalCluster" }, _depth = 0, _lc = self, _remote = true,
    _options = opts }, Remote)
end

function Remote:run()
  error("strategy:run needs the replicas in this process; with a LocalCluster, train with model:fit, " ..
    "or run code on the workers with cluster:run(code)", 2)
end
Remote.reduce = Remote.run

local function as_dataset(x, y, opts)
  if tensor.is_tensor(x) then
    local ds = data.Dataset.from_tensor_slices(y and { x, y } or { x })
    if opts.shuffle ~= false then ds = ds:shuffle(x.shape[1], { seed = opts.seed or 0 }) end
    return ds:batch(opts.batch_size or 32)
  end
  return x
end

local function shippable_callbacks(list)
  local remote, here = {}, {}
  for _, cb in ipairs(list or {}) do
    if type(cb) == "table" and cb._ship then remote[#remote + 1] = cb:_ship() else here[#here + 1] = cb end
  end
  return remote, here
end

-- model:fit on a LocalCluster: the workers rebuild the model (with its
-- weights), the optimizer (with its state), the loss, the metrics and the
-- dataset, train under MultiWorkerMirroredStrategy, and worker 0 sends back
-- the history, the weights and the optimizer state, which this model takes.
function Remote:_remote_fit(model, x, y, opts)
  if type(y) == "table" and not tensor.is_tensor(y) and opts == nil then opts, y = y, nil end
  opts = opts or {}
  if not model._compiled then error("call model:compile{optimizer=, loss=, metrics=} before model:fit", 3) end
  local lc = self._lc
  lc:_check()
  local ds = as_dataset(x, y, opts)
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
  if type(val) == "table" and tensor.is_tensor(val[1]) then val = as_dataset(val[1], val[2], { shuffle = false, batch_size = opts.batch_size }) end
  local spec = {
    model = describe_model(model), optimizer = C.optimizer_config(model._optimizer),
    optimizer_state = C.optimizer_state(model._optimizer, vars), loss = C.loss_config(model._loss),
    metrics = describe_metrics(model._metrics), data = recipe_of(ds), validation = val and recipe_of(val) or nil,
    fit = { epochs = opts.epochs or 1, initial_epoch = opts.initial_epoch, steps_per_epoch = opts.steps_per_epoch },
    callbacks = remote_cbs,
  }
  local verbose = opts.verbose == nil and 1 or opts.verbose
  local bar
  for _, cb in ipairs(local_cbs) do if cb.on_train_begin then cb:on_train_begin(model) end end
  local function on_progress(m)
    if m.kind == "epoch_begin" then
      for _, cb in ipairs(local_cbs) do if cb.on_epoch_begin then cb:on_epoch_begin(m.epoch, model) end end
      if verbose ~= 0 and ldist.progress then
        bar = ldist.progress.new { total = m.total and m.total > 0 and m.total or nil,
          title = ("Epoch %d/%d"):format(m.epoch, spec.fit.epochs) }
      end
    elseif m.kind == "batch" then
      if bar then bar:update(m.step, m.logs) end
    elseif m.kind == "epoch_end" then
      if bar then
        if m.steps then bar:update(m.steps, m.logs) end
        bar:finish(m.logs)
        bar = nil
      end
      for _, cb in ipairs(local_cbs) do if cb.on_epoch_end then cb:on_epoch_end(m.epoch, m.logs, model) end end
    end
  end
  local results = lc:_run_job({ op = "fit", spec = spec }, on_progress)
  local r0 = results[1]
  for i, v in ipairs(vars) do v:assign(r0.weights[i]) end
  C.optimizer_set_state(model._optimizer, vars, r0.optimizer_state)
  for _, cb in ipairs(local_cbs) do if cb.on_train_end then cb:on_train_end(model) end end
  model.history = r0.history
  return r0.history
end

---------------------------------------------------------------- a worker of a LocalCluster
local function progress_callback(ctl, id, total)
  local last, sum, count = 0, 0, 0
  local cb = {}
  local function send(m) m.id = id; pcall(ctl.send, ctl, 0, "progress", C.pack(m)) end
  function cb:on_epoch_begin(epoch) sum, count = 0, 0; send({ kind = "epoch_begin", epoch = epoch, total = total }) end
  function cb:on_train_batch_end(step, logs)
    sum, count = sum + (logs.loss or 0), count + 1
    local now = ldist.clock()
    if now - last > 0.2 then last = now; send({ kind = "batch", step = step, logs = { loss = sum / count } }) end
  end
  function cb:on_epoch_end(epoch, logs) send({ kind = "epoch_end", epoch = epoch, logs = logs, steps = count }) end
  return cb
end

local function worker_fit(state, spec, ctl, id)
  if not state.strategy then state.strategy = distribute.MultiWorkerMirroredStrategy { timeout = tonumber(env("LDIST_TIMEOUT") or "") } end
  local s = state.strategy
  local model, opt
  s:scope(function()
    model = build_model(spec.model)
    opt = build_optimizer(spec.optimizer)
    C.optimizer_set_state(opt, model.trainable_variables, spec.optimizer_state)
    model:compile { optimizer = opt, loss = build_loss(spec.loss), metrics = build_metrics(spec.metrics) }
  end)
  local cache = {}
  local ds = build_dataset(spec.data, cache)
  local cbs = {}
  for i, c in ipairs(spec.callbacks or {}) do
    local make = ldist.callbacks[c.class]
    if not make then error("unknown callback " .. tostring(c.class), 0) end
    cbs[i] = make(c.config)
  end
  if s._rank == 0 then
    local card = ds.cardinality and ds:cardinality() or -2
    cbs[#cbs + 1] = progress_callback(ctl, id, spec.fit.steps_per_epoch or (card >= 0 and card or nil))
  end
  local history = model:fit(ds, { epochs = spec.fit.epochs, initial_epoch = spec.fit.initial_epoch,
    steps_per_epoch = spec.fit.steps_per_epoch, verbose = 0, callbacks = cbs,
    validation_data = spec.validation and build_dataset(spec.validation, cache) or nil })
  if s._rank ~= 0 then return { rank = s._rank } end
  local w = {}
  for i, v in ipairs(model.trainable_variables) do w[i] = v:cpu() end
  return { history = history, weights = w, optimizer_state = C.optimizer_state(opt, model.trainable_variables) }
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
  local ctl = C.join { rank = rank, size = size, leader = env("LDIST_COORDINATOR"), secret = read_secret(size),
    data_plane = false, name = "process", timeout = tonumber(env("LDIST_TIMEOUT") or "") or 30 }
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
        local okj, res = xpcall(run_job, function(e) return debug.traceback(tostring(e), 2) end, state, job, ctl)
        reply = { id = job.id, ok = okj, result = okj and res or nil, error = (not okj) and tostring(res) or nil }
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

---------------------------------------------------------------- documentation
local function doc(obj, name, text) docs[name] = text; if obj then docs[obj] = text end end
doc(distribute.MultiWorkerMirroredStrategy, "distribute.MultiWorkerMirroredStrategy",
  "distribute.MultiWorkerMirroredStrategy{cluster=, timeout=30, communication=\"auto\"|\"ring\"|\"nccl\",\n" ..
  "                                       auto_shard_policy=\"AUTO\", heartbeat_timeout=}\n\n" ..
  "Synchronous training over several processes (one replica each): gradients are summed across\n" ..
  "them with a ring all-reduce (NCCL on GPUs) whose links are shared memory between processes of\n" ..
  "one machine and ZeroMQ between machines (LDIST_RING_TRANSPORT=tcp: ZeroMQ everywhere). The\n" ..
  "cluster comes from cluster= (a TF_CONFIG table or JSON string, or a distribute.LocalCluster),\n" ..
  "else the TF_CONFIG environment variable, else LDIST_RANK/LDIST_WORLD_SIZE/LDIST_LEADER, Slurm\n" ..
  "or mpirun variables.\n" ..
  "`ldist launch -n 4 script.lua` starts 4 such processes on this machine.\n" ..
  "Every collective fails within `timeout` seconds, naming the worker, when one dies.\n" ..
  "strategy:run(fn, inputs), strategy:reduce(op, v), strategy:experimental_distribute_dataset(ds),\n" ..
  "model:fit under strategy:scope() work as with MirroredStrategy; strategy:is_chief().")
doc(distribute.LocalCluster, "distribute.LocalCluster",
  "distribute.LocalCluster{workers=2, timeout=30, threads=}\n\n" ..
  "Start worker processes on this machine that wait for work from this session (authenticated\n" ..
  "with a fresh secret). MultiWorkerMirroredStrategy{cluster=lc} + model:fit trains on them: the\n" ..
  "model, its weights, optimizer and the dataset's recipe travel to the workers; the history and\n" ..
  "the trained weights come back. lc:run(code) runs Lua code on every worker. lc:shutdown()\n" ..
  "(or the end of the session) stops them.")
doc(distribute.FileDataset, "distribute.FileDataset",
  "distribute.FileDataset(files, function(files) return dataset end)\n\n" ..
  "A dataset read from files, which auto_shard_policy FILE splits by file across workers.")
doc(distribute.resolve_cluster, "distribute.resolve_cluster",
  "distribute.resolve_cluster([tf_config]) -> {rank=, size=, leader=, task_type=, task_index=, source=}\n\n" ..
  "Where this process stands in its cluster (TF_CONFIG, LDIST_*, Slurm or mpirun variables).")
