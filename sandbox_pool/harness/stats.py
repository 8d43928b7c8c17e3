"""Summary statistics of timing samples, with a distribution-free confidence interval of the median."""

from __future__ import annotations

import math
import statistics

from cuda_agent.sandbox_pool.harness.models import TimingStats

Z95 = 1.959964


def median_ci(samples: list[float], z: float = Z95) -> tuple[float, float]:
    """The median's ~95% confidence interval from order statistics (no assumption on the
    distribution: timing samples are skewed and often bimodal). With fewer than 6 samples the
    interval is the whole range."""
    ordered = sorted(samples)
    n = len(ordered)
    if n < 6:
        return ordered[0], ordered[-1]
    half = z * math.sqrt(n) / 2
    lo = max(0, math.floor(n / 2 - half) - 1)
    hi = min(n - 1, math.ceil(n / 2 + half))
    return ordered[lo], ordered[hi]


def relative_half_width(samples: list[float]) -> float:
    """Half the width of the median's confidence interval, relative to the median."""
    lo, hi = median_ci(samples)
    median = statistics.median(samples)
    return (hi - lo) / (2 * median) if median > 0 else math.inf


def timing_stats(samples_us: list[float]) -> TimingStats:
    lo, hi = median_ci(samples_us)
    return TimingStats(
        median_us=statistics.median(samples_us),
        mean_us=statistics.fmean(samples_us),
        std_us=statistics.pstdev(samples_us) if len(samples_us) > 1 else 0.0,
        min_us=min(samples_us),
        max_us=max(samples_us),
        samples_us=[round(s, 3) for s in samples_us],
        ci_low_us=lo,
        ci_high_us=hi,
    )
