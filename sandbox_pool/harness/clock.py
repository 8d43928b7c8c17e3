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

The parent reads the stamps when the child's next message comes (every timed call ends with one), not as
they arrive: a stamp that wakes the parent lets it preempt the child between the stamp and the child's own
timer, on most calls of a busy host. A CPU child's two clocks then agree within ~20 us, which makes their
agreement a verdict there (`cpu_agreement`). Where the kernel would hold too few unread stamps
(`queue_capacity`), and on cuda (not yet measured on a GPU node), the parent reads each one as it arrives.

The candidate's code runs in the child, so it can reach the stamps' socket too. The harness sends
each stamp once and nothing else: a stamp sent twice, one that is malformed, ends before it starts
or is missing (the socket closed or shut) means the candidate wrote to or broke the clock, and is
a violation (`OutsideClock.tampering`) rather than a check quietly disabled or a bound shrunk.
"""

from __future__ import annotations

import functools
import socket
import statistics
import struct
from dataclasses import dataclass, field

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # 35 on x86_64 and aarch64 Linux
NULL_CALLS = 10
SLOW_FACTOR = 0.5
"""A median reported time below half the outside bound (minus the slack) is a violation:
generous, because the bound includes launch and synchronisation jitter."""
CPU_AGREEMENT = 0.9
"""On a CPU the reported time of a call and its outside time (minus the floor) measure the same interval: the
best-agreeing judged call must report at least this fraction of it, CPU_SLACK_US included (`cpu_agreement`)."""
CPU_SLACK_US = 20.0
"""Added to a call's reported time before the ratio. With the stamps read quietly (module docstring), in a CPU pool
at depth 3 beside an endless candidate on the 2-core VM (and with two busy loops on its cores too), honest calls'
outside time minus the floor exceeded their reported time by -8 to 93 us (medians 3-9), and each evaluation's
best-agreeing call, the one judged, by at most 11 us (64 evaluations, median calls 168-8,001 us); read as they
arrived, calls exceeded it by up to 5,132 us (benchmarks/harness/RESULTS.md)."""
CPU_JUDGED_US = 100.0
"""Calls shorter than this outside (minus the floor) are left to the median bound; the agreement is judged only
when the median call is at least this long, so a few calls stretched past it are never all that is judged. At
100 us the rule needs a call's two clocks within 30 us (a timer bent to 0.7x is caught there, 0.83x at 300 us,
0.89x at 2 ms); until 2026-12-05 it was 300 us with 50 us of slack, and a 0.6x timer on a ~250 us kernel passed."""
QUIET_CAPACITY = 2 * (NULL_CALLS + 1) + 10
"""Unread stamps a child may leave before the parent's next read: the null calls', one timed call's, and margin."""


@functools.cache
def queue_capacity() -> int:
    """How many stamps a child can send before the parent reads one, probed once per process: a connected unix
    SEQPACKET pair is bounded by its send buffer on Linux (278 stamps on 6.18), other kernels may hold as few
    as net.unix.max_dgram_qlen (10)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    theirs.setblocking(False)
    held = 0
    try:
        while held < 4 * QUIET_CAPACITY:
            theirs.send(b"e:c:0000")
            held += 1
    except OSError:
        pass
    finally:
        ours.close()
        theirs.close()
    return held


def read_quietly(device: str) -> bool:
    """Whether the parent may leave stamps unread until the child's next message (module docstring)."""
    return device == "cpu" and queue_capacity() >= QUIET_CAPACITY


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
            pass  # the parent judges what arrived (`OutsideClock.tampering`)


@dataclass
class OutsideClock:
    """Parent side: collects the child's stamps with their kernel send times."""

    sock: socket.socket
    quiet: bool = False  # read at the child's messages only (`read_quietly`), so the agreement is a verdict
    stamps: dict[tuple[str, str, int], int] = field(default_factory=dict)
    forged: list[str] = field(default_factory=list)  # what no honest child sends

    def drain(self) -> None:
        while True:
            try:
                data, ancillary, _, _ = self.sock.recvmsg(64, socket.CMSG_SPACE(16))
            except OSError:  # nothing left to read (BlockingIOError) or the socket is gone
                return
            if not data:
                return
            key, sent_ns = _parse(data), None
            for level, kind, raw in ancillary:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(raw) >= 16:
                    sec, nsec = struct.unpack("qq", raw[:16])
                    sent_ns = sec * 1_000_000_000 + nsec
            if key is None:
                self.forged.append(f"a malformed stamp {data[:32]!r}")
            elif key in self.stamps:
                self.forged.append(f"stamp {':'.join(map(str, key))} sent twice")
            elif sent_ns is not None:
                self.stamps[key] = sent_ns

    def tampering(self, calls: int) -> str | None:
        """What shows that the candidate's code wrote to or broke the stamps' socket, for a child that
        made `calls` timed calls; None if nothing. The null calls' stamps come before any candidate code
        exists: without them the clock is unavailable here (no verdict from it either way)."""
        nulls = {(edge, "n", k) for edge in "se" for k in range(NULL_CALLS)}
        if not nulls & self.stamps.keys():
            return None
        problem = self.forged[0] if self.forged else None
        expected = nulls | {(edge, "c", k) for edge in "se" for k in range(calls)}
        if problem is None and self.stamps.keys() != expected:
            missing, extra = sorted(expected - self.stamps.keys()), sorted(self.stamps.keys() - expected)
            problem = (f"stamp {':'.join(map(str, (missing or extra)[0]))} "
                       + ("missing (the socket was closed or shut)" if missing else "not one of the calls'"))
        if problem is None:
            calls_made = sorted({(kind, k) for _, kind, k in expected})
            problem = next((f"call {kind}:{k} ended before it started" for kind, k in calls_made
                            if self.stamps[("e", kind, k)] < self.stamps[("s", kind, k)]), None)
        return None if problem is None else f"the outside clock was tampered with ({problem})"

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

    def cpu_agreement(self, reported_us: list[float]) -> float | None:
        """The largest ratio, over timed calls of at least CPU_JUDGED_US outside (minus the floor), of a call's
        reported time plus CPU_SLACK_US to its outside time minus the floor; None when the median call is shorter
        than that (or stamps are missing).

        On a CPU both clocks bracket the same call, so an honest call's ratio is ~1; a host that deschedules the
        child between a stamp and its own timer lowers that call's ratio only, and the largest stays ~1. A timer
        bent to report less lowers every call's (red team, 2026-12-04: `time.perf_counter_ns` redirected by native
        code to report 0.55x passed the median bound and turned reward 1 into 3). Judging only when the median
        call is long enough keeps a short kernel's few stretched calls from being all that is judged."""
        nulls = self.durations_us("n")
        if len(nulls) < NULL_CALLS // 2:
            return None
        floor = statistics.median(nulls)
        pairs = []
        for k, reported in enumerate(reported_us):
            start, end = self.stamps.get(("s", "c", k)), self.stamps.get(("e", "c", k))
            if start is not None and end is not None:
                pairs.append((reported, (end - start) / 1e3 - floor))
        if not pairs or statistics.median(outside for _, outside in pairs) < CPU_JUDGED_US:
            return None
        return max((reported + CPU_SLACK_US) / outside for reported, outside in pairs if outside >= CPU_JUDGED_US)

    def close(self) -> None:
        self.sock.close()


def _parse(data: bytes) -> tuple[str, str, int] | None:
    """(edge, kind, k) of a stamp `mark` sent, or None."""
    try:
        edge, kind, k = data.decode("ascii").split(":")
        index = int(k)
    except ValueError:
        return None
    if edge not in ("s", "e") or kind not in ("n", "c") or index < 0 or str(index) != k:
        return None
    return edge, kind, index


def too_fast(reported_median_us: float, bound: tuple[float, float]) -> bool:
    """Whether the reported median is implausibly far below the outside bound."""
    outside_us, floor_us = bound
    slack = max(20.0, 0.1 * floor_us)
    return reported_median_us < SLOW_FACTOR * outside_us - slack
