"""The parent's reference preparation gives the device to waiting timed windows, and a reference
can be prepared ahead of its evaluation (harness/preparation.py: gate_pause, ReferenceAhead)."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path

import pytest

from cuda_agent.sandbox_pool.harness import EvalJob, EvalOptions, EvalStatus, Evaluator, EvaluatorConfig
from cuda_agent.sandbox_pool.harness.preparation import gate_pause
from cuda_agent.sandbox_pool.harness.gate import DeviceGate
from cuda_agent.sandbox_pool.harness.problem import load_problem
from cuda_agent.sandbox_pool.harness.reference import prepare

from test_hacks import HONEST

CANDIDATES = Path(__file__).parent / "candidates"
PROBLEM = (CANDIDATES / "problem_scale_bias.py").read_text()
KERNELS = (CANDIDATES / "kernels.cpp").read_text()


def test_prepare_pauses_before_every_reference_run(tmp_path: Path) -> None:
    calls: list[float] = []
    prepared = prepare(load_problem(PROBLEM), str(tmp_path), "cpu", seed=3, trials=4, timed_calls=6, atol=1e-4,
                       rtol=1e-4, print_seed=5, influence_checks=1, pause=lambda: calls.append(time.monotonic()))
    steps = len(prepared.trial_draws) + len(prepared.timing_draws)  # trials, the twin, the timed calls' prints
    assert steps == 4 + 1 + 6
    assert len(calls) == steps


async def test_a_waiting_timed_window_gets_the_device_between_preparation_steps() -> None:
    """A preparation of 40 steps of 10 ms holds the device shared; an exclusive request made meanwhile
    is served after at most about one step, and never while a step runs."""
    gate = DeviceGate()
    preparer, timer = gate.lease(), gate.lease()
    await preparer.shared()
    pause = gate_pause(preparer, asyncio.get_running_loop(), "cpu")
    steps: list[tuple[float, float]] = []

    def preparation() -> None:
        for _ in range(40):
            pause()
            began = time.monotonic()
            time.sleep(0.01)  # one reference run
            steps.append((began, time.monotonic()))

    work = asyncio.create_task(asyncio.to_thread(preparation))
    await asyncio.sleep(0.05)
    asked = time.monotonic()
    await timer.exclusive()
    granted = time.monotonic()
    window_start = granted
    await asyncio.sleep(0.03)  # the timed calls
    window_end = time.monotonic()
    await timer.release()
    await work
    await preparer.close()
    await timer.close()
    assert granted - asked < 0.2, f"the timed window waited {granted - asked:.3f} s for a 0.4 s preparation"
    assert not [s for s in steps if s[0] < window_end and window_start < s[1]], "a step ran inside the timed window"
    assert steps[-1][1] > window_end, "the preparation went on after the window"


async def test_an_abandoned_preparation_stops_at_its_next_step() -> None:
    gate = DeviceGate()
    lease = gate.lease()
    await lease.shared()
    stop = threading.Event()
    pause = gate_pause(lease, asyncio.get_running_loop(), "cpu", stop)
    done: list[int] = []

    def preparation() -> None:
        for k in range(1000):
            pause()
            time.sleep(0.005)
            done.append(k)

    work = asyncio.create_task(asyncio.to_thread(preparation))
    await asyncio.sleep(0.05)
    stop.set()
    with pytest.raises(asyncio.CancelledError):
        await work
    assert 0 < len(done) < 100
    await lease.close()


def _job(files: dict[str, str], seed: int | None = None) -> EvalJob:
    return EvalJob(problem_src=PROBLEM, files=files, device="cpu",
                   options=EvalOptions(profile=False, timed_calls=5, seed=seed))


async def test_a_reference_prepared_ahead_is_used_by_the_evaluation(tmp_path: Path) -> None:
    evaluator = Evaluator(EvaluatorConfig(device="cpu", cache_dir=tmp_path))
    try:
        job = _job({"model_new.py": HONEST, "kernels/k.cpp": KERNELS})
        ahead = evaluator.prepare_ahead(job)  # before the forkserver has started
        await evaluator.start()
        result = await evaluator.evaluate(job, ahead=ahead)
        assert result.status is EvalStatus.OK and result.correct, result.error
        assert result.receipt.seed == ahead.seed
        assert not os.path.exists(ahead.work), "the run removes the folder it took over"
    finally:
        await evaluator.close()


async def test_an_untaken_reference_is_discarded_with_its_folder(tmp_path: Path) -> None:
    evaluator = Evaluator(EvaluatorConfig(device="cpu", cache_dir=tmp_path))
    try:
        job = _job({"model_new.py": HONEST, "kernels/k.cpp": KERNELS + "\nthis does not compile;\n"})
        ahead = evaluator.prepare_ahead(job)
        result = await evaluator.evaluate(job, ahead=ahead)
        assert result.status is EvalStatus.COMPILE_ERROR
        assert ahead.task.done() and not os.path.exists(ahead.work)
        assert not evaluator.gate._shared, "the preparation's lease was given back"
    finally:
        await evaluator.close()

