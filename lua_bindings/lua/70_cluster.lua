-- 70_cluster.lua - where this process stands in a cluster, and what the
-- processes of a cluster share: the cluster description (TF_CONFIG, LDIST_*,
-- Slurm, mpirun), the shared secret, and the output of child processes. The
-- strategies over processes (72_multiworker.lua, 82_parameter_server.lua) and
-- LocalCluster (74_local_cluster.lua) build on these; distribute._net holds
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
-- ParameterServer in 80_ps_tasks.lua): every list of the cluster is checked
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

-- Where this process stands: cluster= (a TF_CONFIG table or JSON string), else
-- TF_CONFIG, else LDIST_RANK/LDIST_WORLD_SIZE/LDIST_LEADER, else Slurm, else
-- mpirun (Open MPI, MPICH's PMI), else one process alone.
ldist.internal(distribute, "resolve_cluster")   -- the strategies read the cluster with it
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

-- The cluster's shared secret (LDIST_SECRET or LDIST_SECRET_FILE). A secret
-- chosen by a person can be guessed offline from one handshake (a challenge
-- carries an HMAC of known data), so a cluster of more than one process takes
-- only random-looking secrets of at least 128 bits: 32 hex digits or 22
-- base64 characters (`ldist launch` and LocalCluster make 256-bit ones).
local function secret_bits(s)
  if s:match("^%x+$") then return #s * 4, "hex digits" end
  local body = s:gsub("=+$", "")
  if body:match("^[%w+/]+$") or body:match("^[%w%-_]+$") then
    -- random base64 of 22 characters lacks upper or lower case letters once
    -- in 50,000; words and passphrases ("my-cluster-secret-2024") lack one
    if not (body:match("%u") and body:match("%l")) then return 0, "base64 characters without both letter cases (not random)" end
    return #body * 6, "base64 characters"
  end
  return 0, "characters that are neither hex nor base64"
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
  local how = "make one with `openssl rand -hex 32` and give every process the same (LDIST_SECRET or LDIST_SECRET_FILE)"
  if size > 1 and not s then
    error("a cluster needs a shared secret (a peer without it is refused): `ldist launch` and LocalCluster make one; " ..
      "otherwise " .. how, 0)
  end
  if size > 1 then
    local bits, what = secret_bits(s)
    if bits < 128 then
      error(("the cluster secret in %s is too weak to be safe (%d %s; it must be at least 128 bits of random hex " ..
        "or base64: 32 hex digits or 22 base64 characters, as one handshake lets it be guessed offline): %s")
        :format(src, #s, what, how), 0)
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
  "Where this process stands in its cluster (TF_CONFIG, LDIST_*, Slurm or mpirun variables).")
