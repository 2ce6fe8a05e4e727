-- test_data_text.lua - strings in pipelines (data.TextLineDataset, lists of
-- file names), interleave, flat_map, list_files, cache(filename) and
-- options(): each expected output below is what the same pipeline gave in
-- TensorFlow 2.21 (build/bench-venv), as TF prints it (b'...' for a
-- tf.string), plus a rebuild from each dataset's recipe and the errors.
local T = dofile("tests/lua/testlib.lua")
local D = data.Dataset
local R = D.range
local DL = dofile("tests/lua/datalib.lua")
local run = DL.run
local function check(ds, expected, card) return DL.check(T, ds, expected, card) end

local dir = os.tmpname()
os.remove(dir)
os.execute("mkdir -p " .. dir)
local function write(name, text)
  local f = assert(io.open(dir .. "/" .. name, "wb"))
  f:write(text)
  f:close()
  return dir .. "/" .. name
end
local t1 = write("t1.txt", "a,1\r\nb,2\n\nlast")     -- CRLF, an empty line, no final newline
local t2 = write("t2.txt", "x\n")
local t3 = write("t3.txt", "")

T.test("TextLineDataset: the lines of the files in order, without their line ends", function()
  -- TF: TextLineDataset([t1, t3, t2]) -> [b'a,1', b'b,2', b'', b'last', b'x'], cardinality -2
  check(data.TextLineDataset({ t1, t3, t2 }),
    "[(b'a,1', string), (b'b,2', string), (b'', string), (b'last', string), (b'x', string)]", data.UNKNOWN_CARDINALITY)
  check(data.TextLineDataset(t2), "[(b'x', string)]")
  -- TF: TensorSpec(shape=(), dtype=tf.string, name=None)
  T.eq(tostring(data.TextLineDataset(t1).element_spec[1]), "TensorSpec(shape=(), dtype=string)")
end)

T.test("lines are Lua strings in map and filter, and pass through the other transformations", function()
  -- TF: TextLineDataset([t1, t2]).enumerate(5).filter(lambda i, l: tf.strings.length(l) > 0).shard(2, 1)
  --     -> [(6, b'b,2'), (9, b'x')]
  check(data.TextLineDataset({ t1, t2 }):enumerate(5):filter(function(i, l) return #l > 0 end):shard(2, 1),
    "[((6, int64), (b'b,2', string)), ((9, int64), (b'x', string))]")
  -- TF: zip((TextLineDataset(t2), range(3))) -> [(b'x', 0)]
  check(D.zip(data.TextLineDataset(t2), R(3)), "[((b'x', string), (0, int64))]")
  -- parse "name,value" lines to numbers (TF: tf.strings.split + to_number(out_type=int64))
  local parsed = data.TextLineDataset(t1):take(2):map(function(l)
    local k, v = l:match("^(%w+),(%d+)$")
    return #k, tonumber(v)
  end):batch(2)
  check(parsed, "[(((1, 1), int64), ((1, 2), int64))]")
  -- a map may return strings too, and prefetch carries them from its thread
  check(data.TextLineDataset(t1):map(function(l) return l:upper() end):prefetch(2):skip(3),
    "[(b'LAST', string)]")
  local seen = {}
  for e in data.TextLineDataset({ t1, t2 }):shuffle(10, { seed = 3 }) do seen[#seen + 1] = e[1] end
  table.sort(seen)
  T.eq(table.concat(seen, "|"), "|a,1|b,2|last|x")
end)

T.test("TextLineDataset errors name the file; strings cannot be batched", function()
  T.raises(function() data.TextLineDataset(dir .. "/missing.txt") end, "cannot read '" .. dir .. "/missing.txt'")
  T.raises(function() data.TextLineDataset({}) end, "no file names")
  T.raises(function() data.TextLineDataset(3) end, "a file name or a list of them")
  T.raises(function() data.TextLineDataset(t1, "ZLIB") end, "compression_type")
  T.raises(function() for _ in data.TextLineDataset(t1):batch(2) do end end,
    "component 1 is text (a string); ldist has no string tensors")
  T.raises(function() for _ in data.TextLineDataset(t1):padded_batch(2) do end end, "is text")
end)

T.test("gzip-compressed files read as text; a damaged one fails mid-epoch naming file and line, after its good lines", function()
  local gz = dir .. "/g.txt.gz"
  local lines = {}
  for i = 1, 4000 do lines[i] = ("line %d %s"):format(i, ("x"):rep(i % 37)) end
  write("g.txt", table.concat(lines, "\n") .. "\n")
  os.execute(("gzip -c %s/g.txt > %s"):format(dir, gz))
  local n, last = 0, nil
  for e in data.TextLineDataset(gz, "GZIP") do n = n + 1; last = e[1] end
  T.eq(n, 4000); T.eq(last, lines[4000])
  -- cut the compressed file in half: the lines before the cut come, then an error
  local f = assert(io.open(gz, "rb")); local bytes = f:read("a"); f:close()
  local cut = write("cut.txt.gz", bytes:sub(1, #bytes // 2))
  local got = 0
  local ok, err = pcall(function() for _ in data.TextLineDataset(cut) do got = got + 1 end end)
  T.ok(not ok, "a truncated file is an error")
  T.ok(tostring(err):find("cut.txt.gz' line %d+"), tostring(err))
  T.ok(got > 100, ("%d lines came before the error"):format(got))
end)

T.test("from_tensor_slices of strings: one string per element", function()
  -- TF: from_tensor_slices(['a', 'bc']) -> [b'a', b'bc']
  check(D.from_tensor_slices({ "a", "bc" }), "[(b'a', string), (b'bc', string)]", 2)
  T.raises(function() D.from_tensor_slices({ "a", 2 }) end, "entry 2 is a number")
end)

T.test("interleave: TF's order for cycle_length and block_length", function()
  local function rep(x) return ldist.data.Dataset.from_tensor_slices(ldist.tensor.full({ x:item() }, x:item()):astype("int64")) end
  local function vals(ds) local o = {} for e in ds do o[#o + 1] = e[1]:item() end return table.concat(o, " ") end
  -- TF: range(1,6).interleave(lambda x: from_tensors(x).repeat(x), cycle_length=2, block_length=1)
  T.eq(vals(R(1, 6):interleave(rep, 2, 1)), "1 2 2 3 3 4 3 4 4 5 4 5 5 5 5")
  -- ... cycle_length=3, block_length=2
  T.eq(vals(R(1, 6):interleave(rep, { cycle_length = 3, block_length = 2 })), "1 2 2 3 3 4 4 3 4 4 5 5 5 5 5")
  -- TF: range(1,4).flat_map(lambda x: range(x)) -> [0, 0, 1, 0, 1, 2]
  check(R(1, 4):flat_map(function(x) return ldist.data.Dataset.range(x:item()) end),
    "[(0, int64), (0, int64), (1, int64), (0, int64), (1, int64), (2, int64)]")
  -- TF: from_tensor_slices([t1, t2]).interleave(TextLineDataset, cycle_length=2, block_length=2)
  --     -> [b'a,1', b'b,2', b'x', b'', b'last']
  check(D.from_tensor_slices({ t1, t2 }):interleave(function(f) return ldist.data.TextLineDataset(f) end, 2, 2),
    "[(b'a,1', string), (b'b,2', string), (b'x', string), (b'', string), (b'last', string)]")
  T.raises(function() for _ in R(2):interleave(function() return 1 end, 1) do end end, "must return a dataset")
  T.raises(function() R(2):interleave(rep, 0) end, "cycle_length")
end)

T.test("list_files: sorted, shuffled by a seed that travels; no match is an error", function()
  check(D.list_files(dir .. "/t*.txt", { shuffle = false }),
    ("[(b'%s', string), (b'%s', string), (b'%s', string)]"):format(t1, t2, t3))
  local a = D.list_files(dir .. "/t*.txt", { seed = 7 })
  T.eq(run(a), run(D.list_files(dir .. "/t*.txt", { seed = 7 })))
  T.eq(run(distribute._build_dataset(distribute._recipe_of(D.list_files(dir .. "/t*.txt")))) ~= nil, true)
  local s = {}
  for e in a do s[#s + 1] = e[1] end
  table.sort(s)
  T.eq(table.concat(s, " "), table.concat({ t1, t2, t3 }, " "))
  T.raises(function() D.list_files(dir .. "/nothing*") end, "no files matched pattern")
end)

T.test("cache(filename): the first full pass writes the file, later ones (and other datasets) read it", function()
  local path = dir .. "/cache"
  local calls = 0
  local ds = R(5):map(function(v) calls = calls + 1; return v * 2, "s" .. v:item() end):cache(path)
  -- a pass left early writes nothing
  for _ in ds:take(2) do end
  T.eq(io.open(path) == nil, true, "no file after a partial pass")
  -- TF: range(5).map(lambda x: x*2).cache(f) -> [0, 2, 4, 6, 8]
  local want = "[((0, int64), (b's0', string)), ((2, int64), (b's1', string)), ((4, int64), (b's2', string)), " ..
    "((6, int64), (b's3', string)), ((8, int64), (b's4', string))]"
  T.eq(run(ds), want)
  calls = 0
  T.eq(run(ds), want); T.eq(calls, 0, "the second pass reads the file")
  -- TF: range(3).cache(f) on an existing cache file yields the file's elements
  T.eq(run(R(3):cache(path)), want)
  -- damaged or foreign files are errors naming the file
  local f = assert(io.open(path, "rb")); local bytes = f:read("a"); f:close()
  write("cut", bytes:sub(1, #bytes - 20))
  T.raises(function() for _ in R(3):cache(dir .. "/cut") do end end, "cut' ends after")
  T.raises(function() for _ in R(3):cache(t1) do end end, "is not an ldist cache file")
  T.raises(function() for _ in R(3):cache(dir .. "/no/such/dir/c") do end end, "cannot create")
end)

T.test("options: with_options carries the auto-shard policy up the pipeline", function()
  local o = data.Options()
  T.eq(tostring(R(3):options()), "Options(auto_shard_policy=AUTO, deterministic=true)")
  o.experimental_distribute.auto_shard_policy = data.experimental.AutoShardPolicy.DATA
  local ds = R(3):with_options(o):map(function(v) return v end):batch(2)
  T.eq(ds:options().experimental_distribute.auto_shard_policy, "DATA")
  check(ds, "[((0, 1), int64), ((2), int64)]")
  T.eq(distribute._build_dataset(distribute._recipe_of(ds)):options().experimental_distribute.auto_shard_policy, "DATA")
  -- the later with_options wins
  local off = data.Options()
  off.experimental_distribute.auto_shard_policy = "OFF"
  T.eq(ds:with_options(off):options().experimental_distribute.auto_shard_policy, "OFF")
  T.eq(D.zip(R(2):with_options(off), R(2)):options().experimental_distribute.auto_shard_policy, "OFF")
  local bad = data.Options()
  bad.experimental_distribute.auto_shard_policy = "SOMETIMES"
  T.raises(function() R(3):with_options(bad) end, "auto_shard_policy must be AUTO, FILE, DATA or OFF")
end)

T.test("from_generator yields strings under a string signature", function()
  local ds = D.from_generator(function() coroutine.yield("p"); coroutine.yield("q") end,
    { output_signature = data.TensorSpec({}, "string") })
  T.eq(run(ds), "[(b'p', string), (b'q', string)]")
  T.eq(tostring(ds.element_spec[1]), "TensorSpec(shape=(), dtype=string)")
  T.raises(function() for _ in D.from_generator(function() coroutine.yield(1) end,
    { output_signature = data.TensorSpec({}, "string") }) do end end, "output_signature says a string")
end)

T.test("make_csv_dataset takes a glob pattern, files in sorted order", function()
  write("c2.csv", "a,b\n3,4\n")
  write("c1.csv", "a,b\n1,2\n")
  -- TF: make_csv_dataset(dir + "/c*.csv", 2, shuffle=False, num_epochs=1, label_name="b")
  --     -> ({'a': [1, 3]}, [2, 4]), int32
  check(data.experimental.make_csv_dataset(dir .. "/c*.csv", 2, { shuffle = false, num_epochs = 1, label_name = "b" }),
    "[(((a, ((1, 3), int32))), ((2, 4), int32))]")
  T.raises(function() data.experimental.make_csv_dataset(dir .. "/zz*.csv", 2) end, "no files match file_pattern")
end)

T.test("help text", function()
  for _, f in ipairs({ data.TextLineDataset, D.interleave, D.flat_map, D.list_files, D.with_options, D.options, data.Options }) do
    T.ok(ldist.docs[f])
  end
end)

os.execute("rm -rf " .. dir)
T.done()
