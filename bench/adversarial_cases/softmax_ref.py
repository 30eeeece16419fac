"""Softmax over 393,216 columns: every output is ~2.5e-6, far below an absolute tolerance of
1e-4, so only a tolerance relative to the output's own scale tells zeros from the answer."""

import torch
from torch import nn

batch_size = 4
dim = 393_216


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
