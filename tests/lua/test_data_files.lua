-- test_data_files.lua - padded_batch, from_generator, element_spec and
-- make_csv_dataset: every expected output was produced by the same pipeline
-- in TensorFlow 2.21 (build/bench-venv; /tmp/tfx/tf.py, /tmp/tfx2/tf2.py) and
-- is written as TF printed it, plus a rebuild from each dataset's recipe.
local T = dofile("tests/lua/testlib.lua")
local L = ldist or package.loaded.ldist
local D = data.Dataset
local R = D.range

local DL = dofile("tests/lua/datalib.lua")
local flat, describe, ser, run = DL.flat, DL.describe, DL.ser, DL.run
local function check(ds, expected, card) return DL.check(T, ds, expected, card) end
local function specs(s)   -- element_spec as a string
  if getmetatable(s) and getmetatable(s).__tostring then return tostring(s) end
  local keys, p = {}, {}
  for k in pairs(s) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  for i, k in ipairs(keys) do p[i] = (type(k) == "string" and k .. "=" or "") .. specs(s[k]) end
  return "(" .. table.concat(p, ", ") .. ")"
end

-- TF: range(1, 5).map(lambda n: tf.fill([n], n))
local function fills() return R(1, 5):map(function(n) return tensor.full({ n:item() }, n:item(), { dtype = "int64" }) end) end

T.test("padded_batch: to the longest, to padded_shapes, drop_remainder (TF outputs)", function()
  -- TF padded: [([[1, 0], [2, 2]], int64), ([[3, 3, 3, 0], [4, 4, 4, 4]], int64)], spec (None, None), card 2
  check(fills():padded_batch(2), "[((1, 0, 2, 2), int64), ((3, 3, 3, 0, 4, 4, 4, 4), int64)]", 2)
  T.eq(specs(fills():padded_batch(2).element_spec), "(TensorSpec(shape=(None, None), dtype=int64))")
  local b = {}
  for e in fills():padded_batch(2) do b[#b + 1] = e[1].shape[2] end
  T.eq(b[1], 2); T.eq(b[2], 4)
  -- TF padded_shape: padded_batch(3, padded_shapes=[5], padding_values=-1) spec (None, 5)
  check(fills():padded_batch(3, { padded_shapes = { 5 }, padding_values = -1 }),
    "[((1, -1, -1, -1, -1, 2, 2, -1, -1, -1, 3, 3, 3, -1, -1), int64), ((4, 4, 4, 4, -1), int64)]", 2)
  T.eq(specs(fills():padded_batch(3, { padded_shapes = { 5 }, padding_values = -1 }).element_spec), "(TensorSpec(shape=(None, 5), dtype=int64))")
  -- TF padded_drop: [([[1, 0, 0], [2, 2, 0], [3, 3, 3]], int64)] spec (3, None) card 1
  check(fills():padded_batch(3, { drop_remainder = true }), "[((1, 0, 0, 2, 2, 0, 3, 3, 3), int64)]", 1)
  T.eq(specs(fills():padded_batch(3, { drop_remainder = true }).element_spec), "(TensorSpec(shape=(3, None), dtype=int64))")
  -- TF pad_scalar: range(5).padded_batch(2) -> [0,1], [2,3], [4]
  check(R(5):padded_batch(2), "[((0, 1), int64), ((2, 3), int64), ((4), int64)]", 3)
end)

T.test("padded_batch: several components, 2-D, values per component (TF outputs)", function()
  -- TF: range(1,4).map(lambda n: (fill([n,2], float(n)), fill([n], int32(n))))
  local ds = R(1, 4):map(function(n)
    local k = n:item()
    return tensor.full({ k, 2 }, k), tensor.full({ k }, k, { dtype = "int32" })
  end)
  -- TF pad_multi
  check(ds:padded_batch(2), "[(((1.0, 1.0, 0.0, 0.0, 2.0, 2.0, 2.0, 2.0), float32), ((1, 0, 2, 2), int32)), " ..
    "(((3.0, 3.0, 3.0, 3.0, 3.0, 3.0), float32), ((3, 3, 3), int32))]", 2)
  -- TF pad_multi_vals: padding_values=(-1.5, 9)
  check(ds:padded_batch(2, { padding_values = { -1.5, 9 } }), "[(((1.0, 1.0, -1.5, -1.5, 2.0, 2.0, 2.0, 2.0), float32), ((1, 9, 2, 2), int32)), " ..
    "(((3.0, 3.0, 3.0, 3.0, 3.0, 3.0), float32), ((3, 3, 3), int32))]")
  -- TF pad_multi_shapes: padded_shapes=([4, None], [5]) -> shapes (3,4,2), (3,5); spec ((None,4,None), (None,5))
  local p = ds:padded_batch(3, { padded_shapes = { { 4, -1 }, { 5 } } })
  check(p, "[(((1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 2.0, 2.0, 2.0, 2.0, 0.0, 0.0, 0.0, 0.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 0.0, 0.0), float32), " ..
    "((1, 0, 0, 0, 0, 2, 2, 0, 0, 0, 3, 3, 3, 0, 0), int32))]", 1)
  for e in p do T.eq(e[1].shape[2], 4); T.eq(e[2].shape[2], 5) end
  T.eq(specs(p.element_spec), "(TensorSpec(shape=(None, 4, None), dtype=float32), TensorSpec(shape=(None, 5), dtype=int32))")
  -- TF pad_dict: map to {"a": fill([n], n), "b": n}.padded_batch(2)
  local d = R(1, 4):map(function(n) return { a = tensor.full({ n:item() }, n:item(), { dtype = "int64" }), b = n } end)
  T.eq(run(d:padded_batch(2)), "[((a, ((1, 0, 2, 2), int64)), (b, ((1, 2), int64))), ((a, ((3, 3, 3), int64)), (b, ((3), int64)))]")
end)

T.test("padded_batch: errors", function()
  -- TF pad_small: "Attempted to pad to a smaller size than the input element."
  T.raises(function() for _ in fills():padded_batch(3, { padded_shapes = { 2 } }) do end end, "larger than its padded size 2")
  T.raises(function() fills():padded_batch(0) end, "batch size must be positive")
  T.raises(function() for _ in fills():padded_batch(2, { padded_shapes = { 2, 2 } }) do end end, "has 2 dimensions")
  T.raises(function() fills():padded_batch(2, { padding_values = "x" }) end, "padding_values")
  T.raises(function() fills():padded_batch(2, { padded_shapes = { -3 } }) end, "dimension 1")
end)

T.test("from_generator: iterator functions and coroutines, each pass afresh (TF gen)", function()
  -- TF gen: yields i*10 for i in range(3), output_signature TensorSpec((), int64) -> 0, 10, 20 int64, card -2
  local g = D.from_generator(function()
    local i = -1
    return function() i = i + 1; if i < 3 then return i * 10 end end
  end)
  check(g, "[(0, int64), (10, int64), (20, int64)]", data.UNKNOWN_CARDINALITY)
  T.eq(run(g), "[(0, int64), (10, int64), (20, int64)]", "second pass")
  local co = D.from_generator(function() for i = 0, 2 do coroutine.yield(i * 10) end end,
    { output_signature = data.TensorSpec({}, "int64") })
  check(co, "[(0, int64), (10, int64), (20, int64)]")
  T.eq(specs(co.element_spec), "(TensorSpec(shape=(), dtype=int64))")
  -- TF gen_float_sig: yield i/2 with TensorSpec((), float32) -> 0.0, 0.5, 1.0 float32
  check(D.from_generator(function() for i = 0, 2 do coroutine.yield(i / 2) end end,
    { output_signature = data.TensorSpec({}, "float32") }), "[(0.0, float32), (0.5, float32), (1.0, float32)]")
  -- TF gen_tuple: (float32 [i+1] of i, int32 i), padded_batch(2)
  local gt = D.from_generator(function()
    for i = 0, 2 do coroutine.yield(tensor.full({ i + 1 }, i), i) end
  end, { output_signature = { data.TensorSpec({ -1 }, "float32"), data.TensorSpec({}, "int32") } })
  check(gt:padded_batch(2), "[(((0.0, 0.0, 1.0, 1.0), float32), ((0, 1), int32)), (((2.0, 2.0, 2.0), float32), ((2), int32))]")
  T.eq(specs(gt:padded_batch(2).element_spec), "(TensorSpec(shape=(None, None), dtype=float32), TensorSpec(shape=(None,), dtype=int32))")
  -- prefetch over a generator keeps the elements
  T.eq(run(g:prefetch(2)), "[(0, int64), (10, int64), (20, int64)]")
end)

T.test("from_generator: errors, and no travel with local variables", function()
  T.raises(function() D.from_generator(5) end, "a function expected")
  T.raises(function() for _ in D.from_generator(function() return 5 end) do end end, "must return an iterator function")
  T.raises(function() for _ in D.from_generator(function() coroutine.yield(true) end) do end end, "tensors, numbers or strings expected")
  T.raises(function() for _ in D.from_generator(function() error("boom") end) do end end, "boom")
  T.raises(function()
    for _ in D.from_generator(function() coroutine.yield(tensor.ones({ 2 })) end,
      { output_signature = data.TensorSpec({ 3 }, "float32") }) do end
  end, "output_signature says")
  local n = 3
  local ds = D.from_generator(function() for i = 1, n do coroutine.yield(i) end end)
  T.eq(run(ds), "[(1, int64), (2, int64), (3, int64)]")
  T.raises(function() distribute._recipe_of(ds) end, "made by data.Dataset.from_generator with a function that uses the local variable 'n'")
  T.raises(function() distribute._recipe_of(ds:batch(2)) end, "cannot be sent to other processes")
end)

T.test("element_spec of sources and transformations (TF spec_*)", function()
  local x = tensor.arange(12):reshape(6, 2):float()
  local y = tensor.arange(6)
  -- TF spec_slices: ((2,), float32), ((), int64)
  T.eq(specs(D.from_tensor_slices(x, y).element_spec), "(TensorSpec(shape=(2,), dtype=float32), TensorSpec(shape=(), dtype=int64))")
  -- TF spec_batch: (None, 2), (None,); spec_batch_drop: (4, 2), (4,)
  T.eq(specs(D.from_tensor_slices(x, y):batch(4).element_spec), "(TensorSpec(shape=(None, 2), dtype=float32), TensorSpec(shape=(None,), dtype=int64))")
  T.eq(specs(D.from_tensor_slices(x, y):batch(4, { drop_remainder = true }):element_spec()), "(TensorSpec(shape=(4, 2), dtype=float32), TensorSpec(shape=(4,), dtype=int64))")
  -- TF spec_dict: {'x': (None, 2) float32, 'y': (None,) int64}
  T.eq(specs(D.from_tensor_slices({ x = x, y = y }):batch(2).element_spec), "(x=TensorSpec(shape=(None, 2), dtype=float32), y=TensorSpec(shape=(None,), dtype=int64))")
  -- TF spec_unbatch: ((2,), float32), ((), int64)
  T.eq(specs(D.from_tensor_slices(x, y):batch(4):unbatch().element_spec), "(TensorSpec(shape=(2,), dtype=float32), TensorSpec(shape=(), dtype=int64))")
  -- TF spec_enum: ((), int64), ((), int64); spec_zip: ((), int64), ((2,), float32)
  T.eq(specs(R(3):enumerate().element_spec), "(TensorSpec(shape=(), dtype=int64), TensorSpec(shape=(), dtype=int64))")
  T.eq(specs(D.zip(R(3), D.from_tensor_slices(x)).element_spec), "(TensorSpec(shape=(), dtype=int64), TensorSpec(shape=(2,), dtype=float32))")
  T.eq(specs(R(10):shuffle(3):repeat_(2):take(4):prefetch(2).element_spec), "(TensorSpec(shape=(), dtype=int64))")
  -- TF spec_map: map(lambda v: (float32(v), v)) -> ((), float32), ((), int64) (ldist reads a map's first element)
  T.eq(specs(R(3):map(function(v) return v:float(), v end).element_spec), "(TensorSpec(shape=(), dtype=float32), TensorSpec(shape=(), dtype=int64))")
end)

-- a.csv as in /tmp/tfx2/a.csv
local dir = os.getenv("TMPDIR") or "/tmp"
local function write(name, text)
  local p = dir .. "/ldist_test_" .. name
  local f = assert(io.open(p, "w")); f:write(text); f:close()
  return p
end
local A = write("a.csv", "a,b,c,label\n1,2.5,10,0\n2,3.5,20,1\n3,4.0,30,0\n4,5.25,40,1\n5,6.0,50000000000,0\n")
local mk = data.experimental.make_csv_dataset

T.test("make_csv_dataset: {features, label} batches with TF's inferred dtypes (TF csv*)", function()
  -- TF csv: batch 2, label 'label': a int32, b float32, c int64 (50000000000 > int32), label int32
  check(mk(A, 2, { label_name = "label", shuffle = false, num_epochs = 1 }),
    "[(((a, ((1, 2), int32)), (b, ((2.5, 3.5), float32)), (c, ((10, 20), int64))), ((0, 1), int32)), " ..
    "(((a, ((3, 4), int32)), (b, ((4.0, 5.25), float32)), (c, ((30, 40), int64))), ((0, 1), int32)), " ..
    "(((a, ((5), int32)), (b, ((6.0), float32)), (c, ((50000000000), int64))), ((0), int32))]")
  T.eq(specs(mk(A, 2, { label_name = "label", shuffle = false, num_epochs = 1 }).element_spec),
    "((a=TensorSpec(shape=(None,), dtype=int32), b=TensorSpec(shape=(None,), dtype=float32), c=TensorSpec(shape=(None,), dtype=int64)), TensorSpec(shape=(None,), dtype=int32))")
  -- TF csv_sel: select_columns a, label, batch 3
  check(mk(A, 3, { label_name = "label", select_columns = { "a", "label" }, shuffle = false, num_epochs = 1 }),
    "[(((a, ((1, 2, 3), int32))), ((0, 1, 0), int32)), (((a, ((4, 5), int32))), ((1, 0), int32))]")
  -- TF csv_nolabel: select b, batch 4 -> dict elements
  check(mk(A, 4, { select_columns = { "b" }, shuffle = false, num_epochs = 1 }),
    "[((b, ((2.5, 3.5, 4.0, 5.25), float32))), ((b, ((6.0), float32)))]")
  -- TF csv_defaults: column_defaults [float32, float32, float32, int64]
  check(mk(A, 5, { label_name = "label", column_defaults = { "float32", "float32", "float32", "int64" }, shuffle = false, num_epochs = 1 }),
    "[(((a, ((1.0, 2.0, 3.0, 4.0, 5.0), float32)), (b, ((2.5, 3.5, 4.0, 5.25, 6.0), float32)), " ..
    "(c, ((10.0, 20.0, 30.0, 40.0, 49999998976.0), float32))), ((0, 1, 0, 1, 0), int64))]")
  -- TF csv_epochs2: batches run across epochs
  check(mk(A, 3, { select_columns = { "a" }, shuffle = false, num_epochs = 2 }),
    "[((a, ((1, 2, 3), int32))), ((a, ((4, 5, 1), int32))), ((a, ((2, 3, 4), int32))), ((a, ((5), int32)))]")
  -- TF csv_semi (field_delim ';'), csv_nohdr (header=False, column_names)
  check(mk(write("semi.csv", "p;q\n1;2\n3;4\n"), 2, { field_delim = ";", shuffle = false, num_epochs = 1 }),
    "[((p, ((1, 3), int32)), (q, ((2, 4), int32)))]")
  check(mk(write("nohdr.csv", "1,2\n3,4\n"), 2, { header = false, column_names = { "u", "v" }, shuffle = false, num_epochs = 1 }),
    "[((u, ((1, 3), int32)), (v, ((2, 4), int32)))]")
  -- shuffled with a seed: the same rows, rebuilt alike
  local s = mk(A, 5, { select_columns = { "a" }, num_epochs = 1, shuffle_seed = 7 })
  T.eq(run(s), run(distribute._build_dataset(distribute._recipe_of(s))))
end)

T.test("make_csv_dataset: errors name the file, line and problem", function()
  -- TF csv_badrow: "CSV row 3 has 1 number of fields. Expected: 2."
  local bad = write("bad.csv", "a,b\n1,2\n3\n")
  T.raises(function() mk(bad, 2, { shuffle = false, num_epochs = 1 }) end, "ldist_test_bad.csv line 3: 1 fields, expected 2")
  -- TF csv_badnum: "Field 1 in record is not a valid int32: x"
  local bad2 = write("bad2.csv", "a,b\n1,2\n3,x\n")
  T.raises(function() mk(bad2, 2, { shuffle = false, num_epochs = 1 }) end, "bad2.csv line 3: column 'b' is 'x', not a number")
  -- TF csv_missing: "No files match `file_pattern` nofile.csv."
  T.raises(function() mk(dir .. "/ldist_no_such.csv", 2) end, "cannot read '" .. dir .. "/ldist_no_such.csv'")
  T.raises(function() mk(A, 2, { label_name = "zz" }) end, "label_name 'zz'")
end)

T.test("help text", function()
  for _, f in ipairs({ D.padded_batch, D.from_generator, D.element_spec, data.experimental.make_csv_dataset, data.TextLineDataset }) do
    T.ok(L.docs[f])
  end
end)

T.done()
