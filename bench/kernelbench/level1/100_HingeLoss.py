"""KernelBench level 1, problem 100 (our copy, in its format): the mean hinge loss. As
upstream, the targets (batch_size values) broadcast along the predictions' last dimension.
The predictions are 4096 x 4096 here instead of upstream's 32768 x 32768, so that a
mechanics run fits a few minutes."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Hinge loss for binary classification."""

    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return torch.mean(torch.clamp(1 - predictions * targets, min=0))


batch_size = 4096
input_shape = (4096,)
dim = 1


def get_inputs():
    return [
        torch.rand(batch_size, *input_shape),
        torch.randint(0, 2, (batch_size,)).float() * 2 - 1,
    ]


def get_init_inputs():
    return []
