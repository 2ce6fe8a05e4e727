-- util.lua - the prelude's private helpers (ldist._util): what its files share
-- with each other, one copy each, in one place instead of private fields
-- across the modules; not part of the API. Files add to it (never replace):
-- keras/training.lua puts as_dataset, is_arrays and nest here, ui/plot.lua
-- nice_ticks.
--   util.shape_str(shape)        "[2, 3]"
--   util.html_escape(s)          s with & < > " escaped, for the notebook's HTML
--   util.dedupe(values, numbers) a list in which no tensor appears twice
--   util.as_dataset(x, y, opts, shuffle), util.is_arrays(v), util.nest   (keras/training.lua)
--   util.nice_ticks(lo, hi, count)                                       (ui/plot.lua)
local ldist = ...
local tensor = ldist.tensor

local util = {}
ldist._util = util

function util.shape_str(s) return "[" .. table.concat(s, ", ") .. "]" end

function util.html_escape(s)
  return (s:gsub("[&<>\"]", { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;", ['"'] = "&quot;" }))
end

-- A tensor listed twice (one gradient for two variables) must be reduced
-- once: its later places get a copy. numbers=true makes numbers tensors.
function util.dedupe(values, numbers)
  local seen, out = {}, {}
  for i, v in ipairs(values) do
    if numbers and type(v) == "number" then v = tensor.new(v) end
    if seen[v] then out[i] = v:clone() else out[i] = v; seen[v] = true end
  end
  return out
end
