"""Reference for ncdhw_to_ndhwc.cu: x.permute(0, 2, 3, 4, 1) of 8 NCDHW fp32 volumes, 32
channels of 16 x 64 x 64 (per volume a 32 x 65536 transpose), 64 MiB read and written: the
layout change before a channels-last Conv3d."""

import torch
from torch import nn

batch_size = 8
channels = 32
depth = 16
height = 64
width = 64


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.permute(0, 2, 3, 4, 1).contiguous()


def get_inputs():
    return [torch.randn(batch_size, channels, depth, height, width)]


def get_init_inputs():
    return []
