"""An infrastructure failure is really left out of the PPO update, checked with veRL's own math.

build_output turns such a sample into veRL's no-op (response mask 0, score 0). Here veRL's GAE,
our registered GRPO (cuda_agent_grpo, through veRL's compute_advantage dispatch), clipped policy
loss, entropy aggregation and value loss run on a batch with one such sample: the other samples'
advantages do not depend on it, no gradient reaches it, and every loss equals the loss of the batch
without it, in each of veRL's loss aggregation modes.
"""

import numpy as np
import pytest
import torch
from verl import DataProto
from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics
from verl.trainer.config import AlgoConfig
from verl.trainer.ppo.core_algos import (
    agg_loss,
    compute_gae_advantage_return,
    compute_policy_loss_vanilla,
    compute_value_loss,
)
from verl.trainer.ppo.ray_trainer import compute_advantage
from verl.workers.config import FSDPActorConfig

from cuda_agent.recipe.advantage import ESTIMATOR_NAME, RLOO_ESTIMATOR_NAME

from cuda_agent.recipe.outputs import build_output
from cuda_agent.recipe.trajectory import TokenTrajectory

WIDTH = 8


def sample(mask: list[int], score: float, exclude: bool):
    trajectory = TokenTrajectory(prompt_ids=[1, 2], response_limit=WIDTH)
    trajectory.update([1, 2, *range(10, 10 + len(mask))], mask, None)
    return build_output(
        trajectory, score=score, exclude=exclude, reward_extra_info={}, metrics=AgentLoopMetrics(), num_turns=2
    )


def batch(outputs):
    """Right-padded masks and rewards on the last response token, as veRL's postprocess does."""
    mask = torch.zeros(len(outputs), WIDTH)
    rewards = torch.zeros(len(outputs), WIDTH)
    for row, output in enumerate(outputs):
        length = len(output.response_ids)
        mask[row, :length] = torch.tensor(output.response_mask, dtype=torch.float32)
        rewards[row, length - 1] = output.reward_score
    return mask, rewards


def outputs_with_infra(infra_score: float, exclude: bool = True):
    return [
        sample([1, 1, 0, 0, 1, 1], 3.0, False),
        sample([1, 1, 1, 1, 1, 1, 1, 1], -1.0, False),
        sample([1, 1, 0, 1, 1], infra_score, exclude),
    ]


def test_excluded_sample_is_a_veRL_no_op():
    output = outputs_with_infra(-1.0)[2]
    assert output.response_mask == [0] * 5 and output.reward_score == 0.0
    assert len(output.response_ids) == 5  # the tokens stay: shapes and logging are unchanged


def gae(outputs, values):
    mask, rewards = batch(outputs)
    return compute_gae_advantage_return(rewards, values, mask, gamma=torch.tensor(1.0), lam=torch.tensor(0.95))


def test_other_samples_advantages_do_not_depend_on_the_excluded_one():
    values = torch.randn(3, WIDTH)
    adv_a, _ = gae(outputs_with_infra(-1.0), values)
    adv_b, _ = gae(outputs_with_infra(3.0), values)
    assert torch.equal(adv_a[:2], adv_b[:2])
    assert torch.equal(adv_a[2], adv_b[2])  # masked_whiten's shift of a zero advantage, never used
    # without the exclusion, the infra sample's -1 would shift everyone through whitening
    adv_c, _ = gae(outputs_with_infra(-1.0, exclude=False), values)
    assert not torch.allclose(adv_a[:2], adv_c[:2])


# every mode veRL 0.9.1's ActorConfig accepts (verl/workers/config/actor.py, valid_loss_agg_modes)
LOSS_AGG_MODES = ["token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]


def actor_config(loss_agg_mode: str) -> FSDPActorConfig:
    return FSDPActorConfig(
        strategy="fsdp", clip_ratio_low=0.2, clip_ratio_high=0.28, ppo_micro_batch_size_per_gpu=1, rollout_n=1,
        loss_agg_mode=loss_agg_mode,
    )


@pytest.mark.parametrize("loss_agg_mode", LOSS_AGG_MODES)
def test_no_gradient_reaches_the_excluded_sample(loss_agg_mode):
    outputs = outputs_with_infra(-1.0)
    mask, _ = batch(outputs)
    values = torch.randn(3, WIDTH)
    advantages, returns = gae(outputs, values)
    config = actor_config(loss_agg_mode)
    old_log_prob = torch.randn(3, WIDTH)
    log_prob = (old_log_prob + 0.1 * torch.randn(3, WIDTH)).requires_grad_()
    pg_loss, _ = compute_policy_loss_vanilla(
        old_log_prob, log_prob, advantages, mask.bool(), loss_agg_mode=loss_agg_mode, config=config
    )
    pg_loss.backward()
    assert torch.count_nonzero(log_prob.grad[2]) == 0
    assert torch.count_nonzero(log_prob.grad[:2]) > 0

    vpreds = values.clone().requires_grad_()
    vf_loss, _ = compute_value_loss(
        vpreds, returns, values, mask.bool(), cliprange_value=0.5, loss_agg_mode=loss_agg_mode
    )
    (vf_loss + 0 * vpreds.sum()).backward()
    assert torch.count_nonzero(vpreds.grad[2]) == 0


def losses(mask, loss_agg_mode, tensors, global_batch_info):
    """(policy, entropy, value) losses as veRL's engine loss (verl/workers/utils/losses.py) computes them."""
    old_log_prob, log_prob, advantages, entropy, vpreds, values, returns = tensors
    config = actor_config(loss_agg_mode)
    config.global_batch_info.update(global_batch_info)
    pg_loss, _ = compute_policy_loss_vanilla(
        old_log_prob, log_prob, advantages, mask.bool(), loss_agg_mode=loss_agg_mode, config=config
    )
    entropy_loss = agg_loss(entropy, mask.bool(), loss_agg_mode, **config.global_batch_info)
    vf_loss, _ = compute_value_loss(
        vpreds, returns, values, mask.bool(), cliprange_value=0.5, loss_agg_mode=loss_agg_mode, **global_batch_info
    )
    return torch.stack([pg_loss, entropy_loss, vf_loss])


@pytest.mark.parametrize("loss_agg_mode", LOSS_AGG_MODES)
@pytest.mark.parametrize("normaliser", ["micro-batch", "engine"])
def test_the_loss_with_the_excluded_sample_equals_the_loss_without_it(loss_agg_mode, normaliser):
    """Both of veRL's normalisers: agg_loss's own (no global info: masked sequences are not counted)
    and the engine's (batch_num_tokens = sum of the loss mask, global_batch_size = the configured
    mini-batch size, dp_size 1), as veRL's engine workers pass them to ppo_loss and value_loss."""
    torch.manual_seed(0)
    mask, _ = batch(outputs_with_infra(-1.0))
    advantages, returns = gae(outputs_with_infra(-1.0), torch.randn(3, WIDTH))
    old_log_prob = torch.randn(3, WIDTH)
    tensors = (old_log_prob, old_log_prob + 0.1 * torch.randn(3, WIDTH), advantages, torch.rand(3, WIDTH),
               torch.randn(3, WIDTH), torch.randn(3, WIDTH), returns)

    def info(rows):
        if normaliser == "micro-batch":
            return {}
        return {"dp_size": 1, "batch_num_tokens": int(mask[rows].sum()), "global_batch_size": 4,
                "loss_scale_factor": None}

    with_infra = losses(mask, loss_agg_mode, tensors, info([0, 1, 2]))
    without = losses(mask[:2], loss_agg_mode, tuple(t[:2] for t in tensors), info([0, 1]))
    torch.testing.assert_close(with_infra, without, rtol=1e-6, atol=1e-7)
    # the same batch with the sample trained on (its real mask) gives other losses: the test can fail
    full_mask = mask.clone()
    full_mask[2, :5] = 1
    assert not torch.allclose(losses(full_mask, loss_agg_mode, tensors, info([0, 1, 2])), without)


def grpo_batch(scores: list[float], uids: list[str], infra: list[bool]) -> DataProto:
    """Outcome rewards on the last response token of each sample, as veRL's reward stage leaves them."""
    outputs = [sample([1, 1, 0, 1], score, failed) for score, failed in zip(scores, infra, strict=True)]
    mask, rewards = batch(outputs)
    return DataProto.from_single_dict(
        {"response_mask": mask, "token_level_rewards": rewards, "uid": np.array(uids, dtype=object)}
    )


def grpo(data: DataProto, estimator: str = ESTIMATOR_NAME, norm_by_std: bool = True) -> torch.Tensor:
    """veRL's own advantage dispatch (ray_trainer.compute_advantage, also called by the v1 trainer)."""
    config = AlgoConfig(adv_estimator=estimator, norm_adv_by_std_in_grpo=norm_by_std)
    result = compute_advantage(data, adv_estimator=estimator, norm_adv_by_std_in_grpo=norm_by_std, config=config)
    return result.batch["advantages"]


@pytest.mark.parametrize("norm_by_std", [True, False])
def test_group_statistics_leave_the_infra_failure_out(norm_by_std):
    """Group a: 4 samples, the third an infra failure; group b: 3 valid samples (untouched)."""
    scores = [1.0, -1.0, 5.0, 0.5, 2.0, 0.0, 1.0]
    uids = ["a", "a", "a", "a", "b", "b", "b"]
    infra = [False, False, True, False, False, False, False]
    with_infra = grpo(grpo_batch(scores, uids, infra), norm_by_std=norm_by_std)
    keep = [0, 1, 3, 4, 5, 6]
    without = grpo(grpo_batch([scores[i] for i in keep], [uids[i] for i in keep], [False] * 6),
                   norm_by_std=norm_by_std)
    torch.testing.assert_close(with_infra[keep], without)
    assert torch.count_nonzero(with_infra[2]) == 0
    # veRL's stock GRPO counts the failure's 0 in group a's mean and std
    stock = grpo(grpo_batch(scores, uids, infra), estimator="grpo", norm_by_std=norm_by_std)
    assert not torch.allclose(stock[[0, 1, 3]], without[:3])
    torch.testing.assert_close(stock[4:], without[3:])


def test_group_of_only_infra_failures_gets_zero_and_a_lone_survivor_veRLs_single_member_rule():
    data = grpo_batch([1.0, 2.0, 3.0, 4.0], ["a", "a", "b", "b"], [True, True, True, False])
    advantages = grpo(data)
    assert torch.count_nonzero(advantages[:3]) == 0
    # veRL's GRPO on a one-member group: mean 0, std 1, so the advantage is the score itself
    torch.testing.assert_close(advantages[3], torch.tensor([4.0, 4.0, 0.0, 4.0, 0, 0, 0, 0]) / (1 + 1e-6))


def test_rloo_leave_one_out_means_leave_the_infra_failure_out():
    """RLOO: group a has 4 samples, the third an infra failure; group b 2 valid ones; group c a lone survivor."""
    scores = [1.0, -1.0, 5.0, 0.5, 2.0, 0.0, 3.0, 7.0]
    uids = ["a", "a", "a", "a", "b", "b", "c", "c"]
    infra = [False, False, True, False, False, False, False, True]
    with_infra = grpo(grpo_batch(scores, uids, infra), estimator=RLOO_ESTIMATOR_NAME)
    keep = [0, 1, 3, 4, 5, 6]
    without = grpo(grpo_batch([scores[i] for i in keep], [uids[i] for i in keep], [False] * 6),
                   estimator=RLOO_ESTIMATOR_NAME)
    torch.testing.assert_close(with_infra[keep], without)
    assert torch.count_nonzero(with_infra[[2, 7]]) == 0
    # leave-one-out by hand for group a's valid members: score minus the mean of the other valid ones
    last = [float(with_infra[i][3]) for i in (0, 1, 3)]
    assert last == pytest.approx([1.0 - (-1.0 + 0.5) / 2, -1.0 - (1.0 + 0.5) / 2, 0.5 - (1.0 - 1.0) / 2])
    assert float(with_infra[6][3]) == pytest.approx(3.0)  # veRL's one-member rule: the score itself
    # veRL's stock RLOO counts the failure's 0 as a group member
    stock = grpo(grpo_batch(scores, uids, infra), estimator="rloo")
    assert not torch.allclose(stock[[0, 1, 3]], without[:3])


def test_every_output_carries_the_weights_version_the_v1_trainer_casts_to_int():
    """veRL's v1 trainer tags each output with extra_fields min/max_global_steps and computes its
    staleness metrics with ``np.array(..., dtype=int)``: a missing version fails the step (it did,
    in the first CPU main_ppo run). The first and last generating weights are kept; a trajectory
    that never reached the model (an infrastructure failure before its first turn) gets -1."""
    trajectory = TokenTrajectory(prompt_ids=[1, 2], response_limit=WIDTH)
    for step in (3, 3, 4):  # LLMServerClient sets min = max = the server's global_steps per turn
        trajectory.note_generation({"global_steps": step, "min_global_steps": step, "max_global_steps": step})
    trajectory.update([1, 2, 10, 11], [1, 1], None)
    output = build_output(trajectory, score=1.0, exclude=False, reward_extra_info={}, metrics=AgentLoopMetrics(),
                          num_turns=2)
    assert (output.extra_fields["min_global_steps"], output.extra_fields["max_global_steps"]) == (3, 4)
    never = sample([1, 1], 0.0, True).extra_fields
    assert np.array([never["min_global_steps"], never["max_global_steps"]], dtype=int).tolist() == [-1, -1]
