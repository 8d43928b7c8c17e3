"""Typed boundary of the execution filter: its configuration, per-task verdicts and the report."""

from __future__ import annotations

import enum
import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from cuda_agent.data_gen.models import Device

DEFAULT_WINDOWS_MS: dict[str, tuple[float, float]] = {"cuda": (1.0, 100.0), "cpu": (0.01, 2000.0)}
"""Eager-time windows: the paper's [1, 100] ms on a GPU; a wide CPU window for tests and laptops."""
CHECKS_VERSION = 2
"""Bumped when the checks change meaning: verdicts of an older version are judged again."""


class Criterion(str, enum.Enum):
    """Why a task was dropped (the first check it failed, in this order)."""

    LOAD_ERROR = "load_error"
    """The source does not import, or Model / get_inputs / get_init_inputs fail."""
    EAGER_ERROR = "eager_error"
    """The eager forward raises, or returns something other than tensors."""
    NON_FINITE = "non_finite"
    """The output holds NaN or Inf."""
    INPUT_MUTATION = "input_mutation"
    """forward writes into one of its inputs in place."""
    RNG_IN_FORWARD = "rng_in_forward"
    """forward draws random numbers (randn, dropout, rand_like, manual_seed, ...), seeded or not."""
    NONDETERMINISTIC = "nondeterministic"
    """Two runs on the same inputs differ (beyond det_atol / det_rtol)."""
    CONSTANT_OUTPUT = "constant_output"
    """One constant (scalars included) passes the evaluator's comparison on every input draw."""
    INDISTINGUISHABLE = "indistinguishable"
    """One fixed tensor passes the evaluator's comparison on every input draw (outputs spread less than the tolerance)."""
    DEAD_INPUT = "dead_input"
    """Replacing one input by another draw leaves the output within tolerance."""
    DEAD_OPERATOR = "dead_operator"
    """Removing one operation of forward leaves the output within tolerance (the composer re-draws the task)."""
    TOO_FAST = "too_fast"
    """Median eager time below the window."""
    TOO_SLOW = "too_slow"
    """Median eager time above the window."""
    COMPILE_ERROR = "compile_error"
    """torch.compile fails or the compiled model raises."""
    COMPILE_MISMATCH = "compile_mismatch"
    """The compiled model's output differs from eager beyond atol / rtol."""
    OUT_OF_MEMORY = "out_of_memory"
    """The task ran out of device (or host) memory; with several task processes per GPU, rerun with fewer."""
    TIMEOUT = "timeout"
    """The task's process exceeded timeout_s."""
    CRASH = "crash"
    """The task's process died without a verdict (segfault, abort, out of memory)."""


class FilterConfig(BaseModel):
    """Knobs of the execution filter. Defaults follow the paper (eager time in [1, 100] ms on a GPU)."""

    model_config = ConfigDict(extra="forbid")

    device: Device = Field("cuda", description="Where tasks run: 'cuda' (every local GPU) or 'cpu'.")
    min_ms: float | None = Field(None, ge=0, description="Lower bound of the eager time; None = the device's default.")
    max_ms: float | None = Field(None, gt=0, description="Upper bound of the eager time; None = the device's default.")
    atol: float = Field(1e-2, gt=0, description="Tolerance of the hackability and compile checks (the harness's).")
    rtol: float = Field(1e-2, ge=0, description="Relative tolerance of the hackability and compile checks.")
    det_atol: float = Field(1e-5, ge=0, description="Absolute tolerance between two identical runs (determinism).")
    det_rtol: float = Field(1e-5, ge=0, description="Relative tolerance between two identical runs (determinism).")
    compile: bool = Field(True, description="Run the torch.compile check.")
    compile_backend: str = Field("inductor", description="torch.compile backend ('inductor'; 'eager' for fast tests).")
    compile_mode: str | None = Field(None, description="torch.compile mode (None = default).")
    compile_threads: int = Field(1, ge=1, description="Inductor compile threads per task process.")
    timeout_s: float = Field(300.0, gt=0, description="Wall-clock limit of one task's process (load, checks, compile).")
    warmup_runs: int = Field(2, ge=0, description="Untimed eager runs before timing.")
    min_runs: int = Field(5, ge=1, description="Fewest timed eager runs.")
    max_runs: int = Field(50, ge=1, description="Most timed eager runs.")
    min_time_s: float = Field(0.2, ge=0, description="Keep timing until this much time was measured (or max_runs).")
    seed: int = Field(0, description="Seed of the model's parameters and the first input draw (draw i uses seed + i).")
    draws: int = Field(5, ge=2, le=50, description="Input draws of the hackability checks (the evaluator's correctness trials).")
    max_ablations: int = Field(16, ge=0, description="Most operations of forward removed one at a time by the dead-operator check.")
    workers: int | None = Field(
        None, ge=1,
        description="Concurrent task processes: per GPU on 'cuda' (default min(8, cores / (2 x GPUs))), in total on 'cpu' (default 1).",
    )
    devices: list[int] | None = Field(None, description="GPU indices to use (None = all visible).")
    threads_per_worker: int = Field(1, ge=1, description="torch.set_num_threads in each CPU task process.")
    memory_limit_mb: int | None = Field(None, ge=256, description="Address-space limit of CPU task processes (None = none).")
    exclusive_timing: bool = Field(True, description="Serialise the eager phase per device (a file lock) so timings do not overlap.")

    @model_validator(mode="after")
    def _window(self) -> FilterConfig:
        lo, hi = self.window_ms
        if lo >= hi:
            from cuda_agent.errors import ConfigError

            raise ConfigError(f"empty eager-time window [{lo}, {hi}] ms: min_ms must be below max_ms")
        return self

    def settings_key(self) -> str:
        """Digest of every setting that can change a verdict (not parallelism or placement)."""
        import hashlib

        relevant = self.model_dump(exclude={"workers", "devices", "threads_per_worker", "compile_threads"})
        relevant["window_ms"] = self.window_ms
        relevant["checks_version"] = CHECKS_VERSION
        return hashlib.sha256(json.dumps(relevant, sort_keys=True, default=str).encode()).hexdigest()[:16]

    def task_key(self, source: str) -> str:
        """Cache key of one task's verdict: the task's source and these settings."""
        import hashlib

        return hashlib.sha256(f"{self.settings_key()}\x1f{source}".encode()).hexdigest()[:16]

    @property
    def window_ms(self) -> tuple[float, float]:
        """(min_ms, max_ms) after the device's defaults."""
        lo, hi = DEFAULT_WINDOWS_MS[self.device]
        return (self.min_ms if self.min_ms is not None else lo, self.max_ms if self.max_ms is not None else hi)


class FilterResult(BaseModel):
    """The filter's verdict on one task."""

    model_config = ConfigDict(extra="forbid")

    task_id: str = Field(description="Task id.")
    kept: bool = Field(description="True if every check passed.")
    criterion: Criterion | None = Field(None, description="First failed check; None when kept.")
    detail: str = Field("", description="Short explanation (exception text, measured values).")
    eager_ms: float | None = Field(None, description="Median eager time, ms (None if timing did not run).")
    compile_s: float | None = Field(None, description="Time of the first compiled call (compile included), s.")
    duration_s: float = Field(0.0, description="Wall time of the task's process, s.")
    device: str = Field("", description="Device the task ran on, e.g. 'cuda:0' or 'cpu'.")
    host: str = Field("", description="Host name of the worker.")
    cache_key: str | None = Field(None, description="FilterConfig.task_key of the judged source and settings; a "
                                                    "verdict is reused on a rerun only when it matches.")


class HistogramBin(BaseModel):
    """One bin of a histogram: values in [lo, hi)."""

    model_config = ConfigDict(extra="forbid")

    lo: float = Field(description="Inclusive lower edge.")
    hi: float | None = Field(description="Exclusive upper edge; None = unbounded.")
    count: int = Field(description="Values in the bin.")


class RecheckReport(BaseModel):
    """A second run of the filter over the kept tasks."""

    model_config = ConfigDict(extra="forbid")

    rechecked: int = Field(description="Kept tasks run again.")
    passed_again: int = Field(description="Of those, tasks kept again.")
    fraction: float = Field(description="passed_again / rechecked (1.0 when nothing was rechecked).")
    by_criterion: dict[str, int] = Field(description="Why the others failed the second time.")


class FilterReport(BaseModel):
    """What the filter did: verdict counts, eager-time histogram, throughput."""

    model_config = ConfigDict(extra="forbid")

    backend: Literal["local", "ray"] = Field(description="Where tasks ran.")
    config: FilterConfig = Field(description="The configuration used.")
    window_ms: tuple[float, float] = Field(description="Eager-time window applied.")
    total: int = Field(description="Input tasks.")
    kept: int = Field(description="Tasks that passed every check.")
    dropped: int = Field(description="Tasks dropped.")
    by_criterion: dict[str, int] = Field(description="Dropped tasks per criterion.")
    kept_fraction: float = Field(description="kept / total.")
    eager_ms_histogram: list[HistogramBin] = Field(description="Median eager times of every timed task (log bins).")
    kept_eager_ms_histogram: list[HistogramBin] = Field(description="Median eager times of kept tasks.")
    processed: int = Field(description="Tasks run by this invocation (the rest were resumed from results.jsonl).")
    infra_errors: int = Field(0, description="Tasks not judged because the machinery failed; retried on the next run.")
    wall_s: float = Field(description="Wall time of this invocation, s.")
    tasks_per_minute: float = Field(description="processed / wall minutes of the last invocation that judged tasks "
                                                "(a rerun that judged nothing keeps the previous figure).")
    throughput_from_previous_run: bool = Field(False, description="True when tasks_per_minute, wall_s and "
                                                                  "parallel_slots were carried over from report.json.")
    rejudged: int = Field(0, description="Tasks judged again because their source or the settings changed.")
    parallel_slots: int = Field(description="Concurrent task processes.")
    devices: list[str] = Field(description="Devices used.")
    recheck: RecheckReport | None = Field(None, description="Second-run stability, when requested.")
