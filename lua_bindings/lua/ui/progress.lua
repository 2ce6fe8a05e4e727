-- ui/progress.lua - ldist.progress: the one-line progress bar of model:fit.
--
--   local bar = ldist.progress.new{total = 469, title = "Epoch 1/5"}
--   for step = 1, 469 do ... bar:update(step, {loss = l, accuracy = a}) end
--   bar:finish{loss = l, accuracy = a}
--
-- On a terminal the line is redrawn in place (at most every 0.1 s); when the
-- output is not a terminal only the final line is printed, plus a line every
-- 10% when the run is slow enough for that to help (a log file of a long
-- epoch). Rendering goes through ldist.progress.backend, a table of functions
-- (start, update, finish; each gets the bar and its state), so the Jupyter
-- kernel can draw the same bar with update_display_data.
local ldist = ...

local progress = {}
ldist.progress = progress

local function now() return (ldist.walltime or os.clock)() end

local function is_tty(f)
  if not ldist.isatty then return false end
  local ok, r = pcall(ldist.isatty, f or io.stdout)
  return ok and r
end

local function utf8_terminal()
  local loc = os.getenv("LC_ALL") or os.getenv("LC_CTYPE") or os.getenv("LANG") or ""
  return loc:upper():find("UTF%-?8") ~= nil
end

-- ---- text -----------------------------------------------------------------

local function fmt_time(s)
  if not s or s ~= s or s == math.huge then return "?" end
  if s < 60 then return ("%.1fs"):format(s) end
  s = math.floor(s + 0.5)
  if s >= 3600 then return ("%d:%02d:%02d"):format(s // 3600, s % 3600 // 60, s % 60) end
  return ("%d:%02d"):format(s // 60, s % 60)
end

local function plural(unit) return unit:sub(-1) == "s" and unit or unit .. "s" end

local function fmt_rate(rate, unit)
  if not rate or rate <= 0 or rate ~= rate then return nil end
  if rate >= 1 then return ("%.1f %s/s"):format(rate, plural(unit)) end
  return ("%.2f s/%s"):format(1 / rate, unit)
end

-- Metric names in display order: loss first, then the rest alphabetically,
-- validation metrics last. `values` is a map, or an array of {name, value}.
local function ordered_values(values)
  local list = {}
  if values == nil then return list end
  if #values > 0 and type(values[1]) == "table" then
    for _, p in ipairs(values) do list[#list + 1] = { p[1], p[2] } end
    return list
  end
  for k, v in pairs(values) do list[#list + 1] = { tostring(k), v } end
  local function rank(n)
    local val = n:match("^val_") and 10 or 0
    local base = n:gsub("^val_", "")
    return val + (base == "loss" and 0 or 1)
  end
  table.sort(list, function(a, b)
    local ra, rb = rank(a[1]), rank(b[1])
    if ra ~= rb then return ra < rb end
    return a[1] < b[1]
  end)
  return list
end

local function fmt_value(v)
  if math.type(v) == "float" then return ("%.4f"):format(v) end
  if math.type(v) == "integer" then return tostring(v) end
  -- a 0-d tensor or anything with :item()
  local ok, x = pcall(function() return v:item() end)
  if ok and type(x) == "number" then return ("%.4f"):format(x) end
  return tostring(v)
end

local EIGHTHS = { "▏", "▎", "▍", "▌", "▋", "▊", "▉" }

local function draw_bar(frac, width, unicode)
  frac = math.max(0, math.min(1, frac))
  if unicode then
    local cells = frac * width
    local full = math.floor(cells)
    local part = math.floor((cells - full) * 8)
    local s = ("█"):rep(full)
    if full < width then
      s = s .. (part > 0 and EIGHTHS[part] or " ") .. (" "):rep(width - full - 1)
    end
    return "│" .. s .. "│"
  end
  local full = math.floor(frac * width)
  if full >= width then return "[" .. ("="):rep(width) .. "]" end
  return "[" .. ("="):rep(full) .. ">" .. ("."):rep(width - full - 1) .. "]"
end

-- The pieces of a bar's line: the head (title, count, bar, time, rate) and
-- the values ("loss: 0.5123"), each a string. opts as progress.format's.
local function pieces(state, opts)
  local unit = state.unit or "step"
  local head = {}
  if state.title and state.title ~= "" then head[#head + 1] = state.title end
  if state.total and state.total > 0 then
    local w = #tostring(state.total)
    head[#head + 1] = ("%" .. w .. "d/%d"):format(state.done, state.total)
    local bw = opts.width or 30
    if bw > 0 then head[#head + 1] = draw_bar(state.done / state.total, bw, opts.unicode) end
  else
    head[#head + 1] = ("%d %s"):format(state.done, plural(unit))
  end
  if state.finished or not state.total then
    head[#head + 1] = fmt_time(state.elapsed)
  else
    head[#head + 1] = fmt_time(state.elapsed) .. "<" .. fmt_time(state.eta)
  end
  local rate = not opts.no_rate and fmt_rate(state.rate, unit)
  if rate then head[#head + 1] = rate end
  local vals = {}
  for _, p in ipairs(ordered_values(state.values)) do
    vals[#vals + 1] = ("%s: %s"):format(p[1], fmt_value(p[2]))
  end
  return head, vals
end

-- progress.format(state, {unicode=bool, width=n, no_rate=bool, sep="  "}) -> one line of text.
-- state: title, done, total (or nil), elapsed, rate, eta, values, finished, unit.
-- width is the bar's (0: no bar).
function progress.format(state, opts)
  opts = opts or {}
  local head, vals = pieces(state, opts)
  for _, v in ipairs(vals) do head[#head + 1] = v end
  return table.concat(head, opts.sep or "  ")
end

local function ulen(s) return utf8.len(s) or #s end

-- progress.lines(state, {unicode=, width=}, columns) -> the lines a bar
-- shows in `columns` (ldist.width() when nil): one line when it fits,
-- narrowing the bar (to 5 cells), then with single spaces; never a number.
-- When the values cannot share the line, they go on the lines below it,
-- two spaces in, as many per line as fit.
function progress.lines(state, opts, n)
  opts = opts or {}
  n = n or (ldist.width and ldist.width()) or 80
  local bw = opts.width or 30
  local function line_with(w, no_rate, sep)
    return progress.format(state, { unicode = opts.unicode, width = w, no_rate = no_rate, sep = sep })
  end
  for _, sep in ipairs({ "  ", " " }) do
    local line = line_with(bw, false, sep)
    local over = ulen(line) - n
    if over <= 0 then return { line } end
    if state.total and bw - over >= 5 then return { line_with(bw - over, false, sep) } end
  end
  -- the head on its line (its bar as wide as fits, none below 5; the rate
  -- only when the line holds it), the values below
  local function head_line(w, no_rate)
    return table.concat((pieces(state, { unicode = opts.unicode, width = w, no_rate = no_rate })), " ")
  end
  local no_rate = ulen(head_line(0, false)) > n
  local head = head_line(0, no_rate)
  local room = n - ulen(head) - 3            -- a separator and the bar's two ends
  if state.total and room >= 5 then head = head_line(math.min(bw, room), no_rate) end
  if ulen(head) > n then head = head:sub(1, (utf8.offset(head, n + 1) or (n + 1)) - 1) end
  local out, cur = { head }, nil
  local _, vals = pieces(state, opts)
  for _, v in ipairs(vals) do
    if cur and ulen(cur) + 2 + ulen(v) <= n then
      cur = cur .. "  " .. v
    else
      if cur then out[#out + 1] = cur end
      cur = "  " .. v
    end
  end
  if cur then out[#out + 1] = cur end
  return out
end

-- ---- the default backend: a terminal, or plain lines --------------------------

-- Draw lines in place of the bar._drawn lines drawn before (the cursor
-- goes up to the first of them; each line is cleared to its end).
local function redraw(bar, lines, final)
  local f = bar.file
  local up = (bar._drawn or 1) - 1
  f:write("\r", up > 0 and ("\27[%dF"):format(up) or "")
  for i, l in ipairs(lines) do
    f:write(l, "\27[K", (i < #lines or final) and "\n" or "")
  end
  -- what a taller drawing left below: cleared
  if not final and (bar._drawn or 1) > #lines then f:write("\27[J") end
  bar._drawn = #lines
  f:flush()
end

-- the columns a bar may fill on this terminal (one short of its width: a
-- full line would wrap the cursor on some terminals)
local function tty_columns()
  local cols = ldist.termsize and ldist.termsize()
  return cols and math.max(cols - 1, 20) or nil
end

progress.terminal = {
  start = function(bar)
    bar._tty = is_tty(bar.file)
    bar._unicode = bar._tty and utf8_terminal()
    bar._last_draw = -math.huge
    bar._next_mark = 0.1
  end,
  update = function(bar, state)
    local t = now()
    if bar._tty then
      if t - bar._last_draw < 0.1 and state.done ~= state.total then return end
      bar._last_draw = t
      redraw(bar, progress.lines(state, { unicode = bar._unicode, width = bar.width }, tty_columns()), false)
    elseif state.total and state.total > 0 and state.elapsed >= 2 then
      -- a slow run into a log: one line per 10% of the way
      local frac = state.done / state.total
      if frac >= bar._next_mark and frac < 1 then
        bar._next_mark = math.floor(frac * 10 + 1e-9) / 10 + 0.1
        bar.file:write(table.concat(progress.lines(state, { width = bar.width }), "\n"), "\n")
        bar.file:flush()
      end
    end
  end,
  finish = function(bar, state)
    if bar._tty then
      redraw(bar, progress.lines(state, { unicode = bar._unicode, width = bar.width }, tty_columns()), true)
    else
      bar.file:write(table.concat(progress.lines(state, { width = bar.width }), "\n"), "\n")
      bar.file:flush()
    end
  end,
}
progress.backend = progress.terminal

-- The plain-text fallback: nothing while the bar runs, its final line when
-- it finishes (one line per epoch of fit). For front ends that cannot
-- redraw an output in place: `jupyter console` and other clients that
-- ignore update_display_data show only a bar's first state otherwise.
progress.plain = {
  finish = function(bar, state)
    bar.file:write(table.concat(progress.lines(state, { width = bar.width }), "\n"), "\n")
    bar.file:flush()
  end,
}

-- progress.style: "auto" draws bars the front end's way (redrawn in place on
-- a terminal and in a notebook, plain lines into a file); "text" prints only
-- each bar's final line, whatever the front end. The kernel cannot learn
-- from the protocol whether its client shows display updates (a notebook
-- and `jupyter console` send the same requests), so this is asked, not
-- guessed: LDIST_PROGRESS=text in the environment of the kernel (e.g.
-- `LDIST_PROGRESS=text jupyter console --kernel ldist`) or
-- `ldist.progress.style = "text"` in a cell.
progress.style = os.getenv("LDIST_PROGRESS") == "text" and "text" or "auto"

-- ---- the bar ----------------------------------------------------------------------

local Bar = {}
Bar.__index = Bar
Bar.__name = "ldist.progress.Bar"

function progress.new(opts)
  opts = opts or {}
  local self = setmetatable({
    total = opts.total,
    title = opts.title,
    width = opts.width or 30,
    unit = opts.unit or "step",
    file = opts.file or io.stdout,
    backend = opts.backend or (progress.style == "text" and progress.plain) or progress.backend,
    done = 0,
    values = nil,
    started = now(),
    finished = false,
  }, Bar)
  if self.backend.start then self.backend.start(self) end
  return self
end

-- The bar's state, as backends and progress.format see it.
function Bar:state()
  local elapsed = now() - self.started
  local rate = elapsed > 0 and self.done / elapsed or nil
  local eta
  if self.total and rate and rate > 0 then eta = math.max(0, self.total - self.done) / rate end
  return {
    title = self.title, done = self.done, total = self.total, unit = self.unit,
    elapsed = elapsed, rate = rate, eta = eta, values = self.values, finished = self.finished,
  }
end

-- bar:update(done, values): `done` steps (or samples) so far; values = {loss = ..}.
function Bar:update(done, values)
  if self.finished then return self end
  self.done = done or self.done + 1
  if values ~= nil then self.values = values end
  if self.backend.update then self.backend.update(self, self:state()) end
  return self
end

-- bar:finish(values): the final line, with the steps actually done.
function Bar:finish(values)
  if self.finished then return self end
  if values ~= nil then self.values = values end
  self.finished = true
  if self.backend.finish then self.backend.finish(self, self:state()) end
  return self
end

Bar.__close = function(self) self:finish() end
Bar.__tostring = function(self) return progress.format(self:state(), { width = self.width }) end

ldist.docs[progress.new] = [[
ldist.progress.new{total = N, title = "Epoch 1/5", width = 30, unit = "step"} -> bar
A progress bar on one line: steps done/total, rate, elapsed<ETA and metrics.
  bar:update(done, {loss = 0.51, accuracy = 0.83})
  bar:finish({loss = 0.50, accuracy = 0.84})
Redrawn in place on a terminal and in a notebook; plain lines otherwise.
ldist.progress.backend (a table of start/update/finish functions) decides how
it is drawn; ldist.progress.style = "text" (or LDIST_PROGRESS=text in the
environment) prints only each bar's final line, for front ends that ignore
display updates such as `jupyter console`.]]
ldist.docs[progress.format] = [[
ldist.progress.format(state, {unicode = false, width = 30, no_rate = false, sep = "  "}) -> string
The one line of text a bar shows for `state` (title, done, total, elapsed,
rate, eta, values, finished, unit), as bar:state() returns it; width is the
bar's (0: none).]]
ldist.docs[progress.lines] = [[
ldist.progress.lines(state, {unicode = false, width = 30}, columns) -> {line, ...}
What a bar shows in `columns` (ldist.width() when nil): one line when it
fits, with a narrower bar, single spaces; otherwise the values go on the
lines below. Numbers are never cut.]]
ldist.docs[progress] = [[
progress bars (model:fit uses them): progress.new{total=, title=}, progress.style
ldist.progress.new{total = N, title = "..."} makes a bar (bar:update, bar:finish).
ldist.progress.style: "auto" (redrawn in place where the front end can) or
"text" (each bar's final line only: jupyter console, logs); the environment
variable LDIST_PROGRESS=text sets it at start.]]
