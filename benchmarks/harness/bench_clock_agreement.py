"""How well a CPU child's two clocks agree in a busy pool: the outside clock's stamps read quietly (at the
child's messages, the default) against read as they arrive (the parent woken by every stamp).

    .venv/bin/python benchmarks/harness/bench_clock_agreement.py --rounds 3 \
        --out benchmarks/harness/results/cpu_clock_agreement.json
    .venv/bin/python benchmarks/harness/bench_clock_agreement.py --rounds 4 --columns 256 --quiet-only \
        --out benchmarks/harness/results/cpu_clock_agreement_short.json

One CPU pool at pipeline depth 3 (the pipeline test's load: honest jobs beside a crashing and an endless
candidate), per mode `--rounds` rounds. For every honest timed call it records the reported time and the
outside time minus the floor (`clock.OutsideClock`), and per evaluation the best agreement
(`cpu_agreement`). Prints and writes, per mode: null-call floors, how far outside exceeded reported
(the stretch), each evaluation's best-agreeing call (the smallest stretch: what `cpu_agreement` judges) and the
agreements; the modes alternate, so machine load hits both alike. `--columns` shrinks the problem (diag_matmul's
M, 2048 by default) to time short calls.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
from pathlib import Path

from cuda_agent.sandbox_pool.harness import EvalJob, EvalOptions, EvalStatus, clock
from cuda_agent.sandbox_pool.pool import LocalPool, LocalPoolConfig
from cuda_agent.sandbox_pool.workspace import read_candidate_files

ROOT = Path(__file__).resolve().parents[2]
PROBLEM_SRC = (ROOT / "examples/problems/diag_matmul.py").read_text()
PROBLEM = PROBLEM_SRC
HONEST = read_candidate_files(ROOT / "examples/solutions/diag_matmul/cpu_fast")
BODIES = {"endless": "while True:\n            pass", "crash": "raise RuntimeError('candidate bug')"}
MODES = {"quiet (read at the child's messages)": True, "read as they arrive": False}


def with_columns(columns: int) -> str:
    """diag_matmul's source with B's width set to `columns` (its calls' length scales with it)."""
    if "\nM = 2048\n" not in PROBLEM_SRC:
        raise SystemExit("examples/problems/diag_matmul.py no longer sets M = 2048: update --columns")
    return PROBLEM_SRC.replace("\nM = 2048\n", f"\nM = {columns}\n")


def job(kind: str, i: int) -> EvalJob:
    files = dict(HONEST)
    if kind in BODIES:
        head, _, _ = files["model_new.py"].partition("        return cuda_extension")
        files["model_new.py"] = head + "        " + BODIES[kind] + "\n"
    files["model_new.py"] += f"\n# variant {kind} {i}\n"
    return EvalJob(problem_src=PROBLEM, files=files, device="cpu", task_id=f"{kind}-{i}",
                   options=EvalOptions(timed_calls=10, run_timeout_s=8))


def recorded() -> list[dict]:
    """Wrap `cpu_agreement` to keep each judged evaluation's floor and per-call (reported, outside - floor)."""
    records: list[dict] = []
    original = clock.OutsideClock.cpu_agreement

    def cpu_agreement(self: clock.OutsideClock, reported_us: list[float]) -> float | None:
        nulls = self.durations_us("n")
        floor = statistics.median(nulls) if nulls else 0.0
        calls = [(r, (self.stamps[("e", "c", k)] - self.stamps[("s", "c", k)]) / 1e3 - floor)
                 for k, r in enumerate(reported_us) if ("s", "c", k) in self.stamps and ("e", "c", k) in self.stamps]
        agreement = original(self, reported_us)
        records.append({"floor_us": floor, "calls": calls, "agreement": agreement})
        return agreement

    clock.OutsideClock.cpu_agreement = cpu_agreement  # type: ignore[method-assign]
    return records


async def run_round(pool: LocalPool, rnd: int) -> list[str]:
    kinds = ["cpu_fast", "crash", "cpu_fast", "endless", "cpu_fast", "cpu_fast"]
    results = await asyncio.gather(*(pool.evaluate(job(kind, 100 * rnd + i)) for i, kind in enumerate(kinds)))
    return [f"{kind}: {r.status.value}" for kind, r in zip(kinds, results)
            if (kind == "cpu_fast") != (r.status is EvalStatus.OK)]


async def main(args: argparse.Namespace) -> dict:
    records = recorded()
    quiet_default = clock.read_quietly
    global PROBLEM
    PROBLEM = with_columns(args.columns)
    modes = {mode: quiet for mode, quiet in MODES.items() if quiet or not args.quiet_only}
    out: dict = {"queue_capacity": clock.queue_capacity(), "columns": args.columns,
                 "rule": {"agreement": clock.CPU_AGREEMENT, "slack_us": clock.CPU_SLACK_US,
                          "judged_us": clock.CPU_JUDGED_US}, "modes": {}}
    per_mode: dict[str, list[dict]] = {mode: [] for mode in modes}
    unexpected: list[str] = []
    with tempfile.TemporaryDirectory() as cache:
        config = LocalPoolConfig(device="cpu", pipeline_depth=3, compile_workers=2, cache_dir=Path(cache))
        async with LocalPool(config) as pool:
            await pool.evaluate(job("cpu_fast", 0))  # build and baselines, once
            for rnd in range(args.rounds):
                for mode, quiet in modes.items():
                    clock.read_quietly = (lambda device, q=quiet: q and quiet_default(device))  # type: ignore[assignment]
                    records.clear()
                    unexpected += await run_round(pool, rnd * len(modes) + list(modes).index(mode))
                    per_mode[mode] += records[:]
                    print(f"round {rnd + 1} {mode}: {len(records)} evaluations judged", file=sys.stderr, flush=True)
    clock.read_quietly = quiet_default  # type: ignore[assignment]
    for mode, evals in per_mode.items():
        stretch = [outside - reported for e in evals for reported, outside in e["calls"]]
        agreements = [e["agreement"] for e in evals if e["agreement"] is not None]
        best = [min(outside - reported for reported, outside in e["calls"]) for e in evals if e["calls"]]
        lengths = [statistics.median(outside for _, outside in e["calls"]) for e in evals if e["calls"]]
        out["modes"][mode] = {
            "evaluations": len(evals), "calls": len(stretch),
            "floor_us": [round(e["floor_us"], 1) for e in evals],
            "stretch_us": {"min": min(stretch), "median": statistics.median(stretch), "max": max(stretch),
                           "over_100us": sum(s > 100 for s in stretch)} if stretch else None,
            "best_stretch_us": sorted(round(b, 1) for b in best),
            "median_call_us": {"min": min(lengths), "max": max(lengths)} if lengths else None,
            "agreement": {"min": min(agreements), "max": max(agreements), "judged": len(agreements),
                          "below_threshold": sum(a < clock.CPU_AGREEMENT for a in agreements)} if agreements else None,
        }
    out["unexpected_verdicts"] = unexpected
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="rounds per mode (6 evaluations each, 4 honest)")
    parser.add_argument("--columns", type=int, default=2048, help="diag_matmul's M (shorter calls below 2048)")
    parser.add_argument("--quiet-only", action="store_true", help="time only the default, quiet reading")
    parser.add_argument("--out", type=Path, help="write the JSON here too")
    args = parser.parse_args()
    report = asyncio.run(main(args))
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
