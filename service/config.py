"""Configuration of the reward service: where it listens, what it admits, which pool it uses."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from cuda_agent.reward_fns.options import RewardKind
from cuda_agent.service import TOKEN_ENV


class ServiceConfig(BaseModel):
    """Everything ``cuda-agent serve-reward`` configures."""

    model_config = ConfigDict(extra="forbid")

    host: str = Field("127.0.0.1", description="Interface to bind; a non-loopback one needs a token.")
    port: int = Field(8000, ge=0, le=65535, description="TCP port; 0 picks a free one (printed at start).")
    device: Literal["cpu", "cuda"] = Field("cuda", description="Device the evaluations run on (overrides the rows').")
    pool_address: str | None = Field(
        None, description="Evaluation pool to use (socket path or ray://NAME); None = an embedded local pool.")
    cpu_workers: int = Field(1, ge=1, le=64, description="Evaluation workers of the embedded pool on cpu.")
    tasks: list[Path] = Field(default_factory=list, description="veRL parquet datasets whose tasks labels name.")
    token: str | None = Field(None, repr=False, description="Bearer token required on every route but /health.")
    allow_no_auth: bool = Field(False, description="Serve a non-loopback interface without a token (unsafe).")
    max_body_bytes: int = Field(16 * 2**20, ge=1024, description="Largest request body accepted (413 beyond).")
    max_batch: int = Field(256, ge=1, description="Most queries / jobs in one request (413 beyond).")
    max_in_flight: int = Field(
        256, ge=1, description="Evaluations admitted and not answered, all requests together; a request that "
        "would exceed it is answered 503 with Retry-After.")
    retry_after_s: int = Field(5, ge=1, description="Retry-After of a 503 answer, seconds.")
    eval_timeout_s: float = Field(1800.0, gt=0, description="Limit of one evaluation, queueing included.")
    reward_kind: RewardKind = Field(RewardKind.ROBUST, description="Reward schedule of /get_reward.")
    margin: float = Field(0.05, ge=0, lt=1, description="Relative improvement that counts as faster.")

    @model_validator(mode="after")
    def _check(self) -> "ServiceConfig":
        if self.max_batch > self.max_in_flight:
            raise ValueError(f"max_batch ({self.max_batch}) cannot exceed max_in_flight ({self.max_in_flight})")
        if not self.token and not self.allow_no_auth and not is_loopback(self.host):
            raise ValueError(f"binding {self.host} without a token exposes the evaluator; set a token "
                             f"(${TOKEN_ENV}) or bind 127.0.0.1")
        return self


def is_loopback(host: str) -> bool:
    """Whether `host` is only reachable from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
