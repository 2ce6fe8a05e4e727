-- scripts/gpu/sanitize_attention.lua [DEVICE]: one small forward and backward
-- of the fused attention kernels (flash_attention, ldist.config.fused_attention
-- "on") on shapes that are not multiples of the kernels' tiles (T 65, S 33,
-- head width 64; causal with the mask aligned to the end, so that rows with
-- no key come up too; and plain), for device_check.sh's `sanitize` part to
-- run under compute-sanitizer (racecheck, memcheck); then the first case in
-- bfloat16 (the kernels' half instantiation). Prints one line per case with
-- the largest difference from the unfused path on the CPU (in the same
-- dtype); exits 1 if one is over 1e-4, 2e-2 in bfloat16 (relative to the
-- case's largest value).
local dev = arg[1] or "cuda:0"
local cpu_n = dev:match("^cpu:(%d+)$")   -- a logical CPU device: make it
if cpu_n and tonumber(cpu_n) > 0 then ldist.config.cpu_devices(tonumber(cpu_n) + 1) end
local failed = false
for _, case in ipairs { { 65, 33, true }, { 65, 33, false }, { 33, 65, true }, { 65, 33, true, "bfloat16" } } do
  local t, s, causal, dt = case[1], case[2], case[3], case[4]
  tensor.seed(3)
  local q, k, v = tensor.normal(4, t, 64), tensor.normal(4, s, 64), tensor.normal(4, s, 64)
  local w = tensor.normal(4, t, 64)
  local function run(device, fused)
    local was = ldist.config.fused_attention(fused and "on" or "off")
    local vars = { tensor.Variable(q:to(device)), tensor.Variable(k:to(device)), tensor.Variable(v:to(device)) }
    local tape = autograd.GradientTape()
    local y = tape:record(function()
      local h = {}
      for i = 1, 3 do h[i] = dt and vars[i]:astype(dt) or vars[i] end
      return tensor.attention(h[1], h[2], h[3], { causal = causal }):astype("float32")
    end)
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
  failed = failed or not (worst <= (dt and 2e-2 or 1e-4))
  print(("T %d, S %d, causal %s%s: largest difference from the unfused CPU path %.2e (output and 3 gradients, relative)")
    :format(t, s, tostring(causal), dt and (", " .. dt) or "", worst))
end
os.exit(failed and 1 or 0)
