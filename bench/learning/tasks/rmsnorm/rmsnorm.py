"""Reference for rmsnorm.cu: RMSNorm over the last dimension of a 4096 x 8192 matrix,
y = x / sqrt(mean(x^2) + 1e-6) * weight, with a random weight so that it is really applied."""

import torch
from torch import nn

batch_size = 4096
dim = 8192


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(dim).normal_(1.0, 0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-6) * self.weight


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
