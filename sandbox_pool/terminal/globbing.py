"""Glob patterns as regular expressions: `**`, `*`, `?`, `[...]` and `{a,b}` alternatives.

The one glob compiler of the project: the workspace's file listing (files.py) and the agent's Glob and Grep
tools (tools/search.py) match with it, whatever glob the sandbox backend implements, so the model sees the same
semantics everywhere.
"""

from __future__ import annotations

import functools
import re


def _class_end(pattern: str, start: int) -> int:
    """Index of the ']' closing the class opened at `start`, or -1."""
    i = start + 1
    if i < len(pattern) and pattern[i] in "!^":
        i += 1
    if i < len(pattern) and pattern[i] == "]":
        i += 1
    return pattern.find("]", i)


def _split_alternatives(body: str) -> list[str]:
    parts, depth, current = [], 0, []
    for char in body:
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        depth += {"{": 1, "}": -1}.get(char, 0)
        current.append(char)
    parts.append("".join(current))
    return parts


def _brace_end(pattern: str, start: int) -> int:
    depth = 0
    for i in range(start, len(pattern)):
        depth += {"{": 1, "}": -1}.get(pattern[i], 0)
        if depth == 0:
            return i
    return -1


def _translate(pattern: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif char == "*":
            out.append("[^/]*")
            i += 1
        elif char == "?":
            out.append("[^/]")
            i += 1
        elif char == "[" and (end := _class_end(pattern, i)) != -1:
            body = pattern[i + 1 : end].replace("\\", "\\\\")
            if body[:1] in ("!", "^"):
                body = "^" + body[1:]
            out.append(f"[{body}]")
            i = end + 1
        elif char == "{" and (end := _brace_end(pattern, i)) != -1:
            alternatives = _split_alternatives(pattern[i + 1 : end])
            out.append("(?:" + "|".join(_translate(alt) for alt in alternatives) + ")")
            i = end + 1
        else:
            out.append(re.escape(char))
            i += 1
    return "".join(out)


@functools.lru_cache(maxsize=256)
def compile_glob(pattern: str) -> re.Pattern[str]:
    """A regex matching whole relative POSIX paths against `pattern`."""
    return re.compile(_translate(pattern) + r"\Z", re.DOTALL)


def glob_match(pattern: str, relative_path: str) -> bool:
    """Whether `relative_path` matches; a pattern without '/' matches the file name alone."""
    target = relative_path if "/" in pattern else relative_path.rsplit("/", 1)[-1]
    return compile_glob(pattern).match(target) is not None
