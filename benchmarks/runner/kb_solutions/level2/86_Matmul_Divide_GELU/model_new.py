import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """gelu((x W^T + b) / divisor) in one kernel: a tiled fp32 GEMM with the epilogue fused."""

    def __init__(self, input_size, output_size, divisor):
        super().__init__()
        self.linear = nn.Linear(input_size, output_size)
        self.divisor = divisor

    def forward(self, x):
        return cuda_extension.gemm_epilogue(x.contiguous(), self.linear.weight, self.linear.bias, 1, self.divisor)
