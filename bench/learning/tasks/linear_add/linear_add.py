"""Reference for linear_add.cu: y = x @ W^T + b + r, a Linear layer and a residual add (KernelBench
level 2 style, Gemm + Add), batch 1024, 4096 -> 1024 features (8.6 GFLOP)."""

import torch
from torch import nn

batch_size = 1024
in_features = 4096
out_features = 1024


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.linear(x) + residual


def get_inputs():
    return [torch.randn(batch_size, in_features), torch.randn(batch_size, out_features)]


def get_init_inputs():
    return []
