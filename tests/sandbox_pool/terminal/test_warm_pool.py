"""WarmPool: ready sandboxes bound on acquire, never reused, refilled in the background."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from cuda_agent.errors import SandboxError
from cuda_agent.sandbox_pool.terminal.warm_pool import WarmPool

pytestmark = pytest.mark.timeout(180)


async def _wait_ready(pool: WarmPool, count: int) -> None:
    for _ in range(300):
        if pool.ready >= count:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"pool has {pool.ready} ready sandboxes, expected {count}")


def _mounts() -> str:
    return Path("/proc/self/mounts").read_text()


async def test_acquire_binds_a_warm_sandbox(config_for, workspace, tmp_path):
    config = config_for()
    async with WarmPool(config, size=2) as pool:
        assert pool.ready == 2
        sandbox = await pool.acquire(workspace)
        assert pool.stats == {"warm": 1, "cold": 0}
        result = await sandbox.run("pwd; cat model.py; echo new > kernels/k.cu; echo hacked > model.py")
        assert result.stdout == "/workspace\nclass Model: pass\n" and result.exit_code != 0
        assert (workspace / "kernels" / "k.cu").read_text() == "new\n"
        assert (workspace / "model.py").read_text() == "class Model: pass\n"
        assert await sandbox.read_file("kernels/k.cu") == b"new\n"
        await _wait_ready(pool, 2)

        other = tmp_path / "other"
        other.mkdir()
        (other / "model.py").write_text("other\n")
        second = await pool.acquire(other)
        assert (await second.run("cat model.py; ls")).stdout == "other\nmodel.py\n"

        await pool.release(sandbox)
        with pytest.raises(SandboxError):
            await sandbox.run("true")
        assert (workspace / "kernels" / "k.cu").exists()
    with pytest.raises(SandboxError):
        await second.run("true")
    assert str(workspace) not in _mounts() and "cuda-agent-dsb-" not in _mounts()


async def test_empty_pool_starts_cold(config_for, workspace):
    config = config_for()
    pool = WarmPool(config, size=0)
    await pool.start()
    sandbox = await pool.acquire(workspace)
    try:
        assert pool.stats == {"warm": 0, "cold": 1}
        assert (await sandbox.run("echo ok")).stdout == "ok\n"
    finally:
        await pool.close()
    with pytest.raises(SandboxError):
        await sandbox.run("true")
