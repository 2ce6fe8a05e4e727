-- test_seq2seq_script.lua - scripts/seq2seq.lua as a learner runs it: the
-- encoder-decoder with attention learns to spell the GPL's words backwards
-- (masks, return_state, initial_state, AdditiveAttention), on one device and
-- under MirroredStrategy over two CPU devices, with the same held-out result;
-- greedy decoding spells held-out words; bad arguments are named.
local T = dofile("tests/lua/testlib.lua")
dofile("scripts/seq2seq.lua")

local one, two
T.test("it learns: held-out accuracy over the letters and end marks", function()
  local model, info = seq2seq.train { epochs = 15, verbose = 0 }
  one = info
  T.ok(info.held_out.accuracy > 0.85, ("held-out accuracy %.3f"):format(info.held_out.accuracy))
  T.ok(info.history.loss[15] < info.history.loss[1] / 10, "the loss falls tenfold")
  local right = 0
  for j = 1, 10 do
    local w = info.val_words[j]
    if seq2seq.reverse(model, w) == w:reverse() then right = right + 1 end
  end
  T.ok(right >= 6, ("greedy decoding spells %d of 10 held-out words backwards"):format(right))
end)

T.test("under MirroredStrategy over two CPU devices: the same training", function()
  local model, info = seq2seq.train { epochs = 15, verbose = 0, replicas = 2 }
  two = info
  T.eq(model.weights[1].device, "cpu:0")
  for e = 1, 15 do
    T.near(two.history.loss[e], one.history.loss[e], 1e-3 * (1 + one.history.loss[e]), "epoch " .. e .. "'s loss")
  end
  T.near(two.held_out.accuracy, one.held_out.accuracy, 0.02, "held-out accuracy")
end)

T.test("bad arguments are named", function()
  T.raises(function() seq2seq.main { "--epoch", "3" } end, "seq2seq: unknown argument '--epoch'")
  T.raises(function() seq2seq.main { "--epochs", "x" } end, "seq2seq: --epochs wants a number, got 'x'")
end)

T.done()
