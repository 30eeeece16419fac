"""Reference for conv1x1.cu: a 1x1 convolution (no bias), 256 -> 256 channels on a batch of 16
NCHW images of 64 x 64 (8.6 GFLOP): per image, a 256 x 256 by 256 x 4096 GEMM."""

import torch
from torch import nn

batch_size = 16
in_channels = 256
out_channels = 256
height = 64
width = 64


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return []
