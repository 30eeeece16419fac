"""KernelBench level 1, problem 38 (our copy, in its format): each row divided by the mean of
its absolute values. The input is 4096 x 4096 here instead of upstream's 32768 x 65535, so
that a mechanics run fits a few minutes."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """L1 normalization of each row."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / torch.mean(torch.abs(x), dim=1, keepdim=True)


batch_size = 4096
dim = 4096


def get_inputs():
    x = torch.rand(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
