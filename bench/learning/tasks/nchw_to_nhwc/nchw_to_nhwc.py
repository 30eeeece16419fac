"""Reference for nchw_to_nhwc.cu: x.permute(0, 2, 3, 1) of 32 NCHW fp32 images, 64 channels
of 128 x 128 (per image a 64 x 16384 transpose), 128 MiB read and written."""

import torch
from torch import nn

batch_size = 32
channels = 64
height = 128
width = 128


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.permute(0, 2, 3, 1).contiguous()


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return []
