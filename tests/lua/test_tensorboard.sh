#!/usr/bin/env bash
# test_tensorboard.sh - callbacks.TensorBoard writes event files TensorBoard
# itself reads: a tiny fit with update_freq=2 and validation, then
# TensorBoard's EventAccumulator (Python) reads LOG_DIR/train and
# LOG_DIR/validation and checks the tags, steps and values against the fit's
# history (the layout Keras 3.15's TensorBoard callback writes); every record's
# TFRecord CRCs are checked with TensorBoard's own masked_crc32c, and ldist's
# crc32c against the standard check value and Python's for a framed record.
# histogram_freq: the weight histograms carry Keras 3.15's tags, steps and
# format, and their buckets are TensorBoard's own over the weights.
# TensorBoard comes from build/test-venv, created (pip install tensorboard)
# when missing; a failed install fails the test.
set -u
cd "$(dirname "$0")/../.." || exit 1
LDIST=${LDIST_BIN:-./ldist}
VENV=build/test-venv
PY=$VENV/bin/python
fail() { echo "not ok - $*"; exit 1; }

if ! "$PY" -c "import tensorboard" 2>/dev/null; then
  echo "# creating $VENV with tensorboard"
  python3 -m venv "$VENV" || fail "python3 -m venv $VENV"
  "$VENV/bin/pip" install -q tensorboard || fail "pip install tensorboard"
  "$PY" -c "import tensorboard" || fail "tensorboard does not import after installing it"
fi

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# 1. crc32c: the check value, both code paths, and a framed record
for portable in "" 1; do
  LDIST_CRC32C_PORTABLE=$portable "$LDIST" -e "
    local s = ldist._summary
    assert(s.crc32c('123456789') == 0xE3069283, ('crc32c check value: %08x'):format(s.crc32c('123456789')))
    assert(s.crc32c('') == 0)
    local long = ('The quick brown fox jumps over the lazy dog. '):rep(7) .. '!'
    local f = assert(io.open('$TMP/crc$portable.txt', 'wb'))
    f:write(('%d %d\n'):format(s.masked_crc32c(long), s.crc32c(long)))
    f:write((s.frame(long):gsub('.', function(c) return ('%02x'):format(c:byte()) end)), '\n')
    f:close()" || fail "crc32c in ldist (LDIST_CRC32C_PORTABLE=$portable)"
done
cmp -s "$TMP/crc.txt" "$TMP/crc1.txt" || fail "SSE4.2 and table crc32c differ"

# 2. a tiny fit with the callback; the history as JSON
"$LDIST" -e "
  tensor.seed(1)
  local m = nn.Sequential{ nn.Dense(4, {activation = 'relu'}), nn.Dense(1, {activation = 'sigmoid'}) }
  m:compile{ optimizer = optim.SGD{ learning_rate = 0.1 }, loss = 'binary_crossentropy', metrics = { 'accuracy' } }
  local x = tensor.randn(40, 3)
  local y = x:sum(1):reshape({ 40, 1 }):gt(0):float()
  local tb = callbacks.TensorBoard{ log_dir = '$TMP/logs', update_freq = 2 }
  local h = m:fit(x, y, { epochs = 3, batch_size = 8, verbose = 0, validation_split = 0.2, shuffle = false,
    callbacks = { tb } })
  h = h.history or h
  local out = { history = {}, iterations = m._optimizer.iterations, lr = m._optimizer.learning_rate }
  for k, v in pairs(h) do
    out.history[k] = {}
    for i, e in ipairs(v) do out.history[k][i] = tensor.is_tensor(e) and e:item() or e end
  end
  local f = assert(io.open('$TMP/history.json', 'wb')); f:write(ldist.json.encode(out)); f:close()
  -- a second fit writes new files (Keras: new writers for every fit)
  m:fit(x, y, { epochs = 1, batch_size = 8, verbose = 0, callbacks = { tb } })
  assert(not pcall(callbacks.TensorBoard, { update_freq = 0 }))
  assert(not pcall(callbacks.TensorBoard, { logdir = 'x' }))
" || fail "ldist fit with callbacks.TensorBoard"

# 2b. histogram_freq=2 over 5 epochs: a Sequential (under MirroredStrategy on
# two logical CPU devices) and a Functional model; every weight at each
# epoch's end goes to JSON to check the buckets against TensorBoard's own
LDIST_CPU_DEVICES=2 "$LDIST" -e "
  tensor.seed(2)
  local function dump(path)
    local snaps = {}
    return callbacks.LambdaCallback{
      on_epoch_end = function(self, epoch, logs, model)
        local s = {}
        for _, l in ipairs(model.layers) do
          for _, w in ipairs(l.weights) do s[#s + 1] = { name = w.name, values = w:reshape({ -1 }):totable() } end
        end
        snaps[tostring(epoch)] = s
      end,
      on_train_end = function()
        local f = assert(io.open(path, 'wb')); f:write(ldist.json.encode(snaps)); f:close()
      end }
  end
  local x = tensor.randn(40, 3)
  local y = x:sum(1):reshape({ 40, 1 }):gt(0):float()
  local strategy = distribute.MirroredStrategy()
  local m
  do
    local _ <close> = strategy:scope()
    m = nn.Sequential{ nn.Dense(4, {activation = 'relu'}), nn.Dense(1, {activation = 'sigmoid'}) }
    m:compile{ optimizer = optim.SGD{ learning_rate = 0.1 }, loss = 'binary_crossentropy' }
  end
  m:fit(x, y, { epochs = 5, batch_size = 8, verbose = 0, validation_split = 0.2,
    callbacks = { callbacks.TensorBoard{ log_dir = '$TMP/hist_seq', histogram_freq = 2 }, dump('$TMP/hist_seq.json') } })
  local i = nn.Input{ shape = { 3 } }
  local f = nn.Model{ inputs = i, outputs = nn.Dense(1)(nn.Dense(4)(i)) }
  f:compile{ optimizer = optim.SGD{ learning_rate = 0.1 }, loss = 'mse' }
  f:fit(x, y, { epochs = 2, batch_size = 8, verbose = 0,
    callbacks = { callbacks.TensorBoard{ log_dir = '$TMP/hist_fn', histogram_freq = 1 }, dump('$TMP/hist_fn.json') } })
  for _, bad in ipairs({ -1, 1.5, 'epoch' }) do
    local ok, err = pcall(callbacks.TensorBoard, { histogram_freq = bad })
    assert(not ok and tostring(err):find('histogram_freq must be a number of epochs', 1, true), tostring(err))
  end
" || fail "ldist fit with callbacks.TensorBoard{histogram_freq=}"

# 3. TensorBoard reads it
"$PY" - "$TMP" <<'PYEOF' || fail "TensorBoard's reader"
import glob, json, math, os, struct, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c, crc32c
tmp = sys.argv[1]
errors = []
def check(ok, what):
    print(("ok - " if ok else "not ok - ") + what)
    if not ok: errors.append(what)

# crc: ldist's against TensorBoard's own
long = b"The quick brown fox jumps over the lazy dog. " * 7 + b"!"
m, c = map(int, open(tmp + "/crc.txt").readline().split())
check(c == crc32c(long) and m == masked_crc32c(long), "crc32c and masked crc32c match TensorBoard's")
framed = bytes.fromhex(open(tmp + "/crc.txt").read().split("\n")[1])
want = struct.pack("<Q", len(long)); want += struct.pack("<I", masked_crc32c(want)) + long + struct.pack("<I", masked_crc32c(long))
check(framed == want, "a framed record is TFRecord's framing")

ref = json.load(open(tmp + "/history.json"))
h, iters = ref["history"], ref["iterations"]
epochs = len(h["loss"])
steps_per_epoch = iters // epochs
def near(a, b): return abs(a - b) <= 1e-6 * max(1.0, abs(b))
def f32(x): return struct.unpack("<f", struct.pack("<f", x))[0]

for sub in ("train", "validation"):
    files = sorted(glob.glob(f"{tmp}/logs/{sub}/events.out.tfevents.*"))
    check(len(files) == (2 if sub == "train" else 1), f"{sub}: one event file per fit ({len(files)})")
    host = os.uname().nodename
    for f in files:
        parts = os.path.basename(f).split(".")
        check(parts[:3] == ["events", "out", "tfevents"] and parts[3].isdigit() and parts[-1] == "v2"
              and ".".join(parts[4:-3]) == host and parts[-3].isdigit(), f"file name {os.path.basename(f)}")
        data = open(f, "rb").read(); pos = 0; n = 0; ok = True
        while pos < len(data):
            (ln,) = struct.unpack_from("<Q", data, pos)
            ok &= struct.unpack_from("<I", data, pos + 8)[0] == masked_crc32c(data[pos:pos + 8])
            body = data[pos + 12:pos + 12 + ln]
            ok &= struct.unpack_from("<I", data, pos + 12 + ln)[0] == masked_crc32c(body)
            pos += 16 + ln; n += 1
        check(ok and pos == len(data) and n > 1, f"{sub}: {n} records, every CRC right")

def acc(sub, first_file_only=True):
    d = f"{tmp}/logs/{sub}"
    if first_file_only:      # the first fit's file alone
        d = sorted(glob.glob(d + "/events.out.tfevents.*"), key=lambda p: int(p.split(".")[-2]))[0]
    ea = EventAccumulator(d, size_guidance={"scalars": 0}); ea.Reload()
    return ea
tr = acc("train")
from tensorboard.backend.event_processing import event_file_loader
first = next(iter(event_file_loader.EventFileLoader(sorted(glob.glob(f"{tmp}/logs/train/*"))[0]).Load()))
check(first.file_version == "brain.Event:2", "the first record is file_version brain.Event:2")

tags = set(tr.Tags()["scalars"])
check(tags == {"epoch_loss", "epoch_accuracy", "epoch_learning_rate", "batch_loss", "batch_accuracy"}, f"train tags {sorted(tags)}")
for name in ("loss", "accuracy"):
    ev = tr.Scalars("epoch_" + name)
    check([e.step for e in ev] == list(range(epochs)), f"epoch_{name} steps {[e.step for e in ev]}")
    check(all(near(e.value, f32(v)) for e, v in zip(ev, h[name])), f"epoch_{name} values = history")
    ev = tr.Scalars("batch_" + name)
    check([e.step for e in ev] == list(range(2, iters + 1, 2)), f"batch_{name} steps {[e.step for e in ev]}")
    # the batch logs at an epoch's last batch are the epoch's means
    last = {e.step: e.value for e in ev}
    check(all(near(last[(i + 1) * steps_per_epoch], f32(h[name][i])) for i in range(epochs) if (i + 1) * steps_per_epoch in last),
          f"batch_{name} at an epoch's end = the epoch's {name}")
lr = tr.Scalars("epoch_learning_rate")
check([e.step for e in lr] == list(range(epochs)) and all(near(e.value, f32(ref["lr"])) for e in lr), "epoch_learning_rate")

va = acc("validation")
tags = set(va.Tags()["scalars"])
check(tags == {"epoch_loss", "epoch_accuracy", "evaluation_loss_vs_iterations", "evaluation_accuracy_vs_iterations"},
      f"validation tags {sorted(tags)}")
for name in ("loss", "accuracy"):
    ev = va.Scalars("epoch_" + name)
    check([e.step for e in ev] == list(range(epochs)) and all(near(e.value, f32(v)) for e, v in zip(ev, h["val_" + name])),
          f"validation epoch_{name} = val_{name}")
    ev = va.Scalars(f"evaluation_{name}_vs_iterations")
    check([e.step for e in ev] == [steps_per_epoch * (i + 1) for i in range(epochs)]
          and all(near(e.value, f32(v)) for e, v in zip(ev, h["val_" + name])), f"evaluation_{name}_vs_iterations")
# histograms: what Keras 3.15.1 (TF 2.21) wrote for the same Sequential
# (5 epochs, histogram_freq=2): these tags, in this order, at steps 0, 2, 4;
# each a float64 tensor of 30 rows [left, right, count], plugin "histograms",
# DATA_CLASS_TENSOR. The buckets must be TensorBoard's own (histogram_pb, the
# numpy twin of tf.summary.histogram's) over the weights at that epoch's end.
import numpy as np
from tensorboard.backend.event_processing import plugin_event_accumulator as pea
from tensorboard.plugins.histogram import summary_v2 as hist_v2
from tensorboard.util import tensor_util
from tensorboard.compat.proto import summary_pb2
KERAS_SEQ_TAGS = ["sequential/dense/kernel/histogram", "sequential/dense/bias/histogram",
                  "sequential/dense_1/kernel/histogram", "sequential/dense_1/bias/histogram"]
def check_hist(sub, model_prefix, steps):
    snaps = json.load(open(f"{tmp}/{sub}.json"))
    ea = EventAccumulator(f"{tmp}/{sub}/train", size_guidance={"tensors": 0}); ea.Reload()
    tags = [t for t in ea.Tags()["tensors"] if t.endswith("/histogram")]
    want = [model_prefix + w["name"] + "/histogram" for w in snaps["0"]]
    if sub == "hist_seq": check(want == KERAS_SEQ_TAGS, f"{sub}: the weights are named as Keras names them")
    check(tags == want, f"{sub}: EventAccumulator lists the histograms {tags}")
    pa = pea.EventAccumulator(f"{tmp}/{sub}/train"); pa.Reload()
    check(sorted(pa.PluginTagToContent("histograms")) == sorted(want), f"{sub}: the histograms plugin owns them")
    md = pa.SummaryMetadata(want[0])
    check(md.data_class == summary_pb2.DATA_CLASS_TENSOR, f"{sub}: data_class DATA_CLASS_TENSOR")
    for i, tag in enumerate(want):
        evs = ea.Tensors(tag)
        check([e.step for e in evs] == steps, f"{sub}: {tag} at steps {[e.step for e in evs]}")
        for e in evs:
            got = tensor_util.make_ndarray(e.tensor_proto)
            ref = tensor_util.make_ndarray(hist_v2.histogram_pb("t", np.float32(snaps[str(e.step)][i]["values"])).value[0].tensor)
            same = got.dtype == np.float64 and got.shape == (30, 3) and np.array_equal(got[:, 2], ref[:, 2]) \
                and np.allclose(got[:, :2], ref[:, :2], rtol=0, atol=1e-12)
            check(same, f"{sub}: {tag} at epoch {e.step} = TensorBoard's buckets of the weight")
check_hist("hist_seq", "sequential/", [0, 2, 4])
check_hist("hist_fn", "", [0, 1])
# the scalars-only fit above wrote no histogram
check(not [t for t in tr.Tags()["tensors"] if t.endswith("/histogram")], "histogram_freq=0 writes no histogram")

both = acc("train", first_file_only=False)
check(len(both.Scalars("epoch_loss")) >= 1, "the whole train directory reads")
sys.exit(1 if errors else 0)
PYEOF
echo "ok - tensorboard"
