-- 60_distribute.lua - the `distribute` module: the default strategy and
-- OneDeviceStrategy, with TF's names (tf.distribute). Mirrored,
-- MultiWorkerMirrored and ParameterServer strategies build on this interface.
local ldist = ...
local tensor = ldist.tensor
local docs = ldist.docs

local distribute = {}
ldist.distribute = distribute
ldist.globals.distribute = true

local Strategy = {}
Strategy.__index = Strategy
Strategy.__name = "ldist.Strategy"
function Strategy.__tostring(s)
  return ("<%s on %s, %d replica(s)>"):format(s.kind, table.concat(s.devices, ", "), s.num_replicas_in_sync)
end

local current = nil      -- the strategy whose scope is open

local function new_strategy(kind, devices)
  return setmetatable({ kind = kind, devices = devices, num_replicas_in_sync = #devices,
    extended = {}, _depth = 0 }, Strategy)
end

local default = new_strategy("DefaultStrategy", { "cpu:0" })

-- strategy:scope() returns a to-be-closed value:  local _ <close> = strategy:scope()
-- strategy:scope(fn) runs fn inside the scope and returns its results.
function Strategy:scope(fn)
  if current and current ~= self and current ~= default then
    error(("a scope of %s is already open; close it before entering another strategy's scope")
      :format(current.kind), 2)
  end
  local prev = current
  current = self
  self._depth = self._depth + 1
  local closer = setmetatable({}, { __close = function()
    self._depth = self._depth - 1
    current = prev
  end, __name = "ldist.StrategyScope" })
  if fn == nil then return closer end
  local res = table.pack(pcall(fn))
  getmetatable(closer).__close()
  if not res[1] then error(res[2], 0) end
  return table.unpack(res, 2, res.n)
end

-- strategy:run(fn, ...) calls fn(...) on every replica; here, once.
function Strategy:run(fn, ...)
  if type(fn) ~= "function" then error("bad argument #1 to 'run' (function expected)", 2) end
  return fn(...)
end

local function reduce_value(op, v, axis)
  if type(v) == "number" then return v end
  if not tensor.is_tensor(v) then
    error(("bad argument #2 to 'reduce' (tensor or number expected, got %s)"):format(type(v)), 3)
  end
  if axis ~= nil then
    v = op == "mean" and v:mean(axis) or v:sum(axis)
  end
  return v
end

-- strategy:reduce("sum"|"mean", per_replica, {axis=}) -> the reduced value.
-- A scalar result comes back as a Lua number, so it adds and formats like one.
function Strategy:reduce(op, v, opts)
  op = type(op) == "string" and op:lower() or op
  if op ~= "sum" and op ~= "mean" then
    error(("bad argument #1 to 'reduce' (\"sum\" or \"mean\" expected, got %s)"):format(tostring(op)), 2)
  end
  local axis = type(opts) == "table" and opts.axis or nil
  local r = reduce_value(op, v, axis)
  if tensor.is_tensor(r) and r:numel() == 1 and r.ndim == 0 then return r:item() end
  return r
end

function Strategy:experimental_local_results(v) return { v } end
function Strategy:gather(v, axis) return v end
function Strategy:experimental_distribute_dataset(ds) return ds end
function Strategy:distribute_datasets_from_function(fn)
  return fn({ num_input_pipelines = 1, input_pipeline_id = 0, num_replicas_in_sync = 1,
    get_per_replica_batch_size = function(_, global) return global end })
end

function distribute.get_strategy() return current or default end
function distribute.has_strategy() return current ~= nil and current ~= default end
function distribute.in_cross_replica_context() return true end

-- The replica context of the default strategy: one replica.
local ReplicaContext = {}
ReplicaContext.__index = ReplicaContext
function ReplicaContext:all_reduce(op, v) return v end
function ReplicaContext:all_gather(v) return v end
function distribute.get_replica_context()
  return setmetatable({ replica_id_in_sync_group = 0, num_replicas_in_sync = 1,
    strategy = distribute.get_strategy() }, ReplicaContext)
end

-- compute_average_loss(per_example_loss, {global_batch_size=}): sum / global batch,
-- so replicas' losses add up to the mean over the global batch (TF's rule).
function distribute.compute_average_loss(per_example, opts)
  if not tensor.is_tensor(per_example) then
    error(("bad argument #1 to 'compute_average_loss' (tensor of per-example losses expected, got %s)"):format(type(per_example)), 2)
  end
  local gbs = opts and opts.global_batch_size
  local n = per_example:numel()
  if gbs == nil then gbs = n * distribute.get_strategy().num_replicas_in_sync end
  if gbs == 0 then return per_example:sum() end
  return per_example:sum() * (1 / gbs)
end

function distribute.OneDeviceStrategy(opts)
  local dev = type(opts) == "string" and opts or (opts and opts.device) or "cpu:0"
  local found = false
  for _, d in ipairs(tensor.devices()) do if d == dev then found = true end end
  if not found then
    error(("bad argument #1 to 'OneDeviceStrategy' (unknown device '%s'; devices: %s)")
      :format(dev, table.concat(tensor.devices(), ", ")), 2)
  end
  return new_strategy("OneDeviceStrategy", { dev })
end

local function doc(obj, name, text) docs[name] = text; if obj then docs[obj] = text end end
doc(distribute, "distribute", "distribute\n\nDistribution strategies in the manner of tf.distribute:\n" ..
  "get_strategy(), OneDeviceStrategy, and (with later issues) MirroredStrategy,\n" ..
  "MultiWorkerMirroredStrategy and ParameterServerStrategy. Every strategy has\n" ..
  "scope(), run(fn, ...), reduce(op, v, {axis=}), experimental_distribute_dataset(ds),\n" ..
  "num_replicas_in_sync.")
doc(distribute.get_strategy, "distribute.get_strategy",
  "distribute.get_strategy()\n\nThe strategy whose scope is open, or the default strategy (one replica on cpu:0).")
doc(Strategy.scope, "Strategy:scope",
  "strategy:scope()  -- local _ <close> = strategy:scope()\nstrategy:scope(fn)\n\n" ..
  "Create models, optimizers and losses inside the scope so the strategy places their variables.")
doc(Strategy.run, "Strategy:run", "strategy:run(fn, ...)\n\nRun fn(...) on every replica; returns the per-replica results.")
doc(Strategy.reduce, "Strategy:reduce",
  "strategy:reduce(\"sum\"|\"mean\", value, {axis=})\n\nCombine per-replica values (and along axis when given).\n" ..
  "A scalar result is returned as a Lua number.")
doc(distribute.compute_average_loss, "distribute.compute_average_loss",
  "distribute.compute_average_loss(per_example_loss, {global_batch_size=})\n\n" ..
  "Sum of the per-example losses divided by the global batch size.")
