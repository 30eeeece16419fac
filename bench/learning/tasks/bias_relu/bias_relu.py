"""Reference for bias_relu.cu: y = relu(x + bias) with the bias broadcast over the rows of an
8192 x 4096 matrix (a Linear layer's epilogue on its own)."""

import torch
from torch import nn

rows = 8192
cols = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(cols))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x + self.bias)


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
