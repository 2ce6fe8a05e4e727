"""ref_bench.py FRAMEWORK MODEL BATCH STEPS WARMUP - the same training in
PyTorch or TensorFlow (Keras fit) on the CPU, on the same Fashion-MNIST files.
Prints one line "samples_per_s peak_rss_mb"."""
import gzip, os, resource, sys, time
import numpy as np

fw, which, batch, steps, warm = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
# the data where ldist reads it (LDIST_DATA_DIR: the GPU bundle's copy)
D = os.path.join(os.environ.get("LDIST_DATA_DIR", "/usr/share/datasets"), "fashion-mnist") + "/"
if not os.path.isdir(D):
    D = "/usr/share/datasets/fashion-mnist/"
# BENCH_THREADS=n: PyTorch's intra-op threads (make bench-cores: every core,
# as ldist uses; PyTorch's default is the physical cores)
if os.environ.get("BENCH_THREADS") and fw == "torch":
    import torch
    torch.set_num_threads(int(os.environ["BENCH_THREADS"]))
with gzip.open(D + "train-images-idx3-ubyte.gz") as f:
    x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28).astype(np.float32) / 255
with gzip.open(D + "train-labels-idx1-ubyte.gz") as f:
    y = np.frombuffer(f.read(), np.uint8, offset=8).astype(np.int64)
rng = np.random.default_rng(0)

def peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def torch_rate(model, xt, yt, classes=None):
    """Adam on batches of (xt, yt) in a fixed random order: `warm` steps, then
    `steps` timed; samples/s. classes: a loss at every position of a
    sequence model's output [batch, t, classes]."""
    import torch
    from torch import nn
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7)
    lossf = nn.CrossEntropyLoss()
    perm = torch.from_numpy(rng.permutation(len(xt)))
    model.train()

    def run(n, start):
        for i in range(n):
            idx = perm[(start + i) * batch % (len(xt) - batch):][:batch]
            out, yb = model(xt[idx]), yt[idx]
            if classes:
                out, yb = out.reshape(-1, classes), yb.reshape(-1)
            opt.zero_grad(set_to_none=True)
            loss = lossf(out, yb)
            loss.backward()
            opt.step()
        return loss.item()

    run(warm, 0)
    t0 = time.perf_counter()
    run(steps, warm)
    return steps * batch / (time.perf_counter() - t0)


def keras_rate(model, xs, ys):
    """model.fit with Adam on (xs, ys) shuffled and batched: `warm` steps, then
    `steps` timed; samples/s."""
    import tensorflow as tf
    model.compile(optimizer=tf.keras.optimizers.Adam(),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    ds = tf.data.Dataset.from_tensor_slices((xs, ys)).shuffle(len(xs), seed=0) \
        .batch(batch, drop_remainder=True).repeat().prefetch(2)
    model.fit(ds, epochs=1, steps_per_epoch=warm, verbose=0)
    t0 = time.perf_counter()
    model.fit(ds, epochs=1, steps_per_epoch=steps, verbose=0)
    return steps * batch / (time.perf_counter() - t0)

# ---- resnet (BN-ResNet, as scripts/models/resnet.lua builds it) -------------
# stem conv 3x3 16 (no bias) + BN + relu at 28x28; one residual block per stage
# at 14x14x16, 7x7x32, 4x4x64 (conv3x3-BN-relu-conv3x3-BN, 1x1 conv + BN
# projection shortcut, add, relu); global average pooling; Dense(10). BN as
# Keras's: momentum 0.99 (PyTorch's 0.01), epsilon 1e-3.
if which == "resnet":
    import os
    widths = (16, 32, 64)
    if fw == "torch":
        import torch
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from ref_models import torch_resnet
        torch.manual_seed(0)
        model = torch_resnet(widths)
        xt, yt = torch.from_numpy(x).unsqueeze(1), torch.from_numpy(y)
        # channels_last (NHWC, as ldist and Keras) is PyTorch's fast CPU layout
        # for convolutions (oneDNN); 2-3x faster than NCHW for these small layers
        if os.environ.get("RESNET_TORCH_NCHW") != "1":
            model = model.to(memory_format=torch.channels_last)
            xt = xt.contiguous(memory_format=torch.channels_last)
        rate = torch_rate(model, xt, yt)
    else:
        import os
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        import tensorflow as tf
        tf.random.set_seed(0)
        L = tf.keras.layers

        def conv_bn(v, c, k, s):
            v = L.Conv2D(c, k, strides=s, padding="same", use_bias=False)(v)
            return L.BatchNormalization(momentum=0.99, epsilon=1e-3)(v)

        inp = tf.keras.Input((28, 28, 1))
        h, cin = L.Activation("relu")(conv_bn(inp, widths[0], 3, 1)), widths[0]
        for w in widths:
            b = conv_bn(L.Activation("relu")(conv_bn(h, w, 3, 2)), w, 3, 1)
            h = L.Activation("relu")(L.Add()([b, conv_bn(h, w, 1, 2)]))
            cin = w
        out = L.Dense(10)(L.GlobalAveragePooling2D()(h))
        rate = keras_rate(tf.keras.Model(inp, out), x[..., None], y)
    print("%.1f %.1f" % (rate, peak_mb()))
    sys.exit(0)
# ---- end resnet ----------------------------------------------------------------

# ---- transformer (char-level, as scripts/models/char_transformer.lua builds it) --
# BATCH sequences of 64 characters of /usr/share/common-licenses/GPL-3 (every
# window); token + learned position embedding (d 64), 2 pre-norm blocks of
# [LayerNorm, causal 4-head attention (key_dim 16), add, LayerNorm, Dense 256
# relu, Dense 64, add], LayerNorm, Dense(vocab); cross-entropy at every position.
# samples/s counts sequences (x64 for characters/s).
if which == "transformer":
    T, D, HEADS, BLOCKS = 64, 64, 4, 2
    text = open("/usr/share/common-licenses/GPL-3", "rb").read()
    chars = sorted(set(text))
    V = len(chars)
    ids = np.array([chars.index(c) for c in text], np.int64)
    widx = np.arange(len(ids) - T)[:, None] + np.arange(T)[None, :]
    tx, ty = ids[widx], ids[widx + 1]
    if fw == "torch":
        import torch
        from torch import nn
        torch.manual_seed(0)

        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.ln1, self.ln2 = nn.LayerNorm(D, eps=1e-3), nn.LayerNorm(D, eps=1e-3)
                self.attn = nn.MultiheadAttention(D, HEADS, batch_first=True)
                self.ff = nn.Sequential(nn.Linear(D, 4 * D), nn.ReLU(), nn.Linear(4 * D, D))

            def forward(self, h, mask):
                a = self.ln1(h)
                h = h + self.attn(a, a, a, attn_mask=mask, need_weights=False)[0]  # (is_causal=True: 3x slower here)
                return h + self.ff(self.ln2(h))

        class CharTransformer(nn.Module):
            def __init__(self):
                super().__init__()
                self.tok, self.pos = nn.Embedding(V, D), nn.Embedding(T, D)
                self.blocks = nn.ModuleList([Block() for _ in range(BLOCKS)])
                self.ln_f, self.head = nn.LayerNorm(D, eps=1e-3), nn.Linear(D, V)
                self.register_buffer("mask", torch.triu(torch.ones(T, T, dtype=torch.bool), 1))

            def forward(self, v):
                h = self.tok(v) + self.pos(torch.arange(v.shape[1]))
                for b in self.blocks:
                    h = b(h, self.mask)
                return self.head(self.ln_f(h))

        rate = torch_rate(CharTransformer(), torch.from_numpy(tx), torch.from_numpy(ty), classes=V)
    else:
        import os
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        import tensorflow as tf
        tf.random.set_seed(0)
        L = tf.keras.layers

        class AddPosition(L.Layer):  # a position embedding: row t added at position t
            def build(self, shape):
                self.pos = self.add_weight(shape=(T, D), initializer="uniform", name="pos")

            def call(self, h):
                return h + self.pos

        inp = tf.keras.Input((T,), dtype="int64")
        h = AddPosition()(L.Embedding(V, D)(inp))
        for _ in range(BLOCKS):
            a = L.LayerNormalization(epsilon=1e-3)(h)
            h = L.Add()([h, L.MultiHeadAttention(HEADS, D // HEADS)(a, a, use_causal_mask=True)])
            f = L.Dense(D)(L.Dense(4 * D, activation="relu")(L.LayerNormalization(epsilon=1e-3)(h)))
            h = L.Add()([h, f])
        rate = keras_rate(tf.keras.Model(inp, L.Dense(V)(L.LayerNormalization(epsilon=1e-3)(h))), tx, ty)
    print("%.1f %.1f" % (rate, peak_mb()))
    sys.exit(0)
# ---- end transformer -----------------------------------------------------------

if fw == "torch":
    import torch
    from torch import nn
    torch.manual_seed(0)
    if which == "mlp":
        model = nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))
        xt = torch.from_numpy(x)
    else:
        model = nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 3), nn.ReLU(),
                              nn.MaxPool2d(2), nn.Flatten(), nn.Linear(1600, 128), nn.ReLU(), nn.Linear(128, 10))
        xt = torch.from_numpy(x).unsqueeze(1)
    rate = torch_rate(model, xt, torch.from_numpy(y))
else:
    import os
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    tf.random.set_seed(0)
    L = tf.keras.layers
    if which == "mlp":
        model = tf.keras.Sequential([tf.keras.Input((28, 28)), L.Flatten(), L.Dense(512, activation="relu"),
                                     L.Dense(256, activation="relu"), L.Dense(10)])
        xs = x
    else:
        model = tf.keras.Sequential([tf.keras.Input((28, 28, 1)), L.Conv2D(32, 3, activation="relu"), L.MaxPooling2D(2),
                                     L.Conv2D(64, 3, activation="relu"), L.MaxPooling2D(2), L.Flatten(),
                                     L.Dense(128, activation="relu"), L.Dense(10)])
        xs = x[..., None]
    rate = keras_rate(model, xs, y)
print("%.1f %.1f" % (rate, peak_mb()))
