"""The transformers rollout server (``rollout.name=hf``) on CPU with SmolLM2-135M-Instruct's real weights.

In-process: ``HFServer`` is the class the Ray actor wraps; here it runs on the test's event loop,
so each semantic veRL relies on is checked directly: the log-probs the trainer recomputes, the
``max_tokens`` rule, EOS kept, weight sync by name, sleep and wake, abort and drain, batching.
"""

from __future__ import annotations

import asyncio

import pytest
import torch

from cuda_agent.recipe.hf_rollout.engine import WeightSyncError
from cuda_agent.recipe.hf_rollout.sampling import UnsupportedSampling, resolve

pytestmark = [pytest.mark.verl, pytest.mark.slow, pytest.mark.timeout(600)]

SAMPLED = {"temperature": 0.8, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}
GREEDY = {**SAMPLED, "temperature": 0.0}


def configs(trainer_config_factory, model_dir, **rollout):
    config = trainer_config_factory(
        "cuda_agent_single_turn_ppo", model_dir=model_dir, prompt_length=512, response_length=64,
        overrides=["actor_rollout_ref.rollout.name=hf", "actor_rollout_ref.rollout.dtype=float32",
                   "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
                   *[f"actor_rollout_ref.rollout.{k}={v}" for k, v in rollout.items()]],
    )
    return config.actor_rollout_ref.rollout, config.actor_rollout_ref.model


@pytest.fixture(scope="module")
def smollm2_server(trainer_config_factory, smollm2_dir):
    """A server with the checkpoint's weights (load_format auto), fp32 on the CPU."""
    from cuda_agent.recipe.hf_rollout.server import HFServer

    rollout, model = configs(trainer_config_factory, smollm2_dir, load_format="auto")
    return HFServer(rollout, model)


@pytest.fixture(scope="module")
def chat(smollm2_server):
    tokenizer = smollm2_server.model_config.tokenizer

    def encode(text: str) -> list[int]:
        return tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                             tokenize=True, return_dict=False)

    return encode


def recomputed_log_probs(model, prompt: list[int], response: list[int], temperature: float) -> torch.Tensor:
    """What veRL's actor computes for the rollout: log_softmax(logits / T) of the whole sequence, unpadded."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + response])).logits[0, len(prompt) - 1: -1].float()
    log_probs = torch.log_softmax(logits / temperature, dim=-1)
    return log_probs.gather(-1, torch.tensor(response)[:, None]).squeeze(-1)


async def test_log_probs_are_the_ones_the_trainer_recomputes(smollm2_server, chat):
    prompts = [chat("Write a CUDA kernel that adds two vectors."), chat("Hi"), chat("What is 2 + 2?")]
    outputs = await asyncio.gather(*[
        smollm2_server.generate(prompt_ids=p, sampling_params={**SAMPLED, "max_tokens": 24}, request_id=str(i))
        for i, p in enumerate(prompts)
    ])
    assert 3 in smollm2_server.batches  # the three requests decoded as one left-padded batch
    for prompt, output in zip(prompts, outputs, strict=True):
        assert output.stop_reason == "completed" and len(output.log_probs) == len(output.token_ids) > 0
        expected = recomputed_log_probs(smollm2_server.engine.model, prompt, output.token_ids, 0.8)
        assert torch.allclose(torch.tensor(output.log_probs), expected, atol=1e-5, rtol=0), (
            (torch.tensor(output.log_probs) - expected).abs().max()
        )


async def test_greedy_log_probs_are_of_the_raw_logits_and_eos_is_kept(smollm2_server, chat):
    prompt = chat("Say hello.")
    output = await smollm2_server.generate(prompt_ids=prompt, sampling_params={**GREEDY, "max_tokens": 64},
                                           request_id="greedy")
    eos = smollm2_server.model_config.tokenizer.eos_token_id
    assert output.token_ids[-1] == eos and eos not in output.token_ids[:-1], output.token_ids
    expected = recomputed_log_probs(smollm2_server.engine.model, prompt, output.token_ids, 1.0)
    assert torch.allclose(torch.tensor(output.log_probs), expected, atol=1e-5, rtol=0)
    without = await smollm2_server.generate(prompt_ids=prompt, sampling_params={**GREEDY, "logprobs": False},
                                            request_id="no-logprobs")
    assert without.log_probs is None and without.token_ids == output.token_ids


async def test_max_tokens_is_the_callers_and_eos_can_be_ignored(smollm2_server, chat):
    output = await smollm2_server.generate(
        prompt_ids=chat("Tell me a long story."), sampling_params={**SAMPLED, "max_tokens": 7, "ignore_eos": True},
        request_id="seven",
    )
    assert len(output.token_ids) == 7 and output.stop_reason == "completed"


def test_the_max_tokens_rule_is_the_vllm_servers():
    lengths = {"max_model_len": 100, "prompt_length": 40, "response_length": 30}
    # default: min(response_length, prompt_length + response_length - len(prompt))
    assert resolve({}, prompt_len=10, **lengths).max_tokens == 30
    assert resolve({}, prompt_len=50, **lengths).max_tokens == 20
    # clamped to the room left in the context, and at least 1
    assert resolve({"max_tokens": 500}, prompt_len=90, **lengths).max_tokens == 10
    assert resolve({}, prompt_len=75, **lengths).max_tokens == 1
    assert resolve({"max_new_tokens": 5}, prompt_len=10, **lengths).max_tokens == 5
    with pytest.raises(ValueError, match="leaves no room"):
        resolve({}, prompt_len=100, **lengths)
    with pytest.raises(UnsupportedSampling, match="repetition_penalty"):
        resolve({"repetition_penalty": 1.2}, prompt_len=10, **lengths)
    with pytest.raises(UnsupportedSampling, match="best_of"):
        resolve({"best_of": 2}, prompt_len=10, **lengths)


async def test_a_weight_sync_makes_the_outputs_the_synced_models(trainer_config_factory, smollm2_dir,
                                                                 smollm2_server, chat):
    """A server started on random weights (load_format dummy, veRL's default) answers as SmolLM2
    once SmolLM2's weights are synced by name, tied embeddings included."""
    from cuda_agent.recipe.hf_rollout.server import HFServer

    rollout, model = configs(trainer_config_factory, smollm2_dir, load_format="dummy")
    server = HFServer(rollout, model)
    prompt, params = chat("Name a prime number."), {**GREEDY, "max_tokens": 16}
    real = await smollm2_server.generate(prompt_ids=prompt, sampling_params=params, request_id="real")
    before = await server.generate(prompt_ids=prompt, sampling_params=params, request_id="before")
    assert before.token_ids != real.token_ids

    state = smollm2_server.engine.model.state_dict()
    assert "lm_head.weight" in state  # tied to the embeddings: sent under both names, written once
    await server.begin_weight_sync()
    names = list(state)
    await server.load_weights([(n, state[n]) for n in names[: len(names) // 2]])
    with pytest.raises(WeightSyncError, match="sent twice"):
        await server.load_weights([(names[0], state[names[0]])])
    await server.load_weights([(n, state[n]) for n in names[len(names) // 2:]])
    report = await server.finish_weight_sync(global_steps=3)
    assert report["parameters"] == len(server.engine.parameter_names) and report["global_steps"] == 3

    after = await server.generate(prompt_ids=prompt, sampling_params=params, request_id="after")
    assert after.token_ids == real.token_ids and after.extra_fields["global_steps"] == 3
    assert await server.digests(["model.norm.weight"]) == await smollm2_server.digests(["model.norm.weight"])

    # a sync that leaves a parameter out is refused: the server would serve a mix of two models
    await server.begin_weight_sync()
    await server.load_weights([(n, state[n]) for n in names if n != "model.norm.weight"])
    with pytest.raises(WeightSyncError, match="unwritten"):
        await server.finish_weight_sync()
    await server.begin_weight_sync()
    with pytest.raises(WeightSyncError, match="no parameter"):
        await server.load_weights([("model.not_a_layer.weight", torch.zeros(1))])


async def test_sleep_and_wake_round_trip(smollm2_server, chat):
    prompt, params = chat("Count to five."), {**GREEDY, "max_tokens": 12}
    before = await smollm2_server.generate(prompt_ids=prompt, sampling_params=params, request_id="a")
    await smollm2_server.sleep()
    with pytest.raises(RuntimeError, match="asleep"):
        await smollm2_server.generate(prompt_ids=prompt, sampling_params=params, request_id="b")
    await smollm2_server.wake_up(tags=["weights"])
    await smollm2_server.wake_up(tags=["kv_cache"])
    after = await smollm2_server.generate(prompt_ids=prompt, sampling_params=params, request_id="c")
    assert after.token_ids == before.token_ids and after.log_probs == before.log_probs


async def test_abort_cuts_the_running_batch_and_parks_new_requests_until_resume(smollm2_server, chat):
    long = {**SAMPLED, "max_tokens": 60, "ignore_eos": True}
    running = asyncio.ensure_future(
        smollm2_server.generate(prompt_ids=chat("Write an essay."), sampling_params=long, request_id="long")
    )
    await asyncio.sleep(1.0)  # decoding
    result = await smollm2_server.abort_all_requests()
    cut = await running
    assert cut.stop_reason == "aborted" and 0 < len(cut.token_ids) < 60 and result["aborted_count"] == 0

    parked = asyncio.ensure_future(smollm2_server.generate(
        prompt_ids=chat("Hi"), sampling_params={**GREEDY, "max_tokens": 3}, request_id="parked"))
    await asyncio.sleep(0.3)
    assert not parked.done()  # behind the closed gate, as vLLM parks it during a weight sync
    await smollm2_server.resume_generation()
    assert (await parked).stop_reason == "completed"

    await smollm2_server.abort_all_requests(reject_request=True)
    rejected = await smollm2_server.generate(prompt_ids=chat("Hi"), sampling_params=GREEDY, request_id="rejected")
    assert rejected.stop_reason == "aborted" and rejected.token_ids == []
    await smollm2_server.resume_generation()
    await smollm2_server.wait_for_requests_to_drain()
