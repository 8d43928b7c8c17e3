"""Aggregates filter verdicts into counts and histograms."""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Iterable, Sequence

from cuda_agent.data_gen.filter.models import FilterResult, HistogramBin, RecheckReport

EAGER_MS_EDGES = (0.0, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1000.0, float("inf"))
"""Log-spaced bins of eager time, ms."""


def histogram(values: Iterable[float], edges: Sequence[float]) -> list[HistogramBin]:
    """Counts of `values` in [edges[i], edges[i+1]) (values below edges[0] go to the first bin)."""
    counts = [0] * (len(edges) - 1)
    for value in values:
        index = min(max(bisect.bisect_right(edges, value) - 1, 0), len(counts) - 1)
        counts[index] += 1
    return [HistogramBin(lo=edges[i], hi=None if edges[i + 1] == float("inf") else edges[i + 1], count=c)
            for i, c in enumerate(counts)]


def by_criterion(results: Iterable[FilterResult]) -> dict[str, int]:
    """Dropped results per criterion, most frequent first."""
    counts = Counter(r.criterion.value for r in results if not r.kept and r.criterion is not None)
    return dict(counts.most_common())


def recheck_report(results: Sequence[FilterResult]) -> RecheckReport:
    passed = sum(r.kept for r in results)
    return RecheckReport(rechecked=len(results), passed_again=passed,
                         fraction=passed / len(results) if results else 1.0, by_criterion=by_criterion(results))
