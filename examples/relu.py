"""Reference for relu.cu (KernelBench format)."""

import torch
from torch import nn

n = 1 << 24


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


def get_inputs():
    return [torch.randn(n)]


def get_init_inputs():
    return []
