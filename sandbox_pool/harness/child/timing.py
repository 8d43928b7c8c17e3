"""The timing protocol, identical for the candidate and the baselines.

Per call: flush the cache (and reset persisting L2 on CUDA), synchronise the whole device,
then time `fn(*inputs)`, and a dense copy of every output that is a view rather than memory of its own
(`materialise`), up to a device-wide synchronisation. On CUDA a call's time is the
event time, unless the host clock (minus its calibrated floor) says work escaped the
events (other streams), in which case the host time counts. Every timed call gets inputs never seen before.
References are captured at import, before any candidate code exists in the process.
"""

from __future__ import annotations

import ctypes
import glob
import os
import statistics
import time
from typing import Any, Callable

import torch

from cuda_agent.sandbox_pool.harness.compare import flatten_outputs

_perf_ns = time.perf_counter_ns
_cuda_sync = torch.cuda.synchronize
_Event = torch.cuda.Event
_median = statistics.median
_cuda_sleep = torch.cuda._sleep
_Tensor = torch.Tensor
_is_contiguous = torch.Tensor.is_contiguous
_contiguous = torch.Tensor.contiguous

CPU_FLUSH_BYTES = 64 << 20
CUDA_FLUSH_BYTES = 256 << 20
CUDA_LEAD_CYCLES = 1_000_000
"""A device-side spin (~0.5 ms) before each timed call keeps the GPU busy while the host
enqueues the call, so host-side jitter stays out of the event window."""


def _load_cudart() -> Any | None:
    torch_dir = os.path.dirname(torch.__file__)
    patterns = [os.path.join(torch_dir, "lib", "libcudart.so*"),
                os.path.join(os.path.dirname(torch_dir), "nvidia", "*", "lib", "libcudart.so*"),
                "/usr/local/cuda/lib64/libcudart.so*"]
    for pattern in patterns:
        for path in sorted(glob.glob(pattern)):
            try:
                return ctypes.CDLL(path)
            except OSError:
                continue
    return None


def materialise(out: Any) -> None:
    """Copy, inside the timed window, every output tensor that is not contiguous, and drop the copies.

    The harness reads outputs densely after the call (checks, prints, the parent's copy). An output that is a
    view (a stride-0 `expand` of a few values, a transpose of a buffer written in the input's layout, overlapping
    `as_strided` windows) left that work to the harness, outside the window: red team, 2026-12-05, rewards 1 -> 3
    and 2 -> 3 on CPU. Its price is now in the call's time, for the candidate and the baselines alike; a
    contiguous output costs nothing. Only plain tensors: a subclass is refused after the call, and touching it
    here would run its code."""
    for value in flatten_outputs(out):
        if type(value) is _Tensor and not _is_contiguous(value):  # noqa: E721
            _contiguous(value)


class Timer:
    """Times calls on one device under the protocol above."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.cuda = device.startswith("cuda")
        self._flush = torch.empty((CUDA_FLUSH_BYTES if self.cuda else CPU_FLUSH_BYTES) // 4, dtype=torch.float32,
                                  device=device)
        self._cudart = _load_cudart() if self.cuda else None
        self.l2_reset = self._cudart is not None
        self.host_floor_us = self._calibrate() if self.cuda else 0.0
        self.host_fallbacks = 0  # calls timed by the host clock because work escaped the events

    def sync(self) -> None:
        if self.cuda:
            _cuda_sync()

    def flush(self) -> None:
        self._flush.fill_(1.0)
        if self._cudart is not None:
            self._cudart.cudaCtxResetPersistingL2Cache()
        self.sync()

    def _calibrate(self) -> float:
        samples = []
        for _ in range(50):
            self.sync()
            t0 = _perf_ns()
            start, end = _Event(enable_timing=True), _Event(enable_timing=True)
            start.record()
            end.record()
            _cuda_sync()
            samples.append((_perf_ns() - t0) / 1e3 - start.elapsed_time(end) * 1e3)
        return max(0.0, _median(samples))

    def time_call(self, fn: Callable[..., Any], inputs: list[Any],
                  edge: Callable[[str], None] = lambda _: None) -> tuple[Any, float, float]:
        """(output, per-call time in us, host time in us) of one call; `edge("s")` / `edge("e")` run at the
        window's start and end (the outside stamps: they bracket the call, not the cache flush before it,
        whose time varies with the host's load)."""
        if not self.cuda:
            self.flush()
            edge("s")
            t0 = _perf_ns()
            out = fn(*inputs)
            materialise(out)
            host_us = (_perf_ns() - t0) / 1e3
            edge("e")
            return out, host_us, host_us
        # No sync between the flush and the call: while the device clears the cache the
        # host enqueues the candidate's launches, so the event window holds device work
        # only (launch overhead is hidden, as in triton's do_bench).
        if self._cudart is not None:
            self._cudart.cudaCtxResetPersistingL2Cache()
        self.sync()
        flush_start, start, end = _Event(enable_timing=True), _Event(enable_timing=True), _Event(enable_timing=True)
        edge("s")
        t0 = _perf_ns()
        flush_start.record()
        _cuda_sleep(CUDA_LEAD_CYCLES)
        self._flush.fill_(1.0)
        start.record()
        out = fn(*inputs)
        materialise(out)
        end.record()
        _cuda_sync()
        host_us = (_perf_ns() - t0) / 1e3
        edge("e")
        event_us = start.elapsed_time(end) * 1e3
        flush_us = flush_start.elapsed_time(start) * 1e3
        return out, self.combine(event_us, host_us - flush_us), host_us

    def combine(self, event_us: float, host_us: float) -> float:
        """Event time when the host clock agrees with it; the host clock when work escaped the events.

        Honest calls finish within their events (host - floor <= event + launch slack);
        work hidden from the timed stream shows up only on the host clock.
        """
        wall_us = host_us - self.host_floor_us
        if wall_us <= 1.25 * event_us + 50.0:
            return event_us
        self.host_fallbacks += 1
        return wall_us
