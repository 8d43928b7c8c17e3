"""The outside-the-process bound on timed calls (harness/clock.py)."""

from __future__ import annotations

import time

import pytest

from cuda_agent.sandbox_pool.harness import clock


def _stamp_calls(child_end, kind: str, seconds: list[float]) -> None:
    for k, s in enumerate(seconds):
        clock.mark(child_end, "s", kind, k)
        time.sleep(s)
        clock.mark(child_end, "e", kind, k)


def test_kernel_send_times_bound_the_calls_whatever_the_reader_does() -> None:
    ours, theirs = clock.pair()
    outside = clock.OutsideClock(ours)
    _stamp_calls(theirs, "n", [0.001] * clock.NULL_CALLS)
    _stamp_calls(theirs, "c", [0.021] * 5)
    time.sleep(0.2)  # a late reader: the stamps are the send times, not the read times
    outside.drain()
    bound = outside.bound()
    assert bound is not None
    calls_us, floor_us = bound
    assert 1_000 <= floor_us < 10_000
    assert 15_000 <= calls_us < 60_000
    assert clock.too_fast(1_000.0, bound)  # a timer that claims 1 ms for ~20 ms calls
    assert not clock.too_fast(20_000.0, bound)
    outside.close()
    theirs.close()


def test_an_honest_call_descheduled_around_its_stamps_is_not_flagged() -> None:
    """On a loaded host most calls' outside windows can be stretched by scheduling, never shrunk:
    one call seen at its true length is enough, while an under-reporting timer is caught whatever
    the others do."""
    ours, theirs = clock.pair()
    outside = clock.OutsideClock(ours)
    _stamp_calls(theirs, "n", [0.0005] * clock.NULL_CALLS)
    _stamp_calls(theirs, "c", [0.030, 0.004, 0.030, 0.030, 0.030])  # true ~4 ms; 4 of 5 descheduled
    outside.drain()
    bound = outside.bound()
    assert bound is not None
    assert not clock.too_fast(4_000.0, bound)  # the honest median report
    assert clock.too_fast(400.0, bound)  # a timer that claims a tenth
    outside.close()
    theirs.close()


def test_on_a_cpu_the_clocks_agreement_tells_a_bent_timer_from_a_descheduled_call() -> None:
    """Red team, 2026-12-04: a timer bent to report 0.55x stayed above the median bound (half) and turned reward
    1 into 3. On a CPU the two clocks bracket the same call: the best-agreeing long call agrees, however many
    others were descheduled between a stamp and the child's timer."""
    ours, theirs = clock.pair()
    outside = clock.OutsideClock(ours)
    _stamp_calls(theirs, "n", [0.0] * clock.NULL_CALLS)
    _stamp_calls(theirs, "c", [0.030, 0.004, 0.030, 0.012, 0.030])  # true ~4 ms; most calls descheduled outside
    outside.drain()
    honest = [4_000.0, 4_000.0, 4_000.0, 12_000.0, 4_000.0]
    assert outside.cpu_agreement(honest) >= clock.CPU_AGREEMENT
    bent = [0.55 * t for t in honest]
    assert not clock.too_fast(sorted(bent)[2], outside.bound())  # the median bound alone lets it through
    assert outside.cpu_agreement(bent) < clock.CPU_AGREEMENT
    assert outside.cpu_agreement([0.8 * t for t in honest]) < clock.CPU_AGREEMENT  # 20% off is caught too
    assert outside.cpu_agreement([1.0] * 5) < clock.CPU_AGREEMENT
    assert outside.cpu_agreement([]) is None  # no reported calls: nothing judged
    outside.close()
    theirs.close()


def test_a_short_kernels_few_stretched_calls_are_never_all_that_is_judged() -> None:
    """An honest kernel of a few us whose stamps were delayed on two calls (2 ms outside each): judging only the
    calls long enough outside would judge those two alone (the full suite's CPU pool, 2026-12-04: an honest kernel
    at 0.27). The median call (here under CPU_JUDGED_US) decides whether the agreement is judged at all."""
    ours, theirs = clock.pair()
    outside = clock.OutsideClock(ours)
    _stamp_calls(theirs, "n", [0.0] * clock.NULL_CALLS)
    _stamp_calls(theirs, "c", [0.002, 0.0, 0.0, 0.002, 0.0])
    outside.drain()
    assert outside.cpu_agreement([5.0] * 5) is None
    assert max(outside.durations_us("c")) > clock.CPU_JUDGED_US  # the two stretched calls alone would be judged
    outside.close()
    theirs.close()


def test_a_quiet_clock_needs_room_for_the_stamps_a_child_leaves_unread() -> None:
    """The parent reads a quiet clock at the child's messages only: the kernel must hold the null calls' stamps
    and one timed call's. Probed once, as sent by a child; cuda keeps reading stamps as they arrive."""
    assert clock.queue_capacity() >= 1
    assert clock.read_quietly("cpu") == (clock.queue_capacity() >= clock.QUIET_CAPACITY)
    assert not clock.read_quietly("cuda")
    assert clock.QUIET_CAPACITY > 2 * (clock.NULL_CALLS + 1)


def test_no_bound_without_null_calls() -> None:
    ours, theirs = clock.pair()
    outside = clock.OutsideClock(ours)
    _stamp_calls(theirs, "c", [0.001] * 3)
    outside.drain()
    assert outside.bound() is None  # the check is skipped, never guessed
    outside.close()
    theirs.close()


def test_honest_evaluations_report_the_outside_bound(evaluate_cpu) -> None:
    from test_hacks import HONEST

    result = evaluate_cpu(HONEST, profile=True, timed_calls=5)
    assert result.correct and "outside-process bound: " in result.stages["profile"].log
    assert "unavailable" not in result.stages["profile"].log


def test_outside_stamps_bracket_the_call_not_the_cache_flush() -> None:
    """On a CPU the flush takes milliseconds and varies with load: inside the stamps it would swamp
    the bound with noise (and, against a floor measured at a quieter moment, flag honest calls)."""
    from cuda_agent.sandbox_pool.harness.child.timing import Timer

    timer = Timer("cpu")
    order: list[str] = []
    real_flush = timer.flush
    timer.flush = lambda: (order.append("flush"), real_flush())[1]  # type: ignore[method-assign]
    out, t_us, host_us = timer.time_call(lambda x: order.append("call") or x, [7], edge=order.append)
    assert out == 7 and t_us == host_us > 0
    assert order == ["flush", "s", "call", "e"]


@pytest.mark.parametrize("returns", ["expanded", "transposed", "dense"])
def test_an_output_that_is_a_view_is_made_dense_inside_the_timed_window(returns: str) -> None:
    """Red team, 2026-12-05: outputs returned as views (a stride-0 `expand` of a few values, a transpose of a buffer
    written in the input's layout) left their dense copy to the harness, after the window (rewards 1 -> 3, 2 -> 3).
    The copy is now made between the call and the end stamp (`timing.materialise`), also inside a tuple; a dense
    output is not copied."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from cuda_agent.sandbox_pool.harness.child.timing import Timer

    order: list[str] = []

    class Log(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            order.append(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    timer = Timer("cpu")
    shape = {"expanded": lambda x: x.expand(4, 6), "transposed": lambda x: x.view(2, 3).t(), "dense": lambda x: x}
    with Log():
        out, _, _ = timer.time_call(lambda x: (shape[returns](x), 3), [torch.arange(6.0)], edge=order.append)
    window = order[order.index("s") + 1:order.index("e")]
    copied = [op for op in window if op in ("clone", "copy_", "contiguous")]
    assert bool(copied) == (returns != "dense"), window
    assert out[1] == 3


# -- stamps the harness did not send: the candidate's code can reach the socket too ---------------------------
def _honest_stamps(calls: int = 4):
    ours, theirs = clock.pair()
    outside = clock.OutsideClock(ours)
    _stamp_calls(theirs, "n", [0.0] * clock.NULL_CALLS)
    _stamp_calls(theirs, "c", [0.0] * calls)
    return outside, theirs


def test_an_honest_childs_stamps_show_no_tampering() -> None:
    outside, theirs = _honest_stamps()
    outside.drain()
    assert outside.tampering(4) is None and outside.bound() is not None


def test_without_the_null_calls_stamps_the_clock_is_unavailable_not_tampered() -> None:
    ours, theirs = clock.pair()  # e.g. a kernel without send timestamps: nothing arrives before candidate code
    outside = clock.OutsideClock(ours)
    outside.drain()
    assert outside.tampering(4) is None and outside.bound() is None


def _forged(action) -> str | None:  # noqa: ANN001
    outside, theirs = _honest_stamps(calls=3)
    action(theirs)
    outside.drain()
    return outside.tampering(4)  # the harness planned 4 calls


def test_a_closed_or_shut_socket_is_tampering() -> None:
    # the fourth call's stamps never arrive: before 2026-12-04 that only switched the bound off
    assert "stamp e:c:3 missing" in _forged(lambda sock: sock.close())
    assert "missing" in _forged(lambda sock: sock.shutdown(2))


def test_a_stamp_sent_twice_or_out_of_the_protocol_is_tampering() -> None:
    # a call's two stamps sent back to back: its outside window ~0, which made the bound ~0 (no check)
    twice = _forged(lambda sock: (clock.mark(sock, "s", "c", 0), clock.mark(sock, "e", "c", 0),
                                  clock.mark(sock, "s", "c", 3), clock.mark(sock, "e", "c", 3)))
    assert "s:c:0 sent twice" in twice
    assert "malformed" in _forged(lambda sock: (sock.send(b"s:c:03"), clock.mark(sock, "s", "c", 3),
                                                  clock.mark(sock, "e", "c", 3)))
    assert "not one of the calls'" in _forged(lambda sock: [clock.mark(sock, e, "c", k) for k in (3, 99) for e in "se"])
    assert "ended before it started" in _forged(lambda sock: (clock.mark(sock, "e", "c", 3), time.sleep(0.001),
                                                              clock.mark(sock, "s", "c", 3)))
