"""The pre-warmed template process: imports torch once, then forks one child per request.

Started by the trusted worker (`zygote_launch.launch_zygote`, owned by `runner.Zygote`; the
one-shot CLI starts it before its own imports). Its first message on the SOCK_SEQPACKET control
socket is its mode ({"cuda": bool}), read after the torch import, so it can be started before
the caller knows the device. Requests then arrive as (spec JSON, file descriptors for the
child's pipe, its clock stamps and, for a candidate, its shared trial-output region); the zygote
answers {"pid": N} and later {"exit": N, "status": S} when the child ends. Nothing is pickled in
either direction. Its ready message carries its boot phases (seconds), which the worker logs.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import sys
import time
from multiprocessing.connection import Connection

PR_SET_PDEATHSIG = 1
_T0 = time.monotonic()
if __name__ == "__main__":  # dies with its starter, which may end during the import below (a static reject)
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if len(sys.argv) > 2 and os.getppid() != int(sys.argv[2]):
        sys.exit(0)  # the starter ended before the line above: nobody will use this process

import torch  # noqa: F401,E402  - the point of the zygote: children start with torch imported

_T_TORCH = time.monotonic()

from cuda_agent.sandbox_pool.harness.child import main as child_main
from cuda_agent.sandbox_pool.harness.child.hardening import LEVELS, probe_level, start_probe


def _reap(ctrl: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        try:
            ctrl.send(json.dumps({"exit": pid, "status": code}).encode())
        except OSError:
            return


def _cuda_works() -> None:
    torch.empty(1, device="cuda").add_(1)
    torch.cuda.synchronize()


def serve(ctrl: socket.socket, cuda: bool) -> None:
    # Before any child exists: find the strongest isolation under which CUDA initialises here (the
    # strongest level's probe is a fork that initialises CUDA, ~0.5 s on an H200). Its outcome is
    # awaited at the first request, not before the ready message: the worker's first child is asked
    # for a second or more after that on the one-shot path (it is still importing torch itself).
    # torch._dynamo is not imported: the children's guard never needs it (guard.ComputeGuard._should_skip_dynamo).
    t_probe = time.monotonic()
    probe = start_probe(_cuda_works, LEVELS[0]) if cuda else None
    boot = {"torch_import_s": _T_TORCH - _T0, "harness_import_s": t_probe - _T_TORCH}
    level = None if cuda else LEVELS[0]
    ctrl.send(json.dumps({"ready": True, "boot": boot, "at": time.monotonic(),
                          **({} if cuda else {"level": level, "probe": {}})}).encode())
    if not cuda:
        signal.signal(signal.SIGCHLD, lambda *_: _reap(ctrl))
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(ctrl, 1 << 20, 3)
        except InterruptedError:
            continue
        except OSError:  # the worker closed its end (shutdown): nothing more to serve
            return
        if not data:
            return
        if level is None:  # the probe is this process's only child so far: reaped here, not by _reap
            level, tried = probe_level(_cuda_works, started=probe)
            ctrl.send(json.dumps({"level": level, "probe": tried, "probe_s": time.monotonic() - t_probe}).encode())
            signal.signal(signal.SIGCHLD, lambda *_: _reap(ctrl))
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            ctrl.close()
            stamps = socket.socket(fileno=fds[1]) if len(fds) > 1 else None
            outputs_fd = fds[2] if len(fds) > 2 else None  # the sealed trial-output region (output_buffer.py)
            child_main.child_entry(Connection(fds[0]), data.decode(), level, stamps, outputs_fd)
            os._exit(0)
        for fd in fds:
            os.close(fd)
        ctrl.send(json.dumps({"pid": pid}).encode())


def main() -> None:
    ctrl = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET, fileno=int(sys.argv[1]))
    try:
        mode = json.loads(ctrl.recv(4096) or b"null")  # sent on launch, or when an early start is adopted
    except OSError:
        return
    if not isinstance(mode, dict):  # the starter closed the socket without using this process
        return
    serve(ctrl, cuda=bool(mode.get("cuda")))


if __name__ == "__main__":
    main()
