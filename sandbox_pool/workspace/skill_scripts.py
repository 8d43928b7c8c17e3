"""The logic behind a workspace's utils/ scripts (compile, verification, profiling).

The scripts run inside the agent's sandbox with the workspace as current directory. They
are thin clients of the evaluation pool named by $CUDA_AGENT_POOL and never import torch
in this process (tests/sandbox_pool/workspace/test_skill_scripts_light.py):

    compile       the pool builds kernels/ into its content-addressed cache (``compile``
                  request); the module is copied from that cache, which sandboxes see
                  read-only, to ./cuda_extension.so
    verification  the static check here (milliseconds), then the pool's evaluation
    profiling     the reference's profile, cached per task by the pool
                  (``reference_profile``), and the pool's full evaluation, concurrently

Without $CUDA_AGENT_POOL the same work runs in this process (an embedded evaluator and
compiler: torch is imported then). Output is short and meant for a model to read.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

from cuda_agent.errors import CudaAgentError


def _workspace() -> Path:
    return Path.cwd()


def _pool_address() -> str | None:
    return os.environ.get("CUDA_AGENT_POOL") or None


def _job(profile: bool = True):  # noqa: ANN202 - EvalJob, imported here to keep import light
    from cuda_agent.sandbox_pool.harness.models import EvalJob, EvalOptions
    from cuda_agent.sandbox_pool.workspace import read_candidate_files, read_problem, workspace_device

    ws = _workspace()
    return EvalJob(problem_src=read_problem(ws), files=read_candidate_files(ws), device=workspace_device(ws),
                   options=EvalOptions(profile=profile), task_id=str(ws))  # the default timed calls, as eval's


async def _compile():  # noqa: ANN202 - CompileReply
    address = _pool_address()
    job = _job()
    if address:
        from cuda_agent.sandbox_pool.pool.client import connect_pool

        async with connect_pool(address) as pool:
            return await pool.compile(job)
    from cuda_agent.sandbox_pool.harness.oneshot import default_cache_dir
    from cuda_agent.sandbox_pool.pool.agent_requests import compile_candidate

    return await compile_candidate(job, default_cache_dir())


def compile_main() -> int:
    """Build kernels/ into ./cuda_extension.so; print compiler errors concisely."""
    try:
        reply = asyncio.run(_compile())
    except CudaAgentError as exc:
        print(f"[compile] error: {exc}")
        return 1
    if not reply.ok:
        print("[compile] FAILED\n" + reply.log)
        return 1
    cached = " (cached)" if reply.cached else f" ({reply.units_compiled} unit(s) rebuilt)"
    target = _workspace() / "cuda_extension.so"
    try:
        tmp = target.with_suffix(".so.tmp")
        shutil.copyfile(reply.so_path or "", tmp)
        tmp.replace(target)
        where = "cuda_extension.so"
    except OSError as exc:  # the pool's cache is not visible here: the build still counts
        where = f"built in the pool's cache (not copied here: {exc.strerror or exc})"
    print(f"[compile] OK in {reply.duration_s:.1f}s{cached}: {where}")
    return 0


async def _evaluate(profile: bool):  # noqa: ANN202 - EvalResult
    from cuda_agent.sandbox_pool.harness.oneshot import static_verdict

    job = _job(profile)
    rejected = static_verdict(job)  # answered here, before the pool is contacted
    if rejected is not None:
        return rejected
    address = _pool_address()
    if address:
        from cuda_agent.sandbox_pool.pool.client import connect_pool

        async with connect_pool(address) as pool:
            return await pool.evaluate(job)
    from cuda_agent.sandbox_pool.harness.oneshot import evaluate_oneshot

    return await evaluate_oneshot(job, use_cache=False)


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
    """Reference hot spots (cached per task by the pool), then the full evaluation with timings and reward."""
    try:
        profile_text, result = asyncio.run(_profile_and_evaluate())
    except CudaAgentError as exc:
        print(f"[profiling] infrastructure error: {exc}")
        return 2
    print(profile_text.rstrip())
    _print_result(result, profile=True)
    return 0 if result.correct else 1


async def _profile_and_evaluate():  # noqa: ANN202 - (str, EvalResult)
    return await asyncio.gather(_reference_profile(), _evaluate(profile=True))


async def _reference_profile() -> str:
    """Top operators of the reference by self time, so the model sees where time goes."""
    job = _job()
    address = _pool_address()
    try:
        if address:
            from cuda_agent.sandbox_pool.pool.client import connect_pool

            async with connect_pool(address) as pool:
                reply = await pool.reference_profile(job)
        else:
            from cuda_agent.sandbox_pool.harness.oneshot import default_cache_dir
            from cuda_agent.sandbox_pool.pool.agent_requests import reference_profile

            reply = await reference_profile(job, default_cache_dir())
    except CudaAgentError as exc:  # profiling the reference is advisory only
        return f"[reference profile] unavailable: {exc}"
    return reply.text
