"""Guards of the loops through veRL's real AgentLoopWorker: a prompt over rollout.prompt_length is an
error (never silently cut), and the agentic loop never starts an embedded pool on veRL's GPUs."""

from __future__ import annotations

import pytest
from scripted_server import Script, ScriptedServer
from test_agentic_loop import row

from cuda_agent.errors import ConfigError

pytestmark = [pytest.mark.verl]


async def _generate(config_factory, make_batch, tmp_path, case_row, overrides=(), loop_options=None):
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    from cuda_agent.reward_fns.evaluation import aclose_embedded

    config = config_factory("cuda_agent_agentic_ppo", loop_options={"workspace_root": str(tmp_path), **(loop_options or {})},
                            overrides=list(overrides), response_length=4096)
    worker = AgentLoopWorker(config, llm_client=None)
    worker.llm_client = ScriptedServer(worker.tokenizer, {"Task id: agentic/": Script(["Done."])})
    batch = make_batch([case_row], config, worker.tokenizer, tmp_path)
    try:
        return await worker.generate_sequences(batch)
    finally:
        await aclose_embedded()


async def test_prompt_over_prompt_length_fails_loudly(trainer_config_factory, make_batch, tmp_path):
    with pytest.raises(ConfigError, match=r"over rollout.prompt_length=256"):
        await _generate(trainer_config_factory, make_batch, tmp_path, row("guard", 0),
                        overrides=["actor_rollout_ref.rollout.prompt_length=256"])


async def test_no_embedded_pool_on_training_gpus(trainer_config_factory, make_batch, tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_AGENT_POOL", raising=False)
    cuda_row = row("guard", 0)
    cuda_row["extra_info"]["device"] = "cuda"
    with pytest.raises(ConfigError, match="cuda-agent pool serve"):
        await _generate(trainer_config_factory, make_batch, tmp_path, cuda_row)


def test_gpu_placement_rule():
    from cuda_agent.reward_fns.evaluation import check_gpu_placement
    from cuda_agent.reward_fns.options import RewardOptions

    check_gpu_placement("cpu", RewardOptions())
    check_gpu_placement("cuda", RewardOptions(pool_address="/run/pool.sock"))
    check_gpu_placement("cuda", RewardOptions(embedded_devices=[6, 7]))
    with pytest.raises(ConfigError, match="embedded_devices"):
        check_gpu_placement("cuda", RewardOptions())
