"""scripts/gpu/ref_transformer.py BATCH STEPS WARMUP [fp32|tf32|bf16] [D_MODEL HEADS LAYERS CONTEXT]
- the transformer of scripts/gpu/transformer_bench.lua in PyTorch eager, as a
user writes it: token and position embeddings, pre-norm blocks of LayerNorm
(eps 1e-3, Keras's) -> causal attention (separate q, k, v and output
projections with biases, as Keras's MultiHeadAttention; the product through
F.scaled_dot_product_attention, PyTorch's fused kernels) -> add, LayerNorm ->
Linear(4d) relu -> Linear(d) -> add; final LayerNorm and the logits. Adam
(eps 1e-7), random ids on the GPU. bf16 = torch.autocast(dtype=bfloat16).
Prints one line "tokens_per_s final_loss"."""
import sys, time
import torch
from torch import nn
import torch.nn.functional as F

batch, steps, warm = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
prec = sys.argv[4] if len(sys.argv) > 4 else "fp32"
d, heads, layers, context = (int(v) for v in (sys.argv[5:9] or (512, 8, 6, 256)))
vocab = 96
torch.backends.cuda.matmul.allow_tf32 = prec == "tf32"
torch.backends.cudnn.allow_tf32 = prec == "tf32"
dev = torch.device("cuda:0")


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d, eps=1e-3), nn.LayerNorm(d, eps=1e-3)
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.ff1, self.ff2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, h):
        B, T, _ = h.shape
        a = self.ln1(h)
        q, k, v = (p(a).view(B, T, heads, d // heads).transpose(1, 2) for p in (self.q, self.k, self.v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        h = h + self.o(att.transpose(1, 2).reshape(B, T, d))
        return h + self.ff2(F.relu(self.ff1(self.ln2(h))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(context, d)
        self.blocks = nn.ModuleList(Block() for _ in range(layers))
        self.ln_f, self.head = nn.LayerNorm(d, eps=1e-3), nn.Linear(d, vocab)

    def forward(self, x):
        h = self.tok(x) + self.pos(torch.arange(x.shape[1], device=x.device))
        for b in self.blocks:
            h = b(h)
        return self.head(self.ln_f(h))


torch.manual_seed(0)
model = GPT().to(dev)
opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7)
ids = torch.randint(0, vocab, (batch * 16, context + 1), device=dev)


def run(n, start):
    loss = None
    for i in range(n):
        b = ids[(start + i) % 16 * batch:][:batch]
        x, y = b[:, :-1], b[:, 1:]
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=prec == "bf16"):
            logits = model(x)
            loss = F.cross_entropy(logits.reshape(-1, vocab).float(), y.reshape(-1))
        loss.backward()
        opt.step()
    return loss


run(warm, 0)
torch.cuda.synchronize()
t0 = time.perf_counter()
loss = run(steps, warm)
torch.cuda.synchronize()
print("%.1f %.4f" % (steps * batch * context / (time.perf_counter() - t0), loss.item()))
