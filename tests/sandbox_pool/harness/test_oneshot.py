"""The one-shot path of `cuda-agent eval`: static check before anything starts, result cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
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
