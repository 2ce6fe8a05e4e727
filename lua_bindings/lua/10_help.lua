-- 10_help.lua - introspection shared by the REPL and the Jupyter kernel:
--   help(x)                  print the documentation of x (help() lists the modules)
--   ldist.doc_text(x)        the same text as a string, or nil (the kernel's inspect)
--   ldist.complete(line)     Tab completion of the text before the cursor
--
-- Documentation lives in ldist.docs, keyed by the object itself or by its
-- qualified name ("nn.Dense", "Tensor:sum"), as the C modules register it.
-- x may be an object (a function, a module, a tensor, a model) or a name.
local ldist = ...

local docs = ldist.docs
local dgetmetatable = debug.getmetatable

-- ldist.document(obj, name(s), text): the prelude files' one way to register
-- a docstring, under the object (when given) and its qualified name(s).
function ldist.document(obj, names, text)
  if obj ~= nil then docs[obj] = text end
  if type(names) == "table" then
    for _, n in ipairs(names) do docs[n] = text end
  else
    docs[names] = text
  end
end

-- ---- names ------------------------------------------------------------------

local STDLIBS = { "string", "table", "math", "io", "os", "coroutine", "utf8", "debug", "package" }
local MANUAL = "https://www.lua.org/manual/5.4/manual.html#pdf-"
local STDLIB_SECTIONS = {
  coroutine = "6.2", package = "6.3", string = "6.4", utf8 = "6.5", table = "6.6",
  math = "6.7", io = "6.8", os = "6.9", debug = "6.10",
}

-- Lua's standard library as it is now, before any user code: value -> name.
local STD_NAMES = {}
for _, lib in ipairs(STDLIBS) do
  local t = _G[lib]
  if type(t) == "table" then
    STD_NAMES[t] = lib
    for k, f in pairs(t) do
      if type(k) == "string" and type(f) == "function" then STD_NAMES[f] = lib .. "." .. k end
    end
  end
end
for k, f in pairs(_G) do
  if type(k) == "string" and type(f) == "function" then STD_NAMES[f] = k end
end

-- "ldist.Tensor" -> "Tensor", "ldist.nn.Dense" -> "nn.Dense"
local function short_name(n) return (n:gsub("^ldist%.", "")) end

-- The class name of an object whose metatable has a __name (userdata or table).
local function class_of(v)
  local mt = dgetmetatable(v)
  if type(mt) ~= "table" then return nil end
  local n = rawget(mt, "__name")
  if type(n) == "string" then return short_name(n), mt end
  return nil, mt
end

-- The modules of ldist: its table-valued fields, minus bookkeeping.
local NOT_MODULES = { docs = true, globals = true }
local function modules()
  local list = {}
  for k, v in pairs(ldist) do
    if type(k) == "string" and type(v) == "table" and not NOT_MODULES[k] and not k:match("^_") then
      list[#list + 1] = k
    end
  end
  table.sort(list)
  return list
end

-- The method tables a metatable's __index reaches: the table itself, or,
-- when __index is a function (a C closure that also serves t[i] or computed
-- fields), the tables among its upvalues; plus mt.methods / mt.__methods.
-- Found without calling anything.
local function index_tables(mt)
  local list = {}
  if type(mt) ~= "table" then return list end
  local idx = rawget(mt, "__index")
  if type(idx) == "table" then
    list[1] = idx
  elseif type(idx) == "function" then
    for i = 1, 16 do
      local name, v = debug.getupvalue(idx, i)
      if name == nil then break end
      if type(v) == "table" and v ~= _G and name ~= "_ENV" then list[#list + 1] = v end
    end
  end
  for _, k in ipairs({ "methods", "__methods" }) do
    local t = rawget(mt, k)
    if type(t) == "table" then list[#list + 1] = t end
  end
  return list
end

-- All methods of a class (metatable), following inheritance, as one table.
local function class_methods(mt)
  local all, seen = {}, {}
  local function visit(m, depth)
    if type(m) ~= "table" or seen[m] or depth > 10 then return end
    seen[m] = true
    for _, t in ipairs(index_tables(m)) do
      for k, f in next, t do
        if type(k) == "string" and all[k] == nil then all[k] = f end
      end
      visit(dgetmetatable(t), depth + 1)
    end
  end
  visit(mt, 0)
  return all
end

-- Named classes: metatables in the registry with a __name ("ldist.Tensor").
local function classes()
  local list = {}
  for k, mt in pairs(debug.getregistry()) do
    if type(k) == "string" and type(mt) == "table" and rawget(mt, "__name") == k then
      list[short_name(k)] = mt
    end
  end
  return list
end

-- The qualified name of a value, searching ldist's modules, the classes'
-- methods, Lua's standard library and the globals. Returns name, origin
-- ("ldist", "lua" or "user").
local function name_of(v)
  if v == nil then return nil end
  for _, m in ipairs(modules()) do
    local mod = ldist[m]
    if mod == v then return m, "ldist" end
    for k, f in next, mod do
      if f == v and type(k) == "string" then return m .. "." .. k, "ldist" end
    end
  end
  for cname, mt in pairs(classes()) do
    if mt == v then return cname, "ldist" end
    for k, f in pairs(class_methods(mt)) do
      if f == v and type(k) == "string" and not k:match("^__") then return cname .. ":" .. k, "ldist" end
    end
  end
  if STD_NAMES[v] then return STD_NAMES[v], "lua" end
  for k, f in next, _G do
    if f == v and type(k) == "string" then return k, "user" end
  end
  return nil
end

-- Resolve "a.b.c" / "a.b:c" to a value. Tables are read raw, through their
-- __index tables; only a userdata's __index function is called (the
-- bindings' fields, like model.layers), under pcall: a table's __index
-- function may load a data set.
local function resolve(path, root)
  local v = root or _G
  for _, part in ("." .. path):gmatch("([%.:])([^%.:]+)") do
    local nv
    if type(v) == "table" then nv = rawget(v, part) end
    if nv == nil then nv = class_methods(dgetmetatable(v))[part] end
    if nv == nil and type(v) == "userdata" then
      local ok, r = pcall(function() return v[part] end)
      if ok then nv = r end
    end
    if nv == nil then return nil end
    v = nv
  end
  return v
end

-- ---- documentation text ---------------------------------------------------------

local function first_line(s) return (tostring(s):match("^[^\n]*")) end

local function doc_for_name(name)
  local t = docs[name] or docs["ldist." .. name]
  if t then return t end
  -- "Tensor.sum" and "Tensor:sum" name the same method
  local alt = name:gsub("([%.:])([^%.:]+)$", function(sep, last)
    return (sep == "." and ":" or ".") .. last
  end)
  return docs[alt]
end

-- Comments right above a Lua function's definition (like Python's getcomments).
local function source_comments(info)
  if not (info.source and info.source:sub(1, 1) == "@" and info.linedefined > 0) then return nil end
  local f = io.open(info.source:sub(2), "r")
  if not f then return nil end
  local lines, n = {}, 0
  for l in f:lines() do
    n = n + 1
    if n >= info.linedefined then break end
    lines[n] = l
  end
  f:close()
  local out = {}
  for i = info.linedefined - 1, math.max(1, info.linedefined - 30), -1 do
    local c = lines[i] and lines[i]:match("^%s*%-%-+%s?(.*)$")
    if not c then break end
    table.insert(out, 1, c)
  end
  return #out > 0 and table.concat(out, "\n") or nil
end

local function signature(f, name)
  local info = debug.getinfo(f, "Su")
  if info.what == "C" then return (name or "function") .. "(...)", info end
  local params = {}
  for i = 1, info.nparams do params[i] = debug.getlocal(f, i) end
  if info.isvararg then params[#params + 1] = "..." end
  return ("%s(%s)"):format(name or "function", table.concat(params, ", ")), info
end

-- One line per member of a module or class: "  name   summary".
local function member_list(t, prefix, sep)
  local names = {}
  for k in next, t do
    if type(k) == "string" and not k:match("^_") then names[#names + 1] = k end
  end
  table.sort(names)
  local width = 0
  for _, k in ipairs(names) do width = math.max(width, #k) end
  local lines = {}
  for _, k in ipairs(names) do
    local v = rawget(t, k)
    local d = docs[v] or doc_for_name(prefix .. sep .. k)
    local summary = d and first_line(d) or (type(v) == "table" and "(module)" or "")
    lines[#lines + 1] = ("  %-" .. width .. "s  %s"):format(k, summary):gsub("%s+$", "")
  end
  return table.concat(lines, "\n")
end

local function text_for_value(v)
  local d = docs[v]
  if d then return d end
  local name, origin = name_of(v)
  if name then
    d = doc_for_name(name)
    if d then return d end
  end
  local tv = type(v)
  if tv == "function" then
    if origin == "lua" then
      return ("%s - a function of Lua's standard library.\nSee %s%s"):format(name, MANUAL, name:gsub(":", "."))
    end
    local sig, info = signature(v, name)
    local where = info.what == "C" and "a built-in function"
      or ("defined at %s:%d"):format(info.short_src, info.linedefined)
    local comments = info.what ~= "C" and source_comments(info)
    return sig .. "\n" .. where .. (comments and ("\n\n" .. comments) or "")
  elseif tv == "table" and name and origin == "ldist" and ldist[name] == v then
    return ("Module %s\n\n%s"):format(name, member_list(v, name, "."))
  elseif tv == "table" and name and origin == "lua" then
    return ("%s - a library of Lua's standard library.\nSee https://www.lua.org/manual/5.4/manual.html#%s")
      :format(name, STDLIB_SECTIONS[name] or "6")
  end
  local cname, mt = class_of(v)
  if cname then
    d = doc_for_name(cname)
    for _, m in ipairs(modules()) do d = d or doc_for_name(m .. "." .. cname) end
    local methods = class_methods(mt)
    local text = ("%s (a %s)"):format(cname, tv)
    if d then text = d end
    if next(methods) then text = text .. "\n\nMethods:\n" .. member_list(methods, cname, ":") end
    local fields = rawget(mt, "__fields")
    if type(fields) == "table" and #fields > 0 then
      text = text .. "\n\nFields: " .. table.concat(fields, ", ")
    end
    return text
  end
  return nil
end

local function text_for_name(s)
  local d = doc_for_name(s)
  if d then return d end
  local v = resolve(s) or resolve(s, ldist)
  if v == nil then
    -- "Tensor:sum", "Tensor": a class and its methods
    local cname, rest = s:match("^([%w_%.]+)[:%.]?([%w_]*)$")
    local mt = cname and classes()[cname]
    if mt then
      if rest == "" then return text_for_value(mt) end
      local f = class_methods(mt)[rest]
      if f ~= nil then return text_for_value(f) end
    end
    return nil
  end
  return text_for_value(v)
end

function ldist.doc_text(x)
  if type(x) == "string" then return text_for_name(x) end
  if x == nil then return nil end
  return text_for_value(x)
end
docs[ldist.doc_text] = [[
ldist.doc_text(x) -> string or nil
The documentation help(x) prints, as a string: x is an object or a name
such as "nn.Dense" or "Tensor:sum".]]

local function overview()
  local lines = {
    ("ldist %s - explore distributed training from Lua."):format(ldist.version),
    "help(x) shows the documentation of a module, function, class or method;",
    'x is the object itself or its name: help(nn.Dense), help("Tensor:sum").',
    "",
    "Modules:",
  }
  local mods = modules()
  local width = 0
  for _, m in ipairs(mods) do width = math.max(width, #m) end
  for _, m in ipairs(mods) do
    local d = docs[ldist[m]] or doc_for_name(m)
    lines[#lines + 1] = ("  %-" .. width .. "s  %s"):format(m, d and first_line(d) or ""):gsub("%s+$", "")
  end
  local fns = {}
  for k, on in pairs(ldist.globals) do
    if on and type(ldist[k]) == "function" then fns[#fns + 1] = k end
  end
  table.sort(fns)
  if #fns > 0 then
    lines[#lines + 1] = ""
    lines[#lines + 1] = "Functions: " .. table.concat(fns, ", ")
  end
  lines[#lines + 1] = ""
  lines[#lines + 1] = "In the REPL: Tab completes names, Up/Ctrl-R search the history,"
  lines[#lines + 1] = "Ctrl-C interrupts running code, Ctrl-D exits; end a line with ';' not to print it."
  return table.concat(lines, "\n")
end

function ldist.help(...)
  if select("#", ...) == 0 then
    print(overview())
    return
  end
  local x = ...
  local text = ldist.doc_text(x)
  if text then
    print(text)
  elseif type(x) == "string" then
    print(("No documentation for %q. help() lists the modules."):format(x))
  else
    print(("No documentation for this %s value. help() lists the modules."):format(type(x)))
  end
end
docs[ldist.help] = [[
help([x])
Print the documentation of x: a module, function, class, method or object,
or its name as a string ("nn.Dense", "Tensor:sum"). help() lists the modules.]]
docs["help"] = docs[ldist.help]
ldist.globals.help = true

-- ---- completion -------------------------------------------------------------------

local KEYWORDS = {
  "and", "break", "do", "else", "elseif", "end", "false", "for", "function", "goto", "if",
  "in", "local", "nil", "not", "or", "repeat", "return", "then", "true", "until", "while",
}

-- If the text ends inside a short string, its quote character and the
-- position of that quote; skips comments and long strings.
local function open_string(line)
  local i, n = 1, #line
  while i <= n do
    local c = line:sub(i, i)
    if c == "-" and line:sub(i, i + 1) == "--" then
      local eq = line:match("^%[(=*)%[", i + 2)
      if eq then
        local close = line:find("]" .. eq .. "]", i, true)
        if not close then return nil end
        i = close + #eq + 2
      else
        return nil                              -- a comment to the end of the line
      end
    elseif c == "[" and line:match("^%[=*%[", i) then
      local eq = line:match("^%[(=*)%[", i)
      local close = line:find("]" .. eq .. "]", i + #eq + 2, true)
      if not close then return nil end
      i = close + #eq + 2
    elseif c == '"' or c == "'" then
      local j = i + 1
      while j <= n do
        local d = line:sub(j, j)
        if d == "\\" then j = j + 1
        elseif d == c then break end
        j = j + 1
      end
      if j > n then return c, i end
      i = j + 1
    else
      i = i + 1
    end
  end
  return nil
end

local function add_keys(set, t, want_methods)
  if type(t) ~= "table" then return end
  for k, v in next, t do
    if type(k) == "string" and k:match("^[%a_][%w_]*$") and not k:match("^__") then
      if not want_methods or type(v) == "function" or (dgetmetatable(v) or {}).__call then
        set[k] = true
      end
    end
  end
end

-- Field and method names of v: its own keys (tables), the methods of its
-- class through the metatable chain (userdata, objects, strings), and the
-- names a binding lists in its metatable's __fields (computed fields).
local function members(v, want_methods)
  local set = {}
  if type(v) == "table" then add_keys(set, v, want_methods) end
  local mt = dgetmetatable(v)
  add_keys(set, class_methods(mt), want_methods)
  local fields = type(mt) == "table" and rawget(mt, "__fields")
  if type(fields) == "table" and not want_methods then
    for _, name in ipairs(fields) do set[name] = true end
  end
  return set
end

local function sorted_matches(set, partial, prefix)
  local out = {}
  for k in pairs(set) do
    if k:sub(1, #partial) == partial then out[#out + 1] = prefix .. k end
  end
  table.sort(out)
  return out
end

local function complete_files(word)
  local dir, base = word:match("^(.*/)([^/]*)$")
  if not dir then dir, base = "", word end
  local fsdir = dir
  if fsdir:sub(1, 2) == "~/" then fsdir = (os.getenv("HOME") or "~") .. fsdir:sub(2) end
  local list = ldist._listdir and ldist._listdir(fsdir == "" and "." or fsdir)
  local out = {}
  for _, name in ipairs(list or {}) do
    if name:sub(1, #base) == base and (base:sub(1, 1) == "." or name:sub(1, 1) ~= ".") then
      out[#out + 1] = dir .. name
    end
  end
  table.sort(out)
  return out
end

local function complete_modules(word)
  local set = {}
  for k in pairs(package.loaded) do if type(k) == "string" then set[k] = true end end
  for k in pairs(package.preload) do if type(k) == "string" then set[k] = true end end
  local sub = word:match("^(.*)%.[^%.]*$")
  local subdir = sub and (sub:gsub("%.", "/") .. "/") or ""
  local subprefix = sub and (sub .. ".") or ""
  if ldist._listdir then
    for _, path in ipairs({ package.path, package.cpath }) do
      for template in path:gmatch("[^;]+") do
        local dir, suffix = template:match("^(.-)%?(.*)$")
        if dir and (dir == "" or dir:sub(-1) == "/") then
          for _, name in ipairs(ldist._listdir((dir == "" and "./" or dir) .. subdir) or {}) do
            local m = suffix:sub(1, 1) == "/" and name:match("^(.-)/$")   -- ?/init.lua
              or (name:sub(-#suffix) == suffix and name:sub(1, -#suffix - 1))
            if m and m ~= "" and not m:find("[/%.]") then set[subprefix .. m] = true end
          end
        end
      end
    end
  end
  return sorted_matches(set, word, "")
end

-- ldist.complete(text_before_cursor) -> matches, start, kind
-- matches replace the text from byte `start` on; kind is "expr", "module" or "file".
function ldist.complete(line)
  local q, qpos = open_string(line)
  if q then
    local word = line:sub(qpos + 1)
    local before = line:sub(1, qpos - 1)
    if before:match("require%s*%(?%s*$") then return complete_modules(word), qpos + 1, "module" end
    return complete_files(word), qpos + 1, "file"
  end
  local word = line:match("[%w_%.:]*$")
  local start = #line - #word + 1
  if line:sub(start - 1, start - 1):match("[%]%)\"']") then return {}, start, "expr" end
  local path, sep, partial = word:match("^(.-)([%.:])([%w_]*)$")
  if not path then
    local set = members(_G, false)
    for _, k in ipairs(KEYWORDS) do set[k] = true end
    return sorted_matches(set, word, ""), start, "expr"
  end
  if path == "" or path:find(":", 1, true) or not path:match("^[%a_][%w_%.]*$") then
    return {}, start, "expr"
  end
  local v = resolve(path)
  if v == nil then return {}, start, "expr" end
  return sorted_matches(members(v, sep == ":"), partial, path .. sep), start, "expr"
end
