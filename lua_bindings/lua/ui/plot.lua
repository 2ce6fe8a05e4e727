-- ui/plot.lua - plot(): line charts of a training history or any series,
-- drawn in the terminal with Unicode braille and saved as SVG.
--
--   plot(history)                          -- {loss = {...}, accuracy = {...}, ...}
--   plot({0.9, 0.5, 0.3}, {title = "loss", save = "loss.svg"})
--   local p = plot(h); p:svg(); p:save("h.svg")
--
-- plot() returns a Plot. In the REPL (ldist.interactive) the value is shown
-- like any other, through its __tostring; in a script plot() shows it at
-- once through ldist.display, which the Jupyter kernel replaces. Any front
-- end can ask a Plot for its __mimebundle: {["image/svg+xml"] = svg,
-- ["text/plain"] = text}.
local ldist = ...

local Plot = {}
Plot.__index = Plot
Plot.__name = "ldist.Plot"

-- matplotlib's tab10, and the closest ANSI colours for the terminal
local COLORS = { "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf" }
local ANSI = { 34, 33, 32, 31, 35, 91, 95, 36 }
-- line styles, so series differ without colour too: solid, dashed, dotted, dash-dot
local STYLES = {
  { glyph = "━━", on = function() return true end, dash = nil },
  { glyph = "╍╍", on = function(k) return k % 6 < 4 end, dash = "7,4" },
  { glyph = "┈┈", on = function(k) return k % 3 == 0 end, dash = "2,3" },
  { glyph = "╌╌", on = function(k) return k % 8 < 4 or k % 8 == 6 end, dash = "8,3,2,3" },
}

local function finite(v) return type(v) == "number" and v == v and v ~= math.huge and v ~= -math.huge end

-- ---- data ---------------------------------------------------------------------

-- A Lua array of numbers from an array, or a tensor (or anything with
-- :totable / :tolist).
local function to_array(v)
  if type(v) == "table" and (v[1] ~= nil or next(v) == nil) and getmetatable(v) == nil then
    local out = {}
    for i = 1, #v do
      local x = v[i]
      if type(x) ~= "number" then
        local ok, item = pcall(function() return x:item() end)
        x = ok and item or 0 / 0
      end
      out[i] = x
    end
    return out
  end
  for _, m in ipairs({ "totable", "tolist" }) do
    local ok, t = pcall(function() return v[m](v) end)
    if ok and type(t) == "table" then return to_array(t) end
  end
  return nil
end

local function history_order(names)
  table.sort(names, function(a, b)
    local va, vb = a:match("^val_") and 1 or 0, b:match("^val_") and 1 or 0
    if va ~= vb then return va < vb end
    local la, lb = a:gsub("^val_", "") == "loss" and 0 or 1, b:gsub("^val_", "") == "loss" and 0 or 1
    if la ~= lb then return la < lb end
    return a < b
  end)
  return names
end

-- Normalise plot's first argument to a list of {name, y} and an x label.
local function series_of(data)
  if type(data) == "table" and type(data.history) == "table" then data = data.history end
  local one = to_array(data)
  if one and (#one == 0 or type(one[1]) == "number") then return { { name = "y", y = one } }, nil end
  if type(data) ~= "table" then
    error(("bad argument #1 to 'plot' (a table of numbers or a history expected, got %s)"):format(type(data)), 3)
  end
  local list = {}
  if data[1] ~= nil then                          -- an array of series
    for i, s in ipairs(data) do
      local y = to_array(s)
      if y then list[#list + 1] = { name = tostring(i), y = y } end
    end
    return list, nil
  end
  local names = {}
  for k, v in pairs(data) do
    if type(k) == "string" and to_array(v) then names[#names + 1] = k end
  end
  for _, k in ipairs(history_order(names)) do list[#list + 1] = { name = k, y = to_array(data[k]) } end
  if #list == 0 then error("bad argument #1 to 'plot' (no series of numbers in the table)", 3) end
  return list, "epoch"
end

-- ---- scales --------------------------------------------------------------------------

local function data_range(series)
  local ymin, ymax, n = math.huge, -math.huge, 0
  for _, s in ipairs(series) do
    n = math.max(n, #s.y)
    for _, v in ipairs(s.y) do
      if finite(v) then ymin = math.min(ymin, v); ymax = math.max(ymax, v) end
    end
  end
  if ymin > ymax then ymin, ymax = 0, 1 end
  if ymin == ymax then
    local d = ymin == 0 and 1 or math.abs(ymin) * 0.1
    ymin, ymax = ymin - d, ymax + d
  end
  return ymin, ymax, math.max(n, 1)
end

-- "Nice" ticks (1, 2, 5 x 10^k) covering [lo, hi]: list, first, last.
local function nice_ticks(lo, hi, count)
  local span = hi - lo
  local step = 10 ^ math.floor(math.log(span / count, 10))
  for _, m in ipairs({ 1, 2, 5, 10 }) do
    if span / (step * m) <= count then step = step * m; break end
  end
  local first = math.floor(lo / step + 1e-9) * step
  local last = math.ceil(hi / step - 1e-9) * step
  local ticks = {}
  for v = first, last + step * 0.5, step do ticks[#ticks + 1] = math.abs(v) < step * 1e-9 and 0 or v end
  return ticks, first, last
end
ldist._util.nice_ticks = nice_ticks   -- the timeline's axis too (distribute/timeline.lua)

local function fmt_num(v)
  if math.type(v) == "integer" or (v == math.floor(v) and math.abs(v) < 1e9) then
    return ("%d"):format(v)
  end
  return (("%.4g"):format(v))
end

-- ---- the terminal: braille ---------------------------------------------------------------

local BITS = { [0] = { [0] = 0x01, 0x02, 0x04, 0x40 }, { [0] = 0x08, 0x10, 0x20, 0x80 } }

local function color_wanted()
  if os.getenv("NO_COLOR") or (os.getenv("TERM") or "dumb") == "dumb" then return false end
  if not ldist.isatty then return false end
  local ok, tty = pcall(ldist.isatty, 1)
  return ok and tty
end

local function center(s, width)
  local len = utf8.len(s) or #s
  if len >= width then return s end
  return (" "):rep((width - len) // 2) .. s
end

function Plot:text(color)
  local o = self.opts
  local W = o.width or 60                     -- columns of the canvas
  local H = o.height or 12                    -- rows of the canvas
  local PW, PH = W * 2, H * 4
  local ymin, ymax, n = data_range(self.series)
  if o.ymin then ymin = o.ymin end
  if o.ymax then ymax = o.ymax end
  local ticks
  ticks, ymin, ymax = nice_ticks(ymin, ymax, math.max(2, math.min(5, H // 3)))
  local cells, owner = {}, {}                 -- [row][col] -> bits, series index
  for r = 0, H - 1 do cells[r], owner[r] = {}, {} end
  local function px(i) return n == 1 and PW // 2 or math.floor((i - 1) / (n - 1) * (PW - 1) + 0.5) end
  local function py(v) return math.floor((ymax - v) / (ymax - ymin) * (PH - 1) + 0.5) end
  local function dot(x, y, si)
    if x < 0 or x >= PW or y < 0 or y >= PH then return end
    local r, c = y // 4, x // 2
    cells[r][c] = (cells[r][c] or 0) | BITS[x % 2][y % 4]
    owner[r][c] = si
  end
  for si, s in ipairs(self.series) do
    local style = STYLES[(si - 1) % #STYLES + 1]
    local k = 0
    local prev
    for i, v in ipairs(s.y) do
      if finite(v) then
        local x1, y1 = px(i), py(v)
        if prev then                            -- a line from the previous point (Bresenham)
          local x0, y0 = prev[1], prev[2]
          local dx, dy = math.abs(x1 - x0), -math.abs(y1 - y0)
          local sx, sy = x0 < x1 and 1 or -1, y0 < y1 and 1 or -1
          local err = dx + dy
          while true do
            if style.on(k) then dot(x0, y0, si) end
            k = k + 1
            if x0 == x1 and y0 == y1 then break end
            local e2 = 2 * err
            if e2 >= dy then err = err + dy; x0 = x0 + sx end
            if e2 <= dx then err = err + dx; y0 = y0 + sy end
          end
        end
        dot(x1, y1, si)                         -- the data point itself, always
        prev = { x1, y1 }
      else
        prev = nil                              -- a gap at NaN
      end
    end
  end

  local labels = {}
  for _, v in ipairs(ticks) do
    local r = math.floor((ymax - v) / (ymax - ymin) * (H - 1) + 0.5)
    if r >= 0 and r < H and not labels[r] and not labels[r - 1] and not labels[r + 1] then labels[r] = fmt_num(v) end
  end
  local lw = 0
  for _, l in pairs(labels) do lw = math.max(lw, #l) end
  local lines = {}
  if o.title then lines[#lines + 1] = (" "):rep(lw + 2) .. center(o.title, W) end
  if o.ylabel then lines[#lines + 1] = o.ylabel end
  for r = 0, H - 1 do
    local row = {}
    for c = 0, W - 1 do
      local bits = cells[r][c]
      if bits then
        local ch = utf8.char(0x2800 + bits)
        if color then ch = ("\27[%dm%s\27[0m"):format(ANSI[(owner[r][c] - 1) % #ANSI + 1], ch) end
        row[#row + 1] = ch
      else
        row[#row + 1] = " "
      end
    end
    local label = labels[r]
    lines[#lines + 1] = ("%" .. lw .. "s %s"):format(label or "", label and "┤" or "│")
      .. table.concat(row):gsub("%s+$", "")
  end
  lines[#lines + 1] = (" "):rep(lw + 1) .. "└" .. ("─"):rep(W)
  local x0, x1 = fmt_num(self.x0), fmt_num(self.x0 + n - 1)
  local xl = (" "):rep(lw + 2) .. x0
  if n > 1 then xl = xl .. (" "):rep(math.max(1, W - #x0 - #x1)) .. x1 end
  lines[#lines + 1] = xl
  if o.xlabel then lines[#lines + 1] = (" "):rep(lw + 2) .. center(o.xlabel, W) end
  if #self.series > 1 or self.series[1].name ~= "y" then
    local leg = {}
    for si, s in ipairs(self.series) do
      local g = STYLES[(si - 1) % #STYLES + 1].glyph
      if color then g = ("\27[%dm%s\27[0m"):format(ANSI[(si - 1) % #ANSI + 1], g) end
      leg[#leg + 1] = g .. " " .. s.name
    end
    lines[#lines + 1] = (" "):rep(lw + 2) .. table.concat(leg, "   ")
  end
  return table.concat(lines, "\n")
end

-- ---- SVG ------------------------------------------------------------------------------------

local function xml(s)
  return (tostring(s):gsub("[&<>\"]", { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;", ['"'] = "&quot;" }))
end

function Plot:svg()
  local o = self.opts
  local Wp, Hp = o.svg_width or 640, o.svg_height or 400
  local left, right, top, bottom = 64, 20, o.title and 40 or 20, o.xlabel and 56 or 40
  local pw, ph = Wp - left - right, Hp - top - bottom
  local ymin, ymax, n = data_range(self.series)
  if o.ymin then ymin = o.ymin end
  if o.ymax then ymax = o.ymax end
  local yt, y0, y1 = nice_ticks(ymin, ymax, 6)
  ymin, ymax = y0, y1
  local xt = nice_ticks(self.x0, math.max(self.x0 + n - 1, self.x0 + 1), math.min(8, math.max(n - 1, 1)))
  local xlo, xhi = self.x0, math.max(self.x0 + n - 1, self.x0 + 1)
  local function sx(x) return left + (x - xlo) / (xhi - xlo) * pw end
  local function sy(v) return top + (ymax - v) / (ymax - ymin) * ph end
  local out = {}
  local function add(fmt, ...) out[#out + 1] = fmt:format(...) end
  add('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" '
    .. 'font-family="sans-serif" font-size="12">', Wp, Hp, Wp, Hp)
  add('<rect width="%d" height="%d" fill="white"/>', Wp, Hp)
  if o.title then add('<text x="%.1f" y="24" text-anchor="middle" font-size="15">%s</text>', left + pw / 2, xml(o.title)) end
  for _, v in ipairs(yt) do
    local y = sy(v)
    add('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e5e5e5"/>', left, y, left + pw, y)
    add('<text x="%d" y="%.1f" text-anchor="end" dominant-baseline="middle" fill="#444">%s</text>',
      left - 6, y, xml(fmt_num(v)))
  end
  for _, v in ipairs(xt) do
    if v >= xlo - 1e-9 and v <= xhi + 1e-9 then
      local x = sx(v)
      add('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#e5e5e5"/>', x, top, x, top + ph)
      add('<text x="%.1f" y="%d" text-anchor="middle" fill="#444">%s</text>', x, top + ph + 16, xml(fmt_num(v)))
    end
  end
  add('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#888"/>', left, top, pw, ph)
  for si, s in ipairs(self.series) do
    local color = COLORS[(si - 1) % #COLORS + 1]
    local dash = STYLES[(si - 1) % #STYLES + 1].dash
    local pts = {}
    local function flush()
      if #pts > 1 then
        add('<polyline fill="none" stroke="%s" stroke-width="2"%s points="%s"/>', color,
          dash and (' stroke-dasharray="%s"'):format(dash) or "", table.concat(pts, " "))
      end
      pts = {}
    end
    for i, v in ipairs(s.y) do
      if finite(v) then
        local x, y = sx(self.x0 + i - 1), sy(v)
        pts[#pts + 1] = ("%.1f,%.1f"):format(x, y)
        if #s.y <= 60 then add('<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s"/>', x, y, color) end
      else
        flush()
      end
    end
    flush()
  end
  if #self.series > 1 or self.series[1].name ~= "y" then
    local lx, ly = left + pw - 150, top + 10
    add('<rect x="%d" y="%d" width="140" height="%d" fill="white" fill-opacity="0.85" stroke="#ccc"/>',
      lx, ly, 20 * #self.series + 6)
    for si, s in ipairs(self.series) do
      local y = ly + 14 + (si - 1) * 20
      local dash = STYLES[(si - 1) % #STYLES + 1].dash
      add('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/>', lx + 8, y, lx + 32, y,
        COLORS[(si - 1) % #COLORS + 1], dash and (' stroke-dasharray="%s"'):format(dash) or "")
      add('<text x="%d" y="%d" dominant-baseline="middle">%s</text>', lx + 40, y, xml(s.name))
    end
  end
  if o.xlabel then add('<text x="%.1f" y="%d" text-anchor="middle">%s</text>', left + pw / 2, Hp - 12, xml(o.xlabel)) end
  if o.ylabel then
    add('<text x="16" y="%.1f" text-anchor="middle" transform="rotate(-90 16 %.1f)">%s</text>',
      top + ph / 2, top + ph / 2, xml(o.ylabel))
  end
  add("</svg>")
  return table.concat(out, "\n") .. "\n"
end

function Plot:save(path)
  local f, err = ldist.io._open_write(path)   -- never through a planted link
  if not f then error(("cannot save the plot: %s"):format(err), 2) end
  f:write(self:svg())
  f:close()
  return self
end

Plot.__tostring = function(self) return self:text(color_wanted()) end
Plot.__mimebundle = function(self)
  return { ["image/svg+xml"] = self:svg(), ["text/plain"] = self:text(false) }
end

-- A plot is shown with ldist.display (ui/display.lua), defined by the time
-- ldist.plot is called.

function ldist.plot(data, opts)
  opts = opts or {}
  if type(opts) ~= "table" then error("bad argument #2 to 'plot' (table expected, got " .. type(opts) .. ")", 2) end
  local series, xlabel = series_of(data)
  local o = {}
  for k, v in pairs(opts) do o[k] = v end
  if o.xlabel == nil then o.xlabel = xlabel end
  if o.width == nil then
    local cols = ldist.termsize and ldist.termsize()
    o.width = math.max(20, math.min(72, (cols or 80) - 16))
  end
  local p = setmetatable({ series = series, opts = o, x0 = o.x0 or 1 }, Plot)
  if o.save then p:save(o.save) end
  if o.show or (o.show == nil and not ldist.interactive) then ldist.display(p) end
  return p
end

ldist.docs[ldist.plot] = [[
plot(data [, opts]) -> Plot
Draw a line chart in the terminal (Unicode braille) and return a Plot.
data: a training history {loss = {...}, accuracy = {...}, val_loss = {...}},
an array of numbers (one series), an array of series, or a 1-D tensor.
opts: title, xlabel, ylabel, width, height (characters), ymin, ymax,
      save = "file.svg" (write an SVG), show (true: display now).
Plot methods: p:svg() -> SVG text, p:save(path), p:text().
In the REPL the returned Plot prints as the chart; in a script plot() shows
the chart at once; in Jupyter it shows as a picture.]]
ldist.docs["Plot"] = [[
Plot - a chart made by plot(data, opts).
  p:text([color])  the chart drawn with braille characters
  p:svg()          the chart as SVG text
  p:save(path)     write the SVG to a file]]
ldist.globals.plot = true
