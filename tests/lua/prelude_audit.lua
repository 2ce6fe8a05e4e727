-- tests/lua/prelude_audit.lua - "No prelude file replaces a function another
-- file defined". Run by tests/lua/test_prelude_protocol.sh from the repository
-- root, in a plain lua5.4 interpreter (./ldist has already run the prelude).
--
-- It builds a fresh module table the way luaopen_ldist (lua_bindings/ldist.c)
-- does: the C modules come from ./ldist.so through package.loadlib, the few
-- functions ldist.c and state.c add themselves are stood in for in Lua. Then it
-- runs the files lua_bindings/lua/prelude.lua lists, in its order, each
-- called with the table.
-- Before and after each file it walks everything reachable from the table and
-- records, for each (table, key) holding a function, who set it: "C" or the
-- file. After file F, a (table, key) whose function (set by C or by an earlier
-- file) is now a different value is a violation of F. One TAP line per file,
-- then negative controls: synthetic chunks that replace a function (must be
-- flagged) and one that only adds functions (must not be).

local PRELUDE_DIR = "lua_bindings/lua"
local SO = os.getenv("LDIST_SO") or "./ldist.so"
local failed = 0
local function tap(ok, text)
  if not ok then failed = failed + 1 end
  print((ok and "ok - " or "not ok - ") .. text)
end
local function oneline(s) return (tostring(s):gsub("%s*\n%s*", " | ")) end

-- ---- the module table, as luaopen_ldist builds it -------------------------

local C_MODULES = {   -- ldist.c's c_modules[], in its order
  { "tensor", "lb_open_tensor" }, { "autograd", "lb_open_autograd" }, { "nn", "lb_open_nn" },
  { "losses", "lb_open_losses" }, { "_distribute", "lb_open_distribute_c" },
  { "optim", "lb_open_optim" }, { "data", "lb_open_data" }, { "io", "lb_open_io" },
  { "_cluster", "lb_open_cluster" },
}

local registry = debug.getregistry()
local ldist = { version = "audit" }
ldist.docs = {}
registry["ldist.docs"] = ldist.docs       -- the C openers add their docs there
ldist.globals = {}
registry["ldist.module"] = ldist          -- lb_call_hook finds the prelude's hooks there
-- stand-ins for ldist.c's C functions (os.clock is enough for an audit)
ldist.clock = os.clock
local nthreads = 1
function ldist.set_num_threads(n) nthreads = n end
function ldist.get_num_threads() return nthreads end

for _, m in ipairs(C_MODULES) do
  local open, err = package.loadlib(SO, m[2])
  if not open then
    tap(false, ("open the C module %s: %s %s (build it with make -j2 all)"):format(m[1], m[2], oneline(err)))
    os.exit(1)
  end
  local ok, mod = pcall(open)
  if not ok then tap(false, ("open the C module %s: %s"):format(m[1], oneline(mod))); os.exit(1) end
  ldist[m[1]] = mod
end

-- stand-ins for state.c's helpers (ldist_set_helpers)
ldist.repr = function(v) return tostring(v) end
ldist.isatty = function() return false end
ldist.termsize = function() return 80, 24 end
ldist.walltime = os.time
ldist._listdir = function() return {} end
ldist._traceback_filtering = function() return true end
ldist._keep_traceback = function(e) return e end

-- Userdata the C modules make: their metatables are walked too.
local samples = {}
local function sample(name, make)
  local ok, v = pcall(make)
  if ok and v ~= nil then samples[#samples + 1] = { name = name, value = v } end
end
sample("tensor.zeros(1)", function() return ldist.tensor.zeros(1) end)
sample("data.Dataset.range(0)", function() return ldist.data.Dataset.range(0) end)
sample("data.Dataset.range(0):iter()", function() return ldist.data.Dataset.range(0):iter() end)

-- ---- walking --------------------------------------------------------------

local function keyseg(k, root)
  if type(k) == "string" and k:match("^[%a_][%w_]*$") then return root and k or "." .. k end
  if type(k) == "string" then return ("[%q]"):format(k) end
  if math.type(k) == "integer" then return "[" .. k .. "]" end
  return "[" .. tostring(k) .. "]"
end

local function sorted_keys(t)
  local keys = {}
  for k in next, t do keys[#keys + 1] = k end
  table.sort(keys, function(a, b)
    local ta, tb = type(a), type(b)
    if ta ~= tb then return ta < tb end
    if ta == "string" or ta == "number" then return a < b end
    return tostring(a) < tostring(b)
  end)
  return keys
end

local skip = { [ldist.docs] = true }   -- docs maps functions to text

-- Breadth first from the module table, then from the metatables the C modules
-- registered (luaL_newmetatable) and those of the sample userdata; keys in
-- sorted order, so each table gets the same, shortest name every run.
-- Returns: visited = { [table] = path }, order = { table, ... }.
local function walk()
  local visited, order, queue = {}, {}, {}
  local head = 1
  local function push(t, path)
    if type(t) ~= "table" or visited[t] or skip[t] then return end
    visited[t] = path; order[#order + 1] = t; queue[#queue + 1] = t
  end
  local function drain()
    while head <= #queue do
      local t = queue[head]; head = head + 1
      local path = visited[t]
      for _, k in ipairs(sorted_keys(t)) do
        local v = rawget(t, k)
        local p = (path == "" and keyseg(k, true) or path .. keyseg(k))
        if type(v) == "table" then
          push(v, p)
        elseif type(v) == "userdata" then
          push(debug.getmetatable(v), "getmetatable(" .. p .. ")")
        end
      end
      local mt = debug.getmetatable(t)
      if mt then push(mt, "getmetatable(" .. (path == "" and "ldist" or path) .. ")") end
      -- an __index (or __newindex) closure may hide a methods table in an upvalue
      for _, field in ipairs({ "__index", "__newindex" }) do
        local f = rawget(t, field)
        if type(f) == "function" then
          for i = 1, 255 do
            local name, up = debug.getupvalue(f, i)
            if name == nil then break end
            if type(up) == "table" then
              push(up, path .. "." .. field .. "<upvalue " .. (name ~= "" and name or i) .. ">")
            end
          end
        end
      end
    end
  end
  push(ldist, ""); drain()
  for _, s in ipairs(samples) do push(debug.getmetatable(s.value), "getmetatable(" .. s.name .. ")") end
  drain()
  for _, k in ipairs(sorted_keys(registry)) do
    if type(k) == "string" and k:match("^ldist%.") and k ~= "ldist.module" and k ~= "ldist.docs" then
      push(rawget(registry, k), ('registry["%s"]'):format(k))
    end
  end
  drain()
  return visited, order
end

-- ---- who set what ---------------------------------------------------------

-- owner[table][key] = { fn = function, origin = "C" | file name }
local owner = setmetatable({}, { __mode = "k" })

local function origin_of(fn, file)
  -- a C function is C's, whichever file made it reachable
  local info = debug.getinfo(fn, "S")
  if info and info.what == "C" then return "C" end
  return file
end

-- Record every function reachable now; the first snapshot is all C's.
local function record(file)
  local visited, order = walk()
  for _, t in ipairs(order) do
    local own = owner[t]
    if not own then own = {}; owner[t] = own end
    for k, v in next, t do
      if type(v) == "function" then
        local r = own[k]
        if not r or r.fn ~= v then own[k] = { fn = v, origin = file and origin_of(v, file) or "C" } end
      end
    end
    for k, r in next, own do
      if rawget(t, k) ~= r.fn then own[k] = nil end
    end
  end
  return visited, order
end

-- After a file ran: every recorded function still in its place?
local function violations()
  local visited, order = walk()
  local found = {}
  for _, t in ipairs(order) do
    local own = owner[t]
    if own then
      for k, r in next, own do
        local now = rawget(t, k)
        if now ~= r.fn then
          local path = visited[t]
          path = path == "" and keyseg(k, true) or path .. keyseg(k)
          local now_is = type(now) ~= "function" and ("; now " .. (now == nil and "nil" or "a " .. type(now))) or ""
          found[#found + 1] = { path = path, origin = r.origin, now_is = now_is }
        end
      end
    end
  end
  table.sort(found, function(a, b) return a.path < b.path end)
  return found
end

local function describe(found)
  local parts = {}
  for i, v in ipairs(found) do parts[i] = v.path .. " (defined by " .. v.origin .. v.now_is .. ")" end
  return "replaces " .. table.concat(parts, ", ")
end

-- Run one chunk as a prelude file; returns its violations (and any error).
local function audit(name, chunk, ...)
  local ok, err = pcall(chunk, ldist, ...)
  local found = violations()
  record(name)
  return found, (not ok) and oneline(err) or nil
end

-- ---- the prelude ----------------------------------------------------------

-- the files in the manifest's order, as scripts/embed.lua embeds them
local files = {}
do
  local ok, manifest = pcall(dofile, PRELUDE_DIR .. "/prelude.lua")
  if not ok then
    tap(false, "read the prelude's manifest " .. PRELUDE_DIR .. "/prelude.lua: " .. oneline(manifest))
    os.exit(1)
  end
  for _, e in ipairs(manifest) do files[#files + 1] = e[1] end
end
if #files == 0 then
  tap(false, "found the prelude files in " .. PRELUDE_DIR .. "/prelude.lua")
  os.exit(1)
end
do   -- the manifest and the folder agree (scripts/embed.lua refuses a file it lacks)
  local on_disk, listed, odd = {}, {}, {}
  local p = assert(io.popen("cd " .. PRELUDE_DIR .. " && LC_ALL=C find . -name '*.lua' | sort"))
  for line in p:lines() do
    local f = line:gsub("^%./", "")
    if f ~= "prelude.lua" then on_disk[f] = true end
  end
  p:close()
  for _, f in ipairs(files) do
    listed[f] = true
    if not on_disk[f] then odd[#odd + 1] = f .. " (listed, no such file)" end
  end
  for f in pairs(on_disk) do if not listed[f] then odd[#odd + 1] = f .. " (not listed)" end end
  table.sort(odd)
  tap(#odd == 0, "the manifest lists every prelude file once" .. (#odd > 0 and (": " .. table.concat(odd, ", ")) or ""))
end

record(nil)
for _, name in ipairs(files) do
  local chunk, lerr = loadfile(PRELUDE_DIR .. "/" .. name)
  if not chunk then
    tap(false, name .. " loads: " .. oneline(lerr))
  else
    local found, err = audit(name, chunk)
    if err then tap(false, name .. " runs without an error: " .. err) end
    if #found == 0 then
      tap(true, name .. " replaces no function defined elsewhere")
    else
      tap(false, name .. " " .. describe(found))
    end
  end
end

-- ---- negative controls: the audit can fail --------------------------------

local function path_set(found)
  local s = {}
  for _, v in ipairs(found) do s[v.path] = v.origin end
  return s
end

-- First function key (sorted) of a table, for a control that needs one.
local function first_function(t)
  if type(t) ~= "table" then return nil end
  for _, k in ipairs(sorted_keys(t)) do
    if type(k) == "string" and type(rawget(t, k)) == "function" then return k end
  end
end

-- path of t[k] in the latest walk
local function path_of(t, k)
  local visited = walk()
  local p = visited[t]
  if p == nil then return "?" .. keyseg(k) end
  return p == "" and keyseg(k, true) or p .. keyseg(k)
end

do
  local problems, expect, got = {}, {}, {}
  local function run(text, name, ...)
    local found, err = audit(name, assert(load(text, "=" .. name)), ...)
    if err then problems[#problems + 1] = name .. " raised: " .. err end
    for _, v in ipairs(found) do got[#got + 1] = v end
  end
  local replace_generic = [[
    local ldist, t, k = ...
    local old = t[k]
    t[k] = function(...) return old(...) end
  ]]
  -- Candidates, from what is recorded now: a function a prelude file defined,
  -- a C function of a module (nn.Sequential if it is still C's), and a C method
  -- behind a userdata metatable's __index (a tensor method).
  local lua_t, lua_k, c_t, c_k, m_t, m_k
  do
    local visited, order = walk()
    for _, t in ipairs(order) do
      local p = visited[t]
      for _, k in ipairs(sorted_keys(t)) do
        local v, r = rawget(t, k), owner[t] and owner[t][k]
        if type(k) == "string" and type(v) == "function" and r and r.fn == v then
          local in_module = p ~= "" and not p:match("^getmetatable") and not p:match("^registry")
          if r.origin ~= "C" and in_module and not lua_t then lua_t, lua_k = t, k end
          if r.origin == "C" and in_module and not c_t then c_t, c_k = t, k end
        end
      end
    end
    local nn_own = type(ldist.nn) == "table" and owner[ldist.nn]
    if nn_own and nn_own.Sequential and nn_own.Sequential.origin == "C" then c_t, c_k = ldist.nn, "Sequential" end
    local tmt = samples[1] and debug.getmetatable(samples[1].value)
    local idx = tmt and rawget(tmt, "__index")
    if type(idx) == "function" then _, idx = debug.getupvalue(idx, 1) end
    if type(idx) == "table" and first_function(idx) then m_t, m_k = idx, first_function(idx) end
  end
  -- 1. optim.Optimizer.apply_gradients, reassigned by a plain string chunk
  local O = type(ldist.optim) == "table" and ldist.optim.Optimizer
  if type(O) == "table" and type(rawget(O, "apply_gradients")) == "function" then
    expect[#expect + 1] = path_of(O, "apply_gradients")
    run([[
      local ldist = ...
      local old = ldist.optim.Optimizer.apply_gradients
      ldist.optim.Optimizer.apply_gradients = function(...) return old(...) end
    ]], "synthetic_replace.lua")
  elseif lua_t then  -- it is gone: another function a prelude file defined
    expect[#expect + 1] = path_of(lua_t, lua_k)
    run(replace_generic, "synthetic_replace.lua", lua_t, lua_k)
  end
  -- 2. a C module's function
  if c_t then
    expect[#expect + 1] = path_of(c_t, c_k)
    run(replace_generic, "synthetic_replace_c.lua", c_t, c_k)
  end
  -- 3. a userdata method
  if m_t then
    expect[#expect + 1] = path_of(m_t, m_k)
    run(replace_generic, "synthetic_replace_method.lua", m_t, m_k)
  end
  local s = path_set(got)
  for _, p in ipairs(expect) do
    if not s[p] then problems[#problems + 1] = "not flagged: " .. p end
  end
  if #got ~= #expect then
    problems[#problems + 1] = ("flagged %d paths for %d replacements: %s"):format(#got, #expect, describe(got))
  end
  if #expect < 3 then
    problems[#problems + 1] = "found only " .. #expect .. " of the 3 kinds of function to replace"
  end
  tap(#problems == 0, "the audit catches a replaced function")
  for _, p in ipairs(problems) do print("#   " .. p) end
  if #problems == 0 then print("#   it flagged: " .. describe(got)) end
end

do
  -- a file that only adds functions (new keys, a new table) is not flagged
  local add = [[
    local ldist = ...
    ldist.optim._audit_probe = function() end
    ldist._audit_probe = { f = function() end }
    function ldist._audit_probe.g() end
  ]]
  local found, err = audit("synthetic_add.lua", assert(load(add, "=synthetic_add.lua")))
  tap(#found == 0 and not err, "the audit lets a file add new functions"
    .. (err and (": " .. err) or #found > 0 and (": flagged " .. describe(found)) or ""))
end

os.exit(failed == 0 and 0 or 1)
