import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """relu(x W^T + bias) in one kernel: a tiled fp32 GEMM with the bias and ReLU in its epilogue."""

    def __init__(self, in_features, out_features, bias_shape):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        return cuda_extension.gemm_epilogue(x.contiguous(), self.gemm.weight, self.bias, 0, 1.0)
