"""Counters of a pool: latency percentiles over a window, busy time per worker."""

from __future__ import annotations

import collections
import math
import time

from cuda_agent.sandbox_pool.pool.base import LatencyStats


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 100]) of an ascending, non-empty list."""
    rank = max(1, math.ceil(q / 100.0 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


class LatencyWindow:
    """The last `size` latencies."""

    def __init__(self, size: int) -> None:
        self._values: collections.deque[float] = collections.deque(maxlen=size)

    def add(self, seconds: float) -> None:
        self._values.append(seconds)

    def stats(self) -> LatencyStats:
        if not self._values:
            return LatencyStats()
        values = sorted(self._values)
        return LatencyStats(count=len(values), mean_s=sum(values) / len(values), p50_s=percentile(values, 50),
                            p90_s=percentile(values, 90), p99_s=percentile(values, 99))


class BusyClock:
    """Busy time of one worker since it started: time with at least one job in flight (the ongoing
    period counts up to now). Jobs may overlap (a pipelined worker)."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self._busy_s = 0.0
        self._since: float | None = None
        self._jobs = 0

    def begin(self) -> None:
        self._jobs += 1
        if self._since is None:
            self._since = time.monotonic()

    def end(self) -> None:
        self._jobs = max(0, self._jobs - 1)
        if self._since is not None and self._jobs == 0:
            self._busy_s += time.monotonic() - self._since
            self._since = None

    @property
    def busy(self) -> bool:
        return self._since is not None

    def uptime_s(self) -> float:
        return time.monotonic() - self.started

    def busy_s(self) -> float:
        """Seconds spent busy so far, the ongoing job included."""
        return self._busy_s + (time.monotonic() - self._since if self._since is not None else 0.0)

    def fraction(self) -> float:
        up = self.uptime_s()
        return min(1.0, self.busy_s() / up) if up > 0 else 0.0
