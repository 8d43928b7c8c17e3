"""A session-wide trusted evaluator running on its own event loop thread."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Callable, Iterator

import pytest

from cuda_agent.sandbox_pool.harness import EvalJob, EvalOptions, EvalResult, Evaluator, EvaluatorConfig

CANDIDATES = Path(__file__).parent / "candidates"
PROBLEM = (CANDIDATES / "problem_scale_bias.py").read_text()
KERNELS = (CANDIDATES / "kernels.cpp").read_text()


class EvaluatorThread:
    def __init__(self, device: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.evaluator = Evaluator(EvaluatorConfig(device=device))
        self.call(self.evaluator.start())

    def call(self, coro):  # noqa: ANN001, ANN201
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def evaluate(self, job: EvalJob) -> EvalResult:
        return self.call(self.evaluator.evaluate(job))

    def close(self) -> None:
        self.call(self.evaluator.close())
        self.loop.call_soon_threadsafe(self.loop.stop)


@pytest.fixture
def static_check_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """The run-time layers alone: the evaluator's static check passes every candidate (tests of defence in
    depth, for cheats the static rules refuse first)."""
    from cuda_agent.sandbox_pool.harness import evaluator, static_check

    monkeypatch.setattr(evaluator, "check_candidate", lambda files: static_check.StaticCheckReport())


@pytest.fixture(scope="session")
def cpu_evaluator():
    runner = EvaluatorThread("cpu")
    yield runner
    runner.close()


@pytest.fixture(scope="session")
def evaluate_cpu(cpu_evaluator: EvaluatorThread) -> Callable[..., EvalResult]:
    """evaluate_cpu(model_new_src, kernels=KERNELS, profile=False, problem=PROBLEM, **options)."""

    def run(model_new: str, kernels: str | None = None, *, profile: bool = False, problem: str = PROBLEM,
            files: dict[str, str] | None = None, **options) -> EvalResult:
        job_files = files if files is not None else {"model_new.py": model_new, "kernels/k.cpp": kernels or KERNELS}
        opts = EvalOptions(profile=profile, timed_calls=options.pop("timed_calls", 5), seed=options.pop("seed", 7),
                           **options)
        return cpu_evaluator.evaluate(EvalJob(problem_src=problem, files=job_files, device="cpu", options=opts))

    return run


@pytest.fixture(scope="module")
def evaluate_cuda() -> Iterator[Callable[..., EvalResult]]:
    """evaluate_cuda(problem_src, files, **options): one CUDA evaluator per test module (gpu-marked tests)."""
    runner = EvaluatorThread("cuda")

    def run(problem: str, files: dict[str, str], **options) -> EvalResult:
        return runner.evaluate(EvalJob(problem_src=problem, files=files, device="cuda", options=EvalOptions(**options)))

    yield run
    runner.close()
