-- ui/display.lua - rich output and comms, for every front end.
--
--   display(x)                          show x now (a picture, a table, text)
--   local h = display(x, {display_id = true})
--   h:update(y)                         redraw that output in place
--   display(x, {display_id = "loss", update = true})
--   display({["text/html"] = "<b>hi</b>"}, {raw = true})   a mime bundle as is
--   display(display.html("<b>hi</b>"))  also .markdown .svg .latex .json .png
--   clear_output({wait = true})
--
-- What a value looks like is its mime bundle: "text/plain" from the REPL's
-- repr, plus whatever the __mimebundle metamethod of its metatable returns
-- ({["image/svg+xml"] = svg, ...}, optionally a metadata table second).
-- Drawing goes through ldist.display.backend(kind, x, opts), kind being
-- "display", "update" or "clear": here it prints the text; the Jupyter kernel
-- replaces it with one that sends display_data / update_display_data /
-- clear_output, and sets ldist.progress.backend to display.progress_backend
-- so a progress bar is one output redrawn in place.
--
-- ldist.comm is the Jupyter comm registry (ipykernel's comm API in Lua):
--   ldist.comm.register_target("echo", function(comm, msg)
--     comm:on_msg(function(m) comm:send(m.content.data) end)
--   end)
--   local c = ldist.comm.open("my_target", {x = 1}); c:send{y = 2}; c:close()
local ldist = ...

local function now() return (ldist.walltime or os.clock)() end
local function text_of(x)
  local repr = ldist.repr or tostring
  return repr(x)
end

local counter = 0
local function new_id()
  counter = counter + 1
  return ("%08x%08x%04x"):format(math.random(0, 0x7fffffff), os.time() & 0x7fffffff, counter & 0xffff)
end

-- ---- display ------------------------------------------------------------------

local display = {}

local Handle = {}
Handle.__index = Handle
Handle.__name = "ldist.DisplayHandle"
Handle.__tostring = function(self) return ("DisplayHandle(%q)"):format(self.display_id) end

local function copy(t)
  local r = {}
  for k, v in pairs(t or {}) do r[k] = v end
  return r
end

-- h:update(x [, opts]): redraw the output this handle made.
function Handle:update(x, opts)
  local o = copy(opts)
  o.display_id, o.update = self.display_id, true
  display(x, o)
  return self
end

-- h:display(x [, opts]): one more output with the same id (updated together).
function Handle:display(x, opts)
  local o = copy(opts)
  o.display_id, o.update = self.display_id, nil
  display(x, o)
  return self
end

-- The text front end: show the text of the value (a raw bundle's text/plain).
function display.terminal(kind, x, opts)
  if kind == "clear" then return end
  local text
  if opts.raw then
    text = type(x) == "table" and x["text/plain"] or nil
    if text == nil then return end
  else
    text = text_of(x)
  end
  io.stdout:write(tostring(text), "\n")
  io.stdout:flush()
end
display.backend = display.terminal

setmetatable(display, {
  __call = function(_, x, opts)
    if opts ~= nil and type(opts) ~= "table" then
      error("bad argument #2 to 'display' (table expected, got " .. type(opts) .. ")", 2)
    end
    opts = opts or {}
    if opts.raw and type(x) ~= "table" then
      error("bad argument #1 to 'display' (a mime bundle table expected with raw = true)", 2)
    end
    local id = opts.display_id
    if id == true then id = new_id() end
    if opts.update and id == nil then
      error("bad argument #2 to 'display' (update = true needs a display_id)", 2)
    end
    local kind = opts.update and "update" or "display"
    display.backend(kind, x, { raw = opts.raw, metadata = opts.metadata, display_id = id })
    if id ~= nil then return setmetatable({ display_id = id }, Handle) end
  end,
  __name = "ldist.display",
})

-- Wrappers that show a string as one mime type: display(display.html(s)),
-- or as the last value of a cell. .json takes a table, .png raw PNG bytes.
local function mime_type(mime, name)
  local mt = {
    __name = "ldist.display." .. name,
    __mimebundle = function(self) return { [mime] = self.data } end,
    __tostring = function(self)
      if type(self.data) == "string" and mime:match("^text/") then return self.data end
      return ("<%s>"):format(name)
    end,
  }
  return function(data)
    if data == nil then error(("bad argument #1 to '%s' (a value expected)"):format(name:lower()), 2) end
    return setmetatable({ data = data }, mt)
  end
end
display.html = mime_type("text/html", "HTML")
display.markdown = mime_type("text/markdown", "Markdown")
display.latex = mime_type("text/latex", "Latex")
display.svg = mime_type("image/svg+xml", "SVG")
display.json = mime_type("application/json", "JSON")
display.png = mime_type("image/png", "PNG")
display.javascript = mime_type("application/javascript", "Javascript")

function ldist.clear_output(opts)
  local wait = opts == true or (type(opts) == "table" and opts.wait) or false
  display.backend("clear", nil, { wait = wait and true or false })
end

ldist.display = display

-- ---- a progress bar in a notebook ------------------------------------------------

local html_escape = ldist._util.html_escape

local function progress_bundle(bar, state)
  local P = ldist.progress
  -- the lines a terminal of ldist.width() columns shows (80 here): the
  -- output area does not scroll sideways to reach val_loss
  local line = table.concat(P.lines(state, { unicode = true, width = bar.width }), "\n")
  local html = html_escape(line)
  if state.total and state.total > 0 then
    local tag = ('<progress value="%d" max="%d" style="width:%dch;vertical-align:middle"></progress>')
      :format(state.done, state.total, bar.width or 30)
    -- the text bar is "│...│": put the HTML one in its place
    local a, a_end = html:find("│", 1, true)
    local b, b_end = nil, nil
    if a then b, b_end = html:find("│", a_end + 1, true) end
    if b then html = html:sub(1, a - 1) .. tag .. html:sub(b_end + 1) end
  end
  return {
    ["text/plain"] = line,
    ["text/html"] = '<div style="font-family:monospace;white-space:pre">' .. html .. "</div>",
  }
end

-- ldist.progress.backend for front ends that can redraw an output in place:
-- one display per bar, updated at most 10 times a second and at the end.
display.progress_backend = {
  start = function(bar)
    bar._handle = nil
    bar._last_draw = -math.huge
  end,
  update = function(bar, state)
    local t = now()
    if t - bar._last_draw < 0.1 and state.done ~= state.total then return end
    bar._last_draw = t
    local b = progress_bundle(bar, state)
    if bar._handle then bar._handle:update(b, { raw = true })
    else bar._handle = display(b, { raw = true, display_id = true }) end
  end,
  finish = function(bar, state)
    local b = progress_bundle(bar, state)
    if bar._handle then bar._handle:update(b, { raw = true })
    else bar._handle = display(b, { raw = true, display_id = true }) end
  end,
}

-- ---- comms -----------------------------------------------------------------------

local comm = { targets = {}, comms = {} }
ldist.comm = comm

local Comm = {}
Comm.__index = Comm
Comm.__name = "ldist.Comm"
Comm.__tostring = function(self) return ("Comm(%q, %q)"):format(self.target_name, self.comm_id) end

local function send(msg_type, content, metadata)
  if not comm.backend then error("comms need a Jupyter front end (ldist kernel)", 3) end
  comm.backend(msg_type, content, metadata)
end

-- register_target(name, function(comm, msg) ... end): the front end opens
-- comms with this target name; msg is the comm_open message.
function comm.register_target(name, fn)
  if type(name) ~= "string" then error("bad argument #1 to 'register_target' (string expected)", 2) end
  if type(fn) ~= "function" then error("bad argument #2 to 'register_target' (function expected)", 2) end
  comm.targets[name] = fn
end

function comm.unregister_target(name) comm.targets[name] = nil end

-- open(target_name [, data [, metadata]]) -> Comm opened from the kernel side.
function comm.open(target_name, data, metadata)
  local c = setmetatable({ comm_id = new_id(), target_name = target_name }, Comm)
  send("comm_open", { comm_id = c.comm_id, target_name = target_name, data = data or {} }, metadata)
  comm.comms[c.comm_id] = c
  return c
end

function Comm:send(data, metadata)
  if self.closed then error("the comm is closed", 2) end
  send("comm_msg", { comm_id = self.comm_id, data = data or {} }, metadata)
end

function Comm:close(data, metadata)
  if self.closed then return end
  self.closed = true
  comm.comms[self.comm_id] = nil
  send("comm_close", { comm_id = self.comm_id, data = data or {} }, metadata)
end

function Comm:on_msg(fn) self._on_msg = fn end
function Comm:on_close(fn) self._on_close = fn end

-- Called by the kernel for comm_open / comm_msg / comm_close from the front
-- end; msg is the whole message ({header, content, metadata, buffers}).
function comm._receive(msg_type, msg)
  local c = msg.content or {}
  if msg_type == "comm_open" then
    local fn = comm.targets[c.target_name]
    if not fn then
      send("comm_close", { comm_id = c.comm_id, data = {} })
      io.stderr:write(("no comm target %q: comm closed\n"):format(tostring(c.target_name)))
      return false
    end
    local cm = setmetatable({ comm_id = c.comm_id, target_name = c.target_name }, Comm)
    comm.comms[c.comm_id] = cm
    fn(cm, msg)
  elseif msg_type == "comm_msg" then
    local cm = comm.comms[c.comm_id]
    if not cm then return false end
    if cm._on_msg then cm._on_msg(msg) end
  elseif msg_type == "comm_close" then
    local cm = comm.comms[c.comm_id]
    if not cm then return false end
    comm.comms[c.comm_id] = nil
    cm.closed = true
    if cm._on_close then cm._on_close(msg) end
  end
  return true
end

-- comm_id -> {target_name = ...} of the open comms (of one target if given).
function comm._info(target_name)
  local r = {}
  for id, c in pairs(comm.comms) do
    if target_name == nil or c.target_name == target_name then r[id] = { target_name = c.target_name } end
  end
  return r
end

-- ---- documentation -----------------------------------------------------------------

if ldist.docs then
  ldist.docs[display] = [[
display(x [, opts]) -> nil, or a DisplayHandle when opts.display_id is set
Show x now: in Jupyter as rich output (HTML tables for tensors, SVG for
plots), in a terminal as text. opts:
  display_id = true | "name"   keep a handle to redraw this output
  update = true                redraw the output with that display_id
  raw = true                   x is a mime bundle {["text/html"] = "...", ...}
  metadata = {...}             mime metadata
h:update(y) redraws in place. display.html(s), .markdown(s), .svg(s),
.latex(s), .json(t), .png(bytes) wrap a value as one mime type.]]
  ldist.docs["display"] = ldist.docs[display]
  ldist.docs[ldist.clear_output] = [[
clear_output([{wait = true}])
Clear the output of the current cell (wait: only when new output arrives).]]
  ldist.docs["clear_output"] = ldist.docs[ldist.clear_output]
  ldist.docs[comm] = "Jupyter comms: register_target(name, fn), open(target, data) -> Comm"
end
if ldist.globals then
  ldist.globals.display = true
  ldist.globals.clear_output = true
end
