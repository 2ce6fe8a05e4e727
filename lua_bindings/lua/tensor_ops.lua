-- tensor_ops.lua - TF's array ops that are arrangements of the engine's:
-- einsum, tensordot, tile, repeat, reverse, broadcast_to, band_part, split,
-- pad, unstack, meshgrid, norm, eye and linspace. Each is composed of the engine's differentiable
-- ops (permute, reshape, bmm, gather, concat, slice views, where, sums), so
-- it runs on every device, under every strategy, and a tape follows it; no
-- op here has a kernel or a gradient of its own. Axes count from 0 (negative
-- from the end), as TF's. tests/lua/test_tensor_ops.lua checks them against
-- TF 2.21's values and gradients.
local ldist = ...
local tensor = ldist.tensor
local doc = ldist.document

-- axis a of an n-axis tensor, from 0 (negative from the end); fname names the op in errors
local function axis_of(a, n, fname)
  if math.type(a) ~= "integer" then error(("%s: an axis must be an integer, got %s"):format(fname, tostring(a)), 3) end
  local r = a < 0 and a + n or a
  if r < 0 or r >= n then error(("%s: axis %d is out of range for a tensor of %d axes"):format(fname, a, n), 3) end
  return r
end
local function check_tensor(x, fname, what)
  if not tensor.is_tensor(x) then
    error(("bad argument #%s to '%s' (a tensor expected, got %s)"):format(what or "1", fname, type(x)), 3)
  end
end
local function count(v, fname, what)
  if math.type(v) ~= "integer" or v < 0 then
    error(("%s: %s must be an integer >= 0, got %s"):format(fname, what, tostring(v)), 3)
  end
  return v
end
-- an int64 index tensor on x's device
local function index(list, x) return tensor.new(list, { dtype = "int64", device = x.device }) end

---------------------------------------------------------------- einsum
-- a subscript string's letters, one per axis of x (no ellipsis, no repeat)
local function letters(s, x, k)
  if s:find("%.") then error("tensor.einsum: ellipsis ('...') is not supported; name every axis", 3) end
  if not s:match("^%a*$") then error(("tensor.einsum: operand %d's subscripts '%s' must be letters"):format(k, s), 3) end
  local out, seen = {}, {}
  for c in s:gmatch("%a") do
    if seen[c] then
      error(("tensor.einsum: index '%s' appears twice in operand %d ('%s'): diagonals are not supported"):format(c, k, s), 3)
    end
    seen[c] = true
    out[#out + 1] = c
  end
  if #out ~= #x.shape then
    error(("tensor.einsum: operand %d has %d axes but its subscripts '%s' name %d"):format(k, #x.shape, s, #out), 3)
  end
  return out
end
local function pos_of(list)
  local p = {}
  for i, c in ipairs(list) do p[c] = i end
  return p
end
-- x (its axes named by idx) with the axes not in keep summed out
local function sum_out(x, idx, keep)
  local axes, rest = {}, {}
  for i, c in ipairs(idx) do
    if keep[c] then rest[#rest + 1] = c else axes[#axes + 1] = i - 1 end
  end
  if #axes == 0 then return x, idx end
  return x:sum(axes), rest
end
-- x's axes put in the order of `want` (letters), as a permute
local function arrange(x, idx, want)
  local p, perm, same = pos_of(idx), {}, true
  for i, c in ipairs(want) do
    perm[i] = p[c] - 1
    if perm[i] ~= i - 1 then same = false end
  end
  if same then return x end
  return x:permute(table.unpack(perm))
end
local function product(list, size)
  local n = 1
  for _, c in ipairs(list) do n = n * size[c] end
  return n
end
local function shape_of(list, size)
  local s = {}
  for i, c in ipairs(list) do s[i] = size[c] end
  return s
end
-- a (axes ia) times b (axes ib), the result's axes `keep` (a set) in the order batch, a's, b's
local function contract(a, ia, b, ib, keep, size)
  local pa, pb = pos_of(ia), pos_of(ib)
  local batch, con, ao, bo = {}, {}, {}, {}
  for _, c in ipairs(ia) do
    if pb[c] then
      if keep[c] then batch[#batch + 1] = c else con[#con + 1] = c end
    else ao[#ao + 1] = c end
  end
  for _, c in ipairs(ib) do if not pa[c] then bo[#bo + 1] = c end end
  local function cat(...)
    local r = {}
    for _, l in ipairs { ... } do for _, c in ipairs(l) do r[#r + 1] = c end end
    return r
  end
  local nb, m, k, n = product(batch, size), product(ao, size), product(con, size), product(bo, size)
  local a3 = arrange(a, ia, cat(batch, ao, con)):reshape { nb, m, k }
  local b3 = arrange(b, ib, cat(batch, con, bo)):reshape { nb, k, n }
  local y = tensor.bmm(a3, b3)
  local out = cat(batch, ao, bo)
  return y:reshape(shape_of(out, size)), out
end

function tensor.einsum(spec, ...)
  local xs = table.pack(...)
  if type(spec) ~= "string" then error("bad argument #1 to 'einsum' (a subscripts string expected, e.g. \"ij,jk->ik\")", 2) end
  if xs.n < 1 then error("tensor.einsum: no operands", 2) end
  for k = 1, xs.n do check_tensor(xs[k], "einsum", tostring(k + 1)) end
  spec = spec:gsub("%s", "")
  local lhs, rhs = spec:match("^([^%-]*)%->(.*)$")
  lhs = lhs or spec
  local parts = {}
  for s in (lhs .. ","):gmatch("([^,]*),") do parts[#parts + 1] = s end
  if #parts ~= xs.n then
    error(("tensor.einsum: '%s' names %d operands, %d given"):format(spec, #parts, xs.n), 2)
  end
  local idx, size, seen_in = {}, {}, {}
  for k = 1, xs.n do
    idx[k] = letters(parts[k], xs[k], k)
    for i, c in ipairs(idx[k]) do
      local d = xs[k].shape[i]
      if size[c] and size[c] ~= d then
        error(("tensor.einsum: index '%s' is %d in operand %d but %d in operand %d"):format(c, d, k, size[c], seen_in[c]), 2)
      end
      size[c], seen_in[c] = d, seen_in[c] or k
    end
  end
  local out = {}
  if rhs then
    if rhs:find("%.") then error("tensor.einsum: ellipsis ('...') is not supported; name every axis", 2) end
    local dup = {}
    for c in rhs:gmatch(".") do
      if not c:match("%a") then error(("tensor.einsum: the output's subscripts '%s' must be letters"):format(rhs), 2) end
      if not size[c] then error(("tensor.einsum: output index '%s' is in no operand"):format(c), 2) end
      if dup[c] then error(("tensor.einsum: output index '%s' appears twice"):format(c), 2) end
      dup[c] = true
      out[#out + 1] = c
    end
  else   -- NumPy's implicit output: the indices that appear once, in alphabetical order
    local n = {}
    for k = 1, xs.n do for _, c in ipairs(idx[k]) do n[c] = (n[c] or 0) + 1 end end
    for c, v in pairs(n) do if v == 1 then out[#out + 1] = c end end
    table.sort(out)
  end
  local keep_out = pos_of(out)
  -- fold the operands from the left: keep what the output or a later operand needs
  local function needed(from)
    local keep = {}
    for c in pairs(keep_out) do keep[c] = true end
    for k = from, xs.n do for _, c in ipairs(idx[k]) do keep[c] = true end end
    return keep
  end
  local function own(k, other)   -- operand k's axes summed where nothing else needs them
    local keep = needed(k + 1)
    for _, c in ipairs(other or {}) do keep[c] = true end
    return sum_out(xs[k], idx[k], keep)
  end
  local acc, ia = own(1, idx[2])
  for k = 2, xs.n do
    local keep, own_keep = needed(k + 1), needed(k + 1)
    for _, c in ipairs(ia) do own_keep[c] = true end   -- b's axes the product or later needs
    local b, ib = sum_out(xs[k], idx[k], own_keep)
    acc, ia = contract(acc, ia, b, ib, keep, size)
  end
  acc, ia = sum_out(acc, ia, keep_out)
  return arrange(acc, ia, out)
end
doc(tensor.einsum, "tensor.einsum",
  "tensor.einsum(subscripts, a [, b, ...])\n\nTF's einsum: \"ij,jk->ik\" (a product), \"bij,bjk->bik\" (batched), \"ij->ji\",\n" ..
  "\"ij->j\" (a sum), \"i,j->ij\" (outer); without \"->\" the output is the indices that appear once,\n" ..
  "alphabetically (NumPy's rule). Two operands become one batched product (tensor.bmm); more fold\n" ..
  "from the left. Not supported: ellipsis, an index twice in one operand (diagonals), broadcasting\n" ..
  "an axis of size 1.")

function tensor.tensordot(a, b, axes)
  check_tensor(a, "tensordot", "1"); check_tensor(b, "tensordot", "2")
  local na, nb = #a.shape, #b.shape
  local aa, ba = {}, {}
  if math.type(axes) == "integer" then
    if axes < 0 or axes > na or axes > nb then
      error(("tensor.tensordot: axes %d is more than the operands' axes (%d and %d)"):format(axes, na, nb), 2)
    end
    for i = 1, axes do aa[i], ba[i] = na - axes + i - 1, i - 1 end
  elseif type(axes) == "table" and type(axes[1]) == "table" and type(axes[2]) == "table" and #axes[1] == #axes[2] then
    for i = 1, #axes[1] do aa[i], ba[i] = axis_of(axes[1][i], na, "tensor.tensordot"), axis_of(axes[2][i], nb, "tensor.tensordot") end
  else
    error("bad argument #3 to 'tensordot' (an integer N or {{a's axes}, {b's axes}} of one length expected)", 2)
  end
  local L = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
  local sa, sb, used, next_l = {}, {}, {}, 1
  local function fresh() local c = L:sub(next_l, next_l); next_l = next_l + 1; return c end
  for i = 0, na - 1 do sa[i] = fresh() end
  for i = 0, nb - 1 do sb[i] = fresh() end
  for i = 1, #aa do sb[ba[i]] = sa[aa[i]]; used[aa[i]] = true end
  local out, bused = {}, {}
  for i = 1, #ba do bused[ba[i]] = true end
  for i = 0, na - 1 do if not used[i] then out[#out + 1] = sa[i] end end
  for i = 0, nb - 1 do if not bused[i] then out[#out + 1] = sb[i] end end
  local function str(t, n) local r = {} for i = 0, n - 1 do r[#r + 1] = t[i] end return table.concat(r) end
  return tensor.einsum(str(sa, na) .. "," .. str(sb, nb) .. "->" .. table.concat(out), a, b)
end
doc(tensor.tensordot, "tensor.tensordot",
  "tensor.tensordot(a, b, axes)\n\nTF's tensordot: the sum over a's last N axes and b's first N (axes = N), or over\n" ..
  "the axes given as {{a's}, {b's}}; the result's axes are a's others then b's others.")

---------------------------------------------------------------- repetition, order, shape
function tensor.tile(x, multiples)
  check_tensor(x, "tile")
  local n = #x.shape
  if type(multiples) ~= "table" or #multiples ~= n then
    error(("tensor.tile: multiples must list one count per axis (%d), got %s"):format(n,
      type(multiples) == "table" and tostring(#multiples) or type(multiples)), 2)
  end
  local y = x
  for a = 1, n do
    local m = count(multiples[a], "tensor.tile", "each multiple")
    if m == 0 then y = y:slice(a - 1, 0, 0)
    elseif m > 1 then
      local parts = {}
      for i = 1, m do parts[i] = y end
      y = tensor.concat(parts, a - 1)
    end
  end
  return y
end
doc(tensor.tile, "tensor.tile", "tensor.tile(x, multiples)\n\nTF's tile: x repeated multiples[i] times along axis i (whole copies, one after another).")

local function repeat_(x, repeats, axis)
  check_tensor(x, "repeat")
  if axis == nil then x, axis = x:reshape { x:numel() }, 0 end   -- TF's: the flattened input
  local n = #x.shape
  axis = axis_of(axis, n, "tensor.repeat")
  local len, list = x.shape[axis + 1], {}
  if type(repeats) == "table" then
    if #repeats ~= len then
      error(("tensor.repeat: %d repeats for axis %d of size %d"):format(#repeats, axis, len), 2)
    end
    for i = 1, len do for _ = 1, count(repeats[i], "tensor.repeat", "each repeat") do list[#list + 1] = i - 1 end end
  else
    local r = count(repeats, "tensor.repeat", "repeats")
    for i = 1, len do for _ = 1, r do list[#list + 1] = i - 1 end end
  end
  if #list == 0 then return x:slice(axis, 0, 0) end
  return x:gather(index(list, x), axis)
end
tensor["repeat"], tensor.repeat_ = repeat_, repeat_
doc(repeat_, "tensor.repeat",
  "tensor[\"repeat\"](x, repeats [, axis])\n\nTF's repeat: each element along axis repeats times (or repeats[i] times for\n" ..
  "the i-th); without an axis, of x flattened. (repeat is a Lua keyword: tensor[\"repeat\"] or tensor.repeat_.)")

function tensor.reverse(x, axes)
  check_tensor(x, "reverse")
  local n = #x.shape
  if math.type(axes) == "integer" then axes = { axes } end
  if type(axes) ~= "table" then error("bad argument #2 to 'reverse' (an axis or a list of axes expected)", 2) end
  local seen, y = {}, x
  for _, a in ipairs(axes) do
    local ax = axis_of(a, n, "tensor.reverse")
    if seen[ax] then error(("tensor.reverse: axis %d is given twice"):format(ax), 2) end
    seen[ax] = true
    local len, list = x.shape[ax + 1], {}
    for i = 1, len do list[i] = len - i end
    if len > 1 then y = y:gather(index(list, x), ax) end
  end
  return y
end
doc(tensor.reverse, "tensor.reverse", "tensor.reverse(x, axes)\n\nTF's reverse: x with the order of each listed axis reversed (an axis or a list of them).")

function tensor.broadcast_to(x, shape)
  check_tensor(x, "broadcast_to")
  if type(shape) ~= "table" then error("bad argument #2 to 'broadcast_to' (a shape, a list of sizes, expected)", 2) end
  local n, m = #x.shape, #shape
  local ok = n <= m
  for i = 0, n - 1 do
    local d, t = x.shape[n - i], shape[m - i]
    if ok and not (d == t or d == 1) then ok = false end
  end
  if not ok then
    error(("tensor.broadcast_to: a tensor of shape {%s} does not broadcast to {%s}"):format(table.concat(x.shape, ", "),
      table.concat(shape, ", ")), 2)
  end
  -- times ones: exact (NaN, infinities and -0 kept); the gradient sums over the broadcast axes
  local args = { table.unpack(shape) }
  args[#args + 1] = { dtype = x.dtype, device = x.device }
  local ones = tensor.ones(table.unpack(args))
  return x * ones
end
doc(tensor.broadcast_to, "tensor.broadcast_to",
  "tensor.broadcast_to(x, shape)\n\nTF's broadcast_to: x's values spread to shape by NumPy's rules (axes of size 1,\n" ..
  "missing leading axes); a new tensor.")

-- the row numbers [r, 1] and column numbers [1, c] of an r x c matrix (float32, on the host)
local function grid(r, c)
  return tensor.arange(r, { dtype = "float32" }):reshape { r, 1 }, tensor.arange(c, { dtype = "float32" }):reshape { 1, c }
end
function tensor.band_part(x, num_lower, num_upper)
  check_tensor(x, "band_part")
  local n = #x.shape
  if n < 2 then error("tensor.band_part: needs a matrix or a batch of them (2 axes or more)", 2) end
  if math.type(num_lower) ~= "integer" or math.type(num_upper) ~= "integer" then
    error("tensor.band_part: num_lower and num_upper must be integers (-1 keeps that whole triangle)", 2)
  end
  local i, j = grid(x.shape[n - 1], x.shape[n])
  local keep = tensor.ones(x.shape[n - 1], x.shape[n])
  if num_lower >= 0 then keep = keep * (i - j):le(num_lower) end
  if num_upper >= 0 then keep = keep * (j - i):le(num_upper) end
  keep = keep:to(x.device)
  return tensor.where(keep, x, tensor.zeros(1, { dtype = x.dtype, device = x.device }))
end
doc(tensor.band_part, "tensor.band_part",
  "tensor.band_part(x, num_lower, num_upper)\n\nTF's linalg.band_part: the band of each matrix (the last two axes) with num_lower\n" ..
  "diagonals below and num_upper above kept (-1: all), zeros elsewhere. band_part(x, -1, 0) is the lower\n" ..
  "triangle (a causal mask), band_part(x, 0, 0) the diagonal.")

function tensor.split(x, num_or_sizes, axis)
  check_tensor(x, "split")
  axis = axis_of(axis or 0, #x.shape, "tensor.split")
  local len, sizes = x.shape[axis + 1], {}
  if math.type(num_or_sizes) == "integer" then
    local k = num_or_sizes
    if k < 1 or len % k ~= 0 then
      error(("tensor.split: axis %d of size %d does not split into %d equal parts"):format(axis, len, k), 2)
    end
    for i = 1, k do sizes[i] = len // k end
  elseif type(num_or_sizes) == "table" then
    local total, free = 0, nil
    for i, s in ipairs(num_or_sizes) do
      if s == -1 and not free then free = i
      else total = total + count(s, "tensor.split", "each size (one may be -1)") end
      sizes[i] = s
    end
    if free then sizes[free] = len - total end
    if (free and sizes[free] < 0) or (not free and total ~= len) then
      error(("tensor.split: sizes {%s} do not add up to axis %d's %d"):format(table.concat(num_or_sizes, ", "), axis, len), 2)
    end
  else
    error("bad argument #2 to 'split' (a number of parts or a list of sizes expected)", 2)
  end
  local out, at = {}, 0
  for i, s in ipairs(sizes) do
    out[i] = x:slice(axis, at, at + s)
    at = at + s
  end
  return out
end
doc(tensor.split, "tensor.split",
  "tensor.split(x, num_or_sizes [, axis=0]) -> {parts}\n\nTF's split: k equal parts, or parts of the listed sizes (one may be -1: the rest),\n" ..
  "as views that keep the gradient.")

function tensor.pad(x, paddings, opts)
  check_tensor(x, "pad")
  opts = ldist._util.check_opts("tensor.pad", opts, { mode = true, constant_values = true })
  local n, mode = #x.shape, (opts.mode or "CONSTANT"):upper()
  if mode ~= "CONSTANT" and mode ~= "REFLECT" and mode ~= "SYMMETRIC" then
    error(("tensor.pad: mode must be \"CONSTANT\", \"REFLECT\" or \"SYMMETRIC\", got %s"):format(tostring(opts.mode)), 2)
  end
  if type(paddings) ~= "table" or #paddings ~= n then
    error(("tensor.pad: paddings must give {before, after} for each of the %d axes"):format(n), 2)
  end
  local y = x
  for a = 1, n do
    local p = paddings[a]
    if type(p) ~= "table" or #p ~= 2 then error(("tensor.pad: paddings[%d] must be {before, after}"):format(a), 2) end
    local before, after = count(p[1], "tensor.pad", "each padding"), count(p[2], "tensor.pad", "each padding")
    local len = x.shape[a]
    if before + after > 0 then
      if mode == "CONSTANT" then
        y = tensor._pad_axis(y, a - 1, before, after, opts.constant_values or 0)   -- the engine's ld_pad_op
      else
        -- REFLECT mirrors about the edge value (not repeated), SYMMETRIC repeats it (TF's MirrorPad)
        local edge = mode == "REFLECT" and 1 or 0
        if before > len - edge or after > len - edge then
          error(("tensor.pad: %s padding of axis %d (size %d) must be at most %d on each side"):format(mode, a - 1, len,
            len - edge), 2)
        end
        local list = {}
        for i = before, 1, -1 do list[#list + 1] = i - 1 + edge end
        for i = 0, len - 1 do list[#list + 1] = i end
        for i = 1, after do list[#list + 1] = len - i - edge end
        y = y:gather(index(list, x), a - 1)
      end
    end
  end
  return y
end
doc(tensor.pad, "tensor.pad",
  "tensor.pad(x, paddings, {mode=\"CONSTANT\", constant_values=0})\n\nTF's pad: paddings = {{before, after}, ...} per axis; CONSTANT fills with constant_values,\n" ..
  "REFLECT mirrors about the edge (not repeating it), SYMMETRIC mirrors repeating it.")

function tensor.unstack(x, axis)
  check_tensor(x, "unstack")
  axis = axis_of(axis or 0, #x.shape, "tensor.unstack")
  local out = {}
  for i = 1, x.shape[axis + 1] do out[i] = x:slice(axis, i - 1, i):squeeze(axis) end
  return out
end
doc(tensor.unstack, "tensor.unstack", "tensor.unstack(x [, axis=0]) -> {t1, t2, ...}\n\nTF's unstack: the slices along axis, that axis removed (tensor.stack's inverse).")

function tensor.meshgrid(...)
  local xs, opts = { ... }, {}
  if #xs > 0 and not tensor.is_tensor(xs[#xs]) then opts = table.remove(xs) end
  opts = ldist._util.check_opts("tensor.meshgrid", opts, { indexing = true })
  local ij = (opts.indexing or "xy") == "ij"
  if not ij and opts.indexing ~= nil and opts.indexing ~= "xy" then
    error(("tensor.meshgrid: indexing must be \"xy\" or \"ij\", got %s"):format(tostring(opts.indexing)), 2)
  end
  local n, sizes = #xs, {}
  for k, x in ipairs(xs) do
    check_tensor(x, "meshgrid", tostring(k))
    if #x.shape ~= 1 then error(("tensor.meshgrid: input %d must be 1-D, got %d axes"):format(k, #x.shape), 2) end
    sizes[k] = x.shape[1]
  end
  -- xy (Cartesian): the first two outputs' axes swapped, as NumPy's and TF's
  local order = {}
  for k = 1, n do order[k] = k end
  if not ij and n >= 2 then order[1], order[2] = 2, 1 end
  local shape = {}
  for k = 1, n do shape[k] = sizes[order[k]] end
  local out = {}
  for k, x in ipairs(xs) do
    local s = {}
    for j = 1, n do s[j] = order[j] == k and sizes[k] or 1 end
    out[k] = tensor.broadcast_to(x:reshape(s), shape)
  end
  return out
end
doc(tensor.meshgrid, "tensor.meshgrid",
  "tensor.meshgrid(x1, x2, ... [, {indexing=\"xy\"}]) -> {X1, X2, ...}\n\nTF's meshgrid: each 1-D input spread over the grid of all of them; \"xy\" (Cartesian,\n" ..
  "the default) swaps the first two axes, \"ij\" (matrix) does not.")

---------------------------------------------------------------- norms, constants
function tensor.norm(x, opts)
  check_tensor(x, "norm")
  opts = ldist._util.check_opts("tensor.norm", opts, { ord = true, axis = true, keepdims = true })
  local ord, axis = opts.ord or "euclidean", opts.axis
  local r = { keepdims = opts.keepdims or false }
  if axis ~= nil then
    if type(axis) == "table" then
      if #axis ~= 2 then error("tensor.norm: axis must be one axis or a pair (a matrix norm)", 2) end
      if ord ~= "euclidean" and ord ~= "fro" then
        error("tensor.norm: over a pair of axes only ord = \"euclidean\" (\"fro\") is supported", 2)
      end
    end
    r.axis = axis
  end
  if ord == "euclidean" or ord == "fro" or ord == 2 then
    if ord == 2 and type(axis) == "table" then error("tensor.norm: ord 2 over a pair of axes (the spectral norm) is not supported", 2) end
    return (x * x):sum(r):sqrt()
  elseif ord == 1 then return x:abs():sum(r)
  elseif ord == math.huge then return x:abs():max(r)
  end
  error(("tensor.norm: ord must be \"euclidean\", \"fro\", 1, 2 or math.huge, got %s"):format(tostring(ord)), 2)
end
doc(tensor.norm, "tensor.norm",
  "tensor.norm(x, {ord=\"euclidean\", axis=nil, keepdims=false})\n\nTF's norm: of all values (axis nil), of the vectors along an axis, or (\"euclidean\")\n" ..
  "of the matrices on a pair of axes; ord \"euclidean\"/2, 1 or math.huge (the largest magnitude).")

function tensor.eye(n, m, opts)
  if type(m) == "table" then m, opts = nil, m end
  count(n, "tensor.eye", "num_rows")
  m = count(m or n, "tensor.eye", "num_columns")
  opts = opts or {}
  local i, j = grid(n, m)
  local e = i:eq(j):astype(opts.dtype or "float32")
  return opts.device and e:to(opts.device) or e
end
doc(tensor.eye, "tensor.eye", "tensor.eye(n [, m], {dtype=\"float32\", device=})\n\nTF's eye: the n x m identity (ones on the diagonal).")

local function f32(v) return (string.unpack("f", string.pack("f", v))) end
function tensor.linspace(start, stop, num, opts)
  if type(start) ~= "number" or type(stop) ~= "number" then error("tensor.linspace: start and stop must be numbers", 2) end
  count(num, "tensor.linspace", "num")
  -- TF's kernel in float32: start + i * step, step = (stop - start) / (num - 1), the last value stop itself
  local a, b, v = f32(start), f32(stop), {}
  local step = num > 1 and f32(f32(b - a) / (num - 1)) or 0
  for i = 0, num - 1 do v[i + 1] = i == num - 1 and num > 1 and b or f32(a + f32(step * i)) end
  opts = opts or {}
  return tensor.new(#v > 0 and v or tensor.zeros(0), { dtype = "float32", device = opts.device })
end
doc(tensor.linspace, "tensor.linspace", "tensor.linspace(start, stop, num, {device=})\n\nTF's linspace: num float32 values from start to stop, evenly spaced (both ends included).")
