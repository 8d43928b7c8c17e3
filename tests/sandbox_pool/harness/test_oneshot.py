"""The one-shot path of `cuda-agent eval`: static check before anything starts, result cache."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cuda_agent.sandbox_pool.harness import EvalJob, EvalOptions, EvalResult, EvalStatus
from cuda_agent.sandbox_pool.harness.oneshot import _settings, evaluate_oneshot, static_verdict
from cuda_agent.sandbox_pool.harness.result_cache import CACHEABLE, ResultCache, result_key
from cuda_agent.sandbox_pool.workspace import create_workspace

ROOT = Path(__file__).resolve().parents[3]
PROBLEM = (ROOT / "examples/problems/diag_matmul.py").read_text()
SOLUTION = ROOT / "examples/solutions/diag_matmul/cpu_fast"
FILES = {"model_new.py": (SOLUTION / "model_new.py").read_text(),
         "kernels/diag_matmul.cpp": (SOLUTION / "kernels/diag_matmul.cpp").read_text()}


def _job(files: dict[str, str] = FILES, problem: str = PROBLEM, **options) -> EvalJob:
    return EvalJob(problem_src=problem, files=files, device="cpu",
                   options=EvalOptions(profile=False, **{"seed": 7, **options}))


def test_cli_static_reject_starts_no_worker_and_no_torch(tmp_path: Path) -> None:
    ws = create_workspace(PROBLEM, tmp_path / "ws", "cpu")
    (ws / "model_new.py").write_text("import os\n" + FILES["model_new.py"])
    (ws / "kernels" / "diag_matmul.cpp").write_text(FILES["kernels/diag_matmul.cpp"])
    probe = (
        "import sys\nfrom cuda_agent.cli.main import app\n"
        f"try:\n    app(['eval', {str(ws)!r}, '--json'])\nexcept SystemExit as exc:\n    code = exc.code\n"
        "loaded = [m for m in ('torch', 'cuda_agent.sandbox_pool.harness.evaluator', "
        "'cuda_agent.sandbox_pool.harness.runner') if m in sys.modules]\n"
        "print('LOADED', loaded, 'EXIT', code, file=sys.stderr)\n")
    env = {k: v for k, v in os.environ.items() if k != "CUDA_AGENT_POOL"}
    env["CUDA_AGENT_CACHE"] = str(tmp_path / "cache")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, env=env)
    assert "LOADED [] EXIT 0" in out.stderr, out.stderr
    result = json.loads(out.stdout)
    assert result["status"] == "violation" and result["reward"] == -1.0
    assert "import of `os`" in result["error"]
    assert not (tmp_path / "cache").exists()  # nothing built, nothing cached


def test_static_verdict_matches_the_evaluators_statuses() -> None:
    assert static_verdict(_job()) is None
    missing = static_verdict(_job({"kernels/diag_matmul.cpp": FILES["kernels/diag_matmul.cpp"]}))
    assert missing is not None and missing.status is EvalStatus.STATIC_CHECK_FAILED and missing.correct is None
    bad = static_verdict(_job({**FILES, "kernels/x.cpp": '#include "/proc/self/environ"\n'}))
    assert bad is not None and bad.status is EvalStatus.VIOLATION and bad.stages["static_check"].ok is False


def test_key_defaults_are_the_evaluators() -> None:
    from cuda_agent.sandbox_pool.harness.evaluator import EvaluatorConfig

    assert _settings(None, True, 16384) == _settings(EvaluatorConfig(), False, 0)


def test_a_result_with_the_window_check_has_a_key_of_its_own(tmp_path: Path) -> None:
    """`cuda-agent eval --window-check` never answers from a result timed without the check (issue 46)."""
    from cuda_agent.sandbox_pool.harness.evaluator import EvaluatorConfig

    plain = result_key(_job(), tmp_path, _settings(None, True, 16384))
    checked = result_key(_job(), tmp_path, _settings(EvaluatorConfig(window_check=True), False, 0))
    assert checked != plain


def test_every_change_of_candidate_problem_settings_or_baselines_changes_the_key(tmp_path: Path) -> None:
    settings = _settings(None, True, 16384)
    key = result_key(_job(), tmp_path, settings)
    assert key == result_key(_job(), tmp_path, settings)
    changed = [
        result_key(_job({**FILES, "model_new.py": FILES["model_new.py"] + "\n# edited\n"}), tmp_path, settings),
        result_key(_job({**FILES, "kernels/extra.h": "// new header\n"}), tmp_path, settings),
        result_key(_job(problem=PROBLEM + "\n"), tmp_path, settings),
        result_key(_job(seed=8), tmp_path, settings),
        result_key(_job(atol=1e-3), tmp_path, settings),
        result_key(_job(timed_calls=31), tmp_path, settings),
        result_key(_job(), tmp_path, {**settings, "isolate": False}),
        result_key(EvalJob(problem_src=PROBLEM, files=FILES, device="cuda",
                           options=_job().options), tmp_path, settings),
    ]
    (tmp_path / "baselines").mkdir()
    (tmp_path / "baselines" / "b.json").write_text("{}")
    changed.append(result_key(_job(), tmp_path, settings))
    assert len({key, *changed}) == len(changed) + 1


@pytest.mark.parametrize("status", sorted(set(EvalStatus) - CACHEABLE, key=lambda s: s.value))
def test_transient_verdicts_are_never_cached(tmp_path: Path, status: EvalStatus) -> None:
    cache = ResultCache(tmp_path)
    assert cache.put("k", EvalResult(status=status)) is False
    assert cache.get("k") is None


async def test_unchanged_candidate_is_served_from_the_cache_and_a_change_reevaluates(tmp_path: Path) -> None:
    first = await evaluate_oneshot(_job(seed=None), cache_dir=tmp_path)
    assert first.status is EvalStatus.OK and "result_cache" not in first.stages
    again = await evaluate_oneshot(_job(seed=None), cache_dir=tmp_path)
    assert again.stages["result_cache"].cached is True
    assert again.receipt.seed == first.receipt.seed  # the same record, not a new draw
    assert again.model_dump(exclude={"stages"}) == first.model_dump(exclude={"stages"})
    forced = await evaluate_oneshot(_job(seed=None), cache_dir=tmp_path, use_cache=False)
    assert "result_cache" not in forced.stages and forced.receipt.seed != first.receipt.seed
    edited = _job({**FILES, "model_new.py": FILES["model_new.py"] + "\n# edited\n"}, seed=None)
    fresh = await evaluate_oneshot(edited, cache_dir=tmp_path)
    assert "result_cache" not in fresh.stages
    assert fresh.receipt.candidate_sha256 != first.receipt.candidate_sha256


def _spy_build(monkeypatch: pytest.MonkeyPatch, fail: bool = False) -> dict[str, float]:
    """Records when the one-shot path's build began and ended (`fail`: it raises instead)."""
    from cuda_agent.sandbox_pool.harness import compiler
    from cuda_agent.errors import InfraError

    real, times = compiler.build_extension, {}

    async def build(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        times["began"] = time.monotonic()
        try:
            if fail:
                await asyncio.sleep(0.2)
                raise InfraError("toolchain broke")
            return await real(*args, **kwargs)
        finally:
            times["ended"] = time.monotonic()

    monkeypatch.setattr(compiler, "build_extension", build)
    return times


async def test_the_compile_runs_while_the_reference_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    build = _spy_build(monkeypatch)
    seen: dict[str, float] = {}

    def before_evaluation() -> None:  # the CLI's reference load (torch import), made slow
        seen["start"] = time.monotonic()
        time.sleep(1.0)
        seen["build_began"] = build.get("began", 0.0)  # 0: the build had not begun yet
        seen["end"] = time.monotonic()

    result = await evaluate_oneshot(_job(), cache_dir=tmp_path, use_cache=False, before_evaluation=before_evaluation)
    assert result.status is EvalStatus.OK and result.correct, result.error
    assert 0 < seen["build_began"] < seen["end"]  # the event loop drove the compile meanwhile
    compile_started = result.stages["compile"].started_s
    # Relative to the evaluator taking the job, which is after before_evaluation ended: the stage's
    # timeline shows the compile began before before_evaluation started.
    assert compile_started is not None and compile_started <= -(seen["end"] - seen["start"]), result.stages["compile"]


@pytest.mark.parametrize("build_fails", [False, True])
async def test_a_failing_reference_load_settles_the_compile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            build_fails: bool) -> None:
    from cuda_agent.errors import ProblemError
    from cuda_agent.sandbox_pool.harness import runner

    build = _spy_build(monkeypatch, fail=build_fails)
    zygotes: list[runner.Zygote] = []
    launch = runner.Zygote.launch
    monkeypatch.setattr(runner.Zygote, "launch", lambda self: (zygotes.append(self), launch(self))[1])
    loop_errors: list[dict] = []
    asyncio.get_running_loop().set_exception_handler(lambda loop, context: loop_errors.append(context))

    def broken_reference() -> None:
        time.sleep(0.5)
        raise ProblemError("model.py failed to execute")

    with pytest.raises(ProblemError):
        await evaluate_oneshot(_job(), cache_dir=tmp_path, use_cache=False, before_evaluation=broken_reference)
    assert "ended" in build  # awaited: no compiler left running
    assert not [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]
    assert zygotes and zygotes[0]._proc is None  # the forkserver was closed
    gc.collect()  # a task whose exception nobody retrieved is reported when collected
    assert not loop_errors, loop_errors


def _slow_import(seconds: float):  # noqa: ANN202
    """The CLI's reference load (its torch import, 3-4.5 s on an H200 host), slowed here (torch is loaded)."""
    return lambda: time.sleep(seconds)


def _child_line(result: EvalResult) -> str:
    return next(line for line in result.stages["verify"].log.splitlines() if line.startswith("child:"))


async def test_a_done_build_gets_its_child_started_while_torch_imports(tmp_path: Path) -> None:
    # First eval: the compile outlasts the (instant) import: the evaluator starts the child itself.
    cold = await evaluate_oneshot(_job(), cache_dir=tmp_path, use_cache=False)
    assert cold.status is EvalStatus.OK and cold.correct, cold.error
    assert "started at verification" in _child_line(cold)
    # Build cached, import slow: the child was started beforehand and adopted, with the same verdict.
    warm = await evaluate_oneshot(_job(), cache_dir=tmp_path, use_cache=False, before_evaluation=_slow_import(1.5))
    assert warm.status is EvalStatus.OK and warm.correct, warm.error
    assert "started ahead" in _child_line(warm)
    assert warm.receipt.isolation == cold.receipt.isolation  # hardened the same way


async def test_a_child_that_warms_its_draws_first_draws_the_same_inputs(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # The warm-up (cuda's default) forced on cpu: the parent checks the trial draws' digests, so a
    # warm-up that changed any draw would be reported as irreproducible draws, not pass.
    from cuda_agent.sandbox_pool.harness import early_child

    monkeypatch.setattr(early_child, "warms_draws", lambda device: True)
    await evaluate_oneshot(_job(), cache_dir=tmp_path, use_cache=False)  # the build, cached
    result = await evaluate_oneshot(_job(seed=None), cache_dir=tmp_path, use_cache=False,
                                    before_evaluation=_slow_import(1.5))
    assert "started ahead" in _child_line(result)
    assert result.status is EvalStatus.OK and result.correct, result.error


async def test_a_child_started_ahead_is_dropped_when_the_baselines_must_be_measured(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The baselines hold the device alone: on cuda a missing one is measured while the evaluation goes
    # on (forced here on cpu), so a child started ahead must not run then; verification starts its own.
    from cuda_agent.sandbox_pool.harness import evaluator as evaluator_mod

    await evaluate_oneshot(_job(), cache_dir=tmp_path, use_cache=False)  # the build, cached
    monkeypatch.setattr(evaluator_mod, "overlap_baselines", lambda device, *, profile, compiling, cpus=None: profile)
    job = EvalJob(problem_src=PROBLEM, files=FILES, device="cpu",
                  options=EvalOptions(seed=7, timed_calls=10, refresh_baselines=True))
    result = await evaluate_oneshot(job, cache_dir=tmp_path, use_cache=False, before_evaluation=_slow_import(1.5))
    assert result.status is EvalStatus.OK and result.correct and result.eager_us, result.error
    assert not result.stages["baselines"].cached
    assert "started at verification" in _child_line(result)
