"""The terminal-sandbox contract: one async API, several backends (local, docker).

A terminal sandbox is where an agent's CPU work happens: shell commands, file edits,
compiles. It wraps one workspace directory. Backends differ in isolation mechanism only;
the same contract suite (tests/sandbox_pool/terminal/) runs against every backend.

Paths given to the file methods are relative to the workspace root; backends must refuse
paths that escape it (``..``, absolute paths, symlinks pointing outside).

Errors: a model's mistake (a refused or missing path, a write to a protected file, too
many background jobs) raises `ToolCallError`, whose message is meant for the model (a
missing path is also a `FileNotFoundError`, a folder read as a file an
`IsADirectoryError`: files.WorkspaceFileNotFoundError / WorkspaceIsADirectoryError); a
sandbox that cannot be created or used raises `SandboxError` / `SandboxUnavailableError`
(cuda_agent/errors.py). Commands never raise for their own failures: a non-zero exit, a
timeout or a limit hit is a `CommandResult`.
"""

from __future__ import annotations

import abc
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class SandboxLimits(BaseModel):
    """Resource limits applied to every process started in the sandbox."""

    model_config = ConfigDict(extra="forbid")

    cpu_time_s: int = Field(600, description="RLIMIT_CPU per process, seconds.")
    memory_mb: int = Field(8192, description="Address-space / memory limit, MiB.")
    max_processes: int = Field(512, description="Maximum number of processes/threads.")
    file_size_mb: int = Field(1024, description="Largest file a process may write, MiB.")
    command_timeout_s: float = Field(300.0, description="Default wall-clock limit of one command.")
    max_output_bytes: int = Field(64_000, description="stdout/stderr beyond this are truncated.")
    max_background_jobs: int = Field(16, description="Background jobs that may run at once.")


class CommandResult(BaseModel):
    """Outcome of one command run in the sandbox."""

    model_config = ConfigDict(extra="forbid")

    exit_code: int = Field(description="Process exit code; -N if killed by signal N; 124 on timeout.")
    stdout: str = Field(description="Captured standard output (possibly truncated).")
    stderr: str = Field(description="Captured standard error (possibly truncated).")
    truncated: bool = Field(False, description="True if stdout or stderr was cut at max_output_bytes.")
    timed_out: bool = Field(False, description="True if the wall-clock limit killed the command.")
    duration_s: float = Field(0.0, description="Wall-clock time of the command.")


class BackgroundStatus(BaseModel):
    """Incremental output of a background job (BashOutput semantics)."""

    model_config = ConfigDict(extra="forbid")

    job_id: str = Field(description="Identifier returned by start_background.")
    state: Literal["running", "exited", "killed"] = Field(description="Job state now.")
    exit_code: int | None = Field(None, description="Exit code once the job has ended.")
    new_stdout: str = Field("", description="stdout produced since the previous poll.")
    new_stderr: str = Field("", description="stderr produced since the previous poll.")
    truncated: bool = Field(False, description="True if the new output was cut at max_output_bytes.")


class TerminalSandbox(abc.ABC):
    """One sandbox around one workspace. Use as ``async with backend(config, ws) as sb``."""

    workspace: Path

    @abc.abstractmethod
    async def start(self) -> None:
        """Prepare the sandbox (create container / namespace). Idempotent."""

    async def bind(self, workspace: Path) -> None:
        """Attach a started sandbox created without a workspace (warm pools) to one.

        Backends that support warm starts override this; a sandbox binds once.
        """
        raise NotImplementedError(f"{type(self).__name__} cannot be bound after start")

    @abc.abstractmethod
    async def run(self, command: str, timeout_s: float | None = None) -> CommandResult:
        """Run ``bash -c command`` in the workspace root, under the limits.

        Not a login shell: /etc/profile would reset the PATH the sandbox sets (venv, CUDA).
        ``timeout_s`` (default ``limits.command_timeout_s``) bounds the wall clock; on
        expiry every process of the command is killed and the result has
        ``timed_out=True``, ``exit_code=124``. Processes a command leaves running in the
        background end with it (use `start_background` for long-lived ones).
        """

    @abc.abstractmethod
    async def read_file(self, path: str) -> bytes:
        """Read a workspace file (relative path)."""

    @abc.abstractmethod
    async def write_file(self, path: str, data: bytes) -> None:
        """Write a workspace file (relative path); refuses protected files."""

    @abc.abstractmethod
    async def list_files(self, pattern: str = "**/*") -> list[str]:
        """Relative paths of workspace files matching a glob pattern."""

    @abc.abstractmethod
    async def start_background(self, command: str) -> str:
        """Start a background command; returns its job id."""

    @abc.abstractmethod
    async def poll_background(self, job_id: str) -> BackgroundStatus:
        """New output and state of a background job."""

    @abc.abstractmethod
    async def kill_background(self, job_id: str) -> BackgroundStatus:
        """Kill a background job (and its process group)."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Kill everything still running and release resources. Idempotent."""

    async def __aenter__(self) -> "TerminalSandbox":
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
