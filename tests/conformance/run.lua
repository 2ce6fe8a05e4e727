-- tests/conformance/run.lua - the conformance suite's runner, in the manner of
-- TensorFlow's strategy_combinations: one set of cases (cases.lua), each run
-- under every strategy; tests/dist/test_conformance.sh (the driver) compares
-- every strategy's results with the default strategy's and prints a matrix.
--
--   ldist tests/conformance/run.lua STRATEGY OUTFILE [CASE ...]
--   ldist launch -n K tests/conformance/run.lua mwK OUTFILE [CASE ...]
--   ldist tests/conformance/run.lua --strategies        (one line each: name, processes)
--   ldist tests/conformance/run.lua --list STRATEGY     (the cases that run under it)
--
-- It builds STRATEGY (after ldist.config.cpu_devices(3)), runs the named cases
-- (all when none is named), each under pcall, and appends one line per case to
-- OUTFILE (rank 0) or OUTFILE.rankR (the other ranks of a multi-process
-- strategy): R{case=, rank=, status="ok"|"error"|"skip", err=, values={...}, secs=}.
-- report.lua reads those lines. The driver runs one process (or one `ldist
-- launch`) per case, so a case that breaks or hangs its strategy costs only
-- its own cell; with no CASE named, one process runs every case in turn.
--
-- ADDING A CASE: append to the list in tests/conformance/cases.lua
--   { name = "my_case",                 -- a word: [%w_]+
--     run = function(S) ... return { loss_final = l, ["w1[3]"] = w } end,
--     skip = { ps = true },             -- optional: strategies it does not apply to
--     also = { "ps", "mw_local" },      -- optional: opt-in strategies it runs under
--     only = { ps = true },             -- optional: run under these strategies only
--     tol = 1e-4,                       -- optional: relative tolerance (1e-5)
--     compare = false }                 -- optional: do not compare with default
-- run returns a flat table of numbers (or booleans, strings) which must equal
-- the default strategy's within tol (|a - b| <= tol * max(1, |b|)); keys that
-- start with "_" are kept in the results, not compared; `_skip_compare = 1` in the table
-- skips the comparison for this cell. A rule check asserts with error(...) and
-- returns { ok = 1 }. S, the helper every case gets, is documented at make_S below.
--
-- ADDING A STRATEGY: one line in STRATEGIES below: a name (a word), its kind
-- (what S.kind tells the cases: default, one_device, mirrored, mw, ps,
-- mw_local), how many processes `ldist launch` starts (procs), opt_in = true
-- when only the cases that name it in `also` run under it, and make() returning
-- the strategy and, optionally, a table of extras for S (coordinator=,
-- cleanup=function). The driver takes the list from `--strategies`; nothing
-- else changes.
ldist.config.cpu_devices(3)
local D = distribute

local STRATEGIES = {
  { name = "default", kind = "default", procs = 1, make = function() return D.get_strategy() end },
  { name = "one_device", kind = "one_device", procs = 1, make = function() return D.OneDeviceStrategy("cpu:1") end },
  { name = "mirrored1", kind = "mirrored", procs = 1, make = function() return D.MirroredStrategy { devices = { "cpu:0" } } end },
  { name = "mirrored2", kind = "mirrored", procs = 1, make = function() return D.MirroredStrategy { devices = { "cpu:0", "cpu:1" } } end },
  { name = "mirrored3", kind = "mirrored", procs = 1, make = function() return D.MirroredStrategy { devices = { "cpu:0", "cpu:1", "cpu:2" } } end },
  { name = "mw1", kind = "mw", procs = 1, make = function() return D.MultiWorkerMirroredStrategy { timeout = 30 } end },
  { name = "mw2", kind = "mw", procs = 2, make = function() return D.MultiWorkerMirroredStrategy { timeout = 30 } end },
  { name = "mw3", kind = "mw", procs = 3, make = function() return D.MultiWorkerMirroredStrategy { timeout = 30 } end },
  { name = "ps", kind = "ps", procs = 1, opt_in = true, make = function()
    local lc = D.LocalCluster { workers = 1, ps = 1 }
    local s = D.ParameterServerStrategy(lc)
    return s, { coordinator = D.ClusterCoordinator(s, { max_staleness = 0 }), cleanup = function() lc:shutdown() end }
  end },
  { name = "mw_local", kind = "mw_local", procs = 1, opt_in = true, make = function()
    local lc = D.LocalCluster { workers = 2 }
    return D.MultiWorkerMirroredStrategy { cluster = lc }, { cleanup = function() lc:shutdown() end }
  end },
}

-- every GPU combination present: one GPU, all GPUs (columns that appear only
-- where the CUDA plugin finds GPUs; tests/gpu has the plugin's own tests)
local gpus = {}
for _, d in ipairs(tensor.devices()) do if tostring(d):match("^cuda:") then gpus[#gpus + 1] = d end end
if #gpus > 0 then
  STRATEGIES[#STRATEGIES + 1] = { name = "one_gpu", kind = "one_device", procs = 1,
    make = function() return D.OneDeviceStrategy(gpus[1]) end }
  STRATEGIES[#STRATEGIES + 1] = { name = "mirrored_gpus", kind = "mirrored", procs = 1,
    make = function() return D.MirroredStrategy { devices = gpus } end }
end
-- sim:0 (LDIST_SIM_DEVICE=1, as make test sets it): the CPU's kernels on a
-- device the host may not read, so one_gpu's paths run where there is no GPU
for _, d in ipairs(tensor.devices()) do
  if tostring(d):match("^sim:") then
    STRATEGIES[#STRATEGIES + 1] = { name = "one_sim", kind = "one_device", procs = 1,
      make = function() return D.OneDeviceStrategy(d) end }
  end
end

local here = (arg[0]:match("^(.*)/[^/]*$") or ".")
local CASES = dofile(os.getenv("CONFORMANCE_CASES_FILE") or (here .. "/cases.lua"))

-- does case c run under strategy st?
local function applies(c, st)
  if c.only then return c.only[st.name] == true end
  if c.skip and c.skip[st.name] then return false end
  if st.opt_in then
    for _, n in ipairs(c.also or {}) do if n == st.name then return true end end
    return false
  end
  return true
end

local function find_strategy(name)
  for _, st in ipairs(STRATEGIES) do if st.name == name then return st end end
end

if arg[1] == "--strategies" then
  for _, st in ipairs(STRATEGIES) do print(st.name, st.procs) end
  return
end
if arg[1] == "--list" then
  local st = find_strategy(arg[2])
  for _, c in ipairs(CASES) do
    if not st or applies(c, st) then print(c.name) end
  end
  return
end

local name, outfile = arg[1], arg[2]
local st = find_strategy(name or "")
if not st or not outfile then
  io.stderr:write("usage: ldist tests/conformance/run.lua STRATEGY OUTFILE [CASE ...] | --strategies | --list STRATEGY\n")
  os.exit(2)
end

---------------------------------------------------------------- writing records
local function ser(v)
  local t = type(v)
  if t == "number" or t == "string" or t == "boolean" then return string.format("%q", v) end
  if t == "table" then
    local keys = {}
    for k in pairs(v) do keys[#keys + 1] = k end
    table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
    local parts = {}
    for _, k in ipairs(keys) do parts[#parts + 1] = "[" .. ser(k) .. "]=" .. ser(v[k]) end
    return "{" .. table.concat(parts, ",") .. "}"
  end
  return string.format("%q", tostring(v))
end

-- the strategy; a failure to build it fails every case it should run
local default0 = D.get_strategy()
local ok_make, strategy, extras = pcall(st.make)
local rank = 0
if ok_make and type(strategy) == "table" and strategy.cluster_resolver
    and math.type(strategy.cluster_resolver.rank) == "integer" then
  rank = strategy.cluster_resolver.rank
end
extras = type(extras) == "table" and extras or {}
local out = assert(io.open(rank == 0 and outfile or (outfile .. ".rank" .. rank), "a"))
local function record(r)
  r.rank = rank
  out:write("R", ser(r), "\n")
  out:flush()
end

---------------------------------------------------------------- S: what a case gets
-- S.name          the strategy's column name ("default", "mirrored2", "mw3", ...)
-- S.kind          "default" | "one_device" | "mirrored" | "mw" | "ps" | "mw_local"
-- S.strategy      the strategy object;  S.default_strategy: distribute.get_strategy() at start
-- S.rank          this process's worker index (0 outside multi-worker);  S.workers: processes
-- S.num_replicas  strategy.num_replicas_in_sync;  S.local_replicas: replicas in this process
-- S.scope(fn)     fn() inside strategy:scope() (the default strategy: plain fn())
-- S.distribute(ds)   strategy:experimental_distribute_dataset(ds) (default: ds)
-- S.step(fn, ...)    strategy:run(fn, ...);  S.reduce(op, v, opts): strategy:reduce
-- S.local_results(v) strategy:experimental_local_results(v)
-- S.replica_device(id)  the device replica `id` (replica_id_in_sync_group) runs on
-- S.coordinator   the ClusterCoordinator (ps only);  S.tmp(name): a scratch file path
local function make_S(strategy)
  local kind = st.kind
  local S = { name = name, kind = kind, strategy = strategy, default_strategy = default0, rank = rank,
    num_replicas = strategy.num_replicas_in_sync, coordinator = extras.coordinator }
  S.workers = (kind == "mw" and strategy.num_replicas_in_sync) or 1
  S.local_replicas = kind == "mirrored" and #strategy.devices or 1
  S.devices = strategy.devices
  function S.scope(fn)
    if kind == "default" then return fn() end
    return strategy:scope(fn)
  end
  function S.distribute(ds)
    if kind == "default" then return ds end
    return strategy:experimental_distribute_dataset(ds)
  end
  function S.step(fn, ...) return strategy:run(fn, ...) end
  function S.reduce(op, v, opts) return strategy:reduce(op, v, opts) end
  function S.local_results(v) return strategy:experimental_local_results(v) end
  function S.replica_device(id)
    if kind == "mirrored" then return strategy.devices[id + 1] end
    return strategy.devices[1]
  end
  function S.tmp(n) return ("%s.tmp.%d.%s"):format(outfile, rank, n) end
  return S
end

---------------------------------------------------------------- running the cases
local wanted = {}
for i = 3, #arg do wanted[arg[i]] = true end
local S = ok_make and make_S(strategy) or nil

for _, c in ipairs(CASES) do
  if next(wanted) == nil or wanted[c.name] then
    if not applies(c, st) then
      record { case = c.name, status = "skip" }
    elseif not ok_make then
      record { case = c.name, status = "error", err = "the strategy could not be made: " .. tostring(strategy) }
    else
      local t0 = ldist.clock()
      local ok, res = xpcall(c.run, function(e)
        local tb = debug.traceback("", 2)
        -- the innermost line of cases.lua that was running, for the report
        local where = tb:match("(cases%.lua:%d+):") or ""
        return { msg = tostring(e), where = where }
      end, S)
      local secs = ldist.clock() - t0
      if ok then
        if type(res) ~= "table" then
          record { case = c.name, status = "error", err = "the case returned " .. type(res) .. ", a table expected", secs = secs }
        else
          local values, bad = {}, nil
          for k, v in pairs(res) do
            local tv = type(v)
            if tv == "number" or tv == "boolean" or tv == "string" then values[tostring(k)] = v
            else bad = bad or ("value %s is a %s"):format(tostring(k), tv) end
          end
          if bad then record { case = c.name, status = "error", err = "the case returned a bad table: " .. bad, secs = secs }
          else record { case = c.name, status = "ok", values = values, secs = secs } end
        end
      else
        local msg = type(res) == "table" and res.msg or tostring(res)
        if type(res) == "table" and res.where ~= "" and not msg:find("cases.lua:", 1, true) then
          msg = msg .. " [at " .. res.where .. "]"
        end
        record { case = c.name, status = "error", err = msg, secs = secs }
      end
      -- a case that left a scope open must not change the next case
      collectgarbage()
    end
  end
end
out:close()
if extras.cleanup then pcall(extras.cleanup) end
if ok_make and type(strategy) == "table" and strategy.shutdown and S and S.kind == "mw" then pcall(strategy.shutdown, strategy) end
os.exit(0)
