"""Demonstrations: a known solution written through the real tools, the way the agent would (issue 44).

A small model rarely earns a positive reward, so rejection fine-tuning would find nothing to keep; a
demonstration gives it a trajectory that does: the solution's files are written with the agent's own tools
in a fresh workspace, compiled, verified and profiled there, and the final workspace is scored by the trusted
evaluator like any trajectory's. Its observations are real, so is its reward; the record names its source
(``TrajectoryRecord.demonstration``) and the RFT filter's report counts the demonstrations it kept.

``DemonstrationPolicy`` is a ``turns.Policy``: one tool call per turn, checked against the tools' schemas
like a model's, then a final message without calls. ``cuda-agent run --solutions DIR --demonstrate`` drives it
over every task that has ``DIR/<task_id>/``; ``cuda-agent quickstart``'s scripted session makes the same calls.
"""

from __future__ import annotations

import json
from typing import Any

from cuda_agent.recipe.tool_calls import validate_call
from cuda_agent.recipe.turns import GeneratedTurn

FINAL_MESSAGE = "The kernels are written, compiled, verified and profiled; the workspace is ready to be scored."
TOOL_TIMEOUT_MS = 600_000


def demonstration_calls(files: dict[str, str]) -> list[tuple[str, dict[str, Any]]]:
    """The tool calls that write `files` (model_new.py and kernels/) as the agent would: read the task, profile
    the reference, write each file, compile, verify, profile."""
    calls: list[tuple[str, dict[str, Any]]] = [
        ("Read", {"file_path": "model.py"}),
        ("Bash", {"command": "python3 -m utils.profiling 2>&1 | head -20", "timeout": TOOL_TIMEOUT_MS}),
    ]
    calls += [("Write", {"file_path": path, "content": content}) for path, content in sorted(files.items())]
    calls += [
        ("Bash", {"command": "bash utils/compile.sh", "timeout": TOOL_TIMEOUT_MS}),
        ("Bash", {"command": "python3 -m utils.verification", "timeout": TOOL_TIMEOUT_MS}),
        ("Bash", {"command": "python3 -m utils.profiling 2>&1 | tail -4", "timeout": TOOL_TIMEOUT_MS}),
    ]
    return calls


class DemonstrationPolicy:
    """Generates the demonstration's turns (``turns.Policy``); counts no tokens (there is no model)."""

    def __init__(self, files: dict[str, str], schemas: list[dict[str, Any]]) -> None:
        self.calls = demonstration_calls(files)
        self.raw_schemas = {schema["function"]["name"]: schema for schema in schemas}
        self.requests = 0
        self.prompt_tokens: int | None = None
        self.context_tokens = 0
        self.completion_tokens = 0
        self.response_tokens: int | None = None

    async def generate(self, messages: list[dict[str, Any]]) -> GeneratedTurn:
        index, self.requests = self.requests, self.requests + 1
        if index >= len(self.calls):
            return GeneratedTurn({"role": "assistant", "content": FINAL_MESSAGE}, [])
        name, arguments = self.calls[index]
        text, call_id = json.dumps(arguments), f"demo_{index}"
        call = validate_call(name, text, call_id, self.raw_schemas)
        if call.error is not None:  # our own calls against our own schemas: a bug here, not a model's mistake
            raise ValueError(f"demonstration call {name} {text[:200]} does not fit the tool's schema: {call.error}")
        message = {"role": "assistant", "content": "",
                   "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}]}
        return GeneratedTurn(message, [call])

    async def observe(self, messages: list[dict[str, Any]], tool_messages: list[dict[str, Any]]) -> bool:
        return True
