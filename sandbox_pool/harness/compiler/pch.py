"""Precompiled headers for the torch + pybind11 glue (built once per toolchain and flag set).

The binding units include <torch/types.h> and <torch/csrc/utils/pybind.h>; parsing them
dominates the compile. A PCH turns ~11 s into ~4 s at -O0 (measured on the CI machine).
GCC only uses a PCH built with the same flags, so one is built per flag set.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import logging
import os
import threading
from collections.abc import AsyncIterator
from pathlib import Path

logger = logging.getLogger(__name__)

PCH_NAME = "cuda_agent_pch.h"
_CPU_HEADERS = (
    "<torch/types.h>",
    "<torch/csrc/utils/pybind.h>",
    "<pybind11/pybind11.h>",
    "<functional>",
    "<string>",
    "<vector>",
)
_CUDA_HEADERS = (*_CPU_HEADERS, "<c10/cuda/CUDAStream.h>", "<cuda_runtime.h>")


def pch_header_text(device: str) -> str:
    headers = _CUDA_HEADERS if device == "cuda" else _CPU_HEADERS
    return "#pragma once\n" + "".join(f"#include {h}\n" for h in headers)


_PROCESS_LOCKS: dict[str, threading.Lock] = {}
_PROCESS_LOCKS_GUARD = threading.Lock()


def _process_lock(folder: str) -> threading.Lock:
    with _PROCESS_LOCKS_GUARD:
        return _PROCESS_LOCKS.setdefault(folder, threading.Lock())


async def ensure_pch(cache_root: Path, cxx: str, flags: list[str], device: str, timeout_s: float,
                     text: str | None = None) -> Path | None:
    """Path of the PCH header to `-include`, building it if needed; None if it cannot be built.

    `text` overrides the header's content (the fast glue has its own)."""
    text = text or pch_header_text(device)
    key = hashlib.sha256("\n".join([cxx, *flags, text]).encode()).hexdigest()[:16]
    folder = cache_root / "pch" / key
    header = folder / PCH_NAME
    gch = folder / (PCH_NAME + ".gch")
    if gch.exists():
        return header
    folder.mkdir(parents=True, exist_ok=True)
    async with _held(folder):
        if gch.exists():
            return header
        header.write_text(text)
        tmp = folder / (PCH_NAME + ".gch.tmp")
        proc = await asyncio.create_subprocess_exec(
            cxx, "-x", "c++-header", *flags, str(header), "-o", str(tmp),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        try:
            async with asyncio.timeout(timeout_s):
                _, err = await proc.communicate()
        except TimeoutError:
            proc.kill()
            await proc.wait()
            logger.warning("precompiled header build timed out; compiling without it")
            return None
        except asyncio.CancelledError:
            proc.kill()
            raise
        if proc.returncode != 0:
            logger.warning("precompiled header build failed; compiling without it:\n%s", err.decode()[-2000:])
            return None
        tmp.rename(gch)
        return header


@contextlib.asynccontextmanager
async def _held(folder: Path) -> AsyncIterator[None]:
    """The folder's build lock, across processes (an flock on `.lock`) and, first, across this process's
    coroutines (a thread lock: one process's two flocks on two descriptors would also exclude each other, but
    the thread lock keeps waiters off the worker threads). Taken in a worker thread, released wherever the
    coroutine resumes: flock has no notion of threads, where filelock's deadlock registry does (an instance
    released on another thread than it was taken on left the thread 'holding' it in the filelock of the GPU
    node: the next build on that worker thread failed with "Deadlock: lock ... is already held by a different
    FileLock instance in this thread", seen in the pool's compile requests on an H100, 2026-12-07)."""
    local = _process_lock(str(folder))
    fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT, 0o644)

    def acquire() -> None:
        local.acquire()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            local.release()
            raise

    acquiring = asyncio.ensure_future(asyncio.to_thread(acquire))
    try:
        await asyncio.shield(acquiring)
    except BaseException:
        # cancelled while the worker thread waits: it may still take both locks; give them back when it does
        def undo(done: asyncio.Future) -> None:
            if not done.cancelled() and done.exception() is None:
                local.release()
            os.close(fd)

        acquiring.add_done_callback(undo)
        raise
    try:
        yield
    finally:
        os.close(fd)  # closing the descriptor releases its flock
        local.release()
