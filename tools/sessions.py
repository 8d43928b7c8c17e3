"""The process-wide registry of tool sessions, keyed by trajectory id.

Two ways in:

* **Owner-bound** (our agent loop, or any loop with an end-of-trajectory hook)::

      session = sessions.bind(trajectory_id, sandbox)      # or a ready ToolSession
      ...                                                  # tools find it by trajectory_id
      sessions.unbind(trajectory_id)                       # the owner closes session and sandbox

* **Lazy** (veRL's stock ToolAgentLoop, which has no end-of-trajectory hook):
  `get_or_create(trajectory_id, factory, idle_timeout_s=...)` makes the session on first
  use; the registry owns it and closes it (`ToolSession.close`, which closes its sandbox)
  when `release(trajectory_id)` is called, when an object registered with
  `release_when_collected` is garbage-collected, or when it has been idle for
  `idle_timeout_s` (a reaper task in the running event loop checks periodically).
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from cuda_agent.errors import ConfigError
from cuda_agent.sandbox_pool.terminal.base import TerminalSandbox
from cuda_agent.tools.session import ToolSession
from cuda_agent.tools.settings import ToolsConfig

logger = logging.getLogger(__name__)

REAP_INTERVAL_MAX_S = 30.0


@dataclass
class _Entry:
    session: ToolSession
    owned: bool
    idle_timeout_s: float | None = None


class SessionRegistry:
    """Trajectory id -> `ToolSession`. One per process (`default_registry()`); tests make their own."""

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._reaper: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def __contains__(self, trajectory_id: object) -> bool:
        return trajectory_id in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def bind(
        self, trajectory_id: str, target: TerminalSandbox | ToolSession, config: ToolsConfig | None = None
    ) -> ToolSession:
        """Register the owner's sandbox (wrapped in a new session) or session; refuses a bound id."""
        if trajectory_id in self._entries:
            raise ConfigError(f"trajectory {trajectory_id!r} already has a tool session; unbind it first")
        session = target if isinstance(target, ToolSession) else ToolSession(target, config)
        self._entries[trajectory_id] = _Entry(session=session, owned=False)
        return session

    def get(self, trajectory_id: str) -> ToolSession | None:
        """The session of `trajectory_id`, or None."""
        entry = self._entries.get(trajectory_id)
        return entry.session if entry else None

    def unbind(self, trajectory_id: str) -> ToolSession | None:
        """Forget `trajectory_id` and return its session (not closed: the caller owns it)."""
        entry = self._entries.pop(trajectory_id, None)
        return entry.session if entry else None

    async def get_or_create(
        self,
        trajectory_id: str,
        factory: Callable[[], Awaitable[ToolSession]],
        *,
        idle_timeout_s: float,
    ) -> ToolSession:
        """The session of `trajectory_id`, created by `factory` on first use (once, even under concurrency)."""
        existing = self.get(trajectory_id)
        if existing is not None:
            return existing
        lock = self._locks.setdefault(trajectory_id, asyncio.Lock())
        try:
            async with lock:
                existing = self.get(trajectory_id)
                if existing is not None:
                    return existing
                session = await factory()
                self._entries[trajectory_id] = _Entry(session=session, owned=True, idle_timeout_s=idle_timeout_s)
        finally:
            self._locks.pop(trajectory_id, None)
        self._ensure_reaper()
        return session

    async def release(self, trajectory_id: str) -> None:
        """Forget `trajectory_id`; close its session if the registry created it."""
        entry = self._entries.pop(trajectory_id, None)
        if entry is not None and entry.owned:
            await entry.session.close()

    def release_when_collected(self, obj: object, trajectory_id: str) -> bool:
        """Release `trajectory_id` soon after `obj` (e.g. veRL's AgentData) is garbage-collected.

        Returns False when `obj` cannot be weakly referenced (then only idle reaping applies).
        """
        loop = asyncio.get_running_loop()
        try:
            weakref.finalize(obj, self._schedule_release, loop, trajectory_id)
        except TypeError:
            logger.debug("%s is not weak-referenceable; session %s is reaped when idle", type(obj), trajectory_id)
            return False
        return True

    def _schedule_release(self, loop: asyncio.AbstractEventLoop, trajectory_id: str) -> None:
        if loop.is_closed() or trajectory_id not in self._entries:
            return
        loop.call_soon_threadsafe(self._spawn, self.release(trajectory_id))

    def _spawn(self, coroutine: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def reap_idle(self) -> list[str]:
        """Close the registry's own sessions idle for longer than their timeout; returns their ids."""
        now = time.monotonic()
        idle = [
            trajectory_id
            for trajectory_id, entry in self._entries.items()
            if entry.owned
            and entry.idle_timeout_s is not None
            and entry.session.in_flight == 0
            and now - entry.session.last_used_s > entry.idle_timeout_s
        ]
        for trajectory_id in idle:
            logger.info("closing tool session %s: idle", trajectory_id)
            await self.release(trajectory_id)
        return idle

    async def close_all(self) -> None:
        """Release every session (closing those the registry owns) and stop the reaper."""
        for trajectory_id in list(self._entries):
            await self.release(trajectory_id)
        if self._reaper is not None and not self._reaper.done():
            self._reaper.cancel()
        self._reaper = None

    def _ensure_reaper(self) -> None:
        loop = asyncio.get_running_loop()
        if self._reaper is not None and not self._reaper.done() and self._reaper.get_loop() is loop:
            return
        self._reaper = loop.create_task(self._reap_forever())

    async def _reap_forever(self) -> None:
        while any(entry.owned for entry in self._entries.values()):
            timeouts = [e.idle_timeout_s for e in self._entries.values() if e.owned and e.idle_timeout_s]
            await asyncio.sleep(min([REAP_INTERVAL_MAX_S, *(t / 4 for t in timeouts)]))
            await self.reap_idle()


_DEFAULT = SessionRegistry()


def default_registry() -> SessionRegistry:
    """The process-wide registry the veRL tools use."""
    return _DEFAULT


def bind(trajectory_id: str, target: TerminalSandbox | ToolSession, config: ToolsConfig | None = None) -> ToolSession:
    """`SessionRegistry.bind` on the process-wide registry."""
    return _DEFAULT.bind(trajectory_id, target, config)


def get(trajectory_id: str) -> ToolSession | None:
    """`SessionRegistry.get` on the process-wide registry."""
    return _DEFAULT.get(trajectory_id)


def unbind(trajectory_id: str) -> ToolSession | None:
    """`SessionRegistry.unbind` on the process-wide registry."""
    return _DEFAULT.unbind(trajectory_id)
