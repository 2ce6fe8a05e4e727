-- seq2seq.lua - an encoder-decoder with attention that learns to spell words backwards.
--   ldist scripts/seq2seq.lua [--epochs N] [--units U] [--batch B] [--lr X] [--seed N]
--        [--replicas R] [--text PATH]
-- The words (3 to 10 letters) of a text (default /usr/share/common-licenses/GPL-3,
-- shipped by Debian's base-files package), each padded with 0 to 10 characters: the
-- encoder's Embedding{mask_zero} masks the padding, its LSTM skips it and gives its final
-- states (return_state); the decoder, fed "^" and the reversed word (teacher forcing),
-- starts from those states (initial_state) and attends to the encoder's steps that count
-- (AdditiveAttention, Bahdanau's); the loss and accuracy count only the steps that are
-- letters or the end mark "$". Each of these layers gives Keras 3's numbers, masks
-- included (tests/lua/test_masking.lua checks a seq2seq model with attention against it).
-- With --replicas R it trains under MirroredStrategy over R logical CPU devices.
-- Prints the loss and accuracy per epoch, the held-out words' accuracy, and a few
-- held-out words spelled backwards by greedy decoding.
--
-- In the REPL:  dofile("scripts/seq2seq.lua")              -- defines, trains nothing
--               model, info = seq2seq.train{epochs = 10}
--               seq2seq.reverse(model, "license")
local here = debug.getinfo(1, "S").source:match("^@(.*)$") or "scripts/seq2seq.lua"

local defaults = { text = "/usr/share/common-licenses/GPL-3", epochs = 30, units = 64, batch = 32, lr = 1e-2, seed = 1,
  replicas = 1, verbose = 1 }
local LEN = 10                       -- the longest word; the decoder reads and writes LEN + 1 steps
local PAD, START, STOP = 0, 1, 2     -- ids; the letters a-z are 3..28
local VOCAB = 29

local function id_of(ch) return ch:byte() - 94 end   -- "a" -> 3
local function char_of(id) return id == STOP and "$" or id == START and "^" or id >= 3 and string.char(id + 94) or "" end

-- the distinct words of 3 to LEN lowercase letters, in a fixed shuffled order
local function read_words(path, seed)
  local f = assert(io.open(path, "rb"))
  local text = f:read("a"):lower()
  f:close()
  local seen, words = {}, {}
  for w in text:gmatch("%a+") do
    if #w >= 3 and #w <= LEN and not seen[w] then seen[w] = true; words[#words + 1] = w end
  end
  table.sort(words)
  local s = seed
  for i = #words, 2, -1 do   -- Fisher-Yates with a small LCG: the same order on every machine
    s = (s * 1103515245 + 12345) % 2147483648
    local j = s % i + 1
    words[i], words[j] = words[j], words[i]
  end
  return words
end

-- {encoder ids, decoder ids}, targets: [n, LEN], [n, LEN + 1], [n, LEN + 1]
local function encode(words)
  local enc, dec, tgt = {}, {}, {}
  for _, w in ipairs(words) do
    local r = w:reverse()
    for t = 1, LEN do enc[#enc + 1] = t <= #w and id_of(w:sub(t, t)) or PAD end
    for t = 1, LEN + 1 do
      dec[#dec + 1] = t == 1 and START or t - 1 <= #r and id_of(r:sub(t - 1, t - 1)) or PAD
      tgt[#tgt + 1] = t <= #r and id_of(r:sub(t, t)) or t == #r + 1 and STOP or PAD
    end
  end
  local n = #words
  local function t(v, cols) return tensor.new(v, { dtype = "int64" }):reshape { n, cols } end
  return { t(enc, LEN), t(dec, LEN + 1) }, t(tgt, LEN + 1)
end

local function make_model(units)
  local src, prev = nn.Input { shape = { LEN }, dtype = "int64", name = "word" },
    nn.Input { shape = { LEN + 1 }, dtype = "int64", name = "reversed_so_far" }
  local enc, h, c = nn.LSTM(units, { return_sequences = true, return_state = true })(
    nn.Embedding(VOCAB, 32, { mask_zero = true })(src))
  local dec = nn.LSTM(units, { return_sequences = true })(nn.Embedding(VOCAB, 32, { mask_zero = true })(prev),
    { initial_state = { h, c } })
  local context = nn.AdditiveAttention() { dec, enc }
  local out = nn.Dense(VOCAB)(nn.Concatenate() { dec, context })
  return nn.Model { inputs = { src, prev }, outputs = out, name = "seq2seq" }
end

-- the word spelled backwards by greedy decoding: the decoder's input grows by its own best guess
local function reverse(model, word)
  local x = encode({ word })
  local dec = x[2]:cpu():totable()[1]
  for t = 2, LEN + 1 do dec[t] = PAD end
  local out = {}
  for t = 1, LEN + 1 do
    local p = model:predict({ x[1], tensor.new({ dec }, { dtype = "int64" }) }, { verbose = 0 })
    local id = math.tointeger(p[0][t - 1]:argmax():item())
    if id == STOP or t == LEN + 1 then break end
    out[#out + 1] = char_of(id)
    dec[t + 1] = id
  end
  return table.concat(out)
end

local function train(o)
  o = setmetatable(o or {}, { __index = defaults })
  tensor.seed(o.seed)
  local words = read_words(o.text, o.seed)
  local n_val = #words // 10
  local train_words, val_words = table.move(words, n_val + 1, #words, 1, {}), table.move(words, 1, n_val, 1, {})
  local x, y = encode(train_words)
  local xv, yv = encode(val_words)
  local strategy
  if o.replicas > 1 then
    ldist.config.cpu_devices(o.replicas)
    local devices = {}
    for r = 1, o.replicas do devices[r] = "cpu:" .. (r - 1) end
    strategy = distribute.MirroredStrategy { devices = devices }
  end
  local model
  local function build()
    model = make_model(o.units)
    model:compile { optimizer = optim.Adam { learning_rate = o.lr },
      loss = losses.SparseCategoricalCrossentropy { from_logits = true }, metrics = { "accuracy" } }
  end
  if strategy then strategy:scope(build) else build() end
  if o.verbose > 0 then
    print(("%d words (%d to train, %d held out), padded to %d letters; %s"):format(#words, #train_words, n_val, LEN,
      strategy and ("MirroredStrategy over %d CPU devices"):format(o.replicas) or "one device"))
  end
  local h = model:fit(x, y, { epochs = o.epochs, batch_size = o.batch, verbose = 0, seed = o.seed })
  if o.verbose > 0 then
    for e = 1, o.epochs do print(("epoch %2d  loss %.4f  accuracy %.3f"):format(e, h.loss[e], h.history.accuracy[e])) end
  end
  local r = model:evaluate(xv, yv, { batch_size = 64, verbose = 0 })
  if o.verbose > 0 then print(("held out: loss %.4f, accuracy %.3f (of the letters and end marks)"):format(r.loss, r.accuracy)) end
  return model, { history = h, held_out = r, val_words = val_words }
end

local function main(args)
  local o, names = {}, { ["--epochs"] = "epochs", ["--units"] = "units", ["--batch"] = "batch", ["--lr"] = "lr",
    ["--seed"] = "seed", ["--replicas"] = "replicas", ["--text"] = "text", ["--verbose"] = "verbose" }
  local i = 1
  while i <= #args do
    local k = names[args[i]]
    if not k then error(("seq2seq: unknown argument '%s'"):format(tostring(args[i])), 0) end
    local v = args[i + 1]
    if v == nil then error("seq2seq: " .. args[i] .. " needs a value", 0) end
    o[k] = k == "text" and v or tonumber(v)
    if o[k] == nil then error(("seq2seq: %s wants a number, got '%s'"):format(args[i], v), 0) end
    i = i + 2
  end
  local model, info = train(o)
  for j = 1, math.min(6, #info.val_words) do
    local w = info.val_words[j]
    print(("%-10s -> %-10s (%s)"):format(w, reverse(model, w), reverse(model, w) == w:reverse() and "right" or "wrong"))
  end
  return model, info
end

seq2seq = { train = train, reverse = reverse, make_model = make_model, main = main, defaults = defaults }
if arg and arg[0] == here then main({ ... }) end
return seq2seq
