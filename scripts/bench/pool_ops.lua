-- pool_ops.lua [BATCH]: microseconds per call of the ops of one MLP step
-- (784-512-256-10) on cpu:0, to see which ones stop scaling with the pool's
-- threads (run under LDIST_NUM_THREADS=1, 2, 4, ...; make bench-cores
-- prints them side by side). Lines "name us".
local batch = tonumber(arg[1]) or 256
tensor.seed(0)
local x = tensor.normal(batch, 784)
local w1, w2 = tensor.normal(784, 512), tensor.normal(512, 256)
local h1 = tensor.normal(batch, 512)
local dy1 = tensor.normal(batch, 512)
local b1 = tensor.normal(512)
local small = tensor.normal(32768)   -- the size below which a loop stays on one thread
local function time(name, fn)
  for _ = 1, 3 do fn() end
  local reps, t0 = 0, ldist.clock()
  repeat
    for _ = 1, 10 do fn() end
    reps = reps + 10
  until ldist.clock() - t0 > 0.3
  print(("%s %.1f"):format(name, (ldist.clock() - t0) / reps * 1e6))
end
time("x@W1 (" .. batch .. "x784x512)", function() return x:matmul(w1) end)
time("h1@W2 (" .. batch .. "x512x256)", function() return h1:matmul(w2) end)
time("x^T@dy (784x" .. batch .. "x512)", function() return x.T:matmul(dy1) end)
time("dy@W1^T (" .. batch .. "x512x784)", function() return dy1:matmul(w1.T) end)
time("relu " .. batch .. "x512", function() return h1:relu() end)
time("add bias " .. batch .. "x512", function() return h1 + b1 end)
time("mul " .. batch .. "x512", function() return h1 * dy1 end)
time("relu 32768", function() return small:relu() end)
