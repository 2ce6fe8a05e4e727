-- keras/models.lua - models beyond Sequential, and models as files.
--
--   The Functional API:  local x = nn.Input{shape = {28, 28, 1}}
--                        local y = nn.Dense(10)(nn.Flatten()(x))      -- layers on symbolic tensors
--                        local model = nn.Model{inputs = x, outputs = y}
--   Subclassed models:   local Net = nn.Model:extend("Net")
--                        function Net:init(units) self.hidden = nn.Dense(units, "relu"); self.out = nn.Dense(10) end
--                        function Net:call(x, training) return self.out(self.hidden(x)) end
--                        local model = Net(64)
--   Files:               model:get_config(), model:to_json(), nn.model_from_json(text),
--                        model:save(path), nn.load_model(path)
--
-- A model of any kind is the same object (ldist.Model, nn.c): its layers are
-- tracked there (weights, summary), and fit, evaluate, the strategies and
-- the training step in C see no difference; only its forward is in Lua (the
-- graph, or the subclass's call), which the C step calls under its tape.
local ldist = ...
local nn, tensor, json = ldist.nn, ldist.tensor, ldist.json
local Model = nn.Model
local doc = ldist.document

---------------------------------------------------------------- symbolic tensors
local KT = { __name = "ldist.KerasTensor", __symbolic = true }
KT.__index = KT
function KT.__tostring(t)
  return ("<KerasTensor shape=(None, %s) dtype=%s%s>"):format(table.concat(t.shape, ", "), t.dtype,
    t._layer and (" from layer '" .. t._layer.name .. "'") or (" (input '" .. t.name .. "')"))
end
local function is_kt(v) return getmetatable(v) == KT end

local function copy(t) local c = {} for i, v in ipairs(t) do c[i] = v end return c end

local n_inputs = 0
function nn.Input(opts)
  if type(opts) ~= "table" then error("bad argument #1 to 'Input' (a table {shape=, dtype=, name=} expected)", 2) end
  local shape = opts.shape or opts[1]
  if type(shape) ~= "table" then
    error("bad argument #1 to 'Input' (shape= expected: the shape of one example, without the batch axis)", 2)
  end
  for i, d in ipairs(shape) do
    if math.type(d) ~= "integer" or d < 1 then
      error(("bad argument #1 to 'Input' (shape[%d] is %s; sizes are positive integers)"):format(i, tostring(d)), 2)
    end
  end
  for k in pairs(opts) do
    if k ~= "shape" and k ~= "dtype" and k ~= "name" and k ~= 1 then
      error(("nn.Input: unknown option '%s' (it takes shape, dtype, name)"):format(tostring(k)), 2)
    end
  end
  local name = opts.name or (n_inputs == 0 and "input_layer" or ("input_layer_" .. n_inputs))
  n_inputs = n_inputs + 1
  return setmetatable({ shape = copy(shape), dtype = opts.dtype or "float32", name = name }, KT)
end
doc(nn.Input, "nn.Input", "nn.Input{shape={...}, dtype=\"float32\", name=}\n\n" ..
  "A symbolic input of the Functional API: one example's shape, without the batch axis.\n" ..
  "Layers called on it give symbolic tensors; nn.Model{inputs=, outputs=} makes them a model.")

-- layer(symbolic) (nn.c's layer call comes here): the layer is built for the
-- inputs' shapes now (its variables are made under the open strategy's scope,
-- as Keras makes them), and the result remembers the call
function nn._symbolic_call(layer, inputs, opts)
  local multi = not is_kt(inputs)
  local list = multi and inputs or { inputs }
  if type(opts) == "table" and opts.initial_state ~= nil then   -- an RNN's states: its inputs after the first
    local st = opts.initial_state
    if is_kt(st) or type(st) ~= "table" then
      error(("%s: initial_state must be a list of symbolic tensors ({h, c} for an LSTM, {h} for the others)")
        :format(layer.name), 3)
    end
    if multi then error(("%s: initial_state goes with one input"):format(layer.name), 3) end
    list = { inputs }
    for i, t in ipairs(st) do list[i + 1] = t end
    multi = true
  end
  local shapes = {}
  for i, t in ipairs(list) do
    if not is_kt(t) then
      error(("%s: input %d is a %s, not a symbolic tensor (do not mix nn.Input values with tensors)")
        :format(layer.name, i, type(t)), 3)
    end
    shapes[i] = t.shape
  end
  local n, shapes_out
  if nn._is_model(layer) then
    -- a model as a layer (Keras's): built and its output shapes found by running it on zeros of one row
    local xs = {}
    for i, t in ipairs(list) do
      xs[i] = tensor.zeros(1, table.unpack(t.shape))
      if t.dtype and t.dtype ~= "float32" then xs[i] = xs[i]:astype(t.dtype) end
    end
    local ok, y = pcall(layer, multi and xs or xs[1], { training = false })
    if not ok then error(tostring(y):gsub("^%[ldist prelude [^%]]*%]:%d+: ", ""), 3) end
    local ys = tensor.is_tensor(y) and { y } or y
    shapes_out = {}
    for i, t in ipairs(ys) do
      local sh = {}
      for d = 2, #t.shape do sh[d - 1] = t.shape[d] end
      shapes_out[i] = sh
    end
    n = #ys
    if tensor.is_tensor(y) then shapes_out = shapes_out[1] end
  else
    local ok, err = pcall(layer._build_shapes, layer, shapes)
    if not ok then error(tostring(err):gsub("^%[ldist prelude [^%]]*%]:%d+: ", ""), 3) end
    n, shapes_out = layer.n_outputs, layer.output_shape
  end
  if n == 1 then
    return setmetatable({ shape = shapes_out, dtype = "float32", _layer = layer, _inputs = list, _multi = multi }, KT)
  end
  -- several outputs (return_state, a model of several): one symbolic tensor each, of one call (_call), at _index
  local call, outs = {}, {}
  for i = 1, n do
    outs[i] = setmetatable({ shape = shapes_out[i], dtype = "float32", _layer = layer, _inputs = list, _multi = multi,
      _call = call, _index = i - 1 }, KT)
  end
  return table.unpack(outs, 1, n)
end

---------------------------------------------------------------- models as layers
-- nn.Sequential with a model among its items (Keras's model as a layer) runs
-- them in Lua, in order (nn.c's sequential_append sets this as its call)
function nn._sequential_call(self, x, training)
  local o = { training = training }
  for _, item in ipairs(self._items) do x = item(x, o) end
  return x
end

---------------------------------------------------------------- Functional models
local function run_graph(self, x, training)
  local g = self._graph
  local xs = x
  if not g.multi_in then xs = { x }
  elseif type(x) ~= "table" or tensor.is_tensor(x) then
    error(("model '%s' takes a list of %d inputs"):format(self.name, #g.inputs), 3)
  end
  if #xs ~= #g.inputs then
    error(("model '%s' takes %d inputs, got %d"):format(self.name, #g.inputs, #xs), 3)
  end
  local vals, o, calls = {}, { training = training }, {}
  for i, t in ipairs(g.inputs) do vals[t] = xs[i] end
  for _, t in ipairs(g.order) do
    local args
    if t._multi then
      args = {}
      for i, u in ipairs(t._inputs) do args[i] = vals[u] end
    else
      args = vals[t._inputs[1]]
    end
    if t._call then   -- one of several outputs: the layer runs once for all of them
      local r = calls[t._call]
      if not r then r = table.pack(t._layer(args, o)); calls[t._call] = r end
      vals[t] = r[t._index + 1]
    else
      vals[t] = t._layer(args, o)
    end
  end
  if not g.multi_out then return vals[g.outputs[1]] end
  local r = {}
  for i, t in ipairs(g.outputs) do r[i] = vals[t] end
  return r
end

local function as_list(v, what)
  if is_kt(v) then return { v }, false end
  if type(v) ~= "table" or #v == 0 then
    error(("bad argument #1 to 'Model' (%s= must be a symbolic tensor or a list of them)"):format(what), 4)
  end
  for i, t in ipairs(v) do
    if not is_kt(t) then error(("bad argument #1 to 'Model' (%s[%d] is not a symbolic tensor)"):format(what, i), 4) end
  end
  return v, true
end

-- A Functional model's layers in Keras's order (model.layers, and so its
-- weights and summary; keras/src/ops/function.py map_graph): the deepest
-- first (a call's depth: the most layers between it and an output; a shared
-- layer's, its deepest call's), ties in the order a depth-first walk from the
-- outputs first meets them. order: the calls, inputs first (run_graph's).
local function keras_layer_order(outputs, is_input, order)
  local index, n, seen = {}, 0, {}
  local function walk(t)
    if is_input[t] or seen[t] then return end
    seen[t] = true
    if not index[t._layer] then index[t._layer], n = n, n + 1 end
    for _, u in ipairs(t._inputs) do walk(u) end
  end
  for _, o in ipairs(outputs) do walk(o) end
  local depth, ldepth = {}, {}
  for i = #order, 1, -1 do
    local t = order[i]
    local d = math.max(depth[t] or 0, ldepth[t._layer] or 0)
    ldepth[t._layer], depth[t] = d, d
    for _, u in ipairs(t._inputs) do
      if not is_input[u] then depth[u] = math.max(depth[u] or 0, d + 1) end
    end
  end
  local layers = {}
  for l in pairs(index) do layers[#layers + 1] = l end
  table.sort(layers, function(a, b)
    if ldepth[a] ~= ldepth[b] then return ldepth[a] > ldepth[b] end
    return index[a] < index[b]
  end)
  return layers
end

local function functional(opts)
  local inputs, multi_in = as_list(opts.inputs, "inputs")
  local outputs, multi_out = as_list(opts.outputs, "outputs")
  local is_input, order, seen = {}, {}, {}
  for _, t in ipairs(inputs) do
    if t._layer then error("bad argument #1 to 'Model' (inputs= must be nn.Input values)", 3) end
    is_input[t] = true
  end
  local function visit(t)
    if seen[t] then return end
    seen[t] = true
    if is_input[t] then return end
    if not t._layer then
      error(("bad argument #1 to 'Model' (the outputs depend on input '%s', which is not in inputs=)"):format(t.name), 4)
    end
    for _, u in ipairs(t._inputs) do visit(u) end
    order[#order + 1] = t
  end
  for _, o in ipairs(outputs) do visit(o) end
  local nodes, numbered = {}, {}   -- a shared layer has one node per call (several outputs: one call)
  for _, t in ipairs(order) do
    local key = t._call or t
    if numbered[key] == nil then
      nodes[t._layer] = (nodes[t._layer] or 0) + 1
      numbered[key] = nodes[t._layer] - 1
    end
    t._node = numbered[key]
  end
  local m = nn._model_new(opts.name or "functional", "Functional")
  for _, l in ipairs(keras_layer_order(outputs, is_input, order)) do m:_track(l) end
  m._graph = { inputs = inputs, outputs = outputs, order = order, multi_in = multi_in, multi_out = multi_out }
  m.call = run_graph
  return m
end

---------------------------------------------------------------- subclassed models
local classes = {}   -- by class name, for nn.load_model / nn.model_from_json
local function snake(name) return (name:gsub("(%l)(%u)", "%1_%2"):lower()) end

local Class = {}     -- what nn.Model:extend gives: a class table, callable
Class.__index = Class
local made = {}      -- instances made per class name: "net", "net_1", ... as Keras names them
local config_name    -- the name from_spec gives the next instance (its configuration's)
local function new_instance(cls, ...)
  local base = cls._name and snake(cls._name) or "model"
  local name = config_name
  config_name = nil
  if not name then
    local k = made[base] or 0
    made[base] = k + 1
    name = k == 0 and base or ("%s_%d"):format(base, k)
  end
  local m = nn._model_new(name, cls._name)
  m._class = cls
  m._init_args = table.pack(...)
  local init = cls.init
  if init then init(m, ...) end
  return m
end

-- Keras's build(input_shape): a class that defines build gets it called once,
-- at the first call, with the input's shape (batch first; a list of shapes
-- for several inputs), before its call; its add_weight calls then know the
-- sizes. The class's call and build are kept as _user_call and _user_build,
-- and the class gives wrappers in their place.
local function ensure_built(self, x)
  local build = self._class._user_build
  if build and not self._custom_built then
    self._custom_built = true
    local shape
    if tensor.is_tensor(x) then shape = x.shape
    else
      shape = {}
      for i, t in ipairs(x) do shape[i] = t.shape end
    end
    build(self, shape)
  end
end
-- model:build(shape) (shape without the batch axis): one call on zeros of one row, which builds
local function build_by_call(self, shape) return Model.build(self, shape) end

-- nn.Model:extend(name) -> a class; Class:extend(name) makes a subclass of it
local function extend(base, name)
  if type(name) ~= "string" or not name:match("^[%a_][%w_]*$") then
    error("bad argument #1 to 'extend' (a class name expected, as nn.Model:extend(\"MyModel\"))", 2)
  end
  local cls = setmetatable({ _name = name, _base = base }, {
    -- call and build are never the class's own keys, so that defining them always comes here
    __index = function(c, k)
      if k == "call" then   -- this class's call (Base.call(self, ...) in a subclass's call reaches Base's)
        local call = c._user_call
        return call and function(self, x, training) ensure_built(self, x); return call(self, x, training) end
      end
      if k == "build" and c._user_build then return build_by_call end
      return base[k]
    end,
    __newindex = function(c, k, v)
      if k == "call" or k == "build" then
        if type(v) ~= "function" then error(("%s.%s must be a function"):format(name, k), 2) end
        k = k == "call" and "_user_call" or "_user_build"
      end
      rawset(c, k, v)
    end,
    __call = new_instance,
    __tostring = function() return "<model class " .. name .. ">" end })
  classes[name] = cls
  return cls
end

setmetatable(Model, {
  -- nn.Model{inputs=, outputs=, name=}: a Functional model
  __call = function(_, opts)
    if type(opts) ~= "table" or opts.inputs == nil or opts.outputs == nil then
      error("bad argument #1 to 'Model' (a table {inputs=, outputs=, name=} expected; for a subclass use nn.Model:extend(name))", 2)
    end
    return functional(opts)
  end,
})
Model.extend = extend
doc(Model, "nn.Model", "nn.Model{inputs=, outputs=, name=}\n\n" ..
  "A Functional model: inputs are nn.Input values (or a list), outputs what layers called on them\n" ..
  "gave (or a list); layers may be shared. model(x) runs it (a list of tensors for several inputs).\n" ..
  "nn.Model:extend(name) makes a subclassed model instead. Every model has fit, evaluate, predict,\n" ..
  "summary, get_weights/set_weights, save_weights/load_weights, get_config, to_json and save.")
-- nn.Layer:extend(name): Keras's custom layer (class MyLayer(keras.layers.Layer)), which in ldist is a
-- subclassed model (as Keras's Model is a Layer): init, build(input_shape), call, add_weight; it goes
-- into a Sequential, a Functional graph or another model's call as any layer does
nn.Layer = setmetatable({}, { __tostring = function() return "nn.Layer" end })
function nn.Layer.extend(_, name)
  if type(name) ~= "string" or not name:match("^[%a_][%w_]*$") then
    error("bad argument #1 to 'extend' (a class name expected, as nn.Layer:extend(\"MyLayer\"))", 2)
  end
  return extend(Model, name)
end
doc(nn.Layer.extend, "Layer:extend", "nn.Layer:extend(name) -> class\n\n" ..
  "A custom layer, Keras's class MyLayer(keras.layers.Layer): define class:init(...), class:build(input_shape)\n" ..
  "(called once, at the first call, with the input's shape, batch first: make its weights there with\n" ..
  "self:add_weight{shape=, initializer=}) and class:call(x, training). Its instances go into nn.Sequential,\n" ..
  "the Functional API and other models' call like any layer, and train, save and mirror as one.")

doc(Model.extend, "Model:extend", "nn.Model:extend(name) -> class\n\n" ..
  "A subclassed model, Keras's class MyModel(keras.Model): define class:init(...) (make the layers,\n" ..
  "assigned to fields: they are tracked) and class:call(x, training); class(...) makes a model.\n" ..
  "Optionally class:get_config() returns what init needs to make the model again (by default the\n" ..
  "arguments init was given), for model:save / nn.load_model in a session that defined the class.")

---------------------------------------------------------------- configurations
local function model_class(m) return m._kind or "Sequential" end
-- a layer's {class_name=, config=}; a model's as a layer (Keras's), its class as to_json names it
local function layer_spec(l)
  -- a model's configuration is nn.Model's (a subclass's own get_config gives its init's arguments, which that wraps)
  if nn._is_model(l) then return { class_name = model_class(l), config = Model.get_config(l) } end
  return { class_name = l.class_name, config = l:get_config() }
end

local function functional_config(m)
  local g = m._graph
  local layers, entry = {}, {}
  for _, t in ipairs(g.inputs) do
    layers[#layers + 1] = { class_name = "InputLayer", name = t.name, config = { shape = t.shape, dtype = t.dtype, name = t.name },
      inbound_nodes = {} }
  end
  local function ref(u) return { u._layer and u._layer.name or u.name, u._node or 0, u._index or 0 } end
  local listed = {}
  for _, t in ipairs(g.order) do
    local l = t._layer
    if not entry[l] then
      local spec = layer_spec(l)
      entry[l] = { class_name = spec.class_name, name = l.name, config = spec.config, inbound_nodes = {} }
      layers[#layers + 1] = entry[l]
    end
    local key = t._call or t
    if not listed[key] then   -- a call of several outputs is one node
      listed[key] = true
      local args = {}
      for i, u in ipairs(t._inputs) do args[i] = ref(u) end
      table.insert(entry[l].inbound_nodes, { args = args, multi = t._multi })
    end
  end
  local ins, outs = {}, {}
  for i, t in ipairs(g.inputs) do ins[i] = ref(t) end
  for i, t in ipairs(g.outputs) do outs[i] = ref(t) end
  return { name = m.name, layers = layers, input_layers = ins, output_layers = outs, multi_in = g.multi_in,
    multi_out = g.multi_out }
end

-- model:get_config(): Keras's, enough to make the model again (without its weights)
function Model:get_config()
  local kind = self._kind
  if kind == "Functional" then return functional_config(self) end
  if kind then                                   -- a subclass
    local own, c = nil, self._class      -- a get_config of the class's own (not nn.Model's, this one)
    while c and c ~= Model and not own do own, c = rawget(c, "get_config"), rawget(c, "_base") end
    if own then return { name = self.name, args = { own(self) }, build_input_shape = self._build_input_shape } end
    local a = self._init_args or { n = 0 }
    local ok, text = pcall(json.encode, { table.unpack(a, 1, a.n) })
    if not ok or (a.n > 0 and text == "[]") then
      error(("model class %s: its init arguments are not plain data; define %s:get_config() returning them")
        :format(kind, kind), 2)
    end
    return { name = self.name, args = { table.unpack(a, 1, a.n) }, build_input_shape = self._build_input_shape }
  end
  local layers = {}
  for i, l in ipairs(self._items or self.layers) do layers[i] = layer_spec(l) end
  local first = self.layers[1]
  local shape = self._items and self._build_input_shape or (first and first.built and first.input_shape or nil)
  return { name = self.name, layers = layers, build_input_shape = shape }
end

-- Keras's model.get_layer(name=None, index=None)
function Model:get_layer(which)
  local layers = self.layers or {}
  if type(which) == "table" and which.index ~= nil then
    local i = which.index
    if math.type(i) ~= "integer" then error("bad argument #1 to 'get_layer' (index must be an integer)", 2) end
    if i < 0 or i >= #layers then
      error(("get_layer: index %d is out of range: the model has %d layers (0 to %d)"):format(i, #layers, #layers - 1), 2)
    end
    return layers[i + 1]
  end
  local name = type(which) == "table" and which.name or which
  if type(name) ~= "string" then error("bad argument #1 to 'get_layer' (a layer name, or {index=} counted from 0)", 2) end
  local names = {}
  for i, l in ipairs(layers) do
    if l.name == name then return l end
    names[i] = l.name
  end
  error(("get_layer: no layer named '%s'; the model's layers are: %s"):format(name, table.concat(names, ", ")), 2)
end
doc(Model.get_layer, "Model:get_layer", "model:get_layer(name | {index=})\n\nA layer of the model by its name, or by its " ..
  "index from 0 (Keras's model.get_layer).")

function Model:to_json()
  return json.encode({ class_name = model_class(self), config = Model.get_config(self), format = "ldist-model/1" })
end
doc(Model.to_json, "Model:to_json", "model:to_json() -> text\n\nThe model's architecture as JSON (no weights); " ..
  "nn.model_from_json(text) makes it again.")

-- a model from {class_name=, config=}; custom: a table of subclasses by name
local from_spec
-- a layer, or a model as a layer (its class a model's: Sequential, Functional, a subclass), from its spec
local function item_from_spec(l, custom)
  local cn = l.class_name
  if cn == "Sequential" or cn == "Functional" or (custom and custom[cn]) or classes[cn] then return from_spec(l, custom) end
  return nn.layer_from_config(l)
end
function from_spec(spec, custom)
  if type(spec) ~= "table" or type(spec.config) ~= "table" then error("not a model configuration", 0) end
  local cn, c = spec.class_name, spec.config
  if cn == "Sequential" then
    local layers = { name = c.name }
    for i, l in ipairs(c.layers or {}) do layers[i] = item_from_spec(l, custom) end
    local m = nn.Sequential(layers)
    if c.build_input_shape then m:build(c.build_input_shape) end
    return m
  elseif cn == "Functional" then
    local made, inputs, pending = {}, {}, {}
    for _, e in ipairs(c.layers) do
      if e.class_name == "InputLayer" then
        local t = nn.Input { shape = e.config.shape, dtype = e.config.dtype, name = e.config.name }
        made[e.name .. "/0"] = { t }
        inputs[e.name] = t
      else
        pending[#pending + 1] = { layer = item_from_spec({ class_name = e.class_name, config = e.config }, custom),
          name = e.name, nodes = e.inbound_nodes, next = 1 }
      end
    end
    -- call the layers on what their nodes refer to, as soon as it exists
    local progress = true
    while progress do
      progress = false
      for _, p in ipairs(pending) do
        local node = p.nodes[p.next]
        while node do
          local args, ready = {}, true
          for i, r in ipairs(node.args) do
            local outs = made[r[1] .. "/" .. math.tointeger(r[2])]
            args[i] = outs and outs[math.tointeger(r[3] or 0) + 1]
            if not args[i] then ready = false; break end
          end
          if not ready then break end
          made[p.name .. "/" .. (p.next - 1)] = table.pack(p.layer(node.multi and args or args[1]))
          p.next, progress = p.next + 1, true
          node = p.nodes[p.next]
        end
      end
    end
    local function get(r, what)
      local outs = made[r[1] .. "/" .. math.tointeger(r[2])]
      local t = outs and outs[math.tointeger(r[3] or 0) + 1]
      if not t then error(("the model configuration's %s %s cannot be made"):format(what, r[1]), 0) end
      return t
    end
    local ins, outs = {}, {}
    for i, r in ipairs(c.input_layers) do ins[i] = get(r, "input") end
    for i, r in ipairs(c.output_layers) do outs[i] = get(r, "output") end
    return functional { inputs = c.multi_in and ins or ins[1], outputs = c.multi_out and outs or outs[1], name = c.name }
  end
  local cls = custom and custom[cn] or classes[cn]
  if not cls then
    error(("model class '%s' is not defined in this session: define it (nn.Model:extend(\"%s\")) before loading, " ..
      "or pass {custom_objects = {%s = class}}"):format(tostring(cn), tostring(cn), tostring(cn)), 0)
  end
  config_name = type(c.name) == "string" and c.name or nil   -- made again under its own name, as Keras's from_config
  local m = cls(table.unpack(c.args or {}))
  config_name = nil
  if c.build_input_shape and not m.built then m:build(c.build_input_shape) end
  return m
end
-- Keras's safe_mode: a configuration that holds code (nn.Lambda's function, as bytecode) is made
-- only when the caller says the file is trusted (safe_mode = false), or it is this session's own
local trusted = false
local function from_spec_mode(spec, custom, trust)
  local was = trusted
  trusted = trust and true or false
  local ok, m = pcall(from_spec, spec, custom)
  trusted = was
  if not ok then error(m, 0) end
  return m
end
nn._model_from_spec = from_spec_mode

function nn.model_from_json(text, opts)
  local spec, err = json.decode(text)
  if not spec then error("nn.model_from_json: not JSON: " .. tostring(err), 2) end
  local ok, m = pcall(from_spec_mode, spec, opts and opts.custom_objects, opts and opts.safe_mode == false)
  if not ok then error(m, 2) end
  return m
end
doc(nn.model_from_json, "nn.model_from_json", "nn.model_from_json(text, {custom_objects=, safe_mode=true})\n\n" ..
  "A model from model:to_json() (Sequential, Functional, or a subclass defined in this session). A Lambda\n" ..
  "layer's function is code: it is loaded only with safe_mode = false (Keras's rule), for a file you trust.")

---------------------------------------------------------------- whole models in one file
local lio = ldist.io

local function hex(s) return (s:gsub(".", function(c) return ("%02x"):format(c:byte()) end)) end
local function unhex(h) return (h:gsub("%x%x", function(x) return string.char(tonumber(x, 16)) end)) end

---------------------------------------------------------------- Lambda
-- Keras's Lambda layer: a function of the input as a layer (a custom layer of
-- ldist's own, so it goes wherever a layer goes). Its configuration holds the
-- function as bytecode, which only a trusted load makes again (safe_mode).
local Lambda = nn.Layer:extend("Lambda")
rawset(Lambda, "_builtin", true)
function Lambda:init(fn, opts)
  if type(fn) == "table" and fn["function"] then   -- made again from its configuration
    local cfg = fn
    if not trusted then
      error("a Lambda layer's configuration holds Lua bytecode, which runs when loaded: load the model with " ..
        "{safe_mode = false} if you trust where it comes from (Keras's rule)", 0)
    end
    local code = type(cfg["function"]) == "string" and unhex(cfg["function"])
    fn = code and load(code, "=lambda", "b")
    if not fn then error("a Lambda layer's configuration holds no valid function", 0) end
    opts = { arguments = cfg.arguments }
  end
  if type(fn) ~= "function" then error(("bad argument #1 to 'Lambda' (a function expected, got %s)"):format(type(fn)), 3) end
  opts = opts or {}
  ldist._util.check_opts("Lambda", opts, { arguments = true })
  if opts.arguments ~= nil and type(opts.arguments) ~= "table" then
    error("bad argument #2 to 'Lambda' (arguments must be a table, passed to the function after the input)", 3)
  end
  self._fn, self._arguments = fn, opts.arguments
end
function Lambda:call(x)
  if self._arguments then return self._fn(x, self._arguments) end
  return self._fn(x)
end
function Lambda:get_config()
  local code = ldist._util.dump_fn(self._fn, ("%s's function"):format(self.name),
    { verb = "saved", tail = ", or pass values in arguments = {...} (Keras's arguments=)" })
  return { ["function"] = hex(code), arguments = self._arguments }
end
nn.Lambda = Lambda
doc(nn.Lambda, "nn.Lambda", "nn.Lambda(fn, {arguments=})\n\n" ..
  "Keras's Lambda layer: fn(x) (fn(x, arguments) with arguments) as a layer, in a Sequential, a graph or a\n" ..
  "model's call; for x / 255, a cast, a slice. Saved as the function's bytecode: it may use only its arguments\n" ..
  "and globals, and a file with it loads only with {safe_mode = false}, as Keras's.")

-- metrics as data (also what the strategies send to other processes)
local function describe_metrics(ms)
  local out = {}
  for i, m in ipairs(ms or {}) do
    if m.kind and m.correct ~= nil then out[i] = { kind = m.kind, name = m.name }
    elseif m.class and m._loss then out[i] = { class = m.class, name = m.name }
    elseif m._spec then out[i] = { spec = m._spec }   -- keras/scores.lua's: the class and its options
    else error(("metric %s cannot be described as data (Keras's built-in metrics can)"):format(tostring(m.name)), 0) end
    out[i].weighted = m._weighted   -- one of compile's weighted_metrics
  end
  return out
end
local function build_metrics(d)
  local M, out = ldist.metrics, {}
  for i, m in ipairs(d) do
    if m.spec then out[i] = M[m.spec.class](m.spec.opts)
    else
      local make = m.class and M[m.class] or m.kind == "sparse" and M.SparseCategoricalAccuracy
        or m.kind == "binary" and M.BinaryAccuracy or M.CategoricalAccuracy
      out[i] = make(m.name)
    end
  end
  return out
end
local function build_loss(d)
  local class = ldist.losses._classes[d.name]
  if not class then error(("the saved loss '%s' is not one of ldist's losses"):format(tostring(d.name)), 0) end
  -- from_logits = false is accepted by every loss (older files carry it); the rest only where given
  -- every option the config carries (losses._config: Keras's get_config), but its name
  local opts = {}
  for k, v in pairs(d) do if k ~= "name" then opts[k] = v end end
  opts.from_logits = d.from_logits or nil
  return ldist.losses[class](opts)
end
local function build_optimizer(d)
  local o = {}
  -- a model saved before optimizers checked their options carries every field
  for k, v in pairs(d) do if k ~= "name" and ldist.optim._accepts(d.name, k) then o[k] = v end end
  return ldist.optim[d.name](o)
end
nn._describe_metrics, nn._build_metrics, nn._build_loss, nn._build_optimizer =
  describe_metrics, build_metrics, build_loss, build_optimizer

-- compile's loss and metrics as data (model:save, a LocalCluster's workers),
-- and back as compile's arguments. A model of several outputs has a loss,
-- a weight and metrics per output (keras/training.lua's CompiledLoss).
local function is_compiled_loss(l) return type(l) == "table" and getmetatable(l).__name == "ldist.CompiledLoss" end
function nn._describe_compile(model)
  local l = model._loss
  if not is_compiled_loss(l) then
    return { loss = ldist.losses._config(l), metrics = describe_metrics(model._metrics) }
  end
  local outs, ms = {}, {}
  for i, e in ipairs(l.entries) do
    outs[i] = { index = e.index, name = e.name, weight = e.weight, loss = ldist.losses._config(e.loss) }
  end
  for i, m in ipairs(model._metrics) do
    local d = describe_metrics({ m._base or m })[1]
    d.output, d.weighted = m._output, m._weighted
    ms[i] = d
  end
  return { loss = { outputs = outs, n = #l.names }, metrics = ms }
end
function nn._compile_args(model, c)
  if not c.loss.outputs then   -- compile's metrics and weighted_metrics, each list in its order
    local plain, weighted = {}, {}
    for _, d in ipairs(c.metrics) do table.insert(d.weighted and weighted or plain, d) end
    return { loss = build_loss(c.loss), metrics = build_metrics(plain), weighted_metrics = build_metrics(weighted) }
  end
  -- by name for a Functional model, by position for a subclass (its outputs have no names)
  local named = Model._io_names(model, "outputs") ~= nil
  local loss, weights, ms = {}, {}, {}
  for _, o in ipairs(c.loss.outputs) do
    local k = named and o.name or o.index
    loss[k], weights[k] = build_loss(o.loss), o.weight
  end
  local wms = {}
  if not named then for i = 1, c.loss.n do ms[i], wms[i] = {}, {} end end
  for _, d in ipairs(c.metrics) do
    local k
    for _, o in ipairs(c.loss.outputs) do if o.index == d.output then k = named and o.name or o.index end end
    if k == nil then   -- a metric on an output without a loss: its name is the metric's prefix
      k = named and Model._io_names(model, "outputs")[d.output] or d.output
    end
    local into = d.weighted and wms or ms
    into[k] = into[k] or {}
    table.insert(into[k], build_metrics({ d })[1])
  end
  return { loss = loss, loss_weights = weights, metrics = ms, weighted_metrics = wms }
end

-- The state that makes a model go on as if it never stopped: every weight
-- (trainable or not), the optimizer's slots and step count; named tensors and
-- metadata for a safetensors file. Also what BackupAndRestore keeps.
function nn._checkpoint(model)
  local t, ws = {}, model.weights
  for i, v in ipairs(ws) do t[("weights/%05d"):format(i)] = v end
  local meta = { weights = #ws }
  if model._optimizer then
    local st = ldist.optim._state(model._optimizer, model.trainable_variables)
    for i, sl in ipairs(st.slots) do
      for q = 1, ldist.optim._n_slots do
        if sl[q] then t[("optimizer/slot%d/%05d"):format(q, i)] = sl[q] end
      end
    end
    meta.iterations = st.iterations
    meta.accum_calls = st.accum_calls   -- gradient accumulation's calls (nil when off)
  end
  return t, meta
end

local shape_str = ldist._util.shape_str

-- the checkpoint's tensors and metadata into a built model (and its optimizer)
function nn._restore_checkpoint(model, t, meta, where)
  local ws = model.weights
  if #ws ~= tonumber(meta.weights) then
    error(("%s holds %s weights, the model has %d"):format(where, tostring(meta.weights), #ws), 0)
  end
  for i, v in ipairs(ws) do
    local w = t[("weights/%05d"):format(i)]
    if not w then error(("%s: weight %d (%s) is missing"):format(where, i, v.name or "?"), 0) end
    if shape_str(w.shape) ~= shape_str(v.shape) then
      error(("%s: weight %d (%s) has shape %s in the file but %s in the model"):format(where, i, v.name or "?",
        shape_str(w.shape), shape_str(v.shape)), 0)
    end
  end
  for i, v in ipairs(ws) do v:assign(t[("weights/%05d"):format(i)]) end
  if model._optimizer and meta.iterations then
    local slots = {}
    for i in ipairs(model.trainable_variables) do
      slots[i] = {}
      for q = 1, ldist.optim._n_slots do slots[i][q] = t[("optimizer/slot%d/%05d"):format(q, i)] end
    end
    ldist.optim._set_state(model._optimizer, model.trainable_variables,
      { iterations = math.tointeger(tonumber(meta.iterations)), slots = slots,
        accum_calls = meta.accum_calls and math.tointeger(tonumber(meta.accum_calls)) })
  end
end

function Model:save(path)
  if type(path) ~= "string" or path == "" then error("bad argument #1 to 'save' (a file path expected)", 2) end
  if not self.built then error("model:save: the model has no weights yet (call it on data or model:build(shape) first)", 2) end
  local t, meta = nn._checkpoint(self)
  meta.format = "ldist-model"
  meta.model = self:to_json()
  if self._compiled then
    local c = nn._describe_compile(self)
    c.optimizer = ldist.optim._config(self._optimizer)
    meta.compile = json.encode(c)
  end
  meta.rng = hex(tensor.get_rng_state())
  lio.save_safetensors(path, t, meta)
  return self
end
doc(Model.save, "Model:save", "model:save(path)\n\nThe whole model in one safetensors file: the architecture (model:to_json) and the\n" ..
  "compile settings in its metadata, every weight, the optimizer's state and the random generator's.\n" ..
  "nn.load_model(path) in another session gives a model that trains on as if it never stopped.")

function nn.load_model(path, opts)
  if type(path) ~= "string" then error("bad argument #1 to 'load_model' (a file path expected)", 2) end
  opts = opts or {}
  local ok, t, meta = pcall(lio.load_safetensors, path)
  if not ok then error(t, 2) end
  if meta.format ~= "ldist-model" or not meta.model then
    error(("%s is not an ldist model file (model:save writes them; this one's format is %s)")
      :format(path, meta.format and ("'" .. meta.format .. "'") or "not given"), 2)
  end
  local spec, err = json.decode(meta.model)
  if not spec then error(("%s: the model's configuration is not JSON (%s)"):format(path, tostring(err)), 2) end
  -- the layers may create no more weight than the file holds (checked before
  -- each is allocated): a small file declaring huge layers costs an error
  local held = 0
  for k, v in pairs(t) do if k:match("^weights/") then held = held + v:numel() * 4 end end
  nn._weight_budget(held)
  local ok2, model = pcall(from_spec_mode, spec, opts.custom_objects, opts.safe_mode == false)
  nn._weight_budget(nil)
  if not ok2 then error(("%s: %s"):format(path, tostring(model)), 2) end
  if meta.compile and opts.compile ~= false then
    local ok4, e4 = pcall(function()
      local c = json.decode(meta.compile)
      if type(c) ~= "table" then error("not a JSON object", 0) end
      local args = nn._compile_args(model, c)
      args.optimizer = build_optimizer(c.optimizer)
      model:compile(args)
    end)
    if not ok4 then error(("%s: bad compile settings in the file (%s)"):format(path, tostring(e4)), 2) end
  end
  local ok3, e = pcall(nn._restore_checkpoint, model, t, meta, path)
  if not ok3 then error(e, 2) end
  if meta.rng and opts.restore_rng ~= false then tensor.set_rng_state(unhex(meta.rng)) end
  return model
end
doc(nn.load_model, "nn.load_model", "nn.load_model(path, {custom_objects=, compile=true, restore_rng=true})\n\n" ..
  "A model saved by model:save, compiled as it was, with its weights, optimizer state and the random\n" ..
  "generator's state (restore_rng=false keeps this session's). A subclassed model's class must be\n" ..
  "defined first (or given in custom_objects).")
