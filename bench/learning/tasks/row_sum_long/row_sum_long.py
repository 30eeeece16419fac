"""Reference for row_sum_long.cu: the sum of each row of a 128 x 262144 matrix."""

import torch
from torch import nn

rows = 128
cols = 262144


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(dim=1)


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
