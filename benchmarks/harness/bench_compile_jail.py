"""What the compiler jail (harness/compiler/jail.py) costs: one candidate built from an empty cache,
jailed and not, alternately, each build in a fresh process (the jail is probed once per process).

Usage: python benchmarks/harness/bench_compile_jail.py --device cpu --repeats 2 [--out FILE.json]
       (--device cuda on a GPU machine: examples/solutions/diag_matmul/cuda_fast)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS = {"cpu": ROOT / "examples/solutions/diag_matmul/cpu_fast",
             "cuda": ROOT / "examples/solutions/diag_matmul/cuda_fast"}
ONE_BUILD = """
import asyncio, json, sys, time
from pathlib import Path
from cuda_agent.sandbox_pool.harness.compiler import build_extension
solution, device, cache = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
files = {str(p.relative_to(solution)): p.read_text() for p in solution.rglob("*") if p.is_file()}
t0 = time.monotonic()
result = asyncio.run(build_extension(files, device, cache_dir=cache))
print(json.dumps({"ok": result.ok, "wall_s": time.monotonic() - t0, "units": result.units_compiled}))
"""


def build(device: str, jailed: bool) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench_jail_") as cache:
        env = {**os.environ, "CUDA_AGENT_COMPILER_JAIL": "1" if jailed else "0"}
        out = subprocess.run([sys.executable, "-c", ONE_BUILD, str(SOLUTIONS[device]), device, cache],
                             capture_output=True, text=True, env=env, check=False, timeout=900)
        if out.returncode != 0:
            sys.exit(f"build failed:\n{out.stderr[-3000:]}")
        return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    runs: dict[str, list[dict]] = {"jailed": [], "not jailed": []}
    for _ in range(args.repeats):
        for name, rows in runs.items():  # alternated: the machine's load treats both alike
            rows.append(build(args.device, name == "jailed"))
    report = {"command": " ".join(sys.argv), "device": args.device,
              "median_wall_s": {k: round(statistics.median(r["wall_s"] for r in v), 2) for k, v in runs.items()},
              "runs": runs}
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
