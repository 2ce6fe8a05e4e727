-- test_layers_norm.lua - BatchNormalization and LayerNormalization (Keras 3):
-- values against loops in Lua, moving statistics, variables, configs, errors,
-- and a small model with batch normalization that learns.
local T = dofile("tests/lua/testlib.lua")
ldist.config.cpu_devices(2)   -- Normalization under MirroredStrategy

local function flat(t) return t:reshape(t:numel()):totable() end
local function shape(t) return table.concat(t.shape, "x") end

-- per-channel (last axis) mean and biased variance of a flat [rows, c] array
local function moments(v, c)
  local rows = #v // c
  local mean, var = {}, {}
  for j = 1, c do
    local s = 0
    for r = 0, rows - 1 do s = s + v[r * c + j] end
    mean[j] = s / rows
    local q = 0
    for r = 0, rows - 1 do q = q + (v[r * c + j] - mean[j]) ^ 2 end
    var[j] = q / rows
  end
  return mean, var
end

T.test("BatchNormalization variables: Keras's names, order, shapes, initializers, trainable flags", function()
  local bn = nn.BatchNormalization()
  T.eq(bn.class_name, "BatchNormalization")
  bn(tensor.ones(2, 5))
  local names = {}
  for i, v in ipairs(bn.weights) do names[i] = v.name; T.eq(shape(v), "5", v.name) end
  T.eq(table.concat(names, ","), "batch_normalization/gamma,batch_normalization/beta,"
    .. "batch_normalization/moving_mean,batch_normalization/moving_variance")
  T.eq(#bn.trainable_variables, 2); T.eq(#bn.non_trainable_variables, 2)
  T.eq(bn.gamma.trainable, true); T.eq(bn.beta.trainable, true)
  T.eq(bn.moving_mean.trainable, false); T.eq(bn.moving_variance.trainable, false)
  T.eq(bn.gamma:sum():item(), 5); T.eq(bn.beta:abs():sum():item(), 0)
  T.eq(bn.moving_mean:abs():sum():item(), 0); T.eq(bn.moving_variance:sum():item(), 5)
  -- center / scale off: no beta / gamma
  local b2 = nn.BatchNormalization{ center = false, scale = false }
  b2(tensor.ones(2, 3))
  T.eq(#b2.weights, 2); T.eq(#b2.trainable_variables, 0)
  T.eq(b2.weights[1].name:match("[^/]+$"), "moving_mean")
  local b3 = nn.BatchNormalization{ center = false }
  b3(tensor.ones(2, 3))
  T.eq(#b3.weights, 3); T.eq(b3.weights[1].name:match("[^/]+$"), "gamma")
end)

T.test("BatchNormalization training: batch statistics per channel, moving statistics by the formula", function()
  tensor.seed(3)
  local n, h, w, c = 4, 3, 5, 3
  local x = tensor.normal(n, h, w, c) * tensor.new({ 1, 3, 0.5 }) + tensor.new({ 2, -1, 0 })
  local bn = nn.BatchNormalization{ momentum = 0.9, epsilon = 0.01 }
  local y = bn(x, { training = true })
  T.eq(shape(y), "4x3x5x3")
  local xv, yv = flat(x), flat(y)
  local mean, var = moments(xv, c)
  for i = 1, #xv do
    local j = (i - 1) % c + 1
    T.near(yv[i], (xv[i] - mean[j]) / math.sqrt(var[j] + 0.01), 1e-4, "y[" .. i .. "]")
  end
  local ym, yvar = moments(yv, c)
  for j = 1, c do
    T.near(ym[j], 0, 1e-5, "output mean ch " .. j)
    T.near(yvar[j], var[j] / (var[j] + 0.01), 1e-4, "output var ch " .. j)
    T.near(bn.moving_mean[j - 1], 0 * 0.9 + mean[j] * 0.1, 1e-5, "moving_mean ch " .. j)
    T.near(bn.moving_variance[j - 1], 1 * 0.9 + var[j] * 0.1, 1e-5, "moving_variance ch " .. j)
  end
  -- a second step moves them again from there
  local mm1, mv1 = flat(bn.moving_mean), flat(bn.moving_variance)
  bn(x, { training = true })
  for j = 1, c do
    T.near(bn.moving_mean[j - 1], mm1[j] * 0.9 + mean[j] * 0.1, 1e-5, "moving_mean step 2")
    T.near(bn.moving_variance[j - 1], mv1[j] * 0.9 + var[j] * 0.1, 1e-5, "moving_variance step 2")
  end
  -- inference does not touch them
  bn(x)
  T.near(bn.moving_mean[0], mm1[1] * 0.9 + mean[1] * 0.1, 1e-6, "inference leaves the moving mean")
end)

T.test("BatchNormalization inference uses the moving statistics, gamma and beta; any image size", function()
  tensor.seed(4)
  local bn = nn.BatchNormalization{ epsilon = 0.001 }
  bn(tensor.ones(1, 2, 2, 2))
  bn.gamma:assign(tensor.new({ 2, 0.5 })); bn.beta:assign(tensor.new({ 1, -1 }))
  bn.moving_mean:assign(tensor.new({ 0.5, -2 })); bn.moving_variance:assign(tensor.new({ 4, 0.25 }))
  local x = tensor.normal(3, 4, 6, 2)          -- another image size than built for
  local y = bn(x, { training = false })
  T.eq(shape(y), "3x4x6x2")
  local g, b, m, v = { 2, 0.5 }, { 1, -1 }, { 0.5, -2 }, { 4, 0.25 }
  local xv, yv = flat(x), flat(y)
  for i = 1, #xv do
    local j = (i - 1) % 2 + 1
    T.near(yv[i], (xv[i] - m[j]) / math.sqrt(v[j] + 0.001) * g[j] + b[j], 1e-5, "y[" .. i .. "]")
  end
  -- and training uses the batch's statistics with gamma and beta
  local yt, xs = flat(bn(x, { training = true })), flat(x)
  local mean, var = moments(xs, 2)
  for i = 1, #xs, 7 do
    local j = (i - 1) % 2 + 1
    T.near(yt[i], (xs[i] - mean[j]) / math.sqrt(var[j] + 0.001) * g[j] + b[j], 1e-4, "training y[" .. i .. "]")
  end
end)

T.test("BatchNormalization gradients flow to x, gamma and beta", function()
  tensor.seed(5)
  local bn = nn.BatchNormalization()
  local x = tensor.Variable(tensor.normal(6, 4))
  local tape = autograd.GradientTape()
  local w = tensor.normal(6, 4)
  local loss = tape:record(function() return (bn(x, { training = true }) * w):sum() end)
  local gr = tape:gradient(loss, { x, bn.gamma, bn.beta })
  -- dbeta = sum over rows of w; dx sums to 0 per channel (the mean is subtracted)
  local wv, db = flat(w), flat(gr[3])
  for j = 1, 4 do
    local s = 0
    for r = 0, 5 do s = s + wv[r * 4 + j] end
    T.near(db[j], s, 1e-5, "dbeta")
  end
  local gx = flat(gr[1])
  for j = 1, 4 do
    local s = 0
    for r = 0, 5 do s = s + gx[r * 4 + j] end
    T.near(s, 0, 1e-4, "sum of dx over the batch")
  end
  T.ok(gr[2]:abs():sum():item() > 0, "dgamma")
end)

T.test("LayerNormalization: each row over the last axis, gamma and beta; any sequence length", function()
  tensor.seed(6)
  local ln = nn.LayerNormalization{ epsilon = 0.01 }
  T.eq(ln.class_name, "LayerNormalization")
  local x = tensor.normal(2, 3, 5) * 3 + 1
  local y = ln(x)
  T.eq(shape(y), "2x3x5")
  T.eq(#ln.weights, 2)
  T.eq(ln.weights[1].name, ln.name .. "/gamma"); T.eq(ln.weights[2].name, ln.name .. "/beta")
  T.eq(ln.gamma.trainable, true); T.eq(ln.beta.trainable, true)
  T.eq(shape(ln.gamma), "5"); T.eq(ln.gamma:sum():item(), 5); T.eq(ln.beta:abs():sum():item(), 0)
  ln.gamma:assign(tensor.new({ 1, 2, 3, 4, 5 })); ln.beta:assign(tensor.new({ 0, 0.5, 0, -0.5, 1 }))
  local x2 = tensor.normal(3, 7, 5)            -- another length
  local xv, yv = flat(x2), flat(ln(x2))
  for r = 0, 3 * 7 - 1 do
    local s, q = 0, 0
    for j = 1, 5 do s = s + xv[r * 5 + j] end
    local m = s / 5
    for j = 1, 5 do q = q + (xv[r * 5 + j] - m) ^ 2 end
    local rstd = 1 / math.sqrt(q / 5 + 0.01)
    for j = 1, 5 do
      T.near(yv[r * 5 + j], (xv[r * 5 + j] - m) * rstd * j + ({ 0, 0.5, 0, -0.5, 1 })[j], 1e-4, "row " .. r)
    end
  end
  local plain = nn.LayerNormalization{ center = false, scale = false }
  T.near(flat(plain(tensor.new({ { 1, 3 } })))[2], 1 / math.sqrt(1 + 0.001), 1e-5)
  T.eq(#plain.weights, 0)
end)

T.test("LayerNormalization gradient: dbeta is the sum of the upstream gradient", function()
  local ln = nn.LayerNormalization()
  local x = tensor.Variable(tensor.normal(4, 3))
  local w = tensor.normal(4, 3)
  local tape = autograd.GradientTape()
  local loss = tape:record(function() return (ln(x) * w):sum() end)
  local gr = tape:gradient(loss, { x, ln.beta })
  local db, ws = flat(gr[2]), flat(w:sum(0))
  for j = 1, 3 do T.near(db[j], ws[j], 1e-5) end
  local gx = flat(gr[1]:sum(1))
  for r = 1, 4 do T.near(gx[r], 0, 1e-4, "dx rows sum to 0") end
end)

T.test("get_config / layer_from_config round trip", function()
  for _, l in ipairs({ nn.BatchNormalization{ momentum = 0.9, epsilon = 1e-5, center = false, synchronized = true },
                       nn.BatchNormalization(), nn.LayerNormalization{ epsilon = 1e-6, scale = false } }) do
    local c = l:get_config()
    local l2 = nn.layer_from_config{ class_name = l.class_name, config = c }
    T.eq(ldist.json.encode(l2:get_config()), ldist.json.encode(c))
  end
  local c = nn.BatchNormalization{ momentum = 0.9, center = false }:get_config()
  T.near(c.momentum, 0.9, 1e-12); T.near(c.epsilon, 0.001, 1e-12); T.eq(c.center, false); T.eq(c.scale, true)
  T.eq(c.axis, -1); T.eq(c.synchronized, false)
  local lc = nn.LayerNormalization():get_config()
  T.eq(lc.axis, -1); T.near(lc.epsilon, 0.001, 1e-12); T.eq(lc.center, true)
end)

T.test("errors: options, axes, shapes", function()
  T.raises(function() return nn.BatchNormalization{ momentun = 0.9 } end, "unknown option 'momentun'")
  T.raises(function() return nn.BatchNormalization{ axis = 0 } end, "only the last axis (axis=-1) is supported")
  T.raises(function() return nn.BatchNormalization{ axis = -2 } end, "only the last axis")
  T.raises(function() return nn.LayerNormalization{ axis = -2 } end, "only the last axis")
  T.raises(function() return nn.BatchNormalization{ momentum = 1.5 } end, "momentum must be in [0, 1]")
  T.raises(function() return nn.LayerNormalization{ epsilon = -1 } end, "epsilon must be >= 0")
  T.raises(function() return nn.BatchNormalization{ axis = 1 }(tensor.ones(2, 3, 4)) end,
    "got axis=1 for inputs of shape batchx3x4")
  -- axis = the last axis counted with the batch is the same as -1
  T.eq(shape(nn.BatchNormalization{ axis = 3 }(tensor.ones(2, 4, 4, 3))), "2x4x4x3")
  local bn = nn.BatchNormalization()
  bn(tensor.ones(2, 4, 4, 3))
  T.raises(function() return bn(tensor.ones(2, 4, 4, 5)) end, "built for inputs with 3 on the last axis (features, channels), got 2x4x4x5")
  T.raises(function() return bn(tensor.ones(2, 4, 3)) end, "expects inputs of shape batchx4x4x3")
  local ln = nn.LayerNormalization()
  ln(tensor.ones(2, 6))
  T.raises(function() return ln(tensor.ones(2, 7)) end, "layer_normalization")
  T.raises(function() return nn.LayerNormalization()(tensor.ones(4)) end, "needs inputs with a feature axis")
end)

T.test("Conv2D + BatchNormalization + GlobalAveragePooling2D + Dense learns; predict runs in inference", function()
  tensor.seed(7)
  -- bright or dark images (offset +-1 plus noise), 2 classes
  local n = 128
  local labels = (tensor.uniform(n) * 2):astype("int64")
  local sign = labels:astype("float32") * 2 - 1
  local x = tensor.normal(n, 6, 6, 1) * 0.5 + sign:reshape(n, 1, 1, 1) * 1.0
  local m = nn.Sequential{ nn.Conv2D(4, 3, { padding = "same" }), nn.BatchNormalization(),
    nn.Activation("relu"), nn.GlobalAveragePooling2D(), nn.Dense(2) }
  m:compile{ optimizer = "adam", loss = losses.SparseCategoricalCrossentropy{ from_logits = true }, metrics = { "accuracy" } }
  local h = m:fit(x, labels, { epochs = 12, batch_size = 16, verbose = 0 })
  T.ok(h.loss[12] < h.loss[1] * 0.7, ("loss falls: %g -> %g"):format(h.loss[1], h.loss[12]))
  local bn = m.layers[2]
  T.ok(bn.moving_mean:abs():sum():item() > 0, "moving mean updated by fit")
  T.eq(#m.trainable_variables, 2 + 2 + 2)
  -- predict is inference: deterministic, and it leaves the moving statistics alone
  local mm = flat(bn.moving_mean)
  local p1, p2 = m:predict(x), m:predict(x)
  T.eq(shape(p1), "128x2")
  T.eq((p1 - p2):abs():sum():item(), 0)
  local after = flat(bn.moving_mean)
  for j = 1, 4 do T.eq(after[j], mm[j], "moving_mean unchanged by predict") end
  local correct = (p1:argmax(1):eq(labels)):astype("float32"):mean():item()
  T.ok(correct > 0.8, "predict accuracy " .. correct)
  -- predict on a single example (inference does not need batch statistics)
  T.eq(shape(m:predict(x:slice(0, 0, 1))), "1x2")
end)

-- GroupNormalization and UnitNormalization: values and gradients are the
-- Keras fixtures' (test_fixtures.lua); here what they do not show: the
-- weights, configs, half inputs, and the errors a user meets
T.test("GroupNormalization and UnitNormalization: weights, configs, bfloat16, errors", function()
  local g = nn.GroupNormalization(2)
  local x = tensor.normal(3, 4, 4, 6)
  local y = g(x)
  T.eq(#g.weights, 2, "gamma and beta")
  T.eq(g.weights[1].name, "group_normalization/gamma", "Keras's names")
  T.eq(shape(y), "3x4x4x6")
  -- each (example, group) has mean 0 and variance 1 (before gamma and beta, which start at 1 and 0)
  local grouped = y:reshape(3, 16, 2, 3)
  T.ok(grouped:mean { 1, 3 }:abs():max():item() < 1e-5, "mean 0 per example and group")
  T.ok((grouped:var { 1, 3 } - 1):abs():max():item() < 2e-3, "variance 1 (less epsilon's share)")
  local c = g:get_config()
  T.eq(c.groups, 2, "config: groups")
  local g2 = nn.layer_from_config { class_name = "GroupNormalization", config = c }
  T.eq(ldist.json.encode(g2:get_config()), ldist.json.encode(c), "config round trip")
  -- a bfloat16 input: computed in float32, as Keras's moments are
  local yb = nn.GroupNormalization(3)(x:astype("bfloat16"))
  T.ok((yb:astype("float32") - nn.GroupNormalization(3)(x:astype("bfloat16"):astype("float32"))):abs():max():item() < 1e-5,
    "a bfloat16 input normalizes as its float32 values")
  -- UnitNormalization: unit L2 norm over the axes; a zero row stays 0 (rsqrt capped at 1e12)
  local u = nn.UnitNormalization { axis = { 1, 2 } }
  local z = u(tensor.concat({ tensor.normal(2, 3, 4), tensor.zeros(1, 3, 4) }, 0))
  T.ok(((z * z):sum { 1, 2 }:slice(0, 0, 2) - 1):abs():max():item() < 1e-6, "unit norm per example")
  T.eq(z[2]:abs():sum():item(), 0, "a zero example stays zero, not NaN")
  -- errors name the layer and the problem, and the session goes on
  T.raises(function() nn.GroupNormalization(4)(tensor.normal(2, 6)) end, "6 channels do not split into 4 groups")
  T.raises(function() nn.GroupNormalization(8)(tensor.normal(2, 6)) end, "cannot be more than the number of channels (6)")
  T.raises(function() nn.GroupNormalization(0) end, "groups must be a positive integer")
  T.raises(function() nn.GroupNormalization(2, { axis = 1 })(tensor.normal(2, 3, 4)) end, "only the last axis")
  T.raises(function() nn.UnitNormalization { axis = 0 }(tensor.normal(2, 3)) end, "axis 0 is the batch")
  T.raises(function() nn.UnitNormalization { axis = 3 }(tensor.normal(2, 3)) end, "axis 3 is out of range")
  T.eq(shape(nn.GroupNormalization(-1)(tensor.normal(2, 5, 3))), "2x5x3", "the session goes on: instance normalization")
end)

-- Keras's preprocessing Normalization and its adapt(). Keras 3.15's values, by:
--   x = (np.arange(24, dtype="float32").reshape(4, 3, 2) ** 1.5) / 7
--   Normalization(axis=-1).adapt(x); Normalization(axis=None).adapt(x);
--   Normalization(axis=(1, 2)).adapt(tf.data.Dataset.from_tensor_slices(x).batch(3))
T.test("Normalization: adapt on a tensor or a dataset, axis lists, invert, as Keras 3's", function()
  local x = (tensor.arange(24):astype("float32"):reshape(4, 3, 2) ^ 1.5) / 7
  local function first(t, k) local f = t:reshape(-1):totable(); local r = {}; for i = 1, k do r[i] = f[i] end; return r end
  local function near_list(got, want, what)
    for i = 1, #want do T.near(got[i], want[i], 2e-5 * (1 + math.abs(want[i])), what .. " " .. i) end
  end
  local n = nn.Normalization()
  n:adapt(x)
  near_list(first(n(x), 6), { -1.2612991333007812, -1.3076287508010864, -1.1768159866333008, -1.188301920890808,
    -1.022344708442688, -1.018128514289856 }, "axis -1")
  near_list(n.weights[1]:totable(), { 6.032468795776367, 6.711864471435547 }, "mean")
  near_list(n.weights[2]:totable(), { 22.87462615966797, 25.236587524414062 }, "variance")
  T.eq(n.weights[3]:item(), 0, "count stays 0, as Keras 3's")
  T.eq(#n.trainable_variables, 0, "nothing trainable")
  local n2 = nn.Normalization { axis = {} }
  n2:adapt(x)
  near_list(first(n2(x), 4), { -1.296104073524475, -1.2670468091964722, -1.2139177322387695, -1.145117998123169 }, "axis none")
  local n3 = nn.Normalization { axis = { 1, 2 } }
  n3:adapt(data.Dataset.from_tensor_slices(x):batch(3))   -- batches of 3 and 1, combined
  near_list(first(n3(x), 4), { -1.1410092115402222, -1.1725895404815674, -1.193666934967041, -1.2095445394515991 }, "axes {1, 2}, a dataset")
  near_list(first(n3.weights[1], 3), { 4.736917495727539, 5.328982353210449, 5.974349021911621 }, "its mean")
  -- a dataset of {x, y} adapts on x; its batches combine to the whole tensor's statistics
  local n4 = nn.Normalization()
  n4:adapt(data.Dataset.from_tensor_slices(x, tensor.zeros(4)):batch(3))
  near_list(n4.weights[2]:totable(), n.weights[2]:totable(), "a dataset's variance is the tensor's")
  -- invert maps back (Keras 3 reads adapt's statistics only: set_weights leaves its invert at 0 and 1)
  local inv = nn.Normalization { invert = true }
  inv(x)   -- builds it
  inv:set_weights(n:get_weights())
  T.ok((inv(n(x)) - x):abs():max():item() < 1e-5, "invert(normalize(x)) is x")
  -- in a model, under a strategy: the statistics are weights, mirrored like the others
  local strategy = distribute.MirroredStrategy { devices = { "cpu:0", "cpu:1" } }
  strategy:scope(function()
    local m = nn.Sequential { nn.Input { shape = { 3, 2 } }, nn.Normalization(), nn.Flatten(), nn.Dense(1) }
    m.layers[1]:adapt(x)
    local y = m:predict(x)
    T.eq(y.shape[1], 4, "a model with an adapted Normalization predicts under Mirrored")
    near_list(m.layers[1].weights[1]:totable(), n.weights[1]:totable(), "adapt under a strategy")
  end)
  -- errors
  T.raises(function() nn.Dense(2):adapt(x) end, "adapt is a preprocessing layer's")
  T.raises(function() nn.Normalization():adapt(42) end, "a tensor or a batched dataset expected")
  T.raises(function() nn.Normalization { axis = 0 }(x) end, "axis 0 is the batch")
  T.raises(function() n(tensor.ones(2, 3, 5)) end, "keeps axis 2 of size 2")
end)

T.done()
