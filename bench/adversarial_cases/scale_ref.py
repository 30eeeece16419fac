"""y = 2x, which cuBLAS computes exactly (axpy): a library call that gets the right answer."""

import torch
from torch import nn

n = 1 << 20


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2.0


def get_inputs():
    return [torch.randn(n)]


def get_init_inputs():
    return []
