"""Admission, priorities and deadlines of queued jobs, shared by the pools that queue work.

A `Ticket` is one admitted job; a `TicketQueue` serves the highest priority first, then the
oldest; a `JobBook` admits jobs under the back-pressure limit, waits for each one under its
deadline, withdraws it wherever it is when the deadline passes or the caller leaves, and
keeps the counters and latency window of ``PoolStatus``.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Coroutine
from typing import Any

from cuda_agent.errors import PoolError, PoolOverloadedError, PoolTimeoutError
from cuda_agent.sandbox_pool.harness.models import EvalJob, EvalResult, EvalStatus
from cuda_agent.sandbox_pool.pool.metrics import LatencyWindow

QUEUED_STAGES = ("queued", "eval_queue")


class Ticket:
    """One admitted job and where it is (`stage`); `task` is its running step, if any."""

    def __init__(self, job: EvalJob, priority: int, seq: int) -> None:
        self.job = job
        self.priority = priority
        self.seq = seq
        self.submitted = time.monotonic()
        self.deadline = float("inf")
        self.future: asyncio.Future[EvalResult] = asyncio.get_running_loop().create_future()
        self.stage = "queued"
        self.task: asyncio.Task | None = None
        self.task_cancellable = True  # False for steps that must finish once started (builds)
        self.abandoned = False
        self.payload: object = None  # what an earlier stage produced for a later one (a build)

    def remaining_s(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def deliver(self, result: EvalResult | None = None, exc: BaseException | None = None) -> None:
        """Hand the outcome to the waiting caller (ignored if it left)."""
        if self.future.done():
            return
        if exc is not None:
            self.future.set_exception(exc)
        else:
            self.future.set_result(result)  # type: ignore[arg-type]


class TicketQueue:
    """Highest priority first, then first come; withdrawn tickets are skipped."""

    def __init__(self) -> None:
        self._queue: asyncio.PriorityQueue = asyncio.PriorityQueue()

    def put(self, ticket: Ticket) -> None:
        self._queue.put_nowait((-ticket.priority, ticket.seq, ticket))

    async def get(self) -> Ticket:
        while True:
            ticket = (await self._queue.get())[2]
            if not ticket.abandoned:
                return ticket


class JobBook:
    """Admits jobs into `queue` and waits for them; the pool's stages move them along."""

    def __init__(self, max_pending: int, default_timeout_s: float, latency_window: int) -> None:
        self.max_pending = max_pending
        self.default_timeout_s = default_timeout_s
        self.queue = TicketQueue()
        self.pending: set[Ticket] = set()
        self.latency = LatencyWindow(latency_window)
        self.counts = dict(submitted=0, completed=0, failed=0, timed_out=0, rejected=0)
        self._seq = itertools.count()

    def admit(self, job: EvalJob, priority: int, timeout_s: float | None) -> Ticket:
        """Queue `job` or raise `PoolOverloadedError` (never waits)."""
        if len(self.pending) >= self.max_pending:
            self.counts["rejected"] += 1
            raise PoolOverloadedError(
                f"the pool holds {len(self.pending)} jobs (max_pending_jobs={self.max_pending}); retry later")
        ticket = Ticket(job, priority, next(self._seq))
        ticket.deadline = ticket.submitted + (timeout_s if timeout_s is not None else self.default_timeout_s)
        self.pending.add(ticket)
        self.counts["submitted"] += 1
        self.queue.put(ticket)
        return ticket

    async def wait(self, ticket: Ticket) -> EvalResult:
        """The ticket's result; `PoolTimeoutError` past its deadline (the job is withdrawn)."""
        try:
            async with asyncio.timeout(ticket.remaining_s()):
                result = await asyncio.shield(ticket.future)
        except TimeoutError:
            stage = ticket.stage
            self.withdraw(ticket)
            self.counts["failed"] += 1
            self.counts["timed_out"] += 1
            raise PoolTimeoutError(
                f"job {ticket.job.task_id or '(no task_id)'} did not finish within "
                f"{ticket.deadline - ticket.submitted:.1f} s (it was {stage}); an infrastructure-side failure, "
                "not the candidate's: leave it out of training or retry") from None
        except asyncio.CancelledError:
            self.withdraw(ticket)
            raise
        except Exception:
            self.counts["failed"] += 1
            raise
        finally:
            self.pending.discard(ticket)
        self.latency.add(time.monotonic() - ticket.submitted)
        self.counts["failed" if result.status is EvalStatus.INFRA_ERROR else "completed"] += 1
        return result

    def withdraw(self, ticket: Ticket) -> None:
        """Take a ticket out wherever it is; its running step is cancelled unless it must finish."""
        ticket.abandoned = True
        self.pending.discard(ticket)
        if not ticket.future.done():
            ticket.future.cancel()
        if ticket.task is not None and ticket.task_cancellable and not ticket.task.done():
            ticket.task.cancel()

    def close(self) -> None:
        """Fail every pending job (the pool is closing)."""
        for ticket in list(self.pending):
            ticket.deliver(exc=PoolError("the pool was closed before the job finished"))
            self.withdraw(ticket)

    def stages(self) -> dict[str, int]:
        """Pending jobs by stage: queued (any queue), compiling, running."""
        stages = [t.stage for t in self.pending]
        return dict(queue_depth=sum(s in QUEUED_STAGES for s in stages), compiling=stages.count("compiling"),
                    running=stages.count("running"), pending=len(stages))


async def run_step(ticket: Ticket, step: Coroutine[Any, Any, Any], *, cancellable: bool = True) -> asyncio.Task:
    """Run `step` as the ticket's task, returned finished; withdraw() cancels it if `cancellable`."""
    task = asyncio.create_task(step)
    ticket.task = task
    ticket.task_cancellable = cancellable
    try:
        await asyncio.wait({task})
    finally:
        ticket.task = None
        if not task.done():  # our own loop is being cancelled (the pool is closing)
            task.cancel()
    return task
