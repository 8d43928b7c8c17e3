"""The pre-warmed template process: imports torch once, then forks one child per request.

Started by the trusted worker (`runner.Zygote`) before it initialises CUDA. Requests
arrive on a SOCK_SEQPACKET control socket as (spec JSON, one file descriptor for the
child's pipe); the zygote answers {"pid": N} and later {"exit": N, "status": S} when the
child ends. Nothing is pickled in either direction.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import sys
from multiprocessing.connection import Connection

import torch  # noqa: F401  - the point of the zygote: children start with torch imported
import torch._dynamo  # noqa: F401  - imported lazily by dispatch modes; its import writes caches, which
#                                   the children's read-only file system would refuse

from cuda_agent.sandbox_pool.harness.child import main as child_main
from cuda_agent.sandbox_pool.harness.child.hardening import LEVELS, probe_level

PR_SET_PDEATHSIG = 1


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
    # Before any child exists: find the strongest isolation under which CUDA initialises here.
    level, tried = probe_level(_cuda_works) if cuda else (LEVELS[0], {})
    signal.signal(signal.SIGCHLD, lambda *_: _reap(ctrl))
    ctrl.send(json.dumps({"ready": True, "level": level, "probe": tried}).encode())
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(ctrl, 1 << 20, 2)
        except InterruptedError:
            continue
        if not data:
            return
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            ctrl.close()
            stamps = socket.socket(fileno=fds[1]) if len(fds) > 1 else None
            child_main.child_entry(Connection(fds[0]), data.decode(), level, stamps)
            os._exit(0)
        for fd in fds:
            os.close(fd)
        ctrl.send(json.dumps({"pid": pid}).encode())


def main() -> None:
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    ctrl = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET, fileno=int(sys.argv[1]))
    serve(ctrl, cuda="--cuda" in sys.argv[2:])


if __name__ == "__main__":
    main()
