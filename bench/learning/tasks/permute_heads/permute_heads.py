"""Reference for permute_heads.cu: attention's head split, [batch, seq, heads, head_dim] ->
[batch, heads, seq, head_dim] (x.permute(0, 2, 1, 3)) for 32 x 512 x 16 x 64 fp32 values,
64 MiB read and written. Rows of 64 floats move whole: a layout change that is not a
transpose."""

import torch
from torch import nn

batch = 32
seq = 512
heads = 16
head_dim = 64


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.permute(0, 2, 1, 3).contiguous()


def get_inputs():
    return [torch.randn(batch, seq, heads, head_dim)]


def get_init_inputs():
    return []
