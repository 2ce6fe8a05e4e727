-- test_small_files.lua - small files must not cost gigabytes (issue 27, item
-- 7): a model file whose architecture declares layers far larger than the
-- weights it holds is refused before the weights are built, and an image
-- whose header declares more pixels than ldist.io.max_image_pixels() is
-- refused before it is decoded, naming the file and the limit. Also bad
-- compile settings in a model file name the file (item 9).
local T = dofile("tests/lua/testlib.lua")
local L = ldist or package.loaded.ldist
local lio = L.io

local DIR, tpath = T.tmpdir()

local peak_kib = T.peak_kib
local function read_all(path)
  local f = assert(io.open(path, "rb")); local s = f:read("a"); f:close(); return s
end
local function write_all(path, s)
  local f = assert(io.open(path, "wb")); f:write(s); f:close()
end

-- fn must fail with every string of `wants` in its message, and the peak RSS
-- may grow by less than 64 MiB meanwhile
local function refused_small(fn, wants)
  collectgarbage()
  local before = peak_kib()
  local ok, err = pcall(fn)
  local grew = peak_kib() - before
  T.ok(not ok, "it was refused")
  for _, w in ipairs(wants) do T.ok(tostring(err):find(w, 1, true), ("the error names %s: %s"):format(w, tostring(err))) end
  T.ok(grew < 64 * 1024, ("peak RSS grew by %d KiB"):format(grew))
end

-- A model file saved from Dense(2) on 4 inputs, its metadata changed by `edit`.
local function model_file(name, edit)
  local p = tpath(name)
  local m = nn.Sequential{nn.Dense(2)}
  m:build{4}
  m:compile{optimizer = "adam", loss = "mse"}
  m:save(p)
  local t, meta = lio.load_safetensors(p)
  edit(meta)
  lio.save_safetensors(p, t, meta)
  return p
end

-- The memory checks first, while the process's peak is still low.
T.test("load_model refuses a small file declaring Dense(100000) on 4000 inputs before building it", function()
  local p = model_file("huge.model", function(meta)
    meta.model = meta.model:gsub('"build_input_shape":%[4%]', '"build_input_shape":[4000]'):gsub('"units":2', '"units":100000')
  end)
  T.ok(#read_all(p) < 4096, "the file is small")
  refused_small(function() nn.load_model(p) end, { p, "4000x100000", "bytes of weights" })
end)

-- CRC-32 (PNG chunks)
local crc_table = {}
for i = 0, 255 do
  local c = i
  for _ = 1, 8 do c = (c & 1) ~= 0 and (0xEDB88320 ~ (c >> 1)) or (c >> 1) end
  crc_table[i] = c
end
local function crc32(s)
  local c = 0xFFFFFFFF
  for i = 1, #s do c = crc_table[(c ~ s:byte(i)) & 0xFF] ~ (c >> 8) end
  return c ~ 0xFFFFFFFF
end

-- a real small image whose header then says w x h
local function bomb_png(name, w, h)
  local p = tpath(name)
  lio.save_image(p, tensor.zeros({8, 8, 3}, {dtype = "uint8"}))
  local s = read_all(p)
  local at = s:find("IHDR", 1, true)        -- length (4) before, data (13) and CRC (4) after
  local body = "IHDR" .. string.pack(">I4I4", w, h) .. s:sub(at + 12, at + 16)
  write_all(p, s:sub(1, at - 1) .. body .. string.pack(">I4", crc32(body)) .. s:sub(at + 21))
  return p
end
local function bomb_jpeg(name, w, h)
  local p = tpath(name)
  lio.save_image(p, tensor.zeros({8, 8, 3}, {dtype = "uint8"}))
  local s = read_all(p)
  local at = s:find("\xFF\xC0", 1, true)    -- SOF0: FF C0, length (2), precision (1), height (2), width (2)
  write_all(p, s:sub(1, at + 4) .. string.pack(">I2I2", h, w) .. s:sub(at + 9))
  return p
end

T.test("a 20000x20000 PNG is refused before it is decoded, naming the file and the limit", function()
  local p = bomb_png("bomb.png", 20000, 20000)
  T.ok(#read_all(p) < 4096)
  refused_small(function() lio.load_image(p) end, { p, "400000000 pixels", "89478485", "max_image_pixels" })
end)

T.test("a 20000x20000 JPEG is refused before it is decoded, naming the file and the limit", function()
  local p = bomb_jpeg("bomb.jpg", 20000, 20000)
  refused_small(function() lio.load_image(p) end, { p, "400000000 pixels", "89478485" })
end)

T.test("image_dataset_from_directory refuses the bomb too", function()
  local dir = tpath("imgs")
  assert(os.execute("mkdir -p '" .. dir .. "/a'"))
  lio.save_image(dir .. "/a/ok.png", tensor.zeros({8, 8, 3}, {dtype = "uint8"}))
  local b = bomb_png("b2.png", 20000, 20000)
  assert(os.execute(("mv '%s' '%s/a/bomb.png'"):format(b, dir)))
  local ds = data.image_dataset_from_directory(dir, {image_size = {8, 8}, batch_size = 2, verbose = false})
  refused_small(function() for _ in ds do end end, { "bomb.png", "max_image_pixels" })
end)

T.test("ldist.io.max_image_pixels raises the limit, and says what it was", function()
  local p = bomb_png("wide.png", 300, 200)    -- 60000 pixels; its data is for 8x8, so decoding fails later
  T.eq(lio.max_image_pixels(), 89478485)
  T.eq(lio.max_image_pixels(1000), 89478485)
  T.raises(function() lio.load_image(p) end, "over the limit of 1000 pixels")
  T.eq(lio.max_image_pixels(89478485), 1000)
  local ok, err = pcall(lio.load_image, p)
  T.ok(not ok and not err:find("limit", 1, true), "past the limit the decoder runs: " .. tostring(err))
  local real = tpath("real.png")
  lio.save_image(real, tensor.zeros({20, 30, 3}, {dtype = "uint8"}))
  lio.max_image_pixels(600)
  T.eq(lio.load_image(real).shape[2], 30, "600 pixels are allowed at a limit of 600")
  lio.max_image_pixels(599)
  T.raises(function() lio.load_image(real) end, "over the limit of 599 pixels")
  lio.max_image_pixels(false)
  T.eq(lio.max_image_pixels(), 0, "false lifts the limit")
  lio.max_image_pixels(89478485)
  T.raises(function() lio.max_image_pixels(-1) end, "positive integer")
end)

T.test("bad compile settings in a model file give an error naming the file", function()
  for _, bad in ipairs{ "[1, 2]", '{"loss": 3}', "{}", '{"optimizer": {"name": "NoSuchOptimizer"}, "loss": {"name": "mse"}}', "not json" } do
    local p = model_file("compile.model", function(meta) meta.compile = bad end)
    local err = T.raises(function() nn.load_model(p) end, p)
    T.ok(err:find("compile", 1, true), "the error says what: " .. err)
    T.ok(nn.load_model(p, {compile = false}), "compile=false still loads it")
  end
end)

T.test("a model file whose shapes match still loads (the weight budget is exact)", function()
  local m = nn.Sequential{nn.Dense(3, "relu"), nn.BatchNormalization(), nn.Dense(2)}
  m:build{5}
  local p = tpath("ok.model")
  m:save(p)
  local m2 = nn.load_model(p)
  T.eq((m2.weights[1] - m.weights[1]):abs():max():item(), 0)
  -- and a model built afterwards is not limited
  local big = nn.Sequential{nn.Dense(300)}
  big:build{300}
  T.eq(big.weights[1].shape[2], 300)
end)

os.execute("rm -rf '" .. DIR .. "'")
T.done()
