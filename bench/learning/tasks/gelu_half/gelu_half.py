"""Reference for gelu_half.cu: exact (erf) GELU over 2^26 + 6 fp16 values (even, not a
multiple of 8)."""

import torch
from torch import nn

n = (1 << 26) + 6


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.gelu(x)


def get_inputs():
    return [torch.randn(n, dtype=torch.float16)]


def get_init_inputs():
    return []
