-- test_data.lua - datasets, loaders and safetensors through the ldist binary:
-- the `data`, `datasets` and `ldist.io` modules, including the errors a user meets.
local T = dofile("tests/lua/testlib.lua")
local L = ldist or package.loaded.ldist
local lio = L.io
local lua_io = io

local TMP = os.tmpname()
os.remove(TMP)
assert(os.execute("mkdir -p " .. TMP))
local function tpath(name) return TMP .. "/" .. name end
local function write(path, s)
  local f = assert(lua_io.open(path, "wb")); f:write(s); f:close()
end
local function exists(path)
  local f = lua_io.open(path, "rb"); if f then f:close() return true end
  return false
end

-- The values of a tensor as a flat Lua list, row-major.
local function vals(t)
  if t.ndim == 0 then return { t:item() } end
  local out = {}
  local function walk(v)
    if type(v) == "table" then for _, w in ipairs(v) do walk(w) end else out[#out + 1] = v end
  end
  walk(t:totable())
  return out
end
-- t[i] gives a number on a 1-d tensor and a tensor otherwise: a number either way.
local function num(v) if type(v) == "number" then return v end return v:item() end
-- All component-1 values of one epoch, flattened, and the batch sizes.
local function epoch(ds)
  local all, sizes = {}, {}
  for e in ds do
    local v = vals(e[1])
    sizes[#sizes + 1] = e[1].ndim > 0 and e[1].shape[1] or 0
    for _, x in ipairs(v) do all[#all + 1] = x end
  end
  return all, sizes
end
local function same_list(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do if a[i] ~= b[i] then return false end end
  return true
end
local function is_permutation(v, n)
  if #v ~= n then return false end
  local seen = {}
  for _, x in ipairs(v) do
    if x < 0 or x >= n or seen[x] then return false end
    seen[x] = true
  end
  return true
end

T.test("range(10):batch(4) gives 4, 4, 2; drop_remainder gives 4, 4", function()
  local ds = data.Dataset.range(10):batch(4)
  local all, sizes = epoch(ds)
  T.ok(same_list(sizes, { 4, 4, 2 }), table.concat(sizes, ","))
  T.ok(same_list(all, { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9 }))
  T.eq(#ds, 3); T.eq(ds:cardinality(), 3)
  local dd = data.Dataset.range(10):batch(4, { drop_remainder = true })
  all, sizes = epoch(dd)
  T.ok(same_list(sizes, { 4, 4 })); T.eq(#dd, 2)
  T.eq(#data.Dataset.range(10):batch(4, true), 2)
  T.ok(tostring(dd):find("range(0, 10, 1) -> batch(4, drop_remainder)", 1, true), tostring(dd))
  T.ok(same_list(epoch(data.Dataset.range(2, 11, 3)), { 2, 5, 8 }))
end)

T.test("from_tensor_slices: elements are {x, y} tables; batches stack rows", function()
  local x = tensor.arange(30):reshape(10, 3):float()
  local y = tensor.arange(10)
  for _, ds in ipairs({ data.Dataset.from_tensor_slices(x, y), data.Dataset.from_tensor_slices({ x, y }) }) do
    T.eq(#ds, 10)
    local i = 0
    for e in ds do
      T.eq(#e, 2)
      T.eq(e[1].ndim, 1); T.eq(e[1].shape[1], 3); T.eq(e[1].dtype, "float32")
      T.eq(e[2].ndim, 0); T.eq(e[2].dtype, "int64"); T.eq(e[2]:item(), i)
      T.eq(num(e[1][2]), 3 * i + 2)
      i = i + 1
    end
    T.eq(i, 10)
    local n = 0
    for inputs in ds:batch(4) do                -- the seed example's shape
      local features, labels = inputs[1], inputs[2]
      n = n + 1
      if n == 1 then
        T.eq(features.shape[1], 4); T.eq(features.shape[2], 3); T.eq(labels.shape[1], 4)
        T.eq(num(features[3][2]), 11); T.eq(num(labels[3]), 3)
      end
    end
    T.eq(n, 3)
  end
  -- one tensor: still a table with [1]; tables of numbers become float32 tensors
  local one = data.Dataset.from_tensor_slices(y)
  for e in one do T.eq(#e, 1); T.ok(tensor.is_tensor(e[1])); break end
  local nums = data.Dataset.from_tensor_slices({ { 1, 2 }, { 3, 4 }, { 5, 6 } })
  T.eq(#nums, 3)
  for e in nums do T.eq(e[1].dtype, "float32"); T.eq(e[1].shape[1], 2); break end
end)

T.test("from_tensor_slices: mismatched first dimensions name the shapes; the session goes on", function()
  local x, y = tensor.zeros(10, 3), tensor.zeros(7)
  T.raises(function() data.Dataset.from_tensor_slices(x, y) end, "tensor 1 is 10x3, tensor 2 is 7")
  T.raises(function() data.Dataset.from_tensor_slices(tensor.new(1)) end, "scalar")
  T.raises(function() data.Dataset.from_tensor_slices() end, "no tensors given")
  T.raises(function() data.Dataset.from_tensor_slices("x") end, "tensor expected, got string")
  T.raises(function() data.Dataset.range(10):batch(0) end, "batch size must be positive")
  T.raises(function() data.Dataset.range(10):shuffle(0) end, "buffer size must be positive")
  T.raises(function() data.Dataset.range(10):shuffle(5, { seed = "x" }) end, "seed must be an integer")
  T.raises(function() data.Dataset.range(1, 5, 0) end, "step must not be zero")
  T.raises(function() data.Dataset.batch(42, 3) end, "Dataset expected")
  -- still alive and well
  T.eq(#data.Dataset.from_tensor_slices(x):batch(5), 2)
end)

T.test("loops: sequential loops see everything; break does not disturb the next loop; nesting works", function()
  local ds = data.Dataset.range(5)
  T.ok(same_list(epoch(ds), { 0, 1, 2, 3, 4 }))
  T.ok(same_list(epoch(ds), { 0, 1, 2, 3, 4 }))
  for e in ds do if e[1]:item() == 1 then break end end
  T.ok(same_list(epoch(ds), { 0, 1, 2, 3, 4 }))
  local pairs_seen = 0
  for a in ds do
    for b in ds do pairs_seen = pairs_seen + 1 end
  end
  T.eq(pairs_seen, 25)
  -- an error inside a loop body leaves the dataset usable
  T.raises(function() for e in ds do error("boom in the body") end end, "boom in the body")
  T.ok(same_list(epoch(ds), { 0, 1, 2, 3, 4 }))
  T.raises(function() ds(nil, { 1 }) end, "did not produce")
end)

T.test("ds:iter(): explicit iterators, closed when the loop ends", function()
  local ds = data.Dataset.range(3)
  local it = ds:iter()
  T.eq(it()[1]:item(), 0); T.eq(it:next()[1]:item(), 1); T.eq(it()[1]:item(), 2)
  T.eq(it(), nil); T.eq(it(), nil)
  local n = 0
  for e in ds:iter() do n = n + 1 end
  T.eq(n, 3)
  local it2 = ds:iter(); it2(); it2:close(); T.eq(it2(), nil)
  T.ok(tostring(it2):find("finished"))
  for e in data.Dataset.range(1000000):prefetch(4):iter() do break end   -- closes the thread at once
end)

T.test("shuffle: seeded, reproducible, a permutation, reshuffled each epoch", function()
  local base = data.Dataset.range(200)
  local a = epoch(base:shuffle(200, { seed = 7 }))
  local b = epoch(base:shuffle(200, { seed = 7 }))
  T.ok(is_permutation(a, 200)); T.ok(same_list(a, b))
  local moved = 0
  for i = 1, 200 do if a[i] ~= i - 1 then moved = moved + 1 end end
  T.ok(moved > 150, "shuffled " .. moved)
  local s = base:shuffle(200, { seed = 7 })
  local e1, e2 = epoch(s), epoch(s)
  T.ok(same_list(e1, a)); T.ok(is_permutation(e2, 200)); T.ok(not same_list(e1, e2))
  local fixed = base:shuffle(200, { seed = 7, reshuffle_each_iteration = false })
  T.ok(same_list(epoch(fixed), epoch(fixed)))
  T.ok(not same_list(epoch(base:shuffle(200, 8)), a))        -- seed as a plain number
  -- without a seed: drawn from the global generator, so tensor.seed makes it reproducible
  tensor.seed(11); local c = epoch(base:shuffle(50))
  tensor.seed(11); local d = epoch(base:shuffle(50))
  T.ok(same_list(c, d)); T.ok(is_permutation(c, 200))
  -- shuffle then batch: batches of distinct rows, every row once
  local x = tensor.arange(100)
  local seen = {}
  for e in data.Dataset.from_tensor_slices(x):shuffle(100, { seed = 1 }):batch(32) do
    for _, v in ipairs(vals(e[1])) do T.ok(not seen[v]); seen[v] = true end
  end
  local count = 0
  for _ in pairs(seen) do count = count + 1 end
  T.eq(count, 100)
end)

T.test("repeat_, [\"repeat\"], take, skip and cardinality", function()
  local ds = data.Dataset.range(4)
  T.eq(#ds:repeat_(3), 12)
  T.ok(same_list(epoch(ds:repeat_(2)), { 0, 1, 2, 3, 0, 1, 2, 3 }))
  T.ok(same_list(epoch(ds["repeat"](ds, 2)), { 0, 1, 2, 3, 0, 1, 2, 3 }))
  local forever = ds:repeat_()
  T.eq(forever:cardinality(), data.INFINITE_CARDINALITY)
  T.raises(function() return #forever end, "infinite")
  T.eq(#forever:take(10), 10)
  T.ok(same_list(epoch(forever:take(6)), { 0, 1, 2, 3, 0, 1 }))
  T.ok(same_list(epoch(ds:skip(2)), { 2, 3 }))
  T.eq(#ds:take(0):repeat_(), 0)
  T.eq(#epoch(ds:take(0):repeat_()), 0)               -- ends instead of spinning
  T.ok(same_list(epoch(ds:take(-1)), { 0, 1, 2, 3 }))
  T.raises(function() ds:repeat_(-3) end, "count must be")
  -- TF 2.21: an endless repeat of a dataset of unknown length is INFINITE (-1);
  -- a counted one stays UNKNOWN (-2)
  local some = ds:filter(function(v) return v:item() > 1 end)
  T.eq(some:repeat_():cardinality(), data.INFINITE_CARDINALITY)
  T.eq(some:repeat_(2):cardinality(), data.UNKNOWN_CARDINALITY)
  T.ok(same_list(epoch(some:repeat_():take(5)), { 2, 3, 2, 3, 2 }))
  T.eq(#epoch(ds:filter(function() return false end):repeat_()), 0)   -- nothing passes: ends, as take(0)
end)

T.test("prefetch: the same elements as without it; breaking out neither hangs nor leaks", function()
  local x = tensor.arange(5000):reshape(1000, 5):float()
  local y = tensor.arange(1000)
  local ds = data.Dataset.from_tensor_slices(x, y):shuffle(300, { seed = 3, reshuffle_each_iteration = false }):batch(64)
  local a = epoch(ds)
  local b = epoch(ds:prefetch(3))
  T.eq(#a, 5000); T.ok(same_list(a, b))
  T.ok(same_list(a, epoch(ds:prefetch(data.AUTOTUNE))))
  local t0 = os.time()
  local big = data.Dataset.range(100000000):batch(1000):prefetch(8)
  for k = 1, 100 do
    for e in big do if k % 2 == 0 then break end break end
  end
  collectgarbage(); collectgarbage()
  T.ok(os.time() - t0 < 10, "breaking out of prefetching loops took too long")
  local mem = tensor.memory and tensor.memory()
  T.ok(mem == nil or type(mem) == "table" or type(mem) == "number")
end)

T.test("map with a Lua function: arguments, results, errors", function()
  local x = tensor.arange(8):float()
  local y = tensor.arange(8)
  local ds = data.Dataset.from_tensor_slices(x, y)
  local doubled = ds:map(function(a, b) return a * 2, b end)
  local i = 0
  for e in doubled do
    T.eq(#e, 2); T.eq(e[1]:item(), 2 * i); T.eq(e[2]:item(), i)
    i = i + 1
  end
  T.eq(i, 8); T.eq(#doubled, 8)
  -- a table of tensors, numbers, batch after map
  local swapped = ds:map(function(a, b) return { b, a } end)
  for e in swapped do T.eq(e[1].dtype, "int64"); break end
  local nums = ds:map(function(a, b) return 7, 2.5 end):batch(3)
  for e in nums do
    T.eq(e[1].dtype, "int64"); T.eq(e[2].dtype, "float32"); T.eq(e[1].shape[1], 3)
    T.eq(num(e[1][0]), 7); T.eq(num(e[2][2]), 2.5)
    break
  end
  T.ok(same_list(epoch(doubled:batch(3)), { 0, 2, 4, 6, 8, 10, 12, 14 }))
  -- errors: raised from the loop, the session goes on
  local bad = ds:map(function(a) if a:item() == 3 then error("three is bad") end return a end)
  local seen = 0
  local err = T.raises(function() for e in bad do seen = seen + 1 end end, "three is bad")
  T.eq(seen, 3)
  T.ok(tostring(err):find("map function", 1, true), err)
  T.raises(function() for e in ds:map(function() end) do end end, "returned nothing")
  T.raises(function() for e in ds:map(function() return true end) do end end, "result 1 is a boolean; tensors, numbers or strings expected")
  T.raises(function() for e in ds:map(function() return 1, nil end) do end end, "result 2 is nil; tensors, numbers or strings expected")
  T.raises(function() for e in ds:map(function() return "s" end):batch(2) do end end, "is text (a string)")
  T.raises(function() for e in ds:map(function(a) return a:reshape(1):repeat_() end) do end end, "map function")
  T.raises(function() ds:map(42) end, "function expected")
  -- ragged map results cannot be batched: the message says so
  local ragged = ds:map(function(a) return tensor.zeros(1 + a:item() % 2) end):batch(4)
  T.raises(function() for e in ragged do end end, "element 2, component 1 is 2 float32")
  T.ok(same_list(epoch(doubled), { 0, 2, 4, 6, 8, 10, 12, 14 }))
end)

T.test("map then batch then prefetch: correct, with the Lua map on this thread", function()
  local x = tensor.arange(100):float()
  local calls = 0
  local ds = data.Dataset.from_tensor_slices(x):shuffle(100, { seed = 5, reshuffle_each_iteration = false })
  local mapped = ds:map(function(a) calls = calls + 1; return a + 1000 end):batch(32)
  local p = mapped:prefetch(2)
  T.ok(tostring(p):find("prefetch(2) -> map(on the iterating thread) -> batch(32)", 1, true), tostring(p))
  local a = epoch(mapped)
  local b = epoch(p)
  T.eq(#b, 100); T.ok(same_list(a, b)); T.eq(calls, 200)
  for _, v in ipairs(b) do T.ok(v >= 1000 and v < 1100) end
  -- a coroutine can drive the loop too
  local co = coroutine.wrap(function()
    local n = 0
    for e in p do n = n + e[1].shape[1]; coroutine.yield(n) end
    return -1
  end)
  T.eq(co(), 32); T.eq(co(), 64)
end)

T.test("data.load_csv and data.load_idx", function()
  write(tpath("a.csv"), "x,y\n1,2\n3,4.5\n")
  local t, names = data.load_csv(tpath("a.csv"))
  T.eq(t.shape[1], 2); T.eq(t.shape[2], 2); T.eq(num(t[1][1]), 4.5)
  T.eq(names[1], "x"); T.eq(names[2], "y")
  local t2, n2 = data.load_csv(tpath("a.csv"), { header = true, delimiter = "," })
  T.eq(t2.shape[1], 2); T.eq(n2[2], "y")
  write(tpath("b.csv"), "1;2\n3;4\n")
  local t3, n3 = data.load_csv(tpath("b.csv"), { delimiter = ";" })
  T.eq(t3.shape[1], 2); T.eq(n3, nil)
  write(tpath("r.csv"), "1,2\n3\n")
  T.raises(function() data.load_csv(tpath("r.csv")) end, "r.csv' line 2 has 1 fields, expected 2")
  T.raises(function() data.load_csv(tpath("none.csv")) end, "none.csv': No such file or directory")
  T.raises(function() data.load_csv(tpath("a.csv"), { delimiter = ",," }) end, "one-character")
  -- a tiny IDX file: 2x3 uint8
  write(tpath("t.idx"), "\0\0\8\2\0\0\0\2\0\0\0\3" .. string.char(0, 51, 102, 153, 204, 255))
  local u = data.load_idx(tpath("t.idx"))
  T.eq(u.dtype, "uint8"); T.eq(u.shape[1], 2); T.eq(u.shape[2], 3); T.eq(num(u[1][2]), 255)
  local f = data.load_idx(tpath("t.idx"), { dtype = "float32", scale = 1 / 255 })
  T.eq(f.dtype, "float32"); T.near(num(f[0][1]), 0.2)
  write(tpath("bad.idx"), "PK\3\4 not idx")
  T.raises(function() data.load_idx(tpath("bad.idx")) end, "is not an IDX file (magic 0x504b0304)")
  write(tpath("short.idx"), "\0\0\8\2\0\0\0\2\0\0\0\3" .. "ab")
  T.raises(function() data.load_idx(tpath("short.idx")) end, "truncated")
  T.raises(function() data.load_idx(tpath("nope.idx.gz")) end, "nope.idx.gz': No such file or directory")
  T.raises(function() data.load_idx(tpath("t.idx"), { dtype = "complex" }) end, "unknown dtype")
end)

T.test("ldist.io: safetensors round trip with metadata; errors", function()
  local w = tensor.arange(6):reshape(2, 3):float() / 4
  local ids = tensor.new({ 1, -2, 3 }, { dtype = "int32" })
  local big = tensor.new({ 2 ^ 40, -1 }, { dtype = "int64" })
  local bytes = tensor.new({ 0, 255 }, { dtype = "uint8" })
  local p = tpath("m.safetensors")
  T.eq(lio.save_safetensors(p, { ["dense/kernel"] = w, ids = ids, big = big, bytes = bytes },
    { epoch = 3, name = "test", ok = true }), true)
  T.ok(not exists(p .. ".tmp"))
  local ts, meta = lio.load_safetensors(p)
  T.eq(ts["dense/kernel"].dtype, "float32"); T.eq(ts["dense/kernel"].shape[2], 3)
  T.eq((ts["dense/kernel"] - w):abs():sum():item(), 0)
  T.eq(ts.ids.dtype, "int32"); T.eq(num(ts.ids[1]), -2)
  T.eq(ts.big.dtype, "int64"); T.eq(num(ts.big[0]), 2 ^ 40)
  T.eq(ts.bytes.dtype, "uint8"); T.eq(num(ts.bytes[1]), 255)
  T.eq(meta.epoch, "3"); T.eq(meta.name, "test"); T.eq(meta.ok, "true")
  local _, empty_meta = lio.load_safetensors(p) -- metadata table always present
  T.eq(type(empty_meta), "table")
  T.raises(function() lio.save_safetensors(p, { w = 3 }) end, "'w' is a number, not a tensor")
  T.raises(function() lio.save_safetensors(p, { w }) end, "tensor names must be strings")
  T.raises(function() lio.save_safetensors(p, { w = w }, { k = {} }) end, "strings, numbers or booleans")
  T.raises(function() lio.save_safetensors(tpath("no/dir/x.safetensors"), { w = w }) end, "No such file or directory")
  T.raises(function() lio.load_safetensors(tpath("missing.safetensors")) end, "missing.safetensors': No such file")
  write(tpath("junk.safetensors"), "\16\0\0\0\0\0\0\0{\"a\": [1, 2]}   ")
  T.raises(function() lio.load_safetensors(tpath("junk.safetensors")) end, "malformed safetensors header")
  -- the old file survives a failed write
  local ts2 = lio.load_safetensors(p)
  T.eq(num(ts2.ids[2]), 3)
end)

local FM = os.getenv("LDIST_DATA_DIR") or "/usr/share/datasets/fashion-mnist"
if exists(FM .. "/train-images-idx3-ubyte.gz") or exists(FM .. "/fashion-mnist/train-images-idx3-ubyte.gz") then
  T.test("datasets.fashion_mnist.load: shapes, dtypes, ranges, speed", function()
    local t0 = os.clock()
    local x, y = datasets.fashion_mnist.load("train")
    local dt = os.clock() - t0
    print(("# 60000 training images and labels in %.3f s (cpu)"):format(dt))
    T.ok(dt < 2.0 * T.time_scale, "loading took " .. dt .. " s")
    T.eq(x.dtype, "float32"); T.eq(x.ndim, 3)
    T.eq(x.shape[1], 60000); T.eq(x.shape[2], 28); T.eq(x.shape[3], 28)
    T.eq(y.dtype, "int64"); T.eq(y.shape[1], 60000)
    T.near(x:max():item(), 1.0); T.ok((-x):max():item() <= 0)
    T.eq(y:max():item(), 9); T.eq((-y):max():item(), 0)
    local xt, yt = datasets.fashion_mnist.load("test", { normalize = false })
    T.eq(xt.dtype, "uint8"); T.eq(xt.shape[1], 10000); T.eq(yt.shape[1], 10000)
    T.eq(xt:max():item(), 255)
    T.eq(#datasets.fashion_mnist.class_names, 10)
    T.raises(function() datasets.fashion_mnist.load("validation") end, 'split must be "train" or "test"')
    -- the seed's pipeline
    local n = 0
    for inputs in data.Dataset.from_tensor_slices(x, y):shuffle(60000, { seed = 1 }):batch(64):prefetch(2) do
      n = n + 1
      if n == 1 then T.eq(inputs[1].shape[1], 64); T.eq(inputs[2].shape[1], 64) end
    end
    T.eq(n, 938)
  end)
else
  print("ok - datasets.fashion_mnist.load # SKIP dataset-fashion-mnist is not installed (make setup)")
end

T.test("datasets: a missing data set names the file and how to get it; LDIST_DATA_DIR overrides", function()
  local err = T.raises(function() datasets.mnist.load("train") end, "train-images-idx3-ubyte.gz")
  T.ok(tostring(err):find("LDIST_DATA_DIR", 1, true), err)
  -- a private copy in $LDIST_DATA_DIR/fashion-mnist (plain IDX files are fine too)
  local dir = tpath("data/fashion-mnist")
  assert(os.execute("mkdir -p " .. dir))
  local function idx(n, dims, payload)
    local h = "\0\0\8" .. string.char(#dims)
    for _, d in ipairs(dims) do h = h .. string.pack(">I4", d) end
    return h .. payload
  end
  write(dir .. "/t10k-images-idx3-ubyte", idx(3, { 3, 28, 28 }, string.rep("\255", 3 * 784)))
  write(dir .. "/t10k-labels-idx1-ubyte", idx(3, { 3 }, "\1\2\3"))
  write(tpath("child.lua"), [[
    local x, y = datasets.fashion_mnist.load("test")
    print(x.shape[1], y:sum():item(), x:max():item())
    datasets.fashion_mnist.system_dir = "/nonexistent/fashion-mnist"
    local ok, e = pcall(datasets.fashion_mnist.load, "train")
    print(ok, e)
  ]])
  local exe = arg and arg[-1] or "./ldist"
  local h = lua_io.popen(("LDIST_DATA_DIR='%s' '%s' '%s' 2>&1"):format(tpath("data"), exe, tpath("child.lua")))
  local out = h:read("a"); h:close()
  T.ok(out:find("^3\t6%.?0?\t1"), out)
  -- the training files are missing there: the message names the file and the package
  T.ok(out:find("false\tFashion-MNIST: cannot find 'train-images-idx3-ubyte.gz'", 1, true), out)
  T.ok(out:find("apt-get install dataset-fashion-mnist", 1, true), out)
  T.ok(out:find(tpath("data/fashion-mnist/train-images-idx3-ubyte.gz"), 1, true), out)
end)

T.test("documentation: every public function has a docstring", function()
  local docs = L.docs
  local function has(obj, name)
    T.ok(docs[obj], "no docs for the object " .. name)
    T.ok(docs[name], "no docs under the name " .. name)
    T.ok(docs[name] and docs[name]:find("\n\n", 1, true), "docs of " .. name .. " lack 'signature\\n\\ndescription'")
  end
  for _, m in ipairs({ "batch", "shuffle", "repeat_", "take", "skip", "prefetch", "map", "cardinality", "iter" }) do
    has(data.Dataset[m], "data.Dataset:" .. m)
  end
  T.eq(docs[data.Dataset["repeat"]], docs[data.Dataset.repeat_])
  has(data.Dataset.from_tensor_slices, "data.Dataset.from_tensor_slices")
  has(data.Dataset.range, "data.Dataset.range")
  has(data.load_csv, "data.load_csv"); has(data.load_idx, "data.load_idx")
  has(lio.save_safetensors, "io.save_safetensors"); has(lio.load_safetensors, "io.load_safetensors")
  has(datasets.fashion_mnist.load, "datasets.fashion_mnist.load")
  has(datasets.fashion_mnist.load_data, "datasets.fashion_mnist.load_data")
  has(datasets.mnist.load, "datasets.mnist.load")
  T.ok(L.globals.data and L.globals.datasets)
  T.ok(docs["Dataset:batch"])   -- the name help() derives from the class
end)

T.test("one worker's part of each batch: its rows of the inputs, every row of the labels and weights", function()
  -- MultiWorkerMirrored's fit reads batches this way (it:_next_part): each of
  -- n workers gathers only its share of the inputs, split as ldist._util.share
  local x = tensor.arange(23 * 3):reshape(23, 3):astype("float32")
  local y, w = tensor.arange(23), tensor.arange(23):astype("float32") * 0.5
  local function ds() return data.Dataset.from_tensor_slices(x, y, w):shuffle(23, {seed = 4}):batch(6) end
  local whole = {}
  for b in ds():iter() do whole[#whole + 1] = b end
  T.eq(#whole, 4)
  for r = 0, 2 do
    local it, i = ds():iter(), 0
    while true do
      local part, rest, rows, first = it:_next_part(3, r, {"cpu:0"}, 2)
      if not part then break end
      i = i + 1
      local b = whole[i]
      T.eq(rows, b[1].shape[1], "the batch's rows")
      local lo, hi = ldist._util.share(rows, 3, r)
      T.eq(first, lo, "the part's first row")
      T.eq(part[1].shape[1], hi - lo, "the part's rows")
      if hi > lo then
        T.eq((part[1] - b[1]:slice(0, lo, hi)):abs():max():item(), 0, "the part's inputs")
      end
      T.eq(#rest, 2, "labels and weights, whole")
      T.eq((rest[1] - b[2]):abs():max():item(), 0, "every label")
      T.eq((rest[2] - b[3]):abs():max():item(), 0, "every weight")
    end
    T.eq(i, 4, "worker " .. r .. " read every batch")
  end
  local ok, err = pcall(function() ds():iter():_next_part(2, 2, {"cpu:0"}, 2) end)
  T.ok(not ok and tostring(err):find("part 2 of 2: no such part", 1, true), tostring(err))
end)

os.execute("rm -rf '" .. TMP .. "'")
T.done()
