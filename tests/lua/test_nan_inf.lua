-- test_nan_inf.lua - NaN and +-inf through every op and loss that help()
-- lists (issue 27): NaN in, NaN out, and each result as IEEE 754 arithmetic
-- and TensorFlow give it, on cpu:0, on a logical CPU device (cpu:1) and on
-- cuda:0 where one answers.
--
-- The references are TensorFlow's (Eigen kernels), recorded in
-- tests/fixtures/nan_inf.lua by scripts/fixtures/make_nan_inf_fixtures.py.
-- The op lists are read from help(tensor), help(tensor.Tensor) and
-- help(losses) as a user sees them: a new op or loss without a case here
-- fails "every listed op has a NaN/inf case" until one is added.
-- Where ldist departs from TF on purpose the case says so (argmax/argmin
-- point at the first NaN, as NumPy's and PyTorch's do, where TF's skip it).
local T = dofile("tests/lua/testlib.lua")
local F = dofile("tests/fixtures/nan_inf.lua")

ldist.config.cpu_devices(2)
local nan, inf = 0 / 0, math.huge
local V = { nan, inf, -inf, 0, 1, -2 }

---------------------------------------------------------------- helpers
local function flat(t)
  t = t:cpu()
  if t.ndim == 0 then return { t:item() } end
  return t:reshape(t:numel()):totable()
end

local function show(v)
  if v ~= v then return "nan" end
  return tostring(v)
end

-- got (a tensor or a list) matches want: NaN where want is NaN, equal
-- infinities, finite values within float32 rounding
local function same(got, want, what, tol)
  tol = tol or 2e-6
  local g = tensor.is_tensor(got) and flat(got) or got
  T.eq(#g, #want, what .. ": element count")
  for i = 1, #want do
    local a, b = g[i], want[i]
    local ok
    if b ~= b then ok = a ~= a
    elseif b == inf or b == -inf then ok = a == b
    else ok = a == a and math.abs(a - b) <= tol * (1 + math.abs(b)) end
    if not ok then
      error(("%s: element %d is %s, TF/IEEE give %s"):format(what, i, show(a), show(b)), 2)
    end
  end
end

-- the names help(x) lists (its "  name  signature" lines)
local function listed(x)
  local names, print0 = {}, print
  print = function(s)
    for l in tostring(s):gmatch("[^\n]+") do
      local m = l:match("^  ([%a_][%w_]*)")
      if m then names[#names + 1] = m end
    end
  end
  local ok, err = pcall(help, x)
  print = print0
  assert(ok, err)
  return names
end

local devices = { "cpu:0", "cpu:1" }
for _, d in ipairs(tensor.devices()) do
  if d == "cuda:0" then devices[#devices + 1] = d end
end

---------------------------------------------------------------- the cases
-- CASES[name](dev): the method or function `name` driven with NaN and +-inf
-- on device dev, its results checked.
local CASES = {}

-- elementwise unary ops: V through each
-- (the engine's list: a new op fails here until its TF reference joins the fixture)
for _, op in ipairs(tensor.unary_ops) do
  CASES[op] = function(dev)
    assert(F.unary[op], op .. ": no TensorFlow reference in the fixture")
    same(tensor.new(V, { device = dev })[op](tensor.new(V, { device = dev })), F.unary[op], op)
  end
end

-- elementwise binary ops: every pair of V
local A, B = {}, {}
for i = 1, 6 do for j = 1, 6 do A[#A + 1] = V[i]; B[#B + 1] = V[j] end end
for _, op in ipairs(tensor.binary_ops) do
  CASES[op] = function(dev)
    assert(F.binary[op], op .. ": no TensorFlow reference in the fixture")
    local a, b = tensor.new(A, { device = dev }), tensor.new(B, { device = dev })
    same(a[op](a, b), F.binary[op], op)
    -- a number operand, broadcast (t:maximum(0) is a relu): the column b = 0 of the table
    local col = {}
    for i = 1, 6 do col[i] = F.binary[op][6 * (i - 1) + 4] end
    local v = tensor.new(V, { device = dev })
    same(v[op](v, 0), col, op .. " with the number 0")
    -- the broadcast path of large operands (a parallel split on the CPU)
    local big = tensor.full({ 300000 }, nan, { device = dev })
    local r = flat(big[op](big, tensor.new({ 1 }, { device = dev })))
    local want = F.binary[op][6 * 0 + 5]   -- (nan, 1)
    T.ok((r[1] ~= r[1]) == (want ~= want) and (r[300000] ~= r[300000]) == (want ~= want),
      op .. " over 300000 elements keeps the NaN rule")
  end
end

-- clipping, as losses and users write it: maximum then minimum, t:clip and
-- tensor.clip_by_value (tf.clip_by_value), and the latter's gradients
CASES.clip = function(dev)
  local v = tensor.new(V, { device = dev })
  same(v:maximum(0):minimum(1), F.clip, "maximum(0):minimum(1)")
  same(v:clip(0, 1), F.clip, "t:clip(0, 1)")
  same(tensor.clip_by_value(v, tensor.new(0, { device = dev }), 1), F.clip, "tensor.clip_by_value(t, tensor 0, 1)")
  local x = tensor.Variable(tensor.new(V, { device = dev }))
  local lo, hi = tensor.Variable(tensor.new(-2, { device = dev })), tensor.Variable(tensor.new(1, { device = dev }))
  local w = tensor.arange(1, 7):float():to(dev)
  local tape = autograd.GradientTape()
  local y
  local s = tape:record(function() y = tensor.clip_by_value(x, lo, hi); return (y * w):sum() end)
  local g = tape:gradient(s, { x, lo, hi })
  same(y, F.clip_grad.y, "clip_by_value(V, -2, 1)")
  same(g[1], F.clip_grad.x, "clip_by_value: the gradient of x (ties at a bound to x, a NaN's to the lower bound)")
  same(g[2], F.clip_grad.lo, "clip_by_value: the lower bound's gradient")
  same(g[3], F.clip_grad.hi, "clip_by_value: the upper bound's gradient")
end
CASES.clip_by_value = CASES.clip

-- where: V as the condition (NaN and inf are true, 0 false), V as a, V
-- reversed as b: the values and each operand's gradient as TF's; the
-- coordinates of the true elements; NaN in the branch not taken stays out
-- of the gradient (a select, not a mask product)
CASES.where = function(dev)
  local c = tensor.new(V, { device = dev })
  local rev = {}
  for i = 1, 6 do rev[i] = V[7 - i] end
  local a, b = tensor.Variable(tensor.new(V, { device = dev })), tensor.Variable(tensor.new(rev, { device = dev }))
  local w = tensor.arange(1, 7):float():to(dev)
  local tape = autograd.GradientTape()
  local y
  local s = tape:record(function() y = tensor.where(c, a, b); return (y * w):sum() end)
  local g = tape:gradient(s, { a, b })
  same(tensor.where(c, 1, 0), F.where.cond_true, "where(V, 1, 0): the truth of each value")
  same(y, F.where.y, "where(V, V, reversed V)")
  same(g[1], F.where.a, "where: a's gradient")
  same(g[2], F.where.b, "where: b's gradient")
  same(tensor.where(c:reshape(2, 3)), F.where.indices, "where(cond): the true elements' coordinates")
  -- a scalar b broadcast: its gradient sums the places it was taken
  local z = tensor.Variable(tensor.new(nan, { device = dev }))
  tape = autograd.GradientTape()
  s = tape:record(function() return (tensor.where(c, a, z) * w):sum() end)
  g = tape:gradient(s, { a, z })
  same(g[1], F.where.a, "where with a NaN scalar b: a's gradient")
  same(g[2], { 4 }, "where with a NaN scalar b: b's gradient is the sum where it was taken")
end

-- one_hot: ids in and out of range (rows of off_value), NaN and inf as the values
CASES.one_hot = function(dev)
  local ids = tensor.new(F.one_hot.ids, { dtype = "int64", device = dev })
  same(tensor.one_hot(ids, 3), F.one_hot.y, "one_hot(ids, 3)")
  same(tensor.one_hot(ids, 3, { on_value = nan, off_value = inf }), F.one_hot.on_off, "one_hot with on_value=nan")
  same(tensor.one_hot(ids, 3, { axis = 0 }), F.one_hot.axis0, "one_hot(ids, 3, {axis=0})")
end

-- reductions along the rows of F.rows, and over everything
local function rows(dev) return tensor.new(F.rows, { device = dev }) end
for _, op in ipairs({ "sum", "mean", "max", "min" }) do
  CASES[op] = function(dev)
    same(rows(dev)[op](rows(dev), 1), F.reduce[op], op .. " along axis 1")
    local all = rows(dev)[op](rows(dev))
    T.ok(all:item() ~= all:item(), op .. " over a tensor holding NaN is NaN")
    same(tensor.new({ inf, 1 }, { device = dev })[op](tensor.new({ inf, 1 }, { device = dev })),
      { op == "min" and 1 or inf }, op .. " of {inf, 1}")
  end
end
-- TF's reduce_variance, reduce_std, reduce_logsumexp (inf rows give inf or
-- NaN as TF's stable form does) and reduce_any/reduce_all (NaN is true)
for _, op in ipairs({ "var", "std", "logsumexp", "any", "all" }) do
  CASES[op] = function(dev)
    same(rows(dev)[op](rows(dev), 1), F.reduce[op], op .. " along axis 1")
    same(rows(dev)[op](rows(dev), { axis = 1, keepdims = true }), F.reduce[op], op .. " along axis 1, keepdims")
    T.eq(rows(dev)[op](rows(dev), 1, true).shape[2], 1, op .. ": keepdims keeps the axis")
  end
end
-- TF's reduce_prod (inf times a finite value stays inf, its sign the
-- product's), and the running sums and products along the rows for each
-- (exclusive, reverse): a NaN or inf carried on from where it sits
CASES.prod = function(dev)
  same(rows(dev):prod(1), F.reduce.prod, "prod along axis 1")
  same(rows(dev):prod({ axis = 1, keepdims = true }), F.reduce.prod, "prod along axis 1, keepdims")
  local all = rows(dev):prod()
  T.ok(all:item() ~= all:item(), "prod over a tensor holding NaN is NaN")
end
for _, op in ipairs({ "cumsum", "cumprod" }) do
  CASES[op] = function(dev)
    for e = 0, 1 do
      for r = 0, 1 do
        local key = ("%s_excl%d_rev%d"):format(op, e, r)
        local y = rows(dev)[op](rows(dev), 1, { exclusive = e == 1, reverse = r == 1 })
        T.eq(table.concat(y.shape, ","), "6,3", key .. ": shape")
        same(y, F.scan_rows[key], key .. " along axis 1")
      end
    end
  end
end
-- top_k, sort, argsort: NaN above +inf (NumPy's rule), where TF's order is
-- not total (its sort of {3, 1, nan, 3, -inf, 2} gives -inf, 1, 3, nan, 2, 3)
CASES.top_k = function(dev)
  local v, i = tensor.top_k(tensor.new({ 3, 1, nan, 3, -inf, 2 }, { device = dev }), 3)
  same(v, { nan, 3, 3 }, "top_k: NaN first, then the 3s by index")
  same(i, { 2, 0, 3 }, "top_k's indices")
end
CASES.sort = function(dev)
  same(tensor.new({ 3, 1, nan, 3, -inf, 2 }, { device = dev }):sort(), { -inf, 1, 2, 3, 3, nan }, "sort: NaN last")
end
CASES.argsort = function(dev)
  same(tensor.new({ 3, 1, nan, 3, -inf, 2 }, { device = dev }):argsort { direction = "DESCENDING" }, { 2, 0, 3, 5, 1, 4 },
    "argsort descending: NaN first")
end
for _, op in ipairs({ "argmax", "argmin" }) do
  CASES[op] = function(dev)
    -- NumPy's rule (the first NaN wins), not TF's (NaN skipped): argmax
    -- points at what max returns, and a NaN row is not mistaken for a class
    same(rows(dev)[op](rows(dev), 1), F.reduce[op], op .. " along axis 1 (NumPy's rule)")
    local tf = F.reduce[op .. "_tf"]
    T.ok(tf[1] ~= F.reduce[op][1], "the fixture records where TF's " .. op .. " differs")
  end
end

CASES.softmax = function(dev) same(rows(dev):softmax(), F.softmax, "softmax") end
CASES.log_softmax = function(dev) same(rows(dev):log_softmax(), F.log_softmax, "log_softmax") end

CASES.matmul = function(dev)
  local a = tensor.new(F.matmul_a, { device = dev }):reshape(6, 2)
  local b = tensor.new(F.matmul_b, { device = dev }):reshape(2, 6)
  same(a:matmul(b), F.matmul, "matmul")
  -- a few rows against a large B (the CPU's small-gemm path), and a large
  -- product (BLAS): one NaN spoils its row only, one inf gives inf or NaN
  for _, m in ipairs({ 4, 300 }) do
    local x = tensor.ones(m, 300):contiguous()
    x[1]:assign(tensor.full({ 300 }, 1):contiguous())
    local xs = x:totable()
    xs[1][1] = nan
    xs[2][2] = inf
    local y = tensor.new(xs, { device = dev }):matmul(tensor.ones(300, 300, { device = dev }))
    local r = y:cpu():totable()
    T.ok(r[1][1] ~= r[1][1] and r[1][300] ~= r[1][300], m .. "x300 @ 300x300: the NaN row is NaN")
    T.eq(r[2][7], inf, m .. "x300 @ 300x300: the inf row is inf")
    T.eq(r[3][5], 300, m .. "x300 @ 300x300: other rows untouched")
  end
end

-- bmm: each matrix of the batch is TF's matmul of the fixture
CASES.bmm = function(dev)
  local a = tensor.new(F.matmul_a, { device = dev }):reshape(1, 6, 2)
  local b = tensor.new(F.matmul_b, { device = dev }):reshape(1, 2, 6)
  local want = {}
  for r = 1, 2 do for i = 1, #F.matmul do want[(r - 1) * #F.matmul + i] = F.matmul[i] end end
  same(tensor.bmm(tensor.concat({ a, a }, 0), tensor.concat({ b, b }, 0)), want, "bmm")
  same(tensor.bmm(a:transpose(1, 2), b:transpose(1, 2), { transpose_a = true, transpose_b = true }), F.matmul,
       "bmm of transposed views")
end

-- attention: a NaN in a query spoils its output row only; an inf in a value
-- gives inf in that column of every row (every weight is positive)
CASES.attention = function(dev)
  local q = tensor.normal(1, 4, 3):totable()
  q[1][2][1] = nan
  local k, v = tensor.normal(1, 5, 3), tensor.normal(1, 5, 2):totable()
  v[1][3][2] = inf
  local o = tensor.attention(tensor.new(q, { device = dev }), k:to(dev), tensor.new(v, { device = dev })):cpu():totable()
  T.ok(o[1][2][1] ~= o[1][2][1] and o[1][2][2] ~= o[1][2][2], "attention: the query row with a NaN is NaN")
  for _, r in ipairs({ 1, 3, 4 }) do
    T.ok(o[1][r][1] == o[1][r][1] and math.abs(o[1][r][1]) < inf, "attention: row " .. r .. " finite where v is")
    T.eq(o[1][r][2], inf, "attention: row " .. r .. " is inf where a value is")
  end
end

-- values moved, viewed or copied keep NaN and inf bit for bit
local function keeps(name, fn)
  CASES[name] = function(dev)
    same(fn(tensor.new(V, { device = dev }), dev), V, name)
  end
end
keeps("clone", function(t) return t:clone() end)
keeps("stop_gradient", function(t) return tensor.stop_gradient(t) end)
keeps("contiguous", function(t) return t:reshape(2, 3):transpose(0, 1):contiguous():transpose(0, 1):contiguous() end)
keeps("cpu", function(t) return t:cpu() end)
keeps("to", function(t, dev) return t:to("cpu:0"):to(dev) end)
keeps("float", function(t) return t:float() end)
keeps("reshape", function(t) return t:reshape(3, 2) end)
keeps("transpose", function(t) return t:reshape(2, 3):transpose():transpose() end)
keeps("permute", function(t) return t:reshape(1, 2, 3):permute(0, 1, 2) end)
keeps("slice", function(t) return t:slice(0, 0, 6) end)
keeps("squeeze", function(t) return t:reshape(1, 6, 1):squeeze() end)
keeps("expand_dims", function(t) return t:expand_dims(0):expand_dims(-1):reshape(6) end)
keeps("gather", function(t) return t:reshape(2, 3):gather({ 0, 1, 2 }, 1) end)
keeps("index_select", function(t) return t:reshape(3, 2):index_select({ 0, 1, 2 }) end)
keeps("totable", function(t) return t:totable() end)
keeps("tolist", function(t) return t:tolist() end)
keeps("item", function(t)
  local r = {}
  for i = 1, 6 do r[i] = t:slice(0, i - 1, i):reshape():item() end
  return r
end)
keeps("assign", function(t, dev)
  local v = tensor.Variable(tensor.zeros(6, { device = dev }))
  v:assign(t)
  return v
end)
CASES.assign_add = function(dev)
  local v = tensor.Variable(tensor.new(A, { device = dev }))
  v:assign_add(tensor.new(B, { device = dev }))
  same(v, F.binary.add, "assign_add")
end
CASES.assign_sub = function(dev)
  local v = tensor.Variable(tensor.new(A, { device = dev }))
  v:assign_sub(tensor.new(B, { device = dev }))
  same(v, F.binary.sub, "assign_sub")
end
-- to an integer dtype, NaN and inf are errors naming the value (the values rule in help)
for _, name in ipairs({ "astype", "long" }) do
  CASES[name] = function(dev)
    for i = 1, 3 do
      local t = tensor.new({ 1, V[i] }, { device = dev })
      T.raises(function() if name == "long" then t:long() else t:astype("int32") end end,
        "cannot convert " .. show(V[i]))
    end
    same(tensor.new(V, { device = dev }):astype("float32"), V, name .. " to float32")
  end
end
-- only a shape comes out
CASES.numel = function(dev) T.eq(tensor.new(V, { device = dev }):numel(), 6) end
CASES.size = function(dev) T.eq(tensor.new(V, { device = dev }):size()[1], 6) end

-- the tensor module's functions that take values
keeps("new", function(_, dev) return tensor.new(V, { device = dev }) end)
keeps("from", function(_, dev) return tensor.from(V, { device = dev }) end)
keeps("Variable", function(t) return tensor.Variable(t) end)
keeps("concat", function(t) return tensor.concat({ t:slice(0, 0, 2), t:slice(0, 2, 6) }, 0) end)
keeps("stack", function(t) return tensor.stack({ t }, 0) end)
CASES.full = function(dev)
  for i = 1, 3 do same(tensor.full({ 2 }, V[i], { device = dev }), { V[i], V[i] }, "full " .. show(V[i])) end
end
-- random values from a NaN parameter are NaN (tf.random.normal(mean=nan) is)
CASES.normal = function() same(tensor.normal(2, { mean = nan }), { nan, nan }, "normal{mean=nan}") end
CASES.randn = CASES.normal
CASES.uniform = function() same(tensor.uniform(2, { min = nan }), { nan, nan }, "uniform{min=nan}") end
CASES.rand = CASES.uniform
-- an infinite range is an error, not a hang or a huge allocation
CASES.arange = function()
  T.raises(function() tensor.arange(0, inf) end, "too many elements")
  T.raises(function() tensor.arange(0, nan) end, "arange")
end

-- names that take no number a NaN could be: classes, shapes, generators' state, devices
-- TF's array ops composed of the engine's (tensor_ops.lua): values move, or go through
-- the engine's products and reductions; TF 2.21's results for the same inputs
CASES.einsum = function(dev)
  local a = tensor.new({ { 1, nan }, { 2, 3 } }, { device = dev })
  local b = tensor.new({ { 1, 0 }, { inf, 1 } }, { device = dev })
  same(tensor.einsum("ij,jk->ik", a, b), { nan, nan, inf, 3 }, "einsum ij,jk->ik (nan * inf, 3 * inf)")
  same(tensor.einsum("ij->j", tensor.new({ { 1, nan }, { inf, 2 } }, { device = dev })), { inf, nan }, "einsum ij->j")
end
CASES.tensordot = function(dev)
  local a = tensor.new({ { 1, nan }, { 2, 3 } }, { device = dev })
  local b = tensor.new({ { 1, 0 }, { inf, 1 } }, { device = dev })
  same(tensor.tensordot(a, b, 1), { nan, nan, inf, 3 }, "tensordot(a, b, 1)")
end
CASES.norm = function(dev)
  local v = tensor.new({ { 3, -inf }, { nan, 4 }, { 0, -0.0 } }, { device = dev })
  same(tensor.norm(v), { nan }, "norm of all (a NaN among them)")
  same(tensor.norm(v, { axis = 1 }), { inf, nan, 0 }, "norm(axis=1)")
  same(tensor.norm(v, { ord = 1, axis = 1 }), { inf, nan, 0 }, "norm(ord=1, axis=1)")
  same(tensor.norm(v, { ord = math.huge, axis = 1 }), { inf, nan, 0 }, "norm(ord=inf, axis=1)")
end
CASES.band_part = function(dev)
  same(tensor.band_part(tensor.new({ { nan, inf }, { -inf, nan } }, { device = dev }), 0, 0), { nan, 0, 0, nan },
    "band_part(x, 0, 0): outside the band 0, not NaN * 0")
end
CASES.pad = function(dev)
  same(tensor.pad(tensor.new({ { nan, inf, 1 } }, { device = dev }), { { 0, 0 }, { 1, 1 } }, { mode = "REFLECT" }),
    { inf, nan, inf, 1, inf }, "pad REFLECT")
  same(tensor.pad(tensor.new({ nan, inf }, { device = dev }), { { 1, 1 } }, { constant_values = nan }), { nan, nan, inf, nan },
    "pad with constant_values = nan")
end
CASES.broadcast_to = function(dev)
  local y = tensor.broadcast_to(tensor.new({ nan, -inf, -0.0 }, { device = dev }), { 2, 3 })
  same(y, { nan, -inf, 0, nan, -inf, 0 }, "broadcast_to")
  T.eq(1 / flat(y)[3], -inf, "broadcast_to keeps -0")
end
-- the ops that only move values: each NaN and infinity lands where TF puts it
local moved = tensor.new { { nan, inf, 1 }, { -inf, 2, nan } }
CASES.tile = function(dev) same(tensor.tile(moved:to(dev), { 1, 2 }), { nan, inf, 1, nan, inf, 1, -inf, 2, nan, -inf, 2, nan }, "tile") end
CASES["repeat"] = function(dev) same(tensor["repeat"](moved:to(dev), 2, 0), { nan, inf, 1, nan, inf, 1, -inf, 2, nan, -inf, 2, nan }, "repeat") end
CASES.repeat_ = CASES["repeat"]
CASES.reverse = function(dev) same(tensor.reverse(moved:to(dev), { 1 }), { 1, inf, nan, nan, 2, -inf }, "reverse") end
CASES.split = function(dev)
  local p = tensor.split(moved:to(dev), { 2, 1 }, 1)
  same(p[1], { nan, inf, -inf, 2 }, "split's first part")
  same(p[2], { 1, nan }, "split's second part")
end
CASES.unstack = function(dev)
  local p = tensor.unstack(moved:to(dev), 1)
  same(p[1], { nan, -inf }, "unstack's first")
  same(p[3], { 1, nan }, "unstack's last")
end
CASES.meshgrid = function(dev)
  local g = tensor.meshgrid(tensor.new({ nan, 1 }, { device = dev }), tensor.new({ inf, -inf, 2 }, { device = dev }))
  same(g[1], { nan, 1, nan, 1, nan, 1 }, "meshgrid's first (xy)")
  same(g[2], { inf, inf, -inf, -inf, 2, 2 }, "meshgrid's second (xy)")
end

local NO_VALUES = {
  Tensor = "the class (its methods are listed by help(tensor.Tensor))",
  zeros = "a shape only", ones = "a shape only", seed = "an integer seed",
  get_rng_state = "no argument", set_rng_state = "a state string", is_tensor = "any value, returns a boolean",
  devices = "no argument", device_note = "no argument", memory = "no argument",
  binary_ops = "a list of names, not a function", unary_ops = "a list of names, not a function",
  eye = "a shape only", linspace = "numbers (start, stop, count), not a tensor",
}

---------------------------------------------------------------- losses
-- help(losses)'s names -> their fixture cases (probabilities and logits)
local LOSS_FIXTURES = {
  SparseCategoricalCrossentropy = { "SparseCategoricalCrossentropy_probs", "SparseCategoricalCrossentropy_logits" },
  CategoricalCrossentropy = { "CategoricalCrossentropy_probs", "CategoricalCrossentropy_logits" },
  BinaryCrossentropy = { "BinaryCrossentropy_probs", "BinaryCrossentropy_logits" },
  MeanSquaredError = { "MeanSquaredError" },
  MSE = { "MeanSquaredError" },
}
for _, n in ipairs { "MeanAbsoluteError", "MeanAbsolutePercentageError", "MeanSquaredLogarithmicError", "Huber", "LogCosh",
                     "KLDivergence", "Poisson", "CosineSimilarity", "Hinge", "SquaredHinge", "CategoricalHinge",
                     "BinaryFocalCrossentropy", "CategoricalFocalCrossentropy", "Dice", "Tversky" } do
  LOSS_FIXTURES[n] = { n }
end
LOSS_FIXTURES.MAE, LOSS_FIXTURES.MAPE, LOSS_FIXTURES.MSLE =
  LOSS_FIXTURES.MeanAbsoluteError, LOSS_FIXTURES.MeanAbsolutePercentageError, LOSS_FIXTURES.MeanSquaredLogarithmicError

local function loss_case(name, dev)
  for _, key in ipairs(LOSS_FIXTURES[name]) do
    local logits = key:match("_logits$") ~= nil
    local loss = losses[name](key:match("Crossentropy") and not key:match("Focal") and { from_logits = logits } or nil)
    for k, c in ipairs(F.losses[key]) do
      local n = #c.y_pred // c.rows
      local yp = tensor.new(c.y_pred, { device = dev }):reshape(c.rows, n)
      local yt = name == "SparseCategoricalCrossentropy"
        and tensor.new(c.y_true, { dtype = "int64", device = dev })
        or tensor.new(c.y_true, { device = dev }):reshape(c.rows, #c.y_true // c.rows)
      same({ loss(yt, yp):item() }, { c.value }, ("%s case %d (y_pred %s)"):format(key, k,
        table.concat((function() local s = {} for i, v in ipairs(c.y_pred) do s[i] = show(v) end return s end)(), ",")), 1e-5)
    end
  end
end

---------------------------------------------------------------- the tests
local ops = {}
for _, n in ipairs(listed(tensor)) do ops[#ops + 1] = n end
for _, n in ipairs(listed(tensor.Tensor)) do ops[#ops + 1] = n end
local loss_names = {}
for _, n in ipairs(listed(losses)) do loss_names[#loss_names + 1] = n end

T.test("help lists the ops and losses this test walks through", function()
  local seen = {}
  for _, n in ipairs(ops) do seen[n] = true end
  for _, n in ipairs(loss_names) do seen[n] = true end
  for _, n in ipairs({ "relu", "maximum", "sum", "gather", "new", "SparseCategoricalCrossentropy", "BinaryCrossentropy" }) do
    T.ok(seen[n], "help lists " .. n)
  end
end)

T.test("every listed op and loss has a NaN/inf case", function()
  local missing = {}
  for _, n in ipairs(ops) do
    if not CASES[n] and not NO_VALUES[n] then missing[#missing + 1] = n end
  end
  for _, n in ipairs(loss_names) do
    if not LOSS_FIXTURES[n] then missing[#missing + 1] = "losses." .. n end
  end
  T.ok(#missing == 0, "no NaN/inf case for: " .. table.concat(missing, ", "))
end)

for _, dev in ipairs(devices) do
  for _, n in ipairs(ops) do
    if CASES[n] then T.test(("%s: NaN and inf through %s"):format(dev, n), function() CASES[n](dev) end) end
  end
  T.test(dev .. ": clipping keeps NaN (maximum, minimum)", function() CASES.clip(dev) end)
  for _, n in ipairs(loss_names) do
    if LOSS_FIXTURES[n] then
      T.test(("%s: NaN and inf through losses.%s"):format(dev, n), function() loss_case(n, dev) end)
    end
  end
end

---------------------------------------------------------------- max pooling (a layer, not a tensor op)
-- NaN wins wherever it sits in the window (PyTorch's rule and the issue's
-- "NaN in, NaN out"; TF's max_pool drops NaN, its reduce_max keeps it), in
-- the pooling kernel and in the CPU's Conv2D + MaxPool2D fused op (16
-- filters: the vector path; 3: the scalar one; relu before the pooling).
local function ones(m)
  for _, w in ipairs(m.trainable_variables) do w:assign(tensor.ones(table.unpack(w.shape)):to(w.device)) end
  return m
end
for _, dev in ipairs(devices) do
  T.test(dev .. ": max pooling keeps a NaN wherever it sits in the window", function()
    for pos = 1, 4 do
      local v = { 1, 2, 0, -1 }
      v[pos] = nan
      local x = tensor.new(v, { device = dev }):reshape(1, 2, 2, 1)
      same(nn.MaxPool2D(2)(x), { nan }, "MaxPool2D, NaN at " .. pos)
      for _, f in ipairs({ 16, 3 }) do
        local m = nn.Sequential{ nn.Conv2D(f, 1, { use_bias = false, activation = "relu" }), nn.MaxPool2D(2) }
        m(x); ones(m)
        local want = {}
        for i = 1, f do want[i] = nan end
        same(m(x), want, ("Conv2D(%d) + MaxPool2D, NaN at %d"):format(f, pos))
      end
      local y = tensor.new({ 1, 2, inf, -inf }, { device = dev }):reshape(1, 2, 2, 1)
      same(nn.MaxPool2D(2)(y), { inf }, "MaxPool2D with inf")
    end
  end)
end

---------------------------------------------------------------- a model whose predictions are NaN
local function nan_model(from_logits)
  tensor.seed(3)
  local m = nn.Sequential{ nn.Dense(3, from_logits and nil or "softmax") }
  m:compile{ optimizer = optim.SGD{ learning_rate = 0.1 },
             loss = losses.SparseCategoricalCrossentropy{ from_logits = from_logits } }
  return m
end
local X = tensor.full({ 8, 4 }, nan)
local Y = tensor.new({ 0, 1, 2, 0, 1, 2, 0, 1 }, { dtype = "int64" })

T.test("fit on NaN predictions: the loss is NaN every epoch (not -log(1e-7) = 16.1181)", function()
  for _, fl in ipairs({ false, true }) do
    local h = nan_model(fl):fit(X, Y, { epochs = 3, batch_size = 4, shuffle = false, verbose = 0 })
    T.eq(#h.loss, 3)
    for e = 1, 3 do T.ok(h.loss[e] ~= h.loss[e], ("from_logits=%s: epoch %d loss %s"):format(fl, e, show(h.loss[e]))) end
  end
end)

T.test("TerminateOnNaN fires on a model whose predictions are NaN", function()
  for _, fl in ipairs({ false, true }) do
    local h = nan_model(fl):fit(X, Y, { epochs = 3, batch_size = 4, shuffle = false, verbose = 0,
                                       callbacks = { callbacks.TerminateOnNaN() } })
    T.eq(#h.loss, 1, "from_logits=" .. tostring(fl) .. ": epochs run")
    T.ok(h.loss[1] ~= h.loss[1], "the recorded loss is NaN")
    T.raises(function()
      nan_model(fl):fit(X, Y, { epochs = 3, batch_size = 4, verbose = 0,
                                callbacks = { callbacks.TerminateOnNaN{ raise_error = true } } })
    end, "NaN or Inf loss encountered at batch 0. Loss value: nan")
  end
end)


---------------------------------------------------------------- finite values
-- Every elementwise op that the fixture's grid covers (Keras's activations),
-- and its gradient, against TF on finite values from -9 to 9, on cpu:0 and cpu:1
T.test("the unary ops and their gradients equal TensorFlow's on a grid from -9 to 9", function()
  local n = 0
  for _, op in ipairs(tensor.unary_ops) do
    if F.unary_grid[op] then
      for _, dev in ipairs({ "cpu:0", "cpu:1" }) do
        local v = tensor.Variable(tensor.new(F.unary_grid_x):to(dev))
        local tape = autograd.GradientTape()
        local y
        local total = tape:record(function() y = v[op](v); return y:sum() end)
        same(y, F.unary_grid[op], op .. " on " .. dev, 2e-6)
        same(tape:gradient(total, v), F.unary_grid_grad[op], "d " .. op .. " on " .. dev, 2e-6)
      end
      n = n + 1
    end
  end
  T.ok(n >= 19, "the grid covers the activations (" .. n .. ")")
end)

---------------------------------------------------------------- subnormals
-- CPU kernels flush subnormal floats to zero (FTZ/DAZ), as TensorFlow's kernel
-- threads do, on cpu:0 (at the call) and on an executor's device alike;
-- Lua's own arithmetic stays IEEE; LDIST_DENORMALS=keep keeps them.
T.test("subnormals: kernels flush them to zero on cpu:0 and cpu:1; Lua's numbers keep them; LDIST_DENORMALS=keep", function()
  local a = tensor.new({ 1e-30, 1, 3e-38 })
  for _, dev in ipairs({ "cpu:0", "cpu:1" }) do
    local x = a:to(dev)
    local y = (x * 1e-10):cpu():totable()
    T.eq(y[1], 0, dev .. ": a subnormal product is 0")
    T.near(y[2], 1e-10, 1e-16, dev .. ": a normal one is kept")
    -- big enough for the pool (its parts on the caller's thread and the workers')
    local big = (tensor.ones(100000):to(dev) * 1e-30 * 1e-10):cpu()
    T.eq(big:abs():sum():item(), 0, dev .. ": every part of a pooled kernel flushes")
    T.eq((x * 0.1):cpu():totable()[3], 0, dev .. ": 3e-39 flushed")
  end
  T.eq(ldist.config.cpu_split().denormals, "flushed")
  T.ok(2 ^ -1074 > 0, "Lua's arithmetic keeps IEEE subnormals")
  T.eq(tostring(5e-324), "4.9406564584125e-324")
  local bin = os.getenv("LDIST_BIN") or "./ldist"
  local p = io.popen(("LDIST_DENORMALS=keep %s -e 'print((tensor.new({1e-30}) * 1e-10):item(), ldist.config.cpu_split().denormals)' 2>&1"):format(bin))
  local out = p:read("a")
  p:close()
  local v = tonumber(out:match("[%d.e+-]+"))
  T.ok(v and v > 9e-41 and v < 1.1e-40, "LDIST_DENORMALS=keep: the subnormal product, got " .. out)
  T.ok(out:find("kept", 1, true), "cpu_split().denormals says kept")
end)

-- Keras's regression, divergence and hinge losses (and MSE) on finite values:
-- each loss's value, its per-example losses and its gradient with respect to
-- the predictions, as TF's, on cpu:0 and cpu:1; every loss help lists
-- besides the cross-entropies has a case
T.test("the losses' values, per-example losses and gradients equal Keras's on finite values", function()
  for _, n in ipairs(loss_names) do
    if not n:match("Crossentropy$") and #n > 4 then T.ok(F.loss_grid[n], "a finite-values case for losses." .. n) end
  end
  for key, c in pairs(F.loss_grid) do
    local cls = key:match("^[^_]+")
    for _, dev in ipairs({ "cpu:0", "cpu:1" }) do
      local opts = cls == "Huber" and { delta = c.delta[1] } or {}
      local yt = tensor.new(c.y_true):reshape(5, 3):to(dev)
      local v = tensor.Variable(tensor.new(c.y_pred):reshape(5, 3):to(dev))
      local tape = autograd.GradientTape()
      local val = tape:record(function() return losses[cls](opts)(yt, v) end)
      local what = ("%s on %s"):format(key, dev)
      same({ val:item() }, c.value, what .. ": value", 2e-6)
      opts.reduction = "none"
      same(losses[cls](opts)(yt, v), c.per, what .. ": per-example losses", 2e-6)
      same(tape:gradient(val, { v })[1], c.grad, what .. ": gradient", 1e-5)
    end
  end
end)

-- reductions over lists of axes, as TF's axis=[0, 2]: each kind's values
-- and gradients against TF's on cpu:0 and cpu:1, the axes adjacent or not,
-- in any order, none of them and all of them, with and without keepdims
T.test("reductions over lists of axes equal TF's, values and gradients", function()
  for key, c in pairs(F.axes) do
    for _, dev in ipairs({ "cpu:0", "cpu:1" }) do
      for _, k in ipairs({ "sum", "mean", "max", "min", "var", "std", "logsumexp" }) do
        local v = tensor.Variable(tensor.new(F.axes_x):reshape(3, 4, 5):to(dev))
        local tape = autograd.GradientTape()
        local y
        local loss = tape:record(function()
          local axis = nil
          if not c.all then axis = c.axes end   -- {} is no axis at all, as TF's axis=[]
          y = v[k](v, { axis = axis, keepdims = c.keepdims })
          local n = y:numel()
          local w = (tensor.arange(1, n + 1):astype("float32") * 0.25):reshape(y.shape):to(dev)
          return (y * w):sum()
        end)
        local what = ("%s over %s on %s"):format(k, key, dev)
        T.eq(table.concat(y.shape, ","), table.concat(c[k .. "_shape"], ","), what .. ": shape")
        same(y, c[k], what, 2e-6)
        same(tape:gradient(loss, { v })[1], c[k .. "_grad"], what .. ": gradient", 2e-6)
      end
    end
  end
  -- the errors a user meets, and the session goes on
  local x = tensor.ones(2, 3)
  local ok, err = pcall(function() return x:sum { 1, 1 } end)
  T.ok(not ok and tostring(err):find("axis 1 is given twice", 1, true), "a repeated axis is an error: " .. tostring(err))
  ok, err = pcall(function() return x:mean { 0, 2 } end)
  T.ok(not ok and tostring(err):find("out of range", 1, true), "an axis out of range is an error: " .. tostring(err))
  ok, err = pcall(function() return x:var { 0.5 } end)
  T.ok(not ok and tostring(err):find("list of integers", 1, true), "a fractional axis is an error: " .. tostring(err))
  T.eq(x:sum():item(), 6, "the session goes on")
  -- integer tensors: sums exact over several axes, var in float32
  local big = tensor.full({ 2, 2, 2 }, 16777217, { dtype = "int64" })
  T.eq(big:sum { 0, 2 }.dtype, "int64", "an int64 sum over two axes stays int64")
  T.eq(big:sum { 0, 2 }:totable()[1], 4 * 16777217, "and exact")
  T.eq(tensor.new({ 1, 2, 3, 4 }, { dtype = "int32" }):var().dtype, "float32", "an integer var is float32")
  -- a half tensor's: float32 inside, rounded once into its dtype
  local h = tensor.new(F.axes_x):reshape(3, 4, 5)
  for _, k in ipairs({ "var", "std", "logsumexp", "sum", "mean" }) do
    local got, want = h:astype("bfloat16")[k](h:astype("bfloat16"), { 0, 2 }), h:astype("bfloat16"):astype("float32")[k](h:astype("bfloat16"):astype("float32"), { 0, 2 })
    T.eq(got.dtype, "bfloat16", k .. " of bfloat16 is bfloat16")
    same(got:astype("float32"), flat(want:astype("bfloat16"):astype("float32")), k .. " of bfloat16: the float32 result rounded once", 0)
  end
end)

-- cumsum and cumprod on finite values with zeros (one in some slices, two
-- in others), each (exclusive, reverse) along a middle and the last axis:
-- values and gradients as TF's on cpu:0 and cpu:1 (cumprod's gradient is 0
-- at a zero: TF divides with divide_no_nan); both ways of passing the axis
T.test("cumsum and cumprod equal TF's on finite values with zeros, values and gradients", function()
  local n = 0
  for key, c in pairs(F.scan) do
    local op, axis, e, r = key:match("^(%a+)_a(%d)_excl(%d)_rev(%d)$")
    axis, e, r = tonumber(axis), e == "1", r == "1"
    for _, dev in ipairs({ "cpu:0", "cpu:1" }) do
      local v = tensor.Variable(tensor.new(F.scan_x):reshape(3, 4, 5):to(dev))
      local w = (tensor.arange(1, 61):astype("float32") * 0.25):reshape(3, 4, 5):to(dev)
      local tape = autograd.GradientTape()
      local y
      local loss = tape:record(function()
        if dev == "cpu:0" then y = v[op](v, axis, { exclusive = e, reverse = r })
        else y = v[op](v, { axis = axis - 3, exclusive = e, reverse = r }) end   -- a negative axis, in the table
        return (y * w):sum()
      end)
      local what = ("%s on %s"):format(key, dev)
      T.eq(table.concat(y.shape, ","), "3,4,5", what .. ": shape")
      same(y, c.y, what, 2e-6)
      same(tape:gradient(loss, { v })[1], c.grad, what .. ": gradient", 1e-5)
    end
    n = n + 1
  end
  T.eq(n, 16, "two ops, two axes, four (exclusive, reverse) each")
  -- TF's defaults: axis 0, inclusive, forward
  local x = tensor.new(F.scan_x):reshape(3, 4, 5)
  same(x:cumsum(), flat(x:cumsum(0, { exclusive = false, reverse = false })), "cumsum's default axis is 0", 0)
  same(x:cumprod({ exclusive = true }), flat(x:cumprod(0, { exclusive = true })), "cumprod{exclusive=true} is along axis 0", 0)
  -- a half tensor: float32 running values, each rounded once into its dtype
  for _, op in ipairs({ "cumsum", "cumprod" }) do
    local h = x:astype("bfloat16")
    local got = h[op](h, 2, { reverse = true })
    T.eq(got.dtype, "bfloat16", op .. " of bfloat16 is bfloat16")
    same(got:astype("float32"), flat(h:astype("float32")[op](h:astype("float32"), 2, { reverse = true }):astype("bfloat16"):astype("float32")),
      op .. " of bfloat16: the float32 results rounded once", 0)
  end
  -- the errors a user meets
  local ok, err = pcall(function() return x:cumsum(3) end)
  T.ok(not ok and tostring(err):find("out of range", 1, true), "an axis out of range: " .. tostring(err))
  ok, err = pcall(function() return tensor.new(2):cumprod() end)
  T.ok(not ok and tostring(err):find("cumprod", 1, true) and tostring(err):find("out of range", 1, true),
    "a scalar has no axis to scan: " .. tostring(err))
  ok, err = pcall(function() return x:cumsum(0, { exclusve = true }) end)
  T.ok(not ok and tostring(err):find("unknown option 'exclusve'", 1, true), "a misspelt option: " .. tostring(err))
  ok, err = pcall(function() return x:cumsum({ axis = 0.5 }) end)
  T.ok(not ok and tostring(err):find("integer", 1, true), "a fractional axis: " .. tostring(err))
end)

-- reduce_prod over lists of axes, as TF's: values and gradients (TF's
-- _ProdGrad: a slice's one zero gets the product of the others, two zeros
-- give 0) on cpu:0 and cpu:1, adjacent axes or not, none, all, keepdims
T.test("prod over lists of axes equals TF's, values and gradients, zeros included", function()
  for key, c in pairs(F.prod_axes) do
    for _, dev in ipairs({ "cpu:0", "cpu:1" }) do
      local v = tensor.Variable(tensor.new(c.x or F.scan_x):reshape(3, 4, 5):to(dev))
      local tape = autograd.GradientTape()
      local y
      local loss = tape:record(function()
        y = v:prod({ axis = not c.all and c.axes or nil, keepdims = c.keepdims })
        local w = (tensor.arange(1, y:numel() + 1):astype("float32") * 0.25):reshape(y.shape):to(dev)
        return (y * w):sum()
      end)
      local what = ("prod over %s on %s"):format(key, dev)
      T.eq(table.concat(y.shape, ","), table.concat(c.shape, ","), what .. ": shape")
      same(y, c.y, what, 2e-6)
      same(tape:gradient(loss, { v })[1], c.grad, what .. ": gradient", 2e-6)
    end
  end
  -- integers: exact in their dtype, wrapping as TF's; the running ones too
  local ix = tensor.new(F.scan_int.x, { dtype = "int32" }):reshape(2, 3)
  for _, dev in ipairs({ "cpu:0", "cpu:1" }) do
    local x = ix:to(dev)
    for _, case in ipairs({ { x:prod(1), F.scan_int.prod, "prod(1)" }, { x:cumprod(1), F.scan_int.cumprod, "cumprod(1)" },
                            { x:cumsum(0, { exclusive = true, reverse = true }), F.scan_int.cumsum_excl1_rev1, "cumsum(0, exclusive, reverse)" } }) do
      T.eq(case[1].dtype, "int32", case[3] .. " of int32 on " .. dev .. " is int32")
      local got = flat(case[1])
      for i = 1, #case[2] do T.eq(got[i], math.tointeger(case[2][i]), ("%s on %s: element %d"):format(case[3], dev, i)) end
    end
    local want = 1
    for _, v in ipairs(F.scan_int.x) do want = want * math.tointeger(v) end   -- Lua's integers wrap as int64 does
    T.eq(x:astype("int64"):prod():item(), want, "an int64 product over every axis, exact on " .. dev)
  end
  T.eq(tensor.zeros(2, 0):prod(1):totable()[1], 1, "the empty product is 1")
  T.eq(tensor.zeros(0, { dtype = "int32" }):prod():item(), 1, "an empty integer product is 1")
  -- a half tensor's: float32 inside, rounded once
  local h = tensor.new(F.scan_x):reshape(3, 4, 5):astype("float16")
  local got = h:prod({ 0, 2 })
  T.eq(got.dtype, "float16", "prod of float16 is float16")
  same(got:astype("float32"), flat(h:astype("float32"):prod({ 0, 2 }):astype("float16"):astype("float32")),
    "prod of float16: the float32 product rounded once", 0)
end)

-- top_k, sort and argsort on values without NaN: TF 2.21's, ties included
-- (x = the 3x6 rows below; the gradients with -inf made 9)
T.test("top_k, sort and argsort equal TF's, values, indices and gradients", function()
  local X = { { 3, 1, 2, 3, -inf, 2 }, { inf, 0, -0.0, 5, 5, 1 }, { 7, -1, 7, 0.5, 2, 7 } }
  for _, dev in ipairs({ "cpu:0", "cpu:1" }) do
    local x = tensor.new(X):to(dev)
    local v, i = tensor.top_k(x, 3)
    same(v, { 3, 3, 2, inf, 5, 5, 7, 7, 7 }, "top_k values on " .. dev)
    same(i, { 0, 3, 2, 0, 3, 4, 0, 2, 5 }, "top_k indices")
    T.eq(i.dtype, "int32", "int32 indices, as TF's")
    same(x:argsort(), { 4, 1, 2, 5, 0, 3, 1, 2, 5, 3, 4, 0, 1, 3, 4, 0, 2, 5 }, "argsort")
    same(x:argsort(-1, "DESCENDING"), { 0, 3, 2, 5, 1, 4, 0, 3, 4, 5, 1, 2, 0, 2, 5, 4, 3, 1 }, "argsort descending")
    same(x:argsort(0), { 0, 2, 1, 2, 0, 1, 2, 1, 0, 0, 2, 0, 1, 0, 2, 1, 1, 2 }, "argsort along axis 0")
    local xv = tensor.Variable(tensor.where(x:abs():eq(inf), 9, x))
    local tape = autograd.GradientTape { persistent = true }
    local s1, s2 = tape:record(function()
      local tv = tensor.top_k(xv, 3)
      return (tv * tensor.arange(1, 10):astype("float32"):reshape(3, 3):to(dev)):sum(),
        (xv:sort { axis = 0, direction = "DESCENDING" } * tensor.arange(1, 19):astype("float32"):reshape(3, 6):to(dev)):sum()
    end)
    same(tape:gradient(s1, xv), { 2, 0, 0, 3, 1, 0, 4, 0, 0, 5, 6, 0, 7, 0, 8, 0, 0, 9 }, "top_k's gradient")
    same(tape:gradient(s2, xv), { 13, 2, 9, 10, 5, 12, 1, 8, 15, 4, 11, 18, 7, 14, 3, 16, 17, 6 }, "sort's gradient")
  end
  -- integers sort exactly (2^53 and 2^53 - 1 as int64)
  local big = tensor.new({ 9007199254740992, 9007199254740991, 3 }, { dtype = "int64" })
  same(big:argsort(), { 2, 1, 0 }, "int64 argsort, exact")
  T.raises(function() tensor.top_k(tensor.ones(2, 3), 4) end, "k = 4, but the last axis of 2x3 has 3 values")
  T.raises(function() tensor.ones(3):sort(0, "UP") end, "direction must be")
end)

T.done()
