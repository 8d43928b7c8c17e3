"""An evaluation worker in a process of its own: one device's evaluator behind a private socket.

Why: the trusted parent of an evaluation works during every job (it prepares the reference,
reads and compares outputs, answers the per-call handshake of the timed calls). Two workers in
one Python process share its interpreter lock and event loop, so each GPU waits on the other's
parent work: on an H200 pair a 1.4 s evaluation took 2.1 s and two GPUs gave 1.35x one. A
process per GPU removes the sharing; the Ray backend does the same with one actor per GPU.

The process runs a one-worker `LocalPool` (same recycling, same withdrawal of a job whose
caller hangs up) served by `PoolServer` on a socket in a private folder. The owning pool
keeps the queue, priorities, deadlines and compile slots; builds land in the shared cache, so
the process finds them there. The process exits when its stdin closes, so it never outlives
the pool that started it, even one killed with SIGKILL.

    python -m cuda_agent.sandbox_pool.pool.worker_process SOCKET CONFIG_JSON   (internal)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TextIO

from cuda_agent.errors import InfraError, PoolUnreachableError, WorkerCrashedError
from cuda_agent.sandbox_pool.harness import BuildResult, EvalJob, EvalResult
from cuda_agent.sandbox_pool.pool.base import WorkerStatus
from cuda_agent.sandbox_pool.pool.client import PoolClient
from cuda_agent.sandbox_pool.pool.config import LocalPoolConfig
from cuda_agent.sandbox_pool.pool.metrics import BusyClock

logger = logging.getLogger(__name__)

START_TIMEOUT_S = 600.0
"""Longest wait for a worker process to serve (torch import, CUDA context, zygote probes)."""
CLOSE_TIMEOUT_S = 30.0
"""Wait for a clean exit after stdin closes, before SIGKILL."""
_NO_DEADLINE_S = 365 * 86400.0  # the owning pool enforces deadlines; the process never times a job out


class ProcessEvalWorker:
    """An `EvalWorker` whose evaluator lives in a child process (same interface, one job at a time)."""

    def __init__(self, name: str, config: LocalPoolConfig) -> None:
        if len(config.worker_devices()) != 1:
            raise ValueError("a worker process owns exactly one device")
        self.name = name
        self.config = config
        self.clock = BusyClock()
        self.jobs_done = 0
        self.current_task_id: str | None = None
        self.process: asyncio.subprocess.Process | None = None
        self._client: PoolClient | None = None
        self._folder: str | None = None
        self.recycles = 0
        self._since_recycle = 0
        self._lifecycle: asyncio.Lock | None = None  # jobs in flight at once (pipeline_depth) start it once

    @property
    def lifecycle(self) -> asyncio.Lock:
        if self._lifecycle is None:
            self._lifecycle = asyncio.Lock()
        return self._lifecycle

    # -- lifecycle ------------------------------------------------------------------------
    async def start(self) -> None:
        async with self.lifecycle:
            await self._start()

    async def _start(self) -> None:
        if self.process is not None and self.process.returncode is None:
            return
        self._folder = tempfile.mkdtemp(prefix="cuda_agent_worker_", dir="/tmp")  # short: sockets allow 107 bytes
        socket = str(Path(self._folder) / "pool.sock")
        self.process = await asyncio.create_subprocess_exec(
            sys.executable, "-P", "-m", __name__, socket, self.config.model_dump_json(),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, start_new_session=True)
        assert self.process.stdout is not None
        try:
            async with asyncio.timeout(START_TIMEOUT_S):
                line = await self.process.stdout.readline()
        except TimeoutError:
            line = b""
        if line.decode().strip() != socket:
            rc = await self._stop()
            raise InfraError(f"the worker process of {self.name} did not start (exit code {rc}); "
                             "its log is on this process's stderr")
        self._client = PoolClient(socket, default_timeout_s=_NO_DEADLINE_S)
        logger.info("worker %s serves from process %d", self.name, self.process.pid)

    async def close(self) -> None:
        await self._stop()

    async def _stop(self) -> int | None:
        """Close stdin (the process closes its pool and exits), kill it if it does not; the exit code."""
        process, self.process, self._client = self.process, None, None
        rc = None
        if process is not None:
            if process.stdin is not None:
                process.stdin.close()
            try:
                async with asyncio.timeout(CLOSE_TIMEOUT_S):
                    rc = await process.wait()
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                rc = await process.wait()
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None
        return rc

    # -- jobs -----------------------------------------------------------------------------
    async def evaluate(self, job: EvalJob, build: BuildResult | None) -> EvalResult:
        """Evaluate one job in the worker process (the build, if any, is in the shared cache)."""
        await self.start()
        assert self._client is not None and self.process is not None
        self.clock.begin()
        self.current_task_id = job.task_id
        try:
            return await self._client.evaluate(job)
        except PoolUnreachableError as exc:
            rc = await self._exit_code()
            if rc is None:
                raise
            raise WorkerCrashedError(f"the worker process of {self.name} died while evaluating "
                                     f"{job.task_id} (exit code {rc}); the job was not evaluated") from exc
        finally:
            self.clock.end()
            self.current_task_id = None

    async def _exit_code(self) -> int | None:
        """The process's exit code if it has ended (waiting briefly for the kernel to report it)."""
        assert self.process is not None
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(1.0):
                await self.process.wait()
        return self.process.returncode

    async def after_job(self, healthy: bool) -> None:
        """Count the job; restart a dead process. The process recycles its own evaluator by the same rules
        (after a job that did not end cleanly, and every `recycle_after_jobs` jobs), counted here."""
        self.jobs_done += 1
        self._since_recycle += 1
        if self.process is None or self.process.returncode is not None:
            async with self.lifecycle:
                if self.process is not None and self.process.returncode is None:
                    return  # another of its jobs restarted it already
                await self._recycle("worker process ended")
        elif not healthy or self._since_recycle >= self.config.recycle_after_jobs:
            self.recycles += 1
            self._since_recycle = 0

    async def recycle(self, reason: str) -> None:
        """Replace the process (and with it the evaluator, its zygote and children)."""
        async with self.lifecycle:
            await self._recycle(reason)

    async def _recycle(self, reason: str) -> None:
        logger.info("restarting the worker process of %s (%s)", self.name, reason)
        self.recycles += 1
        self._since_recycle = 0
        await self._stop()
        try:
            await self._start()  # the lifecycle lock is held
        except InfraError:  # evaluate() starts it again and reports the failure on the job
            logger.exception("restarting the worker process of %s failed", self.name)

    def status(self) -> WorkerStatus:
        clock = self.clock
        return WorkerStatus(name=self.name, device=self.name, busy=clock.busy, current_task_id=self.current_task_id,
                            busy_fraction=clock.fraction(), busy_s=clock.busy_s(), jobs_done=self.jobs_done,
                            recycles=self.recycles, uptime_s=clock.uptime_s())


def make_process_workers(pool: LocalPoolConfig, cache_dir: Path) -> list[ProcessEvalWorker]:
    """One worker process per device of `pool`, each a one-worker pool on the shared cache."""
    workers = []
    for index in pool.worker_devices():
        config = LocalPoolConfig.model_validate({
            **pool.model_dump(), "devices": [index] if pool.device == "cuda" else None, "cpu_workers": 1,
            "compile_workers": 1, "cache_dir": cache_dir, "job_timeout_s": _NO_DEADLINE_S, "worker_processes": False})
        workers.append(ProcessEvalWorker(f"{pool.device}:{index}", config))
    return workers


# -- the worker process ---------------------------------------------------------------------
async def _serve(socket: str, config: LocalPoolConfig, handshake: TextIO) -> None:
    from cuda_agent.sandbox_pool.pool.server import serve_until_stopped

    stdin = asyncio.StreamReader()
    await asyncio.get_running_loop().connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)

    def announce(_: object) -> None:
        handshake.write(socket + "\n")
        handshake.close()

    # Ends when the owner closes stdin (or dies), or on SIGINT / SIGTERM.
    # Its one client is the owning pool (a private socket), which applied its own socket's policy.
    await serve_until_stopped(config.build(), socket, announce=announce, until=stdin.read(),
                              trust_clients=True)


def main() -> None:
    if len(sys.argv) != 3:
        raise SystemExit(f"usage: python -m {__name__} SOCKET CONFIG_JSON (started by LocalPool, not by hand)")
    # stdout carries one line, the socket, once serving; everything else printed here or in the
    # evaluation children goes to stderr, so nothing blocks on a pipe the owner no longer reads.
    handshake = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format=f"%(asctime)s [worker process {sys.argv[1]}] %(name)s: %(message)s")
    asyncio.run(_serve(sys.argv[1], LocalPoolConfig.model_validate_json(sys.argv[2]), handshake))


if __name__ == "__main__":
    main()
