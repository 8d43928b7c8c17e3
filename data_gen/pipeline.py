"""All stages in one call: crawl -> compose -> filter -> decontam (optional) -> export.

Folder layout under `out` (each stage resumable, so a rerun continues where it stopped; a
rerun with other settings judges again or refuses, see `stage.py`):
    seeds.jsonl (+ .settings.json)     crawl
    composed.jsonl (+ .settings.json)  compose; topped up once per redraw round by as many tasks as the
                                       filter dropped as dead_operator / dead_input
    candidates.jsonl     the filter's input, rewritten on every run: composed.jsonl plus the first
                         `include_seeds` seeds (all with -1)
    filter/              results.jsonl, kept.jsonl, recheck.jsonl, report.json
    decontam/            similarity.jsonl, clean.jsonl, report.json (unless skip_decontam)
    export/              verl/*.parquet, sft.parquet, kernelbench/
    dataset_report.json, dataset_report.md, eager_ms.png   the dataset report (`dataset_report.py`)
    pipeline_report.json every stage's report
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from cuda_agent.data_gen.compose import ComposeReport, Composer, EndpointConfig, compose
from cuda_agent.data_gen.crawl import CrawlReport, crawl
from cuda_agent.data_gen.decontam import DEFAULT_THRESHOLD, DecontamReport, decontaminate
from cuda_agent.data_gen.export import ExportReport, export
from cuda_agent.data_gen.dataset_report import DatasetReport, dataset_report
from cuda_agent.data_gen.filter import Criterion, FilterConfig, FilterReport, filter_tasks
from cuda_agent.data_gen.models import Device, Task
from cuda_agent.data_gen.progress import ProgressFn, no_progress
from cuda_agent.data_gen.stage import require
from cuda_agent.data_gen.store import JsonlStore, write_json
from cuda_agent.errors import ConfigError

logger = logging.getLogger(__name__)

DEFAULT_SIZE: dict[str, str] = {"cuda": "large", "cpu": "tiny"}
CANDIDATES = "candidates.jsonl"
REDRAWN = (Criterion.DEAD_OPERATOR, Criterion.DEAD_INPUT)
"""Filter verdicts the composer makes up for by drawing more tasks (redraw_rounds)."""


class PipelineConfig(BaseModel):
    """Every knob of a full run; stage-specific ones keep their stage's defaults."""

    model_config = ConfigDict(extra="forbid")

    out: Path = Field(description="Output folder.")
    device: Device = Field("cuda", description="Target device of the filter and the exported rows.")
    count: int = Field(150, ge=1, description="Fused tasks to compose (and filter).")
    include_seeds: int = Field(0, ge=-1, description="Seed tasks filtered along with them (-1 = all).")
    size: str | None = Field(None, description="Size preset (default: large on cuda, tiny on cpu).")
    seed: int = Field(0, description="Seed of the composer.")
    composer: Composer = Field("programmatic", description="programmatic or llm.")
    endpoint: EndpointConfig | None = Field(None, description="LLM endpoint (composer 'llm').")
    filter: FilterConfig | None = Field(None, description="Filter configuration (default: FilterConfig(device)).")
    backend: Literal["local", "ray"] = Field("local", description="Where the filter runs.")
    recheck: bool = Field(False, description="Run the filter twice on the kept tasks and report stability.")
    kernelbench: Path | None = Field(None, description="KernelBench checkout or dataset for decontamination "
                                                      "(required unless skip_decontam).")
    skip_decontam: bool = Field(False, description="Export without decontamination (explicit; the reports say so).")
    threshold: float = Field(DEFAULT_THRESHOLD, ge=0, le=1, description="Decontamination threshold.")
    val_fraction: float = Field(0.0, ge=0, lt=1, description="Share of tasks in the exported validation split.")
    redraw_rounds: int = Field(1, ge=0, description="Times composition re-draws the tasks the filter dropped as "
                                                    "dead_operator / dead_input (composing that many more).")
    data_source: str = Field("cuda_agent/ops", description="data_source column of the exported rows.")

    @model_validator(mode="after")
    def _decontam_chosen(self) -> PipelineConfig:
        if self.kernelbench is None and not self.skip_decontam:
            raise ConfigError("the pipeline exports only decontaminated tasks: pass --kernelbench PATH (a KernelBench "
                              "checkout or dataset file), or --no-decontam to export without decontamination")
        return self


class PipelineReport(BaseModel):
    """Every stage's report."""

    model_config = ConfigDict(extra="forbid")

    config: PipelineConfig
    crawl: CrawlReport
    compose: ComposeReport
    filter: FilterReport
    decontam: DecontamReport | None = Field(None, description="None when decontamination was skipped (skip_decontam).")
    decontaminated: bool = Field(description="Whether the exported tasks were decontaminated against KernelBench.")
    export: ExportReport
    dataset: DatasetReport = Field(description="Operators, chain lengths, eager times and drop reasons of the run.")
    wall_s: float
    stage_s: dict[str, float] = Field(default_factory=dict, description="Wall seconds per stage (compose and filter "
                                                                        "include their redraw rounds).")


def _candidates(config: PipelineConfig) -> Path:
    composed = JsonlStore(config.out / "composed.jsonl", Task).load()
    seeds = JsonlStore(config.out / "seeds.jsonl", Task).load()
    chosen = seeds if config.include_seeds < 0 else seeds[: config.include_seeds]
    path = config.out / CANDIDATES
    JsonlStore(path, Task).write([*composed, *chosen])
    return path


def _merge(first: ComposeReport, more: ComposeReport) -> ComposeReport:
    """One compose report for the first round and a redraw round."""
    reasons = dict(first.failed_by_reason)
    for reason, count in more.failed_by_reason.items():
        reasons[reason] = reasons.get(reason, 0) + count
    return first.model_copy(update={
        "requested": more.requested, "written": first.written + more.written,
        "duplicates": first.duplicates + more.duplicates,
        "failed_attempts": first.failed_attempts + more.failed_attempts, "failed_by_reason": reasons})


def _dead(report: FilterReport) -> int:
    return sum(report.by_criterion.get(c.value, 0) for c in REDRAWN)


def run_pipeline(config: PipelineConfig, progress_for: Callable[[str], ProgressFn] = lambda stage: no_progress,
                 ) -> PipelineReport:
    """Run every stage into `config.out`; returns (and writes) the pipeline report.

    Raises `NothingToPassOnError` when a stage leaves nothing for the next, and
    `SettingsChangedError` when `out` holds seeds or tasks made with other settings.
    """
    start = time.perf_counter()
    stage_s: dict[str, float] = {}
    mark = [start]

    def lap(stage: str) -> None:
        now = time.perf_counter()
        stage_s[stage] = round(stage_s.get(stage, 0.0) + now - mark[0], 2)
        mark[0] = now

    out = config.out
    size = config.size or DEFAULT_SIZE[config.device]
    filter_config = config.filter or FilterConfig(device=config.device)
    crawl_report = crawl(out / "seeds.jsonl", size=size, progress=progress_for("crawl"))
    require(sum(crawl_report.by_library.values()), "crawl", "no operator built a seed; see the dropped operators")
    lap("crawl")

    def compose_and_filter(count: int, filter_progress: ProgressFn) -> tuple[ComposeReport, FilterReport]:
        composed = compose(out / "composed.jsonl", count=count, composer=config.composer,
                           seeds_path=out / "seeds.jsonl", size=size, seed=config.seed, endpoint=config.endpoint,
                           device=config.device, window_ms=filter_config.window_ms, progress=progress_for("compose"))
        require(composed.existing + composed.written, "compose", "no valid task was composed (see failed_by_reason)")
        lap("compose")
        filtered = filter_tasks(_candidates(config), out / "filter", filter_config, backend=config.backend,
                                recheck=False, progress=filter_progress)
        lap("filter")
        return composed, filtered

    compose_report, filter_report = compose_and_filter(config.count, progress_for("filter"))
    for round_ in range(config.redraw_rounds):
        dead = _dead(filter_report)
        if not dead or config.count + dead <= compose_report.existing + compose_report.written:
            break
        logger.info("re-drawing %d tasks with a dead operator or input (round %d)", dead, round_ + 1)
        more, filter_report = compose_and_filter(config.count + dead, progress_for(f"redraw {round_ + 1}"))
        compose_report = _merge(compose_report, more)
    if config.recheck:
        filter_report = filter_tasks(_candidates(config), out / "filter", filter_config, backend=config.backend,
                                     recheck=True, recheck_progress=progress_for("recheck"))
        lap("recheck")
    lo, hi = filter_config.window_ms
    require(filter_report.kept, "filter", f"0 of {filter_report.total} tasks kept ({filter_report.by_criterion}); "
                                          f"see {out / 'filter' / 'report.json'}, e.g. widen the [{lo:g}, {hi:g}] ms "
                                          "window (--min-ms / --max-ms) or pick the size preset of the device (--size)")
    final = out / "filter" / "kept.jsonl"
    decontam_report = None
    if config.kernelbench is not None:
        decontam_report = decontaminate(final, out / "decontam", config.kernelbench, threshold=config.threshold,
                                        progress=progress_for("decontam"))
        require(decontam_report.kept, "decontam", f"every kept task scores above {config.threshold} against "
                                                  f"{config.kernelbench}")
        final = out / "decontam" / "clean.jsonl"
        lap("decontam")
    else:
        logger.warning("--no-decontam: exporting tasks that were not compared with KernelBench")
    export_report = export(final, out / "export", device=config.device, data_source=config.data_source,
                           val_fraction=config.val_fraction, progress=progress_for("export"))
    lap("export")
    dataset = dataset_report(out, JsonlStore(final, Task).load(), crawl=crawl_report, compose=compose_report,
                             filter_report=filter_report, decontam=decontam_report)
    lap("dataset_report")
    report = PipelineReport(config=config, crawl=crawl_report, compose=compose_report, filter=filter_report,
                            decontam=decontam_report, decontaminated=decontam_report is not None,
                            export=export_report, dataset=dataset, wall_s=round(time.perf_counter() - start, 2),
                            stage_s=stage_s)
    write_json(out / "pipeline_report.json", report)
    return report
