-- test_fixtures.lua - ldist's layers against reference outputs and gradients
-- (Keras 3 with the TensorFlow backend, cross-checked with PyTorch where it has
-- the same layer) from the committed fixtures tests/fixtures/layers/*.safetensors,
-- made by scripts/fixtures/make_layer_fixtures.py (see tests/fixtures/README.md).
--
-- Per fixture: the layer from its class_name and config, built by one call on
-- x, its weights set from w/NNN (count and shapes checked first), then under a
-- GradientTape y = layer(x, {training=}) and L = sum(y * r); y, dL/dx,
-- dL/dw (trainable weights) and, after a training call, the non-trainable
-- weights (BatchNormalization's moving statistics) are compared with the
-- fixture: max |got - want| / max(max |want|, 1) <= tolerance (default 1e-4;
-- the floor 1: a gradient that is zero in exact arithmetic, as MultiHeadAttention's
-- key bias, holds float noise on both sides).
-- A layer class that ldist lacks fails its test. LDIST_FIXTURES=pattern runs
-- only the matching fixtures (a Lua pattern on the file name).
local T = dofile("tests/lua/testlib.lua")

local DIR = "tests/fixtures/layers"

local function list_fixtures()
  local files = {}
  local p = assert(io.popen("ls " .. DIR .. "/*.safetensors 2>/dev/null"))
  for line in p:lines() do files[#files + 1] = line end
  p:close()
  table.sort(files)
  return files
end

local function shape_str(s)
  local t = {}
  for i = 1, #s do t[i] = tostring(s[i]) end
  return "[" .. table.concat(t, ",") .. "]"
end

local function same_shape(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do if a[i] ~= b[i] then return false end end
  return true
end

local function flat(t) return t:float():reshape(-1):totable() end

-- compare got with want (tensors); error naming `what`, the worst element and both values
local function check_close(what, got, want, tol)
  T.ok(got ~= nil, what .. ": ldist gave no value (nil)")
  if not same_shape(got.shape, want.shape) then
    error(("%s: shape %s, reference %s"):format(what, shape_str(got.shape), shape_str(want.shape)), 2)
  end
  local g, w = flat(got), flat(want)
  local scale, worst, at = 1, -1, 0
  for i = 1, #w do scale = math.max(scale, math.abs(w[i])) end
  for i = 1, #w do
    local e = math.abs(g[i] - w[i])
    if e ~= e then e = math.huge end        -- NaN
    if e > worst then worst, at = e, i end
  end
  if #w > 0 and worst / scale > tol then
    error(("%s: relative error %.3g > %g at flat index %d (0-based; shape %s): got %.7g, reference %.7g (max |ref| %.4g)")
      :format(what, worst / scale, tol, at - 1, shape_str(want.shape), g[at], w[at], scale), 2)
  end
end

local function run_fixture(path)
  local tensors, meta = ldist.io.load_safetensors(path)
  local cls = meta.class_name
  local tol = tonumber(meta.tolerance) or 1e-4
  local training = meta.training == "true"
  local config = ldist.json.decode(meta.config)
  local wnames = meta.weight_names and ldist.json.decode(meta.weight_names) or {}
  if nn[cls] == nil then error(("ldist has no layer class nn.%s (fixture %s)"):format(cls, path)) end

  -- the inputs: x, or x0, x1, ...
  local xs, dx_keys, single = {}, {}, tensors.x ~= nil
  if single then xs[1] = tensors.x; dx_keys[1] = "dx"
  else
    local i = 0
    while tensors["x" .. i] do xs[i + 1] = tensors["x" .. i]; dx_keys[i + 1] = "dx" .. i; i = i + 1 end
  end
  T.ok(#xs > 0, path .. " holds no input x")
  local input = single and xs[1] or xs

  local layer = nn.layer_from_config{class_name = cls, config = config}
  layer(input)                                  -- builds it

  -- the weights: count, shapes, then values
  local ws = {}
  while tensors[("w/%03d"):format(#ws)] do ws[#ws + 1] = tensors[("w/%03d"):format(#ws)] end
  local lw = layer.weights
  local function wname(i) return wnames[i] or ("w/%03d"):format(i - 1) end
  if #lw ~= #ws then
    local have = {}
    for i = 1, #lw do have[i] = (lw[i].name or "?") .. shape_str(lw[i].shape) end
    local want = {}
    for i = 1, #ws do want[i] = wname(i) .. shape_str(ws[i].shape) end
    error(("%s has %d weights (%s), the reference %d (%s)"):format(cls, #lw, table.concat(have, ", "), #ws,
      table.concat(want, ", ")))
  end
  for i = 1, #ws do
    if not same_shape(lw[i].shape, ws[i].shape) then
      error(("weight %d (%s; ldist's '%s'): shape %s, reference %s"):format(i, wname(i), tostring(lw[i].name),
        shape_str(lw[i].shape), shape_str(ws[i].shape)))
    end
  end
  for i = 1, #ws do lw[i]:assign(ws[i]) end

  -- the trainable weights, matched to layer.weights by name, in order
  local tv = layer.trainable_variables
  local dw_idx = {}                             -- dw_idx[k]: the index in weights of trainable_variables[k]
  for i = 1, #lw do if tensors[("dw/%03d"):format(i - 1)] then dw_idx[#dw_idx + 1] = i end end
  if #tv ~= #dw_idx then
    error(("%s has %d trainable weights, the reference %d"):format(cls, #tv, #dw_idx))
  end
  for k, i in ipairs(dw_idx) do
    if tv[k].name ~= lw[i].name then
      error(("trainable weight %d is '%s', expected weight %d (%s; ldist's '%s')"):format(k, tostring(tv[k].name), i,
        wname(i), tostring(lw[i].name)))
    end
  end

  -- forward and gradients
  local r = tensors.r
  local tape = autograd.GradientTape()
  local float_in = {}
  for i, x in ipairs(xs) do
    if tensors[dx_keys[i]] then tape:watch(x); float_in[#float_in + 1] = i end
  end
  local y
  local loss = tape:record(function()
    y = layer(input, {training = training})
    return (y * r):sum()
  end)
  check_close("y", y, tensors.y, tol)

  local sources = {}
  for _, i in ipairs(float_in) do sources[#sources + 1] = xs[i] end
  for k = 1, #tv do sources[#sources + 1] = tv[k] end
  local grads = tape:gradient(loss, sources)
  for n, i in ipairs(float_in) do check_close(dx_keys[i], grads[n], tensors[dx_keys[i]], tol) end
  for k, i in ipairs(dw_idx) do
    check_close(("dw/%03d (%s)"):format(i - 1, wname(i)), grads[#float_in + k], tensors[("dw/%03d"):format(i - 1)], tol)
  end

  -- non-trainable weights after a training call (moving statistics)
  if training then
    for i = 1, #lw do
      local short = wname(i):match("([^/]+)$")
      local want = tensors["after/" .. short]
      if want then check_close("after/" .. short .. " (weight " .. i .. ")", layer.weights[i], want, tol) end
    end
  end
end

local files = list_fixtures()
-- LDIST_FIXTURES=pattern runs only the fixtures whose file name matches (a Lua pattern)
local only = os.getenv("LDIST_FIXTURES")
if only and only ~= "" then
  local keep = {}
  for _, f in ipairs(files) do if f:match("([^/]+)$"):find(only) then keep[#keep + 1] = f end end
  files = keep
end
T.test("fixtures are present", function()
  T.ok(#files > 0, "no fixtures in " .. DIR .. " (run scripts/fixtures/make_layer_fixtures.py)")
end)
for _, path in ipairs(files) do
  local name = path:match("([^/]+)%.safetensors$")
  local ok, meta = pcall(function() local _, m = ldist.io.load_safetensors(path); return m end)
  local label = ok and ("%s %s %s"):format(name, meta.class_name, meta.config) or name
  T.test("fixture " .. label, function() run_fixture(path) end)
end
T.done()
