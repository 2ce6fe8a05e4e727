-- test_file_safety.lua - every file ldist writes refuses to write through a
-- link planted by someone else (issue 27, item 5): ds:cache's temporary file,
-- io.save_image, CSVLogger, ModelCheckpoint, TensorBoard, plots, timelines and
-- traces. A planted link points at a "victim" file that must keep its content.
local T = dofile("tests/lua/testlib.lua")
local L = ldist or package.loaded.ldist

local DIR, tpath = T.tmpdir()

local function read_all(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end
local function write_all(path, s)
  local f = assert(io.open(path, "wb")); f:write(s); f:close()
end
local function is_link(path) return os.execute(("test -L '%s'"):format(path)) == true end
local function is_file(path) return os.execute(("test -f '%s' && ! test -L '%s'"):format(path, path)) == true end
local function link(target, name) assert(os.execute(("ln -sf '%s' '%s'"):format(target, name))) end

local function victim(name)
  local v = tpath(name)
  write_all(v, "precious\n")
  return v
end

local PID = tonumber(read_all("/proc/self/stat"):match("^(%d+)"))

T.test("ds:cache(name) does not write through links planted at its temporary names", function()
  local v = victim("victim_cache")
  local name = tpath("ds.cache")
  -- the old temporary names were "<name>.tmp-<pid>-<n>": plant every likely one
  for n = 1, 64 do link(v, ("%s.tmp-%d-%d"):format(name, PID, n)) end
  local ds = data.Dataset.range(5):cache(name)
  local seen = {}
  for x in ds do seen[#seen + 1] = x[1]:item() end
  T.eq(#seen, 5)
  T.eq(read_all(v), "precious\n", "the victim kept its content")
  T.ok(is_file(name), "the cache is a regular file of its own")
  -- and the file holds the pass: a second dataset reads it back
  local again = {}
  for x in data.Dataset.range(99):cache(name) do again[#again + 1] = x[1]:item() end
  T.eq(table.concat(again, ","), "0,1,2,3,4")
end)

T.test("ds:cache(name) replaces a link planted at the name instead of writing through it", function()
  local v = victim("victim_cache2")
  local name = tpath("ds2.cache")
  link(tpath("missing-target"), name)       -- a dangling link: no cache there yet
  for _ in data.Dataset.range(3):cache(name) do end
  T.ok(read_all(tpath("missing-target")) == nil, "nothing was created at the link's target")
  T.ok(is_file(name), "the name now holds the cache")
  T.eq(read_all(v), "precious\n")
end)

T.test("io.save_image does not write through a link planted at the path", function()
  for _, ext in ipairs{ "png", "jpg" } do
    local v = victim("victim_img_" .. ext)
    local p = tpath("img." .. ext)
    link(v, p)
    L.io.save_image(p, tensor.zeros({4, 5, 3}, {dtype = "uint8"}))
    T.eq(read_all(v), "precious\n", ext .. ": the victim kept its content")
    T.ok(is_file(p), ext .. ": the path is a regular file now")
    T.eq(L.io.load_image(p).shape[2], 5)
  end
end)

T.test("io.save_image leaves no temporary file beside the path when it fails", function()
  local p = tpath("bad.jpg")
  T.raises(function() L.io.save_image(p, tensor.zeros({4, 5, 2}, {dtype = "uint8"})) end, "")
  local listing = io.popen("ls -a '" .. DIR .. "'"):read("a")
  T.ok(not listing:find("bad.jpg.tmp", 1, true), "no temporary file left: " .. listing)
end)

local function tiny_fit(callbacks)
  local x = tensor.ones({8, 2})
  local y = tensor.zeros({8, 1})
  local m = nn.Sequential{nn.Dense(1)}
  m:compile{optimizer = "sgd", loss = "mse"}
  m:fit(x, y, {epochs = 2, batch_size = 4, verbose = 0, callbacks = callbacks})
  return m
end

T.test("CSVLogger does not write through a link planted at its file", function()
  local v = victim("victim_csv")
  local p = tpath("log.csv")
  link(v, p)
  tiny_fit{ callbacks.CSVLogger(p) }
  T.eq(read_all(v), "precious\n")
  T.ok(is_file(p))
  T.ok(read_all(p):match("^epoch,loss,val_loss\r\n0,"), read_all(p))
end)

T.test("CSVLogger(append=true) refuses a link planted at its file", function()
  local v = victim("victim_csv_append")
  local p = tpath("log_append.csv")
  link(v, p)
  T.raises(function() tiny_fit{ callbacks.CSVLogger(p, {append = true}) } end, "symbolic link")
  T.eq(read_all(v), "precious\n")
end)

T.test("ModelCheckpoint does not write through a link planted at its path", function()
  local v = victim("victim_ckpt")
  local p = tpath("ck.safetensors")
  link(v, p)
  tiny_fit{ callbacks.ModelCheckpoint{filepath = p, save_weights_only = true, monitor = "loss"} }
  T.eq(read_all(v), "precious\n")
  T.ok(is_file(p))
end)

T.test("TensorBoard does not write through links planted at its event file names", function()
  local v = victim("victim_tb")
  local dir = tpath("tb")
  assert(os.execute("mkdir -p '" .. dir .. "/train'"))
  local host = io.popen("hostname"):read("l")
  local now = os.time()
  for t = now - 1, now + 5 do
    for k = 0, 9 do link(v, ("%s/train/events.out.tfevents.%d.%s.%d.%d.v2"):format(dir, t, host, PID, k)) end
  end
  tiny_fit{ callbacks.TensorBoard{log_dir = dir} }
  T.eq(read_all(v), "precious\n")
end)

T.test("plot:save, timeline:save and write_trace do not write through planted links", function()
  local v = victim("victim_plot")
  local p = tpath("plot.svg")
  link(v, p)
  L.plot({loss = {3, 2, 1}}, {show = false}):save(p)
  T.eq(read_all(v), "precious\n")
  T.ok(is_file(p) and read_all(p):find("<svg", 1, true))
  local s = distribute.MirroredStrategy{devices = {"cpu:0"}}
  local tr = tpath("trace.json")
  link(v, tr)
  s:write_trace(tr)
  T.eq(read_all(v), "precious\n")
  T.ok(is_file(tr) and read_all(tr):find("traceEvents", 1, true))
end)

os.execute("rm -rf '" .. DIR .. "'")
T.done()
