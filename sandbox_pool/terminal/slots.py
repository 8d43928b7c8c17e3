"""Workspace slots: bind a workspace into an already running container (warm pools).

A container's mounts are fixed when it is created, so a pre-started container mounts an
empty host folder, the *slot*, with ``rslave`` propagation. The slot is a shared mount on
the host; binding a workspace onto it later propagates into the container. The binding is
assembled in a private staging mount first (workspace read-write, protected entries
read-only) and then bound recursively onto the slot in one step, so the container never
sees the workspace without its read-only protections.

Needs root on the host and a Docker engine in the same mount namespace (a local engine).
"""

from __future__ import annotations

import ctypes
import errno
import os
from pathlib import Path

from cuda_agent.errors import SandboxError, SandboxUnavailableError

_MS_RDONLY = 1
_MS_NOSUID = 2
_MS_NODEV = 4
_MS_NOEXEC = 8
_MS_REMOUNT = 32
_MS_NOATIME = 1024
_MS_NODIRATIME = 2048
_MS_BIND = 4096
_MS_REC = 16384
_MS_PRIVATE = 1 << 18
_MS_SHARED = 1 << 20
_MS_RELATIME = 1 << 21
_MNT_DETACH = 2
# statvfs f_flag bit -> mount flag to keep when remounting read-only
_KEEP = {os.ST_NOSUID: _MS_NOSUID, os.ST_NODEV: _MS_NODEV, os.ST_NOEXEC: _MS_NOEXEC,
         os.ST_NOATIME: _MS_NOATIME, os.ST_NODIRATIME: _MS_NODIRATIME, os.ST_RELATIME: _MS_RELATIME}

_libc = ctypes.CDLL(None, use_errno=True)


def _mount(source: str | None, target: str, flags: int) -> None:
    src = None if source is None else source.encode()
    if _libc.mount(src, target.encode(), None, ctypes.c_ulong(flags), None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} -> {target}: {os.strerror(err)}")


def _umount(target: str) -> None:
    if _libc.umount2(target.encode(), _MNT_DETACH) != 0:
        err = ctypes.get_errno()
        if err not in (errno.EINVAL, errno.ENOENT):  # not mounted (any more)
            raise OSError(err, f"umount {target}: {os.strerror(err)}")


def _bind_read_only(source: str, target: str) -> None:
    _mount(source, target, _MS_BIND)
    kept = os.statvfs(target).f_flag
    flags = _MS_REMOUNT | _MS_BIND | _MS_RDONLY
    for bit, flag in _KEEP.items():
        if kept & bit:
            flags |= flag
    _mount(None, target, flags)


def make_slot(slot: Path) -> None:
    """Create `slot` as a shared mount of itself (the container mounts it with rslave)."""
    slot.mkdir(parents=True, exist_ok=True)
    try:
        _mount(str(slot), str(slot), _MS_BIND)
        _mount(None, str(slot), _MS_PRIVATE)
        _mount(None, str(slot), _MS_SHARED)
    except PermissionError as exc:
        raise SandboxUnavailableError(
            f"cannot create a workspace slot ({exc}): binding workspaces into pre-started containers "
            "needs root on the host; run as root or use a warm pool of size 0"
        ) from exc


def attach(slot: Path, staging: Path, workspace: Path, protected: list[str]) -> None:
    """Bind `workspace` (protected entries read-only) onto `slot` in one recursive bind."""
    staging.mkdir(parents=True, exist_ok=True)
    try:
        _mount(str(workspace), str(staging), _MS_BIND)
        _mount(None, str(staging), _MS_PRIVATE)
        for rel in protected:
            if os.path.lexists(workspace / rel) and not os.path.islink(workspace / rel):
                _bind_read_only(str(workspace / rel), str(staging / rel))
        _mount(str(staging), str(slot), _MS_BIND | _MS_REC)
    except OSError as exc:
        raise SandboxError(f"could not bind workspace {workspace} into its sandbox: {exc}") from exc
    finally:
        _umount(str(staging))


def detach(slot: Path) -> None:
    """Undo `attach` (the container sees the empty slot again), then drop the slot mount."""
    for _ in range(2):
        _umount(str(slot))
