"""The evaluation pool: trusted evaluation workers behind a queue, reachable by address.

    from cuda_agent.sandbox_pool.pool import connect_pool
    async with connect_pool() as pool:          # $CUDA_AGENT_POOL, else an embedded LocalPool
        result = await pool.evaluate(job, priority=0, timeout_s=600)
        print((await pool.status()).latency)

Backends (``PoolConfig``, picked by ``type``): ``local`` (`LocalPool`, embedded) and ``ray``
(`RayPool`: one named dispatcher actor, one evaluation actor per GPU). `PoolClient` reaches a
pool served on a unix socket by ``cuda-agent pool serve`` (`PoolServer`), whose sandbox socket
(`grant_sandbox_access`) runs only registered reference problems. This module is
light: torch and Ray load only when a pool class is first used.
"""

from __future__ import annotations

import importlib
from typing import Any

from cuda_agent.sandbox_pool.pool.config import ENV_ADDRESS, LocalPoolConfig, PoolConfig, RayPoolConfig

_LAZY = {
    "Pool": "base", "PoolStatus": "base", "WorkerStatus": "base", "LatencyStats": "base",
    "LocalPool": "local",
    "PoolClient": "client", "connect_pool": "client",
    "PoolServer": "server", "default_socket_path": "server",
    "grant_sandbox_access": "sandbox_access", "sandbox_socket_path": "sandbox_access", "ProblemRegistry": "problems",
    "RayPool": "ray_pool", "RayPoolClient": "ray_pool",
}

__all__ = ["ENV_ADDRESS", "LocalPoolConfig", "PoolConfig", "RayPoolConfig", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
