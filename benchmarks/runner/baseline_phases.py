"""Where a baseline measurement's wall time goes: the child events of a warm-up compile and of the
timed eager and torch.compile children, time-stamped, for a few problem files.

  python3 -P benchmarks/runner/baseline_phases.py --device cuda .kernelbench/KernelBench/level1/1_*.py
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from cuda_agent.sandbox_pool.harness import baselines as harness_baselines
from cuda_agent.sandbox_pool.harness.problem import load_problem
from cuda_agent.sandbox_pool.harness.runner import ChildProcess, Zygote

_start = [time.monotonic()]
_receive = ChildProcess.receive
_go = ChildProcess.go


async def _stamped_receive(self: ChildProcess, deadline: float) -> dict:
    message = await _receive(self, deadline)
    extra = f" ({len(message['samples_us'])} calls)" if message.get("event") == "timing" else ""
    print(f"    +{time.monotonic() - _start[0]:7.2f} s  {message.get('event')}{extra}", flush=True)
    return message


def _stamped_go(self: ChildProcess) -> None:
    print(f"    +{time.monotonic() - _start[0]:7.2f} s  child started", flush=True)
    _go(self)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("problems", nargs="+", type=Path, help="problem files (KernelBench's format)")
    parser.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    parser.add_argument("--compile-threads", type=int, default=None,
                        help="TORCHINDUCTOR_COMPILE_THREADS of the children (default: inductor's own choice)")
    args = parser.parse_args()
    ChildProcess.receive, ChildProcess.go = _stamped_receive, _stamped_go  # type: ignore[method-assign]
    t0 = time.monotonic()
    env = {"TORCHINDUCTOR_COMPILE_THREADS": str(args.compile_threads)} if args.compile_threads else None
    zygote = Zygote(cuda=args.device == "cuda", env=env)
    zygote.start()
    print(f"zygote: {zygote.boot}", flush=True)
    try:
        for path in args.problems:
            problem = load_problem(path.read_text())
            cache_dir = tempfile.TemporaryDirectory(prefix="baseline_phases_")  # the problem's compile cache
            cache = cache_dir.name
            for stage in ("warm-up compile", "timed eager + compile"):
                _start[0] = time.monotonic()
                print(f"{path.name}: {stage}", flush=True)
                if stage.startswith("warm"):
                    await harness_baselines.warm_compile(problem, zygote, device=args.device, device_index=0, tf32=False,
                                                         warmup=3, compile_cache_dir=cache, timeout_s=900)
                else:
                    await harness_baselines.measure(problem, zygote, device=args.device, device_index=0, tf32=False,
                                                    n_sets=30, warmup=3, key="phases", timeout_s=900,
                                                    compile_cache_dir=cache)
                print(f"    = {time.monotonic() - _start[0]:.2f} s", flush=True)
            cache_dir.cleanup()
    finally:
        zygote.close()
    print(f"all: {time.monotonic() - t0:.1f} s (zygote start included)")


if __name__ == "__main__":
    asyncio.run(main())
