"""Terminal-sandbox latency: Bash round trip, cold start, start from the warm pool.

For each backend: the round trip of ``run("true")`` and ``run("echo hi")`` (p50 / p99
over --n calls, after 5 warm-up calls), the cold start (create + start + first ``true``)
and the start from a warm pool (acquire + first ``true``), --starts times each. Writes a
Markdown table to --out with the command line and the machine.

    .venv/bin/python benchmarks/sandbox/bench_sandbox.py --out benchmarks/sandbox/RESULTS.md

The docker backend needs an engine and the test image (docker/start_engine.sh,
docker/build_test_image.sh); the script runs both when needed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cuda_agent.sandbox_pool.terminal.base import SandboxLimits
from cuda_agent.sandbox_pool.terminal.config import DockerSandboxConfig, LocalSandboxConfig, create_sandbox
from cuda_agent.sandbox_pool.terminal.hostenv import host_toolchain_mounts
from cuda_agent.sandbox_pool.terminal.warm_pool import WarmPool

REPO = Path(__file__).resolve().parents[2]
IMAGE = "cuda-agent-sandbox-test:latest"


def config(backend: str):
    limits = SandboxLimits()
    if backend == "local":
        return LocalSandboxConfig(launcher="bwrap", limits=limits)
    if backend == "local-unshare":
        return LocalSandboxConfig(launcher="unshare", limits=limits)
    return DockerSandboxConfig(image=IMAGE, host_mounts=host_toolchain_mounts(), limits=limits)


def make_workspace(root: Path) -> Path:
    ws = Path(tempfile.mkdtemp(prefix="ws", dir=root))
    (ws / "utils").mkdir()
    (ws / "kernels").mkdir()
    for name in ("model.py", "binding.cpp", "binding_registry.h", "SKILL.md", "utils/compile.sh"):
        (ws / name).write_text("# fixed\n")
    return ws


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))] * 1e3


async def round_trips(backend: str, ws: Path, n: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    async with create_sandbox(config(backend), ws) as sb:
        for command in ("true", "echo hi"):
            for _ in range(5):
                await sb.run(command)
            samples = []
            for _ in range(n):
                t0 = time.perf_counter()
                await sb.run(command)
                samples.append(time.perf_counter() - t0)
            out[command] = samples
    return out


async def cold_starts(backend: str, root: Path, n: int) -> list[float]:
    samples = []
    for i in range(n):
        ws = make_workspace(root)
        t0 = time.perf_counter()
        sb = create_sandbox(config(backend), ws)
        await sb.start()
        await sb.run("true")
        samples.append(time.perf_counter() - t0)
        await sb.close()
    return samples


async def warm_starts(backend: str, root: Path, n: int) -> list[float]:
    samples = []
    async with WarmPool(config(backend), size=2) as pool:
        for i in range(n):
            while pool.ready < 1:  # measure the warm path; refill time is not the point here
                await asyncio.sleep(0.05)
            ws = make_workspace(root)
            t0 = time.perf_counter()
            sb = await pool.acquire(ws)
            await sb.run("true")
            samples.append(time.perf_counter() - t0)
            await pool.release(sb)
    return samples


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    tools = []
    for argv in (["bwrap", "--version"], ["docker", "version", "--format", "docker {{.Server.Version}}"]):
        try:
            tools.append(subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout.strip())
        except (OSError, subprocess.TimeoutExpired):
            pass
    load = os.getloadavg()[0]
    return (f"{cpu}, {os.cpu_count()} cores, {mem_gb:.0f} GiB, Linux {platform.release()}, "
            f"Python {platform.python_version()}, {', '.join(tools)}; load average at start {load:.1f}")


def ensure_docker() -> None:
    subprocess.run([str(REPO / "docker/start_engine.sh")], check=True)
    present = subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True)
    if present.returncode != 0:
        subprocess.run([str(REPO / "docker/build_test_image.sh"), IMAGE], check=True)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="local,local-unshare,docker")
    parser.add_argument("--n", type=int, default=200, help="round trips per command")
    parser.add_argument("--starts", type=int, default=20, help="cold and warm starts per backend")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    backends = args.backends.split(",")
    if "docker" in backends:
        ensure_docker()
    header = machine()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-sandbox-") as tmp:
        root = Path(tmp)
        for backend in backends:
            trips = await round_trips(backend, make_workspace(root), args.n)
            cold = await cold_starts(backend, root, args.starts)
            warm = await warm_starts(backend, root, args.starts)
            rows.append((backend, trips, cold, warm))
            print(backend, {k: f"p50 {pct(v, .5):.1f} ms" for k, v in trips.items()},
                  f"cold {statistics.median(cold) * 1e3:.0f} ms, warm {statistics.median(warm) * 1e3:.0f} ms",
                  flush=True)
    lines = [
        "| backend | `true` p50 / p99 (ms) | `echo hi` p50 / p99 (ms) | cold start p50 / max (ms) "
        "| warm-pool start p50 / max (ms) |",
        "|---|---|---|---|---|",
    ]
    for backend, trips, cold, warm in rows:
        lines.append(
            f"| {backend} | {pct(trips['true'], .5):.1f} / {pct(trips['true'], .99):.1f} "
            f"| {pct(trips['echo hi'], .5):.1f} / {pct(trips['echo hi'], .99):.1f} "
            f"| {pct(cold, .5):.0f} / {max(cold) * 1e3:.0f} | {pct(warm, .5):.0f} / {max(warm) * 1e3:.0f} |"
        )
    header += f", at the end {os.getloadavg()[0]:.1f} (the machine is shared: latencies rise with its load)"
    command = "python " + shlex.join(["benchmarks/sandbox/bench_sandbox.py", *sys.argv[1:]])
    report = "\n".join([
        "# Terminal sandbox benchmark", "",
        f"Command: `{command}` (repository root, `.venv` active, as root).", "",
        f"Machine: {header}.", "",
        f"Round trips: {args.n} calls per command after 5 warm-up calls, one sandbox. Starts: {args.starts} each; "
        "cold = create + start + first `true`; warm = `WarmPool.acquire` (bind a pre-started sandbox) + "
        "first `true`. Targets (issue 3): p50 <= 20 ms local, <= 100 ms docker.", "",
        *lines, "",
        "Notes: a local sandbox builds its view (a holder process, ~30 mounts) when it binds its workspace, "
        "so its warm-pool start equals its cold start; the docker warm pool saves the container start "
        "(create + start), binding the workspace through a host mount. The unshare launcher pays one "
        "`mount` process per mount at bind, nothing per command.", "",
    ])
    print(report)
    if args.out:
        args.out.write_text(report)


if __name__ == "__main__":
    asyncio.run(main())
