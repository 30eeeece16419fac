"""Reference for linear_silu.cu: y = silu(x @ W^T + b), a Linear layer followed by SiLU (KernelBench
level 2 style, Gemm + Swish), batch 2048, 1024 -> 2048 features (8.6 GFLOP)."""

import torch
from torch import nn

batch_size = 2048
in_features = 1024
out_features = 2048


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.silu(self.linear(x))


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return []
