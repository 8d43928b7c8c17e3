"""The dataset report `pipeline` writes: what the exported tasks are made of and what was dropped.

    dataset_report.json   `DatasetReport`: operator frequency, chain lengths, eager-time histograms,
                          drop reasons per stage
    dataset_report.md     the same as Markdown tables (for benchmarks/data_gen/RESULTS.md)
    eager_ms.png          histogram of eager times (log scale): every timed task and the exported ones
                          (needs matplotlib; skipped with a warning without it)
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from cuda_agent.data_gen.compose import ComposeReport
from cuda_agent.data_gen.crawl import CrawlReport
from cuda_agent.data_gen.decontam import DecontamReport
from cuda_agent.data_gen.filter.models import FilterReport, FilterResult, HistogramBin
from cuda_agent.data_gen.filter.report import EAGER_MS_EDGES, histogram
from cuda_agent.data_gen.models import Task
from cuda_agent.data_gen.store import JsonlStore, write_json

logger = logging.getLogger(__name__)

JSON, MARKDOWN, PNG = "dataset_report.json", "dataset_report.md", "eager_ms.png"


class DatasetReport(BaseModel):
    """What the exported dataset holds and why the rest was dropped."""

    model_config = ConfigDict(extra="forbid")

    tasks: int = Field(description="Exported tasks.")
    operator_frequency: dict[str, int] = Field(description="Exported tasks using each operator, most frequent first.")
    chain_length: dict[int, int] = Field(description="Exported tasks per number of operators.")
    eager_ms_histogram: list[HistogramBin] = Field(description="Eager times of the exported tasks, ms.")
    eager_ms_all_histogram: list[HistogramBin] = Field(description="Eager times of every timed candidate, ms.")
    eager_ms_median: float | None = Field(None, description="Median eager time of the exported tasks, ms.")
    drop_reasons: dict[str, dict[str, int]] = Field(description="Per stage (crawl, compose, filter, recheck, "
                                                                "decontam): dropped items per reason.")
    histogram_png: str | None = Field(None, description="The eager-time histogram image (None without matplotlib).")


def _drop_reasons(crawl: CrawlReport, compose: ComposeReport, filter_report: FilterReport,
                  decontam: DecontamReport | None) -> dict[str, dict[str, int]]:
    reasons: dict[str, dict[str, int]] = {
        "crawl": {"operator_failed": len(crawl.failures)} if crawl.failures else {},
        "compose": {**compose.failed_by_reason, **({"duplicate": compose.duplicates} if compose.duplicates else {})},
        "filter": dict(filter_report.by_criterion),
    }
    if filter_report.recheck is not None:
        reasons["recheck"] = dict(filter_report.recheck.by_criterion)
    if decontam is not None:
        reasons["decontam"] = {f"similarity_above_{decontam.threshold:g}": decontam.dropped} if decontam.dropped else {}
    return reasons


def dataset_report(out: str | Path, tasks: Sequence[Task], *, crawl: CrawlReport, compose: ComposeReport,
                   filter_report: FilterReport, decontam: DecontamReport | None) -> DatasetReport:
    """Build the report of the exported `tasks` and write its three files into `out`."""
    folder = Path(out)
    results = JsonlStore(folder / "filter" / "results.jsonl", FilterResult).load()
    timed = [r.eager_ms for r in results if r.eager_ms is not None]
    exported = sorted(t.eager_ms for t in tasks if t.eager_ms is not None)
    operators = Counter(op for t in tasks for op in set(t.ops))
    report = DatasetReport(
        tasks=len(tasks), operator_frequency=dict(operators.most_common()),
        chain_length=dict(sorted(Counter(len(t.ops) for t in tasks).items())),
        eager_ms_histogram=histogram(exported, EAGER_MS_EDGES), eager_ms_all_histogram=histogram(timed, EAGER_MS_EDGES),
        eager_ms_median=round(exported[len(exported) // 2], 4) if exported else None,
        drop_reasons=_drop_reasons(crawl, compose, filter_report, decontam),
    )
    report.histogram_png = _plot(folder / PNG, timed, exported, filter_report.window_ms)
    write_json(folder / JSON, report)
    (folder / MARKDOWN).write_text(markdown(report), encoding="utf-8")
    return report


def _plot(path: Path, timed: Sequence[float], exported: Sequence[float], window: tuple[float, float]) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        logger.warning("matplotlib is not installed: %s not written (pip install matplotlib)", path.name)
        return None
    bounds = [b for b in window if b > 0]
    positive = [v for v in timed if v > 0] or bounds or [1.0]
    lo, hi = min(positive + bounds), max(positive + bounds)
    hi = hi if hi > lo else lo * 10
    edges = [10 ** (math.log10(lo) + i * (math.log10(hi) - math.log10(lo)) / 30) for i in range(31)]
    figure, axes = plt.subplots(figsize=(7, 4))
    axes.hist(positive, bins=edges, alpha=0.5, label=f"every timed candidate ({len(timed)})")
    axes.hist([v for v in exported if v > 0], bins=edges, alpha=0.8, label=f"exported ({len(exported)})")
    for bound in bounds:
        axes.axvline(bound, color="black", linestyle="--", linewidth=1)
    axes.set_xscale("log")
    axes.set_xlabel("median eager time, ms (window dashed)")
    axes.set_ylabel("tasks")
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path.name


def _table(header: tuple[str, str], rows: Sequence[tuple[object, object]]) -> str:
    lines = [f"| {header[0]} | {header[1]} |", "|---|---|"]
    lines += [f"| {a} | {b} |" for a, b in rows]
    return "\n".join(lines)


def markdown(report: DatasetReport) -> str:
    """The report as Markdown tables."""
    bins = [(f"[{b.lo:g}, {'inf' if b.hi is None else format(b.hi, 'g')})", b.count)
            for b in report.eager_ms_histogram]
    all_bins = {f"[{b.lo:g}, {'inf' if b.hi is None else format(b.hi, 'g')})": b.count
                for b in report.eager_ms_all_histogram}
    parts = [
        f"# Dataset report\n\n{report.tasks} exported tasks; median eager time "
        f"{report.eager_ms_median if report.eager_ms_median is not None else '-'} ms.",
        "## Chain length\n\n" + _table(("operators", "tasks"), list(report.chain_length.items())),
        "## Operator frequency (top 30)\n\n" + _table(("operator", "tasks"),
                                                     list(report.operator_frequency.items())[:30]),
        "## Eager time, ms\n\n| bin | every timed candidate | exported |\n|---|---|---|\n"
        + "\n".join(f"| {label} | {all_bins.get(label, 0)} | {count} |" for label, count in bins),
        "## Dropped per stage\n\n" + _table(("stage: reason", "items"), [
            (f"{stage}: {reason}", count) for stage, reasons in report.drop_reasons.items()
            for reason, count in reasons.items()]),
    ]
    if report.histogram_png:
        parts.append(f"![eager time histogram]({report.histogram_png})")
    return "\n\n".join(parts) + "\n"
