"""KernelBench level 1, problem 19 (our copy, in its format): ReLU. The input is 4096 x 4096
here instead of upstream's 4096 x 393216, so that a mechanics run fits a few minutes."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """A ReLU activation."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


batch_size = 4096
dim = 4096


def get_inputs():
    x = torch.rand(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
