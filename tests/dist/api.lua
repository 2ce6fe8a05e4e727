-- api.lua - run by test_api.sh under `ldist launch -n 2`: each worker checks
-- the strategy's API across processes and prints TAP lines.
local T = dofile("tests/lua/testlib.lua")
local s = distribute.MultiWorkerMirroredStrategy { timeout = 10 }
local rank, n = s.cluster_resolver.rank, s.num_replicas_in_sync

-- each step's rows of this worker: "0 1|4,2 3|4" (with the global batch) or "[0,1][2,3]"
local function steps(ds, sep, open, close, with_global)
  local out = {}
  for e in ds do
    local v = e.values[1]
    local t = tensor.is_tensor(v) and v or v[1]
    local r = {}
    for i, x in ipairs(t:totable()) do r[i] = ("%d"):format(x) end
    out[#out + 1] = open .. table.concat(r, sep) .. close .. (with_global and "|" .. e.global_batch or "")
  end
  return table.concat(out, with_global and "," or "")
end
local function rows(ds) return steps(ds, " ", "", "", true) end
local function flat(ds) return steps(ds, ",", "[", "]", false) end

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

T.test("OFF: every worker reads all the data, each batch split into per-replica steps (TF's rebatch)", function()
  -- TF 2.21, rebatch + auto_shard_dataset for worker 0 and 1 of 2: [[0,1],[2]],[[3,4],[5]] on both
  T.eq(rows(s:experimental_distribute_dataset(data.Dataset.range(6):batch(3), { auto_shard_policy = "OFF" })),
    "0 1|4,2|2,3 4|4,5|2")
  -- TF: range(10).batch(4) gives [0,1],[2,3],[4,5],[6,7],[8,9] on both workers (the last batch is one step)
  T.eq(rows(s:experimental_distribute_dataset(data.Dataset.range(10):batch(4), { auto_shard_policy = "OFF" })),
    "0 1|4,2 3|4,4 5|4,6 7|4,8 9|4")
end)

-- The auto-shard policies, each checked against TF 2.21 (build/bench-venv): for
-- worker w of 2, TF's DistributedDataset rebatches the dataset with
-- distribute.batch_sizes_for_worker and applies input_ops.auto_shard_dataset;
-- the lists below are what TF yields on worker 0 and worker 1.
local function opts(policy)
  local o = data.Options()
  o.experimental_distribute.auto_shard_policy = data.experimental.AutoShardPolicy[policy]
  return o
end
local dir = ("/tmp/ldist-api-%d-%s"):format(rank, tostring(os.time()))
local files = dofile("tests/lua/datalib.lua").number_files(dir)
local function text_ds() return data.TextLineDataset(files):map(function(l) return tonumber(l) end):batch(2) end
local function interleaved()
  return data.Dataset.from_tensor_slices(files)
    :interleave(function(f) return ldist.data.TextLineDataset(f) end, { cycle_length = 2 })
    :map(function(l) return tonumber(l) end):batch(2)
end

T.test("with_options: the dataset's policy, as TF's on range(12).batch(4)", function()
  local w0, w1 = "[0,1][4,5][8,9]", "[2,3][6,7][10,11]"
  T.eq(flat(s:experimental_distribute_dataset(data.Dataset.range(12):batch(4):with_options(opts("DATA")))), rank == 0 and w0 or w1)
  T.eq(flat(s:experimental_distribute_dataset(data.Dataset.range(12):batch(4))), rank == 0 and w0 or w1)   -- AUTO
  T.eq(flat(s:experimental_distribute_dataset(data.Dataset.range(12):with_options(opts("OFF")):batch(4))),
    "[0,1][2,3][4,5][6,7][8,9][10,11]")
  -- TF: "Found an unshardable source dataset"
  T.raises(function() s:experimental_distribute_dataset(data.Dataset.range(12):batch(4):with_options(opts("FILE"))) end,
    "cannot be split by files: its source (range) reads no files")
  -- an explicit policy wins over the dataset's
  T.eq(flat(s:experimental_distribute_dataset(data.Dataset.range(12):batch(4):with_options(opts("OFF")), { auto_shard_policy = "DATA" })),
    rank == 0 and w0 or w1)
end)

T.test("TextLineDataset over 4 files: FILE, AUTO, DATA and OFF as in TF", function()
  local file_w = rank == 0 and "[0][1][2][20][21][22]" or "[10][11][12][30][31][32]"
  T.eq(flat(s:experimental_distribute_dataset(text_ds():with_options(opts("FILE")))), file_w)
  T.eq(flat(s:experimental_distribute_dataset(text_ds())), file_w)                              -- AUTO is FILE
  T.eq(flat(s:experimental_distribute_dataset(text_ds():with_options(opts("DATA")))),
    rank == 0 and "[0][2][11][20][22][31]" or "[1][10][12][21][30][32]")
  T.eq(flat(s:experimental_distribute_dataset(text_ds():with_options(opts("OFF")))),
    "[0][1][2][10][11][12][20][21][22][30][31][32]")
end)

T.test("a list of files opened by interleave: FILE shards the list, DATA the rows, as in TF", function()
  local file_w = rank == 0 and "[0][20][1][21][2][22]" or "[10][30][11][31][12][32]"
  T.eq(flat(s:experimental_distribute_dataset(interleaved())), file_w)                           -- AUTO
  T.eq(flat(s:experimental_distribute_dataset(interleaved():with_options(opts("FILE")))), file_w)
  T.eq(flat(s:experimental_distribute_dataset(interleaved():with_options(opts("DATA")))),
    rank == 0 and "[0][1][2][20][21][22]" or "[10][11][12][30][31][32]")
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
  T.raises(function() s:experimental_distribute_dataset(data.TextLineDataset(files[1]), { auto_shard_policy = "FILE" }) end,
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
os.execute("rm -rf " .. dir)
T.done()
