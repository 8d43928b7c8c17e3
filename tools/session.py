"""`ToolSession`: the per-trajectory state the tools act on."""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from cuda_agent.errors import CudaAgentError
from cuda_agent.sandbox_pool.terminal.base import TerminalSandbox
from cuda_agent.tools.args import TodoItem
from cuda_agent.tools.settings import ToolsConfig

logger = logging.getLogger(__name__)


class ToolSession:
    """One trajectory's tool state: its sandbox, its todo list and its background jobs.

    The session does not own the sandbox unless `on_close` says so: the owner (the agent
    loop) creates the sandbox, makes the session, and closes both at the end of the
    trajectory. `close()` kills the background jobs this session started and then runs
    `on_close` (used by lazily created sessions to close their sandbox and workspace).
    """

    def __init__(
        self,
        sandbox: TerminalSandbox,
        config: ToolsConfig | None = None,
        *,
        on_close: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.sandbox = sandbox
        self.config = config or ToolsConfig()
        self.todos: list[TodoItem] = []
        #: Background jobs started by Bash(run_in_background=true): job id -> command.
        self.background_jobs: dict[str, str] = {}
        #: Jobs seen exited or killed (they stay pollable but no longer count as running).
        self.finished_jobs: set[str] = set()
        #: Serialises Write/Edit/MultiEdit (parallel calls of one turn must not interleave).
        self.write_lock = asyncio.Lock()
        self.calls = 0
        self.errors: collections.Counter[str] = collections.Counter()
        self.in_flight = 0
        self.last_used_s = time.monotonic()
        self.closed = False
        self._on_close = on_close

    @property
    def workspace(self) -> Path:
        """Host path of the workspace root."""
        return Path(self.sandbox.workspace)

    @functools.cached_property
    def workspace_on_host(self) -> bool:
        """Whether the workspace is a directory of this host (then paths are checked here too)."""
        return self.workspace.is_dir()

    def touch(self) -> None:
        """Mark the session as used now (idle reaping counts from here)."""
        self.last_used_s = time.monotonic()

    async def close(self) -> None:
        """Kill this session's background jobs, then run `on_close`. Idempotent."""
        if self.closed:
            return
        self.closed = True
        for job_id in [job for job in self.background_jobs if job not in self.finished_jobs]:
            try:
                await self.sandbox.kill_background(job_id)
            except (CudaAgentError, OSError, KeyError, ValueError):  # the job or sandbox may be gone
                logger.debug("could not kill background job %s", job_id, exc_info=True)
        if self._on_close is not None:
            await self._on_close()
