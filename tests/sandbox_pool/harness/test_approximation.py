"""Approximate kernels (defences distribution_shortcut, subsampling, default_init_exploit: docs/defences.md).

The problem (candidates/problem_row_sums.py) sums wide rows of torch.rand values: on its own
inputs a kernel that reads half of each row, or returns the expectation, is within 1e-2 of the
reference (`test_the_cheats_pass_on_native_inputs_alone` shows it). The structured trials and the
influence twins must reject them, and must not reject honest kernels that only sum in another
order (sequential, tree, 32 lanes + shuffle-down, block partials in a different order per call as
atomics give, Kahan).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cuda_agent.sandbox_pool.harness import EvalStatus

CANDIDATES = Path(__file__).parent / "candidates"
PROBLEM = (CANDIDATES / "problem_row_sums.py").read_text()
KERNELS = (CANDIDATES / "approx_kernels.cpp").read_text()

HONEST = ("seq", "tree", "lanes", "atomics", "kahan")
CHEATS = ("strided", "first_half", "expectation", "default_init", "detect")


def model_new(variant: str) -> str:
    return (
        "import torch\nimport torch.nn as nn\nimport cuda_extension\n\n\n"
        "class ModelNew(nn.Module):\n"
        "    def __init__(self, cols):\n"
        "        super().__init__()\n"
        "        self.gain = nn.Parameter(torch.ones(cols))\n"
        "        self.bias = nn.Parameter(torch.zeros(1))\n\n"
        "    def forward(self, x):\n"
        f"        return cuda_extension.wsum_{variant}(x, self.gain, self.bias)\n"
    )


@pytest.fixture(scope="module")
def evaluate(evaluate_cpu):
    def run(variant: str, **options):
        return evaluate_cpu(model_new(variant), KERNELS, problem=PROBLEM, **options)

    return run


@pytest.mark.parametrize("variant", HONEST)
def test_honest_summation_orders_pass(evaluate, variant: str) -> None:
    result = evaluate(variant, seed=3)
    assert result.correct and result.status is EvalStatus.OK, (variant, result.status, result.error)
    log = result.stages["verify"].log
    assert "influence residuals" in log, log
    print(variant, next(line for line in log.splitlines() if "influence residuals" in line))


@pytest.mark.parametrize("variant", CHEATS)
def test_approximations_are_rejected(evaluate, variant: str) -> None:
    for seed in (3, 4):
        result = evaluate(variant, seed=seed)
        assert result.reward == -1.0 and result.status is EvalStatus.INCORRECT, (variant, seed, result.error)
        assert "trial" in (result.error or ""), result.error
        print(variant, seed, result.error[:200])


@pytest.mark.parametrize("variant", ["strided", "first_half", "expectation", "detect"])
def test_the_cheats_pass_on_native_inputs_alone(evaluate, variant: str) -> None:
    # The premise of the tests above: without the structured trials and the influence twins,
    # these approximations are within tolerance of the reference on the problem's own inputs.
    result = evaluate(variant, seed=3, correctness_trials=1, influence_checks=0)
    assert result.correct, (variant, result.error)


def test_only_the_influence_twin_catches_an_input_detecting_subsampler(evaluate) -> None:
    # It reads every element when the input does not look like torch.rand: the structured
    # trials pass; the twin of the native draw looks native, so the influence check decides.
    without = evaluate("detect", seed=3, influence_checks=0)
    assert without.correct, without.error
    caught = evaluate("detect", seed=3)
    assert caught.status is EvalStatus.INCORRECT and "influence" in (caught.error or ""), caught.error


def test_an_approximation_that_waits_for_verification_to_end_meets_the_twins_while_timed(evaluate_cpu) -> None:
    """Red team, 2026-12-04: honest on the trials (their number is known), subsampling from then on. The
    elementwise checks of the timed calls pass it (it reads every element of a structured draw); the influence
    twins among the timed calls do not. Without them (the premise) it is rewarded."""
    source = model_new("detect").replace(
        "        return cuda_extension.wsum_detect(x, self.gain, self.bias)\n",
        "        self.calls += 1\n"
        "        if self.calls <= 8:  # the seven trials and the twin\n"
        "            return cuda_extension.wsum_seq(x, self.gain, self.bias)\n"
        "        return cuda_extension.wsum_detect(x, self.gain, self.bias)\n",
    ).replace("        self.bias = nn.Parameter(torch.zeros(1))\n", "        self.bias = nn.Parameter(torch.zeros(1))\n"
              "        self.calls = 0\n")
    options = {"profile": True, "seed": 3, "timed_calls": 30, "checked_timed_calls": 2}
    without = evaluate_cpu(source, KERNELS, problem=PROBLEM, timed_influence_checks=0, **options)
    assert without.correct and without.status is EvalStatus.OK, (without.status, without.error)
    caught = evaluate_cpu(source, KERNELS, problem=PROBLEM, timed_influence_checks=8, **options)
    assert caught.status is EvalStatus.VIOLATION and caught.reward == -1.0, (caught.status, caught.error)
    assert "influence twin of timed call" in (caught.error or ""), caught.error


def test_honest_summation_orders_pass_the_timed_twins(evaluate_cpu) -> None:
    for variant in ("seq", "atomics"):
        result = evaluate_cpu(model_new(variant), KERNELS, problem=PROBLEM, profile=True, seed=5, timed_calls=30,
                              checked_timed_calls=2, timed_influence_checks=8)
        assert result.status is EvalStatus.OK, (variant, result.status, result.error)
        assert "influence twins of earlier calls" in result.stages["profile"].log


TOTAL_PROBLEM = (CANDIDATES / "problem_total_sum.py").read_text()
TOTAL_KERNELS = (CANDIDATES / "total_sum_kernels.cpp").read_text()


def total_model(variant: str) -> str:
    return ("import torch\nimport torch.nn as nn\nimport cuda_extension\n\n\n"
            "class ModelNew(nn.Module):\n"
            "    def forward(self, x):\n"
            f"        return cuda_extension.total_{variant}(x)\n")


def test_a_self_checking_subsampler_of_a_whole_sum_meets_few_spikes(evaluate_cpu) -> None:
    """Red team, 2026-12-04: a whole-tensor sum (exchanges cannot move it: the twins decide nothing) read one
    block in four, and read everything when its sampled blocks' robust spread said it was unsure: it passed
    every structured trial (dense spikes raise the spread) and was rewarded 3. A handful of spikes does not."""
    for seed in (3, 4, 5):
        honest = evaluate_cpu(total_model("exact"), TOTAL_KERNELS, problem=TOTAL_PROBLEM, seed=seed)
        assert honest.status is EvalStatus.OK, (seed, honest.status, honest.error)
        without = evaluate_cpu(total_model("adaptive"), TOTAL_KERNELS, problem=TOTAL_PROBLEM, seed=seed,
                               correctness_trials=6)
        assert without.status is EvalStatus.OK, (seed, without.status, without.error)  # the premise
        caught = evaluate_cpu(total_model("adaptive"), TOTAL_KERNELS, problem=TOTAL_PROBLEM, seed=seed)
        assert caught.status is EvalStatus.INCORRECT and "trial 6" in (caught.error or ""), (seed, caught.error)


PIXEL_KERNELS = (CANDIDATES / "pixel_kernels.cpp").read_text()


@pytest.mark.parametrize(("problem_file", "suffix"), [("problem_pixel_means.py", ""), ("problem_pixel_means_u8.py", "_u8")],
                         ids=["float", "uint8"])
def test_integer_valued_data_gets_structured_draws_of_its_own_levels(evaluate_cpu, problem_file: str,
                                                                     suffix: str) -> None:
    """Red team, 2026-12-04: integer-valued inputs were left as drawn by every trial, so the closed-form mean of
    8-bit pixels passed (reward 3). The structured draws now rearrange the draw's own levels: as floats since
    that night, as uint8 since the next (the constant passed there after the float case was closed)."""
    problem = (CANDIDATES / problem_file).read_text()
    source = total_model("x").replace("cuda_extension.total_x(x)", "cuda_extension.means_{}" + suffix + "(x)")
    honest = evaluate_cpu(source.format("exact"), PIXEL_KERNELS, problem=problem, seed=3)
    assert honest.status is EvalStatus.OK, (honest.status, honest.error)
    premise = evaluate_cpu(source.format("expected"), PIXEL_KERNELS, problem=problem, seed=3, correctness_trials=1,
                           influence_checks=0)
    assert premise.status is EvalStatus.OK, (premise.status, premise.error)
    caught = evaluate_cpu(source.format("expected"), PIXEL_KERNELS, problem=problem, seed=3)
    assert caught.status is EvalStatus.INCORRECT and caught.reward == -1.0, (caught.status, caught.error)
