"""The `local` terminal sandbox: Linux namespaces through bubblewrap (or unshare), no daemon.

A holder process keeps the sandbox's view, built once from a `MountPlan` (launch.py): no
network, the host's system folders and this venv read-only, the workspace read-write at
`/workspace` with the protected entries bound read-only over it, a private /tmp kept for
the sandbox's lifetime (a host folder, not the host's /tmp). Each command enters the view
in a fresh pid namespace. Limits (hostenv.prlimit_argv): RLIMIT_CPU, RLIMIT_AS (memory,
per process), RLIMIT_NPROC, RLIMIT_FSIZE, no core files; the wall clock is enforced by
killing the command's launcher, which takes its whole pid namespace with it. See
docs/sandbox.md for what these limits do and do not cover.
"""

from __future__ import annotations

import asyncio
import fcntl
import itertools
import logging
import os
import secrets
import shutil
import signal
import tempfile
import time
from pathlib import Path

from cuda_agent.errors import SandboxError, WorkspaceError
from cuda_agent.sandbox_pool.terminal.base import BackgroundStatus, CommandResult, TerminalSandbox
from cuda_agent.sandbox_pool.terminal.config import LocalSandboxConfig
from cuda_agent.sandbox_pool.terminal.files import WorkspaceFileMethods, WorkspaceFiles, chown_tree
from cuda_agent.sandbox_pool.terminal.hostenv import prlimit_argv, python_paths, sandbox_env
from cuda_agent.sandbox_pool.terminal.jobs import Job, JobTable
from cuda_agent.sandbox_pool.terminal.launch import (
    MountPlan,
    bwrap_holder_argv,
    command_argv,
    probe_launcher,
    unshare_holder_argv,
)
from cuda_agent.sandbox_pool.terminal.output import read_capped, remove_quietly

logger = logging.getLogger(__name__)

_NS_GET_USERNS = 0xB701  # ioctl_ns(2)
#: uids given to root callers' sandboxes: far above system and human accounts.
_UID_RANGE = (200_000, 1_200_000)


class LocalSandbox(WorkspaceFileMethods, TerminalSandbox):
    """A namespace sandbox around one host workspace (see the module docstring)."""

    def __init__(
        self,
        config: LocalSandboxConfig,
        workspace: Path | None,
        *,
        protected: list[str],
        extra_ro_mounts: dict[str, str],
        env: dict[str, str],
    ) -> None:
        self.config = config
        self.workspace = workspace  # type: ignore[assignment]  # None until bound
        self.protected = protected
        self.extra_ro_mounts = extra_ro_mounts
        self.env = sandbox_env(config.mount_point, env)
        self.limits = config.limits
        self.launcher: str | None = None
        self._jobs = JobTable(config.limits.max_background_jobs)
        self._files: WorkspaceFiles | None = None
        self._prefix: list[str] = []
        self._state: Path | None = None
        self._owner: tuple[int, int] | None = None
        self._procs: set[asyncio.subprocess.Process] = set()
        self._holder: asyncio.subprocess.Process | None = None
        self._userns_fd: int | None = None
        self._names = itertools.count()
        self._closed = False

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        if self._state is not None:
            return
        if self._closed:
            raise SandboxError("sandbox is closed")
        as_root = os.geteuid() == 0
        self.launcher = await asyncio.to_thread(probe_launcher, self.config.launcher, as_root)
        if as_root:
            uid = self.config.sandbox_uid or _UID_RANGE[0] + secrets.randbelow(_UID_RANGE[1] - _UID_RANGE[0])
            self._owner = (uid, uid)
        self._state = Path(tempfile.mkdtemp(prefix="cuda-agent-sb-", dir=self.config.state_dir))
        for sub in ("tmp", "out", "root"):
            (self._state / sub).mkdir()
        (self._state / "tmp").chmod(0o1777)
        if self.workspace is not None:
            try:
                await self._attach(Path(self.workspace))
            except BaseException:
                await self.close()
                raise

    async def bind(self, workspace: Path) -> None:
        await self.start()
        if self._files is not None:
            raise SandboxError(f"sandbox already bound to {self.workspace}")
        await self._attach(Path(workspace))

    async def _attach(self, workspace: Path) -> None:
        workspace = workspace.resolve()
        if not workspace.is_dir():
            raise WorkspaceError(f"workspace {workspace} is not a directory")
        if self._owner is not None:
            await asyncio.to_thread(chown_tree, workspace, self._owner, self.protected)
        plan = self._plan(workspace)
        if self.launcher == "bwrap":
            argv = bwrap_holder_argv(plan)
        else:
            argv = unshare_holder_argv(plan, str(self._state / "root"))
        self._holder = await self._start_holder(argv)
        target = _sleeper(self._holder.pid)
        userns = None
        if plan.run_as is None:
            self._userns_fd = _owning_userns(target)
            userns = f"/proc/{os.getpid()}/fd/{self._userns_fd}"
        self._prefix = command_argv(plan, target, userns) + prlimit_argv(self.limits)
        self._files = WorkspaceFiles(workspace, self.protected, self._owner)
        self.workspace = workspace

    async def _start_holder(self, argv: list[str]) -> asyncio.subprocess.Process:
        """Start the sandbox's namespace holder and wait until its view is built."""
        holder = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, start_new_session=True, env=self.env,
        )
        try:
            async with asyncio.timeout(60):
                line = await holder.stdout.readline()
        except TimeoutError:
            line = b""
        if line.strip() != b"ready":
            _kill_group(holder)
            await holder.wait()
            error = (await holder.stderr.read()).decode(errors="replace").strip()
            raise SandboxError(f"{self.launcher} could not build the sandbox view: {error or 'timeout'}")
        return holder

    def _plan(self, workspace: Path) -> MountPlan:
        plan = MountPlan(workspace=(str(workspace), self.config.mount_point), run_as=self._owner)
        plan.tmp_dir = str(self._state / "tmp")
        plan.shm_bytes = self.config.shm_size_mb * 1024 * 1024
        for path in self.config.host_ro_paths:
            if os.path.islink(path):
                plan.symlinks.append((os.readlink(path), path))
            elif os.path.exists(path):
                plan.ro_binds.append((path, path))
        if self.config.mount_python:
            plan.ro_binds += [(p, p) for p in python_paths()]
        shared = {**self.config.compile_cache_mounts(), **self.extra_ro_mounts}  # the pool's builds: read-only
        plan.ro_binds += sorted(shared.items(), key=lambda item: item[1])
        entries = [rel.strip("/") for rel in self.protected if rel.strip("/")]
        # A protected entry that is absent now is only refused by write_file (docs/sandbox.md).
        plan.protected = [rel for rel in entries if os.path.lexists(workspace / rel)
                          and not os.path.islink(workspace / rel)]
        return plan

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for proc in list(self._procs):
            _kill_group(proc)
        for proc in list(self._procs):
            await _reap(proc)
        for job in self._jobs.running():
            job.state, job.exit_code = "killed", job.handle.returncode
        if self._holder is not None:
            _kill_group(self._holder)
            await _reap(self._holder)
        if self._userns_fd is not None:
            os.close(self._userns_fd)
        if self._files is not None:
            self._files.close()
        if self._state is not None:
            await asyncio.to_thread(shutil.rmtree, self._state, True)

    # ------------------------------------------------------------------ commands
    def _require_bound(self) -> WorkspaceFiles:
        if self._closed:
            raise SandboxError("sandbox is closed")
        if self._files is None:
            raise SandboxError("sandbox has no workspace: start() it with one, or bind() it first")
        if self._holder is not None and self._holder.returncode is not None:
            raise SandboxError("the sandbox's namespace holder died; start a new sandbox")
        return self._files

    async def _spawn(self, command: str, stem: str) -> tuple[asyncio.subprocess.Process, str, str]:
        out, err = f"{stem}.out", f"{stem}.err"
        with open(out, "wb") as out_file, open(err, "wb") as err_file:
            proc = await asyncio.create_subprocess_exec(
                *self._prefix, "bash", "-c", command,
                stdin=asyncio.subprocess.DEVNULL, stdout=out_file, stderr=err_file,
                env=self.env, start_new_session=True,
            )
        self._procs.add(proc)
        return proc, out, err

    def _stem(self, name: str) -> str:
        return str(self._state / "out" / f"{name}-{next(self._names)}")

    async def run(self, command: str, timeout_s: float | None = None) -> CommandResult:
        self._require_bound()
        timeout = self.limits.command_timeout_s if timeout_s is None else timeout_s
        started = time.monotonic()
        proc, out, err = await self._spawn(command, self._stem("cmd"))
        timed_out = False
        try:
            async with asyncio.timeout(timeout):
                await proc.wait()
        except TimeoutError:
            timed_out = True
            _kill_group(proc)
            await proc.wait()
        except BaseException:  # cancelled: the command must not outlive its caller
            _kill_group(proc)
            raise
        finally:
            self._procs.discard(proc)
        duration = time.monotonic() - started
        max_bytes = self.limits.max_output_bytes
        stdout, cut_out, _ = await asyncio.to_thread(read_capped, out, max_bytes)
        stderr, cut_err, _ = await asyncio.to_thread(read_capped, err, max_bytes)
        remove_quietly(out, err)
        return CommandResult(
            exit_code=124 if timed_out else proc.returncode,
            stdout=stdout,
            stderr=stderr,
            truncated=cut_out or cut_err,
            timed_out=timed_out,
            duration_s=duration,
        )

    # ------------------------------------------------------------------ background
    async def start_background(self, command: str) -> str:
        self._require_bound()
        job_id = self._jobs.new_id()
        proc, out, err = await self._spawn(command, self._stem(job_id))
        self._jobs.add(Job(job_id, command, out, err, handle=proc))
        return job_id

    def _refresh(self, job: Job) -> None:
        proc: asyncio.subprocess.Process = job.handle
        if job.state == "running" and proc.returncode is not None:
            job.state, job.exit_code = "exited", proc.returncode
            self._procs.discard(proc)

    async def poll_background(self, job_id: str) -> BackgroundStatus:
        job = self._jobs.get(job_id)
        self._refresh(job)
        return await asyncio.to_thread(self._jobs.report, job, self.limits.max_output_bytes)

    async def kill_background(self, job_id: str) -> BackgroundStatus:
        job = self._jobs.get(job_id)
        self._refresh(job)
        if job.state == "running":
            _kill_group(job.handle)
            await job.handle.wait()
            self._procs.discard(job.handle)
            job.state, job.exit_code = "killed", job.handle.returncode
        return await asyncio.to_thread(self._jobs.report, job, self.limits.max_output_bytes)


def _sleeper(pid: int) -> int:
    """The holder's innermost process (bwrap -> its pid-1 init -> sleep), inside the view."""
    for _ in range(8):
        with open(f"/proc/{pid}/task/{pid}/children") as children:
            below = children.read().split()
        if not below:
            return pid
        pid = int(below[0])
    raise SandboxError("cannot find the sandbox's holder process")


def _owning_userns(pid: int) -> int:
    """An open descriptor of the user namespace that owns `pid`'s mount namespace."""
    fd = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    try:
        return fcntl.ioctl(fd, _NS_GET_USERNS)
    finally:
        os.close(fd)


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    """SIGKILL the launcher's process group; its pid namespace (and every process in it) dies too."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


async def _reap(proc: asyncio.subprocess.Process, timeout_s: float = 10.0) -> None:
    """Wait for a killed process, killing it directly if its group kill missed it."""
    try:
        async with asyncio.timeout(timeout_s):
            await proc.wait()
    except TimeoutError:
        try:
            proc.kill()
        except ProcessLookupError:
            return
        try:
            async with asyncio.timeout(timeout_s):
                await proc.wait()
        except TimeoutError:
            logger.warning("process %s did not exit after SIGKILL", proc.pid)
