-- distribute/cluster.lua - where this process stands in a cluster, and what the
-- processes of a cluster share: the cluster description (TF_CONFIG, LDIST_*,
-- Slurm, mpirun), the shared secret, and the output of child processes. The
-- strategies over processes (distribute/multiworker.lua, distribute/parameter_server.lua) and
-- LocalCluster (distribute/local_cluster.lua) build on these; distribute._net holds
-- the helpers they share.
local ldist = ...
local C, distribute, docs = ldist._cluster, ldist.distribute, ldist.docs
if not C then return end

local getenv = os.getenv
local function env(k) local v = getenv(k); if v == "" then return nil end return v end
local net = {}
distribute._net = net
net.env = env

---------------------------------------------------------------- the cluster: where this process stands
-- Each source gives {source=, rank=, size=, leader="host:port", listen=, task_type=, task_index=, tasks=}.

local function check_addr(addr, what)
  if type(addr) ~= "string" or not addr:match("^%[?[%w%.%-_:]+%]?:%d+$") then
    error(("%s is %s, not \"host:port\""):format(what, type(addr) == "string" and ("'" .. addr .. "'") or tostring(addr)), 0)
  end
  return addr
end

-- TF_CONFIG, as TensorFlow reads it: {"cluster": {"chief": [...], "worker": [...], "ps": [...]},
-- "task": {"type": "worker", "index": 1}}, a table or its JSON text. The one
-- parser of both strategies over processes (MultiWorkerMirrored here,
-- ParameterServer in distribute/ps_tasks.lua): every list of the cluster is checked
-- ("host:port" each), and the task, when given, has a known type and an index.
-- Returns {cluster = {chief=, worker=, ps=, evaluator=}, task = {type=, index=} or nil}.
local TASK_TYPES = { chief = true, worker = true, ps = true, evaluator = true }
function net.tf_config(cfg, where)
  if type(cfg) == "string" then
    local v, err = ldist.json.decode(cfg)
    if v == nil then error(("%s is not valid JSON: %s"):format(where, err), 0) end
    cfg = v
  end
  if type(cfg) ~= "table" or type(cfg.cluster) ~= "table" then
    error(where .. ' must look like {"cluster": {"worker": ["host:port", ...]}, "task": {"type": "worker", "index": 0}}', 0)
  end
  local cluster = {}
  for ty, list in pairs(cfg.cluster) do
    if not TASK_TYPES[ty] then
      error(("%s: cluster.%s is not a task type (chief, worker, ps, evaluator)"):format(where, tostring(ty)), 0)
    end
    if type(list) ~= "table" then error(("%s: cluster.%s must be a list of \"host:port\""):format(where, ty), 0) end
    cluster[ty] = {}
    for i, addr in ipairs(list) do cluster[ty][i] = check_addr(addr, ("%s: cluster.%s[%d]"):format(where, ty, i - 1)) end
  end
  local task = cfg.task
  if task ~= nil then
    if type(task) ~= "table" then error(where .. ': "task" must be {"type": "worker", "index": 0}', 0) end
    local idx = math.tointeger(task.index or 0)
    if not TASK_TYPES[task.type] or not idx or idx < 0 then
      error(("%s: task {type=%s, index=%s} is not a task of the cluster"):format(where, tostring(task.type), tostring(task.index)), 0)
    end
    task = { type = task.type, index = idx }
  end
  return { cluster = cluster, task = task }
end

-- Ranks of MultiWorkerMirrored: the chief, then the workers.
local function from_tf_config(cfg, where)
  local parsed = net.tf_config(cfg, where)
  local tasks = {}
  for _, ty in ipairs({ "chief", "worker" }) do
    for i, addr in ipairs(parsed.cluster[ty] or {}) do
      tasks[#tasks + 1] = { type = ty, index = i - 1, address = addr }
    end
  end
  if #tasks == 0 then error(where .. ": the cluster lists no chief and no worker", 0) end
  local task = parsed.task
  if not task then error(where .. ': "task" is missing ({"type": "worker", "index": 0})', 0) end
  local ty, idx = task.type, task.index
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
    ps = parsed.cluster.ps }
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

-- Under mpirun (or srun with MPI's PMI) and no LDIST_LEADER, the ranks meet
-- through MPI itself, as Horovod's do (`mpirun -n 4 ldist train.lua` and
-- nothing more): rank 0 picks a port on its host, and MPI_Bcast tells the
-- others where it listens and the control plane's secret (LDIST_SECRET when
-- rank 0 has one, else 256 fresh random bits; MPI's launcher is the trust
-- domain of the job). A collective: every rank calls it, once per strategy.
-- quiet: return nil where MPI cannot say (Slurm then keeps its own rendezvous).
local function mpi_rendezvous(r, n, source, quiet)
  local avail, why = C.mpi_available()
  if not avail then
    if quiet then return nil end
    error(("%s gives rank %d of %d but not where rank 0 listens: set LDIST_LEADER=host:port, or install " ..
      "Open MPI so the ranks meet through MPI (%s)"):format(source, r, n, why), 0)
  end
  local mr, mn = C.mpi_init()
  if mr ~= r or mn ~= n then
    if quiet then return nil end
    error(("%s gives rank %d of %d but not where rank 0 listens, and MPI gives rank %d of %d (the processes were " ..
      "not started by one mpirun or srun --mpi=pmix): set LDIST_LEADER=host:port"):format(source, r, n, mr, mn), 0)
  end
  local msg
  if r == 0 then
    local ok, secret = true, nil
    if env("LDIST_SECRET") or env("LDIST_SECRET_FILE") then ok, secret = pcall(net.read_secret, n)
    else secret = C.random_hex(32) end
    -- a failure on rank 0 still answers the broadcast, so every rank stops with its message
    msg = ok and ("ok\n%s:%d\n%s"):format(C.hostname(), C.free_port("0.0.0.0"), secret) or ("error\n" .. tostring(secret))
  end
  msg = C.mpi_broadcast_string(msg, 0)
  local leader, secret = msg:match("^ok\n([^\n]+)\n(.+)$")
  if not leader then error("rank 0 could not lead the MPI rendezvous: " .. (msg:match("^error\n(.*)$") or msg), 0) end
  return { source = source .. " through MPI", rank = r, size = n, leader = check_addr(leader, "the leader's address"),
    secret = secret, mpi = true, task_type = "worker", task_index = r }
end

-- Where this process stands: cluster= (a TF_CONFIG table or JSON string), else
-- TF_CONFIG, else LDIST_RANK/LDIST_WORLD_SIZE/LDIST_LEADER, else Slurm, else
-- mpirun (Open MPI, MPICH's PMI), else one process alone. Under mpirun (and
-- srun with PMI) without LDIST_LEADER the rendezvous goes through MPI.
ldist.internal(distribute, "resolve_cluster")   -- the strategies read the cluster with it
function distribute.resolve_cluster(cluster)
  if cluster ~= nil then return from_tf_config(cluster, "cluster") end
  local tf = env("TF_CONFIG")
  if tf then return from_tf_config(tf, "TF_CONFIG") end
  local port = env("LDIST_PORT") or env("MASTER_PORT") or "29500"
  local leader = env("LDIST_LEADER") or (env("MASTER_ADDR") and env("MASTER_ADDR") .. ":" .. port)
  local r, n = tonumber(env("LDIST_RANK") or ""), tonumber(env("LDIST_WORLD_SIZE") or "")
  if r and n then return from_ranks(r, n, leader, "LDIST_RANK/LDIST_WORLD_SIZE") end
  -- srun --mpi=pmix (or pmi2) starts MPI ranks: they meet through MPI as under mpirun
  local pmi = env("PMIX_RANK") or env("PMI_RANK")
  r, n = tonumber(env("SLURM_PROCID") or ""), tonumber(env("SLURM_NTASKS") or "")
  if r and n then
    -- an srun whose PMI MPI does not speak (MPI alone: rank 0 of 1) keeps the first node as the leader
    local spec = n > 1 and not leader and pmi and mpi_rendezvous(r, n, "Slurm (SLURM_PROCID/SLURM_NTASKS)", true)
    if spec then return spec end
    local nodes = env("SLURM_STEP_NODELIST") or env("SLURM_JOB_NODELIST")
    return from_ranks(r, n, leader or (nodes and first_slurm_host(nodes) .. ":" .. port), "Slurm (SLURM_PROCID/SLURM_NTASKS)")
  end
  r, n = tonumber(env("OMPI_COMM_WORLD_RANK") or ""), tonumber(env("OMPI_COMM_WORLD_SIZE") or "")
  local src = "mpirun (OMPI_COMM_WORLD_RANK/SIZE)"
  if not (r and n) then
    r, n, src = tonumber(env("PMI_RANK") or ""), tonumber(env("PMI_SIZE") or ""), "mpirun (PMI_RANK/PMI_SIZE)"
  end
  if r and n then
    if n > 1 and not leader then return mpi_rendezvous(r, n, src) end
    return from_ranks(r, n, leader, src)
  end
  return { source = "a single process", rank = 0, size = 1, task_type = "worker", task_index = 0 }
end

-- The cluster's shared secret (LDIST_SECRET or LDIST_SECRET_FILE). A secret
-- chosen by a person can be guessed offline from what a handshake shows, so a
-- cluster of more than one process takes only secrets with an estimated 128
-- bits of entropy or more: random hex or base64 (`ldist launch` and
-- LocalCluster make 256-bit ones, the usual way).

-- Words people put in secrets (compared without case): a match costs about
-- log2(#WORDS) bits instead of its letters' worth.
local WORDS = {}
for w in ([[password passw0rd secret secrets cluster ldist admin root qwerty qwertz azerty letmein welcome
  monkey dragon master login iloveyou trustno1 football baseball shadow sunshine princess superman batman
  hello freedom whatever default changeme test testing guest train training model tensor worker server token
  hunter summer winter spring autumn love pass word key keys slurm mpirun openssl random hidden private
  secure security access abcdef asdf zxcv 12345 123456 deadbeef cafebabe
  coffee google github linux ubuntu debian python torch keras flow node leader chief]]):gmatch("%S+") do
  WORDS[#WORDS + 1] = w
end
table.sort(WORDS, function(a, b) return #a > #b end)        -- the longest match first
local WORD_BITS = math.ceil(math.log(#WORDS, 2)) + 1          -- +1: its letters' case

-- An estimate of a secret's entropy in bits, as password meters (zxcvbn) make
-- it: the secret is read left to right as the cheapest of
--   a literal character (per_char bits: 4 for hex, 6 for base64),
--   a run or sequence of 5+ characters with a constant step of -1, 0 or +1
--     ("00000", "abcdef", "0123456789abcdef" in hex) - per_char + 4 bits,
--   a repeat of 5+ characters seen before ("Password1Password1") - 8 bits,
--   a common word of 4+ letters ("password", "cluster") - WORD_BITS.
-- Random secrets have such patterns rarely (a 32-digit random hex secret
-- once in a few hundred), and then lose a few bits; chosen ones lose most.
-- Returns the bits and what was found.
local function entropy_bits(s, per_char, hex)
  local n, low = #s, s:lower()
  local v = {}
  for i = 1, n do
    local b = low:byte(i)
    -- hex digits by value, so that "9" -> "a" continues a sequence
    v[i] = hex and (b <= 57 and b - 48 or b - 87) or s:byte(i)
  end
  local bits, found, i = 0, {}, 1
  while i <= n do
    local len, cost, what = 1, per_char, nil
    -- run or sequence
    if i < n then
      local d = v[i + 1] - v[i]
      if d >= -1 and d <= 1 then
        local j = i + 1
        while j < n and v[j + 1] - v[j] == d do j = j + 1 end
        if j - i + 1 >= 5 then len, cost, what = j - i + 1, per_char + 4, d == 0 and "a run of one character" or "a sequence" end
      end
    end
    -- a repeat of what came before (overlapping allowed: "3f3f3f3f")
    local r = 0
    while i + r <= n and s:find(s:sub(i, i + r), 1, true) < i do r = r + 1 end
    if r >= 5 and r > len then len, cost, what = r, 8, "a repeat" end
    -- a common word
    for _, w in ipairs(WORDS) do
      if #w > len and #w >= 4 and low:sub(i, i + #w - 1) == w then
        len, cost, what = #w, WORD_BITS, ("the word '%s'"):format(w)
        break
      end
    end
    if what then found[#found + 1] = what end
    bits, i = bits + cost, i + len
  end
  return bits, found
end

local function secret_bits(s)
  if s:match("^%x+$") then
    local bits, found = entropy_bits(s, 4, true)
    return bits, "hex digits", found
  end
  local body = s:gsub("=+$", "")
  if body:match("^[%w+/]+$") or body:match("^[%w%-_]+$") then
    -- random base64 of 22 characters lacks upper or lower case letters once
    -- in 50,000; words and passphrases ("my-cluster-secret-2024") lack one
    if not (body:match("%u") and body:match("%l")) then return 0, "base64 characters without both letter cases (not random)", {} end
    local bits, found = entropy_bits(body, 6, false)
    return bits, "base64 characters", found
  end
  return 0, "characters that are neither hex nor base64", {}
end
net.secret_bits = secret_bits

function net.read_secret(size)
  local s, src = env("LDIST_SECRET"), "LDIST_SECRET"
  if not s and env("LDIST_SECRET_FILE") then
    src = "LDIST_SECRET_FILE " .. env("LDIST_SECRET_FILE")
    local f = io.open(env("LDIST_SECRET_FILE"), "rb")
    if not f then error("cannot read LDIST_SECRET_FILE " .. env("LDIST_SECRET_FILE"), 0) end
    s = f:read("a"):gsub("%s+$", "")
    f:close()
  end
  local how = "let `ldist launch` or distribute.LocalCluster make the secret (the usual way: they generate 256 random " ..
    "bits for each cluster); for processes started otherwise, make one with `openssl rand -hex 32` and give every " ..
    "process the same (LDIST_SECRET or LDIST_SECRET_FILE)"
  if size > 1 and not s then
    error("a cluster needs a shared secret (a peer without it is refused): `ldist launch` and LocalCluster make one; " ..
      "otherwise " .. how, 0)
  end
  if size > 1 then
    local bits, what, found = secret_bits(s)
    if bits < 128 then
      local seen = {}
      for _, f in ipairs(found) do if not seen[f] then seen[#seen + 1] = f; seen[f] = true end end
      error(("the cluster secret in %s is too weak to be safe: about %d bits of entropy estimated from %d %s%s, and 128 " ..
        "are needed (random hex or base64: 32 hex digits or 22 base64 characters at least), as a handshake lets a " ..
        "secret be guessed offline. Instead, %s")
        :format(src, bits, #s, what, #seen > 0 and (" holding " .. table.concat(seen, ", ")) or "", how), 0)
    end
  end
  return s
end

-- Child processes' output as "[worker i] ..." lines, and their exits: poll the
-- process group for up to `timeout` seconds; name(index) -> "worker 0";
-- on_exit(ev, name) for an exit.
function net.forward_output(procs, timeout, name, on_exit)
  if not procs then return end
  local deadline = ldist.clock() + (timeout or 0)
  repeat
    local ev = procs:poll(0)
    while ev do
      if ev.kind == "exit" then
        on_exit(ev, name(ev.index))
      else
        local out = ev.kind == "out" and io.stdout or io.stderr
        out:write(("[%s] %s%s"):format(name(ev.index), ev.line, ev.ending == "\r" and "\r" or "\n"))
        out:flush()
      end
      ev = procs:poll(0)
    end
    if ldist.clock() >= deadline then break end
    C.sleep(0.01)
  until false
end

-- how a child process ended, in words
function net.describe_exit(ev)
  if ev.signal ~= 0 then return ("was killed by signal %d (%s)"):format(ev.signal, ev.signal_name or "?") end
  return ("exited with status %d"):format(ev.status)
end

local doc = ldist.document
doc(distribute.resolve_cluster, "distribute.resolve_cluster",
  "distribute.resolve_cluster([tf_config]) -> {rank=, size=, leader=, task_type=, task_index=, source=}\n\n" ..
  "Where this process stands in its cluster (TF_CONFIG, LDIST_*, Slurm or mpirun variables).\n" ..
  "Under mpirun (or srun --mpi=pmix) without LDIST_LEADER the ranks meet through MPI: rank 0\n" ..
  "broadcasts where it listens and the cluster's secret (secret=), so every rank must call it.")
