"""KernelBench level 2, problem 12 (our copy, in its format): nn.Linear, a multiplication by a
constant, then LeakyReLU. 512 x 1024 -> 1024 here instead of upstream's 1024 x 8192 -> 8192,
so that a mechanics run fits a few minutes."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """A GEMM, a multiplication, and LeakyReLU."""

    def __init__(self, in_features, out_features, multiplier, negative_slope):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.multiplier = multiplier
        self.leaky_relu = nn.LeakyReLU(negative_slope)

    def forward(self, x):
        x = self.gemm(x)
        x = x * self.multiplier
        x = self.leaky_relu(x)
        return x


batch_size = 512
in_features = 1024
out_features = 1024
multiplier = 2.0
negative_slope = 0.1


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, multiplier, negative_slope]
