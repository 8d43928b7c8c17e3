"""Throughput of the evaluation pool with N concurrent submitters.

Usage (the issue's targets: 16 submitters on one H200, then on a 2-GPU node):

    python benchmarks/pool/bench_pool.py --device cuda --devices 0 --submitters 1,4,16,32 --jobs 8,24,64,64 --out sweep.json
    python benchmarks/pool/bench_pool.py --device cuda --devices 0 --submitters 16 --jobs 48 --pipeline-depth 1   # one at a time
    python benchmarks/pool/bench_pool.py --device cuda --devices 0,1 --submitters 16 --jobs 128 --out 2gpu.json
    python benchmarks/pool/bench_pool.py --address $CUDA_AGENT_POOL --device cuda ...   # a served / Ray pool
    python benchmarks/pool/bench_pool.py --device cpu --submitters 1,3 --jobs 3 --timed-calls 5   # smoke run on a laptop
    python benchmarks/pool/bench_pool.py --device cuda --devices 0 --submitters 16 --jobs 32 --stack-samples stacks.json

Each job is the example diag_matmul solution (`--solution`, default <device>_fast) with its own
model_new.py comment, so every job has its own candidate hash; `--fresh-kernels` also changes
the kernel sources so every job compiles (compile/evaluation overlap). One warm-up job first
(baselines, precompiled headers) is not measured; the points of a sweep (`--submitters 1,4,16,32`)
run one after the other on the same pool. Per point: evaluations per minute, the workers' busy
fraction (time with a job in flight), the GPUs' own utilisation sampled through NVML (the fraction
of time a kernel ran, per GPU; `null` without NVML), the time the device gate gave timed calls
the device alone, client-side latency, and the median timeline of the verify stage.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import re
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load_files(folder: Path) -> dict[str, str]:
    from cuda_agent.sandbox_pool.workspace import read_candidate_files

    return read_candidate_files(folder)


MIX = {"softmax_big": ("benchmarks/pool/mix/problem_softmax_big.py", "benchmarks/pool/mix/softmax_big")}
"""Problems `--mix` adds, each with its honest candidate: KernelBench-sized working sets (issue 36)."""


def job_kinds(args: argparse.Namespace) -> list[tuple[str, str, dict[str, str]]]:
    """(name, problem source, candidate files) of every kind of job: the bench problem, then `--mix`'s."""
    default_problem = "diag_matmul_cuda.py" if args.device == "cuda" else "diag_matmul.py"
    kinds = [("bench", Path(args.problem or ROOT / "examples/problems" / default_problem).read_text(),
              load_files(Path(args.solution or ROOT / f"examples/solutions/diag_matmul/{args.device}_fast")))]
    for name in filter(None, (args.mix or "").split(",")):
        problem, solution = MIX[name]
        kinds.append((name, (ROOT / problem).read_text(), load_files(ROOT / solution)))
    return kinds


def make_jobs(args: argparse.Namespace, count: int, tag: str, kinds: list | None = None):
    """`count` jobs, the kinds in turn (`job_kinds`), each with a candidate hash of its own."""
    from cuda_agent.sandbox_pool.harness import EvalJob, EvalOptions

    kinds = kinds or job_kinds(args)
    checked = {} if args.checked_timed_calls is None else {
        "checked_timed_calls": None if args.checked_timed_calls == "all" else int(args.checked_timed_calls)}
    options = EvalOptions(timed_calls=args.timed_calls, **checked)
    stamp = time.time_ns()
    for i in range(count):
        name, problem, base = kinds[i % len(kinds)]
        files = dict(base)
        files["model_new.py"] += f"\n# bench {tag} {i} {stamp}\n"
        if args.fresh_kernels:
            for key in [k for k in files if k.startswith("kernels/")]:
                files[key] += f"\n// bench {tag} {i} {stamp}\n"
        yield EvalJob(problem_src=problem, files=files, device=args.device, options=options, task_id=f"{tag}-{name}-{i}")


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
                verify, profile = result.stages.get("verify"), result.stages.get("profile")
                rows.append({"latency_s": time.monotonic() - t0, "status": result.status.value,
                             "kind": job.task_id.split("-")[1], "error": result.error,
                             "wall_s": result.wall_s, "stages": {k: v.duration_s or 0.0 for k, v in result.stages.items()},
                             "verify_log": verify.log if verify and verify.log else "",
                             "profile_log": profile.log if profile and profile.log else "",
                             "device_log": result.stages["device"].log if "device" in result.stages else ""})
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


class NvmlSampler:
    """The GPUs' own utilisation (NVML: percent of time a kernel ran over the last sample period),
    polled every `period_s` in a thread; no-op where NVML is missing (CPU runs)."""

    def __init__(self, devices: list[int], period_s: float = 0.1) -> None:
        self.period_s = period_s
        self.handles: list = []
        self.error: str | None = None
        self.samples: list[tuple[float, list[int], list[int], list[int]]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        try:
            import pynvml

            pynvml.nvmlInit()
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            mapping = [int(x) for x in visible.split(",")] if visible and all(
                x.strip().isdigit() for x in visible.split(",")) else None
            self.nvml = pynvml
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(mapping[d] if mapping else d) for d in devices]
        except Exception as exc:  # no pynvml (nvidia-ml-py), no driver: report null
            self.error = f"{type(exc).__name__}: {exc}"

    def start(self) -> None:
        if self.handles:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            try:
                util = [self.nvml.nvmlDeviceGetUtilizationRates(h) for h in self.handles]
                used = [self.nvml.nvmlDeviceGetMemoryInfo(h).used for h in self.handles]
                self.samples.append((time.monotonic(), [u.gpu for u in util], [u.memory for u in util], used))
            except Exception as exc:
                self.error = f"{type(exc).__name__}: {exc}"
                return

    def window(self, t0: float, t1: float) -> dict:
        """Mean utilisation and peak memory in use (GiB) per GPU between two monotonic times."""
        inside = [s for s in self.samples if t0 <= s[0] <= t1]
        if not inside:
            return {"gpu_util": None, "mem_util": None, "peak_used_gib": None, "samples": 0, "error": self.error}
        n = len(self.handles)
        return {"gpu_util": [round(sum(s[1][i] for s in inside) / len(inside) / 100, 3) for i in range(n)],
                "mem_util": [round(sum(s[2][i] for s in inside) / len(inside) / 100, 3) for i in range(n)],
                "peak_used_gib": [round(max(s[3][i] for s in inside) / 2**30, 2) for i in range(n)],
                "samples": len(inside), "error": self.error}

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


def memory_waits(pool) -> tuple[int, float] | None:
    """(children held back for memory, seconds they waited) of an in-process pool's gates, else None."""
    gates = [getattr(w, "gate", None) for w in getattr(pool, "workers", [])]
    if not gates or any(g is None for g in gates):
        return None
    return sum(g.stats.memory_waits for g in gates), round(sum(g.stats.memory_wait_s for g in gates), 2)


def gate_totals(pool) -> tuple[float, int] | None:
    """(seconds the gates gave timed calls the device alone, windows) of an in-process pool, else None."""
    gates = [getattr(w, "gate", None) for w in getattr(pool, "workers", [])]
    if not gates or any(g is None for g in gates):
        return None
    return sum(g.stats.exclusive_s for g in gates), sum(g.stats.exclusive_windows for g in gates)


PHASE = re.compile(r"([a-z]+[0-9]*(?: prepared)?) ([0-9.]+)s")


def phase_medians(rows: list[dict]) -> dict[str, float]:
    """Median duration of each step of the verify stage (from its timeline: seconds since the stage began)."""
    steps: dict[str, list[float]] = collections.defaultdict(list)
    for row in rows:
        line = next((x for x in row.get("verify_log", "").splitlines() if x.startswith("phases")), "")
        marks = [(name, float(at)) for name, at in PHASE.findall(line.split(":", 1)[-1])]
        last = 0.0
        for name, at in marks:
            key = re.sub(r"^(trial|timed|print)[0-9]+$", r"\1", name)
            steps[key].append(at - last)
            last = at
        device = next((x for x in row.get("verify_log", "").splitlines() if x.startswith("device:")), "")
        for name, pattern in (("reference (parent)", r"reference ([0-9.]+)s"), ("gate wait", r"gate ([0-9.]+)s"),
                              ("alone (calibration + timed calls)", r"alone ([0-9.]+)s")):
            m = re.search(pattern, device)
            if m:
                steps[name].append(float(m.group(1)))
        m = re.search(r"timed loop ([0-9.]+) s, of which timed calls ([0-9.]+) s", row.get("profile_log", ""))
        if m:
            steps["timed loop"].append(float(m.group(1)))
            steps["timed calls (events)"].append(float(m.group(2)))
        m = re.search(r"\(draws ([0-9.]+) s, calls ([0-9.]+) s, prints ([0-9.]+) s", row.get("profile_log", ""))
        if m:  # the child's own split of its timed loop
            for i, part in enumerate(("draws", "timed-call windows", "prints (fingerprint + handshake)"), start=1):
                steps[f"timed loop: {part}"].append(float(m.group(i)))
        m = re.search(r"waiting for the prints' positions ([0-9.]+) s", row.get("profile_log", ""))
        if m:
            steps["timed loop: prints, of which handshakes"].append(float(m.group(1)))
    # A step that repeats (trials) is summed per evaluation in "trial" x count; report the median per occurrence.
    return {k: median(v) for k, v in steps.items()}


async def measure_point(args: argparse.Namespace, pool, submitters: int, jobs_n: int, nvml: NvmlSampler,
                        tag: str) -> dict:
    jobs = collections.deque(make_jobs(args, jobs_n, tag))
    before = await pool.status()
    gate0 = gate_totals(pool)
    memory0 = memory_waits(pool)
    rows: list[dict] = []
    t0 = time.monotonic()
    await asyncio.gather(*(submitter(pool, jobs, rows) for _ in range(submitters)))
    t1 = time.monotonic()
    wall = t1 - t0
    after = await pool.status()
    gate1 = gate_totals(pool)
    memory1 = memory_waits(pool)
    latencies = [r["latency_s"] for r in rows]
    workers = max(1, len(after.workers))
    return {
        "submitters": submitters, "jobs": len(rows), "fresh_kernels": args.fresh_kernels, "wall_s": round(wall, 2),
        "evaluations_per_min": round(60 * len(rows) / wall, 2),
        "busy_fraction": round((busy_s(after) - busy_s(before)) / (wall * workers), 3),
        "nvml": nvml.window(t0, t1),
        "alone_fraction": round((gate1[0] - gate0[0]) / (wall * workers), 3) if gate0 and gate1 else None,
        "latency_s": {"mean": round(sum(latencies) / len(latencies), 3) if latencies else None,
                      **{q: percentile(latencies, float(q[1:])) for q in ("p50", "p90", "p99")}},
        "statuses": dict(collections.Counter(r["status"] for r in rows)),
        "statuses_by_kind": {kind: dict(collections.Counter(r["status"] for r in rows if r.get("kind") == kind))
                             for kind in sorted({r.get("kind") for r in rows if r.get("kind")})},
        "infra_errors": [r["error"][:300] for r in rows if r["status"] == "infra_error" and r.get("error")][:8],
        "memory_waits": {"children": memory1[0] - memory0[0], "wait_s": round(memory1[1] - memory0[1], 2)}
        if memory0 and memory1 else None,
        "solo_reruns": sum("solo" in r.get("device_log", "") for r in rows),
        "solo_rerun_reasons": dict(collections.Counter(r["device_log"] for r in rows if "solo" in r.get("device_log", ""))),
        # Per evaluation, inside the worker: where an evaluation spends its time.
        "evaluation_s": {"median_wall": median([r["wall_s"] for r in rows if "wall_s" in r]),
                         **{f"median_{stage}": median([r["stages"][stage] for r in rows if stage in r.get("stages", {})])
                            for stage in ("compile", "verify", "baselines")}},
        "verify_steps_median_s": phase_medians(rows),
        "rejected_retries": after.rejected - before.rejected,
        "sample_timelines": [r["verify_log"].splitlines()[-2:] for r in rows[len(rows) // 2:len(rows) // 2 + 2]
                             if r.get("verify_log")],
    }


async def run(args: argparse.Namespace) -> dict:
    from cuda_agent.sandbox_pool.pool import LocalPoolConfig, connect_pool

    submitters = [int(x) for x in str(args.submitters).split(",")]
    jobs = [int(x) for x in str(args.jobs).split(",")]
    if len(jobs) == 1:
        jobs = jobs * len(submitters)
    if len(jobs) != len(submitters):
        raise SystemExit(f"--jobs {args.jobs}: give one number, or one per --submitters point ({len(submitters)})")
    devices = [int(d) for d in args.devices.split(",")] if args.devices else [0]
    config = None
    if not args.address:
        config = LocalPoolConfig(device=args.device, devices=devices if args.devices else None,
                                 cpu_workers=args.cpu_workers, compile_workers=args.compile_workers,
                                 max_pending_jobs=max(64, 2 * max(submitters)), pipeline_depth=args.pipeline_depth,
                                 worker_processes={"auto": None, "yes": True, "no": False}[args.worker_processes])
    nvml = NvmlSampler(devices if args.device == "cuda" else [])
    async with connect_pool(args.address, config=config) as pool:
        t0 = time.monotonic()
        kinds = job_kinds(args)
        for warm_job in make_jobs(args, len(kinds), "warmup", kinds):  # each kind's baselines and build, unmeasured
            warm = await pool.evaluate(warm_job)
            if warm.status.value != "ok":
                raise SystemExit(f"warm-up job {warm_job.task_id} ended {warm.status.value}: {warm.error}")
        warmup_s = time.monotonic() - t0
        nvml.start()
        sampler = None
        if args.stack_samples:  # the measured points only: the warm-up is not sampled
            sys.path.insert(0, str(Path(__file__).parent))  # -P leaves the script's folder off the path
            from stack_sampler import StackSampler

            sampler = StackSampler()
            sampler.start()
        points = []
        for n, count in zip(submitters, jobs):
            point = await measure_point(args, pool, n, count, nvml, f"s{n}")
            points.append(point)
            if args.out:  # a point at a time: a run stopped by its time limit keeps what it measured
                Path(args.out).write_text(json.dumps({"partial": True, "warmup_s": round(warmup_s, 2),
                                                      "points": points}, indent=2) + "\n")
            print(f"[bench_pool] {n:>3} submitters: {point['evaluations_per_min']:7.1f} evaluations/min, "
                  f"busy {point['busy_fraction']}, GPU {point['nvml']['gpu_util']}, alone {point['alone_fraction']}, "
                  f"peak memory {point['nvml'].get('peak_used_gib')} GiB, "
                  f"latency p50 {point['latency_s']['p50']} s, {point['statuses']}", file=sys.stderr, flush=True)
        nvml.stop()
        if sampler is not None:
            sampler.stop()
            Path(args.stack_samples).write_text(json.dumps(sampler.report(), indent=1) + "\n")
        status = await pool.status()
    return {
        "device": args.device, "address": args.address or "embedded", "workers": [w.name for w in status.workers],
        "worker_processes": None if args.address else config.uses_worker_processes(),
        "pipeline_depth": None if args.address else config.depth(),
        "timed_calls": args.timed_calls, "switch_interval_s": sys.getswitchinterval(), "checked_timed_calls": args.checked_timed_calls, "warmup_s": round(warmup_s, 2), "nvml_error": nvml.error,
        "points": points,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    parser.add_argument("--address", default=None, help="A pool address; default: an embedded LocalPool.")
    parser.add_argument("--devices", default=None, help="GPU indices of the embedded pool, e.g. 0,1.")
    parser.add_argument("--cpu-workers", type=int, default=1)
    parser.add_argument("--worker-processes", default="auto", choices=["auto", "yes", "no"],
                        help="Embedded pool: each worker in a process of its own (auto: with several GPUs).")
    parser.add_argument("--pipeline-depth", type=int, default=None,
                        help="Evaluations in flight per device (default: the pool's, 4 on cuda, 1 on cpu).")
    parser.add_argument("--compile-workers", type=int, default=8)
    parser.add_argument("--submitters", default="16", help="Concurrent submitters; a comma list runs a sweep.")
    parser.add_argument("--jobs", default="160", help="Jobs per point; one number, or one per --submitters point.")
    parser.add_argument("--timed-calls", type=int, default=30)
    parser.add_argument("--switch-interval", type=float, default=None,
                        help="sys.setswitchinterval for this process (the embedded pool's worker runs here).")
    parser.add_argument("--checked-timed-calls", default=None,
                        help="Timed calls whose outputs are checked ('all': every one; default: EvalOptions' default).")
    parser.add_argument("--problem", default=None)
    parser.add_argument("--solution", default=None, help="Candidate folder (model_new.py + kernels/).")
    parser.add_argument("--mix", default=None, help=f"Also jobs of these problems, in turn with the bench problem's "
                        f"(comma list of {', '.join(MIX)}: KernelBench-sized working sets, >= 1 GB per call).")
    parser.add_argument("--fresh-kernels", action="store_true", help="Every job compiles its kernels.")
    parser.add_argument("--cache", default=None, help="CUDA_AGENT_CACHE for an embedded pool; default a new temp dir.")
    parser.add_argument("--out", default=None)
    parser.add_argument("--stack-samples", default=None,
                        help="Also sample where this process's threads are (stack_sampler.py) into this JSON file.")
    args = parser.parse_args()
    if args.switch_interval is not None:
        sys.setswitchinterval(args.switch_interval)
    if not args.address:
        os.environ["CUDA_AGENT_CACHE"] = args.cache or tempfile.mkdtemp(prefix="bench_pool_cache_")
    report = asyncio.run(run(args))
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
