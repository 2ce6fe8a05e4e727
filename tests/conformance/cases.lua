-- tests/conformance/cases.lua - the conformance cases (see run.lua for the
-- format, and how to add one). Every case seeds what it makes, so the default
-- strategy's numbers are the reference every other strategy must give.
local D = distribute
local cases = {}
local function add(c) cases[#cases + 1] = c end

---------------------------------------------------------------- helpers
local function check(cond, fmt, ...)
  if not cond then error(fmt:format(...), 2) end
end

-- n rows of normal features of shape {n, ...}; labels: argmax of the first
-- `classes` features (an easy, learnable task)
local function make_data(n, shape, classes, seed)
  tensor.seed(seed or 11)
  local x = tensor.normal(n, table.unpack(shape))
  local flat = 1
  for _, d in ipairs(shape) do flat = flat * d end
  local y = x:reshape { n, flat }:slice(1, 0, classes):argmax(1):astype("int64")
  return x, y
end

-- n rows of 8 ids in [1, 10) padded with 0 after 2 to 8 steps, a fifth of them with
-- step 3 padded too (deterministic); labels: each step's id % 3 (tags), or whether
-- the first id is even
local function padded_ids(n, tags)
  local ids, ys, s = {}, {}, 7
  local function r(k) s = (s * 1103515245 + 12345) % 2147483648; return s % k end
  for i = 1, n do
    local len = 2 + r(7)
    for t = 1, 8 do
      local v = t <= len and 1 + r(9) or 0
      if t == 3 and r(5) == 0 then v = 0 end
      ids[#ids + 1] = v
      if tags then ys[#ys + 1] = v % 3 end
    end
    if not tags then ys[i] = (ids[(i - 1) * 8 + 1] + 1) % 2 end
  end
  local x = tensor.new(ids, { dtype = "int64" }):reshape { n, 8 }
  local y = tensor.new(ys, { dtype = "int64" })
  return x, tags and y:reshape { n, 8 } or y
end

-- a seq2seq model's data: {encoder ids, decoder ids} and the decoder's tags
local function id_pairs(n)
  local xa = padded_ids(n, false)
  local xb, tags = padded_ids(n, true)
  return { xa, xb }, tags
end

-- every trainable variable of a model, flattened into out["w<i>[<j>]"]
local function put_weights(out, model, prefix)
  for i, v in ipairs(model.trainable_variables) do
    local flat = v:cpu():reshape { v:numel() }:totable()
    for j, x in ipairs(flat) do out[("%s%d[%d]"):format(prefix or "w", i, j - 1)] = x end
  end
  return out
end

local function weights_sum(model)
  local s = 0
  for _, v in ipairs(model.trainable_variables) do s = s + v:cpu():sum():item() end
  return s
end

local MODELS = {
  mlp = { shape = { 8 }, classes = 4, make = function() return nn.Sequential { nn.Dense(16, "tanh"), nn.Dense(4) } end },
  -- probabilities out (a segmentation-style loss's input: Dice)
  mlp_sigmoid = { shape = { 8 }, classes = 4,
    make = function() return nn.Sequential { nn.Dense(16, "tanh"), nn.Dense(4, "sigmoid") } end },
  flatten = { shape = { 4, 4 }, classes = 3,
    make = function() return nn.Sequential { nn.Flatten(), nn.Dense(16, "relu"), nn.Dense(3) } end },
  conv = { shape = { 6, 6, 1 }, classes = 3,
    make = function() return nn.Sequential { nn.Conv2D(4, 3, { activation = "relu" }), nn.Flatten(), nn.Dense(3) } end },
  dropout = { shape = { 8 }, classes = 4,
    make = function() return nn.Sequential { nn.Dense(16, "relu"), nn.Dropout(0.3), nn.Dense(4) } end },
  -- sequences of 6 steps through Keras's Bidirectional(LSTM), then a Dense
  bidirectional = { shape = { 6, 4 }, classes = 4,
    make = function() return nn.Sequential { nn.Bidirectional(nn.LSTM(5)), nn.Dense(4) } end },
  -- a sequence of 8 steps: Conv1D, the two 1-d poolings, Subtract and Average of two branches
  pool1d = { shape = { 8, 3 }, classes = 4,
    make = function()
      local x = nn.Input { shape = { 8, 3 } }
      local h = nn.Conv1D(4, 3, { activation = "relu", padding = "same" })(x)
      local a, b = nn.MaxPooling1D(2)(h), nn.AveragePooling1D(2)(h)
      local m = nn.Average() { nn.Subtract() { a, b }, nn.Maximum() { a, b } }
      return nn.Model { inputs = x, outputs = nn.Dense(4)(nn.Flatten()(m)) }
    end },
  -- images padded, convolved, enlarged (nearest, then bilinear), cropped and permuted; a vector repeated
  reshape = { shape = { 6, 6, 1 }, classes = 3,
    make = function()
      return nn.Sequential { nn.ZeroPadding2D(1), nn.Conv2D(2, 3, { activation = "tanh" }), nn.UpSampling2D(2),
        nn.UpSampling2D({ 1, 2 }, { interpolation = "bilinear" }),
        nn.Cropping2D { 2, 1, 0, 3 }, nn.Permute { 3, 1, 2 }, nn.Flatten(), nn.Dense(6, "tanh"), nn.RepeatVector(2),
        nn.Flatten(), nn.Dense(3) }
    end },
  -- images downsampled, upsampled by a transposed convolution, then depthwise and separable
  -- convolutions and a SAME max pooling
  -- Keras's training noise: Gaussian noise and dropout, whole channels dropped; each value drawn by its
  -- place in the global batch, so every strategy draws the same
  noise = { shape = { 6, 6, 2 }, classes = 3,
    make = function()
      return nn.Sequential { nn.GaussianNoise(0.3), nn.Conv2D(4, 3, { activation = "relu" }), nn.SpatialDropout2D(0.4),
        nn.Flatten(), nn.GaussianDropout(0.3), nn.Dense(3) }
    end },
  -- dilated convolutions (over their inputs' phases): a causal stack of a TCN (dilations 1, 2, 4) and an
  -- atrous Conv2D then SeparableConv2D, in two branches
  dilated = { shape = { 12, 2 }, classes = 3,
    make = function()
      local x = nn.Input { shape = { 12, 2 } }
      local h = x
      for _, d in ipairs { 1, 2, 4 } do h = nn.Conv1D(4, 2, { padding = "causal", dilation_rate = d, activation = "relu" })(h) end
      local img = nn.Reshape { 12, 2, 1 }(x)
      local a = nn.Conv2D(3, { 3, 2 }, { padding = "same", dilation_rate = { 3, 1 }, activation = "tanh" })(img)
      a = nn.SeparableConv2D(2, 2, { dilation_rate = { 2, 1 }, depth_multiplier = 2 })(a)
      local cat = nn.Concatenate() { nn.GlobalAveragePooling1D()(h), nn.Flatten()(a) }
      return nn.Model { inputs = x, outputs = nn.Dense(3)(cat) }
    end },
  -- each example's own statistics: GroupNormalization over channel groups, UnitNormalization over two axes
  groupnorm = { shape = { 6, 6, 2 }, classes = 3,
    make = function()
      return nn.Sequential { nn.Conv2D(4, 3, { padding = "same" }), nn.GroupNormalization(2), nn.Activation("relu"),
        nn.UnitNormalization { axis = { 1, 2 } }, nn.Flatten(), nn.Dense(3) }
    end },
  deconv = { shape = { 8, 8, 1 }, classes = 3,
    make = function()
      return nn.Sequential { nn.Conv2D(4, 3, { strides = 2, padding = "same", activation = "relu" }),
        nn.Conv2DTranspose(3, 3, { strides = 2, padding = "same", activation = "tanh" }),
        nn.DepthwiseConv2D(3, { depth_multiplier = 2, activation = "relu" }),
        nn.SeparableConv2D(4, 3, { padding = "same", activation = "tanh" }),
        nn.MaxPool2D(3, { strides = 2, padding = "same" }), nn.Flatten(), nn.Dense(3) }
    end },
  -- sequences of 6 steps: a Dense on each step (TimeDistributed), padded, lengthened by a transposed
  -- convolution, cropped and upsampled; a Dropout on each step (its draws placed by the folded rows'
  -- place in the global batch), AlphaDropout, a capped leaky ReLU, an activity term in fit's loss
  timeseq = { shape = { 6, 4 }, classes = 3,
    make = function()
      return nn.Sequential { nn.TimeDistributed(nn.Dense(5, "tanh")), nn.ZeroPadding1D(1),
        nn.Conv1DTranspose(3, 3, { strides = 2, padding = "same", activation = "relu" }), nn.Cropping1D { 1, 2 },
        nn.UpSampling1D(2), nn.TimeDistributed(nn.Dropout(0.3)), nn.AlphaDropout(0.2),
        nn.ReLU { max_value = 2, negative_slope = 0.1 }, nn.ActivityRegularization { l1 = 1e-3, l2 = 1e-3 },
        nn.Flatten(), nn.Dense(3) }
    end },
  -- Keras's Dot: attention-like scores of the steps, the cosine similarities of the features, and a
  -- dot product of two vectors, merged
  dot = { shape = { 6, 4 }, classes = 3,
    make = function()
      local x = nn.Input { shape = { 6, 4 } }
      local q = nn.TimeDistributed(nn.Dense(4, "tanh"))(x)
      local s = nn.Dot { axes = 2 } { q, x }
      local c = nn.Dot { axes = { 1, 1 }, normalize = true } { x, q }
      local v = nn.Dot { axes = 1 } { nn.Flatten()(x), nn.Flatten()(q) }
      local h = nn.Concatenate() { nn.Flatten()(s), nn.Flatten()(c), v }
      return nn.Model { inputs = x, outputs = nn.Dense(3)(h) }
    end },
  -- Keras's masks: padded id sequences (id 0, trailing and one inside), each step
  -- tagged id % 3; Embedding{mask_zero} -> Bidirectional LSTM over the steps that
  -- count -> a tag per step, the loss and accuracy over the steps that count (their
  -- number is the global batch's: an in-step all-reduce)
  masked_tagger = { data = function(n) return padded_ids(n, true) end,
    make = function()
      return nn.Sequential { nn.Input { shape = { 8 }, dtype = "int64" }, nn.Embedding(10, 6, { mask_zero = true }),
        nn.Bidirectional(nn.LSTM(5, { return_sequences = true })), nn.Dense(3) }
    end },
  -- the same ids classified (is the first id even?) by attention over the steps that
  -- count, a GRU that skips the others, and their masked mean
  masked_classifier = { data = function(n) return padded_ids(n, false) end,
    make = function()
      local x = nn.Input { shape = { 8 }, dtype = "int64" }
      local e = nn.Embedding(10, 6, { mask_zero = true })(x)
      local a = nn.MultiHeadAttention(2, 3)(e)
      local g = nn.GRU(4, { return_sequences = true })(nn.Add() { e, nn.Dense(6)(a) })
      return nn.Model { inputs = x, outputs = nn.Dense(2)(nn.GlobalAveragePooling1D()(g)) }
    end },
  -- Keras's seq2seq: an encoder over padded ids (masked) whose final states
  -- (return_state) start the decoder (initial_state), which tags its own ids
  seq2seq = { data = id_pairs,
    make = function()
      local a, b = nn.Input { shape = { 8 }, dtype = "int64" }, nn.Input { shape = { 8 }, dtype = "int64" }
      local _, h, c = nn.LSTM(5, { return_state = true })(nn.Embedding(10, 4, { mask_zero = true })(a))
      local o = nn.LSTM(5, { return_sequences = true })(nn.Embedding(10, 4)(b), { initial_state = { h, c } })
      return nn.Model { inputs = { a, b }, outputs = nn.Dense(3)(o) }
    end },
  -- seq2seq with Bahdanau attention (AdditiveAttention over the encoder's masked
  -- steps) and Luong attention (Attention) over the decoder's own
  seq2seq_attention = { data = id_pairs,
    make = function()
      local a, b = nn.Input { shape = { 8 }, dtype = "int64" }, nn.Input { shape = { 8 }, dtype = "int64" }
      local enc, h, c = nn.LSTM(5, { return_sequences = true, return_state = true })(
        nn.Embedding(10, 4, { mask_zero = true })(a))
      local dec = nn.LSTM(5, { return_sequences = true })(nn.Embedding(10, 4, { mask_zero = true })(b),
        { initial_state = { h, c } })
      local att = nn.AdditiveAttention() { dec, enc }
      local self_att = nn.Attention { use_scale = true, use_causal_mask = true } { dec, dec }
      return nn.Model { inputs = { a, b }, outputs = nn.Dense(3)(nn.Concatenate() { dec, att, self_att }) }
    end },
  -- Keras's image augmentation: every Random layer (each image's draw keyed by its place in the global
  -- batch, RandomCrop's window one per global batch), then a resize and a crop, before a small CNN
  augment = { shape = { 8, 8, 1 }, classes = 3,
    make = function()
      return nn.Sequential { nn.RandomFlip(), nn.RandomRotation(0.1), nn.RandomZoom(0.2, { fill_mode = "constant" }),
        nn.RandomTranslation(0.1, { -0.2, 0.1 }, { interpolation = "nearest", fill_mode = "wrap" }),
        nn.RandomContrast(0.3, { value_range = { -4, 4 } }), nn.RandomBrightness(0.1, { value_range = { -4, 4 } }),
        nn.RandomCrop(7, 7), nn.Resizing(9, 9), nn.CenterCrop(8, 8),
        nn.Conv2D(4, 3, { activation = "relu" }), nn.Flatten(), nn.Dense(3) }
    end },
  -- Keras's dropout and recurrent_dropout of recurrent layers: masks drawn per
  -- sequence, the same at every step, per gate with recurrent dropout
  rnn_dropout = { shape = { 6, 4 }, classes = 3,
    make = function()
      return nn.Sequential { nn.LSTM(6, { dropout = 0.2, recurrent_dropout = 0.2, return_sequences = true }),
        nn.Bidirectional(nn.GRU(3, { dropout = 0.3, return_sequences = true })),
        nn.SimpleRNN(5, { recurrent_dropout = 0.25 }), nn.Dense(3) }
    end },
  -- regression of a sequence: a Dense over each of 6 steps, targets [batch, 6, 2]
  -- (a loss of several positions per row, divided by the global batch's positions)
  seq = { shape = { 6, 4 }, target = function(x) return x:slice(2, 0, 2):tanh() end,
    make = function() return nn.Sequential { nn.Dense(8, "tanh"), nn.Dense(2) } end },
  -- regression of 2 targets from 8 features
  reg = { shape = { 8 }, target = function(x) return x:slice(1, 0, 2) * 0.5 + x:slice(1, 2, 4):tanh() end,
    make = function() return nn.Sequential { nn.Dense(16, "tanh"), nn.Dense(2) } end },
  -- Keras's layer.trainable = false (fine-tuning): the first Dense and the
  -- BatchNormalization frozen (it then normalizes by its moving statistics)
  frozen = { shape = { 8 }, classes = 4,
    make = function()
      local m = nn.Sequential { nn.Dense(16, "relu"), nn.BatchNormalization(), nn.Dense(16, "tanh"), nn.Dense(4) }
      m.layers[1].trainable = false
      m.layers[2].trainable = false
      return m
    end },
}

local OPTIMIZERS = {
  sgd = function() return optim.SGD { learning_rate = 0.1 } end,
  sgd_momentum = function() return optim.SGD { learning_rate = 0.05, momentum = 0.9 } end,
  adam = function() return optim.Adam { learning_rate = 0.01 } end,
  adamw = function() return optim.AdamW { learning_rate = 0.01, weight_decay = 0.01 } end,
  -- Keras's three clippings, on the gradients summed across replicas: small
  -- enough limits that they clip in most of the 50 steps
  sgd_clipnorm = function() return optim.SGD { learning_rate = 0.1, clipnorm = 0.05 } end,
  adam_global_clipnorm = function() return optim.Adam { learning_rate = 0.01, global_clipnorm = 0.1 } end,
  sgd_clipvalue = function() return optim.SGD { learning_rate = 0.05, momentum = 0.9, clipvalue = 0.01 } end,
  -- the variants with a third slot (sharded on Mirrored over CPU devices, shipped to workers)
  adam_amsgrad = function() return optim.Adam { learning_rate = 0.01, beta_2 = 0.9, amsgrad = true } end,
  -- Keras's other optimizers (Nadam's momentum schedule is the step's; Adagrad's slot starts at 0.1);
  -- weight decay decoupled, as in every Keras 3 optimizer
  adagrad = function() return optim.Adagrad { learning_rate = 0.1 } end,
  adamax = function() return optim.Adamax { learning_rate = 0.01 } end,
  nadam_wd = function() return optim.Nadam { learning_rate = 0.01, weight_decay = 0.05 } end,
  lion = function() return optim.Lion { learning_rate = 0.002 } end,
  adadelta = function() return optim.Adadelta { learning_rate = 1.0, rho = 0.9 } end,
  ftrl_l1 = function() return optim.Ftrl { learning_rate = 0.1, l1_regularization_strength = 0.001,
    l2_shrinkage_regularization_strength = 0.01, beta = 0.1 } end,
  sgd_momentum_wd = function() return optim.SGD { learning_rate = 0.05, momentum = 0.9, weight_decay = 0.05 } end,
  rmsprop_centered = function() return optim.RMSprop { learning_rate = 0.005, momentum = 0.5, centered = true } end,
  -- Keras's gradient accumulation (the mean of 3 calls' reduced gradients, 50 steps: 16 updates and 2 pending)
  -- and its moving average of the weights (overwritten every 7 steps; fit ends writing it)
  sgd_accumulate = function() return optim.SGD { learning_rate = 0.2, momentum = 0.5, gradient_accumulation_steps = 3 } end,
  adam_ema = function() return optim.Adam { learning_rate = 0.01, use_ema = true, ema_momentum = 0.9,
                                            ema_overwrite_frequency = 7 } end,
  -- Keras's loss_scale_factor (fit scales the loss; every update divides the reduced gradients)
  sgd_loss_scale_factor = function() return optim.SGD { learning_rate = 0.1, momentum = 0.5, loss_scale_factor = 3 } end,
}

local function sparse_ce(reduction)
  return losses.SparseCategoricalCrossentropy { from_logits = true, reduction = reduction }
end

-- model and optimizer made in the strategy's scope, from a fixed seed
-- loss: a loss object for compile (sparse_ce() when nil)
local function make_model(S, kind, opt_name, compile, metrics, loss)
  local model, opt
  tensor.seed(7)
  S.scope(function()
    model = MODELS[kind].make()
    opt = OPTIMIZERS[opt_name]()
    if compile then model:compile { optimizer = opt, loss = loss or sparse_ce(), metrics = metrics } end
  end)
  return model, opt
end

-- TF's custom training loop (the tf.distribute guide): per-example losses,
-- compute_average_loss, strategy:run, strategy:reduce("sum", ...)
-- extra (optional): a function adding terms to the replica's loss (regularization)
local function custom_loop(S, model, opt, ds, epochs, global_batch_size, extra)
  local loss_object = sparse_ce("none")
  local function step(inputs)
    local tape = autograd.GradientTape()
    local loss = tape:record(function()
      local predictions = model(inputs[1], { training = true })
      local l = D.compute_average_loss(loss_object(inputs[2], predictions),
        global_batch_size and { global_batch_size = global_batch_size } or nil)
      return extra and l + extra() or l
    end)
    opt:apply_gradients(tape:gradient(loss, model.trainable_variables), model.trainable_variables)
    return loss
  end
  local dist = S.distribute(ds)
  local losses_ = {}
  for _ = 1, epochs do
    local total, nb = 0.0, 0
    for inputs in dist do
      total = total + S.reduce("sum", S.step(step, inputs))
      nb = nb + 1
    end
    losses_[#losses_ + 1] = total / nb
  end
  return losses_
end

-- one training case: `mode` fit or loop, on MODELS[kind], OPTIMIZERS[opt_name];
-- n rows, batch b, `epochs` epochs (50+ steps)
local function train_case(o)
  return {
    name = o.name, tol = o.tol, also = o.also, skip = o.skip,
    run = function(S)
      local m = MODELS[o.model]
      local x, y
      if m.data then x, y = m.data(o.n) else x, y = make_data(o.n, m.shape, m.classes or 2) end
      if m.target then y = m.target(x) end
      if o.onehot then   -- a categorical loss's labels
        y = y:reshape(o.n, 1):astype("float32"):eq(tensor.arange(m.classes):astype("float32"))
      end
      local ds = data.Dataset.from_tensor_slices(x, y)
      if o.shuffle then ds = ds:shuffle(o.n, { seed = 3 }) end
      ds = ds:batch(o.b)
      local batches = -(-o.n // o.b)
      local model, opt = make_model(S, o.model, o.opt, o.mode == "fit", o.metrics, o.loss and o.loss())
      local hist, metric_finals = nil, {}
      if o.mode == "fit" then
        local h = model:fit(ds, { epochs = o.epochs, verbose = 0, steps_per_epoch = batches })
        hist = h.loss
        for k, v in pairs(h.history) do if k ~= "loss" then metric_finals[k .. "_final"] = v[#v] end end
      else
        hist = custom_loop(S, model, opt, ds, o.epochs, o.global_batch_size)
      end
      check(#hist == o.epochs, "%d epochs of losses, %d expected", #hist, o.epochs)
      local out = { loss_first = hist[1], loss_final = hist[#hist] }
      for k, v in pairs(metric_finals) do out[k] = v end   -- the metrics' last epoch, as the default strategy's
      out.iterations = opt.iterations      -- compared with the default strategy's, like the weights
      check(hist[#hist] < hist[1], "the loss did not fall (%.4f -> %.4f)", hist[1], hist[#hist])
      -- the weights that do not train (frozen layers', moving statistics): as the default strategy leaves them
      for i, v in ipairs(model.non_trainable_variables) do out[("frozen%d_sum"):format(i)] = v:cpu():sum():item() end
      return put_weights(out, model)
    end,
  }
end

---------------------------------------------------------------- training equality
-- optimizers: 240 rows, batch 24 (divisible by 1, 2, 3 replicas), 5 epochs = 50 steps
for _, opt in ipairs { "sgd", "sgd_momentum", "adam", "adamw", "sgd_clipnorm", "adam_global_clipnorm", "sgd_clipvalue",
                       "adam_amsgrad", "rmsprop_centered", "sgd_accumulate", "adam_ema", "sgd_loss_scale_factor",
                       "adagrad", "adamax", "nadam_wd", "lion", "sgd_momentum_wd", "adadelta", "ftrl_l1" } do
  for _, mode in ipairs { "fit", "loop" } do
    add(train_case { name = ("%s_%s"):format(mode, opt), model = "mlp", opt = opt, mode = mode, n = 240, b = 24, epochs = 5,
      also = mode == "fit" and { "ps", "mw_local" } or nil,
      shuffle = opt == "adam" })
  end
end
-- Keras's label smoothing in fit: one-hot labels, categorical cross-entropy
add(train_case { name = "fit_cce_label_smoothing", model = "mlp", opt = "sgd_momentum", mode = "fit", n = 240, b = 24,
  epochs = 5, also = { "ps", "mw_local" }, onehot = true,
  loss = function() return losses.CategoricalCrossentropy { from_logits = true, label_smoothing = 0.2 } end })
-- Keras's focal loss (one-hot labels); ignore_class (class 3's labels ignored:
-- their number differs from replica to replica, and the mean is over the
-- global batch's valid labels, engine/ld_nn.c's masked_mean); Dice over the
-- whole batch (no sum over examples: each replica's share is its part of the
-- loss linearised at the global sums, engine/ld_nn.c's overlap_loss)
add(train_case { name = "fit_focal", model = "mlp", opt = "sgd_momentum", mode = "fit", n = 240, b = 24, epochs = 5,
  also = { "ps", "mw_local" }, onehot = true,
  loss = function() return losses.CategoricalFocalCrossentropy { from_logits = true, gamma = 1.5, alpha = 0.5 } end })
add(train_case { name = "fit_ignore_class", model = "mlp", opt = "sgd_momentum", mode = "fit", n = 240, b = 24,
  epochs = 5, also = { "ps", "mw_local" },
  loss = function() return losses.SparseCategoricalCrossentropy { from_logits = true, ignore_class = 3 } end })
add(train_case { name = "fit_dice", model = "mlp_sigmoid", opt = "sgd_momentum", mode = "fit", n = 240, b = 24, epochs = 5,
  also = { "ps", "mw_local" }, onehot = true, tol = 1e-4, loss = function() return losses.Dice() end })
-- layers: Flatten (Bx4x4), Conv2D (6x6x1, 4 filters 3x3), Dropout 0.3, frozen layers, Bidirectional,
-- 1-d pooling and merging layers, transposed/depthwise/separable convolutions, TimeDistributed and the
-- 1-d shape layers, Dot, dilated convolutions, masks, recurrent dropout, seq2seq, image augmentation
for _, kind in ipairs { "flatten", "conv", "dropout", "frozen", "bidirectional", "pool1d", "reshape", "deconv", "groupnorm", "noise",
                        "timeseq", "dot", "dilated", "masked_tagger", "masked_classifier", "rnn_dropout", "seq2seq", "seq2seq_attention",
                        "augment" } do
  for _, mode in ipairs { "fit", "loop" } do
    add(train_case { name = ("%s_%s"):format(mode, kind), model = kind, opt = "sgd_momentum", mode = mode, n = 240, b = 24,
      epochs = 5, also = mode == "fit" and { "ps", "mw_local" } or nil })
  end
end
-- regression: MSE over a sequence's positions; Keras's other regression losses
-- with its regression metrics (compared too); 240 rows, batch 24, 5 epochs
add(train_case { name = "fit_seq_mse", model = "seq", opt = "sgd_momentum", mode = "fit", n = 240, b = 24, epochs = 5,
  also = { "ps", "mw_local" }, loss = function() return losses.MeanSquaredError() end,
  metrics = { "mae", "root_mean_squared_error" } })
for _, l in ipairs { { "huber", function() return losses.Huber { delta = 0.5 } end },
                     { "mae", function() return losses.MeanAbsoluteError() end },
                     { "log_cosh", function() return losses.LogCosh() end } } do
  add(train_case { name = "fit_reg_" .. l[1], model = "reg", opt = "adam", mode = "fit", n = 240, b = 24, epochs = 5,
    also = { "ps", "mw_local" }, loss = l[2], metrics = { "mse", "mape" } })
end
-- uneven last batch: 50 rows, batch 16 -> 16, 16, 16, 2 (13 epochs = 52 steps);
-- tiny last batch: 49 rows -> the last batch has 1 row, fewer than the replicas.
-- The loop divides by the constant global batch, as TF's guide does.
for _, u in ipairs { { "uneven", 50 }, { "tiny_last", 49 } } do
  add(train_case { name = "fit_" .. u[1] .. "_batch", model = "mlp", opt = "sgd_momentum", mode = "fit", n = u[2], b = 16,
    epochs = 13, also = { "ps", "mw_local" } })
  add(train_case { name = "loop_" .. u[1] .. "_batch", model = "mlp", opt = "sgd_momentum", mode = "loop", n = u[2], b = 16,
    epochs = 13, global_batch_size = 16 })
end

---------------------------------------------------------------- 1. cross-replica writes reach every replica
-- after the write, every replica reads the written value (checked in run), and
-- training from it gives the default strategy's weights
local function replicas_read(S, model, want, what)
  local pr = S.step(function() return weights_sum(model) end)
  local vals = S.local_results(pr)
  check(#vals == S.local_replicas, "%s: %d local results, %d expected", what, #vals, S.local_replicas)
  for r, v in ipairs(vals) do
    v = type(v) == "number" and v or v:item()
    check(math.abs(v - want) <= 1e-4 * math.max(1, math.abs(want)),
      "%s: replica %d reads weights summing to %.6g, the written value sums to %.6g", what, r - 1, v, want)
  end
end

local function write_case(name, write)
  add { name = name, run = function(S)
    local x, y = make_data(96, { 6 }, 3)
    local model, opt
    tensor.seed(7)
    S.scope(function()
      model = nn.Sequential { nn.Dense(8, "tanh"), nn.Dense(3) }
      model:build { 6 }
      opt = optim.SGD { learning_rate = 0.1, momentum = 0.9 }
    end)
    write(S, model)
    replicas_read(S, model, weights_sum(model), name)
    local ds = data.Dataset.from_tensor_slices(x, y):batch(24)
    local hist = custom_loop(S, model, opt, ds, 13)
    return put_weights({ loss_final = hist[#hist] }, model)
  end }
end

write_case("write_assign", function(S, model)
  S.scope(function()
    tensor.seed(21)
    for _, v in ipairs(model.trainable_variables) do v:assign(tensor.normal(table.unpack(v.shape)) * 0.3) end
  end)
end)
write_case("write_assign_add_sub", function(S, model)
  S.scope(function()
    local v = model.trainable_variables
    v[1]:assign_add(tensor.ones(table.unpack(v[1].shape)) * 0.1)
    v[3]:assign_sub(tensor.ones(table.unpack(v[3].shape)) * 0.05)
  end)
  local v = model.trainable_variables   -- and outside the scope
  v[2]:assign_add(tensor.ones(table.unpack(v[2].shape)) * 0.2)
  v[4]:assign_sub(tensor.ones(table.unpack(v[4].shape)) * 0.3)
end)

-- weights saved by a plain model (no strategy), loaded inside / outside the scope
local function saved_weights(S)
  local path = S.tmp("weights.safetensors")
  tensor.seed(99)
  local src = nn.Sequential { nn.Dense(8, "tanh"), nn.Dense(3) }
  src:build { 6 }
  src:save_weights(path)
  return path
end
write_case("write_load_weights_in_scope", function(S, model)
  local path = saved_weights(S)
  S.scope(function() model:load_weights(path) end)
  os.remove(path)
end)
write_case("write_load_weights_outside_scope", function(S, model)
  local path = saved_weights(S)
  model:load_weights(path)
  os.remove(path)
end)

-- experimental_local_results of a variable: one component per local replica,
-- each holding the written value
local function check_local_results(S, v, want, what)
  local comps = S.local_results(v)
  check(type(comps) == "table" and #comps == S.local_replicas,
    "%s: experimental_local_results gave %s components, %d expected", what, type(comps) == "table" and #comps or "no",
    S.local_replicas)
  for r, c in ipairs(comps) do
    local d = (c:cpu() - want):abs():max():item()
    check(d == 0, "%s: local result %d differs from the written value by %g", what, r - 1, d)
  end
end

add { name = "local_results_model_variable", run = function(S)
  local model
  tensor.seed(7)
  S.scope(function()
    model = nn.Sequential { nn.Dense(4), nn.Dense(2) }
    model:build { 3 }
  end)
  local v = model.trainable_variables[1]
  tensor.seed(5)
  local want = tensor.normal(table.unpack(v.shape))
  S.scope(function() v:assign(want) end)
  check_local_results(S, v, want, "assign in the scope")
  local want2 = want * 2
  v:assign(want2)
  check_local_results(S, v, want2, "assign outside the scope")
  return { ok = 1, v_sum = want2:sum():item() }
end }

add { name = "local_results_tensor_variable", run = function(S)
  local v
  S.scope(function() v = tensor.Variable(tensor.zeros(4)) end)
  local want = tensor.new { 1, 2, 3, 4 }
  S.scope(function() v:assign(want) end)
  check_local_results(S, v, want, "tensor.Variable assigned in the scope")
  -- every replica reads it inside run
  local pr = S.step(function() return v:sum() end)
  for r, x in ipairs(S.local_results(pr)) do
    x = type(x) == "number" and x or x:item()
    check(x == 10, "replica %d reads a variable summing to %g, 10 written", r - 1, x)
  end
  return { ok = 1 }
end }

---------------------------------------------------------------- 2. distribute_datasets_from_function
add { name = "datasets_from_function", run = function(S)
  local GB, N, EPOCHS = 12, 144, 5          -- 12 steps an epoch, 60 steps
  local x, y = make_data(N, { 6 }, 3)
  local ids = tensor.arange(N):astype("float32")
  local calls, seen = 0, {}
  local function fn(ctx)
    calls = calls + 1
    local pr = ctx:get_per_replica_batch_size(GB)
    seen = { n = ctx.num_input_pipelines, id = ctx.input_pipeline_id, pr = pr }
    check(math.type(pr) == "integer" and pr > 0 and GB % pr == 0, "ctx:get_per_replica_batch_size(%d) = %s", GB, tostring(pr))
    check(math.type(ctx.num_input_pipelines) == "integer" and ctx.num_input_pipelines > 0,
      "ctx.num_input_pipelines = %s", tostring(ctx.num_input_pipelines))
    -- pipeline p takes the per-replica batches of its replicas (TF's shard of
    -- batches): replica j = p*L + l gets rows [k*GB + j*pr, k*GB + (j+1)*pr) at step k
    local P, L = ctx.num_input_pipelines, (GB // pr) // ctx.num_input_pipelines
    local rows = {}
    for b = 0, N // pr - 1 do
      if (b // L) % P == ctx.input_pipeline_id then
        for i = b * pr, (b + 1) * pr - 1 do rows[#rows + 1] = i end
      end
    end
    local idx = tensor.new(rows):astype("int64")
    return data.Dataset.from_tensor_slices(x:index_select(idx), y:index_select(idx), ids:index_select(idx)):batch(pr)
  end
  local dist = S.strategy:distribute_datasets_from_function(fn)
  check(calls == 1, "the dataset function was called %d times in this worker, once expected (one input pipeline per worker)", calls)
  check(seen.n == S.workers, "ctx.num_input_pipelines = %s, %d expected (the number of workers)", tostring(seen.n), S.workers)
  check(seen.id == S.rank, "ctx.input_pipeline_id = %s, %d expected (this worker's index)", tostring(seen.id), S.rank)
  check(seen.pr == GB // S.num_replicas, "ctx:get_per_replica_batch_size(%d) = %s, %d expected", GB, tostring(seen.pr),
    GB // S.num_replicas)

  local model, opt
  tensor.seed(7)
  S.scope(function()
    model = nn.Sequential { nn.Dense(16, "tanh"), nn.Dense(3) }
    opt = optim.SGD { learning_rate = 0.1, momentum = 0.9 }
  end)
  local loss_object = sparse_ce("none")
  local function step(inputs)
    local tape = autograd.GradientTape()
    local loss = tape:record(function()
      return D.compute_average_loss(loss_object(inputs[2], model(inputs[1], { training = true })))
    end)
    opt:apply_gradients(tape:gradient(loss, model.trainable_variables), model.trainable_variables)
    return loss, inputs[3]
  end
  local last
  for e = 1, EPOCHS do
    local k = 0
    for inputs in dist do
      local pl, pids = S.step(step, inputs)
      last = S.reduce("sum", pl)
      if e == 1 then
        -- the local replicas got the pipeline's batches in turn
        for l, t in ipairs(S.local_results(pids)) do
          local j = S.rank * S.local_replicas + (l - 1)
          local first = t:cpu():totable()[1]
          check(first == k * GB + j * seen.pr, "step %d: replica %d got rows from %s, %d expected", k, j,
            tostring(first), k * GB + j * seen.pr)
        end
      end
      k = k + 1
    end
    check(k == N // GB, "epoch %d: %d steps, %d expected", e, k, N // GB)
  end
  return put_weights({ loss_final = last }, model)
end }

---------------------------------------------------------------- 3. contexts
add { name = "contexts", run = function(S)
  local s = S.strategy
  local is_default = S.kind == "default"
  local function outside(where)
    check(D.get_strategy() == S.default_strategy, "%s: get_strategy() is %s, the default strategy expected", where,
      tostring(D.get_strategy()))
    check(D.has_strategy() == false, "%s: has_strategy() is true", where)
    check(D.in_cross_replica_context() == false, "%s: in_cross_replica_context() is true (TF: false, the default replica context)", where)
    local rc = D.get_replica_context()
    check(rc ~= nil, "%s: get_replica_context() is nil, the default replica context expected", where)
    check(rc.num_replicas_in_sync == 1, "%s: the default replica context has num_replicas_in_sync %s", where,
      tostring(rc.num_replicas_in_sync))
  end
  outside("outside any scope")
  if not is_default then
    s:scope(function()
      check(D.get_strategy() == s, "in the scope: get_strategy() is %s", tostring(D.get_strategy()))
      check(D.has_strategy() == true, "in the scope: has_strategy() is false")
      check(D.in_cross_replica_context() == true, "in the scope: in_cross_replica_context() is false")
      check(D.get_replica_context() == nil, "in the scope: get_replica_context() is not nil (TF: None in cross-replica context)")
    end)
    outside("after the scope")
  end
  -- inside run, no scope open
  local pr = s:run(function()
    check(D.get_strategy() == s, "in run: get_strategy() is %s, the running strategy expected", tostring(D.get_strategy()))
    check(D.has_strategy() == not is_default, "in run: has_strategy() is %s", tostring(D.has_strategy()))
    check(D.in_cross_replica_context() == false, "in run: in_cross_replica_context() is true")
    local rc = D.get_replica_context()
    check(rc ~= nil, "in run: get_replica_context() is nil")
    check(rc.num_replicas_in_sync == S.num_replicas, "in run: num_replicas_in_sync %s, %d expected",
      tostring(rc.num_replicas_in_sync), S.num_replicas)
    return rc.replica_id_in_sync_group
  end)
  for l, id in ipairs(S.local_results(pr)) do
    local want = S.rank * S.local_replicas + l - 1
    check(id == want, "in run: local replica %d has replica_id_in_sync_group %s, %d expected", l - 1, tostring(id), want)
  end
  outside("after run")
  return { ok = 1 }
end }

add { name = "compute_average_loss_in_run", run = function(S)
  local GB = 12
  local ds = data.Dataset.from_tensor_slices(tensor.ones(GB)):batch(GB)
  local total, steps = 0, 0
  for inputs in S.distribute(ds) do
    local pr = S.step(function(e) return D.compute_average_loss(e[1]) end, inputs)
    total = total + S.reduce("sum", pr)
    steps = steps + 1
  end
  check(steps == 1, "%d steps, 1 expected", steps)
  check(math.abs(total - 1) < 1e-6, "the replicas' compute_average_loss of per-example losses of 1 add up to %.6g, 1 expected", total)
  return { sum = total }
end }

---------------------------------------------------------------- 4. all_reduce returns a new value
add { name = "all_reduce_new_value", run = function(S)
  local pr = S.step(function()
    local rc = D.get_replica_context()
    local t = tensor.ones(3)
    local r = rc:all_reduce("sum", t)
    check(not rawequal(r, t), "all_reduce returned its argument, a new value expected")
    check(t:cpu():sum():item() == 3, "all_reduce changed its argument (sum %g, 3 expected)", t:cpu():sum():item())
    return r
  end)
  for l, r in ipairs(S.local_results(pr)) do
    check(r:cpu():sum():item() == 3 * S.num_replicas, "replica %d: all_reduce sum %g, %d expected", l - 1,
      r:cpu():sum():item(), 3 * S.num_replicas)
  end
  return { ok = 1 }
end }

---------------------------------------------------------------- 5. where variables live
add { name = "variable_device", run = function(S)
  local want = S.devices[1]
  local model, v
  S.scope(function()
    model = nn.Sequential { nn.Dense(4) }
    model:build { 3 }
    v = tensor.Variable(tensor.zeros(2))
  end)
  for i, w in ipairs(model.trainable_variables) do
    check(tostring(w.device) == want, "model variable %d is on %s, %s expected", i, tostring(w.device), want)
  end
  check(tostring(v.device) == want, "a tensor.Variable made in the scope is on %s, %s expected", tostring(v.device), want)
  local pr = S.step(function() return tensor.ones(2) end)
  for l, r in ipairs(S.local_results(pr)) do
    local dev = S.replica_device(S.rank * S.local_replicas + l - 1)
    if S.kind == "one_device" then dev = S.devices[1] end
    check(tostring(r.device) == dev, "run's result of replica %d is on %s, %s expected", l - 1, tostring(r.device), dev)
  end
  return { ok = 1 }
end }

---------------------------------------------------------------- 6. placement inside run
add { name = "placement_in_run", run = function(S)
  local arg_t = tensor.ones(3)
  local pr = S.step(function(a)
    local rc = D.get_replica_context()
    local dev = S.kind == "one_device" and S.devices[1] or S.replica_device(rc.replica_id_in_sync_group)
    local t = tensor.ones(3)
    check(tostring(t.device) == dev, "replica %d: tensor.ones(3) made in the replica function is on %s, %s expected",
      rc.replica_id_in_sync_group, tostring(t.device), dev)
    check(tostring(a.device) == dev, "replica %d: a tensor argument of run is on %s, %s expected",
      rc.replica_id_in_sync_group, tostring(a.device), dev)
    local r = rc:all_reduce("sum", tensor.ones(3))
    local vals = r:cpu():totable()
    for i = 1, 3 do
      check(vals[i] == S.num_replicas, "replica %d: all_reduce of ones gave %g, %d expected", rc.replica_id_in_sync_group,
        vals[i], S.num_replicas)
    end
    return r
  end, arg_t)
  check(#S.local_results(pr) == S.local_replicas, "%d local results", #S.local_results(pr))
  return { ok = 1 }
end }

---------------------------------------------------------------- 7. reduce with an axis
add { name = "reduce_axis", run = function(S)
  local function list(v)   -- a reduced value as a list of numbers
    if type(v) == "number" then return { v } end
    return v:cpu():reshape { v:numel() }:totable()
  end
  tensor.seed(3)
  local out = {}
  for _, gb in ipairs { 12, 10 } do             -- 10 rows: uneven over 3 replicas
    local x = tensor.normal(gb, 3)
    local ds = data.Dataset.from_tensor_slices(x):batch(gb)
    for inputs in S.distribute(ds) do
      local rows, scalars = S.step(function(e) return e[1], e[1]:sum() end, inputs)
      local mean = S.reduce("mean", rows, { axis = 0 })
      local sum = S.reduce("sum", rows, { axis = 0 })
      local total = S.reduce("sum", scalars)
      check(type(total) == "number", "reduce(\"sum\") of scalars gave a %s, a number expected", type(total))
      local want_mean, want_sum = x:mean(0):totable(), x:sum(0):totable()
      local got_mean, got_sum = list(mean), list(sum)
      check(#got_mean == 3 and #got_sum == 3, "batch %d: reduce with {axis=0} gave %d and %d numbers, 3 expected", gb,
        #got_mean, #got_sum)
      for i = 1, 3 do
        check(math.abs(got_mean[i] - want_mean[i]) < 1e-5, "batch %d: reduce(\"mean\", {axis=0})[%d] = %.6g, the mean " ..
          "over the global batch is %.6g", gb, i - 1, got_mean[i], want_mean[i])
        check(math.abs(got_sum[i] - want_sum[i]) < 1e-5, "batch %d: reduce(\"sum\", {axis=0})[%d] = %.6g, the sum " ..
          "over the global batch is %.6g", gb, i - 1, got_sum[i], want_sum[i])
        out[("mean%d[%d]"):format(gb, i - 1)] = got_mean[i]
        out[("sum%d[%d]"):format(gb, i - 1)] = got_sum[i]
      end
      check(math.abs(total - x:sum():item()) < 1e-4, "batch %d: reduce(\"sum\") of scalars %g, %g expected", gb, total,
        x:sum():item())
      out["total" .. gb] = total
    end
  end
  return out
end }

---------------------------------------------------------------- 8. fit: fewer rows than replicas, Flatten first
add { name = "fit_flatten_tiny_batch", also = { "mw_local" }, run = function(S)
  local x, y = make_data(49, { 4, 4 }, 3)
  local ds = data.Dataset.from_tensor_slices(x, y):batch(16)   -- 16, 16, 16, 1
  local model = make_model(S, "flatten", "sgd_momentum", true)
  local h = model:fit(ds, { epochs = 13, verbose = 0 })
  return put_weights({ loss_final = h.loss[#h.loss] }, model)
end }

---------------------------------------------------------------- 9. made in the scope, built outside it
add { name = "built_outside_scope", also = { "mw_local" }, run = function(S)
  local x, y = make_data(96, { 8 }, 4)
  local model, opt
  tensor.seed(7)
  S.scope(function()
    model = nn.Sequential { nn.Dense(16, "tanh"), nn.Dense(4) }
    opt = optim.SGD { learning_rate = 0.1, momentum = 0.9 }
  end)
  model(x:slice(0, 0, 2))                        -- built by its first call, outside the scope
  model:compile { optimizer = opt, loss = sparse_ce() }
  local h = model:fit(data.Dataset.from_tensor_slices(x, y):batch(24), { epochs = 13, verbose = 0 })
  return put_weights({ loss_final = h.loss[#h.loss] }, model)
end }

---------------------------------------------------------------- 10. Keras rules
add { name = "metrics_mean_counts_elements", run = function(S)
  local m
  S.scope(function() m = metrics.Mean() end)
  m:update_state(tensor.new { 1, 2, 3 })
  m:update_state(tensor.new { 5 })
  check(math.abs(m:result() - 2.75) < 1e-6, "Mean of [1,2,3] then [5] is %g; Keras counts each element: 2.75", m:result())
  return { result = m:result() }
end }

add { name = "early_stopping_patience", also = { "ps", "mw_local" }, run = function(S)
  local x, y = make_data(48, { 8 }, 4)
  local model
  tensor.seed(7)
  S.scope(function()
    model = MODELS.mlp.make()
    -- a learning rate below float32's resolution: the weights, so the loss,
    -- never change, and the loss never improves after the first epoch
    model:compile { optimizer = optim.SGD { learning_rate = 1e-30 }, loss = sparse_ce() }
  end)
  local es = callbacks.EarlyStopping { monitor = "loss", patience = 1 }
  local h = model:fit(data.Dataset.from_tensor_slices(x, y):batch(16), { epochs = 6, verbose = 0, callbacks = { es },
    steps_per_epoch = 3 })
  check(#h.loss == 2, "EarlyStopping{patience=1} on a loss that never improves stopped after %d epochs; Keras stops after 2",
    #h.loss)
  return { epochs = #h.loss }
end }

add { name = "from_tensor_slices_dict", run = function(S)
  local a, b = tensor.normal(6, 2), tensor.arange(6):astype("int64")
  local ds = data.Dataset.from_tensor_slices { feat = a, label = b }
  local n = 0
  for e in ds do
    n = n + 1
    check(type(e) == "table" and tensor.is_tensor(e.feat) and tensor.is_tensor(e.label),
      "element %d is not a table with tensors feat and label", n)
    check(e.feat.shape[1] == 2, "element %d: feat has shape %s", n, table.concat(e.feat.shape, "x"))
  end
  check(n == 6, "%d elements, 6 expected", n)
  n = 0
  for e in ds:batch(4) do
    n = n + 1
    check(type(e) == "table" and tensor.is_tensor(e.feat) and tensor.is_tensor(e.label), "batch %d has no feat/label", n)
  end
  check(n == 2, "%d batches, 2 expected", n)
  return { ok = 1 }
end }

add { name = "fit_unknown_option", also = { "ps", "mw_local" }, run = function(S)
  local x, y = make_data(48, { 8 }, 4)
  local model = make_model(S, "mlp", "sgd", true)
  local ok, err = pcall(model.fit, model, data.Dataset.from_tensor_slices(x, y):batch(16),
    { epochz = 3, verbose = 0, steps_per_epoch = 3 })
  check(not ok, "model:fit(ds, {epochz = 3}) did not raise an error")
  check(tostring(err):find("epochz", 1, true), "the error does not name 'epochz': %s", tostring(err))
  return { ok = 1 }
end }

-- class_weight / sample_weight: applied (then they change the weights and equal
-- the default strategy's), or an error naming them; never silently ignored
local function weighting_case(name, what, fit_opts_of, also)
  add { name = name, also = also, run = function(S)
    local x, y = make_data(96, { 8 }, 2)
    local function train(weighted)
      local model = make_model(S, "mlp", "sgd", true)
      local opts = { epochs = 4, verbose = 0, batch_size = 16, shuffle = false, steps_per_epoch = 6 }
      local a, b = x, y
      if weighted then a, b, opts = fit_opts_of(x, y, opts) end
      if b == nil then return model, model:fit(a, opts) end
      return model, model:fit(a, b, opts)
    end
    -- a parameter-server strategy takes one model: the weighted one alone,
    -- whose weights must equal the default strategy's (which differ from a plain fit's)
    local plain = S.kind ~= "ps" and train(false)
    local ok, weighted = pcall(train, true)
    if not ok then
      check(tostring(weighted):find(what, 1, true), "fit with %s failed without naming it: %s", what, tostring(weighted))
      return { _skip_compare = 1, _errored = 1 }
    end
    if not plain then return put_weights({}, weighted) end
    local d = 0
    for i, v in ipairs(weighted.trainable_variables) do
      d = math.max(d, (v:cpu() - plain.trainable_variables[i]:cpu()):abs():max():item())
    end
    check(d > 1e-4, "%s was silently ignored: the weights equal those of a fit without it", what)
    return put_weights({}, weighted)
  end }
end
weighting_case("fit_class_weight", "class_weight", function(x, y, opts)
  opts.class_weight = { [0] = 1, [1] = 10 }
  return x, y, opts
end, { "ps", "mw_local" })
weighting_case("fit_sample_weight", "sample_weight", function(x, y, opts)
  local w = tensor.ones(x.shape[1])
  w = w + y:astype("float32") * 4     -- rows of class 1 weigh 5
  opts.sample_weight = w
  return x, y, opts
end, { "ps", "mw_local" })
weighting_case("fit_sample_weight_dataset", "sample_weight", function(x, y, opts)
  local w = tensor.ones(x.shape[1]) + y:astype("float32") * 4
  opts.batch_size = nil
  return data.Dataset.from_tensor_slices(x, y, w):batch(16), nil, opts
end, { "ps", "mw_local" })

-- class_weight with a dataset under a parameter-server strategy: the workers
-- read the batches, so the weights must come with them; an error says how
add { name = "ps_class_weight_dataset", only = { ps = true }, compare = false, run = function(S)
  local x, y = make_data(48, { 8 }, 2)
  local model = make_model(S, "mlp", "sgd", true)
  local ok, err = pcall(model.fit, model, data.Dataset.from_tensor_slices(x, y):batch(16),
    { epochs = 1, verbose = 0, steps_per_epoch = 3, class_weight = { [0] = 1, [1] = 2 } })
  check(not ok and tostring(err):find("class_weight under ParameterServerStrategy takes x and y as tensors", 1, true),
    "fit(dataset, {class_weight=}) under ps: %s", tostring(err))
  return { ok = 1 }
end }

---------------------------------------------------------------- a dead parameter server
-- After a ps dies, no read of the variables it held gives stale values
-- without a word: model.weights, evaluate, predict, save and a call raise,
-- naming the ps, until load_weights (or BackupAndRestore) restores them.
add { name = "ps_dead_weights_raise", only = { ps = true }, run = function(S)
  local x, y = make_data(48, { 8 }, 4)
  local model = make_model(S, "mlp", "sgd", true)
  local ds = data.Dataset.from_tensor_slices(x, y):batch(16)
  model:fit(ds, { epochs = 2, verbose = 0, steps_per_epoch = 3 })
  local saved = S.tmp("trained.safetensors")
  model:save_weights(saved)
  local trained = weights_sum(model)
  local held, held_view = model.weights[1], model.trainable_variables[1][1]   -- references taken before the death
  local held_before = held:clone()
  S.strategy._cl:kill_ps(0)
  ldist._cluster.sleep(0.3)
  local ok, err = pcall(model.fit, model, ds, { epochs = 1, verbose = 0, steps_per_epoch = 3 })
  check(not ok and tostring(err):find("parameter server", 1, true), "fit after the ps died: %s", tostring(err))
  local reads = {
    weights = function() return model.weights end,
    trainable_variables = function() return model.trainable_variables end,
    get_weights = function() return model:get_weights() end,
    evaluate = function() return model:evaluate(ds, { verbose = 0 }) end,
    predict = function() return model:predict(x, { verbose = 0 }) end,
    call = function() return model(x) end,
    save = function() return model:save(S.tmp("stale.model")) end,
    save_weights = function() return model:save_weights(S.tmp("stale.safetensors")) end,
    held_totable = function() return held:totable() end,
    held_tostring = function() return tostring(held) end,
    held_arithmetic = function() return held * 2 end,
    held_view_element = function() return held_view:reshape({ -1 })[0] end,
    held_item = function() return held:reshape({ -1, 1 })[0]:item() end,
    held_assign_from = function() return tensor.zeros(held.shape):assign(held) end,
    held_save = function() return ldist.io.save_safetensors(S.tmp("held.safetensors"), { w = held }) end,
  }
  for what, f in pairs(reads) do
    local ok2, e2 = pcall(f)
    check(not ok2 and tostring(e2):find("parameter server ps 0", 1, true) ~= nil,
      "%s after the ps died: %s", what, ok2 and "no error (stale values read)" or tostring(e2))
  end
  model:load_weights(saved)
  check(math.abs(weights_sum(model) - trained) < 1e-6, "load_weights restored other values")
  check((held - held_before):abs():max():item() == 0, "the held reference does not read the restored values")
  local r = model:evaluate(ds, { verbose = 0 })
  check(type(r.loss) == "number", "evaluate after load_weights: %s", tostring(r.loss))
  return { _skip_compare = 1 }
end }

---------------------------------------------------------------- fit with metrics and validation data
add { name = "fit_metrics_validation", also = { "ps", "mw_local" }, run = function(S)
  local x, y = make_data(120, { 8 }, 4)
  local xv, yv = make_data(48, { 8 }, 4, 12)
  local model = make_model(S, "mlp", "sgd_momentum", true, { "accuracy" })
  local h = model:fit(data.Dataset.from_tensor_slices(x, y):batch(24), { epochs = 10, verbose = 0, steps_per_epoch = 5,
    validation_data = data.Dataset.from_tensor_slices(xv, yv):batch(16) })
  check(type(h.accuracy) == "table" and #h.accuracy == 10, "the history has no accuracy for each epoch")
  check(type(h.val_loss) == "table" and #h.val_loss == 10, "the history has no val_loss for each epoch")
  check(type(h.val_accuracy) == "table" and #h.val_accuracy == 10, "the history has no val_accuracy for each epoch")
  return put_weights({ loss = h.loss[10], accuracy = h.accuracy[10], val_loss = h.val_loss[10],
    val_accuracy = h.val_accuracy[10] }, model)
end }

-- Keras's weighted_metrics: the step's sample weights reach them (gathered from the replicas with the
-- labels), the plain metrics stay unweighted; evaluate with weights too
add { name = "fit_weighted_metrics", also = { "ps", "mw_local" }, run = function(S)
  local x, y = make_data(120, { 8 }, 4)
  local w = tensor.ones(120) + y:astype("float32") * 2      -- class c weighs 1 + 2c
  local model
  tensor.seed(7)
  S.scope(function()
    model = MODELS.mlp.make()
    model:compile { optimizer = OPTIMIZERS.sgd_momentum(), loss = sparse_ce(), metrics = { "accuracy" },
      weighted_metrics = { "accuracy", metrics.SparseTopKCategoricalAccuracy { k = 2 } } }
  end)
  local h = model:fit(x, y, { epochs = 4, batch_size = 24, steps_per_epoch = 5, verbose = 0, shuffle = false,
    sample_weight = w })
  check(h.weighted_accuracy and #h.weighted_accuracy == 4, "the history has no weighted_accuracy for each epoch")
  local r = model:evaluate(x, y, { sample_weight = w, batch_size = 24 })
  return put_weights({ loss = h.loss[4], accuracy = h.accuracy[4], weighted_accuracy = h.weighted_accuracy[4],
    top2 = h.sparse_top_k_categorical_accuracy[4], eval_weighted_accuracy = r.weighted_accuracy,
    eval_accuracy = r.accuracy }, model)
end }

---------------------------------------------------------------- parameter servers: schedule without place
add { name = "ps_schedule_without_place", only = { ps = true }, compare = false, run = function(S)
  local x, y = make_data(96, { 8 }, 4)
  local model
  tensor.seed(7)
  S.scope(function()
    model = MODELS.mlp.make()
    model:build { 8 }
    model:compile { optimizer = optim.SGD { learning_rate = 0.1 }, loss = sparse_ce() }
  end)
  -- the reference: the same steps with no strategy, from the same weights
  tensor.seed(7)
  local ref = MODELS.mlp.make()
  ref:build { 8 }
  for i, v in ipairs(ref.trainable_variables) do v:assign(model.trainable_variables[i]:cpu()) end
  local ds = data.Dataset.from_tensor_slices(x, y):batch(16)
  local coord = S.coordinator
  local pwd = coord:create_per_worker_dataset(ds)
  local rvs = {}
  for k = 1, 12 do rvs[k] = coord:schedule(D.ps_train_step, { pwd }) end   -- no coordinator:place(model)
  coord:join()
  local ropt, rloss = optim.SGD { learning_rate = 0.1 }, sparse_ce()
  for _ = 1, 2 do for b in ds do ref:train_step(b[1], b[2], rloss, ropt) end end
  local got = S.strategy:fetch_variables()
  local worst = 0
  for i, v in ipairs(ref.trainable_variables) do worst = math.max(worst, (got[i] - v):abs():max():item()) end
  check(worst < 1e-5, "12 scheduled steps on one worker differ from 12 plain SGD steps by %g", worst)
  return { ok = 1, _first_loss = rvs[1]:fetch() }
end }

---------------------------------------------------------------- probabilities, not logits
-- a softmax output and a loss that clips probabilities (its constants must
-- be made on the replica's device, not on cpu:0)
add { name = "fit_probability_loss", also = { "ps", "mw_local" }, run = function(S)
  local x, y = make_data(96, { 8 }, 4)
  local model, opt
  tensor.seed(7)
  S.scope(function()
    model = nn.Sequential { nn.Dense(16, "tanh"), nn.Dense(4, "softmax") }
    opt = optim.SGD { learning_rate = 0.1 }
    model:compile { optimizer = opt, loss = "sparse_categorical_crossentropy" }
  end)
  local h = model:fit(data.Dataset.from_tensor_slices(x, y):batch(24), { epochs = 13, verbose = 0, steps_per_epoch = 4 })
  check(h.loss[#h.loss] < h.loss[1], "the loss did not fall (%.4f -> %.4f)", h.loss[1], h.loss[#h.loss])
  return put_weights({ loss_final = h.loss[#h.loss], iterations = opt.iterations }, model)
end }

---------------------------------------------------------------- 1. restore, then train
-- BackupAndRestore: a fit stopped in its second epoch (an error from a
-- callback) and started again with the same callback on a fresh model ends
-- with the weights of an uninterrupted fit; the restore writes every replica.
add { name = "backup_restore_resume", run = function(S)
  local x, y = make_data(96, { 8 }, 4)
  local ds = data.Dataset.from_tensor_slices(x, y):batch(24)      -- 4 steps an epoch
  local function fresh(seed)
    local model
    tensor.seed(seed)
    S.scope(function()
      model = MODELS.mlp.make()
      model:compile { optimizer = optim.Adam { learning_rate = 0.01 }, loss = sparse_ce() }
    end)
    return model
  end
  local whole = fresh(7)
  whole:fit(ds, { epochs = 3, verbose = 0 })
  local dir = S.tmp("backup")
  local br = callbacks.BackupAndRestore { dir = dir, save_freq = 2, verbose = false }
  local crash = callbacks.LambdaCallback { on_train_batch_end = function(_, batch)
    if whole.crashed == nil and batch + 1 == 3 and br._epoch == 2 then whole.crashed = true; error("simulated crash") end
  end }
  local first = fresh(7)
  local ok, err = pcall(first.fit, first, ds, { epochs = 3, verbose = 0, callbacks = { br, crash } })
  check(not ok and tostring(err):find("simulated crash", 1, true), "the first fit should stop at the simulated crash, got %s", tostring(err))
  local again = fresh(99)                                          -- other initial weights: the restore must replace them
  again:fit(ds, { epochs = 3, verbose = 0, callbacks = { br } })
  for i, v in ipairs(again.trainable_variables) do
    local want = whole.trainable_variables[i]
    for r, c in ipairs(S.local_results(v)) do
      local d = (c:cpu() - want:cpu()):abs():max():item()
      check(d < 1e-5, "variable %d, replica %d: the resumed fit differs from the uninterrupted one by %g", i, r, d)
    end
  end
  return put_weights({}, again)
end }

---------------------------------------------------------------- variables read inside run
-- A custom loop with an L2 term computed from the model's variables inside
-- the replica function (TF's guide: scale_regularization_loss): each replica
-- must read and differentiate its own copy, or its regularization gradient
-- is lost.
add { name = "loop_l2_regularization", run = function(S)
  local x, y = make_data(96, { 8 }, 4)
  local ds = data.Dataset.from_tensor_slices(x, y):batch(24)
  local model, opt = make_model(S, "mlp", "sgd", false)
  local loss_object = sparse_ce("none")
  local function step(inputs)
    local tape = autograd.GradientTape()
    local loss = tape:record(function()
      local l = D.compute_average_loss(loss_object(inputs[2], model(inputs[1], { training = true })))
      local l2 = 0
      for _, w in ipairs(model.trainable_variables) do l2 = l2 + (w * w):sum() end
      return l + nn.scale_regularization_loss(l2 * 0.05)
    end)
    opt:apply_gradients(tape:gradient(loss, model.trainable_variables), model.trainable_variables)
    return loss
  end
  local dist, last = S.distribute(ds), nil
  for _ = 1, 13 do
    for inputs in dist do last = S.reduce("sum", S.step(step, inputs)) end
  end
  return put_weights({ loss_final = last }, model)
end }

add { name = "write_set_weights", run = function(S)
  local x, y = make_data(96, { 8 }, 4)
  local model = make_model(S, "mlp", "sgd_momentum", true)
  model:build { 8 }
  tensor.seed(23)
  local w = {}
  for i, v in ipairs(model:get_weights()) do w[i] = tensor.normal(table.unpack(v.shape)) end
  model:set_weights(w)
  for i, v in ipairs(model.trainable_variables) do
    for r, c in ipairs(S.local_results(v)) do
      check((c:cpu() - w[i]):abs():max():item() == 0, "set_weights: replica %d's copy of weight %d differs", r, i)
    end
  end
  local h = model:fit(data.Dataset.from_tensor_slices(x, y):batch(24), { epochs = 13, verbose = 0 })
  return put_weights({ loss_final = h.loss[#h.loss] }, model)
end }

---------------------------------------------------------------- 12. the models issue's layers and models
-- every weight of a model, trainable or not (BatchNormalization's moving
-- statistics too), as put_weights does for the trainable ones
local function put_all_weights(out, model)
  for i, v in ipairs(model.weights) do
    local flat = v:cpu():reshape { v:numel() }:totable()
    for j, x in ipairs(flat) do out[("v%d[%d]"):format(i, j - 1)] = x end
  end
  return out
end

-- integer sequences of length 6 over 7 symbols; label: the first symbol's parity
local function make_sequences(n, seed)
  tensor.seed(seed or 5)
  local u = tensor.uniform(n, 6, { min = 0, max = 7 }):totable()
  local x, y = {}, {}
  for i = 1, n do
    x[i] = {}
    for j = 1, 6 do x[i][j] = math.min(6, math.floor(u[i][j])) end
    y[i] = x[i][1] % 2
  end
  return tensor.new(x, { dtype = "int64" }), tensor.new(y, { dtype = "int64" })
end

local function fit_model(S, make, x, y, b, epochs, opt)
  local model
  tensor.seed(7)
  S.scope(function()
    model = make()
    model:compile { optimizer = opt and opt() or optim.Adam { learning_rate = 0.01 }, loss = sparse_ce() }
  end)
  local h = model:fit(data.Dataset.from_tensor_slices(x, y):batch(b),
    { epochs = epochs, verbose = 0, steps_per_epoch = -(-x.shape[1] // b) })
  check(h.loss[#h.loss] < h.loss[1], "the loss did not fall (%.4f -> %.4f)", h.loss[1], h.loss[#h.loss])
  return put_all_weights({ loss_final = h.loss[#h.loss] }, model)
end

-- synchronized BatchNorm: the batch statistics of the global batch, so every
-- strategy equals one device (unsynchronized, each replica normalizes its
-- own share, as TF does: see tests/lua/test_sync_bn.lua)
add { name = "fit_batchnorm_synchronized", also = { "ps", "mw_local" }, tol = 1e-4, run = function(S)
  local x, y = make_data(96, { 6, 6, 1 }, 3)
  local run = S.kind == "ps" and function(...)   -- its moving statistics: an error naming them, never stale values
    local ok, err = pcall(fit_model, ...)
    check(not ok and tostring(err):find("non-trainable weights", 1, true),
      "BatchNormalization under ParameterServerStrategy: %s", ok and "trained" or tostring(err))
    return { _skip_compare = 1 }
  end or fit_model
  return run(S, function()
    -- no bias before the normalization (it would get a zero gradient, noise that Adam-like
    -- optimizers blow up; ResNets leave it out too)
    return nn.Sequential { nn.Conv2D(4, 3, { padding = "same", use_bias = false }),
      nn.BatchNormalization { synchronized = true, momentum = 0.9 }, nn.Activation("relu"), nn.GlobalAveragePooling2D(),
      nn.Dense(3) }
  end, x, y, 24, 6, function() return optim.SGD { learning_rate = 0.1, momentum = 0.9 } end)
end }

add { name = "loop_batchnorm_synchronized", tol = 1e-4, run = function(S)
  local x, y = make_data(96, { 6 }, 3)
  local model, opt
  tensor.seed(7)
  S.scope(function()
    model = nn.Sequential { nn.Dense(8, { use_bias = false }), nn.BatchNormalization { synchronized = true },
      nn.Activation("tanh"), nn.Dense(3) }
    opt = optim.SGD { learning_rate = 0.1, momentum = 0.9 }
  end)
  local hist = custom_loop(S, model, opt, data.Dataset.from_tensor_slices(x, y):batch(24), 6)
  return put_all_weights({ loss_final = hist[#hist] }, model)
end }

-- the new layers, each where a model uses it
add { name = "fit_layernorm_pooling_conv1d", also = { "ps", "mw_local" }, tol = 1e-4, run = function(S)
  local x, y = make_data(96, { 8, 8, 2 }, 3)
  return fit_model(S, function()
    return nn.Sequential { nn.Conv2D(4, 3, { strides = 2, padding = "same", activation = "relu" }), nn.AveragePooling2D(2),
      nn.Reshape { 4, 4 }, nn.Conv1D(3, 2, { padding = "causal" }), nn.LayerNormalization(), nn.Flatten(), nn.Dense(3) }
  end, x, y, 24, 6)
end }

add { name = "fit_embedding_attention_lstm", also = { "ps", "mw_local" }, tol = 1e-4, run = function(S)
  local x, y = make_sequences(96)
  return fit_model(S, function()
    local inp = nn.Input { shape = { 6 }, dtype = "int64" }
    local e = nn.Embedding(7, 8)(inp)
    local a = nn.MultiHeadAttention(2, 4, { use_causal_mask = true })(e)
    local h = nn.LayerNormalization()(nn.Add()({ e, a }))
    local r = nn.LSTM(6)(h)
    return nn.Model { inputs = inp, outputs = nn.Dense(2)(r) }
  end, x, y, 24, 6)
end }

-- a Functional model with a residual branch and Concatenate
add { name = "fit_functional", also = { "ps", "mw_local" }, run = function(S)
  local x, y = make_data(96, { 8 }, 4)
  return fit_model(S, function()
    local inp = nn.Input { shape = { 8 } }
    local h = nn.Dense(8, "tanh")(inp)
    local res = nn.Add()({ inp, h })
    local both = nn.Concatenate()({ res, nn.Dense(4, "relu")(inp) })
    return nn.Model { inputs = inp, outputs = nn.Dense(4)(both) }
  end, x, y, 24, 6, function() return optim.SGD { learning_rate = 0.1, momentum = 0.9 } end)
end }

-- a subclassed model (its class is defined in this file, which every
-- process of a strategy runs)
local Residual = nn.Model:extend("ConformanceResidual")
function Residual:init(units)
  self.inner = nn.Dense(units, "tanh")
  self.out = nn.Dense(4)
end
function Residual:call(x, training) return self.out(x + self.inner(x)) end

add { name = "fit_subclassed", also = { "ps", "mw_local" }, run = function(S)
  local x, y = make_data(96, { 8 }, 4)
  return fit_model(S, function() return Residual(8) end, x, y, 24, 6,
    function() return optim.SGD { learning_rate = 0.1, momentum = 0.9 } end)
end }

-- a subclassed model's own weights, as Keras 3 tracks them: add_weight (an initializer, a constraint) and
-- a Variable assigned to a field, trained and mirrored as a layer's (a non-trainable one: test_own_weights.lua,
-- ParameterServerStrategy refuses non-trainable weights)
local OwnWeights = nn.Model:extend("ConformanceOwnWeights")
function OwnWeights:init()
  self.inner = nn.Dense(8, "tanh")
  self.gain = self:add_weight { shape = { 8 }, initializer = "ones", name = "gain", constraint = "non_neg" }
  self.shift = tensor.Variable(tensor.zeros(4))
  self.proj = self:add_weight { shape = { 8, 4 }, name = "proj" }
  self.offset = tensor.linspace(-0.2, 0.2, 4)   -- a constant made in init: read on each replica's device
end
function OwnWeights:call(x, training)
  return (self.inner(x) * self.gain):matmul(self.proj) + self.shift + self.offset
end
add { name = "fit_own_weights", also = { "ps", "mw_local" }, run = function(S)
  local x, y = make_data(96, { 8 }, 4)
  return fit_model(S, function() return OwnWeights() end, x, y, 24, 6,
    function() return optim.SGD { learning_rate = 0.1, momentum = 0.9 } end)
end }

-- Keras's custom layer (weights made in build from the input's shape) and a model used as a layer: a
-- Sequential of a custom layer, a nested Sequential, a Lambda (shipped to ps workers as bytecode) and a Dense
local ScaledLinear = nn.Layer:extend("ConformanceScaledLinear")
function ScaledLinear:init(units) self.units = units end
function ScaledLinear:build(shape)
  self.w = self:add_weight { shape = { shape[#shape], self.units }, name = "w" }
  self.g = self:add_weight { shape = { self.units }, initializer = "ones", name = "g" }
end
function ScaledLinear:call(x) return x:matmul(self.w) * self.g end
add { name = "fit_custom_layer", also = { "ps", "mw_local" }, run = function(S)
  local x, y = make_data(96, { 8 }, 4)
  return fit_model(S, function()
    return nn.Sequential { nn.Input { shape = { 8 } }, ScaledLinear(6), nn.Activation("tanh"),
      nn.Sequential { nn.Dense(5, "tanh"), ScaledLinear(5) }, nn.Lambda(function(v, a) return v * a.k end, { arguments = { k = 0.5 } }),
      nn.Dense(4) }
  end, x, y, 24, 6, function() return optim.SGD { learning_rate = 0.1, momentum = 0.9 } end)
end }

-- TF's array ops composed in a subclassed model's call (tensor_ops.lua): einsum's batched product of
-- each example's rows, a causal band, tile and reverse
local Gram = nn.Model:extend("ConformanceGram")
function Gram:init() self.inner = nn.Dense(8, "tanh"); self.out = nn.Dense(4) end
function Gram:call(x, training)
  local h = self.inner(x):reshape { -1, 2, 4 }
  local g = tensor.band_part(tensor.einsum("bij,bkj->bik", h, h), -1, 0)
  local t = tensor.reverse(tensor.tile(g, { 1, 1, 2 }), { 2 })
  return self.out(t:reshape { -1, 8 })
end
add { name = "fit_einsum", also = { "ps", "mw_local" }, run = function(S)
  local x, y = make_data(96, { 8 }, 4)
  return fit_model(S, function() return Gram() end, x, y, 24, 6,
    function() return optim.SGD { learning_rate = 0.1, momentum = 0.9 } end)
end }

add { name = "fit_gru_multiply", also = { "ps", "mw_local" }, tol = 1e-4, run = function(S)
  local x, y = make_sequences(96, 8)
  return fit_model(S, function()
    local inp = nn.Input { shape = { 6 }, dtype = "int64" }
    local e = nn.Embedding(7, 6)(inp)
    local g = nn.GRU(5, { return_sequences = true })(e)
    local gate = nn.Dense(5, "sigmoid")(g)
    local h = nn.Multiply()({ g, gate })
    return nn.Model { inputs = inp, outputs = nn.Dense(2)(nn.Flatten()(h)) }
  end, x, y, 24, 6)
end }

-- a loss at every position of a sequence (labels [batch, t], predictions
-- [batch, t, classes]): the mean over the global batch's positions, and the
-- accuracy over them
add { name = "fit_sequence_loss", also = { "ps", "mw_local" }, tol = 1e-4, run = function(S)
  local x = make_sequences(96, 9)
  local rows = x:totable()                       -- the next symbol at every position
  for _, r in ipairs(rows) do for j = 1, #r do r[j] = (r[j] + 1) % 7 end end
  local y = tensor.new(rows, { dtype = "int64" })
  local model
  tensor.seed(7)
  S.scope(function()
    local inp = nn.Input { shape = { 6 }, dtype = "int64" }
    local h = nn.Conv1D(8, 2, { padding = "causal", activation = "relu" })(nn.Embedding(7, 6)(inp))
    model = nn.Model { inputs = inp, outputs = nn.Dense(7)(h) }
    model:compile { optimizer = optim.Adam { learning_rate = 0.02 }, loss = sparse_ce(), metrics = { "accuracy" } }
  end)
  local h = model:fit(data.Dataset.from_tensor_slices(x, y):batch(24), { epochs = 6, verbose = 0, steps_per_epoch = 4 })
  check(h.loss[#h.loss] < h.loss[1], "the loss did not fall (%.4f -> %.4f)", h.loss[1], h.loss[#h.loss])
  check(h.accuracy[#h.accuracy] > 0.5, "accuracy over the positions %.3f", h.accuracy[#h.accuracy])
  return put_all_weights({ loss_final = h.loss[#h.loss], accuracy = h.accuracy[#h.accuracy] }, model)
end }

-- the tf.data transformations of issue 17 in a pipeline fit reads (zip,
-- filter, enumerate, map, cache, unbatch, batch; a predicate and a map that
-- use only their arguments travel to other processes with the recipe)
add { name = "fit_dataset_transformations", also = { "ps", "mw_local" }, run = function(S)
  local x, y = make_data(120, { 8 }, 4)
  local ds = data.Dataset.zip({ data.Dataset.from_tensor_slices(x), data.Dataset.from_tensor_slices(y) })
    :enumerate()
    :filter(function(i) return i:item() % 5 ~= 0 end)      -- drops 24 of the 120 rows
    :map(function(i, xy) return xy[1], xy[2] end)
    :cache():batch(8):unbatch():batch(24)
  local model = make_model(S, "mlp", "sgd_momentum", true)
  local h = model:fit(ds, { epochs = 6, verbose = 0, steps_per_epoch = 4 })
  check(h.loss[#h.loss] < h.loss[1], "the loss did not fall (%.4f -> %.4f)", h.loss[1], h.loss[#h.loss])
  return put_weights({ loss_final = h.loss[#h.loss] }, model)
end }

-- Issue 17's text files: rows written as lines, read by TextLineDataset and
-- parsed by a map (each line a Lua string), sharded by DATA (the policy that
-- keeps each global batch's rows; FILE would regroup them by file).
add { name = "fit_text_lines", also = { "ps", "mw_local" }, run = function(S)
  local x, y = make_data(96, { 8 }, 4)
  local path = S.tmp("rows.txt")
  local f = assert(io.open(path, "w"))
  local xt, yt = x:totable(), y:totable()
  for i = 1, 96 do f:write(("%s;%d\n"):format(table.concat(xt[i], ","), yt[i])) end
  f:close()
  local o = data.Options()
  o.experimental_distribute.auto_shard_policy = data.experimental.AutoShardPolicy.DATA
  local ds = data.TextLineDataset(path):map(function(line)
    local xs, label = line:match("^(.*);(.*)$")
    local v = {}
    for num in xs:gmatch("[^,]+") do v[#v + 1] = tonumber(num) end
    return ldist.tensor.new(v), tonumber(label)
  end):batch(24):with_options(o)
  local model = make_model(S, "mlp", "sgd_momentum", true)
  local h = model:fit(ds, { epochs = 6, verbose = 0, steps_per_epoch = 4 })
  check(h.loss[#h.loss] < h.loss[1], "the loss did not fall (%.4f -> %.4f)", h.loss[1], h.loss[#h.loss])
  return put_weights({ loss_final = h.loss[#h.loss] }, model)
end }

-- Issue 26, item 1: Keras's EpochIterator. steps_per_epoch on a repeated
-- dataset reads on across epochs (batches 16, 16, 8 of 40 rows, 2 steps an
-- epoch: epoch 2 starts at the 8-row batch); each validation reads its first
-- validation_steps batches; evaluate(steps=) stops a repeated dataset. The
-- default strategy checks the weights against plain train_steps over the
-- batches Keras would read (tests/lua/test_fit_keras.lua has Keras's numbers).
add { name = "fit_steps_repeat", also = { "ps", "mw_local" }, run = function(S)
  local x, y = make_data(40, { 8 }, 4)
  local xv, yv = make_data(30, { 8 }, 4, 12)
  local model = make_model(S, "mlp", "sgd", true)
  local ds = data.Dataset.from_tensor_slices(x, y):batch(16):repeat_()
  local vds = data.Dataset.from_tensor_slices(xv, yv):batch(12):repeat_()
  local h = model:fit(ds, { epochs = 3, steps_per_epoch = 2, verbose = 0, validation_data = vds, validation_steps = 2 })
  check(#h.history.loss == 3 and #h.history.val_loss == 3, "3 epochs of loss and val_loss expected")
  check(h.params.steps == 2 and h.epoch[3] == 2, "the History's params and epochs")
  local out = put_weights({ loss_final = h.loss[3], val_loss_final = h.val_loss[3],
    eval3 = model:evaluate(vds, { steps = 3 }).loss }, model)
  if S.kind == "default" then
    tensor.seed(7)
    local ref = MODELS.mlp.make()
    local opt, loss = OPTIMIZERS.sgd(), sparse_ce()
    local function rows_(a, b) return x:slice(0, a, b), y:slice(0, a, b) end
    for _, r in ipairs { { 0, 16 }, { 16, 32 }, { 32, 40 }, { 0, 16 }, { 16, 32 }, { 32, 40 } } do
      local bx, by = rows_(r[1], r[2])
      ref:train_step(bx, by, loss, opt)
    end
    for i, v in ipairs(ref.trainable_variables) do
      local d = (v - model.trainable_variables[i]):abs():max():item()
      check(d < 1e-5, "weight %d differs by %g from 6 steps over batches 1, 2, 3, 1, 2, 3", i, d)
    end
  end
  return out
end }

-- Issue 26, item 2: a Functional model of 2 inputs and 2 outputs trained by
-- fit on nested elements ({xa, xb}, {ya, yb}): a loss per output,
-- loss_weights, a metric on one output, validation data as lists (Keras's
-- numbers for such a model are in tests/lua/test_fit_keras.lua).
add { name = "fit_multi_io", also = { "ps", "mw_local" }, run = function(S)
  local x, y = make_data(48, { 8 }, 4)
  local xa, xb = x:slice(1, 0, 5):contiguous(), x:slice(1, 5, 8):contiguous()
  local yb = x:slice(1, 0, 2):sum(1):reshape { 48, 1 }
  local model
  tensor.seed(7)
  S.scope(function()
    local ia, ib = nn.Input { shape = { 5 }, name = "xa" }, nn.Input { shape = { 3 }, name = "xb" }
    local h = nn.Dense(12, { activation = "tanh" })(nn.Concatenate()({ ia, ib }))
    model = nn.Model { inputs = { ia, ib },
      outputs = { nn.Dense(4, { name = "cls" })(h), nn.Dense(1, { name = "reg" })(h) } }
    model:compile { optimizer = optim.SGD { learning_rate = 0.05, momentum = 0.9 },
      loss = { cls = sparse_ce(), reg = "mse" }, loss_weights = { cls = 1, reg = 0.5 },
      metrics = { cls = { "accuracy" } } }
  end)
  local ds = data.Dataset.from_tensor_slices({ { xa, xb }, { y, yb } }):batch(16)
  local h = model:fit(ds, { epochs = 4, verbose = 0, steps_per_epoch = 3,   -- 48 rows: the whole data (ps needs it)
    validation_data = { { xa:slice(0, 0, 20), xb:slice(0, 0, 20) }, { y:slice(0, 0, 20), yb:slice(0, 0, 20) } } })
  for _, k in ipairs { "loss", "cls_loss", "reg_loss", "cls_accuracy", "val_loss", "val_cls_loss", "val_reg_loss",
      "val_cls_accuracy" } do
    check(h.history[k] and #h.history[k] == 4, "the history has no %s for each epoch", k)
  end
  check(h.loss[4] < h.loss[1], "the loss did not fall (%.4f -> %.4f)", h.loss[1], h.loss[4])
  local p = model:predict({ xa = xa:slice(0, 0, 6), xb = xb:slice(0, 0, 6) })
  local out = put_weights({ loss = h.loss[4], cls_loss = h.cls_loss[4], reg_loss = h.reg_loss[4],
    cls_accuracy = h.cls_accuracy[4], val_loss = h.val_loss[4], val_reg_loss = h.val_reg_loss[4],
    p_cls = p[1]:cpu():sum():item(), p_reg = p[2]:cpu():sum():item() }, model)
  return out
end }

-- Issue 26: the layers' regularizers in fit (model.losses joins the loss,
-- each weight term divided by the replicas as tf.nn.scale_regularization_loss
-- does, each activity term over the global batch): every strategy gives one
-- device's numbers; 100 rows in batches of 24 end with a batch of 4, split
-- unevenly over 3 replicas
add { name = "fit_regularized", also = { "ps", "mw_local" }, tol = 1e-4, run = function(S)
  local x, y = make_data(100, { 8 }, 4)
  return fit_model(S, function()
    return nn.Sequential {
      nn.Dense { units = 16, activation = "tanh", kernel_regularizer = regularizers.L2(0.02),
        bias_regularizer = regularizers.L1(0.01), activity_regularizer = regularizers.L1L2(0.002, 0.004) },
      nn.Dense { units = 4, kernel_regularizer = regularizers.L1L2 { l1 = 0.005, l2 = 0.01 } } }
  end, x, y, 24, 5, function() return optim.SGD { learning_rate = 0.1, momentum = 0.9 } end)
end }

-- constraints after every update (the optimizer applies them, so the
-- sharded update of MirroredStrategy steps aside for constrained variables)
add { name = "fit_constrained", also = { "ps", "mw_local" }, tol = 1e-4, run = function(S)
  local x, y = make_data(96, { 8 }, 4)
  local model
  local out = fit_model(S, function()
    model = nn.Sequential {
      nn.Dense { units = 16, activation = "relu", kernel_constraint = constraints.MaxNorm(0.4),
        bias_constraint = constraints.NonNeg() },
      nn.Dense { units = 4, kernel_constraint = constraints.UnitNorm() } }
    return model
  end, x, y, 24, 4, function() return optim.SGD { learning_rate = 0.2, momentum = 0.9 } end)
  local k = model.layers[1].kernel:cpu()
  local norms = (k * k):sum(0):sqrt():totable()
  for j, v in ipairs(norms) do check(v <= 0.4 + 1e-5, "column %d of the MaxNorm kernel has norm %.6f", j, v) end
  check(model.layers[1].bias:cpu():min():item() >= 0, "a NonNeg bias went negative")
  return out
end }

-- TF's custom loop with model.losses: loss + nn.scale_regularization_loss
-- of their sum, in the replica function
add { name = "loop_model_losses", run = function(S)
  local x, y = make_data(96, { 8 }, 4)
  local ds = data.Dataset.from_tensor_slices(x, y):batch(24)
  local model, opt
  tensor.seed(7)
  S.scope(function()
    model = nn.Sequential {
      nn.Dense { units = 16, activation = "tanh", kernel_regularizer = regularizers.L2(0.02),
        activity_regularizer = regularizers.L2(0.01) },
      nn.Dense { units = 4, bias_regularizer = regularizers.L1(0.05) } }
    opt = optim.SGD { learning_rate = 0.1 }
  end)
  local hist = custom_loop(S, model, opt, ds, 6, nil, function()
    local reg = 0
    for _, r in ipairs(model.losses) do reg = reg + r end
    return nn.scale_regularization_loss(reg)
  end)
  return put_weights({ loss_final = hist[#hist] }, model)
end }

-- Issue 26: tensors made in a model's call (positions, a mask) live where the
-- model runs, under every strategy: OneDeviceStrategy("cpu:1") and GPUs
-- included (tensor constructors default to the replica's device, and a
-- model's call outside a replica runs in one on the model's device)
local PositionMask = nn.Model:extend("ConformancePositionMask")
function PositionMask:init()
  self.tokens = nn.Embedding(7, 4)
  self.positions = nn.Embedding(6, 4)
  self.out = nn.Dense(2)
end
function PositionMask:call(x, training)
  local T = x.shape[2]
  local pos = tensor.arange(0, T)                 -- int64 positions 0 .. T-1
  local keep = {}
  for t = 1, T do keep[t] = { t < T and 1 or 0 } end
  local mask = tensor.new(keep)                   -- [T, 1]: the last position left out
  local h = (self.tokens(x) + self.positions(pos) + tensor.zeros(1, 4)) * mask * tensor.ones(T, 4)
  return self.out(h:sum(1) * (1 / (T - 1)))
end

add { name = "fit_call_makes_tensors", also = { "ps", "mw_local" }, tol = 1e-4, run = function(S)
  local x, y = make_sequences(96, 8)
  local out = fit_model(S, function() return PositionMask() end, x, y, 24, 6,
    function() return optim.SGD { learning_rate = 0.2, momentum = 0.9 } end)
  -- the model's own call, evaluate and predict, outside fit
  local model
  tensor.seed(7)
  S.scope(function() model = PositionMask() end)
  local p = model:predict(x, { batch_size = 32, verbose = 0 })
  check(p.shape[1] == 96 and p.shape[2] == 2, "predict gave %s", tostring(p))
  local direct = model(x:slice(0, 0, 5))
  check(direct.shape[1] == 5, "the model's call gave %s", tostring(direct))
  return out
end }

---------------------------------------------------------------- mixed precision (issue 30)
-- Keras's mixed precision under every strategy: layers compute in bfloat16 or
-- float16 with float32 variables; the gradients are summed in float32 across
-- replicas and workers before the update (and, for a LossScaleOptimizer,
-- before its finiteness check). The policy is global: each case sets it for
-- its run only. Rounding to half precision makes the strategies' weights
-- differ in the last bits of a half, hence the looser tolerance.
local function with_policy(name, f)
  mixed_precision.set_global_policy(name)
  local ok, r = pcall(f)
  mixed_precision.set_global_policy("float32")
  if not ok then error(r, 0) end
  return r
end

for _, mode in ipairs { "fit", "loop" } do
  local base = train_case { model = "mlp", opt = "adam", mode = mode, n = 240, b = 24, epochs = 5 }
  add { name = mode .. "_mixed_bfloat16", tol = 5e-3, also = mode == "fit" and { "ps", "mw_local" } or nil,
    run = function(S)
      return with_policy("mixed_bfloat16", function()
        local out = base.run(S)
        return out
      end)
    end }
end

-- mixed_float16: compile wraps the optimizer in a LossScaleOptimizer (Keras);
-- fit scales the loss and unscales the reduced gradients
add { name = "fit_mixed_float16", tol = 5e-3, also = { "ps", "mw_local" }, run = function(S)
  return with_policy("mixed_float16", function()
    local m = MODELS.mlp
    local x, y = make_data(240, m.shape, m.classes)
    local ds = data.Dataset.from_tensor_slices(x, y):batch(24)
    local model, opt = make_model(S, "mlp", "sgd_momentum", true)
    check(model._optimizer.dynamic_scale == 32768, "compile under mixed_float16 gave no LossScaleOptimizer (%s)",
      tostring(model._optimizer))
    check(model.layers[1].compute_dtype == "float16", "the layer computes in %s", model.layers[1].compute_dtype)
    local h = model:fit(ds, { epochs = 5, verbose = 0, steps_per_epoch = 10 })
    check(h.loss[5] < h.loss[1], "the loss did not fall (%.4f -> %.4f)", h.loss[1], h.loss[5])
    local out = { loss_first = h.loss[1], loss_final = h.loss[5], iterations = model._optimizer.iterations,
      scale = model._optimizer.dynamic_scale }
    return put_weights(out, model)
  end)
end }

-- a LossScaleOptimizer in TF's custom loop: at step 3 replica 0's loss is
-- infinite; the summed gradients are then not finite on every replica and
-- worker, so all skip that step together and halve the scale (the default
-- strategy's one replica does the same); the scale doubles every 10 good steps
add { name = "loop_loss_scale_skip", tol = 5e-3, run = function(S)
  return with_policy("mixed_float16", function()
    local m = MODELS.mlp
    local x, y = make_data(240, m.shape, m.classes)
    local ds = data.Dataset.from_tensor_slices(x, y):batch(24)
    local model, opt = make_model(S, "mlp", "sgd", false)
    mixed_precision.LossScaleOptimizer(opt, { initial_scale = 256, dynamic_growth_steps = 10 })
    local loss_object = sparse_ce("none")
    local n_step = 0
    local function step(inputs)
      local tape = autograd.GradientTape()
      local loss, scaled
      tape:record(function()
        loss = D.compute_average_loss(loss_object(inputs[2], model(inputs[1], { training = true })))
        scaled = opt:scale_loss(loss)
        local rc = D.get_replica_context()
        if n_step == 3 and rc.replica_id_in_sync_group == 0 then scaled = scaled * math.huge end
        return scaled
      end)
      opt:apply_gradients(tape:gradient(scaled, model.trainable_variables), model.trainable_variables)
      return loss
    end
    local scales, last = {}, 0
    for _ = 1, 3 do
      for inputs in S.distribute(ds) do
        n_step = n_step + 1
        last = S.reduce("sum", S.step(step, inputs))
        scales[#scales + 1] = opt.dynamic_scale
      end
    end
    -- 30 steps, one skipped: the scale after each step as Keras 3.15.1's
    -- (scripts/fixtures/make_loss_scale_fixture.py): 256 -> 128 at step 3, x2 after steps 13 and 23
    local keras, same = {}, #scales == 30
    for i = 1, 30 do
      keras[i] = i < 3 and 256 or i < 13 and 128 or i < 23 and 256 or 512
      same = same and scales[i] == keras[i]
    end
    check(same, "loss scale sequence %s, Keras's %s", table.concat(scales, ","), table.concat(keras, ","))
    check(opt.iterations == 29, "%d updates, 29 expected (one step skipped)", opt.iterations)
    local out = { loss_final = last, iterations = opt.iterations, scale = opt.dynamic_scale }
    return put_weights(out, model)
  end)
end }

return cases
