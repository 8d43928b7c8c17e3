"""Our loops under veRL 0.9.1's default worker (``trainer.use_v1: true``): ``AgentLoopWorkerTQ``.

The other loop tests drive ``AgentLoopWorker.generate_sequences`` (the v0 trainer's path). The v1
trainer's ``AgentLoopWorkerTQ`` runs the same loops but fires them as background tasks and writes
each output into TransferQueue with ``AgentLoopOutput.as_dict`` and ``list_of_dict_to_tensordict``;
the trainer then reads the fields back and computes advantages with
``compute_advantage_for_multi_trajectories``. Here all of that is real: a local Ray cluster (one
CPU), TransferQueue's own controller and storage, the worker class veRL's ``AgentLoopManagerTQ``
instantiates (unwrapped from its Ray actor so the scripted LLM server can be attached, as in the
v0 tests), the batch as the v1 trainer builds it (RLHFDataset rows, ``uid``, ``global_steps``).
"""

from __future__ import annotations

import uuid

import numpy as np
import pytest
import torch

from ray_cluster import drive_v1_worker, ray_with_transfer_queue
from scripted_server import Script, ScriptedServer

pytestmark = [pytest.mark.verl, pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def transfer_queue():
    # logical CPUs: TransferQueue's controller and its two storage units each reserve one
    with ray_with_transfer_queue(num_cpus=4) as tq:
        yield tq


def v1_batch(rows, config, tokenizer, folder):
    """The TensorDict the v1 trainer hands to generate_sequences (trainer_base._fetch_one_gen_batch)."""
    import pandas as pd
    from verl.utils import tensordict_utils as tu
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    path = folder / "rows.parquet"
    pd.DataFrame(rows).to_parquet(path, index=False)
    dataset = RLHFDataset([str(path)], tokenizer, config.data)
    batch_dict = collate_fn([dataset[i] for i in range(len(dataset))])
    batch_dict["uid"] = np.array([str(uuid.uuid4()) for _ in range(len(rows))], dtype=object)
    batch = tu.get_tensordict(batch_dict)
    tu.assign_non_tensor_data(batch, "global_steps", 1)
    return batch


async def run_v1(tq, config, server_scripts, rows, folder):
    """Run the v1 worker on rows; (per-sample fields read back from TransferQueue, keys, prompt statuses)."""
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ

    assert config.trainer.use_v1 is True
    worker = AgentLoopWorkerTQ.__ray_metadata__.modified_class(config, llm_client=None)
    worker.llm_client = ScriptedServer(worker.tokenizer, {k: Script(v) for k, v in server_scripts.items()})
    uids, listed, keys = await drive_v1_worker(tq, worker, v1_batch(rows, config, worker.tokenizer, folder))
    statuses = {uid: listed[uid]["status"] for uid in uids}
    tensors = ["response_mask", "loss_mask", "rm_scores"]
    data = tq.kv_batch_get(keys=keys, partition_id="train", select_fields=[*tensors, "extra_fields"])
    padded = data.select(*tensors).to_padded_tensor()  # as the v1 trainer's _compute_advantage reads them
    fields = {key: padded[key] for key in tensors}
    fields["reward_extra_info"] = [extra["reward_extra_info"] for extra in data["extra_fields"]]
    return fields, keys, statuses


async def test_single_turn_loop_and_infra_exclusion_through_the_v1_worker(
    transfer_queue, trainer_config_factory, tmp_path
):
    """A prose answer (valid, -1) and a kernel whose evaluation misses its deadline (infra failure),
    both as the only members of one GRPO group (rollout.n = 2 would do the same; two rows share a uid
    here so each gets its own scripted answer)."""
    from test_single_turn_loop import CASES, row
    from verl import DataProto
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    config = trainer_config_factory(
        "cuda_agent_single_turn_ppo",
        overrides=["trainer.use_v1=true", "+reward.custom_reward_function.reward_kwargs.eval_timeout_s=0.05",
                   "algorithm.adv_estimator=cuda_agent_grpo"],
    )
    cases = {"prose": CASES["prose"], "fast": CASES["fast"]}
    data, keys, statuses = await run_v1(
        transfer_queue, config, {f"[case {k}]": [v] for k, v in cases.items()},
        [row(k, i) for i, k in enumerate(cases)], tmp_path,
    )
    assert set(statuses.values()) == {"finished"}
    assert len(keys) == 2  # one output per prompt: {uid}_{session}_{index}
    mask = data["response_mask"]
    scores = data["rm_scores"].sum(dim=-1)
    prose, infra = 0, 1
    infos = data["reward_extra_info"]
    assert infos[prose]["status"] == "static_check_failed" and scores[prose] == -1.0
    assert infos[infra]["infra_failure"] is True and infos[infra]["status"] == "infra_error"
    assert mask[prose].sum() > 0 and mask[infra].sum() == 0 and scores[infra] == 0
    assert torch.equal(data["loss_mask"], mask)  # v1 trains on loss_mask = response_mask

    # the v1 trainer's advantage step, both samples in one group: the infra failure is left out
    batch = DataProto.from_single_dict({"response_mask": mask, "token_level_rewards": data["rm_scores"],
                                        "uid": np.array(["same"] * 2, dtype=object)})
    result = compute_advantage_for_multi_trajectories(
        batch, batch_keys=keys, adv_estimator="cuda_agent_grpo", config=config.algorithm
    )
    advantages = result.batch["advantages"]
    assert torch.count_nonzero(advantages[infra]) == 0
    # alone in its group after the exclusion: veRL's single-member rule gives the score itself
    assert torch.allclose(advantages[prose][mask[prose].bool()], torch.tensor(-1.0), atol=1e-5)


async def test_agentic_loop_through_the_v1_worker(transfer_queue, trainer_config_factory, tmp_path):
    from test_agentic_loop import call, row

    config = trainer_config_factory(
        "cuda_agent_agentic_ppo",
        loop_options={"workspace_root": str(tmp_path), "limits": {"max_turns": 150, "max_observation_chars": 16000}},
        overrides=["trainer.use_v1=true"],
    )
    script = ["Look.\n" + call("Bash", command="echo hi"), "I give up."]
    data, keys, statuses = await run_v1(
        transfer_queue, config, {"Task id: agentic/v1\n": script}, [row("v1", 0)], tmp_path
    )
    assert list(statuses.values()) == ["finished"] and len(keys) == 1
    mask = data["response_mask"][0]
    info = data["reward_extra_info"][0]
    assert info["infra_failure"] is False
    # model tokens 1, the tool observation 0, then the model again: a real multi-turn mask
    runs = torch.unique_consecutive(mask).tolist()
    assert runs[:3] == [1, 0, 1]
    assert data["rm_scores"][0].sum() == info["score"]
