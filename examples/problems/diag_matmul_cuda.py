import torch
import torch.nn as nn


class Model(nn.Module):
    """diag(A) @ B: a dense matmul with a diagonal matrix (KernelBench level 1 style), sized for a GPU."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.diag(A) @ B


N = 4096
M = 8192


def get_inputs():
    return [torch.randn(N), torch.randn(N, M)]


def get_init_inputs():
    return []
