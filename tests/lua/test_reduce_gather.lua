-- test_reduce_gather.lua - integer reductions keep their dtype and are exact,
-- and t:gather(indices, axis) honours its axis (issue 27, items 2 and 3), on
-- cpu:0, a logical CPU device (cpu:1) and cuda:0 where one answers.
-- Expected values are TensorFlow 2.21's (tf.reduce_*, tf.argmax, tf.gather),
-- run by hand: tf.reduce_sum(int64 [16777217, 0]) = 16777217 (int64),
-- tf.reduce_sum(uint8 [200, 100]) = 44 (uint8, wrapped), tf.reduce_sum(int32
-- [2^31-1, 1]) = -2^31, tf.argmax(int64 [16777216, 16777217]) = 1. mean is
-- ldist's own rule: float32 (TF's truncates to the integer dtype; NumPy's
-- is float).
local T = dofile("tests/lua/testlib.lua")

ldist.config.cpu_devices(2)
local devices = { "cpu:0", "cpu:1" }
for _, d in ipairs(tensor.devices()) do
  if d == "cuda:0" then devices[#devices + 1] = d end
end

local function I(v, dt, dev) return tensor.new(v, { dtype = dt, device = dev }) end
local function flat(t)
  t = t:cpu()
  if t.ndim == 0 then return { t:item() } end
  return t:reshape(t:numel()):totable()
end
local function same(t, want, what)
  local g = flat(t)
  T.eq(#g, #want, what .. ": element count")
  for i = 1, #want do T.eq(g[i], want[i], what .. ": element " .. i) end
end

for _, dev in ipairs(devices) do
  T.test(dev .. ": int64 sum, max, min are int64 and exact past 2^24", function()
    local a = I({ 16777217, 0 }, "int64", dev)
    local s = a:sum()
    T.eq(s.dtype, "int64"); T.eq(s.device, dev)
    T.eq(s:item(), 16777217)
    T.eq(math.type(s:item()), "integer")
    local b = I({ 16777217, 16777216, -9007199254740993 }, "int64", dev)
    T.eq(b:max():item(), 16777217)
    T.eq(b:min():item(), -9007199254740993)
    T.eq(b:max().dtype, "int64"); T.eq(b:min().dtype, "int64")
    T.eq(I({ 16777216, 16777217 }, "int64", dev):argmax():item(), 1)   -- float32 would see a tie
    T.eq(I({ 16777217, 16777216 }, "int64", dev):argmin():item(), 1)
    T.eq(I({ math.maxinteger, 1 }, "int64", dev):sum():item(), math.mininteger, "wraps, as TF's int64 sum")
  end)

  T.test(dev .. ": int32 and uint8 reductions keep their dtype (TF's wrapping sums)", function()
    local s = I({ 2147483647, 1 }, "int32", dev):sum()
    T.eq(s.dtype, "int32"); T.eq(s:item(), -2147483648)
    local u = I({ { 200, 100 }, { 1, 2 } }, "uint8", dev)
    same(u:sum(1), { 44, 3 }, "uint8 sum along axis 1")
    T.eq(u:sum(1).dtype, "uint8")
    same(u:sum(0), { 201, 102 }, "uint8 sum along axis 0")
    same(u:max(0), { 200, 100 }, "uint8 max"); T.eq(u:max(0).dtype, "uint8")
    same(u:min(1), { 100, 1 }, "uint8 min"); T.eq(u:min(1).dtype, "uint8")
    same(u:argmin(1), { 1, 0 }, "uint8 argmin")
    local k = u:sum(1, { keepdims = true })
    T.eq(k.shape[1], 2); T.eq(k.shape[2], 1)
    T.eq(I({}, "int32", dev):sum():item(), 0, "an empty sum is 0")
    T.raises(function() I({}, "int32", dev):max() end, "max of an empty dimension")
  end)

  T.test(dev .. ": mean of integers is float32, from the exact sum", function()
    local m = I({ 16777217, 16777219 }, "int64", dev):mean()
    T.eq(m.dtype, "float32")
    T.eq(m:item(), 16777218)
    same(I({ { 1, 2 }, { 3, 5 } }, "int32", dev):mean(1), { 1.5, 4 }, "int32 mean along axis 1")
  end)

  T.test(dev .. ": float reductions are unchanged (float32, gradients)", function()
    local x = tensor.Variable(tensor.new({ { 1, 5 }, { 3, 2 } }, { device = dev }))
    local tape = autograd.GradientTape()
    local l = tape:record(function() return x:min(1):sum() + x:max(0):sum() end)
    same(tape:gradient(l, { x })[1], { 1, 1, 1, 1 }, "d(min(1):sum() + max(0):sum())/dx")
    T.eq(x:sum().dtype, "float32")
  end)

  T.test(dev .. ": gather honours its axis (0, 1, -1) and takes indices of any shape", function()
    local t = tensor.new({ { 1, 2, 3 }, { 4, 5, 6 } }, { device = dev })
    same(t:gather({ 1 }), { 4, 5, 6 }, "axis 0 (default)")
    same(t:gather({ 1, 0 }, 0), { 4, 5, 6, 1, 2, 3 }, "axis 0")
    local g = t:gather({ 2, 0 }, 1)
    T.eq(g.shape[1], 2); T.eq(g.shape[2], 2); T.eq(g.device, dev)
    same(g, { 3, 1, 6, 4 }, "axis 1")
    same(t:gather({ 2, 0 }, -1), { 3, 1, 6, 4 }, "axis -1")
    same(t:index_select({ -1 }, 1), { 3, 6 }, "index_select, axis 1, index -1 from the end")
    local n = t:gather(tensor.new({ { 0, 1 }, { 1, 1 } }, { dtype = "int32", device = dev }), 1)   -- tf.gather: [2, 2, 2]
    T.eq(#n.shape, 3)
    same(n, { 1, 2, 2, 2, 4, 5, 5, 5 }, "2-d indices along axis 1")
    local x3 = tensor.arange(0, 24):reshape(2, 3, 4):astype("float32"):to(dev)
    same(x3:gather({ 3, 0 }, 2):slice(0, 1, 2), { 15, 12, 19, 16, 23, 20 }, "3-d, axis 2")
    same(x3:gather({ 2 }, 1), { 8, 9, 10, 11, 20, 21, 22, 23 }, "3-d, axis 1")
    local ti = I({ { 1, 2, 3 }, { 4, 5, 6 } }, "int64", dev):gather({ 2, 2 }, 1)
    T.eq(ti.dtype, "int64"); same(ti, { 3, 3, 6, 6 }, "int64 along axis 1")
  end)

  T.test(dev .. ": gather's axis or index out of range is an error naming it", function()
    local t = tensor.new({ { 1, 2, 3 }, { 4, 5, 6 } }, { device = dev })
    T.raises(function() t:gather({ 0 }, 7) end, "bad argument #2 to 'gather' (axis 7 out of range for a tensor with 2 dimensions)")
    T.raises(function() t:gather({ 0 }, -3) end, "axis -3 out of range")
    T.raises(function() t:index_select({ 0 }, 2) end, "bad argument #2 to 'index_select' (axis 2 out of range")
    T.raises(function() t:gather({ 3 }, 1) end, "index 3 at position 0 is out of range for axis 1 of size 3")
    T.raises(function() t:gather({ 0, -4 }, -1) end, "index -4 at position 1 is out of range for axis -1 of size 3")
    T.raises(function() t:gather(tensor.new({ 0.5 }), 1) end, "int32 or int64")
  end)

  T.test(dev .. ": the gradient of gather along an axis scatter-adds into that axis", function()
    local x = tensor.Variable(tensor.new({ { 1, 2, 3 }, { 4, 5, 6 } }, { device = dev }))
    local w = tensor.new({ { 1, 10, 100 }, { 1000, 10000, 100000 } }, { device = dev })
    local tape = autograd.GradientTape()
    local l = tape:record(function() return (x:gather({ 2, 2, 0 }, 1) * w):sum() end)
    -- tf.gather's gradient: column 2 gets w[:, 0] + w[:, 1], column 0 gets w[:, 2]
    same(tape:gradient(l, { x })[1], { 100, 0, 11, 100000, 0, 11000 }, "d/dx, axis 1")
    tape = autograd.GradientTape()
    l = tape:record(function() return (x:gather({ 1, 1 }, 0) * tensor.new({ 1, 2, 3 }, { device = dev })):sum() end)
    same(tape:gradient(l, { x })[1], { 0, 0, 0, 2, 4, 6 }, "d/dx, axis 0")
  end)
end

T.done()
