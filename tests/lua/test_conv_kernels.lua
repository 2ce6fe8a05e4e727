-- tests/lua/test_conv_kernels.lua - the CPU's direct convolution
-- (engine/ld_cpu_conv.c: tiles of pixels x 16-wide filter vectors, weights
-- packed in chunks of 64, or 8-wide vectors in chunks of 32 in the AVX2 copy
-- that LDIST_CPU_ISA=avx2 runs below; zero-padded images for "same") against the
-- im2col + gemm lowering it replaced, which stays the path of other backends
-- and is chosen on the CPU by LDIST_CONV_REFERENCE=1. Over the blocking
-- edges: channels 1, 3, odd and more than one chunk of 64; filters below,
-- at and above a vector and a chunk; odd sizes, strides, "same"/"valid",
-- kernels larger than the image, batch 1 and batches that do not split
-- evenly over the thread pool; with and without bias, relu, tanh, linear.
-- Outputs and the gradients of input, kernel and bias must agree within
-- 1e-4 of the tensor's scale.
--
-- ldist tests/lua/test_conv_kernels.lua            runs the check: it starts
--   itself with LDIST_CONV_REFERENCE=1 and "dump DIR" for the reference, on
--   one thread (so the splits over the thread pool are checked too)
local T = dofile("tests/lua/testlib.lua")
local mode, dir = arg[1], arg[2]

-- name, batch, height, width, channels, filters, kernel, strides, padding, activation, bias
local cases = {
  { "first layer: 1 channel, 32 filters, relu (the bench)", 3, 28, 28, 1, 32, 3, 1, "valid", "relu", true },
  { "32 -> 64 channels, relu, 13x13 (the bench's second)", 5, 13, 13, 32, 64, 3, 1, "valid", "relu", true },
  { "batch 1, 3 channels, 5 filters, same", 1, 7, 6, 3, 5, 3, 1, "same", "linear", true },
  { "odd channels 7, 17 filters, kernel 4x2, same, stride 2", 3, 11, 9, 7, 17, { 4, 2 }, 2, "same", "relu", true },
  { "70 channels and 70 filters (two chunks each), stride 2, same", 2, 6, 5, 70, 70, 3, 2, "same", "relu", true },
  { "100 filters (a 36-wide tail chunk), 5 channels, 5x5 same", 3, 9, 9, 5, 100, 5, 1, "same", "tanh", true },
  { "1x1 kernel, 16 -> 16", 4, 5, 7, 16, 16, 1, 1, "valid", "relu", true },
  { "strides 2x3, valid, odd sizes, no bias", 3, 11, 10, 4, 9, 3, { 2, 3 }, "valid", "linear", false },
  { "kernel larger than the image (same)", 2, 3, 2, 2, 3, 5, 1, "same", "linear", true },
  { "fewer output pixels than a tile (2x2 out)", 5, 4, 4, 6, 48, 3, 1, "valid", "relu", true },
  { "overlapping windows: kernel 3 stride 1, 33 filters, 1 channel", 7, 10, 13, 1, 33, 3, 1, "same", "relu", false },
  { "16 filters exactly, 2 channels, stride 3 same", 2, 10, 10, 2, 16, { 3, 2 }, 3, "same", "relu", true },
  -- the layers of scripts/models/resnet.lua (no bias, linear: BN follows);
  -- stride 1 with at most 64 filters takes the gathered dx, the rest scatter
  { "resnet stem: 1 -> 16, 28x28 same", 3, 28, 28, 1, 16, 3, 1, "same", "linear", false },
  { "resnet 16 -> 16 stride 2 same, 28x28 -> 14x14", 3, 28, 28, 16, 16, 3, 2, "same", "linear", false },
  { "resnet 16 -> 16 same, 14x14 (gathered dx)", 3, 14, 14, 16, 16, 3, 1, "same", "linear", false },
  { "resnet shortcut 1x1 stride 2, 16 -> 32", 3, 14, 14, 16, 32, 1, 2, "same", "linear", false },
  { "resnet 16 -> 32 stride 2 same, 14x14 -> 7x7 (tiles of 7 pixels)", 3, 14, 14, 16, 32, 3, 2, "same", "linear", false },
  { "resnet 32 -> 32 same, 7x7 (gathered dx, tiles of 7)", 3, 7, 7, 32, 32, 3, 1, "same", "linear", false },
  { "resnet 32 -> 64 stride 2 same, 7x7 -> 4x4", 3, 7, 7, 32, 64, 3, 2, "same", "linear", false },
  { "resnet 64 -> 64 same, 4x4, batch 1", 1, 4, 4, 64, 64, 3, 1, "same", "linear", false },
  -- gathered dx over the blocking edges
  { "gathered dx: 20 -> 24 (partial vectors), odd 9x7, same, batch 1", 1, 9, 7, 20, 24, 3, 1, "same", "relu", true },
  { "gathered dx: 48 channels (3 vectors), 40 filters, valid 5x3 kernel", 3, 11, 8, 48, 40, { 5, 3 }, 1, "valid", "linear", true },
  { "gathered dx: 64 filters exactly, 70 channels (two chunks), same 5x5", 2, 6, 7, 70, 64, 5, 1, "same", "linear", false },
  { "gathered dx: 1x1 kernel, 17 -> 3, odd 5x5", 2, 5, 5, 17, 3, 1, 1, "valid", "relu", true },
  { "scattered dx: 65 filters (past a chunk), stride 1 same", 2, 5, 6, 16, 65, 3, 1, "same", "linear", true },
  { "9 rows of dw (one channel) then 18, 27: the short weight tiles", 2, 9, 9, 3, 16, 3, 1, "valid", "linear", true },
  { "32 filters, linear, bias: dy read in place as gm, db from it", 3, 6, 5, 3, 32, 3, 2, "same", "linear", true },
  { "64 filters, linear, bias, batch 1, gathered dx", 1, 5, 6, 16, 64, 3, 1, "same", "linear", true },
}

-- A Conv2D then a MaxPool2D in a Sequential: one op on the CPU (the
-- convolution pooled image by image, ld_conv2d_pool), two with the reference.
-- The name, then as above, then the pool size and strides.
local pooled = {
  { "pool 2 after a 1-channel conv, relu (the bench)", 3, 28, 28, 1, 32, 3, 1, "valid", "relu", true, 2, 2 },
  { "pool 2 after 32 -> 64, relu, odd 11x11 output (a row and column left over)", 5, 13, 13, 32, 64, 3, 1, "valid", "relu", true, 2, 2 },
  { "overlapping pool 3 stride 1, no activation, same", 2, 8, 7, 3, 20, 3, 1, "same", "linear", true, 3, 1 },
  { "overlapping pool 3 stride 2, relu, no bias, 70 filters", 3, 9, 10, 5, 70, 3, 1, "valid", "relu", false, 3, 2 },
  { "pool {2, 3} strides {1, 2} after a strided same conv, batch 1", 1, 12, 11, 7, 17, { 3, 2 }, 2, "same", "relu", true, { 2, 3 }, { 1, 2 } },
}
for _, p in ipairs(pooled) do p.pool = true; cases[#cases + 1] = p end
-- MaxPool2D alone (its backward split by image over the pool; the reference
-- runs single-threaded): batch, height, width, channels, pool, strides
cases[#cases + 1] = { "max pooling alone, split by image", 37, 26, 26, 32, pool_only = { 2, 2 } }
cases[#cases + 1] = { "max pooling alone, overlapping windows 3 stride 1", 9, 30, 31, 16, pool_only = { 3, 1 } }

local function run_case(i, cs)
  local _, n, h, w, c, f, k, s, pad, act, bias = table.unpack(cs)
  tensor.seed(100 + i)
  local x = tensor.normal(n, h, w, c)
  if cs.pool_only then
    local v = tensor.Variable(x)
    local layer = nn.MaxPool2D(cs.pool_only[1], { strides = cs.pool_only[2] })
    local tape = autograd.GradientTape()
    local y = tape:record(function() return layer(v) end)
    local up = tensor.normal(table.unpack(y.shape))
    local loss = tape:record(function() return (y * up):sum() end)
    return { y = y, g1 = tape:gradient(loss, { v })[1] }
  end
  local layer = nn.Conv2D(f, k, { strides = s, padding = pad, activation = act, use_bias = bias })
  layer(x)   -- builds the variables
  if cs.pool then
    local conv = layer
    layer = nn.Sequential { conv, nn.MaxPool2D(cs[12], { strides = cs[13] }) }
    layer(x)   -- builds the pooling: the next calls are fused
  end
  if bias then layer.trainable_variables[2]:assign(tensor.normal(f) * 0.5) end
  local v = tensor.Variable(x)
  local tape = autograd.GradientTape()
  local y = tape:record(function() return layer(v) end)
  local up = tensor.normal(table.unpack(y.shape))
  local loss = tape:record(function() return (y * up):sum() end)
  local vars = { v }
  for _, t in ipairs(layer.trainable_variables) do vars[#vars + 1] = t end
  local g = tape:gradient(loss, vars)
  local out = { y = y }
  for j = 1, #vars do out["g" .. j] = g[j] end
  return out
end

if mode == "dump" then
  for i, cs in ipairs(cases) do ldist.io.save_safetensors(("%s/case%d.safetensors"):format(dir, i), run_case(i, cs)) end
  os.exit(0)
end

local names = { y = "output", g1 = "input gradient", g2 = "kernel gradient", g3 = "bias gradient" }
local function compare(tmp, suffix)
for i, cs in ipairs(cases) do
  T.test(cs[1] .. suffix, function()
    local ref = ldist.io.load_safetensors(("%s/case%d.safetensors"):format(tmp, i))
    local got = run_case(i, cs)
    local n = 0
    for key, r in pairs(ref) do
      local a = got[key]
      T.ok(a, "missing " .. key)
      T.eq(table.concat(a.shape, "x"), table.concat(r.shape, "x"), names[key] .. " shape")
      local scale = math.max(1, r:abs():max():item())
      local err = (a - r):abs():max():item()
      T.ok(err <= 1e-4 * scale, ("%s: max difference %.3g (scale %.3g)"):format(names[key], err, scale))
      n = n + 1
    end
    T.eq(n, cs.pool_only and 2 or cs[11] and 4 or 3, "tensors compared")
  end)
end
end

-- check DIR: the comparisons in this process (started with LDIST_CPU_ISA=avx2)
if mode == "check" then
  compare(dir, (" (%s)"):format(ldist.config.cpu_split().isa))
  T.done()
end

local tmp = os.tmpname()
os.remove(tmp)
assert(os.execute("mkdir -p " .. tmp))
local bin = os.getenv("LDIST_BIN") or "./ldist"
T.test("the reference path (LDIST_CONV_REFERENCE=1) writes its results", function()
  local ok = os.execute(("LDIST_CONV_REFERENCE=1 LDIST_NUM_THREADS=1 %s %s dump %s"):format(bin, arg[0], tmp))
  T.ok(ok, "the reference run failed")
end)
local isa = ldist.config.cpu_split().isa
compare(tmp, (" (%s)"):format(isa))
-- what a processor without AVX-512 runs, where this one has it (ld_cpu_isa: a
-- process chooses once, so another process, forced with LDIST_CPU_ISA=avx2):
-- the AVX2 copy of the direct kernels (ld_cpu_conv_avx2.c); its kernel
-- profile shows they ran, not the im2col lowering
if isa == "avx512" then
  local p = io.popen(("LDIST_KERNEL_PROFILE=1 LDIST_CPU_ISA=avx2 %s %s check %s 2>&1"):format(bin, arg[0], tmp))
  local out = p:read("a")
  local ok = p:close()
  io.write((out:gsub("kernel profile.*$", "")))
  T.test("LDIST_CPU_ISA=avx2 (no AVX-512): the direct convolutions match the reference", function()
    T.ok(ok, "the AVX2 run failed")
    T.ok(out:find("(avx2)", 1, true), "the child did not run as avx2")
    T.ok(out:find("\n%s*conv2d_backward%s+%d+"), "the AVX2 run called no direct convolution backward:\n" .. out:sub(-1500))
    T.ok(not out:find("\n%s*im2col%s+%d+"), "the AVX2 run lowered convolutions to im2col:\n" .. out:sub(-1500))
  end)
end
os.execute("rm -rf " .. tmp)
T.done()
