-- auth_target.lua MARKER - join a cluster from TF_CONFIG, then write MARKER
-- (so a test knows whether anything ran) and do a few collectives.
local s = distribute.MultiWorkerMirroredStrategy { timeout = 10,
  rendezvous_timeout = tonumber(os.getenv("TEST_RDV") or "20") }
local f = assert(io.open(arg[1], "w"))
f:write("ran\n")
f:close()
local t = tensor.ones(1000)
local total = 0
for _ = 1, 20 do total = total + s:reduce("sum", t:sum()) end
print(("worker %d: reduced %g"):format(s.cluster_resolver.rank, total))
