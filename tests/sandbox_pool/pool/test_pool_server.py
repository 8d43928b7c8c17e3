"""The unix-socket server: a client that leaves withdraws its job; a live socket is not taken over."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import pytest
from conftest import make_job

from cuda_agent.errors import PoolError
from cuda_agent.sandbox_pool.harness import EvalStatus
from cuda_agent.sandbox_pool.pool import LocalPool, LocalPoolConfig, PoolClient, PoolServer


@pytest.fixture
def socket_path():
    with tempfile.TemporaryDirectory(prefix="pool", dir="/tmp") as folder:
        yield Path(folder) / "pool.sock"


async def test_a_client_that_leaves_withdraws_its_job(socket_path: Path, pool_cache: Path) -> None:
    async with LocalPool(LocalPoolConfig(cache_dir=pool_cache)) as pool, PoolServer(pool, socket_path):
        client = PoolClient(str(socket_path))
        waiting = asyncio.create_task(client.evaluate(make_job("endless")))
        for _ in range(1800):  # until the endless job occupies the worker (a cold build is slow)
            if (await pool.status()).running == 1:
                break
            await asyncio.sleep(0.1)
        else:
            pytest.fail("the endless job never started")
        waiting.cancel()
        for _ in range(100):
            if (await pool.status()).pending == 0:
                break
            await asyncio.sleep(0.1)
        status = await pool.status()
        assert status.pending == 0 and status.running == 0
        result = await client.evaluate(make_job("cpu_cheat"))  # the worker was recycled and serves again
        assert result.status is EvalStatus.VIOLATION
        assert (await pool.status()).workers[0].recycles == 1


async def test_a_second_server_refuses_a_live_socket(socket_path: Path) -> None:
    pool = LocalPool()
    async with PoolServer(pool, socket_path):
        with pytest.raises(PoolError, match="already serves"):
            await PoolServer(pool, socket_path).start()
    assert not socket_path.exists()


def _refreshing(job):
    return job.model_copy(update={"options": job.options.model_copy(update={"refresh_baselines": True})})


async def test_a_worker_process_serves_its_owners_refresh(pool_cache: Path) -> None:
    """The owner's jobs reach a worker process over the worker's private socket: the owner is trusted there."""
    async with LocalPool(LocalPoolConfig(cache_dir=pool_cache, worker_processes=True)) as pool:
        result = await pool.evaluate(_refreshing(make_job("cpu_cheat")))
    assert result.status is EvalStatus.VIOLATION  # evaluated by the worker, not refused by its socket
