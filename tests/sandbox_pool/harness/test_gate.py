"""The device gate (harness/gate.py): shared steps of several evaluations, timed calls alone."""

from __future__ import annotations

import asyncio

import pytest

from cuda_agent.sandbox_pool.harness import device_memory
from cuda_agent.sandbox_pool.harness.gate import DeviceGate, Preempted


def _overlaps(log: list[tuple[str, float, float]]) -> list[tuple]:
    """Pairs of windows that overlap although one of them is exclusive (or solo)."""
    bad = []
    for i, (kind_a, a0, a1) in enumerate(log):
        for kind_b, b0, b1 in log[i + 1:]:
            if "shared" in (kind_a, kind_b) and kind_a == kind_b:
                continue
            if a0 < b1 and b0 < a1:
                bad.append(((kind_a, a0, a1), (kind_b, b0, b1)))
    return bad


async def test_exclusive_waits_for_shared_and_blocks_new_shared() -> None:
    gate = DeviceGate()
    a, b, c = gate.lease(), gate.lease(), gate.lease()
    await a.shared()
    await b.shared()
    writer = asyncio.create_task(c.exclusive())
    await asyncio.sleep(0.02)
    assert not writer.done(), "an exclusive holder must wait for the shared holders"
    late = asyncio.create_task(a.shared())  # already shared, but a writer waits: a lets it go first
    await asyncio.sleep(0.02)
    assert not late.done()
    await b.release()
    await asyncio.wait_for(writer, 1)
    assert gate.busy_exclusive and not late.done()
    await c.release()
    await asyncio.wait_for(late, 1)
    await a.close()
    await b.close()
    await c.close()
    assert not _overlaps(gate.stats.log)


async def test_random_mix_never_overlaps_an_exclusive_window() -> None:
    gate = DeviceGate()

    async def job(i: int) -> None:
        lease = gate.lease()
        await lease.start_child()
        try:
            for step in range(4):
                await lease.shared(on_child=True)
                await asyncio.sleep(0.001 * ((i + step) % 3))
            await lease.exclusive()
            await asyncio.sleep(0.002)
        finally:
            await lease.close()

    await asyncio.gather(*(job(i) for i in range(12)))
    assert gate.stats.exclusive_windows == 12
    assert gate.stats.max_live_children > 1
    assert not _overlaps(gate.stats.log)


async def test_a_long_shared_step_is_preempted_and_must_run_solo() -> None:
    gate = DeviceGate(preempt_after_s=0.05)
    stuck, timer = gate.lease(), gate.lease()
    await stuck.start_child()
    await stuck.shared(on_child=True)  # an endless kernel in a trial
    writer = asyncio.create_task(timer.exclusive())
    await asyncio.sleep(0.2)
    with pytest.raises(Preempted) as info:
        stuck.check_preempted()
    assert info.value.solo_next
    await stuck.close()  # the session kills its child and gives the lease back
    await asyncio.wait_for(writer, 1)
    await timer.close()


async def test_solo_preempts_live_children_and_waits_until_they_are_gone() -> None:
    gate = DeviceGate()
    paused, solo = gate.lease(), gate.lease()
    await paused.start_child()
    await paused.shared(on_child=True)
    assert not paused.overlapped
    task = asyncio.create_task(solo.acquire_solo())
    await asyncio.sleep(0.05)
    with pytest.raises(Preempted) as info:
        paused.check_preempted()
    assert not info.value.solo_next, "a neighbour stopped for a solo run starts again sharing"
    assert not task.done()
    newcomer = gate.lease()
    start = asyncio.create_task(newcomer.start_child())
    await paused.close()
    await asyncio.wait_for(task, 1)
    await asyncio.sleep(0.02)
    assert not start.done(), "no child starts while a solo run holds the device"
    await solo.start_child()
    assert not solo.overlapped
    await solo.close()
    await asyncio.wait_for(start, 1)
    await newcomer.close()


async def test_overlap_is_recorded_for_children_alive_together() -> None:
    gate = DeviceGate()
    a, b = gate.lease(), gate.lease()
    await a.start_child()
    await b.start_child()
    assert a.overlapped and b.overlapped
    await a.close()
    c = gate.lease()
    await b.close()
    await c.start_child()
    assert not c.overlapped
    await c.close()


async def test_a_solo_lease_keeps_the_device_until_closed_and_may_ask_again() -> None:
    gate = DeviceGate()
    solo, other = gate.lease(), gate.lease()
    await solo.acquire_solo()
    await solo.release()  # the end of its verification: still solo (baselines may follow)
    await asyncio.wait_for(solo.acquire_solo(), 1)  # a baseline measurement of a solo attempt: no self-deadlock
    waiting = asyncio.create_task(other.shared())
    await asyncio.sleep(0.02)
    assert not waiting.done()
    await solo.close()
    await asyncio.wait_for(waiting, 1)
    await other.close()
    assert not _overlaps(gate.stats.log)


async def test_a_child_waits_while_its_memory_does_not_fit_beside_the_live_ones() -> None:
    """Issue 36: on a GPU the children alive on the device may hold the budget together, not more."""
    gate = DeviceGate(memory_budget=lambda held: 10)
    first, second, small = gate.lease(), gate.lease(), gate.lease()
    await first.start_child(6)
    waiting = asyncio.create_task(second.start_child(6))
    await asyncio.sleep(0.05)
    assert not waiting.done(), "6 + 6 bytes do not fit a budget of 10"
    await asyncio.wait_for(small.start_child(4), 1)  # 6 + 4 fit: admitted at once
    await small.child_ended()
    await first.child_ended()
    await asyncio.wait_for(waiting, 1)
    assert gate.stats.memory_waits == 1 and gate.stats.memory_wait_s > 0
    await second.child_ended()


async def test_a_child_alone_is_never_held_back_and_the_budget_is_read_again() -> None:
    budget = {"bytes": 5}
    gate = DeviceGate(memory_budget=lambda held: budget["bytes"])
    first, second = gate.lease(), gate.lease()
    await asyncio.wait_for(first.start_child(8), 1)  # more than the budget, but alone: it runs
    waiting = asyncio.create_task(second.start_child(2))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    budget["bytes"] = 12  # the parent freed memory; no child ended
    await asyncio.wait_for(waiting, 2)
    await first.child_ended()
    await second.child_ended()


async def test_without_a_memory_budget_children_are_not_counted() -> None:
    gate = DeviceGate()  # a CPU's gate
    leases = [gate.lease() for _ in range(3)]
    for lease in leases:
        await asyncio.wait_for(lease.start_child(1 << 40), 1)
    assert gate.stats.memory_waits == 0
    for lease in leases:
        await lease.child_ended()


async def test_a_live_child_whose_need_grows_waits_holding_nothing_and_then_shares_again() -> None:
    """Issue 36: a child starts before its task's call size is known; once known, its need grows, and it waits
    (not holding the device shared, so timed windows go on) until the larger need fits."""
    gate = DeviceGate(memory_budget=lambda held: 10)
    big, growing, timed = gate.lease(), gate.lease(), gate.lease()
    await big.start_child(6)
    await growing.start_child(2)  # the call size not known yet: 6 + 2 fit
    await growing.shared(on_child=True)
    grown = asyncio.create_task(growing.grow_need(8))
    await asyncio.sleep(0.05)
    assert not grown.done(), "6 + 8 do not fit a budget of 10"
    await asyncio.wait_for(timed.exclusive(), 1)  # the waiting child holds nothing: a timed window may run
    await timed.close()
    await big.child_ended()
    await asyncio.wait_for(grown, 2)
    assert growing.mode == "shared" and growing.need_bytes == 8 and gate.stats.memory_waits == 1
    await growing.close()


async def test_a_need_that_fits_or_shrinks_never_waits() -> None:
    gate = DeviceGate(memory_budget=lambda held: 10)
    first, second = gate.lease(), gate.lease()
    await first.start_child(4)
    await second.start_child(2)
    await asyncio.wait_for(second.grow_need(6), 1)  # 4 + 6 fit
    await asyncio.wait_for(second.grow_need(1), 1)  # never below what it was admitted with
    assert second.need_bytes == 6 and gate.stats.memory_waits == 0
    await first.child_ended()
    await second.child_ended()


async def test_live_children_all_waiting_for_memory_let_the_longest_waiter_go() -> None:
    """None of them would end or free anything: without a tie-break they would wait for each other forever."""
    gate = DeviceGate(memory_budget=lambda held: 10)
    a, b = gate.lease(), gate.lease()
    await a.start_child(2)
    await b.start_child(2)
    first = asyncio.create_task(a.grow_need(9))
    await asyncio.sleep(0.02)
    second = asyncio.create_task(b.grow_need(9))
    await asyncio.wait_for(first, 2)  # the longest waiter goes although 2 + 9 > 10
    await asyncio.sleep(0.05)
    assert not second.done(), "the other still waits: 9 + 9 do not fit"
    await a.child_ended()
    await asyncio.wait_for(second, 2)
    await b.child_ended()


async def test_a_waiting_child_is_preempted_by_a_solo_run() -> None:
    gate = DeviceGate(memory_budget=lambda held: 10)
    big, growing, solo = gate.lease(), gate.lease(), gate.lease()
    await big.start_child(8)
    await growing.start_child(1)
    grown = asyncio.create_task(growing.grow_need(5))
    await asyncio.sleep(0.05)
    solo_task = asyncio.create_task(solo.acquire_solo())
    with pytest.raises(Preempted):
        await asyncio.wait_for(grown, 2)
    await growing.close()
    await big.close()
    await asyncio.wait_for(solo_task, 2)
    await solo.close()


async def test_the_budget_is_told_what_the_live_children_are_estimated_to_hold() -> None:
    seen: list[int] = []
    gate = DeviceGate(memory_budget=lambda held: seen.append(held) or 100)
    a, b, c = gate.lease(), gate.lease(), gate.lease()
    await a.start_child(3)
    await b.start_child(4)
    await c.start_child(5)
    assert seen == [3, 7]  # a alone is not asked about
    for lease in (a, b, c):
        await lease.child_ended()


GIB = 1 << 30


@pytest.mark.parametrize(("used", "own", "children", "expected"), [
    (20 * GIB, 10 * GIB, 10 * GIB, 95 * GIB - 10 * GIB - device_memory.CONTEXT_BYTES),  # children as estimated
    (50 * GIB, 10 * GIB, 10 * GIB, 95 * GIB - 40 * GIB),  # 30 GiB more in use: a neighbour, or children above estimates
    (5 * GIB, 10 * GIB, 0, 95 * GIB - 10 * GIB - device_memory.CONTEXT_BYTES),  # never less than this process holds
])
def test_the_budget_leaves_room_for_everything_but_the_live_children(used: int, own: int, children: int,
                                                                     expected: int) -> None:
    assert device_memory.budget_bytes(100 * GIB, used=used, own=own, children=children) == expected
