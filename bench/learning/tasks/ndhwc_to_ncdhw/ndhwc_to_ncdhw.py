"""Reference for ndhwc_to_ncdhw.cu: x.permute(0, 4, 1, 2, 3) of 8 NDHWC fp32 volumes of
16 x 64 x 64 with 32 channels (per volume a 65536 x 32 transpose), 64 MiB read and written: the
layout change back from a channels-last Conv3d."""

import torch
from torch import nn

batch_size = 8
depth = 16
height = 64
width = 64
channels = 32


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.permute(0, 4, 1, 2, 3).contiguous()


def get_inputs():
    return [torch.randn(batch_size, depth, height, width, channels)]


def get_init_inputs():
    return []
