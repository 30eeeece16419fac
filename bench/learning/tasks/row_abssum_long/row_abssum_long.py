"""Reference for row_abssum_long.cu: the L1 norm of each row of a 96 x 327680 matrix."""

import torch
from torch import nn

rows = 96
cols = 327680


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.abs().sum(dim=1)


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
