"""Workspace file operations done from the host, shared by every backend.

The workspace is a host directory bind-mounted into the sandbox, so reading and writing
it from the host is both fast and exact. Every path is walked component by component
from an open descriptor of the workspace root with ``O_NOFOLLOW``: no symlink is ever
followed, so neither ``..``, an absolute path, a symlink nor a symlink swapped in by a
racing sandbox process can take a read or a write outside the workspace.
"""

from __future__ import annotations

import asyncio
import errno
import os
import posixpath
import stat
from pathlib import Path

from cuda_agent.errors import ToolCallError, WorkspaceError
from cuda_agent.sandbox_pool.terminal.globbing import compile_glob

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_MAX_LISTED = 100_000


class WorkspaceFileNotFoundError(ToolCallError, FileNotFoundError):
    """The path names nothing in the workspace (catch either base)."""


class WorkspaceIsADirectoryError(ToolCallError, IsADirectoryError):
    """The path names a folder where a file is needed (catch either base)."""


def normalize(path: str) -> str:
    """The workspace-relative form of `path`, or ToolCallError if it leaves the workspace."""
    if not path or "\0" in path:
        raise ToolCallError(f"invalid path {path!r}")
    if path.startswith("/"):
        raise ToolCallError(f"absolute path {path!r} refused: give a path relative to the workspace root")
    norm = posixpath.normpath(path)
    if norm == ".." or norm.startswith("../"):
        raise ToolCallError(f"path {path!r} leaves the workspace")
    return norm


def is_protected(norm: str, protected: list[str]) -> bool:
    """True if the normalized path is a protected entry or lies below one."""
    for entry in protected:
        entry = entry.strip("/")
        if norm == entry or norm.startswith(entry + "/"):
            return True
    return False


class WorkspaceFiles:
    """read / write / list on one workspace, refusing escapes and protected paths."""

    def __init__(self, root: Path, protected: list[str], owner: tuple[int, int] | None = None) -> None:
        """`owner`: (uid, gid) given to files and folders this class creates (None: the caller's)."""
        try:
            self._root_fd = os.open(root, _DIR_FLAGS)
        except OSError as exc:
            raise WorkspaceError(f"workspace {root} is not an accessible directory: {exc}") from exc
        self.root = root
        self.protected = [p.strip("/") for p in protected if p.strip("/")]
        self.owner = owner

    def close(self) -> None:
        if self._root_fd >= 0:
            os.close(self._root_fd)
            self._root_fd = -1

    # ------------------------------------------------------------------ walking
    def _open_parent(self, norm: str, create: bool) -> tuple[int, str]:
        """Descriptor of the folder holding `norm` (caller closes it) and the final name."""
        parts = [] if norm == "." else norm.split("/")
        if not parts:
            raise ToolCallError("the workspace root is a folder, not a file")
        fd = os.dup(self._root_fd)
        try:
            for name in parts[:-1]:
                fd = self._step(fd, name, norm, create)
        except BaseException:
            os.close(fd)
            raise
        return fd, parts[-1]

    def _step(self, fd: int, name: str, norm: str, create: bool) -> int:
        """Descriptor of the folder `name` in `fd` (created if asked); closes `fd` on success only."""
        try:
            child = os.open(name, _DIR_FLAGS, dir_fd=fd)
        except FileNotFoundError:
            if not create:
                raise WorkspaceFileNotFoundError(f"no such file: {norm}") from None
            child = self._mkdir(fd, name, norm)
        except OSError as exc:
            raise self._walk_error(exc, norm) from exc
        os.close(fd)
        return child

    def _mkdir(self, fd: int, name: str, norm: str) -> int:
        try:
            os.mkdir(name, 0o755, dir_fd=fd)
            self._chown(name, fd)
            return os.open(name, _DIR_FLAGS, dir_fd=fd)
        except OSError as exc:
            raise self._walk_error(exc, norm) from exc

    @staticmethod
    def _walk_error(exc: OSError, norm: str) -> ToolCallError:
        if exc.errno == errno.EISDIR:
            return WorkspaceIsADirectoryError(f"{norm} is a folder, not a file")
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            return ToolCallError(f"{norm}: a component is a symlink or not a folder (file tools follow no symlinks)")
        return ToolCallError(f"{norm}: {exc.strerror}")

    def _chown(self, name: str, dir_fd: int) -> None:
        if self.owner is not None:
            os.chown(name, *self.owner, dir_fd=dir_fd, follow_symlinks=False)

    # ------------------------------------------------------------------ API
    def read(self, path: str) -> bytes:
        norm = normalize(path)
        parent, name = self._open_parent(norm, create=False)
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=parent)
        except FileNotFoundError:
            raise WorkspaceFileNotFoundError(f"no such file: {norm}") from None
        except OSError as exc:
            raise self._walk_error(exc, norm) from exc
        finally:
            os.close(parent)
        with os.fdopen(fd, "rb") as handle:
            mode = os.fstat(fd).st_mode
            if stat.S_ISDIR(mode):
                raise WorkspaceIsADirectoryError(f"{norm} is a folder, not a file")
            if not stat.S_ISREG(mode):
                raise ToolCallError(f"{norm} is not a regular file")
            return handle.read()

    def write(self, path: str, data: bytes) -> None:
        norm = normalize(path)
        if is_protected(norm, self.protected):
            raise ToolCallError(f"{norm} is protected (read-only): write your code in model_new.py and kernels/")
        parent, name = self._open_parent(norm, create=True)
        flags = os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            try:
                fd = os.open(name, flags | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=parent)
                self._chown(name, parent)
            except FileExistsError:
                fd = os.open(name, flags, dir_fd=parent)
        except OSError as exc:
            raise self._walk_error(exc, norm) from exc
        finally:
            os.close(parent)
        with os.fdopen(fd, "wb") as handle:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise ToolCallError(f"{norm} is not a regular file")
            os.ftruncate(fd, 0)
            handle.write(data)

    def list(self, pattern: str = "**/*") -> list[str]:
        """Sorted relative paths of non-folder entries matching a glob (``**`` spans folders)."""
        regex = compile_glob(normalize(pattern) if pattern not in ("", ".") else "**/*")
        found: list[str] = []
        for dirpath, dirnames, filenames in os.walk(f"/proc/self/fd/{self._root_fd}"):
            rel_dir = os.path.relpath(dirpath, f"/proc/self/fd/{self._root_fd}")
            dirnames.sort()
            for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
                rel = name if rel_dir == "." else f"{rel_dir}/{name}"
                if regex.match(rel):
                    found.append(rel)
            if len(found) >= _MAX_LISTED:
                break
        return sorted(found)


def chown_tree(root: Path, owner: tuple[int, int], skip: list[str]) -> None:
    """Give every entry under `root` to `owner`, except the protected entries (no symlink followed)."""
    os.chown(root, *owner, follow_symlinks=False)
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        for name in list(dirnames) + filenames:
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            if is_protected(rel, skip):
                if name in dirnames:
                    dirnames.remove(name)
                continue
            os.chown(os.path.join(dirpath, name), *owner, follow_symlinks=False)


class WorkspaceFileMethods:
    """The contract's file methods, for backends that reach the workspace from the host.

    A backend provides `_require_bound() -> WorkspaceFiles`; reads and writes then go through
    the same descriptor-based, symlink-refusing code whatever isolates the commands.
    """

    def _require_bound(self) -> "WorkspaceFiles":
        raise NotImplementedError

    async def read_file(self, path: str) -> bytes:
        return await asyncio.to_thread(self._require_bound().read, path)

    async def write_file(self, path: str, data: bytes) -> None:
        await asyncio.to_thread(self._require_bound().write, path, data)

    async def list_files(self, pattern: str = "**/*") -> list[str]:
        return await asyncio.to_thread(self._require_bound().list, pattern)
