-- test_tensor.lua - the tensor API through the ldist binary, including the
-- errors a user meets.
local T = dofile("tests/lua/testlib.lua")

T.test("creation and shape", function()
  local a = tensor.new{{1, 2, 3}, {4, 5, 6}}
  T.eq(a.ndim, 2); T.eq(a.shape[1], 2); T.eq(a.shape[2], 3); T.eq(a.dtype, "float32")
  T.eq(tensor.zeros(2, 3):sum():item(), 0)
  T.eq(tensor.ones({4, 5}):sum():item(), 20)
  T.eq(tensor.full(2, 2, 7):sum():item(), 28)
  local r = tensor.arange(5)
  T.eq(r.dtype, "int64"); T.eq(r[4], 4)
  T.near(tensor.arange(0, 1, 0.25):sum():item(), 1.5)
  T.eq(tensor.new({1, 2}, {dtype = "int32"}).dtype, "int32")
  -- a table that is not numbers says where and what (a dataset's batch is a
  -- table of tensors: `batch + t` met "got userdata")
  T.raises(function() return tensor.new({1, "x"}) end, "expected a number at position 2 of the table, got string")
  T.raises(function() return tensor.ones(3) + {tensor.ones(3)} end,
    "expected a number at position 1 of the table, got a tensor of shape 3 (a table of tensors is not a tensor: " ..
    "tensor.stack(t) joins them)")
  T.eq(tensor.new({tensor.new(2), 3})[0], 2, "a one-element tensor still counts as a number")
end)

T.test("seeded random numbers repeat", function()
  tensor.seed(3); local a = tensor.normal(100)
  tensor.seed(3); local b = tensor.normal(100)
  T.eq((a - b):abs():sum():item(), 0)
  local u = tensor.uniform(1000, {min = -2, max = 2})
  T.ok(u:max():item() <= 2 and (-u):max():item() <= 2)
  T.near(tensor.normal(20000):mean():item(), 0, 0.05)
end)

T.test("elementwise and broadcasting", function()
  local a = tensor.new{{1, 2, 3}, {4, 5, 6}}
  local b = tensor.new{10, 20, 30}
  local c = a + b
  T.eq(c[1][2], 36)
  T.eq((a * 2)[0][0], 2)
  T.eq((2 - a)[0][1], 0)
  T.eq((-a):sum():item(), -21)
  T.near((a / a):sum():item(), 6)
  T.near((a ^ 2):sum():item(), 91)
  T.near(tensor.new{0}:exp():item(), 1)
  T.near(tensor.new{-1, 2}:relu():sum():item(), 2)
end)

T.test("reductions along axes", function()
  local a = tensor.new{{1, 5, 3}, {4, 2, 6}}
  T.eq(a:sum(0)[2], 9); T.eq(a:sum(1)[0], 9); T.eq(a:sum(-1)[1], 12)
  T.near(a:mean():item(), 3.5)
  T.eq(a:max(1)[0], 5)
  T.eq(a:argmax(1)[0], 1); T.eq(a:argmax(1)[1], 2)
  T.eq(a:sum(1, {keepdims = true}).shape[2], 1)
  -- TF's positional keepdims (reduce_sum(x, axis, keepdims)); it was ignored
  T.eq(a:sum(1, true).shape[2], 1); T.eq(a:max(0, true).shape[1], 1); T.eq(a:mean(1, false).ndim, 1)
  T.eq(a:min(0, true)[0][1], a:min(0)[1])
  -- a misspelt option (PyTorch's keepdim) is named, not ignored
  T.raises(function() return a:sum(1, { keepdim = true }) end, "t:sum: unknown option 'keepdim'; did you mean 'keepdims'?")
  T.raises(function() return a:mean(1, "yes") end, "keepdims boolean or options table expected, got string")
end)

T.test("views share storage", function()
  local a = tensor.arange(12):astype("float32"):reshape(3, 4)
  local t = a:transpose()
  T.eq(t.shape[1], 4); T.eq(t[1][2], 9)
  local s = a:slice(1, 1, 3)
  T.eq(s.shape[2], 2); T.eq(s[2][0], 9)
  a[0] = tensor.new{-1, -1, -1, -1}
  T.eq(t[0][0], -1)
  T.eq(a:reshape(-1, 6).shape[1], 2)
  T.eq(a.T.shape[1], 4)
end)

T.test("matmul against a hand computation", function()
  local a = tensor.new{{1, 2, 3}, {4, 5, 6}}
  local b = tensor.new{{7, 8}, {9, 10}, {11, 12}}
  local c = a:matmul(b)
  T.eq(c[0][0], 58); T.eq(c[1][1], 154)
  T.eq(a:matmul(a.T)[0][0], 14)
end)

T.test("totable round trip and printing", function()
  local a = tensor.new{{1, 2}, {3, 4}}
  local t = a:totable()
  T.eq(t[2][1], 3)
  local s = tostring(tensor.arange(1000))
  T.ok(s:find("...", 1, true), "long tensors are elided")
  T.ok(#s < 400, "printing is bounded")
  T.ok(tostring(a):find("shape=2x2", 1, true))
end)

T.test("bad shapes give errors that name them", function()
  T.raises(function() return tensor.new{{1, 2, 3}, {4, 5, 6}}:matmul(tensor.zeros(5, 6)) end,
    "bad argument #1 to 'matmul' (shapes 2x3 and 5x6 do not match)")
  T.raises(function() return tensor.zeros(2, 3) + tensor.zeros(4, 5) end, "2x3 and 4x5 cannot be broadcast")
  T.raises(function() return tensor.zeros(2, 3):reshape(4, 4) end, "cannot reshape 2x3")
  T.raises(function() return tensor.zeros(2, 3):sum(5) end, "axis 5 out of range")
  T.raises(function() return tensor.new{{1, 2}, {3}} end, "ragged")
  T.raises(function() return tensor.zeros(2)[7] end, "out of range")
end)

T.test("wrong types give errors", function()
  T.raises(function() return tensor.zeros(2):matmul("x") end, "Tensor expected")
  T.raises(function() return tensor.zeros(2, "a") end, "options table expected")
  T.raises(function() return tensor.zeros(2.5) end, "integers")
  T.raises(function() return tensor.new{1, "a"} end, "expected a number")
  T.raises(function() return tensor.new(1):astype("complex") end, "unknown dtype 'complex'")
  T.raises(function() return tensor.new{1}:to("tpu:3") end, "unknown device 'tpu:3'")
end)

T.test("an out-of-memory request is an error and the interpreter lives on", function()
  T.raises(function() return tensor.zeros(100000, 100000, 100) end, "not enough memory")
  T.raises(function() return tensor.zeros(1000000000, 1000000000) end, "too large")
  local a = tensor.ones(3)
  T.eq(a:sum():item(), 3)
end)

T.test("autograd through the Lua API", function()
  local x = tensor.Variable{1, 2, 3}
  local tape = autograd.GradientTape()
  local y = tape:record(function() return (x * x * 3):sum() end)
  local g = tape:gradient(y, x)
  T.eq(g[2], 18)
  T.raises(function() return tape:gradient(y, x) end, "only be called once")
  local p = autograd.GradientTape{persistent = true}
  local w = tensor.new{2.0}
  p:watch(w)
  local z = p:record(function() return (w * w):sum() end)
  T.eq(p:gradient(z, w)[0], 4)
  T.eq(p:gradient(z, {w})[1][0], 4)
  -- an error inside record stops the recording
  T.raises(function() tape = autograd.GradientTape(); tape:record(function() error("boom") end) end, "boom")
  T.ok(not autograd.is_recording())
end)

T.test("help texts exist for the tensor API", function()
  T.ok(ldist.docs[tensor.zeros]:find("tensor.zeros", 1, true))
  T.ok(ldist.docs["Tensor:matmul"])
end)

T.test("stack along any axis, min and argmin (TF)", function()
  -- TF: tf.stack([[1,2,3],[4,5,6]], axis=1) -> [[1,4],[2,5],[3,6]]; axis=-1 the same; axis=0 2x3
  local a, b = tensor.new{ 1, 2, 3 }, tensor.new{ 4, 5, 6 }
  local s1 = tensor.stack({ a, b }, 1)
  T.eq(table.concat(s1.shape, "x"), "3x2"); T.eq(table.concat(s1:reshape(-1):totable(), " "), "1.0 4.0 2.0 5.0 3.0 6.0")
  T.eq(table.concat(tensor.stack({ a, b }, -1):reshape(-1):totable(), " "), "1.0 4.0 2.0 5.0 3.0 6.0")
  T.eq(table.concat(tensor.stack({ a, b }).shape, "x"), "2x3")
  T.raises(function() tensor.stack({ a, b }, 2) end, "axis 2 out of range")
  T.raises(function() tensor.stack({ a, tensor.new{ { 1, 2, 3 } } }) end, "need equal shapes")
  -- TF: reduce_min([[3,1,2],[0,5,-1]]) = -1, axis=1 -> [1, -1], argmin axis=1 -> [1, 2]
  local m = tensor.new{ { 3, 1, 2 }, { 0, 5, -1 } }
  T.eq(m:min():item(), -1); T.eq(table.concat(m:min(1):totable(), " "), "1.0 -1.0")
  T.eq(table.concat(m:argmin(1):totable(), " "), "1 2")
end)

T.test("integer arithmetic keeps integer dtypes, as in TF", function()
  local a = tensor.from({ 1, 2, 3 }, { dtype = "int64" })
  -- TF: tf.constant([1,2,3], tf.int64) * 2 -> int64 [2 4 6]; + a -> [2 4 6]; - 1 -> [0 1 2]; -a -> [-1 -2 -3]
  local function same(t, dtype, v) T.eq(t.dtype, dtype); T.eq(table.concat(t:reshape(-1):totable(), " "), v) end
  same(a * 2, "int64", "2 4 6"); same(2 * a, "int64", "2 4 6"); same(a + a, "int64", "2 4 6")
  same(a - 1, "int64", "0 1 2"); same(-a, "int64", "-1 -2 -3")
  same(a:maximum(tensor.from({ 2 }, { dtype = "int64" })), "int64", "2 2 3")
  -- broadcasting: [2,1] x [3]
  same(tensor.from({ { 10 }, { 20 } }, { dtype = "int32" }) + tensor.from({ 1, 2, 3 }, { dtype = "int32" }), "int32",
    "11 12 13 21 22 23")
  -- TF: tf.constant([250], tf.uint8) + tf.constant([10], tf.uint8) -> [4] (wraps)
  same(tensor.from({ 250 }, { dtype = "uint8" }) + tensor.from({ 10 }, { dtype = "uint8" }), "uint8", "4")
  -- exact beyond float32: 2^40 + 1
  same(tensor.from({ 2 ^ 40 }, { dtype = "int64" }) + 1, "int64", tostring(2 ^ 40 + 1 | 0))
  -- a float operand, or division, gives float32 (TF's truediv gives a float too)
  T.eq((a * 0.5).dtype, "float32"); T.eq((a / 2).dtype, "float32")
  -- and a strided view reads the right elements
  local m = tensor.from({ { 1, 2, 3 }, { 4, 5, 6 } }, { dtype = "int64" })
  same(m:transpose(0, 1):contiguous() * 1, "int64", "1 4 2 5 3 6")
  same(m:slice(1, 1, 3) * 10, "int64", "20 30 50 60")
end)

T.done()
