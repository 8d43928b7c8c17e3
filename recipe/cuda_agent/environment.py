"""A trajectory's environment: its workspace, its terminal sandbox and its tool session.

The only place the agent loop touches the sandbox_pool and tools packages; they are imported
when a trajectory starts, so the plugin import stays light. ``open_environment`` is an async
context manager: the tool session and the sandbox are closed and the workspace removed on
every exit path, exceptions included.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cuda_agent.recipe.loop_config import CudaAgentLoopConfig, SandboxSpec
from cuda_agent.reward_fns.options import TaskSpec

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Observation:
    """What one tool call returned to the model."""

    text: str
    is_error: bool
    exit_code: int | None = None
    """Exit code of a Bash command (None for other tools)."""


def tool_schemas() -> list[dict[str, Any]]:
    """Our raw OpenAI-function schemas (arrays and nested objects intact)."""
    from cuda_agent.tools import tool_schemas as schemas

    return schemas()


class TrajectoryEnvironment:
    """Tools and files of one trajectory; built by ``open_environment``."""

    def __init__(self, workspace: Path, sandbox: Any, session: Any):
        self.workspace = workspace
        self.sandbox = sandbox
        self.session = session

    async def call(self, name: str, arguments: dict[str, Any]) -> Observation:
        """Run one tool call. The model's mistakes come back as error observations;
        infrastructure failures (``SandboxError``) raise."""
        from cuda_agent.tools import call_tool

        observation = await call_tool(self.session, name, arguments)
        exit_code = observation.metrics.get("exit_code")
        return Observation(
            text=observation.text,
            is_error=observation.is_error,
            exit_code=None if exit_code is None else int(exit_code),
        )

    async def candidate_files(self) -> dict[str, str]:
        """The candidate files now in the workspace (raises ``WorkspaceError`` for unusable ones)."""
        from cuda_agent.sandbox_pool.workspace import read_candidate_files

        return await asyncio.to_thread(read_candidate_files, self.workspace)


def sandbox_config(spec: SandboxSpec) -> Any:
    """The terminal package's config model for ``spec``."""
    from pydantic import TypeAdapter

    from cuda_agent.sandbox_pool.terminal.config import SandboxConfig

    return TypeAdapter(SandboxConfig).validate_python({"type": spec.type, **spec.options})


@contextlib.asynccontextmanager
async def open_environment(
    task: TaskSpec, config: CudaAgentLoopConfig, pool_address: str | None = None
) -> AsyncIterator[TrajectoryEnvironment]:
    """Create the workspace, sandbox and tool session of a trajectory; release them on exit."""
    from cuda_agent.sandbox_pool.pool.sandbox_access import grant_sandbox_access
    from cuda_agent.sandbox_pool.terminal.config import create_sandbox
    from cuda_agent.sandbox_pool.workspace import create_workspace
    from cuda_agent.tools import ToolSession

    root = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="cuda_agent_ws_", dir=config.workspace_root))
    sandbox = session = None
    try:
        workspace = await asyncio.to_thread(create_workspace, task.problem_src, root / "workspace", task.device)
        # The task's model.py registered with a served pool, whose sandbox socket is mounted and named by
        # $CUDA_AGENT_POOL (sandbox_access.py); sandboxes have no network, so a ray:// pool is not passed in.
        mounts, env = await grant_sandbox_access(pool_address, task.problem_src)
        sandbox = create_sandbox(sandbox_config(config.sandbox), workspace, extra_ro_mounts=mounts, env=env)
        await sandbox.start()
        session = ToolSession(sandbox)
        yield TrajectoryEnvironment(workspace, sandbox, session)
    finally:
        try:
            if session is not None:
                await session.close()
        finally:
            try:
                if sandbox is not None:
                    await sandbox.close()
            finally:
                await asyncio.to_thread(_remove_tree, root)


def _remove_tree(root: Path) -> None:
    """Remove a workspace tree, read-only protected files included."""
    for path in [root, *root.rglob("*")]:
        if not path.is_symlink():
            with contextlib.suppress(OSError):
                path.chmod(path.stat().st_mode | 0o700)
    shutil.rmtree(root, ignore_errors=True)


async def save_snapshot(files: dict[str, str], folder: Path) -> None:
    """Write candidate files to ``folder`` (re-scorable with compute_score's workspace_snapshot)."""

    def write() -> None:
        for relative, text in files.items():
            target = folder / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")

    await asyncio.to_thread(write)
