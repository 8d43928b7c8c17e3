"""The tools' JSON schemas in OpenAI function format, as the model sees them.

Hand-written (the descriptions are prompts), complete (arrays keep `items`, objects keep
nested `properties`) and checked against the argument models in `args.py` by the tests.
veRL's `OpenAIFunctionToolSchema` drops `items` and nested properties, so chat templates
get these dicts (`tool_schemas()`), never veRL's model dump.
"""

from __future__ import annotations

import copy
from typing import Any

from cuda_agent.errors import ConfigError

_PATH = "Path relative to the workspace root, e.g. 'model_new.py' or 'kernels/fused.cu'."


def _fn(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


def _str(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


def _int(description: str) -> dict[str, Any]:
    return {"type": "integer", "description": description}


def _bool(description: str) -> dict[str, Any]:
    return {"type": "boolean", "description": description}


_EDIT_ITEM = {
    "type": "object",
    "properties": {
        "old_string": _str("Exact text to replace, copied from the file (without Read's line-number prefix)."),
        "new_string": _str("The text to put in its place."),
        "replace_all": _bool("Replace every occurrence instead of requiring a unique match. Default false."),
    },
    "required": ["old_string", "new_string"],
    "additionalProperties": False,
}

_TODO_ITEM = {
    "type": "object",
    "properties": {
        "content": _str("The task, imperative: 'Write the fused kernel'."),
        "status": {"type": "string", "enum": ["pending", "in_progress", "completed"], "description": "Its state."},
        "activeForm": _str("Present continuous form shown while in progress: 'Writing the fused kernel'."),
    },
    "required": ["content", "status", "activeForm"],
    "additionalProperties": False,
}

_SCHEMAS: list[dict[str, Any]] = [
    _fn(
        "Bash",
        "Run a bash command in the workspace root (the current directory) and return its output and exit "
        "code. No network. Use it to compile, run scripts and inspect the system. Output is truncated in the "
        "middle when long. Long jobs: run_in_background=true, then BashOutput / KillBash.",
        {
            "command": _str("The command to run."),
            "timeout": _int("Timeout in milliseconds (default 120000, at most 600000)."),
            "run_in_background": _bool("Start the command in the background and return a job id at once."),
            "description": _str("A few words on what the command does (for the logs)."),
        },
        ["command"],
    ),
    _fn(
        "BashOutput",
        "Return the output a background job produced since the last call, and whether it is still running.",
        {"bash_id": _str("The job id that Bash returned.")},
        ["bash_id"],
    ),
    _fn(
        "KillBash",
        "Kill a background job started with Bash(run_in_background=true).",
        {"shell_id": _str("The job id that Bash returned.")},
        ["shell_id"],
    ),
    _fn(
        "Read",
        "Read a text file. Lines come numbered like `cat -n` (number, tab, text); the numbers are not part "
        "of the file. Up to 2000 lines from `offset`; use offset/limit to page through long files.",
        {
            "file_path": _str(_PATH),
            "offset": _int("First line to read, 1-based. Default 1."),
            "limit": _int("Number of lines to read. Default 2000."),
        },
        ["file_path"],
    ),
    _fn(
        "Write",
        "Create a file, or overwrite it entirely, with `content`. Parent directories are created. Prefer "
        "Edit for changing part of an existing file.",
        {"file_path": _str(_PATH), "content": _str("The complete file content.")},
        ["file_path", "content"],
    ),
    _fn(
        "Edit",
        "Replace an exact string in a file. old_string must match the file exactly (whitespace included) "
        "and occur once, unless replace_all is true. An empty old_string creates a new file.",
        {
            "file_path": _str(_PATH),
            "old_string": _str("Exact text to replace, copied from the file (without Read's line-number prefix)."),
            "new_string": _str("The text to put in its place (must differ from old_string)."),
            "replace_all": _bool("Replace every occurrence instead of requiring a unique match. Default false."),
        },
        ["file_path", "old_string", "new_string"],
    ),
    _fn(
        "MultiEdit",
        "Apply several exact-string edits to one file, in order, each on the result of the previous. "
        "Atomic: if any edit fails, none is applied.",
        {"file_path": _str(_PATH), "edits": {"type": "array", "items": _EDIT_ITEM, "minItems": 1,
                                            "description": "The edits, applied in order."}},
        ["file_path", "edits"],
    ),
    _fn(
        "Glob",
        "List files whose path (relative to `path`) matches a glob: `*` within a directory, `**` across "
        "directories, `{a,b}` alternatives. Example: pattern='**/*.cu'.",
        {
            "pattern": _str("The glob pattern."),
            "path": _str("Directory to search, relative to the workspace root. Default: the root."),
        },
        ["pattern"],
    ),
    _fn(
        "Grep",
        "Search file contents with a Python regular expression. Binary and very large files are skipped.",
        {
            "pattern": _str("Python regular expression, e.g. 'def forward' or '__global__ void \\w+'."),
            "path": _str("File or directory to search, relative to the workspace root. Default: the root."),
            "glob": _str("Only search files matching this glob, e.g. '*.cu' or '*.{cu,cpp,h}'."),
            "output_mode": {
                "type": "string",
                "enum": ["content", "files_with_matches", "count"],
                "description": "content: matching lines; files_with_matches: file paths (default); "
                "count: matches per file.",
            },
            "-i": _bool("Case-insensitive."),
            "-n": _bool("Show line numbers in content mode. Default true."),
            "-A": _int("Lines of context after each match (content mode)."),
            "-B": _int("Lines of context before each match (content mode)."),
            "-C": _int("Lines of context before and after each match (content mode)."),
            "head_limit": _int("Show only the first N lines / paths / counts."),
        },
        ["pattern"],
    ),
    _fn(
        "TodoWrite",
        "Replace your todo list for this task and show it. Keep exactly one item in_progress; mark items "
        "completed as soon as they are done.",
        {"todos": {"type": "array", "items": _TODO_ITEM, "description": "The whole updated list."}},
        ["todos"],
    ),
]


def tool_schemas(names: list[str] | None = None) -> list[dict[str, Any]]:
    """OpenAI function schemas of the tools (all, or those in `names`, in that order); fresh copies."""
    by_name = {schema["function"]["name"]: schema for schema in _SCHEMAS}
    if names is None:
        return copy.deepcopy(_SCHEMAS)
    missing = [name for name in names if name not in by_name]
    if missing:
        raise ConfigError(f"unknown tool names {missing}; known: {sorted(by_name)}")
    return [copy.deepcopy(by_name[name]) for name in names]
