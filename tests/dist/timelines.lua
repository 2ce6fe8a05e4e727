-- timelines.lua MODE OUTDIR - traces a short training run and saves its
-- timeline (OUTDIR/MODE.svg, .txt) for test_timelines.sh, which renders it
-- to PNG and checks the picture's parts. TAP lines for the checks made here.
--   mirrored  MirroredStrategy on 2 logical CPU devices, model:fit (also a zoom)
--   mw        MultiWorkerMirroredStrategy under `ldist launch -n 2` (the chief saves)
--   lc        MultiWorkerMirroredStrategy on a LocalCluster of 2 workers (the notebook's way)
--   ps        ParameterServerStrategy, 2 workers + 1 ps; then compare_timelines with Mirrored
local mode, out = arg[1], arg[2]
assert(mode and out, "usage: timelines.lua MODE OUTDIR")
local function check(name, cond, detail)
  print(((cond and "ok - " or "not ok - ") .. mode .. ": " .. name) .. ((not cond and detail) and (" (" .. tostring(detail) .. ")") or ""))
end

local function make_model(s, opt)
  local model
  local _ <close> = s:scope()
  model = nn.Sequential{ nn.Dense(64, "relu"), nn.Dense(3) }
  model:compile{ optimizer = opt or optim.Adam{ learning_rate = 0.01 },
    loss = losses.SparseCategoricalCrossentropy{ from_logits = true } }
  model:build({ 32 })
  return model
end
local function data_set()
  tensor.seed(7)
  local x = tensor.normal(1200, 32)
  local y = x:slice(1, 0, 3):argmax(1):astype("int64")   -- 3 classes: the largest of the first 3 inputs
  return data.Dataset.from_tensor_slices(x, y):batch(100)   -- 12 steps of 100
end

local function save(t, name)
  t:save(("%s/%s.svg"):format(out, name))
  local f = assert(io.open(("%s/%s.txt"):format(out, name), "w"))
  f:write(tostring(t), "\n")
  f:close()
end

local function common_checks(s, t, unit)
  local svg, txt = t:svg(), tostring(t)
  check("the terminal chart has the axis and a legend", txt:find("legend:", 1, true) and txt:find("+---", 1, true) ~= nil)
  check("the notebook gets the <svg> inline (text/html) and as a picture", (function()
    local b = getmetatable(t).__mimebundle(t)
    return b["text/html"]:find("<svg", 1, true) and b["image/svg+xml"] == svg and b["text/plain"] == txt
  end)())
  check("hover titles name the span, the " .. unit .. ", the start and the duration",
    svg:find("<title>forward · " .. unit .. " %d") ~= nil and svg:find("start [%d.]+ [mu]?s, duration") ~= nil)
  local sum = s:trace_summary()
  local st = tostring(sum)
  check("trace_summary prints a table with units", st:find("compute", 1, true) and st:find(" ms", 1, true)
    and st:find("B/s", 1, true) ~= nil, st)
  check("trace_summary keeps the numbers as fields", type(sum.compute) == "number" and sum.compute > 0 and
    type(sum.per_replica[1].compute) == "number" and sum.bytes > 0, sum.bytes)
  local ex = s:explain()
  check("explain narrates the step with the numbers", type(tostring(ex)) == "string" and ex:find("global batch of 100", 1, true)
    and ex:find("2307 numbers", 1, true) ~= nil, ex)
end

if mode == "mirrored" then
  ldist.config.cpu_devices(2)
  local s = distribute.MirroredStrategy{ devices = { "cpu:0", "cpu:1" } }
  local model = make_model(s)
  s:trace(true)
  model:fit(data_set(), { epochs = 1, verbose = 0 })
  s:trace(false)
  local t = s:timeline()
  save(t, "mirrored")
  common_checks(s, t, "replica")
  local z = s:timeline{ steps = { 4, 6 } }
  save(z, "mirrored_zoom")
  local zs = z:svg()
  check("steps = {4, 6} keeps steps 4..6", zs:find("<title>step 4:", 1, true) and zs:find("<title>step 6:", 1, true)
    and not zs:find("<title>step 3:", 1, true) and not zs:find("<title>step 7:", 1, true))
  check("fit's phases are told apart", t:svg():find("<title>backward", 1, true) and t:svg():find("<title>allreduce", 1, true)
    and t:svg():find("<title>input", 1, true) ~= nil)
  check("a timeline before any trace says so", tostring(distribute.MirroredStrategy{ devices = { "cpu:0", "cpu:1" } }:timeline())
    :find("nothing recorded yet", 1, true) ~= nil)
elseif mode == "mw" or mode == "lc" then
  local lc = mode == "lc" and distribute.LocalCluster{ workers = 2 } or nil
  local s = distribute.MultiWorkerMirroredStrategy{ cluster = lc }
  local model = make_model(s)
  s:trace(true)
  model:fit(data_set(), { epochs = 1, verbose = 0 })
  s:trace(false)
  local t = s:timeline()
  if mode == "lc" or s:is_chief() then
    save(t, mode)
    common_checks(s, t, "worker")
    check("one row per worker", t:svg():find("worker 0 (pid", 1, true) and t:svg():find("worker 1 (pid", 1, true) ~= nil)
  end
  if lc then lc:shutdown() end
elseif mode == "ps" then
  local lc = distribute.LocalCluster{ workers = 2, ps = 1 }
  local s = distribute.ParameterServerStrategy(lc)
  local model = make_model(s, optim.SGD{ learning_rate = 0.05 })
  s:trace(true)
  model:fit(data_set(), { epochs = 1, steps_per_epoch = 12, verbose = 0 })
  s:trace(false)
  local t = s:timeline()
  local fit_zoom = s:timeline{ steps = { 3, 12 } }   -- past the first steps (building); kept for the comparison below
  save(t, "ps")
  local svg = t:svg()
  check("workers and the ps task have rows", svg:find("worker 1 (pid", 1, true) and svg:find("ps 0 (pid", 1, true) ~= nil)
  check("every push is marked with its staleness", select(2, svg:gsub("<title>push · ", "")) == 12 and
    select(2, svg:gsub("staleness %d", "")) == 12, select(2, svg:gsub("<title>push · ", "")))
  check("the ps applies each push", select(2, svg:gsub("<title>apply · ps 0", "")) == 12)
  local sum = s:trace_summary()
  check("trace_summary: staleness and bytes", type(sum.max_staleness) == "number" and sum.bytes > 0
    and tostring(sum):find("staleness of the pushes", 1, true) ~= nil)
  local ex = s:explain()
  check("explain narrates an asynchronous step", ex:find("Pull", 1, true) and ex:find("9.2 kB", 1, true) and
    ex:find("staleness", 1, true) ~= nil, ex)
  local coord = distribute.ClusterCoordinator(s)
  local line = tostring(coord)
  check("a ClusterCoordinator prints as one line", line:match("^<ClusterCoordinator: 2 workers, 1 ps; 12 scheduled") and
    not line:find("\n", 1, true), line)
  check("coordinator:timeline() is the strategy's", coord:timeline():svg() == svg)
  -- steps written by hand, as sync_vs_async.ipynb's: they call pull and push
  -- themselves, and their rows hold the same spans as model:fit's
  local per_worker = coord:create_per_worker_dataset(data_set())
  local function hand_step(iterator)
    local worker = ldist.distribute.worker_context()
    local batch = iterator()
    worker:pull()
    local tape = autograd.GradientTape()
    local loss = tape:record(function()
      return worker.loss(batch[2], worker.model(batch[1], { training = true }))
    end)
    worker:push(tape:gradient(loss, worker.model.trainable_variables))
    return loss:item()
  end
  s:trace(true)
  for _ = 1, 10 do coord:schedule(hand_step, { per_worker }) end
  coord:join()
  s:trace(false)
  local h = s:timeline()
  save(h, "ps_hand")
  local hs = h:svg()
  local function count(pat) return select(2, hs:gsub(pat, "")) end
  check("hand-written steps: a pull span per step", count("<title>pull · worker %d") == 10, count("<title>pull · worker %d"))
  check("hand-written steps: a compute span per step", count("<title>compute · worker %d") == 10, count("<title>compute · worker %d"))
  check("hand-written steps: a push span per step, with its staleness", count("<title>push · worker %d") == 10 and
    count("staleness %d+ %(updates by others") == 10, count("<title>push · worker %d"))
  check("hand-written steps: each span carries its step", count("<title>[a-z]+ · worker %d %(pid %d+%) · step %d+") >= 30)
  check("hand-written steps: the ps applies each push", count("<title>apply · ps 0") == 10)
  -- two workers whose steps overlap: some push is stale, and marked so above it
  check("hand-written steps: a stale push is marked s<k>", hs:find('fill="#b00" text%-anchor="middle">s%d') ~= nil)
  lc:shutdown()
  -- the synchronous run beside it, on one time scale
  ldist.config.cpu_devices(2)
  local m = distribute.MirroredStrategy{ devices = { "cpu:0", "cpu:1" } }
  local mm = make_model(m)
  m:trace(true)
  mm:fit(data_set(), { epochs = 1, verbose = 0 })
  m:trace(false)
  local c = distribute.compare_timelines{ m:timeline{ steps = { 2, 12 } }, fit_zoom }
  save(c, "compare")
  local cs = c:svg()
  check("compare_timelines draws both", cs:find("MirroredStrategy: 2 replicas", 1, true) and
    cs:find("ParameterServerStrategy: 2 workers", 1, true) ~= nil)
  -- each run across the whole width: the last span of each panel ends at the plot's right edge
  local function right_edges(svg)
    local edges, panel = {}, 0
    for line in svg:gmatch("[^\n]+") do
      if line:find('<g transform="translate', 1, true) then panel = panel + 1; edges[panel] = 0 end
      local x, w = line:match('<rect x="([%d.]+)" y="%d+" width="([%d.]+)" height="%d+" fill="#')
      if x and panel > 0 and not line:find('fill="#f3f3f3"', 1, true) then edges[panel] = math.max(edges[panel], x + w) end
    end
    return edges
  end
  local e = right_edges(cs)
  check("compare: each run spans the whole width (its own time axis)", #e == 2 and math.abs(e[1] - e[2]) < 2 and e[1] > 900,
    table.concat(e, ", "))
  -- one time axis: the longer run spans the width, the other ends where its
  -- duration does (how the two runs' durations compare is the machine's
  -- business: a run and a part of it are compared for that)
  local shared = distribute.compare_timelines({ m:timeline{ steps = { 2, 12 } }, h }, { scale = "shared" })
  local es = right_edges(shared:svg())
  check("compare{scale = \"shared\"}: the longer run spans the width", #es == 2 and
    math.abs(math.max(es[1], es[2]) - e[1]) < 2, table.concat(es, ", ") .. " against " .. e[1])
  local part = distribute.compare_timelines({ m:timeline{ steps = { 2, 12 } }, m:timeline{ steps = { 2, 4 } } },
    { scale = "shared" })
  local ep = right_edges(part:svg())
  check("compare{scale = \"shared\"}: steps 2-4 end well before steps 2-12 on one time axis", #ep == 2 and
    math.abs(ep[1] - e[1]) < 2 and ep[2] < ep[1] - 100, table.concat(ep, ", "))
  local own = distribute.compare_timelines{ m:timeline{ steps = { 2, 12 } }, m:timeline{ steps = { 2, 4 } } }
  local eo = right_edges(own:svg())
  check("compare (own scales): steps 2-4 span the width too", #eo == 2 and math.abs(eo[1] - eo[2]) < 2, table.concat(eo, ", "))
  local hc = distribute.compare_timelines{ m:timeline{ steps = { 2, 12 } }, h }
  save(hc, "compare_hand")
  check("compare of a hand-written run: its PS rows hold pull, compute and push",
    hc:svg():find("<title>pull · worker", 1, true) and hc:svg():find("<title>compute · worker", 1, true)
    and hc:svg():find("<title>push · worker", 1, true) ~= nil)
  check("compare_timelines: a bad scale is named", not pcall(distribute.compare_timelines, { h }, { scale = "same" }) and
    select(2, pcall(distribute.compare_timelines, { h }, { scale = "same" })):find("scale", 1, true) ~= nil)
end
