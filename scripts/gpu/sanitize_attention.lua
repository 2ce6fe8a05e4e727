-- scripts/gpu/sanitize_attention.lua [DEVICE]: one small forward and backward
-- of the fused attention kernels (flash_attention, ldist.config.fused_attention
-- "on") on shapes that are not multiples of the kernels' tiles (T 65, S 33,
-- head width 64; causal with the mask aligned to the end, so that rows with
-- no key come up too; and plain), for device_check.sh's `sanitize` part to
-- run under compute-sanitizer (racecheck, memcheck). Prints one line per case
-- with the largest difference from the unfused path on the CPU; exits 1 if
-- one is over 1e-4 (relative to the case's largest value).
local dev = arg[1] or "cuda:0"
local cpu_n = dev:match("^cpu:(%d+)$")   -- a logical CPU device: make it
if cpu_n and tonumber(cpu_n) > 0 then ldist.config.cpu_devices(tonumber(cpu_n) + 1) end
local worst_all = 0
for _, case in ipairs { { 65, 33, true }, { 65, 33, false }, { 33, 65, true } } do
  local t, s, causal = case[1], case[2], case[3]
  tensor.seed(3)
  local q, k, v = tensor.normal(4, t, 64), tensor.normal(4, s, 64), tensor.normal(4, s, 64)
  local w = tensor.normal(4, t, 64)
  local function run(device, fused)
    local was = ldist.config.fused_attention(fused and "on" or "off")
    local vars = { tensor.Variable(q:to(device)), tensor.Variable(k:to(device)), tensor.Variable(v:to(device)) }
    local tape = autograd.GradientTape()
    local y = tape:record(function() return tensor.attention(vars[1], vars[2], vars[3], { causal = causal }) end)
    local loss = tape:record(function() return (y * w:to(device)):sum() end)
    local g = tape:gradient(loss, vars)
    ldist.config.fused_attention(was)
    return { y:cpu(), g[1]:cpu(), g[2]:cpu(), g[3]:cpu() }
  end
  local a, b = run(dev, true), run("cpu:0", false)
  local worst = 0
  for i = 1, 4 do
    local scale = math.max(b[i]:abs():max():item(), 1e-30)
    local d = (a[i] - b[i]):abs():max():item() / scale
    if d ~= d then d = math.huge end
    worst = math.max(worst, d)
  end
  worst_all = math.max(worst_all, worst)
  print(("T %d, S %d, causal %s: largest difference from the unfused CPU path %.2e (output and 3 gradients, relative)")
    :format(t, s, tostring(causal), worst))
end
os.exit(worst_all <= 1e-4 and 0 or 1)
