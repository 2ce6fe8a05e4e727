-- test_models.lua - models beyond Sequential (the Functional API, subclassed
-- models) and models as files (to_json / model_from_json, model:save /
-- nn.load_model), each checked by numbers; save and load across processes.
local T = dofile("tests/lua/testlib.lua")
local exe = arg and arg[-1] or "./ldist"
local dir = os.tmpname()
os.remove(dir)
ldist.io._mkdir_p(dir)
local function path(n) return dir .. "/" .. n end

local function maxdiff(a, b) return (a - b):abs():max():item() end
local function labels(n, k)
  local t = {}
  for i = 1, n do t[i] = (i * 7) % k end
  return tensor.new(t, { dtype = "int64" })
end

T.test("Functional: a graph of layers computes what the layers compute", function()
  local x = nn.Input { shape = { 4 } }
  local d1, d2 = nn.Dense(8, "relu"), nn.Dense(2)
  local m = nn.Model { inputs = x, outputs = d2(d1(x)), name = "f" }
  T.eq(tostring(m), "<Functional model 'f' with 2 layers>")
  T.ok(m.built)
  T.eq(#m.trainable_variables, 4)
  local v = tensor.normal(5, 4)
  T.eq(maxdiff(m(v), d2(d1(v))), 0)
  T.eq(table.concat(m.layers[1].output_shape, ","), "8")
end)

T.test("Functional: several inputs and outputs, and a shared layer", function()
  local a, b = nn.Input { shape = { 3 }, name = "a" }, nn.Input { shape = { 3 }, name = "b" }
  local shared = nn.Dense(5, "tanh")
  local ha, hb = shared(a), shared(b)          -- one layer, two calls: its weights are used twice
  local head = nn.Dense(1)
  local m = nn.Model { inputs = { a, b }, outputs = { head(ha), head(hb) } }
  T.eq(#m.layers, 2)
  T.eq(#m.trainable_variables, 4)
  local va, vb = tensor.normal(2, 3), tensor.normal(2, 3)
  local out = m { va, vb }
  T.eq(#out, 2)
  T.eq(maxdiff(out[1], head(shared(va))), 0)
  T.eq(maxdiff(out[2], head(shared(vb))), 0)
  T.raises(function() return m(va) end, "takes a list of 2 inputs")
  T.raises(function() return m { va } end, "takes 2 inputs, got 1")
  -- gradients reach the shared layer from both calls
  local tape = autograd.GradientTape()
  local loss = tape:record(function() local o = m { va, vb }; return (o[1] + o[2]):sum() end)
  local g = tape:gradient(loss, m.trainable_variables)
  T.ok(g[1]:abs():sum():item() > 0)
end)

T.test("Functional: errors name the problem", function()
  local x = nn.Input { shape = { 4 } }
  local stray = nn.Input { shape = { 4 } }
  local y = nn.Dense(2)(stray)
  T.raises(function() return nn.Model { inputs = x, outputs = y } end, "which is not in inputs=")
  T.raises(function() return nn.Model { inputs = x } end, "{inputs=, outputs=, name=} expected")
  T.raises(function() return nn.Input { shape = { 0 } } end, "shape[1] is 0")
  T.raises(function() return nn.Input { shape = { 3 }, dtyp = "int32" } end, "unknown option 'dtyp'")
  local d = nn.Dense(3)
  d(nn.Input { shape = { 4 } })
  T.raises(function() return d(nn.Input { shape = { 5 } }) end, "was built for inputs [4], called on [5]")
end)

T.test("Functional: fit trains it as a Sequential model of the same layers", function()
  tensor.seed(3)
  local x = nn.Input { shape = { 6 } }
  local l1, l2 = nn.Dense(8, "relu"), nn.Dense(3)
  local f = nn.Model { inputs = x, outputs = l2(l1(x)) }
  local s = nn.Sequential { nn.Dense(8, "relu"), nn.Dense(3) }
  s:build { 6 }
  s:set_weights(f:get_weights())
  local xs, ys = tensor.normal(48, 6), labels(48, 3)
  for _, m in ipairs({ f, s }) do
    m:compile { optimizer = optim.Adam { learning_rate = 0.01 }, loss = losses.SparseCategoricalCrossentropy { from_logits = true } }
    m:fit(xs, ys, { epochs = 2, batch_size = 16, verbose = 0, shuffle = false })
  end
  local wf, ws = f:get_weights(), s:get_weights()
  for i = 1, #wf do T.eq(maxdiff(wf[i], ws[i]), 0, "weight " .. i) end
end)

-- a subclass used below and in the child process
local NET = [[
local Net = nn.Model:extend("Net")
function Net:init(units)
  self.hidden = nn.Dense(units, "relu")
  self.drop = nn.Dropout(0.25)
  self.out = nn.Dense(3)
end
function Net:call(x, training) return self.out(self.drop(self.hidden(x), { training = training })) end
return Net
]]
local Net = load(NET)()

T.test("subclassed: attributes are tracked, call runs, the class's methods and nn.Model's are there", function()
  local m = Net(16)
  T.eq(tostring(m), "<Net model 'net' with 3 layers>")
  T.ok(not m.built)
  local y = m(tensor.ones(2, 5))
  T.eq(table.concat(y.shape, "x"), "2x3")
  T.ok(m.built)
  T.eq(#m.weights, 4)
  T.eq(m.weights[1].name, m.hidden.kernel.name)
  T.eq(type(m.fit), "function")
  local Deeper = Net:extend("Deeper")
  function Deeper:call(x, training) return Net.call(self, x, training) * 2 end
  local d = Deeper(4)
  d:build { 5 }
  local other = Net(4)
  other:build { 5 }
  d:set_weights(other:get_weights())   -- same shapes
  T.eq(maxdiff(d(tensor.ones(1, 5)), Net.call(d, tensor.ones(1, 5), false) * 2), 0)
end)

local function train(m, xs, ys, epochs)
  return m:fit(xs, ys, { epochs = epochs, batch_size = 16, verbose = 0, shuffle = false })
end

T.test("to_json / model_from_json make the same architecture, for every kind of model", function()
  local x = nn.Input { shape = { 4 } }
  local models = {
    nn.Sequential { nn.Dense(6, "relu"), nn.Dropout(0.1), nn.Dense(2) },
    nn.Model { inputs = x, outputs = nn.Dense(2)(nn.Dense(6, "gelu")(x)) },
    Net(7),
  }
  models[1]:build { 4 }
  models[3]:build { 4 }
  for _, m in ipairs(models) do
    local m2 = nn.model_from_json(m:to_json())
    T.eq(m2:to_json(), m:to_json())
    m2:set_weights(m:get_weights())
    local v = tensor.normal(3, 4)
    T.eq(maxdiff(m2(v), m(v)), 0, m.name)
  end
  T.raises(function() return nn.model_from_json("{") end, "not JSON")
  T.raises(function() return nn.model_from_json('{"class_name":"Nope","config":{}}') end,
    "model class 'Nope' is not defined in this session")
end)

-- save, then continue in this process; load in a new process and continue
-- there: the weights after the same epochs must be the same bits.
local CHILD = [[
local Net = load(%q)()
local xs = ldist.io.load_safetensors(%q).x
local ys = ldist.io.load_safetensors(%q).y
local m = nn.load_model(%q)
m:fit(xs, ys, { epochs = 2, batch_size = 16, verbose = 0, shuffle = false })
local t = {}
for i, w in ipairs(m:get_weights()) do t[("w%%02d"):format(i)] = w end
ldist.io.save_safetensors(%q, t)
print("child done")
]]

T.test("model:save then nn.load_model in a new process, then fit, equals never stopping", function()
  tensor.seed(11)
  local xs, ys = tensor.normal(64, 5), labels(64, 3)
  ldist.io.save_safetensors(path("data.safetensors"), { x = xs, y = ys })
  local x = nn.Input { shape = { 5 } }
  local h = nn.Dropout(0.2)(nn.Dense(12, "relu")(x))
  local kinds = {
    sequential = nn.Sequential { nn.Dense(12, "relu"), nn.Dropout(0.2), nn.Dense(3) },
    functional = nn.Model { inputs = x, outputs = nn.Dense(3)(h) },
    subclassed = Net(12),
  }
  for name, m in pairs(kinds) do
    m:compile { optimizer = optim.Adam { learning_rate = 0.01 }, loss = losses.SparseCategoricalCrossentropy { from_logits = true },
      metrics = { "accuracy" } }
    train(m, xs, ys, 1)
    local file = path(name .. ".safetensors")
    m:save(file)
    train(m, xs, ys, 2)                          -- the uninterrupted run
    local out = path(name .. "-child.safetensors")
    local script = path(name .. "-child.lua")
    local f = assert(io.open(script, "w"))
    f:write(CHILD:format(NET, path("data.safetensors"), path("data.safetensors"), file, out))
    f:close()
    local p = io.popen(("'%s' '%s' 2>&1"):format(exe, script))
    local said = p:read("a")
    p:close()
    T.ok(said:find("child done"), name .. ": " .. said)
    local got = ldist.io.load_safetensors(out)
    local want = m:get_weights()
    for i = 1, #want do T.eq(maxdiff(got[("w%02d"):format(i)], want[i]), 0, name .. " weight " .. i) end
  end
end)

T.test("nn.load_model: a truncated file, another format, other shapes give errors that name the problem", function()
  local m = nn.Sequential { nn.Dense(3), nn.Dense(2) }
  m:build { 4 }
  m:compile { optimizer = "adam", loss = "mean_squared_error" }
  local file = path("m.safetensors")
  m:save(file)
  local f = assert(io.open(file, "rb")); local bytes = f:read("a"); f:close()
  local cut = path("cut.safetensors")
  f = assert(io.open(cut, "wb")); f:write(bytes:sub(1, #bytes - 10)); f:close()
  T.raises(function() nn.load_model(cut) end, "cut.safetensors")
  T.raises(function() nn.load_model(path("missing.safetensors")) end, "missing.safetensors")
  ldist.io.save_safetensors(path("other.safetensors"), { a = tensor.ones(2) }, { format = "something" })
  T.raises(function() nn.load_model(path("other.safetensors")) end, "is not an ldist model file")
  m:save_weights(path("weights.safetensors"))
  T.raises(function() nn.load_model(path("weights.safetensors")) end, "is not an ldist model file")
  -- the file's weights disagree with its architecture
  local t, meta = ldist.io.load_safetensors(file)
  t["weights/00001"] = tensor.ones(5, 3)
  ldist.io.save_safetensors(path("shapes.safetensors"), t, meta)
  T.raises(function() nn.load_model(path("shapes.safetensors")) end, "has shape [5, 3] in the file but [4, 3] in the model")
  T.raises(function() nn.Sequential { nn.Dense(2) }:save(path("x.safetensors")) end, "has no weights yet")
end)

T.test("a model whose variables were made outside a strategy's scope cannot be compiled in it (TF's rule)", function()
  ldist.config.cpu_devices(2)
  local s = distribute.MirroredStrategy { devices = { "cpu:0", "cpu:1" } }
  local x = nn.Input { shape = { 4 } }
  local m = nn.Model { inputs = x, outputs = nn.Dense(2)(x) }
  T.raises(function()
    local _ <close> = s:scope()
    m:compile { optimizer = "sgd", loss = "mean_squared_error" }
  end, "the model's variables were made outside the scope of <MirroredStrategy")
  -- made in the scope: it compiles and trains there
  local m2
  do
    local _ <close> = s:scope()
    local x2 = nn.Input { shape = { 4 } }
    m2 = nn.Model { inputs = x2, outputs = nn.Dense(2)(x2) }
    m2:compile { optimizer = "sgd", loss = "mean_squared_error" }
  end
  T.eq(m2.distribute_strategy, s)
  m2:fit(tensor.ones(8, 4), tensor.ones(8, 2), { epochs = 1, verbose = 0 })
end)

os.execute("rm -rf '" .. dir .. "'")
-- The conformance runner, run as one process per strategy (CONFORMANCE_ONE_PROCESS),
-- died with SIGSEGV: a finalizer reached a model whose own finalizer had run
-- (Lua resurrects what finalized objects refer to) and read a NULL model.
T.test("a model reached from another object's finalizer after its own: an error, not a crash", function()
  local result
  local holder = setmetatable({}, { __gc = function(h)
    result = table.pack(pcall(function() return h.m.built end))
    local _, e2 = pcall(function() return h.l.units end)
    result.layer_err = e2
  end })
  holder.m = nn.Sequential { nn.Dense(2) }   -- marked for finalization after holder: finalized first
  holder.l = nn.Dense(3)
  holder = nil
  collectgarbage(); collectgarbage()
  T.ok(result, "the finalizer ran")
  T.eq(result[1], false, "reading the collected model raises")
  T.ok(tostring(result[2]):find("garbage%-collected"), tostring(result[2]))
  T.ok(tostring(result.layer_err):find("garbage%-collected"), tostring(result.layer_err))
end)

T.test("get_layer: by name or by index from 0, as Keras's; errors name the layers there are", function()
  local m = nn.Sequential { nn.Input { shape = { 3 } }, nn.Dense(2), nn.Dense(1, { name = "head" }) }
  T.eq(m:get_layer("head"), m.layers[2], "by name")
  T.eq(m:get_layer { name = "head" }, m.layers[2], "by name, Keras's keyword")
  T.eq(m:get_layer { index = 0 }, m.layers[1], "by index from 0")
  T.raises(function() m:get_layer("nope") end, "no layer named 'nope'; the model's layers are: ")
  T.raises(function() m:get_layer { index = 2 } end, "index 2 is out of range: the model has 2 layers (0 to 1)")
  T.raises(function() m:get_layer(3) end, "a layer name")
  m:get_layer("head").trainable = false
  T.eq(#m.trainable_variables, 2, "the layer got is the model's own")
end)

T.done()
