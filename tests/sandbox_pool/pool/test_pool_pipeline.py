"""A pipelined worker (several evaluations in flight on one device, harness/gate.py), on the CPU.

Good jobs, a crashing candidate, an endless candidate and a cheat are submitted together to one
worker that runs three at a time: every verdict is the one a one-at-a-time worker gives (the crash
is confirmed solo, the endless candidate is stopped while it holds up the others' timed calls and
times out solo), and no timed window ever overlaps another evaluation's use of the device.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from cuda_agent.sandbox_pool.harness import EvalJob, EvalOptions, EvalStatus
from cuda_agent.sandbox_pool.pool import LocalPool, LocalPoolConfig
from cuda_agent.sandbox_pool.workspace import read_candidate_files

# Not from conftest: several test folders have one, so `from conftest import` is ambiguous.
ROOT = Path(__file__).resolve().parents[3]
PROBLEM = ROOT / "examples" / "problems" / "diag_matmul.py"
SOLUTIONS = ROOT / "examples" / "solutions" / "diag_matmul"
MODEL_NEW = """import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        {body}
"""
BODIES = {"endless": "while True:\n            pass", "crash": "raise RuntimeError('candidate bug')"}


def _job(kind: str, i: int) -> EvalJob:
    files = read_candidate_files(SOLUTIONS / ("cpu_fast" if kind in BODIES else kind))
    if kind in BODIES:
        files["model_new.py"] = MODEL_NEW.format(body=BODIES[kind])
    files["model_new.py"] += f"\n# variant {i}\n"
    return EvalJob(problem_src=PROBLEM.read_text(), files=files, device="cpu", task_id=f"{kind}-{i}",
                   options=EvalOptions(timed_calls=5, run_timeout_s=8))


def _overlapping_exclusive(log: list[tuple[str, float, float]]) -> list[tuple]:
    bad = []
    for i, (kind_a, a0, a1) in enumerate(log):
        for kind_b, b0, b1 in log[i + 1:]:
            if kind_a == kind_b == "shared":
                continue
            if a0 < b1 and b0 < a1:
                bad.append(((kind_a, a0, a1), (kind_b, b0, b1)))
    return bad


@pytest.mark.timeout(400)
async def test_pipelined_worker_gives_one_at_a_time_verdicts(pool_cache) -> None:
    config = LocalPoolConfig(device="cpu", pipeline_depth=3, compile_workers=2, cache_dir=pool_cache)
    async with LocalPool(config) as pool:
        await pool.evaluate(_job("cpu_fast", 0))  # baselines, once
        kinds = ["cpu_fast", "crash", "cpu_fast", "endless", "cpu_cheat", "cpu_fast"]
        jobs = [_job(kind, i + 1) for i, kind in enumerate(kinds)]
        results = await asyncio.gather(*(pool.evaluate(j) for j in jobs))
        gate = pool.workers[0].gate
        by_id = {j.task_id: r for j, r in zip(jobs, results)}
        for task_id, result in by_id.items():
            kind = task_id.rsplit("-", 1)[0]
            expected = {"cpu_fast": EvalStatus.OK, "crash": EvalStatus.CRASH, "endless": EvalStatus.TIMEOUT,
                        "cpu_cheat": EvalStatus.VIOLATION}[kind]
            assert result.status is expected, (task_id, result.status, result.error)
            if kind == "cpu_fast":  # its speed-up: the CPU's cores are shared by design here (depth 1 on cpu)
                assert result.reward is not None and result.reward >= 1.0
            else:
                assert result.reward == -1.0
        assert gate.stats.max_live_children > 1, "evaluations ran side by side"
        endless = by_id["endless-4"]
        assert "solo" in endless.stages["device"].log, endless.stages
        crash = by_id["crash-2"]
        if "device" in crash.stages:  # it shared the device: the verdict comes from a solo re-run
            assert "solo" in crash.stages["device"].log
        assert not _overlapping_exclusive(gate.stats.log)
        after = await pool.evaluate(_job("cpu_fast", 99))
        assert after.status is EvalStatus.OK
        status = await pool.status()
        assert status.failed == 0


@pytest.mark.timeout(400)
async def test_a_bent_timer_in_a_shared_pool_is_confirmed_solo(pool_cache, monkeypatch) -> None:
    """The CPU clocks' agreement (harness/clock.py) is judged in a pipelined pool too: honest neighbours keep
    their rewards, and a timer bent to report 0.6x, shared with them, is re-run solo before its violation
    (a neighbour could have stretched the outside clock; here none did, and the solo run says so)."""
    from cuda_agent.sandbox_pool.harness import evaluator as evaluator_mod
    from cuda_agent.sandbox_pool.harness.compiler import builder
    from cuda_agent.sandbox_pool.harness.static_check import StaticCheckReport

    async def no_symbol_check(objects):  # noqa: ANN001, ANN202
        return []

    # bend_timer.cpp reaches Python objects from C++: the build and the static check refuse it first
    monkeypatch.setattr(evaluator_mod, "check_candidate", lambda files: StaticCheckReport())
    monkeypatch.setattr(evaluator_mod, "check_object_symbols", no_symbol_check)
    monkeypatch.setattr(builder, "_read_memo", lambda obj: [])
    # the naive kernel: its calls take milliseconds on any CI machine, well past CPU_JUDGED_US (cpu_fast's
    # ~250-400 us straddle it, and a call too short to be judged is left to the median bound)
    bent = _job("cpu_slow", 0)
    bent.task_id = "bent"
    bent.files["kernels/bend.cpp"] = (ROOT / "tests/sandbox_pool/harness/candidates/bend_timer.cpp").read_text()
    bent.files["model_new.py"] = bent.files["model_new.py"].replace(
        "super().__init__()", "super().__init__()\n        cuda_extension.bend_timer(0.6)")
    assert "bend_timer(0.6)" in bent.files["model_new.py"]
    config = LocalPoolConfig(device="cpu", pipeline_depth=3, compile_workers=2, cache_dir=pool_cache)
    async with LocalPool(config) as pool:
        await pool.evaluate(_job("cpu_fast", 0))  # baselines, once
        alone = await pool.evaluate(bent)  # its build too: built, it runs beside the others below
        assert alone.status is EvalStatus.VIOLATION, (alone.status, alone.error)
        honest = [_job("cpu_fast", i) for i in range(1, 5)]
        results = await asyncio.gather(*(pool.evaluate(j) for j in [*honest[:2], bent, *honest[2:]]))
    result = results.pop(2)
    assert all(r.status is EvalStatus.OK for r in results), [(r.status, r.error) for r in results]
    assert result.status is EvalStatus.VIOLATION and "both clocks bracket the same call" in (result.error or ""), \
        (result.status, result.error)
    log = result.stages["device"].log if "device" in result.stages else ""
    assert "the timer's disagreement while other evaluations shared the device: re-run solo" in log, result.stages
