"""The logic behind a workspace's utils/ scripts (compile, verification, profiling).

The scripts run inside the agent's sandbox with the workspace as current directory. They
are clients: the compile is CPU work done right here (content-addressed cache), while
verification and profiling go to the evaluation pool named by $CUDA_AGENT_POOL (or to an
embedded evaluator when none is set). Output is short and meant for a model to read.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from pathlib import Path

from cuda_agent.errors import CudaAgentError


def _workspace() -> Path:
    return Path.cwd()


def compile_main() -> int:
    """Build kernels/ into ./cuda_extension.so; print compiler errors concisely."""
    from cuda_agent.sandbox_pool.harness.compiler import build_extension
    from cuda_agent.sandbox_pool.workspace import read_candidate_files, workspace_device

    ws = _workspace()
    try:
        result = asyncio.run(build_extension(read_candidate_files(ws), workspace_device(ws)))
    except CudaAgentError as exc:
        print(f"[compile] error: {exc}")
        return 1
    if not result.ok:
        print("[compile] FAILED\n" + result.log)
        return 1
    shutil.copy(result.so_path or "", ws / "cuda_extension.so")
    cached = " (cached)" if result.cached else f" ({result.units_compiled} unit(s) rebuilt)"
    print(f"[compile] OK in {result.duration_s:.1f}s{cached}: cuda_extension.so")
    return 0


async def _evaluate(profile: bool):
    from cuda_agent.sandbox_pool.harness import EvalJob, EvalOptions, evaluate_job
    from cuda_agent.sandbox_pool.workspace import read_candidate_files, read_problem, workspace_device

    ws = _workspace()
    job = EvalJob(problem_src=read_problem(ws), files=read_candidate_files(ws), device=workspace_device(ws),
                  options=EvalOptions(profile=profile, timed_calls=20))
    address = os.environ.get("CUDA_AGENT_POOL")
    if address:
        from cuda_agent.sandbox_pool.pool import connect_pool

        async with connect_pool(address) as pool:
            return await pool.evaluate(job)
    return await evaluate_job(job)


def _print_result(result, profile: bool) -> None:  # noqa: ANN001 - EvalResult
    print(f"[status] {result.status.value}")
    for name in ("static_check", "compile", "verify", "profile"):
        stage = result.stages.get(name)
        if stage and stage.log and (stage.ok is False or name in ("verify", "profile")):
            print(f"[{name}] {stage.log.strip()[:1500]}")
    if result.error:
        print(f"[error] {result.error}")
    if profile and result.runtime_us is not None:
        f = lambda v: "n/a" if v is None else f"{v:.1f} us"  # noqa: E731
        g = lambda v: "n/a" if v is None else f"{v:.2f}x"  # noqa: E731
        print(f"[time] yours {f(result.runtime_us)} | eager {f(result.eager_us)} | torch.compile {f(result.torch_compile_us)}")
        print(f"[speedup] vs eager {g(result.speedup_vs_eager)} | vs torch.compile {g(result.speedup_vs_compile)}")
        print(f"[reward] {result.reward}")


def verification_main() -> int:
    """Correctness only: 5 fresh input draws against the reference."""
    try:
        result = asyncio.run(_evaluate(profile=False))
    except CudaAgentError as exc:
        print(f"[verification] infrastructure error: {exc}")
        return 2
    _print_result(result, profile=False)
    return 0 if result.correct else 1


def profiling_main() -> int:
    """Reference hot spots (torch.profiler), then the full evaluation with timings and reward."""
    _profile_reference()
    try:
        result = asyncio.run(_evaluate(profile=True))
    except CudaAgentError as exc:
        print(f"[profiling] infrastructure error: {exc}")
        return 2
    _print_result(result, profile=True)
    return 0 if result.correct else 1


def _profile_reference(top: int = 8) -> None:
    """Top operators of the reference by self time, so the model sees where time goes."""
    import torch

    from cuda_agent.sandbox_pool.harness.problem import load_problem
    from cuda_agent.sandbox_pool.workspace import read_problem, workspace_device

    ws = _workspace()
    device = workspace_device(ws)
    try:
        problem = load_problem(read_problem(ws))
        torch.manual_seed(0)
        model = problem.model_cls(*problem.get_init_inputs()).to(device)
        inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in problem.get_inputs()]
        activities = [torch.profiler.ProfilerActivity.CPU]
        if device == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        with torch.no_grad():
            model(*inputs)
            with torch.profiler.profile(activities=activities) as prof:
                for _ in range(3):
                    model(*inputs)
                if device == "cuda":
                    torch.cuda.synchronize()
        sort = "self_cuda_time_total" if device == "cuda" else "self_cpu_time_total"
        print("[reference profile] top operators / kernels (3 calls):")
        print(prof.key_averages().table(sort_by=sort, row_limit=top, max_name_column_width=60))
    except Exception as exc:  # profiling the reference is advisory only
        print(f"[reference profile] unavailable: {type(exc).__name__}: {exc}", file=sys.stderr)
