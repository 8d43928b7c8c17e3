"""Runner overhead per turn: everything except model time and the evaluator.

Drives the runner's own turn loop (``cuda_agent.recipe.turns.Episode`` with the runner's
``ChatPolicy``) for ``--turns`` turns against a scripted OpenAI-compatible endpoint on
127.0.0.1 that answers at once, each turn one cheap tool call in the real local sandbox. Per
turn: the HTTP round trip and message handling (``generation_s``, the model's own time being ~0),
the tool call (``tools_s``), and the rest (validation, observations, metrics). Target: <= 50 ms.

    .venv/bin/python benchmarks/runner/bench_overhead.py --turns 40 --out benchmarks/runner/overhead.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "evaluation"))

from openai_scripted import ScriptedOpenAI, call  # noqa: E402

TOOLS = {"read": ("Read", {"file_path": "model.py"}), "bash": ("Bash", {"command": "true"}),
         "write": ("Write", {"file_path": "kernels/note.cpp", "content": "// scratch\n"})}


async def episode(base_url: str, turns: int, tool: str) -> dict:
    from cuda_agent.evaluation.chat_policy import ChatPolicy
    from cuda_agent.evaluation.client import ChatClient, EndpointConfig
    from cuda_agent.recipe.environment import open_environment, tool_schemas
    from cuda_agent.recipe.loop_config import CudaAgentLoopConfig, LoopLimits
    from cuda_agent.recipe.metrics import TrajectoryMetrics
    from cuda_agent.recipe.prompt import build_messages, load_skill
    from cuda_agent.recipe.task_prompts import agentic_prompt
    from cuda_agent.recipe.turns import Episode
    from cuda_agent.reward_fns.options import TaskSpec

    task = TaskSpec(task_id="bench", problem_src=(REPO / "examples/problems/diag_matmul.py").read_text(), device="cpu")
    config = CudaAgentLoopConfig(limits=LoopLimits(max_turns=turns + 5))
    schemas = tool_schemas()
    messages = build_messages(agentic_prompt("bench", "cpu"), load_skill(config.skill_path), task)
    metrics = TrajectoryMetrics()
    async with ChatClient(EndpointConfig(base_url=base_url, model="bench")) as client:
        async with open_environment(task, config) as env:
            policy = ChatPolicy(client, schemas, config.limits.max_total_tokens)
            started = time.perf_counter()
            await Episode(env, policy, config.limits, metrics).run(messages)
            wall = time.perf_counter() - started
    n = metrics.turns
    return {"tool": tool, "turns": n, "wall_s": round(wall, 4), "per_turn_ms": round(1000 * wall / n, 2),
            "http_and_messages_ms": round(1000 * metrics.generation_s / n, 2),
            "tool_ms": round(1000 * metrics.tools_s / n, 2),
            "other_ms": round(1000 * (wall - metrics.generation_s - metrics.tools_s) / n, 2),
            "stop_reason": metrics.stop_reason}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = []
    for tool, (name, arguments) in TOOLS.items():
        steps = [{"content": f"step with {tool}", "tool_calls": [call(name, arguments)]}] * (args.turns - 1)
        with ScriptedOpenAI({"default": [*steps, {"content": "done"}]}, model="bench") as server:
            rows.append(asyncio.run(episode(server.base_url, args.turns, tool)))
    result = {"machine": f"{platform.machine()} {platform.processor() or ''}".strip(), "target_ms": 50,
              "results": rows}
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
