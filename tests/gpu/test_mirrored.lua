-- test_mirrored.lua - MirroredStrategy over the GPUs present, with NCCL:
-- the communicator (one GPU is a valid one), sums and means in place, and a
-- training whose losses match one device's.
local G = dofile("tests/ops/devlib.lua")
local T, dev = G.T, G.dev
local C = ldist._distribute

-- the devices under test: every GPU, or (checking these scripts on a CPU)
-- the logical device named plus cpu:2
local devices = {}
if dev:match("^cuda") then
  for _, d in ipairs(tensor.devices()) do if d:match("^cuda:") then devices[#devices + 1] = d end end
else
  ldist.config.cpu_devices(3)
  devices = { dev, "cpu:2" }
end
print(("# %d device(s): %s"):format(#devices, table.concat(devices, ", ")))

T.test("MirroredStrategy() picks every GPU", function()
  if not dev:match("^cuda") then return end
  local s = distribute.MirroredStrategy()
  T.eq(#s.devices, #devices)
  for _, d in ipairs(s.devices) do T.ok(d:match("^cuda:"), d) end
end)

T.test("all-reduce: sum and mean in place, several tensors per call, the stats count them", function()
  local comm = C.comm_new(devices, "all_reduce")
  local n = #devices
  local lists = {}
  for r = 1, n do
    lists[r] = { tensor.full({ 1000 }, r, { device = devices[r] }), tensor.full({ 3, 7 }, 10 * r, { device = devices[r] }),
      tensor.full({ 1 }, -r, { device = devices[r] }) }
  end
  comm:all_reduce(lists, false)
  local s1, s2, s3 = n * (n + 1) / 2, 10 * n * (n + 1) / 2, -n * (n + 1) / 2
  for r = 1, n do
    T.eq(lists[r][1].device, devices[r])
    T.eq(lists[r][1]:max():item(), s1)
    T.eq(lists[r][1]:sum():item(), 1000 * s1)
    T.eq(lists[r][2]:sum():item(), 21 * s2)
    T.eq(lists[r][3]:item(), s3)
  end
  comm:all_reduce(lists, true)   -- mean of equal values: unchanged
  for r = 1, n do T.eq(lists[r][1]:sum():item(), 1000 * s1) end
  local st = comm:stats(false)
  T.eq(st.calls, 2)
  T.eq(st.bytes, 2 * (1000 + 21 + 1) * 4)
end)

T.test("all-reduce of a large bucket (64 MB per device)", function()
  local comm = C.comm_new(devices, "all_reduce")
  local lists = {}
  for r = 1, #devices do lists[r] = { tensor.full({ 16 * 1024 * 1024 }, r, { device = devices[r] }) } end
  local t0 = ldist.clock()
  comm:all_reduce(lists, true)
  local v = lists[1][1]:max():item()
  local dt = ldist.clock() - t0
  T.eq(v, (#devices + 1) / 2)
  print(("# 64 MB all-reduce (mean) over %d device(s): %.2f ms"):format(#devices, dt * 1e3))
end)

T.test("a communicator cannot mix GPUs and CPU devices", function()
  if not dev:match("^cuda") then return end
  local comm = C.comm_new({ devices[1], "cpu:0" }, "all_reduce")
  T.raises(function()
    comm:all_reduce({ { tensor.ones(3, { device = devices[1] }) }, { tensor.ones(3) } }, false)
  end, "cannot mix")
end)

-- the seed example's loop on `devs` (nil: one CPU device)
local function train(devs)
  local strategy = devs and distribute.MirroredStrategy { devices = devs } or distribute.get_strategy()
  local model, opt
  tensor.seed(7)
  do
    local _ <close> = strategy:scope()
    model = nn.Sequential { nn.Flatten(), nn.Dense(64, "relu"), nn.Dense(10) }
    opt = optim.Adam { learning_rate = 1e-3 }
  end
  local loss_object = losses.SparseCategoricalCrossentropy { from_logits = true }
  local x, y = datasets.fashion_mnist.load("train")
  local ds = data.Dataset.from_tensor_slices(x:slice(0, 0, 2048), y:slice(0, 0, 2048)):batch(128)
  local function step(inputs)
    local tape = autograd.GradientTape()
    local loss = tape:record(function() return loss_object(inputs[2], model(inputs[1], { training = true })) end)
    opt:apply_gradients(tape:gradient(loss, model.trainable_variables), model.trainable_variables)
    return loss
  end
  local out = {}
  for inputs in strategy:experimental_distribute_dataset(ds) do
    out[#out + 1] = strategy:reduce("sum", strategy:run(step, inputs))
  end
  return out, model
end

T.test("training under Mirrored over the devices matches one CPU device", function()
  local ml, model = train(devices)
  local cl = train(nil)
  T.eq(#ml, #cl)
  for i = 1, #cl do
    T.near(ml[i], cl[i], 2e-3, ("step %d"):format(i))
  end
  -- the replicas' copies stayed identical
  for _, v in ipairs(model.trainable_variables) do
    local copies = C.mirror_copies(v)
    for r = 2, #copies do T.eq(G.nmse(copies[r], copies[1]), 0, "replica " .. (r - 1) .. " drifted") end
  end
  print(("# %d steps, loss %.4f -> %.4f"):format(#cl, cl[1], cl[#cl]))
end)

T.done()
