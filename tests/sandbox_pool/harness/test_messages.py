"""A candidate child's messages are validated against their event's model where they arrive (messages.py):
what an honest child sends parses; a field of another type or shape, an unknown event or no event is a
violation, never an exception in the parent. Every honest evaluation of the suite goes through `parse` too."""

from __future__ import annotations

import math

import pytest

from cuda_agent.sandbox_pool.harness.messages import Failed, Timing, Trial, log_number, parse

HONEST = [
    {"event": "ready", "isolation": "namespaces, seccomp", "pid": 4242},
    {"event": "calibrated"},
    {"event": "drawn", "digests": [["a1b2", [4, 8]], ["c3d4", [4, 8]]]},
    {"event": "loaded", "weights": ["scale", "bias"]},
    {"event": "trial", "k": 0, "type_errors": [], "input_mutated": False, "violations": [],
     "layout": [{"dtype": "float32", "shape": [4, 8], "offset": 0, "nbytes": 128, "shared": True}]},
    {"event": "ahead", "calls": 8},
    {"event": "warm", "calls": 3},
    {"event": "timed", "k": 0},
    {"event": "print", "k": 0, "fingerprint": "AAAA"},
    {"event": "timing", "samples_us": [12.5, 13, 12.25], "host_us": [20.0, 21.0, 20.5], "wall_s": 0.01,
     "split_s": {"draws": 0.1, "calls": 0.2, "prints": 0.01, "handshakes": 0.02}, "type_errors": [],
     "host_floor_us": 3.5, "l2_reset": True, "host_fallbacks": 0, "violations": []},
    {"event": "error", "stage": "trial", "kind": "RuntimeError", "message": "boom", "traceback": "...",
     "violations": ["forward called aten::add"]},
    {"event": "done"},
]


@pytest.mark.parametrize("raw", HONEST, ids=[m["event"] for m in HONEST])
def test_what_the_child_sends_parses(raw: dict) -> None:
    message = parse(raw)
    assert not isinstance(message, str), message
    assert message.event == raw["event"]


def test_fields_keep_their_values() -> None:
    trial = parse(HONEST[4])
    assert isinstance(trial, Trial) and trial.k == 0 and trial.layout[0]["shared"] is True
    timing = parse(HONEST[9])
    assert isinstance(timing, Timing) and timing.samples_us == [12.5, 13.0, 12.25]
    error = parse(HONEST[10])
    assert isinstance(error, Failed) and error.violations == ["forward called aten::add"]


@pytest.mark.parametrize(("raw", "says"), [
    ({}, "no known kind"),  # what `ChildProcess.receive` returns for bytes that are not a JSON object
    ({"event": "hello"}, "no known kind"),
    ({"event": 7}, "no known kind"),
    ({"event": "trial", "k": True}, "'trial' message: k"),  # True == 1 in Python
    ({"event": "trial", "k": "0"}, "'trial' message: k"),
    ({"event": "trial", "k": 1.0}, "'trial' message: k"),
    ({"event": "trial"}, "'trial' message: k"),
    ({"event": "trial", "k": 0, "violations": 5}, "violations"),
    ({"event": "trial", "k": 0, "violations": [5]}, "violations"),
    ({"event": "trial", "k": 0, "violations": ["x"] * 1001}, "violations"),
    ({"event": "trial", "k": 0, "input_mutated": 0}, "input_mutated"),
    ({"event": "trial", "k": 0, "layout": {"shared": True}}, "layout"),
    ({"event": "timed", "k": None}, "'timed' message: k"),
    ({"event": "print", "k": "3"}, "'print' message: k"),
    ({"event": "timing", "samples_us": [1.0, math.nan]}, "samples_us"),
    ({"event": "timing", "samples_us": [1.0, -2.0]}, "samples_us"),
    ({"event": "timing", "samples_us": [1.0, math.inf]}, "samples_us"),
    ({"event": "timing", "samples_us": ["1.0"]}, "samples_us"),
    ({"event": "timing", "samples_us": 3.0}, "samples_us"),
    ({"event": "timing"}, "samples_us"),
    ({"event": "error", "stage": 3}, "stage"),
    ({"event": "drawn", "digests": "abc"}, "digests"),
])
def test_a_malformed_message_is_a_violation(raw: dict, says: str) -> None:
    problem = parse(raw)
    assert isinstance(problem, str) and problem.startswith("the evaluation protocol was not followed"), problem
    assert says in problem, problem


def test_log_only_fields_are_shown_as_they_come() -> None:
    timing = parse({"event": "timing", "samples_us": [1.0], "host_floor_us": "fast", "wall_s": [1], "split_s": 5})
    assert isinstance(timing, Timing)
    assert math.isnan(log_number(timing.host_floor_us)) and math.isnan(log_number(timing.wall_s))
    assert math.isnan(log_number(True)) and log_number(2) == 2.0
