"""One task, one process: a hanging or crashing task costs its own verdict, never the run.

Task processes are forked from a forkserver that imported torch (and the compiler stack)
once, so a task starts in milliseconds instead of paying ``import torch`` again. The
forkserver never touches CUDA, so every child initialises its own CUDA context.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import multiprocessing.context
import os
import signal
import socket
import time
from multiprocessing.connection import Connection

from cuda_agent.data_gen.filter.models import Criterion, FilterConfig, FilterResult
from cuda_agent.errors import InfraError

logger = logging.getLogger(__name__)

PRELOAD = ["torch", "torch._dynamo", "cuda_agent.data_gen.filter.checks"]
"""Imported once by the forkserver. Nothing here may initialise CUDA (children could not use it then)."""
CPU_PRELOAD = ["torch._inductor.compile_fx"]
"""Added when the first run of this process is on the CPU; on GPUs each task process imports inductor
itself, so that no compiler-stack import can touch CUDA before the fork."""
_CONTEXT: multiprocessing.context.BaseContext | None = None
LOCK_WAIT_FACTOR = 20
"""A task may wait for the device's timing lock up to this many times its own timeout."""


def _context(device: str) -> multiprocessing.context.BaseContext:
    """The forkserver context; its preload list is fixed by the first call of this process."""
    global _CONTEXT
    if _CONTEXT is None:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(PRELOAD + (CPU_PRELOAD if device == "cpu" else []))
        _CONTEXT = context
    return _CONTEXT


def _kill_group(process: multiprocessing.process.BaseProcess) -> None:
    if process.pid is None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        process.kill()


def run_isolated(task_id: str, source: str, config: FilterConfig, device: str, lock_path: str | None) -> FilterResult:
    """Judge one task in a fresh process; raises InfraError only when the process cannot be started."""
    from cuda_agent.data_gen.filter.checks import child_main

    context = _context(device)
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=child_main, name=f"filter-{task_id}",
                              args=(sender, task_id, source, config.model_dump_json(), device, lock_path))
    start = time.perf_counter()
    try:
        process.start()
    except OSError as exc:
        raise InfraError(f"cannot start a task process: {exc}") from exc
    sender.close()
    payload, timed_out = _await_verdict(receiver, process, config.timeout_s)
    duration = time.perf_counter() - start
    if payload is not None:
        return FilterResult.model_validate_json(payload)
    base = {"task_id": task_id, "kept": False, "duration_s": duration, "device": device, "host": socket.gethostname()}
    if timed_out:
        detail = f"no verdict within {config.timeout_s} s (time waiting for the timing lock not counted)"
        return FilterResult(**base, criterion=Criterion.TIMEOUT, detail=detail)
    code = process.exitcode
    how = f"killed by {signal.Signals(-code).name}" if code is not None and code < 0 else f"exited with code {code}"
    return FilterResult(**base, criterion=Criterion.CRASH, detail=f"task process {how} without a verdict")


def _await_verdict(receiver: Connection, process: multiprocessing.process.BaseProcess,
                   timeout_s: float) -> tuple[str | None, bool]:
    """(the verdict's JSON or None, whether the task ran out of time); always reaps the process.

    The child reports its phases: time spent waiting for the device's timing lock (held by
    another task, perhaps one that hangs) does not count against this task's `timeout_s`, so a
    task that crashes beside a hanging one is reported as a crash, not a timeout.
    """
    deadline = time.monotonic() + timeout_s
    waiting_since: float | None = None
    payload: str | None = None
    timed_out = False
    try:
        while True:
            now = time.monotonic()
            if waiting_since is not None:
                if now - waiting_since > LOCK_WAIT_FACTOR * timeout_s:
                    timed_out = True
                    break
                ready = receiver.poll(1.0)
            else:
                ready = now < deadline and receiver.poll(deadline - now)
            if not ready:
                if waiting_since is None and time.monotonic() >= deadline:
                    timed_out = True
                    break
                continue
            try:
                message = receiver.recv()
            except (EOFError, OSError):
                break  # the process died without a verdict
            if isinstance(message, str):
                payload = message
                break
            phase = message[1] if isinstance(message, tuple) and len(message) == 2 else None
            if phase == "waiting_for_lock":
                waiting_since = time.monotonic()
            elif phase == "locked" and waiting_since is not None:
                deadline += time.monotonic() - waiting_since
                waiting_since = None
    finally:
        if timed_out:
            _kill_group(process)
        process.join(timeout=10)
        if process.is_alive():
            _kill_group(process)
            process.join(timeout=10)
        receiver.close()
    return payload, timed_out
