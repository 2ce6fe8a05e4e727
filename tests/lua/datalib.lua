-- datalib.lua - what the dataset tests share: an element described as a
-- string TF's printout can be compared with (values, dtypes; dicts by sorted
-- key), a whole dataset run that way, and a check that also rebuilds the
-- dataset from its recipe, as a worker of a strategy does.
--   local DL = dofile("tests/lua/datalib.lua")
--   DL.check(T, ds, "[(0, int64), (2, int64)]", card)
local M = {}
local function flat(t)
  if t.ndim == 0 then return t:item() end
  local out = {}
  local function walk(v) if type(v) == "table" then for _, w in ipairs(v) do walk(w) end else out[#out + 1] = v end end
  walk(t:totable())
  return out
end
local function describe(v)
  if tensor.is_tensor(v) then return { flat(v), v.dtype } end
  if type(v) == "string" then return { "b'" .. v .. "'", "string" } end   -- as TF prints a tf.string
  local keys, out = {}, {}
  for k in pairs(v) do keys[#keys + 1] = k end
  -- list entries in order, then a dict's keys sorted
  table.sort(keys, function(a, b)
    if type(a) == type(b) then return a < b end
    return type(a) == "number"
  end)
  for i, k in ipairs(keys) do out[i] = type(k) == "string" and { k, describe(v[k]) } or describe(v[k]) end
  return out
end
local function ser(v)
  if type(v) ~= "table" then return tostring(v) end
  local p = {}
  for i = 1, #v do p[i] = ser(v[i]) end
  return "(" .. table.concat(p, ", ") .. ")"
end
local function run(ds)
  local els = {}
  for e in ds do
    local d = describe(e)
    els[#els + 1] = ser(#e == 1 and d[1] or d)
  end
  return "[" .. table.concat(els, ", ") .. "]"
end
local function check(T, ds, expected, card)
  T.eq(run(ds), expected)
  if card then T.eq(ds:cardinality(), card, "cardinality") end
  local rebuilt = distribute._build_dataset(distribute._recipe_of(ds))
  T.eq(run(rebuilt), expected, "rebuilt from the recipe")
end

-- dir/f0.txt .. f3.txt, file f holding the lines f*10, f*10+1, f*10+2 (the
-- auto-shard tests' files, as in their TF runs); returns the paths
local function number_files(dir)
  os.execute("mkdir -p " .. dir)
  local files = {}
  for f = 0, 3 do
    files[#files + 1] = ("%s/f%d.txt"):format(dir, f)
    local h = assert(io.open(files[#files], "w"))
    for i = 0, 2 do h:write(("%d\n"):format(f * 10 + i)) end
    h:close()
  end
  return files
end

M.flat, M.describe, M.ser, M.run, M.check, M.number_files = flat, describe, ser, run, check, number_files
return M
