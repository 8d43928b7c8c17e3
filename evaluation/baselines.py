"""The eager and ``torch.compile`` baselines of a set of tasks, measured once on this machine.

The same measurement and the same on-disk cache as the evaluator's own baseline stage
(``cuda_agent.sandbox_pool.harness.baselines``: cache key = problem, device name, torch
version, precision, protocol, timed calls), so a later ``cuda-agent run`` on the same GPU reuses
them. ``cuda-agent baselines`` writes one ``BaselineLine`` per task, appended as each finishes
(resumable), and stops starting new tasks when its time budget is spent.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from cuda_agent.errors import ConfigError, InfraError, ProblemError
from cuda_agent.evaluation.tasks import Task


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
    wall_s: float = Field(0.0, description="Wall time of this task's measurement.")
    error: str = Field("", description="Why a baseline is missing ('' if none).")


def read_lines(path: Path) -> list[BaselineLine]:
    lines = []
    for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if text.strip():
            try:
                lines.append(BaselineLine.model_validate_json(text))
            except ValidationError:
                raise ConfigError(f"{path}:{number}: not a baseline line; fix or delete that line") from None
    return lines


async def measure_baselines(tasks: Sequence[Task], out: Path, *, device: str, device_index: int = 0,
                            timed_calls: int = 30, budget_s: float | None = None, timeout_s: float = 900.0,
                            on_line: Callable[[BaselineLine], None] | None = None) -> list[BaselineLine]:
    """Measure (or read from the cache) the baselines of ``tasks`` not yet in ``out``; append their lines."""
    import torch

    from cuda_agent.sandbox_pool.harness import EvalJob, EvalOptions, Evaluator, EvaluatorConfig
    from cuda_agent.sandbox_pool.harness import baselines as harness_baselines
    from cuda_agent.sandbox_pool.harness.problem import load_problem

    done = {line.task_id for line in read_lines(out)} if out.is_file() else set()
    out.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    written: list[BaselineLine] = []
    options = EvalOptions(timed_calls=timed_calls)
    async with Evaluator(EvaluatorConfig(device=device, device_index=device_index, baseline_timeout_s=timeout_s)) as ev:
        for task in tasks:
            if task.task_id in done:
                continue
            if budget_s is not None and time.monotonic() - started > budget_s:
                break
            t0 = time.monotonic()
            # the evaluator's receipt names the device exactly as its baseline cache keys do
            device_name = ev._receipt(EvalJob(problem_src=task.problem_src, files={}, device=device)).device_name
            line = BaselineLine(task_id=task.task_id, level=task.level, device_name=device_name)
            try:
                problem = load_problem(task.problem_src)
                key = harness_baselines.baseline_key(problem, device_name, torch.__version__, False, timed_calls)
                found = ev.baseline_cache.get(key)
                line.cached = found is not None
                if found is None:
                    found = await harness_baselines.measure(
                        problem, ev.zygote, device=device, device_index=device_index, tf32=False,
                        n_sets=timed_calls, warmup=options.warmup_calls, key=key, timeout_s=timeout_s)
                    ev.baseline_cache.put(found)
                line.eager_us, line.eager_std_us = found.eager.median_us, found.eager.std_us
                if found.torch_compile is not None:
                    line.torch_compile_us = found.torch_compile.median_us
                    line.torch_compile_std_us = found.torch_compile.std_us
                line.error = found.compile_error or ""
            except (InfraError, ProblemError, OSError, asyncio.TimeoutError) as exc:
                line.error = f"{type(exc).__name__}: {exc}"[:500]
            line.wall_s = time.monotonic() - t0
            with out.open("a", encoding="utf-8") as stream:
                stream.write(line.model_dump_json() + "\n")
            written.append(line)
            if on_line is not None:
                on_line(line)
    return written
