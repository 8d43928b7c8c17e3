"""The session registry: owner binding, lazy creation, release on collection, idle reaping."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

import pytest
from host_sandbox import HostSandbox

from cuda_agent.errors import ConfigError
from cuda_agent.tools import ToolSession, sessions
from cuda_agent.tools.sessions import SessionRegistry


class _Closing(ToolSession):
    closed_count = 0

    async def close(self) -> None:
        type(self).closed_count += 1
        await super().close()


def _factory(workspace: Path, made: list[ToolSession]):
    async def make() -> ToolSession:
        await asyncio.sleep(0.01)  # let concurrent callers race
        session = _Closing(HostSandbox(workspace))
        made.append(session)
        return session

    return make


def test_bind_get_unbind(registry: SessionRegistry, workspace: Path) -> None:
    session = registry.bind("t1", HostSandbox(workspace))
    assert registry.get("t1") is session and "t1" in registry and len(registry) == 1
    with pytest.raises(ConfigError, match="already has a tool session"):
        registry.bind("t1", session)
    assert registry.unbind("t1") is session and registry.get("t1") is None and registry.unbind("t1") is None


def test_module_level_functions_use_the_process_registry(workspace: Path) -> None:
    session = ToolSession(HostSandbox(workspace))
    assert sessions.bind("module-level", session) is session
    assert sessions.get("module-level") is session
    assert sessions.default_registry().get("module-level") is session
    assert sessions.unbind("module-level") is session


async def test_lazy_creation_happens_once_under_concurrency(registry: SessionRegistry, workspace: Path) -> None:
    made: list[ToolSession] = []
    results = await asyncio.gather(
        *(registry.get_or_create("t", _factory(workspace, made), idle_timeout_s=60) for _ in range(5))
    )
    assert len(made) == 1 and all(r is made[0] for r in results)
    await registry.release("t")
    assert made[0].closed and "t" not in registry


async def test_owner_bound_sessions_are_not_closed_by_the_registry(registry: SessionRegistry, workspace: Path) -> None:
    session = registry.bind("owner", _Closing(HostSandbox(workspace)))
    await registry.release("owner")
    assert not session.closed


async def test_idle_sessions_are_reaped(registry: SessionRegistry, workspace: Path) -> None:
    made: list[ToolSession] = []
    await registry.get_or_create("idle", _factory(workspace, made), idle_timeout_s=0.2)
    busy = await registry.get_or_create("busy", _factory(workspace, made), idle_timeout_s=0.2)
    busy.in_flight = 1  # a long call in progress is never reaped
    await asyncio.sleep(0.5)
    assert "idle" not in registry and made[0].closed
    assert "busy" in registry and not busy.closed
    busy.in_flight = 0


async def test_release_when_collected(registry: SessionRegistry, workspace: Path) -> None:
    class Owner:
        pass

    owner = Owner()
    made: list[ToolSession] = []
    await registry.get_or_create("traj", _factory(workspace, made), idle_timeout_s=600)
    registry.release_when_collected(owner, "traj")
    del owner
    gc.collect()
    for _ in range(20):
        await asyncio.sleep(0.01)
        if "traj" not in registry:
            break
    assert "traj" not in registry and made[0].closed
