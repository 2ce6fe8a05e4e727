-- devlib.lua - what the every-op-on-every-device suite (tests/ops) and the
-- GPU tests (tests/gpu) share: the device under test and the comparison with
-- the CPU result.
--   local G = dofile("tests/ops/devlib.lua")
--   G.close(G.on_device(x, f), f(x), "exp")     -- f run on cuda:0 and on the CPU
--
-- The device is cuda:0 unless LDIST_GPU_TEST_DEVICE names another; naming a
-- logical CPU device ("cpu:1") runs the same tests on the CPU executor, which
-- is how these scripts are checked on machines without a GPU.
local T = dofile("tests/lua/testlib.lua")
local G = { T = T }

G.dev = os.getenv("LDIST_GPU_TEST_DEVICE") or "cuda:0"
if G.dev:match("^cpu:%d+$") then
  local k = tonumber(G.dev:match("%d+"))
  if k > 0 then ldist.config.cpu_devices(k + 1) end
end

-- The values of a tensor as a flat Lua array (on the host, as float32 or int).
local function flat(t)
  t = t:cpu()
  if t.ndim == 0 then return { t:item() } end
  local v = t:reshape(t:numel()):totable()
  return v
end
G.flat = flat

-- Normalised mean squared error, as ggml's test-backend-ops computes it:
-- sum((a - b)^2) / sum(b^2), b the reference (CPU) result; NaN must sit in
-- the same places in both and is left out. Also returns max |a - b|.
function G.nmse(a, b)
  local x, y = flat(a), flat(b)
  local num, den, mx, nan_mismatch = 0, 0, 0, 0
  for i = 1, #y do
    local p, q = x[i], y[i]
    if p ~= p or q ~= q then
      if (p ~= p) ~= (q ~= q) then nan_mismatch = nan_mismatch + 1 end
    elseif p ~= q then   -- (equal infinities differ by NaN)
      local d = p - q
      num = num + d * d
      den = den + q * q
      if math.abs(d) > mx then mx = math.abs(d) end
    else
      den = den + (q * q < math.huge and q * q or 0)
    end
  end
  return den > 0 and num / den or num, mx, nan_mismatch, num, den
end

local function shape_str(t)
  local s = {}
  for i, d in ipairs(t.shape) do s[i] = tostring(d) end
  return #s > 0 and table.concat(s, "x") or "scalar"
end

-- a (from the device under test) matches b (the CPU's): same shape and dtype,
-- NaN in the same places, and a normalised error under tol. ms_floor, when
-- given, is a mean square below which b's own scale is not trusted: the error
-- is then measured against numel * ms_floor (a gradient that is zero in exact
-- arithmetic, as an attention key bias's, is rounding noise on both sides).
function G.close(a, b, what, tol, ms_floor)
  tol = tol or 1e-7
  T.ok(tensor.is_tensor(a) and tensor.is_tensor(b), what .. ": tensors expected")
  T.eq(a.device, G.dev, what .. ": result device")
  T.eq(shape_str(a), shape_str(b), what .. ": shape")
  T.eq(a.dtype, b.dtype, what .. ": dtype")
  if a:numel() == 0 then return 0 end
  local e, mx, bad_nan, num, den = G.nmse(a, b)
  if ms_floor and den < a:numel() * ms_floor then e = num / (a:numel() * ms_floor) end
  if bad_nan > 0 then error(("%s: NaN in %d places where the CPU has none (or the reverse)"):format(what, bad_nan), 2) end
  if not (e <= tol) then
    error(("%s: normalised error %.3g above %.3g (max |diff| %.3g)"):format(what, e, tol, mx), 2)
  end
  return e
end

-- exactly equal (integers, comparisons, copies)
function G.same(a, b, what)
  T.eq(a.device, G.dev, what .. ": result device")
  T.eq(shape_str(a), shape_str(b), what .. ": shape")
  T.eq(a.dtype, b.dtype, what .. ": dtype")
  if a:numel() == 0 then return end
  local x, y = flat(a), flat(b)
  for i = 1, #y do
    if x[i] ~= y[i] and not (x[i] ~= x[i] and y[i] ~= y[i]) then
      error(("%s: element %d is %s on %s, %s on the CPU"):format(what, i - 1, tostring(x[i]), G.dev, tostring(y[i])), 2)
    end
  end
end

-- Run f on the device copies of the arguments and on the CPU ones.
function G.both(f, ...)
  local args, dargs = table.pack(...), {}
  for i = 1, args.n do
    local v = args[i]
    dargs[i] = tensor.is_tensor(v) and v:to(G.dev) or v
  end
  return f(table.unpack(dargs, 1, args.n)), f(table.unpack(args, 1, args.n))
end

-- Is the device under test there? (run.sh skips the tier when not)
function G.present()
  for _, d in ipairs(tensor.devices()) do if d == G.dev then return true end end
  return false
end

if not G.present() then
  print(("# %s is not present: %s"):format(G.dev, tensor.device_note()))
  print("not ok - device " .. G.dev .. " is present")
  os.exit(1)
end

return G
