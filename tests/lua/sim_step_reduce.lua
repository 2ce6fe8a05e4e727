-- tests/lua/sim_step_reduce.lua - what needs an all-reduce inside the step
-- (synchronized BatchNormalization; SparseCategoricalCrossentropy's
-- ignore_class, Dice and Tversky: losses of the global batch) under a
-- MirroredStrategy whose replicas include a device that is not a CPU's
-- (sim:0 here, a GPU's in use): a clear error naming what needs it, and the
-- session goes on (the same model then trains under the default strategy).
-- Run by tests/lua/test_sim_device.sh (LDIST_SIM_DEVICE=1).
local T = dofile("tests/lua/testlib.lua")
ldist.config.cpu_devices(2)

local x = tensor.normal(16, 3)
local labels = tensor.new { 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3 }:astype("int64")
local cases = {
  { "ignore_class", function() return nn.Sequential { nn.Dense(4) } end,
    function() return losses.SparseCategoricalCrossentropy { from_logits = true, ignore_class = 3 } end, labels },
  { "Dice", function() return nn.Sequential { nn.Dense(4, "sigmoid") } end,
    function() return losses.Dice() end, tensor.uniform(16, 4) },
  { "a loss over masked steps", function()
      return nn.Sequential { nn.Input { shape = { 3 }, dtype = "int64" }, nn.Embedding(5, 2, { mask_zero = true }),
        nn.LSTM(2, { return_sequences = true }), nn.Dense(3) }
    end,
    function() return losses.SparseCategoricalCrossentropy { from_logits = true } end,
    tensor.tile(tensor.new({ 1, 0, 2 }, { dtype = "int64" }):reshape { 1, 3 }, { 16, 1 }),
    tensor.tile(tensor.new({ 1, 0, 3 }, { dtype = "int64" }):reshape { 1, 3 }, { 16, 1 }) },
  { "synchronized BatchNormalization", function() return nn.Sequential { nn.Dense(4), nn.BatchNormalization { synchronized = true } } end,
    function() return "mse" end, tensor.normal(16, 4) },
}
for _, c in ipairs(cases) do
  T.test(c[1] .. " under Mirrored over cpu:0 and sim:0: an error that says why, and the session goes on", function()
    local s = distribute.MirroredStrategy { devices = { "cpu:0", "sim:0" } }
    local m
    s:scope(function()
      m = c[2]()
      m:compile { optimizer = "sgd", loss = c[3]() }
    end)
    T.raises(function() m:fit(c[5] or x, c[4], { epochs = 1, batch_size = 8, verbose = 0 }) end,
      "an all-reduce inside the step (synchronized BatchNormalization; the losses of the global batch: " ..
      "a loss over masked steps, SparseCategoricalCrossentropy's ignore_class, Dice, Tversky) runs between CPU devices " ..
      "and between processes, " ..
      "not between the replicas of one process on sim:0")
    local m2 = c[2]()
    m2:compile { optimizer = "sgd", loss = c[3]() }
    local h = m2:fit(c[5] or x, c[4], { epochs = 1, batch_size = 8, verbose = 0 })
    T.ok(h.loss[1] == h.loss[1], "the default strategy still trains")
  end)
end
T.done()
