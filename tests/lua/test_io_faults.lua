-- test_io_faults.lua - model:save_weights / model:load_weights, ldist.io and
-- data.load_idx against hostile files: a header that would make load_weights
-- allocate gigabytes, tensors of another dtype, a link planted at the
-- temporary name, overflowing shapes, a NaN scale.
local T = dofile("tests/lua/testlib.lua")
local L = ldist or package.loaded.ldist
local lio = L.io

local DIR, tpath = T.tmpdir()

local peak_kib = T.peak_kib

-- A safetensors file: the JSON header (padded to 8 bytes), then `data` (a
-- string, or {bytes = n} for n zero bytes written in 1 MiB pieces).
local function write_st(path, header, data)
  header = header .. string.rep(" ", (8 - #header % 8) % 8)
  local f = assert(io.open(path, "wb"))
  f:write(string.pack("<I8", #header), header)
  if type(data) == "string" then f:write(data)
  else
    local mib = string.rep("\0", 1 << 20)
    for _ = 1, data.bytes >> 20 do f:write(mib) end
    f:write(string.rep("\0", data.bytes & ((1 << 20) - 1)))
  end
  f:close()
end

local function read_all(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

-- A built Dense(2) on 1 input: kernel [1, 2] and bias [2], both float32.
local function small_model()
  local m = nn.Sequential{nn.Dense(2)}
  m:build{1}
  return m
end

-- The memory checks come first, while the process's peak is still low.
-- load a crafted header into a small model: the peak RSS must stay under
-- limit_kib, and the error must contain `want`
local function refused_before_reading(name, header, bytes, limit_kib, want)
  local p = tpath(name)
  write_st(p, header, {bytes = bytes})
  local m = small_model()
  collectgarbage()
  local before = peak_kib()
  local ok, err = pcall(m.load_weights, m, p)
  local grew = peak_kib() - before
  print(("# peak RSS grew by %d KiB"):format(grew))
  T.ok(grew < limit_kib, ("peak RSS grew by %d KiB reading %s"):format(grew, name))
  T.ok(not ok and err:find(want, 1, true), "the error names the problem: " .. tostring(err))
  os.remove(p)
end

T.test("load_weights checks the entry count against the model before reading any data", function()
  local parts = {}
  for i = 0, 63 do   -- 64 valid tensors of 1 MiB
    parts[#parts + 1] = ('"%d/w":{"dtype":"F32","shape":[262144],"data_offsets":[%d,%d]}'):format(i, i << 20, (i + 1) << 20)
  end
  refused_before_reading("count.safetensors", "{" .. table.concat(parts, ",") .. "}", 64 << 20, 32 * 1024,
    "holds 64 tensors, the model has 2 weights")
end)

T.test("load_weights refuses 3000 entries on the same 1 MiB before any large allocation", function()
  local parts = {}
  for i = 0, 2999 do
    parts[#parts + 1] = ('"%d/w":{"dtype":"F32","shape":[262144],"data_offsets":[0,1048576]}'):format(i)
  end
  refused_before_reading("overlap.safetensors", "{" .. table.concat(parts, ",") .. "}", 1 << 20, 64 * 1024,
    "overlap in the data section")
end)

-- kernel [1, 2] as dtype `kd` with bytes `kb`, bias [2] F32 {0, 0}
local function weights_file(name, kd, kb, bd, bb)
  local p = tpath(name)
  local kn = #kb
  write_st(p, ('{"0/dense/kernel":{"dtype":"%s","shape":[1,2],"data_offsets":[0,%d]},'
               .. '"1/dense/bias":{"dtype":"%s","shape":[2],"data_offsets":[%d,%d]}}'):format(kd, kn, bd, kn, kn + #bb),
           kb .. bb)
  return p
end
local F32_BIAS = string.pack("<ff", 0, 0)

T.test("load_weights refuses a dtype that differs from the variable's, naming both", function()
  local m = small_model()
  local cases = {
    {"I64", string.pack("<i8i8", 1, 2), "is I64 in"},
    {"BOOL", string.pack("<BB", 1, 0), "is BOOL in"},
    {"F64", string.pack("<dd", 1, 2), "is F64 in"},
    {"I32", string.pack("<i4i4", 1, 2), "is I32 in"},
  }
  for _, c in ipairs(cases) do
    local p = weights_file("dt.safetensors", c[1], c[2], "F32", F32_BIAS)
    local err = T.raises(function() m:load_weights(p) end, c[3])
    T.ok(err:find("float32", 1, true), "the message names the variable's dtype: " .. err)
    T.ok(err:find("weight 0", 1, true), "the message names the weight: " .. err)
  end
  -- nothing was written: the kernel keeps its values
  T.ok(m.trainable_variables[1]:abs():sum():item() > 0)
end)

T.test("load_weights converts F16 and BF16 files into float32 variables (known values)", function()
  local m = small_model()
  -- F16 1.5 = 0x3E00, -2 = 0xC000; BF16 0.5 = 0x3F00, -3 = 0xC040
  local p = weights_file("half.safetensors", "F16", string.pack("<I2I2", 0x3E00, 0xC000), "BF16", string.pack("<I2I2", 0x3F00, 0xC040))
  m:load_weights(p)
  local k, b = m.trainable_variables[1]:totable(), m.trainable_variables[2]:totable()
  T.eq(k[1][1], 1.5); T.eq(k[1][2], -2)
  T.eq(b[1], 0.5); T.eq(b[2], -3)
  T.eq(m.trainable_variables[1].dtype, "float32")
  local y = m(tensor.new{{2}}):totable()
  T.eq(y[1][1], 3.5); T.eq(y[1][2], -7)
end)

T.test("load_weights names a tensor that is no weight of the model", function()
  local m = small_model()
  local p = tpath("names.safetensors")
  write_st(p, '{"0/k":{"dtype":"F32","shape":[1,2],"data_offsets":[0,8]},"kernel":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}',
           string.rep("\0", 16))
  T.raises(function() m:load_weights(p) end, "tensor 'kernel' is no weight of the model")
  write_st(p, '{"0/k":{"dtype":"F32","shape":[1,2],"data_offsets":[0,8]},"0/b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}',
           string.rep("\0", 16))
  T.raises(function() m:load_weights(p) end, "holds two tensors for weight 0")
  os.remove(p)
end)

T.test("save_weights does not follow a link planted at PATH.tmp", function()
  local m = small_model()
  local victim, p = tpath("victim.txt"), tpath("ck.safetensors")
  local f = assert(io.open(victim, "w")); f:write("precious\n"); f:close()
  assert(os.execute(("ln -s '%s' '%s.tmp'"):format(victim, p)))
  m:save_weights(p)
  T.eq(read_all(victim), "precious\n")
  local m2 = small_model()
  m2:load_weights(p)
  T.eq((m2.trainable_variables[1] - m.trainable_variables[1]):abs():max():item(), 0)
end)

T.test("ldist.io.load_safetensors refuses a shape whose size overflows", function()
  local p = tpath("shape.safetensors")
  write_st(p, '{"a":{"dtype":"F32","shape":[0,9007199254740992,9007199254740992],"data_offsets":[0,0]}}', "")
  T.raises(function() lio.load_safetensors(p) end, "whose size overflows")
  os.remove(p)
end)

T.test("data.load_idx refuses a NaN or infinite scale", function()
  local p = tpath("s.idx")
  local f = assert(io.open(p, "wb")); f:write(string.char(0, 0, 8, 1, 0, 0, 0, 3, 1, 2, 255)); f:close()
  T.raises(function() data.load_idx(p, {dtype = "int64", scale = 0 / 0}) end, "scale must be a finite number")
  T.raises(function() data.load_idx(p, {dtype = "int32", scale = math.huge}) end, "scale must be a finite number")
  T.eq(data.load_idx(p, {dtype = "int64", scale = 2}):totable()[3], 510)
end)

os.execute("rm -rf '" .. DIR .. "'")
T.done()
