-- keras/layer_options.lua - Keras's initializers, regularizers and constraints
-- as objects: nn.initializers.HeNormal{seed = 3}, regularizers.L2(0.01),
-- constraints.MaxNorm(2). Each is Keras's serialized form
-- {class_name=, config={...}}, which the layers' options take as they take
-- a name ("he_normal"); the classes and their keys come from the engine
-- (nn._weight_option), so this file only gives them constructors.
local ldist = ...
local nn = ldist.nn
local doc = ldist.document

local OPTION = { __name = "ldist.LayerOption" }
OPTION.__index = OPTION
function OPTION.__tostring(o)
  local keys, parts = {}, {}
  for k in pairs(o.config) do keys[#keys + 1] = k end
  table.sort(keys)
  for _, k in ipairs(keys) do parts[#parts + 1] = ("%s=%s"):format(k, tostring(o.config[k])) end
  return ("%s(%s)"):format(o.class_name, table.concat(parts, ", "))
end
function OPTION:get_config() return self.config end

-- a constructor for class `cn` of `kind`: positional values in Keras's
-- order (regularizers.L1L2(0.01, 0.02)) or an options table ({l2 = 0.01})
local function constructor(kind, cn)
  local _, keys = nn._weight_option(kind, cn)
  return function(...)
    local config = {}
    local a = ...
    if type(a) == "table" and select("#", ...) == 1 then
      for k, v in pairs(a) do config[k] = v end
    else
      local n = select("#", ...)
      if n > #keys then
        error(("%s takes at most %d argument%s (%s), got %d"):format(cn, #keys, #keys == 1 and "" or "s",
          table.concat(keys, ", "), n), 2)
      end
      for i = 1, n do config[keys[i]] = (select(i, ...)) end
    end
    local ok, o = pcall(nn._weight_option, kind, { class_name = cn, config = config })
    if not ok then error(o, 2) end
    return setmetatable(o, OPTION)
  end
end

local function module_of(kind, title)
  local m = {}
  for _, cn in ipairs(nn._weight_option(kind)) do
    m[cn] = constructor(kind, cn)
    local _, keys = nn._weight_option(kind, cn)
    local call = #keys == 0 and ("%s.%s()"):format(title, cn)
      or ("%s.%s(%s) or %s.%s{%s=}"):format(title, cn, table.concat(keys, ", "), title, cn, table.concat(keys, "=, "))
    doc(m[cn], title .. "." .. cn, ("%s\n\nKeras's %s %s; pass it as a layer's %s option."):format(call, cn, kind,
      kind == "initializer" and "*_initializer" or kind == "regularizer" and "*_regularizer" or "*_constraint"))
  end
  return m
end

nn.initializers = module_of("initializer", "nn.initializers")
local regularizers = module_of("regularizer", "regularizers")
local constraints = module_of("constraint", "constraints")
nn.regularizers, nn.constraints = regularizers, constraints
ldist.regularizers, ldist.constraints = regularizers, constraints
ldist.globals.regularizers, ldist.globals.constraints = true, true

doc(regularizers, "regularizers", "regularizers\n\nKeras's weight regularizers: L1(l1=0.01), L2(l2=0.01), L1L2(l1=0, l2=0).\n" ..
  "A layer's kernel_regularizer, bias_regularizer (recurrent_, embeddings_) and activity_regularizer\n" ..
  "take one (or its name, \"l2\"); model.losses lists the terms and fit adds them to the loss, divided by\n" ..
  "the number of replicas under a strategy (tf.nn.scale_regularization_loss).")
doc(constraints, "constraints", "constraints\n\nKeras's weight constraints: MaxNorm(max_value=2, axis=0), NonNeg(),\n" ..
  "UnitNorm(axis=0), MinMaxNorm(min_value=0, max_value=1, rate=1, axis=0). A layer's kernel_constraint\n" ..
  "and bias_constraint take one (or its name, \"max_norm\"); the optimizer applies it after each update.")
doc(nn.initializers, "nn.initializers", "nn.initializers\n\nKeras's initializers: GlorotUniform, GlorotNormal, " ..
  "HeNormal, HeUniform, LecunNormal,\nLecunUniform, Zeros, Ones, Constant{value=}, RandomNormal{mean=, stddev=}, " ..
  "RandomUniform{minval=, maxval=},\nTruncatedNormal{mean=, stddev=}, Orthogonal{gain=}; each takes a seed " ..
  "(the same values at every call).\nA layer's kernel_initializer, bias_initializer, recurrent_initializer and " ..
  "embeddings_initializer take one\nor its name (\"he_normal\").")

-- model:_regularization_loss() -> the sum of model.losses as a number (0
-- without any): what Keras's evaluate adds to each batch's loss (its
-- test_step computes the loss with the model's losses, as training does)
function nn.Model:_regularization_loss()
  local total = 0
  for _, l in ipairs(self.losses) do total = total + l:item() end
  return total
end
