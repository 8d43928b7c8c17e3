"""The ``cuda_agent_single_turn`` loop: one answer, scored by the configured reward function.

Stage 1 of the recipe (single-turn PPO warm-up). It generates one answer like veRL's
``single_turn_agent`` and then calls the reward function configured in
``reward.custom_reward_function.path/name`` (loaded by veRL's own loader, with its
``reward_kwargs``; our ``reward_fns/cuda_kernel.py:compute_score`` when none is configured).
Scoring inside the loop is what lets an infrastructure failure be excluded from the update
(outputs.py): veRL's reward loop can only return a number, never mask a sample.
"""

from __future__ import annotations

import inspect
import json
from typing import Any, Callable
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register
from verl.trainer.ppo.reward import get_custom_reward_fn

from cuda_agent.errors import ConfigError
from cuda_agent.recipe.loop_config import reward_kwargs_of
from cuda_agent.recipe.metrics import StopReason, TrajectoryMetrics
from cuda_agent.recipe.outputs import build_output
from cuda_agent.recipe.prompt_fit import initial_prompt_ids
from cuda_agent.recipe.trajectory import TokenTrajectory

AGENT_NAME = "cuda_agent_single_turn"

_SCORE_FNS: dict[str, Callable[..., Any]] = {}
"""Reward functions loaded in this process, by their config (veRL's loader re-executes the file)."""


def _score_fn(trainer_config) -> Callable[..., Any]:
    """The configured reward function with its reward_kwargs bound (veRL's get_custom_reward_fn)."""
    section = trainer_config.reward.get("custom_reward_function") or {}
    key = json.dumps([section.get("path"), section.get("name"), reward_kwargs_of(trainer_config)], default=str)
    if key not in _SCORE_FNS:
        score_fn = get_custom_reward_fn(trainer_config)
        if score_fn is None:
            from cuda_agent.reward_fns.cuda_kernel import compute_score

            kwargs = reward_kwargs_of(trainer_config)

            async def score_fn(**call_kwargs: Any) -> dict[str, Any]:
                return await compute_score(**call_kwargs, **kwargs)

        _SCORE_FNS[key] = score_fn
    return _SCORE_FNS[key]


async def _call(score_fn: Callable[..., Any], **kwargs: Any) -> Any:
    result = score_fn(**kwargs)
    return await result if inspect.isawaitable(result) else result


@register(AGENT_NAME)
class CudaAgentSingleTurnLoop(AgentLoopBase):
    """One generation, scored in the loop (registered as ``cuda_agent_single_turn``)."""

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
        del tools
        unknown = set(options) - {"name"}
        if unknown:
            raise ConfigError(f"cuda_agent_single_turn takes no options, got {sorted(unknown)}")
        self.score_fn = _score_fn(self.config)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        metrics = TrajectoryMetrics()
        prompt_ids = await initial_prompt_ids(self, list(kwargs["raw_prompt"]))  # never silently cut
        trajectory = TokenTrajectory(prompt_ids=prompt_ids, response_limit=self.rollout_config.response_length)
        params = {**sampling_params, "max_tokens": trajectory.remaining}
        with metrics.timer("generation_s"):
            output = await self.server_manager.generate(
                request_id=uuid4().hex, prompt_ids=prompt_ids, sampling_params=params
            )
        trajectory.note_generation(output.extra_fields)
        token_ids = output.token_ids[: trajectory.remaining]
        logprobs = output.log_probs[: len(token_ids)] if output.log_probs else None
        merge, mask, merged_logprobs = await self.ct_merge_assistant_token(
            prompt_ids, token_ids, [], [] if logprobs else None, assistant_logprobs=logprobs
        )
        trajectory.update(merge.token_ids, mask, merged_logprobs)
        metrics.turns, metrics.response_tokens = 1, trajectory.response_length
        metrics.stop_reason = StopReason.LENGTH_LIMIT if trajectory.remaining <= 0 else StopReason.MODEL_DONE

        answer = self.tokenizer.decode(token_ids, skip_special_tokens=True)
        with metrics.timer("evaluation_s"):
            result = await _call(
                self.score_fn,
                data_source=kwargs.get("data_source"),
                solution_str=answer,
                ground_truth=(kwargs.get("reward_model") or {}).get("ground_truth"),
                extra_info=dict(kwargs.get("extra_info") or {}),
            )
        info = dict(result) if isinstance(result, dict) else {"score": float(result)}
        return build_output(
            trajectory,
            score=float(info["score"]),
            exclude=bool(info.get("infra_failure", False)),
            reward_extra_info={**info, **metrics.to_extra_info([])},
            metrics=metrics.agent_loop_metrics(),
            num_turns=2,
        )
