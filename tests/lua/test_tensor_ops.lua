-- test_tensor_ops.lua - TF's array ops composed of the engine's
-- (lua_bindings/lua/tensor_ops.lua): each case's outputs and the gradients of
-- sum(y * r) against TF 2.21's (tests/fixtures/tensor_ops.lua, written by
-- scripts/fixtures/make_tensor_ops_fixtures.py), on cpu:0 and on the logical
-- device cpu:1; then the errors a user meets.
local T = dofile("tests/lua/testlib.lua")
ldist.config.cpu_devices(2)
local F = dofile("tests/fixtures/tensor_ops.lua")

local function make(a, dev)
  local t = tensor.new(a.v):reshape(a.shape)
  return dev and t:to(dev) or t
end
local function close(got, want, tol, what)
  T.eq(table.concat(got.shape, "x"), table.concat(want.shape, "x"), what .. " shape")
  local g = got:cpu():reshape { got:numel() }:totable()
  local scale = 1
  for _, v in ipairs(want.v) do scale = math.max(scale, math.abs(v)) end
  for i, v in ipairs(want.v) do
    if math.abs(g[i] - v) > tol * scale then
      error(("%s [%d]: %.9g, TF %.9g"):format(what, i, g[i], v), 0)
    end
  end
end

for _, dev in ipairs { false, "cpu:1" } do
  local where = dev or "cpu:0"
  T.test("TF's values and gradients on " .. where .. ": einsum, tensordot, tile, repeat, reverse, broadcast_to, band_part, split, pad, unstack, meshgrid, norm", function()
    for _, c in ipairs(F.cases) do
      local x = {}
      for i, a in ipairs(c.x) do x[i] = tensor.Variable(make(a, dev or nil)) end
      local fn = assert(load("local x = ...; return " .. c.call, "=" .. c.name, "t", _ENV))
      local tape = autograd.GradientTape()
      local ys
      local loss = tape:record(function()
        local y = fn(x)
        ys = tensor.is_tensor(y) and { y } or y
        local l
        for i, p in ipairs(ys) do
          local term = (p * make(c.r[i], dev or nil)):sum()
          l = l and l + term or term
        end
        return l
      end)
      T.eq(#ys, #c.y, c.name .. ": the number of outputs")
      for i, p in ipairs(ys) do
        T.eq(p.device, where, c.name .. " output's device")
        close(p, c.y[i], 1e-5, c.name .. " output " .. i)
      end
      local g = tape:gradient(loss, x)
      for i = 1, #x do close(g[i], c.dx[i], 1e-5, c.name .. " gradient " .. i) end
    end
  end)
end

T.test("eye and linspace equal TF's", function()
  for _, c in ipairs(F.constants) do
    local y = assert(load("return " .. c.call, "=" .. c.name, "t", _ENV))()
    close(y, c.y, 0, c.name)
  end
  T.eq(tensor.eye(2, { device = "cpu:1" }).device, "cpu:1")
  T.eq(tensor.linspace(0, 1, 1):totable()[1], 0, "one value: start")
end)

T.test("errors name the op and the problem", function()
  local m = tensor.ones(2, 3)
  T.raises(function() tensor.einsum("ij,jk->ik", m, tensor.ones(4, 2)) end, "index 'j' is 4 in operand 2 but 3 in operand 1")
  T.raises(function() tensor.einsum("ii->i", tensor.ones(3, 3)) end, "index 'i' appears twice in operand 1")
  T.raises(function() tensor.einsum("...ij->ij", m) end, "ellipsis")
  T.raises(function() tensor.einsum("ijk->i", m) end, "operand 1 has 2 axes but its subscripts 'ijk' name 3")
  T.raises(function() tensor.einsum("ij->z", m) end, "output index 'z' is in no operand")
  T.raises(function() tensor.einsum("ij,jk->ik", m) end, "names 2 operands, 1 given")
  T.raises(function() tensor.tile(m, { 2 }) end, "multiples must list one count per axis (2)")
  T.raises(function() tensor.tile(m, { 2, -1 }) end, "each multiple must be an integer >= 0")
  T.raises(function() tensor.repeat_(m, { 1, 2 }, 1) end, "2 repeats for axis 1 of size 3")
  T.raises(function() tensor.reverse(m, { 2 }) end, "axis 2 is out of range for a tensor of 2 axes")
  T.raises(function() tensor.reverse(m, { 1, -1 }) end, "axis 1 is given twice")
  T.raises(function() tensor.broadcast_to(m, { 3, 3 }) end, "a tensor of shape {2, 3} does not broadcast to {3, 3}")
  T.raises(function() tensor.band_part(tensor.ones(3), 0, 0) end, "needs a matrix")
  T.raises(function() tensor.split(m, 2, 1) end, "axis 1 of size 3 does not split into 2 equal parts")
  T.raises(function() tensor.split(m, { 1, 1 }, 1) end, "sizes {1, 1} do not add up to axis 1's 3")
  T.raises(function() tensor.norm(m, { ord = 3 }) end, "ord must be")
  T.raises(function() tensor.norm(m, { axiss = 1 }) end, "unknown option 'axiss'")
  T.raises(function() tensor.tensordot(m, m, 3) end, "axes 3 is more than the operands' axes")
  T.raises(function() tensor.pad(m, { { 1, 1 } }) end, "paddings must give {before, after} for each of the 2 axes")
  T.raises(function() tensor.pad(m, { { 0, 0 }, { 3, 0 } }, { mode = "REFLECT" }) end,
    "REFLECT padding of axis 1 (size 3) must be at most 2 on each side")
  T.raises(function() tensor.pad(m, { { 0, 0 }, { 0, 0 } }, { mode = "wrap" }) end, "mode must be")
  T.raises(function() tensor.meshgrid(m) end, "input 1 must be 1-D")
  -- after the errors the session goes on
  T.eq(tensor.einsum("ij->", m):item(), 6)
end)

T.done()
