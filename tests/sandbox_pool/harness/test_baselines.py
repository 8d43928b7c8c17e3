"""Honest baselines: CI-driven repeats, a cache key that names everything the time depends on,
one default number of timed calls, and rewards that noise cannot buy."""

from __future__ import annotations

import random
import shutil
import tempfile
from pathlib import Path

import pytest

from cuda_agent.reward_fns.options import RewardOptions
from cuda_agent.reward_fns.scoring import reward_info
from cuda_agent.sandbox_pool.harness import EvalOptions, EvalResult, EvalStatus
from cuda_agent.sandbox_pool.harness import baselines as baseline_mod
from cuda_agent.sandbox_pool.harness.models import DEFAULT_TIMED_CALLS
from cuda_agent.sandbox_pool.harness.problem import load_problem
from cuda_agent.sandbox_pool.harness.stats import median_ci, relative_half_width, timing_stats
from cuda_agent.sandbox_pool.harness.verdict import finish

CANDIDATES = Path(__file__).parent / "candidates"
PROBLEM = (CANDIDATES / "problem_scale_bias.py").read_text()
KERNELS = (CANDIDATES / "kernels.cpp").read_text()
HONEST = ("import torch\nimport torch.nn as nn\nimport cuda_extension\n\n\nclass ModelNew(nn.Module):\n"
          "    def __init__(self, dim):\n        super().__init__()\n        self.scale = nn.Parameter(torch.ones(dim))\n"
          "        self.bias = nn.Parameter(torch.zeros(dim))\n\n    def forward(self, x):\n"
          "        return cuda_extension.scale_bias(x, self.scale, self.bias)\n")


def test_median_ci_covers_the_median_and_narrows_with_more_samples() -> None:
    rng = random.Random(0)
    few = [100 + rng.gauss(0, 5) for _ in range(30)]
    many = few + [100 + rng.gauss(0, 5) for _ in range(270)]
    for samples in (few, many):
        lo, hi = median_ci(samples)
        assert lo <= sorted(samples)[len(samples) // 2] <= hi
    assert relative_half_width(many) < relative_half_width(few)
    assert median_ci([1.0, 2.0, 3.0]) == (1.0, 3.0)


def _result(candidate: list[float], eager: list[float], compiled: list[float]) -> EvalResult:
    result = EvalResult(status=EvalStatus.OK, correct=True)
    for name, samples in (("candidate", candidate), ("eager", eager), ("torch_compile", compiled)):
        result.timings[name] = timing_stats(samples)
    result.runtime_us = result.timings["candidate"].median_us
    result.eager_us = result.timings["eager"].median_us
    result.torch_compile_us = result.timings["torch_compile"].median_us
    return result


def _noisy(fast_us: float, slow_us: float, n: int, seed: int) -> list[float]:
    """A CPU baseline under load: a fast mode and a slow one, mixed (the issue's 3.5-56 ms)."""
    rng = random.Random(seed)
    return [fast_us * rng.uniform(1.0, 1.1) if rng.random() < 0.45 else slow_us * rng.uniform(0.8, 1.2)
            for _ in range(n)]


def test_a_noisy_baseline_does_not_make_a_slow_kernel_a_3() -> None:
    slow_kernel = [10_000 * random.Random(1).uniform(0.98, 1.02) for _ in range(30)]  # 10 ms, tight
    eager = _noisy(3_500, 56_000, 30, seed=2)      # median ~ 50 ms: the point estimate says 5x faster
    compiled = _noisy(3_400, 50_000, 30, seed=3)
    result = _result(slow_kernel, eager, compiled)
    assert result.eager_us / result.runtime_us > 1.5 and result.torch_compile_us / result.runtime_us > 1.5
    finish(result, margin=0.05, sanity_bound=1000)
    assert result.reward == 1.0, (result.reward, result.timings["eager"].ci_low_us)
    assert any("confidence intervals" in w for w in result.warnings), result.warnings
    info = reward_info(result, RewardOptions())
    assert info.kernel_reward == 1.0 and info.faster_than_eager is False


def test_with_the_window_check_a_reward_lowered_by_noise_is_no_reward() -> None:
    """Issue 46: with the window check on, a reward the CIs lower below the medians' is infra_error, never a
    lower reward (seen in the suite beside a load generator: 653 us against 3354 us eager scored 1, not 3)."""
    slow_kernel = [10_000 * random.Random(1).uniform(0.98, 1.02) for _ in range(30)]
    result = _result(slow_kernel, _noisy(3_500, 56_000, 30, seed=2), _noisy(3_400, 50_000, 30, seed=3))
    finish(result, margin=0.05, sanity_bound=1000, noisy_is_infra=True)
    assert result.status.value == "infra_error" and result.reward is None
    assert result.error.startswith("machine loaded: the timings are too noisy to decide the reward (1 at the ends")


def test_a_kernel_that_is_faster_at_the_ci_bounds_keeps_its_3() -> None:
    rng = random.Random(4)
    result = _result([1_000 * rng.uniform(0.97, 1.03) for _ in range(30)],
                     [3_000 * rng.uniform(0.97, 1.03) for _ in range(30)],
                     [2_000 * rng.uniform(0.97, 1.03) for _ in range(30)])
    finish(result, margin=0.05, sanity_bound=1000)
    assert result.reward == 3.0 and not result.warnings
    assert reward_info(result, RewardOptions()).kernel_reward == 3.0


def test_the_cache_key_names_device_stack_problem_and_timing_settings() -> None:
    problem = load_problem(PROBLEM)
    other = load_problem(PROBLEM + "\n# another problem\n")
    key = baseline_mod.baseline_key(problem, "cpu A", "2.13.0", False, 30)
    assert key == baseline_mod.baseline_key(problem, "cpu A", "2.13.0", False, 30)
    variants = [
        baseline_mod.baseline_key(other, "cpu A", "2.13.0", False, 30),
        baseline_mod.baseline_key(problem, "cpu B", "2.13.0", False, 30),
        baseline_mod.baseline_key(problem, "cpu A", "2.12.0", False, 30),
        baseline_mod.baseline_key(problem, "cpu A", "2.13.0", True, 30),
        baseline_mod.baseline_key(problem, "cpu A", "2.13.0", False, 20),
        baseline_mod.baseline_key(problem, "cpu A", "2.13.0", False, 30, warmup=10),
        baseline_mod.baseline_key(problem, "cpu A", "2.13.0", False, 30, device="cuda"),  # CUDA + driver versions
    ]
    assert len({key, *variants}) == len(variants) + 1
    assert "torch=" in baseline_mod.software_stack("cpu") and "driver=" in baseline_mod.software_stack("cuda")


def test_one_default_number_of_timed_calls() -> None:
    import inspect

    from cuda_agent.cli import workspace_cmds
    from cuda_agent.reward_fns.scoring import build_job
    from cuda_agent.reward_fns.options import TaskSpec

    assert EvalOptions().timed_calls == DEFAULT_TIMED_CALLS
    for command in (workspace_cmds.eval_cmd, workspace_cmds.quickstart):
        assert inspect.signature(command).parameters["timed_calls"].default.default == DEFAULT_TIMED_CALLS
    task = TaskSpec(problem_src=PROBLEM, device="cpu")
    assert build_job({"model_new.py": ""}, task, RewardOptions()).options.timed_calls == DEFAULT_TIMED_CALLS


def test_baselines_repeat_in_blocks_until_the_ci_is_tight(cpu_evaluator) -> None:
    problem = load_problem(PROBLEM)
    work = tempfile.mkdtemp(prefix="cuda_agent_test_baseline_")
    try:
        stats = cpu_evaluator.call(baseline_mod._time_reference(
            cpu_evaluator.evaluator.zygote, problem, work, "cpu", 0, False, 10, 2, False, 120.0))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    assert not isinstance(stats, str), stats
    n = len(stats.samples_us)
    assert n % 10 == 0 and 10 <= n <= 10 * baseline_mod.MAX_ROUNDS
    converged = relative_half_width(stats.samples_us) <= baseline_mod.CI_TARGET
    assert converged or n == 10 * baseline_mod.MAX_ROUNDS or baseline_mod.ci_warning("eager", stats)
    assert stats.ci_low_us <= stats.median_us <= stats.ci_high_us
    print(f"eager baseline: {n} calls, median {stats.median_us:.0f} us, CI +-{relative_half_width(stats.samples_us):.1%}")


@pytest.mark.slow
def test_refresh_baselines_measures_again(evaluate_cpu) -> None:
    first = evaluate_cpu(HONEST, KERNELS, profile=True)
    again = evaluate_cpu(HONEST, KERNELS, profile=True)
    fresh = evaluate_cpu(HONEST, KERNELS, profile=True, refresh_baselines=True)
    assert first.correct and again.stages["baselines"].cached is True
    assert fresh.stages["baselines"].cached is False and fresh.eager_us is not None


LINEAR_PROBLEM = ("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
                  "    def __init__(self, n):\n        super().__init__()\n"
                  "        if torch.empty(1).device.type == 'meta':\n            raise RuntimeError('no meta init here')\n"
                  "        self.fc = nn.Linear(n, n)\n\n    def forward(self, x):\n        return self.fc(x)\n\n\n"
                  "def get_inputs():\n    return [torch.rand(4, 8)]\n\n\ndef get_init_inputs():\n    return [8]\n")


def _built_by_a_baseline_child(tmp_path: Path, device: str, seed: int = baseline_mod.BASELINE_SEED):
    from multiprocessing import Pipe

    from cuda_agent.sandbox_pool.harness.child.main import Child
    from cuda_agent.sandbox_pool.harness.protocol import ChildSpec

    spec = ChildSpec(role="reference", device="cpu", work_dir=str(tmp_path), problem_src=LINEAR_PROBLEM,
                     build_on_device=True, init_seed=seed)
    ours, theirs = Pipe()
    child = Child(spec, theirs)
    child.device = device
    child.draw_trials()
    model = child.build()
    events = []
    while ours.poll(0):
        events.append(ours.recv_bytes())
    return model, events


def test_baseline_children_build_their_model_themselves(tmp_path: Path) -> None:
    """No init file: each baseline child builds the model under the baseline seed, so the eager and the
    compile child get the same weights; a model that cannot be built on the device is built on the CPU."""
    first, events = _built_by_a_baseline_child(tmp_path, "cpu")
    second, _ = _built_by_a_baseline_child(tmp_path, "cpu")
    other, _ = _built_by_a_baseline_child(tmp_path, "cpu", seed=7)
    assert not list(tmp_path.iterdir())  # nothing written, nothing read
    assert any(b'"loaded"' in event and b"built here" in event for event in events)
    weights = lambda model: list(model.state_dict().values())  # noqa: E731
    assert all(a.equal(b) for a, b in zip(weights(first), weights(second)))
    assert not weights(first)[0].equal(weights(other)[0])
    fell_back, _ = _built_by_a_baseline_child(tmp_path, "meta")  # its __init__ refuses the device: built on the CPU
    assert weights(fell_back)[0].device.type == "meta"
