"""Start the evaluation forkserver's process (`child/zygote.py`) with the standard library only.

Its boot (a Python that imports torch: 3-4.5 s on an H200 host) is what a one-shot `cuda-agent
eval` waits for longest, so the CLI starts it before it imports its own modules (`launch_early`,
called by `cuda_agent/cli/entry.py` for a local `eval`) and `runner.Zygote` adopts it
(`take_early`). The process is told cpu or cuda later, on its control socket, so starting it
needs no argument parsing; one nobody adopts is killed when this process exits.

Nothing here imports pydantic, torch or the rest of the harness: importing this module costs
milliseconds, before the CLI's own imports.
"""

from __future__ import annotations

import atexit
import os
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass

MODULE = "cuda_agent.sandbox_pool.harness.child.zygote"


@dataclass
class LaunchedZygote:
    """A zygote process and this side of its control socket (SOCK_SEQPACKET)."""

    proc: subprocess.Popen[bytes]
    ctrl: socket.socket

    def kill(self) -> None:
        self.ctrl.close()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def launch_zygote(env: dict[str, str] | None = None) -> LaunchedZygote:
    """Popen a zygote (it imports torch, then waits for its mode on the control socket).

    Its standard output, and so its children's (a problem or candidate that prints), is this process's
    standard error: started before the CLI sets `--json` output up, it must never write on stdout."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", MODULE, str(theirs.fileno()), str(os.getpid())],
            pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=_stderr_fd(), cwd="/",
            env={**os.environ, **env} if env else None,
        )
    except BaseException:
        ours.close()
        raise
    finally:
        theirs.close()
    return LaunchedZygote(proc, ours)


def _stderr_fd() -> int | None:
    try:
        return sys.__stderr__.fileno() if sys.__stderr__ is not None else None
    except (OSError, ValueError):  # no usable fd 2 (a host that closed it): inherit stdout as before
        return None


_early: LaunchedZygote | None = None
_early_lock = threading.Lock()


def launch_early() -> None:
    """Start a zygote now for an evaluator this process will create (`take_early`); killed at exit if
    nobody takes it. A failed start is silent here: the evaluator starts its own and reports why."""
    global _early
    with _early_lock:
        if _early is not None:
            return
        try:
            _early = launch_zygote()
        except OSError:
            return
        atexit.register(_kill_unclaimed)


def take_early() -> LaunchedZygote | None:
    """The zygote `launch_early` started, if it is still running (once: the caller owns it)."""
    global _early
    with _early_lock:
        launched, _early = _early, None
    if launched is not None and launched.proc.poll() is not None:
        launched.kill()
        return None
    return launched


def _kill_unclaimed() -> None:
    launched = take_early()
    if launched is not None:
        launched.kill()


__all__ = ["LaunchedZygote", "launch_early", "launch_zygote", "take_early"]
