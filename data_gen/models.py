"""Typed boundary of the data pipeline: the `Task` every stage reads and writes.

A task is one KernelBench-format problem (`Model(nn.Module)` with `__init__` / `forward`,
`get_inputs()`, `get_init_inputs()`) plus where it came from. Stages exchange tasks as JSONL
files (one `Task` per line, keyed by `id`); see `store.py`.
"""

from __future__ import annotations

import datetime as _dt
import enum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Device = Literal["cpu", "cuda"]


class TaskKind(str, enum.Enum):
    """How a task was made."""

    SEED = "seed"
    """One crawled operator (KernelBench level 1 style)."""
    FUSED = "fused"
    """Up to 5 torch operators stacked into one model (KernelBench level 2 style)."""
    IMPORTED = "imported"
    """Read from an existing dataset (CUDA-Agent-Ops-6K, KernelBench, ...)."""


class Provenance(BaseModel):
    """Where a task came from, precisely enough to regenerate it."""

    model_config = ConfigDict(extra="forbid")

    generator: str = Field(description="Producer: 'crawl', 'compose-programmatic', 'compose-llm', 'import'.")
    library: str = Field("torch", description="Library of the origin operators: 'torch', 'transformers' or 'mixed'.")
    library_version: str | None = Field(None, description="Version of that library when the task was made.")
    llm_model: str | None = Field(None, description="Model name served by the endpoint (LLM composer only).")
    rng_seed: int | None = Field(None, description="Seed of the sampler that produced the task.")
    parents: list[str] = Field(default_factory=list, description="Ids of the seed tasks the task was composed from.")
    source_path: str | None = Field(None, description="File the task was imported from.")
    created_at: str = Field(
        default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        description="UTC time of creation (ISO 8601).",
    )


class Task(BaseModel):
    """One KernelBench-format problem and its provenance."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(description="Stable, filesystem-safe identifier (the JSONL key and veRL ground truth).")
    name: str = Field(description="Readable CamelCase-ish name, e.g. 'Conv2d_GELU_Sum' (used in file names).")
    source: str = Field(description="The model.py text: Model, get_inputs(), get_init_inputs().")
    ops: list[str] = Field(description="Origin operators in call order, e.g. ['torch.nn.Conv2d', 'torch.nn.functional.gelu'].")
    kind: TaskKind = Field(description="Seed, fused or imported.")
    level: int = Field(1, ge=1, le=4, description="KernelBench-like level: 1 one operator, 2 fused operators, 3 architectures.")
    provenance: Provenance = Field(description="Where the task came from.")
    eager_ms: float | None = Field(None, description="Median eager time measured by the filter, milliseconds.")
    max_similarity: float | None = Field(None, description="Highest AST similarity to a KernelBench problem (decontam).")
    nearest_reference: str | None = Field(None, description="The KernelBench problem it is most similar to (decontam).")
    solution: dict[str, str] | None = Field(
        None, description="Known-good candidate files (model_new.py, kernels/*) when the source dataset ships one; used by the SFT export."
    )
