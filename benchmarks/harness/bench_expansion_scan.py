"""What the build's expanded-source check (harness/compiler/expansion.py) costs: candidates built with every
unit compiled afresh (the toolchain record and precompiled headers warm), with the check and with it taken
out (no kept preprocessor output, no scan), alternately; and the scan's own seconds per build.

Usage: python benchmarks/harness/bench_expansion_scan.py --device cuda --repeats 3 [--out FILE.json]
       (--device cpu: the CPU example only)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from cuda_agent.sandbox_pool.harness.compiler import build_extension, builder, expansion

ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS = {
    "cpu": ["examples/solutions/diag_matmul/cpu_fast"],
    "cuda": ["examples/solutions/diag_matmul/cuda_fast", "examples/solutions/softmax/cuda_fast",
             "benchmarks/runner/kb_solutions/level2/76_Gemm_Add_ReLU"],
}
_scan, _keep_flags = expansion.scan, expansion.keep_flags
scan_seconds: list[float] = []


def timed_scan(keep: Path, stage: Path) -> list[str]:
    t0 = time.monotonic()
    try:
        return _scan(keep, stage)
    finally:
        scan_seconds.append(time.monotonic() - t0)


def check(on: bool) -> None:
    """The check on (as shipped, its scan timed) or taken out of the builder."""
    expansion.scan = timed_scan if on else (lambda keep, stage: [])
    expansion.keep_flags = _keep_flags if on else (lambda compiler, keep: [])


def kernel_files(solution: Path) -> dict[str, str]:
    return {str(p.relative_to(solution)): p.read_text() for p in solution.rglob("kernels/*") if p.is_file()}


def build(files: dict[str, str], device: str, warm: Path, on: bool) -> dict:
    """One build with every unit compiled: a copy of the warm cache without its objects."""
    with tempfile.TemporaryDirectory(prefix="bench_expansion_") as tmp:
        cache = Path(tmp) / "cache"
        shutil.copytree(warm, cache, symlinks=True)
        shutil.rmtree(cache / "build", ignore_errors=True)
        check(on)
        scan_seconds.clear()
        result = asyncio.run(build_extension(files, device, cache_dir=cache))
        if not result.ok:
            raise SystemExit(f"build failed:\n{result.log[-3000:]}")
        return {"wall_s": result.duration_s, "units": result.units_compiled, "scan_s": sum(scan_seconds),
                "violations": result.expanded_violations}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    report = {"device": args.device, "repeats": args.repeats, "solutions": {}}
    with tempfile.TemporaryDirectory(prefix="bench_expansion_warm_") as warm:
        for rel in SOLUTIONS[args.device]:
            files = kernel_files(ROOT / rel)
            check(True)
            asyncio.run(build_extension(files, args.device, cache_dir=Path(warm)))  # toolchain record, PCHs
            runs = {"on": [], "off": []}
            for _ in range(args.repeats):
                for variant in ("off", "on"):
                    runs[variant].append(build(files, args.device, Path(warm), variant == "on"))
            row = {v: {"wall_s_median": statistics.median(r["wall_s"] for r in rs), "runs": rs}
                   for v, rs in runs.items()}
            row["scan_s_median"] = statistics.median(r["scan_s"] for r in runs["on"])
            row["violations"] = runs["on"][0]["violations"]
            report["solutions"][rel] = row
            print(f"{rel}: build {row['off']['wall_s_median']:.2f} s without the check, "
                  f"{row['on']['wall_s_median']:.2f} s with it (scan {row['scan_s_median']:.3f} s, "
                  f"{row['on']['runs'][0]['units']} units); "
                  f"violations {row['violations']}", flush=True)
    text = json.dumps(report, indent=1)
    if args.out:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    assert builder.expansion is expansion  # the builder calls through the module: the switch above reaches it
    main()
