"""Throughput of the evaluation pool with N concurrent submitters.

Usage (the issue's targets: 16 submitters on one H200, then on a 2-GPU node):

    python benchmarks/pool/bench_pool.py --device cuda --devices 0 --submitters 16 --jobs 160 --out 1gpu.json
    python benchmarks/pool/bench_pool.py --device cuda --devices 0,1 --submitters 16 --jobs 320 --out 2gpu.json
    python benchmarks/pool/bench_pool.py --address $CUDA_AGENT_POOL --device cuda ...   # a served / Ray pool
    python benchmarks/pool/bench_pool.py --device cpu --submitters 4 --jobs 12            # smoke run on a laptop

Each job is the example diag_matmul solution (`--solution`, default <device>_fast) with its own
model_new.py comment, so every job has its own candidate hash; `--fresh-kernels` also changes
the kernel sources so every job compiles (compile/evaluation overlap). One warm-up job first
(baselines, precompiled headers) is not measured. Reports evaluations per minute, the workers'
busy fraction over the measured window, client-side latency percentiles and the verdicts.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load_files(folder: Path) -> dict[str, str]:
    from cuda_agent.sandbox_pool.workspace import read_candidate_files

    return read_candidate_files(folder)


def make_jobs(args: argparse.Namespace, count: int, tag: str):
    from cuda_agent.sandbox_pool.harness import EvalJob, EvalOptions

    default_problem = "diag_matmul_cuda.py" if args.device == "cuda" else "diag_matmul.py"
    problem = Path(args.problem or ROOT / "examples/problems" / default_problem).read_text()
    base = load_files(Path(args.solution or ROOT / f"examples/solutions/diag_matmul/{args.device}_fast"))
    options = EvalOptions(timed_calls=args.timed_calls)
    stamp = time.time_ns()
    for i in range(count):
        files = dict(base)
        files["model_new.py"] += f"\n# bench {tag} {i} {stamp}\n"
        if args.fresh_kernels:
            for key in [k for k in files if k.startswith("kernels/")]:
                files[key] += f"\n// bench {tag} {i} {stamp}\n"
        yield EvalJob(problem_src=problem, files=files, device=args.device, options=options, task_id=f"{tag}-{i}")


def percentile(values: list[float], q: float) -> float | None:
    from cuda_agent.sandbox_pool.pool.metrics import percentile as nearest_rank

    return round(nearest_rank(sorted(values), q), 3) if values else None


async def submitter(pool, jobs: collections.deque, rows: list[dict]) -> None:
    from cuda_agent.errors import PoolError, PoolOverloadedError

    while jobs:
        job = jobs.popleft()
        t0 = time.monotonic()
        while True:
            try:
                result = await pool.evaluate(job)
                verify = result.stages.get("verify")
                rows.append({"latency_s": time.monotonic() - t0, "status": result.status.value,
                             "wall_s": result.wall_s, "stages": {k: v.duration_s or 0.0 for k, v in result.stages.items()},
                             "phases": verify.log.splitlines()[-1] if verify and verify.log else ""})
                break
            except PoolOverloadedError:
                await asyncio.sleep(0.5)  # back-pressure: retry later
            except PoolError as exc:
                rows.append({"latency_s": time.monotonic() - t0, "status": f"pool_error:{type(exc).__name__}"})
                break


def median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def busy_s(status) -> float:
    return sum(w.busy_s for w in status.workers)


async def run(args: argparse.Namespace) -> dict:
    from cuda_agent.sandbox_pool.pool import LocalPoolConfig, connect_pool

    config = None
    if not args.address:
        devices = [int(d) for d in args.devices.split(",")] if args.devices else None
        config = LocalPoolConfig(device=args.device, devices=devices, cpu_workers=args.cpu_workers,
                                 compile_workers=args.compile_workers, max_pending_jobs=max(64, 2 * args.submitters),
                                 worker_processes={"auto": None, "yes": True, "no": False}[args.worker_processes])
    async with connect_pool(args.address, config=config) as pool:
        t0 = time.monotonic()
        warm = await pool.evaluate(next(make_jobs(args, 1, "warmup")))
        warmup_s = time.monotonic() - t0
        if warm.status.value != "ok":
            raise SystemExit(f"warm-up job ended {warm.status.value}: {warm.error}")
        jobs = collections.deque(make_jobs(args, args.jobs, "bench"))
        before = await pool.status()
        rows: list[dict] = []
        t0 = time.monotonic()
        await asyncio.gather(*(submitter(pool, jobs, rows) for _ in range(args.submitters)))
        wall = time.monotonic() - t0
        after = await pool.status()
    latencies = [r["latency_s"] for r in rows]
    workers = max(1, len(after.workers))
    return {
        "device": args.device, "address": args.address or "embedded", "workers": [w.name for w in after.workers],
        "worker_processes": None if args.address else config.uses_worker_processes(),
        "submitters": args.submitters, "jobs": len(rows), "fresh_kernels": args.fresh_kernels,
        "timed_calls": args.timed_calls, "warmup_s": round(warmup_s, 2), "wall_s": round(wall, 2),
        "evaluations_per_min": round(60 * len(rows) / wall, 2),
        "busy_fraction": round((busy_s(after) - busy_s(before)) / (wall * workers), 3),
        "latency_s": {q: percentile(latencies, float(q[1:])) for q in ("p50", "p90", "p99")},
        "statuses": dict(collections.Counter(r["status"] for r in rows)),
        # Per evaluation, inside the worker: where a slower evaluation spends its time.
        "evaluation_s": {"median_wall": median([r["wall_s"] for r in rows if "wall_s" in r]),
                         **{f"median_{stage}": median([r["stages"][stage] for r in rows if stage in r.get("stages", {})])
                            for stage in ("compile", "verify", "baselines")}},
        "rejected_retries": after.rejected - before.rejected,
        # The verify stage's own timeline of a few evaluations (seconds since the stage began).
        "sample_phases": [r["phases"] for r in rows[len(rows) // 2:len(rows) // 2 + 3] if r.get("phases")],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    parser.add_argument("--address", default=None, help="A pool address; default: an embedded LocalPool.")
    parser.add_argument("--devices", default=None, help="GPU indices of the embedded pool, e.g. 0,1.")
    parser.add_argument("--cpu-workers", type=int, default=1)
    parser.add_argument("--worker-processes", default="auto", choices=["auto", "yes", "no"],
                        help="Embedded pool: each worker in a process of its own (auto: with several GPUs).")
    parser.add_argument("--compile-workers", type=int, default=8)
    parser.add_argument("--submitters", type=int, default=16)
    parser.add_argument("--jobs", type=int, default=160)
    parser.add_argument("--timed-calls", type=int, default=30)
    parser.add_argument("--problem", default=None)
    parser.add_argument("--solution", default=None, help="Candidate folder (model_new.py + kernels/).")
    parser.add_argument("--fresh-kernels", action="store_true", help="Every job compiles its kernels.")
    parser.add_argument("--cache", default=None, help="CUDA_AGENT_CACHE for an embedded pool; default a new temp dir.")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if not args.address:
        os.environ["CUDA_AGENT_CACHE"] = args.cache or tempfile.mkdtemp(prefix="bench_pool_cache_")
    report = asyncio.run(run(args))
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
