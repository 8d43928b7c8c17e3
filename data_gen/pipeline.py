"""All stages in one call: crawl -> compose -> filter -> decontam (optional) -> export.

Folder layout under `out` (each stage resumable, so a rerun continues where it stopped):
    seeds.jsonl          crawl
    composed.jsonl       compose
    candidates.jsonl     composed tasks (+ `include_seeds` seeds): the filter's input
    filter/              results.jsonl, kept.jsonl, recheck.jsonl, report.json
    decontam/            similarity.jsonl, clean.jsonl, report.json (with a KernelBench path)
    export/              verl/*.parquet, sft.parquet, kernelbench/
    pipeline_report.json every stage's report
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from cuda_agent.data_gen.compose import ComposeReport, Composer, EndpointConfig, compose
from cuda_agent.data_gen.crawl import CrawlReport, crawl
from cuda_agent.data_gen.decontam import DEFAULT_THRESHOLD, DecontamReport, decontaminate
from cuda_agent.data_gen.export import ExportReport, export
from cuda_agent.data_gen.filter import FilterConfig, FilterReport, filter_tasks
from cuda_agent.data_gen.models import Device, Task
from cuda_agent.data_gen.progress import ProgressFn, no_progress
from cuda_agent.data_gen.store import JsonlStore, write_json

logger = logging.getLogger(__name__)

DEFAULT_SIZE: dict[str, str] = {"cuda": "large", "cpu": "tiny"}


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
    kernelbench: Path | None = Field(None, description="KernelBench checkout or dataset for decontamination.")
    threshold: float = Field(DEFAULT_THRESHOLD, description="Decontamination threshold.")
    data_source: str = Field("cuda_agent/ops", description="data_source column of the exported rows.")


class PipelineReport(BaseModel):
    """Every stage's report."""

    model_config = ConfigDict(extra="forbid")

    config: PipelineConfig
    crawl: CrawlReport
    compose: ComposeReport
    filter: FilterReport
    decontam: DecontamReport | None = Field(None, description="None when no KernelBench path was given.")
    export: ExportReport
    wall_s: float


def _candidates(config: PipelineConfig) -> Path:
    composed = JsonlStore(config.out / "composed.jsonl", Task).load()
    seeds = JsonlStore(config.out / "seeds.jsonl", Task).load()
    chosen = seeds if config.include_seeds < 0 else seeds[: config.include_seeds]
    path = config.out / "candidates.jsonl"
    JsonlStore(path, Task).write([*composed, *chosen])
    return path


def run_pipeline(config: PipelineConfig, progress_for: Callable[[str], ProgressFn] = lambda stage: no_progress,
                 ) -> PipelineReport:
    """Run every stage into `config.out`; returns (and writes) the pipeline report."""
    start = time.perf_counter()
    out = config.out
    size = config.size or DEFAULT_SIZE[config.device]
    filter_config = config.filter or FilterConfig(device=config.device)
    crawl_report = crawl(out / "seeds.jsonl", size=size, progress=progress_for("crawl"))
    compose_report = compose(out / "composed.jsonl", count=config.count, composer=config.composer,
                             seeds_path=out / "seeds.jsonl", size=size, seed=config.seed, endpoint=config.endpoint,
                             device=config.device, window_ms=filter_config.window_ms,
                             progress=progress_for("compose"))
    filter_report = filter_tasks(_candidates(config), out / "filter", filter_config, backend=config.backend,
                                 recheck=config.recheck, progress=progress_for("filter"))
    final = out / "filter" / "kept.jsonl"
    decontam_report = None
    if config.kernelbench is not None:
        decontam_report = decontaminate(final, out / "decontam", config.kernelbench, threshold=config.threshold,
                                        progress=progress_for("decontam"))
        final = out / "decontam" / "clean.jsonl"
    else:
        logger.warning("no KernelBench path given: decontamination skipped")
    export_report = export(final, out / "export", device=config.device, data_source=config.data_source,
                           progress=progress_for("export"))
    report = PipelineReport(config=config, crawl=crawl_report, compose=compose_report, filter=filter_report,
                            decontam=decontam_report, export=export_report,
                            wall_s=round(time.perf_counter() - start, 2))
    write_json(out / "pipeline_report.json", report)
    return report
