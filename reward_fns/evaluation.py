"""Where evaluations run: the shared evaluation pool when an address is known, else an embedded evaluator.

This is the one place the reward functions and the agent loops reach the harness. Failures of
the machinery (pool unreachable, overloaded, timed out, a dead worker) come back as an
``EvalResult`` with status ``infra_error`` so that the sample is excluded from training, never
scored -1 (DESIGN.md). Anything else raised here is our bug and propagates.

Expected APIs of the sandbox_pool package (issue 5 report lists them)::

    cuda_agent.sandbox_pool.pool.connect(address) -> async context manager with
        ``await client.evaluate(job) -> EvalResult``
    cuda_agent.sandbox_pool.harness.Evaluator(EvaluatorConfig(device=...)) -> async context manager
        with ``await evaluator.evaluate(job) -> EvalResult``
"""

from __future__ import annotations

import asyncio
import logging

from cuda_agent.errors import InfraError, PoolError
from cuda_agent.sandbox_pool.harness import EvalJob, EvalResult, EvalStatus

logger = logging.getLogger(__name__)


async def evaluate(job: EvalJob, *, pool_address: str | None, timeout_s: float) -> EvalResult:
    """Evaluate one job in the pool at ``pool_address`` (or an embedded evaluator if None)."""
    try:
        if pool_address:
            coro = _evaluate_in_pool(job, pool_address)
        else:
            coro = _EMBEDDED.evaluate(job)
        return await asyncio.wait_for(coro, timeout=timeout_s)
    except (InfraError, PoolError, TimeoutError) as exc:
        logger.warning("evaluation of task %s failed in the infrastructure: %r", job.task_id, exc)
        return infra_failure_result(job, exc)


def infra_failure_result(job: EvalJob, exc: BaseException) -> EvalResult:
    """The result recorded when the evaluation machinery, not the candidate, failed."""
    return EvalResult(
        status=EvalStatus.INFRA_ERROR,
        error=f"{type(exc).__name__}: {exc}"[:2000],
        precision_policy=job.options.precision_policy,
        device=job.device,
    )


async def _evaluate_in_pool(job: EvalJob, address: str) -> EvalResult:
    from cuda_agent.sandbox_pool.pool import connect

    async with connect(address) as client:
        return await client.evaluate(job)


class _EmbeddedEvaluators:
    """One embedded evaluator per (event loop, device) of this process, started on first use.

    veRL calls ``compute_score`` as a free function on a long-lived event loop, so the evaluator
    (with its warm worker processes) has to outlive a single call; it is keyed by loop because its
    asyncio resources belong to the loop that started it. ``aclose`` stops those of the running loop.
    """

    def __init__(self) -> None:
        self._evaluators: dict[tuple[int, str], tuple[asyncio.AbstractEventLoop, object]] = {}

    async def evaluate(self, job: EvalJob) -> EvalResult:
        evaluator = await self._get(job.device)
        return await evaluator.evaluate(job)

    async def _get(self, device: str):
        loop = asyncio.get_running_loop()
        self._evaluators = {k: v for k, v in self._evaluators.items() if not v[0].is_closed()}
        key = (id(loop), device)
        if key not in self._evaluators:
            from cuda_agent.sandbox_pool.harness import Evaluator, EvaluatorConfig

            evaluator = Evaluator(EvaluatorConfig(device=device))
            await evaluator.__aenter__()
            if key in self._evaluators:  # another task started one meanwhile
                await evaluator.__aexit__(None, None, None)
            else:
                self._evaluators[key] = (loop, evaluator)
        return self._evaluators[key][1]

    async def aclose(self) -> None:
        loop = asyncio.get_running_loop()
        for key in [k for k, (owner, _) in self._evaluators.items() if owner is loop]:
            _, evaluator = self._evaluators.pop(key)
            await evaluator.__aexit__(None, None, None)


_EMBEDDED = _EmbeddedEvaluators()


async def aclose_embedded() -> None:
    """Stop the embedded evaluators started on the running event loop (tests, CLIs)."""
    await _EMBEDDED.aclose()
