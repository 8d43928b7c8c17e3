"""`LocalPool`, the embedded pool: a priority queue, compile slots and one worker per device.

A job goes: admission (back-pressure) -> compile queue -> compile slot (CPU) -> evaluation
queue -> evaluation worker (its device, exclusive) -> result. Workers run in this process, or
each in a process of its own (`worker_processes`; by default when there are several GPUs).
Both queues serve the highest priority first, then the oldest job. The deadline covers the
whole path; a job past it is withdrawn wherever it is (a running evaluation is cancelled and
its worker recycled; a running build finishes into the cache) and the caller gets
`PoolTimeoutError`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

from cuda_agent.errors import PoolError
from cuda_agent.sandbox_pool.harness import EvalJob, EvalResult, EvalStatus
from cuda_agent.sandbox_pool.harness.compiler import default_cache_dir
from cuda_agent.sandbox_pool.pool.base import Pool, PoolStatus
from cuda_agent.sandbox_pool.pool.compile import prebuild
from cuda_agent.sandbox_pool.pool.config import LocalPoolConfig
from cuda_agent.sandbox_pool.pool.tickets import JobBook, TicketQueue, run_step
from cuda_agent.sandbox_pool.pool.worker import EvalWorker, make_workers, start_all
from cuda_agent.sandbox_pool.pool.worker_process import ProcessEvalWorker, make_process_workers

logger = logging.getLogger(__name__)


class LocalPool(Pool):
    """The embedded pool (``LocalPoolConfig().build()``); share it within one event loop."""

    def __init__(self, config: LocalPoolConfig | None = None, *, address: str | None = None) -> None:
        self.config = config or LocalPoolConfig()
        self.address = address
        self.cache_dir: Path | None = None  # the compile / baseline cache, resolved at start
        self.workers: list[EvalWorker | ProcessEvalWorker] = []
        self.book = JobBook(self.config.max_pending_jobs, self.config.job_timeout_s, self.config.latency_window)
        self._eval_q = TicketQueue()
        self._loops: list[asyncio.Task] = []
        self._started_at: float | None = None
        self._start_lock: asyncio.Lock | None = None

    # -- lifecycle ------------------------------------------------------------------------
    async def start(self) -> None:
        self._start_lock = self._start_lock or asyncio.Lock()
        async with self._start_lock:
            if self._started_at is not None:
                return
            cfg = self.config
            self.cache_dir = Path(cfg.cache_dir or default_cache_dir())  # builds land where the evaluators look
            if cfg.uses_worker_processes():
                self.workers = make_process_workers(cfg, self.cache_dir)
            else:
                self.workers = make_workers(cfg.device, cfg.worker_devices(), cache_dir=self.cache_dir,
                                            isolate=cfg.isolate, recycle_after_jobs=cfg.recycle_after_jobs,
                                            pipeline_depth=cfg.depth(), window_check=cfg.window_check)
            await start_all(self.workers)
            self._loops = [asyncio.create_task(self._compile_loop(), name=f"pool-compile-{i}")
                           for i in range(cfg.compile_workers)]
            # depth loops per worker: that many of its jobs in flight (the device's gate orders their use of it)
            self._loops += [asyncio.create_task(self._eval_loop(w), name=f"pool-{w.name}-{i}")
                            for w in self.workers for i in range(cfg.depth())]
            self._started_at = time.monotonic()
            logger.info("local pool started: %d %s worker(s)%s, %d job(s) in flight each, %d compile slot(s)",
                        len(self.workers), cfg.device, " in their own processes" if cfg.uses_worker_processes() else "",
                        cfg.depth(), cfg.compile_workers)

    async def close(self) -> None:
        for loop in self._loops:
            loop.cancel()
        await asyncio.gather(*self._loops, return_exceptions=True)
        self._loops = []
        self.book.close()
        await asyncio.gather(*(w.close() for w in self.workers), return_exceptions=True)
        self._started_at = None

    # -- submission -----------------------------------------------------------------------
    async def evaluate(self, job: EvalJob, *, priority: int = 0, timeout_s: float | None = None) -> EvalResult:
        if job.device != self.config.device:
            raise PoolError(f"job for device {job.device!r} submitted to a {self.config.device!r} pool")
        await self.start()
        return await self.book.wait(self.book.admit(job, priority, timeout_s))

    # -- stages ---------------------------------------------------------------------------
    async def _compile_loop(self) -> None:
        while True:
            ticket = await self.book.queue.get()
            ticket.stage = "compiling"
            assert self.cache_dir is not None
            # A build runs to its end (bounded by compile_timeout_s) even if its job is withdrawn:
            # it is cached for a retry, and a build cancelled midway can leave its compiler and
            # cache locks behind.
            task = await run_step(ticket, prebuild(ticket.job, self.cache_dir), cancellable=False)
            if ticket.abandoned or task.cancelled():
                continue
            if task.exception() is not None:
                ticket.deliver(exc=task.exception())
                continue
            ticket.payload = task.result()
            ticket.stage = "eval_queue"
            self._eval_q.put(ticket)

    async def _eval_loop(self, worker: EvalWorker | ProcessEvalWorker) -> None:
        while True:
            ticket = await self._eval_q.get()
            ticket.stage = "running"
            task = await run_step(ticket, worker.evaluate(ticket.job, ticket.payload))  # type: ignore[arg-type]
            ticket.stage = "done"
            healthy = False
            if task.cancelled():
                pass  # withdrawn (deadline or caller gone) mid-run: recycle, a child may be half-run
            elif task.exception() is not None:
                logger.error("worker %s raised on %s", worker.name, ticket.job.task_id, exc_info=task.exception())
                ticket.deliver(exc=task.exception())
            else:
                healthy = task.result().status is not EvalStatus.INFRA_ERROR
                ticket.deliver(task.result())
            await worker.after_job(healthy)

    # -- metrics --------------------------------------------------------------------------
    async def status(self) -> PoolStatus:
        workers = [w.status() for w in self.workers]
        busy = sum(w.busy_fraction for w in workers) / len(workers) if workers else 0.0
        up = time.monotonic() - self._started_at if self._started_at is not None else 0.0
        return PoolStatus(backend="local", device=self.config.device, address=self.address, uptime_s=up,
                          max_pending=self.config.max_pending_jobs, busy_fraction=busy,
                          latency=self.book.latency.stats(), workers=workers, **self.book.stages(),
                          **self.book.counts)
