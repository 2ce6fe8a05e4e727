-- test_custom_layers.lua - Keras's custom layers (nn.Layer:extend: init,
-- build(input_shape), call, add_weight), nn.Lambda, and models used as layers (a model
-- inside a Sequential, a Functional graph or another model), as Keras 3:
-- their weights are the outer model's in Keras's order, they train (the same
-- numbers under MirroredStrategy), go to JSON and files and come back, and
-- the errors name the problem.
local T = dofile("tests/lua/testlib.lua")
ldist.config.cpu_devices(2)

-- Keras's guide's Linear layer: weights made in build, from the input's last axis
local Linear = nn.Layer:extend("Linear")
function Linear:init(units) self.units = units or 32 end
function Linear:build(input_shape)
  self.w = self:add_weight { shape = { input_shape[#input_shape], self.units }, initializer = "random_normal", name = "w" }
  self.b = self:add_weight { shape = { self.units }, initializer = "zeros", name = "b" }
end
function Linear:call(x) return x:matmul(self.w) + self.b end

local function names(vs)
  local r = {}
  for i, v in ipairs(vs) do r[i] = v.name end
  return table.concat(r, " ")
end
local function maxdiff(a, b) return (a - b):abs():max():item() end

T.test("a custom layer computes what its call says, with the weights its build made", function()
  tensor.seed(1)
  local l = Linear(4)
  local x = tensor.normal(5, 3)
  T.eq(#l.weights, 0, "no weights before the first call")
  local y = l(x)
  T.eq(table.concat(y.shape, "x"), "5x4", "output")
  T.eq(table.concat(l.w.shape, "x"), "3x4", "build saw the input's last axis")
  local d = nn.Dense(4)
  d(x)
  d:set_weights { l.w, l.b }
  T.eq(maxdiff(y, d(x)), 0, "the same as a Dense of those weights")
  l(x)
  T.eq(#l.weights, 2, "build runs once")
end)

T.test("custom layers and models as items of a Sequential and nodes of a Functional graph", function()
  tensor.seed(2)
  local inner = nn.Sequential { nn.Dense(5, "tanh"), nn.Dense(4) }
  local lin = Linear(6)
  local s = nn.Sequential { nn.Input { shape = { 3 } }, lin, nn.Activation("relu"), inner, nn.Dense(2) }
  local x = tensor.normal(7, 3)
  local want = s.layers[#s.layers](inner(lin(x):relu()))
  T.eq(maxdiff(s(x), want), 0, "the Sequential runs its items in order")
  local last = s.layers[#s.layers].name
  T.eq(names(s.weights), ("%s/w %s/b %s %s/kernel %s/bias"):format(lin.name, lin.name, names(inner.weights), last, last),
    "Keras's order: each item's weights in turn")
  -- a lazy Sequential (no Input): the custom layer's weights join when it is first called
  local d3, l3 = nn.Dense(3), Linear(2)
  local lazy = nn.Sequential { d3, l3 }
  lazy(x)
  T.eq(names(lazy.weights), ("%s/kernel %s/bias %s/w %s/b"):format(d3.name, d3.name, l3.name, l3.name),
    "weights made at the first call")
  -- a Functional graph calling the Sequential model and a custom layer
  local i = nn.Input { shape = { 3 } }
  local h = s(i)
  local f = nn.Model { inputs = i, outputs = Linear(3)(nn.Concatenate() { h, i }) }
  T.eq(table.concat(f(x).shape, "x"), "7x3", "the graph's output")
  T.eq(#f.trainable_variables, #s.trainable_variables + 2, "the nested model's weights are the graph's")
  -- a custom layer in a subclassed model's field
  local Net = nn.Model:extend("NetWithLinear")
  function Net:init() self.a = Linear(4); self.out = nn.Dense(1) end
  function Net:call(v) return self.out(self.a(v):tanh()) end
  local n = Net()
  n(x)
  T.eq(names(n.weights), ("%s/w %s/b %s/kernel %s/bias"):format(n.a.name, n.a.name, n.out.name, n.out.name),
    "a field's custom layer")
end)

T.test("they train, and under MirroredStrategy give the default strategy's weights", function()
  tensor.seed(3)
  local x = tensor.normal(96, 4)
  local y = (x:slice(1, 0, 2):sum(1, true) - x:slice(1, 2, 2):sum(1, true)):tanh()
  local function train(strategy)
    local m
    tensor.seed(4)
    strategy:scope(function()
      m = nn.Sequential { nn.Input { shape = { 4 } }, Linear(8), nn.Activation("tanh"),
        nn.Sequential { nn.Dense(6, "tanh"), Linear(1) } }
      m:compile { optimizer = optim.SGD { learning_rate = 0.1, momentum = 0.9 }, loss = "mse" }
    end)
    local h = m:fit(x, y, { epochs = 4, batch_size = 24, verbose = 0, shuffle = false })
    return m, h
  end
  local a, ha = train(distribute.get_strategy())
  T.ok(ha.history.loss[4] < ha.history.loss[1], "the loss falls")
  local b = train(distribute.MirroredStrategy { devices = { "cpu:0", "cpu:1" } })
  local wa, wb = a:get_weights(), b:get_weights()
  T.eq(#wa, 6, "every weight")
  for k = 1, #wa do T.ok(maxdiff(wa[k], wb[k]) < 1e-5, ("weight %d (%s)"):format(k, a.weights[k].name)) end
end)

T.test("JSON, model files and get/set_weights keep custom layers and nested models", function()
  tensor.seed(5)
  local m = nn.Sequential { nn.Input { shape = { 3 } }, Linear(4), nn.Sequential { nn.Dense(2) } }
  local x = tensor.normal(4, 3)
  local j = m:to_json()
  T.ok(j:find('"class_name":"Linear"', 1, true) and j:find('"class_name":"Sequential"', 20, true), "the items' classes")
  local m2 = nn.model_from_json(j)
  m2:set_weights(m:get_weights())
  T.eq(maxdiff(m2(x), m(x)), 0, "model_from_json, set_weights")
  local dir = T.tmpdir()
  m:save(dir .. "/nested.safetensors")
  T.eq(maxdiff(nn.load_model(dir .. "/nested.safetensors")(x), m(x)), 0, "save and load_model")
  local i = nn.Input { shape = { 3 } }
  local f = nn.Model { inputs = i, outputs = m(i) }
  local f2 = nn.model_from_json(f:to_json())
  f2:set_weights(f:get_weights())
  T.eq(maxdiff(f2(x), f(x)), 0, "a Functional graph with a model node, from JSON")
end)

T.test("nn.Lambda: a function as a layer, saved as bytecode and loaded only when trusted", function()
  tensor.seed(6)
  local x = tensor.uniform(4, 3) * 255
  local scale = nn.Lambda(function(v) return v / 255 end)
  local shift = nn.Lambda(function(v, a) return v * a.k + a.b end, { arguments = { k = 2, b = -1 } })
  local m = nn.Sequential { nn.Input { shape = { 3 } }, scale, shift, nn.Dense(2) }
  T.eq(maxdiff(scale(x), x / 255), 0, "x / 255")
  T.eq(maxdiff(m(x), m.layers[1](x / 255 * 2 - 1)), 0, "in a Sequential, arguments passed")
  local i = nn.Input { shape = { 3 } }
  local f = nn.Model { inputs = i, outputs = nn.Lambda(function(v) return v:slice(1, 0, 2) end)(i) }
  T.eq(table.concat(f(x).shape, "x"), "4x2", "in a graph: its output shape from the function")
  local j = m:to_json()
  T.raises(function() nn.model_from_json(j) end, "load the model with {safe_mode = false}")
  local m2 = nn.model_from_json(j, { safe_mode = false })
  m2:set_weights(m:get_weights())
  T.eq(maxdiff(m2(x), m(x)), 0, "safe_mode = false makes it again")
  local dir = T.tmpdir()
  m:save(dir .. "/lambda.safetensors")
  T.raises(function() nn.load_model(dir .. "/lambda.safetensors") end, "safe_mode = false")
  T.eq(maxdiff(nn.load_model(dir .. "/lambda.safetensors", { safe_mode = false })(x), m(x)), 0, "load_model, trusted")
  local k = 3
  local closure = nn.Sequential { nn.Input { shape = { 3 } }, nn.Lambda(function(v) return v * k end) }
  T.eq(maxdiff(closure(x), x * 3), 0, "a closure runs")
  T.raises(function() closure:to_json() end, "uses the local variable 'k' and cannot be saved")
  T.raises(function() nn.Lambda(42) end, "a function expected, got number")
  T.raises(function() nn.Lambda(function(v) return v end, { argumnets = {} }) end, "unknown option 'argumnets'")
end)

T.test("errors name the problem", function()
  T.raises(function() nn.Sequential { nn.Dense(2), 42 } end, "item 2 is a number, not a layer or a model")
  local s = nn.Sequential { nn.Dense(2) }
  T.raises(function() s:add(s) end, "a model cannot contain itself")
  T.raises(function() nn.Layer:extend("bad name") end, "a class name expected")
  local Bad = nn.Layer:extend("BadBuild")
  function Bad:build(shape) self.w = self:add_weight { shape = { shape[#shape], 2 }, initializer = "nope" } end
  function Bad:call(x) return x:matmul(self.w) end
  T.raises(function() Bad()(tensor.ones(2, 3)) end, "unknown initializer 'nope'")
  T.raises(function() Linear.call = 3 end, "Linear.call must be a function")
end)

T.done()
