"""The trusted evaluation harness: static check -> compile -> verify -> profile -> reward.

Public API::

    from cuda_agent.sandbox_pool.harness import Evaluator, EvaluatorConfig, EvalJob, EvalResult
    async with Evaluator(EvaluatorConfig(device="cpu")) as ev:
        result = await ev.evaluate(job)

`Evaluator.evaluate(job, build=None)` accepts a `BuildResult` produced elsewhere (a compile
worker) so the pool can split CPU compile work from GPU evaluation work.
"""

_MODELS = ("Device", "EvalJob", "EvalOptions", "EvalResult", "EvalStatus", "PrecisionPolicy", "Receipt",
           "StageOutcome", "TimingStats")
# Every name loads on first use (PEP 562): importing a light module of this package (zygote_launch,
# imported by the CLI before anything else) must not cost pydantic's import.
_LAZY = {name: "cuda_agent.sandbox_pool.harness.models" for name in _MODELS}
_LAZY.update({
    "BuildResult": "cuda_agent.sandbox_pool.harness.compiler",
    "build_extension": "cuda_agent.sandbox_pool.harness.compiler",
    "Evaluator": "cuda_agent.sandbox_pool.harness.evaluator",
    "EvaluatorConfig": "cuda_agent.sandbox_pool.harness.evaluator",
    "evaluate_job": "cuda_agent.sandbox_pool.harness.evaluator",
})
__all__ = list(_LAZY)


def __getattr__(name: str):  # noqa: ANN202 - PEP 562 lazy import
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
