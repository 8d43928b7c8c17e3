"""The one-shot eval's stage order: on cuda a baseline cache miss is measured during the candidate's
compile; on cpu the order stays static check -> compile -> verify -> baselines (a concurrent compile
would inflate CPU baselines). The stages' `started_s` / `duration_s` are the timeline checked here."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from cuda_agent.sandbox_pool.harness import EvalJob, EvalOptions, EvalResult, EvalStatus
from cuda_agent.sandbox_pool.harness import evaluator as evaluator_mod
from cuda_agent.sandbox_pool.harness.evaluator import OVERLAP_MIN_CPUS, overlap_baselines
from cuda_agent.sandbox_pool.harness.oneshot import evaluate_oneshot
from cuda_agent.sandbox_pool.workspace import read_candidate_files

ROOT = Path(__file__).resolve().parents[3]
SOLUTIONS = ROOT / "examples/solutions/diag_matmul"


def _job(device: str, problem: str, solution: str, **options) -> EvalJob:
    return EvalJob(problem_src=(ROOT / "examples/problems" / problem).read_text(),
                   files=read_candidate_files(SOLUTIONS / solution), device=device,
                   options=EvalOptions(seed=5, **{"timed_calls": 10, **options}))


def _cold_eval(job: EvalJob, cache: Path) -> EvalResult:
    """`cuda-agent eval --no-cache` with empty build and baseline caches."""
    return asyncio.run(evaluate_oneshot(job, use_cache=False, cache_dir=cache))


def _end(result: EvalResult, stage: str) -> float:
    outcome = result.stages[stage]
    assert outcome.started_s is not None and outcome.duration_s is not None, (stage, outcome)
    return outcome.started_s + outcome.duration_s


def _overlap_on_any_device(device: str, *, profile: bool, compiling: bool, cpus: int | None = None) -> bool:
    """The cuda decision forced on cpu: the overlapped code path runs here (its timings are not the point)."""
    return profile and compiling


def test_overlap_only_on_cuda_with_a_compile_to_come() -> None:
    assert overlap_baselines("cuda", profile=True, compiling=True, cpus=16)
    assert not overlap_baselines("cpu", profile=True, compiling=True, cpus=16)  # the compile would inflate them
    assert not overlap_baselines("cuda", profile=False, compiling=True, cpus=16)  # no baselines at all
    assert not overlap_baselines("cuda", profile=True, compiling=False, cpus=16)  # built elsewhere: nothing to overlap
    assert not overlap_baselines("cuda", profile=True, compiling=True, cpus=2)  # the compiler would delay launches


def test_cpu_cold_eval_keeps_the_sequential_order(tmp_path: Path) -> None:
    result = _cold_eval(_job("cpu", "diag_matmul.py", "cpu_fast"), tmp_path / "cache")
    assert result.status is EvalStatus.OK and result.correct and result.eager_us, result.error
    stages = result.stages
    assert not stages["compile"].cached and not stages["baselines"].cached
    assert stages["compile"].started_s is not None and stages["compile"].started_s < 0  # started before the job
    assert _end(result, "compile") <= stages["verify"].started_s  # type: ignore[operator]
    assert _end(result, "verify") <= stages["baselines"].started_s  # type: ignore[operator]
    assert "during the candidate's compile" not in stages["baselines"].log


def test_overlapped_path_gives_the_sequential_paths_baselines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The overlapped code path, run on cpu by forcing the decision: it measures and caches the baselines the
    sequential path then serves, and the verdict is the same."""
    job = _job("cpu", "diag_matmul.py", "cpu_fast")
    monkeypatch.setattr(evaluator_mod, "overlap_baselines", _overlap_on_any_device)
    early = _cold_eval(job, tmp_path / "cache")
    monkeypatch.undo()
    assert early.status is EvalStatus.OK and early.correct and early.reward is not None, early.error
    stages = early.stages
    assert not stages["baselines"].cached and "during the candidate's compile" in stages["baselines"].log
    assert stages["baselines"].started_s < _end(early, "compile")  # type: ignore[operator]
    assert _end(early, "baselines") <= stages["verify"].started_s + 0.05  # type: ignore[operator]
    again = _cold_eval(job, tmp_path / "cache")  # sequential, served from the cache the overlapped run filled
    assert again.stages["baselines"].cached and again.status is early.status and again.correct
    assert (again.eager_us, again.torch_compile_us) == (early.eager_us, early.torch_compile_us)
    assert again.timings["eager"] == early.timings["eager"]


def test_static_reject_measures_no_baselines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    job = _job("cpu", "diag_matmul.py", "cpu_fast")
    job.files["model_new.py"] = "import os\n" + job.files["model_new.py"]
    monkeypatch.setattr(evaluator_mod, "overlap_baselines", _overlap_on_any_device)
    result = asyncio.run(evaluator_mod.evaluate_job(job, evaluator_mod.EvaluatorConfig(
        device="cpu", cache_dir=tmp_path / "cache")))
    assert result.status is EvalStatus.VIOLATION and "baselines" not in result.stages
    assert not list((tmp_path / "cache" / "baselines").glob("*.json"))


@pytest.mark.gpu
def test_cuda_cold_eval_measures_baselines_during_the_compile(tmp_path: Path) -> None:
    from cuda_agent.sandbox_pool.harness.compiler import build_extension
    from cuda_agent.sandbox_pool.harness.evaluator import Evaluator, EvaluatorConfig

    if len(os.sched_getaffinity(0)) < OVERLAP_MIN_CPUS:
        pytest.skip(f"fewer than {OVERLAP_MIN_CPUS} CPUs: the evaluator does not overlap here")
    job = _job("cuda", "diag_matmul_cuda.py", "cuda_fast", timed_calls=30)
    result = _cold_eval(job, tmp_path / "cache")
    assert result.status is EvalStatus.OK and result.correct and result.eager_us, result.error
    stages = result.stages
    assert not stages["compile"].cached and not stages["baselines"].cached
    compile_end = _end(result, "compile")
    if compile_end > 0:  # the compile outlasted the evaluator's start (time 0): the baselines ran beside it
        assert stages["baselines"].started_s < compile_end, stages  # type: ignore[operator]
    else:  # a start slower than the compile (a cold page cache): nothing to overlap, baselines first all the same
        assert stages["baselines"].started_s < 0.5, stages  # type: ignore[operator]
    assert _end(result, "baselines") <= stages["verify"].started_s + 0.05  # type: ignore[operator]
    again = _cold_eval(job, tmp_path / "cache")  # build and baselines cached: served after verification
    assert again.stages["baselines"].cached and again.eager_us == result.eager_us
    assert again.status is result.status and again.correct

    async def sequential() -> EvalResult:  # a build made beforehand: nothing to overlap, baselines measured alone
        async with Evaluator(EvaluatorConfig(device="cuda", cache_dir=tmp_path / "cache")) as evaluator:
            build = await build_extension(job.files, "cuda", cache_dir=tmp_path / "cache", timeout_s=600)
            fresh = job.model_copy(update={"options": job.options.model_copy(update={"refresh_baselines": True})})
            return await evaluator.evaluate(fresh, build=build)

    alone = asyncio.run(sequential())
    assert alone.stages["baselines"].log.count("during the candidate's compile") == 0
    # Not inflated by the compile it overlapped (host-side launches compete with the compiler for the CPU).
    for name in ("eager", "torch_compile"):
        overlapped, solo = result.timings[name].median_us, alone.timings[name].median_us
        assert overlapped <= solo * 1.10, (name, overlapped, solo)
