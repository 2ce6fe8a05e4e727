-- test_masking.lua - Keras 3's masks and recurrent states: Embedding{mask_zero}, Masking, and the
-- layers that use a mask (LSTM, GRU, SimpleRNN forward and backward,
-- Bidirectional, GlobalAveragePooling1D) or pass it on (Dense,
-- LayerNormalization, Dropout, TimeDistributed, the merging layers), the loss
-- and compile's accuracy over the steps that count. Each model of
-- tests/fixtures/masking.lua (scripts/fixtures/make_mask_fixtures.py, Keras
-- 3.15 / TF 2.21) is built here with Keras's weights, on cpu:0 and on the
-- logical device cpu:1: its outputs and their mask, its loss and gradients,
-- evaluate's loss and accuracy, and the weights after fit equal Keras's; with
-- them seq2seq models (initial_state=, return_state), made again from JSON
-- and files.
local T = dofile("tests/lua/testlib.lua")
ldist.config.cpu_devices(2)
local F = dofile("tests/fixtures/masking.lua")

local function t_of(a)
  local t = tensor.new(a.v, a.v[1] and math.type(a.v[1]) == "integer" and { dtype = "int64" } or nil)
  return t:reshape(a.shape)
end
local function flat(t) return t:cpu():reshape { t:numel() }:totable() end
local function near_all(got, want, tol, what)
  T.eq(table.concat(got.shape, "x"), table.concat(want.shape, "x"), what .. ": shape")
  local g = flat(got)
  for i, w in ipairs(want.v) do
    if not (math.abs(g[i] - w) <= tol * (1 + math.abs(w))) then
      error(("%s [%d]: %.9g, Keras %.9g"):format(what, i, g[i], w), 0)
    end
  end
end
local function build(c, dev)
  local function make()
    local m = assert(load("return " .. c.build, "=" .. c.name, "t", _ENV))()
    local ws = {}
    for i, w in ipairs(c.weights) do ws[i] = t_of(w) end
    m:set_weights(ws)
    return m
  end
  if not dev then return make() end
  local m
  distribute.OneDeviceStrategy(dev):scope(function() m = make() end)
  return m
end
local function inputs(c, dev)
  local xs = {}
  for i, x in ipairs(c.x) do xs[i] = dev and t_of(x):to(dev) or t_of(x) end
  return #xs == 1 and xs[1] or xs
end

for _, dev in ipairs { false, "cpu:1" } do
  local where = dev or "cpu:0"
  T.test("Keras's outputs, masks, losses and gradients of masked models on " .. where, function()
    for _, c in ipairs(F.cases) do
      local m, x = build(c, dev), inputs(c, dev)
      local y = t_of(c.y)
      local loss = assert(load("return " .. c.loss, "=loss", "t", _ENV))()
      local out = m(x)
      T.eq(out.device, where, c.name .. ": the output's device")
      near_all(out, c.out, 2e-5, c.name .. ": output")
      if c.mask then near_all(T.ok(out.keras_mask, c.name .. ": a mask"), c.mask, 0, c.name .. ": mask")
      else T.eq(out.keras_mask, nil, c.name .. ": no mask") end
      local vars = m.trainable_variables
      local tape = autograd.GradientTape()
      local lv = tape:record(function() return loss(dev and y:to(dev) or y, m(x, { training = c.training })) end)
      T.near(lv:item(), c.loss_value, 2e-6 * (1 + math.abs(c.loss_value)), c.name .. ": loss")
      local g = tape:gradient(lv, vars)
      T.eq(#g, #c.grads, c.name .. ": a gradient per weight")
      for i, want in ipairs(c.grads) do near_all(g[i], want, 5e-5, c.name .. ": gradient of " .. vars[i].name) end
    end
  end)

  T.test("evaluate's loss and accuracy over the steps that count, and fit, as Keras's, on " .. where, function()
    for _, c in ipairs(F.cases) do
      local m, x = build(c, dev), inputs(c, dev)
      local loss = assert(load("return " .. c.loss, "=loss", "t", _ENV))()
      if c.evaluate then   -- a model built under a strategy's scope computes there
        m:compile { optimizer = optim.SGD { learning_rate = 0.1 }, loss = loss, metrics = { "accuracy" } }
        local r = m:evaluate(x, t_of(c.y), { batch_size = 4, verbose = 0 })
        T.near(r.loss, c.evaluate.loss, 2e-6 * (1 + c.evaluate.loss), c.name .. ": evaluate's loss")
        T.near(r.accuracy, c.evaluate.accuracy, 1e-6, c.name .. ": evaluate's accuracy")
      end
      if not c.fitted then goto next end
      m = build(c, dev)
      m:compile { optimizer = optim.SGD { learning_rate = 0.1 }, loss = loss }
      m:fit(x, t_of(c.y), { batch_size = 2, epochs = 1, shuffle = false, verbose = 0 })
      m:fit(x, t_of(c.y), { batch_size = 4, epochs = 1, shuffle = false, verbose = 0 })
      T.eq(m.weights[1].device, where, c.name .. ": trained where it was built")
      local ws = m:get_weights()
      for i, want in ipairs(c.fitted) do near_all(ws[i], want, 2e-5, c.name .. ": weight " .. i .. " after fit") end
      ::next::
    end
  end)
end

T.test("every model made again from its JSON and from a saved file gives the same outputs (several outputs, states)", function()
  for _, c in ipairs(F.cases) do
    local m, x = build(c), inputs(c)
    local m2 = nn.model_from_json(m:to_json())
    m2:set_weights(m:get_weights())
    near_all(m2(x), c.out, 2e-5, c.name .. ": from JSON")
    local path = T.tmpdir() .. "/m.keras"
    m:save(path)
    near_all(nn.load_model(path)(x), c.out, 2e-5, c.name .. ": from a file")
  end
end)

T.test("under mixed_bfloat16 and mixed_float16 the masks are the same and the loss is float32's within half precision", function()
  for _, policy in ipairs { "mixed_bfloat16", "mixed_float16" } do
    for _, c in ipairs(F.cases) do
      mixed_precision.set_global_policy(policy)
      local ok, err = pcall(function()
        local m, x = build(c), inputs(c)
        local loss = assert(load("return " .. c.loss, "=loss", "t", _ENV))()
        local out = m(x, { training = c.training })   -- the loss of the fixture is the training call's
        if c.mask then near_all(T.ok(out.keras_mask, c.name .. ": a mask"), c.mask, 0, policy .. " " .. c.name .. ": mask") end
        local lv = loss(t_of(c.y), out):item()
        T.near(lv, c.loss_value, (policy == "mixed_bfloat16" and 2e-2 or 2e-3) * (1 + c.loss_value),
          policy .. " " .. c.name .. ": loss")
      end)
      mixed_precision.set_global_policy("float32")
      if not ok then error(err, 0) end
    end
  end
end)

T.test("a mask given to a layer's call, the masks of layers that drop them, and bad masks named", function()
  local x = tensor.new { { { 1, 2 }, { 3, 4 }, { 5, 6 } } }
  local lstm = nn.LSTM(2, { return_sequences = true })
  local a = lstm(x, { mask = tensor.new { { 1, 1, 0 } } })
  T.near((a[0][2] - a[0][1]):abs():sum():item(), 0, 0, "a masked step repeats the previous output")
  T.eq(flat(a.keras_mask)[3], 0, "the mask given comes out with the sequence")
  local b = lstm(x)
  T.ok((b[0][2] - b[0][1]):abs():sum():item() > 0, "without it the step counts")
  T.eq(b.keras_mask, nil, "no mask given, none made")
  -- layers Keras does not mask (Conv1D, Flatten, GlobalMaxPooling1D) stop it; Dense passes it on
  local e = nn.Embedding(4, 3, { mask_zero = true })(tensor.new({ { 1, 0, 2 } }, { dtype = "int64" }))
  T.ok(nn.Dense(2)(e).keras_mask, "Dense passes the mask on")
  T.eq(nn.Conv1D(2, 1)(e).keras_mask, nil, "Conv1D stops it")
  T.eq(nn.GlobalMaxPooling1D()(e).keras_mask, nil, "GlobalMaxPooling1D stops it")
  T.eq(nn.Embedding(4, 3)(tensor.new({ { 1, 0, 2 } }, { dtype = "int64" })).keras_mask, nil, "mask_zero is off by default")
  -- the layer's config carries the options
  T.eq(nn.Embedding(4, 3, { mask_zero = true }):get_config().mask_zero, true)
  T.eq(nn.Masking { mask_value = -1 }:get_config().mask_value, -1)
  T.raises(function() lstm(x, { mask = tensor.new { { 1, 1 } } }) end, "mask of shape 1x2 for inputs 1x3x2")
  T.raises(function() nn.GlobalAveragePooling1D()(x, { mask = tensor.new { 1 } }) end,
    "takes a mask [batch, steps] for its inputs 1x3x2; got a mask of shape 1")
  T.raises(function() nn.Masking()(tensor.new { 1, 2 }) end, "needs inputs [batch, ..., features]")
  -- Softmax takes the mask where it broadcasts against its input, and says where it does not (Keras's error)
  near_all(nn.Softmax()(tensor.new { { 1, 2, 3 } }, { mask = tensor.new { { 1, 1, 0 } } }),
    { shape = { 1, 3 }, v = { 0.26894142, 0.73105858, 0 } }, 1e-6, "a masked softmax")
  local seq = nn.Sequential { nn.Embedding(5, 3, { mask_zero = true }), nn.LSTM(4, { return_sequences = true }), nn.Dense(3),
    nn.Softmax() }
  T.raises(function() seq(tensor.new({ { 1, 2, 0, 0, 0 } }, { dtype = "int64" })) end,
    "its input's mask 1x5 does not broadcast to the input 1x5x3")
  -- the session goes on
  T.eq(#lstm(x).shape, 3)
end)

T.test("return_state gives the final states as more values, initial_state starts from given ones; errors name the problem", function()
  local x = tensor.normal(2, 4, 3)
  local lstm = nn.LSTM(5, { return_state = true })
  local y, h, c = lstm(x)
  T.eq(table.concat(c.shape, "x"), "2x5", "LSTM: y, h, c")
  T.near((y - h):abs():max():item(), 0, 0, "the last output is h")
  T.eq(#lstm.output_shape, 3, "output_shape lists the three")
  local dec = nn.LSTM(5, { return_sequences = true })
  local z = dec(x, { initial_state = { h, c } })
  T.ok((z - dec(x)):abs():max():item() > 0, "the states given change the outputs")
  local z0 = dec(x, { initial_state = { tensor.zeros(2, 5), tensor.zeros(2, 5) } })
  T.near((z0 - dec(x)):abs():max():item(), 0, 0, "zero states are the default")
  local g = nn.GRU(3, { return_state = true, return_sequences = true })
  local seq, gh = g(x)
  T.near((seq[0][3] - gh[0]):abs():max():item(), 0, 0, "GRU: the sequence and its last state")
  local outs = table.pack(nn.Bidirectional(nn.LSTM(2, { return_state = true }))(x))
  T.eq(outs.n, 5, "Bidirectional(LSTM): the output and four states")
  -- Keras 3 leaves a layer given initial_state unmasked (its call fills `mask` for one tensor argument
  -- only), the output still carrying the mask; mask= given to the call applies
  local xm = nn.Masking()(tensor.new { { { 1, 1, 1 }, { 0, 0, 0 }, { 2, 1, 0 }, { 1, 2, 3 } }, { { 1, 0, 1 }, { 2, 2, 2 }, { 0, 0, 0 }, { 0, 0, 0 } } })
  local h2, c2 = tensor.normal(2, 5), tensor.normal(2, 5)
  local un = dec(xm, { initial_state = { h2, c2 } })
  T.ok((un[0][1] - un[0][0]):abs():max():item() > 0, "initial_state: the masked step is not skipped, as Keras 3's")
  T.eq(flat(un.keras_mask)[2], 0, "and the output carries the mask")
  local mk = dec(xm, { initial_state = { h2, c2 }, mask = xm.keras_mask })
  T.near((mk[0][1] - mk[0][0]):abs():max():item(), 0, 0, "mask= given: the masked step repeats the output")
  T.raises(function() dec(x, { initial_state = { h } }) end, "initial_state is {h, c}, got 1 tensor")
  T.raises(function() dec(x, { initial_state = { h, tensor.zeros(2, 4) } }) end,
    "initial state 2 must be [2, 5] (the batch, its units) of floats; got float32 2x4")
  T.raises(function() nn.Dense(2)(x, { initial_state = { h } }) end, "initial_state is an option of the recurrent layers")
  T.raises(function() dec(x, { initial_state = h }) end, "initial_state must be a list of tensors")
  T.eq(nn.LSTM(2, { return_state = true }):get_config().return_state, true)
  local inp = nn.Input { shape = { 4, 3 } }
  local _, sh, sc = nn.LSTM(5, { return_state = true })(inp)
  local fm = nn.Model { inputs = inp, outputs = nn.Dense(1)(nn.Concatenate() { sh, sc }) }
  T.ok(fm:summary_text():find("[(None, 5), (None, 5), (None, 5)]", 1, true), "the summary lists the outputs, as Keras's")
  -- a subclassed seq2seq model trains with them
  local S2S = nn.Model:extend("S2S")
  function S2S:init() self.enc = nn.GRU(4, { return_state = true }); self.dec = nn.GRU(4, { return_sequences = true }); self.out = nn.Dense(2) end
  function S2S:call(inp, training)
    local _, st = self.enc(inp[1], { training = training })
    return self.out(self.dec(inp[2], { initial_state = { st }, training = training }))
  end
  local m = S2S()
  m:compile { optimizer = "adam", loss = losses.SparseCategoricalCrossentropy { from_logits = true } }
  local xa, xb = tensor.normal(16, 5, 3), tensor.normal(16, 4, 3)
  local yl = xb:slice(2, 0, 1):reshape { 16, 4 }:gt(0):astype("int64")
  local hist = m:fit({ xa, xb }, yl, { epochs = 15, batch_size = 8, verbose = 0 })
  T.ok(hist.loss[15] < hist.loss[1], "the loss falls")
end)

T.done()
