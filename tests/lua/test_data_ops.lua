-- test_data_ops.lua - tf.data's everyday transformations (filter, zip, shard,
-- enumerate, unbatch, cache): each pipeline's expected output below was
-- produced by the same pipeline in TensorFlow 2.21 (build/bench-venv) and is
-- written here as TF printed it (values, dtypes, cardinality), plus a rebuild
-- from each dataset's recipe and the errors.
local T = dofile("tests/lua/testlib.lua")
local L = ldist or package.loaded.ldist
local D = data.Dataset
local R = D.range

local DL = dofile("tests/lua/datalib.lua")
local flat, describe, ser, run = DL.flat, DL.describe, DL.ser, DL.run
local function check(ds, expected, card) return DL.check(T, ds, expected, card) end

local x = tensor.arange(12):reshape(6, 2):float()     -- np.arange(12, float32).reshape(6, 2)
local y = tensor.arange(6)                            -- np.arange(6, int64)

T.test("filter: Dataset.range(10).filter(lambda x: x % 2 == 0)", function()
  -- TF: [(0,'int64'), (2,'int64'), (4,'int64'), (6,'int64'), (8,'int64')], card -2
  check(R(10):filter(function(v) return v:item() % 2 == 0 end),
    "[(0, int64), (2, int64), (4, int64), (6, int64), (8, int64)]", data.UNKNOWN_CARDINALITY)
  -- a 0-d tensor result (a comparison) works as TF's bool tensor
  check(R(10):filter(function(v) return v:gt(6) end), "[(7, int64), (8, int64), (9, int64)]")
end)

T.test("filter on (x, y) elements, then batch", function()
  -- TF: from_tensor_slices((x, y)).filter(lambda a, b: a[0] > 3.0)
  check(D.from_tensor_slices(x, y):filter(function(a, b) return a[1] > 3 end),
    "[(((4.0, 5.0), float32), (2, int64)), (((6.0, 7.0), float32), (3, int64)), (((8.0, 9.0), float32), (4, int64)), " ..
    "(((10.0, 11.0), float32), (5, int64))]")
  -- TF: range(10).filter(lambda x: x % 3 != 0).batch(3) -> [[1,2,4], [5,7,8]]
  check(R(10):filter(function(v) return v:item() % 3 ~= 0 end):batch(3),
    "[((1, 2, 4), int64), ((5, 7, 8), int64)]")
end)

T.test("filter: predicate errors name the problem", function()
  T.raises(function() R(3):filter(5) end, "the predicate must be a function")
  T.raises(function() for _ in R(3):filter(function() end) do end end, "returned nothing (nil)")
  T.raises(function() for _ in D.from_tensor_slices(x):filter(function(a) return a end) do end end, "shape")
  T.raises(function() for _ in R(3):filter(function() error("boom") end) do end end, "boom")
  -- a predicate using a local cannot travel, as for map
  local k = 3
  T.raises(function() distribute._recipe_of(R(5):filter(function(v) return v:item() > k end)) end, "'k'")
end)

T.test("zip: stops at the shortest; nested elements", function()
  -- TF: zip((range(5), range(10, 13))): [((0,int64),(10,int64)), ((1,..),(11,..)), ((2,..),(12,..))], card 3
  check(D.zip({ R(5), R(10, 13) }), "[((0, int64), (10, int64)), ((1, int64), (11, int64)), ((2, int64), (12, int64))]", 3)
  check(D.zip(R(5), R(10, 13)), "[((0, int64), (10, int64)), ((1, int64), (11, int64)), ((2, int64), (12, int64))]", 3)
  -- TF: zip((from_tensor_slices((x, y)), range(100, 104)))
  check(D.zip({ D.from_tensor_slices(x, y), R(100, 104) }),
    "[((((0.0, 1.0), float32), (0, int64)), (100, int64)), ((((2.0, 3.0), float32), (1, int64)), (101, int64)), " ..
    "((((4.0, 5.0), float32), (2, int64)), (102, int64)), ((((6.0, 7.0), float32), (3, int64)), (103, int64))]", 4)
  -- TF: zip((range(5), range(10, 15))).batch(2)
  check(D.zip({ R(5), R(10, 15) }):batch(2),
    "[(((0, 1), int64), ((10, 11), int64)), (((2, 3), int64), ((12, 13), int64)), (((4), int64), ((14), int64))]", 3)
  -- map over a zip gets one argument per dataset, as in TF; a zip of a map rebuilds too
  check(D.zip({ R(3), R(10, 13) }):map(function(a, b) return b, a end), "[((10, int64), (0, int64)), ((11, int64), (1, int64)), ((12, int64), (2, int64))]")
  check(D.zip({ R(3):map(function(a) return a end), R(10, 13) }), "[((0, int64), (10, int64)), ((1, int64), (11, int64)), ((2, int64), (12, int64))]")
  T.eq(D.zip({ R(5), R(3):repeat_() }):cardinality(), 5)
end)

T.test("zip: errors", function()
  T.raises(function() D.zip({}) end, "no datasets given")
  T.raises(function() D.zip({ R(3), 5 }) end, "dataset 2 is a number")
  T.raises(function() D.zip({ a = R(3) }) end, "a list of datasets")
end)

T.test("shard: element i goes to shard i % n", function()
  -- TF: range(10).shard(3, 1) -> [1, 4, 7] card 3; shard(3, 0) -> [0, 3, 6, 9] card 4
  check(R(10):shard(3, 1), "[(1, int64), (4, int64), (7, int64)]", 3)
  check(R(10):shard(3, 0), "[(0, int64), (3, int64), (6, int64), (9, int64)]", 4)
  -- TF: range(7).shard(2, 1).batch(2) -> [[1, 3], [5]] card 2
  check(R(7):shard(2, 1):batch(2), "[((1, 3), int64), ((5), int64)]", 2)
  check(D.from_tensor_slices(x, y):shard(4, 1), "[(((2.0, 3.0), float32), (1, int64)), (((10.0, 11.0), float32), (5, int64))]", 2)
end)

T.test("shard: bad arguments are errors, as TF's", function()
  -- TF: "Number of shards must be greater than zero (currently num_shards = 0)"
  T.raises(function() R(10):shard(0, 0) end, "num_shards must be greater than zero (got 0)")
  -- TF: "Index must be between 0 and 2 (currently index = 3)" / (index = -1)
  T.raises(function() R(10):shard(3, 3) end, "index must be between 0 and 2 (got 3)")
  T.raises(function() R(10):shard(3, -1) end, "index must be between 0 and 2 (got -1)")
  T.raises(function() R(10):shard(3) end, "number expected")
end)

T.test("enumerate: {int64 index, element}", function()
  -- TF: from_tensor_slices([7., 8., 9.]).enumerate()
  local f = tensor.from({ 7, 8, 9 })
  check(D.from_tensor_slices(f):enumerate(), "[((0, int64), (7.0, float32)), ((1, int64), (8.0, float32)), ((2, int64), (9.0, float32))]", 3)
  -- TF: from_tensor_slices(int32 [7, 8, 9]).enumerate(start=5)
  local i32 = tensor.from({ 7, 8, 9 }, { dtype = "int32" })
  check(D.from_tensor_slices(i32):enumerate({ start = 5 }),
    "[((5, int64), (7, int32)), ((6, int64), (8, int32)), ((7, int64), (9, int32))]", 3)
  check(D.from_tensor_slices(i32):enumerate(5), "[((5, int64), (7, int32)), ((6, int64), (8, int32)), ((7, int64), (9, int32))]")
  -- TF: from_tensor_slices((x[:2], y[:2])).enumerate()
  check(D.from_tensor_slices(x, y):take(2):enumerate(),
    "[((0, int64), (((0.0, 1.0), float32), (0, int64))), ((1, int64), (((2.0, 3.0), float32), (1, int64)))]", 2)
  -- each epoch counts from start again
  local e = R(2):enumerate()
  T.eq(run(e), run(e))
  T.raises(function() R(2):enumerate("a") end, "start must be an integer")
end)

T.test("unbatch", function()
  -- TF: range(7).batch(3).unbatch() -> 0..6, card -2
  check(R(7):batch(3):unbatch(), "[(0, int64), (1, int64), (2, int64), (3, int64), (4, int64), (5, int64), (6, int64)]",
    data.UNKNOWN_CARDINALITY)
  -- TF: from_tensor_slices((x, y)).batch(4).unbatch().take(5)
  check(D.from_tensor_slices(x, y):batch(4):unbatch():take(5),
    "[(((0.0, 1.0), float32), (0, int64)), (((2.0, 3.0), float32), (1, int64)), (((4.0, 5.0), float32), (2, int64)), " ..
    "(((6.0, 7.0), float32), (3, int64)), (((8.0, 9.0), float32), (4, int64))]")
  -- TF: from_tensor_slices(x.reshape(3, 2, 2)).unbatch(), card 6
  check(D.from_tensor_slices(x:reshape(3, 2, 2)):unbatch(),
    "[((0.0, 1.0), float32), ((2.0, 3.0), float32), ((4.0, 5.0), float32), ((6.0, 7.0), float32), ((8.0, 9.0), float32), ((10.0, 11.0), float32)]", 6)
  T.raises(function() for _ in R(3):unbatch() do end end, "scalar")
end)

T.test("cache: the first full pass fills it, later passes read it", function()
  -- TF: range(5).map(lambda v: v * 2).cache() -> [0, 2, 4, 6, 8] int64, card 5. Here an identity map over
  -- range(0, 10, 2) that counts its calls (in ldist v * 2 and v + v give float32: its arithmetic, not data)
  local calls = 0
  local ds = R(0, 10, 2):map(function(v) calls = calls + 1; return v end):cache()
  local want = "[(0, int64), (2, int64), (4, int64), (6, int64), (8, int64)]"
  T.eq(ds:cardinality(), 5)
  -- a partial pass leaves no partial cache
  for _ in ds do break end
  T.eq(calls, 1)
  T.eq(run(ds), want); T.eq(calls, 6)
  T.eq(run(ds), want); T.eq(calls, 6, "the second full pass reads the cache")
  T.eq(run(ds:take(2)), "[(0, int64), (2, int64)]"); T.eq(calls, 6)
  -- elements handed out are copies: writing into one leaves the cache intact
  check(R(0, 10, 2):map(function(v) return v end):cache(), want, 5)
end)

T.test("prefetch over Lua filters and zips keeps the elements", function()
  local ds = D.zip({ R(20):filter(function(v) return v:item() % 2 == 1 end), R(100, 200):shard(2, 0) }):prefetch(2)
  T.eq(run(ds:take(3)), "[((1, int64), (100, int64)), ((3, int64), (102, int64)), ((5, int64), (104, int64))]")
  local f = R(10):batch(2):unbatch():filter(function(v) return v:item() > 6 end):prefetch(2)
  T.eq(run(f), "[(7, int64), (8, int64), (9, int64)]")
end)

T.test("help text for every new transformation", function()
  for _, name in ipairs({ "filter", "shard", "enumerate", "unbatch", "cache" }) do
    T.ok(L.docs[D[name]], name)
  end
  T.ok(L.docs[D.zip], "zip")
end)

T.test("an unknown option of batch, shuffle, padded_batch or enumerate is an error naming it", function()
  local d = data.Dataset.from_tensor_slices(tensor.normal(8, 3))
  T.raises(function() d:batch(2, { drop_remainderr = true }) end,
    "Dataset:batch: unknown option 'drop_remainderr'; did you mean 'drop_remainder'?")
  T.raises(function() d:shuffle(8, { seeed = 1 }) end, "Dataset:shuffle: unknown option 'seeed'; did you mean 'seed'?")
  T.raises(function() d:padded_batch(2, { padding_value = 0 }) end, "Dataset:padded_batch: unknown option 'padding_value'")
  T.raises(function() d:enumerate({ strat = 1 }) end, "Dataset:enumerate: unknown option 'strat'")
  T.eq(d:batch(3, { drop_remainder = true }):cardinality(), 2, "batch's own option still works")
end)

T.done()
