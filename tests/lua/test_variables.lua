-- test_variables.lua - variables under MirroredStrategy: writes reach every
-- replica's copy (TF's cross-replica rule), tensor.Variable is mirrored like
-- a layer's, tensors made in a replica live on its device, dropout masks do
-- not depend on how a batch is split, and a replica may get no rows.
local T = dofile("tests/lua/testlib.lua")
ldist.config.cpu_devices(3)
local C = ldist._distribute
local DEVICES = { "cpu:0", "cpu:1", "cpu:2" }
local TMP = os.tmpname()

-- the largest |component - want| over every replica's copy of v
local function copies_differ(v, want)
  local copies = C.mirror_copies(v)
  local worst = 0
  want = tensor.is_tensor(want) and want:cpu() or want
  for r, c in ipairs(copies) do
    T.eq(c.device, DEVICES[r], "copy " .. (r - 1) .. " device")
    worst = math.max(worst, (c:cpu() - want):abs():max():item())
  end
  return worst, #copies
end

local function check_all(v, want, what)
  local d, n = copies_differ(v, want)
  T.eq(n, 3, what .. ": copies")
  T.ok(d == 0, ("%s: a copy differs from the value written by %g"):format(what, d))
end

-- a built model whose variables are mirrored on the three devices
local function mirrored_model()
  local s = distribute.MirroredStrategy{ devices = DEVICES }
  local m
  do
    local _ <close> = s:scope()
    m = nn.Sequential{ nn.Dense(4, "relu"), nn.Dense(2) }
    m:build({ 3 })
  end
  return s, m
end

---------------------------------------------------------------- 1. writes
T.test("assign, assign_add, assign_sub outside the scope write every copy", function()
  local _, m = mirrored_model()
  local k = m.trainable_variables[1]   -- 3x4
  T.eq(select(2, copies_differ(k, 0)), 3)
  local val = tensor.arange(12):reshape(3, 4):float()
  k:assign(val)
  check_all(k, val, "assign")
  k:assign_add(tensor.ones(3, 4))
  check_all(k, val + 1, "assign_add")
  k:assign_sub(0.5)
  check_all(k, val + 0.5, "assign_sub of a number")
  local b = m.trainable_variables[2]
  b:assign({ 1, 2, 3, 4 })
  check_all(b, tensor.new{ 1, 2, 3, 4 }, "assign of a table")
end)

T.test("assign inside the scope writes every copy; t[i] = x too", function()
  local s, m = mirrored_model()
  local k = m.trainable_variables[1]
  do
    local _ <close> = s:scope()
    k:assign(tensor.full(3, 4, 2))
    check_all(k, 2, "assign in scope")
    k:assign_add(tensor.full(3, 4, 1))
    check_all(k, 3, "assign_add in scope")
  end
  k[1] = tensor.new{ 9, 9, 9, 9 }
  local want = tensor.full(3, 4, 3)
  want[1] = { 9, 9, 9, 9 }
  check_all(k, want, "t[1] = x")
  k[-1] = 5
  want[2] = 5
  check_all(k, want, "t[-1] = number")
end)

T.test("in a replica context a write goes to that replica's copy only", function()
  local _, m = mirrored_model()
  local b = m.trainable_variables[2]
  b:assign(tensor.zeros(4))
  C.set_replica(1, 3, 6)
  local ok, err = pcall(function()
    b:assign_add(tensor.ones(4))
    b:assign_add(1)        -- adds to replica 1's copy, which holds 1 now
    b[0] = 2               -- rows too
  end)
  C.set_replica(nil)
  T.ok(ok, err)
  local copies = C.mirror_copies(b)
  T.eq(copies[1]:abs():max():item(), 0.0)
  T.eq((copies[2]:cpu() - 2):abs():max():item(), 0.0)
  T.eq(copies[3]:abs():max():item(), 0.0)
end)

T.test("a wrong shape is named and nothing is written", function()
  local _, m = mirrored_model()
  local k = m.trainable_variables[1]
  k:assign(1)
  T.raises(function() k:assign(tensor.zeros(4, 3)) end, "bad argument #1 to 'assign' (shape 4x3 does not match the variable's 3x4)")
  T.raises(function() k:assign_add(tensor.zeros(2)) end, "bad argument #1 to 'assign_add' (shape 2")
  T.raises(function() k[7] = 1 end, "bad argument #2")
  check_all(k, 1, "after the errors")
end)

T.test("load_weights, outside and inside the scope, writes every copy", function()
  local src = nn.Sequential{ nn.Dense(4, "relu"), nn.Dense(2) }
  src:build({ 3 })
  src.trainable_variables[1]:assign(tensor.arange(12):reshape(3, 4):float() * 0.25)
  src.trainable_variables[3]:assign(tensor.arange(8):reshape(4, 2):float() - 3)
  src:save_weights(TMP)
  local s, m = mirrored_model()
  m:load_weights(TMP)
  for i, v in ipairs(m.trainable_variables) do check_all(v, src.trainable_variables[i], "load_weights, variable " .. i) end
  for _, v in ipairs(m.trainable_variables) do v:assign(0) end
  do
    local _ <close> = s:scope()
    m:load_weights(TMP)
  end
  for i, v in ipairs(m.trainable_variables) do check_all(v, src.trainable_variables[i], "load_weights in scope, variable " .. i) end
end)

T.test("optimizer state restore sets the slots of every replica's copy", function()
  local s, m = mirrored_model()
  local opt
  do
    local _ <close> = s:scope()
    opt = optim.Adam{ learning_rate = 0.01 }
  end
  local vars = m.trainable_variables
  local slots = {}
  for i, v in ipairs(vars) do
    slots[i] = { tensor.full(v.shape, 0.25 * i), tensor.full(v.shape, 0.5 * i) }
  end
  ldist.optim._set_state(opt, vars, { iterations = 7, slots = slots })
  T.eq(opt.iterations, 7)
  for i, v in ipairs(vars) do
    for r, c in ipairs(C.mirror_copies(v)) do
      local st = ldist.optim._state(opt, { c })
      local s1, s2 = st.slots[1][1], st.slots[1][2]
      T.ok(s1 and s2, ("variable %d, replica %d: no slots"):format(i, r - 1))
      T.eq(s1.device, DEVICES[r])
      T.eq((s1:cpu() - 0.25 * i):abs():max():item(), 0.0)
      T.eq((s2:cpu() - 0.5 * i):abs():max():item(), 0.0)
    end
  end
  -- a step from the restored state keeps the copies equal
  local x = tensor.normal(6, 3)
  local y = tensor.new({ 0, 1, 0, 1, 1, 0 }, { dtype = "int64" })
  m:compile{ optimizer = opt, loss = losses.SparseCategoricalCrossentropy{ from_logits = true } }
  m:fit(data.Dataset.from_tensor_slices(x, y):batch(6), { epochs = 1, verbose = 0 })
  for i, v in ipairs(m.trainable_variables) do
    local d = copies_differ(v, C.mirror_copies(v)[1])
    T.ok(d == 0, ("variable %d: copies differ by %g after a step"):format(i, d))
  end
end)

---------------------------------------------------------------- 2. tensor.Variable
T.test("tensor.Variable in a Mirrored scope is mirrored like a layer's variable", function()
  local s = distribute.MirroredStrategy{ devices = DEVICES }
  local v, w
  do
    local _ <close> = s:scope()
    v = tensor.Variable({ 1, 2, 3 }, { name = "v" })
    w = tensor.Variable(tensor.ones(2), { trainable = false })
  end
  check_all(v, tensor.new{ 1, 2, 3 }, "Variable in scope")
  for _, c in ipairs(C.mirror_copies(v)) do T.eq(c.name, "v"); T.eq(c.trainable, true) end
  for _, c in ipairs(C.mirror_copies(w)) do T.eq(c.trainable, false) end
  v:assign({ 4, 5, 6 })
  check_all(v, tensor.new{ 4, 5, 6 }, "assign to a mirrored tensor.Variable")
  local plain = tensor.Variable({ 1, 2 })
  T.eq(#C.mirror_copies(plain), 1, "outside a scope: one copy")
end)

---------------------------------------------------------------- 4. the replica's device
T.test("set_replica with a device: constructors place tensors there; replica() says so", function()
  C.set_replica(1, 2, 8, "cpu:1", 4)
  local ok, err = pcall(function()
    local id, n, gb, dev, first = C.replica()
    T.eq(id, 1); T.eq(n, 2); T.eq(gb, 8.0); T.eq(dev, "cpu:1"); T.eq(first, 4)
    T.eq(tensor.zeros(3).device, "cpu:1")
    T.eq(tensor.ones(2, 2).device, "cpu:1")
    T.eq(tensor.full(2, 7).device, "cpu:1")
    T.eq(tensor.arange(4).device, "cpu:1")
    T.eq(tensor.uniform(3).device, "cpu:1")
    T.eq(tensor.normal(3).device, "cpu:1")
    T.eq(tensor.new{ 1, 2 }.device, "cpu:1")
    T.eq(tensor.new(3).device, "cpu:1")
    T.eq(tensor.Variable{ 1, 2 }.device, "cpu:1")
    T.eq(tensor.zeros(3, { device = "cpu:0" }).device, "cpu:0", "an explicit device wins")
    T.eq(tensor.new({ 1, 2 }, { device = "cpu:2" }).device, "cpu:2")
    local t = tensor.new{ 1, 2, 3 }
    T.eq((t + 1).device, "cpu:1")
    T.eq(t:totable()[3], 3.0)
    T.eq(tensor.zeros(3, { device = "cpu:0" }):index_select({ 0, 2 }).device, "cpu:0")
  end)
  C.set_replica(nil)
  T.ok(ok, err)
  T.eq(tensor.zeros(3).device, "cpu:0")
  T.eq(C.replica(), nil)
  C.set_replica(0, 2, 8)
  local _, _, _, dev, first = C.replica()
  C.set_replica(nil)
  T.eq(dev, nil); T.eq(first, 0)
  T.raises(function() C.set_replica(2, 2, 8) end, "replica 2 of 2")
  T.raises(function() C.set_replica(0, 2, 8, "cpu:9") end, "cpu:9")
end)

---------------------------------------------------------------- 5. dropout
T.test("dropout: a batch split over replicas gets one device's mask", function()
  local drop = nn.Dropout(0.5)
  tensor.seed(1)
  local x = tensor.uniform(6, 4, { min = 1, max = 2 })
  tensor.seed(5)
  local whole = drop(x, { training = true })
  local next_one = tensor.uniform(1):item()
  tensor.seed(5)
  C.step_begin(2)
  local y0, y1
  local ok, err = pcall(function()
    C.set_replica(1, 2, 6, "cpu:1", 3)
    y1 = drop(x:slice(0, 3, 6):to("cpu:1"), { training = true })
    C.set_replica(0, 2, 6, "cpu:0", 0)
    y0 = drop(x:slice(0, 0, 3), { training = true })
  end)
  C.set_replica(nil)
  C.step_end()
  T.ok(ok, err)
  T.eq(y1.device, "cpu:1")
  T.eq((whole:slice(0, 0, 3) - y0):abs():max():item(), 0.0)
  T.eq((whole:slice(0, 3, 6) - y1:cpu()):abs():max():item(), 0.0)
  T.eq(tensor.uniform(1):item(), next_one, "the generator continues as after one device")
  local kept = whole:gt(0):sum():item()
  T.ok(kept > 0 and kept < 24)
  T.near((whole:max():item()), 2 * x:max():item(), 0.5)
end)

T.test("dropout: MirroredStrategy trains to one device's weights", function()
  local function train(devices)
    local s = devices and distribute.MirroredStrategy{ devices = devices } or distribute.get_strategy()
    tensor.seed(21)
    local m
    do
      local _ <close> = s:scope()
      m = nn.Sequential{ nn.Dense(16, "relu"), nn.Dropout(0.4), nn.Dense(3) }
      m:compile{ optimizer = optim.SGD{ learning_rate = 0.1 }, loss = losses.SparseCategoricalCrossentropy{ from_logits = true } }
    end
    tensor.seed(4)
    local x = tensor.normal(60, 5)
    local y = x:slice(1, 0, 3):argmax(1):astype("int64")
    tensor.seed(9)
    m:fit(data.Dataset.from_tensor_slices(x, y):batch(20), { epochs = 3, verbose = 0 })
    local w = {}
    for i, v in ipairs(m.trainable_variables) do w[i] = v:cpu() end
    return w
  end
  local w1, w3 = train(nil), train(DEVICES)
  local worst = 0
  for i = 1, #w1 do worst = math.max(worst, (w1[i] - w3[i]):abs():max():item()) end
  T.ok(worst < 1e-4, ("3 replicas differ from one device by %g"):format(worst))
end)

T.test("get_rng_state / set_rng_state carry the dropout keys to another generator", function()
  tensor.seed(13)
  local st = tensor.get_rng_state()
  T.eq(#st, 32)
  local x = tensor.ones(4, 5)
  local a = nn.Dropout(0.5)(x, { training = true })
  tensor.seed(99)
  tensor.set_rng_state(st)
  local b = nn.Dropout(0.5)(x, { training = true })
  T.eq((a - b):abs():max():item(), 0.0)
  T.raises(function() tensor.set_rng_state("short") end, "bad argument #1 to 'set_rng_state'")
  T.raises(function() tensor.set_rng_state(string.rep("\0", 32)) end, "all-zero")
end)

---------------------------------------------------------------- 6. empty shards
local function conv_model()
  return nn.Sequential{ nn.Reshape{ 8, 8, 1 }, nn.Conv2D(3, 3, { activation = "relu" }), nn.MaxPool2D(2),
    nn.Flatten(), nn.Dropout(0.2), nn.Dense(6, "relu"), nn.Dense(3) }
end

T.test("Flatten and the other layers take a batch of 0 rows", function()
  local y = nn.Flatten()(tensor.zeros(0, 28, 28))
  T.eq(table.concat(y.shape, "x"), "0x784")
  local m = conv_model()
  m:build({ 64 })
  local out = m(tensor.zeros(0, 64), { training = true })
  T.eq(table.concat(out.shape, "x"), "0x3")
  T.eq(table.concat(nn.Conv2D(2, 3, { padding = "same" })(tensor.zeros(0, 5, 5, 1)).shape, "x"), "0x5x5x2")
  T.eq(table.concat(tensor.zeros(0, 4):softmax().shape, "x"), "0x4")
  for _, l in ipairs({ losses.SparseCategoricalCrossentropy{}, losses.CategoricalCrossentropy{},
                       losses.MeanSquaredError(), losses.BinaryCrossentropy{} }) do
    local yt = l.sparse and tensor.zeros(0, { dtype = "int64" }) or tensor.zeros(0, 3)
    T.eq(l(yt, tensor.zeros(0, 3)):item(), 0.0, l.name .. " of no examples")
  end
end)

T.test("model:_grads on a batch of 0 rows gives zero gradients", function()
  local m = conv_model()
  m:build({ 64 })
  local loss = losses.SparseCategoricalCrossentropy{ from_logits = true }
  for _, replica in ipairs({ false, true }) do
    for _, defer in ipairs({ false, true }) do
      if replica then C.set_replica(2, 3, 2) end
      local ok, lv, g = pcall(m._grads, m, tensor.zeros(0, 64), tensor.zeros(0, { dtype = "int64" }), loss, defer)
      C.set_replica(nil)
      T.ok(ok, lv)
      T.eq(lv:item(), 0.0)
      T.eq(#g, #m.trainable_variables)
      for i, gi in ipairs(g) do
        T.eq(table.concat(gi.shape, "x"), table.concat(m.trainable_variables[i].shape, "x"))
        T.eq(gi:abs():max():item(), 0.0)
      end
    end
  end
end)

T.test("Mirrored fit with fewer rows in a batch than replicas", function()
  local s = distribute.MirroredStrategy{ devices = DEVICES }
  local m
  do
    local _ <close> = s:scope()
    m = conv_model()
    m:compile{ optimizer = optim.SGD{ learning_rate = 0.05 }, loss = losses.SparseCategoricalCrossentropy{ from_logits = true } }
  end
  tensor.seed(2)
  local x = tensor.normal(5, 64)
  local y = tensor.new({ 0, 1, 2, 1, 0 }, { dtype = "int64" })
  m:fit(data.Dataset.from_tensor_slices(x, y):batch(2), { epochs = 1, verbose = 0 })   -- batches of 2, 2, 1 rows
  for i, v in ipairs(m.trainable_variables) do
    local d = copies_differ(v, C.mirror_copies(v)[1])
    T.ok(d == 0, ("variable %d: copies differ by %g"):format(i, d))
  end
end)

os.remove(TMP)
T.done()
