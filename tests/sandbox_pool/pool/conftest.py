"""Fixtures of the pool tests: jobs from the diag_matmul example and a pool per backend.

`make_pool(**config)` builds a pool of the test's backend: `local` (LocalPool), `processes`
(a LocalPool whose worker runs in a process of its own), `socket`
(a PoolClient talking to a PoolServer over a LocalPool) or `ray` (a RayPool on the session's
local Ray cluster with declared GPU resources, marked `ray`). The compile and baseline cache
is one temporary directory per session, so torch.compile baselines are measured once.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from cuda_agent.sandbox_pool.harness import EvalJob, EvalOptions
from cuda_agent.sandbox_pool.pool import LocalPool, LocalPoolConfig, Pool, PoolClient, PoolServer
from cuda_agent.sandbox_pool.workspace import read_candidate_files

ROOT = Path(__file__).resolve().parents[3]
PROBLEM = ROOT / "examples" / "problems" / "diag_matmul.py"
SOLUTIONS = ROOT / "examples" / "solutions" / "diag_matmul"

ENDLESS_MODEL_NEW = '''import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        while True:
            pass
'''


def make_job(solution: str, variant: int | None = None, task_id: str | None = None) -> EvalJob:
    """A job for an example solution (cpu_fast, cpu_slow, cpu_cheat, or 'endless');
    `variant` appends a comment to model_new.py so each job has its own candidate hash."""
    files = read_candidate_files(SOLUTIONS / ("cpu_fast" if solution == "endless" else solution))
    if solution == "endless":
        files["model_new.py"] = ENDLESS_MODEL_NEW
    if variant is not None:
        files["model_new.py"] += f"\n# variant {variant}\n"
    return EvalJob(problem_src=PROBLEM.read_text(), files=files, device="cpu",
                   options=EvalOptions(timed_calls=5), task_id=task_id or solution)


@pytest.fixture(scope="session")
def pool_cache() -> Iterator[Path]:
    """One compile / baseline cache for the session, also exported to Ray workers."""
    with tempfile.TemporaryDirectory(prefix="cuda_agent_pool_test_") as tmp:
        old = os.environ.get("CUDA_AGENT_CACHE")
        os.environ["CUDA_AGENT_CACHE"] = tmp
        yield Path(tmp)
        if old is None:
            os.environ.pop("CUDA_AGENT_CACHE", None)
        else:
            os.environ["CUDA_AGENT_CACHE"] = old


@pytest.fixture(scope="session")
def ray_cluster(pool_cache: Path) -> Iterator[None]:
    """A real local Ray cluster declaring one GPU (the evaluation actors ask for num_gpus=1)."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, num_gpus=1, include_dashboard=False, namespace="cuda_agent_test",
             logging_level="WARNING")
    yield
    ray.shutdown()


@pytest.fixture(params=["local", "processes", "socket", pytest.param("ray", marks=pytest.mark.ray)])
def backend(request: pytest.FixtureRequest) -> str:
    if request.param == "ray":
        request.getfixturevalue("ray_cluster")
    return request.param


@pytest.fixture
async def make_pool(backend: str, pool_cache: Path) -> AsyncIterator[Callable[..., object]]:
    async with contextlib.AsyncExitStack() as stack:
        async def make(**overrides: object) -> Pool:
            if backend == "ray":
                from cuda_agent.sandbox_pool.pool import RayPool, RayPoolConfig

                config = RayPoolConfig(name=f"test-pool-{uuid.uuid4().hex[:8]}", num_workers=1,
                                       num_gpus_per_worker=1, cache_dir=pool_cache, **overrides)
                return await stack.enter_async_context(RayPool(config))
            if backend == "processes":
                overrides.setdefault("worker_processes", True)
            local = await stack.enter_async_context(LocalPool(LocalPoolConfig(cache_dir=pool_cache, **overrides)))
            if backend in ("local", "processes"):
                return local
            folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="pool", dir="/tmp"))
            server = await stack.enter_async_context(PoolServer(local, Path(folder) / "pool.sock"))
            return PoolClient(server.address)

        yield make
