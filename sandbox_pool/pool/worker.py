"""An evaluation worker: one persistent trusted `Evaluator` on one device, recycled when unhealthy.

The evaluator keeps torch imported and (on GPUs) its CUDA context warm between jobs. It is
closed and replaced after `recycle_after_jobs` jobs and after any job that did not end
cleanly (an infrastructure error, a cancelled / timed-out evaluation, a harness exception):
an illegal address poisons a CUDA context, so a worker that saw one never runs another job.
A worker runs up to `pipeline_depth` jobs at once (`EvaluatorConfig`); the device's gate, which
every evaluator of this worker shares, keeps timed calls alone on the device. A replaced
evaluator finishes the jobs it holds before it closes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from cuda_agent.sandbox_pool.harness import BuildResult, EvalJob, EvalResult, Evaluator, EvaluatorConfig
from cuda_agent.sandbox_pool.harness.evaluator import device_gate
from cuda_agent.sandbox_pool.pool.base import WorkerStatus
from cuda_agent.sandbox_pool.pool.metrics import BusyClock

if TYPE_CHECKING:
    from cuda_agent.sandbox_pool.pool.worker_process import ProcessEvalWorker

logger = logging.getLogger(__name__)


class EvalWorker:
    """Owns one Evaluator; runs one job at a time (the caller serialises)."""

    def __init__(self, name: str, config: EvaluatorConfig, recycle_after_jobs: int) -> None:
        self.name = name
        self.config = config
        self.recycle_after_jobs = recycle_after_jobs
        self.gate = device_gate(config)
        self.evaluator = Evaluator(config, gate=self.gate)
        self.clock = BusyClock()
        self._retiring: set[asyncio.Task] = set()
        self.jobs_done = 0
        self.recycles = 0
        self.current_task_id: str | None = None
        self._since_recycle = 0

    async def start(self) -> None:
        await self.evaluator.start()

    @property
    def depth(self) -> int:
        return self.config.pipeline_depth

    async def close(self) -> None:
        for task in list(self._retiring):
            task.cancel()
        await asyncio.gather(*self._retiring, return_exceptions=True)
        await self.evaluator.close()

    async def evaluate(self, job: EvalJob, build: BuildResult | None) -> EvalResult:
        """Evaluate one job on this worker's device (up to `depth` at once), timing the busy period."""
        self.clock.begin()
        self.current_task_id = job.task_id
        try:
            return await self.evaluator.evaluate(job, build=build)
        finally:
            self.clock.end()
            if self.current_task_id == job.task_id:
                self.current_task_id = None

    async def after_job(self, healthy: bool) -> None:
        """Count the job; recycle if it did not end cleanly or the worker reached its job quota."""
        self.jobs_done += 1
        self._since_recycle += 1
        if not healthy or self._since_recycle >= self.recycle_after_jobs:
            await self.recycle("unhealthy job" if not healthy else f"{self._since_recycle} jobs")

    async def recycle(self, reason: str) -> None:
        """Close the evaluator (its zygote and children) and start a fresh one."""
        logger.info("recycling worker %s (%s)", self.name, reason)
        old, self.evaluator = self.evaluator, Evaluator(self.config, gate=self.gate)
        self.recycles += 1
        self._since_recycle = 0
        task = asyncio.create_task(self._retire(old))  # after the jobs it still holds
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)
        try:
            await self.evaluator.start()
        except Exception:  # evaluate() starts it again lazily and reports the failure on the job
            logger.exception("restarting the evaluator of %s failed", self.name)

    async def _retire(self, old: Evaluator) -> None:
        while old.active:
            await asyncio.sleep(0.05)
        try:
            await old.close()
        except Exception:  # a dead zygote may fail to close; the new evaluator does not depend on it
            logger.exception("closing the old evaluator of %s failed", self.name)

    def status(self) -> WorkerStatus:
        clock = self.clock
        return WorkerStatus(name=self.name, device=self.evaluator.device, busy=clock.busy,
                            current_task_id=self.current_task_id, busy_fraction=clock.fraction(),
                            busy_s=clock.busy_s(), jobs_done=self.jobs_done, recycles=self.recycles,
                            uptime_s=clock.uptime_s())


def make_workers(device: str, indices: list[int], *, cache_dir: Path | None, isolate: bool,
                 recycle_after_jobs: int, pipeline_depth: int = 1, window_check: bool = False) -> list[EvalWorker]:
    """One worker per GPU index (cuda) or per CPU worker number (cpu)."""
    workers = []
    for index in indices:
        cfg = EvaluatorConfig(device=device, device_index=index if device == "cuda" else 0,
                              cache_dir=cache_dir, isolate=isolate, pipeline_depth=pipeline_depth,
                              window_check=window_check)
        workers.append(EvalWorker(f"{device}:{index}", cfg, recycle_after_jobs))
    return workers


async def start_all(workers: "Sequence[EvalWorker | ProcessEvalWorker]") -> None:
    """Start every worker concurrently."""
    await asyncio.gather(*(w.start() for w in workers))
