"""Rich rendering of the stage reports and progress bars for `cuda-agent data` (CLI only)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

if TYPE_CHECKING:
    from cuda_agent.data_gen.decontam import DecontamReport
    from cuda_agent.data_gen.filter.models import FilterReport, HistogramBin
    from cuda_agent.data_gen.progress import ProgressFn

console = Console(stderr=True)


def new_progress() -> Progress:
    return Progress(TextColumn("[bold]{task.description:<9}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TimeRemainingColumn(), console=console, transient=False)


def bar_callback(progress: Progress, description: str) -> ProgressFn:
    """A ProgressFn driving one bar of `progress` (created on first use)."""
    task_id = None

    def update(done: int, total: int) -> None:
        nonlocal task_id
        if task_id is None:
            task_id = progress.add_task(description, total=total)
        progress.update(task_id, completed=done, total=total)

    return update


@contextlib.contextmanager
def progress_bar(description: str) -> Iterator[ProgressFn]:
    """A single rich progress bar for one stage."""
    with new_progress() as progress:
        yield bar_callback(progress, description)


def _bin_label(b: HistogramBin, fmt: str) -> str:
    hi = "inf" if b.hi is None else format(b.hi, fmt)
    return f"[{format(b.lo, fmt)}, {hi})"


def histogram_table(title: str, bins: Sequence[HistogramBin], fmt: str = "g") -> Table:
    table = Table(title=title)
    table.add_column("bin")
    table.add_column("count", justify="right")
    table.add_column("")
    peak = max((b.count for b in bins), default=0) or 1
    for b in bins:
        table.add_row(_bin_label(b, fmt), str(b.count), "#" * round(30 * b.count / peak))
    return table


def print_filter_report(report: FilterReport) -> None:
    summary = Table(title="filter")
    summary.add_column("criterion")
    summary.add_column("tasks", justify="right")
    summary.add_row("[green]kept", str(report.kept))
    for criterion, count in report.by_criterion.items():
        summary.add_row(criterion, str(count))
    summary.add_row("total", str(report.total))
    console.print(summary)
    console.print(histogram_table("eager time, ms (all timed tasks)", report.eager_ms_histogram))
    lo, hi = report.window_ms
    judged = (f"all resumed; the run that judged them: {report.tasks_per_minute:.1f} tasks/min in {report.wall_s:.1f} s"
              if report.throughput_from_previous_run else
              f"{report.processed} tasks judged in {report.wall_s:.1f} s = [bold]{report.tasks_per_minute:.1f} "
              f"tasks/min[/bold]") + (f" ({report.rejudged} judged again: source or settings changed)"
                                     if report.rejudged else "")
    console.print(f"window [{lo:g}, {hi:g}] ms on {', '.join(report.devices) or report.config.device}; {judged} "
                  f"with {report.parallel_slots} parallel slots"
                  + (f"; {report.infra_errors} infrastructure errors (retried next run)" if report.infra_errors else ""))
    if report.recheck is not None:
        r = report.recheck
        console.print(f"recheck: {r.passed_again}/{r.rechecked} kept tasks passed again ({100 * r.fraction:.1f}%)"
                      + (f"; failures {r.by_criterion}" if r.by_criterion else ""))


def print_decontam_report(report: DecontamReport) -> None:
    console.print(histogram_table("max AST similarity to KernelBench", report.histogram, ".2f"))
    console.print(f"{report.kept} kept, {report.dropped} dropped (> {report.threshold}) of {report.total}, "
                  f"against {report.references} problems in {report.reference}")
    for record in report.dropped_examples[:5]:
        console.print(f"  dropped {record.task_id}: {record.max_similarity:.3f} ~ {record.nearest}")
