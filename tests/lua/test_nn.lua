-- test_nn.lua - layers, models, losses, optimizers and the Keras-style API.
local T = dofile("tests/lua/testlib.lua")

T.test("Dense builds on first call with Keras' initialisers", function()
  tensor.seed(1)
  local d = nn.Dense(4, "relu")
  T.ok(not d.built)
  local y = d(tensor.ones(3, 5))
  T.eq(y.shape[1], 3); T.eq(y.shape[2], 4)
  T.eq(#d.trainable_variables, 2)
  T.eq(d.kernel.shape[1], 5)
  T.eq(d.bias:sum():item(), 0)
  local lim = math.sqrt(6 / 9)
  T.ok(d.kernel:abs():max():item() <= lim + 1e-6, "glorot_uniform bound")
end)

T.test("Sequential, summary and trainable variables", function()
  local m = nn.Sequential{nn.Flatten(), nn.Dense(8, "relu"), nn.Dropout(0.5), nn.Dense(3)}
  m:build{4, 4}
  T.eq(#m.trainable_variables, 4)
  T.ok(m.trainable_variables[1] == m.trainable_variables[1], "variables keep their identity")
  local s = m:summary_text()
  T.ok(s:find("Total params: 163", 1, true), s)
  T.ok(s:find("(None, 8)", 1, true))
  -- dropout is only active in training
  local x = tensor.ones(2, 4, 4)
  T.eq((m(x) - m(x)):abs():sum():item(), 0)
end)

T.test("Conv2D and MaxPool2D shapes", function()
  local m = nn.Sequential{nn.Reshape{8, 8, 1}, nn.Conv2D(4, 3, {activation = "relu"}), nn.MaxPool2D(2),
    nn.Conv2D(2, 3, {padding = "same"}), nn.Flatten()}
  local y = m(tensor.ones(5, 8, 8))
  T.eq(y.shape[1], 5); T.eq(y.shape[2], 3 * 3 * 2)
end)

T.test("layer errors name the problem", function()
  local m = nn.Sequential{nn.Dense(4)}
  m(tensor.ones(2, 3))
  T.raises(function() return m(tensor.ones(2, 5)) end, "dense")
  T.raises(function() return m(tensor.ones(2, 5)) end, "was built for inputs with 3 on the last axis (features, channels), got 2x5")
  T.eq(table.concat(nn.Dense(4)(tensor.ones(2, 7, 3)).shape, "x"), "2x7x4")   -- any sequence length, as Keras
  T.raises(function() return nn.Dense(4, "swishy") end, "unknown activation 'swishy'")
  T.raises(function() return nn.Dense(0) end, "units must be a positive integer")
  T.raises(function() return nn.Dropout(1.5) end, "rate must be in [0, 1)")
  T.raises(function() return nn.Sequential{nn.Dense(2), 42} end, "item 2 is a number, not a layer")
  T.raises(function() return nn.Sequential{nn.Conv2D(2, 3)}(tensor.ones(2, 5, 5)) end, "add a channel axis")
end)

T.test("layer constructors: positional, options, Keras's names, and errors naming the problem", function()
  local d = nn.Dense{64, activation = "relu", use_bias = false, name = "hidden"}
  T.eq(d.units, 64); T.eq(d.activation, "relu"); T.eq(d.use_bias, false); T.eq(d.name, "hidden")
  T.eq(d.class_name, "Dense")
  local c = nn.Conv2D(8, 3, { strides = 2, padding = "same" })
  T.eq(table.concat(c.kernel_size, ","), "3,3"); T.eq(table.concat(c.strides, ","), "2,2")
  T.eq(table.concat(nn.Reshape(2, -1).target_shape, ","), "2,-1")
  T.eq(table.concat(nn.Reshape{4, 4, 1}.target_shape, ","), "4,4,1")
  T.eq(nn.MaxPooling2D(3).class_name, "MaxPool2D")
  T.raises(function() return nn.Dense{unit = 3} end,
    "nn.Dense: unknown option 'unit'; did you mean 'units'? (it takes units, activation, use_bias, name, dtype, kernel_initializer,")
  T.raises(function() return nn.Flatten{units = 3} end, "nn.Flatten: unknown option 'units' (it takes name, dtype)")
  T.raises(function() return nn.Dense() end, "nn.Dense: units is required")
  T.raises(function() return nn.Conv2D(3, 2, { padding = "sam" }) end, "unknown padding 'sam' (valid|same)")
  T.raises(function() return nn.Conv2D(3, { 2, 2, 2 }) end, "kernel_size takes 2 integers, got 3")
  T.raises(function() return nn.Dense("many") end, "units must be an integer, got a string")
  T.raises(function() return nn.Dense(4, "relu", 3) end, "at most 2 positional arguments")
end)

T.test("get_config and layer_from_config make the same layer again", function()
  for _, l in ipairs({ nn.Dense(5, "tanh"), nn.Conv2D(4, { 3, 2 }, { strides = { 1, 2 }, padding = "same" }),
                       nn.MaxPool2D(2, { strides = 1 }), nn.Dropout(0.25), nn.Reshape{ 7, -1 }, nn.Activation("gelu"),
                       nn.Flatten(), nn.Softmax{ axis = 1 } }) do
    local c = l:get_config()
    local l2 = nn.layer_from_config{ class_name = l.class_name, config = c }
    T.eq(l2.class_name, l.class_name)
    T.eq(ldist.json.encode(l2:get_config()), ldist.json.encode(c))
    for k, v in pairs(c) do
      if type(v) == "table" then T.eq(table.concat(l2[k], ","), table.concat(v, ","), k)
      elseif k ~= "name" then T.eq(l2[k], v, k) end
    end
  end
  T.raises(function() return nn.layer_from_config{ class_name = "Dense2", config = {} } end, "unknown layer class 'Dense2'")
end)

T.test("nn.Softmax: Keras's Softmax layer, over any axis", function()
  local x = tensor.new{ { { 1, 2, 3 }, { 4, 0, 1 } } }   -- 1x2x3
  -- keras.layers.Softmax(axis=1)(x): each column of the 2x3 over its 2 rows
  local want = { { 0.04742587, 0.88079708, 0.88079708 }, { 0.95257413, 0.11920292, 0.11920292 } }
  local y = nn.Softmax{ axis = 1 }(x)
  for i = 1, 2 do for j = 1, 3 do T.near(y[0][i - 1][j - 1], want[i][j], 1e-6) end end
  local y2 = nn.Softmax(-2)(x)
  T.near((y2 - y):abs():max():item(), 0, 0)
  T.near((nn.Softmax()(x) - x:softmax()):abs():max():item(), 0, 0)
  T.raises(function() return nn.Softmax{ axis = 3 }(x) end, "softmax: axis 3 out of range for a tensor with 3 dimensions")
  -- in a model: it trains (its gradient goes through the moved axis) and saves
  local m = nn.Sequential{ nn.Dense(4), nn.Reshape{ 2, 2 }, nn.Softmax{ axis = 1 }, nn.Flatten() }
  m:compile{ optimizer = optim.SGD(0.5), loss = "mse" }
  local xs, ys = tensor.normal(16, 3), tensor.new{ 0.9, 0.1, 0.1, 0.9 }:reshape(1, 4) * tensor.ones(16, 1)
  local h = m:fit(xs, ys, { epochs = 20, verbose = 0 })
  T.ok(h.history.loss[20] < h.history.loss[1] * 0.8, "the loss falls")
  local m2 = nn.model_from_json(m:to_json())
  T.eq(m2.layers[3].class_name, "Softmax"); T.eq(m2.layers[3].axis, 1)
end)

T.test("Keras's activations by name, in layers", function()
  local x = tensor.new{ { -2, -0.5, 0, 0.5, 3 } }
  for _, name in ipairs{ "elu", "selu", "softplus", "softsign", "silu", "leaky_relu", "relu6", "hard_sigmoid", "hard_silu",
                         "mish" } do
    T.near((nn.Activation(name)(x) - x[name](x)):abs():max():item(), 0, 0, name)
  end
  -- Keras's aliases and the two that are no elementwise op of their own
  T.near((nn.Activation("swish")(x) - x:silu()):abs():max():item(), 0, 0)
  T.near((nn.Activation("hard_swish")(x) - x:hard_silu()):abs():max():item(), 0, 0)
  T.near((nn.Activation("exponential")(x) - x:exp()):abs():max():item(), 0, 0)
  T.near((nn.Activation("log_softmax")(x) - x:log_softmax()):abs():max():item(), 0, 0)
  -- in a Dense (the product, then the activation), and through its configuration
  local d = nn.Dense(3, "selu")
  local y = d(x)
  local lin = x:matmul(d.kernel) + d.bias
  T.near((y - lin:selu()):abs():max():item(), 0, 1e-6)
  T.eq(nn.layer_from_config{ class_name = "Dense", config = d:get_config() }.activation, "selu")
  T.raises(function() return nn.Dense(3, "swishy") end, "unknown")
end)

T.test("layer.trainable = false: Keras's frozen layers (fine-tuning)", function()
  tensor.seed(5)
  local m = nn.Sequential{ nn.Dense(4, "relu"), nn.BatchNormalization(), nn.Dense(2) }
  m:build{ 3 }
  T.eq(m:count_params(), 42); T.eq(m.layers[1]:count_params(), 16)   -- Keras's count_params()
  T.eq(m.trainable, true); T.eq(m.layers[1].trainable, true)
  T.eq(#m.trainable_variables, 6)
  m.layers[1].trainable = false
  -- Keras: 2 + 2 + 2 weights, the frozen kernel and bias leave the trainable list
  T.eq(#m.trainable_variables, 4); T.eq(#m.non_trainable_variables, 4); T.eq(#m.weights, 8)
  T.ok(m:summary_text():find("Trainable params: 18 (72.00 B)", 1, true), m:summary_text())
  m:compile{ optimizer = "adam", loss = "mse" }
  local k1, k3 = m.layers[1].kernel:clone(), m.layers[3].kernel:clone()
  m:fit(tensor.normal(32, 3), tensor.normal(32, 2), { epochs = 2, verbose = 0 })
  T.eq((m.layers[1].kernel - k1):abs():max():item(), 0, "a frozen layer's kernel does not move")
  T.ok((m.layers[3].kernel - k3):abs():max():item() > 0, "the others train")
  -- model.trainable sets every layer's (Keras), and back
  m.trainable = false
  T.eq(m.trainable, false); T.eq(m.layers[3].trainable, false); T.eq(#m.trainable_variables, 0)
  m.trainable = true
  T.eq(#m.trainable_variables, 6); T.eq(m.layers[1].trainable, true)
  -- Keras 3: a frozen BatchNormalization normalizes by its moving statistics, training or not
  local bn = nn.BatchNormalization{ trainable = false }
  local x = tensor.normal(8, 3) * 5 + 2
  T.near((bn(x, { training = true }) - x / math.sqrt(1 + 1e-3)):abs():max():item(), 0, 1e-5)
  T.eq(bn.moving_mean:abs():sum():item(), 0, "its moving statistics stay")
  -- the setting travels with the configuration (to_json, save, the workers)
  local d = nn.Dense(3, { trainable = false })
  T.eq(d.trainable, false); T.eq(d:get_config().trainable, false); T.eq(nn.Dense(3):get_config().trainable, nil)
  m.layers[2].trainable = false
  local m2 = nn.model_from_json(m:to_json())
  T.eq(m2.layers[2].trainable, false); T.eq(m2.layers[1].trainable, true)
  -- a frozen weight is not watched by a tape (as TF's non-trainable variables); tape:watch does
  d(tensor.ones(1, 2))
  local tape = autograd.GradientTape()
  local loss = tape:record(function() tape:watch(d.kernel); return d(tensor.ones(1, 2)):sum() end)
  T.near(tape:gradient(loss, d.kernel):sum():item(), 6)   -- 2x3 ones
  -- the other fields are read-only, by name
  T.raises(function() m.layers[1].units = 8 end, "layer 'dense")
  T.raises(function() m.layers[1].units = 8 end, "cannot set 'units' (a layer's options are given when it is made")
  T.raises(function() m.layers[1].trainable = "no" end, "trainable must be true or false, got string")
  T.raises(function() m.trainable = 0 end, "model.trainable must be true or false, got number")
  T.raises(function() return nn.Dense(2):count_params() end, "is not built yet")
end)

T.test("losses against hand computations", function()
  local logits = tensor.new{{2, 1, 0}, {0, 0, 3}}
  local labels = tensor.new({0, 2}, {dtype = "int64"})
  local function ce(row, k)
    local m = math.max(table.unpack(row)); local s = 0
    for _, v in ipairs(row) do s = s + math.exp(v - m) end
    return m + math.log(s) - row[k + 1]
  end
  local want = (ce({2, 1, 0}, 0) + ce({0, 0, 3}, 2)) / 2
  T.near(losses.SparseCategoricalCrossentropy{from_logits = true}(labels, logits):item(), want, 1e-5)
  T.near(losses.SparseCategoricalCrossentropy()(labels, logits:softmax()):item(), want, 1e-4)
  local onehot = tensor.new{{1, 0, 0}, {0, 0, 1}}
  T.near(losses.CategoricalCrossentropy{from_logits = true}(onehot, logits):item(), want, 1e-5)
  T.near(losses.MeanSquaredError()(tensor.new{1, 2}, tensor.new{2, 4}):item(), 2.5)
  local p = tensor.new{0.9, 0.2}
  local bce = -(math.log(0.9) + math.log(0.8)) / 2
  T.near(losses.BinaryCrossentropy()(tensor.new{1, 0}, p):item(), bce, 1e-5)
  T.near(losses.BinaryCrossentropy{from_logits = true}(tensor.new{1, 0}, tensor.new{2.1972246, -1.3862944}):item(), bce, 1e-4)
  T.raises(function() return losses.SparseCategoricalCrossentropy()(tensor.new{0, 1, 2}, logits) end, "labels 3 do not match predictions 2x3")
  T.raises(function() return losses.SparseCategoricalCrossentropy{from_logits = true}(tensor.new{0, 7}, logits) end, "label 7")
end)

T.test("SGD and Adam follow Keras' update rules", function()
  local w = tensor.Variable{1.0, -2.0}
  local g = tensor.new{0.5, 0.25}
  optim.SGD{learning_rate = 0.1}:apply_gradients({g}, {w})
  T.near(w[0], 0.95); T.near(w[1], -2.025)
  local m = optim.SGD{learning_rate = 0.1, momentum = 0.9}
  local v = tensor.Variable{1.0}
  m:apply_gradients({tensor.new{1.0}}, {v}); m:apply_gradients({tensor.new{1.0}}, {v})
  T.near(v[0], 1 - 0.1 - (0.9 * 0.1 + 0.1), 1e-6)
  local a = tensor.Variable{1.0}
  local adam = optim.Adam{learning_rate = 0.01}
  adam:apply_gradients({tensor.new{2.0}}, {a})
  -- first Adam step moves by lr * g/|g| (up to epsilon)
  T.near(a[0], 0.99, 1e-5)
  T.eq(adam.iterations, 1)
  local r = tensor.Variable{1.0}
  optim.RMSprop{learning_rate = 0.01}:apply_gradients({tensor.new{1.0}}, {r})
  T.near(r[0], 1 - 0.01 / math.sqrt(0.1 + 1e-7), 1e-5)
  local aw = tensor.Variable{1.0}
  optim.AdamW{learning_rate = 0.01, weight_decay = 0.1}:apply_gradients({tensor.new{0.0}}, {aw})
  T.near(aw[0], 1 - 0.01 * 0.1, 1e-5)
end)

T.test("amsgrad and centered RMSprop follow Keras's rules", function()
  -- four steps from {1, -2, 0.5}; the expected values are Keras 3.15's
  -- (keras.optimizers.Adam(0.1, beta_2=0.5, amsgrad=True), ...). beta_2 0.5
  -- lets v fall below its maximum, so amsgrad differs from Adam.
  local grads = { { 0.5, -0.25, 2.0 }, { -0.1, 0.3, 0.5 }, { 0.05, -1.0, -0.5 }, { 0.2, 0.2, 1e-3 } }
  local function run(o)
    local v = tensor.Variable{1.0, -2.0, 0.5}
    for _, g in ipairs(grads) do o:apply_gradients({tensor.new(g)}, {v}) end
    return v:totable()
  end
  local want = {
    { "Adam amsgrad", optim.Adam{learning_rate = 0.1, beta_2 = 0.5, amsgrad = true}, { 0.7771567, -1.8449697, 0.2594007 } },
    { "AdamW amsgrad", optim.AdamW{learning_rate = 0.1, weight_decay = 0.1, beta_2 = 0.5, amsgrad = true},
      { 0.74197710, -1.7692976, 0.24452718 } },
    { "Adam", optim.Adam{learning_rate = 0.1, beta_2 = 0.5}, { 0.6944143, -1.8359805, 0.1679014 } },
    { "RMSprop centered", optim.RMSprop{learning_rate = 0.1, centered = true}, { 0.5585755, -1.66852, 0.16462336 } },
    { "RMSprop centered momentum", optim.RMSprop{learning_rate = 0.1, centered = true, momentum = 0.9},
      { -0.1716145, -1.002089, -0.7203332 } },
    { "RMSprop", optim.RMSprop{learning_rate = 0.1}, { 0.58368963, -1.6960491, 0.1850504 } },
  }
  -- weight_decay: Keras 3 decouples it in every optimizer (w - (w wd) lr before the step; Adam's
  -- with a decay is AdamW's). Three steps from {1, -2, 3}, Keras 3.15's values, by
  --   keras.optimizers.SGD(0.1, momentum=0.9, weight_decay=0.1).apply_gradients(...), ...
  local wd_grads = { { 0.5, 0.1, -0.3 }, { 0.2, -0.4, 0.1 }, { 0.0, 0.3, 0.2 } }
  local wd = {
    { "SGD momentum weight_decay", optim.SGD{learning_rate = 0.1, momentum = 0.9, weight_decay = 0.1},
      { 0.7984439730644226, -1.9218089580535889, 2.952430009841919 } },
    { "Adam weight_decay", optim.Adam{learning_rate = 0.1, weight_decay = 0.1},
      { 0.7138733267784119, -1.9858460426330566, 3.040496349334717 } },
    { "RMSprop weight_decay", optim.RMSprop{learning_rate = 0.1, weight_decay = 0.1},
      { 0.5387345552444458, -2.1387100219726562, 2.935905694961548 } },
    { "AdamW", optim.AdamW{learning_rate = 0.1, weight_decay = 0.1},
      { 0.7138733267784119, -1.9858460426330566, 3.040496349334717 } },
  }
  -- Keras's other optimizers, five steps from {1, -2, 0.5} (a zero gradient in the last: Lion's sign of 0)
  local more_grads = { { 0.5, -0.25, 2.0 }, { -0.1, 0.3, 0.5 }, { 0.05, -1.0, -0.5 }, { 0.2, 0.2, 1e-3 }, { 1.0, -0.5, 0.0 } }
  local more = {
    { "Adagrad", optim.Adagrad{learning_rate = 0.1}, { 0.807882249, -1.88566494, 0.400519878 } },
    { "Adagrad initial_accumulator_value", optim.Adagrad{learning_rate = 0.1, initial_accumulator_value = 0.5, epsilon = 1e-3},
      { 0.851269245, -1.90554249, 0.40510416 } },
    { "Adamax", optim.Adamax{learning_rate = 0.1}, { 0.769267321, -1.83383012, 0.274167836 } },
    { "Adamax betas", optim.Adamax{learning_rate = 0.1, beta_1 = 0.5, beta_2 = 0.8}, { 0.739604056, -1.81900764, 0.315807551 } },
    { "Nadam", optim.Nadam{learning_rate = 0.1}, { 0.732020557, -1.82495904, 0.362965375 } },
    { "Nadam betas", optim.Nadam{learning_rate = 0.1, beta_1 = 0.8, beta_2 = 0.9}, { 0.698364794, -1.80577683, 0.348954171 } },
    { "Nadam weight_decay", optim.Nadam{learning_rate = 0.1, weight_decay = 0.1}, { 0.68761611, -1.73077834, 0.343349725 } },
    { "Lion", optim.Lion{learning_rate = 0.1}, { 0.699999928, -1.89999998, 0.200000018 } },
    { "Lion weight_decay", optim.Lion{learning_rate = 0.1, weight_decay = 0.1}, { 0.654950321, -1.80394042, 0.181415558 } },
    { "Adadelta", optim.Adadelta{learning_rate = 1.0}, { 0.99610889, -1.99695039, 0.498590857 } },
    { "Adadelta rho", optim.Adadelta{learning_rate = 0.5, rho = 0.8, epsilon = 1e-3}, { 0.901845872, -1.92616749, 0.465383053 } },
    { "Adadelta weight_decay", optim.Adadelta{learning_rate = 1.0, weight_decay = 0.1}, { 0.587093115, -1.17837834, 0.294361383 } },
    { "Ftrl", optim.Ftrl{learning_rate = 0.1}, { 0.273359746, -0.316735893, 0.322432965 } },
    { "Ftrl l1 l2", optim.Ftrl{learning_rate = 0.1, l1_regularization_strength = 0.05, l2_regularization_strength = 0.1},
      { 0.254822016, -0.287091404, 0.316839993 } },
    { "Ftrl all", optim.Ftrl{learning_rate = 0.1, learning_rate_power = -0.3, initial_accumulator_value = 0.2,
        l1_regularization_strength = 0.01, l2_regularization_strength = 0.05, l2_shrinkage_regularization_strength = 0.02,
        beta = 0.5 }, { 0.015347518, -0.003881376, 0.124480836 } },
    { "Ftrl power 0", optim.Ftrl{learning_rate = 0.1, learning_rate_power = 0.0, initial_accumulator_value = 0.0},
      { -0.165000007, 0.125, -0.20009999 } },
    { "Ftrl weight_decay", optim.Ftrl{learning_rate = 0.1, weight_decay = 0.1}, { 0.266804278, -0.309021503, 0.318039596 } },
  }
  -- each case's optimizer over the steps from `start`, against Keras's weights
  local function against_keras(start, steps, cases)
    for _, c in ipairs(cases) do
      local v = tensor.Variable(start)
      for _, g in ipairs(steps) do c[2]:apply_gradients({tensor.new(g)}, {v}) end
      local got = v:totable()
      for i = 1, 3 do T.near(got[i], c[3][i], 2e-6, ("%s [%d]"):format(c[1], i)) end
    end
  end
  against_keras({1.0, -2.0, 0.5}, more_grads, more)
  T.eq(ldist.optim._config(optim.Adagrad{initial_accumulator_value = 0.3}).initial_accumulator_value, 0.30000001192092896,
    "Adagrad's config carries its initial accumulator")
  T.raises(function() return optim.Lion{beta_1 = 0} end, "Lion with beta_1 = 0 is SignSGD")
  T.raises(function() return optim.Adagrad{momentum = 0.9} end, "momentum")
  T.raises(function() return optim.Adagrad{initial_accumulator_value = -1} end, "initial_accumulator_value must be zero or positive")
  T.raises(function() return optim.Ftrl{learning_rate_power = 0.5} end, "learning_rate_power must be zero or negative")
  T.raises(function() return optim.Ftrl{l1_regularization_strength = -1} end, "must be zero or positive")
  T.raises(function() return optim.Ftrl{epsilon = 1e-3} end, "epsilon")
  T.raises(function() return optim.Adadelta{rho = 1.5} end, "rho must be in")
  local fc = ldist.optim._config(optim.Ftrl{l1_regularization_strength = 0.25, beta = 0.5, learning_rate_power = -0.25})
  T.eq(("%s %g %g %g"):format(fc.name, fc.l1_regularization_strength, fc.beta, fc.learning_rate_power), "Ftrl 0.25 0.5 -0.25",
    "Ftrl's config carries its own options")
  against_keras({1.0, -2.0, 3.0}, wd_grads, wd)
  for _, c in ipairs(want) do
    local got = run(c[2])
    for i = 1, 3 do T.near(got[i], c[3][i], 2e-6, ("%s [%d]"):format(c[1], i)) end
  end
  -- the variants keep a third slot, which the state (checkpoints, workers) carries
  local o, v = optim.Adam{amsgrad = true}, tensor.Variable{1.0, 2.0}
  o:apply_gradients({tensor.new{1.0, -1.0}}, {v})
  local st = ldist.optim._state(o, {v})
  T.ok(st.slots[1][3], "amsgrad's slot in the state")
  T.eq(ldist.optim._state(optim.RMSprop{centered = true}, {v}).slots[1][3], nil, "no slot before the first step")
  T.eq(ldist.optim._config(o).amsgrad, true)
  T.eq(ldist.optim._config(optim.RMSprop{centered = true}).centered, true)
  T.eq(ldist.optim._config(optim.SGD{}).amsgrad, nil, "SGD's config has no amsgrad")
end)

T.test("gradient accumulation and use_ema follow Keras's rules, in apply_gradients and in fit", function()
  -- five calls from {1, -2, 0.5}; the expected values are Keras 3.15's, with its
  -- optimizer.iterations (the updates: a call that only accumulates is not one)
  local grads = { { 0.5, -0.25, 2.0 }, { -0.1, 0.3, 0.5 }, { 0.05, -1.0, -0.5 }, { 0.2, 0.2, 1e-3 }, { 1.0, -0.5, 0.25 } }
  local cases = {
    { "SGD accumulating 2", optim.SGD{learning_rate = 0.1, gradient_accumulation_steps = 2},
      { 0.967500031, -1.9625001, 0.399949998 }, 2 },
    { "Adam accumulating 3", optim.Adam{learning_rate = 0.1, gradient_accumulation_steps = 3},
      { 0.900002778, -1.90000165, 0.400001138 }, 1 },
    { "SGD momentum clipnorm accumulating 2",
      optim.SGD{learning_rate = 0.1, momentum = 0.9, clipnorm = 0.5, gradient_accumulation_steps = 2},
      { 0.972493827, -1.9618758, 0.431161404 }, 2 },
    { "SGD use_ema", optim.SGD{learning_rate = 0.1, use_ema = true, ema_momentum = 0.5},
      { 0.834999979, -1.87500012, 0.274900019 }, 5 },
    { "SGD use_ema overwriting every 2", optim.SGD{learning_rate = 0.1, use_ema = true, ema_momentum = 0.5,
      ema_overwrite_frequency = 2 }, { 0.841249943, -1.875, 0.287450016 }, 5 },
    { "Adam use_ema accumulating 2", optim.Adam{learning_rate = 0.1, use_ema = true, ema_momentum = 0.8,
      gradient_accumulation_steps = 2 }, { 0.803738296, -2.02989674, 0.348865837 }, 2 },
  }
  for _, c in ipairs(cases) do
    local v = tensor.Variable{1.0, -2.0, 0.5}
    for _, g in ipairs(grads) do c[2]:apply_gradients({tensor.new(g)}, {v}) end
    local got = v:totable()
    for i = 1, 3 do T.near(got[i], c[3][i], 3e-6, ("%s [%d]"):format(c[1], i)) end
    T.eq(c[2].iterations, c[4], c[1] .. ": iterations")
  end
  -- fit: 8 rows, batch 2, 2 epochs, no shuffling, from set weights; Keras's
  -- fit ends by writing the averages into the variables (use_ema)
  local x = tensor.new{{1, 2}, {0.5, -1}, {2, 0}, {-1, 1}, {0, 3}, {1, 1}, {2, -2}, {-0.5, 0.5}}
  local y = tensor.new{{1, 0}, {0, 1}, {1, 1}, {0, 0}, {2, 1}, {1, 0}, {0, 2}, {1, 1}}
  local fits = {
    { "fit use_ema", optim.SGD{learning_rate = 0.05, use_ema = true, ema_momentum = 0.9},
      { 0.484234571, -0.130817175, 0.217742026, 0.169519261, 0.0436762348, 0.180843413 }, 8 },
    { "fit accumulating 3", optim.SGD{learning_rate = 0.05, momentum = 0.5, gradient_accumulation_steps = 3},
      { 0.483852416, -0.13193576, 0.206274748, 0.19385004, 0.0396440998, 0.160702258 }, 2 },
  }
  for _, c in ipairs(fits) do
    local m = nn.Sequential{nn.Dense(2)}
    m:build({2})
    m.trainable_variables[1]:assign(tensor.new{{0.5, -0.25}, {0.1, 0.3}})
    m.trainable_variables[2]:assign(tensor.new{0.0, 0.1})
    m:compile{optimizer = c[2], loss = "mse"}
    m:fit(x, y, {batch_size = 2, epochs = 2, shuffle = false, verbose = 0})
    local got = {}
    for _, v in ipairs(m.trainable_variables) do
      for _, e in ipairs(v:reshape(-1):totable()) do got[#got + 1] = e end
    end
    for i = 1, 6 do T.near(got[i], c[3][i], 2e-6, ("%s [%d]"):format(c[1], i)) end
    T.eq(c[2].iterations, c[4], c[1] .. ": iterations")
  end
  -- Keras's checks, and the config that ships the optimizer
  T.raises(function() optim.SGD{gradient_accumulation_steps = 1} end, "gradient_accumulation_steps must be an integer >= 2, got 1")
  T.raises(function() optim.SGD{gradient_accumulation_steps = 2.5} end, "must be an integer >= 2, got 2.5")
  T.raises(function() optim.SGD{use_ema = true, ema_momentum = 1.5} end, "ema_momentum must be in [0, 1], got 1.5")
  T.raises(function() optim.SGD{use_ema = true, ema_overwrite_frequency = 0} end, "ema_overwrite_frequency must be an integer >= 1")
  T.ok(optim.SGD{gradient_accumulation_steps = 0}, "0 is off, as in Keras")
  local c = ldist.optim._config(optim.Adam{use_ema = true, ema_overwrite_frequency = 3, gradient_accumulation_steps = 4})
  T.eq(c.use_ema, true); T.near(c.ema_momentum, 0.99, 1e-7); T.eq(c.ema_overwrite_frequency, 3)
  T.eq(c.gradient_accumulation_steps, 4)
  T.eq(ldist.optim._config(optim.Adam{}).use_ema, nil, "off: not in the config")
end)

T.test("loss_scale_factor: the loss times it, the gradients divided by it, as Keras's", function()
  -- apply_gradients divides: SGD(0.1, loss_scale_factor=4) with gradients {8, -4} (Keras 3.15: 0.8, 2.1)
  local o, w = optim.SGD{learning_rate = 0.1, loss_scale_factor = 4}, tensor.Variable{1.0, 2.0}
  o:apply_gradients({tensor.new{8.0, -4.0}}, {w})
  T.near(w[0], 0.8, 1e-7); T.near(w[1], 2.1, 1e-7)
  -- fit scales the loss and unscales the gradients: Keras's weights and (unscaled) loss, for 64 and 3
  local x = tensor.new{{1, 2}, {0.5, -1}, {2, 0}, {-1, 1}}
  local y = tensor.new{{1, 0}, {0, 1}, {1, 1}, {0, 0}}
  local want = { 0.489937514, -0.0772812366, 0.155812502, 0.16015625, 0.024312498, 0.181906253 }
  for _, f in ipairs{ 64, 3 } do
    local m = nn.Sequential{nn.Dense(2)}
    m:build({2})
    m.trainable_variables[1]:assign(tensor.new{{0.5, -0.25}, {0.1, 0.3}})
    m.trainable_variables[2]:assign(tensor.new{0.0, 0.1})
    m:compile{optimizer = optim.SGD{learning_rate = 0.1, loss_scale_factor = f}, loss = "mse"}
    local h = m:fit(x, y, {batch_size = 2, epochs = 1, shuffle = false, verbose = 0})
    local got = {}
    for _, v in ipairs(m.trainable_variables) do
      for _, e in ipairs(v:reshape(-1):totable()) do got[#got + 1] = e end
    end
    for i = 1, 6 do T.near(got[i], want[i], 1e-6, ("factor %g [%d]"):format(f, i)) end
    T.near(h.history.loss[1], 0.5393663, 1e-6, ("factor %g: the loss is reported unscaled"):format(f))
  end
  T.eq(ldist.optim._config(optim.SGD{loss_scale_factor = 8}).loss_scale.scale, 8, "shipped as a fixed loss scale")
end)

T.test("clipnorm, global_clipnorm and clipvalue clip as Keras's do", function()
  -- gradients {3, 4} and {0, 1}, SGD at rate 1 from zeros; the expected
  -- values are Keras 3.15's (keras.optimizers.SGD(1.0, clipnorm=1.0), ...)
  local function step(opts)
    opts.learning_rate = 1
    local a, b = tensor.Variable{0.0, 0.0}, tensor.Variable{0.0, 0.0}
    optim.SGD(opts):apply_gradients({tensor.new{3.0, 4.0}, tensor.new{0.0, 1.0}}, {a, b})
    return a:totable(), b:totable()
  end
  local function near(got, want, what)
    for i = 1, #want do T.near(got[i], want[i], 1e-6, ("%s [%d]"):format(what, i)) end
  end
  local a, b = step{clipnorm = 1}                 -- each gradient to norm 1 on its own
  near(a, {-0.6, -0.8}, "clipnorm a"); near(b, {0, -1}, "clipnorm b")
  a, b = step{global_clipnorm = 1}                -- both by their joint norm sqrt(26)
  near(a, {-0.58834841, -0.78446454}, "global_clipnorm a"); near(b, {0, -0.19611613}, "global_clipnorm b")
  a, b = step{clipvalue = 0.5}                    -- each element to [-0.5, 0.5]
  near(a, {-0.5, -0.5}, "clipvalue a"); near(b, {0, -0.5}, "clipvalue b")
  a, b = step{clipnorm = 0}                       -- 0 is off, as in Keras
  near(a, {-3, -4}, "clipnorm 0 a")
  -- an infinite joint norm makes every gradient NaN (Keras: c * min(1/n, 1/c) + (n - n))
  local v = tensor.Variable{0.0, 0.0}
  optim.SGD{learning_rate = 1, global_clipnorm = 1}:apply_gradients({tensor.new{1e30, 1.0}}, {v})
  T.ok(v[1] ~= v[1], "global_clipnorm with an infinite norm gives NaN")
  -- the config carries the clipping, and only the optimizer's own options
  local c = ldist.optim._config(optim.SGD{global_clipnorm = 2})
  T.eq(c.global_clipnorm, 2); T.eq(c.beta_1, nil, "no Adam options in SGD's config")
  T.eq(ldist.optim._config(optim.Adam{clipvalue = 0.25}).clipvalue, 0.25)
end)

T.test("an optimizer's unknown option, or one of Keras's that ldist does not do, is an error naming it", function()
  T.raises(function() optim.Adam{amsgrads = true} end, "optim.Adam: unknown option 'amsgrads'; did you mean 'amsgrad'? (it takes beta_1,")
  T.raises(function() optim.SGD{beta_1 = 0.9} end, "optim.SGD: unknown option 'beta_1' (it takes momentum, nesterov,")
  T.raises(function() optim.SGD{decay = 1e-4} end, "Keras 3 has no decay")
  T.raises(function() optim.SGD{amsgrad = true} end, "optim.SGD: unknown option 'amsgrad'")
  T.raises(function() optim.Adam{centered = true} end, "optim.Adam: unknown option 'centered'")
  T.raises(function() optim.Adam{loss_scale_factor = -1} end, "loss_scale_factor must be a positive number, got -1")
  T.raises(function() optim.SGD{clipnorm = 1, clipvalue = 1} end, "only one of clipnorm, clipvalue and global_clipnorm")
  T.raises(function() optim.SGD{clipnorm = -1} end, "clipnorm must be a number >= 0, got -1")
  -- a model saved before the options were checked described its optimizer
  -- with every field: it still loads, as the same optimizer
  local old = nn._build_optimizer{ name = "Adam", learning_rate = 0.002, momentum = 0, beta_1 = 0.8, beta_2 = 0.99,
                                   epsilon = 1e-7, rho = 0.9, weight_decay = 0, nesterov = false }
  local oc = ldist.optim._config(old)
  T.eq(oc.name, "Adam"); T.near(oc.beta_1, 0.8, 1e-7); T.near(oc.learning_rate, 0.002, 1e-9); T.eq(oc.rho, nil)
  -- Keras's defaults and the off values are accepted
  T.ok(optim.Adam{amsgrad = false, use_ema = false, ema_momentum = 0.99, name = "adam"}, "off values")
  T.ok(optim.RMSprop{centered = false, momentum = 0.9, rho = 0.8}, "RMSprop's own")
end)

-- Keras 3.15's values of each schedule at these steps, printed by
--   S = keras.optimizers.schedules; [float(S.<schedule>(step)) for step in STEPS]
local STEPS = { 0, 1, 5, 9, 10, 11, 15, 20, 25, 29, 30, 31, 45, 70, 100 }
local KERAS_SCHEDULES = {
  { "InverseTimeDecay(0.1, 10, 0.5)", optim.schedules.InverseTimeDecay(0.1, 10, 0.5),
    { 0.100000001, 0.0952381045, 0.0799999982, 0.068965517, 0.0666666701, 0.0645161346, 0.0571428575, 0.0500000007,
      0.0444444455, 0.0408163257, 0.0399999991, 0.0392156877, 0.0307692308, 0.0222222228, 0.0166666675 } },
  { "InverseTimeDecay(0.1, 10, 0.5, staircase=True)", optim.schedules.InverseTimeDecay(0.1, 10, 0.5, { staircase = true }),
    { 0.100000001, 0.100000001, 0.100000001, 0.100000001, 0.0666666701, 0.0666666701, 0.0666666701, 0.0500000007,
      0.0500000007, 0.0500000007, 0.0399999991, 0.0399999991, 0.0333333351, 0.0222222228, 0.0166666675 } },
  { "PolynomialDecay(0.1, 20, end_learning_rate=0.01, power=2.0)",
    optim.schedules.PolynomialDecay(0.1, 20, { end_learning_rate = 0.01, power = 2 }),
    { 0.100000001, 0.0912249982, 0.0606250018, 0.0372250006, 0.0324999988, 0.0282249991, 0.015625, 0.00999999978,
      0.00999999978, 0.00999999978, 0.00999999978, 0.00999999978, 0.00999999978, 0.00999999978, 0.00999999978 } },
  { "PolynomialDecay(0.1, 20, end_learning_rate=0.01, power=0.5, cycle=True)",
    optim.schedules.PolynomialDecay { initial_learning_rate = 0.1, decay_steps = 20, end_learning_rate = 0.01, power = 0.5, cycle = true },
    { 0.100000001, 0.097721152, 0.0879422873, 0.0767457932, 0.0736396089, 0.0703738332, 0.0549999997, 0.00999999978,
      0.0651135221, 0.0571964011, 0.0549999997, 0.0526907519, 0.0549999997, 0.0418198034, 0.00999999978 } },
  { "CosineDecayRestarts(0.1, 10, t_mul=2.0, m_mul=0.5, alpha=0.1)",
    optim.schedules.CosineDecayRestarts(0.1, 10, { t_mul = 2, m_mul = 0.5, alpha = 0.1 }),
    { 0.100000001, 0.0977975428, 0.054999996, 0.0122024585, 0.0550000034, 0.0547229908, 0.0484099053, 0.0324999988,
      0.0165900979, 0.0102770124, 0.0324999988, 0.0324653201, 0.0255551878, 0.0212500002, 0.0177775957 } },
  { "CosineDecayRestarts(0.1, 10, t_mul=1.0)", optim.schedules.CosineDecayRestarts(0.1, 10, { t_mul = 1 }),
    { 0.100000001, 0.0975528285, 0.049999997, 0.00244717603, 0.100000001, 0.0975528285, 0.049999997, 0.100000001,
      0.049999997, 0.00244716718, 0.100000001, 0.0975528285, 0.049999997, 0.100000001, 0.100000001 } },
  { "CosineDecay(0.01, 30, alpha=0.1, warmup_target=0.1, warmup_steps=10)",
    optim.schedules.CosineDecay(0.01, 30, { alpha = 0.1, warmup_target = 0.1, warmup_steps = 10 }),
    { 0.00999999978, 0.0190000013, 0.0549999997, 0.0909999982, 0.100000001, 0.0997534841, 0.0939711481, 0.0775000006,
      0.054999996, 0.0366968475, 0.0324999951, 0.0285496656, 0.0100000007, 0.0100000007, 0.0100000007 } },
}
T.test("InverseTimeDecay, PolynomialDecay, CosineDecayRestarts and CosineDecay's warmup equal Keras 3's", function()
  for _, c in ipairs(KERAS_SCHEDULES) do
    for i, step in ipairs(STEPS) do
      T.near(c[2](step), c[3][i], 2e-7 + 2e-6 * c[3][i], ("%s at step %d"):format(c[1], step))
    end
    -- an optimizer shipped to other processes (a LocalCluster's workers, ps tasks) keeps its schedule
    local o = nn._build_optimizer(optim._config(optim.SGD { learning_rate = c[2] }))
    local back = optim._config(o).learning_rate
    local again = setmetatable(back, getmetatable(c[2]))
    for _, step in ipairs(STEPS) do T.near(again(step), c[2](step), 1e-12, c[1] .. " shipped, at step " .. step) end
  end
  -- the optimizer steps by them: its rate after 12 updates is the schedule's at step 12
  local s = optim.schedules.CosineDecayRestarts(0.1, 10, { m_mul = 0.5 })
  local o = optim.SGD { learning_rate = s }
  local v = tensor.Variable(tensor.ones(2))
  for _ = 1, 12 do o:apply_gradients({ tensor.ones(2) }, { v }) end
  T.near(o.learning_rate, s(12), 1e-12, "the optimizer's rate after 12 steps")
  T.eq(tostring(optim.schedules.PolynomialDecay(0.1, 20, { cycle = true })),
    "<PolynomialDecay initial_learning_rate=0.1 decay_steps=20 end_learning_rate=0.0001 power=1.0 cycle>")
  T.raises(function() return optim.schedules.CosineDecayRestarts(0.1, 0) end, "first_decay_steps must be a positive integer")
  T.raises(function() return optim.schedules.CosineDecay(0.1, 10, { warmup_steps = -1 }) end,
    "warmup_steps must be a non-negative integer")
  T.raises(function() return optim.schedules.PolynomialDecay(0.1) end, "decay_steps is required")
  T.raises(function() return optim.schedules.PolynomialDecay(0.1, 10, { cylce = true }) end, "cylce")
end)

T.test("learning-rate schedules", function()
  local s = optim.schedules.ExponentialDecay{initial_learning_rate = 0.1, decay_steps = 10, decay_rate = 0.5}
  T.near(s(10), 0.05); T.near(s(20), 0.025)
  local o = optim.SGD{learning_rate = s}
  T.near(o.learning_rate, 0.1)
  local c = optim.schedules.CosineDecay{initial_learning_rate = 1, decay_steps = 100}
  T.near(c(50), 0.5, 1e-6); T.near(c(100), 0, 1e-6)
  local p = optim.schedules.PiecewiseConstantDecay{boundaries = {5}, values = {1, 0.1}}
  T.eq(p(3), 1); T.near(p(6), 0.1)
  -- Keras's positional form, and a table of the rest after it
  T.near(optim.schedules.ExponentialDecay(0.1, 10, 0.5)(20), 0.025)
  T.near(optim.schedules.ExponentialDecay(0.1, 10, 0.5, {staircase = true})(15), 0.05)
  T.near(optim.schedules.PiecewiseConstantDecay({5}, {1, 0.1})(6), 0.1)
  T.eq(tostring(optim.schedules.ExponentialDecay(0.1, 10, 0.5)),
    "<ExponentialDecay initial_learning_rate=0.1 decay_steps=10 decay_rate=0.5>")
  -- Keras's required arguments are required (they had defaults), and a
  -- misspelt option is named (it was ignored: staircas decayed smoothly)
  T.raises(function() return optim.schedules.ExponentialDecay{initial_learning_rate = 0.1, decay_steps = 10} end,
    "optim.schedules.ExponentialDecay: decay_rate is required")
  T.raises(function() return optim.schedules.CosineDecay(0.1) end, "optim.schedules.CosineDecay: decay_steps is required")
  T.raises(function() return optim.schedules.ExponentialDecay(0.1, 10, 0.5, {staircas = true}) end,
    "unknown option 'staircas'; did you mean 'staircase'?")
  T.raises(function() return optim.schedules.CosineDecay(0.1, 0) end, "decay_steps must be a positive integer, got 0")
  T.raises(function() return optim.schedules.ExponentialDecay(0.1, 10, 0.5, {decay_rate = 0.9}) end,
    "decay_rate given twice")
  local f = optim.SGD{learning_rate = function(step) return 0.5 / (step + 1) end}
  local v = tensor.Variable{0.0}
  f:apply_gradients({tensor.new{1.0}}, {v}); f:apply_gradients({tensor.new{1.0}}, {v})
  T.near(v[0], -(0.5 + 0.25))
end)

T.test("optimizer errors", function()
  T.raises(function() return optim.SGD{learning_rate = -1} end, "learning_rate must be zero or positive")
  -- Keras takes a rate of 0: the steps run (iterations count them) and leave the weights
  for _, make in ipairs { optim.SGD, optim.Adam } do
    local m0 = nn.Sequential { nn.Dense(2) }
    m0:compile { optimizer = make(0), loss = "mse" }
    m0:build { 3 }
    local before = m0:get_weights()
    m0:fit(tensor.ones(4, 3), tensor.zeros(4, 2), { epochs = 2, batch_size = 2, verbose = 0 })
    T.eq(m0._optimizer.iterations, 4, "rate 0: the steps still count")
    for i, w in ipairs(m0:get_weights()) do T.eq((w - before[i]):abs():max():item(), 0, "rate 0 leaves weight " .. i) end
  end
  T.raises(function() optim.SGD():apply_gradients({tensor.new{1, 2}}, {tensor.Variable{1}}) end, "gradient 1 has shape 2")
  T.raises(function() optim.SGD():apply_gradients({tensor.new{1}}, {}) end, "1 gradients for 0 variables")
end)

T.test("a custom training loop learns a linear function", function()
  tensor.seed(5)
  local x = tensor.normal(256, 3)
  local w_true = tensor.new{{1.5}, {-2.0}, {0.5}}
  local y = x:matmul(w_true) + 0.3
  local model = nn.Sequential{nn.Dense(1)}
  local opt = optim.SGD{learning_rate = 0.1}
  local mse = losses.MeanSquaredError()
  local first, last
  for i = 1, 200 do
    local tape = autograd.GradientTape()
    local loss = tape:record(function() return mse(y, model(x, {training = true})) end)
    opt:apply_gradients(tape:gradient(loss, model.trainable_variables), model.trainable_variables)
    first = first or loss:item(); last = loss:item()
  end
  T.ok(last < 1e-4 and last < first / 1000, ("loss %g -> %g"):format(first, last))
  T.near(model.trainable_variables[1][1][0], -2.0, 1e-2)
  T.near(model.trainable_variables[2][0], 0.3, 1e-2)
end)

T.test("compile, fit, evaluate and predict on arrays", function()
  tensor.seed(2)
  local x = tensor.normal(512, 2)
  local y = (x:slice(1, 0, 1):reshape(-1) + x:slice(1, 1, 2):reshape(-1)):gt(0):astype("int64")
  local m = nn.Sequential{nn.Dense(16, "relu"), nn.Dense(2)}
  T.raises(function() m:fit(x, y) end, "call model:compile")
  m:compile{optimizer = "adam", loss = losses.SparseCategoricalCrossentropy{from_logits = true}, metrics = {"accuracy"}}
  local h = m:fit(x, y, {epochs = 15, batch_size = 32, verbose = 0})
  T.eq(#h.loss, 15)
  T.ok(h.loss[15] < h.loss[1], "loss falls")
  T.ok(h.accuracy[15] > 0.9, "accuracy " .. h.accuracy[15])
  local r = m:evaluate(x, y)
  T.ok(r.accuracy > 0.9)
  local p = m:predict(x)
  T.eq(p.shape[1], 512)
  T.raises(function() m:compile{optimizer = "adagradd", loss = "mse"} end, "unknown optimizer 'adagradd'")
  m:compile{optimizer = "ftrl", loss = "mse"}
  T.eq(m._optimizer.name, "Ftrl", "compile takes Keras's optimizer names")
  T.raises(function() m:compile{loss = "hingee"} end, "unknown loss 'hingee'")
end)

T.test("weights save and load (safetensors)", function()
  local path = os.tmpname()
  local m = nn.Sequential{nn.Dense(4, "relu"), nn.Dense(2)}
  local x = tensor.normal(3, 5)
  local y1 = m(x)
  m:save_weights(path)
  local m2 = nn.Sequential{nn.Dense(4, "relu"), nn.Dense(2)}
  m2:build{5}
  m2:load_weights(path)
  T.eq((m2(x) - y1):abs():max():item(), 0)
  local m3 = nn.Sequential{nn.Dense(3)}
  m3:build{5}
  T.raises(function() m3:load_weights(path) end, "holds 4 tensors, the model has 2 weights")
  T.raises(function() m2:load_weights("/nonexistent/w.safetensors") end, "/nonexistent/w.safetensors")
  os.remove(path)
end)

T.test("the default strategy", function()
  local s = distribute.get_strategy()
  T.eq(s.num_replicas_in_sync, 1)
  do
    local _ <close> = s:scope()
    T.eq(distribute.get_strategy(), s)
  end
  T.eq(s:run(function(a, b) return a + b end, 2, 3), 5)
  T.eq(s:reduce("sum", tensor.new(2.5)), 2.5)
  T.eq(s:reduce("sum", tensor.new{1, 2, 3}, {axis = 0}), 6)
  T.raises(function() s:reduce("max", 1) end, "\"sum\" or \"mean\" expected")
  T.near(distribute.compute_average_loss(tensor.new{1, 2, 3}, {global_batch_size = 6}):item(), 1)
  T.raises(function() distribute.OneDeviceStrategy("cuda:7") end, "unknown device 'cuda:7'")
end)

-- Keras's noise layers: active in training only, with the distribution
-- Keras draws from (the values differ from Keras's: another generator;
-- conformance's fit_noise checks that every strategy draws the same)
T.test("GaussianNoise, GaussianDropout, SpatialDropout1D/2D/3D: training only, Keras's distributions, gradients", function()
  tensor.seed(3)
  local x = tensor.ones(200, 50, 4)
  local g = nn.GaussianNoise(0.5)
  T.eq((g(x) - x):abs():sum():item(), 0, "GaussianNoise is the identity in inference")
  local e = g(x, { training = true }) - x
  T.ok(math.abs(e:mean():item()) < 0.01, "noise mean 0: " .. e:mean():item())
  T.ok(math.abs(e:std():item() - 0.5) < 0.01, "noise stddev 0.5: " .. e:std():item())
  local gd = nn.GaussianDropout(0.2)
  local z = gd(x, { training = true })
  T.ok(math.abs(z:mean():item() - 1) < 0.01, "GaussianDropout: mean 1")
  T.ok(math.abs(z:std():item() - math.sqrt(0.2 / 0.8)) < 0.01, "stddev sqrt(rate / (1 - rate)): " .. z:std():item())
  T.eq((gd(x) - x):abs():sum():item(), 0, "and the identity in inference")
  for k, shape in ipairs({ { 100, 9, 8 }, { 100, 3, 3, 8 }, { 100, 3, 1, 3, 8 } }) do
    local sd = nn["SpatialDropout" .. k .. "D"](0.3)
    local w = sd(tensor.ones(table.unpack(shape)), { training = true }):reshape(100, 9, 8)
    local hi, lo = w:max(1), w:min(1)
    T.eq((hi - lo):abs():max():item(), 0, k .. "D: a channel of an example is dropped whole or kept whole")
    local dropped = hi:eq(0):mean():item()
    T.ok(math.abs(dropped - 0.3) < 0.05, k .. "D: a fraction rate of the channels dropped: " .. dropped)
    T.near(w:max():item(), 1 / 0.7, 1e-6, k .. "D: the rest scaled by 1/(1 - rate)")
  end
  -- the gradients: 1 through added noise, the mask through multiplied noise
  local v = tensor.Variable(tensor.ones(4, 6))
  local tape = autograd.GradientTape { persistent = true }
  local a, b = tape:record(function() return nn.GaussianNoise(0.5)(v, { training = true }):sum(), nn.SpatialDropout1D(0.5)(v:reshape(2, 2, 6), { training = true }) end)
  T.eq(tape:gradient(a, v):sum():item(), 24, "GaussianNoise passes the gradient")
  local gb = tape:gradient(b:sum(), v)
  T.ok(gb:eq(0):sum():item() + gb:eq(2):sum():item() == 24, "SpatialDropout's gradient is its mask (0 or 1/(1 - rate))")
  -- errors
  T.raises(function() nn.GaussianNoise(-1) end, "GaussianNoise stddev must be finite and >= 0")
  T.raises(function() nn.GaussianDropout(1) end, "GaussianDropout rate must be in [0, 1)")
  T.raises(function() nn.SpatialDropout2D(0.5)(tensor.ones(2, 3, 4)) end, "needs inputs of 4 axes (batch, height, width, channels)")
  T.eq(nn.GaussianNoise(0)(x, { training = true }):sum():item(), 40000, "stddev 0 is the identity")
end)

T.done()
