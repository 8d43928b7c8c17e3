"""Reach a pool by address: `PoolClient` (unix socket) and `connect_pool` (address resolution).

Address forms (``$CUDA_AGENT_POOL`` holds one; docs/pool.md, "Address resolution"):

    /run/cuda_agent/pool.sock, unix:/path, unix:///path   a pool served by ``cuda-agent pool serve``
    ray://<actor-name>[?namespace=<ns>]                    the named dispatcher actor of a Ray pool
    (none)                                                 an embedded LocalPool for this process
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from cuda_agent.errors import ConfigError, PoolTimeoutError, PoolUnreachableError
from cuda_agent.sandbox_pool.harness.models import EvalJob, EvalResult
from cuda_agent.sandbox_pool.pool.agent_requests import CompileReply, ReferenceProfile
from cuda_agent.sandbox_pool.pool.base import Pool, PoolStatus
from cuda_agent.sandbox_pool.pool.config import ENV_ADDRESS, LocalPoolConfig
from cuda_agent.sandbox_pool.pool.protocol import (
    MAX_LINE_BYTES,
    PoolRequest,
    PoolResponse,
    raise_wire_error,
)


def socket_path(address: str) -> Path:
    """The filesystem path of a unix-socket address."""
    if address.startswith("unix://"):
        return Path(address[len("unix://"):])
    if address.startswith("unix:"):
        return Path(address[len("unix:"):])
    if "://" in address:
        raise ConfigError(f"unsupported pool address {address!r}: use a socket path, unix:PATH or ray://NAME")
    return Path(address)


class PoolClient(Pool):
    """A pool served on a unix socket. One connection per request; any number concurrently."""

    def __init__(self, address: str, *, connect_timeout_s: float = 10.0, status_timeout_s: float = 30.0,
                 default_timeout_s: float = 7200.0, timeout_margin_s: float = 60.0) -> None:
        self.address = address
        self.path = socket_path(address)
        self.connect_timeout_s = connect_timeout_s
        self.status_timeout_s = status_timeout_s
        self.default_timeout_s = default_timeout_s
        self.timeout_margin_s = timeout_margin_s

    async def evaluate(self, job: EvalJob, *, priority: int = 0, timeout_s: float | None = None) -> EvalResult:
        request = PoolRequest(op="submit", job=job, priority=priority, timeout_s=timeout_s)
        # The pool enforces the deadline; the margin only guards against a pool that never answers.
        wait = (timeout_s if timeout_s is not None else self.default_timeout_s) + self.timeout_margin_s
        response = await self._call(request, wait)
        assert response.result is not None
        return response.result

    async def compile(self, job: EvalJob) -> CompileReply:
        wait = job.options.compile_timeout_s + self.timeout_margin_s
        response = await self._call(PoolRequest(op="compile", job=job), wait)
        assert response.build is not None
        return response.build

    async def reference_profile(self, job: EvalJob) -> ReferenceProfile:
        response = await self._call(PoolRequest(op="reference_profile", job=job), self.default_timeout_s)
        assert response.profile is not None
        return response.profile

    async def register_problem(self, problem_src: str) -> None:
        """Let the pool's sandbox socket run this reference problem (the pool's own socket only)."""
        await self._call(PoolRequest(op="register", problem_src=problem_src), self.status_timeout_s)

    async def status(self) -> PoolStatus:
        response = await self._call(PoolRequest(op="status"), self.status_timeout_s)
        assert response.status is not None
        return response.status

    async def _call(self, request: PoolRequest, read_timeout_s: float) -> PoolResponse:
        reader, writer = await self._connect()
        try:
            writer.write(request.model_dump_json().encode() + b"\n")
            await writer.drain()
            async with asyncio.timeout(read_timeout_s):
                line = await reader.readline()
        except TimeoutError:
            raise PoolTimeoutError(f"the pool at {self.path} did not answer within {read_timeout_s:.0f} s") from None
        except (ConnectionError, asyncio.LimitOverrunError, ValueError) as exc:
            raise PoolUnreachableError(f"lost the connection to the pool at {self.path}: {exc}") from exc
        finally:
            writer.close()
        if not line:
            raise PoolUnreachableError(f"the pool at {self.path} closed the connection without answering")
        response = PoolResponse.model_validate_json(line)
        if not response.ok:
            raise_wire_error(response.error)
        return response

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                return await asyncio.open_unix_connection(str(self.path), limit=MAX_LINE_BYTES)
        except (OSError, TimeoutError) as exc:
            raise PoolUnreachableError(
                f"no pool answers at {self.path} ({exc}); start one with `cuda-agent pool serve` "
                f"or unset ${ENV_ADDRESS} to use an embedded pool") from exc


def connect_pool(address: str | None = None, *, config: LocalPoolConfig | None = None) -> Pool:
    """The pool at `address`, else at $CUDA_AGENT_POOL, else a new embedded LocalPool (`config`).

    Nothing is contacted yet: use the result as ``async with connect_pool() as pool``.
    """
    address = address or os.environ.get(ENV_ADDRESS) or None
    if address is None:
        return (config or LocalPoolConfig()).build()
    if address.startswith("ray://"):
        from cuda_agent.sandbox_pool.pool.ray_pool import RayPoolClient

        return RayPoolClient.from_address(address)
    return PoolClient(address)
