"""The one-shot evaluation path of ``cuda-agent eval``: cheapest answer first.

    1. static check    in this process, before torch is imported or any worker starts:
                       a rejected candidate is answered in milliseconds
    2. result cache    an unchanged candidate (same key: `result_cache`) is answered from disk
    3. evaluation      the evaluator's forkserver is launched first; the candidate's compile starts
                       next, still without torch (content-addressed build cache; the toolchain
                       comes from its record, `detect_toolchain`); on cuda a thread creates this
                       process's CUDA context meanwhile (`cuda_primer`); this process then imports torch
                       (the reference load, the evaluator) in a worker thread while the event loop
                       drives the compile; meanwhile the forkserver finishes its start (CUDA
                       probe), the evaluator prepares the reference (`Evaluator.prepare_ahead`),
                       takes the job with the build under way and, on cuda, measures the task's
                       baselines if they are not cached; then verify / time
                       (evaluator.overlap_baselines)

Steps 1 and 2 import neither torch nor the evaluator. The verdicts are the evaluator's own:
step 1 runs the same `check_candidate` the evaluator runs first, step 2 serves a result the
evaluator produced for exactly this key.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import shutil
import time
from pathlib import Path
from collections.abc import Callable
from typing import TYPE_CHECKING

from cuda_agent.sandbox_pool.harness.models import EvalJob, EvalResult, EvalStatus, Receipt, StageOutcome
from cuda_agent.sandbox_pool.harness.result_cache import ResultCache, candidate_sha256, result_key
from cuda_agent.sandbox_pool.harness.static_check import check_candidate
from cuda_agent.sandbox_pool.harness.verdict import fail
from cuda_agent.sandbox_pool.harness.workdir import new_work_folder

if TYPE_CHECKING:
    from cuda_agent.sandbox_pool.harness.compiler import BuildResult
    from cuda_agent.sandbox_pool.harness.early_child import EarlyChild
    from cuda_agent.sandbox_pool.harness.evaluator import EvaluatorConfig
    from cuda_agent.sandbox_pool.harness.runner import Zygote

logger = logging.getLogger(__name__)


def static_verdict(job: EvalJob) -> EvalResult | None:
    """The evaluator's verdict for a candidate the static check rejects, else None (torch-free)."""
    t0 = time.monotonic()
    report = check_candidate(job.files)
    if report.ok:
        return None
    result = EvalResult(status=EvalStatus.OK, precision_policy=job.options.precision_policy, device=job.device)
    result.receipt = Receipt(problem_sha256=hashlib.sha256(job.problem_src.encode()).hexdigest(),
                             candidate_sha256=candidate_sha256(job.files))
    result.stages["static_check"] = StageOutcome(ran=True, ok=False, duration_s=time.monotonic() - t0,
                                                 log="\n".join(report.errors + report.violations))
    if report.errors:
        fail(result, EvalStatus.STATIC_CHECK_FAILED, "; ".join(report.errors))
    else:
        fail(result, EvalStatus.VIOLATION, report.violations[0], report.violations)
    result.wall_s = time.monotonic() - t0
    return result


def default_cache_dir() -> Path:
    """The evaluator's cache folder, resolved without importing the compiler (torch)."""
    import os

    return Path(os.environ.get("CUDA_AGENT_CACHE") or Path.home() / ".cache" / "cuda_agent")


def _settings(config: "EvaluatorConfig | None", isolate: bool, memory_mb: int) -> dict[str, object]:
    if config is not None:
        checked = {"window_check": True} if config.window_check else {}  # keys without the check stay as they were
        return {"isolate": config.isolate, "cpu_memory_limit_mb": config.cpu_memory_limit_mb,
                "device_index": config.device_index, **checked}
    return {"isolate": isolate, "cpu_memory_limit_mb": memory_mb, "device_index": 0}


async def evaluate_oneshot(job: EvalJob, *, config: "EvaluatorConfig | None" = None, use_cache: bool = True,
                           cache_dir: Path | None = None,
                           before_evaluation: Callable[[], object] | None = None) -> EvalResult:
    """Evaluate `job` the cheapest honest way (module docstring). Candidate failures are results.

    `before_evaluation` runs only when step 3 is reached (the CLI loads the reference there,
    so a broken model.py is a usage error without slowing the steps that need no torch)."""
    static = static_verdict(job)
    if static is not None:
        return static
    cache_root = Path(cache_dir or (config.cache_dir if config and config.cache_dir else None) or default_cache_dir())
    cache = ResultCache(cache_root)
    # Defaults of EvaluatorConfig, repeated so the key needs no torch import; a test keeps them equal.
    key = result_key(job, cache_root, _settings(config, True, 16384))
    if use_cache:
        hit = cache.get(key)
        if hit is not None:
            return hit
    # The forkserver boots (python, torch import, CUDA probe: ~7 s on an H200) while this process
    # compiles and imports torch for the reference and the evaluator; nothing it runs depends on them.
    from cuda_agent.sandbox_pool.harness.compiler import build_extension  # torch-free
    from cuda_agent.sandbox_pool.harness.runner import Zygote

    zygote = Zygote(cuda=job.device == "cuda")
    zygote.launch()
    if job.device == "cuda":  # the CUDA context is made while torch imports (cuda_primer.py): its first use is ~free
        from cuda_agent.sandbox_pool.harness.cuda_primer import prime_cuda_context

        prime_cuda_context(config.device_index if config is not None else 0)
    # The compile starts before the torch import (~2.7 s): the toolchain comes from its record
    # (`detect_toolchain`), so the first compiler runs at once. Same cache folder as the evaluator's.
    build_started = time.monotonic()
    build = asyncio.ensure_future(build_extension(
        job.files, job.device, cache_dir=_build_cache_dir(config, cache_root), timeout_s=job.options.compile_timeout_s))
    # Once the build is done and the forkserver ready, the candidate's child starts in the evaluation's
    # work folder, still before the torch import below ends (early_child.py).
    work = new_work_folder()
    early = asyncio.ensure_future(_start_child_early(job, config, zygote, build, work))
    try:
        # In a worker thread, so the event loop goes on driving the compiler's subprocesses.
        await asyncio.to_thread(_import_torch_side, before_evaluation)
        child = await _early_child(early, build)
        result = await _evaluate(job, config, cache_root, zygote, build, build_started, work, child)
    except BaseException:
        try:
            await _early_child(early, build, cancel=True)
            await asyncio.wait({build})  # no compiler left running; it still lands in the build cache
            if not build.cancelled():
                build.exception()  # retrieved: reported by the evaluator, or not needed
        finally:
            zygote.close()
            shutil.rmtree(work, ignore_errors=True)
        raise
    # Keyed again: this evaluation may have measured (created) the task's baselines.
    cache.put(result_key(job, cache_root, _settings(config, True, 16384)), result)
    return result


def _build_cache_dir(config: "EvaluatorConfig | None", cache_root: Path) -> Path:
    """The folder the evaluator builds in (`Evaluator.cache_dir`), known before it is imported."""
    if config is None:
        return cache_root  # _evaluate's EvaluatorConfig gets cache_root
    return Path(config.cache_dir or default_cache_dir())


async def _start_child_early(job: EvalJob, config: "EvaluatorConfig | None", zygote: "Zygote",
                             build_task: "asyncio.Future[BuildResult]", work: str) -> "EarlyChild | None":
    from cuda_agent.sandbox_pool.harness.early_child import EarlyChild

    build = await asyncio.shield(build_task)  # cancelled while waiting here: the build goes on
    if not build.ok or not build.so_path:
        return None
    settings = _settings(config, True, 16384)
    try:  # in a thread: it waits for the forkserver's readiness and its answer
        return await asyncio.to_thread(
            EarlyChild.start, zygote, job, build.so_path, work, device_index=int(settings["device_index"]),
            isolate=bool(settings["isolate"]), cpu_memory_limit_mb=int(settings["cpu_memory_limit_mb"]))
    except Exception as exc:  # the evaluator starts its child as usual and reports what is wrong
        logger.debug("the candidate's child did not start early: %s", exc)
        return None


async def _early_child(early: "asyncio.Future[EarlyChild | None]", build: "asyncio.Future[BuildResult]", *,
                       cancel: bool = False) -> "EarlyChild | None":
    """The child `_start_child_early` started, once the torch import has ended. Only a build that is done
    by then has one (a long compile: the evaluator takes the job first, e.g. to measure the baselines
    meanwhile, and starts the child itself); a start under way is awaited, never abandoned mid-fork.
    `cancel`: the evaluation failed, the child is killed."""
    if not build.done():
        early.cancel()  # still waiting for the build: no fork under way
    await asyncio.wait({early})  # a fork under way ends first: its child is killed below, not lost
    child = None if early.cancelled() or early.exception() is not None else early.result()
    if child is not None and (cancel or not build.done()):
        child.discard()
        return None
    return child


def _import_torch_side(before_evaluation: Callable[[], object] | None) -> None:
    """What needs torch before the evaluation: the caller's reference load, then the evaluator's import."""
    if before_evaluation is not None:
        before_evaluation()
    import cuda_agent.sandbox_pool.harness.evaluator  # noqa: F401


async def _evaluate(job: EvalJob, config: "EvaluatorConfig | None", cache_root: Path, zygote: "Zygote",
                    build_task: "asyncio.Future[BuildResult]", build_started: float, work: str,
                    child: "EarlyChild | None") -> EvalResult:
    from cuda_agent.sandbox_pool.harness.evaluator import Evaluator, EvaluatorConfig, PendingBuild

    cfg = config or EvaluatorConfig(device=job.device, cache_dir=cache_root)
    evaluator = Evaluator(cfg, zygote=zygote)
    # The compile, started before the torch import, runs on while the forkserver starts (torch import,
    # CUDA probe), the evaluator takes the job (its receipt initialises CUDA here) and, on cuda, measures
    # the task's missing baselines (evaluator.overlap_baselines). A broken toolchain: the evaluator
    # builds again and reports it as an infra_error result.
    build = PendingBuild(build_task)  # type: ignore[arg-type]  # ensure_future keeps a task as it is
    build.started = build_started  # the compile stage's started_s: when it really began
    # The reference is prepared now too (~1 s in a fresh process on the H200), while the forkserver
    # boots, so verification finds it done (`Evaluator.prepare_ahead`).
    # The candidate's child, if started early, waits for its draws in the same folder (early_child.py).
    ahead = evaluator.prepare_ahead(job, work=work, child=child)
    try:
        await evaluator.start()
        return await evaluator.evaluate(job, build=build, ahead=ahead)
    finally:
        await ahead.discard()  # after a failed start: evaluate never got it
        await build.settle()  # awaited already, unless the evaluator failed to start: it still lands in the cache
        await evaluator.close()


__all__ = ["default_cache_dir", "evaluate_oneshot", "static_verdict"]
