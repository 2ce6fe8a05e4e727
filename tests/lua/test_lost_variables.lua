-- test_lost_variables.lua - a model whose variables a strategy lost (a dead
-- parameter server sets model._lost; tests/conformance's ps_dead_weights_raise
-- kills a real one) refuses every read until load_weights or
-- BackupAndRestore restores its variables (issue 27, item 4).
local T = dofile("tests/lua/testlib.lua")

local DIR = T.tmpdir()
local x, y = tensor.ones({ 8, 2 }), tensor.zeros({ 8, 1 })
local LOST = "its variables lived on parameter server ps 0 (pid 1) and the values here are stale"

local function trained()
  local m = nn.Sequential { nn.Dense(1) }
  m:compile { optimizer = "sgd", loss = "mse" }
  m:fit(x, y, { epochs = 1, batch_size = 4, verbose = 0 })
  return m
end

-- every read in reads raises, naming the dead ps
local function all_raise(reads, prefix)
  for what, f in pairs(reads) do
    local ok, err = pcall(f)
    T.ok(not ok and tostring(err):find("parameter server ps 0", 1, true), prefix .. what .. ": " .. tostring(err))
  end
end

local function refuses_every_read(m)
  local reads = {
    weights = function() return m.weights end,
    trainable_variables = function() return m.trainable_variables end,
    non_trainable_variables = function() return m.non_trainable_variables end,
    get_weights = function() return m:get_weights() end,
    call = function() return m(x) end,
    predict = function() return m:predict(x, { verbose = 0 }) end,
    evaluate = function() return m:evaluate(x, y, { verbose = 0 }) end,
    save = function() return m:save(DIR .. "/stale.model") end,
    save_weights = function() return m:save_weights(DIR .. "/stale.safetensors") end,
  }
  all_raise(reads, "")
end

T.test("a model with lost variables refuses every read; load_weights restores it", function()
  local m = trained()
  local p = DIR .. "/w.safetensors"
  m:save_weights(p)
  local before = m.weights[1]:clone()
  m._lost = LOST
  refuses_every_read(m)
  T.raises(function() return m.weights end, "model.weights: " .. LOST)
  m:load_weights(p)
  T.eq((m.weights[1] - before):abs():max():item(), 0)
  T.ok(m:predict(x, { verbose = 0 }))
end)

T.test("a failed load_weights leaves the model refusing reads", function()
  local m = trained()
  m._lost = LOST
  T.raises(function() m:load_weights(DIR .. "/missing.safetensors") end, "missing.safetensors")
  T.raises(function() return m.weights end, LOST)
end)

T.test("BackupAndRestore's checkpoint restores a model with lost variables", function()
  local m = trained()
  local dir = DIR .. "/backup"
  m:fit(x, y, { epochs = 2, batch_size = 4, verbose = 0,
    callbacks = { callbacks.BackupAndRestore { backup_dir = dir, delete_checkpoint = false } } })
  m._lost = LOST
  refuses_every_read(m)
  m:fit(x, y, { epochs = 3, batch_size = 4, verbose = 0,
    callbacks = { callbacks.BackupAndRestore { backup_dir = dir } } })
  T.ok(m.weights[1], "the weights read again")
end)

-- a reference taken before the variables were lost (a held weight, a view of
-- it, an optimizer's) must refuse every read too, not give stale values
local function held_refs_refuse(refs)
  for name, w in pairs(refs) do
    local reads = {
      element = function() return w:reshape({ -1 })[0] end,
      item = function() return w:reshape({ -1, 1 })[0]:item() end,
      totable = function() return w:totable() end,
      tostring = function() return tostring(w) end,
      arithmetic = function() return w + 1 end,
      clone = function() return w:clone() end,
      assign_from = function() return tensor.zeros(w.shape):assign(w) end,
      assign_add = function() return w:assign_add(tensor.zeros(w.shape)) end,
      save = function() return ldist.io.save_safetensors(DIR .. "/held.safetensors", { w = w }) end,
    }
    all_raise(reads, name .. " ")
  end
end

T.test("a reference held before the loss refuses reads until load_weights", function()
  local m = trained()
  local p = DIR .. "/held.safetensors0"
  m:save_weights(p)
  local w, b = m.weights[1], m.trainable_variables[2]
  local row = w[1]                      -- a view shares the variable's memory
  local before = w:clone()
  m._lost = LOST
  held_refs_refuse({ weight = w, bias = b, view = row })
  m:load_weights(p)
  T.eq((w - before):abs():max():item(), 0, "the held reference reads the restored values")
  T.ok(row:totable() and tostring(b), "the view and the bias read again")
end)

T.test("BackupAndRestore clears the mark on held references", function()
  local m = trained()
  local dir = DIR .. "/backup2"
  m:fit(x, y, { epochs = 1, batch_size = 4, verbose = 0,
    callbacks = { callbacks.BackupAndRestore { backup_dir = dir, delete_checkpoint = false } } })
  local w = m.weights[1]
  m._lost = LOST
  held_refs_refuse({ weight = w })
  m:fit(x, y, { epochs = 2, batch_size = 4, verbose = 0,
    callbacks = { callbacks.BackupAndRestore { backup_dir = dir } } })
  T.ok(w:totable(), "the held weight reads again")
end)

os.execute("rm -rf '" .. DIR .. "'")
T.done()
