"""Reference for row_sumsq_long.cu: the sum of squares of each row of a 64 x 524288 matrix."""

import torch
from torch import nn

rows = 64
cols = 524288


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * x).sum(dim=1)


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
