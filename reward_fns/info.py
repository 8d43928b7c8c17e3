"""``RewardInfo``: the per-sample record every reward path returns, with the same keys every time.

veRL stacks the reward-info dicts of a batch key by key (``reward_extra_info``), so every sample
must carry the same keys (docs/verl.md, "The reward function"); numbers may be ``None`` where a stage did
not run, and veRL's validation metrics skip ``None`` and strings. The key ``reward`` is avoided on
purpose: veRL's validation code appends its own "reward" list to the same dict. The evaluator's
timing receipt is flattened into ``receipt_*`` strings (one scalar per key, as veRL stacks them).
"""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field

from cuda_agent.sandbox_pool.harness.models import Speed

INFRA_FAILURE_SCORE = 0.0
"""The score carried by an infrastructure failure; the sample is excluded from the update anyway."""


class RewardInfo(Speed):
    """Reward and evaluation summary of one sample (the times and speed-ups: ``Speed``)."""

    model_config = ConfigDict(extra="forbid")

    score: float = Field(description="The reward veRL trains on (0.0 for an infrastructure failure, then masked).")
    kernel_reward: float | None = Field(description="The schedule's reward; None on infrastructure failure.")
    reward_kind: str = Field(description="Schedule used: robust or speedup.")
    infra_failure: bool = Field(description="The evaluator, not the candidate, failed: leave the sample out.")
    status: str = Field(description="EvalStatus value of the evaluation.")
    compiled: bool | None = Field(None, description="Compile succeeded; None if not reached.")
    correct: bool | None = Field(None, description="Correctness checks passed; None if not reached.")
    violation: bool = Field(False, description="An anti-hacking rule was broken.")
    faster_than_eager: bool | None = Field(None, description="b(t, t_eager) with the margin in force.")
    faster_than_compile: bool | None = Field(None, description="b(t, t_compile) with the margin in force.")
    precision_policy: str = Field(description="Precision policy in force.")
    device: str = Field(description="Device evaluated on.")
    task_id: str = Field("", description="Task identifier, '' if unknown.")
    error: str = Field("", description="Short reason for a non-ok status, '' if none.")
    eval_wall_s: float | None = Field(None, description="Wall time of the evaluation.")
    receipt_device_name: str = Field("", description="Timing receipt: CPU model or GPU name measured on.")
    receipt_driver: str = Field("", description="Timing receipt: CUDA driver version or 'n/a'.")
    receipt_torch_version: str = Field("", description="Timing receipt: torch version of the harness.")
    receipt_toolchain: str = Field("", description="Timing receipt: compiler that built the candidate.")
    receipt_problem_sha256: str = Field("", description="Timing receipt: hash of the reference source.")
    receipt_candidate_sha256: str = Field("", description="Timing receipt: hash of the candidate's files.")
    receipt_harness_version: str = Field("", description="Timing receipt: evaluation protocol version.")
    receipt_isolation: str = Field("", description="Timing receipt: how the candidate process was isolated.")

    def to_extra_info(self) -> dict[str, Any]:
        """Plain JSON-able dict: ``compute_score``'s return value and the agent loop's reward_extra_info."""
        return self.model_dump(mode="json")
