"""Reference for bias_gelu_scale_split.cu, the two-file form of bias_gelu_scale.cu:
y = gelu(x + bias) * scale (a chain to fuse)."""

import torch
from torch import nn

batch_size = 4096
features = 4096
scale = 0.5


class Model(nn.Module):
    def __init__(self, features: int, scale: float):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x + self.bias) * self.scale


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [features, scale]
