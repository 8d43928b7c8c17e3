"""Stage 3, filter: keep the tasks that run, are deterministic, not hackable and sanely sized.

    from cuda_agent.data_gen.filter import FilterConfig, filter_tasks
    report = filter_tasks("composed.jsonl", "out/filter", FilterConfig(device="cuda"))

Writes into the output folder:
    results.jsonl   one `FilterResult` per task (resumable: judged tasks are skipped on a rerun)
    kept.jsonl      the kept tasks, in input order, with `eager_ms` set
    recheck.jsonl   second-run verdicts of the kept tasks (with ``recheck=True``)
    report.json     the `FilterReport`
Every task runs in its own process (see `isolation.py`); checks are in `checks.py`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from cuda_agent.data_gen.filter.models import (
    Criterion,
    FilterConfig,
    FilterReport,
    FilterResult,
    RecheckReport,
)
from cuda_agent.data_gen.filter.report import EAGER_MS_EDGES, by_criterion, histogram, recheck_report
from cuda_agent.data_gen.models import Task
from cuda_agent.data_gen.progress import ProgressFn, no_progress
from cuda_agent.data_gen.store import JsonlStore, read_json, write_json
from cuda_agent.errors import InfraError

logger = logging.getLogger(__name__)

Backend = Literal["local", "ray"]
RESULTS, KEPT, RECHECK, REPORT = "results.jsonl", "kept.jsonl", "recheck.jsonl", "report.json"


def judge(tasks: Sequence[Task], config: FilterConfig, store: JsonlStore[FilterResult], *, backend: Backend,
          ray_address: str | None, progress: ProgressFn, ray_gpus_per_task: float = 1.0) -> tuple[list[str], int]:
    """Run `tasks` on `backend`, appending verdicts to `store`; returns (devices used, infra errors)."""
    done = 0
    infra = 0
    keys = {t.id: config.task_key(t.source) for t in tasks}

    def on_result(result: FilterResult) -> None:
        nonlocal done
        result.cache_key = keys.get(result.task_id)
        store.append([result])
        done += 1
        progress(done, len(tasks))

    def on_infra(task: Task, error: InfraError) -> None:
        nonlocal done, infra
        logger.error("infrastructure failure on %s (will be retried on the next run): %s", task.id, error)
        done += 1
        infra += 1
        progress(done, len(tasks))

    if not tasks:
        return [], 0
    if backend == "ray":
        from cuda_agent.data_gen.filter.backends import run_ray

        devices = run_ray(tasks, config, on_result, on_infra, address=ray_address, gpus_per_task=ray_gpus_per_task)
    else:
        from cuda_agent.data_gen.filter.backends import run_local

        devices = run_local(tasks, config, on_result, on_infra)
    return devices, infra


def _slots(config: FilterConfig, backend: Backend) -> int:
    if backend == "ray":
        return 0
    from cuda_agent.data_gen.filter.backends import local_slots

    return len(local_slots(config))


def filter_tasks(
    tasks_path: str | Path,
    out_dir: str | Path,
    config: FilterConfig,
    *,
    backend: Backend = "local",
    ray_address: str | None = None,
    ray_gpus_per_task: float = 1.0,
    recheck: bool = False,
    progress: ProgressFn = no_progress,
    recheck_progress: ProgressFn | None = None,
) -> FilterReport:
    """Judge every task of the JSONL file `tasks_path`; see the module docstring for the outputs.

    With `backend="ray"`, each task is a Ray task holding `ray_gpus_per_task` GPUs (a fraction lets
    several tasks compile on one GPU; the per-GPU file lock still serialises their timings).
    A stored verdict is reused only when its task's source and the verdict-changing settings are
    unchanged (`FilterConfig.task_key`); otherwise the task is judged again. `progress` counts
    the tasks judged, `recheck_progress` the kept tasks judged a second time.
    """
    out = Path(out_dir)
    tasks = JsonlStore(tasks_path, Task).load()
    results_store = JsonlStore(out / RESULTS, FilterResult)
    keys = {t.id: config.task_key(t.source) for t in tasks}
    stored = {r.task_id: r for r in results_store.load()}
    todo = [t for t in tasks if t.id not in stored or stored[t.id].cache_key != keys[t.id]]
    rejudged = sum(t.id in stored for t in todo)
    logger.info("filter: %d tasks, %d already judged, %d to run (%d judged again: source or settings changed)",
                len(tasks), len(tasks) - len(todo), len(todo), rejudged)
    start = time.perf_counter()
    devices, infra = judge(todo, config, results_store, backend=backend, ray_address=ray_address, progress=progress,
                           ray_gpus_per_task=ray_gpus_per_task)
    wall_s = time.perf_counter() - start
    verdicts = {r.task_id: r for r in results_store.load() if r.cache_key == keys.get(r.task_id)}
    results = [verdicts[t.id] for t in tasks if t.id in verdicts]
    kept = [t.model_copy(update={"eager_ms": verdicts[t.id].eager_ms}) for t in tasks
            if t.id in verdicts and verdicts[t.id].kept]
    JsonlStore(out / KEPT, Task).write(kept)
    processed = len(todo) - infra
    report = FilterReport(
        backend=backend, config=config, window_ms=config.window_ms, total=len(tasks), kept=len(kept),
        dropped=sum(not r.kept for r in results), by_criterion=by_criterion(results),
        kept_fraction=len(kept) / len(tasks) if tasks else 0.0,
        eager_ms_histogram=histogram((r.eager_ms for r in results if r.eager_ms is not None), EAGER_MS_EDGES),
        kept_eager_ms_histogram=histogram((r.eager_ms for r in results if r.kept and r.eager_ms is not None),
                                          EAGER_MS_EDGES),
        processed=processed, infra_errors=infra, wall_s=round(wall_s, 3),
        tasks_per_minute=round(processed / (wall_s / 60), 2) if wall_s > 0 and processed else 0.0,
        parallel_slots=_slots(config, backend) if todo else 0, devices=devices, rejudged=rejudged,
    )
    if not processed:
        _carry_throughput(report, out / REPORT)
    if recheck:
        report.recheck = recheck_kept(kept, out, config, backend=backend, ray_address=ray_address,
                                      progress=recheck_progress or no_progress, ray_gpus_per_task=ray_gpus_per_task)
    write_json(out / REPORT, report)
    return report


def _carry_throughput(report: FilterReport, previous_path: Path) -> None:
    """A rerun that judged nothing keeps the throughput measured by the run that did (same settings)."""
    if not previous_path.exists():
        return
    try:
        previous = read_json(previous_path, FilterReport)
    except Exception:  # noqa: BLE001 - an unreadable old report only loses the carried figure
        return
    if previous.config.settings_key() != report.config.settings_key() or not previous.tasks_per_minute:
        return
    report.tasks_per_minute, report.wall_s = previous.tasks_per_minute, previous.wall_s
    report.parallel_slots, report.devices = previous.parallel_slots, previous.devices or report.devices
    report.throughput_from_previous_run = True


def recheck_kept(kept: Sequence[Task], out_dir: str | Path, config: FilterConfig, *, backend: Backend = "local",
                 ray_address: str | None = None, progress: ProgressFn = no_progress,
                 ray_gpus_per_task: float = 1.0) -> RecheckReport:
    """Run the filter a second time on the kept tasks (fresh processes); verdicts go to recheck.jsonl."""
    store = JsonlStore(Path(out_dir) / RECHECK, FilterResult)
    keys = {t.id: config.task_key(t.source) for t in kept}
    previous = {r.task_id for r in store.load() if r.cache_key == keys.get(r.task_id)}
    judge([t for t in kept if t.id not in previous], config, store, backend=backend, ray_address=ray_address,
          progress=progress, ray_gpus_per_task=ray_gpus_per_task)
    verdicts = {r.task_id: r for r in store.load() if r.cache_key == keys.get(r.task_id)}
    return recheck_report([verdicts[t.id] for t in kept if t.id in verdicts])


__all__ = ["Criterion", "FilterConfig", "FilterReport", "FilterResult", "RecheckReport", "filter_tasks", "recheck_kept"]
