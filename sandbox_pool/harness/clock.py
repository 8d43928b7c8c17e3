"""An outside-the-process bound on the candidate's timed calls.

The child stamps the start and the end of each timed call with a tiny message on a separate
SOCK_SEQPACKET pair. The kernel timestamps each message when it is sent (SO_TIMESTAMPNS),
so the parent reads send times that neither the candidate nor the parent's own scheduling can
shift. The stamps bracket the timed window itself, not the cache flush before it (on a CPU
the flush takes milliseconds and varies with the host's load). Before any candidate code is
loaded the child times null calls the same way, giving the protocol's fixed cost (lead-in,
synchronisation); a call's outside time minus that floor bounds what the call itself took. A
child whose reported times fall far below the bound (a patched timer, work hidden from the
clock) gets a violation.
"""

from __future__ import annotations

import socket
import statistics
import struct
from dataclasses import dataclass, field

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # 35 on x86_64 and aarch64 Linux
NULL_CALLS = 10
SLOW_FACTOR = 0.5
"""A median reported time below half the outside bound (minus the slack) is a violation:
generous, because the bound includes launch and synchronisation jitter."""


def pair() -> tuple[socket.socket, socket.socket]:
    """(parent end with send timestamps enabled, child end)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    ours.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    ours.setblocking(False)
    return ours, theirs


def mark(sock: socket.socket | None, edge: str, kind: str, k: int) -> None:
    """Child side: stamp `edge` ('s' start, 'e' end) of call k of `kind` ('n' null, 'c' candidate)."""
    if sock is not None:
        try:
            sock.send(f"{edge}:{kind}:{k}".encode())
        except OSError:
            pass  # the parent reads what arrived; a missing stamp only disables the check


@dataclass
class OutsideClock:
    """Parent side: collects the child's stamps with their kernel send times."""

    sock: socket.socket
    stamps: dict[tuple[str, str, int], int] = field(default_factory=dict)

    def drain(self) -> None:
        while True:
            try:
                data, ancillary, _, _ = self.sock.recvmsg(64, socket.CMSG_SPACE(16))
            except OSError:  # nothing left to read (BlockingIOError) or the socket is gone
                return
            if not data:
                return
            for level, kind, raw in ancillary:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(raw) >= 16:
                    sec, nsec = struct.unpack("qq", raw[:16])
                    try:
                        edge, call_kind, k = data.decode().split(":")
                        self.stamps[(edge, call_kind, int(k))] = sec * 1_000_000_000 + nsec
                    except ValueError:
                        continue

    def durations_us(self, kind: str) -> list[float]:
        out = []
        for (edge, call_kind, k), start in self.stamps.items():
            end = self.stamps.get(("e", call_kind, k))
            if edge == "s" and call_kind == kind and end is not None and end >= start:
                out.append((end - start) / 1e3)
        return out

    def bound(self) -> tuple[float, float] | None:
        """(shortest outside time of the candidate's calls minus the null-call floor, floor), in us.

        The shortest call, not the median: on a loaded host the child can be descheduled between
        a stamp and its own timer on most calls (seen on a 2-core CI machine: an honest 0.7 ms
        call with a 6.4 ms median outside), which lengthens the outside time only. A timer that
        under-reports gains nothing from that: every one of its calls takes at least its true
        time outside, and a call cannot be made genuinely short by skipping its work, because
        every timed output is fingerprinted."""
        calls, nulls = self.durations_us("c"), self.durations_us("n")
        if not calls or len(nulls) < NULL_CALLS // 2:
            return None
        floor = statistics.median(nulls)
        return max(0.0, min(calls) - floor), floor

    def close(self) -> None:
        self.sock.close()


def too_fast(reported_median_us: float, bound: tuple[float, float]) -> bool:
    """Whether the reported median is implausibly far below the outside bound."""
    outside_us, floor_us = bound
    slack = max(20.0, 0.1 * floor_us)
    return reported_median_us < SLOW_FACTOR * outside_us - slack
