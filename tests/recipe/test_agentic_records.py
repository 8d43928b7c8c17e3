"""The agentic loop writes one trajectory record per rollout when ``trajectory_dir`` is set.

veRL's real AgentLoopWorker on CPU with the scripted LLM server (the only stand-in), as in
test_agentic_loop.py; the records are read back with ``read_records``.
"""

from __future__ import annotations

import json

import pytest
from scripted_server import Script, ScriptedServer
from test_agentic_loop import call, row

from cuda_agent.recipe.records import read_records

pytestmark = [pytest.mark.verl, pytest.mark.slow]

SCRIPTS = {
    "rec_malformed": [
        'Writing.\n<tool_call>\n{"name": "Write", "arguments": {"file_path": "model_new.py", </tool_call>',
        "Another way.\n" + call("Compile", target="all"),
        "I give up.",
    ],
    "rec_repeat": ["Look.\n" + call("Bash", command="echo hi")],
}


async def test_every_rollout_becomes_a_record(trainer_config_factory, make_batch, tmp_path):
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    from cuda_agent.reward_fns.evaluation import aclose_embedded

    records_dir = tmp_path / "trajectories"
    config = trainer_config_factory(
        "cuda_agent_agentic_ppo",
        loop_options={
            "workspace_root": str(tmp_path),
            "trajectory_dir": str(records_dir),
            "limits": {"max_turns": 150, "max_observation_chars": 16000},
        },
        response_length=4096,
    )
    worker = AgentLoopWorker(config, llm_client=None)
    worker.llm_client = ScriptedServer(worker.tokenizer, {f"Task id: agentic/{k}\n": Script(v) for k, v in SCRIPTS.items()})
    rows = [row(case, index) for index, case in enumerate(SCRIPTS)]
    rows[1]["extra_info"]["max_turns"] = 4
    batch = make_batch(rows, config, worker.tokenizer, tmp_path)
    try:
        await worker.generate_sequences(batch)
    finally:
        await aclose_embedded()

    records = {record.task_id: record for record in read_records([records_dir])}
    assert set(records) == {"agentic/rec_malformed", "agentic/rec_repeat"}

    malformed = records["agentic/rec_malformed"]
    assert malformed.turns == 3
    assert malformed.messages[0]["role"] == "system" and malformed.messages[-1]["role"] == "assistant"
    assert malformed.flags.malformed_calls >= 2  # the broken JSON and the unknown tool, both refused
    assert malformed.data_source == "cuda_agent/test"
    assert malformed.prompt_tokens and malformed.response_tokens
    assert [tool["function"]["name"] for tool in malformed.tools][:1] == ["Bash"]
    assert malformed.infra_failure is False and malformed.reward is not None

    repeat = records["agentic/rec_repeat"]
    assert repeat.stop_reason == "turn_limit"
    assert repeat.flags.max_repeated_calls == 4
    calls = [m["tool_calls"][0]["function"] for m in repeat.messages if m.get("tool_calls")]
    assert json.loads(calls[0]["arguments"]) == {"command": "echo hi"}
