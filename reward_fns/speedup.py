"""The raw speed-up reward, kept only for the paper's ablation (it is dominated by outliers).

r = t_baseline / t for a correct candidate (the baseline is eager by default, or
``torch.compile``); -1 for a failed one, as in the robust reward. A correct candidate whose
time or baseline is unknown (profiling disabled) gets 1.0, "as fast as the baseline".
"""

from __future__ import annotations

from typing import Literal

from cuda_agent.reward_fns.robust import FAILURE_REWARD

SpeedupBaseline = Literal["eager", "compile"]


def speedup_reward(*, correct: bool, runtime_us: float | None, baseline_us: float | None) -> float:
    """The raw speed-up of a candidate against a baseline time."""
    if not correct:
        return FAILURE_REWARD
    if runtime_us is None or baseline_us is None or runtime_us <= 0:
        return 1.0
    return baseline_us / runtime_us
