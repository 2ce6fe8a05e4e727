-- tests/lua/test_bn_kernels.lua - the CPU's batch normalization kernels
-- (engine/ld_cpu_norm.c: per-channel sums over rows taken 4 rows at a time
-- into independent accumulators, dx with its per-channel factors computed
-- once) against the same arithmetic written with plain tensor ops (mean,
-- broadcasting, sqrt), forward and backward, in training mode. Over the
-- blocking edges: rows that are not a multiple of 4 or fewer than 8 (the
-- plain loop), channels 1, 3, 16, 20 and 300 (past the blocked sums' limit),
-- and enough rows to split over the thread pool. Outputs and the gradients
-- of x, gamma and beta must agree within 1e-4 of the tensor's scale.
local T = dofile("tests/lua/testlib.lua")

local function maxabs(t) return t:abs():max():item() end

-- rows, channels (x is [rows, c] viewed as [n, h, w, c] where it divides)
local cases = {
  { "7 rows, 3 channels (fewer than 8 rows: the plain loop)", { 7, 3 } },
  { "4x3x5x3 (60 rows), 3 channels", { 4, 3, 5, 3 } },
  { "2x7x7x16 (98 rows, not a multiple of 4), 16 channels", { 2, 7, 7, 16 } },
  { "5x3x3x20 (45 rows), 20 channels", { 5, 3, 3, 20 } },
  { "1x1x13x1: one channel, 13 rows", { 1, 1, 13, 1 } },
  { "33 rows, 300 channels (the unblocked sums)", { 33, 300 } },
  { "64x14x14x16 (12544 rows, split over the pool), 16 channels", { 64, 14, 14, 16 } },
  { "9x5x5x64 (225 rows), 64 channels", { 9, 5, 5, 64 } },
}

local eps = 0.01
for i, cs in ipairs(cases) do
  T.test(cs[1], function()
    tensor.seed(200 + i)
    local shape = cs[2]
    local c = shape[#shape]
    local x = tensor.normal(table.unpack(shape)) * 2 + 0.5
    local bn = nn.BatchNormalization { momentum = 0.9, epsilon = eps }
    bn(x, { training = true })   -- builds the variables
    bn.gamma:assign(tensor.normal(c) * 0.5 + 1)
    bn.beta:assign(tensor.normal(c) * 0.5)
    local up = tensor.normal(table.unpack(shape))

    -- the kernels
    local v = tensor.Variable(x)
    local tape = autograd.GradientTape()
    local y = tape:record(function() return bn(v, { training = true }) end)
    local loss = tape:record(function() return (y * up):sum() end)
    local g = tape:gradient(loss, { v, bn.gamma, bn.beta })

    -- the reference: the same formula in tensor ops, differentiated by autograd
    local rows = x:numel() // c
    local v2 = tensor.Variable(x:reshape(rows, c))
    local gam, bet = tensor.Variable(bn.gamma:reshape(c)), tensor.Variable(bn.beta:reshape(c))
    local tape2 = autograd.GradientTape()
    local y2 = tape2:record(function()
      local m = v2:mean(0)
      local d = v2 - m
      local var = (d * d):mean(0)
      return d / (var + eps):sqrt() * gam + bet
    end)
    local loss2 = tape2:record(function() return (y2 * up:reshape(rows, c)):sum() end)
    local g2 = tape2:gradient(loss2, { v2, gam, bet })

    local function close(a, b, what)
      local scale = math.max(1, maxabs(b))
      local err = maxabs(a:reshape(a:numel()) - b:reshape(b:numel()))
      T.ok(err <= 1e-4 * scale, ("%s: max |difference| %.3g (scale %.3g)"):format(what, err, scale))
    end
    close(y, y2, "y")
    close(g[1], g2[1], "dx")
    close(g[2], g2[2], "dgamma")
    close(g[3], g2[3], "dbeta")
  end)
end

T.done()
