-- keras/preprocessing.lua - Keras's adapt(), the statistics a preprocessing
-- layer learns from the data before training (nn.Normalization):
--
--   local norm = nn.Normalization()            -- a mean and variance per feature (axis = -1)
--   norm:adapt(x_train)                        -- or a batched dataset: its x of each {x, y}
--   local model = nn.Sequential{ norm, nn.Dense(64, "relu"), nn.Dense(1) }
--
-- The layer itself is the engine's (engine/ld_layers_norm.c); adapt is a
-- layer method written here, as Keras 3's: one tensor's mean and variance
-- over the axes not kept, or a dataset's batches combined (the lack-of-fit
-- sum of squares, Keras's formula). It writes the layer's weights (mean,
-- variance; count stays 0, as Keras 3's), so a model saved after it keeps
-- them, and a strategy's mirrored copies are written alike.
local ldist = ...
local nn, tensor = ldist.nn, ldist.tensor
local doc = ldist.document

-- the axes adapt reduces over: those the layer does not keep (counted with the batch)
local function reduce_axes(layer, ndim)
  local kept = {}
  for _, a in ipairs(layer:get_config().axis) do kept[a < 0 and a + ndim or a] = true end
  local r = {}
  for i = 0, ndim - 1 do if not kept[i] then r[#r + 1] = i end end
  return r
end

local function first_of(batch)
  if tensor.is_tensor(batch) then return batch end
  if type(batch) == "table" and tensor.is_tensor(batch[1]) then return batch[1] end
  error("adapt: a dataset's elements must be tensors or {x, y} tables of them", 3)
end

-- the statistics of one batch: mean, variance (population) and the count of values behind each
local function batch_stats(layer, x)
  x = x:astype("float32")
  if not layer.built then layer(x:slice(0, 0, math.min(1, x.shape[1]))) end   -- builds it (the weights' shape)
  local axes = reduce_axes(layer, x.ndim)
  local count = 1
  for _, a in ipairs(axes) do count = count * x.shape[a + 1] end
  if count == 0 then error("adapt: a batch of no values", 3) end
  local opts = { axis = axes }
  return x:mean(opts), x:var(opts), count
end

local Methods = nn._layer_methods
function Methods.adapt(layer, data)
  if layer.class_name ~= "Normalization" then
    error(("adapt: %s has no statistics to learn (adapt is a preprocessing layer's, nn.Normalization)")
      :format(layer.class_name), 2)
  end
  local mean, var
  if tensor.is_tensor(data) then
    mean, var = batch_stats(layer, data)
  elseif (type(data) == "table" or type(data) == "userdata") and type(data.iter) == "function" then
    local total = 0
    for batch in data:iter() do
      local bm, bv, bc = batch_stats(layer, first_of(batch))
      total = total + bc
      local w = bc / total
      if not mean then mean, var = bm, bv
      else
        local new = mean * (1 - w) + bm * w
        var = (var + (mean - new) ^ 2) * (1 - w) + (bv + (bm - new) ^ 2) * w
        mean = new
      end
    end
    if not mean then error("adapt: the dataset has no batches", 2) end
  else
    error(("bad argument #1 to 'adapt' (a tensor or a batched dataset expected, got %s)"):format(type(data)), 2)
  end
  local w = layer.weights
  w[1]:assign(mean:reshape(w[1].shape))
  w[2]:assign(var:reshape(w[2].shape))
end
doc(Methods.adapt, "Layer:adapt",
  "layer:adapt(x | dataset)\n\nKeras's preprocessing adapt (nn.Normalization): the mean and variance of the data over the\n" ..
  "axes the layer does not keep, from one tensor or a batched dataset's batches (the x of {x, y}).")

