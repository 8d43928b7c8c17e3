"""Per-evaluation wall time of the harness: cold compile, cached compile, verify, profile.

Usage: python benchmarks/harness/bench_eval.py --device cuda [--out results.json]
Three typical tasks on CUDA (diag_matmul: memory-bound; a cuBLAS GEMM; a row softmax), one on
CPU. Each task's fast solution is evaluated with a fresh compile of every kernel unit (cold),
then again (cache hit), with warm workers and cached baselines; one JSON line per run.
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


CUDA_TASKS = {  # three typical tasks: memory-bound, library GEMM (cuBLAS), reduction
    "diag_matmul": ("examples/problems/diag_matmul_cuda.py", "examples/solutions/diag_matmul/cuda_fast"),
    "matmul_cublas": ("tests/sandbox_pool/harness/candidates/cuda/problem_matmul.py", None),
    "softmax": ("examples/problems/softmax_cuda.py", "examples/solutions/softmax/cuda_fast"),
}
CPU_TASKS = {"diag_matmul": ("examples/problems/diag_matmul.py", "examples/solutions/diag_matmul/cpu_fast")}


def _files(task: str, solution: str | None) -> dict[str, str]:
    from cuda_agent.sandbox_pool.workspace import read_candidate_files

    if solution is not None:
        return read_candidate_files(ROOT / solution)
    gemm = ROOT / "tests/sandbox_pool/harness/candidates/cuda"
    return {"model_new.py": (gemm / "model_new_gemm.py").read_text(),
            "kernels/gemm_binding.cpp": (gemm / "gemm_binding.cpp").read_text()}


async def main(device: str, repeats: int) -> list[dict]:
    os.environ["CUDA_AGENT_CACHE"] = tempfile.mkdtemp(prefix="bench_cache_")
    from cuda_agent.sandbox_pool.harness import EvalJob, Evaluator, EvaluatorConfig
    from cuda_agent.sandbox_pool.harness.compiler import build_extension

    rows = []
    async with Evaluator(EvaluatorConfig(device=device)) as ev:
        for task, (problem_path, solution) in (CUDA_TASKS if device == "cuda" else CPU_TASKS).items():
            problem = (ROOT / problem_path).read_text()
            files = _files(task, solution)
            # Warm-up: builds the fixed binding.cpp and precompiled headers, measures baselines.
            t0 = time.monotonic()
            first = await ev.evaluate(EvalJob(problem_src=problem, files=files, device=device))
            rows.append({"task": task, "run": "first_ever (pch + baselines)", "wall_s": round(time.monotonic() - t0, 3),
                         "status": first.status.value, "error": first.error})
            for i in range(repeats):
                variant = dict(files)
                # A new comment changes the kernel's content hash: a cold compile of that unit.
                for key in [k for k in variant if k.startswith("kernels/")]:
                    variant[key] = variant[key] + f"\n// bench variant {i} {time.time()}\n"  # every unit rebuilt
                for label, job_files in (("cold_compile", variant), ("cached_compile", variant)):
                    t0 = time.monotonic()
                    r = await ev.evaluate(EvalJob(problem_src=problem, files=job_files, device=device))
                    wall = round(time.monotonic() - t0, 3)
                    # Which units needed the real headers: a cache hit on the evaluation's own build.
                    kernels = {k: v for k, v in job_files.items() if k.startswith("kernels/")}
                    glue_probe = await build_extension(kernels, device)
                    stages = {k: round(v.duration_s or 0.0, 3) for k, v in r.stages.items()}
                    rows.append({"task": task, "run": label, "wall_s": wall,
                                 "stages": stages, "status": r.status.value, "runtime_us": r.runtime_us,
                                 "eager_us": r.eager_us, "torch_compile_us": r.torch_compile_us, "reward": r.reward,
                                 "verify_phases": (r.stages["verify"].log.splitlines() or [""])[-1]
                                 if "verify" in r.stages else None,
                                 "profile": r.stages["profile"].log if "profile" in r.stages else None,
                                 "real_header_units": glue_probe.real_header_units})
    for label in ("cold_compile", "cached_compile"):
        walls = [r["wall_s"] for r in rows if r.get("run") == label]
        compiles = [r["stages"].get("compile", 0.0) for r in rows if r.get("run") == label]
        rows.append({"summary": label, "median_wall_s": statistics.median(walls),
                     "median_compile_s": statistics.median(compiles),
                     "median_run_s": statistics.median(w - c for w, c in zip(walls, compiles)), "n": len(walls)})
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
