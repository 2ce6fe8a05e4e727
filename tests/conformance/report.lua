-- tests/conformance/report.lua DIR - read what tests/dist/test_conformance.sh
-- left in DIR and print one TAP line per (case, strategy) cell, then the
-- matrix (cases x strategies) as "# " lines. Exits 1 when a cell failed.
--
-- DIR holds: columns ("name procs" per line, from run.lua --strategies, in
-- order), <col>.cases (the cases that run under it), <col>.res[.rankR] (the
-- runner's records), <col>.status ("case rc secs" per run; rc 124/137: timed
-- out, "budget": not run), <col>.<case>.log (the run's output), times.
local dir = assert(arg[1], "usage: report.lua DIR")
local here = (arg[0]:match("^(.*)/[^/]*$") or ".")
local CASES = dofile(os.getenv("CONFORMANCE_CASES_FILE") or (here .. "/cases.lua"))
local case_by_name = {}
for _, c in ipairs(CASES) do case_by_name[c.name] = c end

local function lines(path)
  local f = io.open(path, "r")
  if not f then return {} end
  local out = {}
  for l in f:lines() do out[#out + 1] = l end
  f:close()
  return out
end

local columns = {}
for _, l in ipairs(lines(dir .. "/columns")) do
  local n, p = l:match("^(%S+)%s+(%d+)")
  if n then columns[#columns + 1] = { name = n, procs = tonumber(p) } end
end

-- records of one results file: recs[case] = record (the last one wins)
local function read_records(path)
  local recs = {}
  for i, l in ipairs(lines(path)) do
    local chunk = load("return " .. l:gsub("^R", "", 1), "=" .. path .. ":" .. i, "t", {})
    local ok, r = pcall(chunk or error)
    if ok and type(r) == "table" and r.case then recs[r.case] = r end
  end
  return recs
end

-- ": " and the last line the run printed, or "" when it printed nothing
local function last_log_line(col, case)
  local ls = lines(("%s/%s.%s.log"):format(dir, col, case))
  for i = #ls, 1, -1 do
    local l = ls[i]:gsub("%s+$", "")
    if l ~= "" then return ": " .. l end
  end
  return " (no output)"
end

local function fmt(v)
  if type(v) == "number" then return ("%.9g"):format(v) end
  return tostring(v)
end

-- compare a cell's values with the reference's: nil when they agree, else why not
local function compare(vals, ref, tol, who)
  who = who or "the default strategy's"
  local worst, worst_key, nkeys, nbad = -1, nil, 0, 0
  for k, rv in pairs(ref) do
    if k:sub(1, 1) ~= "_" then
      nkeys = nkeys + 1
      local v = vals[k]
      if v == nil then return ("no value '%s' (%s is %s)"):format(k, who, fmt(rv)) end
      if type(rv) == "number" and type(v) == "number" then
        local d = math.abs(v - rv)
        if d ~= d then
          if rv == rv or v == v then return ("%s = %s, %s %s"):format(k, fmt(v), who, fmt(rv)) end
        else
          local rel = d / math.max(1, math.abs(rv))
          if rel > worst then worst, worst_key = rel, k end
          if rel > tol then nbad = nbad + 1 end
        end
      elseif v ~= rv then
        return ("%s = %s, %s %s"):format(k, fmt(v), who, fmt(rv))
      end
    end
  end
  for k in pairs(vals) do
    if k:sub(1, 1) ~= "_" and ref[k] == nil then return ("value '%s', which %s values do not have"):format(k, who) end
  end
  if worst > tol then
    return ("%s = %s, %s %s (relative difference %.2g > %g; %d of %d values differ)")
      :format(worst_key, fmt(vals[worst_key]), who, fmt(ref[worst_key]), worst, tol, nbad, nkeys)
  end
  return nil, worst, nkeys
end

local results, status, applies, times = {}, {}, {}, {}
for _, col in ipairs(columns) do
  local c = col.name
  results[c] = { [0] = read_records(("%s/%s.res"):format(dir, c)) }
  for r = 1, col.procs - 1 do results[c][r] = read_records(("%s/%s.res.rank%d"):format(dir, c, r)) end
  status[c] = {}
  for _, l in ipairs(lines(("%s/%s.status"):format(dir, c))) do
    local case, rc, secs = l:match("^(%S+)%s+(%S+)%s*(%S*)")
    if case then status[c][case] = { rc = rc, secs = tonumber(secs) } end
  end
  applies[c] = {}
  for _, n in ipairs(lines(("%s/%s.cases"):format(dir, c))) do applies[c][n] = true end
end
for _, l in ipairs(lines(dir .. "/times")) do
  local c, s = l:match("^(%S+)%s+(%S+)")
  if c then times[c] = tonumber(s) end
end

-- the verdict of one cell: "ok", "FAIL" or "-", and the reason of a failure
local function verdict(col, case)
  local c = col.name
  if not applies[c][case.name] then return "-" end
  local st = status[c][case.name]
  local rec = results[c][0][case.name]
  if rec == nil then
    if not st then return "FAIL", "not run" end
    if st.rc == "budget" then return "FAIL", "not run: the time budget (per strategy, or for the suite) was spent on earlier cells" end
    if st.rc == "124" or st.rc == "137" then
      return "FAIL", ("timed out after %s s%s"):format(fmt(st.secs), last_log_line(c, case.name))
    end
    return "FAIL", ("no result (exit status %s)%s"):format(st.rc, last_log_line(c, case.name))
  end
  if rec.status == "skip" then return "-" end
  if rec.status ~= "ok" then return "FAIL", tostring(rec.err) end
  -- every worker of a multi-process strategy: no error, the same values as rank 0
  for r = 1, col.procs - 1 do
    local o = results[c][r][case.name]
    if o == nil then return "FAIL", ("worker %d wrote no result%s"):format(r, last_log_line(c, case.name)) end
    if o.status ~= "ok" then return "FAIL", ("worker %d: %s"):format(r, tostring(o.err)) end
    local why = compare(o.values or {}, rec.values or {}, 0, "worker 0's")
    if why then return "FAIL", ("worker %d disagrees with worker 0: %s"):format(r, why) end
  end
  if c == "default" or case.compare == false or (rec.values or {})._skip_compare then return "ok" end
  local ref = results.default and results.default[0][case.name]
  if not ref then return "FAIL", "no reference: the default strategy has no result" end
  if ref.status ~= "ok" then return "FAIL", "no reference: the default strategy failed" end
  if (ref.values or {})._skip_compare then
    return "FAIL", "the default strategy errored naming the option, this strategy applied it"
  end
  local why, worst, n = compare(rec.values or {}, ref.values or {}, case.tol or 1e-5)
  if why then return "FAIL", why end
  if n and n > 0 then return "ok", ("(%d values, largest relative difference %.2g)"):format(n, worst < 0 and 0 or worst) end
  return "ok"
end

local cells, counts = {}, {}
local npass, nfail = 0, 0
for _, col in ipairs(columns) do counts[col.name] = { ok = 0, FAIL = 0, ["-"] = 0 } end
local tap = {}
for _, case in ipairs(CASES) do
  cells[case.name] = {}
  for _, col in ipairs(columns) do
    local v, why = verdict(col, case)
    cells[case.name][col.name] = v
    counts[col.name][v] = counts[col.name][v] + 1
    if v == "ok" then
      npass = npass + 1
      tap[#tap + 1] = ("ok - conformance %s under %s%s"):format(case.name, col.name, why and " " .. why or "")
    elseif v == "FAIL" then
      nfail = nfail + 1
      why = tostring(why):gsub("%s*\n%s*", " | ")
      if #why > 400 then why = why:sub(1, 400) .. "..." end
      tap[#tap + 1] = ("not ok - conformance %s under %s: %s"):format(case.name, col.name, why)
    end
  end
end

-- first the per-strategy counts (tests/run.sh shows the first 40 "#" and
-- "not ok" lines), then every cell, then the matrix
print(("# conformance: %d cells ok, %d failed, over %d cases and %d strategies"):format(npass, nfail, #CASES, #columns))
for _, col in ipairs(columns) do
  local k = counts[col.name]
  print(("#   %-11s %3d ok %3d FAIL %3d -%s"):format(col.name, k.ok, k.FAIL, k["-"],
    times[col.name] and ("   (%d s)"):format(times[col.name]) or ""))
end
for _, l in ipairs(tap) do print(l) end

local w = 8
for _, case in ipairs(CASES) do w = math.max(w, #case.name) end
local head = { ("# %-" .. w .. "s"):format("case") }
for _, col in ipairs(columns) do head[#head + 1] = (" %-" .. math.max(4, #col.name) .. "s"):format(col.name) end
print("# conformance matrix (ok: equals the default strategy / holds the rule; FAIL; -: does not apply)")
print(table.concat(head))
for _, case in ipairs(CASES) do
  local row, any = { ("# %-" .. w .. "s"):format(case.name) }, false
  for _, col in ipairs(columns) do
    row[#row + 1] = (" %-" .. math.max(4, #col.name) .. "s"):format(cells[case.name][col.name])
    any = any or cells[case.name][col.name] ~= "-"
  end
  if any then print(table.concat(row)) end     -- rows of cases that ran nowhere (filtered out) are left out
end
local total = 0
for _, s in pairs(times) do total = total + s end
print(("# conformance: %d ok, %d FAIL; %d s over all strategies"):format(npass, nfail, total))
os.exit(nfail == 0 and 0 or 1)
