"""Stage 2, compose: fused tasks of 2-5 stacked torch operators, duplicates removed.

    from cuda_agent.data_gen.compose import compose
    report = compose("composed.jsonl", count=150, size="large")                    # offline, shape-aware
    report = compose("composed.jsonl", count=150, composer="llm", seeds_path="seeds.jsonl",
                     endpoint=EndpointConfig(base_url="http://127.0.0.1:8000/v1", model="qwen"))

Resumable and idempotent: tasks already in the output count toward `count` and are never
duplicated; with the same seed the programmatic composer regenerates the same sequence.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from cuda_agent.data_gen.compose.dedupe import Deduper
from cuda_agent.data_gen.compose.llm import EndpointConfig, compose_with_llm
from cuda_agent.data_gen.compose.programmatic import ChainConfig, compose_chains
from cuda_agent.data_gen.ids import seed_id
from cuda_agent.data_gen.models import Device, Task
from cuda_agent.data_gen.ops import catalog, size_preset
from cuda_agent.data_gen.progress import ProgressFn, no_progress
from cuda_agent.data_gen.store import JsonlStore
from cuda_agent.errors import ConfigError

logger = logging.getLogger(__name__)

Composer = Literal["programmatic", "llm"]
ATTEMPTS_PER_TASK = 20


class ComposeReport(BaseModel):
    """What `compose` did."""

    model_config = ConfigDict(extra="forbid")

    composer: Composer
    requested: int = Field(description="Tasks wanted in the output in total.")
    existing: int = Field(description="Tasks already in the output before this run.")
    written: int = Field(description="Tasks appended by this run.")
    duplicates: int = Field(description="Candidates dropped as duplicates (normalised-source hash).")
    failed_attempts: int = Field(description="Attempts that produced no usable task.")


def _seeds(seeds_path: str | Path | None) -> list[Task]:
    if seeds_path is None:
        return []
    seeds = JsonlStore(seeds_path, Task).load()
    if not seeds:
        raise ConfigError(f"{seeds_path} holds no seed tasks: run `cuda-agent data crawl` first")
    return seeds


def _stream(composer: Composer, seeds: list[Task], *, size: str, seed: int, chain: ChainConfig,
            endpoint: EndpointConfig | None, device: Device, window_ms: tuple[float, float]) -> Iterator[Task | None]:
    if composer == "llm":
        if endpoint is None:
            raise ConfigError("the LLM composer needs an endpoint: pass --base-url and --model")
        if not seeds:
            from cuda_agent.data_gen.crawl import seed_task

            dims = size_preset(size)
            seeds = [t for t in (seed_task(tp, dims) for tp in catalog(["torch"])) if t is not None]
        return compose_with_llm(seeds, endpoint, seed=seed, device=device, window_ms=window_ms,
                                min_ops=chain.min_ops, max_ops=chain.max_ops)
    templates = catalog(["torch"])
    if seeds:
        allowed = {t.id for t in seeds}
        templates = [t for t in templates if seed_id(t.key) in allowed]
    return compose_chains(templates, size_preset(size), seed=seed, config=chain)


def compose(
    out: str | Path,
    *,
    count: int,
    composer: Composer = "programmatic",
    seeds_path: str | Path | None = None,
    size: str = "small",
    seed: int = 0,
    min_ops: int = 2,
    max_ops: int = 5,
    endpoint: EndpointConfig | None = None,
    device: Device = "cuda",
    window_ms: tuple[float, float] = (1.0, 100.0),
    progress: ProgressFn = no_progress,
) -> ComposeReport:
    """Append fused tasks to the JSONL file `out` until it holds `count` distinct ones."""
    if not 1 <= min_ops <= max_ops <= 5:
        raise ConfigError(f"need 1 <= min_ops <= max_ops <= 5 (the paper stacks up to 5), got {min_ops}..{max_ops}")
    store = JsonlStore(out, Task)
    existing = store.load()
    deduper = Deduper(t.source for t in existing)
    chain = ChainConfig(min_ops=min_ops, max_ops=max_ops)
    stream = _stream(composer, _seeds(seeds_path), size=size, seed=seed, chain=chain, endpoint=endpoint,
                     device=device, window_ms=window_ms)
    written = duplicates = failed = 0
    have = len(existing)
    progress(min(have, count), count)
    if have < count:
        for attempt, task in enumerate(stream, 1):
            if task is None:
                failed += 1
            elif not deduper.add(task.source):
                duplicates += 1
            else:
                store.append([task])
                written += 1
                have += 1
                progress(have, count)
            if have >= count or attempt >= count * ATTEMPTS_PER_TASK:
                break
    getattr(stream, "close", lambda: None)()  # stop an LLM stream's worker threads now
    if have < count:
        logger.warning("compose stopped at %d of %d tasks (attempt budget spent)", have, count)
    return ComposeReport(composer=composer, requested=count, existing=len(existing), written=written,
                         duplicates=duplicates, failed_attempts=failed)


__all__ = ["ComposeReport", "EndpointConfig", "compose"]
