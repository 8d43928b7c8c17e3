import torch
import torch.nn as nn


class Model(nn.Module):
    """x * scale + bias; scale=1 and bias=0 at default init (a trap for lazy candidates)."""

    def __init__(self, dim):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        return x * self.scale + self.bias


def get_inputs():
    return [torch.randn(512, 1024)]


def get_init_inputs():
    return [1024]
