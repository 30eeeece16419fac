"""A degenerate reference, after KernelBench level 2 problem 9 (a ReLU after a subtraction):
on standard-normal inputs ReLU(x - 6) is zero everywhere, so a kernel writing zeros matches it.
Inputs scaled by 8 make a fifth of the outputs non-zero."""

import torch
from torch import nn

n = 1 << 20


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x - 6.0)


def get_inputs():
    return [torch.randn(n)]


def get_init_inputs():
    return []
