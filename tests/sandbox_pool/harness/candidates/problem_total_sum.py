import torch
import torch.nn as nn


class Model(nn.Module):
    """The sum of every element of a wide torch.rand draw: exchanging positions leaves it unchanged, so
    influence twins decide nothing and the structured trials must catch a subsampler alone."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x.sum()


def get_inputs():
    return [torch.rand(16, 1 << 18)]


def get_init_inputs():
    return []
