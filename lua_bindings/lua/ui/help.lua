-- ui/help.lua - introspection shared by the REPL and the Jupyter kernel:
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

-- ldist.internal(t, name, ...): names of module t that other prelude files
-- use but a user has no reason to: completion offers them only when nothing
-- else matches, and help(t) leaves them out (Python's leading underscore,
-- for names that must keep theirs).
local INTERNAL = setmetatable({}, { __mode = "k" })
function ldist.internal(t, ...)
  local set = INTERNAL[t] or {}
  INTERNAL[t] = set
  for i = 1, select("#", ...) do set[select(i, ...)] = true end
end
local function is_internal(t, k) return INTERNAL[t] ~= nil and INTERNAL[t][k] == true end

-- ldist.text(s) -> a Text: a string that the REPL and the notebook show as
-- it reads (a story, a report), not as a quoted literal with \n escapes.
-- tostring(t) is the string; string methods work on it (t:find("x")).
local Text = { __name = "ldist.Text" }
Text.__index = function(t, k)
  local f = string[k]
  if f then return function(self, ...) return f(rawget(self, 1), ...) end end
end
Text.__tostring = function(t) return rawget(t, 1) end
Text.__len = function(t) return #rawget(t, 1) end
Text.__concat = function(a, b) return tostring(a) .. tostring(b) end
Text.__eq = function(a, b) return tostring(a) == tostring(b) end
function ldist.text(s) return setmetatable({ tostring(s) }, Text) end
ldist._Text = Text

-- ldist.width() -> the columns text may use: the terminal's, 80 when unknown
-- (a pipe, a file, the notebook), as Python's shutil.get_terminal_size.
function ldist.width()
  local cols = ldist.termsize and ldist.termsize()
  if not cols then cols = tonumber(os.getenv("COLUMNS")) end
  return (cols and cols >= 20) and math.floor(cols) or 80
end

-- ldist.wrap(text, width, paragraphs) -> text with every line longer than
-- width broken at spaces. A continuation is indented as its line's text (a
-- list "  name  summary" continues under the summary); with `paragraphs`, a
-- prose line's overflow joins the next line of its paragraph instead of
-- standing alone (help text); a word longer than the room left is cut, the
-- one case without a space.
local function ulen(s) return utf8.len(s) or #s end
local function usub(s, i, j)   -- characters i..j (1-based; j may be nil)
  local a = utf8.offset(s, i) or (#s + 1)
  local b = j and ((utf8.offset(s, j + 1) or (#s + 1)) - 1) or #s
  return s:sub(a, b)
end
function ldist.wrap(text, width, paragraphs)
  width = math.max(width or ldist.width(), 20)
  local lines = {}
  for line in (tostring(text) .. "\n"):gmatch("(.-)\n") do lines[#lines + 1] = line end
  local out, i = {}, 1
  while i <= #lines do
    local line = lines[i]
    if ulen(line) <= width then
      out[#out + 1] = line
    else
      local lead = #line:match("^%s*")
      local col = line:match("^%s*%S+%s%s+()")
      local indent = (col and col - 1 <= width // 2) and col - 1 or lead
      if indent > width // 2 then indent = 0 end   -- each piece must leave room for text
      local rest = line
      while ulen(rest) > width do
        local floor = (#out > 0 and rest ~= line) and indent or lead
        local cut
        for k = width + 1, floor + 2, -1 do
          if usub(rest, k, k) == " " then cut = k; break end
        end
        if cut then
          out[#out + 1] = (usub(rest, 1, cut - 1):gsub("%s+$", ""))
          rest = (" "):rep(indent) .. usub(rest, cut + 1):gsub("^%s+", "")
        elseif col and indent > lead then
          -- a long word in a list's summary column: break it after a ',',
          -- '{' or '(' (else at the edge), and stay in the column, so the
          -- pieces never read as entries of the list
          local k = width
          while k > floor + 1 and not usub(rest, k, k):match("[,{(]") do k = k - 1 end
          if k <= floor + 1 then k = width end
          out[#out + 1] = usub(rest, 1, k)
          rest = (" "):rep(indent) .. usub(rest, k + 1):gsub("^%s+", "")
        elseif indent > lead then   -- a long word: continue under the text's start instead
          indent = lead
          rest = (" "):rep(indent) .. rest:gsub("^%s+", "")
        else
          out[#out + 1] = usub(rest, 1, width)
          rest = (" "):rep(indent) .. usub(rest, width + 1)
        end
      end
      local nxt = lines[i + 1]
      if paragraphs and not col and nxt and nxt:match("%S") and #nxt:match("^%s*") == lead and not nxt:match("^%s*[-*%d]")
          and not line:match("^%s*[%w_.:]+%(.*%)%s*$") then
        lines[i + 1] = rest .. " " .. nxt:gsub("^%s+", "")   -- the paragraph goes on
      else
        out[#out + 1] = rest
      end
    end
    i = i + 1
  end
  return table.concat(out, "\n")
end

-- ldist.page(text): print text wrapped to the terminal; through $PAGER
-- (else `less -R`) when it is longer than the terminal and the output is
-- one, as IPython pages long help.
function ldist.page(text)
  local cols, rows = nil, nil
  if ldist.termsize then cols, rows = ldist.termsize() end
  text = ldist.wrap(text, ldist.width(), true)
  local tty = ldist.isatty and ldist.isatty(io.stdout) and ldist.isatty(0)
  if tty and rows and select(2, text:gsub("\n", "")) + 1 >= rows then
    local pager = os.getenv("PAGER")
    if not pager or pager == "" then pager = "less -R" end
    io.stdout:flush()
    local p = io.popen(pager, "w")
    if p then
      p:write(text, "\n")
      if p:close() ~= nil then return end
    end
  end
  print(text)
end

ldist.document(ldist.internal, "ldist.internal", [[
ldist.internal(module, name, ...)
Mark names of a module as internal: Tab offers them only when nothing else
matches, and help(module) does not list them.]])
ldist.document(ldist.text, "ldist.text", [[
ldist.text(s) -> Text
A string shown as it reads (strategy:explain() returns one): tostring(t) is
the string, and string methods work on it (t:find("x")).]])
ldist.document(ldist.width, "ldist.width", [[
ldist.width() -> columns
The width printed text may use: the terminal's, else $COLUMNS, else 80.]])
ldist.document(ldist.wrap, "ldist.wrap", [==[
ldist.wrap(text [, width [, paragraphs]]) -> text
Break every line longer than width (ldist.width()) at spaces; continuation
lines are indented as the line's text; with paragraphs, an overflow joins
the next line of its paragraph.]==])
ldist.document(ldist.page, "ldist.page", [[
ldist.page(text)
Print text wrapped to the terminal; when it is longer than the terminal and
the output is one, through $PAGER (else less -R), as IPython pages help.]])

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

-- Help for names whose own file says nothing (ldist.more_docs, at the end of
-- this file): consulted after every other source, so a doc() next to the
-- code always wins over it.
local more_docs = {}

local function doc_for_name(name)
  local t = docs[name] or docs["ldist." .. name]
  if t then return t end
  -- "Tensor.sum" and "Tensor:sum" name the same method
  local alt = name:gsub("([%.:])([^%.:]+)$", function(sep, last)
    return (sep == "." and ":" or ".") .. last
  end)
  if docs[alt] then return docs[alt] end
  -- "MirroredStrategy:run" is the strategy protocol's "Strategy:run"
  local cls, meth = name:match("^([%w_]*Strategy)[:%.]([%w_]+)$")
  if cls and cls ~= "Strategy" then
    t = docs["Strategy:" .. meth] or docs["Strategy." .. meth] or more_docs["Strategy:" .. meth]
    if t then return t end
  end
  return more_docs[name] or more_docs["ldist." .. name] or more_docs[alt]
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
    if type(k) == "string" and not k:match("^_") and not is_internal(t, k) then names[#names + 1] = k end
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
  local name, origin
  if type(v) == "table" then
    -- a module: its text, then its members
    name, origin = name_of(v)
    local parent, leaf = (name or ""):match("^(.-)%.?([%w_]+)$")
    local holder = parent == "" and ldist or resolve(parent or "", ldist)
    if origin == "ldist" and type(holder) == "table" and rawget(holder, leaf) == v and not dgetmetatable(v) then
      d = d or doc_for_name(name)
      return (d and (d .. "\n\n") or ("Module %s\n\n"):format(name)) .. member_list(v, name, ".")
    end
  end
  if d then return d end
  if not name then name, origin = name_of(v) end
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
    -- the summary: the first line that says more than the module's name
    local summary = ""
    for l in tostring(d or ""):gmatch("[^\n]+") do
      if l ~= m and l ~= "ldist." .. m and l:match("%S") then summary = l; break end
    end
    lines[#lines + 1] = ("  %-" .. width .. "s  %s"):format(m, summary):gsub("%s+$", "")
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
  lines[#lines + 1] = "In the REPL (and the notebook): Tab completes names, Up/Ctrl-R search the history,"
  lines[#lines + 1] = "Ctrl-C interrupts running code, Ctrl-D exits (on a continuation line it drops the"
  lines[#lines + 1] = "unfinished input); end a line with ';' not to print it; a top-level `local` stays."
  return table.concat(lines, "\n")
end

function ldist.help(...)
  if select("#", ...) == 0 then
    ldist.page(overview())
    return
  end
  local x = ...
  local text = ldist.doc_text(x)
  if text then
    ldist.page(text)
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

-- Names starting with "_" are private (or Lua's own, _G, _ENV): offered
-- only once the user has typed the "_". Names of `owner` marked internal
-- (ldist.internal) are offered only when nothing else matches.
local function sorted_matches(set, partial, prefix, owner)
  local out, inner = {}, {}
  local private_ok = partial:sub(1, 1) == "_"
  for k in pairs(set) do
    if k:sub(1, #partial) == partial and (private_ok or k:sub(1, 1) ~= "_") then
      local list = owner ~= nil and is_internal(owner, k) and inner or out
      list[#list + 1] = prefix .. k
    end
  end
  if #out == 0 then out = inner end
  table.sort(out)
  return out
end

-- The value of an access chain such as `model.layers[2]` or `t["key"].x`
-- (names, `.name`, `[integer]`, `["string"]`), looked up as resolve() does;
-- nil when the chain is anything else (a call, an expression).
local function resolve_chain(path)
  if not path:find("[", 1, true) then
    if path:match("^[%a_][%w_%.]*$") and not path:find("..", 1, true) and path:sub(-1) ~= "." then
      return resolve(path)
    end
    return nil
  end
  local name, i = path:match("^([%a_][%w_]*)()")
  if not name then return nil end
  local v = resolve(name)
  while v ~= nil and i <= #path do
    local key, j = path:match("^%.([%a_][%w_]*)()", i)
    if not key then
      local n
      n, j = path:match("^%[%s*(%d+)%s*%]()", i)
      key = tonumber(n)
      if not key then
        local q
        q, key, j = path:match("^%[%s*([\"'])(.-)%1%s*%]()", i)
      end
    end
    if key == nil then return nil end
    if type(key) == "string" then
      v = resolve(key, v)
    else
      local nv
      if type(v) == "table" then nv = rawget(v, key) end
      if nv == nil and type(v) == "userdata" then
        local ok, r = pcall(function() return v[key] end)
        if ok then nv = r end
      end
      v = nv
    end
    i = j
  end
  return v
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
  -- the access chain before the cursor: names, fields, `[2]` and `["k"]`
  -- indexing (model.layers[2]:), then an optional `.` or `:` and a partial name
  local word = line:match("[%w_%.:]*$")
  local start = #line - #word + 1
  while true do
    local before = line:sub(1, start - 1)
    local idx = before:match("()%[%s*%d+%s*%][%w_%.]*$") or before:match("()%[%s*\"[^\"]*\"%s*%][%w_%.]*$")
      or before:match("()%[%s*'[^']*'%s*%][%w_%.]*$")
    if not idx then break end
    local head = line:sub(1, idx - 1):match("[%w_%.]*$")
    if head == "" then break end
    start = idx - #head
    word = line:sub(start)
  end
  if line:sub(start - 1, start - 1):match("[%]%)\"']") then return {}, start, "expr" end
  local path, sep, partial = word:match("^(.-)([%.:])([%w_]*)$")
  if not path then
    local set = members(_G, false)
    for _, k in ipairs(KEYWORDS) do set[k] = true end
    return sorted_matches(set, word, ""), start, "expr"
  end
  if path == "" or path:find(":", 1, true) or not path:match("^[%a_]") then
    return {}, start, "expr"
  end
  local v = resolve_chain(path)
  if v == nil then return {}, start, "expr" end
  return sorted_matches(members(v, sep == ":"), partial, path .. sep, v), start, "expr"
end

-- ---- "did you mean" ------------------------------------------------------------

-- Edit distance with transpositions (optimal string alignment): "modle" is
-- one step from "model".
local function distance(a, b)
  local la, lb = #a, #b
  if math.abs(la - lb) > 2 then return 3 end
  local d = {}
  for i = 0, la do d[i] = { [0] = i } end
  for j = 0, lb do d[0][j] = j end
  for i = 1, la do
    for j = 1, lb do
      local cost = a:byte(i) == b:byte(j) and 0 or 1
      local v = math.min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost)
      if i > 1 and j > 1 and a:byte(i) == b:byte(j - 1) and a:byte(i - 1) == b:byte(j) then
        v = math.min(v, d[i - 2][j - 2] + 1)
      end
      d[i][j] = v
    end
  end
  return d[la][lb]
end

-- The closest name of `set` (name -> true) to `name`, or nil.
local function closest(name, set)
  local best, bestd = nil, math.huge
  -- as Python's suggestions: a name of one or two letters is one letter
  -- away from too many others to guess from ('a' is not 'T'), so only its case
  local limit = (#name <= 2) and 0 or (#name <= 4) and 1 or 2
  for k in pairs(set) do
    if type(k) == "string" and k ~= name and k:match("^[%a_][%w_]*$") and not k:match("^__") then
      local dd = distance(name:lower(), k:lower())
      if dd <= limit and (dd < bestd or (dd == bestd and k < best)) then best, bestd = k, dd end
    end
  end
  return best
end

-- ldist._closest(name, list) -> the closest name of a list, or nil (the
-- layers' "unknown option" errors, lua_bindings/nn.c)
function ldist._closest(name, list)
  local set = {}
  for _, k in ipairs(list) do set[k] = true end
  return closest(name, set)
end

-- Names a misspelt global could have meant: the globals and the locals and
-- upvalues of the function that failed (stack level `level`).
local function visible_names(level)
  local set = {}
  for k in next, _G do set[k] = true end
  local info = level and debug.getinfo(level, "f")
  if info then
    for i = 1, 250 do
      local n = debug.getlocal(level, i)
      if not n then break end
      if not n:match("^%(") then set[n] = true end
    end
    for i = 1, 255 do
      local n = debug.getupvalue(info.func, i)
      if not n then break end
      set[n] = true
    end
  end
  return set
end

-- Method and field names a misspelt member could have meant: the methods of
-- every class, of the globals' classes, and the members of every module.
local function member_names()
  local set = {}
  for _, mt in pairs(classes()) do
    for k in pairs(class_methods(mt)) do set[k] = true end
    local fields = rawget(mt, "__fields")
    if type(fields) == "table" then for _, f in ipairs(fields) do set[f] = true end end
  end
  for _, v in next, _G do
    if type(v) == "table" or type(v) == "userdata" then
      for k in pairs(members(v, false)) do set[k] = true end
    end
  end
  for _, m in ipairs(modules()) do
    for k in next, ldist[m] do set[k] = true end
  end
  return set
end

-- ldist._did_you_mean(msg [, level]) -> msg with a hint, or nil. Called by
-- the message handler every front end uses (ldist_traceback, state.c), so
-- the REPL, scripts and the kernel all say
--   attempt to index a nil value (global 'modle'); did you mean 'model'?
--   attempt to call a nil value (method 'fitt'); did you mean 'fit'?
function ldist._did_you_mean(msg, level)
  if type(msg) ~= "string" or msg:find("did you mean", 1, true) then return nil end
  local kind, name = msg:match("a nil value %((%a+) '([%a_][%w_]*)'%)")
  if not kind then return nil end
  local guess
  if kind == "global" then
    guess = closest(name, visible_names(level and level + 1))
  elseif kind == "method" or kind == "field" then
    guess = closest(name, member_names())
  end
  if not guess then return nil end
  local e = select(2, msg:find("a nil value %(%a+ '[%a_][%w_]*'%)"))
  return msg:sub(1, e) .. ("; did you mean '%s'?"):format(guess) .. msg:sub(e + 1)
end

-- ---- help for what the other files leave undocumented ----------------------------
-- Looked up by name, after every doc() next to the code (doc_for_name), so
-- a file that documents its own function takes over from here.

local M = more_docs

-- modules
M["autograd"] = [[
Gradients, the TensorFlow way: autograd.GradientTape() records operations on
tensors; tape:gradient(y, x) differentiates. autograd.is_recording().]]
M["callbacks"] = [[
Keras callbacks for model:fit: EarlyStopping, ModelCheckpoint, CSVLogger,
LearningRateScheduler, ReduceLROnPlateau, TerminateOnNaN, BackupAndRestore,
TensorBoard, LambdaCallback, ProgbarLogger. A callback is any table with some of
on_train_begin, on_epoch_begin, on_train_batch_end, on_epoch_end, on_train_end.]]
M["config"] = [[
Settings, as keras.config and tf.config: config.cpu_devices(n) splits the CPU into
n logical devices (cpu:0 .. cpu:n-1), as TF's logical device configuration does;
each gets cores/n threads pinned to its own cores. config.cpu_split() says how the
cores were split (also among the processes of one job on this host).
config.fused_attention(mode) picks MultiHeadAttention's kernel;
config.traceback_filtering(on) shows or hides ldist's own frames in errors.]]
M["json"] = [[
JSON text <-> Lua values: json.encode(value), json.decode(text).]]
M["losses"] = [[
Keras losses: SparseCategoricalCrossentropy, CategoricalCrossentropy,
BinaryCrossentropy, MeanSquaredError (MSE), MeanAbsoluteError (MAE),
MeanAbsolutePercentageError (MAPE), MeanSquaredLogarithmicError (MSLE), Huber,
LogCosh, KLDivergence, Poisson, CosineSimilarity, Hinge, SquaredHinge,
CategoricalHinge; options from_logits=, reduction=. compile takes Keras's
names too: "mae", "huber", "kld", ...]]
M["metrics"] = [[
Keras metrics: Accuracy, SparseCategoricalAccuracy, CategoricalAccuracy,
BinaryAccuracy, Mean, MeanSquaredError, MeanAbsoluteError,
MeanAbsolutePercentageError, MeanSquaredLogarithmicError, RootMeanSquaredError,
LogCoshError, CosineSimilarity, KLDivergence, Poisson, Hinge, SquaredHinge,
CategoricalHinge, Precision, Recall, TruePositives, FalsePositives, TrueNegatives,
FalseNegatives, AUC, SparseTopKCategoricalAccuracy, TopKCategoricalAccuracy;
m:update_state(...), m:result(), m:reset_state(). compile takes Keras's names:
metrics = {"mae"} gives history.mae and val_mae.]]
M["nn"] = [[
Layers and models, Keras-style: nn.Sequential{...}, nn.Model{inputs=, outputs=},
nn.Dense, nn.Conv2D, nn.LSTM, ... and nn.load_model. help(nn.Dense) for a layer.
Every layer also takes name= and dtype= (a dtype policy: "float32", "mixed_bfloat16",
"mixed_float16"; help(mixed_precision)).]]
M["optim"] = [[
Optimizers: SGD (momentum, nesterov), Adam, AdamW, RMSprop, and learning-rate
schedules in optim.schedules; opt:apply_gradients(grads, vars).]]
M["tensor"] = [[
N-dimensional arrays on a device (cpu:N, cuda:N): tensor.new, zeros, ones, normal,
arange, ...; methods with t:name(...). Indices and axes count from 0.]]
M["distribute.partitioners"] = [[
How ParameterServerStrategy splits a variable into shards along axis 0 (its
variable_partitioner): FixedShardsPartitioner{num_shards=},
MinSizePartitioner{min_shard_bytes=256K, max_shards=1},
MaxSizePartitioner{max_shard_bytes=1M, max_shards=}. A partitioner is a function
(shape, bytes_per_element) -> number of shards.]]

-- functions of ldist
M["clock"] = "ldist.clock() -> seconds on a monotonic clock (wall time; os.clock counts CPU time)."
M["walltime"] = "ldist.walltime() -> seconds on a monotonic clock (the same as ldist.clock)."
M["set_num_threads"] = "ldist.set_num_threads(n)\n\nHow many threads cpu:0's kernels (BLAS) use."
M["get_num_threads"] = "ldist.get_num_threads() -> n\n\nHow many threads cpu:0's kernels (BLAS) use."
M["isatty"] = "ldist.isatty([fd | file]) -> boolean\n\nIs the file (default: stdout) a terminal?"
M["termsize"] = "ldist.termsize() -> columns, rows of the terminal, or nil when there is none."
M["repr"] = "ldist.repr(v) -> string\n\nThe text the REPL and the notebook show for v."
M["complete"] = [[
ldist.complete(text_before_cursor) -> matches, start, kind
The completion both front ends use (Tab in the REPL, complete_request in the
kernel): matches replace the text from byte `start` on; kind is "expr",
"module" (inside require "...") or "file" (inside any other string). Names
starting with "_" are offered only once "_" is typed.]]
M["document"] = [[
ldist.document(obj, name or {names}, text)
Register help text for obj under the object and its qualified name(s).]]

-- autograd, json, tensor
M["autograd.is_recording"] = "autograd.is_recording() -> boolean\n\nIs a GradientTape recording now?"
M["GradientTape:start"] = "tape:start() -> tape\n\nStart recording (tape:record(fn) starts and stops around fn)."
M["GradientTape:stop"] = "tape:stop()\n\nStop recording; tape:gradient still works on what was recorded."
M["json.encode"] = "json.encode(value) -> string\n\nJSON text of a Lua value (tables with keys 1..n are arrays)."
M["json.decode"] = "json.decode(text) -> value\n\nThe Lua value of a JSON text (arrays are tables with keys 1..n)."
M["tensor.is_tensor"] = "tensor.is_tensor(v) -> boolean\n\nIs v a tensor?"
local function tdoc(name, text) M["Tensor:" .. name] = text end
tdoc("abs", "t:abs() -> |t|, element-wise.")
tdoc("neg", "t:neg() -> -t, element-wise.")
tdoc("exp", "t:exp() -> e^t, element-wise.")
tdoc("log", "t:log() -> the natural logarithm of t, element-wise.")
tdoc("sqrt", "t:sqrt() -> the square root of t, element-wise.")
tdoc("square", "t:square() -> t * t, element-wise.")
tdoc("elu", "t:elu() -> t where t > 0, else e^t - 1 (Keras's elu, alpha 1), element-wise.")
tdoc("selu", "t:selu() -> 1.0507 * (t where t > 0, else 1.6733 (e^t - 1)) (Keras's selu), element-wise.")
tdoc("softplus", "t:softplus() -> log(1 + e^t), computed without overflow, element-wise.")
tdoc("softsign", "t:softsign() -> t / (1 + |t|), element-wise.")
tdoc("silu", "t:silu() -> t * sigmoid(t) (Keras's silu or swish), element-wise.")
tdoc("leaky_relu", "t:leaky_relu() -> t where t >= 0, else 0.2 t (Keras 3's negative_slope), element-wise.")
tdoc("relu6", "t:relu6() -> min(max(t, 0), 6), element-wise.")
tdoc("hard_sigmoid", "t:hard_sigmoid() -> clip(t / 6 + 0.5, 0, 1) (Keras's), element-wise.")
tdoc("hard_silu", "t:hard_silu() -> t * hard_sigmoid(t) (Keras's hard_silu or hard_swish), element-wise.")
tdoc("mish", "t:mish() -> t * tanh(softplus(t)), element-wise.")
tdoc("pow", "t:pow(p) -> t ^ p, element-wise.")
tdoc("relu", "t:relu() -> max(t, 0), element-wise (NaN stays NaN, as tf.nn.relu).")
tdoc("sigmoid", "t:sigmoid() -> 1 / (1 + e^-t), element-wise.")
tdoc("tanh", "t:tanh() -> the hyperbolic tangent of t, element-wise.")
tdoc("gelu", "t:gelu() -> the GELU activation of t, element-wise.")
tdoc("softmax", "t:softmax([axis=-1]) -> exp(t) / sum(exp(t)) along axis.")
tdoc("log_softmax", "t:log_softmax([axis=-1]) -> log(softmax(t)) along axis, computed stably.")
tdoc("add", "t:add(u) -> t + u (broadcasting; u a tensor or a number).")
tdoc("sub", "t:sub(u) -> t - u (broadcasting; u a tensor or a number).")
tdoc("mul", "t:mul(u) -> t * u, element-wise (broadcasting; u a tensor or a number).")
tdoc("div", "t:div(u) -> t / u, element-wise (broadcasting; u a tensor or a number).")
tdoc("maximum", "t:maximum(u) -> the element-wise larger of t and u (broadcasting; NaN where either is NaN,\n" ..
  "as tf.maximum, so t:maximum(lo):minimum(hi) clips as tf.clip_by_value does).")
tdoc("minimum", "t:minimum(u) -> the element-wise smaller of t and u (broadcasting; NaN where either is NaN).")
tdoc("eq", "t:eq(u) -> 1 where t == u, else 0 (a float32 mask; broadcasting).")
tdoc("gt", "t:gt(u) -> 1 where t > u, else 0 (a float32 mask; broadcasting).")
tdoc("lt", "t:lt(u) -> 1 where t < u, else 0 (a float32 mask; broadcasting).")
tdoc("float", "t:float() -> t as float32.")
tdoc("long", "t:long() -> t as int64.")
tdoc("cpu", "t:cpu() -> t on cpu:0 (t itself when it is there).")
tdoc("clone", "t:clone() -> a copy of t with its own storage.")
tdoc("contiguous", "t:contiguous() -> t with its elements in row-major order (a copy only when needed).")
tdoc("numel", "t:numel() -> the number of elements.")
tdoc("size", "t:size() -> the shape as a table {d1, d2, ...} (t.shape).")
tdoc("permute", "t:permute(a0, a1, ...) -> t with its axes in that order (from 0).")
tdoc("transpose", "t:transpose() -> t with its last two axes swapped (t.T for a matrix).")
tdoc("gather", "t:gather(indices [, axis=0]) -> the slices of t at `indices` along axis, as tf.gather:\n" ..
  "indices (int32/int64, a table or a tensor of any shape; negative ones from the end) give the\n" ..
  "shape t.shape[:axis] + indices.shape + t.shape[axis+1:]. An axis or index out of range is an\n" ..
  "error. A float t gets a gradient (the slices' gradients added where they came from).")
tdoc("index_select", "t:index_select(indices [, axis=0]) -> t:gather(indices, axis) (PyTorch's name).")
tdoc("tolist", "t:tolist() -> t as nested Lua tables of numbers (t:totable()).")

-- data
M["data.class_names_of"] = "data.class_names_of(ds) -> the class names of a dataset from image_dataset_from_directory, or nil."
M["Dataset:class_names"] = "ds.class_names: the class names of a dataset from image_dataset_from_directory (Keras's)."
M["Dataset:file_paths"] = "ds.file_paths: the files of a dataset from image_dataset_from_directory (Keras's)."
M["Dataset:TextLineDataset"] = "data.TextLineDataset(path or {paths}, compression_type=nil) -> Dataset of the files' lines."
M["DatasetIterator:next"] = "it:next() -> the next element, or nil at the end (`for x in ds do` calls it)."
M["DatasetIterator:close"] = "it:close()\n\nStop iterating and free what the iterator holds (prefetch threads, files)."

-- models, layers, metrics, callbacks
M["Model:add"] = "model:add(layer)\n\nAppend a layer to a Sequential model (Keras's model.add)."
M["Model:build"] = "model:build(input_shape)\n\nCreate the weights for inputs of that shape (the batch axis first), before any call."
M["Model:compile"] = [[
model:compile{optimizer="adam", loss=, metrics={"accuracy"}}
Choose the optimizer (an object or a name: "sgd", "adam", "adamw", "rmsprop",
"adagrad", "adamax", "nadam", "lion", "adadelta", "ftrl"), the loss (an object, a name, or a function(y_true, y_pred) returning a scalar) and the
metrics for fit and evaluate, as Keras's. weighted_metrics (Keras's) are metrics given
the step's sample weights (fit's sample_weight or class_weight, evaluate's
sample_weight); one named as a plain metric is logged as weighted_<name>. Under
mixed_float16 (mixed_precision) the optimizer is wrapped in a LossScaleOptimizer, as
Keras's compile does.
A model of several outputs takes a loss per output (a list, or a table keyed by the
output layers' names; one loss is used for every output), loss_weights (the same
shapes) and metrics (and weighted_metrics) per output ({out_a = {"accuracy"}} or a
list of lists); fit then
logs loss, <output>_loss and <output>_<metric>, as Keras.]]
M["Model:get_config"] = "model:get_config() -> Keras's config: enough to make the model again (without its weights)."
M["Model:summary_text"] = "model:summary_text([width]) -> the text model:summary() shows (layers, output shapes, parameters), at most width columns (80)."
M["Layer:get_config"] = "layer:get_config() -> the layer's options (units, activation, ..., dtype: its dtype policy's " ..
  "name), as Keras's get_config."
M["Layer:count_params"] = "layer:count_params() -> how many numbers its weights hold (Keras's), once it is built.\n\n" ..
  "layer.trainable = false freezes it (Keras's fine-tuning): its weights leave trainable_variables, fit and\n" ..
  "optimizers leave them as they are, and a BatchNormalization normalizes by its moving statistics;\n" ..
  "nn.Dense(64, {trainable = false}) makes it frozen, model.trainable = false freezes every layer."
M["Model:count_params"] = "model:count_params() -> how many numbers the model's weights hold, each layer once (Keras's)."
M["metrics.CategoricalAccuracy"] = "metrics.CategoricalAccuracy([name])\n\nHow often argmax(predictions) equals argmax(one-hot labels)."
M["metrics.BinaryAccuracy"] = "metrics.BinaryAccuracy([name])\n\nHow often (prediction > 0.5) equals the 0/1 label."
M["callbacks.ProgbarLogger:set_params"] = "(the callback protocol) fit tells the bar the number of epochs and steps."
M["callbacks.ProgbarLogger:on_epoch_begin"] = "(the callback protocol) a new bar for the epoch."
M["callbacks.ProgbarLogger:on_train_batch_end"] = "(the callback protocol) the bar moves on, with the running means."
M["callbacks.ProgbarLogger:on_epoch_end"] = "(the callback protocol) the bar's final line, with the epoch's logs."
M["callbacks.History:set_params"] = "(the callback protocol) fit's params (epochs, steps, verbose) become h.params."
M["callbacks.History:on_train_begin"] = "(the callback protocol) h.epoch starts empty for this fit; h.history keeps its lists (Keras's)."
M["callbacks.BackupAndRestore:on_epoch_begin"] = "(the callback protocol) notes the optimizer's step count at the epoch's start (a resumed epoch counts the steps already done)."
M["callbacks.BackupAndRestore:on_train_batch_end"] = "(the callback protocol) with save_freq=N, a checkpoint every N steps, holding exactly the updates its weights hold."
M["callbacks.BackupAndRestore:on_epoch_end"] = "(the callback protocol) a checkpoint of the epochs finished (weights, optimizer state, the epoch)."
M["callbacks.BackupAndRestore:on_train_end"] = "(the callback protocol) the checkpoint is deleted (delete_checkpoint=true, by the writing worker only)."
M["callbacks.History:on_epoch_end"] = "(the callback protocol) the epoch's logs are appended to h.history, the epoch to h.epoch."

-- display, comm, progress
M["display.html"] = "display.html(s) -> a value shown as HTML in a notebook (its text in a terminal).\n  display(display.html(\"<b>hi</b>\"))"
M["display.markdown"] = "display.markdown(s) -> a value shown as Markdown in a notebook."
M["display.svg"] = "display.svg(s) -> a value shown as an SVG picture in a notebook."
M["display.latex"] = "display.latex(s) -> a value shown as LaTeX in a notebook."
M["display.json"] = "display.json(t) -> a value shown as a JSON tree in a notebook."
M["display.javascript"] = "display.javascript(s) -> JavaScript a notebook runs when shown."
M["display.png"] = "display.png(bytes) -> a value shown as a PNG picture in a notebook."
M["display.backend"] = [[
display.backend(kind, x, opts)
How display draws: kind "display", "update" or "clear". In a terminal it prints
text (display.terminal); the Jupyter kernel replaces it with one that sends
display_data, update_display_data and clear_output.]]
M["display.terminal"] = "display.terminal(kind, x, opts)\n\nThe text front end's display backend: prints x's text."
M["comm.register_target"] = [[
comm.register_target(name, function(comm, msg) ... end)
The front end may then open comms with this target name (ipykernel's API);
msg is the comm_open message. comm:on_msg(fn), comm:send(data), comm:close().]]
M["comm.unregister_target"] = "comm.unregister_target(name)\n\nForget a target: comm_open for it is refused."
M["comm.open"] = "comm.open(target_name [, data [, metadata]]) -> Comm\n\nOpen a comm from the kernel side (the front end's target answers)."
M["ldist.progress.style"] = [[
ldist.progress.style = "auto" | "text"
"auto": progress bars are redrawn in place on a terminal and in a notebook;
"text": only each bar's final line is printed (one line per epoch of fit), for
front ends that ignore display updates (jupyter console) and for logs.
LDIST_PROGRESS=text in the environment sets "text" at start.]]
M["progress.style"] = M["ldist.progress.style"]

-- distribute
M["distribute.PerReplica"] = [[
distribute.PerReplica{v1, v2, ...} -> one value per local replica
What strategy:run returns when there are several replicas; passed to run, each
replica gets its own. Printed with each replica's shapes and devices.
strategy:reduce("sum", v) combines them; strategy:experimental_local_results(v)
lists them.]]
M["distribute.is_per_replica"] = "distribute.is_per_replica(v) -> boolean\n\nIs v a PerReplica value?"
M["distribute.worker_context"] = "distribute.worker_context() -> the ParameterServer worker this process is (on a worker), or nil."
M["distribute.ps_train_step"] = [[
distribute.ps_train_step(batch)
The training step model:fit and coordinator:schedule run on a parameter-server
worker: pull the weights, compute the gradients of the batch, push them.]]
M["distribute.partitioners.FixedShardsPartitioner"] = "FixedShardsPartitioner{num_shards=n}: every variable in n shards (fewer when it has fewer rows)."
M["distribute.partitioners.MinSizePartitioner"] = "MinSizePartitioner{min_shard_bytes=262144, max_shards=1}: shards of at least min_shard_bytes, at most max_shards."
M["distribute.partitioners.MaxSizePartitioner"] = "MaxSizePartitioner{max_shard_bytes=1048576, max_shards=}: as few shards as keep each under max_shard_bytes."
M["ReplicaContext:all_gather"] = "ctx:all_gather(value [, axis=0]) -> the replicas' values joined along axis, on every replica."
M["Strategy:experimental_local_results"] = "strategy:experimental_local_results(v) -> {value of replica 0, ...}: a PerReplica's values, a mirrored variable's copies, else {v}."
M["Strategy:experimental_distribute_dataset"] = [[
strategy:experimental_distribute_dataset(ds) -> a dataset of PerReplica batches
Each global batch is split over the replicas (and, across processes, the data is
sharded by worker); iterate it and pass each element to strategy:run.]]
M["Strategy:train_step"] = "(the strategy protocol) one step of model:fit on this strategy's replicas."
M["Strategy:trace_spans"] = "strategy:trace_spans() -> {[replica+1] = {{kind, start, end, step}, ...}}: what trace(true) recorded."
M["Strategy:write_trace"] = "strategy:write_trace(path)\n\nThe recorded trace as Chrome trace JSON (chrome://tracing, Perfetto): one row per replica."
M["Strategy:timeline"] = "strategy:timeline{steps = {a, b}, save = \"t.svg\"} -> a picture of the recorded trace: one row per replica."
M["Strategy:trace_summary"] = "strategy:trace_summary() -> compute, wait and communication time, bytes and bus bandwidth per replica."
M["MultiWorkerMirroredStrategy:barrier"] = "strategy:barrier()\n\nWait until every worker process reaches this point."
M["MultiWorkerMirroredStrategy:broadcast"] = "strategy:broadcast(values [, root=0]) -> the root worker's tensors, on every worker."
M["MultiWorkerMirroredStrategy:is_chief"] = "strategy:is_chief() -> true on worker 0 (the one that writes checkpoints and logs)."
M["MultiWorkerMirroredStrategy:shutdown"] = "strategy:shutdown()\n\nLeave the ring: close the connections to the other workers."
M["ParameterServerStrategy:checkpoint"] = "strategy:checkpoint([dir]) -> the ps tasks write their shards to dir (default checkpoint_dir), atomically."
M["ParameterServerStrategy:fetch_variables"] = "strategy:fetch_variables() -> every variable, reassembled from its shards on the ps tasks."
M["ParameterServerStrategy:ps_stats"] = "strategy:ps_stats() -> {applied=, unique=, duplicates=} per ps task."
M["ParameterServerStrategy:push_gradients"] = "strategy:push_gradients(grads)\n\nPush gradients (one per variable) from the coordinator: the ps tasks apply them as a worker's."
M["ParameterServerStrategy:shutdown"] = "strategy:shutdown()\n\nStop the workers and ps tasks this strategy started."
M["LocalCluster:run"] = "lc:run(code | function, ...) -> {result of worker 0, result of worker 1, ...}: run Lua on every worker."
M["LocalCluster:alive"] = "lc:alive() -> how many worker processes are alive."
M["LocalCluster:worker_alive"] = "lc:worker_alive(i) -> is worker i alive?"
M["LocalCluster:shutdown"] = "lc:shutdown()\n\nStop the cluster's processes (also when lc is closed or collected)."
M["LocalCluster:kill_worker"] = "lc:kill_worker(i [, signal=\"KILL\"])\n\nKill worker i (a fault drill)."
M["LocalCluster:kill_ps"] = "lc:kill_ps(i [, signal=\"KILL\"])\n\nKill ps task i (a fault drill)."
M["Comm:all_reduce"] = "(internal) comm:all_reduce(per_replica_tensors, op): the collective MirroredStrategy uses."
M["Comm:apply_sharded"] = "(internal) comm:apply_sharded(opt, per_replica_grads, vars): reduce-scatter, update, all-gather."
M["Comm:stats"] = "(internal) comm:stats([reset]) -> {calls=, bytes=, seconds=, products=} of the collectives so far."
M["PendingRead:item"] = "p:item() -> the number, waiting only for the work queued before the read."
M["SummaryWriter:scalar"] = "w:scalar(tag, value, step)\n\nWrite one scalar event (TensorBoard reads it)."
M["SummaryWriter:histogram"] = "w:histogram(tag, tensor, step)\n\nWrite the histogram of a tensor's values (30 buckets, as tf.summary.histogram; NaN and inf left out); TensorBoard's histograms tab reads it."
M["SummaryWriter:flush"] = "w:flush()\n\nWrite what is buffered to the event file."
M["SummaryWriter:close"] = "w:close()\n\nFlush and close the event file."
M["SummaryWriter:path"] = "w:path() -> the event file's path."

-- optimizers' schedules
M["optim.schedules"] = [[
Learning-rate schedules (Keras's): ExponentialDecay, CosineDecay (with warmup), PiecewiseConstantDecay,
InverseTimeDecay, PolynomialDecay, CosineDecayRestarts.
Give one as learning_rate; schedule(step) is the rate at that step.]]
M["optim.schedules.ExponentialDecay"] = [[
optim.schedules.ExponentialDecay{initial_learning_rate=, decay_steps=, decay_rate=, staircase=false}
optim.schedules.ExponentialDecay(initial_learning_rate, decay_steps, decay_rate[, staircase])
rate(step) = initial * decay_rate ^ (step / decay_steps) (the exponent floored when staircase).
The first three are required, as in Keras; options may follow the positions in a table.]]
M["optim.schedules.CosineDecay"] = [[
optim.schedules.CosineDecay{initial_learning_rate=, decay_steps=, alpha=0, warmup_target=, warmup_steps=0}
optim.schedules.CosineDecay(initial_learning_rate, decay_steps[, alpha])
A cosine from initial down to initial * alpha over decay_steps, then alpha * initial. With
warmup_target (Keras 3's): first a line from initial up to warmup_target over warmup_steps, then
the cosine from warmup_target down to warmup_target * alpha.]]
M["optim.schedules.InverseTimeDecay"] = [[
optim.schedules.InverseTimeDecay{initial_learning_rate=, decay_steps=, decay_rate=, staircase=false}
rate(step) = initial / (1 + decay_rate * step / decay_steps) (the fraction floored when staircase).]]
M["optim.schedules.PolynomialDecay"] = [[
optim.schedules.PolynomialDecay{initial_learning_rate=, decay_steps=, end_learning_rate=0.0001, power=1, cycle=false}
rate(step) = (initial - end) * (1 - step / decay_steps) ^ power + end, step held at decay_steps
(cycle: decay_steps grows to the next multiple of itself past step, as Keras's).]]
M["optim.schedules.CosineDecayRestarts"] = [[
optim.schedules.CosineDecayRestarts{initial_learning_rate=, first_decay_steps=, t_mul=2, m_mul=1, alpha=0}
SGDR: cosine decays that restart, each period t_mul times longer and its start m_mul times lower.]]
M["optim.schedules.PiecewiseConstantDecay"] = [[
optim.schedules.PiecewiseConstantDecay{boundaries={b1, ...}, values={v0, v1, ...}}
optim.schedules.PiecewiseConstantDecay({b1, ...}, {v0, v1, ...})
values[1] up to step b1, values[2] up to b2, ...; #values == #boundaries + 1.]]
M["Optimizer:apply_gradients"] = "opt:apply_gradients(grads, vars)\n\nOne update of vars with grads (lists in the same order), as Keras's."
M["data.experimental"] = "Keras's and tf.data's experimental corner: make_csv_dataset, AutoShardPolicy."

-- progress bars: the bar and its drawing backends
M["progress.Bar:update"] = "bar:update(done, {loss = 0.5, ...})\n\n`done` steps so far and the values to show; redrawn at most 10 times a second."
M["progress.Bar:finish"] = "bar:finish([values])\n\nThe final line, with the steps actually done."
M["progress.Bar:state"] = "bar:state() -> {title, done, total, elapsed, rate, eta, values, finished}: what backends draw."
M["progress.terminal"] = "The backend for a terminal (redrawn in place) or a file (plain lines): start, update, finish."
M["progress.backend"] = "The backend new bars draw with: progress.terminal, or in the kernel display.progress_backend."
M["progress.plain"] = "The plain-text backend of progress.style = \"text\": nothing while a bar runs, its final line at the end."
for _, b in ipairs({ "terminal", "backend", "plain" }) do
  M["progress." .. b .. ".start"] = "(the backend protocol) backend.start(bar): a bar begins."
  M["progress." .. b .. ".update"] = "(the backend protocol) backend.update(bar, state): draw the bar's state."
  M["progress." .. b .. ".finish"] = "(the backend protocol) backend.finish(bar, state): draw the final state."
end


-- ldist._has_doc(value, name) -> the help text written for it (by a doc() or
-- here), or nil; never the signature help() falls back to. For the test
-- that every public function has help (tests/lua/test_help_coverage.lua).
function ldist._has_doc(v, name)
  return (v ~= nil and docs[v]) or (name and doc_for_name(name)) or nil
end
