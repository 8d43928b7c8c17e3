"""Parent side of evaluation children: the zygote that forks them, and one child's pipe.

The zygote is started once per trusted worker, before CUDA is initialised, with torch and
the child code imported, so a child starts in milliseconds and never inherits the worker's
memory (reference outputs live only in the worker). Messages from a child are JSON, never
pickles: the child is untrusted.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import subprocess
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

from cuda_agent.errors import InfraError, WorkerCrashedError
from cuda_agent.sandbox_pool.harness import clock
from cuda_agent.sandbox_pool.harness.protocol import ChildSpec
from cuda_agent.sandbox_pool.harness.zygote_launch import launch_zygote, take_early

MAX_MESSAGE_BYTES = 64 << 20
logger = logging.getLogger(__name__)


class Zygote:
    """A template process that forks evaluation children on request."""

    def __init__(self, cuda: bool = False, env: dict[str, str] | None = None) -> None:
        self.cuda = cuda
        self.env = env  # extra environment of the zygote and so of its children (None: this process's)
        self.level = ""
        self.probe: dict[str, str] = {}
        self._lock = threading.Lock()
        self._exits: dict[int, int] = {}
        self._proc: subprocess.Popen[bytes] | None = None
        self._ctrl: socket.socket | None = None
        self._ready = False
        self.boot: dict[str, float] = {}
        self.ready_at: float | None = None
        """When the zygote was ready (its `time.monotonic()`, a system-wide clock), which may be well
        before anyone asked: the one-shot CLI starts it first (zygote_launch.launch_early)."""

    def launch(self) -> None:
        """Start the zygote's process without waiting for it (it imports torch and probes CUDA for
        seconds: a caller with other work, e.g. `cuda-agent eval` importing torch itself, overlaps them)."""
        with self._lock:
            self._launch()

    def _launch(self) -> bool:
        """Start the zygote unless one is running or launched (adopting the one the CLI started early,
        `zygote_launch.launch_early`, when this zygote wants this process's environment); True if it
        was launched now or before and has not reported ready yet."""
        if self._proc is not None and self._proc.poll() is None:
            return self._ctrl is not None and not self._ready
        if self._ctrl is not None:  # a zygote that died: its socket goes with it
            self._ctrl.close()
        launched = (take_early() if not self.env else None) or launch_zygote(self.env)
        self._proc, self._ctrl = launched.proc, launched.ctrl
        try:
            launched.ctrl.send(json.dumps({"cuda": self.cuda}).encode())  # its mode: read after its torch import
        except OSError:
            pass  # it died: start() reports it
        self._ready = False
        return True

    def start(self) -> None:
        """Launch the zygote if needed and wait until it is ready to fork children."""
        with self._lock:
            if not self._launch():
                return
            ours = self._ctrl
            assert ours is not None
            ours.settimeout(120)
            try:
                ready = json.loads(ours.recv(4096) or b"{}")
            except (OSError, ValueError) as exc:
                raise InfraError(f"the evaluation zygote did not start: {exc}") from exc
            if not ready.get("ready"):
                raise InfraError("the evaluation zygote did not start (is torch importable?)")
            self._ready = True
            self.ready_at = float(ready["at"]) if "at" in ready else None
            self.boot = {k: float(v) for k, v in (ready.get("boot") or {}).items()}
            logger.info("evaluation zygote ready: %s", ", ".join(f"{k} {v:.2f}" for k, v in self.boot.items()))
            self.level, self.probe = "", {}
            if "level" in ready:
                self._on_level(ready)
            self._exits.clear()

    def _on_level(self, message: dict[str, Any]) -> None:
        """The isolation level the zygote's children run at: in its ready message (cpu), or before the
        answer to the first spawn (cuda: the zygote's CUDA probe ends after it reported ready)."""
        self.level, self.probe = str(message.get("level", "")), dict(message.get("probe") or {})
        if "probe_s" in message:
            self.boot["probe_s"] = float(message["probe_s"])
            logger.info("evaluation zygote: isolation %s, CUDA probe %.2f s", self.level, self.boot["probe_s"])
        if self.cuda and self.probe and self.level != "pidns+ro":
            logger.warning("candidate isolation on this GPU machine: %s (probe: %s)", self.level, self.probe)

    def _read(self, timeout: float | None) -> dict[str, Any] | None:
        assert self._ctrl is not None
        self._ctrl.settimeout(timeout)
        try:
            data = self._ctrl.recv(4096)
        except (TimeoutError, BlockingIOError):
            return None
        if not data:
            raise WorkerCrashedError("the evaluation zygote died")
        return json.loads(data)

    def spawn(self, spec_json: str, fd: int, clock_fd: int, outputs_fd: int | None = None) -> int:
        """Fork a child that runs `spec_json` on pipe `fd` (stamps on `clock_fd`, trial outputs in the
        region `outputs_fd`); returns its pid."""
        self.start()
        with self._lock:
            assert self._ctrl is not None
            fds = [fd, clock_fd] + ([outputs_fd] if outputs_fd is not None else [])
            socket.send_fds(self._ctrl, [spec_json.encode()], fds)
            while True:
                message = self._read(60 if self.level else 120)  # the first answer waits for the CUDA probe
                if message is None:
                    raise WorkerCrashedError("the evaluation zygote did not answer")
                if "level" in message:
                    self._on_level(message)
                elif "exit" in message:
                    self._exits[message["exit"]] = message["status"]
                elif "pid" in message:
                    return int(message["pid"])

    def exit_status(self, pid: int, timeout: float = 2.0) -> int | None:
        """Exit status of a child (negative: signal), waiting up to `timeout`."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while pid not in self._exits:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                message = self._read(left)
                if message and "exit" in message:
                    self._exits[message["exit"]] = message["status"]
            return self._exits.pop(pid)

    def close(self) -> None:
        with self._lock:
            if self._ctrl is not None:
                self._ctrl.close()
                self._ctrl = None
            if self._proc is not None:
                self._proc.kill()
                self._proc.wait()
                self._proc = None


class ChildEnded(Exception):
    """The child exited or broke the pipe before sending what was expected."""

    def __init__(self, exitcode: int | None) -> None:
        super().__init__(f"child ended ({describe_exit(exitcode)})")
        self.exitcode = exitcode


class ChildTimeout(Exception):
    """The child did not answer before its deadline."""


class ChildProcess:
    """One running evaluation child."""

    def __init__(self, zygote: Zygote, spec: ChildSpec, outputs_fd: int | None = None) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        clock_ours, clock_theirs = clock.pair()
        self._zygote = zygote
        self._conn = Connection(os.dup(ours.fileno()))
        self.clock = clock.OutsideClock(clock_ours, quiet=clock.read_quietly(spec.device))
        ours.close()
        try:
            self.pid = zygote.spawn(spec.model_dump_json(), theirs.fileno(), clock_theirs.fileno(), outputs_fd)
        finally:
            theirs.close()
            clock_theirs.close()

    def go(self, **draws: Any) -> None:
        """Tell the child its draws (it waits for them after `ready`)."""
        self.reply(go=True, **draws)

    def reply(self, **message: Any) -> None:
        """A message to the child while it runs (it waits for it)."""
        try:
            self._conn.send_bytes(json.dumps(message).encode())
        except OSError:
            pass  # the child is gone; receive() reports how

    async def receive(self, deadline: float) -> dict[str, Any]:
        """Next message (`{}` for one that is not a JSON object); ChildTimeout past `deadline` (monotonic),
        ChildEnded if the child is gone."""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ChildTimeout
            readable = await self._readable(min(left, 0.5))
            self.clock.drain()  # keep the stamps' socket empty (the child never blocks on it)
            if not readable:
                continue
            try:
                raw = self._conn.recv_bytes(MAX_MESSAGE_BYTES)
            except (EOFError, OSError):
                raise ChildEnded(await asyncio.to_thread(self._zygote.exit_status, self.pid)) from None
            try:
                message = json.loads(raw)
            except ValueError:
                message = None
            # A candidate's process can write anything to its pipe: what is not a JSON object comes back
            # as one without an event, for the caller to judge (session.py: a violation), never skipped.
            return message if isinstance(message, dict) else {}

    async def _readable(self, timeout: float) -> bool:
        """Wait until the pipe has data, on the event loop (a message costs no thread hop)."""
        if self._conn.poll(0):
            return True
        loop = asyncio.get_running_loop()
        ready = loop.create_future()
        fd = self._conn.fileno()
        loop.add_reader(fd, lambda: ready.done() or ready.set_result(None))
        # A quiet clock's stamps wait for the child's next message (clock.py: a stamp that woke this process
        # would let it preempt the child inside the timed window); else they are read as they arrive, so the
        # child never blocks on a full stamps socket.
        clock_fd = -1 if self.clock.quiet else self.clock.sock.fileno()
        if clock_fd >= 0:
            loop.add_reader(clock_fd, self.clock.drain)
        try:
            async with asyncio.timeout(timeout):
                await ready
            return True
        except TimeoutError:
            return False
        finally:
            loop.remove_reader(fd)
            if clock_fd >= 0:
                loop.remove_reader(clock_fd)

    def kill(self) -> None:
        """Kill the child and everything in its session."""
        for target in (lambda: os.killpg(self.pid, signal.SIGKILL), lambda: os.kill(self.pid, signal.SIGKILL)):
            try:
                target()
            except (ProcessLookupError, PermissionError):
                pass
        self._conn.close()
        self.clock.close()


def describe_exit(exitcode: int | None) -> str:
    """'killed by SIGSEGV' / 'exit code 3' / 'unknown exit'."""
    if exitcode is None:
        return "unknown exit"
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit code {exitcode}"
