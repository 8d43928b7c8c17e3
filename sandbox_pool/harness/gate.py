"""Who may use one device while several evaluations are in flight on it.

Only the timed calls (and the clock calibration before them) need the device to themselves;
everything else an evaluation does on it (the reference's outputs, the child's draws, loading,
correctness trials, warm-up) can share it with other evaluations. `DeviceGate` is a
writer-preferring readers-writer lock over one device, on the event loop:

- **shared**: any number of holders at once; a new shared holder waits while an exclusive
  holder runs or waits (so timed calls never wait behind a stream of shared steps);
- **exclusive**: one holder, nothing shared running: the timed window of one candidate;
- **solo**: exclusive, and no other evaluation child alive on the device at all (a child that
  is paused still holds device memory). Used to re-run, the way a one-at-a-time worker would,
  an evaluation whose failure could have come from a neighbour (out of memory, a slow-down past
  its time limit); the other live children are preempted (killed) and their evaluations start
  again afterwards.

On a GPU, a child is also admitted only while its memory fits (`DeviceGate.memory_budget`): the sum of the
estimated needs of the children alive on the device, its own included, must stay within the budget (the
device's memory less a headroom and less what anything but those children holds: `device_memory.budget_bytes`),
else it waits until a child ends or the budget grows; a child that would be alone on the device is never held
back (it runs, and an out-of-memory error there is its own). A child is started before its task's call size is
known (beside the reference's preparation); once it is, the child's need grows (`Lease.grow_need`) and the
child waits, before it draws anything large, until that fits.

Each evaluation holds a `Lease`, which records whether any other evaluation child was alive on
the device at the same time as its own (`overlapped`), how long it waited for the gate
(excluded from the candidate's time limit), and whether it was preempted. A shared holder that
keeps an exclusive request waiting longer than `preempt_after_s` (an endless kernel in a
correctness trial, say) is preempted too; its evaluation is re-run solo.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field


class Preempted(Exception):
    """The lease's child was stopped so that another evaluation could use the device (internal)."""

    def __init__(self, solo_next: bool) -> None:
        super().__init__("preempted")
        self.solo_next = solo_next


@dataclass
class GateStats:
    """Totals of one gate since it was made (seconds, counts)."""

    exclusive_s: float = 0.0
    exclusive_windows: int = 0
    solo_windows: int = 0
    preemptions: int = 0
    max_live_children: int = 0
    memory_waits: int = 0
    """Children held back because their estimated memory did not fit beside the live ones'."""
    memory_wait_s: float = 0.0
    log: list[tuple[str, float, float]] = field(default_factory=list)
    """(kind, start, end) of the last windows (monotonic seconds), for tests and benchmarks."""


LOG_WINDOWS = 4096
MEMORY_POLL_S = 0.5
"""A child held back for memory reads the budget again at least this often (the parent frees memory too)."""


class DeviceGate:
    """Writer-preferring shared / exclusive use of one device; see the module docstring."""

    def __init__(self, preempt_after_s: float = 2.0, memory_budget: Callable[[int], int] | None = None) -> None:
        """`memory_budget(children_bytes)`: the bytes this device's evaluation children may hold together, given
        that the live ones are estimated to hold `children_bytes` now; read when a child waits for admission
        (None: no admission by memory, as on a CPU)."""
        self.preempt_after_s = preempt_after_s
        self.memory_budget = memory_budget
        self._cond: asyncio.Condition | None = None
        self._shared: set[Lease] = set()
        self._exclusive: Lease | None = None
        self._writers = 0
        self._solo_waiting = 0
        self._solo: Lease | None = None
        self._live: set[Lease] = set()
        self._memory_waiting: dict[Lease, float] = {}  # leases held back for memory, since when
        self.stats = GateStats()

    @property
    def cond(self) -> asyncio.Condition:
        if self._cond is None:
            self._cond = asyncio.Condition()
        return self._cond

    def lease(self) -> "Lease":
        return Lease(self)

    @property
    def busy_exclusive(self) -> bool:
        return self._exclusive is not None

    @property
    def exclusive_wanted(self) -> bool:
        """An exclusive (or solo) request is waiting: shared holders between steps should let it go first."""
        return self._writers > 0

    def _log(self, kind: str, start: float) -> None:
        self.stats.log.append((kind, start, time.monotonic()))
        if len(self.stats.log) > LOG_WINDOWS:
            del self.stats.log[: LOG_WINDOWS // 2]

    # -- live children ------------------------------------------------------------------
    def _fits(self, lease: "Lease", need_bytes: int) -> bool:
        """Whether `lease`'s child may hold `need_bytes` now as far as memory goes: alone, within the budget,
        or the longest waiter among live children that all wait for memory (none of them would free any: a
        deadlock otherwise)."""
        others = [other for other in self._live if other is not lease]
        if self.memory_budget is None or not others or not need_bytes:
            return True
        held = sum(other.need_bytes for other in others)
        if held + need_bytes <= self.memory_budget(held):
            return True
        waiting = {live: since for live, since in self._memory_waiting.items() if live in self._live}
        return (lease in waiting and all(other in waiting for other in others)
                and min(waiting, key=waiting.__getitem__) is lease)

    def _enter(self, lease: "Lease") -> None:
        others = {other for other in self._live - {lease}
                  if other.companion is not lease and lease.companion is not other}  # one evaluation's two children
        if others:
            lease.overlapped = True
            for other in others:
                other.overlapped = True
        self._live.add(lease)
        self.stats.max_live_children = max(self.stats.max_live_children, len(self._live))

    async def _leave(self, lease: "Lease") -> None:
        self._live.discard(lease)
        async with self.cond:
            self.cond.notify_all()


class Lease:
    """One evaluation's use of the gate: at most one mode at a time (shared or exclusive)."""

    def __init__(self, gate: DeviceGate) -> None:
        self.gate = gate
        self.mode: str | None = None  # None, "shared", "exclusive"
        self.solo = False
        self.overlapped = False
        self.waited_s = 0.0
        self.preempt: bool | None = None  # None: not asked; else whether the next attempt must be solo
        self.on_child = False  # the shared hold is on behalf of a running child step (preemptible)
        self.need_bytes = 0  # the child's estimated device memory (admission, `start_child`)
        self.companion: Lease | None = None  # the lease of the evaluation this one's child serves (check_ahead.py)
        self._since = 0.0

    # -- the lease's child ----------------------------------------------------------------
    async def start_child(self, need_bytes: int = 0) -> None:
        """Before this lease's child is started: wait while a solo run is pending or running, and (on a GPU)
        while its estimated memory `need_bytes` does not fit beside the live children's (`DeviceGate._fits`)."""
        gate = self.gate
        if self.solo:
            self.need_bytes = need_bytes
        else:
            await self._admit(need_bytes, blocked=lambda: bool(gate._solo_waiting) or gate._solo is not None)
        gate._enter(self)

    async def grow_need(self, need_bytes: int) -> None:
        """The live child's estimated memory, now known to be `need_bytes` (its task's call size, learnt from
        the reference it was started beside, before the child draws anything large): it waits, holding the
        device in no mode, until that fits beside the other live children's, then holds it as before."""
        if need_bytes <= self.need_bytes or self.solo or self.gate._fits(self, need_bytes):
            self.need_bytes = max(self.need_bytes, need_bytes)
            return
        mode, on_child = self.mode, self.on_child
        await self.release()
        await self._admit(need_bytes)
        if mode == "shared":
            await self.shared(on_child=on_child)
        elif mode == "exclusive":
            await self.exclusive()

    async def _admit(self, need_bytes: int, blocked: Callable[[], bool] = lambda: False) -> None:
        """Wait while `blocked()` or while `need_bytes` does not fit (re-reading the budget when a child ends,
        or every MEMORY_POLL_S); then this lease's child counts `need_bytes`."""
        gate = self.gate
        t0 = time.monotonic()
        held = False
        try:
            async with gate.cond:
                while blocked() or not gate._fits(self, need_bytes):
                    self.check_preempted()
                    if blocked():
                        await gate.cond.wait()
                        continue
                    held = True
                    gate._memory_waiting.setdefault(self, t0)
                    try:
                        async with asyncio.timeout(MEMORY_POLL_S):
                            await gate.cond.wait()
                    except TimeoutError:
                        pass
        finally:
            gate._memory_waiting.pop(self, None)
        self.need_bytes = need_bytes
        waited = time.monotonic() - t0
        self.waited_s += waited
        if held:
            gate.stats.memory_waits += 1
            gate.stats.memory_wait_s += waited

    async def child_ended(self) -> None:
        await self.gate._leave(self)

    def check_preempted(self) -> None:
        """Raise `Preempted` if another evaluation asked this one to stop."""
        if self.preempt is not None:
            raise Preempted(self.preempt)

    # -- modes ----------------------------------------------------------------------------
    async def shared(self, *, on_child: bool = False) -> None:
        """Hold the device shared. Already shared: let a waiting exclusive request go first."""
        gate = self.gate
        if self.solo:
            return
        if self.mode == "shared" and not gate._writers:
            self.on_child = on_child
            return
        await self.release()
        t0 = time.monotonic()
        async with gate.cond:
            await gate.cond.wait_for(
                lambda: self.preempt is not None or (gate._exclusive is None and not gate._writers))
            self.waited_s += time.monotonic() - t0
            self.check_preempted()
            gate._shared.add(self)
            self.mode, self.on_child, self._since = "shared", on_child, time.monotonic()

    async def exclusive(self) -> None:
        """Hold the device alone (no shared holder, no other exclusive holder)."""
        if self.solo or self.mode == "exclusive":
            return
        await self.release()
        gate = self.gate
        t0 = time.monotonic()
        async with gate.cond:
            gate._writers += 1
            try:
                while not (gate._exclusive is None and not gate._shared):
                    self.check_preempted()
                    try:
                        async with asyncio.timeout(gate.preempt_after_s):
                            await gate.cond.wait()
                    except TimeoutError:
                        self._preempt_long_holders()
            finally:
                gate._writers -= 1
            gate._exclusive = self
        self.waited_s += time.monotonic() - t0
        self.mode, self._since = "exclusive", time.monotonic()

    async def acquire_solo(self) -> None:
        """Exclusive, with no other evaluation child alive on the device. The other live children are
        preempted (their evaluations start again later), except the one in its timed window, which ends first."""
        gate = self.gate
        if self.solo:  # already (a solo attempt that goes on to measure baselines)
            return
        await self.release()
        t0 = time.monotonic()
        gate._solo_waiting += 1
        try:
            async with gate.cond:
                await gate.cond.wait_for(lambda: gate._solo is None)
                gate._solo = self
                self._preempt_others()
            waited = time.monotonic() - t0
            await self.exclusive()  # counts its own wait
            t1 = time.monotonic()
            async with gate.cond:
                while gate._live - {self}:
                    self._preempt_others()
                    await gate.cond.wait()
            self.waited_s += waited + time.monotonic() - t1
        except BaseException:
            if gate._solo is self:
                gate._solo = None
            await self.release(force=True)
            raise
        finally:
            gate._solo_waiting -= 1
        self.solo = True
        gate.stats.solo_windows += 1

    def _preempt_others(self) -> None:
        gate = self.gate
        for other in gate._live - {self}:
            if other is not gate._exclusive and other.preempt is None:
                other.preempt = False  # not its fault: it starts again, sharing
                gate.stats.preemptions += 1
        gate.cond.notify_all()

    def _preempt_long_holders(self) -> None:
        """An exclusive request waited `preempt_after_s`: stop the child steps that hold it up."""
        for holder in self.gate._shared:
            held_s = time.monotonic() - holder._since
            if holder.on_child and holder.preempt is None and held_s >= self.gate.preempt_after_s:
                holder.preempt = True  # it held the device too long: its next attempt runs solo
                self.gate.stats.preemptions += 1

    async def release(self, force: bool = False) -> None:
        """Give the device back; a solo lease keeps it until `close` (or `force`)."""
        gate = self.gate
        if self.mode is None or (self.solo and not force):
            return
        if self.mode == "exclusive":
            gate._exclusive = None
            gate.stats.exclusive_s += time.monotonic() - self._since
            gate.stats.exclusive_windows += 1
            gate._log("solo" if self.solo else "exclusive", self._since)
        else:
            gate._shared.discard(self)
            gate._log("shared", self._since)
        self.mode, self.on_child = None, False
        async with gate.cond:
            gate.cond.notify_all()

    async def close(self) -> None:
        """Release everything (end of an attempt)."""
        gate = self.gate
        await self.release(force=True)
        if gate._solo is self:
            gate._solo = None
        self.solo = False
        await self.child_ended()


__all__ = ["DeviceGate", "GateStats", "Lease", "Preempted"]
