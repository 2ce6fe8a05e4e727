"""scripts/gpu/ref_bench.py MODEL BATCH STEPS WARMUP [fp32|tf32|bf16] - the same
training as scripts/gpu/train_bench.lua in PyTorch on the same GPU: Adam,
batches cut on the host from the shuffled Fashion-MNIST arrays and copied to
the GPU each step (as ldist does). MODEL: mlp, cnn or resnet (the BN-ResNet
of scripts/models/resnet.lua, channels_last as ldist's NHWC). FP32 matrix
products and convolutions; "tf32" allows TF32; "bf16" runs the forward pass
under torch.autocast(dtype=torch.bfloat16), as PyTorch users write mixed
precision (the weights and the optimizer stay float32).
Prints one line "samples_per_s final_loss"."""
import gzip, os, sys, time
import numpy as np
import torch
from torch import nn

which, batch, steps, warm = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
prec = sys.argv[5] if len(sys.argv) > 5 else "fp32"
if prec not in ("fp32", "tf32", "bf16"):
    sys.exit(f"ref_bench: precision is fp32, tf32 or bf16, not {prec}")
tf32 = prec == "tf32"
torch.backends.cuda.matmul.allow_tf32 = tf32
torch.backends.cudnn.allow_tf32 = tf32
D = os.path.join(os.environ.get("LDIST_DATA_DIR", "/usr/share/datasets"), "fashion-mnist")
if not os.path.isdir(D):
    D = "/usr/share/datasets/fashion-mnist"
with gzip.open(os.path.join(D, "train-images-idx3-ubyte.gz")) as f:
    x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28).astype(np.float32) / 255
with gzip.open(os.path.join(D, "train-labels-idx1-ubyte.gz")) as f:
    y = np.frombuffer(f.read(), np.uint8, offset=8).astype(np.int64)

dev = torch.device(os.environ.get("REF_DEVICE", "cuda:0"))   # REF_DEVICE=cpu: to try it here
torch.manual_seed(0)
if which == "mlp":
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))
    xt = torch.from_numpy(x)
elif which == "resnet":   # scripts/bench/ref_models.py, as the CPU bench builds it
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
    from ref_models import torch_resnet
    model = torch_resnet()
    model = model.to(memory_format=torch.channels_last)
    xt = torch.from_numpy(x).unsqueeze(1).contiguous(memory_format=torch.channels_last)
else:   # NCHW, the layout PyTorch's cuDNN convolutions take
    model = nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 3), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Flatten(), nn.Linear(1600, 128), nn.ReLU(), nn.Linear(128, 10))
    xt = torch.from_numpy(x).unsqueeze(1)
model = model.to(dev)
yt = torch.from_numpy(y)
opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7)
lossf = nn.CrossEntropyLoss()
perm = torch.from_numpy(np.random.default_rng(0).permutation(len(x)))

def sync():
    if dev.type == "cuda":
        torch.cuda.synchronize()


def run(n, start):
    loss = None
    for i in range(n):
        idx = perm[(start + i) * batch % (len(x) - batch):][:batch]
        xb, yb = xt[idx].to(dev), yt[idx].to(dev)
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=prec == "bf16"):
            out = model(xb)
        loss = lossf(out.float(), yb)
        loss.backward()
        opt.step()
    return loss

run(warm, 0)
sync()
t0 = time.perf_counter()
loss = run(steps, warm)
sync()
dt = time.perf_counter() - t0
print(f"{steps * batch / dt:.1f} {loss.item():.4f}")
