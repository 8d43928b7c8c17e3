import torch
import torch.nn as nn


class Model(nn.Module):
    """Mean intensity of each 8-bit image, stored as integer-valued floats: the means concentrate near 127.5."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x.mean(dim=1)


def get_inputs():
    return [torch.randint(0, 256, (64, 65536)).float()]


def get_init_inputs():
    return []
