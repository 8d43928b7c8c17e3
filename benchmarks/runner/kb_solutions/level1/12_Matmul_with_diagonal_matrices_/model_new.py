import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """diag(A) @ B is a row scaling: out[i, j] = A[i] * B[i, j], O(NM) instead of O(N^2 M)."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return cuda_extension.diag_matmul(A.contiguous(), B.contiguous())
