-- testlib.lua - a tiny TAP-style harness for Lua tests run by `ldist`.
--   local T = dofile("tests/lua/testlib.lua")
--   T.test("name", function() T.eq(1 + 1, 2) end)
--   T.done()      -- exits non-zero when a test failed
local T = { passed = 0, failed = 0 }
-- what a time bound is multiplied by: tests/run.sh sets LDIST_TEST_TIME_SCALE
-- for sanitized builds, which run several times slower
T.time_scale = math.max(1, tonumber(os.getenv("LDIST_TEST_TIME_SCALE")) or 1)

local function fail(msg, level) error(msg, (level or 1) + 2) end

function T.test(name, fn)
  local ok, err = xpcall(fn, debug.traceback)
  if ok then
    T.passed = T.passed + 1; print("ok - " .. name)
  else
    T.failed = T.failed + 1
    print("# " .. tostring(err):gsub("\n", "\n# "))
    print("not ok - " .. name)
  end
end

function T.ok(v, msg) if not v then fail(msg or "expected a true value") end return v end
function T.eq(a, b, msg)
  if a ~= b then fail(("%sexpected %s, got %s"):format(msg and msg .. ": " or "", tostring(b), tostring(a))) end
end
function T.near(a, b, tol, msg)
  tol = tol or 1e-5
  if not (math.abs(a - b) <= tol * (1 + math.abs(b))) then
    fail(("%sexpected %.9g, got %.9g (tol %g)"):format(msg and msg .. ": " or "", b, a, tol))
  end
end
-- T.raises(fn, pattern): fn must raise an error whose message contains pattern (plain text)
function T.raises(fn, pattern)
  local ok, err = pcall(fn)
  if ok then fail("expected an error matching '" .. pattern .. "'") end
  if not tostring(err):find(pattern, 1, true) then
    fail(("error '%s' does not contain '%s'"):format(tostring(err), pattern))
  end
  return err
end

-- T.tmpdir() -> a fresh scratch directory, and a function giving a path in it
function T.tmpdir()
  local dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir -p '" .. dir .. "'"))
  return dir, function(name) return dir .. "/" .. name end
end

-- T.peak_kib() -> this process's peak resident set (VmHWM) in KiB
function T.peak_kib()
  local f = assert(io.open("/proc/self/status"))
  local s = f:read("a")
  f:close()
  return tonumber(s:match("VmHWM:%s*(%d+)"))
end

function T.done()
  io.stdout:flush()
  os.exit(T.failed == 0 and 0 or 1)
end

return T
