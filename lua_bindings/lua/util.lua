-- util.lua - the prelude's private helpers (ldist._util): what its files share
-- with each other, one copy each, in one place instead of private fields
-- across the modules; not part of the API. Files add to it (never replace):
-- keras/training.lua puts as_dataset, is_arrays and nest here, ui/plot.lua
-- nice_ticks.
--   util.shape_str(shape)        "[2, 3]"
--   util.html_escape(s)          s with & < > " escaped, for the notebook's HTML
--   util.dedupe(values, numbers) a list in which no tensor appears twice
--   util.check_axis(fname, argn, axis, nd), util.share(rows, n, r)   (the strategies)
--   util.model_numbers(model), util.fmt_bytes(b), util.fmt_duration(s), util.boot_id()
--   util.as_dataset(x, y, opts, shuffle), util.is_arrays(v), util.nest   (keras/training.lua)
--   util.nice_ticks(lo, hi, count)                                       (ui/plot.lua)
local ldist = ...
local tensor = ldist.tensor

local util = {}
ldist._util = util

function util.shape_str(s) return "[" .. table.concat(s, ", ") .. "]" end

-- a function as bytecode for another process or a file: it may use no local
-- variable of its surroundings (upvalues other than _ENV), which would not
-- travel; `what` names it in the error
function util.dump_fn(fn, what, advice)
  local i = 1
  while true do
    local name = debug.getupvalue(fn, i)
    if not name then break end
    if name ~= "_ENV" then
      error(("%s uses the local variable '%s' and cannot be %s; make it use only its arguments and globals%s")
        :format(what, name, advice and advice.verb or "sent to the workers", advice and advice.tail or " (ldist, ...)"), 0)
    end
    i = i + 1
  end
  return string.dump(fn)
end

-- a constructor's options table (nil: {}): an unknown key is an error naming
-- it and the known ones, at the constructor's caller (a misspelt option is
-- never silently a default)
-- level: the error's level as error()'s, from check_opts's caller's caller (3)
function util.check_opts(name, opts, known, level)
  level = level or 3
  if opts == nil then return {} end
  if type(opts) ~= "table" then error(("bad argument #1 to '%s' (table expected, got %s)"):format(name, type(opts)), level) end
  for k in pairs(opts) do
    if not known[k] then
      local names = {}
      for kk in pairs(known) do names[#names + 1] = kk end
      table.sort(names)
      error(("bad argument #1 to '%s' (unknown option '%s'; options: %s)"):format(name, tostring(k), table.concat(names, ", ")), level)
    end
  end
  return opts
end

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

-- axis (integer, negative from the end) of a value with nd dimensions, as
-- 0-based; raises "bad argument #argn to 'fname'" at the caller's caller
function util.check_axis(fname, argn, axis, nd)
  if math.type(axis) ~= "integer" or axis < -nd or axis >= nd then
    error(("bad argument #%d to '%s' (axis %s out of range for a value with %d dimension%s)")
      :format(argn, fname, tostring(axis), nd, nd == 1 and "" or "s"), 3)
  end
  return axis % nd
end

-- Rows [lo, hi) of a batch of `rows` that replica r of n takes: floor(rows/n)
-- each, one more for the first rows % n. Every strategy splits batches so.
function util.share(rows, n, r)
  local base, extra = rows // n, rows % n
  local lo = r * base + math.min(r, extra)
  return lo, lo + base + (r < extra and 1 or 0)
end

-- the trainable variables of a built model and their element count (nil: not built)
function util.model_numbers(model)
  if not model or not model.built then return nil end
  local vars, count = model.trainable_variables, 0
  for _, v in ipairs(vars) do count = count + v:numel() end
  return #vars, count
end

-- a duration in the unit that reads best
function util.fmt_duration(s)
  if s >= 1 then return ("%.2f s"):format(s) end
  if s >= 1e-3 then return ("%.1f ms"):format(s * 1e3) end
  return ("%.0f us"):format(s * 1e6)
end
function util.fmt_bytes(b)
  if b >= 1e9 then return ("%.2f GB"):format(b / 1e9) end
  if b >= 1e6 then return ("%.2f MB"):format(b / 1e6) end
  if b >= 1e3 then return ("%.1f kB"):format(b / 1e3) end
  return ("%d B"):format(math.floor(b))
end

-- This machine's boot id: processes that share it share CLOCK_MONOTONIC
-- (ldist.clock), so their spans need no shifting (distribute/multiworker.lua's and the
-- parameter server's traces).
function util.boot_id()
  local f = io.open("/proc/sys/kernel/random/boot_id")
  local id = f and f:read("l")
  if f then f:close() end
  return id or (ldist._cluster and ldist._cluster.hostname()) or "?"
end
