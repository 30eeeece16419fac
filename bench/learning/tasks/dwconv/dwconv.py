"""Reference for dwconv.cu: depthwise 3x3 convolution (padding 1, no bias) of a
16 x 32 x 256 x 256 fp32 tensor."""

import torch
from torch import nn

batch_size = 16
channels = 32
height = 256
width = 256


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1, groups=channels, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return []
