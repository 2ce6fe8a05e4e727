-- distribute/shipping.lua - what a model, a dataset, an optimizer, a loss and metrics
-- are made of, as data another process rebuilds them from: LocalCluster's
-- workers (distribute/local_cluster.lua) and the parameter-server workers
-- (distribute/ps_tasks.lua) receive these descriptions. Functions travel as
-- bytecode and may use only their arguments and globals (net.ship_fn).
local ldist = ...
local C, distribute = ldist._cluster, ldist.distribute
local tensor, optim, nn, data = ldist.tensor, ldist.optim, ldist.nn, ldist.data
if not C then return end
local net = distribute._net

-- a function as bytecode for another process (util.dump_fn's rule: only its arguments and globals)
function net.ship_fn(fn, what) return ldist._util.dump_fn(fn, what) end

-- LocalCluster ships these descriptions to its workers, which rebuild the objects.

-- Datasets remember how they were made (ds:_recipe(): the constructor or
-- method and its arguments, lua_bindings/data.c), and tensors read from files
-- which file they are (data._source_of), so a worker on this machine reads
-- Fashion-MNIST itself instead of receiving it.
local Dataset = data and data.Dataset
local source_of = data and data._source_of or function() return nil end

local function ship_value(v, depth)
  depth = depth or 0
  if depth > 20 then error("dataset arguments nested too deeply", 0) end
  if tensor.is_tensor(v) then
    local src = source_of(v)
    if src then return { __source = src } end
    return v
  elseif type(v) == "function" then
    return { __function = net.ship_fn(v, "a dataset map function") }
  elseif type(v) == "table" then
    local out = {}
    for k, x in pairs(v) do out[k] = ship_value(x, depth + 1) end
    return out
  end
  return v
end

local function recipe_of(ds)
  if type(ds) == "table" and ds.strategy and ds.dataset then ds = ds.dataset end   -- a distributed dataset
  local r = type(ds) == "userdata" and ds._recipe and ds:_recipe()
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

-- a shipped value as it was: functions from their bytecode, file sources read
distribute._unship = function(v) return unship_value(v, {}) end

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

---------------------------------------------------------------- auto-sharding by file
-- What a FILE auto-shard splits (TF's rewrite finds the file readers): the
-- source of ds's pipeline is data.TextLineDataset(files), or a list of file
-- names (from_tensor_slices of strings, list_files) that an interleave or
-- flat_map opens. Returns its raw recipe, the source's recipe and the files;
-- or nil and why not.
local function file_source(ds)
  if type(ds) ~= "userdata" then return nil, "it is not a data.Dataset" end
  local ok, rec = pcall(Dataset._raw_recipe, ds)
  if not ok then return nil, "it does not record how it was made" end
  local root, opened = rec, false
  while root.parent do
    if root.op == "interleave" or root.op == "flat_map" then opened = true end
    root = root.parent
  end
  if root.op == "TextLineDataset" then
    local files = root.args[1]
    return rec, root, type(files) == "string" and { files } or files
  end
  if root.op == "from_tensor_slices" and type(root.args[1]) == "table" and type(root.args[1][1]) == "string" then
    if opened then return rec, root, root.args[1] end
    return nil, "its list of strings is not opened by an interleave or flat_map, so it reads no files"
  end
  return nil, ("its source (%s) reads no files"):format(root.op == "_make_csv_dataset" and "make_csv_dataset" or root.op)
end

-- file_source(ds) when FILE can split it over n workers, else nil and why not
local function shardable_source(ds, n)
  local rec, root, files = file_source(ds)
  if not rec then return nil, root end
  if #files < n then
    return nil, ("%d file(s) for %d workers; every worker needs at least one file"):format(#files, n)
  end
  return rec, root, files
end

-- Whether FILE can split ds over n workers: true, or nil and why not.
function distribute._file_shardable(ds, n)
  local rec, why = shardable_source(ds, n)
  if not rec then return nil, why end
  return true
end

-- ds rebuilt to read worker r's files of n (files r+1, r+1+n, ...), the
-- rest of the pipeline unchanged; or nil and why not.
function distribute._file_shard(ds, n, r)
  local rec, root, files = shardable_source(ds, n)
  if not rec then return nil, root end
  local mine = {}
  for i = r + 1, #files, n do mine[#mine + 1] = files[i] end
  root.args = { n = 1, mine }
  root.n = 1
  return build_dataset(rec)
end

-- A model as data for another process: its configuration (model:get_config,
-- the one that model:to_json and model:save write) and its weights; with
-- weights false only those that do not train (a frozen layer's: the
-- parameter-server strategy keeps the trainable ones on the ps tasks).
-- A subclassed model's class travels as its methods' bytecode (each may use
-- only its arguments and globals), base classes first, so a worker that does
-- not run the script which defined it can make the model; so do the classes
-- of the models inside it (custom layers, nested subclasses: its _members).
local function describe_classes(model)
  local list, seen = {}, {}
  local function add(c)
    if not c or c == nn.Model or seen[c] or rawget(c, "_builtin") then return end   -- ldist's own (nn.Lambda): there too
    seen[c] = true
    local base = rawget(c, "_base")
    add(base)   -- base classes first
    local methods = {}
    for k, v in pairs(c) do
      if type(v) == "function" then methods[k] = net.ship_fn(v, ("%s:%s"):format(c._name, k)) end
    end
    list[#list + 1] = { name = c._name, base = base ~= nn.Model and base and base._name or nil, methods = methods }
  end
  local function walk(m, depth)
    if depth > 8 then return end
    add(m._class)
    for _, it in ipairs(m._members or {}) do if nn._is_model(it) then walk(it, depth + 1) end end
  end
  walk(model, 0)
  return #list > 0 and list or nil
end

local function define_classes(list)
  local custom = {}
  for _, d in ipairs(list or {}) do
    local cls = (d.base and custom[d.base] or nn.Model):extend(d.name)
    for k, code in pairs(d.methods) do cls[k] = assert(load(code, "=" .. d.name .. ":" .. k, "b")) end
    custom[d.name] = cls
  end
  return custom
end

local function describe_model(model, weights)
  local w, fixed
  if weights ~= false then
    w = {}
    for i, v in ipairs(model.weights) do w[i] = v:cpu() end
  else
    local frozen = {}
    for _, v in ipairs(model.non_trainable_variables) do frozen[v.name] = true end
    fixed = {}
    for i, v in ipairs(model.weights) do
      if frozen[v.name] then fixed[#fixed + 1] = { i = i, value = v:cpu() } end
    end
  end
  return { spec = { class_name = model._kind or "Sequential", config = nn.Model.get_config(model) }, weights = w,
    fixed = fixed, classes = describe_classes(model) }
end

local function build_model(d)
  -- trusted: this session's own model (a Lambda's function comes as bytecode)
  local model = nn._model_from_spec(d.spec, d.classes and define_classes(d.classes), true)
  if d.fixed then
    local vars = model.weights
    for _, f in ipairs(d.fixed) do vars[f.i]:assign(f.value) end
  end
  if not d.weights then return model end   -- layers only
  local vars = model.weights
  if #vars ~= #d.weights then error(("the model has %d weights, %d were sent"):format(#vars, #d.weights), 0) end
  for i, v in ipairs(vars) do v:assign(d.weights[i]) end
  return model
end

local describe_metrics, build_metrics = nn._describe_metrics, nn._build_metrics
local build_loss, build_optimizer = nn._build_loss, nn._build_optimizer
-- for the parameter-server strategy (distribute/parameter_server.lua)
distribute._describe_model, distribute._build_model = describe_model, build_model
distribute._build_loss, distribute._build_optimizer = build_loss, build_optimizer
distribute._describe_metrics, distribute._build_metrics = describe_metrics, build_metrics