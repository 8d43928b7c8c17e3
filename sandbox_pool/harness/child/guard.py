"""The dispatcher-level guard: no torch compute operator runs inside the candidate's forward.

A `TorchDispatchMode` sees every aten operator dispatched while it is active, whether it
was called from Python or from C++ through the dispatcher; anything outside
`policy.ALLOWED_ATEN_OPS` is recorded (even if the candidate catches the exception) and
refused.
"""

from __future__ import annotations

from torch.utils._python_dispatch import TorchDispatchMode

from cuda_agent.sandbox_pool.harness.policy import ALLOWED_ATEN_OPS


class ComputeGuard(TorchDispatchMode):
    """Refuses torch compute operators; allows creation, views, copies and casts."""

    def __init__(self) -> None:
        super().__init__()
        self.violations: list[str] = []

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch wraps a mode's __torch_dispatch__ in dynamo's `disable` by default, whose first call
        # imports torch._dynamo: 1-5 s of every fresh evaluator's boot. No compiler can run under this
        # guard (model_new.py may not name torch.compile, _dynamo or _inductor), so there is nothing to skip.
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001 - torch signature
        packet = func.overloadpacket.__name__
        if func.namespace != "aten" or packet not in ALLOWED_ATEN_OPS:
            name = f"{func.namespace}.{packet}"
            message = f"torch operator {name} ran inside forward (compute must happen in your kernels)"
            if message not in self.violations:
                self.violations.append(message)
            raise RuntimeError(f"cuda_agent: {message}")
        return func(*args, **(kwargs or {}))
