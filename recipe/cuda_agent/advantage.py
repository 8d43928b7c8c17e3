"""Group estimators whose groups leave infrastructure failures out, registered in veRL's advantage registry.

The loops turn an infrastructure failure into veRL's no-op sample: response mask all zero, score 0
(cuda_agent.recipe.outputs). GAE and every loss aggregation already ignore such a sample, but
veRL's group estimators (``compute_grpo_outcome_advantage``, ``compute_rloo_outcome_advantage``)
still put its 0 into the group's statistics (GRPO's mean and std, RLOO's leave-one-out mean), so one
broken sandbox would shift the advantages of the group's honest answers. These estimators drop
every sample without a trainable token (infrastructure failures, veRL's own padding samples, which
are built the same way, and trajectories that ``algorithm.rollout_correction`` rejected, whose mask
veRL zeroes before computing advantages) before calling veRL's estimator on the rest, and give the
dropped ones advantage 0. A group left with one valid member gets veRL's single-member convention
(GRPO: mean 0, std 1, the advantage is the score; RLOO: the score); a group with none gets 0 everywhere.

Select one with ``algorithm.adv_estimator=cuda_agent_grpo`` or ``cuda_agent_rloo`` (docs/training.md).
The plugin (cuda_agent.recipe.plugin) imports this module in every process that imports veRL, so the
names resolve in the trainer's driver too. ``algorithm.norm_adv_by_std_in_grpo`` is honoured. veRL's
GDPO is not wrapped: it reads per-dimension rewards from the whole batch, which a sample mask does not
reach.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage, compute_rloo_outcome_advantage, register_adv_est

ESTIMATOR_NAME = "cuda_agent_grpo"
"""``algorithm.adv_estimator`` value of GRPO over the valid samples."""
RLOO_ESTIMATOR_NAME = "cuda_agent_rloo"
"""``algorithm.adv_estimator`` value of RLOO over the valid samples."""
ESTIMATOR_NAMES = (ESTIMATOR_NAME, RLOO_ESTIMATOR_NAME)


def valid_samples(response_mask: torch.Tensor) -> torch.Tensor:
    """Boolean (batch,) mask of samples with at least one trainable token."""
    return response_mask.sum(dim=-1) > 0


def over_valid_samples(
    estimate: Callable[..., tuple[torch.Tensor, torch.Tensor]],
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, returns): veRL's group estimator `estimate` over the valid samples only; 0 for the others."""
    valid = valid_samples(response_mask)
    advantages = torch.zeros_like(token_level_rewards)
    if bool(valid.any()):
        kept, _ = estimate(
            token_level_rewards=token_level_rewards[valid],
            response_mask=response_mask[valid],
            index=np.asarray(index)[valid.cpu().numpy()],
            **kwargs,
        )
        advantages[valid] = kept.to(advantages.dtype)
    return advantages, advantages


@register_adv_est(ESTIMATOR_NAME)
def compute_valid_group_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    config: Any = None,
    epsilon: float = 1e-6,
    **_: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, returns) as veRL's GRPO computes them over the valid samples; 0 for the others.

    veRL calls registered estimators with token_level_rewards, response_mask, config (the
    ``algorithm`` section) and, when present, index (the ``uid`` of each sample's prompt).
    """
    norm_by_std = True if config is None else bool(config.get("norm_adv_by_std_in_grpo", True))
    return over_valid_samples(compute_grpo_outcome_advantage, token_level_rewards, response_mask, index,
                              epsilon=epsilon, norm_adv_by_std_in_grpo=norm_by_std)


@register_adv_est(RLOO_ESTIMATOR_NAME)
def compute_valid_rloo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    config: Any = None,
    epsilon: float = 1e-6,
    **_: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, returns) as veRL's RLOO computes them over the valid samples; 0 for the others."""
    return over_valid_samples(compute_rloo_outcome_advantage, token_level_rewards, response_mask, index,
                              epsilon=epsilon, config=config)
