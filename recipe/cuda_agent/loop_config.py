"""Typed configuration of the cuda_agent agent loops.

veRL instantiates an agent loop with the keys of its entry in
``actor_rollout_ref.rollout.agent.agent_loop_config_path`` (recipe/cuda_agent/config/agent_loops.yaml);
those keys are validated here once, and the code below never walks ``DictConfig`` paths.
Reward options are not here: both loops read ``reward.custom_reward_function.reward_kwargs``,
the one place the reward function's options live.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from cuda_agent.errors import ConfigError

PACKAGE_DIR = Path(__file__).resolve().parent
DEFAULT_SKILL_PATH = PACKAGE_DIR / "SKILL.md"


class LoopLimits(BaseModel):
    """When a trajectory stops, besides the model ending its turn without a tool call."""

    model_config = ConfigDict(extra="forbid")

    max_turns: int = Field(150, ge=1, description="Assistant turns (paper: 150 training, 200 evaluation).")
    max_total_tokens: int = Field(
        131072, ge=16, description="Prompt + response tokens (paper: 128k); also capped by rollout.response_length."
    )
    max_observation_chars: int = Field(
        16000, ge=64, description="A tool observation longer than this is cut in the middle."
    )
    max_calls_per_turn: int = Field(16, ge=1, description="Tool calls run per assistant turn; the rest are refused.")


class SandboxSpec(BaseModel):
    """Which terminal sandbox backend wraps each trajectory's workspace."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["local", "docker"] = Field("local", description="Backend (sandbox_pool/terminal/).")
    options: dict[str, Any] = Field(default_factory=dict, description="Fields of the backend's config model.")


class CudaAgentLoopConfig(BaseModel):
    """Options of the agentic ``cuda_agent`` loop."""

    model_config = ConfigDict(extra="forbid")

    limits: LoopLimits = Field(default_factory=LoopLimits, description="Turn and length limits.")
    tool_format: str | None = Field(
        None, description="veRL tool parser (hermes, qwen3_coder, ...); None = rollout.multi_turn.format."
    )
    sandbox: SandboxSpec = Field(default_factory=SandboxSpec, description="Terminal sandbox backend.")
    workspace_root: str | None = Field(None, description="Where workspaces are created; None = a temp folder.")
    snapshot_dir: str | None = Field(
        None, description="If set, the final candidate files of each trajectory are saved here for re-scoring."
    )
    skill_path: str = Field(str(DEFAULT_SKILL_PATH), description="SKILL.md put at the head of the system prompt.")
    trajectory_dir: str | None = Field(
        None,
        description="If set, every finished trajectory (training and validation) is written here as a "
        "trajectory record (cuda_agent.recipe.records, one parquet shard each): the input of RFT and value "
        "pre-training.",
    )


def loop_config_from_kwargs(kwargs: Mapping[str, Any]) -> CudaAgentLoopConfig:
    """Validate the agent-loop yaml entry's keys (``name`` and veRL's own extras are dropped)."""
    own = {key: _plain(value) for key, value in kwargs.items() if key not in ("name",)}
    try:
        return CudaAgentLoopConfig.model_validate(own)
    except ValidationError as exc:
        raise ConfigError(f"invalid cuda_agent agent-loop option(s) in agent_loop_config_path: {exc}") from exc


def reward_kwargs_of(trainer_config: Any) -> dict[str, Any]:
    """``reward.custom_reward_function.reward_kwargs`` of the trainer config (a DictConfig), as a plain dict."""
    from omegaconf import OmegaConf

    value = OmegaConf.select(trainer_config, "reward.custom_reward_function.reward_kwargs", default=None)
    return dict(_plain(value) or {})


def _plain(value: Any) -> Any:
    try:  # omegaconf comes with veRL; without it there are no DictConfig values to convert
        from omegaconf import DictConfig, OmegaConf
    except ModuleNotFoundError:
        return value
    if isinstance(value, DictConfig) or OmegaConf.is_list(value):
        return OmegaConf.to_container(value, resolve=True)
    return value
