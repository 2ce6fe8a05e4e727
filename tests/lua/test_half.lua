-- test_half.lua - float16 and bfloat16 tensors (issue 30, items 1 and 4):
-- creation, casts rounded as NumPy/torch round them, printing, safetensors
-- F16/BF16 against files written by PyTorch's safetensors, ops computed in
-- float32 and compared with the float32 result.
-- Fixtures: scripts/fixtures/make_half_fixtures.py (numbers below, and
-- tests/fixtures/half/torch_half.safetensors).
local T = dofile("tests/lua/testlib.lua")
local lio = ldist.io

local VALS = { 1.0, 2.5, -3.1, 65504.0, 65519.0, 65520.0, 1e-8, 3e-8, 6e-8, 1e-5, 0.1, 1 / 3, 1e30,
               -0.0, 2049.0, 2051.0, 1.00048828125, 1.0009765625 }
-- float32 -> float16 bits by NumPy's astype, -> bfloat16 bits by torch's .to(bfloat16)
local F16_BITS = { 15360, 16640, 49715, 31743, 31743, 31744, 0, 1, 1, 168, 11878, 13653, 31744, 32768, 26624,
                   26626, 15360, 15361 }
local BF16_BITS = { 16256, 16416, 49222, 18304, 18304, 18304, 12844, 13057, 13185, 14120, 15821, 16043, 29002,
                    32768, 17664, 17664, 16256, 16256 }

local function tmpname(ext) return os.tmpname() .. ext end

-- the data section of a safetensors file holding one tensor, as uint16s
local function file_u16(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("a"); f:close()
  local hlen = string.unpack("<I8", s)
  local out, pos = {}, 9 + hlen
  while pos + 1 <= #s do out[#out + 1] = string.unpack("<I2", s, pos); pos = pos + 2 end
  return out, s:sub(9, 8 + hlen)
end

local function max_rel_diff(a, b)   -- max |a - b| / max |b| over two tensors of one shape
  local fa = a:astype("float32"):reshape { a:numel() }:totable()
  local fb = b:astype("float32"):reshape { b:numel() }:totable()
  local d, m = 0, 0
  for i = 1, #fa do d = math.max(d, math.abs(fa[i] - fb[i])); m = math.max(m, math.abs(fb[i])) end
  return d / math.max(m, 1e-30)
end

for _, case in ipairs { { "float16", "F16", F16_BITS }, { "bfloat16", "BF16", BF16_BITS } } do
  local dt, file_dt, bits = case[1], case[2], case[3]

  T.test(dt .. ": float32 -> " .. dt .. " rounds to nearest even, as NumPy/torch (bits written to safetensors)", function()
    local x = tensor.new(VALS):astype(dt)
    T.eq(x.dtype, dt)
    local p = tmpname(".safetensors")
    lio.save_safetensors(p, { x = x })
    local got, header = file_u16(p)
    os.remove(p)
    T.ok(header:find('"dtype":"' .. file_dt .. '"', 1, true), header)
    T.eq(#got, #bits)
    for i = 1, #bits do T.eq(got[i], bits[i], ("element %d (%.9g)"):format(i, VALS[i])) end
  end)

  T.test(dt .. ": creation with {dtype=}, values back in float32 exactly", function()
    local x = tensor.new({ 0.5, -2, 3 }, { dtype = dt })
    T.eq(x.dtype, dt)
    T.eq(x[0], 0.5); T.eq(x[1], -2); T.eq(x[2], 3)   -- 0-based, as TF
    T.eq(tensor.zeros({ 2, 2 }, { dtype = dt }).dtype, dt)
    local f = tensor.full({ 3 }, 0.1, { dtype = dt })
    T.eq(f.dtype, dt)
    T.eq(f[0], tensor.new({ 0.1 }):astype(dt):astype("float32")[0])
    T.eq(x:astype("float32").dtype, "float32")
    T.eq(x:astype("int32")[1], -2)
    T.eq(tensor.new({ 7 }, { dtype = "int64" }):astype(dt)[0], 7)
  end)

  T.test(dt .. ": printing names the dtype and shows the stored value", function()
    local s = tostring(tensor.new({ 1, 2.5, -3.1 }, { dtype = dt }))
    T.ok(s:find("dtype=" .. dt, 1, true), s)
    T.ok(s:find(dt == "float16" and "-3.0996" or "-3.0938", 1, true), s)
    T.ok(tostring(tensor.new({ 1e6 }, { dtype = dt })):find(dt == "float16" and "inf" or "999424", 1, true))
  end)

  T.test(dt .. ": safetensors round trip keeps dtype and bits", function()
    local x = tensor.new({ { 1.5, -0.25, 3.1 }, { 1e-3, 100, -7 } }, { dtype = dt })
    local p = tmpname(".safetensors")
    lio.save_safetensors(p, { x = x })
    local t = lio.load_safetensors(p)
    os.remove(p)
    T.eq(t.x.dtype, dt)
    T.eq(t.x.shape[1], 2); T.eq(t.x.shape[2], 3)
    T.eq(max_rel_diff(t.x, x), 0)
  end)
end

T.test("safetensors F16/BF16 written by PyTorch load with their dtype and values", function()
  local t = lio.load_safetensors("tests/fixtures/half/torch_half.safetensors")
  T.eq(t.h.dtype, "float16"); T.eq(t.b.dtype, "bfloat16")
  T.eq(max_rel_diff(t.h, t.h_f32), 0, "float16 widened as torch widens it")
  T.eq(max_rel_diff(t.b, t.b_f32), 0, "bfloat16 widened as torch widens it")
  -- torch's float32 product of the same bfloat16 operands, within one bfloat16 ulp
  local c, e = t.a:matmul(t.w):astype("float32"):reshape { 12 }:totable(), t.aw_f32:reshape { 12 }:totable()
  for i = 1, 12 do T.ok(math.abs(c[i] - e[i]) <= 2 ^ -7 * math.abs(e[i]), ("a @ w element %d: %.9g vs %.9g"):format(i, c[i], e[i])) end
end)

-- Python's safetensors (the Rust parser, through safetensors.deserialize) reads
-- what ldist writes; numpy widens the 16-bit words (bfloat16: shifted into a
-- float32). Where python3 lacks safetensors/numpy (make setup) the case says so.
T.test("Python's safetensors reads ldist's F16/BF16 file: NumPy's float16 and torch-style bfloat16 values", function()
  if not os.execute("python3 -c 'import safetensors, numpy' >/dev/null 2>&1") then
    print("# skip: python3 lacks safetensors/numpy (make setup)"); return
  end
  local x = tensor.new(VALS)
  local p = tmpname(".safetensors")
  lio.save_safetensors(p, { h = x:astype("float16"), b = x:astype("bfloat16"), f = x })
  local py = [[
import sys, numpy as np, safetensors
got = {n: d for n, d in safetensors.deserialize(open(sys.argv[1], 'rb').read())}
assert got['h']['dtype'] == 'F16' and got['b']['dtype'] == 'BF16', got
f = np.frombuffer(bytes(got['f']['data']), '<f4')
h = np.frombuffer(bytes(got['h']['data']), '<f2')
with np.errstate(over='ignore'):
    assert np.array_equal(h, f.astype(np.float16), equal_nan=True), (h, f.astype(np.float16))
b = (np.frombuffer(bytes(got['b']['data']), '<u2').astype(np.uint32) << 16).view(np.float32)
u = f.view(np.uint32).astype(np.uint64)
ref = (((u + 0x7fff + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)  # round to nearest even
assert np.array_equal(b, ref), (b, ref)
print('python ok')
]]
  local script = os.tmpname()
  local f = assert(io.open(script, "w")); f:write(py); f:close()
  local pr = io.popen(("python3 %s %s 2>&1"):format(script, p))
  local out = pr:read("a"); pr:close()
  os.remove(script); os.remove(p)
  T.ok(out:find("python ok", 1, true), out)
end)

T.test("float16 and bfloat16 values compare with float32 within their precision", function()
  local x = tensor.new({ 0.1, 1 / 3, 123.456, -7.77, 1e-3 })
  for dt, eps in pairs { float16 = 2 ^ -11, bfloat16 = 2 ^ -8 } do
    local h = x:astype(dt):astype("float32")
    for i = 0, 4 do T.near(h[i], x[i], eps, dt) end
  end
end)

T.test("data.load_idx{dtype=\"bfloat16\"} reads images into bfloat16 (Fashion-MNIST test set)", function()
  local p = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz"
  if not io.open(p) then print("# skip: " .. p .. " is missing (dataset-fashion-mnist)"); return end
  local b, f = data.load_idx(p, { dtype = "bfloat16", scale = 1 / 255 }), data.load_idx(p, { dtype = "float32", scale = 1 / 255 })
  T.eq(b.dtype, "bfloat16")
  T.eq(max_rel_diff(b:slice(0, 0, 100), f:slice(0, 0, 100):astype("bfloat16")), 0)
end)

T.test("bad dtype names list the half dtypes", function()
  T.raises(function() return tensor.new({ 1 }):astype("float8") end, "float16, bfloat16")
end)

T.test("model:save_weights{dtype=} writes a half checkpoint; load_weights reads it into float32", function()
  local m = nn.Sequential { nn.Dense(4), nn.Dense(2) }
  m:build({ 3, 5 })
  for _, dt in ipairs { "bfloat16", "float16" } do
    local p = tmpname(".safetensors")
    m:save_weights(p, { dtype = dt })
    local raw = lio.load_safetensors(p)
    for _, v in pairs(raw) do T.eq(v.dtype, dt) end
    local m2 = nn.Sequential { nn.Dense(4), nn.Dense(2) }
    m2:build({ 3, 5 })
    m2:load_weights(p)
    os.remove(p)
    local w1, w2 = m:get_weights(), m2:get_weights()
    for i = 1, #w1 do
      T.eq(w2[i].dtype, "float32")
      T.ok(max_rel_diff(w2[i], w1[i]) <= (dt == "float16" and 2 ^ -11 or 2 ^ -8), dt .. " weight " .. i)
    end
  end
  T.raises(function() m:save_weights(os.tmpname(), { dtype = "int32" }) end, "float32, float16 or bfloat16")
end)

-- Gradients: astype between float dtypes is recorded, and each op on half
-- tensors is recorded on its float32 result, so a float32 variable's gradient
-- through bfloat16/float16 ops is the float32 one up to the half rounding.
T.test("gradients flow through astype and ops on half tensors (matmul, elementwise, softmax, sum)", function()
  tensor.seed(3)
  local w0, x0 = tensor.normal(6, 4), tensor.normal(5, 6)
  local function grad(dt)
    local w = tensor.Variable(w0)
    local tape = autograd.GradientTape()
    local y = tape:record(function()
      local x, wc = x0:astype(dt), w:astype(dt)
      local h = (x:matmul(wc) * 0.5):tanh()
      return (h:softmax() * h):sum()
    end)
    T.eq(y.dtype, dt)
    local g = tape:gradient(y, w)
    return g, y
  end
  local g32 = grad("float32")
  for dt, tol in pairs { float16 = 2e-3, bfloat16 = 2e-2 } do
    local g = grad(dt)
    T.eq(g.dtype, "float32", "a float32 variable's gradient stays float32")
    T.ok(max_rel_diff(g, g32) <= tol, ("%s gradient against float32: %.3g above %g"):format(dt, max_rel_diff(g, g32), tol))
    T.ok(max_rel_diff(g, g32) > 0, dt .. " gradient computed through the half path")
  end
  -- a half tensor's own gradient is half, as Keras's
  local xh = tensor.new({ 1, 2, 3 }):astype("bfloat16")
  local v = tensor.Variable(tensor.new({ 1, 2, 3 }))
  local tape = autograd.GradientTape()
  local y = tape:record(function() return (v:astype("bfloat16") * xh):sum() end)
  local g = tape:gradient(y, v)
  T.eq(max_rel_diff(g, tensor.new({ 1, 2, 3 })), 0)
end)

-- ---------------------------------------------------------------- item 4: bfloat16 products on the CPU
-- A bfloat16 matmul runs on vdpbf16ps where the processor has AVX512_BF16
-- (CPUID), float32 sums; LDIST_NO_AVX512_BF16=1 forces the plain path (the
-- operands widened to float32, sgemm). Both round the float32 result once.
local BIN = os.getenv("LDIST_BIN") or "./ldist"

local function cpu_has_bf16()
  local f = io.open("/proc/cpuinfo")
  if not f then return false end
  local s = f:read("a"); f:close()
  return s:find("avx512_bf16", 1, true) ~= nil
end

-- the product of seeded normal matrices in bfloat16 (and float32), from a child ldist with env
local function child_product(env, path)
  local script = os.tmpname()
  local f = assert(io.open(script, "w"))
  f:write(([[
tensor.seed(7)
local a, b = tensor.normal(67, 256), tensor.normal(256, 45)
local c = a:astype("bfloat16"):matmul(b:astype("bfloat16"))
local cb = a:astype("bfloat16").T:contiguous().T:matmul(b:astype("bfloat16").T:contiguous().T)
-- A read in place (not transposed, even k) above; packed: an odd k, and A a
-- slice of a wider matrix starting one value in (a row stride of 300, an
-- address 2 bytes off the pairs' alignment)
local wide = tensor.normal(67, 300)
local ao = wide:astype("bfloat16"):slice(1, 1, 256)
local bo = b:slice(0, 0, 255):astype("bfloat16")
local function exact(x, y) return x:astype("float32"):matmul(y:astype("float32")) end
ldist.io.save_safetensors(%q, { c = c, ct = cb, f32 = a:matmul(b), exact = exact(a:astype("bfloat16"), b:astype("bfloat16")),
  codd = ao:matmul(bo), codd_exact = exact(ao, bo),
  cslice = wide:astype("bfloat16"):slice(1, 1, 257):matmul(b:astype("bfloat16")),
  cslice_exact = exact(wide:astype("bfloat16"):slice(1, 1, 257), b:astype("bfloat16")) })
print(ldist.config.cpu_split().bf16_gemm)
]]):format(path))
  f:close()
  local p = io.popen(("%s %s %s 2>&1"):format(env, BIN, script))
  local out = p:read("a"); p:close()
  os.remove(script)
  return out:match("^(%S+)"), lio.load_safetensors(path)
end

T.test("bfloat16 matmul: vdpbf16ps chosen by CPUID, LDIST_NO_AVX512_BF16=1 forces float32; results agree", function()
  local p1, p2 = tmpname(".safetensors"), tmpname(".safetensors")
  local fast_path, fast = child_product("", p1)
  local plain_path, plain = child_product("LDIST_NO_AVX512_BF16=1", p2)
  os.remove(p1); os.remove(p2)
  T.eq(fast_path, cpu_has_bf16() and "avx512_bf16" or "float32", "path chosen on this processor")
  T.eq(plain_path, "float32", "path with LDIST_NO_AVX512_BF16=1")
  for _, r in ipairs({ fast, plain }) do
    T.eq(r.c.dtype, "bfloat16")
    -- float32 sums of the same bfloat16 operands, rounded once: within one
    -- bfloat16 ulp (2^-7 relative) of the float32 product of those operands
    local c, e = r.c:astype("float32"):reshape { 67 * 45 }:totable(), r.exact:reshape { 67 * 45 }:totable()
    local ct = r.ct:astype("float32"):reshape { 67 * 45 }:totable()
    for i = 1, #c do
      T.ok(math.abs(c[i] - e[i]) <= 2 ^ -7 * math.abs(e[i]) + 1e-6, ("element %d: %.9g vs %.9g"):format(i, c[i], e[i]))
      T.ok(math.abs(ct[i] - e[i]) <= 2 ^ -7 * math.abs(e[i]) + 1e-6, ("transposed, element %d"):format(i))
    end
    for _, name in ipairs({ "codd", "cslice" }) do
      local x, y = r[name]:astype("float32"):reshape { 67 * 45 }:totable(), r[name .. "_exact"]:reshape { 67 * 45 }:totable()
      local bad = 0
      for i = 1, #x do if not (math.abs(x[i] - y[i]) <= 2 ^ -7 * math.abs(y[i]) + 1e-6) then bad = bad + 1 end end
      T.eq(bad, 0, name .. ": values more than one bfloat16 step from the float32 sums")
    end
    -- against the float32 product of the unrounded operands: the operands'
    -- rounding (2^-9 relative each) dominates, ||C_bf16 - C_f32|| / ||C_f32|| <= 1e-2
    T.ok(max_rel_diff(r.c, r.f32) <= 1e-2, "against float32: " .. max_rel_diff(r.c, r.f32))
  end
  T.ok(max_rel_diff(fast.c, plain.c) <= 2 ^ -7, "the two paths agree within one bfloat16 ulp")
end)

-- An elementwise op on half tensors computes in float32 and rounds once: its
-- bits are those of the float32 op on the widened operands, rounded. Checked
-- on every layout the CPU kernel walks (rows longer than its 512-element
-- blocks, a broadcast row, a broadcast column, a transposed operand, a
-- scalar, three axes with a middle broadcast), for every binary op.
T.test("half elementwise ops: the float32 op's result rounded once, bit for bit, on every layout", function()
  tensor.seed(7)
  local function bits(t) return t:astype("float32"):reshape { t:numel() }:totable() end
  local layouts = {
    { "rows of 1100", function(dt) return tensor.normal(3, 1100):astype(dt), tensor.normal(3, 1100):astype(dt) end },
    { "a broadcast row", function(dt) return tensor.normal(4, 1030):astype(dt), tensor.normal(1030):astype(dt) end },
    { "a broadcast column", function(dt) return tensor.normal(700, 3):astype(dt), tensor.normal(700, 1):astype(dt) end },
    { "a transposed operand", function(dt) return tensor.normal(600, 5):astype(dt).T, tensor.normal(5, 600):astype(dt) end },
    { "a scalar", function(dt) return tensor.normal(2, 900):astype(dt), tensor.new({ 1.7 }, { dtype = dt }) end },
    { "a middle broadcast", function(dt) return tensor.normal(2, 3, 600):astype(dt), tensor.normal(2, 1, 600):astype(dt) end },
  }
  local n = 0
  for _, dt in ipairs { "float16", "bfloat16" } do
    for _, lay in ipairs(layouts) do
      local a, b = lay[2](dt)
      b = b + 0.5 * (b:astype("float32"):abs():astype(dt))   -- keep divisors away from 0 where it matters little
      for _, op in ipairs(tensor.binary_ops) do
        local ok, got = pcall(function() return a[op](a, b) end)
        if ok then
          T.eq(got.dtype, dt, op .. " keeps " .. dt)
          local want = a:astype("float32")[op](a:astype("float32"), b:astype("float32")):astype(dt)
          local g, w = bits(got), bits(want)
          T.eq(#g, #w, op .. " " .. lay[1] .. ": size")
          for i = 1, #w do
            if not (g[i] == w[i] or (g[i] ~= g[i] and w[i] ~= w[i])) then
              error(("%s %s %s, element %d: %.9g, the float32 op rounded once gives %.9g"):format(dt, op, lay[1], i, g[i], w[i]))
            end
          end
          n = n + 1
        end
      end
    end
  end
  T.ok(n >= 2 * #layouts * 4, "ops checked: " .. n)
end)

T.done()
