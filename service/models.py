"""Wire models of the reward service: what each route accepts and answers.

``POST /get_reward`` follows OpenRLHF's remote reward (its ``SingleTurnAgentExecutor``
posts ``{"query": [...], "prompts": [...], "labels": [...]}`` and reads ``rewards``,
``scores`` and ``extra_logs`` from the answer; each ``extra_logs`` value becomes a tensor, so
they are lists of numbers, one per query). ``POST /v1/evaluate`` takes evaluation jobs and
answers the evaluator's full results, timing receipt included.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from cuda_agent.sandbox_pool.harness.models import EvalJob, EvalResult


class RewardRequest(BaseModel):
    """OpenRLHF's remote-reward request: one entry per sample in each list."""

    model_config = ConfigDict(extra="forbid")

    query: list[str] = Field(description="Decoded prompt + response of each sample (OpenRLHF's `query`).")
    prompts: list[str] | None = Field(None, description="The prompt of each sample; stripped from its query.")
    labels: list[Any] = Field(description="Task of each sample: a task id of --tasks, or the row's "
                              "reward_model / extra_info object.")


class RewardResponse(BaseModel):
    """OpenRLHF's remote-reward answer, plus the full per-sample record."""

    model_config = ConfigDict(extra="forbid")

    rewards: list[float] = Field(description="The reward of each sample (robust -1/1/2/3 or speed-up).")
    scores: list[float] = Field(description="The same numbers (OpenRLHF's dynamic filtering reads `scores`).")
    extra_logs: dict[str, list[float]] = Field(description="Numeric per-sample logs OpenRLHF turns into tensors.")
    infos: list[dict[str, Any]] = Field(description="RewardInfo of each sample: status, times, timing receipt.")


class EvaluateRequest(BaseModel):
    """One or many evaluation jobs (a bare job object is accepted too: a batch of one)."""

    model_config = ConfigDict(extra="forbid")

    jobs: list[EvalJob] = Field(description="Evaluation jobs: problem source, candidate files, device, options.")
    priority: int = Field(0, description="Higher is served first by the pool.")


class EvaluateResponse(BaseModel):
    """The evaluator's result of each job, in order."""

    model_config = ConfigDict(extra="forbid")

    results: list[EvalResult] = Field(description="Full results: verdict, stages, timings, timing receipt.")


class ErrorBody(BaseModel):
    """Every 4xx / 5xx answer."""

    model_config = ConfigDict(extra="forbid")

    error: str = Field(description="Machine-readable kind: bad_request, unauthorized, too_large, overloaded, ...")
    message: str = Field(description="One line saying what was wrong and what to do.")
    request_id: str = Field(description="The X-Request-ID of the request.")
