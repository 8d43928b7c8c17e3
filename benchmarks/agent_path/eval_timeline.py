"""Where a cold `cuda-agent eval` spends its time: one evaluation, phase by phase.

Runs in this process exactly what `cuda-agent eval DIR --no-cache` runs after parsing its
arguments (the static check, the reference load that imports torch, `evaluate_oneshot`), on a
workspace made from --problem and --solution, with an empty cache folder (build, baselines and
results all cold) unless --cache names one. Prints the timeline, seconds since this process
started:

    imports            the CLI's own modules (no torch)
    static check       before anything starts
    compile            started by the one-shot path first, before the torch import (harness/oneshot.py)
    torch import       the CLI loads the reference (before_evaluation, in a worker thread), beside the compile
    evaluator start    the forkserver (torch import, CUDA probe on cuda), overlapping the compile
    CUDA init (parent) the evaluator takes the job: its receipt initialises CUDA in this process
    stages             every stage's `started_s` / `duration_s` (on cuda a baseline cache miss
                       is measured during the compile: evaluator.overlap_baselines)

Usage: python benchmarks/agent_path/eval_timeline.py --device cpu [--json OUT.json]
       python benchmarks/agent_path/eval_timeline.py --device cpu --cache C --fresh-build   # baselines in C, new build
       python benchmarks/agent_path/eval_timeline.py --device cuda     # on a GPU node
"""

from __future__ import annotations

import sys
import time

T0 = time.monotonic()

if "--late-zygote" not in sys.argv:  # what `cuda-agent eval` does first (cli/entry.py)
    from cuda_agent.sandbox_pool.harness.zygote_launch import launch_early

    launch_early()

import argparse  # noqa: E402 - after T0: the imports are part of what is measured
import asyncio  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import cuda_agent.cli.main  # noqa: E402,F401 - the CLI's start-up, as `cuda-agent eval` pays it
from cuda_agent.sandbox_pool.harness.models import EvalJob, EvalOptions  # noqa: E402
from cuda_agent.sandbox_pool.harness.oneshot import evaluate_oneshot, static_verdict  # noqa: E402
from cuda_agent.sandbox_pool.workspace import create_workspace, read_candidate_files, read_problem  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DEFAULTS = {"cpu": ("examples/problems/diag_matmul.py", "examples/solutions/diag_matmul/cpu_fast"),
            "cuda": ("examples/problems/diag_matmul_cuda.py", "examples/solutions/diag_matmul/cuda_fast")}


def now() -> float:
    return time.monotonic() - T0


def _record_zygotes() -> list:
    """Every `runner.Zygote` that starts in this process, in order (for its `ready_at`)."""
    from cuda_agent.sandbox_pool.harness import runner

    seen: list = []
    start = runner.Zygote.start

    def recorded(self) -> None:  # noqa: ANN001
        if self not in seen:
            seen.append(self)
        start(self)

    runner.Zygote.start = recorded
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--problem", help="default: diag_matmul for the device")
    parser.add_argument("--solution", help="a folder with model_new.py and kernels/ (default: cpu_fast / cuda_fast)")
    parser.add_argument("--cache", type=Path, help="cache folder to use (default: a fresh one: everything cold)")
    parser.add_argument("--json", type=Path, help="also write the timeline here")
    parser.add_argument("--late-zygote", action="store_true",
                        help="start the forkserver where the one-shot path reaches it (after the static check), "
                             "not before the CLI's imports as `cuda-agent eval` does (cli/entry.py)")
    parser.add_argument("--fresh-build", action="store_true",
                        help="a new candidate (a comment in each kernel source): its build misses the cache while "
                             "the task's baselines in --cache hit (the agent's usual cold eval)")
    args = parser.parse_args()
    import logging

    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("cuda_agent.sandbox_pool.harness.runner").setLevel(logging.INFO)  # the zygote's boot phases
    zygotes = _record_zygotes()
    problem, solution = (ROOT / p for p in DEFAULTS[args.device])
    problem, solution = Path(args.problem or problem), Path(args.solution or solution)
    imported = now()

    work = Path(tempfile.mkdtemp(prefix="eval_timeline_"))
    try:
        ws = create_workspace(problem.read_text(), work / "ws", args.device)
        for path in (ws / "kernels").iterdir():
            path.unlink()
        shutil.copytree(solution, ws, dirs_exist_ok=True)
        cache = args.cache or work / "cache"
        files = read_candidate_files(ws)
        if args.fresh_build:
            stamp = f"\n// eval_timeline {time.time_ns()}\n"
            files = {k: v + stamp if k.startswith("kernels/") else v for k, v in files.items()}
        job = EvalJob(problem_src=read_problem(ws), files=files, device=args.device,
                      options=EvalOptions(), task_id=str(ws))
        t_static = now()
        assert static_verdict(job) is None, "the solution fails the static check"
        marks: dict[str, float] = {}

        def before_evaluation() -> None:  # what the CLI does there: load the reference (torch)
            from cuda_agent.sandbox_pool.harness.problem import load_problem

            marks["torch import"] = now()  # the compile began just before (harness/oneshot.py)
            load_problem(job.problem_src)
            marks["reference loaded"] = now()

        result = asyncio.run(evaluate_oneshot(job, use_cache=False, cache_dir=cache,
                                              before_evaluation=before_evaluation))
        end = now()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    evaluate_entry = end - (result.wall_s or 0.0)
    compile_stage = result.stages.get("compile")
    run0 = (marks["torch import"] - compile_stage.started_s if compile_stage and compile_stage.started_s is not None
            else evaluate_entry)
    run0 = max(run0, evaluate_entry)  # the compile starts a few ms before the mark
    rows = [("imports (CLI modules)", 0.0, imported), ("static check", t_static, marks["torch import"]),
            ("torch import (reference load), beside the compile", marks["torch import"], marks["reference loaded"]),
            ("evaluator start (forkserver), beside the compile", marks["reference loaded"], evaluate_entry),
            ("evaluator takes the job (receipt: CUDA init here)", evaluate_entry, run0)]
    for name, stage in result.stages.items():
        if stage.started_s is not None and stage.duration_s is not None:
            rows.append((f"stage {name}" + (" (cached)" if stage.cached else ""), run0 + stage.started_s,
                         run0 + stage.started_s + stage.duration_s))
    if zygotes and zygotes[0].ready_at is not None:  # the zygote's own clock (CLOCK_MONOTONIC: system-wide)
        rows.insert(3, ("forkserver: started ... ready (" + ("after the static check" if args.late_zygote else
                                                            "before the CLI's imports") + ")",
                        t_static if args.late_zygote else 0.0, zygotes[0].ready_at - T0))
    rows.append(("end (result)", end, end))
    print(f"cold eval timeline, {args.device}: {result.status.value}, reward {result.reward}; wall {end:.2f} s")
    print(f"{'phase':55} {'began':>7} {'ended':>7} {'took':>7}")
    for name, began, ended in rows:
        print(f"{name:55} {began:7.2f} {ended:7.2f} {ended - began:7.2f}")
    verify = result.stages.get("verify")
    if verify is not None:
        print("\n".join(line for line in verify.log.splitlines() if line.startswith(("phases", "device:", "child:"))))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"device": args.device, "status": result.status.value, "wall_s": end,
                                         "phases": [{"phase": n, "began_s": b, "ended_s": e} for n, b, e in rows],
                                         "stages": {k: v.model_dump(exclude={"log"}) for k, v in result.stages.items()}},
                                        indent=1))
    sys.exit(0 if result.status.value == "ok" else 1)


if __name__ == "__main__":
    main()
