"""Reference for linear_bias.cu: y = x @ W^T + b, a Linear layer alone (KernelBench level 1 style,
the projections of an MLP or attention), batch 2048, 2048 -> 1024 features (8.6 GFLOP)."""

import torch
from torch import nn

batch_size = 2048
in_features = 2048
out_features = 1024


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return []
