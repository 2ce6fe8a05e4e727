-- distribute/backup_restore.lua - callbacks.BackupAndRestore (Keras'
-- tf.keras.callbacks.BackupAndRestore): model:fit saves the weights, the
-- optimizer's state, the epoch and the step every epoch (or every N steps);
-- a fit started again with the same callback (after a crash, a killed
-- worker, a pre-empted job) resumes where the last save left off and ends
-- with the weights an uninterrupted run would have had.
--
-- The checkpoint is one safetensors file, written to a temporary file and
-- renamed (ld_save_safetensors), so a crash never leaves a torn one. Under
-- MultiWorkerMirroredStrategy only the chief (s:_is_writer()) writes it; at a
-- restart the chief reads it and broadcasts it (s:_broadcast), so the other
-- workers need not see the same disk.
--
-- Resuming exactly: the weights and the optimizer (Adam's m, v and step) come
-- back as they were; fit starts at the saved epoch (initial_epoch); the data
-- set is started (and dropped) once per finished epoch, so a reshuffling
-- dataset orders the resumed epoch as the original run did, and the batches
-- already done in that epoch are skipped.
local ldist = ...
local callbacks, lio, docs, util = ldist.callbacks, ldist.io, ldist.docs, ldist._util

-- the strategy a fit runs under writes the checkpoint here (nil: alone)
local function writer(s) return not s or s:_is_writer() end

local BR = { __name = "ldist.callbacks.BackupAndRestore" }
BR.__index = BR
BR.__tostring = function(b) return ("<BackupAndRestore in %s, every %s>"):format(b.dir, tostring(b.save_freq)) end
callbacks._BackupAndRestore = BR   -- fit's message after a lost worker names its folder

-- callbacks.BackupAndRestore{dir=, save_freq="epoch"|N, delete_checkpoint=true, verbose=true}
function callbacks.BackupAndRestore(opts)
  if type(opts) == "string" then opts = { dir = opts } end
  opts = opts or {}
  local dir = opts.dir or opts.backup_dir
  if type(dir) ~= "string" or dir == "" then error("bad argument #1 to 'BackupAndRestore' (dir= expected)", 2) end
  local freq = opts.save_freq or "epoch"
  if freq ~= "epoch" and not (math.tointeger(freq) and freq > 0) then
    error("bad argument #1 to 'BackupAndRestore' (save_freq must be \"epoch\" or a positive number of steps)", 2)
  end
  return setmetatable({ dir = dir, save_freq = freq, delete_checkpoint = opts.delete_checkpoint ~= false,
    verbose = opts.verbose ~= false, path = dir .. "/checkpoint.safetensors" }, BR)
end

-- what travels to LocalCluster workers (which run the callback there)
function BR:_ship()
  return { class = "BackupAndRestore", config = { dir = self.dir, save_freq = self.save_freq,
    delete_checkpoint = self.delete_checkpoint, verbose = self.verbose } }
end

function BR:_save(model, epoch, step)
  local s = self._strategy
  if not writer(s) then return end
  lio._mkdir_p(self.dir)
  local t, meta = ldist.nn._checkpoint(model)      -- every weight, the optimizer's state (as model:save)
  meta.format, meta.epoch, meta.step = "ldist-backup", epoch, step
  local shape = model.layers[1].input_shape
  meta.input_shape = table.concat(shape, ",")
  lio.save_safetensors(self.path, t, meta)
end

-- the checkpoint (rank 0 reads, every worker gets it), loaded into the model
-- and its optimizer; {epoch=, step=} or nil when there is none
function BR:_restore(model, s)
  local found
  if writer(s) then
    local f = io.open(self.path, "rb")
    if f then
      f:close()
      local tensors, meta = lio.load_safetensors(self.path)
      found = { tensors = tensors, meta = meta }
    end
  end
  if s then found = s:_broadcast(found or false) or nil end
  if not found then return nil end
  local meta, t = found.meta, found.tensors
  if meta.format ~= "ldist-backup" then error(self.path .. " is not a BackupAndRestore checkpoint", 0) end
  if not model.built then
    local shape = {}   -- "28,28"
    for d in tostring(meta.input_shape):gmatch("%d+") do shape[#shape + 1] = math.tointeger(tonumber(d)) end
    model:build(shape)
  end
  -- every variable gets the checkpoint's value: a model whose variables a
  -- strategy lost (model._lost) is whole again once that succeeded
  local lost = model._lost
  model._lost = nil
  local ok, err = pcall(ldist.nn._restore_checkpoint, model, t, meta, self.path)
  if not ok then model._lost = lost; error(err, 0) end
  return { epoch = math.tointeger(tonumber(meta.epoch)), step = math.tointeger(tonumber(meta.step)) }
end

-- Steps done in the epoch are counted with the optimizer's step counter: fit
-- may report a batch after it has issued the next one, and the checkpoint must
-- say exactly how many updates its weights hold.
-- epoch is Keras's (from 0); _epoch is the number fit shows (from 1) and
-- _resume_epoch Keras's number of the epoch a resumed fit starts in.
function BR:on_epoch_begin(epoch, model)
  self._epoch = epoch + 1
  local done = epoch == self._resume_epoch and (self._offset or 0) or 0
  self._it0 = model._optimizer.iterations - done
end
function BR:on_train_batch_end(batch, logs, model)
  if self.save_freq == "epoch" then return end
  local step = batch + 1                    -- batches done in this epoch
  local done = (self._offset or 0) + step
  if self._it0 then done = model._optimizer.iterations - self._it0 end
  if step % self.save_freq == 0 then self:_save(model, (self._epoch or 1) - 1, done) end
end
function BR:on_epoch_end(epoch, logs, model) self:_save(model, epoch + 1, 0) end   -- epochs finished
function BR:on_train_end(model)
  if self.delete_checkpoint and writer(self._strategy) then os.remove(self.path) end
end

---------------------------------------------------------------- resuming inside model:fit
-- A dataset that, on its first iteration, first starts (and drops) `burn`
-- iterations, then skips `skip` batches; later iterations are the dataset's.
local Resume = { __name = "ldist.ResumedDataset" }
Resume.__index = Resume
local function iterate(ds)
  local f, st, c = ds:iter()
  return function() local e = f(st, c); c = e; return e end
end
function Resume.__call(self, _, prev)
  if prev == nil then
    self._limit = nil
    if not self._started then
      self._started = true
      for _ = 1, self.burn do
        if self.ds._burn then self.ds:_burn()
        else
          local it = self.ds:iter()
          if type(it) == "userdata" and it.close then it:close() end
        end
      end
      self._next = iterate(self.ds)
      for _ = 1, self.skip do if self._next() == nil then break end end
      if self.steps_per_epoch then self._limit = self.steps_per_epoch - self.skip end
    else
      self._next = iterate(self.ds)
    end
  end
  if self._limit then
    if self._limit <= 0 then return nil end
    self._limit = self._limit - 1
  end
  return self._next()
end
function Resume:cardinality() return self.ds.cardinality and self.ds:cardinality() or -2 end
function Resume:iter() return iterate(self.ds) end

-- model:fit calls a callback's _before_fit first (keras/training.lua): restore,
-- then start at the saved epoch and step.
function BR:_before_fit(model, x, y, opts, s)
  local br = self
  br._strategy = s
  br._offset, br._resume_epoch = 0, nil
  local st = br:_restore(model, s)
  if not st then return x, y, opts end
  local o = {}
  for k, v in pairs(opts) do o[k] = v end
  o.initial_epoch = st.epoch
  br._resume_epoch, br._offset = st.epoch, st.step     -- fit starts at epoch st.epoch (from 0)
  if br.verbose and writer(s) then
    print(("BackupAndRestore: resuming from %s at epoch %d, step %d"):format(br.path, st.epoch + 1, st.step))
  end
  local ds = setmetatable({ ds = util.as_dataset(x, y, opts, opts.shuffle ~= false, "fit"), burn = st.epoch, skip = st.step,
    steps_per_epoch = opts.steps_per_epoch }, Resume)
  return ds, nil, o
end

docs[callbacks.BackupAndRestore] = "callbacks.BackupAndRestore{dir=, save_freq=\"epoch\"|N, delete_checkpoint=true}\n\n" ..
  "Save the weights, the optimizer's state, the epoch and the step to DIR/checkpoint.safetensors\n" ..
  "every epoch (or every N steps); a model:fit started again with it resumes from there, with the\n" ..
  "weights an uninterrupted run would have had. Under MultiWorkerMirroredStrategy the chief writes\n" ..
  "the file and sends it to the other workers at a restart. The file is deleted when fit completes\n" ..
  "(delete_checkpoint=false keeps it)."
docs["callbacks.BackupAndRestore"] = docs[callbacks.BackupAndRestore]
