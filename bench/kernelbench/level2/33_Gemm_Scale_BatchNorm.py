"""KernelBench level 2, problem 33 (our copy, in its format): nn.Linear, a learned per-feature
scale, then BatchNorm1d (evaluated in eval mode, with its running statistics). 512 x 1024 ->
1024 here instead of upstream's 1024 x 8192 -> 8192, so that a mechanics run fits a few
minutes."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """A GEMM, a scaling, and batch normalization."""

    def __init__(self, in_features, out_features, scale_shape, eps=1e-5, momentum=0.1):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.scale = nn.Parameter(torch.randn(scale_shape))
        self.bn = nn.BatchNorm1d(out_features, eps=eps, momentum=momentum)

    def forward(self, x):
        x = self.gemm(x)
        x = x * self.scale
        x = self.bn(x)
        return x


batch_size = 512
in_features = 1024
out_features = 1024
scale_shape = (out_features,)


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, scale_shape]
