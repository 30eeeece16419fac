"""Reference for nhwc_to_nchw.cu: x.permute(0, 3, 1, 2) of 32 NHWC fp32 images of 128 x 128
with 64 channels (per image a 16384 x 64 transpose), 128 MiB read and written."""

import torch
from torch import nn

batch_size = 32
height = 128
width = 128
channels = 64


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.permute(0, 3, 1, 2).contiguous()


def get_inputs():
    return [torch.randn(batch_size, height, width, channels)]


def get_init_inputs():
    return []
