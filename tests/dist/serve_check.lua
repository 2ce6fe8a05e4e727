-- serve_check.lua - a LocalCluster worker (ldist.distribute._serve) facing
-- authenticated but malformed jobs: each is answered with an error and the
-- worker carries on; prints TAP lines.
local C = ldist._cluster
local T = dofile("tests/lua/testlib.lua")
local secret = C.random_hex(32)
local port = C.free_port()
local procs = C.procs_start({ C.self_exe(), "-e", "ldist.distribute._serve()" }, { {
  "LDIST_SECRET=" .. secret, "LDIST_COORDINATOR=127.0.0.1:" .. port, "LDIST_COORDINATOR_RANK=1",
  "LDIST_COORDINATOR_SIZE=2", "TF_CONFIG=" } }, true)
local ctl = C.join { rank = 0, size = 2, leader = "127.0.0.1:" .. port, secret = secret, data_plane = false, timeout = 10 }

local function reply()
  local t0 = ldist.clock()
  while ldist.clock() - t0 < 10 do
    local from, ty, body = ctl:recv(0.1)
    if ty == "reply" then return C.unpack(body) end
  end
  error("no reply")
end

T.test("a payload that is not an ldist message is answered with an error", function()
  ctl:send(1, "job", "\255\0garbage")
  local r = reply()
  T.eq(r.ok, false); T.ok(tostring(r.error):find("malformed", 1, true), r.error)
end)
T.test("a truncated payload is answered with an error", function()
  local good = C.pack({ id = 5, op = "exec", code = "return 1" })
  ctl:send(1, "job", good:sub(1, #good - 3))
  local r = reply()
  T.eq(r.ok, false); T.ok(tostring(r.error):find("malformed", 1, true), r.error)
end)
T.test("lengths that point past the end are answered with an error", function()
  ctl:send(1, "job", "LDP1T" .. string.rep("\255", 8))
  T.eq(reply().ok, false)
  ctl:send(1, "job", "LDP1X\0\2" .. string.rep("\127", 16))
  T.eq(reply().ok, false)
end)
T.test("a job that is not a table, or of an unknown kind, is an error", function()
  ctl:send(1, "job", C.pack(42))
  T.eq(reply().ok, false)
  ctl:send(1, "job", C.pack({ id = 7, op = "format_disk" }))
  local r = reply()
  T.eq(r.ok, false); T.ok(tostring(r.error):find("unknown job", 1, true), r.error)
end)
T.test("code that fails is reported with its error", function()
  ctl:send(1, "job", C.pack({ id = 8, op = "exec", code = "error('boom')" }))
  local r = reply()
  T.eq(r.ok, false); T.ok(tostring(r.error):find("boom", 1, true), r.error)
end)
T.test("the worker still runs a good job afterwards", function()
  ctl:send(1, "job", C.pack({ id = 9, op = "exec", code = "return 6 * 7", args = { n = 0 } }))
  local r = reply()
  T.eq(r.ok, true); T.eq(r.id, 9); T.eq(r.result[1], 42)
  T.ok(procs:alive(0), "the worker is alive")
end)
ctl:send(1, "quit", "")
local t0 = ldist.clock()
while procs:running() > 0 and ldist.clock() - t0 < 5 do procs:poll(0.05) end
T.test("the worker leaves when told to", function() T.eq(procs:running(), 0) end)
procs:close(1)
ctl:close()
T.done()
