"""Reference for linear_gelu.cu: y = gelu(x @ W^T + b), a Linear layer followed by exact GELU,
batch 1024, 1024 -> 4096 features (8.6 GFLOP)."""

import torch
from torch import nn

batch_size = 1024
in_features = 1024
out_features = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.gelu(self.linear(x))


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return []
