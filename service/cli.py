"""``cuda-agent serve-reward``: the reward as an HTTP service (docs/service.md).

Light at import (typer only): FastAPI, uvicorn, pyarrow and the pool load inside the command.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

import typer

from cuda_agent.service import TOKEN_ENV


def register(app: typer.Typer) -> None:
    """Mount ``serve-reward`` on the top-level app."""
    app.command("serve-reward")(serve_reward)


def serve_reward(
    tasks: list[Path] = typer.Option([], "--tasks", help="veRL parquet dataset whose task ids the labels of "
                                     "/get_reward name (repeatable); e.g. examples/data/single_turn.parquet."),
    host: str = typer.Option("127.0.0.1", "--host", help="Interface to bind; any other than loopback needs a token."),
    port: int = typer.Option(8000, "--port", help="TCP port; 0 picks a free one. The URL is printed on stdout."),
    device: str = typer.Option("cuda", "--device", help="cpu or cuda: where evaluations run (overrides the rows')."),
    pool: Optional[str] = typer.Option(None, "--pool", help="Evaluation pool address (socket path or ray://NAME); "
                                       "default $CUDA_AGENT_POOL, else a pool embedded in the service."),
    cpu_workers: int = typer.Option(1, "--cpu-workers", help="Evaluation workers of the embedded pool on cpu."),
    token_env: str = typer.Option(TOKEN_ENV, "--token-env", help="Environment variable holding the bearer token; "
                                  "when it is set, every route but /health requires it."),
    max_in_flight: int = typer.Option(256, "--max-in-flight", help="Evaluations admitted at once; beyond: 503."),
    max_batch: int = typer.Option(256, "--max-batch", help="Most samples / jobs per request; beyond: 413."),
    max_body_mb: float = typer.Option(16.0, "--max-body-mb", help="Largest request body, MiB; beyond: 413."),
    retry_after: int = typer.Option(5, "--retry-after", help="Retry-After of a 503, seconds."),
    eval_timeout: float = typer.Option(1800.0, "--eval-timeout", help="Limit of one evaluation, seconds."),
    reward_kind: str = typer.Option("robust", "--reward-kind", help="robust (-1/1/2/3) or speedup."),
    margin: float = typer.Option(0.05, "--margin", help="Relative improvement that counts as faster."),
    allow_no_auth: bool = typer.Option(False, "--allow-no-auth", help="Serve a non-loopback host without a token."),
    access_log: bool = typer.Option(False, "--access-log", help="Log every request on stderr."),
) -> None:
    """Serve the reward over HTTP: POST /get_reward (OpenRLHF), POST /v1/evaluate, GET /health, GET /metrics.

    Example: cuda-agent serve-reward --tasks examples/data/single_turn.parquet --device cpu --port 8000
    """
    from cuda_agent.cli.contract import require_device
    from cuda_agent.errors import ConfigError
    from cuda_agent.sandbox_pool.pool.config import ENV_ADDRESS
    from cuda_agent.service.config import ServiceConfig
    from cuda_agent.service.tasks import TaskTable

    if reward_kind not in ("robust", "speedup"):
        raise ConfigError(f"--reward-kind {reward_kind!r}: use robust or speedup")
    config = ServiceConfig(
        host=host, port=port, device=device, pool_address=pool or os.environ.get(ENV_ADDRESS) or None,  # type: ignore[arg-type]
        cpu_workers=cpu_workers, tasks=tasks, token=os.environ.get(token_env) or None, allow_no_auth=allow_no_auth,
        max_in_flight=max_in_flight, max_batch=max_batch, max_body_bytes=int(max_body_mb * 2**20),
        retry_after_s=retry_after, eval_timeout_s=eval_timeout, reward_kind=reward_kind, margin=margin)  # type: ignore[arg-type]
    if config.pool_address is None:
        require_device(config.device)
    table = TaskTable.load(config.tasks, config.device)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s: %(message)s")
    with _bound_socket(config.host, config.port) as sock:
        asyncio.run(_serve(config, table, sock, access_log))


@contextlib.contextmanager
def _bound_socket(host: str, port: int) -> Iterator[socket.socket]:
    """Bind before anything starts, so a busy port is a one-line usage error (EADDRINUSE), not a log."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            exc.strerror = f"{exc.strerror}: {host}:{port} (choose another --port, or stop the server using it)"
            raise
        sock.listen(2048)
        sock.set_inheritable(True)
        yield sock
    finally:
        sock.close()


async def _serve(config: Any, table: Any, sock: socket.socket, access_log: bool) -> None:
    import uvicorn

    from cuda_agent.errors import InfraError
    from cuda_agent.sandbox_pool.pool.client import connect_pool
    from cuda_agent.sandbox_pool.pool.config import LocalPoolConfig
    from cuda_agent.service.app import RewardService, create_app

    pool = connect_pool(config.pool_address, config=LocalPoolConfig(device=config.device,
                                                                     cpu_workers=config.cpu_workers))
    service = RewardService(config, pool, table)
    server = _Server(uvicorn.Config(create_app(service, manage_pool=False), log_config=None, access_log=access_log,
                                    lifespan="on", timeout_graceful_shutdown=30))
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, server.stop)
    host, port = sock.getsockname()[:2]
    url = f"http://{host if ':' not in host else f'[{host}]'}:{port}"
    async with pool:
        serving = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started and not serving.done():
            await asyncio.sleep(0.05)
        if server.started:
            where = config.pool_address or f"embedded {config.device} pool"
            sys.stderr.write(f"reward service at {url}: {len(table)} tasks, {where}, "
                             f"auth {'bearer token' if config.token else 'none'}\n")
            sys.stdout.write(url + "\n")
            sys.stdout.flush()
        await serving
    if not server.started:
        raise InfraError("the HTTP server did not start (see the log above)")


class _Server:
    """uvicorn's server without its own signal capture (this command stops it, then closes the pool)."""

    def __init__(self, config: Any) -> None:
        import uvicorn

        class Quiet(uvicorn.Server):
            @contextlib.contextmanager
            def capture_signals(self) -> Iterator[None]:
                yield

        self._server = Quiet(config)

    @property
    def started(self) -> bool:
        return self._server.started

    async def serve(self, sockets: list[socket.socket]) -> None:
        await self._server.serve(sockets=sockets)

    def stop(self) -> None:
        self._server.should_exit = True
