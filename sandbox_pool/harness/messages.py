"""What a candidate child may send its parent, one model per event, validated where the message arrives.

The candidate's code runs in the child's process and can write to its pipe, so every message is the
candidate's to forge: a field of another type or shape, an unknown event, or bytes that are not a JSON
object is a protocol violation (`parse` returns what was wrong), never an exception in the parent,
which would be an infrastructure failure (no reward, the sample left out of training). Fields that
decide a verdict are strict (no coercion: `true` is not 1, `"5"` is not 5); fields that only feed a log
line are taken as they come and shown truncated. The order of events is `session.Protocol`'s to judge.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

MAX_PROBLEMS = 1000
"""Violations or type errors one message may list (an honest child's are a few)."""

Problems = Annotated[list[Annotated[str, Field(max_length=2000)]], Field(max_length=MAX_PROBLEMS)]
Microseconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class _Message(BaseModel):
    model_config = ConfigDict(strict=True, frozen=True, extra="ignore")  # extra: the child's own diagnostics


class Ready(_Message):
    event: Literal["ready"]
    isolation: Annotated[str, Field(max_length=2000)] = ""


class Calibrated(_Message):
    event: Literal["calibrated"]


class Drawn(_Message):
    """Digests of the trial inputs, drawn before any candidate code is loaded (compared by the session)."""

    event: Literal["drawn"]
    digests: list[Any]


class Loaded(_Message):
    event: Literal["loaded"]
    weights: Any = None  # a log line only


class Failed(_Message):
    """The child stopped: `stage` says where (setup and draw are the harness's or the problem's)."""

    event: Literal["error"]
    stage: Annotated[str, Field(max_length=100)] = ""
    kind: Annotated[str, Field(max_length=200)] = ""
    message: Annotated[str, Field(max_length=4000)] = ""
    traceback: Annotated[str, Field(max_length=8000)] = ""
    violations: Problems = []


class Trial(_Message):
    """One trial's outputs are in place: `layout` says where (outputs.read_outputs validates it)."""

    event: Literal["trial"]
    k: int
    violations: Problems = []
    type_errors: Problems = []
    input_mutated: bool = False
    layout: list[Any] = []


class Ahead(_Message):
    event: Literal["ahead"]


class Warm(_Message):
    event: Literal["warm"]


class Timed(_Message):
    """A timed call returned; the parent answers with the seed of the positions its print shows."""

    event: Literal["timed"]
    k: int


class Print(_Message):
    event: Literal["print"]
    k: int
    fingerprint: Any = None  # compare.decode_prints reads it; anything else fails the check
    signature: Any = None  # compare.signature of the outputs; anything but the reference's fails the check


class Timing(_Message):
    event: Literal["timing"]
    samples_us: list[Microseconds]
    violations: Problems = []
    type_errors: Problems = []
    # a log line only:
    host_floor_us: Any = None
    host_fallbacks: Any = 0
    l2_reset: Any = None
    wall_s: Any = None
    split_s: Any = None


class Done(_Message):
    event: Literal["done"]


ChildMessage = Ready | Calibrated | Drawn | Loaded | Failed | Trial | Ahead | Warm | Timed | Print | Timing | Done
_ADAPTER: TypeAdapter[ChildMessage] = TypeAdapter(Annotated[ChildMessage, Field(discriminator="event")])


def parse(raw: dict[str, Any]) -> ChildMessage | str:
    """The message as its model, or what was wrong with it (a violation)."""
    try:
        return _ADAPTER.validate_python(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        if first["type"] in ("union_tag_invalid", "union_tag_not_found", "model_type", "dict_type"):
            event = raw.get("event") if isinstance(raw, dict) else None
            return f"the evaluation protocol was not followed (a message of no known kind: {str(event)[:40]!r})"
        where = ".".join(str(p) for p in first["loc"][1:])
        return (f"the evaluation protocol was not followed (a malformed '{raw['event']}' message: "
                f"{where}: {first['msg']})")


def log_number(value: Any) -> float:
    """A number a child sent for a log line only; NaN when it is not one."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan
