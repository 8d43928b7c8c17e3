"""The sandbox socket: an agent's sandbox reaches the pool, but cannot choose the code the pool trusts.

The pool executes a job's reference (model.py) in its trusted process, where every reward is computed;
through the socket mounted into sandboxes it runs only the problems registered on its own socket.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from conftest import make_job

from cuda_agent.errors import ConfigError
from cuda_agent.sandbox_pool.harness import EvalStatus
from cuda_agent.sandbox_pool.pool import LocalPool, LocalPoolConfig, PoolClient, PoolServer
from cuda_agent.sandbox_pool.pool.problems import ProblemRegistry
from cuda_agent.sandbox_pool.pool.sandbox_access import grant_sandbox_access, sandbox_socket_path


@pytest.fixture
def folder():
    with tempfile.TemporaryDirectory(prefix="pool", dir="/tmp") as path:
        yield Path(path)


def _with_marker(job, marker: Path):
    """The job with a reference that leaves `marker` behind when the pool's own process executes it (the
    evaluation child, which executes it too, sees a read-only file system)."""
    touch = f"try:\n    open({str(marker)!r}, 'w').close()\nexcept OSError:\n    pass\n"
    return job.model_copy(update={"problem_src": touch + job.problem_src})


async def test_the_sandbox_socket_runs_only_registered_problems(folder: Path, pool_cache: Path) -> None:
    registry = ProblemRegistry()
    marker = folder / "executed"
    job = _with_marker(make_job("cpu_cheat"), marker)
    async with LocalPool(LocalPoolConfig(cache_dir=pool_cache)) as pool, \
            PoolServer(pool, folder / "pool.sock", registry=registry) as own, \
            PoolServer(pool, sandbox_socket_path(own.path), trust_clients=False, registry=registry) as sandbox:
        agent, owner = PoolClient(sandbox.address), PoolClient(own.address)
        for request in (agent.evaluate(job), agent.compile(job), agent.reference_profile(job)):
            with pytest.raises(ConfigError, match="only the reference problems registered"):
                await request
        with pytest.raises(ConfigError, match="only the pool's own socket registers"):
            await agent.register_problem(job.problem_src)
        assert not marker.exists() and (await pool.status()).submitted == 0  # never executed, never queued
        assert (await agent.status()).backend == "local"  # the sandbox may still ask how busy the pool is

        await owner.register_problem(job.problem_src)
        assert (await agent.evaluate(job)).status is EvalStatus.VIOLATION  # registered: served
        assert marker.exists()
        with pytest.raises(ConfigError, match="priority must be 0"):
            await agent.evaluate(job, priority=5)
        changed = job.model_copy(update={"problem_src": job.problem_src + "\n# edited\n"})
        with pytest.raises(ConfigError, match="model.py differs"):
            await agent.evaluate(changed)


def _refreshing(job):
    return job.model_copy(update={"options": job.options.model_copy(update={"refresh_baselines": True})})


async def test_only_the_pools_own_socket_measures_baselines_again(folder: Path, pool_cache: Path) -> None:
    """A sandbox must not replace the baselines rewards are computed against; the owner may, and
    `trust_clients` lets a sandbox socket only its owner can reach do it too."""
    registry = ProblemRegistry()
    async with LocalPool(LocalPoolConfig(cache_dir=pool_cache)) as pool, \
            PoolServer(pool, folder / "pool.sock", registry=registry) as own:
        owner = PoolClient(own.address)
        assert (await owner.evaluate(_refreshing(make_job("cpu_cheat")))).status is EvalStatus.VIOLATION
        async with PoolServer(pool, sandbox_socket_path(own.path), trust_clients=False, registry=registry) as sandbox:
            with pytest.raises(ConfigError, match="does not measure baselines again"):
                await PoolClient(sandbox.address).evaluate(_refreshing(make_job("cpu_cheat")))
        async with PoolServer(pool, sandbox_socket_path(own.path), trust_clients=True, registry=registry) as sandbox:
            result = await PoolClient(sandbox.address).evaluate(_refreshing(make_job("cpu_cheat")))
            assert result.status is EvalStatus.VIOLATION  # evaluated, not refused


async def test_a_sandbox_is_granted_the_sandbox_socket_and_its_task(folder: Path, pool_cache: Path) -> None:
    registry = ProblemRegistry()
    job = make_job("cpu_cheat")
    async with LocalPool(LocalPoolConfig(cache_dir=pool_cache)) as pool, \
            PoolServer(pool, folder / "pool.sock", registry=registry) as own:
        with pytest.raises(ConfigError, match="serves no sandbox socket"):
            await grant_sandbox_access(own.address, job.problem_src)
        async with PoolServer(pool, sandbox_socket_path(own.path), trust_clients=False, registry=registry) as sandbox:
            mounts, env = await grant_sandbox_access(own.address, job.problem_src)
            assert mounts == {sandbox.address: sandbox.address} and env == {"CUDA_AGENT_POOL": sandbox.address}
            assert registry.knows(job.problem_src) and len(registry) == 1
    assert await grant_sandbox_access(None, job.problem_src) == ({}, {})
    assert await grant_sandbox_access("ray://cuda_agent_pool", job.problem_src) == ({}, {})
    with pytest.raises(ConfigError, match="no pool socket"):
        await grant_sandbox_access(str(folder / "none.sock"), job.problem_src)
