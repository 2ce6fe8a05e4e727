-- test_mixed_precision.lua - Keras's mixed precision (issue 30, item 2):
-- dtype policies, what layers compute in and what their variables and
-- gradients are, the policy kept by get_config / to_json / save, and dynamic
-- loss scaling (LossScaleOptimizer) against Keras 3.15.1's numbers.
-- Reference: scripts/fixtures/make_loss_scale_fixture.py prints the numbers
-- in LOSS_SCALE_REF and DENSE_BF16_REF below (Keras 3.15.1 on TensorFlow 2.21).
local T = dofile("tests/lua/testlib.lua")
local mp = mixed_precision

-- every test leaves the global policy as it found it (float32)
local function with_policy(name, f)
  mp.set_global_policy(name)
  local ok, err = pcall(f)
  mp.set_global_policy("float32")
  if not ok then error(err, 0) end
end

-- The fixtures' numbers (scripts/fixtures/make_loss_scale_fixture.py, pattern()):
-- ((i * mul) % mod - mod // 2) / scale for i = 0 .. n - 1, the same float32 values
-- as NumPy's; shape: the tensor's shape
local function pattern(shape, mul, mod, scale)
  local n = 1
  for _, d in ipairs(shape) do n = n * d end
  local t = {}
  for i = 0, n - 1 do t[i + 1] = ((i * mul) % mod - mod // 2) / scale end
  return tensor.new(t):reshape(table.unpack(shape))
end

-- t's values (row-major, as float32) equal Keras's list (or ref's) exactly
local function same_as_keras(t, want, what, ref)
  local got, bad = t:astype("float32"):reshape(-1):totable(), {}
  T.eq(#got, #want, what .. ": size")
  for i, w in ipairs(want) do
    if got[i] ~= w then bad[#bad + 1] = ("[%d] %.9g, %s %.9g"):format(i, got[i], ref or "Keras", w) end
  end
  T.eq(#bad, 0, what .. ": " .. table.concat(bad, "; "))
end

-- A Conv2D then a MaxPool2D in a Sequential run as one op on the CPU
-- (ld_conv2d_pool), under a half policy too: the kernel rounds as the half
-- Conv2D computes, then pools. Its output and gradients against the two
-- layers called one by one (the Conv2D alone is Keras's bit for bit, above;
-- the pooling of half values is exact): the output, input and kernel
-- gradients bit for bit; the bias gradient (float32 sums in another order,
-- rounded once) within one unit in the last place of the half dtype.
-- overlap: pools of 3 at stride 1, whose windows share pixels (the
-- gradients of a pixel that is the maximum of several are summed, and
-- rounded once to the half dtype, as MaxPool2D's gradient is)
local function conv_pool_pair(policy, overlap)
  local out = {}
  with_policy(policy, function()
    tensor.seed(7)   -- random values: windows whose maxima tie once rounded
    local x = tensor.normal(6, 17, 18, 5)
    local conv = nn.Conv2D(18, 3, { activation = "relu" })
    local pool = overlap and nn.MaxPool2D(3, { strides = 1 }) or nn.MaxPool2D(2)
    local model = nn.Sequential { conv, pool }
    local y0 = model(x)
    conv.bias:assign(tensor.normal(18) * 0.3)
    local up = tensor.normal(table.unpack(y0.shape))
    for _, fused in ipairs { true, false } do
      local v = tensor.Variable(x)
      local tape = autograd.GradientTape()
      local y
      local s = tape:record(function()
        y = fused and model(v) or pool(conv(v))
        return (y:astype("float32") * up):sum()
      end)
      local g = tape:gradient(s, { v, conv.kernel, conv.bias })
      out[fused and "fused" or "layers"] = { y = y, dx = g[1], dk = g[2], db = g[3] }
    end
  end)
  return out
end
if arg[1] == "pair_profile" then   -- the child of the fusion test below
  conv_pool_pair("mixed_bfloat16")
  os.exit(0)
end

-- the child of the direct-against-lowering test below: a Conv2D (same
-- padding, strides 2, relu), one without bias (valid), and a Conv2D +
-- MaxPool2D pair under each half policy, on values that overflow float16,
-- a NaN, float32 subnormals; then on 5 channels (kernel rows of odd length)
-- one of 8 filters and one of 70 (two chunks); every output and gradient printed exactly
-- (%a, NaNs as "nan"), for the parent to compare between the two paths
if arg[1] == "conv_values" then
  local function dump(name, t)
    local v = t:astype("float32"):reshape(-1):totable()
    for i, x in ipairs(v) do v[i] = x ~= x and "nan" or ("%a"):format(x) end
    print(name .. " " .. table.concat(v, " "))
  end
  for _, policy in ipairs { "mixed_bfloat16", "mixed_float16" } do
    with_policy(policy, function()
      tensor.seed(11)
      local x = tensor.normal(3, 9, 10, 4) * 3
      local flat = x:reshape(-1):totable()
      flat[5], flat[77], flat[140], flat[141] = 1e30, -7e4, 1e-40, -3e-39   -- image 0
      flat[400] = 0 / 0                                                     -- image 1
      x = tensor.new(flat):reshape(3, 9, 10, 4)
      local x5 = tensor.normal(2, 8, 7, 5) * 2   -- 5 channels: kernel rows of odd length
      local cases = {
        { "same2", nn.Conv2D(6, 3, { strides = 2, padding = "same", activation = "relu" }) },
        { "valid_nobias", nn.Conv2D(5, 2, { use_bias = false }) },
        { "pool", nn.Sequential { nn.Conv2D(16, 3, { activation = "relu" }), nn.MaxPool2D(2) } },
        { "odd_rows", nn.Conv2D(8, 3, { activation = "relu" }), x5 },
        { "filters70", nn.Conv2D(70, 3, { padding = "same" }), x5 },   -- two chunks of filters
      }
      for _, c in ipairs(cases) do
        local name, layer, x = c[1], c[2], c[3] or x
        local y0 = layer(x)
        local conv = layer.layers and layer.layers[1] or layer
        conv.kernel:assign(tensor.normal(table.unpack(conv.kernel.shape)) * 40)
        if conv.bias then conv.bias:assign(tensor.normal(table.unpack(conv.bias.shape)) * 30) end
        local up = tensor.normal(table.unpack(y0.shape))
        local v = tensor.Variable(x)
        local tape = autograd.GradientTape()
        local y
        local s = tape:record(function() y = layer(v); return (y:astype("float32") * up):sum() end)
        local want = { v, conv.kernel }
        if conv.bias then want[3] = conv.bias end
        local g = tape:gradient(s, want)
        local tag = policy .. " " .. name
        dump(tag .. " y", y); dump(tag .. " dx", g[1]); dump(tag .. " dk", g[2])
        if g[3] then dump(tag .. " db", g[3]) end
      end
    end)
  end
  print("bf16_path " .. ldist.config.cpu_split().bf16_gemm)
  os.exit(0)
end

T.test("policies: names, fields, the global policy, errors naming the problem", function()
  T.eq(mp.global_policy().name, "float32")
  for _, c in ipairs { { "float32", "float32" }, { "mixed_bfloat16", "bfloat16" }, { "mixed_float16", "float16" } } do
    local p = mp.Policy(c[1])
    T.eq(p.name, c[1]); T.eq(p.compute_dtype, c[2]); T.eq(p.variable_dtype, "float32")
    T.eq(tostring(p), ('<Policy "%s">'):format(c[1]))
  end
  T.ok(mp.Policy("mixed_bfloat16") == mp.Policy("mixed_bfloat16"))
  with_policy("mixed_bfloat16", function() T.eq(mp.global_policy().name, "mixed_bfloat16") end)
  mp.set_global_policy(mp.Policy("mixed_float16"))     -- a Policy too
  T.eq(mp.global_policy().compute_dtype, "float16")
  mp.set_global_policy("float32")
  T.raises(function() mp.Policy("mixed_foo") end,
    "bad argument #1 to 'Policy' (unknown dtype policy 'mixed_foo' (valid: 'float32', 'mixed_bfloat16', 'mixed_float16'))")
  T.raises(function() mp.set_global_policy("bf16") end, "set_global_policy' (unknown dtype policy 'bf16'")
  T.raises(function() mp.set_global_policy(3) end, "a policy name or a mixed_precision.Policy expected, got number")
  T.eq(mp.global_policy().name, "float32", "a refused policy changes nothing")
  T.raises(function() nn.Dense(3, { dtype = "float64" }) end, "nn.Dense: unknown dtype policy 'float64'")
  T.raises(function() nn.Dense(3, { dtype = 16 }) end, "nn.Dense: dtype must be a policy name or a mixed_precision.Policy")
end)

T.test("layers: compute dtype from the global policy or dtype=; variables and their gradients float32", function()
  tensor.seed(3)
  local x = tensor.normal(4, 6)
  local d32 = nn.Dense(5, "relu")
  local y32 = d32(x)
  T.eq(y32.dtype, "float32"); T.eq(d32.compute_dtype, "float32")
  with_policy("mixed_bfloat16", function()
    local d = nn.Dense(5, "relu")
    d(x)
    d.kernel:assign(d32.kernel); d.bias:assign(d32.bias)
    T.eq(d.compute_dtype, "bfloat16"); T.eq(d.dtype, "float32"); T.eq(d.variable_dtype, "float32")
    T.eq(d.dtype_policy.name, "mixed_bfloat16")
    local y = d(x)
    T.eq(y.dtype, "bfloat16")
    T.eq(d.kernel.dtype, "float32"); T.eq(d.bias.dtype, "float32")
    -- the same numbers as float32 within bfloat16's rounding (8 bits of mantissa)
    local diff = (y:astype("float32") - y32):abs():max():item()
    T.ok(diff <= 2 ^ -7 * math.max(1, y32:abs():max():item()), ("bfloat16 Dense differs by %g"):format(diff))
    -- gradients reach the float32 variables in float32, through two layers
    local d2 = nn.Dense(3)
    local tape = autograd.GradientTape()
    local l = tape:record(function() return d2(d(x)):astype("float32"):sum() end)
    local g = tape:gradient(l, { d.kernel, d.bias, d2.kernel, d2.bias })
    for i = 1, 4 do
      T.eq(g[i].dtype, "float32", "gradient " .. i)
      T.ok(g[i]:abs():sum():item() > 0, "gradient " .. i .. " is not zero")
    end
    -- a layer's own policy wins over the global one (Keras's dtype=)
    local f = nn.Dense(3, { dtype = "float32" })
    T.eq(f(x).dtype, "float32")
    T.eq(nn.Dense(3, { dtype = mp.Policy("mixed_float16") })(x).dtype, "float16")
  end)
  T.eq(nn.Dense(2).compute_dtype, "float32", "layers made after the policy went back are float32")
end)

T.test("every layer kind runs under mixed_bfloat16: half outputs, float32 variables", function()
  with_policy("mixed_bfloat16", function()
    tensor.seed(5)
    local img, seq = tensor.normal(2, 6, 6, 3), tensor.normal(2, 5, 4)
    local ids = tensor.new({ { 1, 2, 3 }, { 0, 4, 1 } }):astype("int64")
    local cases = {
      { nn.Conv2D(4, 3, { activation = "relu" }), img }, { nn.MaxPool2D(2), img }, { nn.BatchNormalization(), img },
      { nn.Flatten(), img }, { nn.LayerNormalization(), seq }, { nn.Embedding(5, 3), ids },
      { nn.MultiHeadAttention(2, 3), seq }, { nn.LSTM(3), seq }, { nn.GRU(3), seq }, { nn.Dropout(0.5), seq },
      { nn.Activation("softmax"), seq }, { nn.Conv1D(2, 3), seq },
    }
    for _, c in ipairs(cases) do
      local l, x = c[1], c[2]
      local y = l(x, { training = true })
      T.eq(y.dtype, "bfloat16", l.class_name .. " output")
      for _, v in ipairs(l.weights) do T.eq(v.dtype, "float32", l.class_name .. " variable " .. v.name) end
    end
  end)
end)

T.test("MultiHeadAttention under mixed_bfloat16: its attention products take bfloat16 operands, as Keras's", function()
  -- on the logical device cpu:1 the executor counts each kernel slot's calls
  ldist.config.cpu_devices(2)
  local x = tensor.normal(2, 7, 16)
  local function run(policy)
    local y, calls
    with_policy(policy, function()
      local s = distribute.MirroredStrategy { devices = { "cpu:1" } }
      tensor.seed(3)
      local m
      do
        local _ <close> = s:scope()
        m = nn.MultiHeadAttention(2, 8, { use_causal_mask = true })
        m(x:to("cpu:1"))   -- built
      end
      local before = ldist._distribute.kernel_calls()
      y = m(x:to("cpu:1")):astype("float32"):cpu()
      local after = ldist._distribute.kernel_calls()
      calls = {}
      for k, v in pairs(after) do calls[k] = v - (before[k] or 0) end
    end)
    return y, calls
  end
  local yh, ch = run("mixed_bfloat16")
  local yf, cf = run("float32")
  T.eq(ch.gemm_batched_half, 2, "q k^T and P v: half batched products")
  T.eq(ch.gemm_batched, 0, "no float32 batched product")
  T.eq(cf.gemm_batched, 2, "float32: float32 batched products")
  local err = ((yh - yf):abs():max() / yf:abs():max()):item()
  T.ok(err < 0.03, ("agrees with float32 within bfloat16 rounding (relative %.3g)"):format(err))
end)

T.test("the loss runs in float32; a float32 last activation gives float32 predictions (Keras's advice)", function()
  with_policy("mixed_bfloat16", function()
    tensor.seed(4)
    local m = nn.Sequential { nn.Dense(8, "relu"), nn.Dense(3), nn.Activation("softmax", { dtype = "float32" }) }
    local x, y = tensor.normal(6, 4), tensor.new({ 0, 1, 2, 0, 1, 2 }):astype("int64")
    local p = m(x)
    T.eq(p.dtype, "float32")
    local l = losses.SparseCategoricalCrossentropy()(y, p)
    T.eq(l.dtype, "float32")
    local logits = nn.Sequential { nn.Dense(3) }
    local lg = logits(x)
    T.eq(lg.dtype, "bfloat16")
    local l2 = losses.SparseCategoricalCrossentropy { from_logits = true }(y, lg)
    T.eq(l2.dtype, "float32", "half logits: the loss casts them first, as Keras's losses do")
    local ref = losses.SparseCategoricalCrossentropy { from_logits = true }(y, lg:astype("float32")):item()
    T.near(l2:item(), ref, 1e-6)
  end)
end)

T.test("the dtype policy is kept by get_config, to_json, model:save and load_model", function()
  local dir = T.tmpdir()
  with_policy("mixed_bfloat16", function()
    tensor.seed(6)
    local m = nn.Sequential { nn.Dense(4, "relu"), nn.Dense(2, { dtype = "float32" }) }
    m:build { 3 }
    T.eq(m.layers[1]:get_config().dtype, "mixed_bfloat16")
    T.eq(m.layers[2]:get_config().dtype, "float32")
    mp.set_global_policy("float32")   -- the file, not the global policy, says what the layers compute in
    local j = nn.model_from_json(m:to_json())
    T.eq(j.layers[1].compute_dtype, "bfloat16"); T.eq(j.layers[2].compute_dtype, "float32")
    local path = dir .. "/mixed.safetensors"
    m:save(path)
    local l = nn.load_model(path)
    T.eq(l.layers[1].dtype_policy.name, "mixed_bfloat16"); T.eq(l.layers[2].dtype_policy.name, "float32")
    local x = tensor.normal(2, 3)
    T.eq(l.layers[1](x).dtype, "bfloat16")
    T.eq((l(x) - m(x)):abs():max():item(), 0, "the loaded model computes as the saved one")
    local back = nn.layer_from_config { class_name = "Dense", config = m.layers[1]:get_config() }
    T.eq(back.compute_dtype, "bfloat16")
    -- Keras 3 writes a policy as {"class_name": "DTypePolicy", "config": {"name": ...}}
    local k3 = nn.Dense(2, { dtype = { module = "keras", class_name = "DTypePolicy", config = { name = "mixed_float16" } } })
    T.eq(k3.compute_dtype, "float16")
  end)
end)

-- Keras 3.15.1: LossScaleOptimizer(SGD(0.1)) on v = [1, 2] given the
-- gradients [inf, 1], [nan, 1], then [8192, 16384]; and with initial_scale 8,
-- dynamic_growth_steps 2 on v = [1] given 1, 1, 1, inf, 1, 1, 1:
-- (scale, v) after each step
local LOSS_SCALE_REF = {
  skip = { { 16384, { 1, 2 }, 0 }, { 8192, { 1, 2 }, 0 }, { 8192, { 0.9, 1.8 }, 1 } },
  growth = { { 8, 0.9875 }, { 16, 0.975 }, { 16, 0.96875 }, { 8, 0.96875 }, { 8, 0.95625 }, { 16, 0.94375 },
    { 16, 0.9375 } },
}

-- Keras 3.15.1: Dense(3, relu) under mixed_bfloat16 with kernel (i - 5.5) / 7,
-- bias {0.1, -0.2, 0.3}, on x = (i - 3.5) / 3: its bfloat16 output and the
-- float32 gradient of sum(output) with respect to its kernel
local DENSE_BF16_REF = {
  y = { { 1.1953125, 0.515625, 0.6328125 }, { 0.431640625, 0.515625, 1.390625 } },
  dkernel = { -0.99609375, -0.33203125, 0.33203125, 0.99609375 },   -- each row's three entries
}

-- A Dense on [batch, time, features] under a half policy: its bias gradient
-- sums the half output gradient over batch and time in float32 and rounds
-- once (TF's reduce_sum over both axes gives these bits; summed axis by
-- axis, each sum rounded, 6 of 8 were off, one by 7%). Keras's CPU
-- BiasAddGrad accumulates in bfloat16 itself and is further off (README).
T.test("a Dense on 3-d inputs under mixed_bfloat16 / mixed_float16: the bias gradient is the float32 sum over batch and time rounded once", function()
  for _, c in ipairs { { "mixed_bfloat16", "bfloat16" }, { "mixed_float16", "float16" } } do
    with_policy(c[1], function()
      local x = pattern({ 6, 40, 16 }, 37, 101, 7.0)
      local layer = nn.Dense(8)
      local y0 = layer(x)
      layer.kernel:assign(pattern({ 16, 8 }, 53, 97, 9.0))
      layer.bias:assign(pattern({ 8 }, 29, 89, 90.0))
      local up = pattern(y0.shape, 13, 31, 3.0)
      local tape = autograd.GradientTape()
      local s = tape:record(function() return (layer(x):astype("float32") * up):sum() end)
      local g = tape:gradient(s, layer.bias)
      T.eq(g.dtype, "float32")
      -- the reference: the half output gradient (up rounded) summed in float32 over the 240 rows, rounded once
      local want = up:astype(c[2]):astype("float32"):reshape(240, 8):sum(0):astype(c[2]):astype("float32")
      same_as_keras(g, want:totable(), c[1] .. " bias gradient", "rounded float32 sum")
      -- broadcast over axes that are not leading ([6, 1, 1] against [6, 40, 8]): the same, once rounded
      local v = tensor.Variable(pattern({ 6, 1, 1 }, 3, 7, 5.0))
      local t2 = autograd.GradientTape()
      local s2 = t2:record(function() return ((y0 + v:astype(c[2])):astype("float32") * up):sum() end)
      local gv = t2:gradient(s2, v)
      local wv = up:astype(c[2]):astype("float32"):reshape(6, 320):sum(1):astype(c[2]):astype("float32")
      same_as_keras(gv, wv:totable(), c[1] .. " gradient of a [6, 1, 1] addend", "rounded float32 sum")
    end)
  end
end)

T.test("a Dense layer under mixed_bfloat16 gives Keras's numbers bit for bit (product, bias and relu in bfloat16)", function()
  with_policy("mixed_bfloat16", function()
    local function fill(rows, cols, f)
      local t = {}
      for r = 1, rows do t[r] = {}; for c = 1, cols do t[r][c] = f((r - 1) * cols + c - 1) end end
      return tensor.new(t)
    end
    local x = fill(2, 4, function(i) return (i - 3.5) / 3 end)
    local d = nn.Dense(3, "relu")
    d(x)
    d.kernel:assign(fill(4, 3, function(i) return (i - 5.5) / 7 end))
    d.bias:assign(tensor.new({ 0.1, -0.2, 0.3 }))
    local tape = autograd.GradientTape()
    local y
    local s = tape:record(function() y = d(x); return y:astype("float32"):sum() end)
    T.eq(y.dtype, "bfloat16")
    local yt = y:astype("float32"):totable()
    for r = 1, 2 do
      for c = 1, 3 do
        local want = DENSE_BF16_REF.y[r][c]
        T.eq(yt[r][c], want, ("y[%d][%d] = %.9g, Keras %.9g"):format(r, c, yt[r][c], want))
      end
    end
    local g = tape:gradient(s, d.kernel)
    T.eq(g.dtype, "float32")
    local gt = g:totable()
    for r = 1, 4 do for c = 1, 3 do T.eq(gt[r][c], DENSE_BF16_REF.dkernel[r], ("dkernel[%d][%d]"):format(r, c)) end end
  end)
end)

-- scripts/fixtures/make_loss_scale_fixture.py, dense2_bf16 (Keras 3.15.1, TensorFlow 2.21)
local DENSE2_BF16_REF = {
  { -0.5390625, -0.1435546875, 0.390625, -0.228515625, 0.1533203125 },
  { -0.06640625, -0.171875, 0.8515625, -0.279296875, 0.609375 },
  { -0.59765625, -0.00860595703125, 0.330078125, -0.25, 0.0908203125 },
  { -0.6484375, 0.263671875, 0.296875, 0.1923828125, 0.07421875 },
  { -0.25390625, -0.047607421875, 0.68359375, -0.08642578125, 0.453125 },
  { -0.4140625, 0.049560546875, 0.490234375, -0.21484375, 0.2275390625 },
  { -0.6796875, 0.177734375, 0.25, -0.05908203125, 0.015625 },
  { -0.8203125, -0.0634765625, 0.29296875, 0.1474609375, 0.037109375 },
}

T.test("Dense(64, relu) then Dense(5) under mixed_bfloat16 give Keras's 40 outputs bit for bit", function()
  with_policy("mixed_bfloat16", function()
    local m = nn.Sequential { nn.Dense(64, "relu"), nn.Dense(5) }
    m:build { 32 }
    m.layers[1].kernel:assign(pattern({ 32, 64 }, 53, 97, 160.0))
    m.layers[1].bias:assign(pattern({ 64 }, 29, 89, 90.0))
    m.layers[2].kernel:assign(pattern({ 64, 5 }, 41, 83, 280.0))
    m.layers[2].bias:assign(pattern({ 5 }, 31, 7, 6.0))
    local y = m(pattern({ 8, 32 }, 37, 101, 25.0))
    T.eq(y.dtype, "bfloat16")
    local want = {}
    for _, row in ipairs(DENSE2_BF16_REF) do for _, v in ipairs(row) do want[#want + 1] = v end end
    same_as_keras(y, want, "output")
  end)
end)

-- scripts/fixtures/make_loss_scale_fixture.py, conv_bf16: Conv2D(4, 3, relu) on 2 images
-- 5x5x3, its outputs (row-major) and the kernel gradient of sum(output)
local CONV_BF16_REF = {
  y = {
    2.25, 3.484375, 3.875, 0.0, 1.5625, 1.4296875, 1.09375, 2.25,
    0.0, 0.0, 2.28125, 0.0, 0.0, 0.0, 0.0, 0.0,
    0.0, 0.0, 0.0, 0.0, 0.0, 0.4609375, 0.0, 0.091796875,
    0.0, 3.859375, 1.234375, 0.8203125, 1.578125, 1.4609375, 1.0703125, 2.25,
    0.0, 0.0, 2.265625, 0.0, 0.0, 0.0, 0.0, 0.0,
    0.0, 0.0, 0.0, 0.0, 0.0, 0.52734375, 0.0, 0.095703125,
    0.0, 3.890625, 1.203125, 0.8203125, 3.765625, 0.70703125, 3.796875, 2.046875,
    0.0, 1.9609375, 1.34375, 1.7890625, 0.0, 0.0, 0.0, 0.0,
    0.0, 0.0, 0.0, 0.33984375, 0.59765625, 0.0, 0.0, 0.0,
  },
  dkernel = {
    -6.28125, -2.84375, -6.8125, -0.5625, -2.921875, -5.6875, -1.5625, -3.40625,
    4.46875, 7.65625, 11.75, 5.875, -4.28125, -7.3125, -11.3125, -5.0625,
    -0.91796875, -2.078125, 2.03125, -3.84375, 6.46875, 7.1875, 3.234375, 5.4375,
    -2.28125, -3.71875, -7.6875, -1.4375, 1.078125, 1.515625, 5.625, -0.236328125,
    -3.640625, -1.328125, -5.28125, -3.09375, -0.3203125, -1.0, 3.125, -2.765625,
    7.09375, 8.25, 4.3125, 6.53125, -1.671875, -2.640625, -6.59375, -0.357421875,
    1.6796875, 2.59375, 6.71875, 0.8359375, -3.03125, -0.23046875, -4.1875, -1.9921875,
    0.3203125, -7.125, -3.0, -4.84375, 3.6875, 6.1875, 10.3125, 4.4375,
    -5.0625, -8.75, -12.6875, -6.46875, -1.71875, -3.53125, 0.6015625, -1.2421875,
    -2.4375, 0.84765625, -3.125, -0.9140625, -3.125, -6.03125, -1.921875, -3.765625,
    4.28125, 7.28125, 11.375, 5.53125, -4.5, -7.6875, -11.625, -5.40625,
    -1.125, -2.4375, 1.6796875, -4.1875, 6.28125, 10.875, 6.9375, 9.125,
    -2.484375, -4.09375, -8.0625, -1.796875, 0.8828125, 1.1640625, 5.28125, -0.59765625,
    0.1953125, 2.359375, -1.609375, 0.59765625,
  },
}

-- scripts/fixtures/make_loss_scale_fixture.py, conv_bf16_dx: Conv2D(5, 3, relu) on 2 images 7x6x3
-- (valid; strides 2, same), the input gradient of sum(output * up) (row-major)
local CONV_BF16_DX_REF = {
  valid = {
    0.494140625, 12.5, 17.25, 8.375, -48.75, 20.125, 30.75, -24.875, -5.0, -1.1171875, -3.640625, -27.625, 15.0625,
    -15.5625, -20.875, 15.5625, -5.59375, -26.75, 41.25, -34.5, -9.4375, 37.5, 39.75, -40.75, -25.0, 45.5, 4.375,
    14.4375, 36.5, -38.75, -16.75, 31.625, 11.625, -42.5, 20.25, 29.125, -44.75, -30.5, 70.0, -62.75, -6.09375,
    46.75, 29.125, -87.5, 25.625, -3.390625, -24.0, 35.0, 19.375, -25.25, -23.25, 27.75, 1.96875, -34.5, 60.5,
    -24.75, -49.5, 78.0, 52.75, -66.0, 84.5, 45.5, -58.5, 2.28125, 63.0, -74.0, -42.5, 62.0, 8.125, -17.5, 29.0,
    21.5, -38.5, 2.984375, 15.6875, -13.125, -22.125, 47.75, 22.0, -43.5, 12.9375, -88.0, -30.25, 41.5, -7.0,
    -53.25, 11.8125, 5.15625, -35.0, 3.8125, -9.5625, 46.25, -5.71875, 19.5, 6.59375, -17.375, 17.875, 31.5,
    -1.1484375, 6.28125, 38.0, -20.5, -9.9375, 33.0, 29.375, -20.375, 13.75, 1.1328125, 12.1875, -2.21875, -16.625,
    27.125, 12.6875, -1.75, -64.5, 20.875, 8.9375, -6.90625, -7.03125, 25.25, -11.375, -11.375, 10.125, 13.1875,
    -11.0, -10.0625, -29.375, 18.0, 0.66796875, -24.375, 26.75, 17.25, -6.4375, -32.5, 16.875, 9.1875, -4.34375,
    -17.75, 12.0, 5.25, -1.5, 12.3125, 7.5, -44.0, 24.625, -21.875, -32.5, 52.5, 11.125, -41.25, 45.5, 43.0, -42.0,
    -7.46875, 34.5, -13.0625, -14.75, 22.375, 1.9296875, 1.671875, -0.1943359375, 26.5, -29.5, 31.375, 45.75,
    -52.25, -15.4375, 68.0, -39.25, -19.625, 3.46875, -5.875, -47.25, 26.125, 4.40625, -16.25, -47.75, 9.9375,
    2.671875, 2.71875, 24.875, 11.75, -4.84375, 49.25, -17.75, -34.25, 38.75, 55.75, -38.75, 10.375, 22.875, -86.5,
    -8.6875, 50.75, -44.5, 6.6875, 14.4375, 14.9375, 21.0, -32.75, -18.375, -3.25, 39.0, 31.125, -38.25, -10.5,
    42.5, -47.25, 4.25, 41.25, -98.0, -2.59375, 28.125, 39.25, -59.5, 29.125, -32.5, -24.875, 29.25, 14.4375,
    -57.25, 18.375, 34.25, 0.19921875, -29.5, 36.0, -8.25, -74.5, 47.75, 32.0, -37.25, -22.5, 31.75, 35.5, 19.5,
    21.375, -30.625, 5.96875, 22.25, 20.625, -37.75, 11.125, 16.625, -33.25, -3.953125, 15.0, 5.96875, -7.5, 25.75,
    19.25, -30.125, -29.125,
  },
  same2 = {
    2.59375, -2.671875, -0.7421875, 1.1875, 3.109375, -2.15625, 18.125, -2.09375, -29.5, 34.5, 12.3125, -9.75,
    -31.25, 37.0, 26.5, -7.78125, 3.765625, 11.6875, -2.3125, 10.0, 8.0625, -0.99609375, -2.921875, 9.5, 6.125,
    -51.25, -29.0, 12.5, -6.65625, -4.625, 38.5, -17.375, -59.0, 23.875, 33.75, -71.5, 7.65625, 3.828125,
    -0.02197265625, 10.5, 6.625, 2.765625, -11.1875, 20.25, 19.25, -12.3125, -9.375, 11.4375, -3.296875, 1.5078125,
    6.3125, -19.125, -17.25, 13.5, 10.3125, -9.375, -7.53125, 19.5, 7.0, -52.25, 2.3125, 24.125, -36.75, 4.5, 31.5,
    -24.125, -37.5, 41.25, 8.5, -25.375, 29.875, 20.5, -11.9375, 19.0, 10.25, -5.625, -14.3125, 16.625, -7.5,
    11.4375, -12.625, -4.25, -19.625, 15.1875, 23.375, -14.125, -37.0, 7.625, -0.0732421875, -7.78125, -12.8125,
    20.75, 3.890625, -45.25, 27.75, 10.9375, -19.875, 29.375, 13.8125, -46.0, 23.375, 28.375, -9.9375, 0.71875,
    26.125, 3.640625, -33.5, 8.5, 14.625, -25.875, -26.875, 15.3125, 14.375, -26.125, 26.0, 5.75, -14.4375, 24.125,
    4.8125, -14.5, 20.625, 18.75, 16.875, -12.1875, 5.15625, 4.59375, -8.0625, 1.109375, 17.5, -20.125, -3.640625,
    5.5, 10.625, -5.96875, 27.75, -24.0, -6.625, 14.3125, -4.65625, -7.375, 18.625, -17.625, -8.875, 14.1875, 22.25,
    16.125, -22.375, 18.125, 26.375, -33.5, 6.59375, 20.0, -20.625, 15.0, 34.5, -35.75, -14.125, 28.375, 9.8125,
    -7.5, 33.5, -22.5, -10.75, 13.4375, 12.5, -10.0625, -11.0, 13.125, 1.28125, 6.0, -3.609375, -4.625, -13.3125,
    13.9375, 9.1875, -10.25, -18.875, -3.359375, -3.328125, -3.328125, -13.5, 29.125, 10.3125, -40.75, 16.125, 8.25,
    1.96875, 6.28125, 17.75, -30.125, 25.0, 4.84375, -24.125, 22.0, 36.0, -17.875, -5.375, 25.125, 19.125, -31.0,
    -27.125, 16.375, 20.125, -29.875, 7.375, 10.4375, 2.671875, 13.125, 1.5625, -10.0625, 31.875, -10.375, -9.375,
    4.71875, 17.25, -17.0, -11.6875, 2.4375, 23.75, 34.25, -59.25, 16.125, 12.375, -2.0625, -48.75, -6.5625,
    -17.125, 11.8125, -0.66796875, -14.375, -17.25, 14.0, -10.625, -2.875, 2.328125, 9.0625, 15.8125, -2.546875,
    4.125, 10.875, -32.25, -3.0625, 4.59375, -0.412109375, 0.5625, -2.0625, -7.59375, 6.5, 9.875, -2.96875, -7.75,
    5.34375,
  },
}

-- scripts/fixtures/make_loss_scale_fixture.py, conv1d_bf16_dx: Conv1D(5, 3, relu) on 2 sequences 11x3
-- (causal; strides 2, same; valid), the input gradient of sum(output * up) (row-major)
local CONV1D_BF16_DX_REF = {
  causal = {
    38.5, -58.75, 20.125, 31.75, -5.96875, -4.125, 30.375, -13.0, -56.0, 19.0, 13.25, -100.5, 20.5, 16.5, 12.625,
    -5.375, 34.25, 23.625, -65.5, 21.625, 37.0, -33.0, -15.6875, 34.0, -20.75, -6.25, 22.625, -12.25, -3.5625,
    5.125, -4.78125, -1.890625, 1.0, 48.75, 10.6875, -9.6875, 30.5, -2.484375, -42.75, 20.5, 17.875, -99.5, 24.125,
    -7.40625, -35.5, 22.125, 31.5, -5.75, -13.6875, 36.0, 28.375, -43.0, -3.953125, 35.0, -28.0, -14.5625, 31.25,
    -18.0, -7.4375, 24.625, -13.75, -4.09375, 5.5625, 10.0, -5.78125, 0.0,
  },
  same2 = {
    5.5, -50.25, 8.875, -1.9140625, 25.0, -1.8671875, -1.109375, -54.75, 17.125, 22.875, -14.3125, -12.0625, 12.0,
    -14.5, -8.8125, 23.375, 3.015625, -24.5, 12.6875, -9.8125, -10.8125, 15.1875, 4.65625, -27.5, 8.875, -0.7421875,
    -10.375, 22.5, -7.375, -37.25, 21.375, 1.109375, -19.125, -1.734375, 8.0625, -0.07666015625, 3.40625, -8.0625,
    -1.5859375, 1.625, 5.5, -5.0625, -10.0625, 15.875, 41.75, -25.125, -2.953125, 19.125, -4.5, -3.140625, 16.125,
    -11.3125, -14.25, 15.25, -9.8125, -9.75, 15.3125, -2.671875, 0.22265625, 3.109375, -4.78125, -1.890625, 1.0,
    0.0, 0.0, 0.0,
  },
  valid = {
    4.125, 9.375, 7.4375, -3.328125, -30.375, 18.25, -7.5, -31.625, 12.5, 14.75, -31.875, -6.65625, 23.125, -27.25,
    -56.0, 27.375, 4.78125, -46.75, 27.125, 8.75, 4.9375, 9.5, 31.625, 21.375, -38.25, 5.09375, 41.25, -27.125,
    -6.90625, 13.3125, -14.375, -5.6875, 3.0, -33.75, 21.625, 1.328125, -24.375, 11.5, 18.875, 14.5, -40.0, 38.5,
    8.875, -26.25, -14.75, 26.875, 1.203125, -28.25, 51.25, -50.25, -36.75, 43.5, 30.625, -68.5, 28.375, 21.75,
    -39.0, 39.5, 6.65625, -47.5, 39.75, 12.8125, -14.1875, -21.75, 12.5625, 0.0,
  },
}

-- Keras's input gradients of a convolution class under mixed_bfloat16
-- (input_grads_bf16 of the fixture script): 5 filters of 3, relu, x of
-- xshape and the kernel of kshape from pattern(), for each case of ref
local DX_OPTS = { valid = {}, same2 = { padding = "same", strides = 2 }, causal = { padding = "causal" } }
local function same_input_grads(cls, xshape, kshape, ref)
  for name, want in pairs(ref) do
    local opts = { activation = "relu" }
    for k, v in pairs(DX_OPTS[name]) do opts[k] = v end
    local x = pattern(xshape, 37, 101, 7.0)
    local c = cls(5, 3, opts)
    local y0 = c(x)
    c.kernel:assign(pattern(kshape, 53, 97, 9.0))
    c.bias:assign(pattern({ 5 }, 29, 89, 90.0))
    local up = pattern(y0.shape, 13, 31, 3.0)
    local v = tensor.Variable(x)
    local tape = autograd.GradientTape()
    local s = tape:record(function() return (c(v):astype("float32") * up):sum() end)
    local dx = tape:gradient(s, v)
    T.eq(dx.dtype, "float32")
    same_as_keras(dx, want, name .. " input gradient")
  end
end

local function conv_check()
  with_policy("mixed_bfloat16", function()
    local x = pattern({ 2, 5, 5, 3 }, 37, 101, 25.0)
    local c = nn.Conv2D(4, 3, { activation = "relu" })
    c(x)
    c.kernel:assign(pattern({ 3, 3, 3, 4 }, 53, 97, 60.0))
    c.bias:assign(pattern({ 4 }, 29, 89, 90.0))
    local tape = autograd.GradientTape()
    local y
    local s = tape:record(function() y = c(x); return y:astype("float32"):sum() end)
    T.eq(y.dtype, "bfloat16")
    local g = tape:gradient(s, c.kernel)
    T.eq(g.dtype, "float32")
    same_as_keras(y, CONV_BF16_REF.y, "output")
    same_as_keras(g, CONV_BF16_REF.dkernel, "kernel gradient")
    -- the input gradient: each input's terms summed in float32 and rounded
    -- once (the lowering rounded the patches' gradient first: a third of
    -- these one bfloat16 step off)
    same_input_grads(nn.Conv2D, { 2, 7, 6, 3 }, { 3, 3, 3, 5 }, CONV_BF16_DX_REF)
  end)
end
-- the child of the test below: the lowering a GPU runs (im2col, the half product)
if arg[1] == "conv_lowering" then
  local ok, err = pcall(conv_check)
  print(ok and "conv_lowering ok" or ("conv_lowering failed: " .. tostring(err)))
  os.exit(ok and 0 or 1)
end

-- scripts/fixtures/make_loss_scale_fixture.py, conv1d_bf16: Conv1D(4, 3, relu) on 2 sequences 9x3,
-- causal, then strides 2 with "same" padding: outputs (row-major) and the kernel gradient of sum(output)
local CONV1D_BF16_REF = {
  causal = {
    y = {
      0.89453125, 0.0, 1.3046875, 0.0, 0.77734375, 0.0, 0.0, 0.080078125, 2.546875, 0.0, 0.828125, 0.0, 2.125,
      2.765625, 0.0, 0.9921875, 0.0, 2.984375, 2.171875, 0.5, 0.0, 0.328125, 1.765625, 3.671875, 0.0, 0.4296875,
      1.15625, 3.65625, 0.0, 0.0, 1.234375, 0.7421875, 0.0, 0.0, 0.0, 1.4765625, 0.0, 0.0, 0.0, 0.14453125, 0.0, 0.0,
      0.0, 0.0, 0.26953125, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 2.171875, 2.765625, 0.0, 0.9921875, 0.0, 2.984375,
      2.234375, 0.5078125, 0.0, 0.31640625, 1.828125, 3.671875, 0.0, 0.4140625, 1.21875, 3.65625, 0.0, 0.0,
      1.2890625, 0.7421875,
    },
    dkernel = {
      -3.640625, -8.1875, -6.96875, -7.8125, -1.7578125, 3.671875, 6.34375, 8.5, 4.15625, -0.6484375, -4.5625,
      -3.53125, -4.0625, -4.96875, -3.359375, -5.40625, -0.6796875, 6.875, 9.9375, 8.3125, 6.71875, -5.53125,
      -9.0625, -6.25, -8.0625, -1.7578125, -1.7578125, 1.0078125, 0.80078125, 10.0625, 4.96875, 4.09375, 1.59375,
      -10.375, -4.46875, -9.0,
    },
  },
  same2 = {
    y = {
      0.77734375, 0.0, 0.0, 0.080078125, 2.125, 2.765625, 0.0, 0.9921875, 0.0, 0.328125, 1.765625, 3.671875, 0.0,
      0.0, 1.234375, 0.7421875, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 2.984375, 2.234375,
      0.5078125, 0.0, 0.4140625, 1.21875, 3.65625, 0.0, 0.2060546875, 0.0, 2.046875,
    },
    dkernel = {
      -1.6015625, -3.71875, -2.484375, -3.71875, -0.1201171875, 3.6875, 3.4375, 5.15625, 1.359375, -1.046875,
      -2.765625, -2.125, -3.203125, -1.71875, -0.87890625, -3.328125, -0.240234375, 1.640625, 5.03125, 3.0, 2.71875,
      -3.078125, -5.1875, -2.796875, -2.40625, -0.8828125, 0.71875, -1.6796875, 0.55859375, 5.03125, 2.59375,
      3.15625, -0.5234375, -5.1875, -3.59375, -4.125,
    },
  },
}

T.test("Conv1D under mixed_bfloat16 gives Keras's outputs, kernel and input gradients bit for bit (causal; strides 2, same; valid)", function()
  with_policy("mixed_bfloat16", function()
    local x = pattern({ 2, 9, 3 }, 37, 101, 25.0)
    for name, opts in pairs { causal = { padding = "causal" }, same2 = { padding = "same", strides = 2 } } do
      opts.activation = "relu"
      local c = nn.Conv1D(4, 3, opts)
      c(x)
      c.kernel:assign(pattern({ 3, 3, 4 }, 53, 97, 60.0))
      c.bias:assign(pattern({ 4 }, 29, 89, 90.0))
      local tape = autograd.GradientTape()
      local y
      local s = tape:record(function() y = c(x); return y:astype("float32"):sum() end)
      T.eq(y.dtype, "bfloat16", name)
      local g = tape:gradient(s, c.kernel)
      same_as_keras(y, CONV1D_BF16_REF[name].y, name .. " output")
      same_as_keras(g, CONV1D_BF16_REF[name].dkernel, name .. " kernel gradient")
    end
    -- its input gradient: col2im's float32 sums rounded once (11-19 of 66
    -- values one bfloat16 step off when the patches' gradient was rounded first)
    same_input_grads(nn.Conv1D, { 2, 11, 3 }, { 3, 3, 5 }, CONV1D_BF16_DX_REF)
  end)
end)

-- the child of the test after it: a half Conv2D on the lowering (cpu:1, which
-- counts its kernels), the kernel calls of the forward and of the gradient
if arg[1] == "conv_lowering_counts" then
  ldist.config.cpu_devices(2)
  mixed_precision.set_global_policy("mixed_bfloat16")
  local s = distribute.MirroredStrategy { devices = { "cpu:1" } }
  local c
  local x = tensor.normal(3, 9, 8, 5):astype("bfloat16"):to("cpu:1")
  do
    local _ <close> = s:scope()
    c = nn.Conv2D(7, 3, { activation = "relu" })
    c(x)
  end
  local v = tensor.Variable(x)
  local k0 = ldist._distribute.kernel_calls()
  local tape = autograd.GradientTape()
  local l = tape:record(function() return c(v:astype("bfloat16")):astype("float32"):sum() end)
  local k1 = ldist._distribute.kernel_calls()
  local g = tape:gradient(l, { v })
  local k2 = ldist._distribute.kernel_calls()
  for _, k in ipairs { "im2col", "col2im", "conv2d", "conv2d_backward", "copy_strided", "bias_relu", "binary", "unary", "reduce" } do
    print(("%s %d %d"):format(k, (k1[k] or 0) - (k0[k] or 0), (k2[k] or 0) - (k1[k] or 0)))
  end
  print("dx " .. g[1].dtype)
  os.exit(0)
end

T.test("Conv2D under mixed_bfloat16 gives Keras's outputs and kernel gradient bit for bit", conv_check)

T.test("... and so does the im2col lowering with its half product (a GPU's path; LDIST_CONV_REFERENCE=1 on the CPU)", function()
  local bin = os.getenv("LDIST_BIN") or "./ldist"
  local p = io.popen(("LDIST_CONV_REFERENCE=1 %s %s conv_lowering 2>&1"):format(bin, arg[0]))
  local out = p:read("a")
  local ok = p:close()
  T.ok(ok and out:find("conv_lowering ok", 1, true), out)
end)

-- the kernel calls of conv_lowering_counts (env: the child's environment):
-- out, and calls(kernel) -> forward, backward counts
local function conv_counts(env)
  local bin = os.getenv("LDIST_BIN") or "./ldist"
  local p = io.popen(("%s %s %s conv_lowering_counts 2>&1"):format(env, bin, arg[0]))
  local out = p:read("a")
  T.ok(p:close(), out)
  return out, function(k)
    local f, b = out:match("\n" .. k .. " (%d+) (%d+)")
    T.ok(f, k .. " counted: " .. out)
    return tonumber(f), tonumber(b)
  end
end

-- A half Conv2D's kernel calls (forward, backward), on the lowering a GPU
-- runs and on the CPU's direct kernels. Casts: the input's astype, the
-- kernel's (and on the direct kernels the bias's) cast to bfloat16, the
-- loss's astype, forward; their gradients and the sum's broadcast backward,
-- and on the direct kernels one more copy. The lowering's bias and relu are
-- one bias_relu kernel on the half product, the float32 bias rounded inside
-- it and its gradient one reduction rounded once and written in float32
-- (before: the bias's cast, a half add and a half relu, forward; the bias
-- gradient's sum rounded in a copy, then widened in another, backward: 4
-- casts forward and 6 backward). Before: the lowering cast x to float32 and the patches to
-- bfloat16 (backward nine copies: the patches' gradient widened for col2im,
-- x's rounded after it, the bias gradient's sum widening its half input
-- first); the direct kernels took x, w and b widened to float32 and y was
-- rounded after them (8 casts forward, 9 backward: dy widened, dx, dw, db
-- rounded in copies of their own).
for _, c in ipairs {
  { "the lowering's im2col gathers the half input as it is and col2im rounds its float32 sums once: no casts of x or of the patches",
    "LDIST_CONV_REFERENCE=1", { im2col = { 1, 0 }, col2im = { 0, 1 }, conv2d = { 0, 0 }, conv2d_backward = { 0, 0 },
      bias_relu = { 1, 0 }, binary = { 0, 0 }, unary = { 0, 0 }, reduce = { 1, 1 } },
    { 3, 4 } },
  { "the CPU's direct convolution reads and writes the half tensors themselves: no widened x, w or b, no rounded copy of y or of the gradients",
    "", { im2col = { 0, 0 }, col2im = { 0, 0 }, conv2d = { 1, 0 }, conv2d_backward = { 0, 1 }, bias_relu = { 0, 0 } },
    { 4, 5 } },
} do
  T.test(c[1], function()
    local out, calls = conv_counts(c[2])
    for k, want in pairs(c[3]) do
      local f, b = calls(k)
      T.eq(f, want[1], k .. " calls in the forward: " .. out)
      T.eq(b, want[2], k .. " calls in the gradient: " .. out)
    end
    local fcp, bcp = calls("copy_strided")
    T.eq(fcp, c[4][1], "casts in the forward: " .. out)
    T.eq(bcp, c[4][2], "casts in the gradient: " .. out)
    T.ok(out:find("dx float32", 1, true), "the variable's gradient in float32: " .. out)
  end)
end

-- conv_values from a child (env: its environment): its rows {key, values}
-- and the bfloat16 product path it took
local function conv_values(env)
  local bin = os.getenv("LDIST_BIN") or "./ldist"
  local p = io.popen(("%s %s %s conv_values 2>&1"):format(env, bin, arg[0]))
  local out = p:read("a")
  T.ok(p:close(), out)
  local rows = {}
  for line in out:gmatch("[^\n]+") do
    local key, vals = line:match("^(mixed_%S+ %S+ %S+) (.*)$")
    if key then rows[#rows + 1] = { key, vals } end
  end
  T.eq(#rows, 38, "every output and gradient printed")
  return rows, out:match("\nbf16_path (%S+)")
end

-- on AVX512_BF16 (this machine's EPYC) both paths take bfloat16 pairs
-- (vdpbf16ps: the direct kernels' pair tiles, the lowering's ld_gemm_bf16);
-- with LDIST_NO_AVX512_BF16=1 both the float32 tiles and sgemm
-- two children's conv_values rows compared value by value: infs and NaNs
-- the same, every other value within one step of its half dtype (each is a
-- float32 sum rounded once; two orders of the sum may round apart), and at
-- least 98% of them the same bits (a gradient rounded twice was 15-35% off).
-- only: a pattern the rows' keys must match. Returns the counts.
local function close_rows(ra, rb, what, only)
  local compared, differ, specials = 0, 0, 0
  T.eq(#ra, #rb, what .. ": rows")
  for i, r in ipairs(ra) do
    local l = rb[i] or {}
    T.eq(r[1], l[1], "the same quantity")
    if not only or r[1]:find(only) then
      local step = r[1]:find("^mixed_bfloat16") and 2 ^ -7 or 2 ^ -10
      local a, b = {}, {}
      for v in r[2]:gmatch("%S+") do a[#a + 1] = v end
      for v in (l[2] or ""):gmatch("%S+") do b[#b + 1] = v end
      T.eq(#a, #b, r[1])
      for j = 1, #a do
        local x, y = tonumber(a[j]), tonumber(b[j])
        if not x or not y or x ~= x or y ~= y or math.abs(x) == math.huge or math.abs(y) == math.huge then
          T.eq(a[j], b[j], ("%s [%d]: the same special value (%s)"):format(r[1], j, what))
          specials = specials + 1
        else
          T.ok(math.abs(x - y) <= step * math.max(math.abs(x), math.abs(y)),
            ("%s [%d]: %s and %s more than one step apart (%s)"):format(r[1], j, a[j], b[j], what))
          compared = compared + 1
          if x ~= y then differ = differ + 1 end
        end
      end
    end
  end
  T.ok(differ <= compared * 0.02, ("%s: %d of %d values differ"):format(what, differ, compared))
  io.write(("# %s: %d of %d values differ (the sums' order), %d infs and NaNs alike\n"):format(what, differ, compared, specials))
  return compared, differ, specials
end

-- on AVX512_BF16 (this machine's EPYC) both paths take bfloat16 pairs
-- (vdpbf16ps: the direct kernels' pair tiles, the lowering's ld_gemm_bf16);
-- with LDIST_NO_AVX512_BF16=1 both the float32 tiles and sgemm
for _, env in ipairs { "", "LDIST_NO_AVX512_BF16=1" } do
  T.test(("the direct convolution under a half policy gives the lowering's numbers%s: outputs, dx, kernel and bias gradients, with infs, NaNs and subnormals")
    :format(env ~= "" and " (" .. env .. ")" or ""), function()
    local direct, lowered = conv_values(env), conv_values(env .. " LDIST_CONV_REFERENCE=1")
    local compared, _, specials = close_rows(direct, lowered, "direct and lowered")
    T.ok(compared > 10000, "values compared: " .. compared)
    T.ok(specials >= 100, "the values reach infs and NaNs: " .. specials)
  end)
end

T.test("a bfloat16 Conv2D takes vdpbf16ps's pairs on AVX512_BF16 (forward, dx, dw), float32 tiles with LDIST_NO_AVX512_BF16=1: the two within one bfloat16 step", function()
  local pairs_rows, pairs_path = conv_values("")
  local plain_rows, plain_path = conv_values("LDIST_NO_AVX512_BF16=1")
  local f = io.open("/proc/cpuinfo")
  local has = f and f:read("a"):find("avx512_bf16", 1, true) ~= nil
  if f then f:close() end
  T.eq(pairs_path, has and "avx512_bf16" or "float32", "the path chosen on this processor")
  T.eq(plain_path, "float32", "with LDIST_NO_AVX512_BF16=1")
  local compared = close_rows(pairs_rows, plain_rows, "pairs and float32 tiles", "^mixed_bfloat16")
  T.ok(compared > 5000, "values compared: " .. compared)
end)

for _, c in ipairs {
  { "mixed_bfloat16", "bfloat16", 2 ^ -8 }, { "mixed_float16", "float16", 2 ^ -11 },
  { "mixed_bfloat16", "bfloat16", 2 ^ -8, true }, { "mixed_float16", "float16", 2 ^ -11, true },
} do
  T.test(("Conv2D + MaxPool2D%s under %s: the fused pair gives the two layers' output and gradients")
    :format(c[4] and " (pools of 3 at stride 1, overlapping)" or "", c[1]), function()
    local r = conv_pool_pair(c[1], c[4])
    local f, l = r.fused, r.layers
    T.eq(f.y.dtype, c[2]); T.eq(l.y.dtype, c[2])
    T.eq(table.concat(f.y.shape, "x"), c[4] and "6x13x14x18" or "6x7x8x18")
    T.ok(f.y:astype("float32"):max():item() > 0, "some outputs above zero")
    same_as_keras(f.y, l.y:astype("float32"):reshape(-1):totable(), "output", "two layers")
    same_as_keras(f.dx, l.dx:reshape(-1):totable(), "input gradient", "two layers")
    same_as_keras(f.dk, l.dk:reshape(-1):totable(), "kernel gradient", "two layers")
    T.eq(f.dk.dtype, "float32"); T.eq(f.db.dtype, "float32")
    T.ok((f.dk:abs():sum():item()) > 0, "a kernel gradient")
    local fd, ld = f.db:totable(), l.db:totable()
    for i = 1, #ld do
      T.ok(math.abs(fd[i] - ld[i]) <= c[3] * math.abs(ld[i]) * 2, ("bias gradient [%d]: %.9g and %.9g"):format(i, fd[i], ld[i]))
    end
  end)
end

T.test("... and is one op under mixed_bfloat16: no max pooling kernel runs (LDIST_KERNEL_PROFILE)", function()
  local bin = os.getenv("LDIST_BIN") or "./ldist"
  local p = io.popen(("LDIST_KERNEL_PROFILE=1 %s %s pair_profile 2>&1"):format(bin, arg[0]))
  local out = p:read("a")
  T.ok(p:close(), out)
  T.ok(out:find("conv2d ", 1, true), "the convolution ran: " .. out)
  T.ok(out:find("conv2d_backward", 1, true), "and its gradient: " .. out)
  local function calls(kernel) return tonumber(out:match("\n%s*" .. kernel .. "%s+(%d+)") or 0) end
  -- the child ran the pair fused twice (the call that built it, then with a
  -- tape), then as two layers: three convolutions, one pooling kernel and
  -- one pooling gradient, the two layers' alone
  T.eq(calls("conv2d"), 3, "convolutions: " .. out)
  T.eq(calls("maxpool"), 1, "max pooling kernels: " .. out)
  T.eq(calls("maxpool_backward"), 1, "max pooling gradients: " .. out)
end)

-- scripts/fixtures/make_loss_scale_fixture.py, ln_bf16: LayerNormalization on a float32 2x3x8
local LN_BF16_REF = {
  -0.78515625, -0.1845703125, 1.0, -0.376953125, -0.326171875, 1.3515625, -1.328125, 1.015625,
  -0.87109375, 0.2158203125, 2.03125, -0.10009765625, 0.53125, -0.07470703125, -0.62890625, 1.1328125,
  -1.0703125, 1.1171875, -3.796875, 0.5390625, 2.421875, 0.326171875, 0.94140625, 0.48046875,
  -1.1796875, 1.5859375, -2.828125, 0.8828125, -3.921875, 0.55078125, 1.765625, 0.58984375,
  -1.4140625, -1.15625, -0.76953125, 1.5703125, -2.09375, 1.0078125, -3.03125, 0.81640625,
  -1.5234375, -0.6796875, 0.2353515625, -0.80859375, -1.1640625, 1.2265625, -2.203125, 0.9296875,
}

T.test("LayerNormalization under mixed_bfloat16 takes a float32 input as it is (Keras's autocast = False): Keras's numbers bit for bit", function()
  with_policy("mixed_bfloat16", function()
    local x = pattern({ 2, 3, 8 }, 41, 103, 9.0)
    local ln = nn.LayerNormalization()
    ln(x)
    ln.gamma:assign(pattern({ 8 }, 5, 11, 4.0) + 1)
    ln.beta:assign(pattern({ 8 }, 7, 13, 5.0))
    local y = ln(x)
    T.eq(y.dtype, "bfloat16")
    same_as_keras(y, LN_BF16_REF, "output")
    T.eq(ln(x:astype("bfloat16")).dtype, "bfloat16", "a bfloat16 input is taken as it is too")
  end)
end)

T.test("LossScaleOptimizer: skips a step on inf or NaN and halves the scale, grows after N good steps (Keras 3.15.1)", function()
  local v = tensor.Variable({ 1.0, 2.0 })
  local opt = mp.LossScaleOptimizer(optim.SGD(0.1))
  T.eq(opt.dynamic_scale, 2 ^ 15); T.eq(opt.dynamic_growth_steps, 2000)
  T.ok(rawequal(opt.inner_optimizer, opt))
  for i, g in ipairs { { math.huge, 1 }, { 0 / 0, 1 }, { 8192, 16384 } } do
    opt:apply_gradients({ tensor.new(g) }, { v })
    local want = LOSS_SCALE_REF.skip[i]
    T.eq(opt.dynamic_scale, want[1], "scale after step " .. i)
    local vt = v:totable()
    T.near(vt[1], want[2][1], 1e-6); T.near(vt[2], want[2][2], 1e-6)
    T.eq(opt.iterations, want[3], "iterations after step " .. i)
  end
  local v2 = tensor.Variable({ 1.0 })
  local o2 = mp.LossScaleOptimizer(optim.SGD(0.1), { initial_scale = 8, dynamic_growth_steps = 2 })
  for i, g in ipairs { 1, 1, 1, math.huge, 1, 1, 1 } do
    o2:apply_gradients({ tensor.new({ g }) }, { v2 })
    T.eq(o2.dynamic_scale, LOSS_SCALE_REF.growth[i][1], "scale after step " .. i)
    T.near(v2:item(), LOSS_SCALE_REF.growth[i][2], 1e-6)
  end
  T.eq(o2:scale_loss(tensor.new(1.5)):item(), 24)
  T.eq(optim.SGD():scale_loss(3), 3, "an optimizer without loss scaling leaves the loss as it is")
  -- a fixed scale (TF's dynamic=False): unscaled, never changed
  local v3 = tensor.Variable({ 1.0 })
  local o3 = mp.LossScaleOptimizer(optim.SGD(0.5), { dynamic = false, initial_scale = 4 })
  for _ = 1, 3 do o3:apply_gradients({ tensor.new({ 4 }) }, { v3 }) end
  T.eq(o3.dynamic_scale, 4); T.near(v3:item(), -0.5, 1e-6)
  -- clipnorm clips the unscaled gradients (Keras: the inner optimizer sees them unscaled)
  local v4 = tensor.Variable({ 0.0, 0.0 })
  local o4 = mp.LossScaleOptimizer(optim.SGD { learning_rate = 1, clipnorm = 1 }, { initial_scale = 4 })
  o4:apply_gradients({ tensor.new({ 12, 16 }) }, { v4 })   -- 4 x {3, 4}: norm 5, clipped to 1
  local t4 = v4:totable()
  T.near(t4[1], -0.6, 1e-6); T.near(t4[2], -0.8, 1e-6)
  T.raises(function() mp.LossScaleOptimizer({}) end, "bad argument #1 to 'LossScaleOptimizer' (an optimizer expected")
  T.raises(function() mp.LossScaleOptimizer(optim.SGD(), { initial_scal = 2 }) end, "unknown option 'initial_scal'")
  local err = T.raises(function() mp.LossScaleOptimizer(optim.SGD(), { initial_scale = -1 }) end,
    "initial_scale must be a positive finite number")
  -- at the caller's line, as the Lua-side checks (not inside the prelude's wrapper)
  T.ok(err:match("test_mixed_precision%.lua:%d+: bad argument #2") and not err:find("prelude", 1, true), err)
  T.raises(function() mp.LossScaleOptimizer(optim.SGD(), { dynamic_growth_steps = 0 }) end,
    "dynamic_growth_steps must be a positive integer")
end)

T.test("fit under mixed_float16 scales the loss; an inf loss skips the step, weights unchanged, scale halved", function()
  with_policy("mixed_float16", function()
    tensor.seed(8)
    local m = nn.Sequential { nn.Dense(8, "tanh"), nn.Dense(3) }
    m:compile { optimizer = optim.SGD(0.1), loss = losses.SparseCategoricalCrossentropy { from_logits = true } }
    local opt = m._optimizer
    T.eq(opt.dynamic_scale, 2 ^ 15, "compile wrapped the optimizer (Keras's Trainer.compile)")
    local x, y = tensor.normal(12, 5), tensor.new({ 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2 }):astype("int64")
    m:build { 5 }
    local before = {}
    for i, w in ipairs(m.trainable_variables) do before[i] = w:clone() end
    -- a sample weight of inf makes the loss, and so every gradient, non-finite
    local wl = {}
    for i = 1, 12 do wl[i] = i == 1 and math.huge or 1 end
    local w = tensor.new(wl)
    m:train_step(x, y, m._loss, opt, w)
    T.eq(opt.dynamic_scale, 2 ^ 14); T.eq(opt.iterations, 0)
    for i, v in ipairs(m.trainable_variables) do T.eq((v - before[i]):abs():max():item(), 0, "weight " .. i .. " unchanged") end
    -- a good step: the update is of the unscaled gradients (the same as float32 SGD's within float16 rounding)
    local lv = m:train_step(x, y, m._loss, opt)
    T.eq(opt.iterations, 1)
    T.ok(lv < 10, ("the loss reported is unscaled: %g"):format(lv))
    local moved = (m.trainable_variables[1] - before[1]):abs():max():item()
    T.ok(moved > 1e-4 and moved < 0.5, ("an SGD(0.1) step moved the kernel by %g"):format(moved))
    -- model:save keeps the loss scale where it is (Keras saves dynamic_scale and step_counter)
    local path = T.tmpdir() .. "/lso.safetensors"
    m:save(path)
    local back = nn.load_model(path)._optimizer
    T.eq(back.dynamic_scale, 2 ^ 14); T.eq(back.dynamic_growth_steps, 2000)
    T.eq(ldist.optim._loss_scale(back).good_steps, 1)
    -- mixed_bfloat16 needs no loss scaling: compile leaves the optimizer as it is
    mp.set_global_policy("mixed_bfloat16")
    local m2 = nn.Sequential { nn.Dense(2) }
    m2:compile { optimizer = "sgd", loss = "mse" }
    T.eq(m2._optimizer.dynamic_scale, nil)
  end)
end)

T.test("mixed_bfloat16 on the logical device cpu:1 gives cpu:0's numbers", function()
  ldist.config.cpu_devices(2)
  local function train(dev)
    tensor.seed(9)
    local x, y = tensor.normal(32, 6), tensor.normal(32, 2)
    local s = dev and distribute.OneDeviceStrategy(dev) or distribute.get_strategy()
    local m
    s:scope(function()
      m = nn.Sequential { nn.Dense(8, "relu"), nn.Dense(2) }
      m:compile { optimizer = optim.Adam(0.01), loss = "mse" }
    end)
    local h = m:fit(x, y, { epochs = 3, batch_size = 8, verbose = 0 })
    return h.loss[3], m.trainable_variables[1]:cpu()
  end
  with_policy("mixed_bfloat16", function()
    local l0, w0 = train(nil)
    local l1, w1 = train("cpu:1")
    T.near(l1, l0, 1e-6)
    T.eq((w1 - w0):abs():max():item(), 0)
  end)
end)

-- every strategy but ParameterServer is in tests/conformance (loop_loss_scale_skip);
-- there the workers check and unscale their own steps before pushing
T.test("ParameterServerStrategy: a worker skips (pushes nothing for) a step whose gradients are not finite", function()
  with_policy("mixed_float16", function()
    local D = distribute
    local lc = D.LocalCluster { workers = 1, ps = 1 }
    local ok, err = pcall(function()
      local s = D.ParameterServerStrategy(lc)
      tensor.seed(1)
      local xl = tensor.normal(48, 4):totable()
      xl[1][1] = math.huge                    -- the first batch's loss is not finite
      local ds = data.Dataset.from_tensor_slices(tensor.new(xl), tensor.normal(48, 2)):batch(8)
      local m
      s:scope(function()
        m = nn.Sequential { nn.Dense(4, "relu"), nn.Dense(2) }
        m:compile { optimizer = optim.SGD(0.01), loss = "mse" }
      end)
      m:fit(ds, { epochs = 1, steps_per_epoch = 6, verbose = 0 })
      T.eq(m._optimizer.iterations, 5, "6 steps, 1 skipped: the ps tasks applied 5 pushes")
      for _, v in ipairs(m.trainable_variables) do
        local c = v:cpu()
        T.eq((c - c):abs():sum():item(), 0, v.name .. " is finite")
      end
    end)
    lc:shutdown()
    if not ok then error(err, 0) end
  end)
end)

T.done()
