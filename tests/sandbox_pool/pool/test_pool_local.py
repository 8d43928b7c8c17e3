"""LocalPool specifics: priorities across the evaluation queue."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from conftest import make_job

from cuda_agent.errors import PoolTimeoutError
from cuda_agent.sandbox_pool.harness import EvalStatus
from cuda_agent.sandbox_pool.pool import LocalPool, LocalPoolConfig


async def test_higher_priority_jobs_are_evaluated_first(pool_cache: Path) -> None:
    async with LocalPool(LocalPoolConfig(cache_dir=pool_cache)) as pool:
        await pool.evaluate(make_job("cpu_cheat"))  # warm the build cache: later builds take milliseconds
        blocker = asyncio.create_task(pool.evaluate(make_job("endless"), timeout_s=8.0))
        while (await pool.status()).running == 0:
            await asyncio.sleep(0.05)
        finished: dict[str, float] = {}

        async def submit(task_id: str, priority: int) -> None:
            result = await pool.evaluate(make_job("cpu_cheat", variant=priority, task_id=task_id), priority=priority)
            assert result.status is EvalStatus.VIOLATION
            finished[task_id] = time.monotonic()

        low = asyncio.create_task(submit("low", 0))
        await asyncio.sleep(0.5)  # "low" is queued first
        high = asyncio.create_task(submit("high", 10))
        try:
            await blocker
        except PoolTimeoutError:
            pass
        await asyncio.gather(low, high)
        assert finished["high"] < finished["low"]
