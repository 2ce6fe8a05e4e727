-- test_tape.lua - what a GradientTape gives beyond tape:gradient(loss, vars):
-- output_gradients (a vector-Jacobian product), tape:jacobian,
-- tensor.stop_gradient and tape:stop_recording, as TF's tf.GradientTape and
-- tf.stop_gradient give them, on cpu:0 and on the logical device cpu:1; and
-- the errors a user meets, after which the session goes on.
--
-- The reference values are TF 2.21's (build/bench-venv), printed by:
--   x = tf.Variable([[0.5, -1.5, 2.0], [1.0, 0.25, -0.5]])
--   with tf.GradientTape(persistent=True) as t:
--     y = tf.stack([x[0] * x[1], tf.sin(x[0]), x[1] ** 3]); z = x * tf.stop_gradient(x)
--   t.jacobian(y, x).shape                                         # (3, 3, 2, 3)
--   t.gradient(y, x, output_gradients=tf.reshape(tf.range(9.), [3, 3]))
--   t.gradient(z, x)
local T = dofile("tests/lua/testlib.lua")
ldist.config.cpu_devices(2)

local X = { { 0.5, -1.5, 2.0 }, { 1.0, 0.25, -0.5 } }
local TF_VJP = { { 2.6327476501464844, 0.5329487919807434, -3.0807342529296875 }, { 18.0, -0.1875, 10.0 } }

local function close(t, want, what, tol)
  local got = t:cpu():reshape(-1):totable()
  local flat = {}
  for _, row in ipairs(want) do for _, v in ipairs(row) do flat[#flat + 1] = v end end
  T.eq(#got, #flat, what .. ": element count")
  for i = 1, #flat do T.near(got[i], flat[i], tol or 1e-6, ("%s: element %d"):format(what, i)) end
end

local function f(x) return tensor.stack({ x[0] * x[1], x[0]:sin(), x[1] ^ 3 }, 0) end

for _, dev in ipairs({ "cpu:0", "cpu:1" }) do
  T.test("output_gradients and jacobian equal TF's on " .. dev, function()
    local x = tensor.Variable(tensor.new(X):to(dev))
    local tape = autograd.GradientTape { persistent = true }
    local y = tape:record(function() return f(x) end)
    local g = tensor.arange(9):astype("float32"):reshape(3, 3)
    close(tape:gradient(y, x, g), TF_VJP, "output_gradients (positional)")
    close(tape:gradient(y, x, { output_gradients = g:to(dev) }), TF_VJP, "output_gradients (option)")
    local j = tape:jacobian(y, x)
    T.eq(table.concat(j.shape, ","), "3,3,2,3", "jacobian shape: target's then source's")
    T.eq(j.device, dev, "on the source's device")
    -- each row is the gradient of one element of y; the VJP is g^T J
    local jf = j:reshape(9, 6)
    for i = 0, 8 do
      local seed = tensor.zeros(9)
      seed[i] = 1
      local row = tape:gradient(y, x, seed:reshape(3, 3))
      close(jf[i], { row:cpu():reshape(-1):totable() }, "jacobian row " .. i, 0)
    end
    close(g:reshape(1, 9):to(dev):matmul(jf):reshape(2, 3), TF_VJP, "g^T J is the VJP")
    -- d sin(x0_k) / d x0_k = cos(x0_k), and 0 towards x1 and other columns
    for k = 0, 2 do
      T.near(j[1][k][0][k], math.cos(X[1][k + 1]), 1e-6, "d sin(x0) / d x0 at " .. k)
      T.eq(j[1][k][1][k], 0, "d sin(x0) / d x1 is 0")
    end
    -- a table of sources gives a table of jacobians
    local b = tensor.Variable(tensor.new({ 2, 3 }):to(dev))
    local tape2 = autograd.GradientTape { persistent = true }
    local z = tape2:record(function() return (x * 2):sum(1) * b end)
    local js = tape2:jacobian(z, { x, b })
    T.eq(table.concat(js[1].shape, ","), "2,2,3", "d z / d x")
    T.eq(table.concat(js[2].shape, ","), "2,2", "d z / d b")
    close(js[2], { { 2, 0 }, { 0, 1.5 } }, "d z / d b: diag(sum(2x))")
  end)

  T.test("stop_gradient and stop_recording keep values out of the gradient, as TF's, on " .. dev, function()
    local x = tensor.Variable(tensor.new(X):to(dev))
    local tape = autograd.GradientTape { persistent = true }
    local z, w, u = tape:record(function()
      local z = x * tensor.stop_gradient(x)          -- d/dx = x, not 2x
      local w = tape:stop_recording(function() return x * 3 end)
      T.ok(autograd.is_recording(), "recording resumes after stop_recording")
      local u = x + tensor.stop_gradient(x:exp() - x)   -- a straight-through estimator: d/dx = 1
      return z, w, u
    end)
    close(tape:gradient(z, x), X, "x * stop_gradient(x)")
    T.ok(not w.trainable, "nothing recorded inside stop_recording")
    local wx = tape:record(function() return w * x end)
    close(tape:gradient(wx, x), { { 1.5, -4.5, 6 }, { 3, 0.75, -1.5 } }, "an unrecorded value is a constant")
    close(tape:gradient(u, x), { { 1, 1, 1 }, { 1, 1, 1 } }, "straight-through")
    close(u, { { math.exp(0.5), math.exp(-1.5), math.exp(2) }, { math.exp(1), math.exp(0.25), math.exp(-0.5) } },
      "its value is exp(x)", 1e-5)
    local sg = tensor.stop_gradient(x)
    T.eq(sg.device, dev, "stop_gradient stays on the device")
    T.ok(not sg.trainable, "stop_gradient is not a variable")
    -- stop_recording resumes even when its function raises
    local ok = pcall(function() tape:record(function() tape:stop_recording(function() error("boom") end) end) end)
    T.ok(not ok and not autograd.is_recording(), "an error in stop_recording leaves no tape paused or recording")
    local v = tape:record(function() T.ok(autograd.is_recording(), "and the next record records"); return x * x end)
    close(tape:gradient(v, x), { { 1, -3, 4 }, { 2, 0.5, -1 } }, "d x^2 after the error")
  end)
end

T.test("errors name the problem and the session goes on", function()
  local x = tensor.Variable(tensor.new(X))
  local tape = autograd.GradientTape()
  local y = tape:record(function() return f(x) end)
  T.raises(function() tape:gradient(y, x, tensor.ones(2, 3)) end, "output_gradients of shape 2x3 for a target of shape 3x3")
  T.raises(function() tape:gradient(y, x, tensor.ones(3, 3):astype("int32")) end, "output_gradients must be float32")
  T.raises(function() tape:gradient(y, x, { output_gradient = tensor.ones(3, 3) }) end, "output_gradient")
  local t2 = autograd.GradientTape()
  local y2 = t2:record(function() return f(x) end)
  T.eq(table.concat(t2:jacobian(y2, x).shape, ","), "3,3,2,3", "a non-persistent tape's one jacobian")
  T.raises(function() t2:jacobian(y2, x) end, "can only be called once on a non-persistent tape")
  local t3 = autograd.GradientTape()
  local y3 = t3:record(function() return f(x) end)
  T.raises(function() t3:jacobian(y3, { x, x }) end, "non-persistent tape")
  T.eq((x * 2):sum():item(), 3.5, "the session goes on")
end)

-- inside a strategy's run the host device queues its kernels: a jacobian's
-- seeds written on the host must not be cleared by a queued fill (they were:
-- every jacobian in strategy:run came out 0)
T.test("tape:jacobian inside MirroredStrategy's run (cpu:0 and cpu:1) gives one device's", function()
  local s = distribute.MirroredStrategy { devices = { "cpu:0", "cpu:1" } }
  local r = s:run(function()
    local x = tensor.Variable(tensor.new { 1, 2, 3 })
    local tape = autograd.GradientTape()
    local y = tape:record(function() return x * x end)
    return tape:jacobian(y, x)
  end)
  for i, j in ipairs(s:experimental_local_results(r)) do
    T.eq(table.concat(j:cpu():reshape { 9 }:totable(), ","), "2.0,0.0,0.0,0.0,4.0,0.0,0.0,0.0,6.0",
      ("replica %d's jacobian of x * x"):format(i - 1))
  end
end)

T.done()
