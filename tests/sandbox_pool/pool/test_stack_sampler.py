"""The pool benchmark's stack sampler (benchmarks/pool/stack_sampler.py) sees busy threads and skips idle ones."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks" / "pool"))

from stack_sampler import StackSampler  # noqa: E402


def test_a_busy_thread_is_counted_and_an_idle_one_is_not() -> None:
    namespace: dict = {"time": time}
    exec(compile("def spin(seconds):\n    end = time.monotonic() + seconds\n    while time.monotonic() < end:\n"
                 "        pass\n", "<generated>", "exec"), namespace)  # a frame whose file has no folder
    idle = threading.Event()
    waiter = threading.Thread(target=idle.wait, daemon=True)
    waiter.start()
    sampler = StackSampler(interval_s=0.002)
    sampler.start()
    busy = threading.Thread(target=namespace["spin"], args=(0.4,))
    busy.start()
    busy.join()
    sampler.stop()
    idle.set()
    report = sampler.report()
    assert not sampler.is_alive() and report["samples"] > 10
    assert 0 < report["gil_share"] <= 1.5
    frames = report["innermost"]
    # Other threads of the test process (a Ray log thread, say) may be busy too: ours is busy in most samples.
    assert frames.get("worker threads | <generated>:spin", 0) >= 0.5, frames
    assert not [k for k in frames if "threading.py:wait" in k], "a thread waiting on an event is idle"
