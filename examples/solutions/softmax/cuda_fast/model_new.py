import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """One pass over each row in registers: max, sum of exponentials, normalise (one block per row)."""

    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.scaled_softmax(x.contiguous(), self.scale)
