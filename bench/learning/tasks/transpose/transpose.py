"""Reference for transpose.cu: out = x^T for a 4096 x 8192 matrix."""

import torch
from torch import nn

rows = 4096
cols = 8192


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.t().contiguous()


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
