"""One record of the catalogue of defences: a refused capability, where it is enforced, how it is tested."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Stage = Literal["static", "expanded", "compile", "symbols", "turns", "isolation", "verify", "approximation",
                "precision", "judging", "protocol", "profile", "reward"]

STAGE_DOCS: dict[str, str] = {
    "static": "harness.md#static",
    "expanded": "harness.md#expanded",
    "compile": "harness.md#compile",
    "symbols": "harness.md#symbols",
    "turns": "harness.md#turns",
    "isolation": "harness.md#process-model",
    "verify": "harness.md#verify",
    "approximation": "harness.md#approximation-defence",
    "precision": "harness.md#precision-policies",
    "judging": "harness.md#judging",
    "protocol": "harness.md#protocol",
    "profile": "harness.md#profile",
    "reward": "harness.md#reward",
}
"""Where docs/ explains each stage (relative to docs/)."""

ENFORCER_ROOT = "cuda_agent.sandbox_pool.harness"
"""`Defence.enforced_by` names are relative to this package."""


class Defence(BaseModel):
    """A capability a candidate is refused, and everything a reviewer needs to audit it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=r"^[a-z][a-z0-9_]*$", description="Stable name; the hack tests' ids start with it.")
    threat: int | None = Field(None, ge=1, le=25, description="The public threat class it answers (the "
                               "taxonomy of KernelBench, Sakana, CUDA-L1/L2, METR: 1-25); None for a class "
                               "this project's red team found.")
    refuses: str = Field(description="What the candidate may not do, one line.")
    rule: str = Field(description="The rule that refuses it, one line.")
    reason: str = Field(description="Why the reward depends on it, one line.")
    stages: tuple[Stage, ...] = Field(min_length=1, description="The harness stages that enforce it.")
    enforced_by: tuple[str, ...] = Field(min_length=1, description=f"Code that enforces it, dotted names under "
                                         f"{ENFORCER_ROOT}.")
    hacks: tuple[str, ...] = Field(description="Tests of cheating candidates that must fail: "
                                   "'tests/<file>.py::<case or test function>'.")
    honest: tuple[str, ...] = Field(min_length=1, description="Tests of honest twins that must pass, same form.")
    untested: str = Field("", description="Why `hacks` is empty, when it is.")
    policy_reasons: tuple[str, ...] = Field((), description="The reasons of policy.py's forbidden source and symbol "
                                            "patterns that this defence owns: their violations name it.")
