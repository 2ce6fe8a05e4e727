-- test_layers_shape.lua - Embedding, AveragePooling2D, GlobalAveragePooling2D,
-- Conv1D, Add, Multiply, Concatenate (Keras 3): values against loops in Lua,
-- gradients, variables, configs and errors.
local T = dofile("tests/lua/testlib.lua")

local function flat(t) return t:reshape(t:numel()):totable() end
local function shape(t) return table.concat(t.shape, "x") end
local function close_all(got, want, tol, what)
  T.eq(#got, #want, what .. ": size")
  for i = 1, #want do T.near(got[i], want[i], tol, what .. "[" .. i .. "]") end
end
local function roundtrip(l)
  local c = l:get_config()
  local l2 = nn.layer_from_config{ class_name = l.class_name, config = c }
  T.eq(l2.class_name, l.class_name)
  T.eq(ldist.json.encode(l2:get_config()), ldist.json.encode(c), l.class_name .. " config")
  return c
end
local function grads(f, xs)
  local vs = {}
  for i, x in ipairs(xs) do vs[i] = tensor.Variable(x) end
  local tape = autograd.GradientTape()
  local y
  local loss = tape:record(function() y = f(vs); return (y * y):sum() * 0.5 end)   -- dloss/dy = y
  return y, tape:gradient(loss, vs)
end

---------------------------------------------------------------- Embedding
T.test("Embedding: variable, rows picked for ids of any shape and length", function()
  tensor.seed(1)
  local e = nn.Embedding(10, 4)
  T.eq(e.class_name, "Embedding")
  local ids = tensor.new({ { 1, 2, 9 }, { 0, 9, 1 } }, { dtype = "int64" })
  local y = e(ids)
  T.eq(shape(y), "2x3x4")
  T.eq(#e.weights, 1); T.eq(e.weights[1].name, e.name .. "/embeddings")
  T.eq(shape(e.embeddings), "10x4"); T.eq(e.embeddings.trainable, true)
  T.ok(e.embeddings:abs():max():item() <= 0.05, "uniform(-0.05, 0.05)")
  T.ok(e.embeddings:abs():max():item() > 0.01, "not zeros")
  local tab, yv, iv = flat(e.embeddings), flat(y), flat(ids)
  for k = 1, #iv do
    for d = 1, 4 do T.eq(yv[(k - 1) * 4 + d], tab[iv[k] * 4 + d], "row of id " .. iv[k]) end
  end
  -- another sequence length, int32 ids, and float ids that are whole numbers
  T.eq(shape(e(tensor.new({ { 3, 4, 5, 6, 7 } }, { dtype = "int32" }))), "1x5x4")
  local yf = e(tensor.new({ { 2, 3 } }))
  T.eq(yf.dtype, "float32")
  close_all(flat(yf), { tab[9], tab[10], tab[11], tab[12], tab[13], tab[14], tab[15], tab[16] }, 0, "float ids")
  T.raises(function() return e(tensor.new({ { 1.5, 2 } })) end, "embedding takes integer ids; got the float32 value 1.5")
  T.raises(function() return e(tensor.new({ { 10, 2 } }, { dtype = "int64" })) end, "10")
  -- ids [batch] only
  local e1 = nn.Embedding(5, 2)
  T.eq(shape(e1(tensor.new({ 0, 4, 4 }, { dtype = "int64" }))), "3x2")
end)

T.test("Embedding gradient: repeated ids add up; config; errors", function()
  local e = nn.Embedding(4, 2)
  e(tensor.new({ { 0 } }, { dtype = "int64" }))
  e.embeddings:assign(tensor.new({ { 1, 2 }, { 3, 4 }, { 5, 6 }, { 7, 8 } }))
  local ids = tensor.new({ { 1, 1, 3 } }, { dtype = "int64" })
  local tape = autograd.GradientTape()
  local loss = tape:record(function() return e(ids):sum() end)
  close_all(flat(tape:gradient(loss, { e.embeddings })[1]), { 0, 0, 2, 2, 0, 0, 1, 1 }, 0, "d embeddings")
  local c = roundtrip(nn.Embedding(100, 8))
  T.eq(c.input_dim, 100); T.eq(c.output_dim, 8)
  T.raises(function() return nn.Embedding(10) end, "output_dim is required")
  T.raises(function() return nn.Embedding(0, 3) end, "input_dim and output_dim must be positive")
  T.raises(function() return nn.Embedding(10, 3, { mask_zeros = true }) end, "unknown option 'mask_zeros'")
end)

---------------------------------------------------------------- pooling
-- average pooling of a flat NHWC array by loops (TF's same padding; padded cells left out)
local function avgpool_ref(xv, n, h, w, c, k, s, same)
  local oh, ow, pt, pl
  if same then
    oh, ow = (h + s - 1) // s, (w + s - 1) // s
    pt = math.max((oh - 1) * s + k - h, 0) // 2
    pl = math.max((ow - 1) * s + k - w, 0) // 2
  else
    oh, ow, pt, pl = (h - k) // s + 1, (w - k) // s + 1, 0, 0
  end
  local out = {}
  for b = 0, n - 1 do for i = 0, oh - 1 do for j = 0, ow - 1 do for ch = 0, c - 1 do
    local sum, cnt = 0, 0
    for di = 0, k - 1 do for dj = 0, k - 1 do
      local y, x = i * s - pt + di, j * s - pl + dj
      if y >= 0 and y < h and x >= 0 and x < w then
        sum = sum + xv[((b * h + y) * w + x) * c + ch + 1]; cnt = cnt + 1
      end
    end end
    out[#out + 1] = sum / cnt
  end end end end
  return out, oh, ow
end

T.test("AveragePooling2D valid and same, strided, against loops; gradient", function()
  tensor.seed(2)
  local x = tensor.normal(2, 7, 6, 3)
  local xv = flat(x)
  for _, cs in ipairs({ { 2, nil, "valid" }, { 3, 2, "valid" }, { 2, nil, "same" }, { 3, 2, "same" }, { 3, 1, "same" } }) do
    local k, s, pad = cs[1], cs[2] or cs[1], cs[3]
    local l = nn.AveragePooling2D(k, { strides = cs[2], padding = pad })
    local y = l(x)
    local want, oh, ow = avgpool_ref(xv, 2, 7, 6, 3, k, s, pad == "same")
    local what = ("avgpool k%d s%d %s"):format(k, s, pad)
    T.eq(shape(y), ("2x%dx%dx3"):format(oh, ow), what)
    close_all(flat(y), want, 1e-5, what)
  end
  T.eq(nn.AvgPool2D(2).class_name, "AveragePooling2D")
  -- any image size once built
  local p = nn.AveragePooling2D(2)
  p(tensor.ones(1, 4, 4, 1))
  T.eq(shape(p(tensor.ones(1, 8, 6, 1))), "1x4x3x1")
  -- gradient: each input cell gets 1/4 of its window's gradient (non-overlapping 2x2)
  local v = tensor.Variable(tensor.ones(1, 4, 4, 1))
  local tape = autograd.GradientTape()
  local loss = tape:record(function() return (p(v) * tensor.new({ 1, 2, 3, 4 }):reshape(1, 2, 2, 1)):sum() end)
  local g = flat(tape:gradient(loss, { v })[1])
  close_all(g, { 0.25, 0.25, 0.5, 0.5, 0.25, 0.25, 0.5, 0.5, 0.75, 0.75, 1, 1, 0.75, 0.75, 1, 1 }, 1e-6, "d avgpool")
  local c = roundtrip(nn.AveragePooling2D(3, { strides = 2, padding = "same" }))
  T.eq(table.concat(c.pool_size, ","), "3,3"); T.eq(table.concat(c.strides, ","), "2,2"); T.eq(c.padding, "same")
  roundtrip(nn.AveragePooling2D())
  T.raises(function() return nn.AveragePooling2D(2, { padding = "causal" }) end, "unknown padding 'causal'")
  T.raises(function() return nn.AveragePooling2D(0) end, "must be positive")
  T.raises(function() return nn.AveragePooling2D(2)(tensor.ones(2, 4, 4)) end,
    "average_pooling2d")
  T.raises(function() return nn.AveragePooling2D(2)(tensor.ones(2, 4, 4)) end, "needs images [batch, height, width, channels]")
end)

T.test("GlobalAveragePooling2D: mean over height and width, keepdims, any size", function()
  tensor.seed(3)
  local x = tensor.normal(2, 3, 5, 4)
  local xv = flat(x)
  local want = {}
  for b = 0, 1 do for ch = 0, 3 do
    local s = 0
    for i = 0, 14 do s = s + xv[(b * 15 + i) * 4 + ch + 1] end
    want[#want + 1] = s / 15
  end end
  local g = nn.GlobalAveragePooling2D()
  local y = g(x)
  T.eq(shape(y), "2x4")
  close_all(flat(y), want, 1e-5, "gap")
  T.eq(shape(g(tensor.ones(3, 7, 2, 4))), "3x4")
  local gk = nn.GlobalAveragePooling2D{ keepdims = true }
  local yk = gk(x)
  T.eq(shape(yk), "2x1x1x4")
  close_all(flat(yk), want, 1e-5, "gap keepdims")
  local _, gr = grads(function(v) return g(v[1]) end, { x })
  local gv = flat(gr[1])
  for i = 1, #gv, 5 do
    local b, ch = (i - 1) // 60, (i - 1) % 4
    T.near(gv[i], want[b * 4 + ch + 1] / 15, 1e-5, "d gap")
  end
  T.eq(roundtrip(gk).keepdims, true)
  T.raises(function() return nn.GlobalAveragePooling2D{ keepdim = true } end, "unknown option 'keepdim'")
  T.raises(function() return g(tensor.ones(2, 4, 4, 5)) end, "global_average_pooling2d")
  T.raises(function() return nn.GlobalAveragePooling2D()(tensor.ones(2, 4)) end, "needs images")
end)

---------------------------------------------------------------- Conv1D
-- y[b, t, f] = bias[f] + sum_{d, c} xpad[b, t*s + d, c] * k[d, c, f]
local function conv1d_ref(xv, n, L, C, kv, K, F, bv, s, pad)
  local left, Lp = 0, L
  local out_len
  if pad == "causal" then left = K - 1; out_len = (L - 1) // s + 1
  elseif pad == "same" then out_len = (L + s - 1) // s; left = math.max((out_len - 1) * s + K - L, 0) // 2
  else out_len = (L - K) // s + 1 end
  local out = {}
  for b = 0, n - 1 do for t = 0, out_len - 1 do for f = 0, F - 1 do
    local acc = bv and bv[f + 1] or 0
    for d = 0, K - 1 do
      local p = t * s + d - left
      if p >= 0 and p < Lp then
        for c = 0, C - 1 do acc = acc + xv[(b * L + p) * C + c + 1] * kv[(d * C + c) * F + f + 1] end
      end
    end
    out[#out + 1] = acc
  end end end
  return out, out_len
end

T.test("Conv1D valid / same / causal, strided, against a loop; kernel [k, C, filters]", function()
  tensor.seed(4)
  local x = tensor.normal(2, 9, 3)
  local xv = flat(x)
  for _, cs in ipairs({ { 3, 1, "valid" }, { 3, 2, "valid" }, { 4, 1, "same" }, { 3, 2, "same" }, { 3, 1, "causal" },
                        { 2, 3, "causal" }, { 1, 1, "causal" } }) do
    local K, s, pad = cs[1], cs[2], cs[3]
    local l = nn.Conv1D(5, K, { strides = s, padding = pad })
    local y = l(x)
    l.bias:assign(tensor.new({ 0.1, -0.2, 0.3, 0, 1 }))
    y = l(x)
    T.eq(shape(l.kernel), ("%dx3x5"):format(K)); T.eq(shape(l.bias), "5")
    local want, ol = conv1d_ref(xv, 2, 9, 3, flat(l.kernel), K, 5, flat(l.bias), s, pad)
    local what = ("conv1d k%d s%d %s"):format(K, s, pad)
    T.eq(shape(y), ("2x%dx5"):format(ol), what)
    close_all(flat(y), want, 1e-4, what)
  end
  -- glorot_uniform kernel: limit sqrt(6 / (k*C + k*F))
  local l = nn.Conv1D(8, 3, { activation = "relu", use_bias = false })
  local y = l(tensor.normal(2, 6, 4))
  T.eq(#l.weights, 1); T.eq(l.weights[1].name, l.name .. "/kernel")
  T.ok(l.kernel:abs():max():item() <= math.sqrt(6 / (12 + 24)) + 1e-6, "glorot bound")
  T.eq((y - y:relu()):abs():sum():item(), 0, "relu")
  -- any length once built
  T.eq(shape(l(tensor.normal(1, 11, 4))), "1x9x8")
end)

T.test("Conv1D causal: output step t does not see input steps after t; gradients against a loop", function()
  tensor.seed(5)
  local l = nn.Conv1D(2, 3, { padding = "causal" })
  local x = tensor.normal(1, 6, 2)
  local y1 = flat(l(x))
  local x2 = x + tensor.new({ { { 0, 0 }, { 0, 0 }, { 0, 0 }, { 0, 0 }, { 0, 0 }, { 100, 0 } } })   -- the last step only
  local y2 = flat(l(x2))
  for i = 1, 5 * 2 do T.eq(y2[i], y1[i], "steps before the change") end
  T.ok(math.abs(y2[11] - y1[11]) > 1, "the last step changes")
  -- d/dkernel of 0.5*sum(y^2) = sum_t xpad[t + d, c] * y[t, f]
  local kv0 = flat(l.kernel)
  local xv = flat(x)
  local yv, gr = grads(function(v) return l(v[1]) end, { x })
  yv = flat(yv)
  local tape = autograd.GradientTape()
  local loss = tape:record(function() local yy = l(x); return (yy * yy):sum() * 0.5 end)
  local gk = flat(tape:gradient(loss, { l.kernel })[1])
  for d = 0, 2 do for c = 0, 1 do for f = 0, 1 do
    local s = 0
    for t = 0, 5 do
      local p = t + d - 2
      if p >= 0 then s = s + xv[p * 2 + c + 1] * yv[t * 2 + f + 1] end
    end
    T.near(gk[(d * 2 + c) * 2 + f + 1], s, 1e-4, "d kernel")
  end end end
  -- dx[p, c] = sum_{t, f} y[t, f] * k[p - t + 2, c, f]
  local gx = flat(gr[1])
  for p = 0, 5 do for c = 0, 1 do
    local s = 0
    for t = 0, 5 do for f = 0, 1 do
      local d = p - t + 2
      if d >= 0 and d <= 2 then s = s + yv[t * 2 + f + 1] * kv0[(d * 2 + c) * 2 + f + 1] end
    end end
    T.near(gx[p * 2 + c + 1], s, 1e-4, "dx")
  end end
end)

T.test("Conv1D config and errors", function()
  local c = roundtrip(nn.Conv1D(4, 5, { strides = 2, padding = "causal", activation = "tanh", use_bias = false }))
  T.eq(c.filters, 4); T.eq(table.concat(c.kernel_size, ","), "5"); T.eq(table.concat(c.strides, ","), "2")
  T.eq(c.padding, "causal"); T.eq(c.activation, "tanh"); T.eq(c.use_bias, false)
  T.eq(nn.Conv1D(2, { 3 }).kernel_size[1], 3)
  T.raises(function() return nn.Conv1D(4) end, "kernel_size is required")
  T.raises(function() return nn.Conv2D(4) end, "nn.Conv2D: kernel_size is required")   -- as Keras (it was 3 by default)
  T.raises(function() return nn.Conv1D(4, 3, { padding = "full" }) end, "unknown padding 'full' (valid|same|causal)")
  T.raises(function() return nn.Conv1D(4, { 3, 3 }) end, "kernel_size takes 1 integer")
  T.raises(function() return nn.Conv1D(4, 3, { dilation = 2 }) end, "unknown option 'dilation'")
  T.raises(function() return nn.Conv1D(0, 3) end, "must be positive")
  T.raises(function() return nn.Conv1D(4, 3)(tensor.ones(2, 5, 5, 1)) end, "needs sequences [batch, steps, channels]; got inputs of shape batchx5x5x1")
  local l = nn.Conv1D(4, 3)
  l(tensor.ones(2, 5, 3))
  T.raises(function() return l(tensor.ones(2, 5, 2)) end, "expects inputs of shape batchx5x3")
end)

---------------------------------------------------------------- merging
T.test("Add and Multiply: values and gradients of 2 and 3 inputs", function()
  tensor.seed(6)
  local a, b, c = tensor.normal(3, 4), tensor.normal(3, 4), tensor.normal(3, 4)
  local av, bv, cv = flat(a), flat(b), flat(c)
  local y, g = grads(function(v) return nn.Add()({ v[1], v[2], v[3] }) end, { a, b, c })
  local want = {}
  for i = 1, 12 do want[i] = av[i] + bv[i] + cv[i] end
  close_all(flat(y), want, 1e-6, "add")
  for k = 1, 3 do close_all(flat(g[k]), want, 1e-6, "d add input " .. k) end   -- dy/dx = 1, dloss/dy = y
  y, g = grads(function(v) return nn.Multiply()({ v[1], v[2], v[3] }) end, { a, b, c })
  for i = 1, 12 do want[i] = av[i] * bv[i] * cv[i] end
  close_all(flat(y), want, 1e-5, "multiply")
  local ga = {}
  for i = 1, 12 do ga[i] = want[i] * bv[i] * cv[i] end
  close_all(flat(g[1]), ga, 1e-4, "d multiply input 1")
  for i = 1, 12 do ga[i] = want[i] * av[i] * bv[i] end
  close_all(flat(g[3]), ga, 1e-4, "d multiply input 3")
  -- two inputs; any length once built (the inputs still agree with each other)
  local add = nn.Add()
  close_all(flat(add({ tensor.new({ { 1, 2 } }), tensor.new({ { 10, 20 } }) })), { 11, 22 }, 0, "add 2")
  local seq = nn.Multiply()
  T.eq(shape(seq({ tensor.ones(2, 5, 3), tensor.ones(2, 5, 3) })), "2x5x3")
  T.eq(shape(seq({ tensor.ones(2, 7, 3), tensor.ones(2, 7, 3) })), "2x7x3")
  roundtrip(nn.Add()); roundtrip(nn.Multiply())
end)

T.test("Add / Multiply errors name the shapes", function()
  T.raises(function() return nn.Add()({ tensor.ones(2, 3), tensor.ones(2, 4) }) end,
    "needs inputs of the same shape; got batchx3, batchx4")
  T.raises(function() return nn.Multiply()({ tensor.ones(2, 3), tensor.ones(2, 3), tensor.ones(2, 3, 1) }) end,
    "got batchx3, batchx3, batchx3x1")
  local m = nn.Multiply()
  m({ tensor.ones(2, 5, 3), tensor.ones(2, 5, 3) })
  T.raises(function() return m({ tensor.ones(2, 5, 3), tensor.ones(2, 6, 3) }) end, "got batchx5x3, batchx6x3")
  T.raises(function() return nn.Add()({ tensor.ones(2, 3), tensor.ones(3, 3) }) end, "same batch size; got 2x3, 3x3")
  T.raises(function() return nn.Add()({ tensor.ones(2, 3) }) end, "takes 2 to 8 inputs, got 1")
  T.raises(function() return nn.Add()(tensor.ones(2, 3)) end, "takes 2 to 8 inputs, got 1")
  T.raises(function() return nn.Add{ axis = 1 } end, "unknown option 'axis'")
end)

T.test("Concatenate: last axis, axis=1 (counted with the batch), 3 inputs; gradients split back", function()
  local a = tensor.new({ { { 1, 2 }, { 3, 4 } } })               -- 1x2x2
  local b = tensor.new({ { { 5 }, { 6 } } })                      -- 1x2x1
  local y = nn.Concatenate()({ a, b })
  T.eq(shape(y), "1x2x3")
  close_all(flat(y), { 1, 2, 5, 3, 4, 6 }, 0, "concat -1")
  local c = tensor.new({ { { 7, 8 } } })                          -- 1x1x2
  local y1 = nn.Concatenate{ axis = 1 }({ a, c, a })
  T.eq(shape(y1), "1x5x2")
  close_all(flat(y1), { 1, 2, 3, 4, 7, 8, 1, 2, 3, 4 }, 0, "concat axis 1")
  T.eq(shape(nn.Concatenate(2)({ a, b })), "1x2x3")
  T.eq(shape(nn.Concatenate(-2)({ a, c })), "1x3x2")
  -- gradients: each input gets its block of dloss/dy = y
  local yy, g = grads(function(v) return nn.Concatenate{ axis = 1 }({ v[1], v[2] }) end, { a, c })
  T.eq(shape(yy), "1x3x2")
  close_all(flat(g[1]), { 1, 2, 3, 4 }, 0, "d concat input 1")
  close_all(flat(g[2]), { 7, 8 }, 0, "d concat input 2")
  -- integer inputs become float32
  T.eq(nn.Concatenate()({ tensor.ones(2, 1, { dtype = "int64" }), tensor.ones(2, 2) }).dtype, "float32")
  -- any size on the concatenated axis once built, and on the others if they agree
  local cat = nn.Concatenate()
  cat({ tensor.ones(2, 4, 3), tensor.ones(2, 4, 1) })
  T.eq(shape(cat({ tensor.ones(2, 6, 2), tensor.ones(2, 6, 5) })), "2x6x7")
  local cfg = roundtrip(nn.Concatenate{ axis = 1 })
  T.eq(cfg.axis, 1)
  T.eq(nn.Concatenate():get_config().axis, -1)
end)

T.test("Concatenate errors name the shapes and the axis", function()
  T.raises(function() return nn.Concatenate()({ tensor.ones(2, 3, 4), tensor.ones(2, 5, 4) }) end,
    "needs inputs equal on every axis but axis -1; got batchx3x4, batchx5x4")
  T.raises(function() return nn.Concatenate{ axis = 1 }({ tensor.ones(2, 3, 4), tensor.ones(2, 5, 2) }) end,
    "equal on every axis but axis 1; got batchx3x4, batchx5x2")
  T.raises(function() return nn.Concatenate{ axis = 0 }({ tensor.ones(2, 3), tensor.ones(2, 3) }) end,
    "batch axis is axis 0 and cannot be concatenated")
  T.raises(function() return nn.Concatenate{ axis = 3 }({ tensor.ones(2, 3), tensor.ones(2, 3) }) end,
    "axis 3 is out of range for inputs with 2 axes")
  T.raises(function() return nn.Concatenate()({ tensor.ones(2, 3), tensor.ones(4, 3) }) end,
    "needs inputs of the same batch size; got 2x3, 4x3")
  T.raises(function() return nn.Concatenate()({ tensor.ones(2, 3), tensor.ones(2, 3, 1) }) end, "batchx3, batchx3x1")
  T.raises(function() return nn.Concatenate{ axes = 1 } end, "unknown option 'axes'")
  local many = {}
  for i = 1, 9 do many[i] = tensor.ones(1, 1) end
  T.raises(function() return nn.Concatenate()(many) end, "at most 8 inputs")
end)

T.test("Rescaling, and Sequential built from a leading nn.Input (Keras)", function()
  -- Keras: Rescaling(1/255, offset=-1)([[0, 255, 51]]) -> [[-1, 0, -0.8]], float32 from uint8 too
  local r = nn.Rescaling(1 / 255, { offset = -1 })
  local y = r(tensor.from({ { 0, 255, 51 } }, { dtype = "uint8" }))
  T.eq(y.dtype, "float32")
  local v = y:reshape(-1):totable()
  T.near(v[1], -1, 1e-6); T.near(v[2], 0, 1e-6); T.near(v[3], -0.8, 1e-6)
  T.eq(r:get_config().offset, -1)
  T.raises(function() nn.Rescaling() end, "scale")
  -- Keras: Sequential([Input((4,)), Dense(3), Dense(1)]) is built: 19 params before any call
  local m = nn.Sequential { nn.Input { shape = { 4 } }, nn.Rescaling(0.5), nn.Dense(3), nn.Dense(1) }
  T.eq(m.built, true); T.eq(#m.weights, 4)
  T.eq(m.weights[1].shape[1], 4)
  T.eq(nn.model_from_json(m:to_json()).layers[1]:get_config().scale, 0.5)
  -- tf.data's reduce: range(5).reduce(0, lambda s, x: s + x) -> 10 (int64)
  local total = data.Dataset.range(5):reduce(tensor.from(0, { dtype = "int64" }), function(acc, x) return acc + x end)
  T.eq(total.dtype, "int64"); T.eq(total:item(), 10)
  T.raises(function() data.Dataset.range(2):reduce(0, function() end) end, "returned nothing")
end)

T.test("GlobalMaxPooling2D, GlobalAveragePooling1D and GlobalMaxPooling1D, as Keras's", function()
  tensor.seed(4)
  local x = tensor.normal(2, 3, 3, 4)
  local y = nn.GlobalMaxPooling2D()(x)
  T.eq(table.concat(y.shape, "x"), "2x4")
  T.near((y - x:reshape(2, 9, 4):max(1)):abs():max():item(), 0, 0)
  T.eq(table.concat(nn.GlobalMaxPooling2D{ keepdims = true }(x).shape, "x"), "2x1x1x4")
  local s = tensor.normal(2, 5, 3)
  T.near((nn.GlobalAveragePooling1D()(s) - s:mean(1)):abs():max():item(), 0, 0)
  T.near((nn.GlobalMaxPooling1D()(s) - s:max(1)):abs():max():item(), 0, 0)
  T.eq(table.concat(nn.GlobalAveragePooling1D{ keepdims = true }(s).shape, "x"), "2x1x3")
  T.eq(table.concat(nn.GlobalMaxPooling1D()(tensor.normal(2, 9, 3)).shape, "x"), "2x3", "any number of steps")
  T.raises(function() return nn.GlobalAveragePooling1D()(tensor.normal(2, 3)) end,
    "needs sequences [batch, steps, features]; got inputs of shape batchx3")
  T.raises(function() return nn.GlobalMaxPooling2D()(tensor.normal(2, 3, 4)) end, "needs images")
  -- Keras's bag-of-words classifier: Embedding, GlobalAveragePooling1D, Dense; it learns
  -- whether id 7 occurs in a sequence, and the max pooling's gradient reaches the embedding too
  local rows, labels = {}, {}
  for i = 1, 256 do
    local r, has = {}, i % 2 == 0
    for j = 1, 10 do r[j] = (i * 7 + j * 13) % 20 + 8 end   -- ids 8..27, never 7
    if has then r[(i % 10) + 1] = 7 end
    rows[i], labels[i] = r, has and 1 or 0
  end
  local ids, ys = tensor.new(rows, { dtype = "int64" }), tensor.new(labels):reshape(256, 1)
  for _, pool in ipairs({ "GlobalAveragePooling1D", "GlobalMaxPooling1D" }) do
    tensor.seed(2)
    local m = nn.Sequential{ nn.Embedding(30, 8), nn[pool](), nn.Dense(1, "sigmoid") }
    m:compile{ optimizer = optim.Adam(0.05), loss = "binary_crossentropy", metrics = { "accuracy" } }
    local h = m:fit(ids, ys, { epochs = 15, batch_size = 32, verbose = 0 })
    T.ok(h.history.accuracy[15] > 0.95, pool .. ": it learns (accuracy " .. h.history.accuracy[15] .. ")")
    local m2 = nn.model_from_json(m:to_json())
    T.eq(m2.layers[2].class_name, pool)
  end
end)

T.test("Keras's shape layers and merges name what is wrong (values: the Keras fixtures)", function()
  T.raises(function() return nn.ZeroPadding2D { 1, 2, 3 } end, "takes 1, 2 (height, width) or 4 (top, bottom, left, right) numbers, got 3")
  T.raises(function() return nn.Cropping2D(-1) end, "amounts must be 0 or more")
  T.raises(function() return nn.Cropping2D(2)(tensor.ones(1, 4, 4, 1)) end, "crops away every row or column")
  T.raises(function() return nn.ZeroPadding2D(1)(tensor.ones(2, 4, 4)) end,
    "needs images [batch, height, width, channels]; got inputs of shape batchx4x4 (one channel: add a channel axis with nn.Reshape{4, 4, 1})")
  T.raises(function() return nn.Permute { 1, 1 } end, "Permute dims must order the axes 1..2")
  T.raises(function() return nn.Permute { 2, 1 }(tensor.ones(2, 3, 4, 5)) end, "orders 2 axes, but its inputs batchx3x4x5 have 3")
  T.raises(function() return nn.RepeatVector(2)(tensor.ones(2, 3, 4)) end, "needs vectors [batch, features]")
  T.raises(function() return nn.MaxPooling1D(2)(tensor.ones(2, 3)) end, "needs sequences [batch, steps, channels]")
  T.raises(function() return nn.MaxPooling1D(2, { padding = "causal" }) end, "unknown padding 'causal' (valid|same)")
  T.raises(function() return nn.Subtract() { tensor.ones(2, 3), tensor.ones(2, 3), tensor.ones(2, 3) } end, "takes 2 inputs, got 3")
  T.raises(function() return nn.Average() { tensor.ones(2, 3), tensor.ones(2, 4) } end, "needs inputs of the same shape")
  -- configs round-trip
  for _, l in ipairs { nn.ZeroPadding2D { 1, 2 }, nn.Cropping2D { 1, 0, 2, 1 }, nn.UpSampling2D { 2, 3 }, nn.RepeatVector(4),
                       nn.Permute { 2, 1 }, nn.MaxPooling1D(3, { strides = 1 }), nn.AveragePooling1D(2, { padding = "same" }),
                       nn.Subtract(), nn.Average(), nn.Maximum(), nn.Minimum() } do
    local c = l:get_config()
    local l2 = nn.layer_from_config { class_name = l.class_name, config = c }
    T.eq(ldist.json.encode(l2:get_config()):gsub('"name":"[^"]*",?', ""), ldist.json.encode(c):gsub('"name":"[^"]*",?', ""),
      l.class_name .. " config")
  end
end)

T.done()
