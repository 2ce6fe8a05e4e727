-- test_layers_seq.lua - MultiHeadAttention, LSTM and GRU against plain Lua
-- computations on tiny sizes, gradients, training, configs and errors.
local T = dofile("tests/lua/testlib.lua")
ldist.config.cpu_devices(2)

-- ---------------------------------------------------------------- helpers
local function sigmoid(x) return 1 / (1 + math.exp(-x)) end
local function rand_tensor(...) return tensor.normal(...) * 0.5 end
-- set every weight of a layer to fresh normal values; returns their tables
local function randomize(layer, seed)
  tensor.seed(seed or 7)
  local w = {}
  for i, v in ipairs(layer.weights) do
    local r = rand_tensor(table.unpack(v.shape))
    v:assign(r)
    w[i] = r:totable()
  end
  return w
end
local function close_all(got, want, tol, what)
  local n = 0
  local function walk(a, b, path)
    if type(b) == "table" then
      T.eq(type(a), "table", what .. path)
      T.eq(#a, #b, what .. path .. " length")
      for i = 1, #b do walk(a[i], b[i], path .. "[" .. i .. "]") end
    else
      T.near(a, b, tol or 1e-4, what .. path); n = n + 1
    end
  end
  walk(got, want, "")
  T.ok(n > 0, what .. ": nothing compared")
end
local function softmax(row)
  local m = -math.huge
  for _, v in ipairs(row) do m = math.max(m, v) end
  local s, out = 0, {}
  for i, v in ipairs(row) do out[i] = math.exp(v - m); s = s + out[i] end
  for i = 1, #out do out[i] = out[i] / s end
  return out
end

-- Keras's MultiHeadAttention on nested tables: q [N][T][dq], v [N][S][dv], k [N][S][dk];
-- W = {Wq, bq, Wk, bk, Wv, bv, Wo, bo} (EinsumDense kernels [d][H][k], [H][v][out])
local function mha_ref(q, v, k, W, H, kd, vd, causal)
  local Wq, bq, Wk, bk, Wv, bv, Wo, bo = table.unpack(W)
  local function proj(x, Wt, bt, per)     -- -> [t][h][j]
    local r = {}
    for t = 1, #x do
      r[t] = {}
      for h = 1, H do
        r[t][h] = {}
        for j = 1, per do
          local s = bt and bt[h][j] or 0
          for d = 1, #x[t] do s = s + x[t][d] * Wt[d][h][j] end
          r[t][h][j] = s
        end
      end
    end
    return r
  end
  local out = {}
  for n = 1, #q do
    local Q, K, V = proj(q[n], Wq, bq, kd), proj(k[n], Wk, bk, kd), proj(v[n], Wv, bv, vd)
    local od = #Wo[1][1]
    out[n] = {}
    for t = 1, #Q do
      local y = {}
      for e = 1, od do y[e] = bo and bo[e] or 0 end
      for h = 1, H do
        local sc = {}
        for s = 1, #K do
          local d = 0
          for j = 1, kd do d = d + Q[t][h][j] * K[s][h][j] end
          sc[s] = (causal and s > t) and -1e9 or d / math.sqrt(kd)
        end
        local a = softmax(sc)
        for j = 1, vd do
          local o = 0
          for s = 1, #K do o = o + a[s] * V[s][h][j] end
          for e = 1, od do y[e] = y[e] + o * Wo[h][j][e] end
        end
      end
      out[n][t] = y
    end
  end
  return out
end

-- Keras's LSTM on nested tables: x [N][T][in]; kernel [in][4u], rk [u][4u], bias [4u]
local function lstm_ref(x, K, R, B, u, seq, back)
  local out = {}
  for n = 1, #x do
    local h, c, hs = {}, {}, {}
    for j = 1, u do h[j] = 0; c[j] = 0 end
    local Tn = #x[n]
    for s = 1, Tn do
      local t = back and Tn - s + 1 or s
      local z = {}
      for g = 1, 4 * u do
        local v = B and B[g] or 0
        for d = 1, #x[n][t] do v = v + x[n][t][d] * K[d][g] end
        for j = 1, u do v = v + h[j] * R[j][g] end
        z[g] = v
      end
      local nh = {}
      for j = 1, u do
        local i, f, g, o = sigmoid(z[j]), sigmoid(z[u + j]), math.tanh(z[2 * u + j]), sigmoid(z[3 * u + j])
        c[j] = f * c[j] + i * g
        nh[j] = o * math.tanh(c[j])
      end
      h = nh
      hs[s] = h
    end
    out[n] = seq and hs or h
  end
  return out
end

-- Keras's GRU: kernel [in][3u], rk [u][3u], bias {[3u], [3u]} (reset_after) or [3u]
local function gru_ref(x, K, R, B, u, seq, reset_after)
  local out = {}
  for n = 1, #x do
    local h, hs = {}, {}
    for j = 1, u do h[j] = 0 end
    for t = 1, #x[n] do
      local ib = B and (reset_after and B[1] or B) or nil
      local rb = B and reset_after and B[2] or nil
      local xz = {}
      for g = 1, 3 * u do
        local v = ib and ib[g] or 0
        for d = 1, #x[n][t] do v = v + x[n][t][d] * K[d][g] end
        xz[g] = v
      end
      local inner = {}
      for g = 1, 3 * u do
        local v = rb and rb[g] or 0
        for j = 1, u do v = v + h[j] * R[j][g] end
        inner[g] = v
      end
      local z, r, nh = {}, {}, {}
      for j = 1, u do
        z[j] = sigmoid(xz[j] + inner[j]); r[j] = sigmoid(xz[u + j] + inner[u + j])
      end
      for j = 1, u do
        local rh
        if reset_after then rh = r[j] * inner[2 * u + j]
        else
          rh = 0
          for i = 1, u do rh = rh + r[i] * h[i] * R[i][2 * u + j] end
        end
        local hh = math.tanh(xz[2 * u + j] + rh)
        nh[j] = z[j] * h[j] + (1 - z[j]) * hh
      end
      h = nh
      hs[t] = h
    end
    out[n] = seq and hs or h
  end
  return out
end

-- ---------------------------------------------------------------- MultiHeadAttention
T.test("MultiHeadAttention: Keras's variables, names, shapes and initialisers", function()
  tensor.seed(3)
  local m = nn.MultiHeadAttention(2, 3, {name = "mha"})
  local y = m(tensor.normal(2, 4, 5))
  T.eq(table.concat(y.shape, ","), "2,4,5")
  local want = { { "query/kernel", "5,2,3" }, { "query/bias", "2,3" }, { "key/kernel", "5,2,3" }, { "key/bias", "2,3" },
                 { "value/kernel", "5,2,3" }, { "value/bias", "2,3" }, { "attention_output/kernel", "2,3,5" },
                 { "attention_output/bias", "5" } }
  T.eq(#m.weights, 8); T.eq(#m.trainable_variables, 8)
  for i, w in ipairs(want) do
    T.eq(m.weights[i].name, "mha/" .. w[1]); T.eq(table.concat(m.weights[i].shape, ","), w[2], w[1])
  end
  T.ok(m["query/kernel"] == m.weights[1], "a variable by its Keras name")
  -- glorot_uniform with Keras's compute_fans for 3-d kernels: fan_in = d*H, fan_out = d*k
  local lim_in = math.sqrt(6 / (5 * 2 + 5 * 3))
  local lim_out = math.sqrt(6 / (2 * 3 + 2 * 5))
  T.ok(m["query/kernel"]:abs():max():item() <= lim_in + 1e-6, "query kernel bound")
  T.ok(m["query/kernel"]:abs():max():item() > lim_in * 0.5, "query kernel spread")
  T.ok(m["attention_output/kernel"]:abs():max():item() <= lim_out + 1e-6, "output kernel bound")
  T.eq(m["query/bias"]:abs():sum():item(), 0); T.eq(m["attention_output/bias"]:abs():sum():item(), 0)
  local nb = nn.MultiHeadAttention(2, 3, {use_bias = false, value_dim = 4, output_shape = 6})
  nb(tensor.normal(1, 2, 5))
  T.eq(#nb.weights, 4)
  T.eq(table.concat(nb["value/kernel"].shape, ","), "5,2,4")
  T.eq(table.concat(nb["attention_output/kernel"].shape, ","), "2,4,6")
end)

T.test("MultiHeadAttention matches a Lua computation (self, cross, causal)", function()
  tensor.seed(11)
  -- cross-attention, query T=3, value/key S=4, three different feature sizes
  local H, kd, vd = 2, 2, 3
  local m = nn.MultiHeadAttention(H, kd, {value_dim = vd})
  local q, v, k = rand_tensor(2, 3, 3), rand_tensor(2, 4, 2), rand_tensor(2, 4, 5)
  local y = m({q, v, k})
  T.eq(table.concat(y.shape, ","), "2,3,3")
  local W = randomize(m, 12)
  close_all(m({q, v, k}):totable(), mha_ref(q:totable(), v:totable(), k:totable(), W, H, kd, vd, false), 1e-4, "cross")
  -- two inputs: key = value
  local m2 = nn.MultiHeadAttention(H, kd)
  m2({q, v})
  local W2 = randomize(m2, 13)
  close_all(m2({q, v}):totable(), mha_ref(q:totable(), v:totable(), v:totable(), W2, H, kd, kd, false), 1e-4, "query+value")
  -- self-attention with a causal mask
  local mc = nn.MultiHeadAttention(H, kd, {use_causal_mask = true, output_shape = 4})
  local x = rand_tensor(2, 5, 3)
  mc(x)
  local Wc = randomize(mc, 14)
  local yc = mc(x)
  T.eq(table.concat(yc.shape, ","), "2,5,4")
  close_all(yc:totable(), mha_ref(x:totable(), x:totable(), x:totable(), Wc, H, kd, kd, true), 1e-4, "causal")
  -- the mask matters: without it the answer differs
  local nc = mha_ref(x:totable(), x:totable(), x:totable(), Wc, H, kd, kd, false)
  T.ok(math.abs(nc[1][1][1] - yc:totable()[1][1][1]) > 1e-4, "causal and not causal differ")
end)

T.test("MultiHeadAttention causal: row 0 is the projected v[0] path", function()
  tensor.seed(21)
  local m = nn.MultiHeadAttention(2, 3, {use_causal_mask = true})
  local x = rand_tensor(3, 6, 4)
  m(x)
  local W = randomize(m, 22)
  local y = m(x):totable()
  -- row 0 sees only step 0: attention weight 1 on v[0], whatever q and k are
  local Wv, bv, Wo, bo = W[5], W[6], W[7], W[8]
  local xt = x:totable()
  for n = 1, 3 do
    for e = 1, 4 do
      local s = bo[e]
      for h = 1, 2 do
        for j = 1, 3 do
          local vp = bv[h][j]
          for d = 1, 4 do vp = vp + xt[n][1][d] * Wv[d][h][j] end
          s = s + vp * Wo[h][j][e]
        end
      end
      T.near(y[n][1][e], s, 1e-4, ("row 0 [%d][%d]"):format(n, e))
    end
  end
  -- and the sequence axis is flexible: the first step alone gives the same row
  local y1 = m(x:slice(1, 0, 1)):totable()
  for n = 1, 3 do close_all(y1[n][1], y[n][1], 1e-5, "one step") end
end)

T.test("MultiHeadAttention shapes: cross-attention T != S, output_shape, flexible lengths", function()
  local m = nn.MultiHeadAttention(4, 8, {output_shape = 7})
  local y = m({tensor.normal(2, 3, 6), tensor.normal(2, 9, 5)})
  T.eq(table.concat(y.shape, ","), "2,3,7")
  y = m({tensor.normal(2, 11, 6), tensor.normal(2, 2, 5)})
  T.eq(table.concat(y.shape, ","), "2,11,7")
  local s = nn.MultiHeadAttention(1, 2)
  T.eq(table.concat(s(tensor.normal(1, 1, 3)).shape, ","), "1,1,3")
end)

T.test("MultiHeadAttention dropout only in training, on the weights", function()
  tensor.seed(5)
  local m = nn.MultiHeadAttention(2, 4, {dropout = 0.5})
  local x = tensor.normal(2, 6, 4)
  local a, b = m(x), m(x)
  T.eq((a - b):abs():sum():item(), 0, "inference is deterministic")
  local d = m(x, {training = true})
  T.ok((d - a):abs():sum():item() > 1e-3, "training drops weights")
  -- dropout 0 in training equals inference
  local m0 = nn.MultiHeadAttention(2, 4)
  T.near((m0(x, {training = true}) - m0(x)):abs():sum():item(), 0, 1e-6)
end)

T.test("MultiHeadAttention gradients flow and match finite differences", function()
  tensor.seed(31)
  local m = nn.MultiHeadAttention(2, 3, {use_causal_mask = true})
  local q, v = rand_tensor(2, 3, 4), rand_tensor(2, 5, 3)
  m({q, v})
  randomize(m, 32)
  local wts = m.trainable_variables
  local probe = rand_tensor(2, 3, 4)
  local function f() return (m({q, v}) * probe):sum() end
  local tape = autograd.GradientTape()
  local loss = tape:record(f)
  local g = tape:gradient(loss, wts)
  T.eq(#g, 8)
  for i, gi in ipairs(g) do
    T.eq(table.concat(gi.shape, ","), table.concat(wts[i].shape, ","), "gradient shape " .. i)
    if i == 4 then
      -- the key's bias adds q.b to every score of a query: softmax ignores it
      T.ok(gi:abs():max():item() < 1e-5, "zero gradient for the key's bias")
    else
      T.ok(gi:abs():sum():item() > 1e-6, "non-zero gradient for " .. wts[i].name)
    end
  end
  -- central differences on a few entries of the query and value kernels
  for _, idx in ipairs({ { 1, { 0, 1, 2 } }, { 5, { 2, 0, 1 } }, { 7, { 1, 2, 3 } } }) do
    local var, at = wts[idx[1]], idx[2]
    local gv = g[idx[1]]:totable()[at[1] + 1][at[2] + 1][at[3] + 1]
    local orig = var:totable()
    local function bump(eps)
      local t = var:totable()
      t[at[1] + 1][at[2] + 1][at[3] + 1] = orig[at[1] + 1][at[2] + 1][at[3] + 1] + eps
      var:assign(tensor.new(t))
      return f():item()
    end
    local eps = 1e-2
    local num = (bump(eps) - bump(-eps)) / (2 * eps)
    var:assign(tensor.new(orig))
    T.near(gv, num, 2e-2, "d loss / d " .. var.name)
  end
end)

T.test("a tiny attention model learns (loss falls)", function()
  tensor.seed(41)
  -- target: the mean over time of the first feature, a job attention can do
  local x = tensor.normal(32, 5, 3)
  local y = x:slice(2, 0, 1):mean(1)
  local model = nn.Sequential{nn.MultiHeadAttention(2, 4), nn.Flatten(), nn.Dense(1)}
  local opt = optim.Adam{learning_rate = 0.01}
  local mse = losses.MeanSquaredError()
  local first, last
  for _ = 1, 80 do
    local tape = autograd.GradientTape()
    local loss = tape:record(function() return mse(y, model(x, {training = true})) end)
    opt:apply_gradients(tape:gradient(loss, model.trainable_variables), model.trainable_variables)
    first = first or loss:item(); last = loss:item()
  end
  T.ok(last < first * 0.2, ("loss %g -> %g"):format(first, last))
end)

-- ---------------------------------------------------------------- LSTM
T.test("LSTM: Keras's variables and initialisers (unit_forget_bias, orthogonal)", function()
  tensor.seed(4)
  local l = nn.LSTM(3)
  local y = l(tensor.normal(2, 4, 5))
  T.eq(table.concat(y.shape, ","), "2,3")
  T.eq(#l.weights, 3)
  T.eq(l.weights[1].name, "lstm/kernel"); T.eq(table.concat(l.kernel.shape, ","), "5,12")
  T.eq(l.weights[2].name, "lstm/recurrent_kernel"); T.eq(table.concat(l.recurrent_kernel.shape, ","), "3,12")
  T.eq(l.weights[3].name, "lstm/bias"); T.eq(table.concat(l.bias.shape, ","), "12")
  close_all(l.bias:totable(), { 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0 }, 0, "unit_forget_bias")
  local lim = math.sqrt(6 / (5 + 12))
  T.ok(l.kernel:abs():max():item() <= lim + 1e-6, "glorot bound")
  -- orthogonal [u, 4u]: orthonormal rows, R R^T = I
  local R = l.recurrent_kernel
  local rrt = R:matmul(R:transpose(0, 1)):totable()
  for i = 1, 3 do for j = 1, 3 do T.near(rrt[i][j], i == j and 1 or 0, 1e-5, "R R^T") end end
  local l0 = nn.LSTM(2, {unit_forget_bias = false})
  l0(tensor.normal(1, 2, 3))
  T.eq(l0.bias:abs():sum():item(), 0)
  local nb = nn.LSTM(2, {use_bias = false}); nb(tensor.normal(1, 2, 3))
  T.eq(#nb.weights, 2)
end)

T.test("LSTM matches a Lua loop (last state, sequences, go_backwards, no bias)", function()
  tensor.seed(51)
  local x = rand_tensor(2, 4, 3)
  for _, opt in ipairs({ {}, { return_sequences = true }, { go_backwards = true }, { go_backwards = true, return_sequences = true },
                         { use_bias = false, return_sequences = true } }) do
    local l = nn.LSTM(3, opt)
    l(x)
    local W = randomize(l, 52)
    local want = lstm_ref(x:totable(), W[1], W[2], W[3], 3, opt.return_sequences, opt.go_backwards)
    local got = l(x)
    T.eq(got.ndim or #got.shape, opt.return_sequences and 3 or 2)
    close_all(got:totable(), want, 1e-4, "lstm " .. ldist.json.encode(opt))
  end
  -- the number of steps is flexible
  local l = nn.LSTM(2, { return_sequences = true })
  T.eq(table.concat(l(tensor.normal(2, 3, 4)).shape, ","), "2,3,2")
  T.eq(table.concat(l(tensor.normal(2, 7, 4)).shape, ","), "2,7,2")
end)

T.test("LSTM gradients match finite differences, and training lowers the loss", function()
  tensor.seed(61)
  local l = nn.LSTM(3, {return_sequences = true})
  local x = rand_tensor(2, 4, 2)
  l(x)
  randomize(l, 62)
  local probe = rand_tensor(2, 4, 3)
  local function f() return (l(x) * probe):sum() end
  local tape = autograd.GradientTape()
  local loss = tape:record(f)
  local g = tape:gradient(loss, l.trainable_variables)
  for i, v in ipairs(l.trainable_variables) do
    T.ok(g[i]:abs():sum():item() > 1e-6, "gradient for " .. v.name)
    local orig = v:totable()
    local r, c = 1, 2
    if v.ndim == 1 or #v.shape == 1 then r, c = 5, nil end
    local function bump(eps)
      local t = v:totable()
      if c then t[r][c] = orig[r][c] + eps else t[r] = orig[r] + eps end
      v:assign(tensor.new(t))
      return f():item()
    end
    local num = (bump(1e-2) - bump(-1e-2)) / 2e-2
    v:assign(tensor.new(orig))
    local gt = g[i]:totable()
    T.near(c and gt[r][c] or gt[r], num, 2e-2, "d loss / d " .. v.name)
  end
  -- a toy sequence task: is the sum of the sequence positive?
  tensor.seed(63)
  local xs = tensor.normal(64, 6, 1)
  local ys = xs:sum(1):reshape(-1):gt(0):astype("int64")
  local model = nn.Sequential{nn.LSTM(8), nn.Dense(2)}
  local opt = optim.Adam{learning_rate = 0.02}
  local ce = losses.SparseCategoricalCrossentropy{from_logits = true}
  local first, last
  for _ = 1, 60 do
    local tp = autograd.GradientTape()
    local lo = tp:record(function() return ce(ys, model(xs, {training = true})) end)
    opt:apply_gradients(tp:gradient(lo, model.trainable_variables), model.trainable_variables)
    first = first or lo:item(); last = lo:item()
  end
  T.ok(last < first * 0.5, ("loss %g -> %g"):format(first, last))
end)

T.test("LSTM built inside a mirrored replica: every copy gets the forget-gate ones", function()
  local s = distribute.MirroredStrategy{devices = {"cpu:0", "cpu:1"}}
  local model
  do
    local _ <close> = s:scope()
    model = nn.Sequential{nn.LSTM(2), nn.Dense(1)}
  end
  local ds = data.Dataset.from_tensor_slices(tensor.normal(4, 3, 2)):batch(4)
  for inputs in s:experimental_distribute_dataset(ds) do
    s:run(function(b) return model(b[1]) end, inputs)
  end
  local lstm = model.layers[1]
  local copies = ldist._distribute.mirror_copies(lstm.bias)
  T.eq(#copies, 2)
  for r, c in ipairs(copies) do
    close_all(c:cpu():totable(), { 0, 0, 1, 1, 0, 0, 0, 0 }, 0, "bias copy " .. r)
  end
end)

-- ---------------------------------------------------------------- GRU
T.test("GRU matches a Lua loop (reset_after true and false)", function()
  tensor.seed(71)
  local x = rand_tensor(2, 4, 3)
  local g = nn.GRU(3)
  g(x)
  T.eq(table.concat(g.bias.shape, ","), "2,9")
  T.eq(table.concat(g.kernel.shape, ","), "3,9"); T.eq(table.concat(g.recurrent_kernel.shape, ","), "3,9")
  for _, opt in ipairs({ {}, { return_sequences = true }, { reset_after = false, return_sequences = true },
                         { use_bias = false } }) do
    local l = nn.GRU(3, opt)
    l(x)
    local W = randomize(l, 72)
    local ra = opt.reset_after ~= false
    local want = gru_ref(x:totable(), W[1], W[2], W[3], 3, opt.return_sequences, ra)
    close_all(l(x):totable(), want, 1e-4, "gru " .. ldist.json.encode(opt))
  end
  local l = nn.GRU(2, { reset_after = false }); l(x)
  T.eq(table.concat(l.bias.shape, ","), "6")
  -- gradients reach every variable
  local tape = autograd.GradientTape()
  local loss = tape:record(function() return g(x):square():sum() end)
  for i, gi in ipairs(tape:gradient(loss, g.trainable_variables)) do
    T.ok(gi:abs():sum():item() > 1e-6, "gru gradient " .. i)
  end
end)

-- ---------------------------------------------------------------- configs and errors
T.test("get_config and layer_from_config round trips", function()
  for _, l in ipairs({ nn.MultiHeadAttention(3, 5, { value_dim = 2, dropout = 0.25, use_bias = false, output_shape = 9,
                                                     use_causal_mask = true }),
                       nn.MultiHeadAttention(2, 4), nn.LSTM(7, { return_sequences = true, unit_forget_bias = false,
                                                                 activation = "relu", go_backwards = true }),
                       nn.LSTM(4), nn.GRU(5, { reset_after = false, recurrent_activation = "tanh" }) }) do
    local c = l:get_config()
    local l2 = nn.layer_from_config{ class_name = l.class_name, config = c }
    T.eq(l2.class_name, l.class_name)
    T.eq(ldist.json.encode(l2:get_config()), ldist.json.encode(c))
    for k, v in pairs(c) do if k ~= "name" then T.eq(l2[k], v, k) end end
  end
  local c = nn.MultiHeadAttention(3, 5, { dropout = 0.25 }):get_config()
  T.eq(c.num_heads, 3); T.eq(c.key_dim, 5); T.eq(c.dropout, 0.25); T.eq(c.use_causal_mask, false)
  local lc = nn.LSTM(4):get_config()
  T.eq(lc.units, 4); T.eq(lc.unit_forget_bias, true); T.eq(lc.return_sequences, false); T.eq(lc.activation, "tanh")
  T.eq(lc.recurrent_activation, "sigmoid")
end)

T.test("bad configurations and inputs give clear errors", function()
  T.raises(function() return nn.MultiHeadAttention(2) end, "key_dim is required")
  T.raises(function() return nn.MultiHeadAttention(0, 4) end, "num_heads must be a positive integer, got 0")
  T.raises(function() return nn.MultiHeadAttention(2, 4, { dropout = 1 }) end, "dropout must be in [0, 1)")
  T.raises(function() return nn.MultiHeadAttention(2, 4, { causal = true }) end, "unknown option 'causal'")
  T.raises(function() return nn.LSTM() end, "units is required")
  T.raises(function() return nn.LSTM(0) end, "units must be a positive integer, got 0")
  T.raises(function() return nn.LSTM(3, { activation = "swishy" }) end, "unknown activation 'swishy'")
  T.eq(nn.LSTM(3, { activation = "swish" })(tensor.normal(2, 4, 5)).shape[2], 3)   -- any of Keras's activations
  local m = nn.MultiHeadAttention(2, 4, { name = "att" })
  T.raises(function() return m(tensor.normal(2, 5)) end, "att needs a query of shape [batch, T, features]; got inputs of shape (batch, 5)")
  T.raises(function() return nn.MultiHeadAttention(2, 4)({ tensor.normal(2, 3, 4), tensor.normal(2, 5, 4), tensor.normal(2, 6, 4) }) end,
           "the key (batch, 6, 4) and the value (batch, 5, 4) must have the same length")
  T.raises(function() return nn.MultiHeadAttention(2, 4)({ tensor.normal(2, 3, 4), tensor.normal(3, 5, 4) }) end,
           "the query 2x3x4 and the value 3x5x4 must have the same batch")
  T.raises(function() return nn.MultiHeadAttention(2, 4)({ tensor.normal(2, 3, 4), tensor.normal(2, 5, 4), tensor.normal(2, 5, 4),
                                                           tensor.normal(2, 5, 4) }) end, "takes 1 to 3 inputs, got 4")
  m(tensor.normal(2, 3, 4))
  T.raises(function() return m(tensor.normal(2, 3, 6)) end, "att expects inputs of shape batchx3x4, got 2x3x6")
  local b = nn.MultiHeadAttention(2, 4, { name = "att2" })
  b({ tensor.normal(2, 3, 4), tensor.normal(2, 5, 4), tensor.normal(2, 5, 4) })
  T.raises(function() return b({ tensor.normal(2, 3, 4), tensor.normal(2, 5, 4), tensor.normal(2, 2, 4) }) end,
           "the key 2x2x4 and the value 2x5x4 must have the same batch and length")
  local l = nn.LSTM(3, { name = "rnn" })
  T.raises(function() return l(tensor.normal(2, 5)) end, "rnn needs inputs of shape [batch, T, features]; got inputs of shape (batch, 5)")
  l(tensor.normal(2, 4, 5))
  T.raises(function() return l(tensor.normal(2, 4, 6)) end, "rnn expects inputs of shape batchx4x5, got 2x4x6")
  T.raises(function() return l(tensor.zeros(2, 0, 5)) end, "rnn needs at least one time step; got inputs of shape 2x0x5")
  T.raises(function() return nn.GRU(2, { name = "g" })(tensor.normal(2, 3, 4, 5)) end,
           "g needs inputs of shape [batch, T, features]; got inputs of shape (batch, 3, 4, 5)")
end)

T.test("SimpleRNN trains in fit and travels through to_json (its numbers: tests/fixtures/layers)", function()
  tensor.seed(6)
  -- whether the sum of a sequence's first feature is positive
  local x = tensor.normal(256, 6, 2)
  local y = x:slice(2, 0, 1):sum(1):gt(0)
  local m = nn.Sequential{ nn.SimpleRNN(8), nn.Dense(1, "sigmoid") }
  m:compile{ optimizer = optim.Adam(0.02), loss = "binary_crossentropy", metrics = { "accuracy" } }
  local h = m:fit(x, y, { epochs = 20, batch_size = 32, verbose = 0 })
  T.ok(h.history.accuracy[20] > 0.9, "it learns (accuracy " .. h.history.accuracy[20] .. ")")
  T.eq(#m.layers[1].weights, 3)
  local m2 = nn.model_from_json(m:to_json())
  T.eq(m2.layers[1].class_name, "SimpleRNN"); T.eq(m2.layers[1].units, 8)
  T.raises(function() return nn.SimpleRNN(4)(tensor.normal(2, 3)) end, "needs")
end)

T.test("Bidirectional wraps an LSTM, GRU or SimpleRNN with its options (its numbers: tests/fixtures/layers)", function()
  tensor.seed(8)
  local b = nn.Bidirectional(nn.LSTM(4, { return_sequences = true, activation = "relu" }))
  local y = b(tensor.normal(2, 5, 3))
  T.eq(table.concat(y.shape, "x"), "2x5x8", "concat: twice the units")
  T.eq(b.layer, "LSTM"); T.eq(b.units, 4); T.eq(b.activation, "relu"); T.eq(b.merge_mode, "concat")
  T.eq(#b.weights, 6); T.eq(b.weights[1].name, "bidirectional/forward_lstm/kernel")
  T.eq(b.weights[4].name, "bidirectional/backward_lstm/kernel")
  T.eq(table.concat(nn.Bidirectional(nn.GRU(3), { merge_mode = "ave" })(tensor.normal(2, 5, 3)).shape, "x"), "2x3")
  T.raises(function() return nn.Bidirectional(nn.Dense(3)) end, "Bidirectional: unknown layer 'Dense' (LSTM|GRU|SimpleRNN)")
  T.raises(function() return nn.Bidirectional(nn.LSTM(3), { merge_mode = "max" }) end, "unknown merge_mode 'max'")
  -- in a model: it learns, saves and reads back; frozen, it stays
  local x = tensor.normal(128, 6, 2)
  local yl = x:slice(2, 0, 1):sum(1):gt(0)
  local m = nn.Sequential{ nn.Bidirectional(nn.SimpleRNN(6)), nn.Dense(1, "sigmoid") }
  m:compile{ optimizer = optim.Adam(0.02), loss = "binary_crossentropy", metrics = { "accuracy" } }
  local h = m:fit(x, yl, { epochs = 20, batch_size = 32, verbose = 0 })
  T.ok(h.history.accuracy[20] > 0.9, "it learns (accuracy " .. h.history.accuracy[20] .. ")")
  local m2 = nn.model_from_json(m:to_json())
  T.eq(m2.layers[1].layer, "SimpleRNN"); T.eq(m2.layers[1].units, 6)
  m.layers[1].trainable = false
  T.eq(#m.trainable_variables, 2)
end)

T.done()
