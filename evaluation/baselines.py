"""The eager and ``torch.compile`` baselines of a set of tasks, measured once on this machine.

The same measurement and the same on-disk cache as the evaluator's own baseline stage
(``cuda_agent.sandbox_pool.harness.baselines``: cache key = problem, device name, software stack,
precision, protocol, timed calls, warm-up), so a later ``cuda-agent run`` on the same GPU reuses
them. ``cuda-agent baselines`` writes one ``BaselineLine`` per task, appended as each finishes
(resumable: a re-run skips the tasks in the file, and the baseline cache answers for tasks
measured by any earlier run or evaluation).

Most of a cold baseline's wall time is torch.compile's inductor work (CPU-bound, 5-40 s per
problem), not timing. With ``jobs > 1`` the pass goes in batches: the batch's problems are first
compiled by up to ``jobs`` untimed children at once into a shared compile cache (trusted: only the
problems' own reference code writes it), then timed one at a time with the device to themselves,
their torch.compile now a cache hit. Timing never overlaps the warm-up; on cuda the next task's
children are spawned during the current one's timing, and only import until they are let go. A
warm-up batch compiles its slowest problems first. A time budget stops the pass between tasks (a
warm-up in flight is cancelled) and says what is left.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from cuda_agent.errors import ConfigError, InfraError, ProblemError
from cuda_agent.evaluation.tasks import Task

if TYPE_CHECKING:
    from cuda_agent.sandbox_pool.harness.baselines import BaselineChildren, Baselines

BATCH_PER_JOB = 4
"""Problems per warm-up batch, per job: large enough that one slow compile does not leave the others idle long."""
WARM_ENV = {"TORCHINDUCTOR_COMPILE_THREADS": "1"}
"""Warm-up children compile in their own process only: `jobs` of them already fill the CPUs (and a pool of
compile workers per child would cost seconds to start and gigabytes). Not part of inductor's cache key."""


class BaselineLine(BaseModel):
    """Baselines of one task."""

    model_config = ConfigDict(extra="forbid")

    task_id: str = Field(description="Task id.")
    level: int | None = Field(None, description="Level.")
    device_name: str = Field("", description="Device the times were measured on.")
    eager_us: float | None = Field(None, description="Eager median per call.")
    eager_std_us: float | None = Field(None, description="Eager standard deviation.")
    torch_compile_us: float | None = Field(None, description="torch.compile median per call (None: compile failed).")
    torch_compile_std_us: float | None = Field(None, description="torch.compile standard deviation.")
    cached: bool = Field(False, description="Read from the baseline cache instead of measured now.")
    warmed: bool = Field(False, description="Its torch.compile was compiled ahead by the parallel warm-up.")
    wall_s: float = Field(0.0, description="Wall time of this task's timed measurement (warm-up not included).")
    error: str = Field("", description="Why a baseline is missing ('' if none).")


class PassProgress(BaseModel):
    """Where a baseline pass stands; sent to `on_progress` whenever it changes."""

    model_config = ConfigDict(extra="forbid")

    phase: str = Field("start", description="start | warm-up | timing | done.")
    total: int = Field(0, description="Tasks this pass has to do (not already in the output file).")
    measured: int = Field(0, description="Lines written (measured now or read from the baseline cache).")
    cached: int = Field(0, description="Of those, read from the baseline cache.")
    failed: int = Field(0, description="Of those, without an eager time.")
    warmed: int = Field(0, description="Compiled ahead by the warm-up (this pass).")
    warm_failed: int = Field(0, description="Warm-ups that failed (the timed pass then compiles itself).")


class PassSummary(PassProgress):
    """The end of a pass."""

    tasks: int = Field(0, description="Tasks asked for (including those already in the output file).")
    already_done: int = Field(0, description="Tasks skipped: already in the output file.")
    remaining: int = Field(0, description="Tasks left for a later run (budget spent).")
    budget_spent: bool = Field(False, description="The time budget stopped the pass.")
    wall_s: float = 0.0
    warm_s: float = Field(0.0, description="Wall time of the parallel warm-up batches.")
    timed_s: float = Field(0.0, description="Wall time of the timed measurements.")
    jobs: int = 1
    lines: list[BaselineLine] = Field(default_factory=list, exclude=True)


def read_lines(path: Path) -> list[BaselineLine]:
    lines = []
    for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if text.strip():
            try:
                lines.append(BaselineLine.model_validate_json(text))
            except ValidationError:
                raise ConfigError(f"{path}:{number}: not a baseline line; fix or delete that line") from None
    return lines


class _Item:
    """One pending task with its loaded problem and baseline cache key (None: the problem did not load)."""

    def __init__(self, task: Task, problem: object | None, key: str, error: str = "") -> None:
        self.task, self.problem, self.key, self.error = task, problem, key, error
        self.warmed = False


async def measure_baselines(tasks: Sequence[Task], out: Path, *, device: str, device_index: int = 0,
                            timed_calls: int = 30, budget_s: float | None = None, timeout_s: float = 900.0,
                            jobs: int = 1, compile_cache: Path | None = None,
                            on_line: Callable[[BaselineLine], None] | None = None,
                            on_progress: Callable[[PassProgress], None] | None = None) -> PassSummary:
    """Measure (or read from the cache) the baselines of ``tasks`` not yet in ``out``; append their lines.

    ``compile_cache``: the shared inductor/triton cache of the baseline children (default: next to the
    baseline cache); ``jobs`` > 1 compiles each batch ahead in that many parallel untimed children."""
    import torch

    from cuda_agent.sandbox_pool.harness import EvalJob, EvalOptions, Evaluator, EvaluatorConfig
    from cuda_agent.sandbox_pool.harness import baselines as harness_baselines
    from cuda_agent.sandbox_pool.harness.problem import load_problem
    from cuda_agent.sandbox_pool.harness.runner import Zygote

    if jobs < 1:
        raise ConfigError(f"--jobs {jobs}: give at least 1")
    done = {line.task_id for line in read_lines(out)} if out.is_file() else set()
    todo = [task for task in tasks if task.task_id not in done]
    out.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    deadline = None if budget_s is None else started + budget_s
    state = PassSummary(tasks=len(tasks), already_done=len(tasks) - len(todo), total=len(todo), jobs=jobs)
    options = EvalOptions(timed_calls=timed_calls)
    tf32 = False  # the paper's precision policy, as the evaluator's default

    def progress(phase: str | None = None) -> None:
        if phase is not None:
            state.phase = phase
        if on_progress is not None:
            on_progress(PassProgress.model_validate(state.model_dump(include=set(PassProgress.model_fields))))

    def out_of_time() -> bool:
        return deadline is not None and time.monotonic() >= deadline

    def write(item: _Item, line: BaselineLine) -> None:
        line.warmed = item.warmed
        with out.open("a", encoding="utf-8") as stream:
            stream.write(line.model_dump_json() + "\n")
        state.lines.append(line)
        state.measured += 1
        state.cached += int(line.cached)
        state.failed += int(line.eager_us is None)
        progress()
        if on_line is not None:
            on_line(line)

    config = EvaluatorConfig(device=device, device_index=device_index, baseline_timeout_s=timeout_s)
    async with Evaluator(config) as ev:
        cache_dir = compile_cache or ev.cache_dir / "reference_compile"
        (cache_dir / "warmed").mkdir(parents=True, exist_ok=True)
        # the evaluator's receipt names the device exactly as its baseline cache keys do
        device_name = ev._receipt(EvalJob(problem_src="", files={}, device=device)).device_name

        def line_of(item: _Item) -> BaselineLine:
            return BaselineLine(task_id=item.task.task_id, level=item.task.level, device_name=device_name)

        def from_cache(item: _Item, found: harness_baselines.Baselines, cached: bool, wall_s: float) -> BaselineLine:
            line = line_of(item)
            line.cached, line.wall_s = cached, wall_s
            line.eager_us, line.eager_std_us = found.eager.median_us, found.eager.std_us
            if found.torch_compile is not None:
                line.torch_compile_us, line.torch_compile_std_us = found.torch_compile.median_us, found.torch_compile.std_us
            line.error = found.compile_error or ""
            return line

        # Already measured by an earlier run or evaluation: written at once, no device time.
        pending: list[_Item] = []
        for task in todo:
            try:
                problem = load_problem(task.problem_src)
            except ProblemError as exc:
                item = _Item(task, None, "", f"{type(exc).__name__}: {exc}"[:500])
                write(item, line_of(item).model_copy(update={"error": item.error}))
                continue
            # the same key as the evaluator's baseline stage (harness/evaluator.py), so `run` reuses these
            key = harness_baselines.baseline_key(problem, device_name, torch.__version__, tf32, timed_calls,
                                                 device=device, warmup=options.warmup_calls)
            item = _Item(task, problem, key)
            found = ev.baseline_cache.get(key)
            if found is not None:
                write(item, from_cache(item, found, True, 0.0))
            else:
                item.warmed = (cache_dir / "warmed" / key).exists()  # compiled ahead by an interrupted run
                pending.append(item)
        progress()

        def start(item: _Item) -> BaselineChildren:
            return harness_baselines.BaselineChildren(
                item.problem, ev.zygote, device=device, device_index=device_index, tf32=tf32,  # type: ignore[arg-type]
                n_sets=timed_calls, warmup=options.warmup_calls, key=item.key, compile_cache_dir=str(cache_dir))

        def on_timed(item: _Item, found: Baselines | None, error: str, wall_s: float) -> None:
            if found is not None:
                ev.baseline_cache.put(found)
                line = from_cache(item, found, False, wall_s)
            else:
                line = line_of(item)
                line.error, line.wall_s = error, wall_s
            state.timed_s += wall_s
            write(item, line)

        warm_zygote = Zygote(cuda=device == "cuda", env=WARM_ENV) if jobs > 1 else None
        try:
            batch = jobs * BATCH_PER_JOB if jobs > 1 else len(pending) or 1
            for first in range(0, len(pending), batch):
                if out_of_time():
                    break
                chunk = pending[first:first + batch]
                if warm_zygote is not None:
                    t0 = time.monotonic()
                    progress("warm-up")
                    await _warm(chunk, warm_zygote, cache_dir, jobs, warm_deadline(time.monotonic(), deadline),
                                device, device_index, tf32,
                                options.warmup_calls, timeout_s, state, progress)
                    state.warm_s += time.monotonic() - t0
                progress("timing")
                await _time_chunk(chunk, start, timeout_s, out_of_time, on_timed, spawn_ahead=device == "cuda")
        finally:
            if warm_zygote is not None:
                warm_zygote.close()
    state.remaining = state.total - state.measured
    state.budget_spent = state.remaining > 0 and out_of_time()
    state.wall_s = time.monotonic() - started
    progress("done")
    return state


async def _time_chunk(chunk: list[_Item], start: Callable[[_Item], BaselineChildren], timeout_s: float,
                      out_of_time: Callable[[], bool],
                      on_timed: Callable[[_Item, Baselines | None, str, float], None], *, spawn_ahead: bool) -> None:
    """Time the chunk's problems one at a time. `spawn_ahead` (cuda): the next problem's children are
    spawned while this one's are timed (they only import until let go), so its compile child's imports
    are off the critical path; on the CPU they would share the cores being timed."""
    ahead: BaselineChildren | None = None
    try:
        for index, item in enumerate(chunk):
            if out_of_time():
                break
            t0 = time.monotonic()
            children = ahead or start(item)
            ahead = None
            if spawn_ahead and index + 1 < len(chunk) and not out_of_time():
                ahead = start(chunk[index + 1])
            try:
                found = await children.finish(timeout_s)
                on_timed(item, found, "", time.monotonic() - t0)
            except (InfraError, ProblemError, OSError, asyncio.TimeoutError) as exc:
                on_timed(item, None, f"{type(exc).__name__}: {exc}"[:500], time.monotonic() - t0)
            finally:
                children.close()
    finally:
        if ahead is not None:
            ahead.close()


WARM_SHARE = 0.5
"""A warm-up batch may use at most this share of the budget left when it starts: the rest times the
problems it compiled, so every budgeted run measures some (a 56-problem batch takes ~4 min on an H200)."""


def warm_deadline(now: float, deadline: float | None) -> float | None:
    """When a warm-up batch starting at `now` must stop, given the pass's `deadline` (None: no budget)."""
    return None if deadline is None else now + max(0.0, deadline - now) * WARM_SHARE


async def _warm(chunk: list[_Item], zygote: object, cache_dir: Path, jobs: int, deadline: float | None, device: str,
                device_index: int, tf32: bool, warmup: int, timeout_s: float, state: PassSummary,
                progress: Callable[[], None]) -> None:
    """Compile the chunk's problems into `cache_dir`, `jobs` at a time; cancelled at `deadline`."""
    from cuda_agent.sandbox_pool.harness import baselines as harness_baselines

    slots = asyncio.Semaphore(jobs)

    async def one(item: _Item) -> None:
        async with slots:
            try:
                error = await harness_baselines.warm_compile(
                    item.problem, zygote, device=device, device_index=device_index, tf32=tf32, warmup=warmup,  # type: ignore[arg-type]
                    compile_cache_dir=str(cache_dir), timeout_s=timeout_s)
            except (InfraError, ProblemError, OSError) as exc:
                error = f"{type(exc).__name__}: {exc}"
        if error is None:
            item.warmed = True
            (cache_dir / "warmed" / item.key).touch()
            state.warmed += 1
        else:
            state.warm_failed += 1  # the timed pass compiles it itself, and reports the error if it recurs
        progress()

    # Longest first, so one slow compile does not start last and hold the batch alone: higher levels
    # compile bigger graphs, and within a level a longer source is the better guess.
    slowest_first = sorted((item for item in chunk if not item.warmed),
                           key=lambda item: (item.task.level or 0, len(item.task.problem_src)), reverse=True)
    work = [asyncio.ensure_future(one(item)) for item in slowest_first]
    if not work:
        return
    began = time.time()
    left = None if deadline is None else max(0.0, deadline - time.monotonic())
    _, late = await asyncio.wait(work, timeout=left)
    for future in late:  # budget spent: the children are killed (their cache writes are atomic)
        future.cancel()
    if late:
        await asyncio.gather(*late, return_exceptions=True)
    forget_autotuning(cache_dir, since=began)


def forget_autotuning(cache_dir: Path, since: float) -> int:
    """Delete the Triton autotuning choices (``*.best_config``) written since `since` (wall clock).

    The warm-up's children benchmarked their kernels' configurations while sharing the device, so
    their choices may be skewed; without them a timed child benchmarks its kernels' configurations
    itself, the device to itself, exactly as a cold one would (the compiled kernels stay cached)."""
    removed = 0
    for path in (cache_dir / "inductor").rglob("*.best_config"):
        try:
            if path.stat().st_mtime >= since - 1.0:
                path.unlink()
                removed += 1
        except FileNotFoundError:
            pass
    return removed
