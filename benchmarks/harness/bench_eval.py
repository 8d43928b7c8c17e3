"""Per-evaluation wall time of the harness: cold compile, cached compile, verify, profile.

Usage: python benchmarks/harness/bench_eval.py --device cuda [--out results.json]
Runs the example problem's fast solution with a fresh compile cache (cold), then again
(cache hit), with warm workers and cached baselines, and prints one JSON line per run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


async def main(device: str, repeats: int) -> list[dict]:
    os.environ["CUDA_AGENT_CACHE"] = tempfile.mkdtemp(prefix="bench_cache_")
    from cuda_agent.sandbox_pool.harness import EvalJob, Evaluator, EvaluatorConfig
    from cuda_agent.sandbox_pool.workspace import read_candidate_files

    problem = (ROOT / f"examples/problems/{'diag_matmul_cuda' if device == 'cuda' else 'diag_matmul'}.py").read_text()
    folder = ROOT / f"examples/solutions/diag_matmul/{device}_fast"
    files = read_candidate_files(folder)
    rows = []
    async with Evaluator(EvaluatorConfig(device=device)) as ev:
        # Warm-up: builds the fixed binding.cpp and precompiled headers, measures baselines.
        t0 = time.monotonic()
        first = await ev.evaluate(EvalJob(problem_src=problem, files=files, device=device))
        rows.append({"run": "first_ever (pch + baselines)", "wall_s": time.monotonic() - t0, "status": first.status.value})
        for i in range(repeats):
            variant = dict(files)
            # A new comment changes the kernel's content hash: a cold compile of that unit.
            for key in [k for k in variant if k.startswith("kernels/")]:
                variant[key] = variant[key] + f"\n// bench variant {i} {time.time()}\n"  # every unit rebuilt
            for label, job_files in (("cold_compile", variant), ("cached_compile", variant)):
                t0 = time.monotonic()
                r = await ev.evaluate(EvalJob(problem_src=problem, files=job_files, device=device))
                stages = {k: round(v.duration_s or 0.0, 3) for k, v in r.stages.items()}
                rows.append({"run": label, "wall_s": round(time.monotonic() - t0, 3), "stages": stages,
                             "status": r.status.value, "runtime_us": r.runtime_us, "reward": r.reward})
    for label in ("cold_compile", "cached_compile"):
        walls = [r["wall_s"] for r in rows if r.get("run") == label]
        rows.append({"summary": label, "median_wall_s": statistics.median(walls), "n": len(walls)})
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    results = asyncio.run(main(args.device, args.repeats))
    for row in results:
        print(json.dumps(row))
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))
