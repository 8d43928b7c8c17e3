"""The initial conversation of a trajectory: SKILL.md and the task in the system message.

The tool schemas are not written into the text here: they go to the chat template through
``apply_chat_template(tools=...)`` (our raw JSON schemas, because veRL's schema model drops
array ``items`` and nested properties).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from cuda_agent.errors import ConfigError
from cuda_agent.reward_fns.options import TaskSpec


def load_skill(path: str | Path) -> str:
    """The text of SKILL.md."""
    skill = Path(path)
    if not skill.is_file():
        raise ConfigError(f"SKILL.md not found at {skill}: set skill_path in the cuda_agent agent-loop config")
    return skill.read_text(encoding="utf-8")


def task_section(task: TaskSpec) -> str:
    """The part of the system message that describes this trajectory's task."""
    return (
        "## This task\n"
        f"- Task id: {task.task_id or 'unknown'}\n"
        f"- Device: {task.device}\n"
        f"- Precision policy: {task.precision_policy.value}\n"
        "- The reference model is `model.py` in the workspace root (read-only).\n"
        "- Write `model_new.py` and files under `kernels/`; the final state of the workspace is evaluated "
        "when you stop.\n"
    )


def build_messages(raw_prompt: Iterable[dict[str, Any]], skill_text: str, task: TaskSpec) -> list[dict[str, Any]]:
    """System message (skill + task) followed by the dataset's messages.

    A system message already in the dataset prompt is kept, after ours, in the same message.
    """
    messages = [dict(message) for message in raw_prompt]
    system = f"{skill_text.rstrip()}\n\n{task_section(task)}"
    if messages and messages[0].get("role") == "system":
        system = f"{system}\n{messages[0].get('content') or ''}".rstrip() + "\n"
        messages = messages[1:]
    return [{"role": "system", "content": system}, *messages]
