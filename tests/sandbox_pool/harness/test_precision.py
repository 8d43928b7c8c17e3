"""Lower internal precision under the `paper` policy (issue 36): each input draw keeps the native draw's ratio of
tolerance to output magnitude (compare.draw_atol), so an honest TF32 or fp16-input GEMM passes every draw it
passes natively, and approximations still fail."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from cuda_agent.sandbox_pool.harness import EvalStatus
from cuda_agent.sandbox_pool.harness.compare import (
    MAGNITUDE_FRACTION,
    compare_outputs,
    draw_atol,
    effective_atol,
    native_scales,
)
from cuda_agent.sandbox_pool.harness.inputs import correctness_plan, draw

CANDIDATES = Path(__file__).parent / "candidates"
PROBLEM = (CANDIDATES / "problem_linear_gelu.py").read_text()
KERNELS = (CANDIDATES / "lowp_gemm_kernels.cpp").read_text()


def test_the_tolerance_follows_the_outputs_magnitude_both_ways() -> None:
    native = torch.randn(4096, dtype=torch.float64)
    (scale,) = native_scales([native], 1e-2)
    assert scale is not None and scale.atol == pytest.approx(1e-2)
    for factor in (10.0, 0.1, 1e-3):
        assert draw_atol(native * factor, 1e-2, scale) == pytest.approx(1e-2 * factor)
    assert draw_atol(native * 10, 1e-2) == pytest.approx(1e-2)  # without a native scale: the fixed rule


def test_the_tolerance_never_lets_a_constant_match() -> None:
    """Defence constant_output (docs/defences.md) stays: whatever the native ratio, a draw's atol is at most 5% of that draw's own RMS."""
    native = torch.full((4096,), 1.0)
    (scale,) = native_scales([native], 1e-2)
    spiky = torch.zeros(4096)
    spiky[:4] = 1e4  # mean magnitude 10, RMS 313
    assert draw_atol(spiky, 1e-2, scale) <= MAGNITUDE_FRACTION * float(spiky.pow(2).mean().sqrt())
    small = torch.full((4096,), 1e-5)
    assert draw_atol(small, 1e-2, scale) <= MAGNITUDE_FRACTION * 1e-5
    assert compare_outputs([torch.zeros(4096)], [small], 1e-2, 1e-2, native_scales([native], 1e-2)) is not None


def test_non_tensor_and_zero_outputs_keep_the_fixed_rule() -> None:
    assert native_scales([2.5, torch.zeros(8), torch.arange(8)], 1e-2) == [None, None, None]
    (scale,) = native_scales([torch.ones(8)], 1e-2)
    assert draw_atol(torch.zeros(8), 1e-2, scale) == effective_atol(torch.zeros(8), 1e-2)


def _tensor_core_gemm(x: torch.Tensor, linear: torch.nn.Linear, precision: str) -> torch.Tensor:
    """What a tensor-core GEMM computes: inputs rounded, products accumulated in float32."""
    if precision == "tf32":  # 10 mantissa bits, to nearest even
        def rounded(t: torch.Tensor) -> torch.Tensor:
            bits = t.contiguous().view(torch.int32)
            return ((bits + 0x0FFF + ((bits >> 13) & 1)) & ~0x1FFF).view(torch.float32)
    else:
        def rounded(t: torch.Tensor) -> torch.Tensor:
            return t.half().float()
    return torch.nn.functional.gelu(rounded(x) @ rounded(linear.weight).T + linear.bias)


@pytest.mark.parametrize("precision", ["tf32", "fp16"])
def test_tensor_core_gemms_pass_every_draw_that_scales_the_tolerance(precision: str) -> None:
    """The row_col draw scales a 512x512 linear's outputs ~5x: under one fixed atol the honest GEMM's rounding
    failed there (the H100 measurement of issue 36: 0.025 against 1e-2); with the native ratio kept it passes
    every draw, and the fixed rule is shown to fail so the test stays meaningful."""
    torch.manual_seed(0)
    linear = torch.nn.Linear(512, 512).requires_grad_(False)
    plan = correctness_plan(7)
    refs, outs = [], []
    for k, distribution in enumerate(plan):
        x = draw(lambda: [torch.randn(512, 512)], 100 + 1000 * k, distribution)[0]
        refs.append([torch.nn.functional.gelu(x.double() @ linear.weight.double().T + linear.bias.double()).float()])
        outs.append([_tensor_core_gemm(x, linear, precision)])
    scales = native_scales(refs[0], 1e-2)
    verdicts = {d: compare_outputs(o, r, 1e-2, 1e-2, scales) for d, o, r in zip(plan, outs, refs)}
    assert all(v is None for v in verdicts.values()), verdicts
    fixed = {d: compare_outputs(o, r, 1e-2, 1e-2) for d, o, r in zip(plan, outs, refs)}
    assert fixed["row_col"] is not None, "the fixed atol no longer rejects the row_col draw: the test lost its point"


@pytest.fixture(scope="module")
def evaluate(evaluate_cpu):
    def run(variant: str, **options):
        model_new = (
            "import torch.nn as nn\nimport cuda_extension\n\n\n"
            "class ModelNew(nn.Module):\n"
            "    def __init__(self, features):\n"
            "        super().__init__()\n"
            "        self.linear = nn.Linear(features, features)\n\n"
            "    def forward(self, x):\n"
            f"        return cuda_extension.lowp_{variant}(x, self.linear.weight, self.linear.bias)\n"
        )
        return evaluate_cpu(model_new, KERNELS, problem=PROBLEM, **options)

    return run


@pytest.mark.parametrize("variant", ["tf32", "fp16"])
def test_lower_precision_gemms_are_correct_under_paper(evaluate, variant: str) -> None:
    for seed in (3, 4):
        result = evaluate(variant, seed=seed, profile=True)
        assert result.status is EvalStatus.OK and result.correct, (variant, seed, result.status, result.error)
        assert result.stages["profile"].ok, result.stages["profile"].log  # the timed calls' checks pass too


def test_lower_precision_is_still_refused_under_strict(evaluate) -> None:
    result = evaluate("tf32", seed=3, precision_policy="strict")
    assert result.status is EvalStatus.INCORRECT, (result.status, result.error)


def test_a_subsampled_gemm_still_fails(evaluate) -> None:
    result = evaluate("half_k", seed=3)
    assert result.status is EvalStatus.INCORRECT, (result.status, result.error)
