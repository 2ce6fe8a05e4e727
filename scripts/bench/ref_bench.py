"""ref_bench.py FRAMEWORK MODEL BATCH STEPS WARMUP - the same training in
PyTorch or TensorFlow (Keras fit) on the CPU, on the same Fashion-MNIST files.
Prints one line "samples_per_s peak_rss_mb"."""
import gzip, resource, sys, time
import numpy as np

fw, which, batch, steps, warm = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
D = "/usr/share/datasets/fashion-mnist/"
with gzip.open(D + "train-images-idx3-ubyte.gz") as f:
    x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28).astype(np.float32) / 255
with gzip.open(D + "train-labels-idx1-ubyte.gz") as f:
    y = np.frombuffer(f.read(), np.uint8, offset=8).astype(np.int64)
rng = np.random.default_rng(0)

def peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

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
    yt = torch.from_numpy(y)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7)
    lossf = nn.CrossEntropyLoss()
    perm = torch.from_numpy(rng.permutation(len(x)))

    def run(n, start):
        for i in range(n):
            idx = perm[(start + i) * batch % (len(x) - batch):][:batch]
            xb, yb = xt[idx], yt[idx]
            opt.zero_grad(set_to_none=True)
            loss = lossf(model(xb), yb)
            loss.backward()
            opt.step()
        return loss.item()

    run(warm, 0)
    t0 = time.perf_counter()
    run(steps, warm)
    dt = time.perf_counter() - t0
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
    model.compile(optimizer=tf.keras.optimizers.Adam(), loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    ds = tf.data.Dataset.from_tensor_slices((xs, y)).shuffle(60000, seed=0).batch(batch, drop_remainder=True).repeat().prefetch(2)
    model.fit(ds, epochs=1, steps_per_epoch=warm, verbose=0)
    t0 = time.perf_counter()
    model.fit(ds, epochs=1, steps_per_epoch=steps, verbose=0)
    dt = time.perf_counter() - t0
print("%.1f %.1f" % (steps * batch / dt, peak_mb()))
