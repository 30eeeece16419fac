"""Reference for linear_tanh.cu: y = tanh(x @ W^T + b), a Linear layer followed by tanh (KernelBench
level 2 style, Gemm + Tanh), batch 4096, 2048 -> 512 features (8.6 GFLOP)."""

import torch
from torch import nn

batch_size = 4096
in_features = 2048
out_features = 512


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.linear(x))


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return []
