"""The agentic cuda_agent loop through veRL's real AgentLoopWorker on CPU.

Real pieces: veRL's AgentLoopWorker and continuous-token builder, the offline tokenizer, the
workspace, the local terminal sandbox, the tools and the embedded evaluator. The only stand-in
is the scripted LLM server. One batch runs every scenario concurrently (as a rollout step
would); each test checks one trajectory of it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
import pytest_asyncio

from scripted_server import Script, ScriptedServer, ServerFailure

REPO = Path(__file__).resolve().parents[2]
PROBLEM = (REPO / "examples" / "problems" / "diag_matmul.py").read_text()
SOLUTIONS = REPO / "examples" / "solutions" / "diag_matmul"
RESPONSE_LENGTH = 4096

pytestmark = [pytest.mark.verl, pytest.mark.slow]


def call(name: str, **arguments) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def write_solution(solution: str) -> str:
    folder = SOLUTIONS / solution
    kernels = sorted((folder / "kernels").iterdir())
    calls = [call("Write", file_path=f"kernels/{k.name}", content=k.read_text()) for k in kernels]
    calls.append(call("Write", file_path="model_new.py", content=(folder / "model_new.py").read_text()))
    return "I will write the kernel and the model.\n" + "\n".join(calls)


SCRIPTS = {
    "fast": [write_solution("cpu_fast"), "Compile it.\n" + call("Bash", command="bash utils/compile.sh"), "Done."],
    "cheat": [write_solution("cpu_cheat"), "Done."],
    "malformed": [
        'Writing.\n<tool_call>\n{"name": "Write", "arguments": {"file_path": "model_new.py", </tool_call>',
        "Another way.\n" + call("Compile", target="all"),
        "I give up.",
    ],
    "turns": ["Look.\n" + call("Bash", command="echo hi")],
    "length": ["Count.\n" + call("Bash", command="seq 1 4000")],
}
MAX_TURNS = {"turns": 3}


def row(case: str, index: int) -> dict:
    from cuda_agent.recipe.task_prompts import agentic_prompt

    extra = {"task_id": f"agentic/{case}", "problem_src": PROBLEM, "device": "cpu", "precision_policy": "paper",
             "level": 1, "source": "test", "index": index, "max_turns": MAX_TURNS.get(case)}
    return {
        "data_source": "cuda_agent/test",
        "agent_name": "cuda_agent",
        "prompt": agentic_prompt(f"agentic/{case}", "cpu"),
        "reward_model": {"style": "rule", "ground_truth": f"agentic/{case}"},
        "extra_info": extra,
    }


async def run_worker(config_factory, make_batch, folder: Path, scripts: dict, workspace_root: Path):
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    from cuda_agent.reward_fns.evaluation import aclose_embedded

    config = config_factory(
        "cuda_agent_agentic_ppo",
        loop_options={
            "workspace_root": str(workspace_root),
            "limits": {"max_turns": 150, "max_observation_chars": 16000},
        },
        response_length=RESPONSE_LENGTH,
    )
    worker = AgentLoopWorker(config, llm_client=None)
    server = ScriptedServer(worker.tokenizer, {f"Task id: agentic/{k}\n": Script(v) for k, v in scripts.items()})
    worker.llm_client = server
    batch = make_batch([row(k, i) for i, k in enumerate(scripts)], config, worker.tokenizer, folder)
    try:
        return await worker.generate_sequences(batch), server, worker.tokenizer
    finally:
        await aclose_embedded()


class Trajectory:
    """One row of the worker's output, unpadded."""

    def __init__(self, output, index: int, tokenizer):
        prompt_width = output.batch["prompts"].shape[1]
        length = int(output.batch["attention_mask"][index, prompt_width:].sum())
        self.response = output.batch["responses"][index, :length].tolist()
        self.mask = output.batch["response_mask"][index, :length].tolist()
        self.score = float(output.batch["rm_scores"][index].sum())
        self.reward_position = int(output.batch["rm_scores"][index].nonzero().flatten()[-1]) if self.score else None
        batch = output.non_tensor_batch
        self.info = {key: value[index] for key, value in batch.items() if isinstance(value, np.ndarray)}
        self.tokenizer = tokenizer

    def runs(self) -> list[tuple[int, str]]:
        """(mask value, decoded text) of each run of equal mask values."""
        runs, start = [], 0
        for i in range(1, len(self.mask) + 1):
            if i == len(self.mask) or self.mask[i] != self.mask[start]:
                runs.append((self.mask[start], self.tokenizer.decode(self.response[start:i])))
                start = i
        return runs


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def batch_result(trainer_config_factory, make_batch, tmp_path_factory):
    workspaces = tmp_path_factory.mktemp("workspaces")
    output, server, tokenizer = await run_worker(
        trainer_config_factory, make_batch, tmp_path_factory.mktemp("batch"), SCRIPTS, workspaces
    )
    return {case: Trajectory(output, i, tokenizer) for i, case in enumerate(SCRIPTS)}, server, workspaces


async def test_correct_faster_kernel_gets_its_reward(batch_result):
    trajectories, _, _ = batch_result
    fast = trajectories["fast"]
    assert fast.info["status"] == "ok" and fast.score >= 2.0  # 2x faster than eager; compile margin is noisy
    assert fast.info["agent/turns"] == 3 and fast.info["agent/tool_calls"] == 3
    assert fast.info["agent/calls/Write"] == 2 and fast.info["agent/calls/Bash"] == 1
    assert fast.info["agent/compiles"] == 1 and fast.info["agent/compile_passes"] == 1
    assert fast.info["agent/stop_reason"] == "model_done" and not fast.info["infra_failure"]
    assert fast.info["__num_turns__"] == 1 + 3 + 2  # prompt, assistant turns, observation turns


async def test_masks_model_tokens_one_observations_zero(batch_result):
    trajectories, _, _ = batch_result
    fast = trajectories["fast"]
    runs = fast.runs()
    model_text = "".join(text for value, text in runs if value == 1)
    for reply in SCRIPTS["fast"]:
        assert reply + "<|im_end|>" in model_text
    observations = [text for value, text in runs if value == 0]
    assert len(observations) == 2 and all("<tool_response>" in text for text in observations)
    assert "[compile]" in observations[1]
    assert fast.mask[-1] == 1 and fast.reward_position == len(fast.mask) - 1


async def test_cheating_kernel_gets_minus_one(batch_result):
    cheat = batch_result[0]["cheat"]
    assert cheat.score == -1.0 and cheat.info["status"] == "violation" and cheat.info["violation"]


async def test_malformed_calls_become_error_observations_and_the_loop_goes_on(batch_result):
    malformed = batch_result[0]["malformed"]
    observations = [text for value, text in malformed.runs() if value == 0]
    assert "Malformed tool call" in observations[0]
    assert "Unknown tool 'Compile'" in observations[1]
    assert malformed.info["agent/turns"] == 3 and malformed.info["agent/malformed_calls"] == 2
    assert malformed.info["agent/tool_errors"] == 2 and malformed.info["agent/stop_reason"] == "model_done"
    assert malformed.score == -1.0  # the starter model_new.py does not compile


async def test_turn_limit_truncates_on_the_assistant_turn(batch_result):
    turns = batch_result[0]["turns"]
    assert turns.info["agent/turns"] == 3 and turns.info["agent/stop_reason"] == "turn_limit"
    assert turns.info["agent/tool_calls"] == 2  # the last turn's call is not run
    assert turns.runs()[-1][0] == 1 and turns.mask[-1] == 1


async def test_length_limit_truncates_within_the_budget(batch_result):
    length = batch_result[0]["length"]
    assert length.info["agent/stop_reason"] == "length_limit"
    assert len(length.response) <= RESPONSE_LENGTH
    assert length.mask[-1] == 1  # an observation that leaves no room is not appended
    assert all(len(text) <= 16000 + 200 for value, text in length.runs() if value == 0)


async def test_every_sample_has_the_same_keys_and_workspaces_are_removed(batch_result):
    trajectories, server, workspaces = batch_result
    keys = {tuple(sorted(t.info)) for t in trajectories.values()}
    assert len(keys) == 1
    assert all(r["params"]["max_tokens"] <= RESPONSE_LENGTH for r in server.requests)
    assert list(workspaces.iterdir()) == []


async def test_sandbox_is_released_after_an_exception(trainer_config_factory, make_batch, tmp_path_factory):
    marker = "sleep 4242.5"
    scripts = {"boom": ["Start a job.\n" + call("Bash", command=marker, run_in_background=True), ServerFailure("lost")]}
    workspaces = tmp_path_factory.mktemp("boom_workspaces")
    with pytest.raises(ServerFailure):
        await run_worker(trainer_config_factory, make_batch, tmp_path_factory.mktemp("boom"), scripts, workspaces)
    assert list(workspaces.iterdir()) == []
    processes = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert marker not in processes
