"""A warm pool of started, unbound sandboxes, so a trajectory's first call does not wait.

The pool keeps `size` sandboxes started without a workspace (a running container with an
empty workspace slot for docker; a prepared instance for local) and binds one to the
trajectory's workspace on `acquire`. Sandboxes are never reused: `release` closes the
sandbox (whatever a trajectory left in /tmp or in running processes goes with it) and the
pool starts a replacement in the background. When the pool is empty, `acquire` starts a
sandbox itself (a cold start); it never waits for the refill.

    async with WarmPool(LocalSandboxConfig(), size=4) as pool:
        sb = await pool.acquire(workspace)
        try:
            await sb.run("nvcc --version")
        finally:
            await pool.release(sb)
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

from cuda_agent.errors import SandboxError, SandboxUnavailableError
from cuda_agent.sandbox_pool.terminal.base import TerminalSandbox
from cuda_agent.sandbox_pool.terminal.config import DockerSandboxConfig, LocalSandboxConfig, create_sandbox

logger = logging.getLogger(__name__)


class WarmPool:
    """Ready sandboxes of one config; `acquire(workspace)` / `release(sandbox)`."""

    def __init__(
        self,
        config: LocalSandboxConfig | DockerSandboxConfig,
        size: int,
        *,
        protected: list[str] | None = None,
        extra_ro_mounts: dict[str, str] | None = None,
        env: dict[str, str] | None = None,
        max_concurrent_starts: int = 2,
    ) -> None:
        self.config = config
        self.size = size
        self._options = dict(protected=protected, extra_ro_mounts=extra_ro_mounts, env=env)
        self._ready: asyncio.Queue[TerminalSandbox] = asyncio.Queue()
        self._starting = 0
        self._start_slots = asyncio.Semaphore(max_concurrent_starts)
        self._tasks: set[asyncio.Task[None]] = set()
        self._leased: set[TerminalSandbox] = set()
        self._closed = False
        self.warm_disabled_reason: str | None = None
        self.last_error: SandboxError | None = None
        self.stats = {"warm": 0, "cold": 0}

    @property
    def ready(self) -> int:
        """Sandboxes started and waiting for a workspace."""
        return self._ready.qsize()

    async def start(self, wait: bool = True) -> None:
        """Start filling the pool; with `wait`, return once `size` sandboxes are ready.

        Raises the start error if none could be started (a warm pool that is unavailable
        here, such as docker slots without root, only logs: acquire then starts cold).
        """
        self._refill()
        if wait:
            while self._tasks:
                await asyncio.gather(*self._tasks)
            if self.size and not self.ready and self.last_error is not None:
                raise self.last_error

    async def acquire(self, workspace: Path) -> TerminalSandbox:
        """A started sandbox bound to `workspace`: a warm one if ready, else a cold start."""
        if self._closed:
            raise SandboxError("warm pool is closed")
        started = time.monotonic()
        warm = not self._ready.empty()
        if warm:
            sandbox = self._ready.get_nowait()
        else:
            sandbox = create_sandbox(self.config, Path(workspace), **self._options)
        try:
            if warm:
                await sandbox.bind(Path(workspace))
            else:
                await sandbox.start()
        except BaseException:
            await sandbox.close()
            raise
        finally:
            self._refill()
        self.stats["warm" if warm else "cold"] += 1
        self._leased.add(sandbox)
        logger.debug("sandbox acquired in %.3f s", time.monotonic() - started)
        return sandbox

    async def release(self, sandbox: TerminalSandbox) -> None:
        """Close a sandbox from `acquire` (never reused); the pool refills in the background."""
        self._leased.discard(sandbox)
        await sandbox.close()
        self._refill()

    async def close(self) -> None:
        """Stop refilling and close every sandbox, ready or leased."""
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        while not self._ready.empty():
            await self._ready.get_nowait().close()
        for sandbox in list(self._leased):
            await sandbox.close()
        self._leased.clear()

    async def __aenter__(self) -> "WarmPool":
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ refill
    def _refill(self) -> None:
        if self._closed or self.warm_disabled_reason is not None:
            return
        while self._ready.qsize() + self._starting < self.size:
            self._starting += 1
            task = asyncio.create_task(self._start_one())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _start_one(self) -> None:
        sandbox = create_sandbox(self.config, None, **self._options)
        try:
            async with self._start_slots:
                await sandbox.start()
        except SandboxUnavailableError as exc:
            # e.g. docker slots without root: acquire still works, with cold starts
            await sandbox.close()
            self.warm_disabled_reason = str(exc)
            logger.warning("warm pool disabled, every acquire starts a sandbox: %s", exc)
            return
        except SandboxError as exc:  # engine hiccup: the next release or acquire retries
            await sandbox.close()
            self.last_error = exc
            logger.warning("warm pool could not start a sandbox: %s", exc)
            return
        except BaseException:
            await sandbox.close()
            raise
        finally:
            self._starting -= 1
        if self._closed:
            await sandbox.close()
        else:
            self._ready.put_nowait(sandbox)
