"""The agent's per-call path, ours against the official CUDA-Agent scripts, on the same workspaces.

Every step is a real command a user or model runs, in a fresh process, timed from outside
(wall seconds and the CPU seconds of the command's process tree):

    ours      `cuda-agent pool serve` (one pool for the run, its own cache folder), then in
              the workspace `bash utils/compile.sh`, a broken kernel through compile.sh,
              `python3 -m utils.verification`, `python3 -m utils.profiling` (first call of the
              task: baselines and the reference profile are measured; then steady state),
              and `cuda-agent eval` (a statically rejected candidate, a cold evaluation with
              --no-cache, an unchanged re-evaluation)
    official  official_style/ (re-creations of the official agent_workdir/utils scripts:
              forced rebuild, in-process verification, in-process profiling) on a copy of
              the same workspace; it has no static check and no eval command, so "static
              reject" runs its compile + verification on the rejected candidate, and the
              eval rows are compile + verification + profiling

Usage: python benchmarks/agent_path/bench_agent_path.py --device cpu --out benchmarks/agent_path/results/cpu
Writes results.json and results.md under --out.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
# The console script where installed (.venv); on a GPU node with scripts/gpu-env.sh, the module.
CLI = [str(BIN / "cuda-agent")] if (BIN / "cuda-agent").exists() else [sys.executable, "-P", "-m", "cuda_agent.cli.main"]
PY = sys.executable

CASES = {
    "cpu": [("diag_matmul", "examples/problems/diag_matmul.py", "examples/solutions/diag_matmul/cpu_fast")],
    "cuda": [("diag_matmul", "examples/problems/diag_matmul_cuda.py", "examples/solutions/diag_matmul/cuda_fast"),
             ("softmax", "examples/problems/softmax_cuda.py", "examples/solutions/softmax/cuda_fast")],
}
STEPS = ["compile", "compile (cached)", "compile in sandbox", "compile fail", "verify", "profile (first of task)", "profile",
         "static reject", "cold eval", "unchanged re-eval"]
TARGETS = {"static reject": "< 1 s", "unchanged re-eval": "<= 2 s", "cold eval": "<= 5 s + compile",
           "compile": "pool work + 1 s", "compile (cached)": "pool work + 1 s", "compile fail": "pool work + 1 s",
           "compile in sandbox": "pool work + 1 s",
           "verify": "pool work + 1 s", "profile": "pool work + 1 s"}


STEP_TIMEOUT_S = 600.0


def timed(argv: list[str], cwd: Path, env: dict[str, str]) -> dict:
    """Run `argv`; wall seconds, CPU seconds of its process tree, exit code, output tail."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    try:
        proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=STEP_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:  # recorded as a row, the run goes on
        out = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return {"wall_s": round(time.monotonic() - t0, 2), "cpu_s": 0.0, "rc": "timeout",
                "tail": f"no answer within {STEP_TIMEOUT_S:.0f} s\n" + out[-400:]}
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "rc": proc.returncode,
            "tail": (proc.stdout + proc.stderr).strip()[-600:]}


def make_workspace(problem: Path, solution: Path, dest: Path, device: str, env: dict[str, str]) -> Path:
    subprocess.run([*CLI, "init", str(problem), str(dest), "--device", device], env=env, check=True,
                   capture_output=True)
    (dest / "model_new.py").chmod(0o644)
    shutil.copy(solution / "model_new.py", dest / "model_new.py")
    for kernel in (solution / "kernels").iterdir():
        shutil.copy(kernel, dest / "kernels" / kernel.name)
    return dest


def broken_kernel(device: str) -> tuple[str, str]:
    name = "kernels/broken.cu" if device == "cuda" else "kernels/broken.cpp"
    return name, "int broken( { return 0 }\n"


def rejected_copy(ws: Path, dest: Path) -> Path:
    shutil.copytree(ws, dest)
    (dest / "model_new.py").chmod(0o644)
    (dest / "model_new.py").write_text("import os\n" + (ws / "model_new.py").read_text())
    return dest


def start_pool(device: str, socket: Path, env: dict[str, str], log: Path) -> subprocess.Popen:
    server = subprocess.Popen([*CLI, "pool", "serve", "--device", device, "--socket", str(socket),
                               "--socket-mode", "666"], env=env,  # sandboxed commands run as another uid
                              stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 300
    while not socket.exists():
        if server.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the pool did not start; see {log}")
        time.sleep(0.2)
    return server


def run_ours(ws: Path, bad: Path, device: str, env: dict[str, str], rows: dict[str, dict]) -> None:
    py = PY
    (ws / "cuda_extension.so").unlink(missing_ok=True)
    rows["compile"] = timed(["bash", "utils/compile.sh"], ws, env)
    rows["compile (cached)"] = timed(["bash", "utils/compile.sh"], ws, env)
    kernel = sorted((ws / "kernels").iterdir())[0]
    kernel.write_text(kernel.read_text() + "\n// edited: one unit to rebuild\n")
    rows["compile in sandbox"] = timed([py, "-c", IN_SANDBOX, str(ws), env["CUDA_AGENT_POOL"]], ws, env)
    name, text = broken_kernel(device)
    (ws / name).write_text(text)
    rows["compile fail"] = timed(["bash", "utils/compile.sh"], ws, env)
    (ws / name).unlink()
    rows["verify"] = timed([py, "-m", "utils.verification"], ws, env)
    rows["profile (first of task)"] = timed([py, "-m", "utils.profiling"], ws, env)
    rows["profile"] = timed([py, "-m", "utils.profiling"], ws, env)
    local = {k: v for k, v in env.items() if k != "CUDA_AGENT_POOL"}  # `cuda-agent eval`: the embedded path
    rows["static reject"] = timed([*CLI, "eval", str(bad), "--json"], ws, local)
    timed([*CLI, "eval", str(ws), "--json", "--no-cache"], ws, local)  # this task's eval baselines, untimed
    rows["cold eval"] = timed([*CLI, "eval", str(ws), "--json", "--no-cache"], ws, local)
    rows["unchanged re-eval"] = timed([*CLI, "eval", str(ws), "--json"], ws, local)


# `bash utils/compile.sh` of an edited kernel inside a local sandbox (the pool's socket and its compile
# cache mounted, as recipe/cuda_agent/environment.py does); the sandbox's start is not counted.
IN_SANDBOX = """
import asyncio, sys, time
from pathlib import Path
from cuda_agent.sandbox_pool.terminal.config import LocalSandboxConfig, create_sandbox
async def main(ws, sock):
    sb = create_sandbox(LocalSandboxConfig(), Path(ws), extra_ro_mounts={sock: sock}, env={"CUDA_AGENT_POOL": sock})
    async with sb:
        t0 = time.monotonic()
        r = await sb.run("bash utils/compile.sh", timeout_s=900)
        print(r.stdout, r.stderr, "in-sandbox wall %.2f s" % (time.monotonic() - t0))
        return r.exit_code
sys.exit(asyncio.run(main(sys.argv[1], sys.argv[2])))
"""


def official_copy(ws: Path, dest: Path) -> Path:
    dest.mkdir(parents=True)
    for name in ("model.py", "model_new.py", "binding.cpp", "binding_registry.h"):
        shutil.copy(ws / name, dest / name)
    shutil.copytree(ws / "kernels", dest / "kernels")
    shutil.copytree(Path(__file__).parent / "official_style", dest / "official_style",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def run_official(ws: Path, bad: Path, device: str, env: dict[str, str], rows: dict[str, dict],
                 rerun: bool = True) -> None:
    """The official-style steps; `rerun`: the eval-like rows run their steps again, else they are
    summed from the rows just measured (same steps; keeps the GPU phase within its time)."""
    py = PY
    env = {**env, "OFFICIAL_DEVICE": device}
    env.pop("CUDA_AGENT_POOL", None)
    step = lambda d, s: timed([py, "-m", f"official_style.{s}"], d, env)  # noqa: E731
    rows["compile"] = step(ws, "compile")
    rows["compile (cached)"] = step(ws, "compile")  # the official build is forced: no cache
    if rerun:
        rows["compile in sandbox"] = step(ws, "compile")
        rows["compile in sandbox"]["note"] = "compile in sandbox: not run in a sandbox here (a forced rebuild, as on the host)"
    name, text = broken_kernel(device)
    (ws / name).write_text(text)
    rows["compile fail"] = step(ws, "compile")
    (ws / name).unlink()
    step(ws, "compile")
    rows["verify"] = step(ws, "verification")
    rows["profile (first of task)"] = step(ws, "profiling")
    rows["profile"] = step(ws, "profiling")
    if rerun:
        static = [step(bad, "compile"), step(bad, "verification")]
        cold = [step(ws, "compile"), step(ws, "verification"), step(ws, "profiling")]
        again = [step(ws, "compile"), step(ws, "verification"), step(ws, "profiling")]
    else:
        shutil.copy(ws / "cuda_extension.so", bad / "cuda_extension.so")
        static = [rows["compile"], step(bad, "verification")]
        cold = again = [rows["compile"], rows["verify"], rows["profile"]]
    rows["static reject"] = _sum(static, "no static check: compile + verification of the rejected candidate")
    rows["cold eval"] = _sum(cold, "no eval command: compile + verification + profiling")
    rows["unchanged re-eval"] = _sum(again, "no cache: compile + verification + profiling again")


def _sum(parts: list[dict], note: str) -> dict:
    return {"wall_s": round(sum(p["wall_s"] for p in parts), 2), "cpu_s": round(sum(p["cpu_s"] for p in parts), 2),
            "rc": next((p["rc"] for p in parts if p["rc"] != 0), 0), "tail": parts[-1]["tail"], "note": note}


def markdown(report: dict) -> str:
    lines = [f"# Agent path: ours vs official-style scripts ({report['device']})", "",
             f"Command: `{report['command']}`  ", f"Host: {report['host']}; load average at start "
             f"{report['load_at_start']:.1f}, at end {report['load_at_end']:.1f}", "",
             *([f"**Interrupted**: {report['interrupted']}", ""] if report.get("interrupted") else []),
             "Seconds per step, wall (CPU of the command's process tree). Ours: skill scripts through a served "
             "pool; `cuda-agent eval` embedded.", ""]
    for case, sides in report["cases"].items():
        lines += [f"## {case}", "", "| step | target | ours | official-style | ours rc | official rc |",
                  "|---|---|---|---|---|---|"]
        for s in STEPS:
            o, f = sides["ours"].get(s, {}), sides["official"].get(s, {})
            cell = lambda r: f"{r['wall_s']:.2f} ({r['cpu_s']:.2f})" if r else "-"  # noqa: E731
            lines.append(f"| {s} | {TARGETS.get(s, '')} | {cell(o)} | {cell(f)} | {o.get('rc', '-')} | {f.get('rc', '-')} |")
        notes = sorted({r["note"] for r in sides["official"].values() if r.get("note")})
        lines += [""] + [f"- official {n}" for n in notes] + [""]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--out", type=Path, required=True, help="Folder for results.json and results.md.")
    parser.add_argument("--cases", default=None, help="Comma-separated case names (default: all of the device).")
    parser.add_argument("--skip-official", action="store_true", help="Only our path.")
    parser.add_argument("--official-sums", action="store_true", help="Official eval-like rows summed from its "
                        "measured steps instead of run again (same steps; what the GPU phase uses to fit ~4 min).")
    parser.add_argument("--step-timeout", type=float, default=STEP_TIMEOUT_S, help="Limit of one step, seconds.")
    args = parser.parse_args()
    globals()["STEP_TIMEOUT_S"] = args.step_timeout
    cases = [c for c in CASES[args.device] if args.cases is None or c[0] in args.cases.split(",")]
    work = Path(tempfile.mkdtemp(prefix="agent_path_"))
    env = {**os.environ, "CUDA_AGENT_CACHE": str(work / "cache"), "PATH": f"{BIN}:{os.environ.get('PATH', '')}"}
    socket = work / "pool.sock"
    report = {"device": args.device, "command": " ".join([Path(sys.executable).name, *sys.argv]),
              "host": os.uname().nodename, "load_at_start": os.getloadavg()[0], "cases": {}}
    signal.signal(signal.SIGTERM, _interrupted)  # `timeout` in gpu-session.sh: keep the rows measured so far
    server = start_pool(args.device, socket, env, work / "pool.log")
    try:
        pooled = {**env, "CUDA_AGENT_POOL": str(socket)}
        for name, problem, solution in cases:
            ws = make_workspace(ROOT / problem, ROOT / solution, work / name / "ws", args.device, env)
            bad = rejected_copy(ws, work / name / "ws_rejected")
            report["cases"][name] = {"ours": {}, "official": {}}
            print(f"[agent_path] {name}: ours", file=sys.stderr)
            run_ours(ws, bad, args.device, pooled, report["cases"][name]["ours"])
            if not args.skip_official:
                print(f"[agent_path] {name}: official-style", file=sys.stderr)
                off_ws = official_copy(ws, work / name / "official")
                off_bad = official_copy(bad, work / name / "official_rejected")
                run_official(off_ws, off_bad, args.device, env, report["cases"][name]["official"],
                             rerun=not args.official_sums)
    except (KeyboardInterrupt, subprocess.TimeoutExpired) as exc:
        report["interrupted"] = f"{type(exc).__name__}: the rows below are those measured before it"
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)
        report["load_at_end"] = os.getloadavg()[0]
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(report, indent=1) + "\n")
        (args.out / "results.md").write_text(markdown(report))
        print(markdown(report))
        shutil.rmtree(work, ignore_errors=True)
    return 0


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
