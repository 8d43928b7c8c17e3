"""A test double of the TerminalSandbox contract: plain host processes, no isolation.

File operations go through the real backends' shared file layer (`WorkspaceFiles`), so
its refusals (symlinks, escapes, protected files) are the real ones; commands run as
plain host processes.

It lets the tool tests run where no real backend is installed; the same tests also run
against the real local (and docker) backends when they exist (see conftest.py).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
import uuid
from pathlib import Path

from cuda_agent.sandbox_pool.terminal.base import BackgroundStatus, CommandResult, TerminalSandbox
from cuda_agent.sandbox_pool.terminal.config import DEFAULT_PROTECTED
from cuda_agent.sandbox_pool.terminal.files import WorkspaceFiles


#: Like the real backends (which mount this interpreter), `python3` is this interpreter.
_ENV = {**os.environ, "PATH": f"{os.path.dirname(sys.executable)}:{os.environ.get('PATH', '/usr/bin:/bin')}"}


class HostSandbox(TerminalSandbox):
    """Runs commands with `bash -c` in the workspace directory, on the host."""

    def __init__(self, workspace: Path, max_output_bytes: int = 64_000) -> None:
        self.workspace = Path(workspace)
        self.max_output_bytes = max_output_bytes
        self._jobs: dict[str, tuple[asyncio.subprocess.Process, Path, list[int], bool]] = {}
        self._files: WorkspaceFiles | None = None

    async def start(self) -> None:
        self.workspace.mkdir(parents=True, exist_ok=True)
        if self._files is None:
            self._files = WorkspaceFiles(self.workspace, list(DEFAULT_PROTECTED))

    async def run(self, command: str, timeout_s: float | None = None) -> CommandResult:
        started = time.monotonic()
        process = await asyncio.create_subprocess_exec(
            "bash", "-c", command, cwd=self.workspace, start_new_session=True, env=_ENV,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        try:
            out, err = await asyncio.wait_for(process.communicate(), timeout_s or 300)
            timed_out, code = False, process.returncode or 0
        except asyncio.TimeoutError:
            os.killpg(process.pid, signal.SIGKILL)
            out, err = await process.communicate()
            timed_out, code = True, 124
        limit = self.max_output_bytes
        return CommandResult(
            exit_code=code, stdout=out[:limit].decode(errors="replace"), stderr=err[:limit].decode(errors="replace"),
            truncated=len(out) > limit or len(err) > limit, timed_out=timed_out,
            duration_s=time.monotonic() - started,
        )

    async def read_file(self, path: str) -> bytes:
        return await asyncio.to_thread(self._files.read, path)

    async def write_file(self, path: str, data: bytes) -> None:
        await asyncio.to_thread(self._files.write, path, data)

    async def list_files(self, pattern: str = "**/*") -> list[str]:
        return await asyncio.to_thread(self._files.list, pattern)

    async def start_background(self, command: str) -> str:
        job_id = uuid.uuid4().hex[:8]
        log = self.workspace.parent / f".job-{job_id}.log"
        handle = open(log, "wb")  # noqa: SIM115 - owned by the child
        process = await asyncio.create_subprocess_exec(
            "bash", "-c", command, cwd=self.workspace, start_new_session=True, env=_ENV, stdout=handle, stderr=handle
        )
        handle.close()
        self._jobs[job_id] = (process, log, [0], False)
        return job_id

    async def poll_background(self, job_id: str) -> BackgroundStatus:
        process, log, offset, killed = self._jobs[job_id]
        data = log.read_bytes()[offset[0]:]
        offset[0] += len(data)
        state = "killed" if killed else ("running" if process.returncode is None else "exited")
        return BackgroundStatus(job_id=job_id, state=state, exit_code=process.returncode, new_stdout=data.decode())

    async def kill_background(self, job_id: str) -> BackgroundStatus:
        process, log, offset, _ = self._jobs[job_id]
        if process.returncode is None:
            os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
        self._jobs[job_id] = (process, log, offset, True)
        return await self.poll_background(job_id)

    async def close(self) -> None:
        for job_id, (process, *_rest) in list(self._jobs.items()):
            if process.returncode is None:
                await self.kill_background(job_id)
        if self._files is not None:
            self._files.close()
            self._files = None


def host_sandbox(workspace: Path) -> HostSandbox:
    """Factory for SandboxToolConfig.sandbox_factory ('tests.tools.host_sandbox:host_sandbox')."""
    return HostSandbox(workspace)
