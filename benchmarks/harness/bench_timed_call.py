"""Where the time of one timed call goes, step by step, outside any pool (issue 12).

A pipelined worker gives a candidate's timed calls the GPU alone; on the pool benchmark that window
is ~0.19 s for 30 calls of a kernel whose events measure ~0.07 ms each. This runs the child's own
steps of a timed call (the input draw of each distribution, the poison fill, the timed call with its
cache flush and lead spin, the output fingerprint) and the parent's per-call reference work (draw,
reference run, finiteness, fingerprint bounds) on one problem, each step followed by a device sync so
its time is its own, then the child's loop as it runs (no extra syncs).

  python3 -P benchmarks/harness/bench_timed_call.py --device cuda --calls 30
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any, Callable

import torch

from cuda_agent.sandbox_pool.harness.child.timing import Timer
from cuda_agent.sandbox_pool.harness.compare import fingerprint, fingerprint_bounds, flatten_outputs
from cuda_agent.sandbox_pool.harness.inputs import draw, nbytes
from cuda_agent.sandbox_pool.harness.problem import load_problem
from cuda_agent.sandbox_pool.harness.reference import _all_finite, timing_draws

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "problems"


def _timed(device: str, fn: Callable[[], Any]) -> tuple[Any, float]:
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return out, (time.perf_counter() - t0) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--problem", type=Path, default=None, help="default: diag_matmul for the device")
    parser.add_argument("--calls", type=int, default=30)
    args = parser.parse_args()
    device = "cuda:0" if args.device == "cuda" else "cpu"
    path = args.problem or EXAMPLES / ("diag_matmul_cuda.py" if args.device == "cuda" else "diag_matmul.py")
    problem = load_problem(path.read_text())
    model = problem.model_cls(*problem.get_init_inputs()).to(device)
    fast = (lambda a, b: b * a[:, None]) if path.stem.startswith("diag_matmul") else model  # a stand-in candidate
    planned = timing_draws(5, args.calls)
    timer = Timer(device)
    steps: dict[str, list[float]] = {}

    def note(name: str, ms: float) -> None:
        steps.setdefault(name, []).append(ms)

    for _ in range(2):  # first launches, allocator
        inputs = draw(problem.get_inputs, 1, "native", device)
        timer.time_call(fast, inputs)
        with torch.no_grad():
            model(*inputs)
    poison_bytes = nbytes(flatten_outputs(model(*inputs)))
    for k, plan in enumerate(planned):
        inputs, ms = _timed(args.device, lambda: draw(problem.get_inputs, plan.seed, plan.distribution, device))
        note(f"child: draw ({plan.distribution})", ms)
        note("child: draw (all)", ms)
        _, ms = _timed(args.device, lambda: torch.empty(poison_bytes // 4 + 1, device=device).fill_(float("nan")))
        note("child: poison", ms)
        (out, t_us, _), ms = _timed(args.device, lambda: timer.time_call(fast, inputs))
        note("child: timed call (flush, spin, call, sync)", ms)
        note("child: the call's own event time", t_us / 1e3)
        _, ms = _timed(args.device, lambda: fingerprint(flatten_outputs(out), 1000 + k))
        note("child: fingerprint", ms)
        with torch.no_grad():
            ref, ms = _timed(args.device, lambda: flatten_outputs(model(*inputs)))
        note("parent: reference run", ms)
        _, ms = _timed(args.device, lambda: _all_finite(ref))
        note("parent: finiteness", ms)
        _, ms = _timed(args.device, lambda: fingerprint_bounds(ref, 1000 + k, 1e-2, 1e-2))
        note("parent: fingerprint bounds", ms)
    t0 = time.perf_counter()
    for k, plan in enumerate(planned):  # the child's loop as it runs
        inputs = draw(problem.get_inputs, plan.seed, plan.distribution, device)
        torch.empty(poison_bytes // 4 + 1, device=device).fill_(float("nan"))
        out, _, _ = timer.time_call(fast, inputs)
        fingerprint(flatten_outputs(out), 1000 + k)
    loop_ms = (time.perf_counter() - t0) * 1e3 / len(planned)
    print(json.dumps({"problem": path.name, "device": args.device, "calls": len(planned),
                      "child_loop_ms_per_call": round(loop_ms, 3),
                      "median_ms": {name: round(statistics.median(v), 3) for name, v in steps.items()}}, indent=1))


if __name__ == "__main__":
    main()
