"""Single-turn answers: fenced code blocks labelled with their file path (docs/verl.md, "Single-turn").

A file is a fenced block whose info string holds the language and the path, e.g.::

    ```cuda kernels/fused.cu
    ...
    ```

Only candidate paths may be written (``model_new.py`` and ``kernels/<name>`` with a source
suffix: ``cuda_agent.sandbox_pool.workspace.is_candidate_path``, the workspace's own rule);
blocks with another path, with no path, or left unclosed (a truncated answer) are ignored and
reported; text outside blocks is ignored. If a path appears twice, the last block wins.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field

from cuda_agent.sandbox_pool.workspace import is_candidate_path

MODEL_NEW = "model_new.py"
_OPEN_FENCE = re.compile(r"^(?P<fence>`{3,})(?P<info>[^`]*)$")


class ParsedAnswer(BaseModel):
    """Files extracted from one answer."""

    model_config = ConfigDict(extra="forbid")

    files: dict[str, str] = Field(default_factory=dict, description="Allowed files by relative path.")
    ignored: list[str] = Field(default_factory=list, description="Why each ignored block was ignored.")


def normalize_path(token: str) -> str | None:
    """The allowed workspace path a token names, or None (``./`` prefixes are tolerated)."""
    path = token.strip().removeprefix("./")
    if is_candidate_path(path):
        return path
    return None


def _path_of(info: str) -> tuple[str | None, str]:
    """(allowed path or None, the label shown in reports) of a fence's info string."""
    tokens = info.split()
    for token in reversed(tokens):
        path = normalize_path(token)
        if path is not None:
            return path, token
    return None, info.strip()


def parse_answer(text: str) -> ParsedAnswer:
    """Extract the allowed files of a single-turn answer."""
    answer = ParsedAnswer()
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        opening = _OPEN_FENCE.match(lines[index].strip())
        index += 1
        if opening is None:
            continue
        fence = opening.group("fence")
        path, label = _path_of(opening.group("info"))
        body: list[str] = []
        closed = False
        while index < len(lines):
            line = lines[index]
            index += 1
            stripped = line.strip()
            if stripped.startswith(fence) and not stripped.strip("`"):
                closed = True
                break
            body.append(line)
        if not closed:
            answer.ignored.append(f"unclosed block {label!r}")
        elif path is None:
            answer.ignored.append(f"block without an allowed path {label!r}")
        else:
            answer.files[path] = "\n".join(body) + "\n"
    return answer
