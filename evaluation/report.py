"""``cuda-agent report``: metrics of one or more results files as Markdown, JSON and PNG plots.

Several files are shown side by side (one row group per file), for model comparisons. The HTML
page (``report --html``) is built by ``cuda_agent.evaluation.html_page`` from the same pieces.
"""

from __future__ import annotations

import importlib.util
import io
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from cuda_agent.evaluation.metrics import FAST_P, LevelMetrics, fast_p_curve, run_metrics
from cuda_agent.evaluation.results import RunResult, latest, read_results

logger = logging.getLogger(__name__)

NOTES = (
    "Rates are over counted samples: endpoint and infrastructure failures are excluded from every metric. "
    "pass = compiled, correct and clean. faster = correct with speed-up > 1 (no margin). Geomean speed-ups: "
    "'correct' over correct samples only; 'all' over every counted sample with a failure counted as 1.0. "
    "fast_p = fraction correct with speed-up vs eager > p (fast_0 = correctness). pass@k: unbiased estimator "
    "over each task's samples, averaged over tasks."
)


class RunReport(BaseModel):
    """The metrics of one results file."""

    model_config = ConfigDict(extra="forbid")

    label: str = Field(description="Short name of the run (the file name, made unique).")
    path: str = Field(description="The results file.")
    models: list[str] = Field(default_factory=list, description="Model names found in the file.")
    levels: list[LevelMetrics] = Field(description="Per level, then 'all'.")


class Report(BaseModel):
    """What ``report --json`` prints."""

    model_config = ConfigDict(extra="forbid")

    notes: str = Field(NOTES, description="How to read the metrics.")
    runs: list[RunReport] = Field(description="One entry per results file, in the order given.")


def labels(paths: Sequence[Path]) -> list[str]:
    """Unique short labels: file stems, with the parent folder added where stems collide."""
    stems = [path.stem for path in paths]
    out = []
    for path, stem in zip(paths, stems):
        label = stem if stems.count(stem) == 1 else f"{path.parent.name}/{stem}"
        while label in out:
            label += "'"
        out.append(label)
    return out


def load_runs(paths: Sequence[Path]) -> list[tuple[str, Path, list[RunResult]]]:
    return [(label, path, read_results(path)) for label, path in zip(labels(paths), paths)]


def build_report(runs: Sequence[tuple[str, Path, list[RunResult]]]) -> Report:
    return Report(runs=[
        RunReport(label=label, path=str(path), models=sorted({r.model for r in results if r.model}),
                  levels=run_metrics(results))
        for label, path, results in runs
    ])


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


SUMMARY_HEADER = ["run", "level", "tasks", "samples", "excluded", "pass", "> eager", "> compile",
                  "geomean vs eager (correct / all)", "geomean vs compile (correct / all)",
                  *[f"fast_{p:g}" for p in FAST_P]]


def summary_rows(report: Report) -> list[list[str]]:
    rows = []
    for run in report.runs:
        for m in run.levels:
            rows.append([run.label, m.level, str(m.tasks), str(m.samples), str(m.excluded), _pct(m.pass_rate),
                         _pct(m.faster_than_eager), _pct(m.faster_than_compile),
                         f"{_x(m.geomean_speedup_eager_correct)} / {_x(m.geomean_speedup_eager_all)}",
                         f"{_x(m.geomean_speedup_compile_correct)} / {_x(m.geomean_speedup_compile_all)}",
                         *[_pct(m.fast_p.get(f"{p:g}")) for p in FAST_P]])
    return rows


def pass_k_table(report: Report) -> tuple[list[str], list[list[str]]] | None:
    ks = sorted({int(k) for run in report.runs for m in run.levels for k in m.pass_at_k})
    if not ks:
        return None
    header = ["run", "level", *[f"pass@{k}" for k in ks]]
    rows = [[run.label, m.level, *[_pct(m.pass_at_k.get(str(k))) for k in ks]]
            for run in report.runs for m in run.levels]
    return header, rows


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def to_markdown(report: Report) -> str:
    parts = ["# Evaluation report", "", NOTES, "", "## Metrics per level", "",
             _md_table(SUMMARY_HEADER, summary_rows(report))]
    pk = pass_k_table(report)
    if pk is not None:
        parts += ["", "## pass@k", "", _md_table(*pk)]
    parts += ["", "Runs: " + "; ".join(f"`{run.label}` = {run.path}" + (f" ({', '.join(run.models)})" if run.models
                                                                          else "") for run in report.runs), ""]
    return "\n".join(parts)


# -- plots ---------------------------------------------------------------------------------

def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def speedup_plot(runs: Sequence[tuple[str, Path, list[RunResult]]]) -> bytes:
    """PNG: speed-up vs eager of correct samples, per level, one box per run, log axis."""
    plt = _pyplot()
    finals = [(label, list(latest(results).values())) for label, _, results in runs]
    levels = sorted({("-" if r.level is None else str(r.level)) for _, rs in finals for r in rs},
                    key=lambda key: (key == "-", int(key) if key.isdigit() else 0)) or ["-"]
    fig, axes = plt.subplots(1, len(levels), figsize=(4.2 * len(levels), 4), squeeze=False)
    for ax, level in zip(axes[0], levels):
        data, names = [], []
        for label, results in finals:
            values = [r.speedup_vs_eager for r in results if r.correct and r.speedup_vs_eager and
                      ("-" if r.level is None else str(r.level)) == level]
            data.append(values or [float("nan")])
            names.append(f"{label}\n(n={len(values)})")
        ax.boxplot(data, showfliers=False)
        for index, values in enumerate(data, start=1):
            ax.scatter([index] * len(values), values, s=10, alpha=0.6)
        ax.set_xticks(range(1, len(names) + 1), names, fontsize=8)
        ax.set_yscale("log")
        ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
        ax.set_title(f"level {level}")
        ax.set_ylabel("speed-up vs eager (correct samples)")
    fig.tight_layout()
    return _png(fig, plt)


def fast_p_plot(runs: Sequence[tuple[str, Path, list[RunResult]]]) -> bytes:
    """PNG: KernelBench's fast_p curve (fraction correct with speed-up vs eager > p), one line per run."""
    plt = _pyplot()
    points = [i / 20 for i in range(0, 81)]  # p from 0 to 4
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, _, results in runs:
        ax.plot(points, fast_p_curve(results, points), label=label)
    for p in FAST_P[1:]:
        ax.axvline(p, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("p (speed-up threshold vs eager)")
    ax.set_ylabel("fast_p")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8)
    ax.set_title("fast_p")
    fig.tight_layout()
    return _png(fig, plt)


def _png(fig: Any, plt: Any) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    return buffer.getvalue()


def write_report(paths: Sequence[Path], out: Path, html: bool = False,
                 trajectories: Sequence[Path] | None = None) -> tuple[Report, dict[str, Path]]:
    """Compute and write report.md, report.json, speedup.png, fast_p.png (and report.html) under ``out``."""
    runs = load_runs(paths)
    report = build_report(runs)
    out.mkdir(parents=True, exist_ok=True)
    written = {"markdown": out / "report.md", "json": out / "report.json"}
    written["markdown"].write_text(to_markdown(report), encoding="utf-8")
    written["json"].write_text(json.dumps(report.model_dump(mode="json"), indent=1), encoding="utf-8")
    plots: dict[str, bytes] = {}
    if importlib.util.find_spec("matplotlib") is not None:
        plots = {"speed-up": speedup_plot(runs), "fast_p": fast_p_plot(runs)}
        for name, key, data in (("speedup.png", "speedup_plot", plots["speed-up"]),
                                ("fast_p.png", "fast_p_plot", plots["fast_p"])):
            written[key] = out / name
            written[key].write_bytes(data)
    else:  # e.g. a bare GPU image: the tables still come out
        logger.warning("matplotlib is not installed: no plots (pip install matplotlib, or the 'eval' extra)")
    if html:
        from cuda_agent.evaluation.html_page import render_page

        written["html"] = out / "report.html"
        written["html"].write_text(render_page(report, runs, plots, trajectories), encoding="utf-8")
    return report, written
