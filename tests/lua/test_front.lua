-- test_front.lua - what front ends print (issues 28 and 31): an error in a
-- replica carries its location once, explain() is a Text, tensors switch to
-- scientific notation, help text wraps at words within the width.
local T = dofile("tests/lua/testlib.lua")

T.test("an error in strategy:run names its location once", function()
  local s = distribute.MirroredStrategy()
  local ok, err = pcall(function() return s:run(function() error("boom") end) end)
  T.ok(not ok)
  local _, n = tostring(err):gsub("test_front%.lua:%d+:", "")
  T.eq(n, 1, tostring(err))
  T.ok(tostring(err):find("boom", 1, true), tostring(err))
end)

T.test("explain() returns a Text that reads as a story", function()
  local ex = distribute.MirroredStrategy():explain()
  T.ok(tostring(ex):find("\n1. Input", 1, true), tostring(ex))
  T.ok(ex:find("MirroredStrategy:", 1, true) == 1)
  T.eq(ldist.repr(ex), tostring(ex))         -- the REPL shows the text, not a quoted literal
end)

T.test("tensors print in scientific notation when magnitudes span decades", function()
  T.ok(tostring(tensor.new{1e-8, 1, 1000}):find("[1.0000e-08 1.0000e+00 1.0000e+03]", 1, true))
  T.ok(tostring(tensor.new{1e9}):find("1.0000e+09", 1, true))
  T.ok(tostring(tensor.new{0.5, 12.25}):find("[ 0.5000 12.2500]", 1, true))
  local html = getmetatable(tensor.new{1e-8, 1}).__mimebundle(tensor.new{1e-8, 1})["text/html"]
  T.ok(html:find("1.0000e-08", 1, true), html)
end)

T.test("help text wraps at words within the width", function()
  for _, width in ipairs({ 80, 60 }) do
    for _, what in ipairs({ distribute, nn, tensor, ldist.progress }) do
      local text = ldist.wrap(ldist.doc_text(what), width, true)
      for line in text:gmatch("[^\n]+") do
        T.ok(utf8.len(line) <= width, ("%d > %d: %s"):format(utf8.len(line), width, line))
      end
    end
  end
  -- words stay whole: every word of the text is still there, in order
  local src = ldist.doc_text(distribute)
  local words = {}
  for w in ldist.wrap(src, 60, true):gmatch("%S+") do words[#words + 1] = w end
  local k = 0
  for w in src:gmatch("%S+") do k = k + 1; T.eq(words[k], w) end
end)

T.test("wrap ends on any text: deep indents, long words, no spaces", function()
  local cases = { (" "):rep(100) .. "x y z", ("w"):rep(300), (" "):rep(50) .. ("a"):rep(200) .. " b",
    "  name  " .. ("long "):rep(40), "é" .. ("ü"):rep(120) }
  for _, c in ipairs(cases) do
    for line in ldist.wrap(c, 30, true):gmatch("[^\n]+") do T.ok(utf8.len(line) <= 30, line) end
  end
end)

T.test("completion hides internal names of a module until nothing else matches", function()
  local m = ldist.complete("distribute.")
  local set = {}
  for _, x in ipairs(m) do set[x] = true end
  T.ok(set["distribute.MirroredStrategy"] and not set["distribute.LocalClusterClass"]
    and not set["distribute.resolve_cluster"] and not set["distribute.ps_train_step"])
  T.eq(ldist.complete("distribute.resolve_")[1], "distribute.resolve_cluster")
end)

T.done()
