import torch
import torch.nn as nn


class Model(nn.Module):
    """C = A @ B in FP32 (non-negative inputs: TF32 stays within the 1e-2 tolerance)."""

    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return A @ B


def get_inputs():
    return [torch.rand(4096, 512), torch.rand(512, 4096)]


def get_init_inputs():
    return []
