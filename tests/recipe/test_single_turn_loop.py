"""cuda_agent_single_turn through veRL's real AgentLoopWorker, scored by the real embedded evaluator.

The scripted LLM server is the only stand-in: it answers with the repository's example
solutions (examples/solutions/diag_matmul) written as fenced, path-labelled blocks.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from scripted_server import Script, ScriptedServer

REPO = Path(__file__).resolve().parents[2]
PROBLEM = (REPO / "examples" / "problems" / "diag_matmul.py").read_text()
SOLUTIONS = REPO / "examples" / "solutions" / "diag_matmul"

pytestmark = [pytest.mark.verl, pytest.mark.slow]


def answer(solution: str) -> str:
    folder = SOLUTIONS / solution
    blocks = [f"```python model_new.py\n{(folder / 'model_new.py').read_text()}```"]
    for kernel in sorted((folder / "kernels").iterdir()):
        blocks.append(f"```cpp kernels/{kernel.name}\n{kernel.read_text()}```")
    return "Here is my kernel.\n\n" + "\n\n".join(blocks)


def row(case: str, index: int) -> dict:
    from cuda_agent.recipe.task_prompts import single_turn_prompt

    prompt = single_turn_prompt(PROBLEM, "cpu")
    prompt[0]["content"] += f"\n[case {case}]"
    return {
        "data_source": "cuda_agent/test",
        "agent_name": "cuda_agent_single_turn",
        "prompt": prompt,
        "reward_model": {"style": "rule", "ground_truth": f"diag/{case}"},
        "extra_info": {"task_id": f"diag/{case}", "problem_src": PROBLEM, "device": "cpu",
                       "precision_policy": "paper", "level": 1, "source": "test", "index": index},
    }


CASES = {"fast": answer("cpu_fast"), "cheat": answer("cpu_cheat"), "prose": "I would fuse the ops but I give no code."}


@pytest.fixture(scope="module")
def run_batch(trainer_config_factory, make_batch, tmp_path_factory):
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    async def run(cases: dict[str, str], overrides: list[str] = ()):
        config = trainer_config_factory("cuda_agent_single_turn_ppo", overrides=list(overrides))
        worker = AgentLoopWorker(config, llm_client=None)
        server = ScriptedServer(worker.tokenizer, {f"[case {k}]": Script([v]) for k, v in cases.items()})
        worker.llm_client = server
        rows = [row(k, i) for i, k in enumerate(cases)]
        batch = make_batch(rows, config, worker.tokenizer, tmp_path_factory.mktemp("b"))
        output = await worker.generate_sequences(batch)
        from cuda_agent.reward_fns.evaluation import aclose_embedded

        await aclose_embedded()
        return output, server, worker.tokenizer

    return run


async def test_answers_are_scored_and_masked(run_batch):
    output, server, tokenizer = await run_batch(CASES)
    scores = output.batch["rm_scores"].sum(dim=1).tolist()
    status = list(output.non_tensor_batch["status"])
    fast, cheat, prose = 0, 1, 2
    assert status[fast] == "ok" and scores[fast] >= 2.0  # 2x faster than eager; compile margin is noisy
    assert output.non_tensor_batch["kernel_reward"][fast] == scores[fast]
    assert status[cheat] == "violation" and scores[cheat] == -1.0
    assert status[prose] == "static_check_failed" and scores[prose] == -1.0
    assert not any(output.non_tensor_batch["infra_failure"])
    # single turn: every response token is the model's, the reward sits on the last one
    mask, attention = output.batch["response_mask"], output.batch["attention_mask"]
    prompt_width = output.batch["prompts"].shape[1]
    lengths = attention[:, prompt_width:].sum(dim=1)
    for i in range(3):
        assert mask[i, : lengths[i]].all() and not mask[i, lengths[i]:].any()
        assert output.batch["rm_scores"][i, lengths[i] - 1] == scores[i]
    assert all(r["params"]["max_tokens"] == 4096 for r in server.requests)


async def test_infrastructure_failure_is_excluded_from_the_update(run_batch):
    """The evaluator misses its deadline (an infra failure): score 0 and a zero response mask."""
    output, _, _ = await run_batch(
        {"fast": CASES["fast"]}, ["+reward.custom_reward_function.reward_kwargs.eval_timeout_s=0.05"]
    )
    assert output.non_tensor_batch["infra_failure"][0] == True  # noqa: E712 (numpy bool)
    assert output.non_tensor_batch["status"][0] == "infra_error"
    assert output.non_tensor_batch["kernel_reward"][0] is None
    assert torch.count_nonzero(output.batch["response_mask"][0]) == 0
    assert output.batch["rm_scores"].sum() == 0
