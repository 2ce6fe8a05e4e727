-- test_cpu_split.lua - how the cores are shared out (issue 29, items 1 and 3):
-- logical CPU devices each get cores/n threads on disjoint cores, processes of
-- one job on this host each get cores/(local processes), and training on
-- devices with pools of their own gives the weights of one device. No
-- timings: the split itself, read back from ldist.config.cpu_split() and from
-- the threads' real affinity masks (/proc/self/task/*/status).
-- LDIST_CPU_CORES=N pretends N cores, so 16-core splits are checked here too
-- (nothing is pinned then).
local bin = os.getenv("LDIST_BIN") or "./ldist"

-- the ids of this process's threads (/proc/self in a shell started by
-- io.popen would be the shell's)
local function tasks()
  local f = io.open("/proc/self/stat")
  local pid = f:read("n")
  f:close()
  local ids = {}
  for tid in io.popen("ls /proc/" .. pid .. "/task"):lines() do ids[#ids + 1] = tid end
  return ids
end

-- ---- child modes (this file run again in another process)
local function split_json()
  local s = ldist.config.cpu_split()
  local mask = io.open("/proc/self/status"):read("a"):match("Cpus_allowed_list:%s*(%S+)")
  return ldist.json.encode({ split = s, mask = mask, threads = ldist.get_num_threads() })
end

-- training on `devices` (nil: the default strategy): an MLP large enough that
-- its products and elementwise loops are split over the device's pool
local function train(devices)
  tensor.seed(3)
  local x = tensor.normal(512, 256)
  local y = x:slice(1, 0, 10):argmax(1):astype("int64")
  local strategy = devices and distribute.MirroredStrategy{devices = devices} or distribute.get_strategy()
  local model
  do
    local _ <close> = strategy:scope()
    model = nn.Sequential{nn.Dense(256, "relu"), nn.Dense(128, "relu"), nn.Dense(10)}
    model:compile{optimizer = optim.Adam{learning_rate = 1e-3},
      loss = losses.SparseCategoricalCrossentropy{from_logits = true}}
  end
  model:fit(x, y, {batch_size = 256, epochs = 3, verbose = 0, shuffle = false})
  local w = {}
  for i, v in ipairs(model.trainable_variables) do w[i] = v:cpu() end
  return w
end

if arg[1] == "split" then   -- split N: make N devices, print the split
  ldist.config.cpu_devices(tonumber(arg[2]))
  print(split_json())
  os.exit(0)
elseif arg[1] == "train" then   -- train N: one device against Mirrored on N devices
  local w1 = train(nil)
  local n = tonumber(arg[2])
  ldist.config.cpu_devices(n)
  local devs = {}
  for i = 0, n - 1 do devs[#devs + 1] = "cpu:" .. i end
  local wn = train(devs)
  local m = 0
  for i = 1, #w1 do m = math.max(m, (w1[i] - wn[i]):abs():max():item()) end
  -- the pool workers each device started (threads named ld-cpu<d>-w<k>)
  local workers = {}
  for _, tid in ipairs(tasks()) do
    local f = io.open("/proc/self/task/" .. tid .. "/comm")
    local name = f and f:read("l")
    if f then f:close() end
    local d = name and name:match("^ld%-cpu(%d+)%-w%d+$")
    if d then workers[tonumber(d)] = (workers[tonumber(d)] or 0) + 1 end
  end
  local wl = {}
  for d = 0, n - 1 do wl[#wl + 1] = workers[d] or 0 end
  print(ldist.json.encode({ diff = m, workers = wl, split = ldist.config.cpu_split() }))
  os.exit(0)
elseif arg[1] == "elementwise" then   -- elementwise ops and copies on 1 and 8 threads
  tensor.seed(9)
  local a, b, r = tensor.normal(256, 512), tensor.normal(512), tensor.normal(256, 1)
  local t = tensor.normal(512, 256)
  local big = tensor.normal(2048, 512)
  big[7][9] = 0 / 0   -- a NaN: max and argmax keep it where one thread does
  local function ops()
    return { a + b, a * r, a - a * b, t.T:contiguous(), (a:relu() + 1):log(),
      -- reductions (a bias gradient: split by columns; row sums: by rows) and softmax
      big:sum(0), big:sum(1), big:max(0), big:argmax(0):astype("float32"), big:argmax(1):astype("float32"),
      big:reshape(4, 512, 512):sum(1), a:softmax(1), a:log_softmax(1) }
  end
  ldist.set_num_threads(1)
  local ref = ops()
  ldist.set_num_threads(8)
  local got, m = ops(), 0
  for i = 1, #ref do
    -- NaN where one thread has NaN, and the rest bit for bit
    local g, r = got[i]:reshape(got[i]:numel()):totable(), ref[i]:reshape(ref[i]:numel()):totable()
    for k = 1, #r do
      if not (g[k] == r[k] or (g[k] ~= g[k] and r[k] ~= r[k])) then m = math.max(m, math.abs(g[k] - r[k]), 1e-30) end
    end
  end
  print(ldist.json.encode({ diff = m, threads = ldist.get_num_threads() }))
  os.exit(0)
elseif arg[1] == "report" then   -- one process of a job: its split
  print("SPLIT " .. split_json())
  os.exit(0)
end

local T = dofile("tests/lua/testlib.lua")

local function sh(cmd)
  local p = io.popen(cmd .. " 2>&1")
  local out = p:read("a")
  local ok = p:close()
  return out, ok
end
local function child(env, ...)
  local out, ok = sh(("env %s %s %s %s"):format(env, bin, arg[0], table.concat({...}, " ")))
  T.ok(ok, "the child failed:\n" .. out)
  local line = out:match("[^\n]*{[^\n]*}[^\n]*$") or out:match("({.*})")
  T.ok(line, "no JSON from the child:\n" .. out)
  return ldist.json.decode(line:match("{.*}"))
end

-- "0-3,8" -> {0,1,2,3,8}
local function parse_list(s)
  local ids = {}
  for part in s:gmatch("[^,]+") do
    local a, b = part:match("^(%d+)-(%d+)$")
    if a then for i = tonumber(a), tonumber(b) do ids[#ids + 1] = i end
    else ids[#ids + 1] = tonumber(part) end
  end
  return ids
end
local function same(a, b) return table.concat(a, ",") == table.concat(b, ",") end

-- every device's share: threads = cores of its slice, slices disjoint and
-- contiguous, covering the process's cores, the remainder on the first ones
local function check_split(s, ncores, n)
  T.eq(#s.devices, n, "devices")
  local seen, next_core = {}, 0
  for i, d in ipairs(s.devices) do
    T.eq(d.name, "cpu:" .. (i - 1))
    if n <= ncores then
      local want = ncores // n + ((i - 1) < ncores % n and 1 or 0)
      T.eq(d.threads, want, d.name .. " threads")
      T.eq(#d.cores, want, d.name .. " cores")
      for _, c in ipairs(d.cores) do
        T.ok(not seen[c], ("core %d given twice"):format(c))
        seen[c] = true
        T.eq(c, next_core, d.name .. " takes the next cores")
        next_core = next_core + 1
      end
    else
      T.eq(d.threads, 1, d.name .. " threads (more devices than cores)")
      T.eq(#d.cores, 1)
      T.ok(not d.pinned, "not pinned when the devices outnumber the cores")
    end
  end
  if n <= ncores then T.eq(next_core, ncores, "every core is given") end
end

T.test("LDIST_CPU_CORES=16: cpu_devices(n) gives each device cores/n threads on disjoint cores", function()
  for _, n in ipairs({1, 2, 3, 4, 5, 8, 16, 20}) do
    local r = child("LDIST_CPU_CORES=16", "split", n)
    T.eq(#r.split.cores, 16, "the pretended cores")
    check_split(r.split, 16, n)
    T.eq(r.threads, r.split.devices[1].threads, "get_num_threads is cpu:0's share")
    for _, d in ipairs(r.split.devices) do T.ok(not d.pinned, "pretended cores are not pinned") end
    if n > 1 then
      T.ok(r.split.text:find(("split among %d CPU devices"):format(n), 1, true), r.split.text)
      T.ok(r.split.text:find("not pinned: LDIST_CPU_CORES is set", 1, true), r.split.text)
    end
  end
  local r = child("LDIST_CPU_CORES=16", "split", 2)
  T.ok(r.split.text:find("cpu:0 8 threads on cores 0-7, cpu:1 8 threads on cores 8-15", 1, true), r.split.text)
end)

-- A pretended machine's topology, laid out as /sys/devices/system/cpu:
-- core_of(id) -> the id of its physical core's first thread, pkg_of(id) -> its package
local function topology(name, n, core_of, pkg_of)
  local base = os.tmpname()   -- creates an empty file: only its unique name is wanted
  os.remove(base)
  local dir = base .. "-" .. name
  for id = 0, n - 1 do
    local d = ("%s/cpu%d/topology"):format(dir, id)
    assert(os.execute("mkdir -p " .. d))
    local sib = {}
    for j = 0, n - 1 do if core_of(j) == core_of(id) and pkg_of(j) == pkg_of(id) then sib[#sib + 1] = j end end
    local f = assert(io.open(d .. "/thread_siblings_list", "w")); f:write(table.concat(sib, ","), "\n"); f:close()
    f = assert(io.open(d .. "/physical_package_id", "w")); f:write(pkg_of(id), "\n"); f:close()
  end
  return dir
end
-- one Xeon socket, 8 cores x 2 threads, Linux's numbering: threads i and i + 8 share a core
local smt16 = topology("smt16", 16, function(i) return i % 8 end, function() return 0 end)
-- two sockets of 8 cores x 2 threads: 0-7 and 16-23 on package 0, 8-15 and 24-31 on package 1
local smt32 = topology("smt32", 32, function(i) return i % 16 end, function(i) return (i % 16) // 8 end)
local function set_of(ids) local s = {} for _, c in ipairs(ids) do s[c] = true end return s end

T.test("SMT: shares are whole physical cores (both threads of a core go to one device or process)", function()
  local env = "LDIST_CPU_CORES=16 LDIST_CPU_TOPOLOGY=" .. smt16
  local r = child(env, "split", 1)
  T.eq(r.split.physical_cores, 8, "physical cores")
  T.eq(r.split.smt, 2, "threads per core")
  T.eq(r.threads, 16, "one device: a thread per hardware thread")
  T.ok(r.split.text:find("8 physical (SMT: up to 2 threads each", 1, true), r.split.text)
  for _, n in ipairs({2, 4, 8}) do
    r = child(env, "split", n)
    T.eq(#r.split.devices, n)
    local used = {}
    for _, d in ipairs(r.split.devices) do
      T.eq(d.threads, 16 // n, d.name .. " threads")
      T.eq(#d.cores, 16 // n, d.name .. " cores")
      local mine = set_of(d.cores)
      for _, c in ipairs(d.cores) do
        T.ok(mine[(c + 8) % 16], ("%s on %d devices has thread %d but not its sibling %d"):format(d.name, n, c, (c + 8) % 16))
        T.ok(not used[c], ("thread %d given twice"):format(c))
        used[c] = true
      end
    end
  end
  r = child(env, "split", 2)
  T.ok(r.split.text:find("cpu:0 8 threads on cores 0-3,8-11, cpu:1 8 threads on cores 4-7,12-15", 1, true), r.split.text)
  -- 3 devices on 8 cores: 3, 3 and 2 whole cores
  r = child(env, "split", 3)
  local want = {6, 6, 4}
  for i, d in ipairs(r.split.devices) do T.eq(d.threads, want[i], d.name .. " threads of 3") end
  -- more devices than physical cores: one thread each, every thread given once
  r = child(env, "split", 16)
  local used = {}
  for _, d in ipairs(r.split.devices) do T.eq(d.threads, 1); used[d.cores[1]] = true end
  for c = 0, 15 do T.ok(used[c], "thread " .. c .. " given to no device") end
  -- processes of one host: rank 1 of 4 takes cores 2 and 3, both threads of each
  r = child(env .. " LDIST_LOCAL_RANK=1 LDIST_LOCAL_SIZE=4", "report")
  local got = {}
  for _, c in ipairs(r.split.cores) do got[#got + 1] = c end
  table.sort(got)
  T.ok(same(got, {2, 3, 10, 11}), "process 1 of 4: " .. table.concat(got, ","))
  T.eq(r.threads, 4)
  T.eq(r.split.physical_cores, 2)
end)

T.test("SMT on two sockets: two devices take one package each", function()
  local r = child("LDIST_CPU_CORES=32 LDIST_CPU_TOPOLOGY=" .. smt32, "split", 2)
  T.eq(r.split.physical_cores, 16)
  T.ok(r.split.text:find("cpu:0 16 threads on cores 0-7,16-23, cpu:1 16 threads on cores 8-15,24-31", 1, true), r.split.text)
  -- a topology that cannot be read: every thread is a core of its own, ids in order
  r = child("LDIST_CPU_CORES=16 LDIST_CPU_TOPOLOGY=/nonexistent", "split", 2)
  T.eq(r.split.physical_cores, 16)
  T.eq(r.split.smt, 1)
  T.ok(r.split.text:find("cpu:0 8 threads on cores 0-7, cpu:1 8 threads on cores 8-15", 1, true), r.split.text)
end)

T.test("LDIST_NUM_THREADS=6 splits threads, not cores: 3 per device, nothing pinned", function()
  local r = child("LDIST_NUM_THREADS=6", "split", 2)
  T.eq(r.split.devices[1].threads, 3)
  T.eq(r.split.devices[2].threads, 3)
  T.ok(not r.split.devices[1].pinned and not r.split.devices[2].pinned)
  T.ok(r.split.text:find("LDIST_NUM_THREADS", 1, true), r.split.text)
end)

-- the affinity masks of this process's threads, by name
local function thread_masks()
  local m = {}
  for _, tid in ipairs(tasks()) do
    local f = io.open("/proc/self/task/" .. tid .. "/comm")
    if f then
      local name = f:read("l")
      f:close()
      local st = io.open("/proc/self/task/" .. tid .. "/status")
      if st then
        m[name] = parse_list(st:read("a"):match("Cpus_allowed_list:%s*(%S+)"))
        st:close()
      end
    end
  end
  return m
end

T.test("real cores: each device's executor is pinned to its own cores, disjoint from the others'", function()
  local cores = ldist.config.cpu_split().cores
  local n = math.min(#cores, 4)
  if n < 2 then print("# skipped: one core"); return end
  ldist.config.cpu_devices(n)
  local s = ldist.config.cpu_split()
  check_split(s, #cores, n)
  -- a Mirrored step starts cpu:0's executor too (the host queues its kernels there)
  local devs = {}
  for i = 0, n - 1 do devs[#devs + 1] = "cpu:" .. i end
  local st = distribute.MirroredStrategy{devices = devs}
  local x = tensor.normal(8 * n, 4)
  st:run(function(v) return v:sum() end, x)
  -- every device's executor names itself as it binds to its pool; on a loaded
  -- machine a name may show a moment later: look again for up to 2 s
  local masks, t0 = thread_masks(), ldist.clock()
  local function all_named()
    for i = 0, n - 1 do if not masks["ld-cpu" .. i] then return false end end
    return true
  end
  while not all_named() and ldist.clock() - t0 < 2 do ldist._cluster.sleep(0.05); masks = thread_masks() end
  local used = {}
  for i, d in ipairs(s.devices) do
    T.ok(d.pinned, d.name .. " is pinned")
    local m = masks["ld-cpu" .. (i - 1)]
    T.ok(m, "no executor thread named ld-cpu" .. (i - 1))
    T.ok(same(m, d.cores), ("%s's executor runs on %s, its cores are %s"):format(d.name, table.concat(m, ","),
      table.concat(d.cores, ",")))
    for _, c in ipairs(m) do
      T.ok(not used[c], ("core %d is in two devices' masks"):format(c))
      used[c] = true
    end
  end
  T.ok(s.text:find("each pinned to its cores", 1, true), s.text)
  T.ok(st:explain():find("Cores: " .. s.text, 1, true), "explain() says how the cores were split")
end)

T.test("Mirrored on devices with pools of their own gives the weights of one device", function()
  -- 4 pretended cores: 2 devices of 2 threads each (each starts a pool worker)
  local r = child("LDIST_CPU_CORES=4", "train", 2)
  T.ok(r.diff < 1e-4, ("2 devices differ from one by %g"):format(r.diff))
  T.eq(r.split.devices[1].threads, 2)
  T.eq(r.split.devices[2].threads, 2)
  -- cpu:0's pool kept the 3 workers of the one-device run (4 threads)
  T.eq(r.workers[1], 3, "cpu:0's pool workers")
  T.eq(r.workers[2], 1, "cpu:1 has a pool worker of its own")
  -- 6 pretended cores over 3 devices
  r = child("LDIST_CPU_CORES=6", "train", 3)
  T.ok(r.diff < 1e-4, ("3 devices differ from one by %g"):format(r.diff))
  for d = 2, 3 do T.eq(r.workers[d], 1, "cpu:" .. (d - 1) .. "'s pool worker") end
end)

-- the processes of `ldist launch -n n`, each reporting its split
local function launch(env, n)
  local out, ok = sh(("env %s %s launch -n %d %s report"):format(env, bin, n, arg[0]))
  T.ok(ok, "launch failed:\n" .. out)
  local got = {}
  for rank, js in out:gmatch("%[(%d+)%] SPLIT ({[^\n]*})") do got[tonumber(rank) + 1] = ldist.json.decode(js) end
  for i = 1, n do T.ok(got[i], ("process %d did not report:\n%s"):format(i - 1, out)) end
  return got
end

T.test("ldist launch -n 2: each process takes its half of the real cores, pinned", function()
  local all = ldist.config.cpu_split().cores
  if #all < 2 then print("# skipped: one core"); return end
  local got = launch("", 2)
  local used = {}
  for i, r in ipairs(got) do
    T.eq(r.split.local_rank, i - 1)
    T.eq(r.split.local_size, 2)
    T.eq(#r.split.cores, #all // 2 + ((i - 1) < #all % 2 and 1 or 0), "its share")
    T.eq(r.threads, #r.split.cores, "one thread per core of its share")
    T.ok(same(parse_list(r.mask), r.split.cores), ("process %d runs on %s, its cores are %s"):format(i - 1, r.mask,
      table.concat(r.split.cores, ",")))
    for _, c in ipairs(r.split.cores) do
      T.ok(not used[c], ("core %d given to two processes"):format(c))
      used[c] = true
    end
    T.ok(r.split.text:find("pinned", 1, true), r.split.text)
  end
end)

T.test("ldist launch -n 4 on 16 pretended cores: 4 threads each, disjoint; LDIST_NUM_THREADS overrides", function()
  local got = launch("LDIST_CPU_CORES=16", 4)
  for i, r in ipairs(got) do
    T.eq(r.threads, 4)
    local want = {}
    for c = 4 * (i - 1), 4 * i - 1 do want[#want + 1] = c end
    T.ok(same(r.split.cores, want), "process " .. (i - 1) .. ": cores " .. table.concat(r.split.cores, ","))
  end
  got = launch("LDIST_CPU_CORES=16 LDIST_NUM_THREADS=3", 2)
  for _, r in ipairs(got) do
    T.eq(r.threads, 3)
    T.ok(r.split.text:find("not pinned", 1, true), r.split.text)
  end
  got = launch("LDIST_NUM_THREADS=3", 2)
  local full = io.open("/proc/self/status"):read("a"):match("Cpus_allowed_list:%s*(%S+)")
  for _, r in ipairs(got) do T.eq(r.mask, full, "LDIST_NUM_THREADS: the process is not pinned") end
  got = launch("LDIST_CPU_PIN=0", 2)
  for _, r in ipairs(got) do
    T.eq(r.mask, full, "LDIST_CPU_PIN=0: the process is not pinned")
    T.eq(r.threads, #r.split.cores, "but it takes its share of threads")
  end
end)

T.test("mpirun, MPICH and Slurm local ranks split the cores too; a launcher's binding is kept", function()
  local r = child("LDIST_CPU_CORES=16 OMPI_COMM_WORLD_LOCAL_RANK=1 OMPI_COMM_WORLD_LOCAL_SIZE=4", "report")
  T.ok(same(r.split.cores, {4, 5, 6, 7}), "Open MPI rank 1 of 4: " .. table.concat(r.split.cores, ","))
  T.eq(r.split.local_rank, 1); T.eq(r.split.local_size, 4)
  r = child("LDIST_CPU_CORES=16 MPI_LOCALRANKID=2 MPI_LOCALNRANKS=3", "report")
  T.ok(same(r.split.cores, {11, 12, 13, 14, 15}), "MPICH rank 2 of 3: " .. table.concat(r.split.cores, ","))
  -- Slurm: this node (SLURM_NODEID=1) runs the 3rd entry's count: "2(x1),4(x2)" -> 4
  r = child("LDIST_CPU_CORES=16 SLURM_LOCALID=3 SLURM_NODEID=1 SLURM_STEP_TASKS_PER_NODE='2(x1),4(x2)'", "report")
  T.eq(r.split.local_size, 4)
  T.ok(same(r.split.cores, {12, 13, 14, 15}), "Slurm local rank 3 of 4: " .. table.concat(r.split.cores, ","))
  if #ldist.config.cpu_split().cores >= 2 and os.execute("command -v taskset >/dev/null") then
    local out = sh(("LDIST_LOCAL_RANK=1 LDIST_LOCAL_SIZE=2 taskset -c 0 %s %s report"):format(bin, arg[0]))
    local js = ldist.json.decode(out:match("SPLIT ({[^\n]*})"))
    T.ok(same(js.split.cores, {0}), "bound by taskset to core 0: " .. table.concat(js.split.cores, ","))
    T.ok(js.split.text:find("bound by its launcher", 1, true), js.split.text)
  end
end)

T.test("mpirun -n 2: ranks split the cores, or keep the binding mpirun gave them", function()
  if not os.execute("command -v mpirun >/dev/null") then print("# skipped: no mpirun"); return end
  local all = ldist.config.cpu_split().cores
  for _, bind in ipairs({ "none", "core" }) do
    local out, ok = sh(("timeout 120 mpirun -n 2 --oversubscribe --allow-run-as-root --bind-to %s %s %s report")
      :format(bind, bin, arg[0]))
    T.ok(ok, "mpirun failed:\n" .. out)
    local used, n = {}, 0
    for js in out:gmatch("SPLIT ({[^\n]*})") do
      local r = ldist.json.decode(js)
      n = n + 1
      T.eq(r.split.local_size, 2)
      if #all >= 2 then
        T.eq(#r.split.cores, #all // 2 + (r.split.local_rank < #all % 2 and 1 or 0), "its share (bind " .. bind .. ")")
        T.ok(same(parse_list(r.mask), r.split.cores), ("rank %d runs on %s, its cores are %s"):format(
          r.split.local_rank, r.mask, table.concat(r.split.cores, ",")))
        for _, c in ipairs(r.split.cores) do
          T.ok(not used[c], ("core %d given to two ranks (bind %s)"):format(c, bind))
          used[c] = true
        end
        T.ok(r.split.text:find(bind == "none" and "pinned" or "bound by its launcher", 1, true), r.split.text)
      end
    end
    T.eq(n, 2, "both ranks reported:\n" .. out)
  end
end)

T.test("LocalCluster workers each take their share of the cores", function()
  local all = ldist.config.cpu_split().cores
  local lc = distribute.LocalCluster{workers = 2}
  local res = lc:run("return ldist.json.encode(ldist.config.cpu_split())")
  lc:shutdown()
  local used = {}
  for i, js in ipairs(res) do
    local s = ldist.json.decode(js)
    T.eq(s.local_rank, i - 1)
    T.eq(s.local_size, 2)
    if #all >= 2 then
      T.eq(#s.cores, #all // 2 + ((i - 1) < #all % 2 and 1 or 0))
      for _, c in ipairs(s.cores) do
        T.ok(not used[c], ("core %d given to two workers"):format(c))
        used[c] = true
      end
    end
  end
end)

T.test("products split over 2..16 threads (grids of row and column blocks) equal one thread's", function()
  local was = ldist.get_num_threads()
  tensor.seed(5)
  -- the MLP's forward and backward products, a tall one and odd sizes
  local shapes = { {256, 784, 512}, {256, 512, 256}, {784, 256, 512}, {2048, 784, 512}, {100, 300, 700}, {40, 513, 257} }
  for _, sh in ipairs(shapes) do
    local m, k, n = sh[1], sh[2], sh[3]
    local a, b = tensor.normal(m, k), tensor.normal(k, n)
    local at, bt = tensor.normal(k, m), tensor.normal(n, k)
    ldist.set_num_threads(1)
    local ref = { a:matmul(b), at.T:matmul(b), a:matmul(bt.T) }
    for _, th in ipairs({2, 3, 4, 6, 8, 12, 16}) do
      ldist.set_num_threads(th)
      local got = { a:matmul(b), at.T:matmul(b), a:matmul(bt.T) }
      for i = 1, 3 do
        local err = (got[i] - ref[i]):abs():max():item()
        local scale = ref[i]:abs():max():item()
        T.ok(err <= 1e-5 * scale, ("%dx%dx%d (%s) on %d threads: max difference %g (scale %g)"):format(m, k, n,
          ({"a b", "a^T b", "a b^T"})[i], th, err, scale))
      end
    end
  end
  ldist.set_num_threads(was)
end)

T.test("elementwise ops, copies, reductions and softmax split over 8 threads (8 pretended cores) equal one thread's", function()
  local r = child("LDIST_CPU_CORES=8", "elementwise")
  T.eq(r.threads, 8)
  T.eq(r.diff, 0, "elementwise results differ")
end)

T.test("bad counts are refused with a clear error", function()
  T.raises(function() ldist.config.cpu_devices(0) end, "number of CPU devices must be in 1..64, got 0")
  T.raises(function() distribute.LocalCluster{workers = 1, threads = 0} end, "threads must be 1..256")
end)

os.execute(("rm -rf %q %q"):format(smt16, smt32))
T.done()
