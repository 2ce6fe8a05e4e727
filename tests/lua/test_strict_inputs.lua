-- test_strict_inputs.lua - inputs that used to change silently now give a
-- clear error or TF's value (issue 27, item 9): json.decode nested deeper than
-- 64 levels, make_csv_dataset's duplicate column names, non-finite numbers
-- and RFC 4180 quoted fields.
local T = dofile("tests/lua/testlib.lua")
local L = ldist or package.loaded.ldist
local json = L.json

local DIR = T.tmpdir()
local function write(name, text)
  local p = DIR .. "/" .. name
  local f = assert(io.open(p, "wb")); f:write(text); f:close()
  return p
end
local mk = data.experimental.make_csv_dataset

local function nest(n) return string.rep("[", n) .. '{"v":1}' .. string.rep("]", n) end

T.test("json.decode keeps 64 levels and raises beyond, instead of cutting the inside to nil", function()
  local t = json.decode(nest(63))
  for _ = 1, 63 do t = t[1] end
  T.eq(t.v, 1, "the innermost value at 64 levels")
  T.raises(function() json.decode(nest(64)) end, "deeper than 64 levels")
  T.raises(function() json.decode(nest(70)) end, "deeper than 64 levels")
  -- malformed JSON keeps its nil, message
  local v, err = json.decode("{")
  T.ok(v == nil and err:find("line 1", 1, true), tostring(err))
end)

-- columns and labels of every batch: {name = {values...}}, {labels...}
local function collect(ds)
  local cols, labels = {}, {}
  for b in ds do
    local feats, lab = b[1], b[2]
    for k, v in pairs(feats) do
      cols[k] = cols[k] or {}
      for _, x in ipairs(v:totable()) do cols[k][#cols[k] + 1] = x end
    end
    for _, x in ipairs(lab:totable()) do labels[#labels + 1] = x end
  end
  return cols, labels
end

T.test("make_csv_dataset refuses duplicate column names as TF does", function()
  local p = write("dup.csv", "a,a,label\n1,2,3\n")
  T.raises(function() mk(p, 2, { label_name = "label", shuffle = false, num_epochs = 1 }) end, "'a' appears twice")
  local q = write("nodup.csv", "1,2,3\n")
  T.raises(function() mk(q, 2, { header = false, column_names = { "x", "y", "x" }, num_epochs = 1 }) end,
    "'x' appears twice (columns 1 and 3 of column_names)")
end)

-- TF 2 (tf.data.experimental.make_csv_dataset on the same file, column_defaults
-- [float32, float32, int32], batch 5, shuffle=False):
--   {'sepal, length': [1.5, -2.25, 3., inf], 'b': [2., 7., nan, -inf]} labels [1, 0, 1, 0]
local Q = '"sepal, length",b,"the ""label"""\n"1.5", 2 ,1\n"-2.25","7",0\n3,nan,1\n1e999,-inf,0\n'

T.test("make_csv_dataset reads RFC 4180 quoted fields and non-finite numbers as TF's decode_csv", function()
  local p = write("q.csv", Q)
  for _, cd in ipairs{ { "float32", "float32", "int32" }, false } do
    local cols, labels = collect(mk(p, 5, { label_name = 'the "label"', shuffle = false, num_epochs = 1,
      column_defaults = cd or nil }))
    local a, b = cols["sepal, length"], cols.b
    T.ok(a and b, "the quoted header names the columns")
    T.eq(table.concat(labels, ","), "1,0,1,0")
    T.eq(a[1], 1.5); T.eq(a[2], -2.25); T.eq(a[3], 3.0); T.eq(a[4], math.huge)
    T.eq(b[1], 2.0); T.eq(b[2], 7.0); T.ok(b[3] ~= b[3], "nan stays nan"); T.eq(b[4], -math.huge)
  end
end)

T.test("make_csv_dataset: 1e999, inf and nan are all numbers (float32), consistently", function()
  local cols = collect(mk(write("nf.csv", "x,label\n1e999,0\nNaN,1\n-Infinity,0\n+inf,1\n2,0\n"), 8,
    { label_name = "label", shuffle = false, num_epochs = 1 }))
  local x = cols.x
  T.eq(x[1], math.huge); T.ok(x[2] ~= x[2]); T.eq(x[3], -math.huge); T.eq(x[4], math.huge); T.eq(x[5], 2.0)
end)

T.test("make_csv_dataset: a quoted field may hold line breaks; a broken quote is a clear error", function()
  local cols, labels = collect(mk(write("ml.csv", 'x,"la\nbel"\n"1",0\n2,"1"\n'), 4,
    { label_name = "la\nbel", shuffle = false, num_epochs = 1 }))
  T.eq(table.concat(cols.x, ","), "1,2")
  T.eq(table.concat(labels, ","), "0,1")
  T.raises(function() mk(write("open.csv", 'x,label\n"1,0\n'), 2, { num_epochs = 1 }) end,
    "open.csv line 2: a quoted field is not closed")
  T.raises(function() mk(write("stray.csv", 'x,label\n1"2,0\n'), 2, { num_epochs = 1 }) end,
    "stray.csv line 2: a quote inside the unquoted field")
  T.raises(function() mk(write("after.csv", 'x,label\n"1"2,0\n'), 2, { num_epochs = 1 }) end,
    "after.csv line 2: a quoted field is followed by more text")
end)

os.execute("rm -rf '" .. DIR .. "'")
T.done()
