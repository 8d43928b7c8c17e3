"""Trajectory records built to shape, for the records / RFT / value pre-training tests."""

from __future__ import annotations

import json
from typing import Any

from cuda_agent.recipe.records import TrajectoryRecord, flags_from_messages, now_utc
from cuda_agent.tools import tool_schemas

TOOLS = tool_schemas(["Bash", "Write", "Read"])


def qwen3_style_template() -> str:
    """offline_model.py's ChatML template, printing JSON-text arguments as they are (as Qwen3's does;
    Qwen2.5's would quote them again)."""
    from offline_model import CHAT_TEMPLATE

    return CHAT_TEMPLATE.replace(
        "{{- call.function.arguments | tojson }}",
        "{%- if call.function.arguments is string %}{{- call.function.arguments }}"
        "{%- else %}{{- call.function.arguments | tojson }}{%- endif %}",
    )


def call(name: str, arguments: Any, call_id: str | None = None) -> dict[str, Any]:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    out = {"type": "function", "function": {"name": name, "arguments": text}}
    if call_id:
        out["id"] = call_id
    return out


def conversation(assistant_turns: list[list[dict[str, Any]]], final: str | None = "Done.") -> list[dict[str, Any]]:
    """system + user, then one assistant turn per call list (each followed by its tool results)."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You write fast CUDA kernels."},
        {"role": "user", "content": "Optimise model.py."},
    ]
    for index, calls in enumerate(assistant_turns):
        messages.append({"role": "assistant", "content": f"Step {index}.", "tool_calls": calls})
        for call_ in calls:
            messages.append({"role": "tool", "content": "ok", "name": call_["function"]["name"]})
    if final is not None:
        messages.append({"role": "assistant", "content": final})
    return messages


def good_turns() -> list[list[dict[str, Any]]]:
    return [
        [call("Write", {"file_path": "model_new.py", "content": "import torch\n"})],
        [call("Bash", {"command": "bash utils/compile.sh"})],
        [call("Read", {"file_path": "model_new.py"})],
    ]


def record(
    messages: list[dict[str, Any]] | None = None,
    *,
    reward: float | None = 1.0,
    infra_failure: bool = False,
    status: str | None = "correct",
    task_id: str = "level1/diag_matmul",
    tools: list[dict[str, Any]] | None = None,
) -> TrajectoryRecord:
    messages = messages if messages is not None else conversation(good_turns())
    tools = tools if tools is not None else TOOLS
    return TrajectoryRecord(
        messages=messages,
        tools=tools,
        reward=reward,
        status=status,
        infra_failure=infra_failure,
        task_id=task_id,
        turns=sum(1 for m in messages if m["role"] == "assistant"),
        flags=flags_from_messages(messages, tools),
        created=now_utc(),
    )
