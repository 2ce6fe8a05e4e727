-- data/datasets.lua - ready-made data sets (ldist.datasets) and the documentation
-- of the data and io modules.
--
--   local x_train, y_train = datasets.fashion_mnist.load("train")
--   -- x_train: float32 [60000, 28, 28] scaled to [0, 1]; y_train: int64 [60000]
local ldist = ...
local data, lio, tensor = ldist.data, ldist.io, ldist.tensor
local docs = ldist.docs
local open, getenv = io.open, os.getenv   -- Lua's io, whatever the globals become

local doc = ldist.document

---------------------------------------------------------------- datasets
local datasets = {}
ldist.datasets = datasets
ldist.globals.datasets = true
if data then ldist.globals.data = true end

local function exists(path)
  local f = open(path, "rb")
  if f then f:close() return true end
  return false
end

-- The directories searched for a data set called `name`, in order.
local function search_dirs(name, system_dir)
  local dirs = {}
  local env = getenv("LDIST_DATA_DIR")
  if env and env ~= "" then
    dirs[#dirs + 1] = env .. "/" .. name
    dirs[#dirs + 1] = env
  end
  dirs[#dirs + 1] = system_dir
  return dirs
end

-- An MNIST-style data set: IDX files {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz].
local function idx_dataset(name, system_dir, install_hint, class_names, title)
  -- system_dir is a field so that a site (or a test) can point it elsewhere
  local ds = { class_names = class_names, system_dir = system_dir }

  local function find(file)
    local tried = {}
    for _, d in ipairs(search_dirs(name, ds.system_dir)) do
      for _, suffix in ipairs({ ".gz", "" }) do
        local p = d .. "/" .. file .. suffix
        if exists(p) then return p end
        tried[#tried + 1] = p
      end
    end
    error(("%s: cannot find '%s' (looked in %s). %s"):format(
      title, file .. ".gz", table.concat(tried, ", "), install_hint), 3)
  end

  function ds.load(split, opts)
    split = split or "train"
    opts = opts or {}
    if type(split) == "table" then split, opts = split.split or "train", split end
    local prefix = ({ train = "train", test = "t10k" })[split]
    if not prefix then
      error(("%s.load: split must be \"train\" or \"test\", got %s"):format(name, tostring(split)), 2)
    end
    local images = find(prefix .. "-images-idx3-ubyte")
    local labels = find(prefix .. "-labels-idx1-ubyte")
    local x
    if opts.normalize == false then
      x = data.load_idx(images)                                     -- uint8 0..255
    else
      x = data.load_idx(images, { dtype = "float32", scale = 1 / 255 })
    end
    local y = data.load_idx(labels, { dtype = "int64" })
    return x, y
  end

  function ds.load_data(opts)
    local x_train, y_train = ds.load("train", opts)
    local x_test, y_test = ds.load("test", opts)
    return x_train, y_train, x_test, y_test
  end
  return ds
end

local FASHION_DIR = "/usr/share/datasets/fashion-mnist"
datasets.fashion_mnist = idx_dataset("fashion-mnist", FASHION_DIR,
  "Install it with 'apt-get install dataset-fashion-mnist' (or 'make setup'), or point LDIST_DATA_DIR at a copy.",
  { "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot" },
  "Fashion-MNIST")
datasets.mnist = idx_dataset("mnist", "/usr/share/datasets/mnist",
  "Debian does not package MNIST: put the four IDX files in $LDIST_DATA_DIR/mnist.",
  { "0", "1", "2", "3", "4", "5", "6", "7", "8", "9" }, "MNIST")

local LOAD_DOC = [[
datasets.%s.load(split, {normalize=true}) -> images, labels

split is "train" (60000 examples) or "test" (10000). images: float32
[N, 28, 28] scaled to [0, 1] (with normalize=false: uint8 [N, 28, 28], 0..255);
labels: int64 [N], class ids 0..9 (names in datasets.%s.class_names).
Files are read from $LDIST_DATA_DIR/%s, $LDIST_DATA_DIR, then %s.]]
local LOAD_DATA_DOC = [[
datasets.%s.load_data({normalize=true}) -> x_train, y_train, x_test, y_test

Both splits at once, like keras.datasets.%s.load_data().]]
for key, dir in pairs({ fashion_mnist = { "fashion-mnist", FASHION_DIR }, mnist = { "mnist", "/usr/share/datasets/mnist" } }) do
  local d = datasets[key]
  doc(d.load, { "datasets." .. key .. ".load" }, LOAD_DOC:format(key, key, dir[1], dir[2]))
  doc(d.load_data, { "datasets." .. key .. ".load_data" }, LOAD_DATA_DOC:format(key, key))
  doc(d, { "datasets." .. key }, ("datasets.%s\n\nload(split, opts), load_data(opts), class_names."):format(key))
end
docs.datasets = "datasets\n\nReady-made data sets: datasets.fashion_mnist, datasets.mnist (load, load_data, class_names)."
docs[datasets] = docs.datasets

---------------------------------------------------------------- data: zip's recipe
-- A zip's inputs are datasets, which a recipe cannot carry as they are: the
-- recipe names data._datasets_from_recipes and the inputs' recipes, which
-- distribute/shipping.lua ships and rebuilds like the source of a tensor read from a file.
if data then
  local D = data.Dataset
  -- ds's recipe with its parents' recipes inlined (the values as they are)
  local function raw_recipe(ds)
    local r = ds:_recipe()
    if not r then error("a dataset given to zip has no recipe and cannot be rebuilt elsewhere", 0) end
    local out = { op = r.op, n = r.args.n, args = {} }
    for i = 1, r.args.n do out.args[i] = r.args[i] end
    if r.parent then out.parent = raw_recipe(r.parent) end
    return out
  end
  D._raw_recipe = raw_recipe
  local c_zip = D._zip
  function D.zip(...)
    local z = c_zip(...)
    local list = select("#", ...) == 1 and getmetatable(...) == nil and ... or { ... }
    local recipes = { n = #list }
    for i = 1, #list do recipes[i] = raw_recipe(list[i]) end
    z:_set_recipe({ op = "zip", args = { n = 1, { __source = { fn = "_datasets_from_recipes", part = 1, args = recipes } } } })
    return z
  end
  function data._datasets_from_recipes(...)
    local build = ldist.distribute and ldist.distribute._build_dataset
    if not build then error("data._datasets_from_recipes: ldist.distribute is not loaded", 0) end
    local out = {}
    for i = 1, select("#", ...) do out[i] = build((select(i, ...))) end
    return out
  end
end


---------------------------------------------------------------- data: from_generator, element_spec, make_csv_dataset
if data then
  local D = data.Dataset
  local made = setmetatable({}, { __mode = "k" })   -- dataset -> {spec=} or {zip=inputs}: what its recipe does not tell

  -- TensorSpec: {shape = {d1, ...} (-1: unknown, TF's None), dtype = "int64"}
  local SpecMT = {}
  SpecMT.__index = SpecMT
  SpecMT.__tostring = function(s)
    local d = {}
    for i, v in ipairs(s.shape) do d[i] = v < 0 and "None" or tostring(v) end
    return ("TensorSpec(shape=(%s%s), dtype=%s)"):format(table.concat(d, ", "), #d == 1 and "," or "", s.dtype)
  end
  local function TensorSpec(shape, dtype) return setmetatable({ shape = shape, dtype = dtype }, SpecMT) end
  data.TensorSpec = TensorSpec
  local function is_spec(v) return getmetatable(v) == SpecMT end

  -- a copy of structure v with every spec replaced by f(spec)
  local function map_specs(v, f)
    if is_spec(v) then return f(v) end
    local out = {}
    for k, w in pairs(v) do out[k] = map_specs(w, f) end
    return out
  end
  local function of_value(v)          -- the spec of an element's value (tensors, strings, tables of them)
    if type(v) == "string" then return TensorSpec({}, "string") end
    if tensor.is_tensor(v) then
      local sh = {}
      for i = 1, v.ndim do sh[i] = v.shape[i] end
      return TensorSpec(sh, v.dtype)
    end
    local out = {}
    for k, w in pairs(v) do out[k] = of_value(w) end
    return out
  end
  local function first_spec(ds, what)
    for e in ds:take(1):iter() do return of_value(e) end
    error(("element_spec: %s is empty, so its element's shapes cannot be read"):format(what), 0)
  end
  local function prepend(s, dim) local sh = { dim }; for i, v in ipairs(s.shape) do sh[i + 1] = v end; return TensorSpec(sh, s.dtype) end
  local function part(s)              -- a one-tensor list is given as that tensor, as in zip's elements
    if #s == 1 and next(s, 1) == nil and is_spec(s[1]) then return s[1] end
    return s
  end
  local PASS = { shuffle = true, ["repeat"] = true, repeat_ = true, take = true, skip = true, prefetch = true,
                 cache = true, shard = true, filter = true }

  local spec_of
  function spec_of(ds)
    local m = made[ds]
    if m and m.spec then return m.spec end
    if m and m.zip then
      local out = {}
      for i, d in ipairs(m.zip) do out[i] = part(spec_of(d)) end
      return out
    end
    local r = ds:_recipe()
    if not r then error("element_spec: this dataset does not record how it was made", 0) end
    local op, a, p = r.op, r.args, r.parent
    if PASS[op] then return spec_of(p) end
    if op == "range" then return { TensorSpec({}, "int64") } end
    if op == "TextLineDataset" then return { TensorSpec({}, "string") } end
    if op == "with_options" then return spec_of(p) end
    if op == "from_tensor_slices" then return first_spec(ds, "the dataset") end
    if op == "batch" then
      local drop = a[2] == true or (type(a[2]) == "table" and a[2].drop_remainder)
      return map_specs(spec_of(p), function(s) return prepend(s, drop and a[1] or -1) end)
    end
    if op == "padded_batch" then
      local o = type(a[2]) == "table" and a[2] or {}
      local drop = a[2] == true or o.drop_remainder
      local ps = o.padded_shapes
      local s = spec_of(p)
      local flat = {}                 -- padded shapes per top-level component, as padded_batch reads them
      if type(ps) == "table" then
        local t1 = ps[1]
        if type(t1) == "number" or type(t1) == "boolean" or next(ps) == nil then flat[1] = ps
        else for k, v in pairs(ps) do flat[k] = v end end
      end
      local out = {}
      for k, leaf in pairs(s) do
        local fix = flat[k]
        out[k] = map_specs(leaf, function(x)
          local sh = { drop and a[1] or -1 }
          for i, v in ipairs(x.shape) do
            local f = fix and fix[i]
            sh[i + 1] = (f == nil or f == false) and -1 or f   -- not padded to a size: varies by batch
          end
          return TensorSpec(sh, x.dtype)
        end)
      end
      return out
    end
    if op == "unbatch" then
      return map_specs(spec_of(p), function(x)
        local sh = {}
        for i = 2, #x.shape do sh[i - 1] = x.shape[i] end
        return TensorSpec(sh, x.dtype)
      end)
    end
    if op == "enumerate" then return { TensorSpec({}, "int64"), part(spec_of(p)) } end
    -- map (and anything else): the function is not traced, its first element tells
    return first_spec(ds, "the dataset (a map's output spec is read from its first element)")
  end
  -- ds.element_spec is the structure; ds:element_spec() calls it, which returns it too
  local CallMT = { __call = function(s) return s end }
  SpecMT.__call = CallMT.__call
  local function callable(s)
    if not is_spec(s) then
      for _, w in pairs(s) do callable(w) end
      setmetatable(s, CallMT)
    end
    return s
  end
  local raw_spec_of = spec_of
  spec_of = function(ds) return callable(raw_spec_of(ds)) end
  function D.element_spec(ds) return spec_of(ds) end
  local ds_index = D
  -- fields computed from the dataset, as tf.data's and Keras's attributes:
  -- ds.element_spec here; other files add theirs to D._fields (data/images.lua:
  -- class_names, file_paths). The Dataset metatable's __index is D otherwise.
  local fields = { element_spec = spec_of }
  D._fields = fields
  local mt = getmetatable(D.range(1))
  if mt and mt.__index == D then
    mt.__index = function(ds, k)
      local f = fields[k]
      if f then return f(ds) end
      return ds_index[k]
    end
  end

  -- zip: remember its inputs for element_spec
  local zip = D.zip
  function D.zip(...)
    local z = zip(...)
    local list = select("#", ...) == 1 and getmetatable(...) == nil and ... or { ... }
    local inputs = {}
    for i = 1, #list do inputs[i] = list[i] end
    made[z] = { zip = inputs }
    return z
  end

  ---------------------------------------------------------------- from_generator
  local function check_sig_value(v, sig, where)
    if (is_spec(sig) or (type(sig) == "table" and type(sig.dtype) == "string")) and sig.dtype == "string" then
      if type(v) ~= "string" then
        error(("the generator's element%s is a %s; output_signature says a string"):format(where, tensor.is_tensor(v) and "tensor" or type(v)), 0)
      end
      return v
    end
    if is_spec(sig) or (type(sig) == "table" and type(sig.dtype) == "string") then
      local t = v
      if type(v) == "number" then t = tensor.from(v, { dtype = sig.dtype })
      elseif not tensor.is_tensor(v) then
        error(("the generator's element%s is a %s; output_signature says a tensor"):format(where, type(v)), 0)
      elseif v.dtype ~= sig.dtype then t = v:astype(sig.dtype) end
      local sh = sig.shape or {}
      local ok = t.ndim == #sh
      for i = 1, #sh do if ok and sh[i] and sh[i] >= 0 and sh[i] ~= t.shape[i] then ok = false end end
      if not ok then
        local d = {}
        for i = 1, t.ndim do d[i] = t.shape[i] end
        error(("the generator's element%s has shape {%s}, but output_signature says %s"):format(
          where, table.concat(d, ", "), tostring(TensorSpec(sh, sig.dtype))), 0)
      end
      return t
    end
    if type(v) ~= "table" or tensor.is_tensor(v) then
      error(("the generator's element%s is a %s; output_signature says a table"):format(where, tensor.is_tensor(v) and "tensor" or type(v)), 0)
    end
    local out = {}
    for k, s in pairs(sig) do out[k] = check_sig_value(v[k], s, where .. "[" .. tostring(k) .. "]") end
    for k in pairs(v) do
      if sig[k] == nil then error(("the generator's element%s has '%s', which output_signature does not"):format(where, tostring(k)), 0) end
    end
    return out
  end

  local function from_generator(fn, opts)
    if type(fn) ~= "function" then
      error(("bad argument #1 to 'from_generator' (a function expected, got %s)"):format(type(fn)), 2)
    end
    if opts ~= nil and type(opts) ~= "table" then
      error(("bad argument #2 to 'from_generator' (an options table {output_signature=} expected, got %s)"):format(type(opts)), 2)
    end
    local sig = opts and opts.output_signature
    local function conv(...)
      if select("#", ...) == 0 or (...) == nil then return nil end
      if not sig then return ... end
      local v = select("#", ...) == 1 and ... or { ... }
      if select("#", ...) == 1 and (is_spec(sig) or type(sig.dtype) == "string") then return check_sig_value(v, sig, "") end
      if select("#", ...) > 1 and (is_spec(sig) or type(sig.dtype) == "string") then
        error("the generator gave several values, but output_signature describes one tensor", 0)
      end
      local out = check_sig_value(v, sig, "")
      return out
    end
    local function open()
      local co = coroutine.create(fn)
      local first = table.pack(coroutine.resume(co))
      if not first[1] then error(debug.traceback(co, tostring(first[2])), 0) end
      if coroutine.status(co) == "dead" then
        local f, st, ctl = first[2], first[3], first[4]
        if f == nil then return function() end end
        if type(f) ~= "function" then
          error(("the generator function must return an iterator function, or yield the elements (it returned a %s)"):format(type(f)), 0)
        end
        return function()
          local r = table.pack(f(st, ctl))
          ctl = r[1]
          if r[1] == nil then return end
          return conv(table.unpack(r, 1, r.n))
        end
      end
      local pending = first
      return function()
        local r = pending
        pending = nil
        if not r then
          if coroutine.status(co) == "dead" then return end
          r = table.pack(coroutine.resume(co))
          if not r[1] then error(tostring(r[2]), 0) end
          if coroutine.status(co) == "dead" then return end   -- its return values are not elements
        end
        return conv(table.unpack(r, 2, r.n))
      end
    end
    local ds = D._from_producer(open)
    -- the recipe carries fn as bytecode when it can travel; a function with
    -- upvalues cannot, and says so when a strategy tries to send it
    local arg = fn
    local i = 1
    while true do
      local name = debug.getupvalue(fn, i)
      if not name then break end
      if name ~= "_ENV" then
        local msg = ("this dataset cannot be sent to other processes: it was made by data.Dataset.from_generator " ..
          "with a function that uses the local variable '%s', which does not travel (workers rebuild a dataset " ..
          "from how it was made); make the generator function use only globals (ldist, ...), or build the data " ..
          "with from_tensor_slices"):format(name)
        arg = setmetatable({}, { __pairs = function() error(msg, 0) end, __index = function() error(msg, 0) end })
        break
      end
      i = i + 1
    end
    ds:_set_recipe({ op = "from_generator", args = { n = 2, arg, opts } })
    if sig then
      local function to_specs(s)
        if is_spec(s) or type(s.dtype) == "string" then
          local sh = {}
          for k, v in ipairs(s.shape or {}) do sh[k] = v or -1 end
          return TensorSpec(sh, s.dtype)
        end
        local out = {}
        for k, v in pairs(s) do out[k] = to_specs(v) end
        return out
      end
      local sp = to_specs(sig)
      made[ds] = { spec = is_spec(sp) and { sp } or sp }
    end
    return ds
  end
  D.from_generator = from_generator

  ---------------------------------------------------------------- make_csv_dataset
  data.experimental = data.experimental or {}
  local INT32_MAX, INT32_MIN = 2147483647, -2147483648

  -- The records of a CSV text as RFC 4180 (and TF's decode_csv with
  -- use_quote_delim) read them: a field in double quotes may hold the
  -- delimiter, line breaks and "" for a quote; unquoted fields lose their
  -- surrounding blanks; blank lines are skipped. Returns {line, fields} per
  -- record, or nil, line and a message.
  local function csv_records(text, delim)
    local recs, pos, ln, n = {}, 1, 1, #text
    local stop = "[\n" .. delim:gsub("%p", "%%%0") .. "]"     -- where an unquoted field ends
    while pos <= n do
      local start_ln, fields = ln, {}
      local blank = true
      while true do                                   -- one field
        local c
        -- blanks before a quote belong to no field
        local q = text:match('^[ \t]*()"', pos)
        if q then
          blank = false
          local buf, p = {}, q + 1
          while true do
            local a = text:find('"', p, true)
            if not a then return nil, start_ln, "a quoted field is not closed" end
            local piece = text:sub(p, a - 1)
            for _ in piece:gmatch("\n") do ln = ln + 1 end
            buf[#buf + 1] = piece
            if text:sub(a + 1, a + 1) == '"' then buf[#buf + 1] = '"'; p = a + 2
            else p = a + 1; break end
          end
          fields[#fields + 1] = table.concat(buf)
          pos = text:match("^[ \t\r]*()", p)
          c = text:sub(pos, pos)
          if c ~= delim and c ~= "\n" and c ~= "" then
            return nil, ln, "a quoted field is followed by more text before the delimiter"
          end
        else
          local e = text:find(stop, pos) or n + 1
          local f = text:sub(pos, e - 1):gsub("\r$", ""):match("^%s*(.-)%s*$")
          if f:find('"', 1, true) then return nil, ln, ("a quote inside the unquoted field '%s' (RFC 4180: quote the whole field, double the quote)"):format(f) end
          if f ~= "" or text:sub(e, e) == delim then blank = false end
          fields[#fields + 1] = f
          pos, c = e, text:sub(e, e)
        end
        if c == delim then pos = pos + 1
        else                                          -- end of the record
          pos = pos + 1
          ln = ln + 1
          break
        end
      end
      if not blank then recs[#recs + 1] = { start_ln, fields } end
    end
    return recs
  end
  -- numbers as TF's decode_csv reads them: nan, inf and infinity (any case,
  -- signed) too, and an overflowing 1e999 is inf
  local function num(s)
    if s == "" then return nil end
    local v = tonumber(s)
    if v then return math.tointeger(v) or v end
    local sign, w = s:lower():match("^([+-]?)(%a+)$")
    if w == "nan" then return 0 / 0 end
    if w == "inf" or w == "infinity" then return sign == "-" and -math.huge or math.huge end
    return nil
  end
  local DT = { float32 = true, int32 = true, int64 = true }

  local function make_csv_dataset(file_pattern, batch_size, opts)
    opts = opts or {}
    if type(file_pattern) == "string" then file_pattern = { file_pattern } end
    if type(file_pattern) ~= "table" or #file_pattern == 0 then
      error("bad argument #1 to 'make_csv_dataset' (a file path or a list of paths expected)", 2)
    end
    if math.type(batch_size) ~= "integer" or batch_size < 1 then
      error("bad argument #2 to 'make_csv_dataset' (batch_size must be a positive integer)", 2)
    end
    local delim = opts.field_delim or ","
    if type(delim) ~= "string" or #delim ~= 1 or delim == '"' or delim == "\n" then
      error(("make_csv_dataset: field_delim must be one character (not a quote or a line break), got %s"):format(tostring(delim)), 2)
    end
    local header = opts.header ~= false
    local names = opts.column_names
    local rows = {}                      -- {file, line number, fields}
    local paths = {}                     -- glob patterns expanded, sorted (TF's file_pattern)
    for _, p in ipairs(file_pattern) do
      if type(p) == "string" and p:find("[%*%?%[]") then
        local m = data._glob(p)
        if #m == 0 then error(("make_csv_dataset: no files match file_pattern %s"):format(p), 2) end
        for _, f in ipairs(m) do paths[#paths + 1] = f end
      else paths[#paths + 1] = p end
    end
    for _, path in ipairs(paths) do
      local f, err = open(path, "rb")
      if not f then error(("make_csv_dataset: cannot read '%s': %s"):format(path, tostring(err)), 2) end
      local text = f:read("a") or ""
      f:close()
      local recs, bad_ln, why = csv_records(text, delim)
      if not recs then error(("make_csv_dataset: %s line %d: %s"):format(path, bad_ln, why), 2) end
      local first, fnames = header, nil
      for _, rec in ipairs(recs) do
        local ln, fields = rec[1], rec[2]
        if first then
          first = false
          fnames = fields
          if not names then names = fields
          elseif #names ~= #fields then
            error(("make_csv_dataset: %s line %d: the header has %d fields, column_names %d"):format(path, ln, #fields, #names), 2)
          end
        else
          rows[#rows + 1] = { path, ln, fields }
        end
      end
      if header and not fnames then error(("make_csv_dataset: %s: the file is empty (no header line)"):format(path), 2) end
    end
    if not names then
      if not rows[1] then error("make_csv_dataset: the files have no rows", 2) end
      error("make_csv_dataset: header=false needs column_names", 2)
    end
    local ncol = #names
    -- TF: "Either `column_names` argument or CSV header row contains duplicate column names"
    local seen_at = {}
    for i, nm in ipairs(names) do
      if seen_at[nm] then
        error(("make_csv_dataset: the column name '%s' appears twice (columns %d and %d of %s); column names must be unique")
          :format(nm, seen_at[nm], i, opts.column_names and "column_names" or "the header"), 2)
      end
      seen_at[nm] = i
    end
    for _, r in ipairs(rows) do
      if #r[3] ~= ncol then
        error(("make_csv_dataset: %s line %d: %d fields, expected %d (%s)"):format(r[1], r[2], #r[3], ncol,
          table.concat(names, delim)), 2)
      end
    end
    -- the columns kept, in the file's order
    local keep, index = {}, {}
    for i, n in ipairs(names) do index[n] = i end
    if opts.select_columns then
      for _, c in ipairs(opts.select_columns) do
        local i = type(c) == "number" and c or index[c]
        if not i or not names[i] then error(("make_csv_dataset: select_columns names '%s', which is not a column (%s)"):format(
          tostring(c), table.concat(names, ", ")), 2) end
        keep[i] = true
      end
    else for i = 1, ncol do keep[i] = true end end
    local label = opts.label_name
    if label ~= nil and not (index[label] and keep[index[label]]) then
      error(("make_csv_dataset: label_name '%s' is not one of the columns (%s)"):format(tostring(label), table.concat(names, ", ")), 2)
    end
    local cols = {}
    for i = 1, ncol do if keep[i] then cols[#cols + 1] = i end end
    -- dtypes: column_defaults (one per kept column: a dtype name or a default value), else
    -- inferred as TF does from the first 100 rows: int32, int64 beyond int32, float32
    local dtypes, defaults = {}, {}
    local cd = opts.column_defaults
    if cd and #cd ~= #cols then
      error(("make_csv_dataset: column_defaults has %d entries for %d columns"):format(#cd, #cols), 2)
    end
    for j, i in ipairs(cols) do
      local d = cd and cd[j]
      if type(d) == "string" then
        if not DT[d] then error(("make_csv_dataset: column_defaults[%d] is '%s'; float32, int32 or int64 expected"):format(j, d), 2) end
        dtypes[i] = d
      elseif type(d) == "number" then
        dtypes[i] = math.type(d) == "integer" and "int32" or "float32"
        defaults[i] = d
      else
        local dt = "int32"
        for k = 1, math.min(#rows, opts.num_rows_for_inference or 100) do
          local s = rows[k][3][i]
          local v = num(s)
          if s ~= "" and v == nil then
            error(("make_csv_dataset: %s line %d: column '%s' is '%s', not a number"):format(rows[k][1], rows[k][2], names[i], s), 2)
          end
          if v then
            if math.type(v) == "float" then dt = "float32"
            elseif dt == "int32" and (v > INT32_MAX or v < INT32_MIN) then dt = "int64" end
          end
        end
        dtypes[i] = dt
      end
    end
    local values = {}
    for _, i in ipairs(cols) do values[i] = {} end
    for k, r in ipairs(rows) do
      for _, i in ipairs(cols) do
        local s = r[3][i]
        local v = num(s)
        if v == nil then
          if s == "" and defaults[i] then v = defaults[i]
          elseif s == "" then
            error(("make_csv_dataset: %s line %d: column '%s' is empty and has no default (column_defaults)"):format(r[1], r[2], names[i]), 2)
          else
            error(("make_csv_dataset: %s line %d: column '%s' is '%s', not a number"):format(r[1], r[2], names[i], s), 2)
          end
        end
        if dtypes[i] ~= "float32" and math.type(v) ~= "integer" then
          error(("make_csv_dataset: %s line %d: column '%s' is '%s', not a valid %s"):format(r[1], r[2], names[i], s, dtypes[i]), 2)
        end
        if dtypes[i] == "int32" and (v > INT32_MAX or v < INT32_MIN) then
          error(("make_csv_dataset: %s line %d: column '%s' is %s, too large for int32"):format(r[1], r[2], names[i], s), 2)
        end
        values[i][k] = v
      end
    end
    if #rows == 0 then error(("make_csv_dataset: %s has no data rows"):format(table.concat(file_pattern, ", ")), 2) end
    local feats, lab = {}, nil
    for _, i in ipairs(cols) do
      local t = tensor.from(values[i], { dtype = dtypes[i] })
      if names[i] == label then lab = t else feats[names[i]] = t end
    end
    if next(feats) == nil then error("make_csv_dataset: no feature columns left besides the label", 2) end
    local ds
    if lab then ds = zip(D.from_tensor_slices(feats), D.from_tensor_slices(lab))
    else ds = D.from_tensor_slices(feats) end
    local shuffle = opts.shuffle ~= false
    local o2 = {}
    for k, v in pairs(opts) do o2[k] = v end
    if shuffle then
      local seed = opts.shuffle_seed or math.random(0, 2 ^ 53)
      o2.shuffle_seed = seed
      ds = ds:shuffle(opts.shuffle_buffer_size or 10000, { seed = seed })
    end
    local epochs = opts.num_epochs
    if epochs ~= 1 then ds = ds:repeat_(epochs or -1) end
    ds = ds:batch(batch_size, { drop_remainder = epochs == nil })
    ds:_set_recipe({ op = "_make_csv_dataset", args = { n = 3, file_pattern, batch_size, o2 } })
    local fs = {}
    for _, i in ipairs(cols) do
      if names[i] ~= label then fs[names[i]] = TensorSpec({ epochs == nil and batch_size or -1 }, dtypes[i]) end
    end
    made[ds] = { spec = lab and { fs, TensorSpec({ epochs == nil and batch_size or -1 }, lab.dtype) } or fs }
    return ds
  end
  data.experimental.make_csv_dataset = make_csv_dataset
  function D._make_csv_dataset(...) return make_csv_dataset(...) end

  ---------------------------------------------------------------- text, files, interleave
  -- Strings travel through a pipeline as text (engine/ld_data_text.c): a Lua
  -- string in every map, filter and loop, TensorSpec({}, "string") in
  -- element_spec; batch refuses them (ldist has no string tensors).
  local text_lines = D.TextLineDataset
  function data.TextLineDataset(paths, compression_type, ...)
    if compression_type ~= nil and compression_type ~= "" and compression_type ~= "GZIP" then
      error(("bad argument #2 to 'TextLineDataset' (compression_type must be nil, \"\" or \"GZIP\", not %s; " ..
        "gzip files are recognised by themselves)"):format(tostring(compression_type)), 2)
    end
    return text_lines(paths)
  end

  -- tf.data's list_files: the paths matching a glob pattern (or a list of
  -- patterns), sorted, then shuffled unless shuffle=false. A seed is drawn
  -- when none is given and kept in the recipe, so a strategy's workers see
  -- the same order (TF warns that they might not).
  local function list_files(pattern, opts)
    if type(opts) ~= "table" then opts = { shuffle = opts } end
    local pats = type(pattern) == "table" and pattern or { pattern }
    if #pats == 0 then error("bad argument #1 to 'list_files' (a glob pattern or a list of them expected)", 2) end
    local files, seen = {}, {}
    for _, p in ipairs(pats) do
      if type(p) ~= "string" then error("bad argument #1 to 'list_files' (a glob pattern or a list of them expected)", 2) end
      for _, f in ipairs(data._glob(p)) do
        if not seen[f] then seen[f] = true; files[#files + 1] = f end
      end
    end
    table.sort(files)
    if #files == 0 then
      error(("list_files: no files matched pattern: %s"):format(table.concat(pats, ", ")), 2)
    end
    local o2 = { shuffle = opts.shuffle ~= false, seed = opts.seed }
    local ds = D.from_tensor_slices(files)
    if o2.shuffle then
      o2.seed = o2.seed or math.random(0, 2 ^ 53)
      ds = ds:shuffle(#files, { seed = o2.seed })
    end
    return ds
  end
  D.list_files = list_files

  -- the values a function receives for element e, as :map passes them: a
  -- list's components as arguments, a dict (or a nested element) as one table
  local function args_of(e)
    if e[1] ~= nil and next(e, #e) == nil then return table.unpack(e, 1, #e) end
    return e
  end
  local function is_dataset(v) return type(v) == "userdata" and getmetatable(v) == getmetatable(D.range(0)) end

  -- tf.data's reduce: fn(state, element...) over one pass, from initial
  function D.reduce(ds, initial, fn)
    if type(fn) ~= "function" then
      error(("bad argument #2 to 'reduce' (a function(state, element) -> state expected, got %s)"):format(type(fn)), 2)
    end
    local state = initial
    for e in ds:iter() do
      state = fn(state, args_of(e))
      if state == nil then error("reduce: the function returned nothing; it must return the new state", 2) end
    end
    return state
  end

  -- tf.data's interleave: cycle_length input elements are open at once, each
  -- mapped by fn to a dataset; block_length consecutive elements are taken
  -- from each in turn; a finished one is replaced by the next input element
  -- (the same order as TF's InterleaveDataset, deterministic).
  local function interleave(ds, fn, cycle_length, block_length, opts)
    if type(fn) ~= "function" then
      error(("bad argument #1 to 'interleave' (a function returning a dataset expected, got %s)"):format(type(fn)), 2)
    end
    if type(cycle_length) == "table" then
      opts = cycle_length
      cycle_length, block_length = opts.cycle_length, opts.block_length
    end
    if cycle_length == nil or cycle_length == data.AUTOTUNE then cycle_length = ldist.get_num_threads() end
    block_length = block_length or 1
    if math.type(cycle_length) ~= "integer" or cycle_length < 1 then
      error("bad argument #2 to 'interleave' (cycle_length must be a positive integer or data.AUTOTUNE)", 2)
    end
    if math.type(block_length) ~= "integer" or block_length < 1 then
      error("bad argument #3 to 'interleave' (block_length must be a positive integer)", 2)
    end
    local function open()
      local input = ds:iter()
      local slots, open_n, idx, bidx, eoi = {}, 0, 1, 0, false
      local function advance() bidx = 0; idx = idx % cycle_length + 1 end
      return function()
        while not eoi or open_n > 0 do
          local cur = slots[idx]
          if cur then
            local e = cur()
            if e ~= nil then
              bidx = bidx + 1
              if bidx == block_length then advance() end
              return e
            end
            slots[idx] = nil
            open_n = open_n - 1
            advance()
          elseif not eoi then
            local e = input()
            if e == nil then eoi = true
            else
              local sub = fn(args_of(e))
              if not is_dataset(sub) then
                error(("the interleave function returned a %s; it must return a dataset"):format(type(sub)), 0)
              end
              slots[idx] = sub:iter()
              open_n = open_n + 1
            end
          else advance() end
        end
      end
    end
    local out = D._from_producer(open)
    out:_set_recipe({ op = "interleave", parent = ds, args = { n = 3, fn, cycle_length, block_length } })
    return out
  end
  D.interleave = interleave
  function D.flat_map(ds, fn)
    if type(fn) ~= "function" then
      error(("bad argument #1 to 'flat_map' (a function returning a dataset expected, got %s)"):format(type(fn)), 2)
    end
    local out = interleave(ds, fn, 1, 1)
    out:_set_recipe({ op = "flat_map", parent = ds, args = { n = 1, fn } })
    return out
  end

  ---------------------------------------------------------------- options
  -- data.Options(): tf.data.Options. What ldist reads is
  -- experimental_distribute.auto_shard_policy (a strategy's auto-sharding);
  -- deterministic is kept for TF's scripts (ldist's pipelines are always
  -- deterministic). ds:with_options(o) returns a dataset carrying them;
  -- ds:options() gives the options in effect (merged up the pipeline, the
  -- later with_options winning where both set a field).
  local POLICIES = { AUTO = "AUTO", FILE = "FILE", DATA = "DATA", OFF = "OFF" }
  data.experimental.AutoShardPolicy = POLICIES
  local OptionsMT = { __name = "ldist.data.Options" }
  OptionsMT.__index = OptionsMT
  local function new_options()
    local o = setmetatable({ experimental_distribute = {}, _set = {} }, OptionsMT)
    return o
  end
  data.Options = new_options
  local function policy_of(o)          -- the policy set in o, or nil
    local p = o.experimental_distribute and o.experimental_distribute.auto_shard_policy
    if p == nil then return nil end
    local v = POLICIES[tostring(p):upper()]
    if not v then
      error(("auto_shard_policy must be AUTO, FILE, DATA or OFF (data.experimental.AutoShardPolicy), not %s"):format(tostring(p)), 0)
    end
    return v
  end
  local function plain_options(o)      -- a plain table: what a recipe carries
    return { experimental_distribute = { auto_shard_policy = policy_of(o) }, deterministic = o.deterministic }
  end
  OptionsMT.__tostring = function(o)
    return ("Options(auto_shard_policy=%s, deterministic=%s)"):format(policy_of(o) or "AUTO", tostring(o.deterministic == nil and true or o.deterministic))
  end
  local options_of = setmetatable({}, { __mode = "k" })
  function D.with_options(ds, o)
    if type(o) ~= "table" then error("bad argument #1 to 'with_options' (data.Options() expected)", 2) end
    local ok, err = pcall(policy_of, o)
    if not ok then error("bad argument #1 to 'with_options' (" .. err .. ")", 2) end
    local out = ds:take(-1)
    local p = plain_options(o)
    out:_set_recipe({ op = "with_options", parent = ds, args = { n = 1, p } })
    options_of[out] = p
    return out
  end
  -- the options in effect: every with_options up the pipeline (zip's inputs too)
  local function collect(ds, acc, depth)
    if depth > 200 then return end
    local m = made[ds]
    if m and m.zip then for _, d in ipairs(m.zip) do collect(d, acc, depth + 1) end end
    local r = ds:_recipe()
    if r and r.parent then collect(r.parent, acc, depth + 1) end
    local o = options_of[ds]
    if o then
      if o.experimental_distribute.auto_shard_policy then acc.policy = o.experimental_distribute.auto_shard_policy end
      if o.deterministic ~= nil then acc.deterministic = o.deterministic end
    end
  end
  function D.options(ds)
    local acc = {}
    collect(ds, acc, 0)
    local o = new_options()
    o.experimental_distribute.auto_shard_policy = acc.policy or "AUTO"
    o.deterministic = acc.deterministic
    return o
  end
  -- the auto-shard policy set by with_options, or nil (a strategy's default applies)
  function D._auto_shard_policy(ds)
    local acc = {}
    collect(ds, acc, 0)
    return acc.policy
  end
end

---------------------------------------------------------------- data: documentation
if data then
  local D = data.Dataset
  local function mdoc(name, text)
    doc(D[name], { "data.Dataset:" .. name, "Dataset:" .. name }, text)
  end
  doc(D, { "data.Dataset", "Dataset" }, [[
data.Dataset

An input pipeline in the style of tf.data. Build one from tensors, chain
transformations (each returns a new Dataset; the old one is unchanged), then
loop over it:

  local ds = data.Dataset.from_tensor_slices(x, y):shuffle(60000):batch(32):prefetch(2)
  for batch in ds do local xb, yb = batch[1], batch[2] ... end

An element is a table {t1, t2, ...} of tensors, even for one tensor; a
dataset made from a dict {name = tensor, ...} has elements with those keys
(tf.data's dict elements). Every loop runs one new epoch; loops are independent, and break is fine
('for b in ds:iter() do' also frees the iterator at once when left).
Transformations run in C; prefetch runs the C stages on a background thread.
A Lua function given to :map runs on the interpreter's thread.]])
  doc(D.from_tensor_slices, { "data.Dataset.from_tensor_slices", "Dataset.from_tensor_slices" }, [[
data.Dataset.from_tensor_slices(x, y, ...) or ({x, y, ...}) -> Dataset
data.Dataset.from_tensor_slices({name = x, ...}) -> Dataset

One element per row: element i is {x[i], y[i], ...}; from a dict (a table
with string keys, tf.data's dict) it is {name = x[i], ...}, and batch, shuffle,
map, take, skip, repeat_ and prefetch keep the keys. The tensors must share
their first dimension (an error names the shapes, or a dict's keys,
otherwise). Tables of numbers are turned into float32 tensors. The data is
kept on the host. model:fit reads batch[1], batch[2]: give it a list.]])
  doc(D.range, { "data.Dataset.range", "Dataset.range" }, [[
data.Dataset.range(stop) or (start, stop[, step]) -> Dataset

Elements {int64 scalar}: start, start + step, ... up to stop (excluded), like
tf.data.Dataset.range. Nothing is materialised.]])
  mdoc("batch", [[
ds:batch(n, {drop_remainder=false}) -> Dataset

Stacks n consecutive elements into tensors with a new first dimension n. The
last batch is smaller unless drop_remainder. Elements must agree in shape and
dtype. From from_tensor_slices (with shuffle, repeat, take, skip in between)
rows are gathered straight from the source tensors.]])
  mdoc("shuffle", [[
ds:shuffle(buffer_size, {seed=, reshuffle_each_iteration=true}) -> Dataset

tf.data's shuffle: keeps a buffer of buffer_size elements and draws each output
uniformly from it. buffer_size >= the dataset's size gives a full shuffle.
With a seed the sequence is the same on every run; without one, a seed is
drawn from ldist's generator (ldist.seed(n) makes that reproducible too). Each
new loop (epoch) gets a new order unless reshuffle_each_iteration=false.]])
  local repeat_doc = [[
ds:repeat_(count) or ds["repeat"](ds, count) -> Dataset

The dataset count times over (count nil or -1: forever). `repeat` is a Lua
keyword, so ds:repeat() does not parse: write ds:repeat_(n), or
ds["repeat"](ds, n). An empty dataset repeated stays empty.]]
  doc(D.repeat_, { "data.Dataset:repeat_", "Dataset:repeat_", "data.Dataset:repeat", "Dataset:repeat" }, repeat_doc)
  mdoc("take", "ds:take(n) -> Dataset\n\nThe first n elements (n = -1: all).")
  mdoc("skip", "ds:skip(n) -> Dataset\n\nAll but the first n elements (n = -1: none).")
  mdoc("prefetch", [[
ds:prefetch(n) -> Dataset

Prepares up to n elements ahead on a background thread (n nil or
data.AUTOTUNE: 2; 0: no prefetch). The elements are exactly those without
prefetch. A Lua :map cannot run on another thread: a prefetch after one is
placed just below the lowest Lua map, so the C stages before it run ahead
while the map and what follows run on the interpreter's thread.]])
  mdoc("map", [[
ds:map(fn) -> Dataset

fn receives the element's tensors as separate arguments and returns the new
element's tensors (several values, or one table of them; numbers become
scalar tensors): ds:map(function(x, y) return x * 2, y end). A dict element
comes as one table, as in tf.data, and fn may return a dict:
ds:map(function(d) return {x = d.feat * 2, y = d.label} end). Every call must
return the same structure. fn runs on the
interpreter's thread when a loop asks for the next element; an error in fn
ends the loop with that error.]])
  mdoc("filter", [[
ds:filter(predicate) -> Dataset

The elements for which predicate(element) is true, in order (tf.data's
filter). predicate receives the element as :map's function does and returns
a boolean, a number or a 0-d tensor (nonzero keeps the element). It runs on
the interpreter's thread; its length is unknown (data.UNKNOWN_CARDINALITY).
Travels to workers as bytecode, like a map function: it may use only its
arguments and globals.]])
  doc(D.zip, { "data.Dataset.zip", "Dataset.zip" }, [[
data.Dataset.zip({ds1, ds2, ...}) or (ds1, ds2, ...) -> Dataset

Element i is {e1, e2, ...}, element i of each dataset (tf.data's zip); a
one-tensor element comes as that tensor, a larger one as its table:
zip({from_tensor_slices(x, y), range(4)}) gives {{x_i, y_i}, i}. Ends with
the shortest dataset. data.Dataset.zip({xs, ys}):batch(32) gives {x, y}
batches for model:fit.]])
  mdoc("shard", [[
ds:shard(num_shards, index) -> Dataset

Every num_shards-th element, starting at index: element i is kept when
i % num_shards == index (tf.data's shard). num_shards >= 1 and
0 <= index < num_shards, or an error.]])
  mdoc("enumerate", [[
ds:enumerate(start=0) or ({start=0}) -> Dataset

Elements {i, element}: i an int64 scalar counting from start, element the
input's element (its tensor when it has one, else its table).]])
  mdoc("unbatch", [[
ds:unbatch() -> Dataset

Splits every element into its rows (the inverse of batch): the components
must share their first dimension. Dtypes are kept.]])
  mdoc("cache", [[
ds:cache() or ds:cache(filename) -> Dataset

Keeps the elements in memory: the first complete pass reads the input and
fills the cache, later passes read the cache (the input, e.g. a map, does not
run again). A pass left before its end (break, take) keeps nothing.
With a file name (tf.data's cache(filename)): the first complete pass writes
the elements to that file (through a temporary file renamed at the end), and
every later pass, of this dataset or of any dataset cached under that name,
in this program or another, reads the file instead of running the input.
Delete the file to have the pipeline run again. A file that is no ldist
cache, or a damaged one, is an error naming it.]])  mdoc("padded_batch", [[
ds:padded_batch(batch_size, {padded_shapes=, padding_values=0, drop_remainder=false}) -> Dataset

tf.data's padded_batch: like batch, but the components of a batch may differ
in size (not in rank or dtype). Each is padded at the end of every dimension
to the longest in the batch, or to padded_shapes: a shape {5} for a
one-component element, a list {{4, -1}, {5}} per component, or a dict
{name = {5}} (-1: the longest in the batch). An element longer than its
padded size is an error. padding_values: one number (or 0-d tensor) for every
component, or a list / dict per component.]])
  doc(D.from_generator, { "data.Dataset.from_generator", "Dataset.from_generator" }, [[
data.Dataset.from_generator(fn, {output_signature=}) -> Dataset

Every pass calls fn afresh: fn either returns an iterator function (called
until it returns nil) or is a coroutine body that yields the elements
(coroutine.yield(x, y)). Elements are tensors, numbers (integers int64,
others float32) or tables of them, as a map function returns them.
output_signature (data.TensorSpec(shape, dtype), or a list / dict of them;
-1 in a shape: any size) converts numbers to its dtypes, checks every
element's shapes, and gives element_spec. Runs on the interpreter's thread;
its length is unknown. It travels to other processes (a strategy's
workers) only when fn uses no local variables of its surroundings (only its
arguments and globals); otherwise sending it is an error that says so.]])
  doc(D.element_spec, { "data.Dataset:element_spec", "Dataset:element_spec", "Dataset.element_spec" }, [[
ds.element_spec or ds:element_spec() -> structure of data.TensorSpec

The shapes and dtypes of ds's elements, in the element's structure (a list,
a dict, zip's and enumerate's nesting): TensorSpec{shape = {d1, ...}, dtype =}
with -1 for a size that is not fixed (TF's None), such as a batch dimension
without drop_remainder, or a padded dimension. Sources, batch, padded_batch,
unbatch, zip, enumerate and the shape-keeping transformations are worked out
without running anything; a map (and a generator without output_signature)
is not traced: its spec is read from its first element, so sizes that vary
between elements show as that element's.]])
  doc(data.TensorSpec, { "data.TensorSpec" }, [[
data.TensorSpec(shape, dtype) -> spec

{shape = {d1, ...} (-1: any size), dtype = "float32"}: what element_spec
gives and what from_generator's output_signature takes.]])
  doc(data.experimental.make_csv_dataset, { "data.experimental.make_csv_dataset" }, [[
data.experimental.make_csv_dataset(file_pattern, batch_size, {label_name=, select_columns=,
  column_defaults=, column_names=, shuffle=true, shuffle_buffer_size=10000, shuffle_seed=,
  num_epochs=nil, header=true, field_delim=","}) -> Dataset

tf.data's make_csv_dataset for numeric columns. file_pattern is a path, a
glob pattern ("logs/*.csv") or a list of them. Elements are {features, label}: features a dict of column
name -> [batch] tensor, label a [batch] tensor (without label_name: the dict
alone). Dtypes are inferred as TF does from the first 100 rows: int32, int64
for integers beyond int32, float32 for any other number; column_defaults
(one per selected column: a dtype name, or a default value for empty fields)
fixes them. As in TF, shuffle defaults to true and num_epochs to nil
(repeat forever, full batches only); give shuffle=false, num_epochs=1 for
one pass in file order. A missing file, a row with the wrong number of
fields or a field that is not a number is an error naming the file and line.
The dataset travels to workers as this call (with its shuffle seed).]])
  doc(data.TextLineDataset, { "data.TextLineDataset", "data.Dataset.TextLineDataset" }, [[
data.TextLineDataset(path or {paths}, compression_type=nil) -> Dataset

tf.data's TextLineDataset: one element per line of the files, in order,
without its "\n" or "\r\n" (an empty line is ""). A line is a Lua string in
map, filter and loops (TF's tf.string scalar; element_spec says
dtype=string): ds:map(function(line) return tonumber(line:match("^(%d+),")) end).
ldist has no string tensors, so batch refuses strings: map them to numbers
first. gzip-compressed files are read as such (compression_type "GZIP" or
nil alike). A file that cannot be opened is an error now, naming it; a
damaged file ends the pass with an error naming the file and line, after
the lines before the damage. Under MultiWorkerMirrored and the parameter
server, auto_shard_policy FILE (and AUTO) gives each worker its own files.]])
  doc(D.list_files, { "data.Dataset.list_files", "Dataset.list_files" }, [[
data.Dataset.list_files(pattern or {patterns}, {shuffle=true, seed=}) -> Dataset

tf.data's list_files: the file names matching the glob patterns, one string
per element, sorted, then shuffled unless shuffle=false. No match is an
error naming the pattern. A seed is drawn when none is given and travels
with the dataset, so every worker of a strategy sees the same order. Open
the files with interleave or flat_map:
  data.Dataset.list_files("logs/*.csv"):interleave(function(f) return ldist.data.TextLineDataset(f):skip(1) end, 4)]])
  mdoc("interleave", [[
ds:interleave(fn, cycle_length=data.AUTOTUNE, block_length=1) or (fn, {cycle_length=, block_length=}) -> Dataset

tf.data's interleave: fn receives an element (as :map's function does) and
returns a dataset; cycle_length of them are read at once, block_length
consecutive elements from each in turn; a finished one is replaced by the
next input element. The order is TF's, deterministic (num_parallel_calls is
not needed: fn and the reads run on the interpreter's thread).
data.AUTOTUNE: the number of CPU threads. fn travels to workers as
bytecode: it may use only its arguments and globals (ldist.data...).]])
  mdoc("reduce", [[
ds:reduce(initial_state, fn) -> state

tf.data's reduce: one pass over ds, state = fn(state, element) for every
element (the element's values as :map receives them), starting from
initial_state; returns the last state:
  ds:reduce(0, function(n, x) return n + 1 end)            -- count
  data.Dataset.range(5):reduce(0, function(s, x) return s + x:item() end)  -- 10]])
  mdoc("flat_map", [[
ds:flat_map(fn) -> Dataset

tf.data's flat_map: fn(element) returns a dataset; its elements follow one
another, input element by input element (interleave with cycle_length 1).]])
  mdoc("with_options", [[
ds:with_options(opts) -> Dataset

The same elements, carrying data.Options() opts:
  local o = data.Options()
  o.experimental_distribute.auto_shard_policy = data.experimental.AutoShardPolicy.OFF
  ds = ds:with_options(o)
auto_shard_policy (AUTO, FILE, DATA, OFF) tells a strategy how to split the
dataset over its workers (MultiWorkerMirrored, the parameter server):
FILE each worker its own files, DATA each worker its share of every batch,
OFF every worker all of it, AUTO FILE where the dataset reads files, else
DATA. A policy given to experimental_distribute_dataset wins.]])
  mdoc("options", [[
ds:options() -> data.Options

The options in effect: those of every with_options up the pipeline (zip's
inputs too), the later one winning a field both set; auto_shard_policy is
AUTO when none set it.]])
  doc(data.Options, { "data.Options" }, [[
data.Options() -> options

tf.data.Options: set experimental_distribute.auto_shard_policy (one of
data.experimental.AutoShardPolicy: AUTO, FILE, DATA, OFF) and give it to
ds:with_options. deterministic is kept for TF's scripts; ldist's pipelines
are always deterministic.]])
  mdoc("cardinality", [[
ds:cardinality() -> integer

Elements per epoch, or data.INFINITE_CARDINALITY (-1) after repeat(), or
data.UNKNOWN_CARDINALITY (-2). #ds gives the same when it is known.]])
  mdoc("iter", [[
ds:iter() -> iterator

An explicit iterator over one epoch: it() (or it:next()) returns the next
element or nil; it:close() stops it. 'for b in ds:iter() do' closes it when
the loop ends, even by break or error.]])
  doc(data.load_csv, { "data.load_csv" }, [[
data.load_csv(path, {header=nil, delimiter=","}) -> tensor, column_names

Numeric CSV into a float32 [rows, cols] tensor. header=nil detects a header
line (one with a field that is not a number), true/false force it. Empty
fields read as NaN. column_names is a table of the header's names, or nil.
Rows with a different number of fields are an error naming the line.]])
  doc(data.load_idx, { "data.load_idx" }, [[
data.load_idx(path, {dtype=nil, scale=1}) -> tensor

Reads an IDX file (the MNIST format), plain or gzip-compressed. uint8 stays
uint8; int8/int16/int32 become int32, float/double float32. dtype converts
("float32", "int64", ...) and scale multiplies, in the same pass:
data.load_idx(p, {dtype="float32", scale=1/255}).]])
  docs["data.INFINITE_CARDINALITY"] = "data.INFINITE_CARDINALITY = -1\n\nWhat ds:cardinality() returns for an endless dataset."
  docs["data.UNKNOWN_CARDINALITY"] = "data.UNKNOWN_CARDINALITY = -2\n\nWhat ds:cardinality() returns when the length cannot be known."
  docs["data.AUTOTUNE"] = "data.AUTOTUNE = -1\n\nFor ds:prefetch(data.AUTOTUNE): let ldist pick the buffer size (2)."
  doc(data, { "data" }, [[
data

Input pipelines and file loaders: data.Dataset (from_tensor_slices, range;
batch, padded_batch, shuffle, repeat_, take, skip, map, filter, shard,
enumerate, unbatch, cache, prefetch, interleave, flat_map, with_options,
options, element_spec; data.Dataset.zip, from_generator, list_files),
data.TextLineDataset, data.Options, data.experimental.make_csv_dataset,
data.load_csv, data.load_idx. Ready-made data sets are in `datasets`.]])
end

if lio then
  doc(lio.save_safetensors, { "io.save_safetensors", "ldist.io.save_safetensors" }, [[
ldist.io.save_safetensors(path, {name = tensor, ...}, {key = value, ...}?) -> true

Writes the tensors in the safetensors format (readable by Python's
safetensors, PyTorch, Hugging Face and Keras 3). Metadata values become
strings. The file is written to a new temporary file beside path (never
one that exists, nor a link), synced and renamed over path, so a failure or
a concurrent save never leaves a torn file and keeps an older file intact.]])
  doc(lio.load_safetensors, { "io.load_safetensors", "ldist.io.load_safetensors" }, [[
ldist.io.load_safetensors(path) -> {name = tensor, ...}, {key = value, ...}

Reads a safetensors file: the tensors by name, and its __metadata__ strings.
F32/I32/I64/U8 load as they are; F64, F16 and BF16 become float32, I8, I16
and U16 int32, U32 and U64 int64, BOOL uint8.]])
  doc(lio, { "ldist.io" }, "ldist.io\n\nsave_safetensors(path, tensors, meta), load_safetensors(path).")
end
