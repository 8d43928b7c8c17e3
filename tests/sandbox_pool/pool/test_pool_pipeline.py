"""A pipelined worker (several evaluations in flight on one device, harness/gate.py), on the CPU.

Good jobs, a crashing candidate, an endless candidate and a cheat are submitted together to one
worker that runs three at a time: every verdict is the one a one-at-a-time worker gives (the crash
is confirmed solo, the endless candidate is stopped while it holds up the others' timed calls and
times out solo), and no timed window ever overlaps another evaluation's use of the device.
"""

from __future__ import annotations

import asyncio

import pytest

from cuda_agent.sandbox_pool.harness import EvalJob, EvalOptions, EvalStatus
from cuda_agent.sandbox_pool.pool import LocalPool, LocalPoolConfig

from conftest import ENDLESS_MODEL_NEW, PROBLEM, make_job

CRASH_MODEL_NEW = ENDLESS_MODEL_NEW.replace("        while True:\n            pass\n",
                                            "        raise RuntimeError('candidate bug')\n")


def _job(kind: str, i: int) -> EvalJob:
    job = make_job("endless" if kind in ("endless", "crash") else kind, variant=i, task_id=f"{kind}-{i}")
    files = dict(job.files)
    if kind == "crash":
        files["model_new.py"] = CRASH_MODEL_NEW + f"\n# {i}\n"
    return EvalJob(problem_src=PROBLEM.read_text(), files=files, device="cpu", task_id=job.task_id,
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


@pytest.mark.timeout(600)
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
