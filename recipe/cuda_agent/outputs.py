"""The ``AgentLoopOutput`` of a finished trajectory, and the exclusion of infrastructure failures.

An infrastructure failure (the evaluator or the sandbox broke, not the candidate) must not be
learned from as a -1. veRL 0.9.1 has no per-sample drop hook for agent loops, so the sample is
turned into the same no-op veRL itself builds for its padding samples
(``verl.trainer.ppo.padding_utils.construct_minimal_padding_template``): response mask all zero
and reward 0. With a zero mask the sample adds no token to the policy, entropy, KL or value
losses nor to their normalisers, and GAE gives it zero advantage without touching the others'
(tests/recipe/test_exclusion.py checks this with veRL's own loss functions).
"""

from __future__ import annotations

from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput

from cuda_agent.recipe.trajectory import TokenTrajectory
from cuda_agent.reward_fns.info import INFRA_FAILURE_SCORE


NOT_GENERATED = -1
"""The weights version of a trajectory that never reached the model (an infrastructure failure
before its first turn): veRL's v1 trainer casts every trajectory's version to int."""


def weight_step_fields(trajectory: TokenTrajectory) -> dict[str, int | None]:
    """``min_global_steps`` / ``max_global_steps``: the first and last weights version that generated
    the trajectory. The v1 trainer tags every output with them in TransferQueue and computes its
    staleness metrics from them (it fails on a missing one), as veRL's own loops pass them on."""
    first, last = trajectory.weight_steps or (NOT_GENERATED, NOT_GENERATED)
    return {"min_global_steps": first, "max_global_steps": last}


def build_output(
    trajectory: TokenTrajectory,
    *,
    score: float,
    exclude: bool,
    reward_extra_info: dict[str, Any],
    metrics: AgentLoopMetrics,
    num_turns: int,
) -> AgentLoopOutput:
    """The output veRL pads, scores (``reward_score`` set: compute_score is skipped) and trains on."""
    limit = trajectory.response_limit
    mask = trajectory.response_mask[:limit]
    if exclude:
        mask = [0] * len(mask)
        score = INFRA_FAILURE_SCORE
    logprobs = trajectory.logprobs[:limit] if trajectory.logprobs is not None else None
    return AgentLoopOutput(
        prompt_ids=trajectory.prompt_ids,
        response_ids=trajectory.response_ids[:limit],
        response_mask=mask,
        response_logprobs=logprobs,
        reward_score=score,
        num_turns=num_turns,
        metrics=metrics,
        extra_fields={"reward_extra_info": reward_extra_info, "turn_scores": [], "tool_rewards": [],
                      **weight_step_fields(trajectory)},
    )
