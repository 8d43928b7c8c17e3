"""CUDA twins of test_approximation.py: honest reductions in GPU orders pass, subsampling fails.

Run on a GPU node (scripts/gpu-tests.sh, or
`.venv/bin/python -m pytest tests/sandbox_pool/harness/test_gpu_approximation.py -m gpu -q`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cuda_agent.sandbox_pool.harness import EvalStatus

pytestmark = pytest.mark.gpu

CANDIDATES = Path(__file__).parent / "candidates"
PROBLEM = (CANDIDATES / "problem_row_sums.py").read_text()
KERNEL = (CANDIDATES / "cuda" / "row_sums.cu").read_text()
BINDING = (CANDIDATES / "cuda" / "row_sums_binding.cpp").read_text()

HONEST = {"tree": 0, "warp_shuffle": 1, "atomics": 2, "kahan": 3}
CHEATS = {"strided_subsample": 10, "first_half": 11}


def _files(mode: int) -> dict[str, str]:
    model_new = (
        "import torch\nimport torch.nn as nn\nimport cuda_extension\n\n\n"
        "class ModelNew(nn.Module):\n"
        "    def __init__(self, cols):\n"
        "        super().__init__()\n"
        "        self.gain = nn.Parameter(torch.ones(cols))\n"
        "        self.bias = nn.Parameter(torch.zeros(1))\n\n"
        "    def forward(self, x):\n"
        f"        return cuda_extension.wsum(x, self.gain, self.bias, {mode})\n"
    )
    return {"model_new.py": model_new, "kernels/row_sums.cu": KERNEL, "kernels/row_sums_binding.cpp": BINDING}


@pytest.fixture(scope="module")
def run(evaluate_cuda):
    def evaluate(mode: int, **options):
        return evaluate_cuda(PROBLEM, _files(mode), **{"seed": 21, **options})

    return evaluate


@pytest.mark.parametrize("name", sorted(HONEST))
def test_honest_gpu_reductions_pass(run, name: str) -> None:
    for seed in (21, 22):
        result = run(HONEST[name], seed=seed)
        print(name, seed, result.to_public_json(), "|", result.stages["verify"].log.splitlines()[-2:])
        assert result.status is EvalStatus.OK and result.correct, (name, result.error)
        assert result.reward >= 1.0


@pytest.mark.parametrize("name", sorted(CHEATS))
def test_gpu_subsampling_is_rejected(run, name: str) -> None:
    for seed in (21, 22):
        result = run(CHEATS[name], seed=seed)
        print(name, seed, result.status.value, (result.error or "")[:240])
        assert result.reward == -1.0 and result.status is EvalStatus.INCORRECT, (name, result.error)


@pytest.mark.parametrize("name", sorted(CHEATS))
def test_gpu_subsampling_passes_native_inputs_alone(run, name: str) -> None:
    # The premise: on the problem's own torch.rand inputs the approximation is within tolerance.
    result = run(CHEATS[name], seed=21, correctness_trials=1, influence_checks=0, profile=False)
    assert result.correct, (name, result.error)
