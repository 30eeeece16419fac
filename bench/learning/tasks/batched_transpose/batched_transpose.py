"""Reference for batched_transpose.cu: y[b] = x[b]^T for 16 fp32 planes of 2048 x 1024
(x.transpose(1, 2)), 128 MiB read and written."""

import torch
from torch import nn

batch = 16
rows = 2048
cols = 1024


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.transpose(1, 2).contiguous()


def get_inputs():
    return [torch.randn(batch, rows, cols)]


def get_init_inputs():
    return []
