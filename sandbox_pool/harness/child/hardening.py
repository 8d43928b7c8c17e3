"""Isolate the child before candidate code runs: own session, limits, no network, no ptrace.

`unshare(CLONE_NEWUSER | CLONE_NEWNET)` leaves the child without network and without
capabilities over the trusted worker (which is made non-dumpable), so it can neither
ptrace it nor read its memory through /proc. Where user namespaces are disabled the child
runs without them and the receipt says so.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4

_libc = ctypes.CDLL(None, use_errno=True)


def make_undumpable() -> None:
    """Called in the trusted worker: no same-uid process without caps may ptrace it."""
    _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def _lower(which: int, limit: int) -> None:
    """Set a limit, never above what an enclosing sandbox already imposes."""
    _, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(which, (limit, limit))


def harden_child(*, isolate: bool, memory_limit_mb: int | None, file_size_mb: int) -> str:
    """Apply limits and namespaces to the current (child) process; returns a description."""
    os.setsid()
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    _lower(resource.RLIMIT_CORE, 0)
    _lower(resource.RLIMIT_FSIZE, file_size_mb * 1024 * 1024)
    if memory_limit_mb:
        _lower(resource.RLIMIT_AS, memory_limit_mb * 1024 * 1024)
    parts = ["setsid", "rlimits"]
    if isolate:
        if _libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0:
            parts.append("userns+netns")
        else:
            parts.append(f"no-namespaces(errno={ctypes.get_errno()})")
    return ",".join(parts)
