"""KernelBench level 1, problem 1 (our copy, in its format): C = A @ B for square matrices.
N is 1024 here instead of upstream's 4096, so that a mechanics run fits a few minutes."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """A single square matrix multiplication."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


N = 1024


def get_inputs():
    A = torch.rand(N, N)
    B = torch.rand(N, N)
    return [A, B]


def get_init_inputs():
    return []
