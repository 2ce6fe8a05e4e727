-- test_module.lua - ldist.so works from stock lua5.4, and the ldist program's
-- command line (script args, -e, exit status) behaves like lua's.
local T = dofile("tests/lua/testlib.lua")

-- "./ldist" in a command is the binary under test (tests/run.sh may run another)
local BIN = arg and arg[-1] or "./ldist"
local function run(cmd)
  cmd = cmd:gsub("%./ldist%f[^%w_.]", (BIN:gsub("%%", "%%%%")))
  local f = assert(io.popen(cmd .. " 2>&1; echo \"status=$?\""))
  local out = f:read("a"); f:close()
  return out, tonumber(out:match("status=(%d+)%s*$"))
end

T.test("require 'ldist' from lua5.4", function()
  local out, st = run([[lua5.4 -e 'package.cpath = "./?.so;" .. package.cpath
    local ldist = require "ldist"
    local t = ldist.tensor.new{{1, 2}, {3, 4}}
    print(ldist.version, t:matmul(t)[1][1])
    local m = ldist.nn.Sequential{ldist.nn.Dense(2)}
    print(m(t).shape[2])']])
  T.eq(st, 0, out)
  T.ok(out:find("22.0", 1, true), out)
  T.ok(out:find("\n2\n", 1, true), out)
end)

T.test("ldist -e and script arguments", function()
  local out, st = run([[./ldist -e 'print(tensor.ones(3):sum():item())']])
  T.eq(st, 0, out); T.ok(out:find("3.0", 1, true), out)
  local path = os.tmpname()
  local f = assert(io.open(path, "w")); f:write("print(arg[1], arg[2], #arg)\n"); f:close()
  out, st = run("./ldist " .. path .. " a b")
  T.eq(st, 0, out); T.ok(out:find("a\tb\t2", 1, true), out)
  os.remove(path)
end)

T.test("an uncaught error in a script exits non-zero with the message", function()
  local out, st = run([[./ldist -e 'local x = tensor.zeros(2, 3):matmul(tensor.zeros(5, 6))']])
  T.ok(st ~= 0, out)
  T.ok(out:find("shapes 2x3 and 5x6 do not match", 1, true), out)
  out, st = run("./ldist /nonexistent/script.lua")
  T.ok(st ~= 0 and out:find("/nonexistent/script.lua", 1, true), out)
end)

T.test("piped standard input runs as a script", function()
  local out, st = run([[echo 'print(1 + 1)' | ./ldist]])
  T.eq(st, 0, out); T.ok(out:find("2", 1, true), out)
end)

T.done()
