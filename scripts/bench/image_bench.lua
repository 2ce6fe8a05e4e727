-- scripts/bench/image_bench.lua - data.image_dataset_from_directory reading a
-- folder of PNGs (scripts/bench/images.sh; image_ref.py is Keras's side).
--   ./ldist scripts/bench/image_bench.lua write DIR N   -- N Fashion-MNIST PNGs, one folder per class
--   ./ldist scripts/bench/image_bench.lua read DIR      -- "first_pass second_pass" images/s
--   ./ldist scripts/bench/image_bench.lua train DIR     -- a small CNN trained from the folder
-- A pass is the call (listing the folder) and one loop over every batch
-- (batch 32, 28x28 grayscale, the images' own size); the second pass is a
-- second epoch of the same dataset.
local mode, dir, n = arg[1], arg[2], tonumber(arg[3] or 10000)
if mode == "write" then
  local src = "/usr/share/datasets/fashion-mnist/"
  local x = data.load_idx(src .. "train-images-idx3-ubyte.gz")     -- uint8 [60000, 28, 28]
  local y = data.load_idx(src .. "train-labels-idx1-ubyte.gz")
  local names = datasets.fashion_mnist.class_names
  for c = 1, 10 do ldist.io._mkdir_p(("%s/%d_%s"):format(dir, c - 1, names[c]:gsub("[^%w]", "_"))) end
  local ys = y:totable()
  for i = 1, n do
    local c = ys[i]
    ldist.io.save_image(("%s/%d_%s/%05d.png"):format(dir, c, names[c + 1]:gsub("[^%w]", "_"), i), x[i - 1]:reshape({ 28, 28, 1 }))   -- tensors index from 0
  end
  print(("wrote %d PNGs into %s"):format(n, dir))
  return
end
if mode == "train" then   -- a CNN from the folder: 2 epochs on 80%, accuracy on the other 20%
  local tr, va = data.image_dataset_from_directory(dir, { image_size = { 28, 28 }, color_mode = "grayscale",
    batch_size = 32, validation_split = 0.2, subset = "both", seed = 1, verbose = false })
  local function scaled(ds) return ds:map(function(x, y) return x * (1 / 255), y end) end
  tensor.seed(1)
  local m = nn.Sequential { nn.Conv2D(16, 3, { activation = "relu" }), nn.MaxPool2D(2),
    nn.Conv2D(32, 3, { activation = "relu" }), nn.MaxPool2D(2), nn.Flatten(), nn.Dense(10) }
  m:compile { optimizer = optim.Adam { learning_rate = 1e-3 },
              loss = losses.SparseCategoricalCrossentropy { from_logits = true }, metrics = { "accuracy" } }
  local t0 = ldist.clock()
  local h = m:fit(scaled(tr), { epochs = 2, verbose = 0 })
  local r = m:evaluate(scaled(va), { verbose = 0 })
  print(("CNN trained from the folder: 2 epochs of %d images in %.1f s, train accuracy %.3f -> %.3f, validation accuracy %.3f")
    :format(#tr.file_paths, ldist.clock() - t0, h.accuracy[1], h.accuracy[2], r.accuracy))
  return
end
local t0 = ldist.clock()
local ds = data.image_dataset_from_directory(dir, { image_size = { 28, 28 }, color_mode = "grayscale",
                                                    batch_size = 32, seed = 1, verbose = false })
local count = 0
for b in ds do count = count + b[1].shape[1] end
local t1 = ldist.clock()
for _ in ds do end
local t2 = ldist.clock()
print(("%.0f %.0f"):format(count / (t1 - t0), count / (t2 - t1)))
