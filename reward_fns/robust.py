"""The paper's robust reward, r in {-1, 1, 2, 3} (the paper, section 2; docs/verl.md).

    -1  the candidate failed: did not compile, was incorrect, broke a rule, crashed, timed out
     3  correct and b(t, t_eager) and b(t, t_compile)
     2  correct and b(t, t_eager) only
     1  correct otherwise (not significantly faster than eager)

where b(t, t0) = (t0 - t) / t0 > margin (paper: margin = 0.05). Infrastructure failures have no
reward at all. This module is pure arithmetic with no imports from the harness: the harness
(sandbox_pool/harness/verdict.py) calls ``robust_reward`` to fill ``EvalResult.reward``, and
reward_fns/scoring.py applies it to results, so the schedule is defined once.
"""

from __future__ import annotations

DEFAULT_MARGIN = 0.05
"""The paper's 5%: "faster" means more than 5% less time than the baseline."""

FAILURE_REWARD = -1.0


def is_faster(t_us: float | None, t0_us: float | None, margin: float = DEFAULT_MARGIN) -> bool:
    """b(t, t0): True when t is more than ``margin`` (relative) below t0; False if either is unknown."""
    if t_us is None or t0_us is None or t0_us <= 0:
        return False
    return (t0_us - t_us) / t0_us > margin


def robust_reward(
    *,
    correct: bool,
    runtime_us: float | None,
    eager_us: float | None,
    torch_compile_us: float | None,
    margin: float = DEFAULT_MARGIN,
) -> float:
    """The robust reward of a candidate; ``correct`` is False for every candidate failure."""
    if not correct:
        return FAILURE_REWARD
    faster_than_eager = is_faster(runtime_us, eager_us, margin)
    faster_than_compile = is_faster(runtime_us, torch_compile_us, margin)
    if faster_than_eager and faster_than_compile:
        return 3.0
    if faster_than_eager:
        return 2.0
    return 1.0
