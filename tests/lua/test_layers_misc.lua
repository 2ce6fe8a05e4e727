-- test_layers_misc.lua - Keras 3's ReLU, Identity, ZeroPadding1D, Cropping1D,
-- UpSampling1D, Dot, Conv1DTranspose, TimeDistributed, ActivityRegularization
-- and AlphaDropout: their shapes, the errors that name what is wrong, configs,
-- model save and load. Their values and gradients against Keras's are the
-- fixtures' (tests/fixtures/layers/, test_fixtures.lua).
local T = dofile("tests/lua/testlib.lua")

local function shape(t) return table.concat(t.shape, "x") end
local function config_text(l) return (ldist.json.encode(l:get_config()):gsub('"name":"[^"]*",?', "")) end
local function max_abs_diff(a, b)
  local x, y = a:float():reshape(-1):totable(), b:float():reshape(-1):totable()
  local m = 0
  for i = 1, #x do m = math.max(m, math.abs(x[i] - y[i])) end
  return m
end

T.test("ReLU: Keras's options, their checks, max_value nil in its config", function()
  local x = tensor.new({ { -2, -0.5, 0.25, 0.75, 3, 8 } })
  T.eq(tostring(nn.ReLU()(x):totable()[1][5]), "3.0")
  local y = nn.ReLU { max_value = 1, negative_slope = 0.5, threshold = 0.5 }(x):totable()[1]
  -- x > 0.5: min(x, 1); else 0 - 0.5 * (0.5 - x)
  local want = { -1.25, -0.5, -0.125, 0.75, 1, 1 }
  for i = 1, 6 do T.near(y[i], want[i], 1e-6, "value " .. i) end
  T.eq(nn.ReLU():get_config().max_value, nil)
  T.eq(nn.ReLU { max_value = 2 }:get_config().max_value, 2)
  T.raises(function() return nn.ReLU { max_value = -1 } end, "ReLU max_value cannot be negative, got -1")
  T.raises(function() return nn.ReLU { negative_slope = -0.1 } end, "ReLU negative_slope must be a number >= 0, got -0.1")
  T.raises(function() return nn.ReLU { threshold = -1 } end, "ReLU threshold must be a number >= 0, got -1")
  T.raises(function() return nn.ReLU { alpha = 1 } end, "nn.ReLU: unknown option 'alpha'")
  T.raises(function() return nn.ReLU { max_value = "big" } end, "ReLU: max_value must be a number")
  for _, l in ipairs { nn.ReLU(), nn.ReLU { max_value = 6 }, nn.ReLU { negative_slope = 0.1, threshold = 0.2 } } do
    T.eq(config_text(nn.layer_from_config { class_name = "ReLU", config = l:get_config() }), config_text(l), "round trip")
  end
end)

T.test("Identity passes its input", function()
  local x = tensor.normal(2, 3)
  T.eq(max_abs_diff(nn.Identity()(x), x), 0)
  T.raises(function() return nn.Identity { units = 3 } end, "nn.Identity: unknown option 'units'")
end)

T.test("ZeroPadding1D, Cropping1D, UpSampling1D: shapes and errors", function()
  local x = tensor.normal(2, 5, 3)
  T.eq(shape(nn.ZeroPadding1D()(x)), "2x7x3")
  T.eq(shape(nn.ZeroPadding1D { 0, 2 }(x)), "2x7x3")
  T.eq(shape(nn.ZeroPadding1D(3)(x)), "2x11x3")
  T.eq(shape(nn.Cropping1D()(x)), "2x3x3")
  T.eq(shape(nn.Cropping1D { 0, 4 }(x)), "2x1x3")
  T.eq(shape(nn.UpSampling1D()(x)), "2x10x3")
  T.eq(shape(nn.UpSampling1D(3)(x)), "2x15x3")
  local p = nn.ZeroPadding1D { 1, 2 }(tensor.new({ { { 5 }, { 6 } } })):reshape(-1):totable()
  T.eq(table.concat(p, ","), "0.0,5.0,6.0,0.0,0.0")
  T.raises(function() return nn.ZeroPadding1D { 1, 2, 3 } end, "ZeroPadding1D takes 1 or 2 (left, right) numbers, got 3")
  T.raises(function() return nn.Cropping1D { 1, -1 } end, "Cropping1D amounts must be 0 or more, got -1")
  T.raises(function() return nn.Cropping1D(3)(x) end, "crops away every step of inputs of shape batchx5x3")
  T.raises(function() return nn.ZeroPadding1D()(tensor.ones(2, 4, 4, 1)) end,
    "needs sequences [batch, steps, features]; got inputs of shape batchx4x4x1")
  T.raises(function() return nn.UpSampling1D(0) end, "UpSampling1D size must be positive, got 0")
  T.raises(function() return nn.UpSampling1D { 2, 2 } end, "UpSampling1D: size takes 1 integers, got 2")
  T.raises(function() return nn.UpSampling1D(2, { interpolation = "nearest" }) end, "unknown option 'interpolation'")
  -- the 2-d classes, on the same code, keep their messages
  T.raises(function() return nn.Cropping2D(2)(tensor.ones(1, 4, 4, 1)) end, "crops away every row or column")
  for _, l in ipairs { nn.ZeroPadding1D { 1, 2 }, nn.Cropping1D(), nn.UpSampling1D(4) } do
    T.eq(config_text(nn.layer_from_config { class_name = l.class_name, config = l:get_config() }), config_text(l),
      l.class_name .. " config")
  end
end)

T.test("Dot: Keras's batch_dot shapes, and what is wrong", function()
  local a2, b2 = tensor.normal(3, 4), tensor.normal(3, 4)
  T.eq(shape(nn.Dot(1) { a2, b2 }), "3x1")
  local y = nn.Dot(1) { a2, b2 }:reshape(-1):totable()
  local want = (a2 * b2):sum(1):totable()
  for i = 1, 3 do T.near(y[i], want[i], 1e-5) end
  T.eq(shape(nn.Dot(2) { tensor.normal(2, 3, 4), tensor.normal(2, 5, 4) }), "2x3x5")
  T.eq(shape(nn.Dot { axes = { 1, 1 } } { tensor.normal(2, 3, 4), tensor.normal(2, 3, 5) }), "2x4x5")
  T.eq(shape(nn.Dot { axes = { -1, 1 } } { tensor.normal(2, 3, 4), tensor.normal(2, 4) }), "2x3")
  T.eq(shape(nn.Dot { axes = { 2, 1 } } { tensor.normal(2, 3, 4, 5), tensor.normal(2, 4, 2) }), "2x3x5x2")
  -- normalize: the cosine similarity
  local c = nn.Dot { axes = 1, normalize = true } { a2, a2 * 3 }:reshape(-1):totable()
  for i = 1, 3 do T.near(c[i], 1, 1e-5) end
  T.raises(function() return nn.Dot(2) { tensor.normal(2, 3, 4), tensor.normal(2, 3, 5) } end,
    "inputs of shapes batchx3x4 and batchx3x5 differ along the axes of the product (axis 2: 4, axis 2: 5)")
  T.raises(function() return nn.Dot(0) { a2, b2 } end, "axes cannot include the batch axis 0")
  T.raises(function() return nn.Dot(3) { a2, b2 } end, "axis 3 is out of range for input 1 of 2 axes (batch included)")
  T.raises(function() return nn.Dot { axes = { 1, 2, 3 } } end, "Dot: axes takes 2 integers, got 3")
  T.raises(function() return nn.Dot() end, "nn.Dot: axes is required")
  T.raises(function() return nn.Dot(1) { a2, b2, b2 } end, "takes 2 inputs, got 3")
  T.raises(function() return nn.Dot(1) { a2, tensor.normal(2, 4) } end, "needs inputs of the same batch size")
  local l = nn.Dot { axes = { 2, 1 }, normalize = true }
  T.eq(config_text(nn.layer_from_config { class_name = "Dot", config = l:get_config() }), config_text(l))
end)

T.test("Conv1DTranspose: Keras 3's lengths, kernel (k, filters, channels), and what is wrong", function()
  local x = tensor.normal(2, 5, 3)
  local l = nn.Conv1DTranspose(4, 3, { strides = 2 })
  T.eq(shape(l(x)), "2x11x4")
  T.eq(shape(l.kernel), "3x4x3")
  T.eq(shape(nn.Conv1DTranspose(4, 3, { strides = 2, padding = "same" })(x)), "2x10x4")
  T.eq(shape(nn.Conv1DTranspose(4, 3, { strides = 2, output_padding = 1 })(x)), "2x12x4")
  T.eq(shape(nn.Conv1DTranspose(2, 2, { strides = 3 })(x)), "2x15x2")
  local nb = nn.Conv1DTranspose(2, 2, { use_bias = false })
  nb(x)
  T.eq(#nb.weights, 1)
  T.raises(function() return nn.Conv1DTranspose(0, 3) end, "Conv1DTranspose filters must be a positive integer, got 0")
  T.raises(function() return nn.Conv1DTranspose(4, 0) end, "Conv1DTranspose kernel_size must be a positive integer, got 0")
  T.raises(function() return nn.Conv1DTranspose(4, 3, { strides = 0 }) end, "Conv1DTranspose strides must be a positive integer")
  T.raises(function() return nn.Conv1DTranspose(4, { 3, 3 }) end, "kernel_size takes 1 integers, got 2")
  T.raises(function() return nn.Conv1DTranspose(4, 3, { strides = 2, output_padding = 2 }) end,
    "Conv1DTranspose output_padding must be 0 or more and smaller than strides")
  T.raises(function() return nn.Conv1DTranspose(4, 4, { strides = 2, padding = "same", output_padding = 0 })(x) end,
    "whose convolution does not come back to the 5 inputs")
  T.raises(function() return nn.Conv1DTranspose(4, 3)(tensor.ones(2, 4, 4, 1)) end,
    "needs sequences [batch, steps, channels]; got inputs of shape batchx4x4x1")
  T.raises(function() return nn.Conv1DTranspose(4, 3, { dilation_rate = 2 }) end, "unknown option 'dilation_rate'")
  local c = nn.Conv1DTranspose(4, 3, { strides = 2, padding = "same", output_padding = 1, activation = "relu" })
  T.eq(config_text(nn.layer_from_config { class_name = "Conv1DTranspose", config = c:get_config() }), config_text(c))
end)

T.test("TimeDistributed: the layer on every step, its weights, its config", function()
  local inner = nn.Dense(4)
  local td = nn.TimeDistributed(inner)
  local x = tensor.normal(3, 5, 6)
  local y = td(x)
  T.eq(shape(y), "3x5x4")
  T.ok(rawequal(td.layer, inner), "td.layer is the layer given")
  T.eq(#td.weights, 2)
  T.eq(td.weights[1].name, inner.kernel.name)
  -- the same as the layer on each step
  for t = 0, 4 do
    T.near(max_abs_diff(y:slice(1, t, t + 1):reshape(3, 4), inner(x:slice(1, t, t + 1):reshape(3, 6))), 0, 1e-6, "step " .. t)
  end
  T.eq(shape(nn.TimeDistributed(nn.Conv2D(2, 3))(tensor.normal(2, 3, 5, 5, 1))), "2x3x3x3x2")
  local c = td:get_config()
  T.eq(c.layer.class_name, "Dense")
  T.eq(c.layer.config.units, 4)
  local back = nn.layer_from_config { class_name = "TimeDistributed", config = ldist.json.decode(ldist.json.encode(c)) }
  T.eq(back.layer.class_name, "Dense")
  T.eq(config_text(back), config_text(td))
  T.raises(function() return nn.TimeDistributed(nn.Dense(2))(tensor.ones(2, 3)) end,
    "needs inputs of 3 axes or more [batch, steps, ...]; got inputs of shape batchx3")
  T.raises(function() return nn.TimeDistributed(nn.Add()) end, "TimeDistributed wraps layers of one input; add")
  T.raises(function() return nn.TimeDistributed() end, "nn.TimeDistributed: layer is required")
  T.raises(function() return nn.TimeDistributed("Dense") end, "TimeDistributed needs the layer itself")
  T.raises(function() return nn.TimeDistributed { layer = { class_name = "Dense", config = {} } } end,
    "nn.Dense: units is required")
  T.raises(function() return nn.TimeDistributed(nn.Dense(2), { units = 3 }) end, "nn.TimeDistributed: unknown option 'units'")
  -- frozen: the layer's weights too
  local f = nn.TimeDistributed(nn.Dense(2))
  f(x)
  f.trainable = false
  T.eq(#f.trainable_variables, 0)
  T.eq(f.layer.trainable, false)
end)

T.test("ActivityRegularization adds Keras's term to model.losses; AlphaDropout's draws", function()
  local x = tensor.normal(4, 3)
  local m = nn.Sequential { nn.Input { shape = { 3 } }, nn.ActivityRegularization { l1 = 0.1, l2 = 0.2 } }
  m(x)
  local ls = m.losses
  T.eq(#ls, 1)
  local want = (0.1 * x:abs():sum() + 0.2 * (x * x):sum()):item() / 4
  T.near(ls[1]:item(), want, 1e-5)
  local c = m.layers[1]:get_config()
  T.eq(c.activity_regularizer, nil)
  T.near(c.l2, 0.2, 1e-12)
  T.raises(function() return nn.ActivityRegularization { l1 = -1 } end,
    "ActivityRegularization l1 must be a finite number >= 0, got -1")
  T.raises(function() return nn.ActivityRegularization { activity_regularizer = "l2" } end, "unknown option 'activity_regularizer'")
  -- a TimeDistributed layer's weight regularizer counts, as Keras's
  local td = nn.Sequential { nn.Input { shape = { 2, 3 } }, nn.TimeDistributed(nn.Dense { units = 2, kernel_regularizer = "l2" }) }
  td(tensor.normal(2, 2, 3))
  T.eq(#td.losses, 1)
  local k = td.layers[1].weights[1]
  T.near(td.losses[1]:item(), 0.01 * (k * k):sum():item(), 1e-5)

  -- AlphaDropout: kept values a * x + b, dropped ones a * alpha' + b (Keras's a, b), about rate of them
  local rate, n = 0.3, 20000
  local alpha_p = -1.6732632423543772848170429916717 * 1.0507009873554804934193349852946
  local a = ((1 - rate) * (1 + rate * alpha_p ^ 2)) ^ -0.5
  local b = -a * alpha_p * rate
  tensor.seed(5)
  local xs = tensor.normal(n, 1)
  local l = nn.AlphaDropout(rate)
  T.eq(max_abs_diff(l(xs), xs), 0, "inference: the identity")
  local tape = autograd.GradientTape()
  tape:watch(xs)
  local ys
  local loss = tape:record(function() ys = l(xs, { training = true }); return ys:sum() end)
  local g = tape:gradient(loss, { xs })[1]:reshape(-1):totable()
  local xv, yv = xs:reshape(-1):totable(), ys:reshape(-1):totable()
  local dropped, sum, sq = 0, 0, 0
  for i = 1, n do
    if math.abs(yv[i] - (a * alpha_p + b)) < 1e-5 and g[i] == 0 then dropped = dropped + 1
    else
      T.near(yv[i], a * xv[i] + b, 1e-5, "kept value " .. i)
      T.near(g[i], a, 1e-6, "kept gradient " .. i)
    end
    sum, sq = sum + yv[i], sq + yv[i] ^ 2
  end
  T.near(dropped / n, rate, 0.02, "the fraction dropped")
  local mean = sum / n
  T.near(mean, 0, 0.05, "mean kept")
  T.near(sq / n - mean ^ 2, 1, 0.05, "variance kept")
  T.raises(function() return nn.AlphaDropout(1) end, "AlphaDropout rate must be in [0, 1), got 1")
  T.raises(function() return nn.AlphaDropout(0.1, { noise_shape = { 1 } }) end, "unknown option 'noise_shape'")
end)

T.test("under a half dtype policy each computes and gives that dtype (Cropping2D's slices too)", function()
  local x, img = tensor.normal(2, 6, 4), tensor.normal(2, 4, 4, 1)
  for _, pol in ipairs { "mixed_bfloat16", "mixed_float16" } do
    local want = pol == "mixed_bfloat16" and "bfloat16" or "float16"
    for _, l in ipairs { nn.ReLU { threshold = 0.3, negative_slope = 0.1, max_value = 1, dtype = pol }, nn.Identity { dtype = pol },
                         nn.ZeroPadding1D { dtype = pol }, nn.Cropping1D { dtype = pol }, nn.UpSampling1D { dtype = pol },
                         nn.Conv1DTranspose(3, 3, { strides = 2, dtype = pol }), nn.TimeDistributed(nn.Dense(3, { dtype = pol })),
                         nn.ActivityRegularization { l1 = 0.1, dtype = pol } } do
      T.eq(l(x).dtype, want, l.class_name .. " under " .. pol)
    end
    T.eq(nn.Cropping2D(1, { dtype = pol })(img).dtype, want, "Cropping2D under " .. pol)
    T.eq(nn.Dot { axes = 2, dtype = pol } { x, x }.dtype, want, "Dot under " .. pol)
    T.eq(nn.AlphaDropout(0.3, { dtype = pol })(x, { training = true }).dtype, want, "AlphaDropout under " .. pol)
  end
end)

T.test("the new layers in a model: to_json, save and load_model give the same predictions", function()
  tensor.seed(3)
  local x = nn.Input { shape = { 6, 4 } }
  local h = nn.TimeDistributed(nn.Dense(5, "tanh"))(x)
  h = nn.Conv1DTranspose(3, 3, { strides = 2, padding = "same" })(nn.ZeroPadding1D(1)(h))
  h = nn.UpSampling1D(2)(nn.Cropping1D { 1, 2 }(h))
  h = nn.ActivityRegularization { l2 = 0.01 }(nn.ReLU { max_value = 2, negative_slope = 0.1 }(nn.AlphaDropout(0.2)(h)))
  local s = nn.Dot { axes = { 2, 2 }, normalize = true } { h, nn.Identity()(h) }
  local m = nn.Model { inputs = x, outputs = nn.Dense(2)(nn.Flatten()(s)) }
  local xs = tensor.normal(3, 6, 4)
  local want = m(xs)
  T.eq(shape(want), "3x2")
  local again = nn.model_from_json(m:to_json())
  again(xs)
  again:set_weights(m:get_weights())
  T.near(max_abs_diff(again(xs), want), 0, 1e-6, "model_from_json")
  local path = os.tmpname() .. ".safetensors"
  m:save(path)
  local loaded = nn.load_model(path)
  os.remove(path)
  T.near(max_abs_diff(loaded(xs), want), 0, 1e-6, "load_model")
  T.eq(#loaded.losses, #m.losses)
  -- it trains
  m:compile { optimizer = optim.Adam(0.01), loss = "mse" }
  local hist = m:fit(xs, tensor.normal(3, 2), { epochs = 3, verbose = 0 })
  T.ok(hist.history.loss[3] == hist.history.loss[3], "a finite loss")
end)

T.done()
