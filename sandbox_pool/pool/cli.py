"""`cuda-agent pool serve` and `cuda-agent pool status`.

Light at import (typer only): torch loads when a pool starts, Ray only with ``--backend ray``.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from cuda_agent.sandbox_pool.pool.base import Pool, PoolStatus

from cuda_agent.cli.contract import ContractGroup

app = typer.Typer(help="The evaluation pool: start one, read its metrics.", no_args_is_help=True, cls=ContractGroup)


@app.command()
def serve(
    device: str = typer.Option("cpu", "--device", help="cpu or cuda."),
    socket: Path | None = typer.Option(None, "--socket", help="Unix socket path; default under $XDG_RUNTIME_DIR or /tmp."),
    backend: str = typer.Option("local", "--backend", help="local (workers in this process) or ray."),
    devices: str | None = typer.Option(None, "--devices", help="GPU indices for local cuda, e.g. 0,1; default all."),
    cpu_workers: int = typer.Option(1, "--cpu-workers", help="Evaluation workers on the cpu device (local)."),
    worker_processes: bool | None = typer.Option(
        None, "--worker-processes/--in-process",
        help="Each evaluation worker in a process of its own, or all in this one (local); default: "
        "own processes when there are several GPUs."),
    compile_workers: int = typer.Option(2, "--compile-workers", help="Concurrent candidate builds."),
    max_pending: int = typer.Option(256, "--max-pending", help="Back-pressure: jobs admitted and not finished."),
    job_timeout: float = typer.Option(1800.0, "--job-timeout", help="Default deadline of a job, seconds."),
    recycle_after: int = typer.Option(200, "--recycle-after", help="Replace a worker's evaluator after N jobs."),
    pipeline_depth: int | None = typer.Option(
        None, "--pipeline-depth", help="Evaluations in flight per device (only timed calls have it alone); "
        "default 4 on cuda, 1 on cpu."),
    window_check: bool = typer.Option(
        False, "--window-check/--no-window-check",
        help="Time the eager reference again in each timed evaluation's window and refuse a reward timed under "
        "load (infra_error 'machine loaded'); ~0.3-0.8 s per correct evaluation."),
    ray_name: str = typer.Option("cuda_agent_pool", "--ray-name", help="Name of the dispatcher actor (ray)."),
    ray_workers: int = typer.Option(1, "--ray-workers", help="Evaluation actors, one per GPU (ray)."),
    ray_address: str | None = typer.Option(None, "--ray-address", help="ray.init address (ray); default: auto/local."),
    socket_mode: str = typer.Option("600", "--socket-mode", help="Octal permissions of the pool's own socket."),
    sandbox_socket_mode: str = typer.Option(
        "666", "--sandbox-socket-mode",
        help="Octal permissions of the sandbox socket (pool.sandbox.sock beside --socket): sandbox commands run "
        "as uids of their own; the socket runs only registered reference problems."),
    trust_clients: bool = typer.Option(
        False, "--trust-clients",
        help="Trust the sandbox socket's clients as the pool's own: any reference problem, priorities, baselines "
        "measured again. Off by default: that socket is mounted into agent sandboxes, and the pool executes a "
        "job's model.py in its trusted process."),
) -> None:
    """Start a pool, print its address(es) on stdout, serve until SIGINT / SIGTERM.

    Besides its socket the pool serves a sandbox socket next to it (pool.sock -> pool.sandbox.sock): mount
    only that one into agent sandboxes; it runs only reference problems registered on the pool's socket."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s: %(message)s")
    config = _config(backend, device, devices, cpu_workers, worker_processes, compile_workers, max_pending,
                     job_timeout, recycle_after, ray_name, ray_workers, ray_address, pipeline_depth, window_check)
    from cuda_agent.cli.contract import require_device
    from cuda_agent.errors import ConfigError
    from cuda_agent.sandbox_pool.pool.server import default_socket_path

    try:
        mode, sandbox_mode = int(socket_mode, 8), int(sandbox_socket_mode, 8)
    except ValueError:
        raise ConfigError(f"--socket-mode {socket_mode!r} / --sandbox-socket-mode {sandbox_socket_mode!r}: not an "
                          "octal mode; use e.g. 600 or 666") from None
    if backend == "local" and not devices:
        require_device(device)
    path = socket or default_socket_path()
    _check_socket_free(path)
    if backend == "ray":  # join / start the cluster on the main thread, before the event loop
        from cuda_agent.sandbox_pool.pool.ray_pool import init_ray

        init_ray(ray_address)
    asyncio.run(_serve(config.build(), path, mode, trust_clients, sandbox_mode))


def _check_socket_free(path: Path) -> None:
    """A usage error, before any worker starts, when a pool already answers at `path`."""
    import socket as sockets

    from cuda_agent.errors import ConfigError

    if not path.exists():
        return
    probe = sockets.socket(sockets.AF_UNIX, sockets.SOCK_STREAM)
    try:
        probe.connect(str(path))
    except OSError:
        return  # stale: the server removes it
    finally:
        probe.close()
    raise ConfigError(f"a pool already serves at {path}; connect to it (CUDA_AGENT_POOL={path}) or choose another "
                      "--socket")


def _config(backend: str, device: str, devices: str | None, cpu_workers: int, worker_processes: bool | None,
            compile_workers: int, max_pending: int, job_timeout: float, recycle_after: int, ray_name: str, ray_workers: int,
            ray_address: str | None, pipeline_depth: int | None = None, window_check: bool = False):
    from pydantic import ValidationError

    from cuda_agent.sandbox_pool.pool.config import LocalPoolConfig, RayPoolConfig

    common = dict(device=device, compile_workers=compile_workers, max_pending_jobs=max_pending,
                  job_timeout_s=job_timeout, recycle_after_jobs=recycle_after, pipeline_depth=pipeline_depth,
                  window_check=window_check)
    try:
        if backend == "local":
            indices = [int(i) for i in devices.split(",")] if devices else None
            return LocalPoolConfig(devices=indices, cpu_workers=cpu_workers, worker_processes=worker_processes,
                                   **common)
        if backend == "ray":
            return RayPoolConfig(name=ray_name, num_workers=ray_workers, ray_address=ray_address,
                                 num_gpus_per_worker=1.0 if device == "cuda" else 0.0, **common)
    except (ValidationError, ValueError) as exc:
        raise typer.BadParameter(str(exc)) from exc
    raise typer.BadParameter("use local or ray", param_hint="--backend")


async def _serve(pool: "Pool", path: Path, mode: int, trust_clients: bool = False, sandbox_mode: int = 0o666) -> None:
    from cuda_agent.sandbox_pool.pool.server import PoolServer, serve_until_stopped

    def announce(server: PoolServer) -> None:
        typer.echo(server.address)
        ray_address = getattr(pool, "ray_address", None)
        if ray_address:
            typer.echo(ray_address)
        sys.stdout.flush()

    await serve_until_stopped(pool, path, announce=announce, mode=mode, trust_clients=trust_clients,
                              sandbox_mode=sandbox_mode)


@app.command()
def status(
    address: str | None = typer.Option(None, "--address", help="Pool address; default $CUDA_AGENT_POOL."),
    as_json: bool = typer.Option(False, "--json", help="Print the PoolStatus as JSON."),
) -> None:
    """Print the pool's workers, queue depth, busy fraction and latency percentiles."""
    import os

    from cuda_agent.errors import ConfigError
    from cuda_agent.sandbox_pool.pool.config import ENV_ADDRESS

    address = address or os.environ.get(ENV_ADDRESS)
    if not address:
        raise ConfigError(f"no pool address: pass --address or set {ENV_ADDRESS}")
    snapshot = asyncio.run(_status(address))  # PoolError: an infrastructure failure (exit 3)
    if as_json:
        typer.echo(snapshot.model_dump_json(indent=2))
    else:
        _print_status(snapshot)


async def _status(address: str) -> "PoolStatus":
    from cuda_agent.sandbox_pool.pool.client import connect_pool

    async with connect_pool(address) as pool:
        return await pool.status()


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _print_status(s: "PoolStatus") -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    lat = s.latency
    console.print(
        f"[bold]{s.backend}[/] pool on {s.device}  address {s.address or '-'}  up {s.uptime_s:.0f} s\n"
        f"queue depth {s.queue_depth}  compiling {s.compiling}  running {s.running}  "
        f"pending {s.pending}/{s.max_pending}\n"
        f"submitted {s.submitted}  completed {s.completed}  failed {s.failed} (timed out {s.timed_out})  "
        f"rejected {s.rejected}\n"
        f"busy {s.busy_fraction:.1%}  latency p50 {_seconds(lat.p50_s)} s  p90 {_seconds(lat.p90_s)} s  "
        f"p99 {_seconds(lat.p99_s)} s  (n={lat.count})")
    table = Table("worker", "device", "busy", "task", "busy fraction", "jobs", "recycles")
    table.columns[0].overflow = "fold"
    for w in s.workers:
        table.add_row(w.name, w.device, "yes" if w.busy else "no", w.current_task_id or "-",
                      f"{w.busy_fraction:.1%}", str(w.jobs_done), str(w.recycles))
    console.print(table)
