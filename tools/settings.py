"""Limits and policies of the agent tools (one `ToolsConfig` per session)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from cuda_agent.sandbox_pool.terminal.config import WORKSPACE_MOUNT
from cuda_agent.sandbox_pool.workspace.layout import PROTECTED_PATHS

#: Workspace entries the CUDA task protects (docs/sandbox.md, "Contract"); an entry
#: protects itself and everything below it.
CUDA_PROTECTED_PATHS: tuple[str, ...] = PROTECTED_PATHS


class ToolsConfig(BaseModel):
    """What the tools allow and how much they show. Defaults fit the CUDA workspace."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    protected_paths: tuple[str, ...] = Field(
        CUDA_PROTECTED_PATHS,
        description="Relative paths Write/Edit/MultiEdit refuse, each with everything below it.",
    )
    workspace_aliases: tuple[str, ...] = Field(
        (WORKSPACE_MOUNT,),
        description="Absolute paths under which the model may see the workspace (e.g. its mount "
        "point inside a container); absolute paths below them are accepted like relative ones.",
    )
    max_output_chars: int = Field(30_000, gt=0, description="Longest observation text; the middle is cut.")
    read_default_limit: int = Field(2000, gt=0, description="Lines Read returns when no limit is given.")
    read_max_line_chars: int = Field(2000, gt=0, description="Longer lines are cut by Read and Grep.")
    read_max_file_bytes: int = Field(
        8 * 1024 * 1024, gt=0, description="Read and Edit refuse larger files (use Bash: head, tail, grep)."
    )
    grep_max_file_bytes: int = Field(2 * 1024 * 1024, gt=0, description="Grep skips larger files.")
    grep_max_files: int = Field(5000, gt=0, description="Grep searches at most this many files.")
    glob_max_results: int = Field(200, gt=0, description="Glob lists at most this many paths.")
    bash_default_timeout_ms: int = Field(120_000, gt=0, description="Bash timeout when none is given.")
    bash_max_timeout_ms: int = Field(600_000, gt=0, description="Largest Bash timeout; larger ones are capped.")
    max_background_jobs: int = Field(8, gt=0, description="Background jobs a session may have running.")
