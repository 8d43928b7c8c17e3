"""Command output: files on the host, read back with a bound on what reaches memory.

Sandboxed processes write stdout/stderr into host files (the local backend hands them
the descriptors; the docker backend writes into a host folder mounted at
`JOBS_MOUNT`). Reading keeps the head and the tail of anything longer than the limit,
with a marker in the middle: a compiler's first error and a traceback's last line both
survive. Files are opened with ``O_NOFOLLOW`` and must be regular files, so a sandbox
that plants a symlink or a FIFO in place of its output cannot make the host read
elsewhere or block.
"""

from __future__ import annotations

import os
import stat

#: Mount point of the host's output folder inside docker sandboxes.
JOBS_MOUNT = "/.sandbox/jobs"


def _open_regular(path: str) -> int | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return fd


def _cut(fd: int, start: int, end: int, max_bytes: int) -> tuple[bytes, bool]:
    """Bytes [start, end) of fd, or their head and tail around a marker if longer than max_bytes."""
    size = end - start
    if size <= max_bytes:
        return os.pread(fd, size, start), False
    head = max_bytes // 2
    tail = max_bytes - head
    marker = f"\n[... {size - max_bytes} bytes truncated ...]\n".encode()
    return os.pread(fd, head, start) + marker + os.pread(fd, tail, end - tail), True


def read_capped(path: str, max_bytes: int, offset: int = 0) -> tuple[str, bool, int]:
    """(text from `offset` to the end, truncated?, new offset). A missing file reads as ''."""
    fd = _open_regular(path)
    if fd is None:
        return "", False, offset
    try:
        end = os.fstat(fd).st_size
        if end <= offset:
            return "", False, offset
        data, truncated = _cut(fd, offset, end, max_bytes)
    finally:
        os.close(fd)
    return data.decode("utf-8", errors="replace"), truncated, end


def read_small(path: str, limit: int = 64) -> str | None:
    """Content of a small control file (exit code, pid), or None if absent or not regular."""
    fd = _open_regular(path)
    if fd is None:
        return None
    try:
        return os.read(fd, limit).decode("ascii", errors="replace").strip()
    finally:
        os.close(fd)


def remove_quietly(*paths: str) -> None:
    for path in paths:
        try:
            os.unlink(path)
        except OSError:
            pass
