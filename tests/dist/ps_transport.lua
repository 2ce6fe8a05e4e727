-- The parameter-server data path (issue 19): between processes of one host,
-- pulls and pushes go through a shared-memory segment per (client, ps) pair
-- and its mailbox (engine/net/ld_ps_shm.c), not through the control plane.
--   * the fast path is really taken: coordinator:stats() counts the bytes
--     the ps tasks moved through shared memory and through the network
--     (with LDIST_PS_TRANSPORT=tcp: only the network);
--   * the values a worker pulls, and those the coordinator fetches, equal the
--     ps tasks' own exactly (their checkpoint), shards included;
--   * training under it matches the same training over the network (one
--     worker, max_staleness=0: deterministic), bit for bit, when the caller
--     passes the other run's weights file;
--   * tasks and their replies go through the coordinator's task link to each
--     worker (a mailbox in shared memory), not the control plane, all but the
--     first few (sent before the worker mapped it); with tcp: none;
--   * nothing is left in /dev/shm or the temporary directory.
-- usage: ps_transport.lua DIR [OTHER_WEIGHTS_FILE]
local D, nn, optim, tensor, data = ldist.distribute, ldist.nn, ldist.optim, ldist.tensor, ldist.data
local dir = assert(arg and arg[1], "usage: ps_transport.lua DIR [OTHER]")
local other = arg[2]
local tcp = os.getenv("LDIST_PS_TRANSPORT") == "tcp"
local function say(ok, name) print((ok and "ok - " or "not ok - ") .. name .. (tcp and " (tcp)" or "")) end
local function ls(pat)
  local p = io.popen("ls -d " .. pat .. " 2>/dev/null")
  local out = {}
  for l in p:lines() do out[#out + 1] = l end
  p:close()
  return out
end
local tmp = os.getenv("TMPDIR") or "/tmp"
local shm_before, tmp_before = #ls("/dev/shm/ldist-ps-*"), #ls(tmp .. "/ldist-ps-*")

tensor.seed(11)
local x, y = tensor.randn({ 512, 300 }), tensor.randn({ 512, 10 })

-- 1. two workers, two ps tasks, a sharded kernel: training moves bytes on the expected path
do
  local lc = D.LocalCluster { workers = 2, ps = 2 }
  local s = D.ParameterServerStrategy(lc, { variable_partitioner =
    D.partitioners.MinSizePartitioner { min_shard_bytes = 64 * 1024, max_shards = 2 } })
  local model
  s:scope(function()
    model = nn.Sequential { nn.Dense { units = 256, activation = "relu" }, nn.Dense { units = 10 } }
    model:build({ 300 })
    model:compile { optimizer = optim.Adam { learning_rate = 1e-3 }, loss = "mse" }
  end)
  local coord = D.ClusterCoordinator(s)
  model:fit(data.Dataset.from_tensor_slices({ x, y }):batch(32), { epochs = 1, steps_per_epoch = 40, verbose = 0 })
  local st = coord:stats()
  local per_step = 0
  for _, v in ipairs(model.trainable_variables) do per_step = per_step + 4 * v:numel() end
  print(("# %d steps applied; bytes through shared memory %d, through the network %d (one pull + push: %d)")
    :format(st.applied, st.shm_bytes, st.net_bytes, 2 * per_step))
  if tcp then
    say(st.shm_bytes == 0 and st.net_bytes >= 40 * 2 * per_step, "every pull and push went over the network")
  else
    -- the first request of each (client, ps) pair may carry the mapping only; all the rest is shared memory
    say(st.shm_bytes >= 38 * 2 * per_step and st.net_bytes == 0, "pulls and pushes went through shared memory")
  end
  say(st.applied == 40 and st.unique == 40, "every step applied once")
  print(("# tasks through the task links %d of 40, replies %d"):format(st.tasks_linked, st.replies_linked))
  if tcp then say(st.tasks_linked == 0 and st.replies_linked == 0, "every task and reply went over the control plane")
  else say(st.tasks_linked >= 30 and st.replies_linked >= 30, "tasks and replies went through the task links") end

  -- what a worker pulls equals the ps tasks' values, exactly
  local rv = coord:schedule(function()
    local w = ldist.distribute.worker_context()
    w:pull()
    local out = {}
    for i, v in ipairs(w.model.trainable_variables) do out[i] = v:clone() end
    return out, w.shm_bytes or 0
  end)
  local pulled, wbytes = rv:fetch()
  s:checkpoint(dir)
  local fetched = s:fetch_variables()
  local files = {}
  for p = 0, 1 do
    for k, v in pairs(ldist.io.load_safetensors(("%s/ps-%d.safetensors"):format(dir, p))) do files[k] = v end
  end
  local exact_pull, exact_fetch = true, true
  for i = 1, #model.trainable_variables do
    local parts = {}
    for j = 0, 9 do local t = files[("v%d/part%d"):format(i, j)]; if t then parts[#parts + 1] = t end end
    local whole = #parts == 1 and parts[1] or tensor.concat(parts, 0)
    local function same(a) return a and table.concat(a.shape, "x") == table.concat(whole.shape, "x") and (a - whole):abs():max():item() == 0 end
    if not same(pulled[i]) then exact_pull = false end
    if not same(fetched[i]) then exact_fetch = false end
  end
  say(exact_pull, "a worker's pulled weights equal the ps tasks' exactly")
  say(exact_fetch, "the coordinator's fetch equals the ps tasks' exactly (shards reassembled)")
  say(tcp and wbytes == 0 or (not tcp and wbytes > 0), "the worker counts its own shared-memory bytes")
  lc:shutdown()
end

-- 2. one worker, max_staleness=0, SGD: deterministic; the weights are written for the other transport's run
do
  tensor.seed(3)
  local lc = D.LocalCluster { workers = 1, ps = 1 }
  local s = D.ParameterServerStrategy(lc)
  local model
  s:scope(function()
    model = nn.Sequential { nn.Dense { units = 64, activation = "relu" }, nn.Dense { units = 10 } }
    model:build({ 300 })
    model:compile { optimizer = optim.SGD { learning_rate = 0.05, momentum = 0.9 }, loss = "mse" }
  end)
  local coord = D.ClusterCoordinator(s, { max_staleness = 0 })
  local pwd = coord:create_per_worker_dataset(data.Dataset.from_tensor_slices({ x, y }):batch(64))
  for _ = 1, 30 do coord:schedule(D.ps_train_step, { pwd }) end
  coord:join()
  local w = s:fetch_variables()
  local t = {}
  for i, v in ipairs(w) do t["w" .. i] = v end
  ldist.io.save_safetensors(dir .. "/weights" .. (tcp and "-tcp" or "-shm") .. ".safetensors", t)
  if other then
    local o = ldist.io.load_safetensors(other)
    local same = true
    for i, v in ipairs(w) do if not o["w" .. i] or (o["w" .. i] - v):abs():max():item() ~= 0 then same = false end end
    say(same, "30 synchronous steps give the same weights over shared memory and over the network")
  end
  lc:shutdown()
end

-- 3. many variables: the answers (offsets and shapes) outgrow a mailbox slot and come by the control plane
do
  tensor.seed(4)
  local lc = D.LocalCluster { workers = 2, ps = 1 }
  local s = D.ParameterServerStrategy(lc)
  local model
  s:scope(function()
    local layers = {}
    for i = 1, 120 do layers[i] = nn.Dense(4) end
    model = nn.Sequential(layers)
    model:build({ 4 })
    model:compile { optimizer = optim.SGD { learning_rate = 0.01 }, loss = "mse" }
  end)
  model:fit(data.Dataset.from_tensor_slices({ tensor.randn({ 64, 4 }), tensor.randn({ 64, 4 }) }):batch(16),
    { epochs = 1, steps_per_epoch = 12, verbose = 0 })
  local a, b = s:fetch_variables(), s:fetch_variables()
  local same = #a == #model.trainable_variables
  for i, v in ipairs(model.trainable_variables) do
    if (a[i] - v):abs():max():item() ~= 0 or (b[i] - v):abs():max():item() ~= 0 then same = false end
  end
  say(same and s:ps_stats()[1].applied == 12, ("a model of %d variables trains and fetches exactly"):format(#model.trainable_variables))
  lc:shutdown()
end

say(#ls("/dev/shm/ldist-ps-*") <= shm_before and #ls(tmp .. "/ldist-ps-*") <= tmp_before,
  "no segment or doorbell left behind")
