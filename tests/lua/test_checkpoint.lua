-- test_checkpoint.lua - a checkpoint in one process needs no network plugin
-- (build/ldist_net.so: ZeroMQ, OpenSSL): BackupAndRestore's save and restore
-- use the optim, io and nn modules only.
local T = dofile("tests/lua/testlib.lua")

local function loaded(pattern)
  for l in io.lines("/proc/self/maps") do if l:find(pattern, 1, true) then return true end end
  return false
end

T.test("BackupAndRestore saves and resumes in one process without the network plugin", function()
  local dir = os.tmpname(); os.remove(dir)
  local x, y = tensor.ones(8, 3), tensor.zeros(8, 2)
  local function model()
    tensor.seed(5)
    local m = nn.Sequential { nn.Dense(4), nn.Dense(2) }
    m:compile { optimizer = "adam", loss = "mse" }
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
  T.eq(again._optimizer.iterations, 3)
  for i, v in ipairs(again.trainable_variables) do
    T.near((v - whole.trainable_variables[i]):abs():max():item(), 0, 1e-6, "variable " .. i)
  end
  T.ok(not loaded("ldist_net"), "the network plugin was loaded")
  T.ok(not loaded("libzmq"), "ZeroMQ was loaded")
  os.remove(dir .. "/checkpoint.safetensors"); os.remove(dir)
end)

T.done()
