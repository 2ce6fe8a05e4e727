-- stall.lua - run by test_stall.sh under `ldist launch -n 2`: the test
-- stops worker STALL_RANK (SIGSTOP) for longer than the heartbeat timeout,
-- then continues it. Every worker's error must name the worker that stalled
-- (issue 27, item 9): the stopped one names itself, the other names it.
local T = dofile("tests/lua/testlib.lua")
local s = distribute.MultiWorkerMirroredStrategy { timeout = 4 }
local rank = s.cluster_resolver.rank
local stalled = tonumber(os.getenv("STALL_RANK") or "0")
local dir = assert(os.getenv("STALL_DIR"))

local f = io.open("/proc/self/stat")
local pid = f:read("a"):match("^(%d+)")
f:close()
local p = assert(io.open(("%s/pid%d.tmp"):format(dir, rank), "w"))
p:write(pid)
p:close()
os.rename(("%s/pid%d.tmp"):format(dir, rank), ("%s/pid%d"):format(dir, rank))

local ok, err = pcall(function()
  for _ = 1, math.maxinteger do s:reduce("sum", tensor.ones({ 10 })) end
end)
print("# worker " .. rank .. ": " .. tostring(err))
T.test("the collective fails once a worker stalled", function() T.ok(not ok) end)
T.test("the error names the worker that stalled", function()
  if rank == stalled then
    T.ok(err:find("this worker", 1, true) and err:find("stopped", 1, true), err)
  else
    T.ok(err:find("worker " .. stalled, 1, true) and not err:find("worker " .. rank .. " ", 1, true), err)
  end
end)
T.done()
