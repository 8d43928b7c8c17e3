"""What the trusted parent tells an evaluation child, and the files they exchange.

The parent writes inputs into a private folder; the child reads them (weights_only loads)
and writes its outputs there; messages on the pipe are plain JSON-able dicts. The parent
only ever loads child files with `weights_only=True`: the child is untrusted.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

INIT_FILE = "init.pt"


def trial_file(k: int) -> str:
    return f"trial_{k}.pt"


def timing_file(k: int) -> str:
    return f"timing_{k}.pt"


def output_file(k: int) -> str:
    return f"out_{k}.pt"


class ChildSpec(BaseModel):
    """Everything a child needs; sent as its start argument."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["candidate", "reference"]
    device: Literal["cpu", "cuda"]
    device_index: int = 0
    work_dir: str
    so_path: str | None = None
    model_new_src: str | None = None
    problem_src: str | None = None
    compile_reference: bool = False
    tf32: bool = False
    trials: int = 0
    timing_sets: int = 0
    warmup: int = 3
    fingerprint_seed: int = 0
    init_seed: int = 0
    isolate: bool = True
    memory_limit_mb: int | None = None
    file_size_mb: int = 1024

    poison_bytes: int = 0
