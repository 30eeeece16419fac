"""Reference for matmul.cu: C = A @ B in fp32."""

import torch
from torch import nn

M = 1024
K = 1024
N = 1024


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a @ b


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
