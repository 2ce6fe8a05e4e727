-- test_race.lua - MirroredStrategy steps that gave wrong numbers now and then.
--
-- Sparse categorical cross-entropy other than from_logits with the mean
-- reduction goes through a one-hot matrix built on the host (cpu:0). Inside
-- strategy:run cpu:0 queues its kernels, so a one-hot made by
-- ld_tensor_zeros had its zero fill queued while the issuing thread wrote
-- the ones at once; when the fill ran after the ones, the replica's loss was
-- 0 (replica 1's mostly: reading its labels waits for cpu:1's queue, not
-- cpu:0's). Each check below repeats a step many times, since only some
-- steps lose the race.
local T = dofile("tests/lua/testlib.lua")
ldist.config.cpu_devices(2)

local s = distribute.MirroredStrategy{devices = {"cpu:0", "cpu:1"}}
local ITER = 200

-- each replica's value of a PerReplica result, read on the host
local function per_replica(v)
  local L, out = s:experimental_local_results(v), {}
  for r = 1, #L do out[r] = L[r]:cpu():item() end
  return out
end

-- the loss of every replica's share of (x, y), computed without the strategy
local function reference(inputs, fn)
  local want = {}
  for r, inp in ipairs(inputs.values) do want[r] = fn{inp[1]:cpu(), inp[2]:cpu()}:item() end
  return want
end

-- run `fn` ITER times on the split batch; the steps whose replicas disagree
-- with the reference
local function repeat_step(fn, inputs)
  local want, bad, first = reference(inputs, fn), 0, nil
  for i = 1, ITER do
    local got = per_replica(s:run(fn, inputs))
    for r = 1, #want do
      if math.abs(got[r] - want[r]) > 1e-4 * (1 + math.abs(want[r])) then
        bad = bad + 1
        first = first or ("step %d, replica %d: %.6f, want %.6f"):format(i, r - 1, got[r], want[r])
        break
      end
    end
  end
  return bad, first
end

tensor.seed(1)
local x = tensor.normal(32, 5)
local y = x:slice(1, 0, 3):argmax(1):astype("int64")

for _, reduction in ipairs{"none", "sum"} do
  local lo = losses.SparseCategoricalCrossentropy{from_logits = true, reduction = reduction}

  -- the loss alone: replica 1's labels are on an idle cpu:1, so nothing
  -- delays the host's writes after the fill is queued
  T.test("sparse cross-entropy (reduction " .. reduction .. ") under MirroredStrategy, " .. ITER .. " steps", function()
    local logits = x:slice(1, 0, 3):contiguous()
    local inputs = s:_split{logits, y}
    local bad, first = repeat_step(function(inp) return lo(inp[2], inp[1]):sum() end, inputs)
    T.eq(bad, 0, ("steps with a wrong loss (first: %s)"):format(first))
  end)
end

-- the pattern the race was found in: a forward pass, then the loss
T.test("forward pass + per-example loss under MirroredStrategy, " .. ITER .. " steps", function()
  local model
  tensor.seed(7)
  s:scope(function() model = nn.Sequential{nn.Dense(8, "tanh"), nn.Dense(3)}; model:build{5} end)
  local lo = losses.SparseCategoricalCrossentropy{from_logits = true, reduction = "none"}
  local inputs = s:_split{x:slice(0, 0, 16), y:slice(0, 0, 16)}
  local bad, first = repeat_step(function(inp) return lo(inp[2], model(inp[1], {training = true})):sum() end, inputs)
  T.eq(bad, 0, ("steps with a wrong loss (first: %s)"):format(first))
end)

-- A copy from a device that queues (cpu:1) to another that queues (cpu:2)
-- once ran in the destination's queue, after its earlier kernels, while
-- the source went on: an in-place write the source did next (a BatchNorm's
-- moving mean, an optimizer's update) could land before the copy read the
-- memory, and the copy held the new value (ThreadSanitizer found it in the
-- synchronized-BatchNorm test). Here cpu:2 is kept busy with products, so
-- the old order lost the race nearly every time.
T.test("a copy between two queued devices keeps the value the source had when it was asked", function()
  ldist.config.cpu_devices(3)
  local wrong = 0
  for i = 1, 30 do
    local busy = tensor.normal(384, 384):to("cpu:2")
    for _ = 1, 4 do busy = busy:matmul(busy) * 1e-3 end
    local x = tensor.full({1000}, i):to("cpu:1")
    local y = x:to("cpu:2")
    x:assign_add(tensor.ones(1000):to("cpu:1"))
    local got = y:cpu()
    if got:min():item() ~= i or got:max():item() ~= i then wrong = wrong + 1 end
    T.eq(x:cpu():min():item(), i + 1, "the source's own write landed")
  end
  T.eq(wrong, 0, "copies that saw the source's later write")
end)

T.done()
