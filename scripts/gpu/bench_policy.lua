-- scripts/gpu/bench_policy.lua - the Keras dtype policy the GPU bench scripts
-- (train_bench.lua, transformer_bench.lua) build their models under:
-- LDIST_BENCH_POLICY=mixed_bfloat16 | mixed_float16 | float32 (the default),
-- through mixed_precision.set_global_policy (issue 30 item 2), and the logical
-- CPU devices a device argument cpu:N needs (to try a script on this machine).
-- Returns the policy's name.
local M = {}
function M.apply(dev)
  local n = dev and dev:match("^cpu:(%d+)$")
  if n and tonumber(n) > 0 then ldist.config.cpu_devices(tonumber(n) + 1) end
  local policy = os.getenv("LDIST_BENCH_POLICY")
  if not policy or policy == "" then policy = "float32" end
  mixed_precision.set_global_policy(policy)
  return policy
end
return M
