-- 30_datasets.lua - ready-made data sets (ldist.datasets) and the documentation
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
-- 71_shipping ships and rebuilds like the source of a tensor read from a file.
if data then
  local D = data.Dataset
  local function raw_recipe(ds)
    local r = ds:_recipe()
    if not r then error("a dataset given to zip has no recipe and cannot be rebuilt elsewhere", 0) end
    local out = { op = r.op, n = r.args.n, args = {} }
    for i = 1, r.args.n do out.args[i] = r.args[i] end
    if r.parent then out.parent = raw_recipe(r.parent) end
    return out
  end
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
ds:cache() -> Dataset

Keeps the elements in memory: the first complete pass reads the input and
fills the cache, later passes read the cache (the input, e.g. a map, does not
run again). A pass left before its end (break, take) keeps nothing. Only
the in-memory cache: a file name is an error.]])
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
batch, shuffle, repeat_, take, skip, map, filter, shard, enumerate, unbatch,
cache, prefetch; data.Dataset.zip), data.load_csv,
data.load_idx. Ready-made data sets are in `datasets`.]])
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
