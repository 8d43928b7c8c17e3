"""Child process of the ``reference_profile`` request: profile a reference read from stdin.

Usage (the pool runs it): ``python -m cuda_agent.sandbox_pool.pool.reference_profile_child cpu|cuda``
with model.py's source on stdin; prints torch.profiler's top operators by self time.
Exit 1 with a one-line reason when the reference cannot be run.
"""

from __future__ import annotations

import sys

TOP = 8
CALLS = 3


def main(device: str) -> int:
    import torch

    from cuda_agent.sandbox_pool.harness.problem import load_problem

    try:
        problem = load_problem(sys.stdin.read())
        torch.manual_seed(0)
        model = problem.model_cls(*problem.get_init_inputs()).to(device)
        inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in problem.get_inputs()]
        activities = [torch.profiler.ProfilerActivity.CPU]
        if device == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        with torch.no_grad():
            model(*inputs)
            with torch.profiler.profile(activities=activities) as prof:
                for _ in range(CALLS):
                    model(*inputs)
                if device == "cuda":
                    torch.cuda.synchronize()
    except Exception as exc:  # the reference is the task's: report, the pool stays up
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    sort = "self_cuda_time_total" if device == "cuda" else "self_cpu_time_total"
    print(f"[reference profile] top operators / kernels ({CALLS} calls, {device}):")
    print(prof.key_averages().table(sort_by=sort, row_limit=TOP, max_name_column_width=60))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "cpu"))
