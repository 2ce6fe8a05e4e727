-- test_own_weights.lua - a subclassed model's own weights, as Keras 3 tracks
-- them: model:add_weight{...} (Keras's Layer.add_weight) and tensor.Variable
-- values assigned to its fields. They are in model.weights and
-- trainable_variables, train (the non-trainable ones stay), mirror under
-- MirroredStrategy with one device's numbers, and save and load; a plain
-- tensor in a field is not a weight; bad add_weight options are named.
local T = dofile("tests/lua/testlib.lua")
ldist.config.cpu_devices(2)

local Affine = nn.Model:extend("Affine")
function Affine:init(units)
  self.d = nn.Dense(units, "tanh")
  self.scale = tensor.Variable(tensor.ones(units))
  self.shift = self:add_weight { shape = { units }, initializer = "zeros", name = "shift" }
  self.w = self:add_weight { shape = { units, 1 }, name = "w" }   -- Keras's default: glorot_uniform
  self.frozen = tensor.Variable(tensor.full({ 1 }, 3), { trainable = false })
  self.const = tensor.ones(1)                                      -- a plain tensor: not a weight
end
function Affine:call(x) return (self.d(x) * self.scale + self.shift):matmul(self.w) + self.frozen end

local function data()
  tensor.seed(7)
  local x = tensor.normal(96, 5)
  return x, x:sum(1, true):tanh() * 2 + 3
end
local function names(vs)
  local r = {}
  for i, v in ipairs(vs) do r[i] = v.name end
  return table.concat(r, " ")
end

T.test("add_weight and assigned Variables are the model's weights, and train", function()
  tensor.seed(1)
  local m = Affine(4)
  local x, y = data()
  m(x)
  -- Keras 3's order: the model's own weights, then its layers'
  T.eq(names(m.weights), "affine/scale affine/shift affine/w affine/frozen dense/kernel dense/bias", "model.weights")
  T.eq(names(m.trainable_variables), "affine/scale affine/shift affine/w dense/kernel dense/bias", "trainable ones")
  T.eq(names(m.non_trainable_variables), "affine/frozen", "the non-trainable one")
  T.eq(m:count_params(), 4 * 5 + 4 + 4 + 4 + 4 + 1, "count_params counts them")
  local w = m.w:clone()
  local s0 = m.scale:clone()
  m:compile { optimizer = optim.SGD(0.05), loss = "mse" }
  local h = m:fit(x, y, { epochs = 5, batch_size = 16, verbose = 0 })
  T.ok(h.history.loss[5] < h.history.loss[1] * 0.5, "the loss falls")
  T.ok((m.w - w):abs():max():item() > 1e-3, "add_weight's weight trained")
  T.ok((m.scale - s0):abs():max():item() > 1e-3, "the assigned Variable trained")
  T.eq(m.frozen:item(), 3, "the non-trainable one did not")
  T.ok(m:summary_text():find("affine (Weights)", 1, true), "summary lists them")
end)

T.test("under MirroredStrategy, the default strategy's weights", function()
  local x, y = data()
  local function train(strategy)
    local m
    tensor.seed(2)
    strategy:scope(function()
      m = Affine(3)
      m:compile { optimizer = optim.SGD { learning_rate = 0.05, momentum = 0.9 }, loss = "mse" }
    end)
    m:fit(x, y, { epochs = 3, batch_size = 24, verbose = 0, shuffle = false })
    return m
  end
  local a = train(distribute.get_strategy())
  local b = train(distribute.MirroredStrategy { devices = { "cpu:0", "cpu:1" } })
  local wa, wb = a:get_weights(), b:get_weights()
  T.eq(#wa, #wb, "as many weights")
  for i = 1, #wa do
    T.ok((wa[i] - wb[i]):abs():max():item() < 1e-5, ("weight %d (%s) equal"):format(i, a.weights[i].name))
  end
end)

T.test("a tensor made in init (not a weight) is read on the replica's device, as TF copies a constant", function()
  local Pos = nn.Model:extend("WithConstant")
  function Pos:init() self.d = nn.Dense(3); self.pe = tensor.arange(0, 3):astype("float32") * 0.1 end
  function Pos:call(x) return self.d(x) + self.pe end
  tensor.seed(8)
  local x = tensor.normal(48, 4)
  local y = x:slice(1, 0, 3):tanh()
  local function train(strategy)
    local m
    tensor.seed(9)
    strategy:scope(function()
      m = Pos()
      m:compile { optimizer = optim.SGD(0.1), loss = "mse" }
    end)
    m:fit(x, y, { epochs = 2, batch_size = 16, verbose = 0, shuffle = false })
    return m
  end
  local a = train(distribute.get_strategy())
  T.eq(#a.weights, 2, "the tensor is not a weight")
  for _, st in ipairs { distribute.MirroredStrategy { devices = { "cpu:0", "cpu:1" } }, distribute.OneDeviceStrategy("cpu:1") } do
    local b = train(st)
    local wa, wb = a:get_weights(), b:get_weights()
    for k = 1, #wa do T.ok((wa[k] - wb[k]):abs():max():item() < 1e-5, ("weight %d"):format(k)) end
    T.eq(b.pe.device, "cpu:0", "read outside a replica: the tensor itself")
  end
end)

T.test("save and load, get_weights and set_weights", function()
  tensor.seed(3)
  local m = Affine(2)
  local x = data()
  m(x)
  local dir = T.tmpdir()
  m:save(dir .. "/own.safetensors")
  local n = nn.load_model(dir .. "/own.safetensors")
  T.eq(#n.weights, #m.weights, "every weight came back")
  T.ok((n(x) - m(x)):abs():max():item() == 0, "the same outputs")
  local o = Affine(2)
  o(x)
  o:set_weights(m:get_weights())
  T.ok((o(x) - m(x)):abs():max():item() == 0, "set_weights reaches the own weights")
end)

T.test("add_weight's options: initializer, constraint; bad ones named", function()
  local M = nn.Model:extend("Opts")
  function M:init() self.v = self:add_weight { shape = { 2, 3 }, initializer = nn.initializers.Constant { value = -2 },
    constraint = "non_neg", trainable = true } end
  function M:call(x) return x:matmul(self.v) end
  local m = M()
  T.eq(m.v:sum():item(), -12, "the initializer's values")
  T.eq(m.weights[1].name, "opts/variable_0", "a default name, as Keras's")
  m:compile { optimizer = optim.SGD(0.1), loss = "mse" }
  m:fit(tensor.ones(4, 2), tensor.ones(4, 3), { epochs = 1, verbose = 0 })
  T.ok(m.v:min():item() >= 0, "the constraint applied after the update")
  local N = nn.Model:extend("Bad")
  T.raises(function() N():add_weight { shape = { 2 }, regularizer = "l2" } end, "regularizer= is not supported")
  T.raises(function() N():add_weight { shape = { 2 }, dtype = "float16" } end, "weights are float32")
  T.raises(function() N():add_weight { shape = { 2 }, initializer = "he_nromal" } end, "did you mean 'he_normal'")
  T.raises(function() N():add_weight { shape = { 2 }, shpe = 3 } end, "shpe")
  T.raises(function() N():add_weight { shape = "big" } end, "shape must be a list of sizes")
end)

T.done()
