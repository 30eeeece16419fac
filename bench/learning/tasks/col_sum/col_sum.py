"""Reference for col_sum.cu: the sum of each column of an 8192 x 8192 matrix."""

import torch
from torch import nn

rows = 8192
cols = 8192


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(dim=0)


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
