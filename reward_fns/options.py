"""Typed options of the reward functions and the task a sample carries.

``RewardOptions`` is what ``+reward.custom_reward_function.reward_kwargs.*`` holds (veRL passes
those kwargs to ``compute_score`` on every call); ``TaskSpec`` is the part of a dataset row's
``extra_info`` (``cuda_agent.dataset_row.RowInfo``) that scoring needs. Both are converted once, here; a
typo in an option raises ``ConfigError`` instead of being silently ignored.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from cuda_agent.dataset_row import RowInfo
from cuda_agent.errors import ConfigError
from cuda_agent.reward_fns.robust import DEFAULT_MARGIN
from cuda_agent.sandbox_pool.harness import Device, PrecisionPolicy
from cuda_agent.sandbox_pool.pool.config import ENV_ADDRESS


_VERL_INJECTED_KWARGS = frozenset({"reward_router_address", "reward_model_tokenizer"})
"""Keyword arguments veRL's reward managers add on their own; they are not our options."""


class RewardKind(str, enum.Enum):
    """Which reward schedule turns an evaluation result into a number."""

    ROBUST = "robust"
    """The paper's -1/1/2/3 (reward_fns/robust.py)."""
    SPEEDUP = "speedup"
    """Raw speed-up, for the ablation (reward_fns/speedup.py)."""


class RewardOptions(BaseModel):
    """Options of ``compute_score`` and of the agent loops' final evaluation."""

    model_config = ConfigDict(extra="forbid")

    kind: RewardKind = Field(RewardKind.ROBUST, description="Reward schedule.")
    margin: float = Field(DEFAULT_MARGIN, ge=0, lt=1, description="Relative improvement that counts as faster.")
    speedup_baseline: Literal["eager", "compile"] = Field("eager", description="Baseline of the speedup kind.")
    precision_policy: PrecisionPolicy | None = Field(
        None, description="Overrides the row's extra_info.precision_policy; None = the row's (default paper)."
    )
    device: Device | None = Field(None, description="Overrides the row's extra_info.device; None = the row's.")
    pool_address: str | None = Field(
        None, description="Evaluation pool address; None = $CUDA_AGENT_POOL, and without it an embedded pool."
    )
    embedded_devices: list[int] | None = Field(
        None, description="GPUs an embedded pool may own when no pool is served (cuda). The agentic loop refuses "
        "to start an embedded pool on cuda without them: it would time rewards on the GPUs veRL trains on.",
    )
    window_check: bool = Field(
        False, description="The embedded pool's evaluations refuse a reward timed under a load their cached "
        "baselines were not (infra_error 'machine loaded', excluded from training; harness/window_check.py). A "
        "served pool decides for itself (`cuda-agent pool serve --window-check`).",
    )
    eval_timeout_s: float = Field(1800.0, gt=0, description="Limit of one evaluation, queueing included.")
    correctness_trials: int | None = Field(None, ge=1, description="Overrides EvalOptions.correctness_trials.")
    checked_timed_calls: int | None = Field(
        None, ge=1, description="Overrides EvalOptions.checked_timed_calls (10 of the 30 timed outputs, chosen at "
        "random and secret); 30 or more checks every one.")
    workspace_snapshot: str | None = Field(
        None, description="Re-score this saved workspace folder instead of parsing the answer."
    )

    @classmethod
    def from_kwargs(cls, kwargs: Mapping[str, Any]) -> RewardOptions:
        """Options from ``compute_score``'s keyword arguments (veRL's own extras are dropped)."""
        own = {key: value for key, value in kwargs.items() if key not in _VERL_INJECTED_KWARGS}
        try:
            return cls.model_validate(own)
        except ValidationError as exc:
            raise ConfigError(
                f"invalid reward option(s) in reward.custom_reward_function.reward_kwargs: {exc}"
            ) from exc

    def resolved_pool_address(self) -> str | None:
        """The pool to use: the option, else $CUDA_AGENT_POOL, else None (an embedded pool)."""
        return self.pool_address or os.environ.get(ENV_ADDRESS) or None


class TaskSpec(BaseModel):
    """The trusted task of one sample, from its ``extra_info``."""

    model_config = ConfigDict(extra="forbid")

    task_id: str | None = Field(None, description="Task identifier (logged).")
    problem_src: str = Field(description="Reference model.py source.")
    device: Device = Field(description="Where the kernels compile and run.")
    precision_policy: PrecisionPolicy = Field(PrecisionPolicy.PAPER, description="Precision policy.")

    @classmethod
    def from_extra_info(cls, extra_info: Mapping[str, Any] | None, options: RewardOptions) -> TaskSpec:
        """Read the task from a row's extra_info; options override device and precision policy."""
        return cls.from_row(RowInfo.read(extra_info), options)

    @classmethod
    def from_row(cls, info: RowInfo, options: RewardOptions) -> TaskSpec:
        """The task of a row already read (``RowInfo.read``); options override device and precision policy."""
        if not info.problem_src:
            raise ConfigError(
                "extra_info.problem_src is missing: every cuda_agent row must carry the reference model.py "
                "text (see docs/verl.md, 'Dataset contract')"
            )
        device = options.device or info.device
        if device is None:
            raise ConfigError(
                "extra_info.device is missing and no reward_kwargs.device is set: say 'cuda' or 'cpu'"
            )
        return cls(task_id=info.task_id, problem_src=info.problem_src, device=device,
                   precision_policy=options.precision_policy or info.policy)
