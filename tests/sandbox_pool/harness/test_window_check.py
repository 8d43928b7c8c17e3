"""Rewards independent of load (sandbox_pool/harness/window_check.py): every evaluation that uses cached
baselines times the eager reference again right after the candidate; a loaded machine gives infra_error
naming the load, never a lower reward, and baselines cached under a load are timed again and replaced."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cuda_agent.sandbox_pool.harness import EvalJob, EvalOptions, EvalResult, EvalStatus
from cuda_agent.sandbox_pool.harness import baselines as baseline_mod
from cuda_agent.sandbox_pool.harness import window_check
from cuda_agent.sandbox_pool.harness.models import TimingStats
from cuda_agent.sandbox_pool.harness.stats import timing_stats

from test_baselines import HONEST, KERNELS, PROBLEM

REPO = Path(__file__).resolve().parents[3]
DIAG_MATMUL = (REPO / "examples" / "problems" / "diag_matmul.py").read_text()
"""The quickstart's task: its cpu_fast solution (an OpenMP loop) earns 3 on a quiet machine."""


def _cpu_fast() -> dict[str, str]:
    from cuda_agent.sandbox_pool.workspace import read_candidate_files

    return read_candidate_files(REPO / "examples" / "solutions" / "diag_matmul" / "cpu_fast")


def _stats(median: float, spread: float = 0.01) -> TimingStats:
    return timing_stats([median * (1 + spread * ((i % 5) - 2) / 2) for i in range(30)])


@pytest.mark.parametrize("now, agrees, slower, loaded, cached_loaded", [
    (100.0, True, False, False, False),  # the same
    (103.0, True, False, False, False),  # within the reward's 5% margin
    (130.0, False, True, False, False),  # a small VM's drift between states: slower, not loaded
    (320.0, False, True, True, False),  # a busy loop on every core
    (80.0, False, False, False, False),  # the drift the other way
    (30.0, False, False, False, True),  # much faster now: the baselines were cached under a load
])
def test_the_check_against_the_cached_eager_time(now, agrees, slower, loaded, cached_loaded):
    check = window_check.compare(_stats(now), _stats(100.0))
    assert (check.agrees, check.slower, check.loaded, check.cached_loaded) == (agrees, slower, loaded, cached_loaded)
    assert "in this window against" in check.describe()
    assert not check.undecided


def test_a_check_too_noisy_to_tell_a_load_from_none_is_undecided():
    """Its median under LOADED_FACTOR, its CI past it (measured under a busy loop per core: 5928 us, CI 2231-5976,
    against 1929 cached): neither the cached baselines nor a reward can be trusted in that window."""
    noisy = timing_stats([120.0, 125.0, 130.0, 135.0, 140.0, 300.0, 320.0, 330.0, 118.0, 128.0] * 2)
    check = window_check.compare(noisy, _stats(100.0))
    assert check.slower and not check.loaded and check.undecided
    settled = window_check.compare(_stats(130.0), _stats(100.0))  # the drift, with a tight CI: decided
    assert settled.slower and not settled.undecided


class LoadGenerator:
    """A busy process on every core of this machine (plain `python -c` loops: busy within milliseconds)."""

    def __enter__(self) -> "LoadGenerator":
        self.processes = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                          for _ in range(os.cpu_count() or 1)]
        time.sleep(1.0)
        return self

    def __exit__(self, *exc: object) -> None:
        for process in self.processes:
            process.kill()
            process.wait(10)


async def _evaluate(evaluator, files: dict[str, str], problem: str) -> EvalResult:
    return await evaluator.evaluate(EvalJob(problem_src=problem, files=files, device="cpu",
                                            options=EvalOptions(profile=True, timed_calls=20, seed=7)))


def _checked_evaluator(cache: Path):
    from cuda_agent.sandbox_pool.harness import Evaluator, EvaluatorConfig

    return Evaluator(EvaluatorConfig(device="cpu", cache_dir=cache, window_check=True))


@pytest.mark.parametrize("candidate, now, cached, same", [
    (80.0, 130.0, 100.0, True),  # beats eager against both: the cached baselines may decide
    (126.0, 130.0, 100.0, True),  # beats it against neither
    (110.0, 130.0, 100.0, False),  # timed under some load: beats the window's eager, not the cached one
    (90.0, 80.0, 100.0, False),  # baselines cached under some load: beats the cached eager, not the window's
])
def test_a_drift_that_would_change_the_reward_decides_nothing(candidate, now, cached, same):
    """Issue 46: under LOADED_FACTOR the cached baselines are kept, unless the candidate beats eager against one of
    the two eager times and not the other (seen in the suite: baselines cached 3x, a noisy check 2x, the candidate
    judged 1.35x faster than the stale eager it was slower than in its own window)."""
    assert window_check.same_eager_verdict(_stats(candidate), _stats(now), _stats(cached), margin=0.05) is same


@pytest.mark.slow
def test_a_fast_candidate_keeps_its_quiet_reward_or_is_told_the_machine_is_loaded(tmp_path):
    async def scenario():
        async with _checked_evaluator(tmp_path / "cache") as evaluator:
            quiet = await _evaluate(evaluator, _cpu_fast(), DIAG_MATMUL)
            with LoadGenerator():
                loaded = [await _evaluate(evaluator, _cpu_fast(), DIAG_MATMUL) for _ in range(2)]
            after = await _evaluate(evaluator, _cpu_fast(), DIAG_MATMUL)
        return quiet, loaded, after

    quiet, loaded, after = asyncio.run(scenario())
    assert quiet.status is EvalStatus.OK and quiet.reward is not None, quiet.error
    for result in loaded:
        print(f"quiet reward {quiet.reward}; loaded: {result.status.value} {result.reward} {result.error or ''}")
        if result.status is EvalStatus.INFRA_ERROR:
            assert result.error.startswith("machine loaded: "), result.error
            assert result.reward is None
        else:  # the load did not reach the check: the quiet reward, never another
            assert result.status is EvalStatus.OK and result.reward == quiet.reward, (result.reward, result.warnings)
    assert after.status is EvalStatus.OK and after.reward == quiet.reward  # the cache kept the quiet times
    assert "eager_window_check" in after.timings


@pytest.mark.slow
def test_baselines_cached_under_a_load_are_timed_again_and_replaced(tmp_path):
    from cuda_agent.sandbox_pool.harness.baselines import BaselineCache

    cache = BaselineCache(tmp_path / "cache")

    async def scenario():
        async with _checked_evaluator(tmp_path / "cache") as evaluator:
            first = await _evaluate(evaluator, {"model_new.py": HONEST, "kernels/k.cpp": KERNELS}, PROBLEM)
            (path,) = cache.root.glob("*.json")
            stored = baseline_mod.Baselines.model_validate_json(path.read_text())
            cache.put(stored.model_copy(update={  # as if its baselines had been timed under a 3x load
                "eager": timing_stats([t * 3 for t in stored.eager.samples_us]),
                "torch_compile": stored.torch_compile and timing_stats(
                    [t * 3 for t in stored.torch_compile.samples_us])}))
            again = await _evaluate(evaluator, {"model_new.py": HONEST, "kernels/k.cpp": KERNELS}, PROBLEM)
        return first, stored, path, again

    first, stored, path, again = asyncio.run(scenario())
    assert first.status is EvalStatus.OK
    if again.status is EvalStatus.INFRA_ERROR:  # the load changed between the check and the new baselines
        pytest.skip(f"the machine's load changed under the evaluation: {again.error}")
    assert again.status is EvalStatus.OK and again.stages["baselines"].cached is False
    assert any("cached under a load" in warning for warning in again.warnings), again.warnings
    assert again.eager_us < 2 * stored.eager.median_us  # judged against fresh baselines, not the stale 3x ones
    replaced = baseline_mod.Baselines.model_validate_json(path.read_text())
    assert replaced.eager.median_us < 2 * stored.eager.median_us  # and the cache entry replaced


def test_the_check_is_off_unless_asked_for():
    """Pools run concurrent evaluations on shared cores: that is load, not yet kept out of the window."""
    from cuda_agent.sandbox_pool.harness import EvaluatorConfig

    assert EvaluatorConfig().window_check is False


@pytest.mark.slow
def test_the_checks_child_starts_beside_the_verification_and_is_no_neighbour(tmp_path):
    """The check's child is started when verification starts (its setup overlaps it instead of following the
    candidate's timing) under a companion lease: the evaluation is not 'shared with other evaluations'. A wrong
    candidate, which needs no check, leaves no child behind."""
    async def scenario():
        async with _checked_evaluator(tmp_path / "cache") as evaluator:
            first = await _evaluate(evaluator, _cpu_fast(), DIAG_MATMUL)  # measures the baselines: no check
            second = await _evaluate(evaluator, _cpu_fast(), DIAG_MATMUL)
            wrong = await _evaluate(evaluator, {**_cpu_fast(), "model_new.py": _cpu_fast()["model_new.py"].replace(
                "return cuda_extension", "return 2 * cuda_extension")}, DIAG_MATMUL)
            live = set(evaluator.gate._live)
        return first, second, wrong, live

    first, second, wrong, live = asyncio.run(scenario())
    assert "eager_window_check" not in first.timings
    if second.status is EvalStatus.INFRA_ERROR:
        pytest.skip(f"the machine was loaded: {second.error}")
    assert second.status is EvalStatus.OK and "eager_window_check" in second.timings
    assert "its child started beside the verification" in second.stages["baselines"].log
    assert "no other evaluation" in second.stages["verify"].log, second.stages["verify"].log
    assert wrong.status is not EvalStatus.OK and "eager_window_check" not in wrong.timings
    assert not live, "a lease of the check left on the gate"


def test_an_evaluations_two_children_do_not_make_each_other_neighbours():
    from cuda_agent.sandbox_pool.harness.gate import DeviceGate

    gate = DeviceGate()
    own, check, other = gate.lease(), gate.lease(), gate.lease()
    check.companion = own
    gate._enter(own)
    gate._enter(check)
    assert not own.overlapped and not check.overlapped
    gate._enter(other)
    assert own.overlapped and check.overlapped and other.overlapped
