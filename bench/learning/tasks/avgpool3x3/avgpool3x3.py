"""Reference for avgpool3x3.cu: 3x3 average pooling, stride 1, zero padding 1 (the divisor is
always 9), on 16 x 32 x 256 x 256 fp32 NCHW images."""

import torch
from torch import nn

batch_size = 16
channels = 32
height = 256
width = 256


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.AvgPool2d(kernel_size=3, stride=1, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return []
