"""Our loops under veRL's real AgentLoopWorkers, generating with the real hf rollout server.

Nothing is scripted here: SmolLM2-135M-Instruct (its real weights) is served by ``HFServer`` as a
Ray actor (``replica.start_server``, as ``HFReplica.launch_servers`` starts it), reached through
veRL's own router (``get_router_handle``) and ``LLMServerClient``; the legacy ``AgentLoopWorker``
(v0 trainer) and the v1 ``AgentLoopWorkerTQ`` (TransferQueue) run ``cuda_agent_single_turn`` and
``cuda_agent`` with the tools in the local sandbox and the embedded CPU evaluator. What comes out
must carry the engine's log-probs (``rollout_log_probs``, what stage 4's rollout correction
reads), aligned token for token with the response: recomputed here from the same weights.

The last test syncs weights through ``HFServerAdapter`` (the actor worker's side) into a server
started on random weights, as the trainer does at start-up and after every step.
"""

from __future__ import annotations

import os
import uuid

import numpy as np
import pytest
import torch
from ray_cluster import drive_v1_worker, ray_with_transfer_queue

pytestmark = [pytest.mark.verl, pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(900)]

RESPONSE_LENGTH = 48
WEIGHTS_STEP = 5
PROMPT_LENGTH = 6144  # SKILL.md, the tools and the task: ~5k SmolLM2 tokens; SmolLM2's context is 8192


@pytest.fixture(scope="module")
def cluster():
    # logical CPUs: TransferQueue's controller and two storage units, the router; the server takes none
    with ray_with_transfer_queue(num_cpus=6) as tq:
        yield tq


@pytest.fixture(scope="module")
def config_for(trainer_config_factory, smollm2_dir, tmp_path_factory):
    def make(name: str, *, use_v1: bool, load_format: str = "auto", **loop_options):
        return trainer_config_factory(
            name, model_dir=smollm2_dir, prompt_length=PROMPT_LENGTH, response_length=RESPONSE_LENGTH,
            loop_options={"workspace_root": str(tmp_path_factory.mktemp("ws")), **loop_options},
            overrides=[
                "actor_rollout_ref.rollout.name=hf", "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
                "actor_rollout_ref.rollout.dtype=float32", f"actor_rollout_ref.rollout.load_format={load_format}",
                "actor_rollout_ref.rollout.calculate_log_probs=true", f"trainer.use_v1={str(use_v1).lower()}",
            ],
        )

    return make


@pytest.fixture(scope="module")
def served(cluster, config_for):
    """(veRL's LLMServerClient over the router, the server actor) for SmolLM2's real weights."""
    import ray
    from verl.workers.rollout.llm_server import LLMServerClient
    from verl.workers.rollout.router import get_router_handle

    from cuda_agent.recipe.hf_rollout.replica import server_address, start_server

    config = config_for("cuda_agent_single_turn_ppo", use_v1=False)
    server = start_server(config.actor_rollout_ref.rollout, config.actor_rollout_ref.model, replica_rank=7,
                          name="hf_server_test_smollm2")
    ray.get(server.parameter_names.remote())
    ray.get(server.set_global_steps.remote(WEIGHTS_STEP))  # as the trainer's weight sync tags it
    router = get_router_handle(servers={server_address(7): server})
    return (lambda cfg: LLMServerClient(cfg, load_balancer_handle=router)), server


@pytest.fixture(scope="module")
def reference_model(smollm2_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32, attn_implementation="sdpa").eval()


def assert_log_probs_are_the_models(model, prompt: list[int], response: list[int], mask: list[int],
                                    log_probs: list[float], temperature: float) -> None:
    """Every model token's rollout log-prob is log_softmax(logits / T) of that token; tool tokens are 0."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + response])).logits[0, len(prompt) - 1: -1].float()
    expected = torch.log_softmax(logits / temperature, -1).gather(-1, torch.tensor(response)[:, None]).squeeze(-1)
    got, own = torch.tensor(log_probs), torch.tensor(mask, dtype=torch.bool)
    assert own.any()
    assert torch.allclose(got[own], expected[own], atol=1e-4, rtol=0), (got[own] - expected[own]).abs().max()
    assert torch.all(got[~own] == 0)


def unpad_v0(output, index: int) -> tuple[list[int], list[int], list[int], list[float]]:
    batch = output.batch
    prompt_mask = batch["attention_mask"][index, : batch["prompts"].shape[1]].bool()
    response_mask = batch["response_mask"][index]
    length = int(batch["attention_mask"][index, batch["prompts"].shape[1]:].sum())
    return (batch["prompts"][index][prompt_mask].tolist(), batch["responses"][index, :length].tolist(),
            response_mask[:length].tolist(), batch["rollout_log_probs"][index, :length].tolist())


async def test_single_turn_under_the_v0_worker(config_for, served, make_batch, reference_model, tmp_path):
    from test_single_turn_loop import row
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    from cuda_agent.reward_fns.evaluation import aclose_embedded

    client_for, server = served
    config = config_for("cuda_agent_single_turn_ppo", use_v1=False)
    worker = AgentLoopWorker(config, llm_client=client_for(config))
    batch = make_batch([row("a", 0), row("b", 1)], config, worker.tokenizer, tmp_path)
    try:
        output = await worker.generate_sequences(batch)
    finally:
        await aclose_embedded()
    statuses = list(output.non_tensor_batch["status"])
    assert not any(output.non_tensor_batch["infra_failure"]), statuses
    scores = output.batch["rm_scores"].sum(dim=1)
    assert torch.equal(scores, torch.tensor(list(output.non_tensor_batch["kernel_reward"]), dtype=scores.dtype))
    temperature = config.actor_rollout_ref.rollout.temperature
    for index in range(2):
        prompt, response, mask, log_probs = unpad_v0(output, index)
        assert 0 < len(response) <= RESPONSE_LENGTH
        assert_log_probs_are_the_models(reference_model, prompt, response, mask, log_probs, temperature)
    assert 2 in await server.batch_sizes.remote()  # the two trajectories decoded together
    # the weights version reaches the trainer (the v1 trainer's metrics cast it to int)
    assert list(output.non_tensor_batch["min_global_steps"]) == [WEIGHTS_STEP] * 2
    assert list(output.non_tensor_batch["max_global_steps"]) == [WEIGHTS_STEP] * 2


async def test_agentic_under_the_v0_worker_with_tools_evaluator_and_records(
    config_for, served, make_batch, reference_model, tmp_path
):
    from test_agentic_loop import row
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    from cuda_agent.recipe.records import read_records
    from cuda_agent.reward_fns.evaluation import aclose_embedded

    client_for, _ = served
    records = tmp_path / "records"
    config = config_for("cuda_agent_agentic_ppo", use_v1=False, trajectory_dir=str(records),
                        limits={"max_turns": 2, "max_observation_chars": 4000})
    worker = AgentLoopWorker(config, llm_client=client_for(config))
    batch = make_batch([row("hf0", 0)], config, worker.tokenizer, tmp_path)
    try:
        output = await worker.generate_sequences(batch)
    finally:
        await aclose_embedded()
    info = {key: output.non_tensor_batch[key][0] for key in ("status", "infra_failure", "kernel_reward")}
    assert info["infra_failure"] is False or info["infra_failure"] == np.False_, info
    assert float(output.batch["rm_scores"][0].sum()) == info["kernel_reward"]  # the final workspace was scored
    prompt, response, mask, log_probs = unpad_v0(output, 0)
    assert_log_probs_are_the_models(reference_model, prompt, response, mask, log_probs,
                                    config.actor_rollout_ref.rollout.temperature)
    (record,) = read_records([records])
    assert record.task_id == "agentic/hf0" and record.reward == info["kernel_reward"]
    assert record.messages[-1]["role"] in ("assistant", "tool")


async def run_v1(tq, config, client, rows, folder) -> tuple[dict, list[str]]:
    from test_v1_worker import v1_batch
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ

    worker = AgentLoopWorkerTQ.__ray_metadata__.modified_class(config, llm_client=client)
    uids, listed, keys = await drive_v1_worker(tq, worker, v1_batch(rows, config, worker.tokenizer, folder))
    assert all(listed[uid]["status"] == "finished" for uid in uids)
    data = tq.kv_batch_get(keys=keys, partition_id="train",
                           select_fields=["prompts", "responses", "response_mask", "rollout_log_probs", "rm_scores",
                                          "extra_fields"])
    assert all(listed[key]["min_global_steps"] == listed[key]["max_global_steps"] == WEIGHTS_STEP for key in keys)
    return data, keys


@pytest.mark.parametrize("loop", ["cuda_agent_single_turn_ppo", "cuda_agent_agentic_ppo"])
async def test_both_loops_under_the_v1_worker(loop, cluster, config_for, served, reference_model, tmp_path):
    from test_agentic_loop import row as agentic_row
    from test_single_turn_loop import row as single_row

    client_for, _ = served
    config = config_for(loop, use_v1=True, limits={"max_turns": 2, "max_observation_chars": 4000})
    rows = [single_row("v1", 0)] if loop == "cuda_agent_single_turn_ppo" else [agentic_row("v1hf", 0)]
    data, keys = await run_v1(cluster, config, client_for(config), rows, tmp_path)
    assert len(keys) == 1
    extra = data["extra_fields"][0]
    assert extra["reward_extra_info"]["infra_failure"] is False
    prompt, response = data["prompts"][0].tolist(), data["responses"][0].tolist()
    mask, log_probs = data["response_mask"][0].tolist(), data["rollout_log_probs"][0].tolist()
    assert len(log_probs) == len(response) > 0
    assert_log_probs_are_the_models(reference_model, prompt, response, mask, log_probs,
                                    config.actor_rollout_ref.rollout.temperature)


async def test_the_adapter_syncs_the_actors_weights_into_a_dummy_server(cluster, config_for, served, reference_model):
    """The trainer's start-up sync: a server on random weights, the actor's fp32 state dict sent by name."""
    import ray

    from cuda_agent.recipe.hf_rollout.adapter import HFServerAdapter
    from cuda_agent.recipe.hf_rollout.replica import server_name, start_server

    _, real = served
    config = config_for("cuda_agent_single_turn_ppo", use_v1=False, load_format="dummy")
    rollout = config.actor_rollout_ref.rollout
    dummy = start_server(rollout, config.actor_rollout_ref.model, replica_rank=0)
    assert ray.get(dummy.parameter_names.remote())
    os.environ["RANK"] = "0"
    adapter = HFServerAdapter(rollout, config.actor_rollout_ref.model, device_mesh=None)
    assert adapter.server is not None and ray.get_actor(server_name(0)) is not None

    prompt = reference_model.config.bos_token_id, 504, 1382, 314
    params = {"temperature": 0.0, "top_p": 1.0, "top_k": -1, "logprobs": False, "max_tokens": 12}
    expected = (await real.generate.remote(prompt_ids=list(prompt), sampling_params=params, request_id="r")).token_ids
    before = (await dummy.generate.remote(prompt_ids=list(prompt), sampling_params=params, request_id="d")).token_ids
    assert before != expected

    await adapter.release()  # the trainer's order: asleep, then weights resumed, synced, kv cache resumed
    await adapter.resume(tags=["weights"])
    await adapter.update_weights(iter(reference_model.state_dict().items()), global_steps=1)
    await adapter.resume(tags=["kv_cache"])
    sync = adapter.last_sync
    assert sync["parameters"] == len(ray.get(dummy.parameter_names.remote())) and sync["global_steps"] == 1
    assert sync["tensors"] == len(reference_model.state_dict())

    after = await dummy.generate.remote(prompt_ids=list(prompt), sampling_params=params, request_id=uuid.uuid4().hex)
    assert after.token_ids == expected and after.extra_fields["global_steps"] == 1
