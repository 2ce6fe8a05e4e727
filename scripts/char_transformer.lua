-- char_transformer.lua - a character-level transformer on a text file.
--   ldist scripts/char_transformer.lua [--epochs N] [--steps N] [--text PATH]
--        [--context T] [--d-model D] [--layers L] [--heads H] [--batch B]
--        [--stride S] [--lr X] [--prompt S] [--n N] [--temperature X] [--seed N]
-- Reads the text (default /usr/share/common-licenses/GPL-3, shipped by Debian's
-- base-files package; a directory: its files concatenated, e.g.
-- --text /usr/share/common-licenses), prints its unigram entropy (nats per character: the loss
-- of the best model that ignores context), trains (Embedding + learned position
-- Embedding + causal MultiHeadAttention + LayerNormalization + Dense, see
-- scripts/models/char_transformer.lua), prints the loss per epoch beside that
-- entropy, then samples text from a prompt.
--
-- In the REPL:  dofile("scripts/char_transformer.lua")     -- defines, trains nothing
--               model = char_transformer.train{epochs = 1, steps = 100}
--               sample(model, "This License ", 200, 0.8)
-- (dofile(...) then ct_main{"--epochs", "2"} runs the whole script.)
local here = debug.getinfo(1, "S").source:match("^@(.*)$") or "scripts/char_transformer.lua"
local dir = here:match("^(.*)/[^/]*$") or "."
local CT = dofile(dir .. "/models/char_transformer.lua")

local defaults = {
  text = "/usr/share/common-licenses/GPL-3", epochs = 8, steps = nil, context = 64, d_model = 64,
  layers = 2, heads = 4, batch = 32, stride = 4, lr = 3e-3, seed = 1, val = 0.1, verbose = 1,
  prompt = "This License ", n = 200, temperature = 0.8,
}

-- a file, or a directory: its files (symbolic links skipped) in name order, concatenated
local function read_text(path)
  local p = io.popen(("find %q -maxdepth 1 -type f 2>/dev/null | sort"):format(path))
  local files = {}
  for l in p:lines() do files[#files + 1] = l end
  p:close()
  if #files > 1 or (#files == 1 and files[1] ~= path) then
    local parts = {}
    for i, fp in ipairs(files) do
      local f = assert(io.open(fp, "rb")); parts[i] = f:read("a"); f:close()
    end
    return table.concat(parts)
  end
  local f, err = io.open(path, "rb")
  if not f then error("char_transformer: " .. err, 2) end
  local s = f:read("a"); f:close()
  return s
end

-- train{text=, epochs=, steps=, context=, ...} -> model, history, info
-- info: {vocab=, entropy=, text=, val_loss=}
local function train(o)
  o = o or {}
  for k, v in pairs(defaults) do if o[k] == nil then o[k] = v end end
  local text = o.text_string or read_text(o.text)
  local vocab = CT.vocab(text)
  local H = CT.unigram_entropy(text)
  local say = o.verbose ~= 0 and print or function() end
  say(("text: %s, %d characters, %d distinct; unigram entropy %.4f nats/char (%.4f bits)")
    :format(o.text_string and "(string)" or o.text, #text, vocab.size, H, H / math.log(2)))
  tensor.seed(o.seed)
  local ids = CT.encode(vocab, text)
  -- the last `val` of the text is held out
  local cut = math.floor(#ids * (1 - o.val))
  local train_ids, val_ids = table.move(ids, 1, cut, 1, {}), table.move(ids, cut + 1, #ids, 1, {})
  local x, y = CT.windows(train_ids, o.context, o.stride)
  local ds = data.Dataset.from_tensor_slices(x, y):shuffle(x.shape[1], {seed = o.seed})
    :batch(o.batch, {drop_remainder = true})
  if o.steps then ds = ds:repeat_() end
  ds = ds:prefetch(2)
  local val
  if o.val > 0 and #val_ids > o.context then
    local vx, vy = CT.windows(val_ids, o.context, o.context // 2)
    val = data.Dataset.from_tensor_slices(vx, vy):batch(64)
  end
  local model = CT.build{vocab_size = vocab.size, context = o.context, d_model = o.d_model,
    heads = o.heads, layers = o.layers}
  model:compile{optimizer = optim.Adam{learning_rate = o.lr},
    loss = losses.SparseCategoricalCrossentropy{from_logits = true}}
  local per_epoch = callbacks.LambdaCallback{on_epoch_end = function(_, epoch, logs)
    say(("epoch %d: loss %.4f%s  (unigram entropy %.4f, %.2f below)"):format(epoch + 1, logs.loss,
      logs.val_loss and ("  val_loss %.4f"):format(logs.val_loss) or "", H, H - logs.loss))
  end}
  local t0 = ldist.clock()
  local history = model:fit(ds, {epochs = o.epochs, steps_per_epoch = o.steps, validation_data = val,
    verbose = o.verbose == 2 and 1 or 0, callbacks = {per_epoch}})
  say(("trained %d epochs in %.1f s"):format(o.epochs, ldist.clock() - t0))
  model._vocab = vocab
  model._context = o.context
  return model, history, {vocab = vocab, entropy = H, text = text}
end

local function softmax_sample(logits, temperature)
  local p, m = {}, -math.huge
  for i, v in ipairs(logits) do p[i] = v / temperature; if p[i] > m then m = p[i] end end
  local z = 0
  for i = 1, #p do p[i] = math.exp(p[i] - m); z = z + p[i] end
  local r, acc = math.random() * z, 0
  for i = 1, #p do acc = acc + p[i]; if r <= acc then return i - 1 end end
  return #p - 1
end

-- sample(model, prompt, n=200, temperature=0.8) -> the prompt and n more
-- characters (temperature 0: the most likely character every time)
local function sample(model, prompt, n, temperature)
  local vocab, context = model._vocab, model._context
  if not vocab then error("sample: the model has no vocabulary (train it with char_transformer.train)", 2) end
  n, temperature = n or 200, temperature or 0.8
  prompt = prompt or ""
  local ids = {}
  for i = 1, #prompt do ids[#ids + 1] = vocab.index[prompt:sub(i, i)] or vocab.index[" "] or 0 end
  if #ids == 0 then ids[1] = vocab.index["\n"] or 0 end
  local start = #ids
  for _ = 1, n do
    -- the last `context` ids at positions 0..
    local ctx = table.move(ids, math.max(1, #ids - context + 1), #ids, 1, {})
    local t = #ctx
    local logits = model(tensor.new({ctx}, {dtype = "int64"}))      -- [1, t, vocab]
    local last = logits[0][t - 1]:totable()
    local id
    if temperature <= 0 then
      id = 0
      for i, v in ipairs(last) do if v > last[id + 1] then id = i - 1 end end
    else
      id = softmax_sample(last, temperature)
    end
    ids[#ids + 1] = id
  end
  return prompt .. CT.decode(vocab, table.move(ids, start + 1, #ids, 1, {}))
end

local function parse(args)
  local o = {}
  local names = {["--epochs"] = "epochs", ["--steps"] = "steps", ["--text"] = "text", ["--context"] = "context",
    ["--d-model"] = "d_model", ["--layers"] = "layers", ["--heads"] = "heads", ["--batch"] = "batch",
    ["--stride"] = "stride", ["--lr"] = "lr", ["--prompt"] = "prompt", ["--n"] = "n",
    ["--temperature"] = "temperature", ["--seed"] = "seed", ["--val"] = "val", ["--verbose"] = "verbose"}
  local i = 1
  while i <= #args do
    local k = names[args[i]]
    if not k then error(("char_transformer: unknown argument '%s'"):format(tostring(args[i])), 0) end
    local v = args[i + 1]
    if v == nil then error("char_transformer: " .. args[i] .. " needs a value", 0) end
    o[k] = (k == "text" or k == "prompt") and v or tonumber(v)
    if o[k] == nil then error(("char_transformer: %s wants a number, got '%s'"):format(args[i], v), 0) end
    i = i + 2
  end
  return o
end

local function main(args)
  local o = parse(args or {})
  local model, history, info = train(o)
  math.randomseed(o.seed or defaults.seed)
  local prompt = o.prompt or defaults.prompt
  local s = sample(model, prompt, o.n or defaults.n, o.temperature or defaults.temperature)
  print(("---- sample (temperature %.2f, prompt %q)"):format(o.temperature or defaults.temperature, prompt))
  print(s)
  print("----")
  return model, history, info
end

char_transformer = {train = train, sample = sample, main = main, model = CT, defaults = defaults}
_G.sample = sample
_G.ct_main = main

if arg and arg[0] == here then
  model, history = main({...})
end
return char_transformer
