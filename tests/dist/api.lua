-- api.lua - run by test_api.sh under `ldist launch -n 2`: each worker checks
-- the strategy's API across processes and prints TAP lines.
local T = dofile("tests/lua/testlib.lua")
local s = distribute.MultiWorkerMirroredStrategy { timeout = 10 }
local rank, n = s.cluster_resolver.rank, s.num_replicas_in_sync

local function rows(ds)
  local out = {}
  for e in ds do
    local v = e.values[1]
    local t = tensor.is_tensor(v) and v or v[1]
    local v = {}
    for i, x in ipairs(t:totable()) do v[i] = ("%d"):format(x) end
    out[#out + 1] = table.concat(v, " ") .. "|" .. e.global_batch
  end
  return table.concat(out, ",")
end

T.test("the cluster: 2 workers from TF_CONFIG", function()
  T.eq(n, 2); T.eq(s.cluster_resolver.source, "TF_CONFIG"); T.eq(s:is_chief(), rank == 0)
  T.eq(s.extended.should_checkpoint, rank == 0)
end)

T.test("DATA: each worker takes its half of every global batch", function()
  local got = rows(s:experimental_distribute_dataset(data.Dataset.range(10):batch(4), { auto_shard_policy = "DATA" }))
  T.eq(got, rank == 0 and "0 1|4,4 5|4,8|2" or "2 3|4,6 7|4,9|2")
end)

T.test("AUTO on a dataset without files is DATA", function()
  T.eq(s:experimental_distribute_dataset(data.Dataset.range(10):batch(4)).policy, "DATA")
end)

T.test("OFF: every worker gets every batch", function()
  T.eq(rows(s:experimental_distribute_dataset(data.Dataset.range(6):batch(3), { auto_shard_policy = "OFF" })),
    "0 1 2|6,3 4 5|6")
end)

local function file_ds(files)
  return distribute.FileDataset(files, function(list)
    local v = {}
    for _, f in ipairs(list) do for k = 1, 2 do v[#v + 1] = tonumber(f) * 10 + k end end
    return data.Dataset.from_tensor_slices(tensor.new(v)):batch(2)
  end)
end

T.test("FILE: each worker reads its own files, a batch feeding one step per worker", function()
  local d = s:experimental_distribute_dataset(file_ds({ "1", "2", "3", "4" }), { auto_shard_policy = "FILE" })
  T.eq(d.policy, "FILE")
  T.eq(rows(d), rank == 0 and "11|2,12|2,31|2,32|2" or "21|2,22|2,41|2,42|2")
  T.eq(s:experimental_distribute_dataset(file_ds({ "1", "2" })).policy, "FILE")   -- AUTO
end)

T.test("FILE with fewer files than workers is an error that says so", function()
  T.raises(function() s:experimental_distribute_dataset(file_ds({ "1" }), { auto_shard_policy = "FILE" }) end,
    "1 file(s) for 2 workers")
  T.eq(s:experimental_distribute_dataset(file_ds({ "1" })).policy, "DATA")        -- AUTO falls back
end)

T.test("distribute_datasets_from_function: one pipeline per worker", function()
  local seen
  local d = s:distribute_datasets_from_function(function(ctx)
    seen = ctx
    return data.Dataset.range(ctx.input_pipeline_id * 100, ctx.input_pipeline_id * 100 + 4)
      :batch(ctx:get_per_replica_batch_size(4))
  end)
  T.eq(seen.input_pipeline_id, rank); T.eq(seen.num_input_pipelines, 2)
  T.eq(rows(d), rank == 0 and "0 1|4,2 3|4" or "100 101|4,102 103|4")
end)

T.test("run + reduce: sum and mean across the workers", function()
  local v = s:run(function() return tensor.new(rank + 1) end)
  T.eq(s:reduce("sum", v), 3); T.eq(s:reduce("mean", v), 1.5)
  local w = s:run(function() return tensor.new({ 1, 2, 3 }) * (rank + 1) end)
  T.eq(s:reduce("mean", w, { axis = 0 }), 3)              -- (6 + 12) / (3 + 3 rows)
  T.eq(s:reduce("sum", 5), 10)
end)

T.test("the replica context: rank as replica id, all_reduce and all_gather across workers", function()
  local ids, sums, gathered = s:run(function()
    local ctx = distribute.get_replica_context()
    local g = ctx:all_gather(tensor.full({ rank + 1, 2 }, rank))
    return ctx.replica_id_in_sync_group, ctx:all_reduce("sum", tensor.new(10 * (rank + 1))), g
  end)
  T.eq(s:experimental_local_results(ids)[1], rank)
  T.eq(s:experimental_local_results(sums)[1]:item(), 30)
  local g = s:experimental_local_results(gathered)[1]
  T.eq(table.concat(g.shape, "x"), "3x2"); T.eq(g:sum():item(), 4)
  T.eq(s:gather(tensor.new({ rank, rank })):sum():item(), 2)
end)

T.test("workers that call different collectives get an error, not a hang", function()
  local t0 = ldist.clock()
  T.raises(function() s:reduce("sum", tensor.ones(rank == 0 and 3 or 5)) end, "disagree")
  T.ok(ldist.clock() - t0 < 10)
  T.raises(function() s:reduce("sum", 1) end, "disagree")   -- the cluster is broken from now on
end)
T.done()
