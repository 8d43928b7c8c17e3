"""The agentic ``cuda_agent`` loop: a ReAct trajectory in a sandboxed workspace, scored at the end.

Per trajectory (docs/verl.md, "The agentic loop"): read the task from ``extra_info``,
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

import asyncio
import logging
import os
import socket
from functools import lru_cache
from typing import Any
from uuid import uuid4

from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register
from verl.experimental.agent_loop.tool_parser import ToolParser

from cuda_agent.dataset_row import RowInfo
from cuda_agent.errors import ConfigError
from cuda_agent.recipe.environment import open_environment, tool_schemas
from cuda_agent.recipe.loop_config import LoopLimits, loop_config_from_kwargs, reward_kwargs_of
from cuda_agent.recipe.metrics import TrajectoryMetrics
from cuda_agent.recipe.outputs import build_output
from cuda_agent.recipe.prompt import build_messages, load_skill
from cuda_agent.recipe.prompt_fit import initial_prompt_ids
from cuda_agent.recipe.records import RecordWriter, build_record
from cuda_agent.recipe.tool_calls import ToolCallExtractor
from cuda_agent.recipe.trajectory import TokenTrajectory, response_limit
from cuda_agent.recipe.turns import Episode, GeneratedTurn, assistant_message, evaluate_workspace, infra_verdict
from cuda_agent.reward_fns.evaluation import check_gpu_placement
from cuda_agent.reward_fns.options import RewardOptions, TaskSpec

logger = logging.getLogger(__name__)

AGENT_NAME = "cuda_agent"


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
        row = RowInfo.read(kwargs.get("extra_info"))
        task = TaskSpec.from_row(row, self.reward_options)
        check_gpu_placement(task.device, self.reward_options)  # never time rewards on veRL's GPUs
        limits = self._limits(row)
        schemas = tool_schemas()
        messages = build_messages(kwargs["raw_prompt"], _skill_text(self.options.skill_path), task)
        metrics = TrajectoryMetrics()
        pool_address = self.reward_options.resolved_pool_address()
        async with open_environment(task, self.options, pool_address) as env:
            policy = TokenPolicy(self, schemas, sampling_params)
            trajectory = await policy.start(messages, limits.max_total_tokens)
            episode = Episode(env, policy, limits, metrics, request_id=policy.request_id)
            await episode.run(messages)
            metrics.response_tokens = trajectory.response_length
            if policy.num_preempted is not None:
                metrics.num_preempted = policy.num_preempted
            if episode.infra_error is not None:
                verdict = infra_verdict(task, self.reward_options, episode.infra_error)
            else:
                verdict = await evaluate_workspace(env, task, self.reward_options, metrics, self.options.snapshot_dir)
        info = verdict.info
        if self.options.trajectory_dir:
            await self._write_record(messages, schemas, info, metrics, task, kwargs, len(trajectory.prompt_ids))
        names = [schema["function"]["name"] for schema in schemas]
        return build_output(
            trajectory,
            score=info.score,
            exclude=info.infra_failure,
            reward_extra_info={**info.to_extra_info(), **metrics.to_extra_info(names)},
            metrics=metrics.agent_loop_metrics(),
            num_turns=1 + metrics.turns + episode.observation_turns,  # prompt, assistant and tool turns
        )

    async def _write_record(self, messages, schemas, info, metrics, task, kwargs, prompt_tokens: int) -> None:
        """The trajectory as a record (cuda_agent.recipe.records) in ``trajectory_dir``."""
        record = build_record(
            messages,
            schemas,
            info=info,
            metrics=metrics,
            task_id=task.task_id,
            data_source=kwargs.get("data_source"),
            prompt_tokens=prompt_tokens,
            model=OmegaConf.select(self.config, "actor_rollout_ref.model.path", default=None),
        )
        writer = RecordWriter(self.options.trajectory_dir, shard_prefix=f"{socket.gethostname()}-{os.getpid()}")
        await asyncio.to_thread(writer.write, record)

    def _limits(self, row: RowInfo) -> LoopLimits:
        if row.max_turns is None:
            return self.options.limits
        return self.options.limits.model_copy(update={"max_turns": row.max_turns})


class TokenPolicy:
    """Turns generated token by token through veRL's server manager (the ``turns.Policy`` of training).

    Holds the ``TokenTrajectory``: model tokens (mask 1) and observation tokens (mask 0) merged
    with veRL's continuous-token builder, under the response budget.
    """

    def __init__(self, loop: CudaAgentLoop, schemas: list[dict[str, Any]], sampling_params: dict[str, Any]):
        self.loop = loop
        self.schemas = schemas
        self.sampling_params = sampling_params
        self.extractor = ToolCallExtractor(ToolParser.get_tool_parser(loop.tool_format, loop.tokenizer), schemas)
        self.request_id = uuid4().hex
        self.trajectory: TokenTrajectory | None = None
        self.num_preempted: int | None = None

    async def start(self, messages: list[dict[str, Any]], max_total_tokens: int) -> TokenTrajectory:
        """Tokenize the initial conversation and set the response budget."""
        prompt_ids = await initial_prompt_ids(self.loop, messages, tools=self.schemas)  # never silently cut
        limit = response_limit(len(prompt_ids), self.loop.rollout_config.response_length, max_total_tokens)
        if limit < 1:
            raise ConfigError(
                f"the prompt ({len(prompt_ids)} tokens) leaves no room under max_total_tokens="
                f"{max_total_tokens}; raise it or shorten SKILL.md"
            )
        self.trajectory = TokenTrajectory(prompt_ids=prompt_ids, response_limit=limit)
        return self.trajectory

    async def generate(self, messages: list[dict[str, Any]]) -> GeneratedTurn:
        trajectory = self.trajectory
        assert trajectory is not None, "start() first"
        params = {**self.sampling_params, "max_tokens": trajectory.remaining}
        output = await self.loop.server_manager.generate(
            request_id=self.request_id, prompt_ids=trajectory.token_ids, sampling_params=params
        )
        if output.num_preempted is not None:
            self.num_preempted = (self.num_preempted or 0) + output.num_preempted
        trajectory.note_generation(output.extra_fields)
        token_ids = output.token_ids[: trajectory.remaining]
        logprobs = output.log_probs[: len(token_ids)] if output.log_probs else None
        previous_logprobs = trajectory.logprobs
        if logprobs is not None and previous_logprobs is None:
            previous_logprobs = [0.0] * trajectory.response_length
        merge, mask, merged_logprobs = await self.loop.ct_merge_assistant_token(
            trajectory.token_ids, token_ids, trajectory.response_mask, previous_logprobs, assistant_logprobs=logprobs
        )
        trajectory.update(merge.token_ids, mask, merged_logprobs)
        content, calls = await self.extractor.extract(token_ids)
        return GeneratedTurn(assistant_message(content, calls), calls, exhausted=trajectory.remaining <= 0)

    async def observe(self, messages: list[dict[str, Any]], tool_messages: list[dict[str, Any]]) -> bool:
        """Append the observations (mask 0); False if they would leave no room to generate."""
        trajectory = self.trajectory
        assert trajectory is not None, "start() first"
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
        trajectory.update(merge.token_ids, mask, logprobs)
        return True
