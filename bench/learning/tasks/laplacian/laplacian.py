"""Reference for laplacian.cu: the 5-point Laplacian stencil 4 x - (up + down + left + right)
with zero outside, on 16 fp32 grids of 1024 x 1024."""

import torch
from torch import nn
from torch.nn import functional

batch = 16
height = 1024
width = 1024


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = functional.pad(x, (1, 1, 1, 1))
        up, down = p[:, :-2, 1:-1], p[:, 2:, 1:-1]
        left, right = p[:, 1:-1, :-2], p[:, 1:-1, 2:]
        return 4 * x - (up + down + left + right)


def get_inputs():
    return [torch.randn(batch, height, width)]


def get_init_inputs():
    return []
