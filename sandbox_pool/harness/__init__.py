"""The trusted evaluation harness: static check -> compile -> verify -> profile -> reward.

Public API::

    from cuda_agent.sandbox_pool.harness import Evaluator, EvaluatorConfig, EvalJob, EvalResult
    async with Evaluator(EvaluatorConfig(device="cpu")) as ev:
        result = await ev.evaluate(job)

`Evaluator.evaluate(job, build=None)` accepts a `BuildResult` produced elsewhere (a compile
worker) so the pool can split CPU compile work from GPU evaluation work.
"""

from cuda_agent.sandbox_pool.harness.models import (
    Device,
    EvalJob,
    EvalOptions,
    EvalResult,
    EvalStatus,
    PrecisionPolicy,
    Receipt,
    StageOutcome,
    TimingStats,
)

__all__ = [
    "Device",
    "EvalJob",
    "EvalOptions",
    "EvalResult",
    "EvalStatus",
    "PrecisionPolicy",
    "Receipt",
    "StageOutcome",
    "TimingStats",
]

_LAZY = {
    "BuildResult": "cuda_agent.sandbox_pool.harness.compiler",
    "build_extension": "cuda_agent.sandbox_pool.harness.compiler",
    "Evaluator": "cuda_agent.sandbox_pool.harness.evaluator",
    "EvaluatorConfig": "cuda_agent.sandbox_pool.harness.evaluator",
    "evaluate_job": "cuda_agent.sandbox_pool.harness.evaluator",
}
__all__ += list(_LAZY)


def __getattr__(name: str):  # noqa: ANN202 - PEP 562 lazy import: the models load without torch
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
