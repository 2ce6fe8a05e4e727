-- shapes.lua - run by test_allreduce_shapes.sh under `ldist launch -n 2`: an
-- all-reduce of as many floats in different shapes is an error on every
-- worker (issue 27, item 9), where it used to reduce 100000 floats into
-- [1000, 100] on one worker and [100000] on the other.
local T = dofile("tests/lua/testlib.lua")
-- SHAPES_COMM=mpi: the same under mpirun, reduced by MPI_Allreduce
local s = distribute.MultiWorkerMirroredStrategy { timeout = 10, communication = os.getenv("SHAPES_COMM") or "auto" }
local rank = s.cluster_resolver.rank

T.test("the same shapes reduce", function()
  T.eq(s:reduce("sum", tensor.ones({ 1000, 100 })):sum():item(), 200000)
end)

T.test("equal sizes in different shapes are refused, naming the shapes", function()
  local t0 = ldist.clock()
  local err = T.raises(function()
    s:reduce("sum", tensor.ones(rank == 0 and { 100000 } or { 1000, 100 }))
  end, "disagree on the shapes")
  T.ok(err:find(rank == 0 and "100000" or "1000x100", 1, true), "the message shows this worker's shape: " .. err)
  T.ok(err:find(rank == 0 and "worker 1" or "worker 0", 1, true), "the message names the other worker: " .. err)
  T.ok(ldist.clock() - t0 < 10)
end)
T.done()
