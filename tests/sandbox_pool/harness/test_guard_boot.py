"""The candidate's dispatch guard must not pull torch's compiler stack into the evaluator's boot.

torch wraps every dispatch mode's handler in dynamo's `disable`, whose first call imports
torch._dynamo (1-5 s); the forkserver preloaded it for that reason alone. The guard opts out.
"""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
import torch
from cuda_agent.sandbox_pool.harness.child.guard import ComputeGuard

x = torch.ones(4)
with ComputeGuard() as guard:
    y = torch.empty_like(x)
    y.copy_(x)
    y.view(2, 2)
    try:
        torch.add(x, x)
    except RuntimeError:
        pass
print(len(guard.violations), "torch._dynamo" in sys.modules)
"""


def test_guard_refuses_compute_without_importing_dynamo() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=True)
    violations, dynamo_imported = done.stdout.split()
    assert violations == "1"  # the add was refused and recorded; creation, copy and view were not
    assert dynamo_imported == "False"
