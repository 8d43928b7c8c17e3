"""An infrastructure failure is really left out of the PPO update, checked with veRL's own math.

build_output turns such a sample into veRL's no-op (response mask 0, score 0). Here veRL's GAE,
clipped policy loss and value loss run on a batch with one such sample: the other samples'
advantages do not depend on it and no gradient reaches it.
"""

import pytest
import torch
from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics
from verl.trainer.ppo.core_algos import compute_gae_advantage_return, compute_policy_loss_vanilla, compute_value_loss
from verl.workers.config import FSDPActorConfig

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


@pytest.mark.parametrize("loss_agg_mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_no_gradient_reaches_the_excluded_sample(loss_agg_mode):
    outputs = outputs_with_infra(-1.0)
    mask, _ = batch(outputs)
    values = torch.randn(3, WIDTH)
    advantages, returns = gae(outputs, values)
    config = FSDPActorConfig(
        strategy="fsdp", clip_ratio_low=0.2, clip_ratio_high=0.28, ppo_micro_batch_size_per_gpu=1, rollout_n=1
    )
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


def test_the_loss_normaliser_ignores_the_excluded_sample():
    """veRL's engines normalise token-mean losses by loss_mask.sum() (= response_mask)."""
    with_infra, _ = batch(outputs_with_infra(-1.0))
    without, _ = batch(outputs_with_infra(-1.0)[:2])
    assert with_infra.sum() == without.sum()
