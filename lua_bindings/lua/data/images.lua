-- data/images.lua - data.image_dataset_from_directory (Keras's
-- keras.utils.image_dataset_from_directory), io.load_image, io.save_image.
-- The C half is ldist._image (lua_bindings/image.c, engine/ld_image.c).
--
--   local train, val = data.image_dataset_from_directory("flowers",
--     { image_size = { 180, 180 }, validation_split = 0.2, subset = "both", seed = 123 })
--   print(train.class_names[1])
local ldist = ...
local data, lio, C = ldist.data, ldist.io, ldist._image
if not (data and C) then return end
local doc = ldist.document
local D = data.Dataset

-- what Keras sets as attributes on the dataset it returns (class_names,
-- file_paths): kept beside the userdata, read as fields (data/datasets.lua' D._fields)
local attrs = setmetatable({}, { __mode = "k" })
D._fields.class_names = function(ds) local a = attrs[ds]; return a and a.class_names end
D._fields.file_paths = function(ds) local a = attrs[ds]; return a and a.file_paths end
function data.class_names_of(ds)
  local a = attrs[ds]
  return a and a.class_names
end

local CHANNELS = { rgb = 3, grayscale = 1, rgba = 4 }
local LABEL_MODES = { int = true, categorical = true, binary = true, none = true }

local function image_dataset_from_directory(dir, opts)
  local fn = "image_dataset_from_directory"
  if type(dir) ~= "string" then error(fn .. ": the directory must be a string path", 2) end
  opts = opts or {}
  if type(opts) ~= "table" then error(fn .. ": options must be a table", 2) end
  local known = { image_size = 1, batch_size = 1, validation_split = 1, subset = 1, seed = 1, shuffle = 1,
                  color_mode = 1, label_mode = 1, labels = 1, class_names = 1, interpolation = 1,
                  follow_links = 1, verbose = 1, crop_to_aspect_ratio = 1, pad_to_aspect_ratio = 1,
                  data_format = 1 }
  for k in pairs(opts) do
    if not known[k] then error(("%s: unknown option '%s'"):format(fn, tostring(k)), 2) end
  end
  -- labels: "inferred" (default) or false/"none" (images only); Keras's explicit lists are not supported
  local labels = opts.labels
  if labels == nil then labels = "inferred" end
  if labels == false then labels = "none" end
  if labels ~= "inferred" and labels ~= "none" then
    error(fn .. ": labels must be \"inferred\" or false (no labels); a list of labels is not supported", 2)
  end
  local label_mode = opts.label_mode
  if label_mode == nil then label_mode = "int" end
  if label_mode == false then label_mode = "none" end
  if not LABEL_MODES[label_mode] then
    error(("%s: label_mode must be \"int\", \"categorical\", \"binary\" or false (no labels), not %s")
      :format(fn, tostring(label_mode)), 2)
  end
  if labels == "none" or label_mode == "none" then labels, label_mode = "none", "none" end   -- Keras: both None
  local channels = CHANNELS[opts.color_mode or "rgb"]
  if not channels then
    error(("%s: color_mode must be \"rgb\", \"grayscale\" or \"rgba\", not %s"):format(fn, tostring(opts.color_mode)), 2)
  end
  local size = opts.image_size or { 256, 256 }
  if type(size) == "number" then size = { size, size } end
  if type(size) ~= "table" or math.type(size[1]) ~= "integer" or math.type(size[2]) ~= "integer"
      or size[1] < 1 or size[2] < 1 then
    error(fn .. ": image_size must be {height, width} (positive integers) or one integer", 2)
  end
  local batch_size = opts.batch_size
  if batch_size == nil then batch_size = 32 end
  if batch_size == false then batch_size = 0
  elseif math.type(batch_size) ~= "integer" or batch_size < 1 then
    error(fn .. ": batch_size must be a positive integer, or false for unbatched elements", 2)
  end
  local interp = (opts.interpolation or "bilinear"):lower()
  if interp ~= "bilinear" then
    error(("%s: interpolation \"%s\" is not supported (ldist resizes with \"bilinear\", tf.image.resize's default)")
      :format(fn, interp), 2)
  end
  if opts.crop_to_aspect_ratio or opts.pad_to_aspect_ratio then
    error(fn .. ": crop_to_aspect_ratio and pad_to_aspect_ratio are not supported", 2)
  end
  if opts.data_format ~= nil and opts.data_format ~= "channels_last" then
    error(fn .. ": only data_format \"channels_last\" ([b, h, w, c]) is supported", 2)
  end
  local shuffle = opts.shuffle ~= false
  local vs, subset, seed = opts.validation_split, opts.subset, opts.seed
  if vs == 0 then vs = nil end
  if vs ~= nil and (type(vs) ~= "number" or not (vs > 0 and vs < 1)) then
    error(("%s: validation_split must be between 0 and 1, received: %s"):format(fn, tostring(vs)), 2)
  end
  if (vs ~= nil) ~= (subset ~= nil) then
    error(fn .. ": if subset is set, validation_split must be set, and inversely", 2)
  end
  if subset ~= nil and subset ~= "training" and subset ~= "validation" and subset ~= "both" then
    error(("%s: subset must be \"training\", \"validation\" or \"both\", received: %s"):format(fn, tostring(subset)), 2)
  end
  if vs and shuffle and seed == nil then
    error(fn .. ": if using validation_split and shuffling the data, you must provide a seed argument, " ..
      "to make sure that there is no overlap between the training and validation subset", 2)
  end
  if seed ~= nil and (math.type(seed) ~= "integer" or seed < 0 or seed > 0xffffffff) then
    error(fn .. ": seed must be an integer in 0..2^32-1 (numpy's RandomState seeds)", 2)
  end
  if seed == nil then seed = math.random(0, 999999) end      -- Keras: np.random.randint(1e6)
  local verbose = opts.verbose ~= false
  local class_names = opts.class_names
  if class_names ~= nil and labels ~= "inferred" then
    error(fn .. ": class_names can be given only with labels = \"inferred\"", 2)
  end

  -- without labels Keras lists every file under dir (the class "" below)
  local ok, paths, labs, classes, skipped = pcall(C.index, dir, labels == "none" and { "" } or class_names,
    opts.follow_links, shuffle, seed)
  if not ok then error(paths, 2) end
  local n = #paths
  if labels == "none" then classes = nil end
  if verbose then
    if labels == "none" then print(("Found %d files."):format(n))
    else print(("Found %d files belonging to %d classes."):format(n, #classes)) end
    if skipped > 0 then
      print(("(%d .bmp/.gif files left out: ldist reads PNG and JPEG only)"):format(skipped))
    end
  end
  if label_mode == "binary" and #classes ~= 2 then
    error(("%s: label_mode \"binary\" needs exactly 2 classes, found %d"):format(fn, #classes), 2)
  end

  -- the recipe: the same call with the seed drawn here, silent, one subset
  local o2 = {}
  for k, v in pairs(opts) do o2[k] = v end
  o2.seed, o2.verbose = seed, false

  local function make(sub)
    local lo, hi = 1, n
    if vs then
      local nval = math.floor(vs * n)
      if nval == 0 then
        error(("%s: validation_split %g of %d files leaves no validation files"):format(fn, vs, n), 3)
      end
      if sub == "training" then hi = n - nval else lo = n - nval + 1 end
      if verbose then
        print(("Using %d files for %s."):format(hi - lo + 1, sub))
      end
    end
    if hi < lo then error(("%s: no images found in %s (ldist reads .png, .jpg and .jpeg files)"):format(fn, dir), 3) end
    local p, l = {}, (label_mode ~= "none") and {} or nil
    for i = lo, hi do
      p[#p + 1] = paths[i]
      if l then l[#l + 1] = labs[i] end
    end
    local ds = C.dataset(p, l, {
      height = size[1], width = size[2], channels = channels, batch_size = batch_size,
      label_mode = label_mode, num_classes = classes and #classes or 0,
      shuffle = shuffle and sub ~= "validation", seed = seed,
    })
    local r = {}
    for k, v in pairs(o2) do r[k] = v end
    if sub then r.subset = sub end
    ds:_set_recipe({ op = "_image_dataset_from_directory", args = { n = 2, dir, r } })
    attrs[ds] = { class_names = classes, file_paths = p }
    return ds
  end
  if subset == "both" then return make("training"), make("validation") end
  return make(subset)
end
data.image_dataset_from_directory = image_dataset_from_directory
D._image_dataset_from_directory = image_dataset_from_directory

-- io.load_image / io.save_image
if lio then
  function lio.load_image(path, opts)
    local c = CHANNELS[(type(opts) == "table" and opts.color_mode) or "rgb"]
    if not c then error("load_image: color_mode must be \"rgb\", \"grayscale\" or \"rgba\"", 2) end
    return C.load(path, c)
  end
  function lio.save_image(path, img, opts)
    return C.save(path, img, type(opts) == "table" and opts.quality or nil)
  end
  lio.max_image_pixels = C.max_pixels
  doc(lio.max_image_pixels, { "io.max_image_pixels", "ldist.io.max_image_pixels" }, [[
ldist.io.max_image_pixels([n]) -> the limit it had

Images of more than n pixels (width x height) are refused when decoded, with
an error naming the file and the limit, so that a small crafted file cannot
ask for gigabytes. The default, 89478485, is Pillow's Image.MAX_IMAGE_PIXELS;
n = 0 or false lifts the limit. Called without n it only returns the limit.]])
  doc(lio.load_image, { "io.load_image", "ldist.io.load_image" }, [[
ldist.io.load_image(path, {color_mode="rgb"}) -> uint8 tensor [h, w, c]

Decodes a PNG or JPEG file as tf.io.decode_image(channels=c) does; c is 3
("rgb"), 1 ("grayscale") or 4 ("rgba"). See data.image_dataset_from_directory
for the conversions.]])
  doc(lio.save_image, { "io.save_image", "ldist.io.save_image" }, [[
ldist.io.save_image(path, img, {quality=95})

Writes a uint8 tensor [h, w, c] (or [h, w]) as a PNG (c = 1, 2, 3 or 4), or
as a JPEG when path ends in .jpg or .jpeg (c = 1 or 3, libjpeg quality 1..100).]])
end

doc(image_dataset_from_directory, { "data.image_dataset_from_directory" }, [[
data.image_dataset_from_directory(dir, {image_size={256, 256}, batch_size=32,
    color_mode="rgb", label_mode="int", labels="inferred", class_names=,
    shuffle=true, seed=, validation_split=, subset=, interpolation="bilinear",
    follow_links=false, verbose=true}) -> Dataset (two with subset="both")

Keras's keras.utils.image_dataset_from_directory. Each sub-folder of dir
(sorted; or class_names, in that order) is a class; its .png, .jpg and
.jpeg files (any case, sub-folders included) are the images. Elements are
{images, labels}: images float32 [b, h, w, c] with values 0..255; labels
int32 [b] ("int"), float32 one-hot [b, k] ("categorical") or float32 [b, 1]
("binary", 2 classes). label_mode=false or labels=false: elements {images}.
batch_size=false: unbatched elements [h, w, c]. Prints "Found N files
belonging to K classes." and "Using M files for training." as Keras does.

The file order and the split match Keras exactly for the same seed: the
files are shuffled with numpy's RandomState(seed) and the last
floor(validation_split * N) are the validation subset. validation_split
with shuffling needs a seed. The training dataset is reshuffled each epoch
(a full shuffle, deterministic from the seed; Keras's tf.data shuffle
buffer cannot be matched); the validation dataset keeps its order.

Decoding follows tf.io.decode_image(channels=c): "grayscale" from RGB uses
libpng's 0.299/0.587/0.114 integer weights (PNG) or the JPEG's luma, 16-bit
PNGs keep the high byte, alpha is dropped without compositing. Images are
resized as tf.image.resize(bilinear) does (an image already at image_size
is unchanged). Each batch's files are decoded in parallel on the CPU
threads, and a prefetch runs ahead on a background thread. A file that
cannot be decoded stops the loop with an error naming it. Not supported:
BMP and GIF files (Keras reads them; ldist leaves them out and prints how
many, so a folder with such files splits differently), interpolation other
than bilinear, crop/pad_to_aspect_ratio, and labels given as a list.
ds.class_names and ds.file_paths are set on the returned datasets
(not on datasets derived from them); data.class_names_of(ds) reads the
first. Workers of a distribution strategy rebuild the dataset from the same
call and seed.]])

-- the module summaries (written by data/datasets.lua) name the new functions too
local docs = ldist.docs
local function extend(obj, name, needle, text)
  local d = docs[obj] or docs[name]
  if type(d) == "string" and not d:find(needle, 1, true) then
    d = d .. text
    if docs[obj] then docs[obj] = d end
    docs[name] = d
  end
end
extend(data, "data", "image_dataset_from_directory",
  "\nFolders of PNG/JPEG images: data.image_dataset_from_directory (Keras's).")
if lio then extend(lio, "ldist.io", "load_image", "\nImages: load_image(path, opts), save_image(path, img, opts).") end
