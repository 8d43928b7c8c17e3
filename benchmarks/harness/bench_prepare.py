"""The parent's reference preparation for one evaluation (`harness.reference.prepare`: trial draws and
reference outputs, influence twins, the timed calls' fingerprints), timed alone: on a busy pool it runs
in the worker's process, once per evaluation, so its cost bounds the pool's evaluations per minute.

  python3 -P benchmarks/harness/bench_prepare.py --device cuda --repeats 20
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from cuda_agent.sandbox_pool.harness.models import DEFAULT_TIMED_CALLS, EvalOptions
from cuda_agent.sandbox_pool.harness.problem import load_problem
from cuda_agent.sandbox_pool.harness.reference import prepare

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "problems"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--problem", type=Path, default=None, help="default: diag_matmul for the device")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    path = args.problem or EXAMPLES / ("diag_matmul_cuda.py" if args.device == "cuda" else "diag_matmul.py")
    problem = load_problem(path.read_text())
    options = EvalOptions()

    def once() -> float:
        with tempfile.TemporaryDirectory(prefix="bench_prepare_") as work:  # the init file, as a worker writes it
            t0 = time.perf_counter()
            prepared = prepare(problem, work, args.device, seed=5, trials=options.correctness_trials,
                               timed_calls=DEFAULT_TIMED_CALLS, atol=1e-2, rtol=1e-2, print_seed=9,
                               influence_checks=options.influence_checks,
                               checked_calls=options.checked_timed_calls)
            if args.device == "cuda":
                import torch
                torch.cuda.synchronize()
            elapsed = time.perf_counter() - t0
        assert prepared.trial_outputs
        return elapsed

    once()  # first call: lazy imports, allocator, kernels' first launch
    times = [once() for _ in range(args.repeats)]
    print(json.dumps({"problem": path.name, "device": args.device, "repeats": args.repeats,
                      "median_s": round(statistics.median(times), 4), "min_s": round(min(times), 4)}))


if __name__ == "__main__":
    main()
