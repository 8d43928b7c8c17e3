"""Precompiled headers for the torch + pybind11 glue (built once per toolchain and flag set).

The binding units include <torch/types.h> and <torch/csrc/utils/pybind.h>; parsing them
dominates the compile. A PCH turns ~11 s into ~4 s at -O0 (measured on the CI machine).
GCC only uses a PCH built with the same flags, so one is built per flag set.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
from pathlib import Path

from filelock import FileLock

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
    # Builds of one process queue on a thread lock first: filelock refuses (as a deadlock) a
    # second instance of a held lock in the same thread, and to_thread reuses threads.
    # thread_local=False: the lock is taken in a worker thread and may be released elsewhere.
    local = _process_lock(str(folder))
    lock = FileLock(str(folder / ".lock"), thread_local=False)

    def acquire() -> None:
        local.acquire()
        try:
            lock.acquire()
        except BaseException:
            local.release()
            raise

    await asyncio.to_thread(acquire)
    try:
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
    finally:
        lock.release()
        local.release()
