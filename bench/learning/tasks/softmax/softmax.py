"""Reference for softmax.cu: softmax over the last dimension of a 4096 x 8192 matrix."""

import torch
from torch import nn

batch_size = 4096
dim = 8192


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
