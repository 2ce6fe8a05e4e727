-- test_layers_conv.lua - Conv2DTranspose, DepthwiseConv2D, SeparableConv2D and
-- SAME max pooling (Keras 3): what the Keras fixtures (test_fixtures.lua)
-- do not show: Conv2DTranspose as the transpose of Conv2D, SeparableConv2D as
-- its two steps, the padding of SAME max pooling, initializers and options,
-- configs, mixed precision, and the errors a user meets.
local T = dofile("tests/lua/testlib.lua")
ldist.config.cpu_devices(2)   -- the dilated layers on cpu:1

local function shape(t) return table.concat(t.shape, "x") end
local function sum(t) return t:astype("float32"):sum():item() end
local function roundtrip(l)
  local c = l:get_config()
  local l2 = nn.layer_from_config { class_name = l.class_name, config = c }
  T.eq(ldist.json.encode(l2:get_config()), ldist.json.encode(c), l.class_name .. " config")
  return c
end

---------------------------------------------------------------- Conv2DTranspose
T.test("Conv2DTranspose is Conv2D's transpose: <conv(x), y> = <x, conv_transpose(y)>, output_padding picks the size", function()
  tensor.seed(1)
  -- kernel, strides, padding, image size: kernels smaller than the strides, even ones, odd sizes
  for _, c in ipairs { { 3, 1, "valid", 7, 6 }, { 3, 2, "valid", 8, 7 }, { 3, 2, "same", 7, 6 }, { 2, 3, "valid", 9, 8 },
                       { 2, 3, "same", 8, 7 }, { 4, 2, "same", 9, 7 }, { 4, 3, "valid", 11, 10 } } do
    local k, s, pad, h, w = c[1], c[2], c[3], c[4], c[5]
    local what = ("kernel %d, strides %d, %s, %dx%d"):format(k, s, pad, h, w)
    local x = tensor.normal(2, h, w, 3)
    local conv = nn.Conv2D(4, k, { strides = s, padding = pad, use_bias = false })
    local y = conv(x)
    -- the output_padding that gives back x's size (Keras's rule for the size)
    local op = {}
    for i, n in ipairs { h, w } do
      local o = y.shape[i + 1]
      op[i] = n - ((o - 1) * s + (pad == "same" and k % 2 or k))
    end
    local ct = nn.Conv2DTranspose(3, k, { strides = s, padding = pad, use_bias = false, output_padding = op })
    local r = tensor.normal(table.unpack(y.shape))
    local back = ct(r)
    T.eq(shape(back), shape(x), what .. ": the transpose's size")
    ct.kernel:assign(conv.kernel)        -- (kh, kw, 3, 4): Conv2D's HWIO is the transpose's (kh, kw, filters, channels)
    local lhs, rhs = sum(conv(x) * r), sum(x * ct(r))
    T.near(lhs, rhs, 1e-4 * math.max(1, math.abs(lhs)), what .. ": <conv(x), r> = <x, conv_transpose(r)>")
  end
end)

T.test("Conv2DTranspose sizes (Keras 3's rule), a kernel smaller than its strides leaves zeros, any image size", function()
  local function size(k, s, pad, op, h)
    return shape(nn.Conv2DTranspose(1, k, { strides = s, padding = pad, output_padding = op })(tensor.ones(1, h, h, 1)))
  end
  T.eq(size(3, 1, "valid", nil, 4), "1x6x6x1")
  T.eq(size(3, 2, "valid", nil, 4), "1x9x9x1")      -- (h - 1) s + k
  T.eq(size(2, 3, "valid", nil, 4), "1x12x12x1")    -- h s: the last row of each stride no patch reaches
  T.eq(size(3, 2, "same", nil, 4), "1x8x8x1")
  T.eq(size(3, 2, "valid", 1, 4), "1x10x10x1")
  T.eq(size(3, 2, "same", 1, 4), "1x8x8x1")         -- (h - 1) s + k % 2 + output_padding
  T.eq(size(4, 3, "same", 2, 4), "1x11x11x1")
  -- kernel 2, strides 3: rows and columns 2, 5, 8, ... get nothing but the bias
  local l = nn.Conv2DTranspose(1, 2, { strides = 3, kernel_initializer = "ones", bias_initializer = "zeros" })
  local y = l(tensor.ones(1, 3, 3, 1))
  local v = y:reshape(9, 9):totable()
  for i = 1, 9 do
    for j = 1, 9 do
      T.eq(v[i][j], (i % 3 == 0 or j % 3 == 0) and 0 or 1, ("row %d column %d"):format(i, j))
    end
  end
  -- built for 3x3, called on 5x4 (the size follows the input)
  T.eq(shape(l(tensor.ones(2, 5, 4, 1))), "2x15x12x1")
end)

T.test("Conv2DTranspose weights, initializers and config as Keras's", function()
  tensor.seed(2)
  local l = nn.Conv2DTranspose(40, 3, { strides = 2, padding = "same", activation = "relu" })
  l(tensor.normal(2, 4, 4, 30))
  T.eq(#l.weights, 2)
  T.eq(l.weights[1].name, l.name .. "/kernel"); T.eq(shape(l.kernel), "3x3x40x30")   -- (kh, kw, filters, channels)
  T.eq(l.weights[2].name, l.name .. "/bias"); T.eq(shape(l.bias), "40"); T.eq(sum(l.bias:abs()), 0)
  local lim = math.sqrt(6 / (9 * 40 + 9 * 30))                                        -- glorot_uniform
  T.ok(l.kernel:abs():max():item() <= lim and l.kernel:abs():max():item() > 0.9 * lim, "glorot_uniform's limit")
  local c = roundtrip(l)
  T.eq(c.filters, 40); T.eq(c.padding, "same"); T.eq(c.activation, "relu")
  local o = roundtrip(nn.Conv2DTranspose(2, 3, { strides = 3, output_padding = { 2, 1 } }))
  T.eq(o.output_padding[1], 2); T.eq(o.output_padding[2], 1)
  local k = nn.Conv2DTranspose(2, 3, { kernel_initializer = "ones", use_bias = false })
  k(tensor.ones(1, 2, 2, 1))
  T.eq(#k.weights, 1); T.eq(sum(k.kernel), 18)
end)

---------------------------------------------------------------- DepthwiseConv2D, SeparableConv2D
T.test("DepthwiseConv2D and SeparableConv2D weights, Keras's option names and initializers", function()
  tensor.seed(3)
  local d = nn.DepthwiseConv2D(3, { depth_multiplier = 20 })
  T.eq(shape(d(tensor.normal(2, 5, 5, 30))), "2x3x3x600")
  T.eq(d.weights[1].name, d.name .. "/depthwise_kernel"); T.eq(shape(d.weights[1]), "3x3x30x20")
  T.eq(d.weights[2].name, d.name .. "/bias"); T.eq(shape(d.weights[2]), "600")
  local lim = math.sqrt(6 / (9 * 30 + 9 * 20))   -- Keras's fans of (3, 3, 30, 20)
  local mx = d.weights[1]:abs():max():item()
  T.ok(mx <= lim and mx > 0.9 * lim, ("depthwise glorot limit %g, max %g"):format(lim, mx))

  local s = nn.SeparableConv2D(50, 3, { depth_multiplier = 2, padding = "same" })
  T.eq(shape(s(tensor.normal(2, 4, 4, 30))), "2x4x4x50")
  T.eq(s.weights[1].name, s.name .. "/depthwise_kernel"); T.eq(shape(s.weights[1]), "3x3x30x2")
  T.eq(s.weights[2].name, s.name .. "/pointwise_kernel"); T.eq(shape(s.weights[2]), "1x1x60x50")
  T.eq(s.weights[3].name, s.name .. "/bias"); T.eq(shape(s.weights[3]), "50")
  lim = math.sqrt(6 / (60 + 50))
  mx = s.weights[2]:abs():max():item()
  T.ok(mx <= lim and mx > 0.9 * lim, ("pointwise glorot limit %g, max %g"):format(lim, mx))

  -- depthwise_ and pointwise_ options (Keras's names), each on its own kernel
  local o = nn.SeparableConv2D(2, 3, { depthwise_initializer = "ones", pointwise_initializer = "zeros",
    bias_initializer = "ones", pointwise_regularizer = regularizers.L2(0.5) })
  local m = nn.Sequential { o }
  m(tensor.ones(1, 3, 3, 2))
  T.eq(sum(o.weights[1]), 18); T.eq(sum(o.weights[2]:abs()), 0); T.eq(sum(o.weights[3]), 2)
  o.weights[2]:assign(tensor.ones(1, 1, 2, 2))
  T.eq(#m.losses, 1, "the pointwise kernel's regularization only")
  T.near(m.losses[1]:item(), 0.5 * 4, 1e-6)
  local c = roundtrip(o)
  T.eq(c.depthwise_initializer.class_name, "Ones"); T.eq(c.pointwise_initializer.class_name, "Zeros")
  local dk = nn.DepthwiseConv2D(2, { depthwise_initializer = "ones", depthwise_constraint = constraints.NonNeg() })
  dk(tensor.ones(1, 2, 2, 3))
  T.eq(sum(dk.weights[1]), 12)
  T.raises(function() return nn.DepthwiseConv2D(3, { kernel_initializer = "ones" }) end,
    "unknown option 'kernel_initializer'")
  T.raises(function() return nn.Conv2DTranspose(3, 3, { depthwise_initializer = "ones" }) end,
    "unknown option 'depthwise_initializer'")
  roundtrip(nn.DepthwiseConv2D({ 3, 2 }, { strides = 2, padding = "same", depth_multiplier = 3, activation = "tanh" }))
end)

T.test("SeparableConv2D is DepthwiseConv2D then a 1x1 Conv2D, then the bias", function()
  tensor.seed(4)
  local x = tensor.normal(2, 7, 6, 3)
  local s = nn.SeparableConv2D(5, 3, { strides = 2, padding = "same", depth_multiplier = 2, activation = "tanh",
    bias_initializer = "random_normal" })
  local y = s(x)
  local d = nn.DepthwiseConv2D(3, { strides = 2, padding = "same", depth_multiplier = 2, use_bias = false })
  local p = nn.Conv2D(5, 1, { activation = "tanh" })
  p(d(x))
  d.weights[1]:assign(s.weights[1]); p.kernel:assign(s.weights[2]); p.bias:assign(s.weights[3])
  local want = p(d(x))
  T.eq(shape(y), shape(want))
  T.ok((y - want):abs():max():item() < 1e-5, "the two steps")
end)

T.test("a model of the three saved and loaded (model:save, nn.load_model) gives the same outputs", function()
  tensor.seed(7)
  local m = nn.Sequential { nn.Conv2DTranspose(3, 3, { strides = 2, output_padding = 1, activation = "relu" }),
    nn.DepthwiseConv2D(2, { depth_multiplier = 2, depthwise_regularizer = regularizers.L2(0.01) }),
    nn.SeparableConv2D(2, 3, { padding = "same", pointwise_initializer = "he_normal" }),
    nn.MaxPool2D(2, { padding = "same" }) }
  local x = tensor.normal(2, 4, 3, 2)
  local y = m(x)
  local file = T.tmpdir() .. "/conv.ldist"
  m:save(file)
  local m2 = nn.load_model(file)
  T.eq(#m2.weights, 7)
  T.ok((m2(x) - y):abs():max():item() == 0, "the loaded model's outputs")
  T.eq(m2.layers[2]:get_config().depthwise_regularizer.class_name, "L2")
  T.eq(#m2.losses, 1, "the depthwise kernel's regularization")
end)

---------------------------------------------------------------- SAME max pooling
T.test("MaxPool2D and MaxPooling1D padding=\"same\": the padding is never the maximum and gets no gradient", function()
  local x = tensor.full({ 2, 5, 5, 3 }, -2) - tensor.uniform(2, 5, 5, 3)   -- every value below -2
  local v = tensor.Variable(x)
  local tape = autograd.GradientTape()
  local y
  local loss = tape:record(function() y = nn.MaxPool2D(3, { strides = 2, padding = "same" })(v); return y:sum() end)
  T.eq(shape(y), "2x3x3x3")
  T.ok(y:max():item() < -2, "no zero (or other padding value) wins")
  local g = tape:gradient(loss, { v })[1]
  T.near(sum(g), 2 * 3 * 3 * 3, 1e-6, "each output's gradient reaches an input")
  local seq = tensor.full({ 2, 7, 2 }, -5) - tensor.uniform(2, 7, 2)
  local y1 = nn.MaxPooling1D(2, { padding = "same" })(seq)
  T.eq(shape(y1), "2x4x2")
  -- the last window holds step 6 alone: its value, not the padding's
  T.eq(y1:slice(1, 3, 4):reshape(2, 2):totable()[1][1], seq:slice(1, 6, 7):reshape(2, 2):totable()[1][1])
  local c = roundtrip(nn.MaxPool2D(2, { padding = "same" }))
  T.eq(c.padding, "same")
  T.eq(roundtrip(nn.MaxPool2D(2)).padding, "valid")
  -- a Conv2D followed by a SAME MaxPool2D in a Sequential (not the fused valid pair) gives the two layers' output
  tensor.seed(5)
  local img = tensor.normal(2, 6, 5, 2)
  local m = nn.Sequential { nn.Conv2D(3, 3, { activation = "relu" }), nn.MaxPool2D(3, { strides = 2, padding = "same" }) }
  local ym = m(img)
  T.eq(shape(ym), "2x2x2x3")
  T.ok((ym - m.layers[2](m.layers[1](img))):abs():max():item() == 0, "Sequential = the layers one by one")
end)

---------------------------------------------------------------- mixed precision
T.test("under mixed_bfloat16: half outputs, float32 variables and gradients, float32's numbers within bfloat16's rounding", function()
  local x = tensor.normal(2, 6, 5, 3)
  local makes = {
    function() return nn.Conv2DTranspose(4, 3, { strides = 2, padding = "same", output_padding = 1 }) end,
    function() return nn.DepthwiseConv2D(3, { depth_multiplier = 2, activation = "relu" }) end,
    function() return nn.SeparableConv2D(4, 3, { padding = "same" }) end,
    function() return nn.MaxPool2D(2, { padding = "same" }) end,
    function() return nn.SeparableConv2D(4, 2, { padding = "same", dilation_rate = 2 }) end,
    function() return nn.UpSampling2D(2, { interpolation = "bilinear" }) end,
  }
  for _, make in ipairs(makes) do
    tensor.seed(6)
    local l32 = make()
    local y32 = l32(x)
    mixed_precision.set_global_policy("mixed_bfloat16")
    local ok, err = pcall(function()
      tensor.seed(6)
      local l = make()
      local tape = autograd.GradientTape()
      local y
      local loss = tape:record(function() y = l(x); return y:astype("float32"):sum() end)
      T.eq(y.dtype, "bfloat16", l.class_name .. " output")
      local diff = (y:astype("float32") - y32):abs():max():item()
      T.ok(diff <= 2 ^ -6 * math.max(1, y32:abs():max():item()), ("%s differs from float32 by %g"):format(l.class_name, diff))
      local vs = l.trainable_variables
      local g = tape:gradient(loss, vs)
      for i, v in ipairs(vs) do
        T.eq(v.dtype, "float32", l.class_name .. " variable")
        T.eq(g[i].dtype, "float32", l.class_name .. " gradient " .. i)
        T.ok(g[i]:abs():sum():item() > 0, l.class_name .. " gradient " .. i .. " is not zero")
      end
    end)
    mixed_precision.set_global_policy("float32")
    if not ok then error(err, 0) end
  end
end)

---------------------------------------------------------------- dilation_rate
-- a kernel of k taps d apart is the kernel of (k - 1) d + 1 taps with zeros
-- between them: the dilated layer (computed over the input's phases) against
-- the undilated one with that kernel (the plain convolution), values and
-- gradients, for Conv1D (valid, same, causal) and Conv2D
local function zero(x)   -- a table of x's shape, zeros
  if type(x) ~= "table" then return 0 end
  local z = {}
  for i, e in ipairs(x) do z[i] = zero(e) end
  return z
end
local function stuffed(w, axes)   -- w's taps axes[i] apart along its axis i, zeros between
  local t = w:cpu():totable()
  local function grow(v, depth)
    if type(v) ~= "table" then return v end
    local out = {}
    if axes[depth] then
      for i, e in ipairs(v) do
        out[#out + 1] = grow(e, depth + 1)
        if i < #v then for _ = 1, axes[depth] - 1 do out[#out + 1] = zero(grow(e, depth + 1)) end end
      end
    else
      for i, e in ipairs(v) do out[i] = grow(e, depth + 1) end
    end
    return out
  end
  return tensor.new(grow(t, 1))
end
local function both(make_dilated, make_plain, w_axes, x, dev)
  tensor.seed(9)
  local ld, lp
  local xd = dev and x:to(dev) or x
  if dev then   -- the dilated layer's weights on dev
    distribute.OneDeviceStrategy(dev):scope(function() ld = make_dilated(); ld(xd) end)
  else
    ld = make_dilated()
    ld(xd)
  end
  lp = make_plain()
  lp(x)
  lp.kernel:assign(stuffed(ld.kernel, w_axes))
  lp.bias:assign(ld.bias:cpu())
  local function run(l, xin)
    local v = tensor.Variable(xin)
    local tape = autograd.GradientTape()
    local y
    local loss = tape:record(function() y = l(v); return (y * y):sum() end)
    local g = tape:gradient(loss, { v, l.bias })
    return y:cpu(), g[1]:cpu(), g[2]:cpu()
  end
  local yd, gxd, gbd = run(ld, xd)
  local yp, gxp, gbp = run(lp, x)
  return yd, yp, gxd, gxp, gbd, gbp
end
T.test("dilation_rate: the dilated Conv1D and Conv2D equal the plain ones with zeros between the kernel's taps, on cpu:0 and cpu:1", function()
  local x1, x2 = tensor.normal(2, 11, 3), tensor.normal(2, 9, 10, 2)
  for _, dev in ipairs { false, "cpu:1" } do
    for _, pad in ipairs { "valid", "same", "causal" } do
      local yd, yp, gxd, gxp, gbd, gbp = both(
        function() return nn.Conv1D(4, 3, { padding = pad, dilation_rate = 3, activation = "relu", bias_initializer = "random_normal" }) end,
        function() return nn.Conv1D(4, 7, { padding = pad, activation = "relu" }) end, { 3 }, x1, dev or nil)
      local what = ("Conv1D %s on %s"):format(pad, dev or "cpu:0")
      T.eq(shape(yd), shape(yp), what .. " shape")
      T.ok((yd - yp):abs():max():item() < 1e-5, what .. " values")
      T.ok((gxd - gxp):abs():max():item() < 1e-4, what .. " input gradient")
      T.ok((gbd - gbp):abs():max():item() < 1e-4, what .. " bias gradient")
    end
    for _, pad in ipairs { "valid", "same" } do
      local yd, yp, gxd, gxp = both(
        function() return nn.Conv2D(3, { 3, 2 }, { padding = pad, dilation_rate = { 2, 4 }, bias_initializer = "random_normal" }) end,
        function() return nn.Conv2D(3, { 5, 5 }, { padding = pad }) end, { 2, 4 }, x2, dev or nil)
      local what = ("Conv2D %s on %s"):format(pad, dev or "cpu:0")
      T.eq(shape(yd), shape(yp), what .. " shape")
      T.ok((yd - yp):abs():max():item() < 1e-5, what .. " values")
      T.ok((gxd - gxp):abs():max():item() < 1e-4, what .. " input gradient")
    end
  end
  -- sizes: valid loses (k - 1) d, same and causal keep them; a dilated Conv2D then MaxPool2D (not the fused pair)
  T.eq(shape(nn.Conv1D(2, 3, { dilation_rate = 4 })(tensor.ones(1, 9, 1))), "1x1x2")
  T.eq(shape(nn.Conv1D(2, 3, { dilation_rate = 4, padding = "causal" })(tensor.ones(1, 5, 1))), "1x5x2")
  local m = nn.Sequential { nn.Conv2D(2, 3, { dilation_rate = 2, activation = "relu" }), nn.MaxPool2D(2) }
  local img = tensor.normal(2, 9, 9, 1)
  T.ok((m(img) - m.layers[2](m.layers[1](img))):abs():max():item() == 0, "Sequential = the layers one by one")
  local c = roundtrip(nn.Conv2D(2, 3, { dilation_rate = { 2, 3 } }))
  T.eq(table.concat(c.dilation_rate, ","), "2,3")
  T.eq(table.concat(roundtrip(nn.Conv1D(2, 3, { dilation_rate = 2, padding = "causal" })).dilation_rate, ","), "2")
end)

T.test("dilation_rate under mixed_bfloat16: a bfloat16 output within bfloat16's rounding of float32's", function()
  local x = tensor.normal(2, 8, 7, 3)
  tensor.seed(6)
  local l32 = nn.Conv2D(4, 3, { padding = "same", dilation_rate = 2 })
  local y32 = l32(x)
  mixed_precision.set_global_policy("mixed_bfloat16")
  local ok, err = pcall(function()
    tensor.seed(6)
    local l = nn.Conv2D(4, 3, { padding = "same", dilation_rate = 2 })
    local tape = autograd.GradientTape()
    local y
    local loss = tape:record(function() y = l(x); return y:astype("float32"):sum() end)
    T.eq(y.dtype, "bfloat16")
    T.ok((y:astype("float32") - y32):abs():max():item() <= 2 ^ -6 * math.max(1, y32:abs():max():item()), "bfloat16's rounding")
    local g = tape:gradient(loss, l.trainable_variables)
    T.eq(g[1].dtype, "float32")
    local c1 = nn.Conv1D(2, 2, { padding = "causal", dilation_rate = 2 })(tensor.normal(2, 6, 3))
    T.eq(c1.dtype, "bfloat16")
  end)
  mixed_precision.set_global_policy("float32")
  if not ok then error(err, 0) end
end)

---------------------------------------------------------------- errors
T.test("errors name the layer and what is wrong", function()
  T.raises(function() return nn.Conv2DTranspose(4, 3, { strides = 2, output_padding = 2 }) end,
    "Conv2DTranspose output_padding must be 0 or more and smaller than strides (as Keras's); got output_padding 2 with strides 2")
  T.raises(function() return nn.Conv2DTranspose(4, 3, { strides = { 2, 3 }, output_padding = { 1, 3 } }) end,
    "got output_padding 3 with strides 3 along axis 2")
  T.raises(function() return nn.Conv2DTranspose(4, 3, { output_padding = -1 }) end, "output_padding must be 0 or more")
  T.raises(function() return nn.Conv2DTranspose(0, 3) end, "Conv2DTranspose filters must be a positive integer, got 0")
  T.raises(function() return nn.Conv2DTranspose(4, 0) end, "Conv2DTranspose kernel_size must be 1 or 2 positive integers")
  T.raises(function() return nn.Conv2DTranspose(4, { 3, 3, 3 }) end, "kernel_size takes 2 integers, got 3")
  T.raises(function() return nn.Conv2DTranspose(4) end, "kernel_size is required")
  T.raises(function() return nn.Conv2DTranspose(4, 3, { dilation_rate = 2 }) end, "unknown option 'dilation_rate'")
  T.raises(function() return nn.Conv2D(4, 3, { strides = 2, dilation_rate = 2 }) end,
    "Conv2D: strides > 1 is not supported with dilation_rate > 1 (Keras's rule)")
  T.raises(function() return nn.Conv1D(4, 3, { dilation_rate = 0 }) end, "Conv1D dilation_rate must be positive")
  T.raises(function() return nn.DepthwiseConv2D(3, { strides = 2, dilation_rate = 2 }) end,
    "DepthwiseConv2D: strides > 1 is not supported with dilation_rate > 1")
  T.raises(function() return nn.SeparableConv2D(4, 3, { dilation_rate = 3 })(tensor.ones(1, 6, 9, 2)) end,
    "kernel 7x7 (dilated) is larger than its 6x9 inputs")
  T.raises(function() return nn.Conv2D(4, 3, { dilation_rate = { 2, 2, 2 } }) end, "dilation_rate takes 2 integers, got 3")
  T.raises(function() return nn.Conv1D(4, 3, { dilation_rate = 3 })(tensor.ones(1, 6, 2)) end, "")
  T.raises(function() return nn.Conv2DTranspose(4, 3, { padding = "causal" }) end, "unknown padding 'causal' (valid|same)")
  T.raises(function() return nn.Conv2DTranspose(4, 3)(tensor.ones(2, 5, 5)) end,
    "needs images [batch, height, width, channels]; got inputs of shape batchx5x5")
  -- same, an even kernel and output_padding 0: no convolution comes back to the input's size (TF rejects it)
  T.raises(function() return nn.Conv2DTranspose(2, 2, { strides = 2, padding = "same", output_padding = 0 })(tensor.ones(1, 3, 3, 1)) end,
    "whose convolution does not come back to the 3 inputs")
  local built = nn.Conv2DTranspose(2, 3)
  built(tensor.ones(1, 4, 4, 2))
  T.raises(function() return built(tensor.ones(1, 4, 4, 3)) end, "expects inputs of shape batchx4x4x2")

  T.raises(function() return nn.DepthwiseConv2D(3, { depth_multiplier = 0 }) end,
    "DepthwiseConv2D depth_multiplier must be a positive integer, got 0")
  T.raises(function() return nn.DepthwiseConv2D({ 3, 0 }) end, "DepthwiseConv2D kernel_size must be 1 or 2 positive integers")
  T.raises(function() return nn.DepthwiseConv2D(3, { strides = 0 }) end, "DepthwiseConv2D strides must be 1 or 2 positive integers")
  T.raises(function() return nn.DepthwiseConv2D(5)(tensor.ones(1, 3, 4, 2)) end,
    "kernel 5x5 is larger than its 3x4 inputs (use padding=\"same\")")
  T.raises(function() return nn.DepthwiseConv2D(3)(tensor.ones(2, 6)) end, "needs images [batch, height, width, channels]")
  T.eq(shape(nn.DepthwiseConv2D(5, { padding = "same" })(tensor.ones(1, 3, 4, 2))), "1x3x4x2")
  T.raises(function() return nn.SeparableConv2D(0, 3) end, "SeparableConv2D filters must be a positive integer, got 0")
  T.raises(function() return nn.SeparableConv2D(4, 3, { depth_multiplier = -1 }) end,
    "SeparableConv2D depth_multiplier must be a positive integer")
  T.raises(function() return nn.SeparableConv2D(4, 3)(tensor.ones(1, 2, 2, 1)) end, "kernel 3x3 is larger than its 2x2 inputs")

  T.raises(function() return nn.MaxPool2D(2, { padding = "full" }) end, "unknown padding 'full' (valid|same)")
  T.raises(function() return nn.MaxPooling1D(2, { padding = "causal" }) end, "unknown padding 'causal' (valid|same)")
  T.raises(function() return nn.MaxPool2D(3)(tensor.ones(1, 2, 2, 1)) end, "larger than the input")
  T.eq(shape(nn.MaxPool2D(3, { padding = "same" })(tensor.ones(1, 2, 2, 1))), "1x1x1x1")
end)

T.done()
