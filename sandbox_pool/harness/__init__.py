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

from cuda_agent.sandbox_pool.harness.compiler import BuildResult, build_extension  # noqa: E402
from cuda_agent.sandbox_pool.harness.evaluator import Evaluator, EvaluatorConfig, evaluate_job  # noqa: E402

__all__ += ["BuildResult", "Evaluator", "EvaluatorConfig", "build_extension", "evaluate_job"]
