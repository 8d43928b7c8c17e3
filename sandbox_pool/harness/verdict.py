"""Assemble an EvalResult from stage outcomes: status, speed-ups, reward."""

from __future__ import annotations

from cuda_agent.reward_fns.robust import robust_reward
from cuda_agent.sandbox_pool.harness.models import EvalResult, EvalStatus


def fail(result: EvalResult, status: EvalStatus, error: str, violations: list[str] | None = None) -> EvalResult:
    """Mark `result` as failed; candidate failures score -1, infrastructure failures score nothing."""
    result.status = status
    result.error = error
    if violations:
        result.violations = sorted(set(result.violations) | set(violations))
    result.reward = None if status is EvalStatus.INFRA_ERROR else -1.0
    if status is not EvalStatus.INFRA_ERROR and result.correct is None and status not in (
        EvalStatus.STATIC_CHECK_FAILED, EvalStatus.COMPILE_ERROR):
        result.correct = False
    return result


def finish(result: EvalResult, *, margin: float, sanity_bound: float) -> EvalResult:
    """Speed-ups and the robust reward of a correct candidate."""
    t = result.runtime_us
    if t is not None and t > 0:
        if result.eager_us:
            result.speedup_vs_eager = result.eager_us / t
        if result.torch_compile_us:
            result.speedup_vs_compile = result.torch_compile_us / t
        best = max(result.speedup_vs_eager or 0.0, result.speedup_vs_compile or 0.0)
        if best > sanity_bound:
            return fail(result, EvalStatus.VIOLATION,
                        f"speed-up {best:.0f}x exceeds the sanity bound {sanity_bound:.0f}x",
                        [f"implausible speed-up {best:.0f}x"])
    elif t is not None:
        return fail(result, EvalStatus.VIOLATION, "a timed call took no time", ["zero-time call"])
    result.status = EvalStatus.OK
    result.reward = float(robust_reward(correct=True, runtime_us=t, eager_us=result.eager_us,
                                        torch_compile_us=result.torch_compile_us, margin=margin))
    return result
