"""Where task processes run: `local` (this machine's GPUs or CPU) or `ray` (a cluster's GPU nodes).

Both take the tasks and a callback receiving each `FilterResult` as it arrives (in the calling
thread for `ray`, under a lock for `local`). Ray is imported only by `run_ray`.
"""

from __future__ import annotations

import logging
import os
import queue
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from cuda_agent.data_gen.filter.isolation import run_isolated
from cuda_agent.data_gen.filter.models import FilterConfig, FilterResult
from cuda_agent.data_gen.models import Task
from cuda_agent.errors import ConfigError, InfraError

logger = logging.getLogger(__name__)

ResultFn = Callable[[FilterResult], None]
InfraFn = Callable[[Task, InfraError], None]


def lock_path(key: str) -> str:
    """Lock file shared by every filter process of this machine that times on device `key`."""
    folder = Path(tempfile.gettempdir()) / "cuda_agent_filter_locks"
    folder.mkdir(parents=True, exist_ok=True)
    return str(folder / f"{key}.lock")


def local_slots(config: FilterConfig) -> list[tuple[str, str | None]]:
    """(device, lock file) per concurrent task process; raises ConfigError when no GPU is visible."""
    if config.device == "cpu":
        lock = lock_path("cpu") if config.exclusive_timing else None
        return [("cpu", lock)] * (config.workers or 1)
    import torch

    count = torch.cuda.device_count()
    if count == 0:
        raise ConfigError("filter --device cuda found no GPU; use --device cpu (and a CPU time window) instead")
    indices = config.devices if config.devices is not None else list(range(count))
    bad = [i for i in indices if not 0 <= i < count]
    if bad:
        raise ConfigError(f"GPU indices {bad} do not exist; this machine has {count}")
    per_device = config.workers or max(1, min(8, (os.cpu_count() or 2) // (2 * len(indices))))
    slots = []
    for index in indices:
        lock = lock_path(f"cuda{_physical_gpu(index)}") if config.exclusive_timing else None
        slots += [(f"cuda:{index}", lock)] * per_device
    return slots


def _physical_gpu(index: int) -> str:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if not visible:
        return str(index)
    ids = [v.strip() for v in visible.split(",")]
    return ids[index] if index < len(ids) else str(index)


def run_local(tasks: Sequence[Task], config: FilterConfig, on_result: ResultFn, on_infra: InfraFn) -> list[str]:
    """Judge `tasks` with one thread per slot, each driving one task process at a time; returns the devices used."""
    slots = local_slots(config)
    pending: queue.Queue[Task] = queue.Queue()
    for task in tasks:
        pending.put(task)
    callback_lock = threading.Lock()

    def worker(device: str, lock: str | None) -> None:
        while True:
            try:
                task = pending.get_nowait()
            except queue.Empty:
                return
            try:
                result = run_isolated(task.id, task.source, config, device, lock)
            except InfraError as exc:
                with callback_lock:
                    on_infra(task, exc)
                continue
            with callback_lock:
                on_result(result)

    threads = [threading.Thread(target=worker, args=slot, name=f"filter-{i}", daemon=True)
               for i, slot in enumerate(slots[: max(1, len(tasks))])]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sorted({device for device, _ in slots})


def _ray_judge(task_id: str, source: str, config_json: str) -> str:
    """Body of the Ray task: one isolated task process on the node Ray picked."""
    config = FilterConfig.model_validate_json(config_json)
    device = "cuda:0" if config.device == "cuda" else "cpu"
    key = f"cuda{_physical_gpu(0)}" if config.device == "cuda" else "cpu"
    lock = lock_path(key) if config.exclusive_timing else None
    return run_isolated(task_id, source, config, device, lock).model_dump_json()


def run_ray(tasks: Sequence[Task], config: FilterConfig, on_result: ResultFn, on_infra: InfraFn, *,
            address: str | None = None, gpus_per_task: float = 1.0) -> list[str]:
    """Judge `tasks` as Ray tasks (one GPU each on 'cuda', or `gpus_per_task`); returns the hosts used."""
    try:
        import ray
    except ImportError as exc:
        raise ConfigError("--backend ray needs Ray: pip install 'ray[default]'") from exc
    if not ray.is_initialized():
        ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)
    num_gpus = gpus_per_task if config.device == "cuda" else 0
    remote = ray.remote(num_gpus=num_gpus, num_cpus=1, max_retries=0)(_ray_judge)
    config_json = config.model_dump_json()
    refs = {remote.remote(t.id, t.source, config_json): t for t in tasks}
    hosts: set[str] = set()
    while refs:
        done, _ = ray.wait(list(refs), num_returns=1)
        task = refs.pop(done[0])
        try:
            result = FilterResult.model_validate_json(ray.get(done[0]))
        except ray.exceptions.RayError as exc:
            on_infra(task, InfraError(f"ray task failed: {exc}"))
            continue
        hosts.add(f"{result.host}/{result.device}")
        on_result(result)
    return sorted(hosts)
