import torch
import torch.nn as nn


class Model(nn.Module):
    """relu of a 64 MB input: half its output is zero, and on a CPU an output this large used to come from
    fresh pages of the operating system, zero already (above glibc's 32 MB mmap threshold)."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(4096, 4096)]


def get_init_inputs():
    return []
