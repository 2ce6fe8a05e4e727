-- test_help_coverage.lua - help() has something to say about every module it
-- lists and every public function: module functions, ldist.*, the methods of
-- the classes (C and Lua) and of live strategies (issue 18). ldist._has_doc
-- is help's own lookup without its fallback (a bare signature).
local T = dofile("tests/lua/testlib.lua")

local dgetmetatable = debug.getmetatable
local SKIP_MODULES = { docs = true, globals = true }

local function public(k) return type(k) == "string" and not k:match("^_") end
local function callable(v)
  if type(v) == "function" then return true end
  local mt = dgetmetatable(v)
  return type(v) == "table" and type(mt) == "table" and mt.__call ~= nil
end

-- The method tables behind a metatable, as help() finds them.
local function method_tables(mt)
  local list = {}
  local idx = rawget(mt, "__index")
  if type(idx) == "table" then list[#list + 1] = idx
  elseif type(idx) == "function" then
    for i = 1, 16 do
      local n, v = debug.getupvalue(idx, i)
      if not n then break end
      if type(v) == "table" and v ~= _G and n ~= "_ENV" then list[#list + 1] = v end
    end
  end
  for _, k in ipairs({ "methods", "__methods" }) do
    if type(rawget(mt, k)) == "table" then list[#list + 1] = rawget(mt, k) end
  end
  return list
end

-- Tables with no public function (registries such as comm.targets, enums
-- such as AutoShardPolicy) are data, not modules.
local function has_functions(t)
  for k, v in next, t do
    if public(k) and callable(v) then return true end
  end
  return false
end

-- Every public name of `root` (ldist, or a stand-in) without help text.
local function undocumented(root)
  local missing, seen = {}, {}
  local function need(v, name)
    if not ldist._has_doc(v, name) then missing[#missing + 1] = name end
  end
  local function class(mt, cname)
    if seen[mt] then return end
    seen[mt] = true
    local tables = { mt }
    for _, t in ipairs(method_tables(mt)) do tables[#tables + 1] = t end
    local done = {}
    for _, t in ipairs(tables) do
      for k, f in next, t do
        if public(k) and type(f) == "function" and not done[k] then
          done[k] = true
          need(f, cname .. ":" .. k)
        end
      end
    end
  end
  local function module(mod, mname, depth)
    need(mod, mname)
    for k, v in next, mod do
      if public(k) then
        if callable(v) then need(v, mname .. "." .. k)
        elseif type(v) == "table" and type(rawget(v, "__name")) == "string" then
          class(v, (rawget(v, "__name"):gsub("^ldist%.", "")))
        elseif type(v) == "table" and k:match("^%u") and dgetmetatable(v) == nil and has_functions(v) then
          class(v, k)                          -- a class's method table (tensor.Tensor, optim.Optimizer)
        elseif type(v) == "table" and dgetmetatable(v) == nil and depth < 2 and has_functions(v) then
          module(v, mname .. "." .. k, depth + 1)   -- data.experimental, optim.schedules, backends
        end
      elseif type(k) == "string" and type(v) == "table" and type(rawget(v, "__name")) == "string" then
        class(v, (rawget(v, "__name"):gsub("^ldist%.", "")))      -- distribute._Strategy and friends
      end
    end
  end
  for k, v in next, root do
    if public(k) and type(v) == "table" and not SKIP_MODULES[k] and dgetmetatable(v) == nil then
      module(v, k, 1)
    elseif public(k) and callable(v) then
      need(v, k)
    end
  end
  if root == ldist then
    for k, mt in pairs(debug.getregistry()) do
      if type(k) == "string" and k:match("^ldist%.") and type(mt) == "table" and rawget(mt, "__name") == k then
        class(mt, (k:gsub("^ldist%.", "")))
      end
    end
  end
  table.sort(missing)
  return missing
end

-- the classes one meets only as objects
local function instance_classes(missing)
  ldist.config.cpu_devices(2)
  local objects = {
    MirroredStrategy = distribute.MirroredStrategy(),
    OneDeviceStrategy = distribute.OneDeviceStrategy("cpu:0"),
    Strategy = distribute.get_strategy(),
    ReplicaContext = distribute.get_replica_context(),
    ["progress.Bar"] = ldist.progress.new { total = 1, file = io.open("/dev/null", "w") },
  }
  for cname, obj in pairs(objects) do
    local mt, chain = dgetmetatable(obj), {}
    while type(mt) == "table" and not chain[mt] do
      chain[mt] = true
      for _, t in ipairs({ mt, table.unpack(method_tables(mt)) }) do
        for k, f in next, t do
          if public(k) and type(f) == "function" and not ldist._has_doc(f, cname .. ":" .. k) then
            missing[#missing + 1] = cname .. ":" .. k
          end
        end
      end
      local idx = rawget(mt, "__index")
      mt = type(idx) == "table" and idx ~= mt and dgetmetatable(idx) or nil
    end
  end
  return missing
end

T.test("every module help() lists says what it is", function()
  for _, line in ipairs((function()
    local out = {}
    local print0 = print
    print = function(s) out[#out + 1] = s end
    local ok, err = pcall(help)
    print = print0
    assert(ok, err)
    return out
  end)()) do
    for l in tostring(line):gmatch("[^\n]+") do
      local m, rest = l:match("^  ([%w_]+)%s*(.*)$")
      if m and ldist[m] ~= nil and type(ldist[m]) == "table" then
        T.ok(rest ~= "" and rest ~= m, "help() says nothing of module " .. m)
      end
    end
  end
end)

T.test("every public function and method has help text", function()
  local missing = instance_classes(undocumented(ldist))
  T.ok(#missing == 0, #missing .. " without help: " .. table.concat(missing, ", "))
end)

T.test("the walk finds a missing one", function()
  local fake = { zz_module = { documented = function() end, undocumented = function() end } }
  ldist.document(fake.zz_module.documented, "zz_module.documented", "zz_module.documented()")
  ldist.document(fake.zz_module, "zz_module", "a module for this test")
  local missing = undocumented(fake)
  T.eq(table.concat(missing, ","), "zz_module.undocumented")
  fake.zz_module.Class = { __name = "ldist.ZzClass", method = function() end }
  T.eq(table.concat(undocumented(fake), ","), "ZzClass:method,zz_module.undocumented")
end)

T.test("no stale promises in the help", function()
  for k, text in pairs(ldist.docs) do
    T.ok(not tostring(text):find("later issue", 1, true), "stale text in the help of " .. tostring(k))
  end
end)

T.done()
