import torch
import torch.nn as nn


class Model(nn.Module):
    """Weighted row sums of a wide matrix drawn from torch.rand: every output concentrates near its
    mean, so a kernel that reads only part of each row lands within 1e-2 of it on these inputs."""

    def __init__(self, cols):
        super().__init__()
        self.gain = nn.Parameter(torch.ones(cols))
        self.bias = nn.Parameter(torch.zeros(1))

    def forward(self, x):
        return (x * self.gain).sum(dim=1) + self.bias


def get_inputs():
    return [torch.rand(64, 65536)]


def get_init_inputs():
    return [65536]
