"""The runner's whole loop on KernelBench problems, through the scripted OpenAI-compatible endpoint.

For each solution folder ``SOLUTIONS/<task_id>/`` (model_new.py + kernels/), the scripted model
reads the task, writes the kernel files and model_new.py, compiles, verifies and stops; the
runner (``cuda-agent run``) drives the real sandbox, tools and evaluator (compile, verify,
profile, baselines) and writes results, trajectories and the HTML report. Used by the
``kernelbench`` phase of scripts/gpu-session.sh; runs on CPU too (``--device cpu`` with CPU
solutions and a KernelBench-shaped folder).

    python benchmarks/runner/kb_phase.py --kernelbench .kernelbench --solutions benchmarks/runner/kb_solutions \
        --device cuda --out $OUT/kb
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "evaluation"))

from openai_scripted import ScriptedOpenAI, call  # noqa: E402

MODEL = "scripted-kernel-writer"


def script(folder: Path) -> list[dict]:
    """The scripted conversation that writes one solution folder and checks it with the skill scripts."""
    kernels = sorted(path for path in (folder / "kernels").iterdir() if path.is_file())
    return [
        {"content": "Reading the task.", "tool_calls": [call("Read", {"file_path": "model.py"})]},
        {"content": "Writing the kernels.", "tool_calls": [
            call("Write", {"file_path": f"kernels/{path.name}", "content": path.read_text()}) for path in kernels]},
        {"content": "Writing the model.", "tool_calls": [
            call("Write", {"file_path": "model_new.py", "content": (folder / "model_new.py").read_text()})]},
        {"content": "Compile and verify.", "tool_calls": [call("Bash", {"command": "bash utils/compile.sh"}),
                                                          call("Bash", {"command": "python3 -m utils.verification"})]},
        {"content": "Verified; done."},
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernelbench", type=Path, required=True)
    parser.add_argument("--solutions", type=Path, default=REPO / "benchmarks" / "runner" / "kb_solutions")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--concurrency", type=int, default=3)
    args = parser.parse_args()
    import importlib.util

    missing = [name for name in ("httpx",) if importlib.util.find_spec(name) is None]
    if missing:
        print(f"kb_phase: missing Python package(s) {missing}: carry their wheels in .whl/ (README, GPU tests)")
        return 2
    # records need pyarrow and jsonschema; a bare GPU image may lack them: then results + report only
    records = [] if all(importlib.util.find_spec(n) for n in ("pyarrow", "jsonschema")) else ["--no-records"]
    folders = sorted(path.parent for path in args.solutions.glob("level*/*/model_new.py"))
    scripts = {f"{folder.parent.name}/{folder.name}": script(folder) for folder in folders}
    args.out.mkdir(parents=True, exist_ok=True)
    results = args.out / "kb_run.jsonl"
    pattern = "^(" + "|".join(scripts) + ")$"
    levels = ",".join(sorted({task.split("/")[0][5:] for task in scripts}))
    started = time.monotonic()
    with ScriptedOpenAI(scripts, model=MODEL) as server:
        run = subprocess.run([sys.executable, "-P", "-m", "cuda_agent.cli.main", "run", "--kernelbench", str(args.kernelbench),
                              "--level", levels, "--tasks", pattern, "--device", args.device, "--base-url",
                              server.base_url, "--model", MODEL, "--out", str(results), "--concurrency",
                              str(args.concurrency), "--json", *records], cwd=REPO, capture_output=True, text=True)
    wall = time.monotonic() - started
    sys.stderr.write(run.stderr[-3000:])
    report = subprocess.run([sys.executable, "-P", "-m", "cuda_agent.cli.main", "report", str(results), "--out",
                             str(args.out / "kb_report"), "--html"], cwd=REPO, capture_output=True, text=True)
    sys.stderr.write(report.stderr[-1000:])
    lines = [json.loads(line) for line in results.read_text().splitlines()] if results.exists() else []
    summary = {"tasks": len(scripts), "records": not records, "run_rc": run.returncode, "report_rc": report.returncode, "wall_s": round(wall, 1),
               "results": [{key: line.get(key) for key in ("task_id", "status", "reward", "turns", "speedup_vs_eager",
                                                           "speedup_vs_compile", "wall_s", "error")} for line in lines]}
    (args.out / "kb_phase.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1))
    ok = run.returncode == 0 and len(lines) == len(scripts) and all(line["status"] == "ok" for line in lines)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
