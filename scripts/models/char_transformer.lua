-- scripts/models/char_transformer.lua - a small character-level transformer
-- (GPT-style, pre-norm): token embedding + learned position embedding, then
-- `layers` blocks of [LayerNormalization -> causal MultiHeadAttention -> add,
-- LayerNormalization -> Dense(ff, relu) -> Dense(d_model) -> add], a final
-- LayerNormalization and Dense(vocab) logits.
--
--   local CT = dofile("scripts/models/char_transformer.lua")
--   local vocab = CT.vocab(text)                 -- {chars = {...}, index = {[char] = id}, size = n}
--   local model = CT.build{vocab_size = vocab.size, context = 64, d_model = 64, heads = 4, layers = 2}
--
-- The model takes ids [batch, T] (int64, T <= context) and returns logits
-- [batch, T, vocab_size]; SparseCategoricalCrossentropy takes the next
-- characters [batch, T] as labels and averages over every position (Keras's rule).
local M = {}

-- class defined once per session (nn.Model:extend registers it by name)
local CharTransformer = M.class or nn.Model:extend("CharTransformer")
M.class = CharTransformer

function CharTransformer:init(cfg)
  self.cfg = cfg
  local d = cfg.d_model
  self.tok = nn.Embedding(cfg.vocab_size, d)
  self.pos = nn.Embedding(cfg.context, d)
  self.blocks = {}
  for i = 1, cfg.layers do
    local b = {
      ln1 = nn.LayerNormalization(),
      attn = nn.MultiHeadAttention(cfg.heads, d // cfg.heads, {use_causal_mask = true}),
      ln2 = nn.LayerNormalization(),
      ff1 = nn.Dense(cfg.ff or 4 * d, "relu"),
      ff2 = nn.Dense(d),
    }
    -- assigned to fields so the model tracks them
    self["ln1_" .. i], self["attn_" .. i], self["ln2_" .. i] = b.ln1, b.attn, b.ln2
    self["ff1_" .. i], self["ff2_" .. i] = b.ff1, b.ff2
    self.blocks[i] = b
  end
  self.ln_f = nn.LayerNormalization()
  self.head = nn.Dense(cfg.vocab_size)
end

function CharTransformer:get_config() return self.cfg end

function CharTransformer:call(x, training)
  local T = x.shape[2]
  if T > self.cfg.context then
    error(("CharTransformer: %d positions, the model has %d"):format(T, self.cfg.context), 2)
  end
  local positions = tensor.arange(0, T, {dtype = "int64"})
  local h = self.tok(x) + self.pos(positions)           -- [B, T, d] + [T, d]
  for i = 1, #self.blocks do
    local b = self.blocks[i]
    h = h + b.attn(b.ln1(h))
    h = h + b.ff2(b.ff1(b.ln2(h)))
  end
  return self.head(self.ln_f(h))                        -- [B, T, vocab]
end

-- the characters of text (bytes), sorted: ids are positions in that list
function M.vocab(text)
  local seen, chars = {}, {}
  for c in text:gmatch(".") do
    if not seen[c] then seen[c] = true; chars[#chars + 1] = c end
  end
  table.sort(chars)
  local index = {}
  for i, c in ipairs(chars) do index[c] = i - 1 end
  return {chars = chars, index = index, size = #chars}
end

-- text -> a Lua list of ids (characters not in the vocabulary are refused)
function M.encode(vocab, text)
  local ids = {}
  for i = 1, #text do
    local id = vocab.index[text:sub(i, i)]
    if not id then error(("character %q is not in the vocabulary"):format(text:sub(i, i)), 2) end
    ids[i] = id
  end
  return ids
end

function M.decode(vocab, ids)
  local out = {}
  for i, id in ipairs(ids) do out[i] = vocab.chars[id + 1] end
  return table.concat(out)
end

-- unigram entropy of the text in nats per character: -sum p log p
function M.unigram_entropy(text)
  local n, count = #text, {}
  for c in text:gmatch(".") do count[c] = (count[c] or 0) + 1 end
  local h = 0
  for _, k in pairs(count) do local p = k / n; h = h - p * math.log(p) end
  return h
end

-- windows of context+1 ids every `stride` characters: x = ids[i .. i+T-1],
-- y = ids[i+1 .. i+T] (the next character at every position); ids is a Lua
-- list or an int64 tensor. Column j of x is the strided view ids[j], ids[j+stride],
-- ...: no Lua table per window (a big table left to the collector raises its
-- threshold so far that the tensors of the training steps pile up for hundreds
-- of steps). tensor.concat, not tensor.stack: stack of more than ~20 tensors
-- overruns the Lua stack (see the report).
function M.windows(ids, context, stride)
  stride = stride or 1
  local t = tensor.is_tensor(ids) and ids or tensor.new(ids, {dtype = "int64"})
  local len = t.shape[1]
  local n = (len - context - 1) // stride + 1
  if n < 1 then error(("windows: %d ids do not fill one window of %d"):format(len, context + 1), 2) end
  local function cols(first)
    local c = {}
    for j = 0, context - 1 do
      c[j + 1] = t:slice(0, first + j, first + j + (n - 1) * stride + 1, stride):contiguous():reshape(n, 1)
    end
    return tensor.concat(c, 1)                          -- [n, context]
  end
  return cols(0), cols(1)
end

-- a batched dataset's labels [B, T] -> [B * T], to match the model's logits

function M.build(cfg)
  assert(cfg.vocab_size and cfg.context, "build{vocab_size=, context=, ...}")
  cfg.d_model = cfg.d_model or 64
  cfg.heads = cfg.heads or 4
  cfg.layers = cfg.layers or 2
  cfg.ff = cfg.ff or 4 * cfg.d_model
  return CharTransformer(cfg)
end

return M
