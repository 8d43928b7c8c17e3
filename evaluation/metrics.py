"""The metrics of a run, per level: the paper's table, the official release's and KernelBench's.

Rates are over the samples that count: endpoint and infrastructure failures are nobody's outcome
and are left out (``excluded``). A sample "passes" when it compiled, was correct and clean.
"Faster than X" is a correct sample with speed-up over X strictly above 1 (no margin: the
training reward's margin is a reward rule, not a metric). Geometric means are given two ways:
over correct samples only, and over all samples with a failure counted as speed-up 1.0 (the
user keeps the PyTorch reference). KernelBench's fast_p is the fraction of samples correct with
speed-up over eager above p (fast_0 = correctness rate). pass@k is the unbiased estimator of
Chen et al. (2021) over each task's samples, averaged over tasks.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence

from pydantic import BaseModel, ConfigDict, Field

from cuda_agent.evaluation.results import RunResult, latest

FAST_P = (0.0, 1.0, 1.5, 2.0)
ALL_LEVELS = "all"


class LevelMetrics(BaseModel):
    """Metrics of one level (or of all levels) of one run."""

    model_config = ConfigDict(extra="forbid")

    level: str = Field(description="Level number as text, or 'all'.")
    tasks: int = Field(description="Distinct tasks with at least one counted sample.")
    samples: int = Field(description="Counted samples (excluded ones not included).")
    excluded: int = Field(description="Endpoint / infrastructure failures, left out of every rate.")
    pass_rate: float | None = Field(description="Fraction of counted samples that pass.")
    faster_than_eager: float | None = Field(description="Fraction correct and faster than eager PyTorch.")
    faster_than_compile: float | None = Field(description="Fraction correct and faster than torch.compile.")
    geomean_speedup_eager_correct: float | None = Field(description="Geomean speed-up vs eager over correct samples.")
    geomean_speedup_compile_correct: float | None = Field(description="Geomean speed-up vs compile over correct samples.")
    geomean_speedup_eager_all: float | None = Field(description="Geomean vs eager over all samples (failure = 1.0).")
    geomean_speedup_compile_all: float | None = Field(description="Geomean vs compile over all samples (failure = 1.0).")
    fast_p: dict[str, float | None] = Field(description="KernelBench fast_p (vs eager) for p in 0, 1, 1.5, 2.")
    pass_at_k: dict[str, float] = Field(default_factory=dict, description="Unbiased pass@k (only with samples > 1).")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one task with ``n`` samples, ``c`` of them correct (Chen et al., 2021)."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples, got {n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def _rate(count: int, total: int) -> float | None:
    return count / total if total else None


def _geomean(values: Sequence[float]) -> float | None:
    positive = [value for value in values if value and value > 0]
    if not positive:
        return None
    return math.exp(sum(math.log(value) for value in positive) / len(positive))


def _faster(result: RunResult, field: str, threshold: float = 1.0) -> bool:
    value = getattr(result, field)
    return result.correct and value is not None and value > threshold


def _ks(max_samples: int) -> list[int]:
    ks = [k for k in (1, 2, 5, 10, 20, 50, 100) if k <= max_samples]
    if max_samples not in ks:
        ks.append(max_samples)
    return ks


def level_metrics(level: str, results: Sequence[RunResult]) -> LevelMetrics:
    counted = [result for result in results if not result.excluded]
    n = len(counted)
    correct = [result for result in counted if result.correct]
    by_task: dict[str, list[RunResult]] = defaultdict(list)
    for result in counted:
        by_task[result.task_id].append(result)
    pass_k: dict[str, float] = {}
    most = max((len(samples) for samples in by_task.values()), default=0)
    if most > 1:
        for k in _ks(most):
            eligible = [samples for samples in by_task.values() if len(samples) >= k]
            if eligible:
                values = [pass_at_k(len(s), sum(r.correct for r in s), k) for s in eligible]
                pass_k[str(k)] = sum(values) / len(values)

    def all_speedups(field: str) -> list[float]:
        return [getattr(r, field) if r.correct and getattr(r, field) else 1.0 for r in counted]

    return LevelMetrics(
        level=level, tasks=len(by_task), samples=n, excluded=len(results) - n,
        pass_rate=_rate(len(correct), n),
        faster_than_eager=_rate(sum(_faster(r, "speedup_vs_eager") for r in counted), n),
        faster_than_compile=_rate(sum(_faster(r, "speedup_vs_compile") for r in counted), n),
        geomean_speedup_eager_correct=_geomean([r.speedup_vs_eager for r in correct if r.speedup_vs_eager]),
        geomean_speedup_compile_correct=_geomean([r.speedup_vs_compile for r in correct if r.speedup_vs_compile]),
        geomean_speedup_eager_all=_geomean(all_speedups("speedup_vs_eager")) if n else None,
        geomean_speedup_compile_all=_geomean(all_speedups("speedup_vs_compile")) if n else None,
        fast_p={_p(p): _rate(sum(_faster(r, "speedup_vs_eager", p) if p > 0 else r.correct for r in counted), n)
                for p in FAST_P},
        pass_at_k=pass_k,
    )


def _p(p: float) -> str:
    return f"{p:g}"


def run_metrics(results: Iterable[RunResult]) -> list[LevelMetrics]:
    """Per level (ascending; tasks without a level under '-'), then all levels together."""
    final = list(latest(results).values())
    groups: dict[str, list[RunResult]] = defaultdict(list)
    for result in final:
        groups["-" if result.level is None else str(result.level)].append(result)
    order = sorted(groups, key=lambda key: (key == "-", int(key) if key.isdigit() else 0))
    rows = [level_metrics(key, groups[key]) for key in order]
    if len(rows) != 1 or final == []:
        rows.append(level_metrics(ALL_LEVELS, final))
    return rows


def fast_p_curve(results: Iterable[RunResult], points: Sequence[float]) -> list[float]:
    """fast_p (vs eager) at each threshold p, over counted samples."""
    counted = [r for r in latest(results).values() if not r.excluded]
    if not counted:
        return [0.0 for _ in points]
    return [sum(_faster(r, "speedup_vs_eager", p) if p > 0 else r.correct for r in counted) / len(counted)
            for p in points]
