"""Isolate an evaluation child before candidate code runs.

In order: its own session; limits (core, file size, address space on CPU); new user,
network, mount and PID namespaces: no network; no capabilities over the trusted worker
(which is non-dumpable, so no ptrace and no /proc/<pid>/mem); the whole file system
read-only except the child's private work folder (caches, the venv, the harness's files
cannot be changed); and every process it starts dies with it, `setsid` or not.
Where namespaces are unavailable the child runs without them and the receipt says so.

Not every machine lets a GPU be used under every namespace, so the zygote probes the levels
of `LEVELS` once, strongest first, with a real CUDA initialisation, and its children use the
strongest one that works (`probe_level`); the receipt names the level in force.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
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
MS_NOSUID, MS_NODEV, MS_NOEXEC = 2, 4, 8
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
    """In a fresh (private) mount namespace: everything read-only, `writable` (a folder) read-write."""
    if _libc.mount(writable.encode(), writable.encode(), None, MS_BIND, None) != 0:
        return False
    if not _mount_setattr("/", set_=MOUNT_ATTR_RDONLY, recursive=True):
        return False
    return _mount_setattr(writable, clear=MOUNT_ATTR_RDONLY, recursive=False)


def _enter_pid_namespace(fresh_proc: bool) -> bool:
    """Fork once more so that the evaluation runs as PID 1 of a new PID namespace.

    The outer process only waits and mirrors the inner one's end (signal or exit code) to the
    zygote; when the inner one dies the kernel kills everything left in the namespace.
    With `fresh_proc` the inner one mounts a /proc of its own namespace (it shows only the
    sandbox's processes, and pid-based /proc paths mean what they say); returns whether it did.
    """
    pid = os.fork()
    if pid == 0:
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        return fresh_proc and _libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None) == 0
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


LEVELS = ("pidns+ro", "ro", "pidns", "netns", "none")
"""Isolation levels, strongest first. All but `none` include a user and a network namespace;
`ro` is the read-only file system (a mount namespace), `pidns` a PID namespace with its own /proc."""


def harden_child(*, isolate: bool, memory_limit_mb: int | None, file_size_mb: int, work_dir: str,
                 level: str = LEVELS[0]) -> str:
    """Apply limits and namespaces of `level` to the current (child) process; returns a description."""
    os.setsid()
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    _lower(resource.RLIMIT_CORE, 0)
    _lower(resource.RLIMIT_FSIZE, file_size_mb * 1024 * 1024)
    if memory_limit_mb:
        _lower(resource.RLIMIT_AS, memory_limit_mb * 1024 * 1024)
    parts = ["setsid", "rlimits"]
    if not isolate or level == "none":
        return ",".join(parts)
    pidns, read_only = "pidns" in level, "ro" in level
    flags = CLONE_NEWUSER | CLONE_NEWNET | (CLONE_NEWNS if pidns or read_only else 0) | (CLONE_NEWPID if pidns else 0)
    if _libc.unshare(flags) == 0:
        parts.append("userns+netns" + ("+mntns" if flags & CLONE_NEWNS else "") + ("+pidns" if pidns else ""))
        if flags & CLONE_NEWNS and _libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0:
            parts.append("shared-mounts")
        if read_only:
            parts.append("ro-fs" if _read_only_except(work_dir) else "rw-fs")
        if pidns:
            parts.append("own-proc" if _enter_pid_namespace(fresh_proc=True) else "host-proc")
    elif _libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0:
        parts.append("userns+netns")
    else:
        parts.append(f"no-namespaces(errno={ctypes.get_errno()})")
    return ",".join(parts)


def start_probe(check: Callable[[], None], level: str, timeout_s: float = 60.0) -> int:
    """Fork a process that applies `level` and runs `check()`; its exit status says whether it worked."""
    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            signal.alarm(int(timeout_s))
            harden_child(isolate=True, memory_limit_mb=None, file_size_mb=16, work_dir="/tmp", level=level)
            check()
            code = 0
        finally:
            os._exit(code)
    return pid


def probe_outcome(pid: int) -> str:
    """'ok' or why not, once the probe process `pid` has ended."""
    _, status = os.waitpid(pid, 0)
    return "ok" if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0 else f"failed (status {status})"


def probe_level(check: Callable[[], None], timeout_s: float = 60.0,
                started: int | None = None) -> tuple[str, dict[str, str]]:
    """The strongest level of `LEVELS` under which `check()` (e.g. a CUDA initialisation) works.

    Each level is tried in a forked process (this process stays single-threaded and untouched);
    `started`: the pid of a probe of the strongest level already forked (`start_probe`), which
    the caller overlapped with other start-up work. Returns (level, outcome per level tried).
    """
    tried: dict[str, str] = {}
    for i, level in enumerate(LEVELS):
        pid = started if i == 0 and started is not None else start_probe(check, level, timeout_s)
        tried[level] = probe_outcome(pid)
        if tried[level] == "ok":
            return level, tried
    return "none", tried
