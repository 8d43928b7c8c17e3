"""One implementation of an agent turn, shared by the veRL loop and the standalone runner.

A trajectory is: generate -> parse tool calls -> run them in order -> observe, until the model
stops calling tools, the turn limit or the context budget is hit (docs/verl.md, "The agentic
loop"). What differs between training and evaluation is only how a turn is generated and
how an observation is appended: token-level through veRL's server manager (agent_loop.py) or as
chat messages over HTTP (cuda_agent.evaluation.chat_policy). That difference is a ``Policy``;
everything else — limits, the order calls run in, refused calls, observation truncation, the
metrics, stop reasons, infrastructure failures and the final evaluation — is here, once.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from uuid import uuid4

from cuda_agent.errors import InfraError, PoolError, SandboxError, WorkspaceError
from cuda_agent.recipe.environment import Observation, TrajectoryEnvironment, save_snapshot
from cuda_agent.recipe.loop_config import LoopLimits
from cuda_agent.recipe.metrics import StopReason, TrajectoryMetrics
from cuda_agent.recipe.tool_calls import ParsedCall
from cuda_agent.recipe.trajectory import truncate_middle
from cuda_agent.reward_fns.evaluation import infra_failure_result
from cuda_agent.reward_fns.info import RewardInfo
from cuda_agent.reward_fns.options import RewardOptions, TaskSpec
from cuda_agent.reward_fns.scoring import build_job, evaluate_files, no_answer_result, reward_info
from cuda_agent.sandbox_pool.harness import EvalResult

logger = logging.getLogger(__name__)

INFRA_ERRORS = (SandboxError, InfraError, PoolError)
"""Failures of the environment, not of the model: the trajectory is excluded from training."""


@dataclass
class GeneratedTurn:
    """What a policy produced for one assistant turn."""

    message: dict[str, Any]
    """The assistant message as it joins the conversation (the policy's own wire format)."""
    calls: list[ParsedCall]
    """The turn's tool calls in order, refused ones (``error`` set) included."""
    exhausted: bool = False
    """No room is left for another generation (length or context budget)."""


class Policy(Protocol):
    """How turns are generated and observations appended (token-level or chat messages)."""

    async def generate(self, messages: list[dict[str, Any]]) -> GeneratedTurn:
        """The next assistant turn, given the conversation so far."""
        ...

    async def observe(self, messages: list[dict[str, Any]], tool_messages: list[dict[str, Any]]) -> bool:
        """Account for the observations; False if they would leave no room for another generation."""
        ...


@dataclass
class Episode:
    """The generate / act / observe loop of one trajectory."""

    env: TrajectoryEnvironment
    policy: Policy
    limits: LoopLimits
    metrics: TrajectoryMetrics
    request_id: str = field(default_factory=lambda: uuid4().hex)
    infra_error: BaseException | None = None
    """The infrastructure failure that ended the trajectory, if any."""
    observation_turns: int = 0

    async def run(self, messages: list[dict[str, Any]]) -> str:
        """Drive the conversation in place; returns (and records) the StopReason."""
        self.metrics.stop_reason = await self._turns(messages)
        return self.metrics.stop_reason

    async def _turns(self, messages: list[dict[str, Any]]) -> str:
        while True:
            with self.metrics.timer("generation_s"):
                turn = await self.policy.generate(messages)
            self.metrics.turns += 1
            messages.append(turn.message)
            if turn.exhausted:
                return StopReason.LENGTH_LIMIT
            if not turn.calls:
                return StopReason.MODEL_DONE
            if self.metrics.turns >= self.limits.max_turns:
                return StopReason.TURN_LIMIT
            try:
                observations = await self.act(turn.calls)
            except INFRA_ERRORS as exc:
                logger.warning("trajectory %s lost its environment: %r", self.request_id, exc)
                self.infra_error = exc
                return StopReason.INFRA_FAILURE
            tool_messages = [tool_message(call, text) for call, text in zip(turn.calls, observations, strict=True)]
            if not await self.policy.observe(messages, tool_messages):
                return StopReason.LENGTH_LIMIT
            messages.extend(tool_messages)
            self.observation_turns += 1

    async def act(self, calls: list[ParsedCall]) -> list[str]:
        """Run the turn's calls in order (a later call may depend on an earlier one)."""
        results = []
        with self.metrics.timer("tools_s"):
            for index, call in enumerate(calls):
                observation = await self._run_call(call, index)
                refused = call.error is not None or index >= self.limits.max_calls_per_turn
                self.metrics.record_call(
                    call.name, call.arguments, is_error=observation.is_error, refused=refused,
                    exit_code=observation.exit_code,
                )
                results.append(truncate_middle(observation.text, self.limits.max_observation_chars))
        return results

    async def _run_call(self, call: ParsedCall, index: int) -> Observation:
        if call.error is not None:
            return Observation(text=call.error, is_error=True)
        if index >= self.limits.max_calls_per_turn:
            limit = self.limits.max_calls_per_turn
            return Observation(text=f"Not run: at most {limit} tool calls per turn.", is_error=True)
        return await self.env.call(call.name, call.arguments or {})


@dataclass
class Verdict:
    """The final evaluation of a trajectory: its reward record and, when it ran, the evaluator's result."""

    info: RewardInfo
    result: EvalResult | None = None


def infra_verdict(task: TaskSpec, options: RewardOptions, exc: BaseException) -> Verdict:
    """The verdict of a trajectory whose environment or evaluation machinery failed."""
    result = infra_failure_result(build_job({}, task, options), exc)
    return Verdict(reward_info(result, options, task.task_id), result)


async def evaluate_workspace(
    env: TrajectoryEnvironment,
    task: TaskSpec,
    options: RewardOptions,
    metrics: TrajectoryMetrics,
    snapshot_dir: str | None = None,
) -> Verdict:
    """Score the final workspace (the trusted evaluator sees only the candidate files)."""
    with metrics.timer("evaluation_s"):
        try:
            files = await env.candidate_files()
        except WorkspaceError as exc:  # the candidate's own files are unusable: its failure
            result = no_answer_result(task, str(exc))
            return Verdict(reward_info(result, options, task.task_id), result)
        except INFRA_ERRORS as exc:
            metrics.stop_reason = StopReason.INFRA_FAILURE
            return infra_verdict(task, options, exc)
        if snapshot_dir:
            await save_snapshot(files, Path(snapshot_dir) / (task.task_id or "task") / uuid4().hex)
        result = await evaluate_files(files, task, options)
        return Verdict(reward_info(result, options, task.task_id), result)


def assistant_message(content: str, calls: list[ParsedCall]) -> dict[str, Any]:
    """An assistant turn as the chat template sees it (runnable calls only, arguments as objects)."""
    message: dict[str, Any] = {"role": "assistant", "content": content or ""}
    runnable = [call for call in calls if call.arguments is not None]
    if runnable:
        message["tool_calls"] = [
            {"type": "function", "function": {"name": call.name, "arguments": call.arguments}}
            | ({"id": call.call_id} if call.call_id else {})
            for call in runnable
        ]
    return message


def tool_message(call: ParsedCall, text: str) -> dict[str, Any]:
    """The observation of one call."""
    message: dict[str, Any] = {"role": "tool", "content": text}
    if call.name:
        message["name"] = call.name
    if call.call_id:
        message["tool_call_id"] = call.call_id
    return message
