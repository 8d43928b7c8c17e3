import torch
import torch.nn as nn


class Model(nn.Module):
    """GELU(x W^T + b), in FP32: the shape of KernelBench's GEMM + activation tasks, where a tensor-core GEMM
    (TF32, or fp16 inputs with fp32 accumulation) is an honest speed-up within the paper's 1e-2."""

    def __init__(self, features):
        super().__init__()
        self.linear = nn.Linear(features, features)

    def forward(self, x):
        return torch.nn.functional.gelu(self.linear(x))


def get_inputs():
    return [torch.randn(512, 512)]


def get_init_inputs():
    return [512]
