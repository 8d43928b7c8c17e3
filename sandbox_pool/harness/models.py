"""Typed boundary of the trusted evaluation harness: jobs in, results out.

`EvalJob` is what a client (CLI, pool, reward function, agent loop) submits; `EvalResult`
is the one record that comes back, with every stage's outcome. `EvalResult.to_public_json()`
is the exact object printed by ``cuda-agent eval --json`` (docs/harness.md).
"""

from __future__ import annotations

import enum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Device = Literal["cpu", "cuda"]

DEFAULT_TIMED_CALLS = 30
"""Timed calls per timed subject, the one default of every path (`cuda-agent eval`, the skill
scripts' profiling, quickstart, the reward functions, the pool): results and cached baselines
of different paths are then the same measurement."""


class PrecisionPolicy(str, enum.Enum):
    """How baselines are timed and how strictly outputs are compared (docs/harness.md, "Precision policies")."""

    PAPER = "paper"
    """Baselines in FP32 with TF32 off; candidate free to use TF32 / lower internal precision within tolerance."""
    MATCHED = "matched"
    """Baselines timed with TF32 allowed."""
    STRICT = "strict"
    """atol = rtol = 1e-4."""


class EvalStatus(str, enum.Enum):
    """Verdict of one evaluation. Set where it happens, never inferred from message text."""

    OK = "ok"
    STATIC_CHECK_FAILED = "static_check_failed"
    COMPILE_ERROR = "compile_error"
    LOAD_ERROR = "load_error"
    INCORRECT = "incorrect"
    VIOLATION = "violation"
    TIMEOUT = "timeout"
    CRASH = "crash"
    INFRA_ERROR = "infra_error"

    @property
    def is_candidate_failure(self) -> bool:
        """True for every verdict that is the candidate's fault (scored -1)."""
        return self not in (EvalStatus.OK, EvalStatus.INFRA_ERROR)


class EvalOptions(BaseModel):
    """Knobs of one evaluation. Defaults follow the paper / KernelBench protocol."""

    model_config = ConfigDict(extra="forbid")

    precision_policy: PrecisionPolicy = Field(PrecisionPolicy.PAPER, description="Precision policy (docs/harness.md).")
    atol: float | None = Field(None, description="Absolute tolerance; None = the policy's default (1e-2, strict 1e-4).")
    rtol: float | None = Field(None, description="Relative tolerance; None = the policy's default.")
    correctness_trials: int = Field(7, ge=1, le=50, description="Input draws checked for correctness: native, then "
                                    "spikes, ramp, row_col, heavy_tailed, affine, few_spikes in turn (harness/inputs.py).")
    influence_checks: int = Field(1, ge=0, le=8, description="Influence twins: extra trials that exchange the values "
                                  "at random positions of an i.i.d.-looking draw; the candidate's output must move "
                                  "as the reference's does (compare.influence_mismatch).")
    timed_influence_checks: int = Field(2, ge=0, le=8, description="Influence twins among the timed calls: a timed "
                                        "call whose draw is an earlier one's with values exchanged, both checked at "
                                        "the same positions, chosen at random and never revealed (a kernel that "
                                        "approximates once verification is over meets the same rule while timed).")
    profile: bool = Field(True, description="Time the candidate and the baselines after verification.")
    timed_calls: int = Field(DEFAULT_TIMED_CALLS, ge=3, le=1000, description="Timed calls, each on inputs never seen before (drawn by the child, outside the timed window).")
    checked_timed_calls: int | None = Field(
        10, ge=1, le=1000, description="Timed calls whose outputs are checked against the reference (at positions "
        "revealed only after each call), chosen at random per evaluation and never revealed; every call reports its "
        "output, so a checked call and an unchecked one look the same from inside. The runtime is the median of all "
        "the timed calls, so a kernel must return faster, wrong outputs on about half of them to move it, and one "
        "that does so on m of 30 calls escapes 10 checks with probability C(30-m, 10) / C(30, 10) (m = 15: 1e-4, "
        "m = 8: 2%, without moving the median). Each checked call costs one reference run. None = every call.")
    refresh_baselines: bool = Field(False, description="Measure the eager and torch.compile baselines again instead of "
                                    "using the cached ones (the new measurement replaces the cache entry).")
    warmup_calls: int = Field(3, ge=1, le=100, description="Untimed calls before timing.")
    seed: int | None = Field(None, description="Seed of the input draws; None = fresh per evaluation.")
    compile_timeout_s: float = Field(300.0, gt=0, description="Limit of the candidate's compile.")
    run_timeout_s: float = Field(300.0, gt=0, description="Limit of the candidate process (load + verify + time).")
    reward_margin: float = Field(0.05, ge=0, lt=1, description="Required relative improvement for 'faster' (paper: 5%).")
    speedup_sanity_bound: float = Field(1000.0, gt=1, description="A speed-up above this is flagged as a violation.")

    @property
    def tolerance_follows_scale(self) -> bool:
        """Whether each input draw's atol keeps the native draw's ratio to the outputs' magnitude
        (`compare.draw_atol`): under `paper` and `matched`, so lower internal precision (TF32, fp16 inputs) is
        judged alike on every draw; `strict` keeps one fixed atol."""
        return self.precision_policy is not PrecisionPolicy.STRICT

    def tolerances(self) -> tuple[float, float]:
        """(atol, rtol) after applying the policy's defaults."""
        default = 1e-4 if self.precision_policy is PrecisionPolicy.STRICT else 1e-2
        return (self.atol if self.atol is not None else default, self.rtol if self.rtol is not None else default)


class EvalJob(BaseModel):
    """One evaluation request: the candidate's sources plus the trusted reference problem."""

    model_config = ConfigDict(extra="forbid")

    problem_src: str = Field(description="Reference model.py source (trusted: comes from the task, not the workspace).")
    files: dict[str, str] = Field(description="Candidate files by relative path: model_new.py and kernels/*.")
    device: Device = Field("cpu", description="Where kernels compile for and run.")
    options: EvalOptions = Field(default_factory=EvalOptions, description="Evaluation knobs.")
    task_id: str | None = Field(None, description="Caller's task identifier (logged, not trusted).")


class StageOutcome(BaseModel):
    """What one stage did."""

    model_config = ConfigDict(extra="forbid")

    ran: bool = Field(False, description="Whether the stage ran.")
    ok: bool | None = Field(None, description="Whether it passed; None if it did not run.")
    duration_s: float | None = Field(None, description="Wall time of the stage.")
    started_s: float | None = Field(
        None, description="When the stage began, seconds after the evaluator took the job (negative: before, e.g. "
        "the compile the one-shot path starts first); None when unknown (a build made elsewhere).")
    log: str = Field("", description="Truncated log (compiler errors, mismatch report, ...).")
    cached: bool = Field(False, description="Served from a cache (compile, baselines).")


class TimingStats(BaseModel):
    """Per-call times of one timed subject, microseconds."""

    model_config = ConfigDict(extra="forbid")

    median_us: float = Field(description="Median per-call time.")
    mean_us: float = Field(description="Mean per-call time.")
    std_us: float = Field(description="Standard deviation.")
    min_us: float = Field(description="Fastest call.")
    max_us: float = Field(description="Slowest call.")
    samples_us: list[float] = Field(default_factory=list, description="Every timed call, in order.")
    ci_low_us: float | None = Field(None, description="Lower end of the median's 95% confidence interval "
                                    "(distribution-free, from order statistics).")
    ci_high_us: float | None = Field(None, description="Upper end of the median's 95% confidence interval.")


class Receipt(BaseModel):
    """What the result was measured on and with."""

    model_config = ConfigDict(extra="forbid")

    device_name: str = Field("", description="CPU model or GPU name.")
    driver: str = Field("", description="CUDA driver version or 'n/a'.")
    torch_version: str = Field("", description="torch.__version__ of the harness.")
    toolchain: str = Field("", description="Compiler identification used for the candidate.")
    problem_sha256: str = Field("", description="Hash of the reference source.")
    candidate_sha256: str = Field("", description="Hash of the candidate's files.")
    harness_version: str = Field("", description="Version of the evaluation protocol.")
    isolation: str = Field("", description="How the candidate process was isolated.")
    seed: int | None = Field(None, description="Seed of the input draws.")


class Speed(BaseModel):
    """The measured medians and speed-ups, as every record of an evaluation carries them (EvalResult, the
    reward's RewardInfo, a run's RunResult): one definition, copied from record to record with ``speed()``."""

    runtime_us: float | None = Field(None, description="Candidate median time per call.")
    eager_us: float | None = Field(None, description="Reference eager median time per call.")
    torch_compile_us: float | None = Field(None, description="Reference torch.compile median time per call.")
    speedup_vs_eager: float | None = Field(None, description="eager_us / runtime_us.")
    speedup_vs_compile: float | None = Field(None, description="torch_compile_us / runtime_us.")

    def speed(self) -> dict[str, float | None]:
        """These fields alone, to build another record from."""
        return {name: getattr(self, name) for name in Speed.model_fields}


class EvalResult(Speed):
    """The one record of an evaluation."""

    model_config = ConfigDict(extra="forbid")

    status: EvalStatus = Field(description="Verdict.")
    compiled: bool | None = Field(None, description="Compile succeeded; None if not reached.")
    correct: bool | None = Field(None, description="All correctness checks passed; None if not reached.")
    reward: float | None = Field(None, description="Robust reward -1/1/2/3; None on infrastructure failure.")
    violations: list[str] = Field(default_factory=list, description="Anti-hacking rules the candidate broke.")
    error: str | None = Field(None, description="Short human-readable reason for a non-ok status.")
    precision_policy: PrecisionPolicy = Field(PrecisionPolicy.PAPER, description="Policy in force.")
    device: Device = Field("cpu", description="Device evaluated on.")
    stages: dict[str, StageOutcome] = Field(default_factory=dict, description="static_check, compile, verify, profile.")
    timings: dict[str, TimingStats] = Field(default_factory=dict, description="candidate, eager, torch_compile.")
    receipt: Receipt = Field(default_factory=Receipt, description="Measurement provenance.")
    wall_s: float | None = Field(None, description="Wall time of the whole evaluation.")
    warnings: list[str] = Field(default_factory=list, description="Things the caller should know that did not "
                                "change the verdict (e.g. a baseline whose confidence interval stayed wide).")

    @property
    def is_infra_failure(self) -> bool:
        """True when the harness, not the candidate, failed."""
        return self.status is EvalStatus.INFRA_ERROR

    def to_public_json(self) -> dict:
        """The JSON object of ``cuda-agent eval --json`` (docs/harness.md), keys always present."""
        return {
            "status": self.status.value,
            "compiled": self.compiled,
            "correct": self.correct,
            "reward": self.reward,
            "runtime_us": self.runtime_us,
            "eager_us": self.eager_us,
            "torch_compile_us": self.torch_compile_us,
            "speedup_vs_eager": self.speedup_vs_eager,
            "speedup_vs_compile": self.speedup_vs_compile,
            "violations": list(self.violations),
            "warnings": list(self.warnings),
            "error": self.error,
            "precision_policy": self.precision_policy.value,
            "log": self.failed_stage_log(),
            "receipt": self.receipt.model_dump(mode="json"),
            "wall_s": self.wall_s,
        }

    def failed_stage_log(self) -> str:
        """The whole (truncated) log of the first stage that failed, e.g. the compiler's errors; '' if none."""
        for stage in self.stages.values():
            if stage.ran and stage.ok is False and stage.log:
                return stage.log
        return ""
