-- test_emu_extra.lua - harder shapes for the kernels the GPU suite reaches
-- with small ones, run by tests/cuda_emu/run.sh on the emulated cuda:0 before
-- the suite (and checkable on a logical CPU device: LDIST_GPU_TEST_DEVICE=cpu:1
-- ./ldist tests/cuda_emu/test_emu_extra.lua). Device against CPU, as
-- tests/ops/test_ops.lua does: fused attention over several query and key
-- tiles (t, s not multiples of 64 or 32, causal with offsets of both signs,
-- rows that see no key) in float32, float16 and bfloat16; the unfused path's
-- masked softmax on long rows (512 threads a row); long-row softmax, layer
-- norm and reductions; the two-pass column sums; grid-stride loops past
-- 65536 blocks; half elementwise ops on special values. (Nonzero causal
-- offsets are C-only: test_attn_offsets.c.)
local G = dofile("tests/ops/devlib.lua")
local T, dev = G.T, G.dev
local HALF_TOL = { float16 = 1e-5, bfloat16 = 1e-4 }

tensor.seed(11)

-- y and the gradients of q, k, v of sum(attention(q, k, v) * w); fused: the
-- mode of ldist.config.fused_attention; d: the device (nil: the CPU); half: cast q, k, v
local function attn(xs, w, causal, fused, d, half)
  local vs = {}
  for i, x in ipairs(xs) do vs[i] = tensor.Variable(d and x:to(d) or x) end
  local was = ldist.config.fused_attention(fused and "on" or "off")
  local tape = autograd.GradientTape()
  local y
  local loss = tape:record(function()
    local ins = {}
    for i, v in ipairs(vs) do ins[i] = half and v:astype(half) or v end
    y = tensor.attention(ins[1], ins[2], ins[3], { causal = causal })
    return (y:astype("float32") * (d and w:to(d) or w)):sum()
  end)
  ldist.config.fused_attention(was)
  return y:astype("float32"), tape:gradient(loss, vs)
end

local shapes = {   -- batch, t, s, width, causal
  { 3, 130, 200, 64, false },
  { 2, 129, 129, 32, true },
  { 4, 65, 33, 16, true },     -- t > s: every query sees a key (offset 0)
  { 1, 1, 300, 16, false },
  { 2, 200, 70, 64, true },
  { 5, 64, 64, 16, true },
  { 2, 33, 97, 32, false },
}

T.test("fused attention, several tiles, float32: device (fused) against the CPU (unfused)", function()
  for _, sh in ipairs(shapes) do
    local b, t, s, e, causal = table.unpack(sh)
    local what = ("fused attention %dx%dx%dx%d%s"):format(b, t, s, e, causal and " causal" or "")
    local xs = { tensor.normal(b, t, e), tensor.normal(b, s, e), tensor.normal(b, s, e) }
    local w = tensor.normal(b, t, e)
    local yd, gd = attn(xs, w, causal, true, dev)
    local yc, gc = attn(xs, w, causal, false, nil)
    G.close(yd, yc, what .. " forward", 1e-9)
    for i = 1, 3 do G.close(gd[i], gc[i], ("%s gradient %d"):format(what, i), 1e-8) end
  end
end)

T.test("fused attention, several tiles, float16/bfloat16: device (fused) against the CPU (unfused, same dtype)", function()
  for _, sh in ipairs(shapes) do
    local b, t, s, e, causal = table.unpack(sh)
    for dt, tol in pairs(HALF_TOL) do
      local what = ("fused attention %dx%dx%dx%d%s %s"):format(b, t, s, e, causal and " causal" or "", dt)
      local xs = { tensor.normal(b, t, e):astype(dt):astype("float32"), tensor.normal(b, s, e):astype(dt):astype("float32"),
        tensor.normal(b, s, e):astype(dt):astype("float32") }
      local w = tensor.normal(b, t, e)
      local yd, gd = attn(xs, w, causal, true, dev, dt)
      local yc, gc = attn(xs, w, causal, false, nil, dt)
      G.close(yd, yc, what .. " forward", tol)
      for i = 1, 3 do G.close(gd[i], gc[i], ("%s gradient %d"):format(what, i), tol) end
    end
  end
end)

T.test("unfused attention with long rows (masked softmax with 128 and 512 threads), causal and not", function()
  for _, sh in ipairs({ { 2, 5, 2100, 16, true }, { 2, 7, 300, 8, false }, { 1, 40, 2500, 4, false } }) do
    local b, t, s, e, causal = table.unpack(sh)
    local what = ("attention %dx%dx%dx%d%s"):format(b, t, s, e, causal and " causal" or "")
    local xs = { tensor.normal(b, t, e), tensor.normal(b, s, e), tensor.normal(b, s, e) }
    local w = tensor.normal(b, t, e)
    local yd, gd = attn(xs, w, causal, false, dev)
    local yc, gc = attn(xs, w, causal, false, nil)
    G.close(yd, yc, what .. " forward", 1e-9)
    for i = 1, 3 do G.close(gd[i], gc[i], ("%s gradient %d"):format(what, i), 1e-8) end
  end
end)

-- MultiHeadAttention with use_causal_mask (Keras' mask: query i sees keys
-- j <= i, offset 0) on cross-attention shapes over several tiles
local function mha_check(name, make, xs, tol, fused)
  local s = distribute.MirroredStrategy { devices = { dev } }
  tensor.seed(5)
  local ld = make()
  do
    local _ <close> = s:scope()
    ld({ xs[1]:to(dev), xs[2]:to(dev) })
  end
  tensor.seed(5)
  local lc = make()
  lc({ xs[1], xs[2] })
  local function run(layer, ins)
    local vs = {}
    for i, x in ipairs(ins) do vs[i] = tensor.Variable(x) end
    local tape = autograd.GradientTape()
    local y = tape:record(function() return layer({ vs[1], vs[2] }) end)
    tensor.seed(9)
    local w = tensor.normal(table.unpack(y.shape))
    if y.device ~= "cpu:0" then w = w:to(y.device) end
    local loss = tape:record(function() return (y * w):sum() end)
    local vars = { vs[1], vs[2] }
    for _, t in ipairs(layer.trainable_variables) do vars[#vars + 1] = t end
    return y, tape:gradient(loss, vars)
  end
  local was = ldist.config.fused_attention(fused and "on" or "off")
  local yd, gd = run(ld, { xs[1]:to(dev), xs[2]:to(dev) })
  ldist.config.fused_attention("off")
  local yc, gc = run(lc, xs)
  ldist.config.fused_attention(was)
  G.close(yd, yc, name .. " forward", tol)
  local ss, n = 0, 0
  for i = 1, #gc do ss = ss + (gc[i] * gc[i]):sum():item(); n = n + gc[i]:numel() end
  for i = 1, #gc do G.close(gd[i], gc[i], ("%s gradient %d"):format(name, i), tol * 10, ss / n) end
end

T.test("MultiHeadAttention causal cross-attention, several tiles (fused and not)", function()
  for _, fused in ipairs({ true, false }) do
    local f = fused and "fused " or ""
    mha_check(f .. "mha causal T > S (150 queries, 70 keys, width 32)",
      function() return nn.MultiHeadAttention(2, 32, { use_causal_mask = true }) end,
      { tensor.normal(2, 150, 16), tensor.normal(2, 70, 16) }, 1e-9, fused)
    mha_check(f .. "mha causal T < S (70 queries, 150 keys, width 64)",
      function() return nn.MultiHeadAttention(2, 64, { use_causal_mask = true }) end,
      { tensor.normal(2, 70, 16), tensor.normal(2, 150, 16) }, 1e-9, fused)
    mha_check(f .. "mha causal T > S (100 queries, 33 keys, width 16)",
      function() return nn.MultiHeadAttention(3, 16, { use_causal_mask = true }) end,
      { tensor.normal(1, 100, 8), tensor.normal(1, 33, 8) }, 1e-9, fused)
  end
end)

T.test("long rows: softmax, log_softmax, layer norm, reductions; two-pass column sums", function()
  local x = tensor.normal(3, 5000) * 4
  local g, c = G.both(function(t) return t:softmax() end, x)
  G.close(g, c, "softmax 5000 columns", 1e-9)
  g, c = G.both(function(t) return t:log_softmax() end, x)
  G.close(g, c, "log_softmax 5000 columns", 1e-9)
  for _, shp in ipairs({ { 6000, 5 }, { 3, 4100, 7 }, { 2, 70000 }, { 9, 2049, 2 } }) do
    local y = tensor.normal(table.unpack(shp))
    for axis = 0, #shp - 1 do
      for _, op in ipairs({ "sum", "max" }) do
        g, c = G.both(function(t) return t[op](t, axis) end, y)
        G.close(g, c, ("%s axis %d of %s"):format(op, axis, table.concat(shp, "x")), 1e-9)
      end
      g, c = G.both(function(t) return t:argmax(axis) end, y)
      G.same(g, c, ("argmax axis %d of %s"):format(axis, table.concat(shp, "x")))
    end
  end
  -- sums down long columns, wide: the chunked two-pass path up to 512 column tiles
  -- (a bias gradient of 2048+ columns over a large batch), and past it (one pass)
  for _, shp in ipairs({ { 4096, 2100 }, { 2500, 9000 }, { 2048, 16400 } }) do
    local y = tensor.normal(table.unpack(shp))
    g, c = G.both(function(t) return t:sum(0) end, y)
    G.close(g, c, ("sum axis 0 of %s"):format(table.concat(shp, "x")), 1e-9)
  end
end)

-- whole long rows summed (the loss, a gradient's squared norm): split into
-- chunks over many blocks, the chunks added in order
T.test("sums of long rows: a tensor over all its axes, few rows of 70000+", function()
  for _, shp in ipairs({ { 300000 }, { 3, 100000 }, { 1, 65536 }, { 511, 66000 } }) do
    local y = tensor.normal(table.unpack(shp))
    local g, c = G.both(function(t) return t:sum() end, y)
    G.close(g, c, ("sum of all of %s"):format(table.concat(shp, "x")), 1e-9)
    if #shp == 2 then
      g, c = G.both(function(t) return t:sum(1) end, y)
      G.close(g, c, ("sum axis 1 of %s"):format(table.concat(shp, "x")), 1e-9)
    end
  end
end)

-- the LossScaleOptimizer's check for infs, one count per gradient in one
-- vector on the device: an inf far into a large gradient (past the first
-- chunks of the long-row sums), or in the last of several, skips the step
-- and halves the scale; finite gradients update, and the variables equal the CPU's
T.test("LossScaleOptimizer on the device: an inf deep in a large gradient skips the step", function()
  local function run(d, bad_at)
    local w1 = tensor.Variable(tensor.ones(400, 500):to(d)) -- 200000 values
    local w2 = tensor.Variable(tensor.ones(7):to(d))
    local opt = optim.SGD { learning_rate = 0.5 }
    mixed_precision.LossScaleOptimizer(opt, { initial_scale = 8 })
    local g1 = tensor.full({ 400, 500 }, 0.25 * 8)
    local g2 = tensor.full({ 7 }, 8.0)
    if bad_at == 1 then g1 = g1:reshape { 200000 }; g1 = (g1 + tensor.new({ math.huge }):reshape { 1 } * (tensor.arange(200000):eq(199999):astype("float32"))):reshape { 400, 500 } end
    if bad_at == 2 then g2 = g2 + tensor.new({ 0 / 0, 0, 0, 0, 0, 0, 0 }) end
    opt:apply_gradients({ g1:to(d), g2:to(d) }, { w1, w2 })
    return w1, w2, opt.dynamic_scale, opt.iterations
  end
  for bad_at = 0, 2 do
    local a1, a2, as, ai = run(dev, bad_at)
    local b1, b2, bs, bi = run("cpu:0", bad_at)
    T.eq(as, bs, "the scale after the step")
    T.eq(ai, bi, "the iterations after the step")
    T.eq(as, bad_at == 0 and 8 or 4, "the scale: kept, or halved on a non-finite gradient")
    G.close(a1, b1, "w1", 0)
    G.close(a2, b2, "w2", 0)
    T.eq(b2:totable()[1], bad_at == 0 and 0.5 or 1, "w2 updated, or not")
  end
end)

T.test("normalization layers on long rows and long columns", function()
  for _, cs in ipairs({ { "layernorm 4 x 5000", function() return nn.LayerNormalization() end, { 4, 5000 }, false },
                        { "batchnorm 5000 x 3 training", function() return nn.BatchNormalization() end, { 5000, 3 }, true },
                        { "batchnorm 3000 x 70 training", function() return nn.BatchNormalization() end, { 3000, 70 }, true } }) do
    local x = tensor.normal(table.unpack(cs[3])) * 2 + 1
    local s = distribute.MirroredStrategy { devices = { dev } }
    tensor.seed(5)
    local ld = cs[2]()
    do
      local _ <close> = s:scope()
      ld(x:to(dev))
    end
    tensor.seed(5)
    local lc = cs[2]()
    lc(x)
    local function run(layer, xin)
      local v = tensor.Variable(xin)
      local tape = autograd.GradientTape()
      local y = tape:record(function() return layer(v, { training = cs[4] }) end)
      tensor.seed(9)
      local w = tensor.normal(table.unpack(y.shape))
      if y.device ~= "cpu:0" then w = w:to(y.device) end
      local loss = tape:record(function() return (y * w):sum() end)
      local vars = { v }
      for _, t in ipairs(layer.trainable_variables) do vars[#vars + 1] = t end
      return y, tape:gradient(loss, vars)
    end
    local yd, gd = run(ld, x:to(dev))
    local yc, gc = run(lc, x)
    G.close(yd, yc, cs[1] .. " forward", 1e-9)
    for i = 1, #gc do G.close(gd[i], gc[i], ("%s gradient %d"):format(cs[1], i), 1e-8) end
  end
end)

T.test("past 65536 blocks of 256 threads: the grid-stride loops (unary, binary, fill, cast)", function()
  local n = 65536 * 256 + 1000
  local x = tensor.uniform(n, { min = -1, max = 1 })
  local g, c = G.both(function(t) return t:exp() end, x)
  G.close(g, c, "exp of 2^24 + 1000 elements", 1e-12)
  g, c = G.both(function(t) return t * 3 - t end, x)
  G.close(g, c, "x * 3 - x of 2^24 + 1000 elements", 1e-12)
  g, c = G.both(function(t) return t:astype("bfloat16") end, x)
  G.same(g, c, "cast to bfloat16 of 2^24 + 1000 elements")
  G.same(tensor.full({ n }, 3, { device = dev }), tensor.full({ n }, 3), "full of 2^24 + 1000 elements")
end)

T.test("float16/bfloat16 elementwise ops on special values are the CPU's bits", function()
  local vals = { 0, -0.0, 1, -1, 0.5, 65504, 70000, -70000, 1e-8, -1e-8, 3.0e38, 1 / 0, -1 / 0, 0 / 0, 2.5, 1e-3, 6e-5 }
  local a = tensor.new(vals)
  local b = tensor.new({ 2, 3, -0.5, 1e-4, 7, 0.25, -2, 1, 1e4, 3, 2, 1 / 0, 1, 5, -3, 0 / 0, 1e-3 })
  for _, dt in ipairs({ "float16", "bfloat16" }) do
    local ah, bh = a:astype(dt), b:astype(dt)
    for _, op in ipairs(tensor.binary_ops) do
      local g, c = G.both(function(x, y) return x[op](x, y) end, ah, bh)
      G.same(g, c, op .. " " .. dt .. " on special values")
    end
    for _, op in ipairs(tensor.unary_ops) do
      local g, c = G.both(function(x) return x[op](x) end, ah)
      G.close(g, c, op .. " " .. dt .. " on special values", 1e-6)
    end
  end
end)

T.done()
