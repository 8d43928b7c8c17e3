"""Where evaluations run: the shared evaluation pool, or an embedded one for this process.

The one place the reward functions and the agent loops reach the harness, through the pool's
client API (``cuda_agent.sandbox_pool.pool.connect_pool``): the pool at the given address
(``$CUDA_AGENT_POOL``: a unix socket or ``ray://``), else an embedded ``LocalPool`` started on
first use. Failures of the machinery (pool unreachable, overloaded, past its deadline, a dead
worker) come back as an ``EvalResult`` with status ``infra_error``, so the sample is excluded
from training, never scored -1 (docs/verl.md). Anything else raised here is our bug and propagates.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from cuda_agent.errors import ConfigError, InfraError, PoolError
from cuda_agent.sandbox_pool.harness import EvalJob, EvalResult, EvalStatus

logger = logging.getLogger(__name__)


async def evaluate(
    job: EvalJob, *, pool_address: str | None, timeout_s: float, embedded_devices: list[int] | None = None,
    window_check: bool = False,
) -> EvalResult:
    """Evaluate one job in the pool at ``pool_address`` (an embedded pool if None, on
    ``embedded_devices`` for cuda: None = every visible GPU; with the window check if ``window_check``)."""
    try:
        if pool_address:
            from cuda_agent.sandbox_pool.pool import connect_pool

            async with connect_pool(pool_address) as pool:
                return await pool.evaluate(job, timeout_s=timeout_s)
        pool = await _EMBEDDED.get(job.device, embedded_devices, window_check)
        async with asyncio.timeout(timeout_s):
            return await pool.evaluate(job, timeout_s=timeout_s)
    except (InfraError, PoolError, TimeoutError) as exc:
        logger.warning("evaluation of task %s failed in the infrastructure: %r", job.task_id, exc)
        return infra_failure_result(job, exc)


def check_gpu_placement(device: str, options: Any) -> None:
    """Refuse to time rewards on the training GPUs: on cuda, without a served pool
    (``options.resolved_pool_address()``), the GPUs of an embedded pool must be named
    (``options.embedded_devices``). ``options`` is a ``RewardOptions``."""
    if not device.startswith("cuda") or options.resolved_pool_address() or options.embedded_devices:
        return
    raise ConfigError(
        "no evaluation pool is served and rewards are timed on cuda: an embedded pool would take the GPUs veRL "
        "trains on. Run `cuda-agent pool serve` on dedicated GPUs and set CUDA_AGENT_POOL (or "
        "reward.custom_reward_function.reward_kwargs.pool_address), or name the evaluation GPUs with "
        "+reward.custom_reward_function.reward_kwargs.embedded_devices=[N,...]"
    )


def infra_failure_result(job: EvalJob, exc: BaseException) -> EvalResult:
    """The result recorded when the evaluation machinery, not the candidate, failed."""
    return EvalResult(
        status=EvalStatus.INFRA_ERROR,
        error=f"{type(exc).__name__}: {exc}"[:2000],
        precision_policy=job.options.precision_policy,
        device=job.device,
    )


class _EmbeddedPools:
    """One embedded LocalPool per (event loop, device) of this process, started on first use.

    veRL calls ``compute_score`` as a free function on a long-lived event loop, so the pool (with
    its warm workers) has to outlive a single call; it is keyed by loop because its asyncio
    resources belong to the loop that started it. ``aclose`` stops those of the running loop.
    """

    def __init__(self) -> None:
        self._pools: dict[tuple[int, str, tuple[int, ...], bool], tuple[asyncio.AbstractEventLoop, Any]] = {}

    async def get(self, device: str, devices: list[int] | None = None, window_check: bool = False) -> Any:
        loop = asyncio.get_running_loop()
        self._pools = {key: value for key, value in self._pools.items() if not value[0].is_closed()}
        key = (id(loop), device, tuple(devices or ()), window_check)
        if key not in self._pools:
            from cuda_agent.sandbox_pool.pool import LocalPoolConfig, connect_pool

            pool = connect_pool(None, config=LocalPoolConfig(device=device, devices=devices, window_check=window_check))
            await pool.__aenter__()
            if key in self._pools:  # another task started one meanwhile
                await pool.__aexit__(None, None, None)
            else:
                self._pools[key] = (loop, pool)
        return self._pools[key][1]

    async def aclose(self) -> None:
        loop = asyncio.get_running_loop()
        for key in [key for key, (owner, _) in self._pools.items() if owner is loop]:
            _, pool = self._pools.pop(key)
            await pool.__aexit__(None, None, None)


_EMBEDDED = _EmbeddedPools()


async def aclose_embedded() -> None:
    """Stop the embedded pools started on the running event loop (tests, CLIs)."""
    await _EMBEDDED.aclose()
