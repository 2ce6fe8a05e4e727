-- test_ops.lua - every op on every device: each kernel of a device's backend
-- against the CPU result (normalised error, ggml-style): copies and
-- conversions, fill, binary ops with broadcasting and strided operands, unary
-- ops and their derivatives, reductions, matrix products, softmax, fused
-- cross-entropy, convolution, pooling, optimizer updates; plus the errors a
-- user meets. `make test` runs it on the logical CPU device cpu:1
-- (tests/lua/test_ops_device.sh), where the executor counts the calls of each
-- kernel slot and the last case fails on any kernel of engine/ld_kernels.h
-- that no case called; `make test-gpu` runs it on cuda:0.
local G = dofile("tests/ops/devlib.lua")
local T, dev = G.T, G.dev

tensor.seed(42)
local function U(lo, hi, ...)
  local shape = table.pack(...)
  shape[shape.n + 1] = { min = lo, max = hi }
  return tensor.uniform(table.unpack(shape, 1, shape.n + 1))
end

---------------------------------------------------------------- memory, copies, fill
T.test("to and back is exact, every dtype", function()
  local x = tensor.normal(1000)
  for _, dt in ipairs({ "float32", "int32", "int64", "uint8", "float16", "bfloat16" }) do
    local c = (x * 10):abs():astype(dt)
    G.same(c:to(dev), c:to(dev), "to " .. dt)      -- device tensor, compared on the host
    T.eq(G.flat(c:to(dev):cpu())[7], G.flat(c)[7], "round trip " .. dt)
  end
  T.eq(tensor.new(3.5):to(dev):item(), 3.5)
  T.eq(tensor.zeros(0):to(dev):numel(), 0)
end)

T.test("fill: zeros, ones, full in every dtype", function()
  for _, dt in ipairs({ "float32", "int32", "int64", "uint8", "float16", "bfloat16" }) do
    G.same(tensor.full({ 3, 70 }, 7, { dtype = dt, device = dev }), tensor.full({ 3, 70 }, 7, { dtype = dt }), "full " .. dt)
    G.same(tensor.zeros(5, 9, { dtype = dt, device = dev }), tensor.zeros(5, 9, { dtype = dt }), "zeros " .. dt)
  end
  G.same(tensor.ones(1000, { device = dev }), tensor.ones(1000), "ones")
end)

T.test("copy_strided: transposed, sliced, stepped views with every dtype conversion", function()
  local base = tensor.arange(0, 4 * 6 * 5):reshape(4, 6, 5)   -- int64
  local dts = { "float32", "int32", "int64", "uint8", "float16", "bfloat16" }
  for _, sdt in ipairs(dts) do
    local s = base:astype(sdt)
    for _, ddt in ipairs(dts) do
      local what = sdt .. " -> " .. ddt
      local g, c = G.both(function(t) return t:transpose(0, 2):astype(ddt) end, s)
      G.same(g, c, "transpose " .. what)
      g, c = G.both(function(t) return t:slice(1, 1, 6, 2):astype(ddt) end, s)
      G.same(g, c, "stepped slice " .. what)
    end
  end
  local g, c = G.both(function(t) return t:permute({ 2, 0, 1 }):contiguous() end, tensor.normal(3, 4, 5))
  G.same(g, c, "permute + contiguous")
  g, c = G.both(function(t) return t:clone() end, tensor.normal(257))
  G.same(g, c, "clone")
  g, c = G.both(function(t) return t[2] end, tensor.normal(4, 33))
  G.same(g:contiguous(), c:contiguous(), "select a row")
  -- the axes a copy reads in order are merged: a contiguous cast is one row
  -- split over the threads in ranges, an image of one channel no longer a
  -- row per pixel; a cast through a transposed view converts element by
  -- element, and both give the same bits
  local function equal(a, b) return a:eq(b):min():item() == 1 end
  for _, dt in ipairs { "bfloat16", "float16" } do
    local x = tensor.normal(600, 500) * 1000
    local whole = x:astype(dt)
    local by_element = x:transpose(0, 1):astype(dt):transpose(0, 1):contiguous()
    T.ok(equal(whole:astype("float32"), by_element:astype("float32")), "a contiguous cast to " .. dt)
    local img = x:reshape(300, 10, 100, 1)
    g, c = G.both(function(t) return t:astype(dt):astype("float32") end, img)
    G.same(g, c, "an image of one channel to " .. dt .. " and back")
    T.ok(equal(c, whole:astype("float32"):reshape(300, 10, 100, 1)), "one channel, " .. dt)
    g, c = G.both(function(t) return t:slice(1, 2, 9):astype(dt) end, img)   -- rows 2..8 of each image: merged
    G.same(g, c, "a slice of images to " .. dt)
    T.ok(equal(c:astype("float32"), whole:astype("float32"):reshape(300, 10, 100, 1):slice(1, 2, 9)), "a slice, " .. dt)
  end
end)

---------------------------------------------------------------- binary
-- the elementwise ops come from the engine's lists (LD_BINARY_OPS, LD_UNARY_OPS
-- in engine/ld_kernels.h): a new op is tested here without a line of its own
local bin = tensor.binary_ops
local comparisons = { eq = true, lt = true, gt = true, ne = true, le = true, ge = true }   -- no gradient

T.test("the elementwise ops of the engine's lists are documented Tensor methods", function()
  T.ok(#bin >= 10 and #tensor.unary_ops >= 10, "tensor.binary_ops and tensor.unary_ops list the ops")
  for _, list in ipairs({ bin, tensor.unary_ops }) do
    for _, op in ipairs(list) do
      T.eq(type(tensor.Tensor[op]), "function", "Tensor:" .. op)
      local doc = ldist.docs["Tensor:" .. op]
      T.ok(type(doc) == "string" and (doc:find("t:" .. op, 1, true) or doc:find("a:" .. op, 1, true)), "help for Tensor:" .. op)
    end
  end
end)
local patterns = {
  { "same shape", { 33, 65 }, { 33, 65 } },
  { "row broadcast", { 33, 65 }, { 65 } },
  { "column broadcast", { 33, 1 }, { 1, 65 } },
  { "3-d broadcast", { 4, 1, 5 }, { 3, 1 } },
  { "scalar", { 1000 }, {} },
  { "large", { 300, 1001 }, { 1001 } },
}
T.test("binary ops with broadcasting", function()
  for _, op in ipairs(bin) do
    for _, p in ipairs(patterns) do
      local a = U(0.5, 2, table.unpack(p[2]))
      local b = #p[3] > 0 and U(0.5, 2, table.unpack(p[3])) or tensor.new(1.25)
      if op == "eq" or op == "ne" or op == "le" or op == "ge" then b = a:slice(0, 0, 1) end   -- some equal elements
      local g, c = G.both(function(x, y) return x[op](x, y) end, a, b)
      G.close(g, c, op .. " " .. p[1])
    end
  end
end)

T.test("binary ops on strided operands (transposed, sliced)", function()
  local a, b = tensor.normal(40, 30), tensor.normal(30, 40)
  for _, op in ipairs({ "add", "mul", "sub", "maximum" }) do
    local g, c = G.both(function(x, y) return x[op](x, y.T) end, a, b)
    G.close(g, c, op .. " with a transposed operand")
    g, c = G.both(function(x, y)
      local s = x:slice(1, 0, 30, 3)                       -- 40x10, stride 3
      return s[op](s, y:slice(0, 2, 12).T)                 -- 10x40 transposed
    end, a, b)
    G.close(g, c, op .. " of stepped slices")
  end
end)

T.test("operators with numbers and tables on device tensors", function()
  local a = tensor.normal(40, 30)
  local g, c = G.both(function(x) return x * 3 + 1 end, a)
  G.close(g, c, "x * 3 + 1")
  g, c = G.both(function(x) return 2 - x / 4 end, a)
  G.close(g, c, "2 - x / 4")
end)

T.test("maximum / minimum with NaN follow the CPU's rule", function()
  local a = tensor.new({ 1, 0 / 0, 3, -1 })
  local b = tensor.new({ 0 / 0, 2, 1, -2 })
  local g, c = G.both(function(x, y) return x:maximum(y) end, a, b)
  G.close(g, c, "maximum with NaN")
  g, c = G.both(function(x, y) return x:minimum(y) end, a, b)
  G.close(g, c, "minimum with NaN")
end)

---------------------------------------------------------------- select (tensor.where)
T.test("select (where): every dtype, conditions of every dtype, broadcast and strided operands", function()
  local dts = { "float32", "int32", "int64", "uint8", "float16", "bfloat16" }
  local c = tensor.new({ 1, 0, 0 / 0, -0.0, 2, 0, 1, 1 }):reshape(2, 4)   -- NaN true, -0 false
  for _, dt in ipairs(dts) do
    local a = (tensor.arange(0, 8):reshape(2, 4) + 1):astype(dt)
    local b = tensor.full({ 4 }, 9, { dtype = dt })
    for _, cdt in ipairs(dts) do
      local cc = cdt:match("^float") and c:astype(cdt) or tensor.new({ 1, 0, 3, 0, 2, 0, 1, 255 }):reshape(2, 4):astype(cdt)
      local g, h = G.both(function(k, x, y) return tensor.where(k, x, y) end, cc, a, b)
      G.same(g, h, ("where %s ? %s : %s"):format(cdt, dt, dt))
    end
  end
  for _, p in ipairs({ { { 33, 65 }, { 65 }, { 33, 1 } }, { { 4, 1, 5 }, { 3, 1 }, {} }, { { 300, 1001 }, { 1001 }, { 300, 1001 } } }) do
    local k = tensor.normal(table.unpack(p[1])):gt(0)
    local a = tensor.normal(table.unpack(p[2]))
    local b = #p[3] > 0 and tensor.normal(table.unpack(p[3])) or tensor.new(7)
    local g, h = G.both(function(kk, x, y) return tensor.where(kk, x, y) end, k, a, b)
    G.same(g, h, "where, broadcast " .. #p[1] .. "-d")
  end
  local a, b = tensor.normal(40, 30), tensor.normal(30, 40)
  local g, h = G.both(function(x, y) return tensor.where(x:gt(0), x, y.T) end, a, b)
  G.same(g, h, "where with a transposed operand")
  g, h = G.both(function(x, y) local s = x:slice(1, 0, 30, 3); return tensor.where(s:lt(0), s, y:slice(0, 2, 12).T) end, a, b)
  G.same(g, h, "where of stepped slices")
  -- the gradient: a selection of the output's gradient, summed over b's broadcast
  g, h = G.both(function(x, y)
    local va, vb = tensor.Variable(x), tensor.Variable(y)
    local tape = autograd.GradientTape()
    local loss = tape:record(function() return (tensor.where(va:gt(0), va, vb) * va):sum() end)
    local gr = tape:gradient(loss, { va, vb })
    return tensor.concat({ gr[1]:reshape(-1), gr[2]:reshape(-1) }, 0)
  end, a, tensor.normal(30))
  G.close(g, h, "where's gradients")
end)

---------------------------------------------------------------- views and copies keep the graph
-- d/dx sum(f(x) * w) for each view or copy a user writes in Lua, against the
-- same selection made by an op whose gradient is other code (gather's
-- scatter, transposes, reshape, plain arithmetic), on the CPU and the device:
-- every one of these once gave a zero gradient inside a tape.
T.test("slice, select, permute, contiguous, clone, to, concat, stack and float differentiate", function()
  local function grad(f, x, ww)
    local v = tensor.Variable(x)
    local tape = autograd.GradientTape()
    local loss = tape:record(function() local y = f(v); return (y * ww:to(y.device)):sum() end)
    local g = tape:gradient(loss, { v })[1]
    T.eq(g.device, x.device, "gradient on the variable's device")
    return g
  end
  local function idx(a, b, s)
    local t = {}
    for i = a, b - 1, s do t[#t + 1] = i end
    return tensor.new(t, { dtype = "int64" })
  end
  local x = tensor.normal(5, 6, 4)
  local cases = {
    { "slice", function(v) return v:slice(1, 1, 5) end, function(v) return v:gather(idx(1, 5, 1), 1) end, { 5, 4, 4 } },
    { "stepped slice", function(v) return v:slice(1, 0, 6, 2) end, function(v) return v:gather(idx(0, 6, 2), 1) end, { 5, 3, 4 } },
    { "negative slice", function(v) return v:slice(-1, -3, -1) end, function(v) return v:gather(idx(1, 3, 1), 2) end, { 5, 6, 2 } },
    { "select", function(v) return v[3] end, function(v) return v:gather(idx(3, 4, 1), 0):reshape(6, 4) end, { 6, 4 } },
    { "select of a slice", function(v) return v:slice(2, 1, 4)[0] end,
      function(v) return v:gather(idx(0, 1, 1), 0):gather(idx(1, 4, 1), 2):reshape(6, 3) end, { 6, 3 } },
    { "permute", function(v) return v:permute { 2, 0, 1 } end, function(v) return v:transpose(1, 2):transpose(0, 1) end, { 4, 5, 6 } },
    { "contiguous", function(v) return v:transpose(0, 2):contiguous() end, function(v) return v:transpose(0, 2) end, { 4, 6, 5 } },
    { "clone", function(v) return v:clone() end, function(v) return v * 1 end, { 5, 6, 4 } },
    { "to the CPU and back", function(v) return v:cpu():to(v.device) end, function(v) return v + 0 end, { 5, 6, 4 } },
    { "concat", function(v) return tensor.concat({ v, v:slice(0, 0, 2) }, 0) end,
      function(v) return v:gather(tensor.new({ 0, 1, 2, 3, 4, 0, 1 }, { dtype = "int64" }), 0) end, { 7, 6, 4 } },
    { "stack", function(v) return tensor.stack({ v, v * 2 }, 1) end,
      function(v) return (v:reshape(5, 1, 6, 4) * tensor.new({ 1, 2 }):reshape(1, 2, 1, 1):to(v.device)) end, { 5, 2, 6, 4 } },
    { "float", function(v) return v:float() end, function(v) return v - 0 end, { 5, 6, 4 } },
  }
  for _, c in ipairs(cases) do
    local ww = tensor.normal(table.unpack(c[4]))
    local a, b = G.both(function(t) return grad(c[2], t, ww) end, x)
    local ra, rb = G.both(function(t) return grad(c[3], t, ww) end, x)
    G.close(a, ra, c[1] .. ": against the same selection by other ops", 1e-12)
    G.close(b:to(G.dev), rb:to(G.dev), c[1] .. " on the CPU", 1e-12)
    T.ok(b:abs():sum():item() > 0, c[1] .. ": a gradient reaches the variable")
  end
  -- a view of a half tensor (a variable's bfloat16 cast): its gradient comes back
  for _, step in ipairs({ 1, 2 }) do
    local a = G.both(function(t)
      return grad(function(v) return v:astype("bfloat16"):slice(1, 1, 6, step) end, t, tensor.ones(4, step == 1 and 5 or 3))
    end, tensor.normal(4, 6))
    T.eq(a:sum():item(), step == 1 and 20 or 12, "ones where the bfloat16 slice reads, step " .. step)
  end
  -- bfloat16 tensors concatenated (through float32) give their gradients back
  local wi = (tensor.normal(10, 6, 4) * 4):round()   -- exact in bfloat16
  local a, b = G.both(function(t)
    return grad(function(v) local h = v:astype("bfloat16"); return tensor.concat({ h, h }, 0):astype("float32") end, t, wi)
  end, x)
  G.close(a, b, "bfloat16 concat's gradient on the device and the CPU", 1e-12)
  G.close(a, (wi:slice(0, 0, 5) + wi:slice(0, 5, 10)):to(G.dev), "bfloat16 concat's gradient: the two blocks' sum", 1e-12)
  -- a view is still a view: a write through it reaches the tensor, in a tape
  -- too (assign writes host tensors)
  local t = tensor.zeros(3, 4)
  local v = tensor.Variable(tensor.zeros(3, 4))
  local tape = autograd.GradientTape()
  tape:record(function() t:slice(1, 1, 3):assign(tensor.full({ 3, 2 }, 5)); return (v * 1):sum() end)
  T.eq(t:sum():item(), 30, "an assign through a slice reaches its tensor")
end)

---------------------------------------------------------------- unary and derivatives
local unary = tensor.unary_ops
local function unary_input(op, n)
  if op == "log" or op == "sqrt" or op == "rsqrt" or op == "log1p" or op == "reciprocal" then return U(0.1, 3, n) end
  return tensor.normal(n) * 2
end

T.test("unary ops", function()
  for _, op in ipairs(unary) do
    for _, n in ipairs({ 1, 1000, 100003 }) do
      local g, c = G.both(function(x) return x[op](x) end, unary_input(op, n))
      G.close(g, c, ("%s (%d)"):format(op, n))
    end
  end
end)

-- d/dx sum(f(x) * w): the derivative kernels, with a non-trivial upstream gradient
local function grad_of(f, x, w)
  local v = tensor.Variable(x)
  local tape = autograd.GradientTape()
  local loss = tape:record(function() return (f(v) * w):sum() end)
  return tape:gradient(loss, { v })[1]
end

T.test("unary derivatives", function()
  for _, op in ipairs(unary) do
    local x, w = unary_input(op, 5000), tensor.normal(5000)
    local g, c = G.both(function(xx, ww) return grad_of(function(v) return v[op](v) end, xx, ww) end, x, w)
    G.close(g, c, "d " .. op, 1e-6)
  end
end)

T.test("binary derivatives, with broadcasting (sum over the broadcast axes)", function()
  for _, op in ipairs(bin) do
    if comparisons[op] then goto next end
    local a, b, w = U(0.5, 2, 17, 9), U(0.5, 2, 9), tensor.normal(17, 9)
    local function f(x, y, ww)
      local va, vb = tensor.Variable(x), tensor.Variable(y)
      local tape = autograd.GradientTape()
      local loss = tape:record(function() return (va[op](va, vb) * ww):sum() end)
      local gr = tape:gradient(loss, { va, vb })
      return gr[1], gr[2]
    end
    local ga, gb = f(a:to(dev), b:to(dev), w:to(dev))
    local ca, cb = f(a, b, w)
    G.close(ga, ca, "d/da " .. op, 1e-6)
    G.close(gb, cb, "d/db " .. op, 1e-6)
    ::next::
  end
end)

T.test("gradient accumulation (a variable used twice)", function()
  local g, c = G.both(function(x, w)
    return grad_of(function(v) return v * v + v:exp() + v end, x, w)
  end, tensor.normal(999), tensor.normal(999))
  G.close(g, c, "accumulated gradient", 1e-6)
end)

---------------------------------------------------------------- reductions
T.test("sum / mean / max / argmax over every axis and over all", function()
  local shapes = { { 7, 300, 5 }, { 100000 }, { 4, 5000, 3 }, { 3, 1, 2 }, { 2, 3000 } }
  for _, shp in ipairs(shapes) do
    local x = tensor.normal(table.unpack(shp))
    local label = table.concat(shp, "x")
    for axis = 0, #shp - 1 do
      for _, op in ipairs({ "sum", "mean", "max" }) do
        local g, c = G.both(function(t) return t[op](t, axis) end, x)
        G.close(g, c, ("%s axis %d of %s"):format(op, axis, label), 1e-9)
        g, c = G.both(function(t) return t[op](t, axis, { keepdims = true }) end, x)
        G.close(g, c, ("%s axis %d keepdims of %s"):format(op, axis, label), 1e-9)
      end
      local g, c = G.both(function(t) return t:argmax(axis) end, x)
      G.same(g, c, ("argmax axis %d of %s"):format(axis, label))
    end
    for _, op in ipairs({ "sum", "mean", "max" }) do
      local g, c = G.both(function(t) return t[op](t) end, x)
      G.close(g, c, ("%s of all %s"):format(op, label), 1e-9)
    end
  end
end)

T.test("reductions over lists of axes (adjacent, apart, none), var/std/logsumexp/any/all, and their gradients", function()
  local x, w = tensor.normal(6, 70, 5), nil
  for _, axes in ipairs({ { 0, 2 }, { 1, 2 }, { 2, 0 }, {}, { 0, 1, 2 } }) do
    for _, op in ipairs({ "sum", "mean", "max", "min", "var", "std", "logsumexp", "any", "all" }) do
      local what = ("%s over {%s}"):format(op, table.concat(axes, ","))
      local g, c = G.both(function(t) return t[op](t, { axis = axes }) end, x)
      G.close(g, c, what, 1e-9)
      if op ~= "any" and op ~= "all" then
        w = tensor.normal(table.unpack(c.shape))
        g, c = G.both(function(t, ww) return grad_of(function(v) return v[op](v, { axis = axes, keepdims = false }) end, t, ww) end, x, w)
        G.close(g, c, what .. ": gradient", 1e-9)
      end
    end
  end
end)

-- the scan kernel (cumsum, cumprod) in float32 running values, in order:
-- outer 1 with a long axis and inner > 1024 (the CPU's split over columns,
-- in ranges of 16 blocks of 64), more than 16 outer rows (its split over
-- rows), one long row (one thread, one step after another), short axes; every (exclusive, reverse); half
-- tensors in and out; the gradients (cumsum's a scan the other way,
-- cumprod's a scan, a division and a select); prod (the last running
-- product) over an axis, a list of axes and all, with its gradient (two
-- exclusive scans), zeros included
T.test("scan (cumsum, cumprod, prod): the CPU's splits, exclusive and reverse, half dtypes, and their gradients", function()
  local cases = { { { 1, 200, 2100 }, 1 }, { { 40, 3000, 3 }, 1 }, { { 300000 }, 0 }, { { 4, 7, 3 }, 2 }, { { 70000, 4 }, 0 } }
  for _, case in ipairs(cases) do
    local shp, axis = case[1], case[2]
    local x = U(0.95, 1.05, table.unpack(shp))
    for _, op in ipairs({ "cumsum", "cumprod" }) do
      for _, e in ipairs({ false, true }) do
        for _, r in ipairs({ false, true }) do
          local what = ("%s axis %d of %s, exclusive %s, reverse %s"):format(op, axis, table.concat(shp, "x"), e, r)
          local g, c = G.both(function(t) return t[op](t, axis, { exclusive = e, reverse = r }) end, x)
          G.close(g, c, what, 1e-9)
        end
      end
    end
  end
  for _, dt in ipairs({ "bfloat16", "float16" }) do
    local x = U(0.95, 1.05, 1, 200, 2100):astype(dt)
    for _, op in ipairs({ "cumsum", "cumprod" }) do
      local g, c = G.both(function(t) return t[op](t, 1, { reverse = true }) end, x)
      G.close(g, c, op .. " of " .. dt, 1e-9)
      g, c = G.both(function(t, ww) return grad_of(function(v) return v:astype(dt)[op](v:astype(dt), 1):astype("float32") end, t, ww) end,
                    x:astype("float32"):slice(1, 0, 50), tensor.normal(1, 50, 2100))
      G.close(g, c, op .. " of " .. dt .. ": gradient", 1e-6)
    end
  end
  local x = U(0.5, 1.5, 6, 40, 7)
  x = tensor.where(U(0, 1, 6, 40, 7):lt(0.05), 0, x)   -- zeros: cumprod's gradient selects, prod's has none to divide by
  for _, op in ipairs({ "cumsum", "cumprod" }) do
    for _, axis in ipairs({ 0, 1, 2 }) do
      for _, e in ipairs({ false, true }) do
        for _, r in ipairs({ false, true }) do
          local g, c = G.both(function(t, ww) return grad_of(function(v) return v[op](v, axis, { exclusive = e, reverse = r }) end, t, ww) end,
                              x, tensor.normal(6, 40, 7))
          G.close(g, c, ("d %s axis %d, exclusive %s, reverse %s"):format(op, axis, e, r), 1e-9)
        end
      end
    end
  end
  for _, axes in ipairs({ 1, { 0, 2 }, {}, { 0, 1, 2 } }) do
    local what = "prod over " .. (type(axes) == "table" and "{" .. table.concat(axes, ",") .. "}" or axes)
    local g, c = G.both(function(t) return t:prod({ axis = axes }) end, x)
    G.close(g, c, what, 1e-9)
    local w = tensor.normal(table.unpack(c.shape))
    g, c = G.both(function(t, ww) return grad_of(function(v) return v:prod({ axis = axes }) end, t, ww) end, x, w)
    G.close(g, c, what .. ": gradient", 1e-9)
  end
  -- integers: scanned on the host, exact, back on the device in their dtype
  local ix = U(-3, 4, 6, 50):floor():astype("int32")
  for name, f in pairs({ cumsum = function(t) return t:cumsum(1, { exclusive = true }) end,
                         cumprod = function(t) return t:cumprod(0, { reverse = true }) end,
                         prod = function(t) return t:prod({ 0, 1 }) end }) do
    local g, c = G.both(f, ix)
    G.same(g, c, name .. " of int32")
  end
end)

T.test("max / argmax: first NaN wins, else the first maximum", function()
  local x = tensor.new({ { 1, 3, 3, 2 }, { 0 / 0, 5, 0 / 0, 1 }, { 2, 0 / 0, 9, 9 }, { -1 / 0, -1 / 0, -1 / 0, -1 / 0 } })
  local g, c = G.both(function(t) return t:argmax(1) end, x)
  G.same(g, c, "argmax rows with NaN and ties")
  g, c = G.both(function(t) return t:max(1) end, x)
  G.close(g, c, "max rows with NaN and ties")
  g, c = G.both(function(t) return t:argmax(0) end, x)
  G.same(g, c, "argmax columns with NaN and ties")
end)

T.test("reduction derivatives (sum, mean, max)", function()
  local x = tensor.normal(6, 40, 7)
  for _, op in ipairs({ "sum", "mean", "max" }) do
    for _, axis in ipairs({ 0, 1, 2 }) do
      local w = tensor.normal(table.unpack(axis == 0 and { 40, 7 } or axis == 1 and { 6, 7 } or { 6, 40 }))
      local g, c = G.both(function(t, ww) return grad_of(function(v) return v[op](v, axis) end, t, ww) end, x, w)
      G.close(g, c, ("d %s axis %d"):format(op, axis), 1e-6)
    end
  end
end)

---------------------------------------------------------------- matrix products
T.test("matmul: shapes, transposed operands (cuBLAS row-major), batched", function()
  local cases = {
    { { 64, 48 }, { 48, 32 } }, { { 129, 67 }, { 67, 255 } }, { { 1, 784 }, { 784, 10 } }, { { 300, 1 }, { 1, 7 } },
  }
  for _, cs in ipairs(cases) do
    local a, b = tensor.normal(table.unpack(cs[1])), tensor.normal(table.unpack(cs[2]))
    local what = table.concat(cs[1], "x") .. " @ " .. table.concat(cs[2], "x")
    local g, c = G.both(function(x, y) return x:matmul(y) end, a, b)
    G.close(g, c, what, 1e-9)
    -- the same product from transposed storage: gemm with ta / tb
    local at, bt = a.T:contiguous(), b.T:contiguous()
    g, c = G.both(function(x, y) return x.T:matmul(y) end, at, b)
    G.close(g, c, what .. " (A transposed)", 1e-9)
    g, c = G.both(function(x, y) return x:matmul(y.T) end, a, bt)
    G.close(g, c, what .. " (B transposed)", 1e-9)
    g, c = G.both(function(x, y) return x.T:matmul(y.T) end, at, bt)
    G.close(g, c, what .. " (both transposed)", 1e-9)
  end
  local g, c = G.both(function(x, y) return x:matmul(y) end, tensor.normal(2, 3, 20, 16), tensor.normal(16, 8))
  G.close(g, c, "batched matmul", 1e-9)
end)

T.test("matmul with an empty inner dimension gives zeros", function()
  local ok = pcall(function() return tensor.zeros(5, 0):matmul(tensor.zeros(0, 3)) end)
  if not ok then print("# the CPU refuses a 5x0 @ 0x3 product; skipped"); return end
  local g, c = G.both(function(x, y) return x:matmul(y) end, tensor.zeros(5, 0), tensor.zeros(0, 3))
  G.same(g, c, "5x0 @ 0x3")
end)

T.test("matmul derivatives", function()
  local a, b, w = tensor.normal(37, 50), tensor.normal(50, 23), tensor.normal(37, 23)
  local function f(x, y, ww)
    local va, vb = tensor.Variable(x), tensor.Variable(y)
    local tape = autograd.GradientTape()
    local loss = tape:record(function() return (va:matmul(vb) * ww):sum() end)
    local gr = tape:gradient(loss, { va, vb })
    return gr[1], gr[2]
  end
  local ga, gb = f(a:to(dev), b:to(dev), w:to(dev))
  local ca, cb = f(a, b, w)
  G.close(ga, ca, "d/da matmul", 1e-9)
  G.close(gb, cb, "d/db matmul", 1e-9)
end)

---------------------------------------------------------------- layer kernels (LD_LAYER_KERNELS)
-- normalization, indexing / pooling and attention, through the Keras layers:
-- the same layer on the device and on the CPU (twin_layers' way), with several
-- inputs (a table) or integer ones (no gradient), in training or inference;
-- forward, the gradients of the float inputs and trainable variables, and the
-- non-trainable variables after the call (batch normalization's moving statistics).
local function layer_check_n(name, make, xs, tol, opts)
  opts = opts or {}
  local function on(list, d)
    local r = {}
    for i, x in ipairs(list) do r[i] = d and x:to(d) or x end
    return r
  end
  local function call(layer, ins, training)
    if #ins == 1 then return layer(ins[1], { training = training }) end
    return layer(ins, { training = training })
  end
  local s = distribute.MirroredStrategy { devices = { dev } }
  tensor.seed(5)
  local ld = make()
  do
    local _ <close> = s:scope()
    call(ld, on(xs, dev), false)            -- builds the variables on the device
  end
  tensor.seed(5)
  local lc = make()
  call(lc, xs, false)
  local function run(layer, ins)
    local vs, vars = {}, {}
    for i, x in ipairs(ins) do
      if x.dtype == "float32" then vs[i] = tensor.Variable(x); vars[#vars + 1] = vs[i] else vs[i] = x end
    end
    local tape = autograd.GradientTape()
    local y = tape:record(function() return call(layer, vs, opts.training) end)
    tensor.seed(9)
    local w = tensor.normal(table.unpack(y.shape))
    if y.device ~= "cpu:0" then w = w:to(y.device) end
    local loss = tape:record(function() return (y * w):sum() end)
    for _, t in ipairs(layer.trainable_variables or {}) do vars[#vars + 1] = t end
    return y, tape:gradient(loss, vars)
  end
  -- opts.fused: the device runs the fused attention kernel, the CPU the unfused path
  local was = opts.fused and ldist.config.fused_attention("on")
  local yd, gd = run(ld, on(xs, dev))
  if opts.fused then ldist.config.fused_attention("off") end
  local yc, gc = run(lc, xs)
  if was then ldist.config.fused_attention(was) end
  G.close(yd, yc, name .. " forward", tol)
  T.eq(#gd, #gc, name .. ": gradients")
  -- each gradient against the scale of all of them (mean square per element)
  local ss, n = 0, 0
  for i = 1, #gc do
    if gc[i]:numel() > 0 then ss = ss + (gc[i] * gc[i]):sum():item(); n = n + gc[i]:numel() end
  end
  local floor = n > 0 and ss == ss and ss / n or nil   -- none when a gradient holds NaN
  for i = 1, #gc do G.close(gd[i], gc[i], ("%s gradient %d"):format(name, i), tol * 10, floor) end
  local nd, nc = ld.non_trainable_variables or {}, lc.non_trainable_variables or {}
  T.eq(#nd, #nc, name .. ": non-trainable variables")
  for i = 1, #nc do G.close(nd[i], nc[i], ("%s %s"):format(name, nc[i].name:match("[^/]+$")), tol) end
end

T.test("batch normalization (bn_stats, bn_finalize, bn_apply, bn_backward*): training and inference", function()
  local x = tensor.normal(4, 9, 7, 6) * 3 + 2
  layer_check_n("batchnorm training NHWC", function() return nn.BatchNormalization() end, { x }, 1e-9, { training = true })
  layer_check_n("batchnorm inference NHWC", function() return nn.BatchNormalization() end, { x }, 1e-9)
  layer_check_n("batchnorm training 2-d, no center/scale", function()
    return nn.BatchNormalization { momentum = 0.5, center = false, scale = false }
  end, { tensor.normal(300, 33) * 5 }, 1e-9, { training = true })
  layer_check_n("batchnorm training long column (1000 rows)", function() return nn.BatchNormalization() end,
    { tensor.normal(1000, 3) + 100 }, 1e-9, { training = true })
end)

T.test("layer normalization (layer_norm, layer_norm_backward): short and long rows", function()
  layer_check_n("layernorm 3-d", function() return nn.LayerNormalization() end, { tensor.normal(3, 11, 16) * 2 + 1 }, 1e-9)
  layer_check_n("layernorm long rows", function() return nn.LayerNormalization { epsilon = 1e-5 } end,
    { tensor.normal(7, 3000) }, 1e-9)
  layer_check_n("layernorm no center/scale", function() return nn.LayerNormalization { center = false, scale = false } end,
    { tensor.normal(50, 5) }, 1e-9)
end)

T.test("embedding (embedding, embedding_backward): repeated ids add up", function()
  -- ids in [0, v), spread and repeated
  local function ids(n, v, shape, dtype)
    local t = {}
    for i = 1, n do t[i] = (i * 7919 + i * i * 31) % v end
    return tensor.new(t, { dtype = dtype }):reshape(table.unpack(shape))
  end
  layer_check_n("embedding int64 ids", function() return nn.Embedding(50, 24) end, { ids(120, 50, { 4, 30 }, "int64") }, 1e-10)
  layer_check_n("embedding int32 ids, few rows", function() return nn.Embedding(3, 9) end,
    { ids(200, 3, { 200 }, "int32") }, 1e-10)
end)

T.test("image transform (image_transform, image_transform_backward): every fill mode, both interpolations", function()
  -- seeded layers: the device's and the CPU's layer draw the same transforms (their own streams)
  local x = tensor.normal(3, 9, 11, 2)
  for _, fill in ipairs { "reflect", "wrap", "constant", "nearest" } do
    for _, interp in ipairs { "bilinear", "nearest" } do
      layer_check_n(("rotation %s %s"):format(fill, interp), function()
        return nn.RandomRotation(0.4, { fill_mode = fill, interpolation = interp, fill_value = 0.5, seed = 3 })
      end, { x }, 1e-9, { training = true })
    end
  end
  layer_check_n("zoom out, constant", function() return nn.RandomZoom({ 0.3, 0.8 }, { fill_mode = "constant", seed = 4 }) end,
    { x }, 1e-9, { training = true })
  layer_check_n("translation, wrap", function() return nn.RandomTranslation(0.5, 0.5, { fill_mode = "wrap", seed = 5 }) end,
    { x }, 1e-9, { training = true })
  layer_check_n("flip (nearest, exact)", function() return nn.RandomFlip("horizontal_and_vertical", { seed = 6 }) end,
    { tensor.normal(40, 3, 4, 3) }, 1e-12, { training = true })
  -- another output size: a bilinear resize is the transform too (down and up), and UpSampling2D's
  layer_check_n("resize down", function() return nn.Resizing(5, 4) end, { x }, 1e-9)
  layer_check_n("resize up", function() return nn.Resizing(13, 17) end, { x }, 1e-9)
  layer_check_n("upsampling bilinear", function() return nn.UpSampling2D({ 2, 3 }, { interpolation = "bilinear" }) end,
    { x }, 1e-9)
end)

T.test("average pooling (avgpool, avgpool_backward): valid, same, overlapping; global average pooling", function()
  local x = tensor.normal(2, 11, 9, 5)
  layer_check_n("avgpool 2", function() return nn.AveragePooling2D(2) end, { x }, 1e-10)
  layer_check_n("avgpool 3 stride 2 same", function() return nn.AveragePooling2D(3, { strides = 2, padding = "same" }) end,
    { x }, 1e-10)
  layer_check_n("avgpool 3 stride 1 same", function() return nn.AveragePooling2D(3, { strides = 1, padding = "same" }) end,
    { x }, 1e-10)
  layer_check_n("global avgpool", function() return nn.GlobalAveragePooling2D() end, { x }, 1e-10)
  layer_check_n("global avgpool keepdims", function() return nn.GlobalAveragePooling2D { keepdims = true } end, { x }, 1e-10)
end)

T.test("concatenate (slice_copy): last axis, axis 1, three inputs; gradients split back", function()
  local a, b, c = tensor.normal(4, 6, 5), tensor.normal(4, 6, 3), tensor.normal(4, 2, 5)
  layer_check_n("concat last axis", function() return nn.Concatenate() end, { a, b }, 1e-10)
  layer_check_n("concat axis 1, 3 inputs", function() return nn.Concatenate { axis = 1 } end, { a, c, a }, 1e-10)
  layer_check_n("add 3 inputs", function() return nn.Add() end, { a, a * 2, a + 1 }, 1e-10)
  layer_check_n("multiply 2 inputs", function() return nn.Multiply() end, { b, b + 1 }, 1e-10)
  layer_check_n("conv1d causal (concat of zeros, im2col)", function() return nn.Conv1D(7, 3, { padding = "causal" }) end,
    { tensor.normal(3, 12, 4) }, 1e-9)
end)

T.test("attention (gemm_batched, masked_softmax, masked_softmax_backward) through MultiHeadAttention", function()
  if not nn.MultiHeadAttention then print("# nn.MultiHeadAttention is not there (skip)"); return end
  local x = tensor.normal(2, 7, 16)
  layer_check_n("mha self-attention", function() return nn.MultiHeadAttention(2, 8) end, { x }, 1e-9)
  layer_check_n("mha causal", function() return nn.MultiHeadAttention(4, 4, { use_causal_mask = true }) end, { x }, 1e-9)
  layer_check_n("mha cross-attention {query, value}", function() return nn.MultiHeadAttention(2, 6, { value_dim = 5 }) end,
    { tensor.normal(2, 5, 16), tensor.normal(2, 9, 12) }, 1e-9)
  layer_check_n("mha long keys", function() return nn.MultiHeadAttention(1, 16) end,
    { tensor.normal(1, 3, 8), tensor.normal(1, 700, 8) }, 1e-9)
end)

T.test("fused attention (flash_attention, flash_attention_backward) on the device against the unfused path on the CPU", function()
  if not nn.MultiHeadAttention then print("# nn.MultiHeadAttention is not there (skip)"); return end
  local fused = { fused = true }
  layer_check_n("fused mha self-attention, head width 16", function() return nn.MultiHeadAttention(2, 16) end,
    { tensor.normal(3, 9, 24) }, 1e-9, fused)
  layer_check_n("fused mha causal, head width 64", function() return nn.MultiHeadAttention(2, 64, { use_causal_mask = true }) end,
    { tensor.normal(2, 70, 32) }, 1e-9, fused)
  layer_check_n("fused mha causal cross-attention T < S, width 32", function()
    return nn.MultiHeadAttention(4, 32, { use_causal_mask = true })
  end, { tensor.normal(2, 5, 16), tensor.normal(2, 67, 12) }, 1e-9, fused)
  layer_check_n("fused mha causal cross-attention T > S", function()
    return nn.MultiHeadAttention(1, 16, { use_causal_mask = true })
  end, { tensor.normal(2, 40, 8), tensor.normal(2, 7, 8) }, 1e-9, fused)
  -- a NaN in an input spreads as it does unfused (and in Keras): to every
  -- output of its example that sees the position, forward and backward
  -- (G.close wants NaN in the same places); the other example stays finite.
  -- Causal, the NaN sits at position 0, which every query sees.
  local function with_nan(b, t, e, pos)
    local x = tensor.normal(b, t, e)
    x:slice(0, 0, 1):slice(1, pos, pos + 1):slice(2, 1, 2):assign(tensor.new({ { { 0 / 0 } } }))
    return x
  end
  for _, c in ipairs({ { "", {}, 4 }, { " causal", { use_causal_mask = true }, 0 } }) do
    local x = with_nan(2, 9, 16, c[3])
    layer_check_n("fused mha" .. c[1] .. ", a NaN in example 1", function() return nn.MultiHeadAttention(2, 16, c[2]) end,
      { x }, 1e-9, fused)
    local was = ldist.config.fused_attention("on")   -- and on the CPU, its own fused kernel
    local y = nn.MultiHeadAttention(2, 16, c[2])(x)
    ldist.config.fused_attention(was)
    local function nans(t)
      local k = 0
      for _, v in ipairs(G.flat(t)) do if v ~= v then k = k + 1 end end
      return k
    end
    local y1, y2 = y:slice(0, 0, 1), y:slice(0, 1, 2)
    T.eq(nans(y1), y1:numel(), "fused mha" .. c[1] .. ": every output of example 1 is NaN")
    T.eq(nans(y2), 0, "fused mha" .. c[1] .. ": example 2 stays finite")
  end
end)

---------------------------------------------------------------- softmax, cross-entropy
T.test("softmax and log_softmax (short and long rows, large values)", function()
  for _, shp in ipairs({ { 50, 10 }, { 7, 3000 }, { 3, 4, 300 }, { 1, 1 } }) do
    local x = tensor.normal(table.unpack(shp)) * 30 + 500
    for _, op in ipairs({ "softmax", "log_softmax" }) do
      local g, c = G.both(function(t) return t[op](t) end, x)
      G.close(g, c, op .. " " .. table.concat(shp, "x"), 1e-10)
      local w = tensor.normal(table.unpack(shp))
      g, c = G.both(function(t, ww) return grad_of(function(v) return v[op](v) end, t, ww) end, x, w)
      G.close(g, c, "d " .. op .. " " .. table.concat(shp, "x"), 1e-6)
    end
  end
end)

T.test("softmax and log_softmax along another axis (TF's axis=)", function()
  -- it took no axis and computed over the last one whatever it was given
  local x = tensor.normal(3, 4, 5) * 4
  for _, axis in ipairs({ 0, 1, -2, 2, -1 }) do
    for _, op in ipairs({ "softmax", "log_softmax" }) do
      local g, c = G.both(function(t) return t[op](t, axis) end, x)
      G.close(g, c, op .. " axis " .. axis, 1e-10)
      local xd = x:to(G.dev)
      local e = (xd - xd:max(axis, true)):exp()
      local want = e / e:sum(axis, true)
      if op == "log_softmax" then want = want:log() end
      G.close(g, want, op .. " axis " .. axis .. " against exp / sum", 1e-10)
      local w = tensor.normal(3, 4, 5)
      g, c = G.both(function(t, ww) return grad_of(function(v) return v[op](v, axis) end, t, ww) end, x, w)
      G.close(g, c, "d " .. op .. " axis " .. axis, 1e-6)
    end
  end
  T.raises(function() return x:softmax(3) end, "axis 3 out of range for a tensor with 3 dimensions")
end)

T.test("sparse softmax cross-entropy, fused: loss and gradient", function()
  local loss_object = losses.SparseCategoricalCrossentropy { from_logits = true }
  for _, nc in ipairs({ { 128, 10 }, { 33, 1000 }, { 1, 2 } }) do
    local logits = tensor.normal(nc[1], nc[2]) * 3
    local labels = (tensor.uniform(nc[1]) * nc[2]):astype("int64")
    local function f(x, y)
      local v = tensor.Variable(x)
      local tape = autograd.GradientTape()
      local loss = tape:record(function() return loss_object(y, v) end)
      return loss, tape:gradient(loss, { v })[1]
    end
    local gl, gg = f(logits:to(dev), labels:to(dev))
    local cl, cg = f(logits, labels)
    G.close(gl, cl, ("loss %dx%d"):format(nc[1], nc[2]), 1e-10)
    G.close(gg, cg, ("dlogits %dx%d"):format(nc[1], nc[2]), 1e-9)
  end
end)

-- A queued kernel's error is reported by the next read of tensor memory: the
-- loss's own item() (the label named), or NaN where the device does not check;
-- either way nothing is left for a later, unrelated read to fail with.
T.test("cross-entropy with a label out of range: the loss's read names the label, or gives NaN", function()
  local loss_object = losses.SparseCategoricalCrossentropy { from_logits = true }
  local ok, l = pcall(loss_object, tensor.new({ 0, 7 }, { dtype = "int64" }):to(dev), tensor.normal(2, 3):to(dev))
  if ok then
    local rok, v = pcall(l.item, l)
    if rok then T.ok(v ~= v, "expected NaN, got " .. tostring(v))
    else T.ok(tostring(v):find("label 7", 1, true), "the read's error names the label: " .. tostring(v)) end
  else
    T.ok(tostring(l):find("label 7", 1, true), "the call's error names the label: " .. tostring(l))
  end
  local after = (tensor.ones(3):to(dev) * 2):sum():item()
  T.eq(after, 6, "the next read, on the device, succeeds")
  T.eq(tensor.ones(2):sum():item(), 2, "and on the host")
end)

---------------------------------------------------------------- convolution and pooling (layers)
-- The same layer on the device and on the CPU: built from the same seed, the
-- device copy inside a one-device MirroredStrategy (which places variables).
local function twin_layers(make, x)
  local s = distribute.MirroredStrategy { devices = { dev } }
  tensor.seed(5)
  local ld = make()
  do
    local _ <close> = s:scope()
    ld(x:to(dev))            -- builds the variables on the device
  end
  tensor.seed(5)
  local lc = make()
  lc(x)
  return ld, lc
end

local function layer_check(name, make, x, tol)
  local ld, lc = twin_layers(make, x)
  local function run(layer, xx)
    local v = tensor.Variable(xx)
    local tape = autograd.GradientTape()
    local y = tape:record(function() return layer(v) end)
    tensor.seed(9)   -- the same upstream gradient for both
    local w = tensor.normal(table.unpack(y.shape))
    if y.device ~= "cpu:0" then w = w:to(y.device) end
    local loss = tape:record(function() return (y * w):sum() end)
    local vars = { v }
    for _, t in ipairs(layer.trainable_variables or {}) do vars[#vars + 1] = t end
    return y, tape:gradient(loss, vars)
  end
  local yd, gd = run(ld, x:to(dev))
  local yc, gc = run(lc, x)
  G.close(yd, yc, name .. " forward", tol)
  -- each gradient against the scale of all of them (mean square per element)
  local ss, n = 0, 0
  for i = 1, #gc do
    if gc[i]:numel() > 0 then ss = ss + (gc[i] * gc[i]):sum():item(); n = n + gc[i]:numel() end
  end
  local floor = n > 0 and ss == ss and ss / n or nil   -- none when a gradient holds NaN
  for i = 1, #gc do G.close(gd[i], gc[i], ("%s gradient %d"):format(name, i), tol * 10, floor) end
end

T.test("conv2d (im2col + gemm, col2im): valid, same, strided; all gradients", function()
  local x = tensor.normal(3, 11, 9, 4)
  layer_check("conv 3x3 valid", function() return nn.Conv2D(8, 3) end, x, 1e-9)
  layer_check("conv 3x3 same stride 2", function() return nn.Conv2D(5, 3, { strides = 2, padding = "same" }) end, x, 1e-9)
  layer_check("conv 4x2 same", function() return nn.Conv2D(6, { 4, 2 }, { padding = "same" }) end, x, 1e-9)
  layer_check("conv 1x1", function() return nn.Conv2D(3, 1) end, x, 1e-9)
end)

T.test("dilated convolutions (over the inputs' phases: pad, reshape, permute, slice around the convolution), bilinear upsampling", function()
  local x = tensor.normal(3, 11, 9, 4)
  layer_check("conv 3x2 same dilated 2x3", function()
    return nn.Conv2D(5, { 3, 2 }, { padding = "same", dilation_rate = { 2, 3 }, activation = "relu" })
  end, x, 1e-9)
  layer_check("conv 3x3 valid dilated 2", function() return nn.Conv2D(4, 3, { dilation_rate = 2 }) end, x, 1e-9)
  layer_check("depthwise 3 same dilated 2, multiplier 2", function()
    return nn.DepthwiseConv2D(3, { padding = "same", dilation_rate = 2, depth_multiplier = 2 })
  end, x, 1e-9)
  layer_check("separable 2 valid dilated 3x2 relu", function()
    return nn.SeparableConv2D(5, 2, { dilation_rate = { 3, 2 }, activation = "relu" })
  end, x, 1e-9)
  layer_check("upsampling2d bilinear 2x3", function() return nn.UpSampling2D({ 2, 3 }, { interpolation = "bilinear" }) end,
    x, 1e-9)
  layer_check("conv1d 3 causal dilated 4", function()
    return nn.Conv1D(6, 3, { padding = "causal", dilation_rate = 4, activation = "tanh" })
  end, tensor.normal(3, 13, 4), 1e-9)
end)

T.test("conv2d then max pooling in a Sequential (one fused op on the CPU, two elsewhere)", function()
  local x = tensor.normal(3, 11, 9, 4)
  layer_check("conv relu + pool 2", function() return nn.Sequential { nn.Conv2D(8, 3, { activation = "relu" }), nn.MaxPool2D(2) } end, x, 1e-9)
  layer_check("conv same + overlapping pool 3 stride 1", function()
    return nn.Sequential { nn.Conv2D(5, 3, { padding = "same" }), nn.MaxPool2D(3, { strides = 1 }) }
  end, x, 1e-9)
end)

T.test("max pooling (and overlapping windows: atomics in backward)", function()
  local x = tensor.normal(2, 10, 12, 3)
  layer_check("maxpool 2", function() return nn.MaxPool2D(2) end, x, 1e-10)
  layer_check("maxpool 3 stride 1", function() return nn.MaxPool2D(3, { strides = 1 }) end, x, 1e-10)
  layer_check("maxpool 3 stride 2", function() return nn.MaxPool2D(3, { strides = 2 }) end, x, 1e-10)
end)

T.test("max pooling with TF's SAME padding (padded with -inf, concat): 2-d and 1-d", function()
  local x = tensor.normal(2, 9, 11, 3)
  layer_check("maxpool 2 same", function() return nn.MaxPool2D(2, { padding = "same" }) end, x, 1e-10)
  layer_check("maxpool 3 stride 2 same", function() return nn.MaxPool2D(3, { strides = 2, padding = "same" }) end, x, 1e-10)
  layer_check("maxpool1d 3 stride 2 same", function() return nn.MaxPooling1D(3, { strides = 2, padding = "same" }) end,
    tensor.normal(3, 10, 4), 1e-10)
end)

T.test("Conv2DTranspose (gemm, col2im and its gradient im2col), DepthwiseConv2D, SeparableConv2D", function()
  local x = tensor.normal(3, 7, 6, 4)
  layer_check("conv2d_transpose 3 stride 2 valid", function() return nn.Conv2DTranspose(5, 3, { strides = 2 }) end, x, 1e-9)
  layer_check("conv2d_transpose 3 stride 2 same, output_padding 1", function()
    return nn.Conv2DTranspose(5, 3, { strides = 2, padding = "same", output_padding = 1 })
  end, x, 1e-9)
  layer_check("conv2d_transpose 2 stride 3 (rows no patch reaches)", function()
    return nn.Conv2DTranspose(3, 2, { strides = 3, activation = "tanh" })
  end, x, 1e-9)
  layer_check("depthwise 3 same stride 2, multiplier 2", function()
    return nn.DepthwiseConv2D(3, { strides = 2, padding = "same", depth_multiplier = 2 })
  end, x, 1e-9)
  layer_check("separable 3 valid relu", function() return nn.SeparableConv2D(6, 3, { activation = "relu" }) end, x, 1e-9)
end)

T.test("dense layer and dropout", function()
  local x = tensor.normal(16, 20)
  layer_check("dense relu", function() return nn.Dense(30, "relu") end, x, 1e-9)
  layer_check("dense tanh", function() return nn.Dense(5, "tanh") end, x, 1e-9)
end)

T.test("dense's fused product (gemm_bias) is matmul, then + bias, then relu, exactly", function()
  -- rows x in -> out: one serial product, a grid of the unpacked kernel's
  -- blocks (n, k >= 256, few rows), BLAS's (many rows); NaN in one row
  for _, sh in ipairs({ {5, 40, 30}, {100, 300, 260}, {600, 300, 260} }) do
    local rows, k, n = sh[1], sh[2], sh[3]
    for _, act in ipairs({ "relu", "linear" }) do
      for _, use_bias in ipairs({ true, false }) do
        local what = ("%dx%dx%d %s%s"):format(rows, k, n, act, use_bias and " + bias" or "")
        local x = tensor.normal(rows, k)
        x[2][3] = 0 / 0
        local s = distribute.MirroredStrategy { devices = { dev } }
        local layer
        do
          local _ <close> = s:scope()
          layer = nn.Dense(n, { activation = act, use_bias = use_bias })
          layer(x:to(dev))   -- builds its variables on the device
        end
        if use_bias then layer.bias:assign(tensor.normal(n):to(dev)) end
        local xd = x:to(dev)
        local y = layer(xd)
        local z = xd:matmul(layer.kernel)
        if use_bias then z = z + layer.bias end
        if act == "relu" then z = z:relu() end
        G.same(y, z, what .. ": fused against the ops")
        local zc = x:matmul(layer.kernel:cpu())
        if use_bias then zc = zc + layer.bias:cpu() end
        if act == "relu" then zc = zc:relu() end
        G.close(y, zc, what .. ": against the CPU", 1e-9)
        for _, v in ipairs(G.flat(y:cpu()[2])) do T.ok(v ~= v, what .. ": the NaN row stays NaN") end
      end
    end
  end
end)

---------------------------------------------------------------- optimizers
T.test("optimizer updates (fused): SGD, momentum, Nesterov, weight decay, Adam, AdamW, amsgrad, RMSprop, centered, Adagrad, Adamax, Nadam, Lion, Adadelta, Ftrl, the clippings, accumulation, EMA", function()
  local makers = {
    { "sgd", function() return optim.SGD { learning_rate = 0.1 } end },
    { "sgd momentum", function() return optim.SGD { learning_rate = 0.1, momentum = 0.9 } end },
    { "sgd nesterov wd", function() return optim.SGD { learning_rate = 0.1, momentum = 0.8, nesterov = true, weight_decay = 0.01 } end },
    { "adam", function() return optim.Adam { learning_rate = 0.01 } end },
    { "adamw", function() return optim.AdamW { learning_rate = 0.01, weight_decay = 0.1 } end },
    { "rmsprop", function() return optim.RMSprop { learning_rate = 0.01 } end },
    { "rmsprop momentum", function() return optim.RMSprop { learning_rate = 0.01, momentum = 0.5 } end },
    { "adam amsgrad", function() return optim.Adam { learning_rate = 0.01, beta_2 = 0.5, amsgrad = true } end },
    { "adamw amsgrad", function() return optim.AdamW { learning_rate = 0.01, beta_2 = 0.5, amsgrad = true } end },
    { "rmsprop centered", function() return optim.RMSprop { learning_rate = 0.01, centered = true } end },
    { "rmsprop centered momentum", function() return optim.RMSprop { learning_rate = 0.01, centered = true, momentum = 0.5 } end },
    { "sgd accumulating 2", function() return optim.SGD { learning_rate = 0.1, momentum = 0.9, gradient_accumulation_steps = 2 } end },
    { "adam ema", function() return optim.Adam { learning_rate = 0.01, use_ema = true, ema_momentum = 0.5, ema_overwrite_frequency = 2 } end },
    { "sgd clipnorm", function() return optim.SGD { learning_rate = 0.1, clipnorm = 1 } end },
    { "adam global_clipnorm", function() return optim.Adam { learning_rate = 0.01, global_clipnorm = 1 } end },
    { "sgd clipvalue", function() return optim.SGD { learning_rate = 0.1, momentum = 0.9, clipvalue = 0.5 } end },
    { "adagrad", function() return optim.Adagrad { learning_rate = 0.1 } end },
    { "adamax wd", function() return optim.Adamax { learning_rate = 0.01, weight_decay = 0.1 } end },
    { "nadam", function() return optim.Nadam { learning_rate = 0.01 } end },
    { "lion", function() return optim.Lion { learning_rate = 0.01 } end },
    { "adadelta wd", function() return optim.Adadelta { learning_rate = 1.0, weight_decay = 0.01 } end },
    { "ftrl", function() return optim.Ftrl { learning_rate = 0.1, l1_regularization_strength = 0.01,
        l2_regularization_strength = 0.01, l2_shrinkage_regularization_strength = 0.01, beta = 0.1 } end },
  }
  local w0, b0 = tensor.normal(300, 70), tensor.normal(70)
  local grads = {}
  for s = 1, 5 do grads[s] = { tensor.normal(300, 70), tensor.normal(70) } end
  for _, m in ipairs(makers) do
    local function run(d)
      local w = tensor.Variable(d and w0:to(d) or w0)
      local b = tensor.Variable(d and b0:to(d) or b0)
      local opt = m[2]()
      for s = 1, 5 do
        local g1, g2 = grads[s][1], grads[s][2]
        if d then g1, g2 = g1:to(d), g2:to(d) end
        opt:apply_gradients({ g1, g2 }, { w, b })
      end
      return w, b
    end
    local wd, bd = run(dev)
    local wc, bc = run(nil)
    G.close(wd, wc, m[1] .. " weights", 1e-10)
    G.close(bd, bc, m[1] .. " bias", 1e-10)
  end
end)

-- opt_update takes up to 48 variables a call (one launch, one split of the
-- pool over all their elements): 100 variables of 1 to 70001 elements, the
-- one optimizer stepping them all at once against one optimizer per
-- variable on the CPU, so that a variable mapped to another's elements, a
-- range left out at a batch's or a part's edge, or a gradient scale
-- (clipnorm's) applied to the wrong variable shows
T.test("optimizer updates over 100 variables at once (batches of 48): each as if stepped alone", function()
  local sizes = { 1, 7, 33, 1000, 70001 }
  local makers = {
    { "adam clipnorm", function() return optim.Adam { learning_rate = 0.01, clipnorm = 2 } end },
    { "sgd nesterov", function() return optim.SGD { learning_rate = 0.1, momentum = 0.8, nesterov = true } end },
    { "rmsprop centered momentum", function() return optim.RMSprop { learning_rate = 0.01, centered = true, momentum = 0.5 } end },
  }
  local w0, grads = {}, {}
  for i = 1, 100 do
    local n = sizes[i % #sizes + 1]
    w0[i] = tensor.normal(n)
    grads[i] = { tensor.normal(n) * (i % 3 + 1), tensor.normal(n) }
  end
  for _, m in ipairs(makers) do
    local vars, opt = {}, m[2]()
    for i = 1, 100 do vars[i] = tensor.Variable(w0[i]:to(dev)) end
    for s = 1, 2 do
      local gs = {}
      for i = 1, 100 do gs[i] = grads[i][s]:to(dev) end
      opt:apply_gradients(gs, vars)
    end
    for i = 1, 100 do
      local alone, o = tensor.Variable(w0[i]), m[2]()
      for s = 1, 2 do o:apply_gradients({ grads[i][s] }, { alone }) end
      G.close(vars[i], alone, ("%s: variable %d of %d elements"):format(m[1], i, w0[i]:numel()), 1e-10)
      T.ok((vars[i]:cpu() - w0[i]):abs():max():item() > 0, m[1] .. ": variable " .. i .. " moved")
    end
  end
end)

-- The loss scale's check of a step's gradients is nonfinite_flags, 48
-- gradients a call: an inf or a NaN in any one of 100 gradients (the first,
-- the last of a batch, the first of the next, the last; a NaN alone in a
-- long one, past the first block a GPU gives it) skips the step and halves
-- the scale; finite gradients are applied, unscaled
T.test("loss scaling over 100 gradients at once (nonfinite_flags, batches of 48): any inf or NaN skips the step", function()
  local mp = mixed_precision
  local sizes = { 1, 7, 33, 1000, 70001 }
  local w0 = {}
  for i = 1, 100 do w0[i] = tensor.normal(sizes[i % #sizes + 1]) end
  for _, bad in ipairs { 0, 1, 48, 49, 100, 74 } do
    local vars, gs = {}, {}
    for i = 1, 100 do
      vars[i] = tensor.Variable(w0[i]:to(dev))
      local g = tensor.normal(w0[i]:numel()) * 1024
      if i == bad then
        local t = g:totable()
        t[#t] = (bad == 74) and 0 / 0 or math.huge   -- the last value of the variable
        g = tensor.new(t)
      end
      gs[i] = g:to(dev)
    end
    local opt = mp.LossScaleOptimizer(optim.SGD(0.5), { initial_scale = 1024 })
    opt:apply_gradients(gs, vars)
    local what = bad == 0 and "all finite" or ("a non-finite value in gradient %d of %d values"):format(bad, w0[bad]:numel())
    T.eq(opt.dynamic_scale, bad == 0 and 1024 or 512, what .. ": the scale")
    for _, i in ipairs { 1, 48, 49, 74, 100 } do
      local moved = (vars[i]:cpu() - w0[i]):abs():max():item()
      if bad == 0 then
        -- w - 0.5 * g / 1024
        G.close(vars[i], w0[i] - gs[i]:cpu() * (0.5 / 1024), what .. ": variable " .. i, 1e-12)
      else
        T.eq(moved, 0, what .. ": variable " .. i .. " unchanged (step skipped)")
      end
    end
  end
end)

---------------------------------------------------------------- errors a user meets
T.test("mixing devices is an error naming both", function()
  local a, b = tensor.ones(3):to(dev), tensor.ones(3)
  T.raises(function() return a + b end, dev)
end)

T.test("out of memory: an error with the size asked and the memory free; the device still works", function()
  if not dev:match("^cuda") then print("# not a GPU (skip)"); return end
  local err = T.raises(function() return tensor.zeros(1e12, 64, { device = dev }) end, "out of memory")
  T.ok(err:find("bytes requested", 1, true) and err:find("free", 1, true), err)
  T.eq(tensor.ones(10, { device = dev }):sum():item(), 10)
end)

T.test("device tensors print and come back as tables", function()
  local x = tensor.new({ { 1, 2 }, { 3, 4 } }):to(dev)
  T.ok(tostring(x):find(dev, 1, true), tostring(x))
  T.eq(x:totable()[2][1], 3)
  T.eq(x:sum():item(), 10)
end)

---------------------------------------------------------------- float16, bfloat16
-- Ops on half tensors compute in float32 and round the result once: on the
-- device and against the float32 op they differ from the CPU's result by
-- about the half dtype's rounding (normalised error below 1e-5 for
-- float16, 2^-8 relative: 1e-4 for bfloat16).
local HALF_TOL = { float16 = 1e-5, bfloat16 = 1e-4 }
T.test("float16/bfloat16: elementwise, reductions, softmax and conversions against float32", function()
  local a, b = U(0.5, 2, 33, 65), U(0.5, 2, 65)
  for dt, tol in pairs(HALF_TOL) do
    local ah, bh = a:astype(dt), b:astype(dt)
    local af, bf = ah:astype("float32"), bh:astype("float32")   -- the same values, in float32
    local cases = {
      { "add", function(x, y) return x + y end }, { "mul", function(x, y) return x * y end },
      { "div", function(x, y) return x / y end }, { "maximum", function(x, y) return x:maximum(y) end },
      { "scalar", function(x) return x * 0.5 + 1 end }, { "exp", function(x) return x:exp() end },
      { "tanh", function(x) return x:tanh() end }, { "relu", function(x) return (x - 1):relu() end },
      { "sum", function(x) return x:sum(1) end }, { "mean", function(x) return x:mean(0) end },
      { "max", function(x) return x:max(1) end }, { "min", function(x) return x:min(0) end },
      { "softmax", function(x) return x:softmax() end },
      { "log_softmax", function(x) return x:log_softmax() end },
    }
    for _, cs in ipairs(cases) do
      local g, c = G.both(cs[2], ah, bh)
      T.eq(c.dtype, dt, cs[1] .. " " .. dt .. ": result dtype")
      -- a GPU's float32 exp/tanh may differ in the last bit, and so round to a neighbouring half
      G.close(g, c, cs[1] .. " " .. dt .. " on the device", tol)
      local e = G.nmse(c:astype("float32"), cs[2](af, bf))
      T.ok(e <= tol, ("%s %s against float32: normalised error %.3g above %g"):format(cs[1], dt, e, tol))
    end
  end
end)

-- Elementwise ops on two half tensors of one dtype run the half kernels
-- (float32 arithmetic, rounded once): one kernel, no casts around it, and
-- their gradients are half ops too (TF computes a bfloat16 op's gradient in
-- bfloat16). Gradients against the float32 path on the same values, under HALF_TOL.
T.test("float16/bfloat16 elementwise ops are single half kernels; their gradients against float32", function()
  local counted = dev:match("^cpu:[1-9]")
  local a, b = U(0.5, 2, 9, 33), U(0.5, 2, 33)
  local cases = {
    { "add", function(x, y) return x + y end, "binary" }, { "sub", function(x, y) return x - y end, "binary" },
    { "mul", function(x, y) return x * y end, "binary" }, { "div", function(x, y) return x / y end, "binary" },
    { "maximum", function(x, y) return x:maximum(y) end, "binary" },
    { "exp", function(x) return x:exp() end, "unary" }, { "tanh", function(x) return x:tanh() end, "unary" },
    { "sigmoid", function(x) return x:sigmoid() end, "unary" }, { "gelu", function(x) return (x - 1):gelu() end, "unary" },
    { "relu", function(x) return (x - 1):relu() end, "unary" }, { "sqrt", function(x) return x:sqrt() end, "unary" },
  }
  for dt, tol in pairs(HALF_TOL) do
    local ah, bh = a:astype(dt), b:astype(dt)
    local af, bf = ah:astype("float32"), bh:astype("float32")
    for _, cs in ipairs(cases) do
      local what = cs[1] .. " " .. dt
      if counted and cs[1] ~= "gelu" and cs[1] ~= "relu" then
        local x, y = ah:to(dev), bh:to(dev)
        local before = ldist._distribute.kernel_calls()
        local r = cs[2](x, y)
        local after = ldist._distribute.kernel_calls()
        T.eq(r.dtype, dt, what .. ": dtype")
        T.eq(after[cs[3]] - before[cs[3]], 1, what .. ": one " .. cs[3] .. " kernel")
        T.eq(after.copy_strided - before.copy_strided, 0, what .. ": no cast kernel")
      end
      local w = tensor.normal(9, 33)
      local function grads(x, y, ww, cast)
        local vx, vy = tensor.Variable(x), tensor.Variable(y)
        local tape = autograd.GradientTape()
        local loss = tape:record(function()
          local r = cast and cs[2](vx:astype(cast), vy:astype(cast)) or cs[2](vx, vy)
          return (r:astype("float32") * ww):sum()
        end)
        local gr = tape:gradient(loss, { vx, vy })
        return gr[1], gr[2]
      end
      local gx, gy = grads(af:to(dev), bf:to(dev), w:to(dev), dt)
      local cx, cy = grads(af, bf, w, dt)
      local fx, fy = grads(af, bf, w, nil)
      G.close(gx, cx, what .. " d/dx on the device", tol)
      local e = G.nmse(cx, fx)
      T.ok(e <= tol, ("%s d/dx against float32: normalised error %.3g above %g"):format(what, e, tol))
      if cs[3] == "binary" then
        G.close(gy, cy, what .. " d/dy on the device", tol)
        e = G.nmse(cy, fy)
        T.ok(e <= tol, ("%s d/dy (broadcast) against float32: normalised error %.3g above %g"):format(what, e, tol))
      end
    end
  end
end)

T.test("float16/bfloat16 matmul (gemm_half): float32 sums, against the float32 product", function()
  for _, cs in ipairs({ { 64, 48, 32 }, { 129, 67, 255 }, { 3, 1, 5 }, { 33, 130, 17 } }) do
    local m, k, n = cs[1], cs[2], cs[3]
    local a, b = tensor.normal(m, k), tensor.normal(k, n)
    for dt, tol in pairs(HALF_TOL) do
      local ah, bh = a:astype(dt), b:astype(dt)
      local ref = ah:astype("float32"):matmul(bh:astype("float32"))
      local what = ("%s %dx%dx%d"):format(dt, m, k, n)
      for _, v in ipairs({ { "", function(x, y) return x:matmul(y) end, ah, bh },
                           { " (A transposed)", function(x, y) return x.T:matmul(y) end, ah.T:contiguous(), bh },
                           { " (B transposed)", function(x, y) return x:matmul(y.T) end, ah, bh.T:contiguous() } }) do
        local g, c = G.both(v[2], v[3], v[4])
        T.eq(c.dtype, dt, what .. v[1] .. ": result dtype")
        G.close(g:astype("float32"), c:astype("float32"), what .. v[1] .. " on the device", tol)
        local e = G.nmse(c:astype("float32"), ref)
        T.ok(e <= tol, ("%s%s against float32: normalised error %.3g above %g"):format(what, v[1], e, tol))
      end
    end
  end
  -- a long sum (k 16384) into few outputs, where cuBLAS may split k: still
  -- float32 sums rounded once, so the device's result is within one bfloat16
  -- step (2^-7 relative) of the CPU's everywhere, not a sum of rounded parts
  do
    local ah, bh = tensor.normal(64, 16384):astype("bfloat16"), tensor.normal(16384, 64):astype("bfloat16")
    local g, c = G.both(function(x, y) return x:matmul(y) end, ah, bh)
    local gf, cf = g:cpu():astype("float32"), c:astype("float32")
    -- (plus 1e-4 of the rms: two float32 orders of 16384 terms differ by
    -- about 1e-7 of it, which is more than a step of a sum that cancels)
    local floor = 1e-4 * math.sqrt((cf * cf):mean():item())
    local over = ((gf - cf):abs() - cf:abs() * 2 ^ -7 - floor):relu():gt(0):astype("float32"):sum():item()
    T.eq(over, 0, "bfloat16 64x16384x64: elements more than one bfloat16 step from the CPU's")
  end
  if dev:match("^cpu:[1-9]") then   -- counted on a logical device: the product writes the half result itself
    local ah, bh = tensor.normal(20, 30):astype("bfloat16"):to(dev), tensor.normal(30, 10):astype("bfloat16"):to(dev)
    local before = ldist._distribute.kernel_calls()
    local c = ah:matmul(bh)
    local after = ldist._distribute.kernel_calls()
    T.eq(c.dtype, "bfloat16", "half product dtype")
    T.eq(after.gemm_half - before.gemm_half, 1, "one gemm_half")
    T.eq(after.copy_strided - before.copy_strided, 0, "no cast kernel after the half product")
  end
  T.raises(function() return tensor.normal(2, 3):astype("bfloat16"):matmul(tensor.normal(3, 2)) end,
           "matmul needs two float32, float16 or bfloat16 tensors of one dtype, got bfloat16 and float32")
end)

-- The gradients of a half product are half products too (g rounded to the
-- operands' dtype, gemm_half, float32 sums), as under torch.autocast: float32
-- variables cast to the half dtype inside the tape, as Keras's mixed policy
-- does. Against the float32 path on the same (rounded) values, the
-- normalised error stays under HALF_TOL (bfloat16 1e-4: about 1e-2 relative
-- per element, rms).
T.test("float16/bfloat16 matmul gradients are half products (gemm_half), against float32", function()
  local counted = dev:match("^cpu:[1-9]")
  for _, cs in ipairs({ { 37, 50, 23 }, { 3, 1, 5 }, { 2 * 9, 40, 33, 3 } }) do
    local batched = cs[4] ~= nil
    local a = batched and tensor.normal(2, 9, cs[2]) or tensor.normal(cs[1], cs[2])
    local b, w = tensor.normal(cs[2], cs[3]), batched and tensor.normal(2, 9, cs[3]) or tensor.normal(cs[1], cs[3])
    for dt, tol in pairs(HALF_TOL) do
      a, b = a:astype(dt):astype("float32"), b:astype(dt):astype("float32")   -- exact in dt
      local function grads(x, y, ww, cast)
        local va, vb = tensor.Variable(x), tensor.Variable(y)
        local tape = autograd.GradientTape()
        local loss = tape:record(function()
          local p = cast and va:astype(cast):matmul(vb:astype(cast)) or va:matmul(vb)
          T.eq(p.dtype, cast or "float32", "product dtype")
          return (p:astype("float32") * ww):sum()
        end)
        local gr = tape:gradient(loss, { va, vb })
        return gr[1], gr[2]
      end
      local what = ("%s %dx%dx%d%s"):format(dt, cs[1], cs[2], cs[3], batched and " (batched a)" or "")
      local before = counted and ldist._distribute.kernel_calls()
      local ga, gb = grads(a:to(dev), b:to(dev), w:to(dev), dt)
      if counted then
        local after = ldist._distribute.kernel_calls()
        T.eq(after.gemm_half - before.gemm_half, 3, what .. ": gemm_half calls (forward and both gradients)")
        T.eq(after.gemm - before.gemm, 0, what .. ": no float32 product")
      end
      local ca, cb = grads(a, b, w, dt)
      T.eq(ca.dtype, "float32", what .. ": a float32 variable's gradient")
      G.close(ga, ca, what .. " d/da on the device", tol)
      G.close(gb, cb, what .. " d/db on the device", tol)
      local fa, fb = grads(a, b, w, nil)
      local ea, eb = G.nmse(ca, fa), G.nmse(cb, fb)
      T.ok(ea <= tol and eb <= tol, ("%s against float32: normalised errors %.3g, %.3g above %g"):format(what, ea, eb, tol))
      T.ok(ea > 0 or eb > 0, what .. ": the half path differs from float32 (it rounds)")
    end
  end
end)

-- Half attention and bmm: every product a half product (gemm_batched_half),
-- the scores and softmax in float32, as torch.autocast. Forward and the
-- gradients of q, k, v against the float32 path on the same values, under
-- HALF_TOL (measured on the CPU: bfloat16 about 8e-6, float16 1.5e-7, with
-- P, g and dS each rounded once).
-- f(...) of float32 variables made from xs (each cast to `cast` first when
-- given): the result (as float32) and the gradients of sum(f(...) * ww),
-- asserting that the result comes in the cast dtype
local function half_run(f, xs, ww, cast)
  local vs = {}
  for i, x in ipairs(xs) do vs[i] = tensor.Variable(x) end
  local tape = autograd.GradientTape()
  local y
  local loss = tape:record(function()
    local ins = {}
    for i, v in ipairs(vs) do ins[i] = cast and v:astype(cast) or v end
    y = f(table.unpack(ins))
    T.eq(y.dtype, cast or "float32", "result dtype")
    return (y:astype("float32") * ww):sum()
  end)
  local gr = tape:gradient(loss, vs)
  return y:astype("float32"), gr
end

T.test("float16/bfloat16 attention and bmm (gemm_batched_half): forward and gradients against float32", function()
  local counted = dev:match("^cpu:[1-9]")
  local cases = {
    { "attention", function(q, k, v) return tensor.attention(q, k, v) end, { { 6, 7, 16 }, { 6, 9, 16 }, { 6, 9, 5 } }, { 6, 7, 5 }, 6 },
    { "attention causal", function(q, k, v) return tensor.attention(q, k, v, { causal = true }) end,
      { { 4, 33, 8 }, { 4, 33, 8 }, { 4, 33, 8 } }, { 4, 33, 8 }, 6 },
    { "bmm", function(a, b) return tensor.bmm(a, b) end, { { 3, 2, 17, 9 }, { 3, 2, 9, 11 } }, { 3, 2, 17, 11 }, 3 },
    { "bmm a^T b^T", function(a, b) return tensor.bmm(a, b, { transpose_a = true, transpose_b = true }) end,
      { { 5, 9, 17 }, { 5, 11, 9 } }, { 5, 17, 11 }, 3 },
  }
  for _, cs in ipairs(cases) do
    for dt, tol in pairs(HALF_TOL) do
      local xs, dxs = {}, {}
      for i, sh in ipairs(cs[3]) do
        xs[i] = tensor.normal(table.unpack(sh)):astype(dt):astype("float32")   -- exact in dt
        dxs[i] = xs[i]:to(dev)
      end
      local w = tensor.normal(table.unpack(cs[4]))
      local what = cs[1] .. " " .. dt
      local before = counted and ldist._distribute.kernel_calls()
      local yd, gd = half_run(cs[2], dxs, w:to(dev), dt)
      if counted then
        local after = ldist._distribute.kernel_calls()
        T.eq(after.gemm_batched_half - before.gemm_batched_half, cs[5], what .. ": gemm_batched_half calls")
        T.eq(after.gemm_batched - before.gemm_batched, 0, what .. ": no float32 batched product")
      end
      local yc, gc = half_run(cs[2], xs, w, dt)
      local yf, gf = half_run(cs[2], xs, w, nil)
      G.close(yd, yc, what .. " on the device", tol)
      local e = G.nmse(yc, yf)
      T.ok(e <= tol, ("%s against float32: normalised error %.3g above %g"):format(what, e, tol))
      for i = 1, #xs do
        G.close(gd[i], gc[i], ("%s gradient %d on the device"):format(what, i), tol)
        e = G.nmse(gc[i], gf[i])
        T.ok(e <= tol, ("%s gradient %d against float32: normalised error %.3g above %g"):format(what, i, e, tol))
      end
    end
  end
  T.raises(function() return tensor.bmm(tensor.normal(2, 3, 4):astype("bfloat16"), tensor.normal(2, 4, 3)) end,
           "bmm needs float32, float16 or bfloat16 tensors of one dtype, got bfloat16 (a) and float32 (b)")
end)

T.test("float16/bfloat16 fused attention (flash_attention in the half dtype) against the unfused half path and float32", function()
  local counted = dev:match("^cpu:[1-9]")
  -- q, k, v exact in dt, from float32 variables; the loss weights the output
  for _, cs in ipairs({ { "width 16", { { 3, 9, 16 }, { 3, 11, 16 }, { 3, 11, 16 } }, false },
                        { "causal width 64", { { 2, 70, 64 }, { 2, 70, 64 }, { 2, 70, 64 } }, true },
                        { "causal T > S, width 32", { { 2, 40, 32 }, { 2, 7, 32 }, { 2, 7, 32 } }, true } }) do
    for dt, tol in pairs(HALF_TOL) do
      local what = ("fused attention %s %s"):format(cs[1], dt)
      local xs = {}
      for i, sh in ipairs(cs[2]) do xs[i] = tensor.normal(table.unpack(sh)):astype(dt):astype("float32") end
      local w = tensor.normal(cs[2][1][1], cs[2][1][2], cs[2][3][3])
      local function attn(q, k, v) return tensor.attention(q, k, v, { causal = cs[3] }) end
      local function grads(fused, d, half)
        local on = {}
        for i, x in ipairs(xs) do on[i] = d and x:to(d) or x end
        local was = ldist.config.fused_attention(fused and "on" or "off")
        local ok, y, g = pcall(half_run, attn, on, d and w:to(d) or w, half and dt or nil)
        ldist.config.fused_attention(was)
        assert(ok, y)
        return y, g
      end
      local before = counted and ldist._distribute.kernel_calls()
      local yd, gd = grads(true, dev, true)
      if counted then
        local after = ldist._distribute.kernel_calls()
        T.eq(after.flash_attention - before.flash_attention, 1, what .. ": one flash_attention kernel")
        T.eq(after.flash_attention_backward - before.flash_attention_backward, 1, what .. ": one backward kernel")
        T.eq(after.gemm_batched_half - before.gemm_batched_half, 0, what .. ": no unfused product")
      end
      local yc, gc = grads(false, nil, true)    -- the unfused half path on the CPU
      local yf, gf = grads(false, nil, false)   -- float32
      G.close(yd, yc, what .. " against the unfused half path", tol)
      local e = G.nmse(yd, yf)
      T.ok(e <= tol, ("%s against float32: normalised error %.3g above %g"):format(what, e, tol))
      for i = 1, 3 do
        G.close(gd[i], gc[i], ("%s gradient %d against the unfused half path"):format(what, i), tol)
        e = G.nmse(gd[i], gf[i])
        T.ok(e <= tol, ("%s gradient %d against float32: normalised error %.3g above %g"):format(what, i, e, tol))
      end
    end
  end
end)

-- LayerNormalization under a half policy: one layer_norm kernel that reads
-- the half input and writes the half output (float32 arithmetic, rounded
-- once), no casts around it; a float32 input stays float32 (Keras keeps it).
-- On the CPU its results are the float32 kernel's on the widened values,
-- rounded once, bit for bit: y, dx (from the half gradient of y), dgamma and
-- dbeta; on another device the same within HALF_TOL.
-- layer built on device d (its variables there) by calling it on x under a
-- one-device strategy; returns it
local function built_on(layer, d, x)
  local s = distribute.MirroredStrategy { devices = { d } }
  local _ <close> = s:scope()
  layer(x:to(d))
  return layer
end

-- two host tensors, bit for bit (NaN never equals)
local function exact(a, b, what)
  T.eq(table.concat(a.shape, "x"), table.concat(b.shape, "x"), what .. ": shape")
  local x, y = G.flat(a), G.flat(b)
  for i = 1, #y do
    if x[i] ~= y[i] then error(("%s: element %d is %.9g, not %.9g"):format(what, i - 1, x[i], y[i]), 2) end
  end
end

T.test("float16/bfloat16 layer normalization: one kernel in the half dtype, the float32 results rounded once", function()
  local counted = dev:match("^cpu:[1-9]")
  local policies = { float16 = "mixed_float16", bfloat16 = "mixed_bfloat16" }
  for dt, tol in pairs(HALF_TOL) do
    for _, shape in ipairs { { 37, 300 }, { 3, 11, 16 } } do
      for _, xdt in ipairs { dt, "float32" } do
        local what = ("layer_norm %s, %s input %s"):format(dt, xdt, table.concat(shape, "x"))
        tensor.seed(11)
        local x = (tensor.normal(table.unpack(shape)) * 2 + 1):astype(xdt)
        local c = shape[#shape]
        local gamma, beta = tensor.normal(c) * 0.5 + 1, tensor.normal(c) * 0.3
        local w = tensor.normal(table.unpack(shape))
        -- y, dx, dgamma, dbeta of a layer of `policy` on x, on device d
        local function run(policy, xin, d)
          local layer = built_on(nn.LayerNormalization { dtype = policy }, d, xin)
          layer.gamma:assign(gamma:to(d)); layer.beta:assign(beta:to(d))
          local v = tensor.Variable(xin:to(d))   -- float32; a half input is its recorded cast
          local tape = autograd.GradientTape()
          local y
          local loss = tape:record(function()
            y = layer(xin.dtype == "float32" and v or v:astype(xin.dtype))
            return (y:astype("float32") * w:to(d)):sum()
          end)
          local g = tape:gradient(loss, { v, layer.gamma, layer.beta })
          return y, g[1], g[2], g[3]
        end
        if counted then
          local xd = x:to(dev)
          local layer = built_on(nn.LayerNormalization { dtype = policies[dt] }, dev, xd)
          local before = ldist._distribute.kernel_calls()
          local y = layer(xd)
          local after = ldist._distribute.kernel_calls()
          T.eq(y.dtype, dt, what .. ": dtype")
          T.eq(after.layer_norm - before.layer_norm, 1, what .. ": one layer_norm kernel")
          T.eq(after.copy_strided - before.copy_strided, 0, what .. ": no cast kernel")
        end
        local yd, dxd, dgd, dbd = run(policies[dt], x, dev)
        local yc, dxc, dgc, dbc = run(policies[dt], x, "cpu:0")
        -- dx reaches the float32 variable through the cast to x's dtype: rounded
        -- to it by the kernel, then widened
        T.eq(yc.dtype, dt, what .. ": y's dtype"); T.eq(dxc.dtype, "float32", what .. ": dx's dtype")
        -- the reference: the float32 layer on the widened x, with y's gradient rounded to dt
        local ref = nn.LayerNormalization()
        ref(x:astype("float32"))
        ref.gamma:assign(gamma); ref.beta:assign(beta)
        local v = tensor.Variable(x:astype("float32"))
        local tape = autograd.GradientTape()
        local yr
        local loss = tape:record(function() yr = ref(v); return (yr * w:astype(dt):astype("float32")):sum() end)
        local g = tape:gradient(loss, { v, ref.gamma, ref.beta })
        exact(yc:astype("float32"), yr:astype(dt):astype("float32"), what .. ": y against float32 rounded once")
        exact(dxc:astype("float32"), g[1]:astype(xdt):astype("float32"), what .. ": dx against float32 rounded once")
        exact(dgc, g[2], what .. ": dgamma against float32"); exact(dbc, g[3], what .. ": dbeta against float32")
        G.close(yd, yc, what .. ": y on the device", tol)
        G.close(dxd, dxc, what .. ": dx on the device", tol)
        G.close(dgd, dgc, what .. ": dgamma on the device", tol); G.close(dbd, dbc, what .. ": dbeta on the device", tol)
      end
    end
  end
end)

T.test("float16/bfloat16 batch normalization: the kernels read and write the half dtype, the float32 results rounded once", function()
  local counted = dev:match("^cpu:[1-9]")
  local policies = { float16 = "mixed_float16", bfloat16 = "mixed_bfloat16" }
  for dt, tol in pairs(HALF_TOL) do
    -- 300 channels: the one-row path; 2x7x5x16: the four-row blocks and a remainder
    for _, shape in ipairs { { 37, 300 }, { 2, 7, 5, 16 } } do
      for _, xdt in ipairs { dt, "float32" } do
        for _, training in ipairs { true, false } do
          local what = ("batch_norm %s, %s input %s, training %s"):format(dt, xdt, table.concat(shape, "x"),
            tostring(training))
          tensor.seed(12)
          local x = (tensor.normal(table.unpack(shape)) * 2 + 1):astype(xdt)
          local c = shape[#shape]
          local gamma, beta = tensor.normal(c) * 0.5 + 1, tensor.normal(c) * 0.3
          local mm, mv = tensor.normal(c) * 0.2, U(0.5, 2, c)
          local w = tensor.normal(table.unpack(shape))
          local function setup(layer, d)
            layer.gamma:assign(gamma:to(d)); layer.beta:assign(beta:to(d))
            layer.moving_mean:assign(mm:to(d)); layer.moving_variance:assign(mv:to(d))
          end
          -- y, dx, dgamma, dbeta and the moving statistics of a layer of `policy` on x, on device d
          local function run(policy, xin, d)
            local layer = built_on(nn.BatchNormalization { dtype = policy, momentum = 0.9 }, d, xin)
            setup(layer, d)
            local v = tensor.Variable(xin:to(d))   -- float32; a half input is its recorded cast
            local tape = autograd.GradientTape()
            local y
            local loss = tape:record(function()
              y = layer(xin.dtype == "float32" and v or v:astype(xin.dtype), { training = training })
              return (y:astype("float32") * w:to(d)):sum()
            end)
            local g = tape:gradient(loss, { v, layer.gamma, layer.beta })
            return y, g[1], g[2], g[3], layer.moving_mean + 0, layer.moving_variance + 0
          end
          if counted then
            local xd = x:to(dev)
            local layer = built_on(nn.BatchNormalization { dtype = policies[dt] }, dev, xd)
            local before = ldist._distribute.kernel_calls()
            local y = layer(xd, { training = training })
            local after = ldist._distribute.kernel_calls()
            T.eq(y.dtype, dt, what .. ": dtype")
            T.eq(after.bn_apply - before.bn_apply, 1, what .. ": one bn_apply kernel")
            T.eq(after.copy_strided - before.copy_strided, xdt == dt and 0 or 1,
              what .. ": no cast kernel but a float32 input's")
          end
          local yd, dxd, dgd, dbd, mmd, mvd = run(policies[dt], x, dev)
          local yc, dxc, dgc, dbc, mmc, mvc = run(policies[dt], x, "cpu:0")
          T.eq(yc.dtype, dt, what .. ": y's dtype"); T.eq(dxc.dtype, "float32", what .. ": dx's dtype")
          -- the reference: the float32 layer on x rounded to dt (Keras casts a
          -- float32 input to the compute dtype), y and dx rounded to dt once
          local ref = nn.BatchNormalization { momentum = 0.9 }
          local xr = x:astype(dt):astype("float32")
          ref(xr)
          setup(ref, "cpu:0")
          local v = tensor.Variable(xr)
          local tape = autograd.GradientTape()
          local yr
          local loss = tape:record(function()
            yr = ref(v, { training = training })
            return (yr * w:astype(dt):astype("float32")):sum()
          end)
          local g = tape:gradient(loss, { v, ref.gamma, ref.beta })
          exact(yc:astype("float32"), yr:astype(dt):astype("float32"), what .. ": y against float32 rounded once")
          exact(dxc, g[1]:astype(dt):astype("float32"), what .. ": dx against float32 rounded once")
          exact(dgc, g[2], what .. ": dgamma against float32"); exact(dbc, g[3], what .. ": dbeta against float32")
          exact(mmc, ref.moving_mean:cpu(), what .. ": moving_mean against float32")
          exact(mvc, ref.moving_variance:cpu(), what .. ": moving_variance against float32")
          G.close(yd, yc, what .. ": y on the device", tol)
          G.close(dxd, dxc, what .. ": dx on the device", tol)
          G.close(dgd, dgc, what .. ": dgamma on the device", tol); G.close(dbd, dbc, what .. ": dbeta on the device", tol)
          G.close(mmd, mmc, what .. ": moving_mean on the device", tol)
          G.close(mvd, mvc, what .. ": moving_variance on the device", tol)
        end
      end
    end
  end
end)

T.test("float16/bfloat16 Conv2D (a GPU's lowering: im2col of the half input, col2im rounded once) against the CPU", function()
  local policies = { float16 = "mixed_float16", bfloat16 = "mixed_bfloat16" }
  for dt, tol in pairs(HALF_TOL) do
    for _, opt in ipairs { { strides = 1, padding = "same" }, { strides = 2, padding = "valid" } } do
      local what = ("conv2d %s, strides %d, %s"):format(dt, opt.strides, opt.padding)
      tensor.seed(13)
      local x = tensor.normal(3, 11, 9, 4)
      local kernel, bias = tensor.normal(3, 3, 4, 6) * 0.3, tensor.normal(6) * 0.2
      local function run(d)
        local layer = built_on(nn.Conv2D(6, 3, { strides = opt.strides, padding = opt.padding, activation = "relu",
          dtype = policies[dt] }), d, x)
        layer.kernel:assign(kernel:to(d)); layer.bias:assign(bias:to(d))
        local v = tensor.Variable(x:to(d))
        local tape = autograd.GradientTape()
        local y
        local loss = tape:record(function()
          y = layer(v:astype(dt))
          return (y:astype("float32") * y:astype("float32")):sum()
        end)
        local g = tape:gradient(loss, { v, layer.kernel, layer.bias })
        return y, g[1], g[2], g[3]
      end
      local yd, dxd, dkd, dbd = run(dev)
      local yc, dxc, dkc, dbc = run("cpu:0")
      T.eq(yd.dtype, dt, what .. ": y's dtype"); T.eq(dxd.dtype, "float32", what .. ": dx's dtype")
      G.close(yd, yc, what .. ": y", tol)
      G.close(dxd, dxc, what .. ": dx", tol)
      G.close(dkd, dkc, what .. ": dkernel", tol); G.close(dbd, dbc, what .. ": dbias", tol)
    end
  end
end)

-- The gradient through a half op against the float32 op's rounded once: the
-- gradient of sum(f(v as dt) * w) for a float32 variable v on the device,
-- bit for bit the host's gradient of sum(ref(v) * w rounded to dt), rounded
-- to dt (xf: v's float32 values, w: f's output's shape)
local function same_half_gradient(f, ref, xf, w, dt, what)
  local v = tensor.Variable(xf:to(dev))
  local tape = autograd.GradientTape()
  local loss = tape:record(function() return (f(v:astype(dt)):astype("float32") * w:to(dev)):sum() end)
  local g = tape:gradient(loss, v)
  local vr = tensor.Variable(xf)
  local tr = autograd.GradientTape()
  local lr = tr:record(function() return (ref(vr) * w:astype(dt):astype("float32")):sum() end)
  G.same(g, tr:gradient(lr, vr):astype(dt):astype("float32"), what .. ": gradient")
end

T.test("float16/bfloat16 sums read the half tensor as it is and write its dtype: the widened tensor's float32 sums rounded once, no cast kernel", function()
  local counted = dev:match("^cpu:[1-9]")
  for dt, _ in pairs(HALF_TOL) do
    -- rows, columns (a bias gradient), long rows, everything, a mean
    for _, case in ipairs { { { 37, 300 }, 0 }, { { 2100, 70 }, 0 }, { { 3, 70000 }, 1 }, { { 64, 33 }, nil },
                            { { 5, 17, 9 }, 1, "mean" } } do
      local shape, axis, fn = case[1], case[2], case[3] or "sum"
      local what = ("%s %s over %s of %s"):format(dt, fn, tostring(axis), table.concat(shape, "x"))
      tensor.seed(17)
      local x = (tensor.normal(table.unpack(shape)) * 3):astype(dt)
      local xd = x:to(dev)
      local before = counted and ldist._distribute.kernel_calls()
      local s = axis and xd[fn](xd, axis) or xd[fn](xd)
      if counted then
        local after = ldist._distribute.kernel_calls()
        -- a sum's kernel writes the dtype itself (its float32 sums rounded
        -- once); a mean divides the float32 sums first, then rounds in a copy
        local copies = fn == "mean" and 1 or 0
        T.eq(after.copy_strided - before.copy_strided, copies, what .. ": copies to " .. dt)
        T.eq(after.reduce - before.reduce, 1, what .. ": one reduction")
      end
      T.eq(s.dtype, dt, what .. ": dtype")
      local xf = x:astype("float32")
      local ref = (axis and xf[fn](xf, axis) or xf[fn](xf)):astype(dt)
      G.same(s, ref, what .. ": the float32 op on the widened values, rounded once")
      -- the gradient: in x's dtype, the float32 gradient rounded once
      local op = function(t) return axis and t[fn](t, axis) or t[fn](t) end
      same_half_gradient(op, op, xf, tensor.normal(table.unpack(ref.shape)), dt, what)
    end
  end
end)

T.test("float16/bfloat16 max pooling reads and writes the half dtype: its own values, the gradient's float32 sums rounded once", function()
  local counted = dev:match("^cpu:[1-9]")
  for dt, _ in pairs(HALF_TOL) do
    for _, pk in ipairs { { 2, 2 }, { 3, 1 } } do   -- disjoint windows; overlapping ones (gradients add up)
      local what = ("max_pool2d %s, pool %d stride %d"):format(dt, pk[1], pk[2])
      tensor.seed(19)
      local x = (tensor.normal(3, 9, 8, 5) * 4):astype(dt)
      local layer = nn.MaxPool2D(pk[1], { strides = pk[2], dtype = dt == "float16" and "mixed_float16" or "mixed_bfloat16" })
      local ref = nn.MaxPool2D(pk[1], { strides = pk[2] })
      local xd = x:to(dev)
      local before = counted and ldist._distribute.kernel_calls()
      local y = layer(xd)
      if counted then
        local after = ldist._distribute.kernel_calls()
        T.eq(after.maxpool - before.maxpool, 1, what .. ": one maxpool kernel")
        T.eq(after.copy_strided - before.copy_strided, 0, what .. ": no cast")
      end
      T.eq(y.dtype, dt, what .. ": dtype")
      local xf = x:astype("float32")
      G.same(y, ref(xf):astype(dt), what .. ": the float32 pooling's values")
      same_half_gradient(layer, ref, xf, tensor.normal(table.unpack(y.shape)), dt, what)
    end
  end
end)

T.test("float16/bfloat16 inputs to float32 layers are cast to float32, as Keras's float32 policy does", function()
  local x = tensor.normal(4, 3)
  for _, dt in ipairs({ "float16", "bfloat16" }) do
    local layer = nn.Dense(2)
    local y = layer(x:astype(dt))
    T.eq(y.dtype, "float32", "Dense on " .. dt)
    T.eq(G.nmse(y, layer(x:astype(dt):astype("float32"))), 0, "Dense on " .. dt)
  end
end)

-- Under a half policy Dense's bias and relu are one bias_relu kernel on the
-- half product (the float32 bias rounded inside it), and the bias's gradient
-- one reduction rounded once and written in float32: checked on the device,
-- bit for bit, against the half ops Keras composes (the product in the half
-- dtype, the bias cast to it, a half add, a half relu) and their gradients,
-- on 2-d and 3-d inputs (a bias over two axes), with relu and without.
T.test("float16/bfloat16 Dense bias and relu (bias_relu): the bits of the half ops they fuse, outputs and gradients", function()
  local counted = dev:match("^cpu:[1-9]")
  local s = distribute.MirroredStrategy { devices = { dev } }
  for dt, _ in pairs(HALF_TOL) do
    -- more rows than a GPU grid's 65535 and longer rows than its 64 x 256
    -- threads: both of the kernel's loops go round
    for _, case in ipairs { { { 37, 70 }, 45 }, { { 3, 11, 70 }, 45 }, { { 70000, 3 }, 2 }, { { 2, 5 }, 16500 } } do
      local shape, units = case[1], case[2]
      for _, act in ipairs { "relu", "linear" } do
        local what = ("Dense(%d) %s on %s, %s"):format(units, dt, table.concat(shape, "x"), act)
        tensor.seed(23)
        local layer
        do
          local _ <close> = s:scope()
          layer = nn.Dense(units, { activation = act, dtype = dt == "float16" and "mixed_float16" or "mixed_bfloat16" })
          layer(tensor.zeros(table.unpack(shape)):to(dev))   -- built on the device
        end
        layer.bias:assign((tensor.normal(units) * 3):to(dev))   -- not Keras's zeros: a bias to round
        local xf = tensor.normal(table.unpack(shape)) * 2
        local ws = { table.unpack(shape) }
        ws[#ws] = units
        local w = tensor.normal(table.unpack(ws))
        local function run(f)
          local v = tensor.Variable(xf:to(dev))
          local tape = autograd.GradientTape()
          local y
          local loss = tape:record(function() y = f(v); return (y:astype("float32") * w:to(dev)):sum() end)
          return y, tape:gradient(loss, { v, layer.kernel, layer.bias })
        end
        if counted then   -- the forward alone: the product, then one kernel
          local xd = xf:to(dev)
          local before = ldist._distribute.kernel_calls()
          layer(xd)
          local after = ldist._distribute.kernel_calls()
          T.eq(after.bias_relu - before.bias_relu, 1, what .. ": one bias_relu kernel")
          T.eq(after.binary - before.binary, 0, what .. ": no half add")
          T.eq(after.unary - before.unary, 0, what .. ": no half relu")
        end
        local y, g = run(layer)
        local yr, gr = run(function(v)
          local t = v:astype(dt):matmul(layer.kernel:astype(dt)) + layer.bias:astype(dt)
          return act == "relu" and t:relu() or t
        end)
        T.eq(y.dtype, dt, what .. ": dtype")
        G.same(y, yr, what .. ": output")
        for i, name in ipairs { "input", "kernel", "bias" } do
          T.eq(g[i].dtype, "float32", what .. ": " .. name .. " gradient dtype")
          G.same(g[i], gr[i], what .. ": " .. name .. " gradient")
        end
      end
    end
  end
end)

---------------------------------------------------------------- reads in flight
-- model:fit reads each replica's loss through read_async: on a GPU a copy
-- into a pinned slot behind the queued kernels, waited for alone (the
-- optimizer's kernels are queued meanwhile); on sim:0 the engine's same path;
-- on cpu:1 its queue's fence.
T.test("read_async: values read in flight are those the queue had when read, in any number; errors still reach the read", function()
  local C = ldist._distribute
  local x = tensor.normal(1000):to(dev)
  local reads, sums = {}, {}
  for i = 1, 40 do   -- more than a GPU's 32 pinned slots: the others read at once
    sums[i] = (x * i):sum()
    reads[i] = C.read_async(sums[i])
  end
  for i = 40, 1, -1 do T.eq(reads[i]:item(), sums[i]:item(), "read " .. i .. " (waited for out of order)") end
  -- a kernel queued after the read does not change what it reads
  local v = tensor.Variable(tensor.new({ 1.5 }):to(dev))
  local r = C.read_async(v:sum())
  v:assign(tensor.new({ 2.5 }):to(dev))
  T.eq(r:item(), 1.5, "the value when read")
  T.eq(v:sum():item(), 2.5, "the variable after")
  for _, dt in ipairs { "int64", "int32", "float16", "bfloat16" } do
    T.eq(C.read_async((tensor.ones(5, { dtype = dt }) * 3):to(dev):sum()):item(), 15, dt)
  end
  -- reads dropped unread, then collected: their copies finish before the slots go back
  for i = 1, 40 do C.read_async(sums[i]) end
  collectgarbage(); collectgarbage()
  T.eq(C.read_async((x * 0 + 2):sum()):item(), 2000, "slots free again after dropped reads")
  -- a queued kernel's error reaches the read of its result, not a later one
  local loss_object = losses.SparseCategoricalCrossentropy { from_logits = true }
  local ok, l = pcall(loss_object, tensor.new({ 0, 7 }, { dtype = "int64" }):to(dev), tensor.normal(2, 3):to(dev))
  if ok then
    local rok, e = pcall(function() return C.read_async(l):item() end)
    T.ok(not rok and tostring(e):find("label 7", 1, true) or (rok and e ~= e), "the read names the label, or is NaN: " .. tostring(e))
  end
  T.eq(C.read_async((tensor.ones(3):to(dev) * 2):sum()):item(), 6, "the next read succeeds")
end)

---------------------------------------------------------------- kernel profile
-- LDIST_KERNEL_PROFILE=1: a child ldist runs products and a softmax on the
-- device under test and prints, at exit, a table of kernel slots by total time.
T.test("kernel profile: LDIST_KERNEL_PROFILE=1 prints each slot's calls, time and share at exit", function()
  local dir = T.tmpdir()
  local script = dir .. "/prof.lua"
  local f = assert(io.open(script, "w"))
  f:write(([[
local dev = %q
if dev:match("^cpu:[1-9]") then ldist.config.cpu_devices(tonumber(dev:match("%%d+")) + 1) end
local a = tensor.normal(40, 30):to(dev)
local y = a:matmul(a.T):matmul(a)
for _ = 1, 4 do y = y:softmax() end
print("sum", y:sum():item())
]]):format(dev))
  f:close()
  local bin = arg and arg[-1] or "./ldist"
  local function run(env)
    local p = io.popen(env .. " " .. bin .. " " .. script .. " 2>&1")
    local out = p:read("a")
    p:close()
    return out
  end
  local out = run("LDIST_KERNEL_PROFILE=1")
  T.ok(out:find("sum", 1, true), "the script ran: " .. out)
  local kind = dev:match("^cpu") and "CPU devices" or "GPUs"
  T.ok(out:find("kernel profile, " .. kind, 1, true), "a profile of the " .. kind .. " in:\n" .. out)
  local slots = ldist._distribute.kernel_calls()
  local rows, share, last = {}, 0, math.huge
  local table_part = out:sub((out:find("kernel profile, " .. kind, 1, true)))
  for name, calls, ms, pct in table_part:gmatch("\n  (%S+)%s+(%d+)%s+([%d.]+)%s+([%d.]+)%%") do
    if rows[name] then break end   -- the next table (another kind of device)
    T.ok(slots[name] ~= nil, name .. " is a kernel slot")
    T.ok(tonumber(ms) <= last, "sorted by total time: " .. name)
    last = tonumber(ms)
    rows[name] = tonumber(calls)
    share = share + tonumber(pct)
  end
  T.ok(rows.gemm and rows.gemm >= 2, "gemm's two calls counted:\n" .. table_part)
  T.ok(rows.softmax and rows.softmax >= 4, "softmax's four calls counted:\n" .. table_part)
  T.near(share, 100, 0.01, "the shares add up to 100%")
  T.ok(not run("LDIST_KERNEL_PROFILE=0"):find("kernel profile", 1, true), "no profile when off")
end)

---------------------------------------------------------------- coverage
-- Last: every kernel slot of engine/ld_kernels.h was queued by some case above
-- (counted by the executor's proxies, so on a logical CPU device only).
T.test("kernel coverage: every kernel of engine/ld_kernels.h was called", function()
  if not dev:match("^cpu:[1-9]") then print("# kernel calls are counted on a logical CPU device (skip on " .. dev .. ")"); return end
  local calls, never, n = ldist._distribute.kernel_calls(), {}, 0
  for name, c in pairs(calls) do
    n = n + 1
    if c == 0 then never[#never + 1] = name end
  end
  table.sort(never)
  T.ok(n > 30, "kernel_calls lists " .. n .. " kernels")
  T.ok(#never == 0, #never .. " kernel(s) never called on " .. dev .. " (add a case for each): " .. table.concat(never, ", "))
end)

T.done()
