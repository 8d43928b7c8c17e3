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


def conservative_times(result: EvalResult) -> tuple[float | None, float | None, float | None]:
    """(candidate, eager, torch.compile) times that rewards are decided on: the upper end of the
    candidate's median CI and the lower ends of the baselines' (the point estimates where no CI
    is known). A noisy baseline then widens its interval downwards and cannot make a slow
    kernel look fast (docs/harness.md, "Honest baselines")."""
    def bound(name: str, point: float | None, high: bool) -> float | None:
        stats = result.timings.get(name)
        end = None if stats is None else (stats.ci_high_us if high else stats.ci_low_us)
        if point is None or end is None:
            return point
        return max(point, end) if high else min(point, end)

    return (bound("candidate", result.runtime_us, True), bound("eager", result.eager_us, False),
            bound("torch_compile", result.torch_compile_us, False))


def finish(result: EvalResult, *, margin: float, sanity_bound: float, noisy_is_infra: bool = False) -> EvalResult:
    """Speed-ups and the robust reward of a correct candidate. A reward the timings' confidence intervals lower
    below their medians' is kept with a warning; with `noisy_is_infra` (the window check on: rewards that do
    not depend on when they were measured) it is no reward at all, infra_error "machine loaded"."""
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
    t_hi, eager_lo, compile_lo = conservative_times(result)
    result.reward = float(robust_reward(correct=True, runtime_us=t_hi, eager_us=eager_lo,
                                        torch_compile_us=compile_lo, margin=margin))
    point = robust_reward(correct=True, runtime_us=t, eager_us=result.eager_us,
                          torch_compile_us=result.torch_compile_us, margin=margin)
    if point > result.reward and noisy_is_infra:
        return fail(result, EvalStatus.INFRA_ERROR,
                    f"machine loaded: the timings are too noisy to decide the reward ({result.reward:g} at the ends "
                    f"of their confidence intervals, {point:g} by their medians); evaluate again on a quiet machine")
    if point > result.reward:
        result.warnings.append(f"reward {result.reward:g}, not {point:g}: the speed-up does not hold at the ends of "
                               "the timings' confidence intervals (candidate's upper end against the baselines' lower)")
    return result
