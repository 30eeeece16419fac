"""Reference for dwconv1d.cu: a depthwise 1-D convolution (kernel 7, zero padding 3, no bias),
256 channels of 16384 samples, batch 8, as in a ConvNeXt/Mamba-style token mixer."""

import torch
from torch import nn

batch_size = 8
channels = 256
length = 16384


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(channels, channels, 7, padding=3, groups=channels, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    return [torch.randn(batch_size, channels, length)]


def get_init_inputs():
    return []
