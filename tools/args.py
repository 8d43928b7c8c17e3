"""Argument models of the tools: Claude Code's names, validated with extra="forbid".

These models are what `call_tool` validates a call against; the JSON schemas the model
sees live in `schemas.py` and are checked against these models by the tests.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class ReadArgs(_Args):
    """Read a text file with line numbers."""

    file_path: str = Field(description="Workspace-relative path of the file.")
    offset: int | None = Field(None, ge=1, description="First line to show (1-based).")
    limit: int | None = Field(None, ge=1, description="How many lines to show.")


class WriteArgs(_Args):
    """Create or overwrite a file."""

    file_path: str = Field(description="Workspace-relative path of the file.")
    content: str = Field(description="The whole new content.")


class EditArgs(_Args):
    """Replace an exact string in a file."""

    file_path: str = Field(description="Workspace-relative path of the file.")
    old_string: str = Field(description="Exact text to replace (unique unless replace_all).")
    new_string: str = Field(description="Replacement text.")
    replace_all: bool = Field(False, description="Replace every occurrence.")


class EditOp(_Args):
    """One edit of a MultiEdit."""

    old_string: str = Field(description="Exact text to replace (unique unless replace_all).")
    new_string: str = Field(description="Replacement text.")
    replace_all: bool = Field(False, description="Replace every occurrence.")


class MultiEditArgs(_Args):
    """Several edits of one file, applied in order, all or nothing."""

    file_path: str = Field(description="Workspace-relative path of the file.")
    edits: list[EditOp] = Field(min_length=1, description="Edits applied in order to the result of the previous one.")


class GlobArgs(_Args):
    """List files by glob pattern."""

    pattern: str = Field(description="Glob such as '**/*.cu' or 'kernels/*'.")
    path: str | None = Field(None, description="Directory to search in; the workspace root by default.")


class GrepArgs(_Args):
    """Search file contents with a regular expression."""

    pattern: str = Field(description="Python regular expression.")
    path: str | None = Field(None, description="File or directory to search; the workspace root by default.")
    glob: str | None = Field(None, description="Only files matching this glob, e.g. '*.cu' or '*.{cu,cpp}'.")
    output_mode: Literal["content", "files_with_matches", "count"] = Field(
        "files_with_matches", description="What to show."
    )
    case_insensitive: bool = Field(False, alias="-i", description="Case-insensitive search.")
    line_numbers: bool = Field(True, alias="-n", description="Show line numbers (content mode).")
    after: int | None = Field(None, ge=0, alias="-A", description="Lines after each match (content mode).")
    before: int | None = Field(None, ge=0, alias="-B", description="Lines before each match (content mode).")
    context: int | None = Field(None, ge=0, alias="-C", description="Lines around each match (content mode).")
    head_limit: int | None = Field(None, ge=1, description="Show only the first N lines / files / counts.")


class BashArgs(_Args):
    """Run a shell command in the workspace."""

    command: str = Field(min_length=1, description="The command (bash -lc).")
    timeout: int | None = Field(None, ge=1, description="Timeout in milliseconds.")
    run_in_background: bool = Field(False, description="Start it in the background; read it with BashOutput.")
    description: str | None = Field(None, description="Short description of what the command does (logs only).")


class BashOutputArgs(_Args):
    """New output of a background job."""

    bash_id: str = Field(min_length=1, description="Job id returned by Bash with run_in_background.")


class KillBashArgs(_Args):
    """Kill a background job."""

    shell_id: str = Field(min_length=1, description="Job id returned by Bash with run_in_background.")


class TodoItem(_Args):
    """One entry of the todo list."""

    content: str = Field(min_length=1, description="What to do, imperative ('Write the kernel').")
    status: Literal["pending", "in_progress", "completed"] = Field(description="Its state.")
    activeForm: str = Field(min_length=1, description="Present continuous form ('Writing the kernel').")


class TodoWriteArgs(_Args):
    """Replace the todo list."""

    todos: list[TodoItem] = Field(description="The whole updated list.")
