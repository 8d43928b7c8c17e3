"""The candidate's Python runs only on its turns: its import, its construction and each forward call.

model_new.py can leave code behind that the harness itself would run later: a torch function or
method replaced (`torch.equal = f`, `torch.Tensor.detach = f`), a finalizer, a property of an object
the harness touches. Such code runs outside the forward, so outside the compute guard and the timed
window: it can compute the outputs with torch after the call returned (a torch fallback rewarded
with a speed-up it does not have) or change what the harness measures. Which objects it may have
patched is not the question (a static rule can be walked around by aliasing); whether its code runs
when it is not its turn is, and that is watched: while it is not the candidate's turn, the start of
any Python function compiled from model_new.py is a violation. Its turns themselves run unwatched,
so the timed window costs nothing.

The watch is `sys.monitoring` where there is one (Python 3.12+: only the candidate's own code objects
raise an event, the harness's code runs at full speed), else `sys.setprofile` (3.11: every Python call
of the harness between turns pays one check). model_new.py cannot reach either (no `sys`).
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from typing import Any

CANDIDATE_FILE = "model_new.py"
"""The file name model_new.py is compiled under (child/main.py): what marks the candidate's code."""
_TOOL_NAME = "cuda_agent turns"


class Turns:
    """Records the candidate's code that starts outside its turns (`violations`)."""

    def __init__(self, filename: str = CANDIDATE_FILE) -> None:
        self.filename = filename
        self.violations: list[str] = []
        self._theirs = 0
        self._watching = False
        self._tool: int | None = None
        self._codes: list[types.CodeType] = []

    # -- the candidate's turns -----------------------------------------------------------------------
    def theirs(self) -> "Turns":
        """`with turns.theirs():` the candidate's code may run in here (nested turns are fine). A plain
        `__enter__`/`__exit__`, not a generator: it sits in every timed call's window."""
        return self

    def __enter__(self) -> None:
        self._theirs += 1
        if self._watching and self._tool is None and self._theirs == 1:
            sys.setprofile(None)

    def __exit__(self, *exc: object) -> None:
        self._theirs -= 1
        if self._tool is None and self._theirs == 0 and self._watching:
            sys.setprofile(self._profile)

    # -- watching ---------------------------------------------------------------------------------------
    def watch(self, module_code: types.CodeType, *, monitoring: bool = True) -> None:
        """Watch every function of the candidate's module (its compiled code, functions nested at any depth).
        `monitoring=False` takes the `sys.setprofile` way where `sys.monitoring` exists too (tests)."""
        self._codes = list(_code_objects(module_code))
        self._watching = True
        available = getattr(sys, "monitoring", None)
        if monitoring and available is not None and self._use_monitoring(available):
            return
        if self._theirs == 0:
            sys.setprofile(self._profile)

    def stop(self) -> None:
        """Stop watching (the child never does: it exits; in-process users and tests do)."""
        if self._tool is not None:
            monitoring = sys.monitoring  # type: ignore[attr-defined]
            for code in self._codes:
                monitoring.set_local_events(self._tool, code, 0)
            monitoring.register_callback(self._tool, monitoring.events.PY_START, None)
            monitoring.free_tool_id(self._tool)
            self._tool = None
        elif self._watching:
            sys.setprofile(None)
        self._watching = False

    def _use_monitoring(self, monitoring: Any) -> bool:
        for tool in (monitoring.PROFILER_ID, monitoring.OPTIMIZER_ID, 3, 4):
            if monitoring.get_tool(tool) is None:
                monitoring.use_tool_id(tool, _TOOL_NAME)
                break
        else:
            return False
        self._tool = tool
        monitoring.register_callback(tool, monitoring.events.PY_START, self._started)
        for code in self._codes:
            monitoring.set_local_events(tool, code, monitoring.events.PY_START)
        return True

    def _started(self, code: types.CodeType, offset: int) -> None:  # sys.monitoring's PY_START
        if not self._theirs:
            self._record(code)

    def _profile(self, frame: types.FrameType, event: str, arg: Any) -> None:  # sys.setprofile's
        if event == "call" and frame.f_code.co_filename == self.filename and not self._theirs:
            self._record(frame.f_code)

    def _record(self, code: types.CodeType) -> None:
        message = (f"code of model_new.py (`{code.co_name}`, line {code.co_firstlineno}) ran outside the "
                   "candidate's import, construction and forward calls, called by the harness (a torch "
                   "function or method replaced, a finalizer, ...): model_new.py may not change torch")
        if message not in self.violations:
            self.violations.append(message)


def _code_objects(code: types.CodeType) -> Iterator[types.CodeType]:
    """`code` and every code object nested in its constants (functions, lambdas, comprehensions, classes)."""
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)
