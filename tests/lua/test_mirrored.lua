-- test_mirrored.lua - MirroredStrategy over logical CPU devices: the same
-- answer as one device, uneven data, errors that name the replica.
local T = dofile("tests/lua/testlib.lua")
ldist.config.cpu_devices(4)
local C = ldist._distribute

local function make_data(n)
  tensor.seed(11)
  local x = tensor.normal(n, 6)
  local y = x:slice(1, 0, 3):argmax(1):astype("int64")
  return x, y
end

-- 100 steps of the seed's custom loop on `devices` (nil: no strategy)
-- the strategy (nil devices: none), and a model and optimizer made in its scope
local function setup(devices, make_opt, compile)
  local strategy = devices and distribute.MirroredStrategy{devices = devices} or distribute.get_strategy()
  local model, opt
  tensor.seed(7)
  do
    local _ <close> = strategy:scope()
    model = nn.Sequential{nn.Dense(16, "tanh"), nn.Dense(3)}
    opt = make_opt()
    if compile then model:compile{optimizer = opt, loss = losses.SparseCategoricalCrossentropy{from_logits = true}} end
  end
  return strategy, model, opt
end

local function train(devices, make_opt, check_replicas)
  local strategy, model, opt = setup(devices, make_opt)
  local loss_object = losses.SparseCategoricalCrossentropy{from_logits = true}
  local x, y = make_data(400)
  local ds = data.Dataset.from_tensor_slices(x, y):batch(40)
  local dist = strategy:experimental_distribute_dataset(ds)
  local function step(inputs)
    local tape = autograd.GradientTape()
    local loss = tape:record(function() return loss_object(inputs[2], model(inputs[1], {training = true})) end)
    opt:apply_gradients(tape:gradient(loss, model.trainable_variables), model.trainable_variables)
    return loss
  end
  local steps, first_loss, last_loss = 0, nil, nil
  while steps < 100 do
    for inputs in dist do
      local l = strategy:reduce("sum", strategy:run(step, inputs))
      first_loss = first_loss or l; last_loss = l
      steps = steps + 1
      if check_replicas and devices then
        for _, v in ipairs(model.trainable_variables) do
          local copies = C.mirror_copies(v)
          for r = 2, #copies do
            local d = (copies[1] - copies[r]:cpu()):abs():max():item()
            if d ~= 0 then error(("step %d: replica %d differs from replica 0 by %g"):format(steps, r - 1, d)) end
          end
        end
      end
      if steps == 100 then break end
    end
  end
  local w = {}
  for i, v in ipairs(model.trainable_variables) do w[i] = v:cpu() end
  return w, first_loss, last_loss
end

local function max_diff(a, b)
  local m = 0
  for i = 1, #a do m = math.max(m, (a[i] - b[i]):abs():max():item()) end
  return m
end

for _, o in ipairs({
  {"SGD", function() return optim.SGD{learning_rate = 0.1, momentum = 0.9} end},
  {"Adam", function() return optim.Adam{learning_rate = 0.01} end}}) do
  local name, make_opt = o[1], o[2]
  T.test(name .. ": 2 and 4 replicas give the weights of one device after 100 steps", function()
    local w1, l0, l1 = train(nil, make_opt)
    T.ok(l1 < l0, "the loss falls")
    local w2 = train({"cpu:0", "cpu:1"}, make_opt, true)
    local w4 = train({"cpu:0", "cpu:1", "cpu:2", "cpu:3"}, make_opt, name == "SGD")
    T.ok(max_diff(w1, w2) < 2e-4, ("2 replicas differ by %g"):format(max_diff(w1, w2)))
    T.ok(max_diff(w1, w4) < 2e-4, ("4 replicas differ by %g"):format(max_diff(w1, w4)))
  end)
end

-- model:fit under the strategy shards the update (each replica sums and
-- updates a slice, the slices are gathered): it must still give the weights
-- and optimizer slots of one device, keep the replicas identical after every
-- step, and leave slots that a later unsharded step can use.
local function fit_run(devices, make_opt, opts)
  opts = opts or {}
  local strategy, model, opt = setup(devices, make_opt, true)
  if devices and opts.fuse == false then strategy._fuse_grads = false end
  local x, y = make_data(opts.examples or 400)
  local worst = 0
  local check = {on_train_batch_end = function()
    if not devices then return end
    for _, v in ipairs(model.trainable_variables) do
      local copies = C.mirror_copies(v)
      for r = 2, #copies do worst = math.max(worst, (copies[1] - copies[r]:cpu()):abs():max():item()) end
    end
  end}
  local h
  do
    local _ <close> = strategy:scope()
    if devices then strategy._comm:stats(true) end
    h = model:fit(data.Dataset.from_tensor_slices(x, y):batch(opts.batch or 40), {epochs = 10, verbose = 0, callbacks = {check}})
  end
  local products = devices and strategy._comm:stats(true).products or 0
  local state = ldist.optim._state(opt, model.trainable_variables)
  -- one more step through the custom loop: an unsharded update from the slots
  local loss_object = losses.SparseCategoricalCrossentropy{from_logits = true}
  local dist = strategy:experimental_distribute_dataset(data.Dataset.from_tensor_slices(x, y):batch(40):take(1))
  for inputs in dist do
    strategy:run(function(b)
      local tape = autograd.GradientTape()
      local loss = tape:record(function() return loss_object(b[2], model(b[1], {training = true})) end)
      opt:apply_gradients(tape:gradient(loss, model.trainable_variables), model.trainable_variables)
    end, inputs)
  end
  local w = {}
  for i, v in ipairs(model.trainable_variables) do w[i] = v:cpu() end
  return {weights = w, slots = state.slots, iterations = state.iterations, worst = worst, loss = h.loss, products = products}
end

for _, o in ipairs({
  {"SGD with momentum", function() return optim.SGD{learning_rate = 0.1, momentum = 0.9} end},
  {"Adam", function() return optim.Adam{learning_rate = 0.01} end},
  {"RMSprop", function() return optim.RMSprop{learning_rate = 0.01, momentum = 0.5} end}}) do
  local name, make_opt = o[1], o[2]
  T.test(name .. ": fit with the sharded update on 2, 3 and 4 replicas gives the weights and slots of one device", function()
    local one = fit_run(nil, make_opt)
    T.ok(one.loss[10] < one.loss[1], "the loss falls")
    for _, n in ipairs({2, 3, 4}) do
      local devs = {}
      for r = 0, n - 1 do devs[r + 1] = "cpu:" .. r end
      local run = fit_run(devs, make_opt)
      -- the two dense kernels' gradients were summed from their products, every step
      T.eq(run.products, 2 * 10 * 10, n .. " replicas: kernel gradients fused into the reduce")
      T.eq(run.worst, 0, n .. " replicas are identical after every step")
      T.eq(run.iterations, one.iterations, "the step is counted once per step")
      T.ok(max_diff(one.weights, run.weights) < 2e-4, ("%d replicas: weights differ by %g"):format(n, max_diff(one.weights, run.weights)))
      for i, sl in ipairs(one.slots) do
        for q = 1, 2 do
          if sl[q] then
            local d = (sl[q] - run.slots[i][q]):abs():max():item()
            T.ok(d < 2e-4, ("%d replicas: slot %d of variable %d differs by %g"):format(n, q, i, d))
          end
        end
      end
    end
  end)
end

T.test("fit: kernel gradients fused into the reduce equal summed gradients, with empty replicas too", function()
  local make_opt = function() return optim.Adam{learning_rate = 0.01} end
  local devs = {"cpu:0", "cpu:1", "cpu:2"}
  local fused, plain = fit_run(devs, make_opt), fit_run(devs, make_opt, {fuse = false})
  T.ok(fused.products > 0 and plain.products == 0, "one run fused, the other did not")
  T.ok(max_diff(fused.weights, plain.weights) < 1e-5, ("fused and summed differ by %g"):format(max_diff(fused.weights, plain.weights)))
  -- 10 examples in batches of 4 over 5 replicas: the last batch (2 examples)
  -- leaves three replicas empty, whose products add nothing
  ldist.config.cpu_devices(5)
  local one = fit_run(nil, make_opt, {examples = 10, batch = 4})
  local five = fit_run({"cpu:0", "cpu:1", "cpu:2", "cpu:3", "cpu:4"}, make_opt, {examples = 10, batch = 4})
  T.eq(five.products, 2 * 3 * 10, "every step fused")
  T.eq(five.worst, 0, "replicas identical after every step")
  T.ok(max_diff(one.weights, five.weights) < 2e-4, ("5 replicas with empty ones differ by %g"):format(max_diff(one.weights, five.weights)))
  -- clipnorm needs the whole gradient: no sharded update, an all-reduce of
  -- the products into every replica's gradients, then the same update everywhere
  local clip = function() return optim.Adam{learning_rate = 0.01, clipnorm = 0.5} end
  local c1, c3 = fit_run(nil, clip), fit_run(devs, clip)
  T.eq(c3.products, 2 * 10 * 10, "clipnorm: kernel gradients all-reduced from their products")
  T.eq(c3.worst, 0, "clipnorm: replicas identical after every step")
  T.ok(max_diff(c1.weights, c3.weights) < 2e-4, ("clipnorm: 3 replicas differ by %g"):format(max_diff(c1.weights, c3.weights)))
end)

T.test("a kernel gradient left as a product is computed wherever it is read", function()
  local x, y = make_data(12)
  local lossf = losses.SparseCategoricalCrossentropy{from_logits = true}
  local model = nn.Sequential{nn.Dense(4, "tanh"), nn.Dense(3)}
  model(x)
  local _, want = model:_grads(x, y, lossf)
  local _, got = model:_grads(x, y, lossf, true)
  T.eq(#got, #want)
  for i = 1, #want do
    T.eq(table.concat(got[i].shape, "x"), table.concat(want[i].shape, "x"))
    T.ok((got[i] - want[i]):abs():max():item() < 1e-6, "gradient " .. i .. " equals the computed one")
  end
  local _, again = model:_grads(x, y, lossf, true)
  T.ok((again[1]:reshape{-1} - want[1]:reshape{-1}):abs():max():item() < 1e-6, "a reshaped view reads the product")
end)

T.test("uneven data: range(6) batched by 4 over 2 replicas", function()
  local s = distribute.MirroredStrategy{devices = {"cpu:0", "cpu:1"}}
  local seen = {}
  for inputs in s:experimental_distribute_dataset(data.Dataset.range(6):batch(4)) do
    local parts = {}
    for r, v in ipairs(s:experimental_local_results(inputs)) do
      parts[r] = table.concat(v[1]:totable(), ",")
      T.eq(v[1].device, r == 1 and "cpu:0" or "cpu:1")
    end
    seen[#seen + 1] = "[" .. parts[1] .. "]/[" .. parts[2] .. "]"
  end
  T.eq(table.concat(seen, " "), "[0,1]/[2,3] [4]/[5]")
end)

T.test("uneven data: 4 elements over 5 replicas leave one empty, and training completes", function()
  ldist.config.cpu_devices(5)
  local s = distribute.MirroredStrategy{devices = {"cpu:0", "cpu:1", "cpu:2", "cpu:3", "cpu:4"}}
  local sizes = {}
  for inputs in s:experimental_distribute_dataset(data.Dataset.range(4):batch(4)) do
    for r, v in ipairs(s:experimental_local_results(inputs)) do sizes[r] = v[1].shape[1] end
  end
  T.eq(table.concat(sizes, ","), "1,1,1,1,0")
  local model, opt
  do local _ <close> = s:scope(); model = nn.Sequential{nn.Dense(3)}; opt = optim.Adam() end
  local lossf = losses.SparseCategoricalCrossentropy{from_logits = true}
  local x, y = make_data(9)
  local n = 0
  for inputs in s:experimental_distribute_dataset(data.Dataset.from_tensor_slices(x, y):batch(4)) do
    local l = s:reduce("sum", s:run(function(inp)
      local tape = autograd.GradientTape()
      local loss = tape:record(function() return lossf(inp[2], model(inp[1], {training = true})) end)
      opt:apply_gradients(tape:gradient(loss, model.trainable_variables), model.trainable_variables)
      return loss
    end, inputs))
    T.ok(l == l, "loss is a number, not NaN")
    n = n + 1
  end
  T.eq(n, 3)
end)

T.test("batches split as each replica gathers its rows equal the whole batch split afterwards", function()
  local s = distribute.MirroredStrategy{devices = {"cpu:0", "cpu:1", "cpu:2"}}
  local x, y = make_data(22)
  local function pipeline(map)
    local ds = data.Dataset.from_tensor_slices(x, y)
    if map then ds = ds:map(function(a, b) return a, b end) end   -- a map: whole batches, split afterwards
    return ds:shuffle(22, {seed = 3}):batch(8):repeat_(2):skip(1):take(4)
  end
  T.ok(pipeline(false):_splittable(), "rows of one source are split as they are gathered")
  T.ok(not pipeline(true):_splittable(), "a mapped dataset is not")
  local function collect(ds)
    local out = {}
    for inputs in s:experimental_distribute_dataset(ds) do
      local rows = {}
      for r, v in ipairs(s:experimental_local_results(inputs)) do
        T.eq(v[1].device, s.devices[r])
        T.eq(v[2].device, s.devices[r])
        rows[r] = v[1].shape[1] .. ":" .. table.concat(v[2]:cpu():totable(), ",") .. ":" .. ("%.6f"):format(v[1]:cpu():sum():item())
      end
      out[#out + 1] = inputs.global_batch .. "=" .. table.concat(rows, "/")
    end
    return table.concat(out, " ")
  end
  local split, whole = collect(pipeline(false)), collect(pipeline(true))
  T.eq(split, whole)
  T.ok(split:match("^8=3:"), "8 rows over 3 replicas: 3, 3, 2")
  T.ok(split:match(" 6=2:"), "the last batch of an epoch (22 = 2 x 8 + 6) splits 2, 2, 2")
end)

T.test("an error on one replica names it, and the next run works", function()
  local s = distribute.MirroredStrategy{devices = {"cpu:0", "cpu:1"}}
  T.raises(function()
    s:run(function()
      if distribute.get_replica_context().replica_id_in_sync_group == 1 then error("bad shape on purpose") end
      return 1
    end)
  end, "replica 1 (cpu:1): ")
  local r = s:run(function() return distribute.get_replica_context().replica_id_in_sync_group end)
  T.eq(s:reduce("sum", r), 1)
end)

T.test("all_reduce on some replicas only is an error, not a hang", function()
  local s = distribute.MirroredStrategy{devices = {"cpu:0", "cpu:1"}}
  T.raises(function()
    s:run(function()
      local ctx = distribute.get_replica_context()
      if ctx.replica_id_in_sync_group == 0 then return ctx:all_reduce("sum", tensor.ones(3)) end
    end)
  end, "all_reduce was called on replica(s) 0 only")
  local out = s:run(function()
    local ctx = distribute.get_replica_context()
    return ctx:all_reduce("sum", tensor.ones(3):to(s.devices[ctx.replica_id_in_sync_group + 1]))
  end)
  T.eq(s:reduce("mean", out, {axis = 0}), 2)
  local g = s:run(function()
    local ctx = distribute.get_replica_context()
    return ctx:all_gather(tensor.new{ctx.replica_id_in_sync_group}:to(s.devices[ctx.replica_id_in_sync_group + 1]))
  end)
  T.eq(table.concat(s:experimental_local_results(g)[2]:totable(), ","), "0.0,1.0")
end)

T.test("model:fit under MirroredStrategy, traced", function()
  local s = distribute.MirroredStrategy{devices = {"cpu:0", "cpu:1"}}
  local model
  do
    local _ <close> = s:scope()
    model = nn.Sequential{nn.Dense(32, "relu"), nn.Dense(3)}
    model:compile{optimizer = optim.Adam{learning_rate = 0.01},
      loss = losses.SparseCategoricalCrossentropy{from_logits = true}, metrics = {"accuracy"}}
  end
  local x, y = make_data(600)
  s:trace(true)
  local h
  do
    local _ <close> = s:scope()
    h = model:fit(data.Dataset.from_tensor_slices(x, y):batch(60), {epochs = 5, verbose = 0})
  end
  T.ok(h.loss[5] < h.loss[1], "loss falls")
  T.ok(h.accuracy[5] > 0.8, "accuracy " .. h.accuracy[5])
  local sum = s:trace_summary()
  T.ok(sum.calls >= 50 and sum.bytes > 0, ("%d all-reduce calls, %d bytes"):format(sum.calls, sum.bytes))
  T.ok(sum.per_replica[2].compute > 0 and sum.per_replica[1].allreduce > 0)
  local path = os.tmpname()
  s:write_trace(path)
  local f = io.open(path); local js = f:read("a"); f:close(); os.remove(path)
  T.ok(js:find('"name":"allreduce"', 1, true) and js:find('"tid":1', 1, true))
  local tl = s:timeline()
  T.ok(tl:svg():find("<svg", 1, true) and tl:svg():find("replica 1", 1, true))
  -- the phases of fit's step, each span with its step number (50 steps)
  local kinds, steps = {}, {}
  for _, sp in ipairs(s:trace_spans()[2]) do kinds[sp[1]] = true; steps[sp[4]] = true end
  T.ok(kinds.forward and kinds.backward and kinds.allreduce and kinds.input and steps[1] and steps[50] and not steps[51],
    "forward, backward, all-reduce and input spans, steps 1..50")
  T.ok(tostring(sum):find("replica 1 (cpu:1)", 1, true) and tostring(sum):find(" ms", 1, true), "the summary prints a table")
  T.ok(s:timeline{steps = {10, 12}}:svg():find("<title>step 11:", 1, true), "a zoom on steps 10..12")
  s:trace(false)
  -- stopping the trace keeps what it counted, for the summary and timeline of that trace
  T.eq(s:trace_summary().bytes, sum.bytes)
  s:trace(true)
  T.eq(s:trace_summary().bytes, 0, "a new trace counts afresh")
  s:trace(false)
end)

T.test("numbers and tables combine with tensors on any device", function()
  local t = tensor.ones(3):to("cpu:1")
  T.eq((t * 3).device, "cpu:1"); T.eq((2 + t):sum():item(), 9)
  T.eq((t + {1, 2, 3}):sum():item(), 9)
  T.raises(function() return t + tensor.ones(3) end, "tensors are on cpu:1 and cpu:0")
end)

T.test("copies and reads between queued devices wait for the kernels that write them", function()
  -- a chain of queued kernels on cpu:1, copied to cpu:2 and to the host while still queued
  local a = tensor.ones(512, 512):to("cpu:1")
  local b = a
  for _ = 1, 20 do b = b:matmul(a) * (1 / 512) end
  local c = b:to("cpu:2")
  local late = C.read_async(b:sum())
  T.eq(c.device, "cpu:2")
  T.eq(c:sum():item(), 512 * 512)
  T.eq(late:item(), 512 * 512)
  T.eq(b:cpu():sum():item(), 512 * 512)
  -- a dataset over a tensor still being computed on cpu:1 sees its final values
  local z = (tensor.ones(8, 2):to("cpu:1") * 3):matmul(tensor.ones(2, 2):to("cpu:1"))
  local n = 0
  for batch in data.Dataset.from_tensor_slices(z):batch(4) do n = n + (tensor.is_tensor(batch) and batch or batch[1]):sum():item() end
  T.eq(n, 8 * 2 * 6)
  T.raises(function() return C.read_async(tensor.ones(3)):item() end, "3 elements, not one")
end)

T.test("memory freed while its kernels are queued is reused only where that is safe", function()
  local free_now = getmetatable(tensor.zeros(1)).__close
  local big = tensor.ones(384, 384):to("cpu:1")
  local n = 1 << 16   -- 256 KB blocks, kept by the device when freed
  for i = 1, 20 do
    local slow = big:matmul(big)                -- keeps cpu:1 busy
    local a = tensor.full(n, i):to("cpu:1")
    local b = a * 2                              -- queued behind the product: reads a later
    free_now(a); collectgarbage()                -- a's block has a kernel still queued
    local c = tensor.full(n, -i):to("cpu:1")     -- written from the host: must get another block
    local d = b + 1                              -- an op's output may take a freed block at once
    free_now(b); collectgarbage()
    local e = d * 1                              -- ... even one whose kernels are still queued
    T.eq(c:sum():item(), -i * n, "host-written tensor, step " .. i)
    T.eq(e:sum():item(), (2 * i + 1) * n, "queued results, step " .. i)
    free_now(slow)
  end
end)

T.test("an out-of-range label in fit under MirroredStrategy is an error naming it, once", function()
  local s = distribute.MirroredStrategy{devices = {"cpu:0", "cpu:1"}}
  local m
  do local _ <close> = s:scope()
    m = nn.Sequential{nn.Dense(4, "relu"), nn.Dense(3)}
    m:compile{optimizer = "adam", loss = losses.SparseCategoricalCrossentropy{from_logits = true}}
  end
  tensor.seed(3)
  local x = tensor.normal(64, 5)
  local y = x:slice(1, 0, 3):argmax(1):astype("int64")
  local bad = y:clone(); bad[56] = 9   -- the second batch of 32: rows 48..63 are cpu:1's share
  -- the kernels run on the replicas' executors, not on the host: the label is
  -- found there and reported by the loss read, not turned into a NaN loss
  T.raises(function() m:fit(x, bad, {epochs = 3, batch_size = 32, verbose = 0, shuffle = false}) end,
    "label 9 at position 8 of cpu:1's share of the batch is outside [0, 3)")
  -- the next fit is not failed by the steps of the failed one that were still queued
  local h = m:fit(x, y, {epochs = 2, batch_size = 32, verbose = 0})
  T.eq(#h.loss, 2); T.ok(h.loss[2] == h.loss[2], "a finite loss")
  -- and nothing is left over for an unrelated read
  T.eq(tensor.ones(3):to("cpu:1"):sum():item(), 3)
end)

T.test("distribute_datasets_from_function: a step the pipeline cannot fill gives the other replicas empty batches (TF)", function()
  -- TF 2.21, MirroredStrategy on 2 logical CPUs,
  -- distribute_datasets_from_function(lambda c: range(20).batch(c.get_per_replica_batch_size(8))):
  -- [[0..3], [4..7]], [[8..11], [12..15]], [[16..19], []]
  local s = distribute.MirroredStrategy{devices = {"cpu:0", "cpu:1"}}
  local d = s:distribute_datasets_from_function(function(c)
    return data.Dataset.range(20):batch(c:get_per_replica_batch_size(8)) end)
  local steps = {}
  for b in d do
    local parts = {}
    for r, e in ipairs(s:experimental_local_results(b)) do
      local t = tensor.is_tensor(e) and e or e[1]
      parts[r] = "[" .. table.concat(t:totable(), ",") .. "]"
    end
    steps[#steps + 1] = table.concat(parts, " ")
  end
  T.eq(table.concat(steps, " | "), "[0,1,2,3] [4,5,6,7] | [8,9,10,11] [12,13,14,15] | [16,17,18,19] []")
  T.eq(d:cardinality(), 3)
end)

T.test("bad input to MirroredStrategy", function()
  T.raises(function() distribute.MirroredStrategy{devices = {"cpu:0", "cpu:9"}} end, "unknown device 'cpu:9'")
  T.raises(function() distribute.MirroredStrategy{cross_device_ops = "ring"} end, "cross_device_ops must be")
  T.raises(function() distribute.MirroredStrategy{devices = "cpu:0"} end, "devices must be a list of device names")
  T.raises(function() distribute.MirroredStrategy{devices = {"cpu:1", "cpu:1"}} end, "device cpu:1 is listed twice")
  -- the errors point at the caller's line, not at ldist's prelude
  local _, err = pcall(function() distribute.MirroredStrategy{devices = {"cpu:0", "cpu:0"}} end)
  T.ok(err:match("test_mirrored%.lua:%d+:"), err)
  -- the caller's device list is not reordered (replica order is the strategy's own)
  local list = {"cpu:1", "cpu:0"}
  local s = distribute.MirroredStrategy{devices = list}
  T.eq(list[1], "cpu:1"); T.eq(s.devices[1], "cpu:0")
  local v = s:run(function() return tensor.ones(2, 3) end)
  T.raises(function() s:reduce("sum", v, {axis = 2}) end, "axis 2 out of range for a value with 2 dimensions")
  T.raises(function() s:reduce("sum", 3, {axis = 0}) end, "axis 0 out of range for a value with 0 dimensions")
  T.eq(s:reduce("sum", v, {axis = -1}):sum():item(), 12)   -- each replica's rows summed over the last axis
  T.raises(function() s:gather(v, 4) end, "bad argument #2 to 'gather' (axis 4 out of range")
  T.raises(function() s:gather(5) end, "tensor or PerReplica tensors expected, got number")
  T.eq(s:gather(v, -1).shape[2], 6)
  T.raises(function() for _ in s:distribute_datasets_from_function(function() return 42 end) do end end,
    "the function returned a number; a dataset expected")
  T.raises(function() s:run(function() return distribute.get_replica_context():all_reduce("sum", "x") end) end,
    "bad argument #2 to 'all_reduce' (tensor, number or list of them expected, got string)")
  T.raises(function() s:run(function() return distribute.get_replica_context():all_reduce("sum", {tensor.ones(1), true}) end) end,
    "value 2 is a boolean")
  T.raises(function() s:run(function() return distribute.get_replica_context():all_gather(tensor.ones(2), 3) end) end,
    "bad argument #2 to 'all_gather' (axis 3 out of range for a value with 1 dimension)")
  T.raises(function() distribute.compute_average_loss("x") end, "tensor of per-example losses expected")
  T.raises(function() s:write_trace("/nonexistent-dir/t.json") end, "write_trace: cannot write the trace")
  T.ok(tostring(s:timeline()):match("nothing recorded yet"))
  -- the strategy still works after all of that
  T.eq(s:reduce("sum", s:run(function() return distribute.get_replica_context():all_reduce("sum", 1) end)), 4)
end)

T.done()
