-- distribute/timeline.lua - the one timeline renderer of every strategy, and the
-- table that trace_summary() prints.
--
-- A strategy that traces (Mirrored, MultiWorkerMirrored, ParameterServer)
-- hands distribute._timeline a description:
--
--   { title = "MirroredStrategy", subtitle = "2 replicas on cpu:0, cpu:1",
--     rows = { { who = "replica 0", label = "replica 0 (cpu:0)",
--                spans = { {kind = "forward", t0 = s, t1 = s, step = 3, bytes = n, note = "..."}, ... } }, ... },
--     waits_for = true,        -- a wait is for the other rows (synchronous): "replica 0 waits 0.8 ms for replica 1"
--     notes = { "..." } }      -- lines under the legend: what could not be separated, clock offsets
--
-- and gets a Timeline: t:svg() (an SVG with a title, a time axis with nice
-- ticks and units, step boundaries and numbers, phases coloured with a
-- legend, the waits marked and listed, a hover <title> on every span),
-- t:text() (the same as a text bar chart for the terminal), t:save(path),
-- and a __mimebundle that shows it inline in a notebook (text/html holding
-- the <svg> itself, so hovers work; image/svg+xml for the front ends that
-- only take pictures). opts.steps = {a, b} keeps steps a..b (zoom).
-- distribute.compare_timelines{t1, t2} draws two on one time scale.
local ldist = ...
local distribute, docs = ldist.distribute, ldist.docs
if not distribute then return end


-- the phases, in the order of a step, with their colours (Tableau 10) and
-- the letters of the text chart
local KINDS = {
  { "input", "input pipeline", "#9467bd", "i" },
  { "pull", "pull weights", "#54a24b", "<" },
  { "forward", "forward", "#4c78a8", "F" },
  { "backward", "backward", "#72b7b2", "B" },
  { "compute", "compute (phase not separated)", "#9ecae9", "C" },
  { "allreduce", "all-reduce", "#f58518", "A" },
  { "push", "push gradients", "#e45756", ">" },
  { "optimizer", "optimizer update", "#eeca3b", "O" },
  { "apply", "apply pushed gradients", "#b279a2", "U" },
  { "wait", "wait", "#c7c7c7", "." },
}
local KIND = {}
for i, k in ipairs(KINDS) do KIND[k[1]] = { order = i, label = k[2], color = k[3], letter = k[4] } end
local function kind_of(name) return KIND[name] or { order = 99, label = name, color = "#999999", letter = "?" } end


local util = ldist._util
local esc, dur, bytes_str = util.html_escape, util.fmt_duration, util.fmt_bytes

-- Nice ticks (1, 2, 5 x 10^k) over [0, span] seconds, in ms below 2 s:
-- {seconds...}, unit name, seconds per unit
local function time_ticks(span, count)
  local unit, per = "ms", 1e-3
  if span >= 2 then unit, per = "s", 1 elseif span < 1e-3 then unit, per = "us", 1e-6 end
  local u = math.max(span / per, 1e-9)
  local ticks = ldist._util.nice_ticks(0, u, count)     -- ui/plot.lua's, in the unit; kept within the span
  local step = #ticks > 1 and ticks[2] - ticks[1] or u
  local out = {}
  for _, t in ipairs(ticks) do if t <= u + step * 1e-9 then out[#out + 1] = t * per end end
  return out, unit, per, step
end
local function tick_label(v, unit, per, step)
  local x = v / per
  local digits = step >= 1 and 0 or math.min(3, math.ceil(-math.log(step, 10) - 1e-9))
  return ("%." .. digits .. "f %s"):format(x, unit)
end

-- a span {kind=, t0=, t1=, ...} from either form ({kind, start, end, step} as trace_take gives)
local function norm(s)
  if s.kind then return s end
  return { kind = s[1], t0 = s[2], t1 = s[3], step = (s[4] and s[4] > 0) and s[4] or nil, bytes = s.bytes, note = s.note }
end

---------------------------------------------------------------- the model of a timeline
local Timeline = { __name = "ldist.Timeline" }
Timeline.__index = Timeline
distribute.TimelineClass = Timeline
ldist.internal(distribute, "TimelineClass")

-- keep what opts.steps selects; compute the steps' extents, waits, kinds
local function prepare(desc, opts)
  opts = opts or {}
  local lo_step, hi_step
  if opts.steps ~= nil then
    if type(opts.steps) == "number" then lo_step, hi_step = opts.steps, opts.steps
    elseif type(opts.steps) == "table" and type(opts.steps[1]) == "number" then
      lo_step, hi_step = opts.steps[1], opts.steps[2] or opts.steps[1]
    else error("timeline: steps must be a step number or {first, last}", 3) end
  end
  local rows, t_lo, t_hi, steps, kinds = {}, math.huge, -math.huge, {}, {}
  -- the time range of the selected steps, to keep the spans of no step inside it
  local sel_lo, sel_hi = math.huge, -math.huge
  if lo_step then
    for _, row in ipairs(desc.rows) do
      for _, s in ipairs(row.spans) do
        s = norm(s)
        if s.step and s.step >= lo_step and s.step <= hi_step then
          sel_lo, sel_hi = math.min(sel_lo, s.t0), math.max(sel_hi, s.t1)
        end
      end
    end
  end
  for i, row in ipairs(desc.rows) do
    local list = {}
    for _, s in ipairs(row.spans) do
      s = norm(s)
      local keep = s.t1 > s.t0 or s.kind == "push" or s.kind == "pull"
      if keep and lo_step then
        if s.step then keep = s.step >= lo_step and s.step <= hi_step
        else keep = s.t0 >= sel_lo and s.t1 <= sel_hi end
      end
      if keep then
        list[#list + 1] = s
        t_lo, t_hi = math.min(t_lo, s.t0), math.max(t_hi, s.t1)
        kinds[s.kind] = true
        if s.step then
          local st = steps[s.step] or { t0 = math.huge, t1 = -math.huge }
          steps[s.step] = st
          st.t0, st.t1 = math.min(st.t0, s.t0), math.max(st.t1, s.t1)
        end
      end
    end
    table.sort(list, function(a, b) return a.t0 < b.t0 end)
    rows[i] = { who = row.who or ("row " .. (i - 1)), label = row.label or row.who, spans = list }
  end
  local step_list = {}
  for n, st in pairs(steps) do step_list[#step_list + 1] = { n = n, t0 = st.t0, t1 = st.t1 } end
  table.sort(step_list, function(a, b) return a.n < b.n end)
  -- waits: per row and step, the time waited; a synchronous wait is for the
  -- row that arrived last (waited least) in that step
  local waits = {}
  for _, st in ipairs(step_list) do
    local per, any = {}, false
    for r, row in ipairs(rows) do
      local w, at = 0, nil
      for _, s in ipairs(row.spans) do
        if s.kind == "wait" and s.step == st.n then w = w + (s.t1 - s.t0); at = at or s end
      end
      per[r] = { w = w, at = at }
      if w > 0 then any = true end
    end
    if any then
      local last = 1
      for r = 2, #rows do if per[r].w < per[last].w then last = r end end
      for r = 1, #rows do
        if per[r].w > 0 and r ~= last then
          waits[#waits + 1] = { row = r, step = st.n, w = per[r].w, span = per[r].at, for_row = desc.waits_for and last or nil }
        end
      end
    end
  end
  -- waits of no step (a worker idle between tasks)
  for r, row in ipairs(rows) do
    for _, s in ipairs(row.spans) do
      if s.kind == "wait" and not s.step then waits[#waits + 1] = { row = r, w = s.t1 - s.t0, span = s, note = s.note } end
    end
  end
  table.sort(waits, function(a, b) return a.w > b.w end)
  local kind_list = {}
  for k in pairs(kinds) do kind_list[#kind_list + 1] = k end
  table.sort(kind_list, function(a, b) return kind_of(a).order < kind_of(b).order end)
  local empty = t_lo == math.huge
  if empty then t_lo, t_hi = 0, 0 end
  -- marks: moments drawn across the rows (a kill), on the clock of the spans
  local marks = {}
  if opts.marks ~= nil then
    if type(opts.marks) ~= "table" then error("timeline: marks must be a list of {at = seconds, text = \"...\"}", 3) end
    for i, mk in ipairs(opts.marks) do
      if type(mk) ~= "table" or type(mk.at) ~= "number" then
        error(("timeline: mark %d needs at = a time in seconds (ldist.clock())"):format(i), 3)
      end
      marks[#marks + 1] = { at = mk.at, text = tostring(mk.text or "") }
      if not empty then t_lo, t_hi = math.min(t_lo, mk.at), math.max(t_hi, mk.at) end
    end
  end
  return { title = desc.title or "timeline", subtitle = desc.subtitle, rows = rows, steps = step_list, waits = waits,
    kinds = kind_list, notes = desc.notes or {}, t0 = t_lo, t1 = t_hi, empty = empty,
    waits_for = desc.waits_for, empty_text = desc.empty_text,
    async = desc.async, marks = marks }
end

local function wait_text(m, w)
  local who = m.rows[w.row].who
  if w.for_row then
    return ("%s waits %s for %s%s"):format(who, dur(w.w), m.rows[w.for_row].who, w.step and (" (step %d)"):format(w.step) or "")
  end
  return ("%s waits %s%s%s"):format(who, dur(w.w), w.step and (" in step %d"):format(w.step) or "", w.note and (" " .. w.note) or "")
end

local function step_range_text(m)
  if #m.steps == 0 then return nil end
  local a, b = m.steps[1].n, m.steps[#m.steps].n
  return a == b and ("step %d"):format(a) or ("steps %d-%d"):format(a, b)
end

---------------------------------------------------------------- SVG
-- text cut into lines of at most n characters, at spaces
local function wrap(text, n)
  local lines, cur = {}, ""
  for word in text:gmatch("%S+") do
    if #cur > 0 and #cur + 1 + #word > n then lines[#lines + 1] = cur; cur = word
    else cur = #cur > 0 and (cur .. " " .. word) or word end
  end
  if #cur > 0 then lines[#lines + 1] = cur end
  return lines
end
local ROW_H, ROW_GAP, RIGHT = 24, 8, 20

-- one panel (a timeline) at y; scale: seconds shown across the plot width
-- (the same for every panel of a comparison). Returns the SVG lines, height.
local function svg_panel(m, W, span, max_ann, LEFT)
  local out = {}
  local function add(fmt, ...) out[#out + 1] = fmt:format(...) end
  local plot_w = W - LEFT - RIGHT
  local sx = plot_w / math.max(span, 1e-9)
  local function X(t) return LEFT + (t - m.t0) * sx end
  add('<text x="10" y="22" font-size="16" font-weight="bold">%s</text>', esc(m.title))
  local sub = {}
  if m.subtitle then sub[#sub + 1] = m.subtitle end
  local sr = step_range_text(m)
  if sr then sub[#sub + 1] = sr end
  sub[#sub + 1] = ("%s recorded"):format(dur(m.t1 - m.t0))
  add('<text x="10" y="40" font-size="12" fill="#444">%s</text>', esc(table.concat(sub, " · ")))
  local top = 75        -- two lines of step numbers above the rows
  local n = #m.rows
  local bottom = top + n * (ROW_H + ROW_GAP)
  -- steps: alternate bands, a boundary line and the number above the rows
  -- (asynchronous rows: each row's steps marked on the row itself)
  -- a step number that would overlap the last on the lower line goes on the
  -- upper one (a short step beside a long one); crowded on both, it is left out
  local last_label_x = { -math.huge, -math.huge }
  for i, st in ipairs(m.async and {} or m.steps) do
    local x0, x1 = X(st.t0), X(st.t1)
    if i % 2 == 0 then
      add('<rect x="%.2f" y="%d" width="%.2f" height="%d" fill="#f3f3f3"/>', x0, top - 6, math.max(x1 - x0, 0.5), bottom - top + 6)
    end
    add('<line class="step-boundary" x1="%.2f" y1="%d" x2="%.2f" y2="%d" stroke="#888" stroke-dasharray="3,3"/>',
      x0, top - 25, x0, bottom)
    local label = (i == 1 or x1 - x0 > 40) and ("step %d"):format(st.n) or tostring(st.n)
    local lx = x0 + 2
    local line = lx - last_label_x[1] > #label * 6.5 + 4 and 1 or lx - last_label_x[2] > #label * 6.5 + 4 and 2 or nil
    if line then
      add('<text class="step-label" x="%.2f" y="%d" font-size="10" fill="#333"><title>step %d: %s to %s, %s</title>%s</text>',
        lx, top - 8 - (line - 1) * 11, st.n, dur(st.t0 - m.t0), dur(st.t1 - m.t0), dur(st.t1 - st.t0), esc(label))
      last_label_x[line] = lx
    end
  end
  -- rows
  for r, row in ipairs(m.rows) do
    local y = top + (r - 1) * (ROW_H + ROW_GAP)
    add('<text x="10" y="%d" font-size="12">%s</text>', y + 16, esc(row.label))
    -- the line above the row holds its step numbers and staleness marks: one
    -- that would overlap another already there is left out (its hover keeps it)
    local taken = {}
    local function free_at(x0, x1)
      for _, iv in ipairs(taken) do if x0 < iv[2] and x1 > iv[1] then return false end end
      taken[#taken + 1] = { x0, x1 }
      return true
    end
    if m.async then   -- where each of this row's steps begins
      local seen, last_x = {}, -math.huge
      for _, s in ipairs(row.spans) do
        if s.step and not seen[s.step] and s.kind ~= "apply" then
          seen[s.step] = true
          local x = X(s.t0)
          add('<line class="step-boundary" x1="%.2f" y1="%d" x2="%.2f" y2="%d" stroke="#555"/>', x, y - 3, x, y + ROW_H)
          if x - last_x > #tostring(s.step) * 6 + 4 and free_at(x, x + #tostring(s.step) * 6 + 2) then
            add('<text class="step-label" x="%.2f" y="%d" font-size="9" fill="#333">%d</text>', x + 1, y - 1, s.step)
            last_x = x
          end
        end
      end
    end
    add('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#e5e5e5"/>', LEFT, y, plot_w, ROW_H)
    for _, s in ipairs(row.spans) do
      local k = kind_of(s.kind)
      local x, w = X(s.t0), math.max((s.t1 - s.t0) * sx, 0.6)
      local tip = { ("%s · %s%s"):format(s.kind, row.label, s.step and (" · step %d"):format(s.step) or ""),
        ("start %s, duration %s"):format(dur(s.t0 - m.t0), dur(s.t1 - s.t0)) }
      if s.bytes then tip[#tip + 1] = bytes_str(s.bytes) end
      if s.note then tip[#tip + 1] = s.note end
      add('<rect x="%.2f" y="%d" width="%.2f" height="%d" fill="%s"><title>%s</title></rect>', x, y + 2, w, ROW_H - 4,
        k.color, esc(table.concat(tip, "\n")))
      if s.mark and free_at(x + w / 2 - #s.mark * 3 - 1, x + w / 2 + #s.mark * 3 + 1) then   -- a staleness mark above a push
        add('<text x="%.2f" y="%d" font-size="9" fill="#b00" text-anchor="middle">%s</text>', x + w / 2, y - 1, esc(s.mark))
      end
    end
  end
  -- marks: a red line across the rows at that moment, its text beside it
  for _, mk in ipairs(m.marks) do
    local x = X(mk.at)
    add('<line class="mark" x1="%.2f" y1="%d" x2="%.2f" y2="%d" stroke="#d00" stroke-width="2"/>', x, top - 12, x, bottom)
    add('<text class="mark" x="%.2f" y="%d" font-size="11" font-weight="bold" fill="#d00"%s>%s</text>', x + (x > LEFT + plot_w * 0.7 and -4 or 4),
      top - 14, x > LEFT + plot_w * 0.7 and ' text-anchor="end"' or "", esc(mk.text))
  end
  -- waits: numbered markers, listed below the axis
  local shown = {}
  for i = 1, math.min(#m.waits, max_ann) do
    local w = m.waits[i]
    local y = top + (w.row - 1) * (ROW_H + ROW_GAP)
    local x = X(w.span.t0) + math.max((w.span.t1 - w.span.t0) * sx, 0.6) / 2
    add('<g class="wait-mark"><circle cx="%.2f" cy="%d" r="7" fill="#fff" stroke="#d62728"/>' ..
      '<text x="%.2f" y="%d" font-size="9" text-anchor="middle" fill="#d62728">%d</text></g>', x, y + ROW_H // 2, x, y + ROW_H // 2 + 3, i)
    shown[i] = wait_text(m, w)
  end
  -- axis
  local ay = bottom + 4
  add('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>', LEFT, ay, LEFT + plot_w, ay)
  local ticks, unit, per, step = time_ticks(span, math.max(2, math.min(10, plot_w // 80)))
  for _, t in ipairs(ticks) do
    local x = LEFT + t * sx
    add('<line x1="%.2f" y1="%d" x2="%.2f" y2="%d" stroke="#333"/>', x, ay, x, ay + 5)
    add('<text class="tick" x="%.2f" y="%d" font-size="10" text-anchor="middle">%s</text>', x, ay + 17, tick_label(t, unit, per, step))
  end
  add('<text x="%d" y="%d" font-size="10" fill="#444" text-anchor="end">time since the first span (%s)</text>',
    LEFT + plot_w, ay + 31, unit)
  -- legend
  local ly = ay + 48
  local lx = LEFT
  for _, name in ipairs(m.kinds) do
    local k = kind_of(name)
    local wtxt = #k.label * 6.2 + 30
    if lx + wtxt > W - RIGHT then lx = LEFT; ly = ly + 18 end
    add('<g class="legend"><rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d" font-size="11">%s</text></g>',
      lx, ly - 10, k.color, lx + 16, ly, esc(k.label))
    lx = lx + math.floor(wtxt)
  end
  local y = ly + 6
  local per_line = math.max(40, (W - LEFT - RIGHT) // 6)
  for _, note in ipairs(m.notes) do
    for _, line in ipairs(wrap(note, per_line)) do
      y = y + 14
      add('<text class="note" x="%d" y="%d" font-size="10" fill="#555">%s</text>', LEFT, y, esc(line))
    end
  end
  for i, line in ipairs(shown) do
    y = y + 15
    add('<text class="annotation" x="%d" y="%d" font-size="11" fill="#d62728">%d. %s</text>', LEFT, y, i, esc(line))
  end
  return out, y + 14
end

-- the time each panel shows across its width: its own (a comparison of a
-- 7 ms synchronous run and a 23 ms asynchronous one shows each run's steps
-- across the whole width), or the longest (opts.scale = "shared": one scale,
-- to compare the durations themselves)
local function panel_spans(models, opts)
  local longest, out = 0, {}
  for _, m in ipairs(models) do longest = math.max(longest, m.t1 - m.t0) end
  for _, m in ipairs(models) do out[m] = opts.scale == "shared" and longest or (m.t1 - m.t0) end
  return out
end

-- width = n: pixels of the picture, or, below TEXT_MAX_WIDTH, the columns
-- of the text (a terminal's `width = 80`; no picture is drawn that narrow)
local TEXT_MAX_WIDTH = 400
local function svg_of(models, opts)
  opts = opts or {}
  local W = (opts.width and opts.width >= TEXT_MAX_WIDTH) and opts.width or 960
  local span = panel_spans(models, opts)
  local parts, H = {}, 0
  local label_w = 10
  for _, m in ipairs(models) do
    for _, row in ipairs(m.rows) do label_w = math.max(label_w, #row.label) end
  end
  local left = math.max(120, math.floor(20 + 6.8 * label_w))
  for _, m in ipairs(models) do
    local lines, h = svg_panel(m, W, span[m], opts.annotations or 5, left)
    parts[#parts + 1] = ('<g transform="translate(0,%d)">'):format(H)
    parts[#parts + 1] = table.concat(lines, "\n")
    parts[#parts + 1] = "</g>"
    H = H + h + 10
  end
  return ('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif">\n' ..
    '<rect width="100%%" height="100%%" fill="white"/>\n%s\n</svg>\n'):format(W, H, W, H, table.concat(parts, "\n"))
end

---------------------------------------------------------------- text
-- width: the columns the text may use; the chart gets what the labels, its
-- frame and the "<- step" note leave (columns= fixes the chart's own width)
local function text_panel(m, width, columns, span, max_ann)
  local out = {}
  local head = { m.title }
  if m.subtitle then head[#head + 1] = m.subtitle end
  local sr = step_range_text(m)
  if sr then head[#head + 1] = sr end
  head[#head + 1] = dur(m.t1 - m.t0)
  out[#out + 1] = table.concat(head, " · ")
  if m.empty then out[#out + 1] = m.empty_text or "nothing recorded yet"; return out end
  local lw = 0
  for _, row in ipairs(m.rows) do lw = math.max(lw, #row.label) end
  local cols = columns or math.max(10, width - lw - 11)
  local cell = math.max(span, 1e-9) / cols
  local pad = (" "):rep(lw + 1)
  -- the step numbers at the column where each step starts
  local sl = {}
  for c = 1, cols do sl[c] = " " end
  local free = 1
  for _, st in ipairs(m.steps) do
    local c = math.floor((st.t0 - m.t0) / cell) + 1
    local s = tostring(st.n)
    if c >= free and c + #s - 1 <= cols then
      for j = 1, #s do sl[c + j - 1] = s:sub(j, j) end
      free = c + #s + 1
    end
  end
  if #m.steps > 0 then out[#out + 1] = pad .. " " .. table.concat(sl) .. "  <- step" end
  for _, row in ipairs(m.rows) do
    -- each cell: the kind that took most of its time
    local acc = {}
    for _, s in ipairs(row.spans) do
      local a, b = (s.t0 - m.t0) / cell, (s.t1 - m.t0) / cell
      for c = math.max(0, math.floor(a)), math.min(cols - 1, math.floor(b)) do
        local part = math.min(b, c + 1) - math.max(a, c)
        if part > 0 or s.t1 == s.t0 then
          acc[c + 1] = acc[c + 1] or {}
          acc[c + 1][s.kind] = (acc[c + 1][s.kind] or 0) + math.max(part, 1e-6)
        end
      end
    end
    local line = {}
    for c = 1, cols do
      local best, bv = nil, 0
      for k, v in pairs(acc[c] or {}) do if v > bv then best, bv = k, v end end
      line[c] = best and kind_of(best).letter or " "
    end
    out[#out + 1] = ("%-" .. lw .. "s |%s|"):format(row.label, table.concat(line))
  end
  -- the axis: ticks and their labels
  local ticks, unit, per, step = time_ticks(span, math.max(2, cols // 14))
  local axis, labels = {}, {}
  for c = 1, cols + 1 do axis[c] = "-"; labels[c] = " " end
  local free_l = 1
  for _, t in ipairs(ticks) do
    local c = math.floor(t / cell + 0.5) + 1
    if c <= cols + 1 then
      axis[c] = "+"
      local s = tick_label(t, unit, per, step)
      if c >= free_l and c + #s - 1 <= cols + 8 then
        for j = 1, #s do labels[c + j - 1] = s:sub(j, j) end
        free_l = c + #s + 1
      end
    end
  end
  out[#out + 1] = pad .. table.concat(axis)
  out[#out + 1] = pad .. table.concat(labels)
  local leg = {}
  for _, name in ipairs(m.kinds) do leg[#leg + 1] = ("%s %s"):format(kind_of(name).letter, kind_of(name).label) end
  -- the legend wraps between its entries, never inside one
  local cur = "legend:"
  for _, e in ipairs(leg) do
    if #cur + 2 + #e > width and cur ~= "legend:" then out[#out + 1] = cur; cur = "       " end
    cur = cur .. ((cur == "legend:" or not cur:match("%S")) and " " or "  ") .. e
  end
  out[#out + 1] = cur
  for _, line in ipairs(m.notes) do out[#out + 1] = "note: " .. line end
  for _, mk in ipairs(m.marks) do out[#out + 1] = ("mark: %s at %s"):format(mk.text, dur(mk.at - m.t0)) end
  for i = 1, math.min(#m.waits, max_ann) do out[#out + 1] = "wait: " .. wait_text(m, m.waits[i]) end
  return out
end

local function text_of(models, opts, width)
  opts = opts or {}
  local span = panel_spans(models, opts)
  local lines = {}
  for i, m in ipairs(models) do
    if i > 1 then lines[#lines + 1] = "" end
    for _, l in ipairs(text_panel(m, width, opts.columns, span[m], opts.annotations or 5)) do lines[#lines + 1] = l end
  end
  -- titles, notes and waits wrap at words; the chart's lines already fit
  return ldist.wrap(table.concat(lines, "\n"), width)
end

---------------------------------------------------------------- the Timeline object
local function finish(models, opts)
  local t = setmetatable({ _models = models, _opts = opts or {} }, Timeline)
  if opts and opts.save then t:save(opts.save) end
  return t
end

-- distribute._timeline(desc, opts) -> Timeline (desc: see the top of this file)
function distribute._timeline(desc, opts)
  return finish({ prepare(desc, opts) }, opts)
end

function Timeline:svg()
  self._svg = self._svg or svg_of(self._models, self._opts)
  return self._svg
end
-- tl:text([width]): as wide as the terminal (80 columns when unknown)
function Timeline:text(width)
  local w = self._opts.width
  width = width or (w and w < TEXT_MAX_WIDTH and w) or ldist.width()
  if self._text_width ~= width then self._text, self._text_width = text_of(self._models, self._opts, width), width end
  return self._text
end
function Timeline:save(path)
  local f, err = ldist.io._open_write(path)   -- never through a planted link
  if not f then error("timeline: cannot save the picture: " .. tostring(err), 2) end
  f:write(path:match("%.txt$") and self:text() or self:svg())
  local ok, cerr = f:close()
  if not ok then error("timeline: cannot save the picture: " .. tostring(cerr), 2) end
  return path
end
-- the waits found, longest first: {{who=, seconds=, step=, text=}, ...}
function Timeline:waits()
  local out = {}
  for _, m in ipairs(self._models) do
    for _, w in ipairs(m.waits) do out[#out + 1] = { who = m.rows[w.row].who, seconds = w.w, step = w.step, text = wait_text(m, w) } end
  end
  return out
end
Timeline.__tostring = function(self) return self:text() end
-- inline SVG in a notebook: text/html carries the <svg> itself (its <title>
-- hovers work there, and in exported HTML), image/svg+xml the picture
Timeline.__mimebundle = function(self)
  local svg = self:svg()
  return { ["text/html"] = '<div class="ldist-timeline">' .. svg .. "</div>", ["image/svg+xml"] = svg, ["text/plain"] = self:text() }
end

-- distribute.compare_timelines{a, b, ...} (Timelines, or strategies that
-- traced) -> one Timeline: each drawn above the next, each across the whole
-- width on its own time axis ({scale = "shared"}: one time scale for all)
function distribute.compare_timelines(list, opts)
  if type(list) ~= "table" or #list == 0 then
    error("bad argument #1 to 'compare_timelines' (a list of timelines or strategies expected)", 2)
  end
  opts = opts or {}
  if opts.scale ~= nil and opts.scale ~= "own" and opts.scale ~= "shared" then
    error("bad option 'scale' to 'compare_timelines' (\"own\" or \"shared\" expected)", 2)
  end
  local models = {}
  for i, t in ipairs(list) do
    if getmetatable(t) ~= Timeline then
      if type(t) == "table" and type(t.timeline) == "function" then t = t:timeline({ steps = opts.steps })
      else error(("bad argument #1 to 'compare_timelines' (item %d is not a timeline)"):format(i), 2) end
    end
    for _, m in ipairs(t._models) do models[#models + 1] = m end
  end
  return finish(models, opts)
end

---------------------------------------------------------------- trace_summary's table
-- distribute._trace_summary(fields, rows) -> the summary: the fields as given
-- (numbers), printed as a table per row. rows: {{who=, compute=, wait=,
-- comm=, bytes=, bus_bandwidth=}, ...}
local Summary = { __name = "ldist.TraceSummary" }
Summary.__index = Summary
Summary.__tostring = function(s)
  local rows = rawget(s, "_rows") or {}
  local out = { ("%s trace: %s%s"):format(s._title or "strategy", s._over and ("over " .. dur(s._over)) or "",
    s.calls and (", %d collective calls"):format(s.calls) or "") }
  local cells = { { "", "compute", "wait", s._comm_name or "communication", "bytes", s._bw_name or "bus bandwidth" } }
  for _, r in ipairs(rows) do
    cells[#cells + 1] = { r.who, dur(r.compute or 0), dur(r.wait or 0), dur(r.comm or 0),
      r.bytes and bytes_str(r.bytes) or "-", r.bus_bandwidth and ("%.2f GB/s"):format(r.bus_bandwidth / 1e9) or "-" }
  end
  -- each column as wide as its widest cell; when that is wider than the
  -- terminal, single spaces, then two-word headers on two lines
  local width = ldist.width()
  local function layout(gap)
    local w = {}
    for _, c in ipairs(cells) do for i, v in ipairs(c) do w[i] = math.max(w[i] or 0, #v) end end
    local fmt, total = "%-" .. w[1] .. "s", w[1]
    for i = 2, #w do fmt, total = fmt .. gap .. "%" .. w[i] .. "s", total + #gap + w[i] end
    return fmt, total
  end
  local fmt, total = layout("  ")
  if total > width then fmt, total = layout(" ") end
  if total > width then
    local top = {}
    for i, h in ipairs(cells[1]) do
      local a, b = h:match("^(%S+) (.+)$")
      top[i] = a or ""
      if a then cells[1][i] = b end
    end
    table.insert(cells, 1, top)
    fmt = layout(" ")
  end
  for _, c in ipairs(cells) do out[#out + 1] = (fmt:format(table.unpack(c)):gsub("%s+$", "")) end
  for _, n in ipairs(s._notes or {}) do out[#out + 1] = n end
  return ldist.wrap(table.concat(out, "\n"))
end
function distribute._trace_summary(fields, rows, meta)
  fields._rows = rows
  meta = meta or {}
  fields._title, fields._over, fields._comm_name, fields._notes = meta.title, meta.over, meta.comm_name, meta.notes
  fields._bw_name = meta.bw_name
  return setmetatable(fields, Summary)
end

ldist.document(Timeline.svg, { "Timeline:svg" },
  "tl:svg() -> the timeline as SVG text (hover a span for its name, replica, start, duration, bytes).")
ldist.document(Timeline.text, { "Timeline:text" }, "tl:text([width]) -> the timeline drawn as text, for a terminal: width\n" ..
  "columns (timeline{width = n} below 400, else the terminal's, 80 when unknown); {columns = n} fixes the chart's width.")
ldist.document(Timeline.save, { "Timeline:save" },
  "tl:save(path) -> path\n\nWrite the picture to a file: SVG, or the text chart for a name ending in .txt.")
ldist.document(Timeline.waits, { "Timeline:waits" },
  "tl:waits() -> the waits found, longest first: {{who=, seconds=, step=, text=}, ...}.")
ldist.document(Timeline, { "Timeline", "ldist.Timeline" },
  "A picture of a traced run (strategy:timeline{steps=, save=, width=}): one row per replica,\n" ..
  "worker or ps task; a time axis; step boundaries and numbers; phases in colours with a legend;\n" ..
  "waits marked and explained (\"replica 0 waits 0.8 ms for replica 1\"); hover a span for its name,\n" ..
  "row, start, duration and bytes. t:svg(), t:text() (the terminal chart), t:save(\"t.svg\"),\n" ..
  "t:waits(). Shown inline in a notebook. steps = {10, 12} zooms to steps 10..12;\n" ..
  "marks = {{at = ldist.clock() value, text = \"kill -9 worker 1\"}} draws a moment across the rows.")
ldist.document(distribute.compare_timelines, "distribute.compare_timelines",
  "distribute.compare_timelines{sync_timeline, async_timeline, ...}  (or traced strategies)\n\n" ..
  "One picture: each timeline above the next (a synchronous and an asynchronous run side by\n" ..
  "side), each across the whole width on its own time axis. Options: {steps = {a, b},\n" ..
  "save = \"c.svg\", width = 960, scale = \"shared\" (one time axis for all: the durations compared)}.")
