-- test_rnn_dropout.lua - Keras's dropout and recurrent_dropout of SimpleRNN,
-- LSTM, GRU and Bidirectional (DropoutRNNCell): in training, masks drawn
-- once per call and the same at every step (variational dropout), kept
-- values scaled by 1 / (1 - rate); in inference, nothing. The masks are read
-- out through a SimpleRNN whose weights make its output the mask itself;
-- LSTM's and GRU's per-gate masks (Keras's implementation 1) through their
-- expectation. Every strategy draws the same: tests/conformance's
-- rnn_dropout case.
local T = dofile("tests/lua/testlib.lua")

local function flat(t) return t:cpu():reshape { t:numel() }:totable() end

-- a linear SimpleRNN, kernel k, recurrent kernel r, bias b (units = features)
local function linear_rnn(n, opts, k, r, b)
  opts.activation, opts.return_sequences = "linear", true
  local l = nn.SimpleRNN(n, opts)
  l(tensor.zeros(1, 1, n))
  l.kernel:assign(k)
  l.recurrent_kernel:assign(r)
  l.bias:assign(b)
  return l
end

T.test("dropout: one input mask per sequence, the same at every step, 1/(1-rate) where kept", function()
  local n, rate = 64, 0.25
  local l = linear_rnn(n, { dropout = rate }, tensor.eye(n), tensor.zeros(n, n), tensor.zeros(n))
  local x = tensor.ones(200, 3, n)
  tensor.seed(5)
  local y = l(x, { training = true })   -- y_t = x_t * mask: the mask itself
  local v, zeros = flat(y), 0
  for i = 0, 199 do
    for t = 1, 2 do
      for j = 1, n do
        T.eq(v[(i * 3 + t) * n + j], v[(i * 3) * n + j], "the same mask at every step")
      end
    end
    for j = 1, n do
      local m = v[i * 3 * n + j]
      T.ok(m == 0 or math.abs(m - 1 / (1 - rate)) < 1e-6, "kept values are scaled by 1/(1-rate), got " .. m)
      if m == 0 then zeros = zeros + 1 end
    end
  end
  T.near(zeros / (200 * n), rate, 0.02, "the fraction dropped")
  local y2 = l(x, { training = true })
  T.ok((y2 - y):abs():sum():item() > 0, "a new mask at each call")
  T.near((l(x) - x):abs():sum():item(), 0, 0, "inference drops nothing")
end)

T.test("recurrent_dropout: one mask on the state, the same at every step", function()
  local n, rate = 32, 0.5
  -- h1 = b = 1; h2 = 1 + h1 * m; h3 = 1 + h2 * m: h2 - 1 is the mask, h3 = 1 + m + m^2
  local l = linear_rnn(n, { recurrent_dropout = rate }, tensor.zeros(n, n), tensor.eye(n), tensor.ones(n))
  local y = flat(l(tensor.zeros(50, 3, n), { training = true }))
  local zeros = 0
  for i = 0, 49 do
    for j = 1, n do
      local m = y[(i * 3 + 1) * n + j] - 1
      T.ok(m == 0 or math.abs(m - 2) < 1e-6, "a kept state is doubled (rate 0.5), got " .. m)
      T.near(y[(i * 3 + 2) * n + j], 1 + m + m * m, 1e-5, "the same mask at the next step")
      if m == 0 then zeros = zeros + 1 end
    end
  end
  T.near(zeros / (50 * n), rate, 0.05, "the fraction dropped")
end)

T.test("LSTM, GRU (both reset_after) and Bidirectional: inference unchanged, training drops, in expectation the same", function()
  local x = tensor.normal(512, 4, 3)
  for _, make in ipairs {
    function(o) return nn.LSTM(5, o) end,
    function(o) return nn.GRU(5, o) end,
    function(o) o.reset_after = false; return nn.GRU(5, o) end,
    function(o) return nn.Bidirectional(nn.LSTM(3, o)) end,
  } do
    for _, o in ipairs { { dropout = 0.3 }, { recurrent_dropout = 0.3 }, { dropout = 0.2, recurrent_dropout = 0.4 } } do
      local plain = make {}
      local drop = make(o)
      plain(x)
      drop(x)
      drop:set_weights(plain:get_weights())
      local what = ("%s %s"):format(drop.class_name, ldist.json.encode(o))
      T.near((drop(x) - plain(x)):abs():max():item(), 0, 0, what .. ": inference is the plain layer's")
      local yd, yp = drop(x, { training = true }), plain(x, { training = true })
      T.ok((yd - yp):abs():max():item() > 1e-3, what .. ": training drops")
      -- a small-weight RNN is near linear in its dropped inputs: the mean over a large batch stays close
      T.near((yd:mean() - yp:mean()):abs():item(), 0, 0.05, what .. ": the mean output")
    end
  end
end)

T.test("the options travel in the config and are checked", function()
  local l = nn.LSTM(4, { dropout = 0.1, recurrent_dropout = 0.2 })
  T.eq(l:get_config().dropout, 0.1)
  T.eq(l:get_config().recurrent_dropout, 0.2)
  T.raises(function() nn.GRU(4, { dropout = 1 }) end, "GRU dropout must be in [0, 1), got 1")
  T.raises(function() nn.SimpleRNN(4, { recurrent_dropout = -0.5 }) end, "SimpleRNN recurrent_dropout must be in [0, 1), got -0.5")
  local b = nn.Bidirectional(nn.GRU(2, { dropout = 0.3 }))
  T.eq(b:get_config().dropout, 0.3, "Bidirectional takes the layer's dropout")
end)

T.done()
