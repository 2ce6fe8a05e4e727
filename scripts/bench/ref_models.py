"""scripts/bench/ref_models.py - the bench's reference models in PyTorch that
more than one script builds: the BN-ResNet of scripts/models/resnet.lua (the
CPU bench's scripts/bench/ref_bench.py, the GPU bench's scripts/gpu/ref_bench.py).

Stem conv 3x3 16 (no bias) + BN + relu at 28x28; one residual block per stage
at 14x14x16, 7x7x32, 4x4x64 (conv3x3-BN-relu-conv3x3-BN, 1x1 conv + BN
projection shortcut, add, relu); global average pooling; Dense(10). BN as
Keras's: momentum 0.99 (PyTorch's 0.01), epsilon 1e-3."""


def torch_resnet(widths=(16, 32, 64)):
    import torch
    from torch import nn

    def bn(c):
        return nn.BatchNorm2d(c, eps=1e-3, momentum=0.01)

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.body = nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), bn(cout), nn.ReLU(),
                                      nn.Conv2d(cout, cout, 3, 1, 1, bias=False), bn(cout))
            self.short = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, 0, bias=False), bn(cout))
                          if stride != 1 or cin != cout else nn.Identity())

        def forward(self, v):
            return torch.relu(self.body(v) + self.short(v))

    layers, cin = [nn.Conv2d(1, widths[0], 3, 1, 1, bias=False), bn(widths[0]), nn.ReLU()], widths[0]
    for w in widths:
        layers.append(Block(cin, w, 2))
        cin = w
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 10))
