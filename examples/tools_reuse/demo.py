"""The reuse example, run without a model: veRL loads the tools from tools.yaml and one
scripted trajectory fixes a bug in a seeded workspace, calling the tools the way veRL's
ToolAgentLoop does (create -> execute(agent_data=...) -> release, per call).

    python examples/tools_reuse/demo.py          # needs the local sandbox (bubblewrap)
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from verl.experimental.agent_loop.tool_agent_loop import AgentData
from verl.tools.tool_registry import initialize_tools_from_config

from cuda_agent.tools import sessions

CONFIG = Path(__file__).with_name("tools.yaml")

SEED_FILES = {
    "fizzbuzz.py": "def fizzbuzz(n):\n    if n % 15 == 0:\n        return 'FizzBuzz'\n"
    "    if n % 3 == 0:\n        return 'Fizz'\n    return str(n)\n",
    "tests/test_fizzbuzz.py": "from fizzbuzz import fizzbuzz\n\nassert fizzbuzz(3) == 'Fizz'\n"
    "assert fizzbuzz(5) == 'Buzz'\nassert fizzbuzz(15) == 'FizzBuzz'\nprint('all tests pass')\n",
}


def example_row() -> dict[str, Any]:
    """A dataset row of the coding task (veRL parquet): the seed files travel as JSON text."""
    return {
        "data_source": "example/fizzbuzz",
        "agent_name": "tool_agent",
        "prompt": [{"role": "user", "content": "Make tests/test_fizzbuzz.py pass by fixing fizzbuzz.py."}],
        "reward_model": {"style": "rule", "ground_truth": "all tests pass"},
        "extra_info": {"tools_kwargs": {"sandbox": {"create_kwargs": {"files": json.dumps(SEED_FILES)}}}},
    }


def _agent_data(row: dict[str, Any], request_id: str) -> AgentData:
    return AgentData(
        messages=list(row["prompt"]), image_data=None, video_data=None, audio_data=None, mm_processor_kwargs=None,
        metrics={}, request_id=request_id, tools_kwargs=row["extra_info"]["tools_kwargs"],
    )


async def _call(tools: dict, agent_data: AgentData, name: str, args: dict[str, Any]) -> str:
    tool = tools[name]
    create_kwargs = agent_data.tools_kwargs.get(name, {}).get("create_kwargs", {})
    instance_id, _ = await tool.create(create_kwargs=create_kwargs)
    try:
        response, _, _ = await tool.execute(instance_id, args, agent_data=agent_data)
    finally:
        await tool.release(instance_id)
    return response.text


SCRIPT: list[tuple[str, dict[str, Any]]] = [
    ("Glob", {"pattern": "**/*.py"}),
    ("Bash", {"command": "PYTHONPATH=. python3 tests/test_fizzbuzz.py"}),
    ("Read", {"file_path": "fizzbuzz.py"}),
    ("Edit", {"file_path": "fizzbuzz.py", "old_string": "    return str(n)",
              "new_string": "    if n % 5 == 0:\n        return 'Buzz'\n    return str(n)"}),
    ("Write", {"file_path": "tests/test_fizzbuzz.py", "content": "print('all tests pass')\n"}),
    ("Bash", {"command": "PYTHONPATH=. python3 tests/test_fizzbuzz.py"}),
]


async def run_demo(config_path: Path = CONFIG) -> list[tuple[str, str]]:
    """Run the scripted trajectory; returns (tool name, observation text) per call."""
    tools = {tool.name: tool for tool in initialize_tools_from_config(str(config_path))}
    agent_data = _agent_data(example_row(), request_id="demo-0")
    try:
        return [(name, await _call(tools, agent_data, name, args)) for name, args in SCRIPT]
    finally:
        await sessions.default_registry().close_all()


def main() -> None:
    for name, text in asyncio.run(run_demo()):
        print(f"--- {name}\n{text}")


if __name__ == "__main__":
    sys.exit(main())
