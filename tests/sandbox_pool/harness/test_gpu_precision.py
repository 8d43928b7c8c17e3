"""CUDA twins of test_precision.py (issue 36): tensor-core GEMMs at lower internal precision — cuBLAS SGEMM in TF32
math mode, fp16 inputs with fp32 accumulation — are correct under the `paper` policy on a 2048x2048 linear + GELU,
refused under `strict`; a GEMM over half of k still fails.

Run on a GPU node (`PHASES=tests bash scripts/gpu-session.sh`, or
`.venv/bin/python -m pytest tests/sandbox_pool/harness/test_gpu_precision.py -m gpu -q`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cuda_agent.sandbox_pool.harness import EvalStatus

pytestmark = pytest.mark.gpu

CUDA = Path(__file__).parent / "candidates" / "cuda"
PROBLEM = (CUDA / "problem_linear_gelu.py").read_text()
HONEST = {"tf32_sgemm": 0, "fp16_inputs": 1}
FIRST_HALF_K = 10


def _files(mode: int) -> dict[str, str]:
    model_new = (
        "import torch.nn as nn\nimport cuda_extension\n\n\n"
        "class ModelNew(nn.Module):\n"
        "    def __init__(self, features):\n"
        "        super().__init__()\n"
        "        self.linear = nn.Linear(features, features)\n\n"
        "    def forward(self, x):\n"
        f"        return cuda_extension.linear_gelu(x, self.linear.weight, self.linear.bias, {mode})\n"
    )
    return {"model_new.py": model_new, "kernels/lowp_gemm.cu": (CUDA / "lowp_gemm.cu").read_text(),
            "kernels/lowp_gemm_binding.cpp": (CUDA / "lowp_gemm_binding.cpp").read_text()}


@pytest.fixture(scope="module")
def run(evaluate_cuda):
    def evaluate(mode: int, **options):
        return evaluate_cuda(PROBLEM, _files(mode), **{"seed": 31, **options})

    return evaluate


@pytest.mark.parametrize("name", sorted(HONEST))
def test_tensor_core_gemms_are_correct_under_paper(run, name: str) -> None:
    for seed in (31, 32):
        result = run(HONEST[name], seed=seed)
        print(name, seed, result.status.value, result.reward, result.runtime_us, result.eager_us, result.torch_compile_us)
        assert result.status is EvalStatus.OK and result.correct, (name, seed, result.error)
        assert result.reward >= 1.0


def test_tf32_is_refused_under_strict(run) -> None:
    result = run(HONEST["tf32_sgemm"], precision_policy="strict", profile=False)
    assert result.status is EvalStatus.INCORRECT, (result.status, result.error)


def test_a_gemm_over_half_of_k_still_fails(run) -> None:
    for seed in (31, 32):
        result = run(FIRST_HALF_K, seed=seed, profile=False)
        assert result.status is EvalStatus.INCORRECT, (seed, result.status, result.error)
