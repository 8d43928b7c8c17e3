"""Serve a pool on unix sockets (what ``cuda-agent pool serve`` runs).

Two sockets: the pool's own (its owner's clients: the reward function, the CLI on the host) and,
beside it, the sandbox socket (`sandbox_access.sandbox_socket_path`), the only one mounted into
agent sandboxes, through which skill scripts reach the pool without a network. The sandbox socket
runs only the reference problems registered on the pool's own socket (protocol.untrusted_refusal).
A connection carries requests one after another (the client waits for each answer); a job whose
connection closes before its answer is withdrawn from the pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import stat
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from cuda_agent.errors import ConfigError, PoolError
from cuda_agent.sandbox_pool.pool.base import Pool
from cuda_agent.sandbox_pool.pool.problems import ProblemRegistry
from cuda_agent.sandbox_pool.pool.protocol import MAX_LINE_BYTES, error_response, handle_request, response_line
from cuda_agent.sandbox_pool.pool.sandbox_access import sandbox_socket_path

logger = logging.getLogger(__name__)

SANDBOX_SOCKET_MODE = 0o666
"""The sandbox socket's permissions: a sandbox's commands run as a uid of their own (a root caller's
local sandboxes: a fresh one each), which must be able to connect; what they may ask is restricted."""


def default_socket_path() -> Path:
    """$XDG_RUNTIME_DIR/cuda_agent/pool.sock, else /tmp/cuda_agent-<uid>/pool.sock."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = Path(runtime) / "cuda_agent" if runtime else Path(f"/tmp/cuda_agent-{os.getuid()}")
    return base / "pool.sock"


class PoolServer:
    """Answers `protocol` requests on `path` with `pool`. ``async with PoolServer(pool, path): ...``.

    `trust_clients=False` for the socket mounted into agents' sandboxes: its requests are refused
    unless their reference problem is in `registry` (filled by a trusted server sharing it), and
    they may not register, take a priority or re-measure baselines (protocol.untrusted_refusal)."""

    def __init__(self, pool: Pool, path: Path | str, *, mode: int = 0o600, trust_clients: bool = True,
                 registry: ProblemRegistry | None = None) -> None:
        self.pool = pool
        self.path = Path(path)
        self.mode = mode
        self.trust_clients = trust_clients
        self.registry = registry if registry is not None else ProblemRegistry()
        self._server: asyncio.base_events.Server | None = None
        self._handlers: set[asyncio.Task] = set()

    @property
    def address(self) -> str:
        return str(self.path)

    async def start(self) -> None:
        if len(str(self.path).encode()) > 107:
            raise ConfigError(f"socket path {self.path} is longer than the 107 bytes a unix socket allows")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale_socket(self.path)
        self._server = await asyncio.start_unix_server(self._handle, path=str(self.path), limit=MAX_LINE_BYTES)
        os.chmod(self.path, self.mode)
        if self.trust_clients and hasattr(self.pool, "address"):
            self.pool.address = self.address
        logger.info("pool serving on %s", self.path)

    async def serve_forever(self) -> None:
        await self.start()
        assert self._server is not None
        await self._server.serve_forever()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            for task in list(self._handlers):
                task.cancel()
            await asyncio.gather(*self._handlers, return_exceptions=True)
            await self._server.wait_closed()
            self._server = None
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    async def __aenter__(self) -> "PoolServer":
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            while line := await reader.readline():
                response = await self._answer(line, reader)
                if response is None:
                    break
                writer.write(response_line(response))
                await writer.drain()
        except (ConnectionError, asyncio.LimitOverrunError, ValueError) as exc:
            logger.warning("pool connection dropped: %s", exc)
        finally:
            self._handlers.discard(task)
            writer.close()

    async def _answer(self, line: bytes, reader: asyncio.StreamReader):
        """The response to `line`, or None when the client hung up first (its job is withdrawn)."""
        job = asyncio.create_task(handle_request(self.pool, line, trusted=self.trust_clients, registry=self.registry))
        hangup = asyncio.create_task(reader.read(1))
        try:
            await asyncio.wait({job, hangup}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not job.done():
                job.cancel()  # the client is gone (or we are closing): withdraw its job
            hangup.cancel()
            # The reader is free for the next request only once the watcher has really stopped.
            await asyncio.wait({job, hangup})
        if hangup.cancelled() or hangup.exception() is not None:
            return None if job.cancelled() else job.result()
        if not hangup.result():
            return None  # end of stream: the client left before its answer
        return error_response(PoolError("the client sent a request before the previous answer"))


async def serve_until_stopped(pool: Pool, path: Path | str, *, announce: Callable[[PoolServer], None],
                              mode: int = 0o600, until: Awaitable[Any] | None = None,
                              trust_clients: bool = False, sandbox_mode: int = SANDBOX_SOCKET_MODE) -> None:
    """Start `pool`, serve it on `path` and its sandbox socket beside it, call `announce` once serving;
    stop on SIGINT / SIGTERM (or when `until` completes), closing the servers and the pool.
    `trust_clients`: the sandbox socket's clients are trusted too (a pool only its owner can reach).
    `mode` is the own socket's permissions, `sandbox_mode` the sandbox socket's."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    registry = ProblemRegistry()
    sandbox_path = sandbox_socket_path(path)
    async with pool, PoolServer(pool, path, mode=mode, registry=registry) as server, \
            PoolServer(pool, sandbox_path, mode=sandbox_mode, trust_clients=trust_clients, registry=registry):
        logger.info("sandbox socket (mount this one into agent sandboxes): %s", sandbox_path)
        announce(server)
        waits = {asyncio.ensure_future(stop.wait())}
        if until is not None:
            waits.add(asyncio.ensure_future(until))
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()


def _remove_stale_socket(path: Path) -> None:
    """Remove a socket file no server listens on; refuse to take over a live one."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise ConfigError(f"{path} exists and is not a socket; choose another --socket path")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
    except OSError:
        path.unlink()
        return
    finally:
        probe.close()
    raise PoolError(f"a pool already serves at {path}; connect to it (CUDA_AGENT_POOL={path}) or stop it first")
