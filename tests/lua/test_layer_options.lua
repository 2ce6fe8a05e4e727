-- test_layer_options.lua - the layers' per-weight options (kernel_initializer,
-- kernel_regularizer, kernel_constraint, ... and activity_regularizer) against
-- Keras 3: the numbers in tests/fixtures/layer_options_keras.lua were made by
-- scripts/fixtures/make_layer_options_fixtures.py with the same weights, data
-- and options (see there for the setup).
local T = dofile("tests/lua/testlib.lua")
local K = dofile("tests/fixtures/layer_options_keras.lua")

local function stats(t)
  local flat = t:reshape { t:numel() }:totable()
  local s, mn, mx = 0, math.huge, -math.huge
  for _, v in ipairs(flat) do s = s + v; mn = math.min(mn, v); mx = math.max(mx, v) end
  local mean, ss = s / #flat, 0
  for _, v in ipairs(flat) do ss = ss + (v - mean) ^ 2 end
  return mean, math.sqrt(ss / #flat), mn, mx, #flat
end

-- the setup of the fixtures: weights from sin(), rows from cos()
local function det(n, off)
  local t = {}
  for i = 0, n - 1 do t[i + 1] = math.sin(i * 0.37 + off) * 0.5 end
  return tensor.new(t)
end
local function data(rows)
  local X, Y = {}, {}
  for r = 0, rows - 1 do
    X[r + 1] = {}
    for c = 0, 5 do X[r + 1][c + 1] = math.cos(r * 0.7 + c * 1.3) end
    Y[r + 1] = (r * 7 + r // 3) % 3
  end
  return tensor.new(X), tensor.new(Y, { dtype = "int64" })
end
local function set_det(m)
  m:set_weights({ det(30, 0):reshape { 6, 5 }, det(5, 1), det(15, 2):reshape { 5, 3 }, det(3, 3) })
end
local function close_lists(got, want, tol, what)
  T.eq(#got, #want, what .. ": count")
  for i = 1, #want do T.near(got[i], want[i], tol, ("%s[%d]"):format(what, i)) end
end
local function weights_match(m, want, tol)
  for i, w in ipairs(m:get_weights()) do close_lists(w:reshape { w:numel() }:totable(), want[i], tol, "weight " .. i) end
end

local function reg_model(reg)
  local inp = nn.Input { shape = { 6 } }
  local h = nn.Dense { units = 5, activation = "tanh",
    kernel_regularizer = reg and regularizers.L2(0.01) or nil, bias_regularizer = reg and regularizers.L1(0.02) or nil,
    activity_regularizer = reg and regularizers.L1L2(0.01, 0.01) or nil }(inp)
  local o = nn.Dense { units = 3, kernel_regularizer = reg and regularizers.L1L2 { l1 = 0.005, l2 = 0.01 } or nil }(h)
  local m = nn.Model { inputs = inp, outputs = o }
  return m
end

T.test("initializers: mean and std of a 400x300 kernel as Keras's, within sampling error", function()
  tensor.seed(5)
  for name, want in pairs(K.init) do
    local d = nn.Dense { units = 300, kernel_initializer = name }
    d(tensor.zeros(1, 400))
    local mean, std, mn, mx, n = stats(d.kernel)
    -- both sides are samples: the difference of two means has std sigma * sqrt(2 / n)
    local se = want[2] * math.sqrt(2 / n)
    T.ok(math.abs(mean - want[1]) <= 6 * se + 1e-7, ("%s: mean %.6g, Keras %.6g (6 se = %.3g)"):format(name, mean, want[1], 6 * se))
    T.ok(math.abs(std - want[2]) <= 0.02 * want[2] + 1e-7, ("%s: std %.6g, Keras %.6g"):format(name, std, want[2]))
    if name:match("uniform") or name:match("truncated") or name:match("_normal") and name ~= "random_normal" then
      -- bounded draws: the same bounds (uniform limits, truncation at 2 std)
      T.ok(mx <= want[4] * 1.001 + 1e-7 and mx >= want[4] * 0.97, ("%s: max %.6g, Keras %.6g"):format(name, mx, want[4]))
      T.ok(mn >= want[3] * 1.001 - 1e-7 and mn <= want[3] * 0.97, ("%s: min %.6g, Keras %.6g"):format(name, mn, want[3]))
    end
  end
end)

T.test("initializer objects: a seed repeats its values; parameters and other roles", function()
  local function kernel(opt, shape)
    local d = nn.Dense { units = shape[2], kernel_initializer = opt }
    d(tensor.zeros(1, shape[1]))
    return d.kernel
  end
  local a = kernel(nn.initializers.HeNormal { seed = 3 }, { 20, 10 })
  local b = kernel(nn.initializers.HeNormal { seed = 3 }, { 20, 10 })
  local c = kernel(nn.initializers.HeNormal { seed = 4 }, { 20, 10 })
  T.eq((a - b):abs():max():item(), 0, "same seed, same values")
  T.ok((a - c):abs():max():item() > 0, "another seed, other values")
  local mean, std = stats(kernel(nn.initializers.RandomNormal { mean = 1, stddev = 0.1, seed = 1 }, { 200, 100 }))
  T.near(mean, 1, 0.01); T.near(std, 0.1, 0.03)
  mean, std = stats(kernel(nn.initializers.Constant(0.25), { 3, 4 }))
  T.eq(mean, 0.25); T.eq(std, 0)
  local q = kernel(nn.initializers.Orthogonal { gain = 2 }, { 6, 4 })
  local qtq = q:transpose(0, 1):matmul(q):totable()
  for i = 1, 4 do for j = 1, 4 do T.near(qtq[i][j], i == j and 4 or 0, 1e-5, "Q^T Q = gain^2 I") end end
  -- the other roles
  local lstm = nn.LSTM { units = 3, recurrent_initializer = "zeros", bias_initializer = "ones", kernel_initializer = "ones" }
  lstm(tensor.zeros(2, 4, 5))
  T.eq(lstm.recurrent_kernel:abs():sum():item(), 0)
  T.eq(lstm.kernel:min():item(), 1)
  T.eq(lstm.bias:min():item(), 1)
  -- unit_forget_bias: the forget quarter is ones, the others from bias_initializer (Keras)
  local l2 = nn.LSTM { units = 2, bias_initializer = nn.initializers.Constant(0.5) }
  l2(tensor.zeros(1, 3, 2))
  T.eq(table.concat(l2.bias:totable(), ","), "0.5,0.5,1.0,1.0,0.5,0.5,0.5,0.5")
  local gru = nn.GRU { units = 2, recurrent_initializer = "ones" }
  gru(tensor.zeros(1, 3, 2))
  T.eq(gru.recurrent_kernel:min():item(), 1)
  local emb = nn.Embedding { input_dim = 5, output_dim = 3, embeddings_initializer = "ones" }
  emb(tensor.new({ { 1, 2 } }, { dtype = "int64" }))
  T.eq(emb.embeddings:min():item(), 1)
  local c1 = nn.Conv1D { filters = 2, kernel_size = 3, kernel_initializer = "zeros", bias_initializer = "ones" }
  c1(tensor.ones(1, 5, 2))
  T.eq(c1.kernel:abs():sum():item(), 0); T.eq(c1.bias:min():item(), 1)
  local c2 = nn.Conv2D { filters = 2, kernel_size = 3, kernel_initializer = "ones" }
  c2(tensor.ones(1, 4, 4, 1))
  T.eq(c2.kernel:min():item(), 1)
  local mha = nn.MultiHeadAttention { num_heads = 2, key_dim = 3, kernel_initializer = "zeros", bias_initializer = "ones" }
  mha(tensor.ones(1, 4, 6))
  for _, v in ipairs(mha.trainable_variables) do
    local want = v.name:match("bias$") and 1 or 0
    T.eq(v:min():item(), want, v.name); T.eq(v:max():item(), want, v.name)
  end
end)

T.test("regularizers: model.losses as Keras's (layer by layer: activity, then weights)", function()
  local X = data(8)
  local m = reg_model(true)
  m(X)
  set_det(m)
  m(X)
  local got = {}
  for i, l in ipairs(m.losses) do got[i] = l:item() end
  close_lists(got, K.reg_initial_losses, 1e-5, "model.losses")
  local plain = reg_model(false)
  plain(X)
  T.eq(#plain.losses, 0)
end)

T.test("regularizers: 20 SGD steps give Keras's losses, weights and evaluate loss (and differ from no regularization)", function()
  local X, Y = data(40)
  for _, tag in ipairs({ "reg", "noreg" }) do
    local m = reg_model(tag == "reg")
    m(X)
    set_det(m)
    m:compile { optimizer = optim.SGD(0.1), loss = losses.SparseCategoricalCrossentropy { from_logits = true } }
    m:fit(X, Y, { batch_size = 8, epochs = 4, shuffle = false, verbose = 0 })
    close_lists(m.history.loss, K[tag .. "_history"], 1e-5, tag .. " history")
    weights_match(m, K[tag .. "_final"], 1e-5)
    T.near(m:evaluate(X, Y, { batch_size = 8 }).loss, K[tag .. "_evaluate"], 1e-5, tag .. " evaluate (with model.losses)")
  end
  T.ok(math.abs(K.reg_history[4] - K.noreg_history[4]) > 0.1, "the regularization shows in the loss")
end)

T.test("constraints: MaxNorm, NonNeg, UnitNorm, MinMaxNorm after one step as Keras's", function()
  local X, Y = data(8)
  local inp = nn.Input { shape = { 6 } }
  local h = nn.Dense { units = 5, activation = "tanh", kernel_constraint = constraints.MaxNorm(0.6),
    bias_constraint = "non_neg" }(inp)
  local o = nn.Dense { units = 3, kernel_constraint = constraints.UnitNorm(),
    bias_constraint = constraints.MinMaxNorm(0.1, 0.5, 0.8) }(h)
  local m = nn.Model { inputs = inp, outputs = o }
  m(X)
  set_det(m)
  m:compile { optimizer = optim.SGD(0.5), loss = losses.SparseCategoricalCrossentropy { from_logits = true } }
  m:fit(X, Y, { batch_size = 8, epochs = 1, shuffle = false, verbose = 0 })
  weights_match(m, K.constraint_step, 1e-5)
  -- a custom loop's apply_gradients applies them too (Keras's optimizer.apply)
  local d = nn.Dense { units = 2, bias_constraint = constraints.NonNeg() }
  d(tensor.ones(1, 2))
  local opt = optim.SGD(1)
  opt:apply_gradients({ tensor.zeros(2, 2), tensor.ones(2) }, d.trainable_variables)
  T.eq(d.bias:min():item(), 0)
end)

T.test("get_config, to_json, save and load_model keep the options", function()
  local inp = nn.Input { shape = { 6 } }
  local h = nn.Dense { units = 4, kernel_initializer = nn.initializers.HeNormal { seed = 3 },
    kernel_regularizer = regularizers.L2(0.01), kernel_constraint = constraints.MaxNorm(2),
    activity_regularizer = "l1" }(inp)
  local m = nn.Model { inputs = inp, outputs = nn.Dense { units = 2, bias_regularizer = regularizers.L1(0.5) }(h) }
  local c = m.layers[1]:get_config()
  T.eq(c.kernel_initializer.class_name, K.config.kernel_initializer.class_name)
  T.eq(c.kernel_initializer.config.seed, K.config.kernel_initializer.config.seed)
  T.eq(c.kernel_regularizer.class_name, K.config.kernel_regularizer.class_name)
  T.near(c.kernel_regularizer.config.l2, K.config.kernel_regularizer.config.l2, 1e-12)
  T.eq(c.kernel_constraint.class_name, K.config.kernel_constraint.class_name)
  T.eq(c.kernel_constraint.config.max_value, K.config.kernel_constraint.config.max_value)
  T.eq(c.kernel_constraint.config.axis, K.config.kernel_constraint.config.axis)
  T.eq(c.activity_regularizer.class_name, "L1")
  T.eq(m.layers[1].kernel_regularizer.class_name, "L2")     -- read as the layer's fields too, as Keras's
  T.eq(m.layers[1].bias_regularizer, nil)
  local X = data(4)
  m(X)
  local function losses_of(model)
    model(X)
    local t = {}
    for i, l in ipairs(model.losses) do t[i] = l:item() end
    return t
  end
  T.eq(#losses_of(m), 3, "activity, kernel and bias terms")
  local again = nn.model_from_json(m:to_json())
  again(X)
  again:set_weights(m:get_weights())
  close_lists(losses_of(again), losses_of(m), 1e-6, "model_from_json")
  local path = os.tmpname() .. ".safetensors"
  m:save(path)
  local loaded = nn.load_model(path)
  os.remove(path)
  close_lists(losses_of(loaded), losses_of(m), 1e-6, "load_model")
  T.eq(loaded.layers[1]:get_config().kernel_constraint.class_name, "MaxNorm")
end)

T.test("bad options name the problem", function()
  T.raises(function() return nn.Dense { units = 3, kernel_initialiser = "zeros" } end,
    "unknown option 'kernel_initialiser'; did you mean 'kernel_initializer'?")
  T.raises(function() return nn.Dense { units = 3, kernel_initializer = "he_nromal" } end,
    "nn.Dense: kernel_initializer: unknown initializer 'he_nromal'; did you mean 'he_normal'? (glorot_uniform,")
  T.raises(function() return nn.Dense { units = 3, kernel_constraint = { class_name = "MaxNrom" } } end,
    "unknown constraint 'MaxNrom'; did you mean 'MaxNorm'? (max_norm,")
  T.raises(function() return nn.Dense { units = 3, kernel_regularizer = "xyzzy" } end,
    "unknown regularizer 'xyzzy' (l1, l2, l1_l2, or their Keras class names)")
  T.raises(function() return nn.Dense { units = 3, kernel_regularizer = 0.01 } end,
    "nn.Dense: kernel_regularizer: regularizer name or object expected, got number")
  T.raises(function() return regularizers.L2 { l3 = 1 } end, "regularizer L2 has no option 'l3' (l2)")
  T.raises(function() return regularizers.L2(-1) end, "l2 must be a number >= 0")
  T.raises(function() return constraints.MaxNorm(1, 0, 3) end, "MaxNorm takes at most 2 arguments (max_value, axis), got 3")
  T.raises(function() return nn.Flatten { kernel_initializer = "zeros" } end, "nn.Flatten: unknown option 'kernel_initializer'")
  T.raises(function() return nn.Embedding { input_dim = 3, output_dim = 2, embedding_initializer = "zeros" } end,
    "did you mean 'embeddings_initializer'?")
end)

T.done()
