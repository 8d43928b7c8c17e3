"""Evaluation workers in processes of their own (`LocalPoolConfig.worker_processes`), on real processes.

The contract suite runs on this mode too (the `processes` backend); these tests cover what only
a worker process can do: run apart from the pool, die, and end with its owner.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import make_job

from cuda_agent.errors import WorkerCrashedError
from cuda_agent.sandbox_pool.harness import EvalStatus
from cuda_agent.sandbox_pool.pool import LocalPool, LocalPoolConfig
from cuda_agent.sandbox_pool.pool.worker_process import ProcessEvalWorker


async def wait_until(predicate, timeout_s: float = 60.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not await predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.05)


def pids(pool: LocalPool) -> list[int]:
    workers = [w for w in pool.workers if isinstance(w, ProcessEvalWorker)]
    return [w.process.pid for w in workers if w.process is not None]


async def test_each_worker_evaluates_in_a_process_of_its_own(pool_cache: Path) -> None:
    config = LocalPoolConfig(cpu_workers=2, worker_processes=True, compile_workers=2, cache_dir=pool_cache)
    async with LocalPool(config) as pool:
        jobs = [make_job("cpu_fast", variant=i, task_id=f"fast-{i}") for i in range(2)]
        jobs += [make_job("cpu_cheat", variant=9, task_id="cheat")]
        results = await asyncio.gather(*(pool.evaluate(job) for job in jobs))
        assert [r.status for r in results] == [EvalStatus.OK, EvalStatus.OK, EvalStatus.VIOLATION]
        assert len(set(pids(pool))) == 2 and os.getpid() not in pids(pool)
        status = await pool.status()
        assert [w.name for w in status.workers] == ["cpu:0", "cpu:1"]
        assert sum(w.jobs_done for w in status.workers) == 3 and status.completed == 3


async def test_a_killed_worker_process_fails_only_its_job_and_is_replaced(pool_cache: Path) -> None:
    config = LocalPoolConfig(worker_processes=True, cache_dir=pool_cache)
    async with LocalPool(config) as pool:
        endless = asyncio.create_task(pool.evaluate(make_job("endless", variant=1), timeout_s=300))

        async def running() -> bool:
            return (await pool.status()).workers[0].current_task_id == "endless"

        await wait_until(running)
        [victim] = pids(pool)
        os.kill(victim, signal.SIGKILL)
        with pytest.raises(WorkerCrashedError, match="died while evaluating endless"):
            await endless
        result = await pool.evaluate(make_job("cpu_fast", variant=2))
        assert result.status is EvalStatus.OK, result.error
        [replacement] = pids(pool)
        assert replacement != victim
        status = await pool.status()
        assert status.failed == 1 and status.completed == 1 and status.workers[0].recycles >= 1


async def test_closing_the_pool_ends_its_worker_processes(pool_cache: Path) -> None:
    pool = LocalPool(LocalPoolConfig(worker_processes=True, cache_dir=pool_cache))
    await pool.start()
    [worker] = pool.workers
    assert isinstance(worker, ProcessEvalWorker)
    process, folder = worker.process, worker._folder
    assert process is not None and folder is not None and process.returncode is None
    await pool.close()
    assert process.returncode == 0, "stdin closed: the process closes its pool and exits cleanly"
    assert not Path(folder).exists()


def test_a_worker_process_exits_when_its_owner_goes_away(pool_cache: Path) -> None:
    """The owner's end of stdin closing (a clean close, or the owner killed) ends the process."""
    folder = tempfile.mkdtemp(prefix="cuda_agent_test_", dir="/tmp")
    socket = os.path.join(folder, "pool.sock")
    config = LocalPoolConfig(cache_dir=pool_cache, worker_processes=False)
    proc = subprocess.Popen([sys.executable, "-P", "-m", "cuda_agent.sandbox_pool.pool.worker_process", socket,
                             config.model_dump_json()], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline().decode().strip() == socket
        assert os.path.exists(socket)
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
        assert proc.stdout.read() == b"", "stdout carries the socket line only"
        assert not os.path.exists(socket)
    finally:
        proc.kill()
        proc.wait()
        os.rmdir(folder)


def test_worker_processes_default_to_several_gpus_only() -> None:
    assert LocalPoolConfig(device="cuda", devices=[0, 1]).uses_worker_processes()
    assert not LocalPoolConfig(device="cuda", devices=[3]).uses_worker_processes()
    assert not LocalPoolConfig(cpu_workers=2).uses_worker_processes()
    assert LocalPoolConfig(cpu_workers=1, worker_processes=True).uses_worker_processes()
    assert not LocalPoolConfig(device="cuda", devices=[0, 1], worker_processes=False).uses_worker_processes()


def test_worker_process_refuses_to_start_by_hand() -> None:
    proc = subprocess.run([sys.executable, "-P", "-m", "cuda_agent.sandbox_pool.pool.worker_process"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "started by LocalPool" in proc.stderr
