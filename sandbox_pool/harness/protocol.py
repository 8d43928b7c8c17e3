"""What the trusted parent tells an evaluation child, and what they exchange.

The child draws its inputs itself, from seeds the parent chooses after the child started
(inputs are not secret; reference outputs are, and they never leave the parent). Trial
inputs are drawn before any candidate code is loaded and their digests are checked by the
parent, so a problem whose draws are not reproducible is reported as such. Weights travel
in one file (loaded with `weights_only=True`); the child's trial outputs come back as raw
bytes in a sealed shared-memory region (output_buffer.py; a file when they do not fit)
described by a JSON layout; messages on the pipe are plain JSON, never pickles.
"""

from __future__ import annotations

import os
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

INIT_FILE = "init.pt"


def output_file(k: int) -> str:
    return f"out_{k}.bin"


def region_memfd() -> int | None:
    """A new memfd for a child's trial outputs (output_buffer.OutputRegion sizes, seals and maps it), made
    without torch (the one-shot path starts a child before its torch import ends); None where there is none."""
    try:
        return os.memfd_create("cuda_agent_outputs", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    except (AttributeError, OSError):  # not Linux: outputs go through files
        return None


class Draw(BaseModel):
    """One input list: `get_inputs()` under `seed`, transformed to `distribution`, and for an
    influence twin with the values at a random fraction of positions exchanged (see inputs.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int
    distribution: str = "native"
    perturb_seed: int | None = None
    perturb_fraction: float = 0.0


class TensorLayout(BaseModel):
    """Where one output sits: in the shared output region (`shared`, output_buffer.py) or in the
    trial's raw output file; a Python scalar output has `value` instead."""

    model_config = ConfigDict(extra="forbid")

    dtype: str | None = None
    shape: list[int] = Field(default_factory=list)
    offset: int = 0
    nbytes: int = 0
    value: float | int | bool | None = None
    shared: bool = False


class ChildSpec(BaseModel):
    """Everything a child needs; sent as its start argument (draws and sizes follow in `go`)."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["candidate", "reference"]
    device: Literal["cpu", "cuda"]
    device_index: int = 0
    work_dir: str
    so_path: str | None = None
    model_new_src: str | None = None
    problem_src: str
    compile_reference: bool = False
    tf32: bool = False
    trial_draws: list[Draw] = Field(default_factory=list)
    timing_draws: list[Draw] = Field(default_factory=list)
    warmup: int = 3
    outputs_may_alias_inputs: bool = False
    """The reference's outputs share memory with its inputs (a view, an in-place op): the candidate's may too."""
    init_seed: int = 0
    isolate: bool = True
    memory_limit_mb: int | None = None
    file_size_mb: int = 1024
    poison_bytes: int = 0
    output_region_bytes: int = 0
    """Size of the sealed shared region (its fd came with the fork) for trial outputs; 0: files."""
    ci_target: float | None = None
    """Reference children: stop timing (after whole blocks of `min_timed_calls`) once the median's
    CI half-width is at most this fraction of the median (None: make every planned call)."""
    min_timed_calls: int = 0
    max_timing_s: float | None = None
    gated: bool = False
    """Pause after each step until the parent answers (it shares the device with other evaluations: gate.py)."""
    build_on_device: bool = False
    """Baseline children: build the model themselves under `init_seed`, its tensors made on the device
    (no init file: a model of billions of parameters takes seconds instead of a minute of CPU init,
    saving and loading); falls back to a CPU build under the same seed if that raises."""
    warm_draws: bool = False
    """Candidates of the one-shot path (early_child.py): while waiting for `go`, draw each input distribution
    once on throwaway seeds (their kernels' first use, ~0.25 s on an H200, is then paid before the draws
    are known). Only where nothing else uses the device: a pool's children share it under the gate."""
    compile_cache_dir: str | None = None
    """Reference children only: a trusted inductor/triton cache shared by baseline children (they run only
    the problem's own code), so a parallel warm-up can compile for the timed pass. Candidates ignore it:
    their caches stay private to their work folder."""
