"""The window check's reference child, started beside the candidate's verification (window_check.py).

Started after the candidate's timing, the check child's setup (fork, the reference model, on cuda a CUDA
context: most of the check's 0.76 s on an H100) was a cost every checked evaluation paid in sequence. Started
when verification starts, that setup runs while the candidate is verified; it holds the device shared until
its child is ready, so the candidate's timed window (exclusive) never overlaps it, and its timing waits for the
candidate's to end (exclusive too). Whatever goes wrong ahead, the evaluator falls back to starting the check
after the candidate's timing, as before (`take` returns None).

Its lease is its evaluation's companion: the two children are one evaluation's, so neither marks the other
"overlapped" (a verdict another evaluation could have caused, re-run solo).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from cuda_agent.sandbox_pool.harness.baselines import EagerCheck
from cuda_agent.sandbox_pool.harness.gate import Lease
from cuda_agent.sandbox_pool.harness.models import TimingStats

logger = logging.getLogger(__name__)


class CheckAhead:
    """An `EagerCheck` started now under a lease of its own, companion of the evaluation's `lease`."""

    def __init__(self, lease: Lease, need_bytes: int, make_check: Callable[[], EagerCheck],
                 timeout_s: float) -> None:
        """`make_check()` spawns the `EagerCheck`; `need_bytes` is its child's device memory (admission)."""
        self.lease = lease.gate.lease()
        self.lease.companion = lease
        self.spawned = False  # admitted and spawned: from then on it only sets itself up
        self._check: EagerCheck | None = None
        self.task = asyncio.ensure_future(self._start(need_bytes, make_check, timeout_s))

    async def _start(self, need_bytes: int, make_check: Callable[[], EagerCheck], timeout_s: float) -> None:
        await self.lease.start_child(need_bytes)
        await self.lease.shared()  # its setup beside the verification, never inside a timed window
        try:
            self._check = make_check()
            self.spawned = True
            why = await self._check.ready(timeout_s)
            if why is not None:
                raise RuntimeError(f"the window check's child did not set itself up: {why}")
        finally:
            await self.lease.release()

    async def take(self) -> "CheckAhead | None":
        """Self once its child is ready, to `time`; None (everything closed) when it failed or is still waiting for
        admission (another evaluation's solo run, device memory: never waited on here, where the evaluation
        holds its own child's memory)."""
        if not self.task.done() and not self.spawned:
            await self.close()
            return None
        await asyncio.wait({self.task})
        if self.task.cancelled() or self.task.exception() is not None:
            if not self.task.cancelled():
                logger.info("window check started ahead failed, started again: %s", self.task.exception())
            await self.close()
            return None
        return self

    async def time(self, timeout_s: float) -> TimingStats | str:
        """The eager reference's timing, with the device held exclusive."""
        assert self._check is not None
        await self.lease.exclusive()
        try:
            return await self._check.time(timeout_s)
        finally:
            await self.lease.release()

    async def close(self) -> None:
        if not self.task.done():
            self.task.cancel()
        with contextlib.suppress(BaseException):
            await self.task
        if self._check is not None:
            self._check.close()
            self._check = None
        await self.lease.close()
