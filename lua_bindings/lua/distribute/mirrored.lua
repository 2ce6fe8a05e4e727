-- distribute/mirrored.lua - MirroredStrategy: synchronous data parallelism over the
-- devices of one process (TF's tf.distribute.MirroredStrategy).
--
-- How a step runs. Lua is one thread, so replicas cannot each run Lua at the
-- same time; instead every replica's function runs as a coroutine on the Lua
-- thread and only *issues* work: the ops of replica r are queued on device r's
-- executor and return at once (cpu:0, the host, runs its ops inline, so
-- replica 0 is always issued last, after the others are already computing).
-- When a replica reaches a collective (optimizer:apply_gradients, all_reduce)
-- it yields; once every replica has arrived the collective is queued on all
-- devices (each replica sums a slice and writes the sum to all, over shared
-- memory) and each replica resumes. This is TF's merge_call, with coroutines
-- for threads.
local ldist = ...
local C = ldist._distribute
local tensor, distribute, optim = ldist.tensor, ldist.distribute, ldist.optim
local docs = ldist.docs

ldist.config = ldist.config or {}
function ldist.config.cpu_devices(n)
  return C.cpu_devices(n)
end
docs[ldist.config.cpu_devices] = "ldist.config.cpu_devices(n)\n\n" ..
  "Split the CPU into n logical devices cpu:0 .. cpu:n-1 (like TF's logical device\n" ..
  "configuration). cpu:0 is the host; cpu:1.. each run kernels on their own thread.\n" ..
  "The cores are shared out: each device gets a pool of cores/n threads (the remainder\n" ..
  "to the first devices), pinned to its own cores where the system allows, so replicas\n" ..
  "never compete for a core; with SMT (hyper-threading) both threads of a physical core\n" ..
  "go to the same device while there are at least n physical cores.\n" ..
  "ldist.config.cpu_split() says how the cores were split.\n" ..
  "The count can only grow."
docs["ldist.config.cpu_devices"] = docs[ldist.config.cpu_devices]

function ldist.config.fused_attention(mode)
  return ldist.nn._fused_attention(mode)
end
docs[ldist.config.fused_attention] = "ldist.config.fused_attention([mode]) -> the mode before\n\n" ..
  "Whether MultiHeadAttention (without dropout, float32, key and value widths equal\n" ..
  "and 16, 32 or 64) runs one fused kernel, FlashAttention's online softmax with no\n" ..
  "[T, S] weight matrix in memory, instead of product, softmax, product. mode:\n" ..
  "\"on\" (every device), \"off\", \"auto\" (the default: the unfused path for now; on\n" ..
  "CPUs its BLAS products are faster, and the GPU kernel becomes the GPUs' default\n" ..
  "once it has been measured on one). LDIST_FUSED_ATTENTION sets the mode a process\n" ..
  "starts with. The two paths agree to float32 rounding, NaN included, with one\n" ..
  "exception: a NaN in a key or value the causal mask hides from a query reaches that\n" ..
  "query's output unfused (0 x NaN in the weighted sum, as in Keras) but not fused,\n" ..
  "which skips hidden keys."
docs["ldist.config.fused_attention"] = docs[ldist.config.fused_attention]

function ldist.config.cpu_split()
  return C.cpu_split()
end
docs[ldist.config.cpu_split] = "ldist.config.cpu_split() -> table\n\n" ..
  "How this process's cores are shared out: cores (the CPU ids it may use: all of them,\n" ..
  "or its share when several processes of one job run on this host: ldist launch,\n" ..
  "LocalCluster, mpirun, srun), local_rank and local_size (its place among those\n" ..
  "processes), physical_cores and smt (how many physical cores those ids are, and the\n" ..
  "most hardware threads of one: shares are whole physical cores, both threads of a\n" ..
  "core to one device or process), devices[i] = {name, threads, cores, pinned} for each\n" ..
  "logical CPU device, text, one line saying all that, and blas, the BLAS library behind CPU products and\n" ..
  "the kernels it runs (ldist names OpenBLAS's kernel family from the processor's\n" ..
  "instruction sets unless OPENBLAS_CORETYPE does), and bf16_gemm, how bfloat16 products run:\n" ..
  "\"avx512_bf16\" (vdpbf16ps, float32 sums) where the processor has it, else \"float32\" (also\n" ..
  "when LDIST_NO_AVX512_BF16=1), and denormals, \"flushed\" (CPU kernels flush subnormal floats to\n" ..
  "zero, as TensorFlow's do) or \"kept\" (LDIST_DENORMALS=keep). LDIST_NUM_THREADS sets the thread count instead\n" ..
  "(nothing is pinned then); LDIST_CPU_PIN=0 turns pinning off; LDIST_CPU_CORES=N\n" ..
  "pretends N cores (to try a split), LDIST_CPU_TOPOLOGY=dir reads their topology from a\n" ..
  "copy of /sys/devices/system/cpu."
docs["ldist.config.cpu_split"] = docs[ldist.config.cpu_split]

ldist.config.traceback_filtering = ldist._traceback_filtering
docs[ldist.config.traceback_filtering] = "ldist.config.traceback_filtering([on]) -> whether it was on\n\n" ..
  "Keras's traceback filtering (keras.config.disable_traceback_filtering): on by default, an error raised\n" ..
  "inside ldist's own Lua code (the prelude) is reported at your line, the innermost frame of code that\n" ..
  "is not ldist's, and tracebacks in the REPL, scripts and notebooks leave out ldist's frames.\n" ..
  "traceback_filtering(false), or LDIST_TRACEBACK_FILTERING=0 in the environment, shows them all\n" ..
  "(to debug ldist itself)."
docs["ldist.config.traceback_filtering"] = docs[ldist.config.traceback_filtering]

local per_replica, is_pr, check_axis = distribute.PerReplica, distribute.is_per_replica, ldist._util.check_axis

---------------------------------------------------------------- the strategy
local Mirrored = distribute._strategy_class("ldist.MirroredStrategy")
Mirrored.__tostring = function(s)
  return ("<MirroredStrategy on %s, %d replicas>"):format(table.concat(s.devices, ", "), s.num_replicas_in_sync)
end

function distribute.MirroredStrategy(opts)
  opts = opts or {}
  if type(opts) ~= "table" then error("bad argument #1 to 'MirroredStrategy' (options table expected)", 2) end
  local devices = opts.devices
  if devices == nil then
    devices = {}
    for _, d in ipairs(tensor.devices()) do if d:match("^cuda:") then devices[#devices + 1] = d end end
    if #devices == 0 then
      for _, d in ipairs(tensor.devices()) do if d:match("^cpu:") then devices[#devices + 1] = d end end
    end
  end
  if type(devices) ~= "table" then
    error(("bad argument #1 to 'MirroredStrategy' (devices must be a list of device names such as {\"cpu:0\", \"cpu:1\"}, got %s)")
      :format(type(devices)), 2)
  end
  if #devices == 0 then error("bad argument #1 to 'MirroredStrategy' (no devices)", 2) end
  local known, seen = {}, {}
  for _, d in ipairs(tensor.devices()) do known[d] = true end
  for _, d in ipairs(devices) do
    if not known[d] then
      error(("bad argument #1 to 'MirroredStrategy' (unknown device '%s'; devices: %s; " ..
        "ldist.config.cpu_devices(n) makes more CPU devices)"):format(tostring(d), table.concat(tensor.devices(), ", ")), 2)
    end
    if seen[d] then error(("bad argument #1 to 'MirroredStrategy' (device %s is listed twice)"):format(d), 2) end
    seen[d] = true
  end
  local impl = opts.cross_device_ops or "all_reduce"
  if impl ~= "all_reduce" and impl ~= "reduce_to_one_device" then
    error(("bad argument #1 to 'MirroredStrategy' (cross_device_ops must be \"all_reduce\" or \"reduce_to_one_device\", got %s)")
      :format(tostring(impl)), 2)
  end
  devices = table.move(devices, 1, #devices, 1, {})   -- sorted below; the caller's list stays as it was
  -- the host (inline) device must be replica 0, so it is issued last
  table.sort(devices, function(a, b)
    local ha, hb = not C.is_async(a), not C.is_async(b)
    if ha ~= hb then return ha end
    return a < b
  end)
  local s = setmetatable({ kind = "MirroredStrategy", devices = devices, num_replicas_in_sync = #devices,
    extended = { cross_device_ops = impl }, _depth = 0, _tracing = false }, Mirrored)
  s._comm = C.comm_new(devices, impl)
  return s
end
docs[distribute.MirroredStrategy] = "distribute.MirroredStrategy{devices={...}, cross_device_ops=\"all_reduce\"|\"reduce_to_one_device\"}\n\n" ..
  "Synchronous training on several devices of this process: every replica runs the step on its\n" ..
  "share of the global batch; optimizer:apply_gradients sums the gradients across replicas\n" ..
  "(all-reduce over shared memory) and applies the same update everywhere.\n" ..
  "Default devices: every GPU, else every CPU device (see ldist.config.cpu_devices).\n" ..
  "Create models and optimizers inside strategy:scope() so their variables are mirrored."
docs["distribute.MirroredStrategy"] = docs[distribute.MirroredStrategy]

-- variables created in the scope (or in run) are mirrored on every device
function Mirrored:_variable_devices() return self.devices end

-- Split the rows of every tensor of `element` over the replicas: replica r
-- gets floor(B/n) rows, plus one of the B % n left over for the first ones
-- (so an uneven last batch gives smaller or empty per-replica batches).
local function split_rows(self, t)
  local n, parts = self.num_replicas_in_sync, {}
  local rows = t.ndim > 0 and t.shape[1] or 1
  for r = 0, n - 1 do
    local lo, hi = ldist._util.share(rows, n, r)
    parts[r + 1] = t:slice(0, lo, hi):to(self.devices[r + 1])
  end
  return parts, rows
end

-- each replica's part of an element (a tensor, or a table of elements:
-- {x, y}, {{xa, xb}, y} for a model of two inputs), and the rows of its first tensor
local function split_element(self, e)
  if tensor.is_tensor(e) then return split_rows(self, e) end
  local per, rows = {}, nil
  for r = 1, self.num_replicas_in_sync do per[r] = {} end
  for i, t in pairs(e) do
    local parts, b = split_element(self, t)
    if i == 1 or rows == nil then rows = b end
    for r = 1, self.num_replicas_in_sync do per[r][i] = parts[r] end
  end
  return per, rows or 0
end
function Mirrored:_split(element) return per_replica(split_element(self, element)) end

-- Batches of rows of one source (a dataset of from_tensor_slices/range ->
-- shuffle/repeat/take/skip -> batch) are split as they are gathered: each
-- replica's rows are copied straight into a tensor on its device by that
-- device's executor, in parallel, instead of the issuing thread gathering
-- the whole batch and copying the parts again. Returns an iterator of
-- ({{tensors of replica 0}, ...}, global batch) and the underlying iterator
-- (a to-be-closed value), or nil for other datasets.
local dataset_mt = getmetatable(ldist.data.Dataset.range(0))
function Mirrored:_split_iter(ds)
  if getmetatable(ds) ~= dataset_mt or not ds:_splittable() then return nil end
  for _, d in ipairs(self.devices) do if not d:match("^cpu:") then return nil end end
  local it, devices = ds:iter(), self.devices
  -- the rows are gathered by each replica's executor: "input" in the trace
  -- (for the step that will take them: the next one)
  return function()
    local was, was_step = C.trace_phase("input"), self._tracing and C.trace_step((self._step or 0) + 1)
    local ok, parts, rows = xpcall(it._next_split, ldist._keep_traceback, it, devices)   -- a map function's frames
    C.trace_phase(was)
    if was_step then C.trace_step(was_step) end
    if not ok then error(parts, 0) end
    return parts, rows
  end, it
end

-- model:fit's batches under the strategy: elements {x, y, ...} whose
-- components are PerReplica values, or nil (fit splits whole batches)
function Mirrored:_fit_batches(ds)
  local next_split, it = self:_split_iter(ds)
  if not next_split then return nil end
  local n = self.num_replicas_in_sync
  return function()
    local parts, rows = next_split()
    if not parts then return nil end
    local el = {}
    for i = 1, #parts[1] do
      local v = {}
      for r = 1, n do v[r] = parts[r][i] end
      el[i] = per_replica(v, rows)
    end
    return el
  end, nil, nil, it
end

-- for inputs in strategy:experimental_distribute_dataset(ds) do ... end
local DistDataset = distribute._iterable({ __name = "ldist.DistributedDataset" })
DistDataset.__index = DistDataset
function DistDataset:iter()
  local next_split = self.strategy:_split_iter(self.dataset)
  if next_split then
    return function()
      local parts, rows = next_split()
      if parts == nil then return nil end
      return per_replica(parts, rows)
    end
  end
  local f, s, c = self.dataset:iter()
  return function()
    local e = f(s, c)
    c = e
    if e == nil then return nil end
    return self.strategy:_split(e)
  end
end
function Mirrored:experimental_distribute_dataset(ds)
  if type(ds) ~= "table" and type(ds) ~= "userdata" then
    error("bad argument #1 to 'experimental_distribute_dataset' (dataset expected)", 2)
  end
  return setmetatable({ dataset = ds, strategy = self }, DistDataset)
end

---------------------------------------------------------------- run
-- a traced step: the work issued from here on carries its number
local function next_step(self)
  if not self._tracing then return end
  self._step = (self._step or 0) + 1
  C.trace_step(self._step)
end

local function trace_compute(self, r, t0)
  if self._tracing and not C.is_async(self.devices[r + 1]) then
    C.trace_record(self.devices[r + 1], "compute", t0, ldist.clock())
  end
end

local dedupe = ldist._util.dedupe

function Mirrored:_collective(requests)
  local n = self.num_replicas_in_sync
  local kind, op, k = requests[0].kind, requests[0].op, #requests[0].values
  for r = 1, n - 1 do
    local q = requests[r]
    if q.kind ~= kind or #q.values ~= k then
      error(("replicas disagree on the collective: replica 0 called %s with %d values, replica %d %s with %d")
        :format(kind, k, r, q.kind, #q.values), 0)
    end
  end
  local lists = {}
  for r = 0, n - 1 do lists[r + 1] = dedupe(requests[r].values) end
  if kind == "all_reduce" then
    self._comm:all_reduce(lists, op == "mean")
    local out = {}
    for r = 0, n - 1 do out[r] = lists[r + 1] end
    return out
  elseif kind == "all_gather" then
    local out = {}
    for r = 0, n - 1 do
      local vals = {}
      for i = 1, k do
        local parts = {}
        for q = 0, n - 1 do parts[q + 1] = lists[q + 1][i]:to(self.devices[r + 1]) end
        vals[i] = tensor.concat(parts, requests[0].axis or 0)
      end
      out[r] = vals
    end
    return out
  end
  error("unknown collective " .. tostring(kind), 0)
end

-- the first global row of replica r's part of a batch of global_batch rows
-- split by _split (or as the PerReplica value says)
local function row_offset(pr, gb, n, r)
  if pr and pr.offsets then return pr.offsets[r + 1] or 0 end
  return (ldist._util.share(gb, n, r))
end

-- run: every replica's function is a coroutine on this thread; a replica
-- that reaches a collective yields it, and once all have, it runs on every
-- device (_collective) and they resume (TF's merge_call).
function Mirrored:_run(fn, args)
  local n = self.num_replicas_in_sync
  local global_batch, pr = 0, nil
  for i = 1, args.n do
    if is_pr(args[i]) then
      if #args[i].values ~= n then
        error(("bad argument #%d to 'run' (a PerReplica value of %d replicas for a strategy of %d)")
          :format(i + 1, #args[i].values, n), 0)
      end
      pr = args[i]
      global_batch = math.tointeger(args[i].global_batch) or 0
      break
    end
  end
  -- a PerReplica argument gives each replica its value; a plain tensor is
  -- used by every replica, on its device
  local function args_for(r)
    local a, dev = {}, self.devices[r + 1]
    for i = 1, args.n do
      local v = args[i]
      if is_pr(v) then v = v.values[r + 1]
      elseif tensor.is_tensor(v) and v.device ~= dev then v = v:to(dev) end
      a[i] = v
    end
    return a
  end
  local cos, done, results, resume = {}, {}, {}, {}
  for r = 0, n - 1 do cos[r] = coroutine.create(fn); resume[r] = args_for(r) end
  self._last_batch, self._last_path = global_batch, "run"
  if self._tracing then next_step(self); self._paths.run = true end
  C.host_async(true)     -- cpu:0 queues too: the Lua thread only issues
  C.step_begin(n)
  local ok, err = xpcall(function()
    while true do
      local requests, nreq = {}, 0
      for r = n - 1, 0, -1 do
        if not done[r] then
          C.set_replica(r, n, global_batch, self.devices[r + 1], row_offset(pr, global_batch, n, r))
          local t0 = ldist.clock()
          local res = table.pack(coroutine.resume(cos[r], table.unpack(resume[r], 1, args.n > #resume[r] and args.n or #resume[r])))
          C.set_replica(nil)
          trace_compute(self, r, t0)
          if not res[1] then
            local msg = ("replica %d (%s): %s"):format(r, self.devices[r + 1], tostring(res[2]))
            error(ldist._keep_traceback(msg, cos[r], res[2]), 0)   -- with the replica's frames (state.c)
          end
          if coroutine.status(cos[r]) == "dead" then
            done[r] = true
            results[r] = table.pack(table.unpack(res, 2, res.n))
          else
            local q = res[2]
            if type(q) ~= "table" or not q.kind then
              error(("replica %d yielded outside a collective; coroutine.yield is not allowed in a replica function")
                :format(r), 0)
            end
            requests[r] = q; nreq = nreq + 1
          end
        end
      end
      if nreq == 0 then break end
      if nreq < n then
        local callers, others = {}, {}
        for r = 0, n - 1 do
          if requests[r] then callers[#callers + 1] = tostring(r) else others[#others + 1] = tostring(r) end
        end
        error(("%s was called on replica(s) %s only (replica(s) %s returned first); every replica must make the " ..
          "same collective calls"):format(requests[tonumber(callers[1])].kind, table.concat(callers, ", "),
          table.concat(others, ", ")), 0)
      end
      local out = self:_collective(requests)
      for r = 0, n - 1 do resume[r] = { out[r] } end
    end
  end, ldist._keep_traceback)   -- its frames survive the rethrow (state.c)
  C.set_replica(nil)
  C.step_end()
  if not self._in_fit then C.host_async(false) end
  if not ok then error(err, 0) end
  -- PerReplica results (each return value separately)
  local nres = results[0] and results[0].n or 0
  local outs = { n = nres }
  for i = 1, nres do
    local vals = {}
    for r = 0, n - 1 do vals[r + 1] = results[r][i] end
    outs[i] = per_replica(vals, global_batch)
  end
  return outs
end

function Mirrored:_replica_context()
  local id = C.replica()
  return distribute._replica_context(self, id or 0, self.num_replicas_in_sync, self.devices[(id or 0) + 1])
end

-- optimizer:apply_gradients inside run: the gradients summed over the replicas
function Mirrored:_reduce_gradients(grads, vars)
  if self.num_replicas_in_sync == 1 then return grads end
  return coroutine.yield({ kind = "all_reduce", op = "sum", values = grads })
end

---------------------------------------------------------------- Keras fit under the strategy
-- model:fit keeps cpu:0 queueing for the whole loop, so one step's tail and
-- the next step's issue overlap (values are read one step late).
function Mirrored:_fit_begin()
  self._in_fit = true
  C.host_async(true)
end
function Mirrored:_fit_end()
  self._in_fit = false
  C.host_async(false)
end

-- One step of model:fit: returns the loss and the predictions as functions
-- that read them when called (want_pred false: no predictions gathered).
local free_now = getmetatable(tensor.zeros(1)).__close
function Mirrored:train_step(model, x, y, loss, opt, want_pred, w)
  local n = self.num_replicas_in_sync
  local xs = is_pr(x) and x or self:_split(x)   -- already split by _fit_batches
  local ys = is_pr(y) and y or self:_split(y)
  local ws = w ~= nil and (is_pr(w) and w or self:_split(w)) or nil   -- sample weights
  local gb = xs.global_batch
  if not self._in_fit then C.host_async(true) end
  self._last_batch, self._last, self._last_path = gb, setmetatable({ model = model }, { __mode = "v" }), "fit"
  if self._tracing then next_step(self); self._paths.fit = true end
  local lvs, grads, preds = {}, {}, {}
  local ok, err = xpcall(function()
    C.step_begin(n)
    for r = n - 1, 0, -1 do
      C.set_replica(r, n, gb, self.devices[r + 1], row_offset(xs, gb, n, r))
      local t0 = ldist.clock()
      -- dense kernels' gradients stay products x^T dy, which the collective
      -- sums over replicas slice by slice (no per-replica gradient to fill)
      local lv
      lv, grads[r + 1], preds[r] = model:_grads(xs.values[r + 1], ys.values[r + 1], loss, self._fuse_grads ~= false,
        ws and ws.values[r + 1], opt)
      lvs[r] = C.read_async(lv)
      free_now(lv)        -- its copy to the host is queued
      C.set_replica(nil)
      trace_compute(self, r, t0)
    end
    for r = 0, n - 1 do grads[r + 1] = dedupe(grads[r + 1]) end
    local vars = model.trainable_variables
    -- the update sharded over the replicas: each sums and updates 1/n of
    -- the variables, then the updated slices are gathered (ZeRO stage 1)
    C.trace_phase("optimizer")   -- in the sharded update, the collective records its parts itself
    if self._shard_update ~= false and self._comm:apply_sharded(opt, grads, vars) then return end
    C.trace_phase(nil)
    self._comm:all_reduce(grads, false)
    C.trace_phase("optimizer")
    for r = n - 1, 0, -1 do
      C.set_replica(r, n, gb, self.devices[r + 1], row_offset(xs, gb, n, r))
      local t0 = ldist.clock()
      optim._apply_gradients(opt, grads[r + 1], vars)
      C.set_replica(nil)
      trace_compute(self, r, t0)
    end
  end, ldist._keep_traceback)   -- its frames survive the rethrow (state.c)
  C.trace_phase(nil)
  C.set_replica(nil)
  C.step_end()
  -- The gradients are queued into the update already: drop them now rather
  -- than when Lua's collector gets to them, so their memory goes back to
  -- the device's cache at once and the next step reuses the same, still
  -- warm, buffers (measured: the weight-gradient products' zero fill took
  -- 3x as long in buffers left to the collector).
  for r = 1, n do
    for _, g in pairs(grads[r] or {}) do free_now(g) end
  end
  -- So are the step's inputs on the replicas' devices and, when nothing will
  -- read them (no metrics), its labels and predictions: left to the
  -- collector, whether they went back to a GPU's cache before the next step
  -- allocated depended on where the collector's cycle stood, so a script
  -- with a larger Lua heap saw device allocations (cudaMalloc) in every
  -- steady step (tests/cuda_emu/run.sh's traces)
  -- With metrics, fit gathers the labels it gave as replicas' parts after
  -- the next step is issued, then hands them back (_release_step); parts
  -- split here nothing else reads.
  local nest = ldist._util.nest
  local function free_parts(v) for r = 1, n do nest.map(v.values[r], free_now) end end
  free_parts(xs)
  if want_pred == false or ys ~= y then free_parts(ys) end
  if ws and (want_pred == false or ws ~= w) then free_parts(ws) end
  if want_pred == false then
    for r = 0, n - 1 do nest.map(preds[r], free_now) end
  end
  if not self._in_fit then C.host_async(false) end
  if not ok then error(err, 0) end
  local function loss_value()
    local total = 0
    for r = 0, n - 1 do total = total + lvs[r]:item() end
    return total
  end
  local host_preds
  local function predictions()   -- a tensor, or a list per output (ldist._util.nest, keras/training.lua)
    if host_preds then return host_preds end
    local parts = {}
    -- each replica's predictions copied to the host, then given back to its device
    for r = 0, n - 1 do parts[r + 1] = nest.map(preds[r], function(t) local c = t:cpu(); free_now(t); return c end) end
    host_preds = nest.concat(parts)
    return host_preds
  end
  return loss_value, want_pred ~= false and predictions or nil
end

function Mirrored:_release_step(v)
  local nest = ldist._util.nest
  for r = 1, #v.values do nest.map(v.values[r], free_now) end
end

---------------------------------------------------------------- watching it: traces
-- Every replica's device records spans (engine/ld_executor.c): the kernels
-- it ran, under the phase the issuing thread declared when it queued them
-- (C.trace_phase: input, forward, backward, optimizer; "compute" where no
-- phase was declared), its waits and its all-reduce, each with the step
-- number (C.trace_step) of the work that queued it.

function Mirrored:trace(on)
  self._tracing = on and true or false
  C.trace_enable(self.devices, self._tracing)
  -- a new trace starts the counters afresh; stopping keeps them for
  -- trace_summary() and timeline() of the trace just taken
  if self._tracing then
    self._comm:stats(true); self._trace_t0 = ldist.clock(); self._spans = {}; self._step = 0
    self._paths = {}
  else
    self:trace_spans()
    C.trace_step(0)
  end
  return self
end

-- Collect the spans recorded so far: {[r+1] = {{kind, start, end, step}, ...}}
function Mirrored:trace_spans()
  self._spans = self._spans or {}
  for r, d in ipairs(self.devices) do
    self._spans[r] = self._spans[r] or {}
    for _, s in ipairs(C.trace_take(d)) do table.insert(self._spans[r], s) end
  end
  return self._spans
end

local COMPUTE_KINDS = { input = true, forward = true, backward = true, optimizer = true, compute = true }

-- strategy:trace_summary() -> {compute=, wait=, allreduce=, bytes=, calls=, bus_bandwidth=, per_replica={...}}
-- (seconds, bytes; the slowest replica's time of each kind), printed as a
-- table. Bus bandwidth as nccl-tests defines it: 2(n-1)/n x bytes / time.
function Mirrored:trace_summary()
  local spans = self:trace_spans()
  local n = self.num_replicas_in_sync
  local per, tot = {}, { compute = 0, wait = 0, allreduce = 0 }
  local lo, hi = math.huge, -math.huge
  for r = 1, n do
    local s = { compute = 0, wait = 0, allreduce = 0 }
    for _, sp in ipairs(spans[r] or {}) do
      local d = sp[3] - sp[2]
      s[sp[1]] = (s[sp[1]] or 0) + d
      if COMPUTE_KINDS[sp[1]] and sp[1] ~= "compute" then s.compute = s.compute + d end
      lo, hi = math.min(lo, sp[2]), math.max(hi, sp[3])
    end
    per[r] = s
    for k in pairs(tot) do tot[k] = math.max(tot[k], s[k]) end
  end
  local st = self._comm:stats(false)
  tot.bytes, tot.calls, tot.per_replica = st.bytes, st.calls, per
  tot.bus_bandwidth = st.seconds > 0 and (2 * (n - 1) / n) * st.bytes / st.seconds or 0
  tot.steps = self._step or 0
  local rows = {}
  for r = 1, n do
    rows[r] = { who = ("replica %d (%s)"):format(r - 1, self.devices[r]), compute = per[r].compute, wait = per[r].wait,
      comm = per[r].allreduce, bytes = st.bytes, bus_bandwidth = tot.bus_bandwidth }
  end
  return distribute._trace_summary(tot, rows, { title = ("MirroredStrategy (%d replicas), %d steps"):format(n, tot.steps),
    over = hi > lo and hi - lo or nil, comm_name = "all-reduce",
    notes = { "compute: input, forward, backward and the optimizer's update; bytes: reduced per replica;",
      "bus bandwidth = 2(n-1)/n x bytes / all-reduce time (as nccl-tests)" } })
end

-- Chrome trace (chrome://tracing, Perfetto): one row per replica.
function Mirrored:write_trace(path)
  local spans = self:trace_spans()
  local f, err = ldist.io._open_write(path)   -- never through a planted link
  if not f then error("write_trace: cannot write the trace: " .. err, 2) end
  f:write('{"traceEvents":[')
  local first, t0 = true, self._trace_t0 or 0
  for r, list in ipairs(spans) do
    f:write((first and "" or ","), ('{"name":"thread_name","ph":"M","pid":0,"tid":%d,"args":{"name":"replica %d (%s)"}}')
      :format(r - 1, r - 1, self.devices[r]))
    first = false
    for _, s in ipairs(list) do
      f:write((',{"name":"%s","ph":"X","pid":0,"tid":%d,"ts":%.1f,"dur":%.1f,"args":{"step":%d}}'):format(s[1], r - 1,
        (s[2] - t0) * 1e6, (s[3] - s[2]) * 1e6, s[4] or 0))
    end
  end
  f:write("]}\n")
  f:close()
  return path
end

-- strategy:timeline{steps = {a, b}, save = "t.svg", width = 960} -> a Timeline (distribute/timeline.lua)
function Mirrored:timeline(opts)
  opts = opts or {}
  local spans = self:trace_spans()
  -- the bytes each step's all-reduce carried (the collective counts them per trace, not per span)
  local st = self._comm:stats(false)
  local per_step = (self._step or 0) > 0 and st.calls > 0 and st.bytes / self._step or nil
  local rows = {}
  for r, list in ipairs(spans) do
    local out = {}
    for i, s in ipairs(list) do
      out[i] = { kind = s[1], t0 = s[2], t1 = s[3], step = (s[4] or 0) > 0 and s[4] or nil }
      if s[1] == "allreduce" and per_step and out[i].step then
        out[i].note = ("the step's all-reduce carries %s per replica (in %d-replica slices)"):format(
          ldist._util.fmt_bytes(per_step), #self.devices)
      end
    end
    rows[r] = { who = ("replica %d"):format(r - 1), label = ("replica %d (%s)"):format(r - 1, self.devices[r]), spans = out }
  end
  local notes = {}
  local paths = self._paths or {}
  if paths.run then
    notes[#notes + 1] = "in strategy:run your function's forward, backward and update are one \"compute\" phase; model:fit separates them"
  end
  if paths.fit then
    notes[#notes + 1] = "all-reduce: each replica sums its slice and copies it to the others; the dense layers' weight " ..
      "gradients are computed inside it (backward)" .. (self._shard_update ~= false and ", then its slice is updated (optimizer)" or "")
  end
  return distribute._timeline({ title = ("MirroredStrategy: %d replicas"):format(#self.devices),
    subtitle = ("devices %s, all-reduce over shared memory"):format(table.concat(self.devices, ", ")),
    rows = rows, waits_for = true, notes = notes,
    empty_text = ("timeline of %d replicas: nothing recorded yet (strategy:trace(true), then run steps)"):format(#self.devices) },
    opts)
end

-- strategy:explain() -> what one step does here, with this run's numbers
local model_numbers = ldist._util.model_numbers

function Mirrored:explain()
  local n, devs = self.num_replicas_in_sync, table.concat(self.devices, ", ")
  local gb = self._last_batch
  local out = { ("MirroredStrategy: synchronous data parallelism, %d replica%s on %s (one process)."):format(n,
    n == 1 and "" or "s", devs) }
  if gb then
    local parts = {}
    for r = 0, n - 1 do
      local lo, hi = ldist._util.share(gb, n, r)
      parts[#parts + 1] = ("replica %d rows %d-%d (%d)"):format(r, lo, hi - 1, hi - lo)
    end
    out[#out + 1] = ("1. Input: the global batch of %d examples is split by rows: %s."):format(gb, table.concat(parts, ", "))
  else
    out[#out + 1] = "1. Input: each global batch is split by rows, about 1/" .. n .. " per replica (no step has run yet)."
  end
  out[#out + 1] = "2. Each replica, on its device and in parallel: forward on its rows, the loss (its rows' sum over the " ..
    "global batch size, so the replicas' losses add up to the batch mean), backward."
  local nv, count = model_numbers(self._last and self._last.model)
  if nv then
    local bytes = count * 4
    out[#out + 1] = ("3. All-reduce: the %d gradients of the model's trainable variables (%d numbers, %s per replica) are " ..
      "summed over the %d replica%s through shared memory: each replica sums 1/%d of them and copies its slice to the " ..
      "others; each moves 2 x %d/%d x %s = %s."):format(nv, count, ldist._util.fmt_bytes(bytes), n, n == 1 and "" or "s", n,
      n - 1, n, ldist._util.fmt_bytes(bytes), ldist._util.fmt_bytes(2 * (n - 1) / n * bytes))
  else
    local st = self._comm:stats(false)
    out[#out + 1] = "3. All-reduce: every gradient is summed over the replicas through shared memory" .. (st.calls > 0 and
      (" (measured: %s per replica per call, %d calls)"):format(ldist._util.fmt_bytes(st.bytes / st.calls), st.calls) or
      " (4 bytes per trainable number; fit a model under this strategy to see its size)") .. "."
  end
  local cpu = true
  for _, d in ipairs(self.devices) do if not d:match("^cpu") then cpu = false end end
  if self._shard_update ~= false and cpu and n > 1 and self._last_path ~= "run" then
    out[#out + 1] = ("4. Update: sharded - each replica applies the optimizer to its 1/%d of the summed gradients and " ..
      "copies the updated weights to the others, so every replica holds the same weights."):format(n)
  else
    out[#out + 1] = "4. Update: every replica applies the same optimizer step to the summed gradients, so the weights stay identical" ..
      (self._last_path == "run" and " (optimizer:apply_gradients in your step function)." or ".")
  end
  if cpu then out[#out + 1] = "Cores: " .. C.cpu_split().text .. "." end
  if self._tracing or (self._spans and #self._spans > 0) then
    out[#out + 1] = "Traced: strategy:trace_summary() and strategy:timeline() show the times."
  end
  return ldist.text(table.concat(out, "\n"))
end

docs["Strategy:trace"] = "strategy:trace(true|false)\n\n" ..
  "Record, per replica (per worker, per ps task), what it does in each step: input, forward,\n" ..
  "backward, all-reduce (push/pull), optimizer, waits. Then: strategy:trace_summary() (a table\n" ..
  "with units; the numbers as fields), strategy:timeline{steps={a,b}, save=\"t.svg\"} (a picture with\n" ..
  "a time axis, steps and a legend; inline in a notebook), strategy:write_trace(\"trace.json\")\n" ..
  "(Chrome trace; Mirrored). distribute.compare_timelines{t1, t2} draws two on one scale."
docs[Mirrored.trace] = docs["Strategy:trace"]
ldist.document(Mirrored.timeline, { "Strategy:timeline", "MirroredStrategy:timeline" },
  "strategy:timeline{steps = {a, b}, save = \"t.svg\", width = 960} -> Timeline\n\n" ..
  "The trace (strategy:trace(true)) as a picture: one row per replica, a time axis, step numbers,\n" ..
  "the phases in colours with a legend, waits explained; hover a span for its details.")
ldist.document(Mirrored.trace_summary, { "Strategy:trace_summary", "MirroredStrategy:trace_summary" },
  "strategy:trace_summary() -> summary: prints a table per replica (compute, wait, all-reduce, bytes,\n" ..
  "bus bandwidth); fields compute, wait, allreduce (seconds), bytes, calls, bus_bandwidth (bytes/s),\n" ..
  "per_replica[r].{compute, wait, allreduce, forward, backward, optimizer, input}.")
ldist.document(Mirrored.explain, { "Strategy:explain", "MirroredStrategy:explain" },
  "strategy:explain() -> Text: one step of this strategy narrated with this run's numbers (batch split,\n" ..
  "what each replica computes, what is reduced and how many bytes, how the update is applied).")
