-- test_image_data.lua - data.image_dataset_from_directory, io.load_image and
-- io.save_image. Reference numbers were computed once with TensorFlow 2.21 /
-- Keras 3.15 (build/bench-venv) and numpy, and are written here as printed:
-- tf.image.resize, tf.image.decode_image(channels=...) of the same bytes, and
-- np.random.RandomState(seed).shuffle. When python3 with numpy is present the
-- split is also checked against numpy at test time, for more seeds and sizes.
-- The "small" folder's file order (shuffle=false, label_mode=false, and the
-- seed-3 split) was compared once with Keras on the same folder: identical,
-- except that Keras also counts the .bmp file, which ldist leaves out.
local T = dofile("tests/lua/testlib.lua")
local L = ldist or package.loaded.ldist
local lio, I = L.io, L._image
local data = L.data

local ROOT = os.tmpname(); os.remove(ROOT)
L.io._mkdir_p(ROOT)
local function mkdir(p) L.io._mkdir_p(p) return p end
local function u8(vals, shape) return tensor.new(vals, { dtype = "uint8" }):reshape(shape) end
local function flat(t) local n = 1 for _, d in ipairs(t.shape) do n = n * d end return t:reshape({ n }):totable() end
local function write_bytes(path, s) local f = assert(io.open(path, "wb")) f:write(s) f:close() end
local function read_bytes(path) local f = assert(io.open(path, "rb")) local s = f:read("a") f:close() return s end
local function quiet(fn, ...)   -- Keras's "Found N files" lines, captured
  local lines, p = {}, print
  print = function(...) local t = table.pack(...) for i = 1, t.n do t[i] = tostring(t[i]) end lines[#lines + 1] = table.concat(t, "\t") end
  local r = table.pack(pcall(fn, ...))
  print = p
  if not r[1] then error(r[2], 0) end
  return lines, table.unpack(r, 2, r.n)
end
local IDS = data.image_dataset_from_directory

-- a small image whose pixels say which file it is: value v everywhere
local function solid(path, h, w, c, v)
  local vals = {}
  for i = 1, h * w * c do vals[i] = v end
  lio.save_image(path, u8(vals, { h, w, c }))
end

T.test("PNG: written and decoded exactly; rgb -> grayscale as TF's decoder (libpng 0.299/0.587)", function()
  -- pixels chosen where the weights 0.299/0.587 and 0.2989/0.5870 round apart
  local px = { 32, 182, 128, 20, 210, 68, 254, 25, 21, 37, 111, 191, 225, 25, 97, 165, 175, 61, 99, 114, 241, 250, 175, 110,
    250, 125, 78, 45, 29, 250, 13, 136, 134, 240, 155, 204, 177, 156, 250, 220, 47, 32, 42, 108, 202, 118, 42, 62, 172, 47,
    117, 192, 67, 251, 195, 103, 9, 211, 21, 242, 36, 87, 70, 216, 88, 140, 58, 193, 230, 39, 87, 174, 88, 81, 165, 25, 77,
    72, 9, 148, 115, 208, 243, 197, 254, 79, 175, 192, 82, 99, 216, 177, 243, 29, 147, 147 }
  -- tf.image.decode_image(tf.io.encode_png(px [4, 8, 3]), channels=1)
  local tf_gray = { 130, 136, 93, 97, 93, 159, 123, 190, 157, 58, 98, 186, 172, 97, 98, 67, 92, 125, 119, 103, 69, 132, 156,
    82, 92, 60, 102, 227, 142, 116, 196, 111 }
  local p = ROOT .. "/px.png"
  lio.save_image(p, u8(px, { 4, 8, 3 }))
  T.eq(read_bytes(p):sub(2, 4), "PNG")
  local rgb = lio.load_image(p)
  T.eq(rgb.dtype, "uint8"); T.eq(rgb.shape[1], 4); T.eq(rgb.shape[2], 8); T.eq(rgb.shape[3], 3)
  local got = flat(rgb)
  for i = 1, #px do T.eq(got[i], px[i], "rgb value " .. i) end
  local g = flat(lio.load_image(p, { color_mode = "grayscale" }))
  for i = 1, #tf_gray do T.eq(g[i], tf_gray[i], "gray value " .. i) end
  local a = flat(lio.load_image(p, { color_mode = "rgba" }))
  T.eq(#a, 4 * 8 * 4); T.eq(a[1], 32); T.eq(a[3], 128); T.eq(a[4], 255); T.eq(a[8], 255)
  -- gray -> rgb replicates; rgba -> rgb drops alpha without compositing (TF)
  lio.save_image(ROOT .. "/g.png", u8({ 0, 77, 200, 255 }, { 2, 2, 1 }))
  T.eq(table.concat(flat(lio.load_image(ROOT .. "/g.png")), ","), "0,0,0,77,77,77,200,200,200,255,255,255")
  lio.save_image(ROOT .. "/a.png", u8({ 10, 20, 30, 0, 40, 50, 60, 128 }, { 1, 2, 4 }))
  T.eq(table.concat(flat(lio.load_image(ROOT .. "/a.png")), ","), "10,20,30,40,50,60")
end)

T.test("JPEG: decoded as TF decodes the same bytes (rgb and grayscale)", function()
  -- tf.io.encode_jpeg(np.tile(px[2, 4, 3], (4, 4, 1)), quality=90): 8x16
  local hex = "ffd8ffe000104a46494600010101012c012c0000ffdb0043000302020302020303030304030304050805050404050a070706080c0a0c0c0b0a0b0b0d0e12100d0e110e0b0b1016101113141515150c0f171816141812141514ffdb00430103040405040509050509140d0b0d1414141414141414141414141414141414141414141414141414141414141414141414141414141414141414141414141414ffc00011080008001003012200021101031101ffc4001f0000010501010101010100000000000000000102030405060708090a0bffc400b5100002010303020403050504040000017d01020300041105122131410613516107227114328191a1082342b1c11552d1f02433627282090a161718191a25262728292a3435363738393a434445464748494a535455565758595a636465666768696a737475767778797a838485868788898a92939495969798999aa2a3a4a5a6a7a8a9aab2b3b4b5b6b7b8b9bac2c3c4c5c6c7c8c9cad2d3d4d5d6d7d8d9dae1e2e3e4e5e6e7e8e9eaf1f2f3f4f5f6f7f8f9faffc4001f0100030101010101010101010000000000000102030405060708090a0bffc400b51100020102040403040705040400010277000102031104052131061241510761711322328108144291a1b1c109233352f0156272d10a162434e125f11718191a262728292a35363738393a434445464748494a535455565758595a636465666768696a737475767778797a82838485868788898a92939495969798999aa2a3a4a5a6a7a8a9aab2b3b4b5b6b7b8b9bac2c3c4c5c6c7c8c9cad2d3d4d5d6d7d8d9dae2e3e4e5e6e7e8e9eaf2f3f4f5f6f7f8f9faffda000c03010002110311003f00e07c27079fff000817ee7cefb545a837faaf33ed1e56fe7fd549e6f97e4f5ff4af2bc9fbf63e4ffc4bcf09c1e7ff00c205fb9f3bed516a0dfeabccfb4795bf9ff55279be5f93d7fd2bcaf27efd8f93ff0012f28af96a3f63feddff00dc278f88ff00979ff6ff00feec1fffd9"
  local p = ROOT .. "/tf.jpg"
  write_bytes(p, (hex:gsub("%x%x", function(h) return string.char(tonumber(h, 16)) end)))
  local rgb = lio.load_image(p)
  T.eq(rgb.shape[1], 8); T.eq(rgb.shape[2], 16)
  local t = rgb:totable()
  local got = {}
  for y = 1, 2 do for x = 1, 4 do for c = 1, 3 do got[#got + 1] = t[y][x][c] end end end
  -- tf.image.decode_image(jpeg, channels=3)[:2, :4]
  T.eq(table.concat(got, ","), "91,75,16,156,160,110,1,48,16,92,139,107,88,72,13,3,7,0,218,255,233,105,152,120")
  local g = lio.load_image(p, { color_mode = "grayscale" }):totable()
  -- tf.image.decode_image(jpeg, channels=1)[:2, :4]
  T.eq(table.concat({ g[1][1][1], g[1][2][1], g[1][3][1], g[1][4][1], g[2][1][1], g[2][2][1], g[2][3][1], g[2][4][1] }, ","),
    "73,153,30,121,70,0,247,134")
  -- our own encoder: a smooth image comes back close
  local vals = {}
  for y = 0, 15 do for x = 0, 15 do vals[#vals + 1] = 8 * y + 4 * x end end
  lio.save_image(ROOT .. "/own.jpg", u8(vals, { 16, 16, 1 }), { quality = 95 })
  local back = flat(lio.load_image(ROOT .. "/own.jpg", { color_mode = "grayscale" }))
  for i = 1, #vals do T.ok(math.abs(back[i] - vals[i]) <= 4, "jpeg value " .. i) end
end)

T.test("resize: tf.image.resize bilinear numbers (7x5 -> 4x6, 5x5 -> 9x9), same size unchanged", function()
  local a, b = {}, {}
  for i = 0, 34 do a[#a + 1] = (i * 37) % 251 end
  for i = 0, 24 do b[#b + 1] = (i * 53) % 241 end
  local R1 = { 69.375, 97.125, 73.05208587646484, 64.66665649414062, 95.5, 123.25, 110.75, 138.5, 169.3333282470703,
    200.16665649414062, 176.09375, 39.125, 214.875, 77.90625, 53.83332824707031, 84.66665649414062, 115.5, 143.25, 130.75,
    158.5, 189.3333282470703, 180.9479217529297, 117.65625, 27.75 }
  local R2 = { 0.0, 17.666667938232422, 47.111114501953125, 76.55555725097656, 106.0, 135.4444580078125, 164.88888549804688,
    194.33334350585938, 212.0, 8.000000953674316, 25.666667938232422, 55.111114501953125, 84.55555725097656, 114.0,
    143.4444580078125, 172.88888549804688, 202.33334350585938, 220.0, 21.333335876464844, 39.000003814697266,
    68.44445037841797, 97.8888931274414, 127.33333587646484, 156.77780151367188, 186.22222900390625, 215.66668701171875,
    233.33334350585938, 34.66666793823242, 52.33333969116211, 81.77778625488281, 111.22222900390625, 140.6666717529297,
    170.1111297607422, 187.65431213378906, 157.59255981445312, 139.5555419921875, 48.0, 65.66667175292969, 95.11111450195312,
    124.55555725097656, 154.0, 183.4444580078125, 186.11109924316406, 81.66661071777344, 19.0, 61.33333969116211,
    79.00001525878906, 108.4444580078125, 137.88890075683594, 167.33334350585938, 196.77780151367188, 199.44444274902344,
    94.99995422363281, 32.33333969116211, 74.66667175292969, 92.33334350585938, 121.77778625488281, 151.22222900390625,
    180.6666717529297, 195.2345733642578, 188.97528076171875, 99.40735626220703, 45.66666793823242, 88.00000762939453,
    105.66667938232422, 135.11111450195312, 164.55557250976562, 194.0, 134.18511962890625, 83.29622650146484,
    68.111083984375, 59.00000762939453, 96.0, 113.66667175292969, 143.11111450195312, 172.55555725097656, 202.0,
    97.55550384521484, 19.888891220092773, 49.333351135253906, 67.0 }
  local r1 = flat(I.resize(u8(a, { 7, 5, 1 }), 4, 6))
  T.eq(#r1, 24)
  for i = 1, 24 do T.near(r1[i], R1[i], 1e-6, "7x5->4x6 #" .. i) end
  local r2 = flat(I.resize(u8(b, { 5, 5, 1 }), 9, 9))
  for i = 1, 81 do T.near(r2[i], R2[i], 1e-6, "5x5->9x9 #" .. i) end
  local same = flat(I.resize(u8(a, { 7, 5, 1 }), 7, 5))
  for i = 1, 35 do T.eq(same[i], a[i] + 0.0) end
end)

T.test("numpy's legacy RandomState shuffle", function()
  -- np.random.RandomState(seed).shuffle(list(range(n)))
  T.eq(table.concat(I.np_shuffle(1, 5), ","), "2,1,4,0,3")
  T.eq(table.concat(I.np_shuffle(42, 10), ","), "8,1,5,0,7,2,9,4,3,6")
  T.eq(table.concat(I.np_shuffle(1, 37), ","), "2,29,3,22,25,27,21,35,19,24,30,17,28,34,31,26,4,14,10,33,23,32,20,18,6,13,7,36,1,16,0,15,5,11,9,8,12")
  T.eq(table.concat(I.np_shuffle(42, 37), ","), "17,13,4,29,35,25,6,26,24,16,8,15,12,32,9,19,0,31,5,11,1,27,21,2,36,34,3,33,23,30,10,22,18,20,7,14,28")
  T.eq(table.concat(I.np_shuffle(1337, 37), ","), "14,5,15,21,31,27,0,4,10,19,13,17,16,3,7,12,34,11,30,29,2,32,35,1,24,36,33,22,6,9,8,20,18,26,25,28,23")
end)

-- a folder: classes "ant" (PNG, one in a sub-folder), "bee" (JPEG), "cow" (PNG and .JPEG);
-- each image's value encodes (class, index); other files are ignored
local SM = mkdir(ROOT .. "/small")
local files = {}   -- path -> value
do
  local function add(rel, cls, v, jpeg)
    local p = SM .. "/" .. rel
    solid(p, 3 + v % 3, 4, jpeg and 3 or 3, v)
    files[p] = { cls = cls, v = v }
  end
  mkdir(SM .. "/ant/deep"); mkdir(SM .. "/bee"); mkdir(SM .. "/cow"); mkdir(SM .. "/.hidden")
  add("ant/a1.png", 0, 10); add("ant/a2.PNG", 0, 20); add("ant/deep/a3.png", 0, 30)
  add("bee/b1.jpg", 1, 100, true); add("bee/b2.jpg", 1, 120, true)
  add("cow/c1.png", 2, 200); add("cow/c2.JPEG", 2, 220, true)
  write_bytes(SM .. "/ant/notes.txt", "not an image")
  write_bytes(SM .. "/cow/old.bmp", "BM....")
  solid(SM .. "/.hidden/h.png", 2, 2, 3, 1)
  solid(SM .. "/top.png", 2, 2, 3, 1)           -- not in a class folder
end

local function collect(ds)
  local out = {}
  for b in ds do out[#out + 1] = b end
  return out
end

T.test("classes, files, labels: int, categorical, binary; prints Keras's lines", function()
  local lines, ds = quiet(IDS, SM, { image_size = { 5, 4 }, batch_size = 4, shuffle = false })
  T.eq(lines[1], "Found 7 files belonging to 3 classes.")
  T.ok(lines[2] and lines[2]:find("1 .bmp/.gif files left out", 1, true), "the .bmp is reported")
  T.eq(table.concat(ds.class_names, ","), "ant,bee,cow")
  T.eq(table.concat(data.class_names_of(ds), ","), "ant,bee,cow")
  -- unshuffled: classes in order, files sorted, sub-folders after their parent's files
  local names = {}
  for i, p in ipairs(ds.file_paths) do names[i] = p:sub(#SM + 2) end
  T.eq(table.concat(names, ","), "ant/a1.png,ant/a2.PNG,ant/deep/a3.png,bee/b1.jpg,bee/b2.jpg,cow/c1.png,cow/c2.JPEG")
  T.eq(ds:cardinality(), 2)
  local bs = collect(ds)
  T.eq(#bs, 2)
  local x, y = bs[1][1], bs[1][2]
  T.eq(x.dtype, "float32"); T.eq(table.concat(x.shape, "x"), "4x5x4x3")
  T.eq(y.dtype, "int32"); T.eq(table.concat(y:totable(), ","), "0,0,0,1")
  T.eq(table.concat(bs[2][2]:totable(), ","), "1,2,2")
  -- PNG values exact after resizing a solid image; the JPEG ones close
  local xt = x:totable()
  T.eq(xt[1][1][1][1], 10.0); T.eq(xt[2][5][4][3], 20.0); T.eq(xt[3][2][2][2], 30.0)
  T.ok(math.abs(xt[4][1][1][1] - 100) <= 2)
  local _, cat = quiet(IDS, SM, { image_size = { 5, 4 }, batch_size = 8, shuffle = false, label_mode = "categorical" })
  local c = collect(cat)[1][2]
  T.eq(c.dtype, "float32"); T.eq(table.concat(c.shape, "x"), "7x3")
  T.eq(table.concat(flat(c), ","), "1.0,0.0,0.0,1.0,0.0,0.0,1.0,0.0,0.0,0.0,1.0,0.0,0.0,1.0,0.0,0.0,0.0,1.0,0.0,0.0,1.0")
  T.raises(function() quiet(IDS, SM, { label_mode = "binary" }) end, "exactly 2 classes")
  local _, bin = quiet(IDS, SM, { image_size = { 5, 4 }, batch_size = 8, shuffle = false, label_mode = "binary",
                                  class_names = { "cow", "ant" } })
  T.eq(table.concat(bin.class_names, ","), "cow,ant")
  local yb = collect(bin)[1][2]
  T.eq(table.concat(yb.shape, "x"), "5x1")
  T.eq(table.concat(flat(yb), ","), "0.0,0.0,1.0,1.0,1.0")
  T.raises(function() quiet(IDS, SM, { class_names = { "ant", "emu" } }) end, "emu")
end)

T.test("color modes, unbatched, no labels", function()
  for mode, c in pairs({ rgb = 3, grayscale = 1, rgba = 4 }) do
    local _, ds = quiet(IDS, SM, { image_size = { 2, 3 }, color_mode = mode, shuffle = false })
    local x = collect(ds)[1][1]
    T.eq(table.concat(x.shape, "x"), "7x2x3x" .. c, mode)
    local v = x:totable()[6][1][1]
    T.eq(v[1], 200.0, mode)
    if c == 4 then T.eq(v[4], 255.0) end
  end
  local _, one = quiet(IDS, SM, { image_size = { 2, 3 }, batch_size = false, shuffle = false })
  local es = collect(one)
  T.eq(#es, 7); T.eq(table.concat(es[1][1].shape, "x"), "2x3x3"); T.eq(es[7][2]:item(), 2)
  local lines, nolab = quiet(IDS, SM, { image_size = { 2, 3 }, label_mode = false, shuffle = false })
  T.eq(lines[1], "Found 9 files.")   -- Keras: every image under the folder, hidden and top level too
  local b = collect(nolab)[1]
  T.eq(#b, 1); T.eq(b[1].shape[1], 9)
end)

-- folder for the split: 3 classes of 12, 13, 12 files (37)
local SP = mkdir(ROOT .. "/split")
local sorted = {}
for ci, cls in ipairs({ "a", "b", "c" }) do
  mkdir(SP .. "/" .. cls)
  for i = 1, (cls == "b" and 13 or 12) do
    local p = ("%s/%s/f%02d.png"):format(SP, cls, i)
    solid(p, 2, 2, 1, ci * 20 + i)
    sorted[#sorted + 1] = p
  end
end

local function expect_split(perm, vs)
  local order = {}
  for i, k in ipairs(perm) do order[i] = sorted[k + 1] end
  local nval = math.floor(vs * #order)
  local tr, va = {}, {}
  for i = 1, #order - nval do tr[#tr + 1] = order[i] end
  for i = #order - nval + 1, #order do va[#va + 1] = order[i] end
  return tr, va
end

T.test("training/validation split: the same files as Keras (numpy RandomState), subset='both'", function()
  local perms = {   -- np.random.RandomState(seed).shuffle(list(range(37)))
    [1] = { 2, 29, 3, 22, 25, 27, 21, 35, 19, 24, 30, 17, 28, 34, 31, 26, 4, 14, 10, 33, 23, 32, 20, 18, 6, 13, 7, 36, 1, 16, 0, 15, 5, 11, 9, 8, 12 },
    [42] = { 17, 13, 4, 29, 35, 25, 6, 26, 24, 16, 8, 15, 12, 32, 9, 19, 0, 31, 5, 11, 1, 27, 21, 2, 36, 34, 3, 33, 23, 30, 10, 22, 18, 20, 7, 14, 28 },
  }
  for seed, perm in pairs(perms) do
    local lines, tr, va = quiet(IDS, SP, { image_size = { 2, 2 }, color_mode = "grayscale", validation_split = 0.3,
                                           subset = "both", seed = seed, batch_size = 5 })
    T.eq(lines[1], "Found 37 files belonging to 3 classes.")
    T.eq(lines[2], "Using 26 files for training.")
    T.eq(lines[3], "Using 11 files for validation.")
    local etr, eva = expect_split(perm, 0.3)
    T.eq(table.concat(tr.file_paths, ","), table.concat(etr, ","), "training files, seed " .. seed)
    T.eq(table.concat(va.file_paths, ","), table.concat(eva, ","), "validation files, seed " .. seed)
    -- the validation set yields its files in that order, with their labels
    local vals, labs = {}, {}
    for b in va do
      local x, y = b[1]:totable(), b[2]:totable()
      for i = 1, #y do vals[#vals + 1] = x[i][1][1][1]; labs[#labs + 1] = y[i] end
    end
    for i, p in ipairs(eva) do
      local ci, k = p:match("/(%a)/f(%d+)%.png$")
      local cls = ({ a = 1, b = 2, c = 3 })[ci]
      T.eq(vals[i], cls * 20 + tonumber(k) + 0.0); T.eq(labs[i], cls - 1)
    end
    -- one subset alone gives the same files
    local _, only = quiet(IDS, SP, { image_size = { 2, 2 }, validation_split = 0.3, subset = "training", seed = seed })
    T.eq(table.concat(only.file_paths, ","), table.concat(etr, ","))
  end
  -- at test time against numpy itself, when python3 has it
  local ok = os.execute("python3 -c 'import numpy' >/dev/null 2>&1")
  if ok then
    for _, case in ipairs({ { 7, 0.2 }, { 123456, 0.5 }, { 4294967295, 0.1 }, { 0, 0.25 } }) do
      local seed, vs = case[1], case[2]
      local h = assert(io.popen(("python3 -c 'import numpy as np; l=list(range(37)); np.random.RandomState(%d).shuffle(l); print(\",\".join(map(str,l)))'"):format(seed)))
      local s = h:read("l"); h:close()
      local perm = {}
      for v in s:gmatch("%d+") do perm[#perm + 1] = tonumber(v) end
      T.eq(#perm, 37)
      local _, tr, va = quiet(IDS, SP, { validation_split = vs, subset = "both", seed = seed, image_size = { 2, 2 } })
      local etr, eva = expect_split(perm, vs)
      T.eq(table.concat(tr.file_paths, ","), table.concat(etr, ","), "numpy seed " .. seed)
      T.eq(table.concat(va.file_paths, ","), table.concat(eva, ","), "numpy seed " .. seed)
    end
  else
    print("# python3 with numpy not found: checked against the written permutations only")
  end
  T.raises(function() quiet(IDS, SP, { validation_split = 0.2, subset = "training" }) end, "you must provide a seed")
  T.raises(function() quiet(IDS, SP, { validation_split = 0.2, seed = 1 }) end, "validation_split must be set")
  T.raises(function() quiet(IDS, SP, { validation_split = 1.5, subset = "both", seed = 1 }) end, "between 0 and 1")
end)

T.test("epochs: the training set is reshuffled each epoch, deterministically from the seed; recipes rebuild it", function()
  local function order(ds)
    local o = {}
    for b in ds do for _, v in ipairs(flat(b[1])) do o[#o + 1] = v end end
    return table.concat(o, ",")
  end
  local _, tr = quiet(IDS, SP, { image_size = { 1, 1 }, color_mode = "grayscale", batch_size = 8, seed = 5,
                                 validation_split = 0.25, subset = "training" })
  local e1, e2 = order(tr), order(tr)
  T.ok(e1 ~= e2, "a new order in the second epoch")
  local s1, s2 = {}, {}
  for v in e1:gmatch("[^,]+") do s1[#s1 + 1] = tonumber(v) end
  for v in e2:gmatch("[^,]+") do s2[#s2 + 1] = tonumber(v) end
  table.sort(s1); table.sort(s2)
  T.eq(#s1, 28); T.eq(table.concat(s1, ","), table.concat(s2, ","))
  -- the recipe: the same call (seed included) made again, as a worker does
  local r = tr:_recipe()
  T.eq(r.op, "_image_dataset_from_directory")
  local again = data.Dataset[r.op](table.unpack(r.args, 1, r.args.n))
  T.eq(table.concat(again.file_paths, ","), table.concat(tr.file_paths, ","))
  T.eq(order(again), e1); T.eq(order(again), e2)
  -- a seed drawn when none is given is recorded, so the rebuild is the same
  local _, rnd = quiet(IDS, SP, { image_size = { 1, 1 } })
  local r2 = rnd:_recipe()
  T.ok(math.type(r2.args[2].seed) == "integer")
  T.eq(table.concat(data.Dataset[r2.op](table.unpack(r2.args, 1, r2.args.n)).file_paths, ","), table.concat(rnd.file_paths, ","))
end)

T.test("errors name the folder or the file; a bad file mid-epoch ends the loop after the good batches", function()
  T.raises(function() quiet(IDS, ROOT .. "/nope") end, ROOT .. "/nope")
  local empty = mkdir(ROOT .. "/empty")
  T.raises(function() quiet(IDS, empty) end, "no sub-folders")
  T.raises(function() quiet(IDS, SM, { interpolation = "bicubic" }) end, "bicubic")
  T.raises(function() quiet(IDS, SM, { colour_mode = "rgb" }) end, "unknown option 'colour_mode'")
  local bad = mkdir(ROOT .. "/bad")
  mkdir(bad .. "/x")
  for i = 1, 4 do solid(("%s/x/%d.png"):format(bad, i), 3, 3, 3, i) end
  -- a truncated PNG last in order, a text file called .jpg, a truncated JPEG
  local png = read_bytes(bad .. "/x/4.png")
  write_bytes(bad .. "/x/5.png", png:sub(1, #png - 20))
  write_bytes(bad .. "/x/6.jpg", "hello, not a jpeg")
  local _, ds = quiet(IDS, bad, { image_size = { 3, 3 }, batch_size = 2, shuffle = false })
  local got, err = 0, nil
  local ok, e = pcall(function() for _ in ds do got = got + 1 end end)
  T.ok(not ok, "the loop fails")
  T.eq(got, 2, "the two good batches came first")
  T.ok(tostring(e):find(bad .. "/x/5.png", 1, true), "names the file: " .. tostring(e))
  T.ok(tostring(e):find("truncated", 1, true) or tostring(e):find("PNG", 1, true), tostring(e))
  os.remove(bad .. "/x/5.png")
  local _, ds2 = quiet(IDS, bad, { image_size = { 3, 3 }, batch_size = 2, shuffle = false })
  ok, e = pcall(function() for _ in ds2 do end end)
  T.ok(not ok and tostring(e):find(bad .. "/x/6.jpg: not a PNG or JPEG file", 1, true), tostring(e))
  lio.save_image(bad .. "/x/6.jpg", u8({ 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12 }, { 2, 2, 3 }))
  local jpg = read_bytes(bad .. "/x/6.jpg")
  write_bytes(bad .. "/x/6.jpg", jpg:sub(1, #jpg // 2))
  local _, ds3 = quiet(IDS, bad, { image_size = { 3, 3 }, batch_size = 2, shuffle = false })
  ok, e = pcall(function() for _ in ds3 do end end)
  T.ok(not ok and tostring(e):find(bad .. "/x/6.jpg", 1, true), tostring(e))
  T.raises(function() lio.load_image(bad .. "/x/none.png") end, bad .. "/x/none.png: cannot open")
end)

T.test("a file damaged between epochs stops fit naming it, and the epochs done are kept", function()
  local d = mkdir(ROOT .. "/midfit")
  mkdir(d .. "/a"); mkdir(d .. "/b")
  for i = 1, 4 do solid(("%s/a/%d.png"):format(d, i), 4, 4, 1, 10 * i); solid(("%s/b/%d.png"):format(d, i), 4, 4, 1, 200 - i) end
  local _, ds = quiet(IDS, d, { image_size = { 4, 4 }, color_mode = "grayscale", batch_size = 4, shuffle = false })
  local m = nn.Sequential { nn.Flatten(), nn.Dense(2) }
  m:compile { optimizer = optim.SGD { learning_rate = 1e-4 }, loss = losses.SparseCategoricalCrossentropy { from_logits = true } }
  local victim = d .. "/b/3.png"
  local png = read_bytes(victim)
  local damage = callbacks.LambdaCallback { on_epoch_end = function(_, epoch)
    if epoch == 1 then write_bytes(victim, png:sub(1, #png - 30)) end end }
  local ok, e = pcall(m.fit, m, ds, { epochs = 4, verbose = 0, callbacks = { damage } })
  T.ok(not ok and tostring(e):find(victim, 1, true), "the error names the file: " .. tostring(e))
  T.eq(#m.history.loss, 2, "model.history keeps the 2 epochs done")
  local w = m:get_weights()[1]:clone()
  write_bytes(victim, png)
  -- training goes on from where it stopped (the weights were kept)
  m:fit(ds, { epochs = 1, verbose = 0 })
  T.ok((m:get_weights()[1] - w):abs():max():item() > 0, "fit continues from the kept weights")
end)

T.test("a small CNN trains from a folder of bright and dark images", function()
  local TR = mkdir(ROOT .. "/bright_dark")
  mkdir(TR .. "/bright"); mkdir(TR .. "/dark")
  local seed = 12345
  local function rnd() seed = (seed * 1103515245 + 12345) % 2147483648 return seed / 2147483648 end
  for i = 1, 48 do
    for _, cls in ipairs({ "bright", "dark" }) do
      local vals = {}
      for k = 1, 12 * 12 do
        local base = cls == "bright" and 150 or 60
        vals[k] = math.floor(base + rnd() * 60)
      end
      lio.save_image(("%s/%s/%02d.png"):format(TR, cls, i), u8(vals, { 12, 12, 1 }))
    end
  end
  local _, tr, va = quiet(IDS, TR, { image_size = { 12, 12 }, color_mode = "grayscale", batch_size = 16,
                                     validation_split = 0.25, subset = "both", seed = 3 })
  local function scaled(ds) return ds:map(function(x, y) return x * (1 / 255), y end) end
  tensor.seed(1)
  local m = nn.Sequential {
    nn.Conv2D(4, 3, { activation = "relu" }), nn.MaxPool2D(2),
    nn.Flatten(), nn.Dense(2),
  }
  m:compile { optimizer = optim.Adam { learning_rate = 0.02 },
              loss = losses.SparseCategoricalCrossentropy { from_logits = true }, metrics = { "accuracy" } }
  local h = m:fit(scaled(tr), { epochs = 8, verbose = 0, validation_data = scaled(va) })
  local acc = h.accuracy
  T.ok(acc[#acc] > 0.9 and acc[#acc] > acc[1], ("accuracy %g -> %g"):format(acc[1], acc[#acc]))
  local r = m:evaluate(scaled(va), { verbose = 0 })
  T.ok(r.accuracy > 0.9, "validation accuracy " .. tostring(r.accuracy))
end)

os.execute("rm -rf '" .. ROOT .. "'")
T.done()
