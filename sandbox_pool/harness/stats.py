"""Summary statistics of timing samples."""

from __future__ import annotations

import statistics

from cuda_agent.sandbox_pool.harness.models import TimingStats


def timing_stats(samples_us: list[float]) -> TimingStats:
    return TimingStats(
        median_us=statistics.median(samples_us),
        mean_us=statistics.fmean(samples_us),
        std_us=statistics.pstdev(samples_us) if len(samples_us) > 1 else 0.0,
        min_us=min(samples_us),
        max_us=max(samples_us),
        samples_us=[round(s, 3) for s in samples_us],
    )
