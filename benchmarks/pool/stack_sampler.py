"""Where the threads of this process are, sampled: a poor man's profiler for the pool benchmark.

The embedded pool's worker runs in the benchmark's process (one GPU: `worker_processes` off), so
the parent's side of every in-flight evaluation (reference preparation threads, the event loop's
message handling and comparisons) is sampled here. Every `interval_s` the innermost frame of each
busy thread is counted (threads parked in a selector, a lock wait or a queue are idle), by the
thread's role (the event loop's thread, the `asyncio.to_thread` workers) and by the innermost frame
of our own code. The sampler needs the GIL to look: when the process's threads keep it busy, it gets
few samples; `gil_share` (samples taken / samples asked for) measures that starvation itself.
"""

from __future__ import annotations

import collections
import sys
import threading
import time
from types import FrameType

IDLE = ("selectors.py:select", "threading.py:wait", "threading.py:_wait_for_tstate_lock", "queue.py:get",
        "futures/thread.py:_worker", "unix_events.py:_do_waitpid", "stack_sampler.py:run")
"""Innermost frames of a thread that waits for work (its sample is counted as idle)."""


def _where(frame: FrameType | None) -> tuple[str, str]:
    """(innermost frame, innermost frame of cuda_agent code) as 'file:function'."""
    inner = ours = ""
    while frame is not None:
        code = frame.f_code
        name = f"{'/'.join(code.co_filename.split('/')[-2:])}:{code.co_name}"  # "<frozen ...>" has no folder
        inner = inner or name
        if not ours and ("sandbox_pool" in code.co_filename or "cuda_agent" in code.co_filename):
            ours = name
        frame = frame.f_back
    return inner, ours


class StackSampler(threading.Thread):
    """Counts the busy threads' innermost frames every `interval_s` until `stop`."""

    def __init__(self, interval_s: float = 0.005) -> None:
        super().__init__(daemon=True, name="stack-sampler")
        self.interval_s = interval_s
        self.samples = 0
        self.inner: collections.Counter[str] = collections.Counter()
        self.ours: collections.Counter[str] = collections.Counter()
        self.busy: collections.Counter[str] = collections.Counter()
        self._stop_event = threading.Event()
        self._span = (0.0, 0.0)

    def run(self) -> None:
        names = {}
        started = time.monotonic()
        while not self._stop_event.is_set():
            names.update({t.ident: t.name for t in threading.enumerate()})
            self.samples += 1
            for ident, frame in sys._current_frames().items():
                inner, ours = _where(frame)
                if inner.endswith(IDLE):
                    continue
                role = "event loop" if names.get(ident) == "MainThread" else "worker threads"
                self.busy[role] += 1
                self.inner[f"{role} | {inner}"] += 1
                self.ours[f"{role} | {ours or '(not our code)'}"] += 1
            time.sleep(self.interval_s)
        self._span = (started, time.monotonic())

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=5)

    def report(self, top: int = 25) -> dict:
        """Shares of samples: busy threads per role, and the most frequent frames."""
        n = max(1, self.samples)
        elapsed = self._span[1] - self._span[0]
        return {
            "samples": self.samples, "interval_s": self.interval_s, "elapsed_s": round(elapsed, 2),
            "gil_share": round(self.samples * self.interval_s / elapsed, 4) if elapsed > 0 else None,
            "busy_threads_per_sample": {role: round(c / n, 3) for role, c in self.busy.items()},
            "innermost": {k: round(c / n, 3) for k, c in self.inner.most_common(top)},
            "our_innermost": {k: round(c / n, 3) for k, c in self.ours.most_common(top)},
        }
