"""Isolate an evaluation child before candidate code runs.

In order: its own session; limits (core, file size, address space on CPU); new user,
network, mount and PID namespaces: no network; no capabilities over the trusted worker
(which is non-dumpable, so no ptrace and no /proc/<pid>/mem); the whole file system
read-only except the child's private work folder (caches, the venv, the harness's files
cannot be changed); and every process it starts dies with it, `setsid` or not.
Where namespaces are unavailable the child runs without them and the receipt says so.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNS = 0x00020000
AT_FDCWD = -100
AT_RECURSIVE = 0x8000
MOUNT_ATTR_RDONLY = 0x1
MS_PRIVATE = 1 << 18
MS_REC = 1 << 14
MS_BIND = 4096
SYS_MOUNT_SETATTR = 442  # x86_64 and aarch64 share the number (Linux >= 5.12)
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


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def _mount_setattr(path: str, *, set_: int = 0, clear: int = 0, recursive: bool) -> bool:
    attr = _MountAttr(set_, clear, 0, 0)
    flags = AT_RECURSIVE if recursive else 0
    return _libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, path.encode(), flags, ctypes.byref(attr),
                         ctypes.sizeof(attr)) == 0


def _read_only_except(writable: str) -> bool:
    """In a fresh mount namespace: everything read-only, `writable` (a folder) read-write."""
    if _libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        return False
    if _libc.mount(writable.encode(), writable.encode(), None, MS_BIND, None) != 0:
        return False
    if not _mount_setattr("/", set_=MOUNT_ATTR_RDONLY, recursive=True):
        return False
    return _mount_setattr(writable, clear=MOUNT_ATTR_RDONLY, recursive=False)


def _enter_pid_namespace() -> None:
    """Fork once more so that the evaluation runs as PID 1 of a new PID namespace.

    The outer process only waits and mirrors the inner one's end (signal or exit code) to the
    zygote; when the inner one dies the kernel kills everything left in the namespace.
    """
    pid = os.fork()
    if pid == 0:
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        return
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def harden_child(*, isolate: bool, memory_limit_mb: int | None, file_size_mb: int, work_dir: str) -> str:
    """Apply limits and namespaces to the current (child) process; returns a description."""
    os.setsid()
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    _lower(resource.RLIMIT_CORE, 0)
    _lower(resource.RLIMIT_FSIZE, file_size_mb * 1024 * 1024)
    if memory_limit_mb:
        _lower(resource.RLIMIT_AS, memory_limit_mb * 1024 * 1024)
    parts = ["setsid", "rlimits"]
    if not isolate:
        return ",".join(parts)
    if _libc.unshare(CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWNS | CLONE_NEWPID) == 0:
        parts.append("userns+netns+pidns")
        parts.append("ro-fs" if _read_only_except(work_dir) else "rw-fs")
        _enter_pid_namespace()
    elif _libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0:
        parts.append("userns+netns")
    else:
        parts.append(f"no-namespaces(errno={ctypes.get_errno()})")
    return ",".join(parts)
