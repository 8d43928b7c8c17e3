"""Turning the model's paths into safe workspace-relative paths, with instructive refusals."""

from __future__ import annotations

import asyncio
import posixpath
from pathlib import Path, PurePosixPath

from cuda_agent.tools.observation import ToolErrorKind, ToolUsageError
from cuda_agent.tools.session import ToolSession

ROOT = "."


def _bad(message: str) -> ToolUsageError:
    return ToolUsageError(ToolErrorKind.BAD_PATH, message)


def _strip_root(path: str, roots: list[str]) -> str | None:
    """`path` relative to the first root it lies under, or None."""
    for root in roots:
        root = posixpath.normpath(root)
        if path == root:
            return ROOT
        if path.startswith(root.rstrip("/") + "/"):
            return path[len(root.rstrip("/")) + 1 :]
    return None


def normalize(session: ToolSession, raw: str, *, what: str = "file_path") -> str:
    """Lexically normalise `raw` to a workspace-relative POSIX path ('.' for the root).

    Accepts relative paths and absolute paths under the workspace (its host path or a
    configured alias); refuses `..` escapes and other absolute paths.
    """
    text = raw.strip()
    if not text:
        raise _bad(f"{what} is empty. Give a path relative to the workspace root, e.g. 'model_new.py'.")
    if "\x00" in text:
        raise _bad(f"{what} contains a NUL byte.")
    if text.startswith("~"):
        raise _bad(f"{what} '{raw}' uses '~'; give a path relative to the workspace root instead.")
    path = posixpath.normpath(text)
    if path.startswith("/"):
        roots = [str(session.workspace), *session.config.workspace_aliases]
        relative = _strip_root(path, roots)
        if relative is None:
            raise _bad(
                f"{what} '{raw}' is outside the workspace. Use a path relative to the workspace root "
                f"(e.g. 'kernels/my_kernel.cu'); the workspace is the current directory of Bash."
            )
        path = posixpath.normpath(relative)
    if path == ".." or path.startswith("../"):
        raise _bad(f"{what} '{raw}' leaves the workspace through '..'. Stay inside the workspace root.")
    return path


def _resolve_on_host(workspace: Path, relative: str) -> str | None:
    """The resolved workspace-relative path (symlinks followed), or None if it escapes."""
    root = workspace.resolve()
    target = (root / relative).resolve()
    if target == root:
        return ROOT
    try:
        return target.relative_to(root).as_posix()
    except ValueError:
        return None


async def resolve(session: ToolSession, raw: str, *, what: str = "file_path") -> str:
    """`normalize`, then refuse paths that leave the workspace through a symlink."""
    relative = normalize(session, raw, what=what)
    if not session.workspace_on_host:  # a remote workspace: its backend enforces this
        return relative
    resolved = await asyncio.to_thread(_resolve_on_host, session.workspace, relative)
    if resolved is None:
        raise _bad(f"{what} '{raw}' resolves outside the workspace through a symbolic link; refused.")
    return relative


def is_protected(session: ToolSession, relative: str) -> bool:
    """Whether `relative` is one of the protected paths (or lies under a protected directory)."""
    for entry in session.config.protected_paths:
        entry = posixpath.normpath(entry.strip("/"))
        if relative == entry or relative.startswith(entry + "/"):
            return True
    return False


async def resolve_writable(session: ToolSession, raw: str) -> str:
    """`resolve`, then refuse protected files (also when reached through a symlink)."""
    relative = await resolve(session, raw)
    if relative == ROOT:
        raise ToolUsageError(ToolErrorKind.IS_DIRECTORY, f"'{raw}' is the workspace root, not a file.")
    targets = {relative}
    if session.workspace_on_host:
        resolved = await asyncio.to_thread(_resolve_on_host, session.workspace, relative)
        if resolved is not None:
            targets.add(resolved)
    if any(is_protected(session, target) for target in targets):
        protected = ", ".join(session.config.protected_paths)
        raise ToolUsageError(
            ToolErrorKind.PROTECTED_PATH,
            f"'{raw}' is protected and cannot be modified (protected: {protected}). "
            "These files are fixed by the task; put your changes in other files.",
        )
    return relative


def parent_of(relative: str) -> str:
    """The parent directory of a relative path ('.' for top-level files)."""
    parent = str(PurePosixPath(relative).parent)
    return parent or ROOT
