-- test_image_layers.lua - Keras 3's image preprocessing and augmentation layers
-- (Resizing, CenterCrop, RandomCrop, RandomFlip, RandomRotation, RandomZoom,
-- RandomTranslation, RandomContrast, RandomBrightness). Their outputs equal
-- Keras 3.15's (tests/fixtures/image_layers.lua, from
-- scripts/fixtures/make_image_fixtures.py: ranges of one value, so the draws
-- are fixed and TF's geometry is what is compared) on cpu:0 and the logical
-- device cpu:1; Keras's training rule (layer(x) and model(x) augment, predict
-- does not); the flips' odds; seed=; the gradient (the exact adjoint of the
-- sampling); half precision; configs; errors that name the problem.
local T = dofile("tests/lua/testlib.lua")
ldist.config.cpu_devices(2)
local F = dofile("tests/fixtures/image_layers.lua")

local function t_of(a) return tensor.new(a.data):reshape(a.shape) end
local function flat(t) return t:cpu():reshape { t:numel() }:totable() end
local function near_all(got, want, tol, what)
  T.eq(table.concat(got.shape, "x"), table.concat(want.shape, "x"), what .. ": shape")
  local g = flat(got)
  for i, w in ipairs(want.data) do
    if not (math.abs(g[i] - w) <= tol * (1 + math.abs(w))) then
      error(("%s [%d]: %.9g, Keras %.9g"):format(what, i, g[i], w), 0)
    end
  end
end

for _, dev in ipairs { "cpu:0", "cpu:1" } do
  T.test("Keras's outputs of the image layers on " .. dev, function()
    for _, c in ipairs(F.cases) do
      local layer = c.make()
      local x = t_of(F.images[c.image]):to(dev)
      local y = layer(x, { training = c.training })
      T.eq(y.device, dev, c.name .. ": the output's device")
      T.eq(y.dtype, "float32", c.name .. ": dtype")
      near_all(y, c.y, 2e-5, c.name)
    end
  end)
end

local x = t_of(F.images.small)
local function same(a, b) return (a - b):abs():max():item() == 0 end

T.test("Keras's training rule: layer(x) and model(x) augment, predict and evaluate do not", function()
  local rot = nn.RandomRotation { 0.2, 0.2 }
  T.ok(not same(rot(x), x), "layer(x) rotates (Keras's call default is training=True)")
  T.ok(same(rot(x, { training = false }), x), "training=false passes the images")
  T.ok(not same(rot(x, { training = true }), x), "training=true rotates")
  local m = nn.Sequential { nn.Input { shape = { 5, 7, 2 } }, nn.RandomRotation { 0.2, 0.2 }, nn.Flatten() }
  local flatx = x:reshape { 2, 70 }
  T.ok(not same(m(x), flatx), "model(x) augments")
  T.ok(same(m:predict(x, { verbose = 0 }), flatx), "predict does not")
  T.ok(same(m(x, { training = false }), flatx), "model(x, {training=false}) does not")
  -- a subclassed model passes its call's training on: nil when the caller said nothing
  local Net = nn.Model:extend("AugNet")
  function Net:init() self.aug = nn.RandomRotation { 0.2, 0.2 }; self.drop = nn.Dropout(0.9) end
  function Net:call(v, training) return self.drop(self.aug(v, training), training) end
  local net = Net()
  local y = net(x)
  T.ok(not same(y, x), "a subclass's call(x, nil): the rotation augments")
  T.eq((y:eq(0)):sum():item(), 0, "and Dropout stays off, as Keras's default")
  T.ok(same(net(x, { training = false }), x), "training=false reaches both")
end)

T.test("RandomFlip: each image flipped or not, with odds 1/2; horizontal_and_vertical flips both together", function()
  tensor.seed(3)
  local n = 400
  local imgs = tensor.normal(n, 3, 4, 1)
  for _, mode in ipairs { "horizontal", "vertical", "horizontal_and_vertical" } do
    local y = nn.RandomFlip(mode)(imgs)
    local hz = tensor.reverse(imgs, { 2 })
    local vt = tensor.reverse(imgs, { 1 })
    local flipped = mode == "horizontal" and hz or mode == "vertical" and vt or tensor.reverse(hz, { 1 })
    local k = 0
    for i = 0, n - 1 do
      local yi = y[i]
      if same(yi, flipped[i]) then k = k + 1
      else T.ok(same(yi, imgs[i]), mode .. ": image " .. i .. " is neither flipped nor the same") end
    end
    T.ok(k > 160 and k < 240, ("%s: %d of %d flipped"):format(mode, k, n))
  end
end)

T.test("seed=: the layer's own stream, whatever the global generator; seed=nil follows tensor.seed", function()
  local a, b, c = nn.RandomZoom(0.3, { seed = 7 }), nn.RandomZoom(0.3, { seed = 7 }), nn.RandomZoom(0.3, { seed = 8 })
  tensor.seed(1)
  local ya1, ya2 = a(x), a(x)
  tensor.seed(99)
  local yb1, yb2 = b(x), b(x)
  T.ok(same(ya1, yb1) and same(ya2, yb2), "the same seed draws the same, call by call")
  T.ok(not same(ya1, ya2), "each call draws anew")
  T.ok(not same(ya1, c(x)), "another seed draws otherwise")
  local d = nn.RandomTranslation(0.2, 0.3)
  tensor.seed(5); local y1 = d(x)
  tensor.seed(5); local y2 = d(x)
  T.ok(same(y1, y2), "seed=nil: tensor.seed(5) twice gives the same")
  T.eq(a:get_config().seed, 7, "seed in the config")
  T.eq(d:get_config().seed, nil, "no seed: none in the config")
end)

T.test("the gradient of a transform is its exact adjoint: <T x, r> = <x, T' r>", function()
  tensor.seed(11)
  for _, layer in ipairs { nn.RandomRotation(0.3, { fill_mode = "constant" }), nn.RandomZoom(0.4, { fill_mode = "reflect" }),
                           nn.RandomTranslation(0.3, 0.3, { fill_mode = "wrap", interpolation = "nearest" }),
                           nn.Resizing(8, 3), nn.Resizing(4, 11, { interpolation = "nearest" }), nn.CenterCrop(6, 9),
                           nn.RandomFlip() } do
    local v = tensor.Variable(tensor.normal(2, 5, 7, 2))
    local seed = 40
    tensor.seed(seed)
    local y
    local tape = autograd.GradientTape()
    local r
    local loss = tape:record(function()
      y = layer(v, { training = true })
      r = tensor.normal(table.unpack(y.shape))
      return (y * r):sum()
    end)
    local g = tape:gradient(loss, v)
    local lhs, rhs = (y * r):sum():item(), (v * g):sum():item()
    T.near(lhs, rhs, 1e-4 * (1 + math.abs(lhs)), layer.name .. ": <Tx, r> against <x, T'r>")
  end
end)

T.test("half precision: a transform or resize computed in float32 and rounded once (TF's one kernel)", function()
  for _, policy in ipairs { "mixed_bfloat16", "mixed_float16" } do
    mixed_precision.set_global_policy(policy)
    local half = policy == "mixed_bfloat16" and "bfloat16" or "float16"
    local layers = { nn.RandomRotation({ 0.1, 0.1 }), nn.Resizing(3, 9), nn.RandomFlip("vertical", { seed = 1 }),
      nn.RandomContrast({ -0.2, 0.2 }, { value_range = { 0, 1 } }) }
    mixed_precision.set_global_policy("float32")
    local refs = { nn.RandomRotation({ 0.1, 0.1 }), nn.Resizing(3, 9), nn.RandomFlip("vertical", { seed = 1 }),
      nn.RandomContrast({ -0.2, 0.2 }, { value_range = { 0, 1 } }) }
    for i, l in ipairs(layers) do
      local xh = x:astype(half)
      local y = l(x)
      T.eq(y.dtype, half, l.name .. " under " .. policy)
      local want = refs[i](xh:astype("float32"))
      if i < 4 then
        T.ok(same(y:astype("float32"), want:astype(half):astype("float32")),
          l.name .. ": the float32 result of the rounded input, rounded once")
      else   -- TF's contrast is four ops in the half dtype, each rounded, as ldist's
        T.ok((y:astype("float32") - want):abs():max():item() < (half == "bfloat16" and 2e-2 or 2e-3), l.name .. ": near float32's")
      end
    end
  end
end)

T.test("integer images, configs, JSON and saved models", function()
  local u8 = (x * 255):astype("uint8")
  local y = nn.Resizing(3, 4)(u8)
  T.eq(y.dtype, "float32", "uint8 pixels resize to float32")
  T.ok(same(y, nn.Resizing(3, 4)(u8:astype("float32"))), "the same values as from float32")
  local m = nn.Sequential { nn.Input { shape = { 5, 7, 2 } }, nn.RandomFlip("horizontal", { seed = 3 }),
    nn.RandomRotation({ -0.1, 0.2 }, { fill_mode = "wrap", seed = 4 }), nn.RandomZoom(0.2, { width_factor = { -0.1, 0.3 } }),
    nn.RandomTranslation(0.1, { -0.2, 0.1 }, { interpolation = "nearest" }), nn.RandomContrast(0.2),
    nn.RandomBrightness({ -0.1, 0.2 }, { value_range = { 0, 1 } }), nn.RandomZoom(0.1), nn.RandomCrop(4, 6), nn.CenterCrop(3, 5),
    nn.Resizing(6, 6, { crop_to_aspect_ratio = true }), nn.Flatten(), nn.Dense(2) }
  local cfg = m.layers[2]:get_config()
  T.eq(cfg.factor[1], -0.1, "factor kept as given"); T.eq(cfg.factor[2], 0.2, "factor's upper")
  T.eq(cfg.fill_mode, "wrap", "fill_mode")
  T.eq(m.layers[3]:get_config().height_factor, 0.2, "a single factor stays a number")
  local m2 = nn.model_from_json(m:to_json())
  m2:set_weights(m:get_weights())
  T.eq(m2:to_json(), m:to_json(), "to_json round trip")
  T.ok(same(m2:predict(x, { verbose = 0 }), m:predict(x, { verbose = 0 })), "the same model")
  local dir = T.tmpdir()
  m:save(dir .. "/aug.safetensors")
  local m3 = nn.load_model(dir .. "/aug.safetensors")
  T.ok(same(m3:predict(x, { verbose = 0 }), m:predict(x, { verbose = 0 })), "saved and loaded")
  T.ok(m:summary_text():find(" (RandomRotation) ", 1, true), "summary names the layers")
end)

T.test("bad arguments are named, and the session goes on", function()
  T.raises(function() nn.RandomRotation(1.5) end, "factor should be a number (or a list of two numbers) in the range [-1, 1], got 1.5")
  T.raises(function() nn.RandomRotation(0.1, { fill_mode = "mirror" }) end, "unknown fill_mode 'mirror'")
  T.raises(function() nn.RandomZoom(-1) end, "height_factor should be a number")
  T.raises(function() nn.RandomZoom({ 0.1, 0.2, 0.3 }) end, "height_factor takes a number or a list of 2 numbers, got 3")
  T.raises(function() nn.RandomContrast({ 0.6, -0.6 }) end, "factor should be a number")
  T.raises(function() nn.RandomBrightness(0.1, { value_range = { 1 } }) end, "value_range should be a list of two numbers")
  T.raises(function() nn.RandomFlip("diagonal") end, "unknown mode 'diagonal'")
  T.raises(function() nn.Resizing(0, 4) end, "height and width must be positive")
  T.raises(function() nn.Resizing(4, 4, { antialias = true }) end, "antialias=true is not supported")
  T.raises(function() nn.Resizing(4, 4, { crop_to_aspect_ratio = true, pad_to_aspect_ratio = true }) end, "only one of")
  T.raises(function() nn.RandomFlip("horizontal", { data_format = "channels_first" }) end, "unknown data_format 'channels_first'")
  T.raises(function() nn.RandomRotation("a lot") end, "factor must be a number or a list of numbers, got a string")
  T.raises(function() nn.RandomRotation(0.1)(tensor.ones(5, 7, 2)) end, "needs images [batch, height, width, channels]")
  T.raises(function() nn.RandomCrop(6, 6)(tensor.ones(2, 5, 5)) end, "needs images")
  local y = nn.RandomRotation(0.1)(x)   -- the session goes on
  T.eq(table.concat(y.shape, "x"), "2x5x7x2", "then a good call works")
end)

T.done()
