"""The `docker` terminal sandbox: one container per sandbox through the Docker SDK.

The container has no network (``network_mode="none"``), no capabilities, a read-only root
file system, a private /tmp (tmpfs), and cgroup limits on memory (no swap), processes and
CPU; the workspace is bind-mounted read-write at `/workspace` with the protected entries
bound read-only over it. Commands run through ``docker exec`` with the per-process limits
of `prlimit` (CPU time, address space, file size); their output goes to files in a host
folder mounted at `JOBS_MOUNT` and is read from the host. A timeout kills the command's
process group; processes a command leaves behind die with it.

Pid 1 is a bash loop rather than docker-init: it reaps orphans, and the kernel ignores
signals sent to a namespace's init from inside, so the agent cannot stop its container.

The Docker SDK is blocking: every call runs on this sandbox's own small thread pool. The
engine must share this host's file system (a local engine), since the workspace and the
output folder are bind mounts.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import itertools
import logging
import os
import secrets
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from cuda_agent.errors import SandboxError, SandboxTimeoutError, SandboxUnavailableError, WorkspaceError
from cuda_agent.sandbox_pool.terminal import slots
from cuda_agent.sandbox_pool.terminal.base import BackgroundStatus, CommandResult, TerminalSandbox
from cuda_agent.sandbox_pool.terminal.config import DockerSandboxConfig
from cuda_agent.sandbox_pool.terminal.files import WorkspaceFileMethods, WorkspaceFiles
from cuda_agent.sandbox_pool.terminal.hostenv import prlimit_argv
from cuda_agent.sandbox_pool.terminal.jobs import Job, JobTable
from cuda_agent.sandbox_pool.terminal.output import JOBS_MOUNT, read_capped, read_small, remove_quietly

logger = logging.getLogger(__name__)

_ENGINE_FIX = "start it (as root: docker/start_engine.sh, or systemctl start docker) or set DOCKER_HOST"
_PID1 = "trap '' TERM INT HUP QUIT USR1 USR2; while :; do sleep 86400 & wait; done"
# Runs one command: records its process group, sends its output to host files, records
# its exit code, then kills what the command left running in its group.
_WRAPPER = (
    'd=%s; id=$1; shift; echo $$ > "$d/$id.pid"; '
    '"$@" > "$d/$id.out" 2> "$d/$id.err" < /dev/null; echo $? > "$d/$id.rc"; '
    "kill -KILL -- -$$ 2>/dev/null"
) % JOBS_MOUNT


class DockerSandbox(WorkspaceFileMethods, TerminalSandbox):
    """A container around one host workspace (see the module docstring)."""

    def __init__(
        self,
        config: DockerSandboxConfig,
        workspace: Path | None,
        *,
        protected: list[str],
        extra_ro_mounts: dict[str, str],
        env: dict[str, str],
    ) -> None:
        self.config = config
        self.workspace = workspace  # type: ignore[assignment]  # None until bound
        self.protected = [p.strip("/") for p in protected if p.strip("/")]
        self.extra_ro_mounts = extra_ro_mounts
        self.env = env
        self.limits = config.limits
        self.slot_mode = workspace is None
        self.container_id: str | None = None
        self.name = f"{config.name_prefix}-{secrets.token_hex(6)}"
        self._jobs = JobTable(config.limits.max_background_jobs)
        self._files: WorkspaceFiles | None = None
        self._state: Path | None = None
        self._api: Any = None
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._names = itertools.count()
        self._prlimit = prlimit_argv(config.limits, nproc=False)  # processes: the pids cgroup
        self._killers: set[asyncio.Future[None]] = set()
        self._closed = False

    # ------------------------------------------------------------------ plumbing
    async def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run a blocking SDK call on this sandbox's threads, translating engine errors."""
        import docker.errors

        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))
        except docker.errors.NotFound as exc:
            raise SandboxError(f"sandbox container is gone ({exc.explanation}); start a new sandbox") from exc
        except docker.errors.APIError as exc:
            raise SandboxError(f"docker engine refused a sandbox call: {exc.explanation or exc}") from exc

    def _jobs_dir(self) -> Path:
        return self._state / "jobs"

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        if self._closed:
            raise SandboxError("sandbox is closed")
        if self._pool is not None:
            return
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="docker-sandbox")
        try:
            self._api = await asyncio.get_running_loop().run_in_executor(self._pool, _connect, self.config)
            self._state = Path(tempfile.mkdtemp(prefix="cuda-agent-dsb-", dir=self.config.state_dir))
            self._jobs_dir().mkdir()
            self._jobs_dir().chmod(0o777)
            await self._start_container()
        except BaseException:
            await self.close()
            raise

    async def _start_container(self) -> None:
        source = self._state / "slot"
        if self.slot_mode:
            await asyncio.to_thread(slots.make_slot, source)
        else:
            source = self._check_workspace(Path(self.workspace))
        try:
            async with asyncio.timeout(self.config.start_timeout_s):
                self.container_id = await self._call(self._create_container, source)
        except TimeoutError as exc:
            raise SandboxError(f"sandbox container did not start within {self.config.start_timeout_s} s") from exc
        if not self.slot_mode:
            self._attach_files(source)

    def _check_workspace(self, workspace: Path) -> Path:
        workspace = workspace.resolve()
        if not workspace.is_dir():
            raise WorkspaceError(f"workspace {workspace} is not a directory")
        return workspace

    def _attach_files(self, workspace: Path) -> None:
        self._files = WorkspaceFiles(workspace, self.protected)
        self.workspace = workspace

    async def bind(self, workspace: Path) -> None:
        await self.start()
        if not self.slot_mode or self._files is not None:
            raise SandboxError(f"sandbox already bound to {self.workspace}")
        workspace = self._check_workspace(Path(workspace))
        await asyncio.to_thread(slots.attach, self._state / "slot", self._state / "staging", workspace,
                                self.protected)
        self._attach_files(workspace)

    def _create_container(self, source: Path) -> str:
        from docker.types import Mount, Ulimit

        cfg, point = self.config, self.config.mount_point
        mounts = [Mount(point, str(source), type="bind", propagation="rslave" if self.slot_mode else None),
                  Mount(JOBS_MOUNT, str(self._jobs_dir()), type="bind")]
        if not self.slot_mode:
            mounts += [Mount(f"{point}/{rel}", str(source / rel), type="bind", read_only=True)
                       for rel in self.protected
                       if os.path.lexists(source / rel) and not os.path.islink(source / rel)]
        ro = {**cfg.host_mounts, **cfg.compile_cache_mounts(), **self.extra_ro_mounts}  # the pool's builds: read-only
        mounts += [Mount(dst, src, type="bind", read_only=True) for src, dst in sorted(ro.items(), key=lambda i: i[1])]
        memory = f"{cfg.container_memory_mb or cfg.limits.memory_mb}m"
        container = self._api.create_container(
            cfg.image, command=["bash", "-c", _PID1], name=self.name,
            hostname="sandbox", working_dir=point, environment=self._environment(), user=self._user(),
            labels={"cuda-agent.sandbox": "terminal"},
            host_config=self._api.create_host_config(
                mounts=mounts, network_mode="none", read_only=True, cap_drop=["ALL"],
                security_opt=["no-new-privileges"], tmpfs={"/tmp": f"size={cfg.tmp_size_mb}m,mode=1777,exec"},
                mem_limit=memory, memswap_limit=memory, pids_limit=cfg.limits.max_processes,
                nano_cpus=int(cfg.cpus * 1e9), ulimits=[Ulimit(name="core", soft=0, hard=0)],
            ),
        )
        try:
            self._api.start(container["Id"])
        except Exception:
            self._api.remove_container(container["Id"], force=True)
            raise
        return container["Id"]

    def _remove_container(self) -> None:
        """Remove the container by name: also one whose start timed out; absent is fine."""
        import docker.errors

        try:
            self._api.remove_container(self.name, force=True)
        except docker.errors.NotFound:
            pass

    def _environment(self) -> dict[str, str]:
        env = {"HOME": "/tmp", "LANG": "C.UTF-8", "TERM": "dumb"}
        mounted = set(self.config.host_mounts.values())
        if sys.prefix != sys.base_prefix and sys.prefix in mounted:  # the host venv (test image)
            env["VIRTUAL_ENV"] = sys.prefix
            env["PATH"] = f"{sys.prefix}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        return {**env, **self.env}

    def _user(self) -> str:
        if self.config.user:
            return self.config.user
        return "0:0" if os.geteuid() == 0 else f"{os.geteuid()}:{os.getegid()}"

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._api is not None:
            try:
                await self._call(self._remove_container)
            except SandboxError as exc:
                logger.warning("could not remove sandbox container %s: %s", self.name, exc)
        for job in self._jobs.running():
            job.state = "killed"
        if self._files is not None:
            self._files.close()
        if self._state is not None:
            if self.slot_mode:
                await asyncio.to_thread(slots.detach, self._state / "slot")
            await asyncio.to_thread(shutil.rmtree, self._state, True)
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------ commands
    def _require_bound(self) -> WorkspaceFiles:
        if self._closed:
            raise SandboxError("sandbox is closed")
        if self._files is None:
            raise SandboxError("sandbox has no workspace: start() it with one, or bind() it first")
        return self._files

    def _exec_argv(self, stem: str, command: str) -> list[str]:
        return ["bash", "-c", _WRAPPER, "wrap", stem, *self._prlimit, "bash", "-c", command]

    def _paths(self, stem: str) -> tuple[str, str, str, str]:
        base = str(self._jobs_dir() / stem)
        return f"{base}.out", f"{base}.err", f"{base}.rc", f"{base}.pid"

    async def _exec_create(self, stem: str, command: str) -> str:
        created = await self._call(self._api.exec_create, self.container_id, self._exec_argv(stem, command),
                                   workdir=self.config.mount_point, user=self._user())
        return created["Id"]

    async def _kill_group(self, stem: str) -> None:
        """SIGKILL the process group of the command `stem` (from inside the container)."""
        for _ in range(100):  # the wrapper may not have written its pid yet
            pid = read_small(self._paths(stem)[3])
            if pid is not None:
                break
            await asyncio.sleep(0.05)
        if pid is None or not pid.isdigit() or int(pid) <= 1:
            return
        kill = ["bash", "-c", 'kill -KILL -- "-$1"', "kill", pid]  # the builtin: no procps needed
        exec_id = await self._call(self._api.exec_create, self.container_id, kill,
                                   user=self._user())
        await self._call(self._api.exec_start, exec_id)

    async def run(self, command: str, timeout_s: float | None = None) -> CommandResult:
        self._require_bound()
        timeout = self.limits.command_timeout_s if timeout_s is None else timeout_s
        started = time.monotonic()
        stem = f"cmd-{next(self._names)}"
        exec_id = await self._exec_create(stem, command)
        done = asyncio.ensure_future(self._call(self._api.exec_start, exec_id))
        timed_out = False
        try:
            async with asyncio.timeout(timeout):
                await asyncio.shield(done)
        except asyncio.CancelledError:  # the command must not outlive its caller
            killer = asyncio.ensure_future(self._kill_group(stem))
            self._killers.add(killer)
            killer.add_done_callback(self._killers.discard)
            raise
        except TimeoutError:
            timed_out = True
            await self._kill_group(stem)
            try:
                async with asyncio.timeout(30):
                    await done
            except TimeoutError as exc:
                raise SandboxTimeoutError(f"command still running 30 s after it was killed: {command[:200]}") from exc
        duration = time.monotonic() - started
        out, err, rc_path, pid_path = self._paths(stem)
        rc = read_small(rc_path)
        if timed_out:
            exit_code = 124
        elif rc is not None and rc.lstrip("-").isdigit():
            exit_code = int(rc)
        else:  # the wrapper itself was killed (e.g. by the command)
            exit_code = (await self._call(self._api.exec_inspect, exec_id))["ExitCode"] or 137
        max_bytes = self.limits.max_output_bytes
        stdout, cut_out, _ = await asyncio.to_thread(read_capped, out, max_bytes)
        stderr, cut_err, _ = await asyncio.to_thread(read_capped, err, max_bytes)
        remove_quietly(out, err, rc_path, pid_path)
        return CommandResult(exit_code=exit_code, stdout=stdout, stderr=stderr, truncated=cut_out or cut_err,
                             timed_out=timed_out, duration_s=duration)

    # ------------------------------------------------------------------ background
    async def start_background(self, command: str) -> str:
        self._require_bound()
        job_id = self._jobs.new_id()
        exec_id = await self._exec_create(job_id, command)
        await self._call(self._api.exec_start, exec_id, detach=True)
        out, err, _, _ = self._paths(job_id)
        self._jobs.add(Job(job_id, command, out, err, handle=exec_id))
        return job_id

    async def _refresh(self, job: Job) -> None:
        if job.state != "running":
            return
        rc = read_small(self._paths(job.job_id)[2])
        if rc is not None and rc.lstrip("-").isdigit():
            job.state, job.exit_code = "exited", int(rc)
            return
        info = await self._call(self._api.exec_inspect, job.handle)
        if not info["Running"] and read_small(self._paths(job.job_id)[2]) is None:
            job.state, job.exit_code = "exited", info["ExitCode"]

    async def poll_background(self, job_id: str) -> BackgroundStatus:
        job = self._jobs.get(job_id)
        await self._refresh(job)
        return await asyncio.to_thread(self._jobs.report, job, self.limits.max_output_bytes)

    async def kill_background(self, job_id: str) -> BackgroundStatus:
        job = self._jobs.get(job_id)
        await self._refresh(job)
        if job.state == "running":
            await self._kill_group(job.job_id)
            job.state, job.exit_code = "killed", -9
        return await asyncio.to_thread(self._jobs.report, job, self.limits.max_output_bytes)


def _connect(config: DockerSandboxConfig) -> Any:
    """A low-level API client for the engine, or SandboxUnavailableError with the fix."""
    try:
        import docker
    except ImportError:
        docker = None
    if not hasattr(docker, "from_env"):  # absent, or the repository's docker/ folder shadowing it
        raise SandboxUnavailableError("the docker backend needs the Docker SDK: pip install 'docker>=7'")
    try:
        client = docker.APIClient(base_url=config.engine_url) if config.engine_url else docker.from_env().api
        client.ping()
    except docker.errors.DockerException as exc:
        raise SandboxUnavailableError(f"no Docker engine answers ({exc}); {_ENGINE_FIX}") from exc
    try:
        client.inspect_image(config.image)
    except docker.errors.ImageNotFound as exc:
        raise SandboxUnavailableError(
            f"image {config.image!r} not found; build it (docker build -f docker/Dockerfile.compile -t "
            "cuda-agent-compile:latest .), or build the test image (bash docker/build_test_image.sh) and pass "
            "--image cuda-agent-sandbox-test:latest --host-toolchain"
        ) from exc
    return client
