-- sim_device_gc.lua - how Lua's collector is paced for a GPU's memory
-- (lua_bindings/tensor.c, tell_collector), on sim:0 (tests/lua/test_sim_device.sh
-- sets LDIST_SIM_DEVICE=1): memory that is not the host's, as a GPU's.
-- A loop that makes 100 tensors of 16 MB on the device and keeps none must
--   - run a few full collections, not one per tensor (counted whole, every
--     16 MB activation of the bench transformer ran a full cycle: 126 a step,
--     13 ms of the host's time), and
--   - still free them as it goes: the device's peak stays far below the
--     1.6 GB made.
-- Host tensors keep their own rule (a large one counts whole), checked too.
local T = dofile("tests/lua/testlib.lua")
local DEV = "sim:0"
local MB = 1024 * 1024

-- completed collection cycles: a finalizer that re-arms itself
local cycles = 0
local function sentinel()
  setmetatable({}, { __gc = function() cycles = cycles + 1; sentinel() end })
end
sentinel()

-- With LDIST_SIM_MEMORY (test_sim_device.sh runs this file again with 160M):
-- the device is smaller than the collector's pace (256 MB), so an allocation
-- fails, collects the garbage and is retried; the pace then halves, and the
-- loop goes on without failing again and again.
if os.getenv("LDIST_SIM_MEMORY") then
  T.test("a device smaller than the pace: an allocation retried after a collection, then the pace adapts", function()
    local x = tensor.zeros(4 * MB):to(DEV)
    local r0 = tensor.memory(DEV).alloc_retries
    local y
    for i = 1, 100 do y = x + i end
    local m = tensor.memory(DEV)
    print(("# %d allocations retried after a collection; the device's peak %d MB of 160")
      :format(m.alloc_retries - r0, m.peak_bytes // MB))
    T.eq(y:sum():item(), 100 * 4 * MB, "the last tensor's values")
    T.ok(m.peak_bytes <= 160 * MB, "within the device's memory")
    T.ok(m.alloc_retries - r0 >= 1, "the device filled once (its memory is below the pace)")
    T.ok(m.alloc_retries - r0 <= 3, "and not again and again: the pace adapted (" .. m.alloc_retries - r0 .. " retries)")
    T.raises(function() return tensor.zeros(50 * MB):to(DEV) end, "sim:0: out of memory")
  end)
  T.done()
  return
end

T.test("100 device tensors of 16 MB: a few collections, and the garbage freed as it goes", function()
  local x = tensor.zeros(4 * MB):to(DEV)   -- float32: 16 MB
  T.eq(x.device, DEV)
  collectgarbage(); collectgarbage()
  local base = tensor.memory(DEV).bytes_in_use
  T.ok(base >= 16 * MB, "the device counts x's 16 MB: " .. base)
  cycles = 0
  local peak = 0
  for _ = 1, 100 do
    local y = x + 1                          -- a new 16 MB device tensor, garbage at once
    peak = math.max(peak, tensor.memory(DEV).bytes_in_use)
    T.eq(y.device, DEV)
  end
  local grew = peak - base
  print(("# %d full collections for 1600 MB of device tensors; the device's use peaked %d MB above the start")
    :format(cycles, grew // MB))
  T.ok(cycles >= 3, "the collector ran (" .. cycles .. " cycles): device garbage is not left to pile up")
  -- about 1600 / 256 paced collections, plus the collector's own cycles for the
  -- loop's Lua garbage; one per tensor ran 200 here
  T.ok(cycles <= 40, "at most 40 cycles for 100 tensors, not one or more each (" .. cycles .. ")")
  T.ok(grew <= 400 * MB, ("the device's use stayed within 400 MB of the start (%d MB)"):format(grew // MB))
end)

T.test("host tensors of 16 MB are still collected as they go", function()
  collectgarbage(); collectgarbage()
  local base = tensor.memory().bytes_in_use
  cycles = 0
  local peak = 0
  for _ = 1, 20 do
    local y = tensor.zeros(4 * MB)
    peak = math.max(peak, tensor.memory().bytes_in_use)
    T.eq(y.device, "cpu:0")
  end
  local grew = peak - base
  print(("# %d full collections for 320 MB of host tensors; host use peaked %d MB above the start")
    :format(cycles, grew // MB))
  T.ok(grew <= 64 * MB, ("a large host tensor goes soon after its last use (peak %d MB above the start)"):format(grew // MB))
end)

T.test("tensor.memory names the device it counts", function()
  local m = tensor.memory(DEV)
  T.ok(m.bytes_in_use >= 0 and m.peak_bytes >= m.bytes_in_use)
  T.raises(function() tensor.memory("cuda:9") end, "unknown device 'cuda:9'")
end)

T.done()
