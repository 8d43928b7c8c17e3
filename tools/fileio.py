"""File access through the sandbox, with the model's mistakes turned into `ToolUsageError`s."""

from __future__ import annotations

import asyncio
import shlex
from pathlib import Path

from cuda_agent.errors import ToolCallError
from cuda_agent.tools.observation import ToolErrorKind, ToolUsageError
from cuda_agent.tools.paths import parent_of
from cuda_agent.tools.session import ToolSession
from cuda_agent.tools.text import decode, looks_binary


def _host_size(path: Path) -> int | None:
    """Size in bytes of a regular file on this host; -1 for a directory; None if absent."""
    if path.is_dir():
        return -1
    if path.is_file():
        return path.stat().st_size
    return None


def _not_found(raw: str) -> ToolUsageError:
    return ToolUsageError(
        ToolErrorKind.NOT_FOUND,
        f"File '{raw}' does not exist. Paths are relative to the workspace root; "
        "use Glob (e.g. pattern='**/*') to see which files exist.",
    )


def _is_directory(raw: str) -> ToolUsageError:
    return ToolUsageError(
        ToolErrorKind.IS_DIRECTORY,
        f"'{raw}' is a directory, not a file. List it with Glob(pattern='*', path='{raw}') or Bash 'ls {raw}'.",
    )


async def read_bytes(session: ToolSession, relative: str, raw: str) -> bytes:
    """The bytes of a workspace file; refuses directories and files over read_max_file_bytes."""
    limit = session.config.read_max_file_bytes
    size = await asyncio.to_thread(_host_size, session.workspace / relative)
    if size == -1:
        raise _is_directory(raw)
    if size is None and session.workspace_on_host:
        raise _not_found(raw)
    if size is not None and size > limit:
        raise ToolUsageError(
            ToolErrorKind.TOO_LARGE,
            f"'{raw}' is {size} bytes, more than the {limit}-byte limit of this tool. "
            f"Look at parts of it with Bash (e.g. 'head -n 100 {shlex.quote(raw)}', 'wc -l', 'grep -n') "
            "or search it with Grep.",
        )
    try:
        data = await session.sandbox.read_file(relative)
    except FileNotFoundError as exc:
        raise _not_found(raw) from exc
    except IsADirectoryError as exc:
        raise _is_directory(raw) from exc
    except PermissionError as exc:
        raise ToolUsageError(ToolErrorKind.BAD_PATH, f"'{raw}' cannot be read: permission denied.") from exc
    except ToolUsageError:
        raise
    except ToolCallError as exc:  # the backend refused the path itself
        raise ToolUsageError(ToolErrorKind.BAD_PATH, f"'{raw}' was refused: {exc}") from exc
    if len(data) > limit:
        raise ToolUsageError(ToolErrorKind.TOO_LARGE, f"'{raw}' is {len(data)} bytes, over the {limit}-byte limit.")
    return data


async def read_text(session: ToolSession, relative: str, raw: str) -> str:
    """`read_bytes`, refusing binary files with advice on how to inspect them."""
    data = await read_bytes(session, relative, raw)
    if looks_binary(data):
        quoted = shlex.quote(raw)
        raise ToolUsageError(
            ToolErrorKind.BINARY_FILE,
            f"'{raw}' is a binary file ({len(data)} bytes); this tool reads text only. "
            f"Inspect it with Bash, e.g. 'file {quoted}', 'xxd {quoted} | head', or 'nm -C {quoted}' for objects.",
        )
    return decode(data)


async def exists(session: ToolSession, relative: str) -> bool:
    """Whether a file (or directory) exists at `relative`."""
    if session.workspace_on_host:
        return await asyncio.to_thread((session.workspace / relative).exists)
    try:
        await session.sandbox.read_file(relative)
    except (FileNotFoundError, IsADirectoryError):
        return False
    return True


async def write_text(session: ToolSession, relative: str, raw: str, text: str) -> None:
    """Write `text` (UTF-8) to a workspace file, creating missing parent directories."""
    data = text.encode("utf-8")
    try:
        await _write(session, relative, raw, data)
    except FileNotFoundError:
        await _make_parent(session, relative)
        await _write(session, relative, raw, data)


async def _write(session: ToolSession, relative: str, raw: str, data: bytes) -> None:
    try:
        await session.sandbox.write_file(relative, data)
    except IsADirectoryError as exc:
        raise _is_directory(raw) from exc
    except PermissionError as exc:
        raise ToolUsageError(
            ToolErrorKind.PROTECTED_PATH, f"'{raw}' cannot be written: permission denied (read-only)."
        ) from exc
    except ToolUsageError:
        raise
    except ToolCallError as exc:
        raise ToolUsageError(ToolErrorKind.BAD_PATH, f"'{raw}' was refused: {exc}") from exc


async def _make_parent(session: ToolSession, relative: str) -> None:
    parent = parent_of(relative)
    result = await session.sandbox.run(f"mkdir -p -- {shlex.quote(parent)}", timeout_s=30)
    if result.exit_code != 0:
        raise ToolUsageError(
            ToolErrorKind.BAD_PATH,
            f"Cannot create directory '{parent}': {(result.stderr or result.stdout).strip()}",
        )
