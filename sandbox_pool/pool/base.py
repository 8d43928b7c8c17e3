"""The pool contract: submit an `EvalJob`, get its `EvalResult`; read the pool's status.

Every backend (the embedded `LocalPool`, the unix-socket `PoolClient`, the Ray pool)
implements `Pool`. Candidate outcomes come back as results; the pool's own failures are
exceptions from cuda_agent.errors::

    PoolOverloadedError  the queue is full (back-pressure): retry later
    PoolTimeoutError     the job exceeded its deadline: an infrastructure-side failure
    PoolUnreachableError no pool answers at the address
    PoolError            anything else the pool refused or lost
"""

from __future__ import annotations

import abc

from pydantic import BaseModel, ConfigDict, Field

from pathlib import Path
from typing import TYPE_CHECKING

from cuda_agent.sandbox_pool.harness.models import EvalJob, EvalResult

if TYPE_CHECKING:
    from cuda_agent.sandbox_pool.pool.agent_requests import CompileReply, ReferenceProfile


class LatencyStats(BaseModel):
    """Submission-to-result latency of recent jobs, seconds."""

    model_config = ConfigDict(extra="forbid")

    count: int = Field(0, description="Jobs in the window.")
    mean_s: float | None = Field(None, description="Mean latency.")
    p50_s: float | None = Field(None, description="Median latency.")
    p90_s: float | None = Field(None, description="90th percentile.")
    p99_s: float | None = Field(None, description="99th percentile.")


class WorkerStatus(BaseModel):
    """One evaluation worker (one GPU, or one CPU worker)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="Worker name, e.g. 'cuda:0' or 'ray:cuda_agent_pool-w0/cuda:0'.")
    device: str = Field(description="Device string of the worker's evaluator.")
    busy: bool = Field(False, description="Evaluating a job right now.")
    current_task_id: str | None = Field(None, description="task_id of the job being evaluated.")
    busy_fraction: float = Field(0.0, description="Fraction of the worker's lifetime spent evaluating.")
    busy_s: float = Field(0.0, description="Seconds spent evaluating since the worker started (for windowed rates).")
    jobs_done: int = Field(0, description="Jobs this worker finished (any verdict).")
    recycles: int = Field(0, description="Times its Evaluator was closed and replaced.")
    uptime_s: float = Field(0.0, description="Seconds since the worker started.")


class PoolStatus(BaseModel):
    """Snapshot of a pool: queue, workers and latency (``cuda-agent pool status``)."""

    model_config = ConfigDict(extra="forbid")

    backend: str = Field(description="'local' or 'ray'.")
    device: str = Field(description="Device of the evaluation workers.")
    address: str | None = Field(None, description="Where clients reach this pool, if it serves one.")
    uptime_s: float = Field(0.0, description="Seconds since the pool started.")
    queue_depth: int = Field(0, description="Jobs waiting: for a compile slot or for an evaluation worker.")
    compiling: int = Field(0, description="Jobs being compiled.")
    running: int = Field(0, description="Jobs being evaluated.")
    pending: int = Field(0, description="Jobs admitted and not finished.")
    max_pending: int = Field(0, description="Admission limit (back-pressure).")
    submitted: int = Field(0, description="Jobs admitted since start.")
    completed: int = Field(0, description="Jobs that returned a result (any verdict but infra_error).")
    failed: int = Field(0, description="Jobs that ended in an infrastructure failure (infra_error, timeout, lost).")
    timed_out: int = Field(0, description="Jobs that exceeded their deadline (included in failed).")
    rejected: int = Field(0, description="Submissions refused by back-pressure.")
    busy_fraction: float = Field(0.0, description="Mean busy fraction of the workers.")
    latency: LatencyStats = Field(default_factory=LatencyStats, description="Submission-to-result latency.")
    workers: list[WorkerStatus] = Field(default_factory=list, description="One entry per evaluation worker.")


class Pool(abc.ABC):
    """An evaluation pool. ``async with pool: result = await pool.evaluate(job)``."""

    @abc.abstractmethod
    async def evaluate(self, job: EvalJob, *, priority: int = 0, timeout_s: float | None = None) -> EvalResult:
        """Evaluate `job`; a higher `priority` is served first; `timeout_s` overrides the job deadline."""

    @abc.abstractmethod
    async def status(self) -> PoolStatus:
        """The pool's current metrics."""

    async def compile(self, job: EvalJob) -> "CompileReply":
        """Build the job's kernels into the pool's compile cache (the agent's ``compile.sh``).

        Done on the trusted side, in the process that owns this pool object; clients override it."""
        from cuda_agent.sandbox_pool.pool.agent_requests import compile_candidate

        return await compile_candidate(job, self._agent_cache_dir())

    async def reference_profile(self, job: EvalJob) -> "ReferenceProfile":
        """The job's reference profiled once per task and cached (SKILL.md's first step)."""
        from cuda_agent.sandbox_pool.pool.agent_requests import reference_profile

        return await reference_profile(job, self._agent_cache_dir())

    def _agent_cache_dir(self) -> Path:
        import os

        cache = getattr(self, "cache_dir", None)  # LocalPool: resolved at start
        return Path(cache or os.environ.get("CUDA_AGENT_CACHE") or Path.home() / ".cache" / "cuda_agent")

    async def start(self) -> None:
        """Acquire resources (workers, connections). Idempotent; `evaluate` calls it when needed."""

    async def close(self) -> None:
        """Release what this handle holds. Idempotent."""

    async def __aenter__(self) -> "Pool":
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
