-- keras/mixed_precision.lua - Keras's mixed precision: dtype policies and the
-- loss-scale optimizer, as `mixed_precision` (keras.mixed_precision):
--
--   mixed_precision.set_global_policy("mixed_bfloat16")   -- layers made from now on
--   local model = nn.Sequential{ nn.Dense(128, "relu"), nn.Dense(10) }
--   model.layers[1].compute_dtype        --> "bfloat16"; its variables stay float32
--   nn.Dense(10, {dtype = "float32"})    -- one layer's own policy (Keras's dtype=)
--
-- The engine holds the policies (ld_nn.h: ld_policy) and applies them in one
-- place, the layer call (ld_layer_call): float inputs are cast to the
-- compute dtype, products take half operands, the output is in the compute
-- dtype; variables stay float32 and their gradients come back float32.
-- Losses compute in float32 (half predictions are cast first, as Keras's
-- losses do). As Keras advises, a model's last activation may be given
-- dtype="float32" (nn.Activation("softmax", {dtype = "float32"})) so that
-- predictions are float32 too; with from_logits losses it is not needed.
--
-- LossScaleOptimizer(opt) turns on dynamic loss scaling in opt itself (the
-- one engine optimizer every strategy's update path applies): the training
-- step scales the loss, the update divides the gradients by the scale after
-- they are reduced across replicas and workers, skips the step and halves
-- the scale on any inf or NaN, and doubles it after dynamic_growth_steps good
-- steps in a row. model:compile wraps its optimizer so under mixed_float16,
-- as Keras does. Under ParameterServerStrategy each worker scales, checks
-- and unscales its own step's gradients before pushing them (distribute/ps_tasks.lua).
local ldist = ...
local nn, optim = ldist.nn, ldist.optim
local doc = ldist.document

local mp = {}
ldist.mixed_precision = mp
ldist.globals.mixed_precision = true

---------------------------------------------------------------- policies
local Policy = { __name = "ldist.Policy" }
Policy.__index = Policy
Policy.__tostring = function(p) return ('<Policy "%s">'):format(p.name) end
Policy.__eq = function(a, b) return a.name == b.name end
mp._Policy = Policy

local function policy_name(p, fname, level)
  if getmetatable(p) == Policy then return p.name end
  if type(p) ~= "string" then
    error(("bad argument #1 to '%s' (a policy name or a mixed_precision.Policy expected, got %s)")
      :format(fname, type(p)), level + 1)
  end
  return p
end

local function make_policy(name, fname, level)
  local ok, n, compute = pcall(nn._policy, policy_name(name, fname, level + 1))
  if not ok then error(("bad argument #1 to '%s' (%s)"):format(fname, tostring(n)), level + 1) end
  return setmetatable({ name = n, compute_dtype = compute, variable_dtype = "float32" }, Policy)
end

function mp.Policy(name) return make_policy(name, "Policy", 2) end
doc(mp.Policy, "mixed_precision.Policy", "mixed_precision.Policy(name) -> a dtype policy\n\n" ..
  "name: \"float32\", \"mixed_bfloat16\" or \"mixed_float16\". Fields: name, compute_dtype (what layers compute in),\n" ..
  "variable_dtype (always float32). Give one to a layer as dtype= (nn.Dense(10, {dtype = p})), or to\n" ..
  "set_global_policy.")

function mp.set_global_policy(policy)
  local p = make_policy(policy, "set_global_policy", 2)
  nn._policy(p.name, true)
end
doc(mp.set_global_policy, "mixed_precision.set_global_policy", "mixed_precision.set_global_policy(policy)\n\n" ..
  "The policy of the layers made from now on (a name or a Policy), as Keras's: \"mixed_bfloat16\" or\n" ..
  "\"mixed_float16\" make layers compute in that half dtype with float32 variables; \"float32\" goes back.\n" ..
  "Losses compute in float32. Under mixed_float16, model:compile wraps its optimizer in a LossScaleOptimizer.")

function mp.global_policy() return mp.Policy((nn._policy())) end
doc(mp.global_policy, "mixed_precision.global_policy", "mixed_precision.global_policy() -> the global Policy.")

---------------------------------------------------------------- loss scaling
local function is_optimizer(v)
  local mt = getmetatable(v)
  return type(v) == "userdata" and type(mt) == "table" and mt.__name == "ldist.Optimizer"
end

function mp.LossScaleOptimizer(inner, opts)
  if not is_optimizer(inner) then
    error(("bad argument #1 to 'LossScaleOptimizer' (an optimizer expected, got %s)"):format(type(inner)), 2)
  end
  if opts ~= nil and type(opts) ~= "table" then
    error(("bad argument #2 to 'LossScaleOptimizer' (options table expected, got %s)"):format(type(opts)), 2)
  end
  opts = opts or {}
  local known = { dynamic = true, initial_scale = true, dynamic_growth_steps = true }
  for k in pairs(opts) do
    if not known[k] then
      error(("bad argument #2 to 'LossScaleOptimizer' (unknown option '%s'; it takes dynamic, initial_scale, " ..
        "dynamic_growth_steps)"):format(tostring(k)), 2)
    end
  end
  optim._loss_scale(inner, { dynamic = opts.dynamic, initial_scale = opts.initial_scale,
    dynamic_growth_steps = opts.dynamic_growth_steps })
  return inner
end
doc(mp.LossScaleOptimizer, "mixed_precision.LossScaleOptimizer",
  "mixed_precision.LossScaleOptimizer(opt, {dynamic=true, initial_scale=2^15, dynamic_growth_steps=2000}) -> opt\n\n" ..
  "Dynamic loss scaling, as Keras's: the training step multiplies the loss by opt.dynamic_scale; the update\n" ..
  "divides the gradients by it (after they are summed across replicas and workers, so all decide alike),\n" ..
  "skips the step and halves the scale when any gradient is inf or NaN, and doubles the scale after\n" ..
  "dynamic_growth_steps good steps in a row. dynamic=false keeps initial_scale fixed (TF's). It turns\n" ..
  "loss scaling on in opt itself and returns it (opt.inner_optimizer is opt). In a custom loop:\n" ..
  "grads of opt:scale_loss(loss), then opt:apply_gradients(grads, vars) as usual.\n" ..
  "Under ParameterServerStrategy each worker keeps its own scale and checks its own step before pushing it\n" ..
  "(the ps shards, applying pushes as they come, could not agree to skip a step).")

-- opt:scale_loss(loss): the loss times the loss scale (the loss itself without one), as Keras's
function optim.Optimizer.scale_loss(self, loss)
  local ls = optim._loss_scale(self)
  if not ls then return loss end
  return loss * ls.scale
end
doc(optim.Optimizer.scale_loss, "Optimizer:scale_loss", "opt:scale_loss(loss) -> loss * opt.dynamic_scale for a " ..
  "LossScaleOptimizer (mixed_precision), the loss itself otherwise.\n\nTake the gradients of the scaled loss; " ..
  "opt:apply_gradients divides them by the scale again.")

-- compile's rule (Keras's Trainer.compile): a model under mixed_float16 trains with loss scaling
function mp._wrap_for(model, opt)
  if optim._loss_scale(opt) then return opt end
  local f16 = nn._policy() == "mixed_float16"
  for _, l in ipairs(not f16 and model.layers or {}) do
    if l.compute_dtype == "float16" then f16 = true; break end
  end
  if f16 then return mp.LossScaleOptimizer(opt) end
  return opt
end
ldist.internal(mp, "_wrap_for", "_Policy")

doc(mp, "mixed_precision", "mixed_precision: Keras's mixed precision\n\n" ..
  "set_global_policy(\"mixed_bfloat16\" | \"mixed_float16\" | \"float32\"), global_policy(), Policy(name),\n" ..
  "LossScaleOptimizer(opt, {...}). A layer's own policy: nn.Dense(10, {dtype = \"float32\"}).\n" ..
  "Variables stay float32; layers compute in the policy's compute dtype; losses in float32.")
