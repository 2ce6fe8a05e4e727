-- distribute/protocol.lua - the `distribute` module and THE strategy protocol: the
-- default strategy, OneDeviceStrategy, PerReplica values, contexts, reduce,
-- gather, distribute_datasets_from_function and the optimizer's hook. Every
-- strategy (distribute/mirrored.lua, distribute/multiworker.lua, distribute/parameter_server.lua) is a subclass
-- of Strategy that fills in the hooks below; nothing else in the prelude
-- asks which strategy runs it, and no file replaces a function defined here.
--
-- The protocol (what a strategy provides; defaults in Strategy):
--   s:_variable_devices()      devices a variable created in the scope (or in
--                              run) is mirrored on; nil: the variable stays where
--                              it is made (cpu:0)
--   s:_run(fn, args)           run fn on every local replica (args: packed; a
--                              PerReplica argument gives each replica its value);
--                              returns a packed list of PerReplica results
--   s:_replica_context()       the ReplicaContext inside run
--   s:_collective(requests)    a collective that replicas yield inside run
--                              ({kind="all_reduce"|"all_gather", op=, values=})
--   s:_reduce_gradients(g, v)  inside run, before an optimizer applies g to v:
--                              the gradients summed over the replicas
--   s:_sum_across(t)           cross-replica reduce and gather: add this process's
--                              partial result to the other processes' (workers)
--   s:_gather_across(t, axis)  concatenate this process's part with the others'
--   s:_input_pipelines()       (number of input pipelines, this process's id)
--   s:_local_devices()         the devices of this process's replicas
--   s:experimental_local_results(v), s:experimental_distribute_dataset(ds)
--   s:train_step(model, x, y, loss, opt, want_pred), s:_fit_begin(), s:_fit_end(),
--   s:_fit_batches(ds)         model:fit's step and hooks (keras/training.lua)
--   s:_release_step(v)         fit is done with a step's PerReplica value v (its
--                              labels and weights, once the metrics have read
--                              them): its parts may go back to their devices now
--   s:_lost_peer()             "worker 1 (pid 4242) is lost" (or how it died, when
--                              known) when a process of the job died
--                              (fit's one message after a failure), else nil
--   s:_fit(model, x, y, opts)  a strategy that trains elsewhere (a LocalCluster's
--                              workers, parameter servers) runs fit itself
--   s:_is_writer()             this process writes the job's files (checkpoints,
--                              logs): true but on the non-chief workers of a
--                              multi-worker job
--   s:_broadcast(v)            v as the writer process has it, on every process
--                              (v: plain values and tensors, as the cluster
--                              packs them); v where alone
local ldist = ...
local tensor, optim = ldist.tensor, ldist.optim
local C = ldist._distribute
local docs = ldist.docs

local distribute = {}
ldist.distribute = distribute
ldist.globals.distribute = true

---------------------------------------------------------------- PerReplica values
local PerReplica = { __name = "ldist.PerReplica" }
PerReplica.__index = PerReplica
-- values: one per local replica; global_batch: rows of the global batch;
-- offsets: the first global row of each replica's part (dropout, placement)
local function per_replica(values, global_batch, offsets)
  return setmetatable({ values = values, global_batch = global_batch, offsets = offsets }, PerReplica)
end
local function is_pr(v) return getmetatable(v) == PerReplica end
-- Losses made by compute_average_loss (a share of the global-batch loss
-- each), so that a PerReplica of them can say so when printed.
local loss_shares = setmetatable({}, { __mode = "k" })

-- One value of one replica, for people: a tensor's shape, dtype and device
-- (its value too when it is a scalar), a table's tensors in turn.
local function describe(v, depth)
  if tensor.is_tensor(v) then
    if v.ndim == 0 then
      local ok, x = pcall(v.item, v)
      if ok and type(x) == "number" then return ("%.4f (%s)"):format(x, v.dtype), v.device end
    end
    local shape = {}
    for i, n in ipairs(v.shape) do shape[i] = tostring(n) end
    return ("tensor [%s] %s"):format(table.concat(shape, ", "), v.dtype), v.device
  elseif type(v) == "table" and getmetatable(v) == nil and (depth or 0) < 2 then
    local parts, dev = {}, nil
    for i, x in ipairs(v) do
      local d, xd = describe(x, (depth or 0) + 1)
      parts[i] = d
      dev = dev or xd
    end
    return "{" .. table.concat(parts, ", ") .. "}", dev
  elseif type(v) == "number" then
    return ("%.4g"):format(v), nil
  end
  return (ldist.repr or tostring)(v), nil
end

-- PerReplica: 2 replicas
--   replica 0 on cpu:0: {tensor [4, 784] float32, tensor [4] int64}
--   replica 1 on cpu:1: ...
function PerReplica.__tostring(p)
  local n = #p.values
  local shares = n > 0
  for r = 1, n do shares = shares and loss_shares[p.values[r]] ~= nil end
  local lines = { ("PerReplica: %d replica%s"):format(n, n == 1 and "" or "s") }
  if shares then
    lines[1] = lines[1] .. (", each a share of the global-batch loss (of %d examples); "):format(loss_shares[p.values[1]])
      .. 'strategy:reduce("sum", v) is that loss'
  end
  for r = 1, n do
    local d, dev = describe(p.values[r])
    lines[#lines + 1] = ("  replica %d%s: %s"):format(r - 1, dev and (" on " .. dev) or "", d)
  end
  return table.concat(lines, "\n")
end
distribute.PerReplica = per_replica
distribute.is_per_replica = is_pr
local check_axis = ldist._util.check_axis



---------------------------------------------------------------- the strategy base
local Strategy = {}
Strategy.__index = Strategy
Strategy.__name = "ldist.Strategy"
function Strategy.__tostring(s)
  return ("<%s on %s, %d replica(s)>"):format(s.kind, table.concat(s.devices, ", "), s.num_replicas_in_sync)
end
distribute._Strategy = Strategy

-- a subclass: methods not given fall back to Strategy's
function distribute._strategy_class(name)
  local cls = setmetatable({}, { __index = Strategy })
  cls.__index = cls
  cls.__name = name
  cls.__tostring = Strategy.__tostring
  return cls
end

local scope_stack = {}   -- strategies whose scope is open, innermost last
local running = nil      -- the strategy inside whose run() the code is
local default

local function new_strategy(cls, kind, devices)
  return setmetatable({ kind = kind, devices = devices, num_replicas_in_sync = #devices,
    extended = {}, _depth = 0 }, cls)
end

default = new_strategy(Strategy, "DefaultStrategy", { "cpu:0" })

local function current_scope() return scope_stack[#scope_stack] end

-- where variables made now are mirrored: the innermost of run and scope
local function place_variables()
  local s = running or current_scope()
  C.mirror_devices(s and s:_variable_devices() or nil)
end
distribute._place_variables = place_variables

-- strategy:scope() returns a to-be-closed value:  local _ <close> = strategy:scope()
-- strategy:scope(fn) runs fn inside the scope and returns its results.
function Strategy:scope(fn)
  local cur = current_scope()
  if cur and cur ~= self and cur ~= default and self ~= default then
    error(("a scope of %s is already open; close it before entering another strategy's scope")
      :format(cur.kind), 2)
  end
  scope_stack[#scope_stack + 1] = self
  self._depth = self._depth + 1
  place_variables()
  local closed = false
  local closer = setmetatable({}, { __close = function()
    if closed then return end
    closed = true
    for i = #scope_stack, 1, -1 do
      if scope_stack[i] == self then table.remove(scope_stack, i); break end
    end
    self._depth = self._depth - 1
    place_variables()
  end, __name = "ldist.StrategyScope" })
  if fn == nil then return closer end
  local res = table.pack(xpcall(fn, ldist._keep_traceback))   -- its frames survive the rethrow (state.c)
  getmetatable(closer).__close()
  if not res[1] then error(res[2], 0) end
  return table.unpack(res, 2, res.n)
end

-- The default strategy and OneDeviceStrategy: variables on their one device
-- (nothing to do for cpu:0, where tensors are made anyway).
function Strategy:_variable_devices()
  if self == default or self.devices[1] == "cpu:0" then return nil end
  return { self.devices[1] }
end
function Strategy:_local_devices() return self.devices end
function Strategy:_input_pipelines() return 1, 0 end

-- strategy:run(fn, ...) calls fn(...) on every replica and returns what each
-- returned (a PerReplica value per result when there are several replicas).
function Strategy:run(fn, ...)
  if type(fn) ~= "function" then
    error(("bad argument #1 to 'run' (function expected, got %s)"):format(type(fn)), 2)
  end
  if running then error("strategy:run called inside a replica function (run does not nest)", 2) end
  local args = table.pack(...)
  running = self
  place_variables()
  local ok, res = xpcall(self._run, ldist._keep_traceback, self, fn, args)   -- frames kept (state.c)
  running = nil
  place_variables()
  if not ok then error(res, 0) end   -- res has its location: one, not "t.lua:2: t.lua:2: boom"
  return table.unpack(res, 1, res.n)
end

-- one replica: fn runs once, on the strategy's device
function Strategy:_run(fn, args)
  local dev = self.devices[1]
  local a = {}
  for i = 1, args.n do
    local v = args[i]
    if is_pr(v) then v = v.values[1] end
    if tensor.is_tensor(v) and v.device ~= dev then v = v:to(dev) end
    a[i] = v
  end
  if self ~= default then C.set_replica(0, 1, 0, dev, 0) end
  local res = table.pack(xpcall(fn, ldist._keep_traceback, table.unpack(a, 1, args.n)))
  if self ~= default then C.set_replica(nil) end
  if not res[1] then error(res[2], 0) end
  return table.pack(table.unpack(res, 2, res.n))
end

---------------------------------------------------------------- contexts
function distribute.get_strategy() return running or current_scope() or default end
function distribute.has_strategy() return distribute.get_strategy() ~= default end
-- TF: true inside a (non-default) strategy's scope, outside run
function distribute.in_cross_replica_context()
  if running then return false end
  local s = current_scope()
  return s ~= nil and s ~= default
end

local ReplicaContext = { __name = "ldist.ReplicaContext" }
ReplicaContext.__index = ReplicaContext
distribute._ReplicaContext = ReplicaContext
function ReplicaContext.__tostring(c)
  return ("<ReplicaContext: replica %d of %d>"):format(c.replica_id_in_sync_group, c.num_replicas_in_sync)
end
local function replica_context(strategy, id, n, device)
  return setmetatable({ strategy = strategy, replica_id_in_sync_group = id, num_replicas_in_sync = n,
    _device = device }, ReplicaContext)
end
distribute._replica_context = replica_context

function Strategy:_replica_context() return replica_context(self, 0, 1, self.devices[1]) end

-- TF: inside run, the replica's context; in a scope outside run, nil (the
-- cross-replica context); outside both, the default strategy's one replica.
function distribute.get_replica_context()
  if running then return running:_replica_context() end
  local s = current_scope()
  if s and s ~= default then return nil end
  return default:_replica_context()
end

local function copy(v) return tensor.is_tensor(v) and v:clone() or v end

-- ctx:all_reduce("sum"|"mean", value or list): a NEW value, reduced over the
-- replicas; the argument is left as it was (TF).
function ReplicaContext:all_reduce(op, value)
  op = type(op) == "string" and op:lower() or op
  if op ~= "sum" and op ~= "mean" then
    error(("bad argument #1 to 'all_reduce' (\"sum\" or \"mean\" expected, got %s)"):format(tostring(op)), 2)
  end
  local single = tensor.is_tensor(value) or type(value) == "number"
  if not single and type(value) ~= "table" then
    error(("bad argument #2 to 'all_reduce' (tensor, number or list of them expected, got %s)"):format(type(value)), 2)
  end
  local vals = {}
  for i, v in ipairs(single and { value } or value) do
    if type(v) == "number" then v = tensor.new(v)
    elseif not tensor.is_tensor(v) then
      error(("bad argument #2 to 'all_reduce' (value %d is a %s; tensors and numbers are reduced)"):format(i, type(v)), 2)
    end
    vals[i] = v:clone()
    if self._device and vals[i].device ~= self._device then vals[i] = vals[i]:to(self._device) end
  end
  local out = vals
  if self.num_replicas_in_sync > 1 then out = coroutine.yield({ kind = "all_reduce", op = op, values = vals }) end
  return single and out[1] or out
end

function ReplicaContext:all_gather(value, axis)
  local single = tensor.is_tensor(value)
  local list = single and { value } or value
  if type(list) ~= "table" then
    error(("bad argument #1 to 'all_gather' (tensor or list of tensors expected, got %s)"):format(type(value)), 2)
  end
  for i, v in ipairs(list) do
    if not tensor.is_tensor(v) then
      error(("bad argument #1 to 'all_gather' (value %d is a %s, not a tensor)"):format(i, type(v)), 2)
    end
    axis = check_axis("all_gather", 2, axis or 0, math.max(v.ndim, 1))
  end
  if self.num_replicas_in_sync == 1 then
    local out = {}
    for i, v in ipairs(list) do out[i] = copy(v) end
    return single and out[1] or out
  end
  local out = coroutine.yield({ kind = "all_gather", axis = axis or 0, values = list })
  return single and out[1] or out
end

---------------------------------------------------------------- the optimizer's hook
-- optimizer:apply_gradients inside run: the strategy sums the gradients over
-- its replicas first; then every replica applies the same update to its copy.
function Strategy:_reduce_gradients(grads, vars) return grads end

function optim.Optimizer.apply_gradients(self, grads, vars)
  if running then
    if vars == nil then   -- the {{g, v}, ...} form
      local g, v = {}, {}
      for i, p in ipairs(grads) do g[i], v[i] = p[1], p[2] end
      grads, vars = g, v
    end
    grads = running:_reduce_gradients(grads, vars)
  end
  return optim._apply_gradients(self, grads, vars)
end

---------------------------------------------------------------- reduce / gather / local results
function Strategy:experimental_local_results(v)
  if is_pr(v) then return v.values end
  if tensor.is_tensor(v) and v.trainable then
    -- a mirrored variable: one component per local replica
    local copies = C.mirror_copies(v)
    if #copies == #self:_local_devices() then return copies end
  end
  return { v }
end

-- across processes: nothing to add in one process
function Strategy:_sum_across(t, count) return t, count end
function Strategy:_gather_across(t, axis) return t end

local function on_host(v)
  if tensor.is_tensor(v) then return v:cpu() end
  return v
end

-- strategy:reduce("sum"|"mean", value, {axis=}) -> the value reduced over every
-- replica (of every worker); with axis, also along that axis, so "mean" is the
-- mean over all rows of the global batch. A scalar comes back as a Lua number.
function Strategy:reduce(op, v, opts)
  op = type(op) == "string" and op:lower() or op
  if op ~= "sum" and op ~= "mean" then
    error(("bad argument #1 to 'reduce' (\"sum\" or \"mean\" expected, got %s)"):format(tostring(op)), 2)
  end
  if opts ~= nil and type(opts) ~= "table" then
    error(("bad argument #3 to 'reduce' (options table {axis=} expected, got %s)"):format(type(opts)), 2)
  end
  local axis = opts and opts.axis
  local total, count = nil, 0
  for _, x in ipairs(self:experimental_local_results(v)) do
    if type(x) ~= "number" and not tensor.is_tensor(x) then
      error(("bad argument #2 to 'reduce' (tensor or number expected, got %s)"):format(type(x)), 2)
    end
    x = on_host(x)
    if axis ~= nil then
      axis = check_axis("reduce", 3, axis, tensor.is_tensor(x) and x.ndim or 0)
      count = count + x.shape[axis + 1]
      x = x:sum(axis)
    else
      count = count + 1
    end
    if tensor.is_tensor(x) and x.dtype ~= "float32" then x = x:astype("float32") end
    total = total == nil and x or total + x
  end
  if total == nil then error("bad argument #2 to 'reduce' (no values)", 2) end
  total, count = self:_sum_across(total, count)
  if op == "mean" then total = total * (1 / math.max(count, 1)) end
  if tensor.is_tensor(total) and total.ndim == 0 then return total:item() end
  return total
end

-- strategy:gather(value, axis): every replica's part, concatenated along axis
function Strategy:gather(v, axis)
  local parts = {}
  for i, x in ipairs(self:experimental_local_results(v)) do
    if not tensor.is_tensor(x) then
      error(("bad argument #1 to 'gather' (tensor or PerReplica tensors expected, got %s)"):format(type(x)), 2)
    end
    axis = check_axis("gather", 2, axis or 0, math.max(x.ndim, 1))
    parts[i] = on_host(x)
  end
  local t = #parts == 1 and parts[1] or tensor.concat(parts, axis or 0)
  return self:_gather_across(t, axis or 0)
end

---------------------------------------------------------------- input
function Strategy:experimental_distribute_dataset(ds) return ds end

-- TF's InputContext: what distribute_datasets_from_function's function is told
local InputContext = { __name = "ldist.InputContext" }
InputContext.__index = InputContext
function InputContext:get_per_replica_batch_size(global)
  if math.type(global) ~= "integer" or global < 1 then
    error(("bad argument #1 to 'get_per_replica_batch_size' (a positive integer expected, got %s)"):format(tostring(global)), 2)
  end
  local n = self.num_replicas_in_sync
  if global % n ~= 0 then
    error(("the global batch size (%d) is not divisible by the number of replicas in sync (%d)"):format(global, n), 2)
  end
  return global // n
end
InputContext.__tostring = function(c)
  return ("<InputContext: pipeline %d of %d, %d replicas>"):format(c.input_pipeline_id, c.num_input_pipelines,
    c.num_replicas_in_sync)
end

local dataset_mt = ldist.data and getmetatable(ldist.data.Dataset.range(0))
local function is_dataset(d)
  return getmetatable(d) == dataset_mt or (type(d) == "table" and type(d.iter) == "function")
end

-- `for x in dist do` over a distributed dataset: the first call (prev nil)
-- starts self:iter(), the next ones continue it. Every distributed dataset
-- class gets its __call here.
-- a dataset element (a tensor, or a table of them) on device dev
local function element_to(e, dev)
  if tensor.is_tensor(e) then return e:to(dev) end
  local out = {}
  for k, t in pairs(e) do out[k] = tensor.is_tensor(t) and t:to(dev) or t end
  return out
end

local function iterable(cls)
  cls.__call = function(self, _, prev)
    if prev == nil then self._next = self:iter() end
    return self._next()
  end
  return cls
end
distribute._iterable = iterable

-- The batches of one pipeline handed to the local replicas in turn: a step
-- takes one batch per local replica (replica 0 the first), as TF does.
local PipelineDist = iterable({ __name = "ldist.DistributedDataset" })
PipelineDist.__index = PipelineDist
-- an element with no rows, shaped like e (what a replica gets when the
-- pipeline ran out in the middle of a step)
local function empty_like(e)
  if tensor.is_tensor(e) then return e.ndim > 0 and e:slice(0, 0, 0) or e end
  local out = {}
  for k, v in pairs(e) do out[k] = empty_like(v) end
  return out
end

function PipelineDist:iter()
  local s, ds = self.strategy, self.dataset
  local devs = s:_local_devices()
  local pipes = s:_input_pipelines()
  local f, st, c = ds:iter()
  local ended = false
  return function()
    if ended then return nil end
    local vals, rows, offsets = {}, 0, {}
    for r = 1, #devs do
      local e = not ended and f(st, c) or nil
      c = e
      if e == nil then
        -- as TF: the replicas left without a batch in the last step get empty ones
        if r == 1 then return nil end
        ended = true
        e = empty_like(vals[1])
      end
      local moved = element_to(e, devs[r])
      local t1 = tensor.is_tensor(e) and e or e[1]
      offsets[r] = rows
      rows = rows + (tensor.is_tensor(t1) and (t1.ndim > 0 and t1.shape[1] or 1) or 0)
      vals[r] = moved
    end
    -- the global batch: every pipeline's batches (equal pipelines, as TF assumes)
    return per_replica(vals, rows * pipes, offsets)
  end
end
function PipelineDist:cardinality()
  local n = self.dataset.cardinality and self.dataset:cardinality() or -2
  if n < 0 then return n end
  local k = #self.strategy:_local_devices()
  return (n + k - 1) // k
end

-- strategy:distribute_datasets_from_function(function(ctx) return dataset end):
-- the function is called once per input pipeline (one per worker); each step
-- hands the pipeline's next batches to the local replicas, one each.
function Strategy:distribute_datasets_from_function(fn)
  if type(fn) ~= "function" then
    error(("bad argument #1 to 'distribute_datasets_from_function' (function expected, got %s)"):format(type(fn)), 2)
  end
  local np, id = self:_input_pipelines()
  local ctx = setmetatable({ num_input_pipelines = np, input_pipeline_id = id,
    num_replicas_in_sync = self.num_replicas_in_sync }, InputContext)
  local ds = fn(ctx)
  if not is_dataset(ds) then
    error(("bad argument #1 to 'distribute_datasets_from_function' (the function returned a %s; a dataset expected)")
      :format(type(ds)), 2)
  end
  return setmetatable({ dataset = ds, strategy = self }, PipelineDist)
end

---------------------------------------------------------------- losses
-- compute_average_loss(per_example_loss, {global_batch_size=}): sum / global batch,
-- so replicas' losses add up to the mean over the global batch (TF's rule:
-- the global batch is the per-replica batch times num_replicas_in_sync of
-- the strategy that runs the replica function).
function distribute.compute_average_loss(per_example, opts)
  if not tensor.is_tensor(per_example) then
    error(("bad argument #1 to 'compute_average_loss' (tensor of per-example losses expected, got %s)"):format(type(per_example)), 2)
  end
  local gbs = opts and opts.global_batch_size
  local n = per_example.ndim > 0 and per_example.shape[1] or 1
  if gbs == nil then gbs = n * distribute.get_strategy().num_replicas_in_sync end
  if gbs == 0 then return per_example:sum() end
  local loss = per_example:sum() * (1 / gbs)
  loss_shares[loss] = gbs
  return loss
end

-- nn.scale_regularization_loss(loss): TF's tf.nn.scale_regularization_loss.
-- A regularization term added on every replica is divided by the number of
-- replicas, so the replicas' gradients add up to it once.
function ldist.nn.scale_regularization_loss(loss)
  if not tensor.is_tensor(loss) and type(loss) ~= "number" then
    error(("bad argument #1 to 'scale_regularization_loss' (tensor or number expected, got %s)"):format(type(loss)), 2)
  end
  return loss * (1 / distribute.get_strategy().num_replicas_in_sync)
end

---------------------------------------------------------------- OneDeviceStrategy
local OneDevice = distribute._strategy_class("ldist.OneDeviceStrategy")
function distribute.OneDeviceStrategy(opts)
  local dev = type(opts) == "string" and opts or (type(opts) == "table" and opts.device) or "cpu:0"
  local found = false
  for _, d in ipairs(tensor.devices()) do if d == dev then found = true end end
  if not found then
    error(("bad argument #1 to 'OneDeviceStrategy' (unknown device '%s'; devices: %s)")
      :format(tostring(dev), table.concat(tensor.devices(), ", ")), 2)
  end
  return new_strategy(OneDevice, "OneDeviceStrategy", { dev })
end
-- its batches go to its device
local OneDeviceDist = iterable({ __name = "ldist.DistributedDataset" })
OneDeviceDist.__index = OneDeviceDist
function OneDevice:experimental_distribute_dataset(ds)
  if not is_dataset(ds) then error("bad argument #1 to 'experimental_distribute_dataset' (dataset expected)", 2) end
  return setmetatable({ dataset = ds, device = self.devices[1] }, OneDeviceDist)
end
-- its batches, moved to the device
function OneDeviceDist:iter()
  local dev = self.device
  local f, st, c = self.dataset:iter()
  return function()
    local e = f(st, c); c = e
    if e == nil then return nil end
    return element_to(e, dev)
  end
end

-- model:fit's step: the batch goes to the device
function OneDevice:train_step(model, x, y, loss, opt, want_pred, w)
  local dev = self.devices[1]
  -- x, y: a tensor, or a list per input / output (ldist._util.nest, keras/training.lua)
  local function to(t) return t.device ~= dev and t:to(dev) or t end
  local map = ldist._util.nest.map
  return model:train_step(map(x, to), map(y, to), loss, opt, map(w, to))
end

---------------------------------------------------------------- models bind to their strategy
-- A model remembers the strategy whose scope created it (Keras's
-- model.distribute_strategy): fit, and the build of its variables, run
-- under it wherever they are called. nn.c calls this for every new model.
function distribute._on_model_created(model)
  local s = distribute.get_strategy()
  if s ~= default then
    model.distribute_strategy = s
    model._variable_devices = s:_variable_devices()
    s:_model_created(model)
  end
end
function Strategy:_model_created(model) end
function Strategy:_release_step(v) end   -- nothing of a step is held beyond Lua's references
function Strategy:_is_writer() return true end
function Strategy:_broadcast(v) return v end

local doc = ldist.document
doc(distribute, "distribute", "distribute\n\nDistribution strategies in the manner of tf.distribute:\n" ..
  "get_strategy(), OneDeviceStrategy, MirroredStrategy, MultiWorkerMirroredStrategy and\n" ..
  "ParameterServerStrategy. Every strategy has scope(), run(fn, ...), reduce(op, v, {axis=}),\n" ..
  "gather(v, axis), experimental_distribute_dataset(ds), distribute_datasets_from_function(fn),\n" ..
  "experimental_local_results(v), num_replicas_in_sync.")
doc(distribute.get_strategy, "distribute.get_strategy",
  "distribute.get_strategy()\n\nInside strategy:run, the strategy running it; else the strategy whose scope is open,\n" ..
  "or the default strategy (one replica on cpu:0).")
doc(distribute.has_strategy, "distribute.has_strategy",
  "distribute.has_strategy()\n\nTrue inside a strategy's scope or run (not the default strategy).")
doc(distribute.in_cross_replica_context, "distribute.in_cross_replica_context",
  "distribute.in_cross_replica_context()\n\nTrue in a strategy's scope outside run (TF's cross-replica context).")
doc(distribute.get_replica_context, "distribute.get_replica_context",
  "distribute.get_replica_context()\n\nInside run: the replica's context (replica_id_in_sync_group, num_replicas_in_sync,\n" ..
  "all_reduce, all_gather). In a scope outside run: nil. Outside both: the default replica context.")
doc(Strategy.scope, "Strategy:scope",
  "strategy:scope()  -- local _ <close> = strategy:scope()\nstrategy:scope(fn)\n\n" ..
  "Create models, optimizers and losses inside the scope so the strategy places their variables.")
doc(Strategy.run, "Strategy:run", "strategy:run(fn, ...)\n\nRun fn(...) on every replica; returns the per-replica results.\n" ..
  "A PerReplica argument gives each replica its value; a plain tensor is used by every replica (on its device).")
doc(Strategy.reduce, "Strategy:reduce",
  "strategy:reduce(\"sum\"|\"mean\", value, {axis=})\n\nCombine per-replica values over every replica (and along axis\n" ..
  "when given: \"mean\" is then the mean over every row of the global batch). A scalar is returned as a number.")
doc(Strategy.gather, "Strategy:gather", "strategy:gather(value, axis)\n\nEvery replica's part of value, concatenated along axis.")
doc(Strategy.distribute_datasets_from_function, "Strategy:distribute_datasets_from_function",
  "strategy:distribute_datasets_from_function(function(ctx) return dataset end)\n\n" ..
  "The function is called once per input pipeline (one per worker) with an InputContext:\n" ..
  "ctx.num_input_pipelines, ctx.input_pipeline_id, ctx.num_replicas_in_sync and\n" ..
  "ctx:get_per_replica_batch_size(global). Each step hands the pipeline's next batches to the\n" ..
  "local replicas, one each, so the function batches at the per-replica batch size.")
doc(ReplicaContext.all_reduce, "ReplicaContext:all_reduce",
  "ctx:all_reduce(\"sum\"|\"mean\", value)\n\nA new value: value summed (averaged) over the replicas; value is unchanged.")
doc(distribute.compute_average_loss, "distribute.compute_average_loss",
  "distribute.compute_average_loss(per_example_loss, {global_batch_size=})\n\n" ..
  "Sum of the per-example losses divided by the global batch size (default: the per-replica\n" ..
  "batch times num_replicas_in_sync of the running strategy).")
doc(ldist.nn.scale_regularization_loss, "nn.scale_regularization_loss",
  "nn.scale_regularization_loss(loss)\n\nloss / num_replicas_in_sync of the running strategy (TF's tf.nn.scale_regularization_loss):\n" ..
  "a regularization term added on every replica then counts once in the summed gradients.")
doc(distribute.OneDeviceStrategy, "distribute.OneDeviceStrategy",
  "distribute.OneDeviceStrategy(\"cpu:1\")\n\nOne replica on the given device: variables made in its scope,\n" ..
  "the inputs of run and its results live there.")
