"""Rewards quiet and under load (issue 46): the quickstart's candidates (on cuda also the softmax example)
evaluated on a quiet machine, then under load, then quiet again, through one embedded evaluator (cached
baselines, as in training). The load: a busy process on every core (`--load cpu`, the CPU's default), or another
process running fp32 matmuls on the same GPU (`--load gpu`, cuda's default: a neighbour sharing the node). What should hold: every loaded evaluation
gives its quiet reward or ``infra_error`` naming the load ("machine loaded: ..."), never another reward. Also
the window check's cost (the baselines stage's duration when its cache hits, and a whole evaluation's wall time).

    .venv/bin/python benchmarks/harness/bench_load.py --out benchmarks/harness/results/load_cpu.json
    .venv/bin/python benchmarks/harness/bench_load.py --no-window-check --out benchmarks/harness/results/load_cpu_unchecked.json
    python3 benchmarks/harness/bench_load.py --device cuda --out load_cuda.json        (PHASES=load, gpu-session.sh)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CASES = {  # device: (problem under examples/problems, solution folder under examples/solutions)
    "cpu": (("diag_matmul", "diag_matmul/cpu_fast"), ("diag_matmul", "diag_matmul/cpu_slow")),
    "cuda": (("diag_matmul_cuda", "diag_matmul/cuda_fast"), ("diag_matmul_cuda", "diag_matmul/cuda_slow"),
             ("softmax_cuda", "softmax/cuda_fast")),
}
"""The quickstart's candidates and, on cuda, the other GPU example."""


def _files(solution: str) -> dict[str, str]:
    from cuda_agent.sandbox_pool.workspace import read_candidate_files

    return read_candidate_files(REPO / "examples" / "solutions" / solution)


async def _evaluate_all(evaluator, device: str, repeats: int, phase: str) -> list[dict]:
    from cuda_agent.sandbox_pool.harness import EvalJob, EvalOptions

    rows = []
    for repeat in range(repeats):
        for problem_name, name in CASES[device]:
            problem = (REPO / "examples" / "problems" / f"{problem_name}.py").read_text()
            t0 = time.monotonic()
            result = await evaluator.evaluate(EvalJob(problem_src=problem, files=_files(name), device=device,
                                                      options=EvalOptions(), task_id=name))
            stage = result.stages.get("baselines")
            check = result.timings.get("eager_window_check")
            rows.append({"phase": phase, "repeat": repeat, "candidate": name, "status": result.status.value,
                         "reward": result.reward, "runtime_us": result.runtime_us, "eager_us": result.eager_us,
                         "window_check_us": check.median_us if check else None,
                         "baselines_stage_s": stage.duration_s if stage else None,
                         "wall_s": time.monotonic() - t0, "error": result.error, "warnings": result.warnings})
            print(f"{phase:6} {name:22} {result.status.value:11} reward {result.reward} "
                  f"runtime {result.runtime_us or 0:.0f} us, check {check.median_us if check else 0:.0f} us "
                  f"{(result.error or '')[:90]}", file=sys.stderr, flush=True)
    return rows


GPU_NEIGHBOUR = """
import torch
a = torch.randn(8192, 8192, device="cuda")
b = torch.empty_like(a)
while True:
    torch.mm(a, a, out=b)
"""
"""Another process's fp32 matmuls on the same GPU, back to back (issue 46's neighbour: it made an honest
warp-reduction kernel 14x slower on an H100)."""


def _start_load(kind: str, workers: int) -> list[subprocess.Popen]:
    if kind == "gpu":
        return [subprocess.Popen([sys.executable, "-c", GPU_NEIGHBOUR])]
    # plain `python -c` loops: busy within milliseconds (a spawned multiprocessing child imports first)
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(workers)]


async def _run(device: str, repeats: int, workers: int, check: bool, load_kind: str) -> list[dict]:
    from cuda_agent.sandbox_pool.harness import Evaluator, EvaluatorConfig

    cache = tempfile.mkdtemp(prefix="cuda_agent_bench_load_")
    rows: list[dict] = []
    async with Evaluator(EvaluatorConfig(device=device, cache_dir=Path(cache), window_check=check)) as evaluator:
        rows += await _evaluate_all(evaluator, device, repeats, "quiet")
        load = _start_load(load_kind, workers)
        time.sleep(1.0 if load_kind == "cpu" else 8.0)  # the GPU neighbour imports torch and starts CUDA first
        try:
            rows += await _evaluate_all(evaluator, device, repeats, "loaded")
        finally:
            for process in load:
                process.kill()
                process.wait(10)
        rows += await _evaluate_all(evaluator, device, repeats, "quiet2")
    return rows


def summarise(rows: list[dict]) -> dict:
    quiet = {}
    for row in rows:
        if row["phase"] == "quiet" and row["status"] == "ok":
            quiet.setdefault(row["candidate"], set()).add(row["reward"])
    flips = [row for row in rows if row["phase"] != "quiet" and row["status"] == "ok"
             and row["reward"] not in quiet.get(row["candidate"], set())]
    checks = [row["baselines_stage_s"] for row in rows if row["phase"] == "quiet" and row["repeat"] > 0
              and row["baselines_stage_s"] is not None and row["status"] == "ok"]
    return {
        "quiet_rewards": {name: sorted(values) for name, values in quiet.items()},
        "by_phase": {phase: {status: sum(1 for r in rows if r["phase"] == phase and r["status"] == status)
                             for status in sorted({r["status"] for r in rows})}
                     for phase in ("quiet", "loaded", "quiet2")},
        "reward_flips": len(flips),
        "flipped": [{k: row[k] for k in ("phase", "candidate", "reward", "runtime_us", "window_check_us")}
                    for row in flips],
        "machine_loaded_errors": sum(1 for r in rows if (r["error"] or "").startswith("machine loaded")),
        "window_check_stage_s_median": statistics.median(checks) if checks else None,
        # what a caller waits for: a whole evaluation (compile cached, baselines cached), quiet, repeats after the first
        "quiet_evaluation_wall_s_median": statistics.median(
            [r["wall_s"] for r in rows if r["phase"] in ("quiet", "quiet2") and r["repeat"] > 0 and r["status"] == "ok"]
            or [float("nan")]),
    }


def _device_name(device: str) -> str:
    if device != "cuda":
        return "cpu"
    import torch

    return torch.cuda.get_device_name(0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--repeats", type=int, default=3, help="evaluations of each candidate per phase")
    parser.add_argument("--load", choices=["cpu", "gpu"], default=None,
                        help="the loaded phase's load: a busy process per --load-workers (cpu), or another process's "
                             "matmuls on the same GPU (gpu); default: cpu on the CPU, gpu on cuda")
    parser.add_argument("--load-workers", type=int, default=os.cpu_count() or 1,
                        help="busy processes of --load cpu (default: one per core)")
    parser.add_argument("--no-window-check", action="store_true",
                        help="the evaluator without the window check (the behaviour before it), for comparison")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    load = args.load or ("gpu" if args.device == "cuda" else "cpu")
    if load == "gpu" and args.device != "cuda":
        parser.error("--load gpu needs --device cuda")
    rows = asyncio.run(_run(args.device, args.repeats, args.load_workers, not args.no_window_check, load))
    report = {"command": " ".join(sys.argv), "device": args.device, "device_name": _device_name(args.device),
              "cores": os.cpu_count(), "load": load, "load_workers": args.load_workers if load == "cpu" else None,
              "window_check": not args.no_window_check,
              "summary": summarise(rows), "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(json.dumps(report["summary"], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
