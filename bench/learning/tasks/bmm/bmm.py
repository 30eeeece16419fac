"""Reference for bmm.cu: a batch of 32 fp32 matrix products, 512 x 512 by 512 x 512
(8.6 GFLOP)."""

import torch
from torch import nn

batch = 32
M = 512
K = 512
N = 512


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.bmm(a, b)


def get_inputs():
    return [torch.randn(batch, M, K), torch.randn(batch, K, N)]


def get_init_inputs():
    return []
