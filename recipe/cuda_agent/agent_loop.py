"""The agentic ``cuda_agent`` loop: a ReAct trajectory in a sandboxed workspace, scored at the end.

Per trajectory (DESIGN.md, "The flow of one trajectory"): read the task from ``extra_info``,
open a workspace and a terminal sandbox, prompt with SKILL.md + task + our raw tool schemas,
then generate -> parse tool calls -> run them in order -> append observations (mask 0) until
the model stops calling tools, the turn limit or the length budget is hit. The final workspace
is evaluated and its reward becomes ``reward_score`` (veRL then skips compute_score). The
sandbox is released on every exit path.

Options come from this loop's entry in ``agent_loop_config_path`` (config/agent_loops.yaml);
reward options from ``reward.custom_reward_function.reward_kwargs``. veRL 0.9.1 does not tell an
agent loop whether it runs for validation, so the evaluation turn limit (200) is given per row
(``extra_info.max_turns``) or by a loop entry for evaluation runs.
"""

from __future__ import annotations

import logging
from functools import lru_cache
from pathlib import Path
from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register
from verl.experimental.agent_loop.tool_parser import ToolParser

from cuda_agent.errors import ConfigError, InfraError, PoolError, SandboxError, WorkspaceError
from cuda_agent.recipe.environment import (
    Observation,
    TrajectoryEnvironment,
    open_environment,
    save_snapshot,
    tool_schemas,
)
from cuda_agent.recipe.loop_config import LoopLimits, loop_config_from_kwargs, reward_kwargs_of
from cuda_agent.recipe.metrics import StopReason, TrajectoryMetrics
from cuda_agent.recipe.outputs import build_output
from cuda_agent.recipe.prompt import build_messages, load_skill
from cuda_agent.recipe.tool_calls import ParsedCall, ToolCallExtractor
from cuda_agent.recipe.trajectory import TokenTrajectory, response_limit, truncate_middle
from cuda_agent.reward_fns.evaluation import infra_failure_result
from cuda_agent.reward_fns.info import RewardInfo
from cuda_agent.reward_fns.options import RewardOptions, TaskSpec
from cuda_agent.reward_fns.scoring import build_job, no_answer_result, reward_info, score_files

logger = logging.getLogger(__name__)

AGENT_NAME = "cuda_agent"

_INFRA_ERRORS = (SandboxError, InfraError, PoolError)
"""Failures of the environment, not of the model: the trajectory is excluded from training."""


@lru_cache(maxsize=8)
def _skill_text(path: str) -> str:
    return load_skill(path)


@register(AGENT_NAME)
class CudaAgentLoop(AgentLoopBase):
    """veRL agent loop for CUDA-kernel optimisation tasks (registered as ``cuda_agent``)."""

    def __init__(
        self,
        trainer_config,
        server_manager,
        tokenizer,
        processor,
        dataset_cls,
        data_config,
        hf_model_type: str | None = None,
        tools: Any = None,
        **options: Any,
    ):
        super().__init__(
            trainer_config, server_manager, tokenizer, processor, dataset_cls, data_config, hf_model_type=hf_model_type
        )
        del tools  # veRL's BaseTool list; our tools are per-trajectory sessions (environment.py)
        self.options = loop_config_from_kwargs(options)
        self.tool_format = self.options.tool_format or self.rollout_config.multi_turn.format
        self.reward_options = RewardOptions.from_kwargs(reward_kwargs_of(self.config))

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        extra_info = dict(kwargs.get("extra_info") or {})
        task = TaskSpec.from_extra_info(extra_info, self.reward_options)
        limits = self._limits(extra_info)
        schemas = tool_schemas()
        messages = build_messages(kwargs["raw_prompt"], _skill_text(self.options.skill_path), task)
        metrics = TrajectoryMetrics()
        pool_address = self.reward_options.resolved_pool_address()
        async with open_environment(task, self.options, pool_address) as env:
            episode = _Episode(self, env, task, schemas, limits, metrics)
            trajectory = await episode.rollout(messages, sampling_params)
            info = episode.infra_info if episode.infra_info is not None else await self._evaluate(env, task, metrics)
        names = [schema["function"]["name"] for schema in schemas]
        return build_output(
            trajectory,
            score=info.score,
            exclude=info.infra_failure,
            reward_extra_info={**info.to_extra_info(), **metrics.to_extra_info(names)},
            metrics=metrics.agent_loop_metrics(),
            num_turns=1 + metrics.turns + episode.observation_turns,  # prompt, assistant and tool turns
        )

    def _limits(self, extra_info: dict[str, Any]) -> LoopLimits:
        override = extra_info.get("max_turns")
        if override is None:
            return self.options.limits
        return self.options.limits.model_copy(update={"max_turns": int(override)})

    async def _evaluate(self, env: TrajectoryEnvironment, task: TaskSpec, metrics: TrajectoryMetrics) -> RewardInfo:
        with metrics.timer("evaluation_s"):
            try:
                files = await env.candidate_files()
            except WorkspaceError as exc:  # the candidate's own files are unusable: its failure
                return reward_info(no_answer_result(task, str(exc)), self.reward_options, task.task_id)
            except _INFRA_ERRORS as exc:
                metrics.stop_reason = StopReason.INFRA_FAILURE
                return _infra_info(task, self.reward_options, exc)
            if self.options.snapshot_dir:
                folder = Path(self.options.snapshot_dir) / (task.task_id or "task") / uuid4().hex
                await save_snapshot(files, folder)
            return await score_files(files, task, self.reward_options)


def _infra_info(task: TaskSpec, options: RewardOptions, exc: BaseException) -> RewardInfo:
    job = build_job({}, task, options)
    return reward_info(infra_failure_result(job, exc), options, task.task_id)


class _Episode:
    """The generate / act loop of one trajectory."""

    def __init__(
        self,
        loop: CudaAgentLoop,
        env: TrajectoryEnvironment,
        task: TaskSpec,
        schemas: list[dict[str, Any]],
        limits: LoopLimits,
        metrics: TrajectoryMetrics,
    ):
        self.loop = loop
        self.env = env
        self.task = task
        self.schemas = schemas
        self.limits = limits
        self.metrics = metrics
        self.extractor = ToolCallExtractor(ToolParser.get_tool_parser(loop.tool_format, loop.tokenizer), schemas)
        self.request_id = uuid4().hex
        self.infra_info: RewardInfo | None = None
        self.observation_turns = 0

    async def rollout(self, messages: list[dict[str, Any]], sampling_params: dict[str, Any]) -> TokenTrajectory:
        prompt_ids = await self.loop.ct_build_initial_tokens(messages, tools=self.schemas)
        limit = response_limit(
            len(prompt_ids), self.loop.rollout_config.response_length, self.limits.max_total_tokens
        )
        if limit < 1:
            raise ConfigError(
                f"the prompt ({len(prompt_ids)} tokens) leaves no room under max_total_tokens="
                f"{self.limits.max_total_tokens}; raise it or shorten SKILL.md"
            )
        trajectory = TokenTrajectory(prompt_ids=prompt_ids, response_limit=limit)
        self.metrics.stop_reason = await self._turns(trajectory, messages, sampling_params)
        self.metrics.response_tokens = trajectory.response_length
        return trajectory

    async def _turns(self, trajectory: TokenTrajectory, messages: list, sampling_params: dict[str, Any]) -> str:
        while True:
            calls = await self._generate(trajectory, messages, sampling_params)
            if trajectory.remaining <= 0:
                return StopReason.LENGTH_LIMIT
            if not calls:
                return StopReason.MODEL_DONE
            if self.metrics.turns >= self.limits.max_turns:
                return StopReason.TURN_LIMIT
            try:
                observations = await self._act(calls)
            except _INFRA_ERRORS as exc:
                logger.warning("trajectory %s lost its environment: %r", self.request_id, exc)
                self.infra_info = _infra_info(self.task, self.loop.reward_options, exc)
                return StopReason.INFRA_FAILURE
            if not await self._observe(trajectory, messages, calls, observations):
                return StopReason.LENGTH_LIMIT

    async def _generate(self, trajectory: TokenTrajectory, messages: list, sampling_params: dict) -> list[ParsedCall]:
        params = {**sampling_params, "max_tokens": trajectory.remaining}
        with self.metrics.timer("generation_s"):
            output = await self.loop.server_manager.generate(
                request_id=self.request_id, prompt_ids=trajectory.token_ids, sampling_params=params
            )
        if output.num_preempted is not None:
            self.metrics.num_preempted = max(self.metrics.num_preempted, 0) + output.num_preempted
        token_ids = output.token_ids[: trajectory.remaining]
        logprobs = output.log_probs[: len(token_ids)] if output.log_probs else None
        previous_logprobs = trajectory.logprobs
        if logprobs is not None and previous_logprobs is None:
            previous_logprobs = [0.0] * trajectory.response_length
        merge, mask, merged_logprobs = await self.loop.ct_merge_assistant_token(
            trajectory.token_ids, token_ids, trajectory.response_mask, previous_logprobs, assistant_logprobs=logprobs
        )
        trajectory.update(merge.token_ids, mask, merged_logprobs)
        self.metrics.turns += 1
        content, calls = await self.extractor.extract(token_ids)
        messages.append(_assistant_message(content, calls))
        return calls

    async def _act(self, calls: list[ParsedCall]) -> list[str]:
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

    async def _observe(self, trajectory: TokenTrajectory, messages: list, calls: list[ParsedCall], results) -> bool:
        """Append the observations (mask 0); False if they would leave no room to generate."""
        tool_messages = [_tool_message(call, text) for call, text in zip(calls, results, strict=True)]
        merge, mask, logprobs = await self.loop.ct_merge_context_msg(
            list(messages),
            messages + tool_messages,
            trajectory.token_ids,
            trajectory.response_mask,
            trajectory.logprobs,
            tools=self.schemas,
        )
        if not trajectory.fits_observation(len(mask)):
            return False
        messages.extend(tool_messages)
        trajectory.update(merge.token_ids, mask, logprobs)
        self.observation_turns += 1
        return True


def _assistant_message(content: str, calls: list[ParsedCall]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content or ""}
    runnable = [call for call in calls if call.arguments is not None]
    if runnable:
        message["tool_calls"] = [
            {"type": "function", "function": {"name": call.name, "arguments": call.arguments}}
            | ({"id": call.call_id} if call.call_id else {})
            for call in runnable
        ]
    return message


def _tool_message(call: ParsedCall, text: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "tool", "content": text}
    if call.name:
        message["name"] = call.name
    if call.call_id:
        message["tool_call_id"] = call.call_id
    return message
