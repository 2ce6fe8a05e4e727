-- test_checkpoint.lua - a checkpoint in one process needs no network plugin
-- (build/ldist_net.so: ZeroMQ, OpenSSL): BackupAndRestore's save and restore
-- use the optim, io and nn modules only.
local T = dofile("tests/lua/testlib.lua")

local function loaded(pattern)
  for l in io.lines("/proc/self/maps") do if l:find(pattern, 1, true) then return true end end
  return false
end

-- the optimizers: Adam's two slots; amsgrad's and centered RMSprop's third
-- (a checkpoint without it would resume with a zero maximum / mean gradient);
-- gradient accumulation's sums and count, use_ema's averages
local OPTS = {
  adam = function() return "adam" end,
  amsgrad = function() return optim.Adam { learning_rate = 0.05, beta_2 = 0.5, amsgrad = true } end,
  centered = function() return optim.RMSprop { learning_rate = 0.01, momentum = 0.5, centered = true } end,
  -- the accumulator and the count of calls (2 of 3 pending at the break), the moving averages
  accumulate = function() return optim.SGD { learning_rate = 0.1, momentum = 0.5, gradient_accumulation_steps = 3 } end,
  ema = function() return optim.Adam { learning_rate = 0.05, use_ema = true, ema_momentum = 0.5 } end,
}
for _, name in ipairs { "adam", "amsgrad", "centered", "accumulate", "ema" } do
T.test("BackupAndRestore saves and resumes in one process without the network plugin (" .. name .. ")", function()
  local dir = os.tmpname(); os.remove(dir)
  local x, y = tensor.normal(8, 3), tensor.normal(8, 2)
  local function model()
    tensor.seed(5)
    local m = nn.Sequential { nn.Dense(4), nn.Dense(2) }
    m:compile { optimizer = OPTS[name](), loss = "mse" }
    return m
  end
  local whole = model()
  whole:fit(x, y, { epochs = 3, verbose = 0, shuffle = false })
  local br = callbacks.BackupAndRestore { dir = dir, delete_checkpoint = false, verbose = false }
  local first = model()
  first:fit(x, y, { epochs = 2, verbose = 0, shuffle = false, callbacks = { br } })
  local again = model()
  again:build({ 3 })
  again.trainable_variables[1]:assign(tensor.zeros(3, 4))     -- the restore must replace it
  again:fit(x, y, { epochs = 3, verbose = 0, shuffle = false, callbacks = { br } })
  T.eq(again._optimizer.iterations, whole._optimizer.iterations)
  T.eq(again._optimizer.iterations, name == "accumulate" and 1 or 3)
  for i, v in ipairs(again.trainable_variables) do
    T.near((v - whole.trainable_variables[i]):abs():max():item(), 0, 1e-6, "variable " .. i)
  end
  T.ok(not loaded("ldist_net"), "the network plugin was loaded")
  T.ok(not loaded("libzmq"), "ZeroMQ was loaded")
  os.remove(dir .. "/checkpoint.safetensors"); os.remove(dir)
end)
end

T.done()
