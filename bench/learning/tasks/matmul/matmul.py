"""Reference for matmul.cu: C = A @ B in fp32, 2048 x 2048 x 2048 (17 GFLOP)."""

import torch
from torch import nn

M = 2048
K = 2048
N = 2048


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a @ b


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
