-- maxdiff.lua A.safetensors B.safetensors -> prints the largest |a - b| over all tensors
local a, b = ldist.io.load_safetensors(arg[1]), ldist.io.load_safetensors(arg[2])
local m, n = 0, 0
for k, t in pairs(a) do
  if not b[k] then error(arg[2] .. " lacks " .. k) end
  m = math.max(m, (t - b[k]):abs():max():item()); n = n + 1
end
for k in pairs(b) do if not a[k] then error(arg[1] .. " lacks " .. k) end end
print(("%.3g"):format(m), n)
